// Package oidc runs the stock Knative Eventing with sender identity on (authentication-oidc
// enabled, default-authorization-mode deny-all) against a real hub: the score-writer binary alone
// requiring tokens as the OIDC variant of the manifests deploys it, and the whole flow as
// `scoreflow run --oidc` runs it (harness/devrun); it checks who can move a score.
package oidc

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

const (
	ns             = "scoreflow"
	writerAudience = "scoreflow/score-writer"
	brokerAudience = "eventing.knative.dev/broker/scoreflow/default"
)

// TestOnlyAdmittedSendersMoveAScore: a scorer's token admitted by the Broker's EventPolicy moves a
// score through the broker, the Trigger (which presents its own identity's token for the writer's
// audience) and the writer, which admits only that identity; the writer's reply returns to the
// broker with the Trigger's identity, which the EventPolicy admits by reference. A sender no EventPolicy admits gets
// 403 at the broker, one without a token 401, and neither writes anything.
func TestOnlyAdmittedSendersMoveAScore(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 12*time.Minute)
	defer cancel()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", filepath.Join(bin, "score-writer"), "./functions/score-writer")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the writer: %v\n%s", err, out)
	}
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	if err := hub.AddCluster(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	// The writer scores only clusters the hub has accepted.
	if err := hub.AcceptCluster(ctx, "c1"); err != nil {
		t.Fatal(err)
	}
	kn, err := knlocal.Start(ctx, hub, knlocal.Options{StateDir: t.TempDir(), LockWait: 20 * time.Minute, Features: knlocal.OIDCFeatures()})
	if err != nil {
		t.Fatal(err)
	}
	defer kn.Stop()
	defer func() {
		if t.Failed() {
			for _, name := range []string{"mt-broker-ingress", "mt-broker-filter"} {
				out, _ := os.ReadFile(filepath.Join(kn.LogDir, name+".log"))
				t.Logf("%s log (last 3000 bytes):\n%s", name, tail(out, 3000))
			}
		}
	}()

	writerPort, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	objs, err := knlocal.Decode(strings.NewReader(fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: scoreflow}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: scoreflow}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: score-writer, namespace: scoreflow}
spec:
  broker: default
  filters: [{exact: {type: %s}}]
  subscriber:
    uri: http://127.0.0.1:%d
    audience: %s
---
apiVersion: eventing.knative.dev/v1alpha1
kind: EventPolicy
metadata: {name: broker-senders, namespace: scoreflow}
spec:
  to: [{ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: default}}]
  from:
    - sub: system:serviceaccount:scoreflow:static-scorer
    # The writer's reply (write.done) comes back to the broker with its Trigger's identity. (By
    # name: a ref to the Trigger never resolves, as the Trigger gets its identity only once the
    # Broker is ready, which waits for this policy.)
    - sub: system:serviceaccount:scoreflow:score-writer-oidc-eventing.knative.dev-trigger
