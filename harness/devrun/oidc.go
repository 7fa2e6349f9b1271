package devrun

import (
	"context"
	"errors"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// identityEnv is what a pod of f has on a cluster with sender identity on, locally: for a function
// that verifies its callers, the API server to read OIDC discovery from and its CA (in a pod,
// kubernetes.default.svc and the mounted ca.crt; no token, as most functions mount none, so
// discovery is read as oidc/discovery.yaml allows); for a SinkBinding's subject, the token Secret
// Knative mounts at /oidc, kept current as a kubelet keeps a secret volume.
func (s *Stack) identityEnv(ctx context.Context, f *Function, boundBySink bool) ([]string, error) {
	var env []string
	if f.Env["AUTH_OIDC"] == "true" {
		ca := filepath.Join(s.StateDir, "hub-ca.crt") // written by extraEnv
		env = append(env, "AUTH_DISCOVERY_URL="+s.Hub.Config.Host, "AUTH_CA_FILE="+ca,
			"AUTH_TOKEN_FILE="+filepath.Join(s.StateDir, "files", f.Name, "no-serviceaccount-token"))
	}
	if !boundBySink {
		return env, nil
	}
	// The SinkBinding adds the token volume once Knative has created the token Secret.
	var mounts map[string]string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		var err error
		mounts, err = s.Knative.WorkloadSecretMounts(ctx, f.Kind, f.Namespace, f.Name)
		return err == nil && mounts[filepath.Dir(function.SinkTokenFile)] != "", nil
	})
	if err != nil {
		return nil, fmt.Errorf("%s: the SinkBinding mounted no token at %s: %w", f.Name, filepath.Dir(function.SinkTokenFile), err)
	}
	// Only the token volume: the Service's other Secret volumes may be optional ones that do not
	// exist here (the dsf-bridge's scorer tokens), and a local process reads none of them.
	path := filepath.Dir(function.SinkTokenFile)
	local := s.Mounted(f.Name, path)
	if err := s.Knative.MountSecret(s.runCtx, f.Namespace, mounts[path], local, 30*time.Second); err != nil {
		return nil, err
	}
	rest, _ := strings.CutPrefix(function.SinkTokenFile, path+"/")
	return append(env, "SINK_TOKEN_FILE="+filepath.Join(local, rest)), nil
}

// Mounted is where a file or directory at path in function's container is locally (the Secrets
// Knative mounts into it: Options.OIDC runs).
func (s *Stack) Mounted(function, path string) string {
	return filepath.Join(s.StateDir, "files", function, "mounts", path)
}

// ClientPolicy is the EventPolicy that admits a client AdmitClient admits.
func ClientPolicy(name string) string { return "scoreflow-client-" + name }

// AdmitClient gives a client an identity the Broker admits, the way docs/security.md has an
// operator admit a person's client: a ServiceAccount name in the scoreflow namespace, an
// EventPolicy of its own naming it (with no filters: a person's tool may send any type), and a
// token of it for the Broker's audience (its status.address.audience), valid for ttl. Knative
// admits it once the Broker's status lists the policy, within seconds.
func (s *Stack) AdmitClient(ctx context.Context, name string, ttl time.Duration) (string, error) {
	sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: Namespace}}
	if _, err := s.Hub.Kube.CoreV1().ServiceAccounts(Namespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return "", err
	}
	policy := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": knlocal.EventPolicyKind.GroupVersion().String(), "kind": knlocal.EventPolicyKind.Kind,
		"metadata": map[string]any{"name": ClientPolicy(name), "namespace": Namespace},
		"spec": map[string]any{
			"to":   []any{map[string]any{"ref": map[string]any{"apiVersion": "eventing.knative.dev/v1", "kind": "Broker", "name": "scoreflow"}}},
			"from": []any{map[string]any{"sub": "system:serviceaccount:" + Namespace + ":" + name}},
		},
	}}
	if err := s.Knative.Applier.Apply(ctx, policy); err != nil {
		return "", fmt.Errorf("admitting %s in EventPolicy %s: %w", name, ClientPolicy(name), err)
	}
	brokers, err := s.Knative.Applier.Resource(knlocal.BrokerKind, Namespace)
	if err != nil {
		return "", err
	}
	b, err := brokers.Get(ctx, "scoreflow", metav1.GetOptions{})
	if err != nil {
		return "", err
	}
	audience, _, _ := unstructured.NestedString(b.Object, "status", "address", "audience")
	if audience == "" {
		return "", errors.New("the Broker publishes no audience: is sender identity on?")
	}
	tr, err := s.Hub.Kube.CoreV1().ServiceAccounts(Namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(ttl / time.Second))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", err
	}
	return tr.Status.Token, nil
}
