package dsf

import (
	"context"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	corev1client "k8s.io/client-go/kubernetes/typed/core/v1"

	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// Tokens reads the bearer token a DynamicScorer's tokenSecretRef{name, key} names. It is asked on
// every round, so a rotated Secret applies at the next one. Errors name the Secret and key, never
// the content.
type Tokens interface {
	Token(ctx context.Context, ref SecretRef) (string, error)
}

// TokenDir reads Secrets mounted as <dir>/<name>/<key> (hub mode: the bridge has no API access;
// a Secret is one of the deployment's mounts, or none).
type TokenDir string

// Token implements Tokens.
func (d TokenDir) Token(_ context.Context, ref SecretRef) (string, error) {
	if d == "" {
		return "", scorer.BadConfig("tokenSecretRef %s/%s: no token directory is configured (--token-dir)", ref.Name, ref.Key)
	}
	return readToken(filepath.Join(string(d), ref.Name, ref.Key))
}

// SecretTokens reads the Secrets of the agent's own namespace through the managed cluster's API,
// as DSF's agent does, with get only: any Secret and key a spec names, without a list of names in
// scoreflow's manifests. Kubernetes cannot narrow a get to names not known in advance, so the
// agent may read every Secret of its namespace; what else lives there is never sent for a spec:
// only Opaque Secrets are read (kubectl create secret generic, as DSF's guide creates tokens), not
// the image pull credentials OCM copies there, a ServiceAccount token or a TLS key, and Refused
// names those never read whatever their type (the agent's own hub credentials).
type SecretTokens struct {
	// Secrets is nil when the agent has no access to the managed cluster's API: a spec naming a
	// Secret then fails, saying so.
	Secrets   corev1client.SecretsGetter
	Namespace string
	// Refused maps a Secret name to why it is never read.
	Refused map[string]string
}

// Token implements Tokens.
func (s *SecretTokens) Token(ctx context.Context, ref SecretRef) (string, error) {
	what := fmt.Sprintf("tokenSecretRef %s/%s key %s", s.Namespace, ref.Name, ref.Key)
	if why, ok := s.Refused[ref.Name]; ok {
		return "", scorer.BadConfig("%s: never read: %s", what, why)
	}
	if s.Secrets == nil {
		return "", scorer.BadConfig("%s: the agent has no access to this cluster's API (--managed-kubeconfig, or run in a pod)", what)
	}
	sec, err := s.Secrets.Secrets(s.Namespace).Get(ctx, ref.Name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", scorer.BadConfig("%s: no such Secret on this managed cluster (create it in %s, as DSF's guide says)", what, s.Namespace)
	case apierrors.IsForbidden(err):
		return "", scorer.BadConfig("%s: the agent may not read it (its Role grants get on Secrets of %s)", what, s.Namespace)
	case err != nil:
		return "", scorer.Fail(ReasonScorerUnavailable, true, fmt.Errorf("%s: reading it: %s", what, apiError(err)))
	}
	if sec.Type != corev1.SecretTypeOpaque && sec.Type != "" {
		return "", scorer.BadConfig("%s: a Secret of type %s is never sent to a scorer (tokens are Opaque Secrets: kubectl create secret generic)", what, sec.Type)
	}
	v, ok := sec.Data[ref.Key]
	if !ok {
		return "", scorer.BadConfig("%s: the Secret has no such key", what)
	}
	token := strings.TrimSpace(string(v))
	if token == "" {
		return "", scorer.BadConfig("%s: the value is empty", what)
	}
	return token, nil
}

// apiError keeps an API error's reason and status, not a message that could quote an object.
func apiError(err error) string {
	var se apierrors.APIStatus
	if errors.As(err, &se) {
		st := se.Status()
		return fmt.Sprintf("%s (%d)", st.Reason, st.Code)
	}
	return netError(err)
}

// checkRef refuses a reference no Secret can have: a name that is not a DNS subdomain (no "/" or
// "..": a mounted Secret's file stays in its directory), a key that is not a Secret key.
func checkRef(a *Auth) error {
	if a == nil {
		return nil
	}
	r := a.TokenSecretRef
	var errs []error
	if es := validation.IsDNS1123Subdomain(r.Name); len(es) > 0 {
		errs = append(errs, fmt.Errorf("tokenSecretRef.name: %q: %s", r.Name, strings.Join(es, "; ")))
	}
	if es := validation.IsConfigMapKey(r.Key); len(es) > 0 {
		errs = append(errs, fmt.Errorf("tokenSecretRef.key: %q: %s", r.Key, strings.Join(es, "; ")))
	}
	return errors.Join(errs...)
}

// readToken reads a mounted Secret's file. Errors name the path, never the content.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", scorer.BadConfig("token file %s: %v (is the Secret mounted?)", path, errors.Unwrap(err))
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", scorer.BadConfig("token file %s is empty", path)
	}
	return token, nil
}