`, contract.TypeScoreUpdated, writerPort, writerAudience)))
	if err != nil {
		t.Fatal(err)
	}
	if err := kn.Applier.Apply(ctx, objs...); err != nil {
		t.Fatal(err)
	}
	if err := kn.WaitReady(ctx, ns, 90*time.Second, knlocal.BrokerKind, knlocal.TriggerKind, knlocal.EventPolicyKind); err != nil {
		ep := get(t, ctx, kn, knlocal.EventPolicyKind, "broker-senders")
		t.Fatalf("%v\nEventPolicy: %v", err, ep.Object["status"])
	}
	triggerSA := triggerIdentity(t, ctx, kn)
	broker := get(t, ctx, kn, knlocal.BrokerKind, "default")
	if aud, _, _ := unstructured.NestedString(broker.Object, "status", "address", "audience"); aud != brokerAudience {
		t.Fatalf("the Broker's audience is %q, want %q", aud, brokerAudience)
	}

	// The writer as the OIDC variant runs it: its own token for discovery, the Trigger's
	// identity as the only caller.
	opts := authtest.PodFiles(t, hub, writerAudience)
	logPath := filepath.Join(t.TempDir(), "score-writer.log")
	logFile, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	writer, err := proc.Start(proc.Spec{Name: "score-writer", Path: filepath.Join(bin, "score-writer"), Out: logFile,
		Env: kn.Env("KUBECONFIG="+hub.KubeconfigPath(), fmt.Sprintf("PORT=%d", writerPort), "COALESCE_WINDOW=0s",
			"POD_NAMESPACE="+ns, // its Lease: where a pod's token would say
			"AUTH_OIDC=true", "AUTH_AUDIENCE="+writerAudience, "AUTH_ALLOWED_SUBJECTS="+authtest.Subject(ns, triggerSA),
			"AUTH_DISCOVERY_URL="+opts.DiscoveryURL, "AUTH_TOKEN_FILE="+opts.TokenFile, "AUTH_CA_FILE="+opts.CAFile)})
	if err != nil {
		t.Fatal(err)
	}
	defer writer.Stop(5 * time.Second)
	writerURL := fmt.Sprintf("http://127.0.0.1:%d", writerPort)
	if err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		resp, err := http.Get(writerURL + "/readyz")
		if err != nil {
			return false, nil
		}
		_ = resp.Body.Close()
		return resp.StatusCode == http.StatusOK, nil
	}); err != nil {
		t.Fatalf("the writer is not ready: %v (log %s)", err, logPath)
	}

	ingress := kn.IngressURL + "/scoreflow/default"
	refused := []struct {
		name, token string
		status      int
	}{
		{"no token", "", http.StatusUnauthorized},
		{"an identity no EventPolicy admits", authtest.Token(t, hub.Kube, ns, "cloudevents-player", brokerAudience), http.StatusForbidden},
		{"the admitted identity's token for another audience", authtest.Token(t, hub.Kube, ns, "static-scorer", writerAudience), http.StatusUnauthorized},
		{"the admitted identity's claims signed by a key the hub never had", authtest.Forge(t, authtest.Token(t, hub.Kube, ns, "static-scorer", brokerAudience), false), http.StatusUnauthorized},
	}
	for _, c := range refused {
		if status := post(t, ingress, c.token, "oidc-refused", 13); status != c.status {
			t.Errorf("%s: the broker answered %d, want %d", c.name, status, c.status)
		}
	}
	if status := post(t, ingress, authtest.Token(t, hub.Kube, ns, "static-scorer", brokerAudience), "oidc-admitted", 42); status != http.StatusAccepted {
		t.Fatalf("the admitted scorer: the broker answered %d, want 202", status)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c1").Get(ctx, "oidc-admitted", metav1.GetOptions{})
		return err == nil && len(s.Status.Scores) == 1 && s.Status.Scores[0].Value == 42, nil
	}); err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("the admitted score did not reach the hub: %v\nwriter log:\n%s\nKnative logs: %s", err, out, kn.LogDir)
	}
	// The refused events were posted first; had any got through, it would have been written by
	// now, ahead of the admitted one.
	if _, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c1").Get(ctx, "oidc-refused", metav1.GetOptions{}); err == nil {
		t.Fatal("a refused sender's score was written")
	}

	// The API server starts signing with a new key: Knative's ingress, its filter's tokens and the
	// writer all follow without a restart.
	if err := hub.RotateServiceAccountKey(); err != nil {
		t.Fatal(err)
	}
	if err := hub.WaitForAPI(ctx, time.Minute); err != nil {
		t.Fatal(err)
	}
	rotated := authtest.Token(t, hub.Kube, ns, "static-scorer", brokerAudience)
	if status := post(t, ingress, rotated, "oidc-after-rotation", 24); status != http.StatusAccepted {
		t.Fatalf("after the signing key rotated: the broker answered %d, want 202", status)
	}
	if err := wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 60*time.Second, true, func(ctx context.Context) (bool, error) {
		s, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c1").Get(ctx, "oidc-after-rotation", metav1.GetOptions{})
		return err == nil && len(s.Status.Scores) == 1 && s.Status.Scores[0].Value == 24, nil
	}); err != nil {
		out, _ := os.ReadFile(logPath)
		t.Fatalf("after the signing key rotated the score did not reach the hub: %v\nwriter log:\n%s", err, out)
	}

	// The writer saw only the Trigger's valid tokens: it refused nothing.
	if _, metrics := functest.Get(t, writerURL+"/metrics"); strings.Contains(metrics, "scoreflow_requests_unauthorized_total{") {
		t.Errorf("the writer refused the Trigger's delivery:\n%s", metrics)
	}
}

func post(t *testing.T, url, token, resource string, value float64) int {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("scoreflow/static-scorer")
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	if err := e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: resource,
		Items: []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "s", Value: value}}}}}); err != nil {
		t.Fatal(err)
	}
	return postEvent(t, url, token, e)
}

func get(t *testing.T, ctx context.Context, kn *knlocal.Knative, gvk schema.GroupVersionKind, name string) *unstructured.Unstructured {
	t.Helper()
	ri, err := kn.Applier.Resource(gvk, ns)
	if err != nil {
		t.Fatal(err)
	}
	o, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

// triggerIdentity is the ServiceAccount whose token the Trigger presents to its subscriber.
func triggerIdentity(t *testing.T, ctx context.Context, kn *knlocal.Knative) string {
	t.Helper()
	var sa string
	_ = wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, 30*time.Second, true, func(context.Context) (bool, error) {
		sa, _, _ = unstructured.NestedString(get(t, ctx, kn, knlocal.TriggerKind, "score-writer").Object, "status", "auth", "serviceAccountName")
		return sa != "", nil
	})
	if sa == "" {
		t.Fatal("the Trigger has no OIDC identity in status.auth.serviceAccountName: is authentication-oidc on?")
	}
	return sa
}

func tail(b []byte, n int) string {
	if len(b) > n {
		b = b[len(b)-n:]
	}
	return string(b)
}
