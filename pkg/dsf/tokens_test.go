package dsf_test

import (
	"context"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/dsf"
)

// TestSecretTokensReadOnlyScorerTokens: the agent reads any Opaque Secret and key a spec names in
// its namespace, through the API; never the other things that namespace holds (OCM's image pull
// credentials, a ServiceAccount token, a TLS key, the agent's own hub credentials), whatever a
// spec names; and says which Secret or key is missing, never a value.
func TestSecretTokensReadOnlyScorerTokens(t *testing.T) {
	ctx := context.Background()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: agentNamespace}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, s := range []*corev1.Secret{
		{ObjectMeta: metav1.ObjectMeta{Name: "acme"}, StringData: map[string]string{"api-token": " acme-t0ken\n"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "empty"}, StringData: map[string]string{"token": " "}},
		{ObjectMeta: metav1.ObjectMeta{Name: "open-cluster-management-image-pull-credentials"}, Type: corev1.SecretTypeDockerConfigJson,
			StringData: map[string]string{corev1.DockerConfigJsonKey: `{"auths":{"r":{"auth":"cHVsbC1zM2NyZXQ="}}}`}},
		{ObjectMeta: metav1.ObjectMeta{Name: "tls"}, Type: corev1.SecretTypeTLS, StringData: map[string]string{"tls.crt": "c", "tls.key": "k3y-s3cret"}},
		{ObjectMeta: metav1.ObjectMeta{Name: "scoreflow-dsf-agent-hub-kubeconfig"}, StringData: map[string]string{"kubeconfig": "hub-s3cret"}},
	} {
		if _, err := hub.Kube.CoreV1().Secrets(agentNamespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	tokens := &dsf.SecretTokens{Secrets: hub.Kube.CoreV1(), Namespace: agentNamespace,
		Refused: map[string]string{"scoreflow-dsf-agent-hub-kubeconfig": "the agent's own hub credentials"}}
	if got, err := tokens.Token(ctx, dsf.SecretRef{Name: "acme", Key: "api-token"}); err != nil || got != "acme-t0ken" {
		t.Errorf("acme/api-token = %q, %v", got, err)
	}
	for _, c := range []struct {
		ref   dsf.SecretRef
		quote string
	}{
		{dsf.SecretRef{Name: "missing", Key: "token"}, "no such Secret"},
		{dsf.SecretRef{Name: "acme", Key: "token"}, "no such key"},
		{dsf.SecretRef{Name: "empty", Key: "token"}, "is empty"},
		{dsf.SecretRef{Name: "open-cluster-management-image-pull-credentials", Key: corev1.DockerConfigJsonKey}, "kubernetes.io/dockerconfigjson is never sent"},
		{dsf.SecretRef{Name: "tls", Key: "tls.key"}, "kubernetes.io/tls is never sent"},
		{dsf.SecretRef{Name: "scoreflow-dsf-agent-hub-kubeconfig", Key: "kubeconfig"}, "never read: the agent's own hub credentials"},
	} {
		got, err := tokens.Token(ctx, c.ref)
		if err == nil || !strings.Contains(err.Error(), c.quote) || got != "" {
			t.Errorf("%s/%s: %q, %v; want an error saying %q", c.ref.Name, c.ref.Key, got, err, c.quote)
		}
		if err != nil && strings.Contains(err.Error(), "s3cret") {
			t.Errorf("an error quotes a Secret's value: %v", err)
		}
	}
	none := &dsf.SecretTokens{Namespace: agentNamespace}
	if _, err := none.Token(ctx, dsf.SecretRef{Name: "acme", Key: "api-token"}); err == nil || !strings.Contains(err.Error(), "no access to this cluster's API") {
		t.Errorf("without API access: %v", err)
	}
}
