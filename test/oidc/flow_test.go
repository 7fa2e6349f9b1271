package oidc

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/utils/ptr"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// The Broker's audience and the dead-letter function's, as the oidc/ variant names them.
const (
	scoreflowBrokerAudience = "eventing.knative.dev/broker/scoreflow/scoreflow"
	deadLetterAudience      = "scoreflow/dead-letter"
)

// TestFlowWithSenderIdentity runs `scoreflow run --oidc` (harness/devrun with OIDC: the oidc/
// variant on the stock Knative with sender identity on) and checks that the normal flow works
// unchanged: a metric change in Prometheus reaches the metric-watcher, which sends it with its
// SinkBinding's token; the promql-scorer and the writer each verify their Trigger's token; the
// Placement's decision moves. A forged score.updated from an identity the Broker does not admit,
// or with no token, moves nothing, at the broker or posted straight to the writer. The dead-letter
// function refuses a post without a token and reports nothing for it, while the broker's own
// dead-lettering (the Trigger's token for the dead-letter sink's audience) still reaches it. An
// assistant's optimise call through the MCP server reaches the optimizer with the MCP server's
// own token (checkMCPOptimizes). An agent's score reaches the hub through the agent gateway, for
// its own cluster only (checkAgentThroughGateway). A scorer cannot post under an agent's source
// (checkSourceIsTheSender).
func TestFlowWithSenderIdentity(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./functions/...")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the functions: %v\n%s", err, out)
	}
	seen := &events{}
	// Kept when the test fails: the functions' and Knative's logs are what there is to go on.
	state, err := os.MkdirTemp("", "scoreflow-oidc-flow-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if !t.Failed() {
			_ = os.RemoveAll(state)
		}
	}()
	start := time.Now()
	s, err := devrun.Start(ctx, devrun.Options{Root: repo, BinDir: bin, StateDir: state, OIDC: true,
		Demo: true, DemoManual: true, WatchInterval: time.Second, OnEvent: seen.add, LockWait: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Stop()
	t.Logf("the stack with sender identity started in %s", time.Since(start).Round(100*time.Millisecond))
	defer func() {
		if t.Failed() {
			t.Logf("function logs: %s; Knative logs: %s", filepath.Join(s.StateDir, "logs"), s.Knative.LogDir)
		}
	}()
	decision := func() string {
		d, err := devrun.Decision(ctx, s.Hub.Cluster, devrun.Namespace, devrun.Placement)
		if err != nil || len(d) != 1 {
			return fmt.Sprint(d, err)
		}
		return d[0]
	}

	// A metric change: Prometheus -> metric-watcher (its SinkBinding's token) -> broker ->
	// promql-scorer -> score.updated -> broker -> score-writer -> hub -> Placement.
	if err := s.PushIdle(ctx, map[string]float64{"cluster1": 0.9, "cluster2": 0.2, "cluster3": 0.1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the placement did not choose cluster1", func() bool { return decision() == "cluster1" })
	sentBefore := watcherSends(t, s, "ok")
	moved := time.Now()
	if err := s.PushIdle(ctx, map[string]float64{"cluster1": 0.1, "cluster2": 0.95, "cluster3": 0.2}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the placement did not move to cluster2", func() bool { return decision() == "cluster2" })
	t.Logf("with sender identity on, the decision moved %s after the metric changed in Prometheus", time.Since(moved).Round(time.Millisecond))
	// The change came through the watcher, not through the scorer's own schedule: the Broker
	// accepted the watcher's metric.changed (with deny-all, only for an admitted token). Counted
	// at the watcher, not at cloudevents-player, whose Trigger may drop an event (two short
	// retries, no dead-letter sink). The send counts only once the ingress answers, and the
	// in-memory channel answers after it has delivered to every Trigger, replies included: the
	// decision can move before the watcher hears 202, so wait for it.
	eventually(t, 30*time.Second, "the Broker accepted none of the metric-watcher's metric.changed", func() bool {
		return watcherSends(t, s, "ok") > sentBefore
	})
	if n := watcherSends(t, s, "error"); n > 0 {
		t.Errorf("the Broker refused %v of the metric-watcher's sends before its token was changed", n)
	}

	// Forged: cluster3 at 100 would win the Placement.
	forged := func() event.Event {
		return scoreEvent(t, "scoreflow/forged", contract.ScoreUpdated{Resource: devrun.DemoResource,
			Items: []contract.ClusterScores{{Cluster: "cluster3", Scores: []contract.Score{{Name: devrun.DemoScoreName, Value: 100}}}}})
	}
	writerURL := s.Functions["score-writer"].URL
	refused := []struct {
		name, url, token string
		status           int
	}{
		{"the broker, no token", s.BrokerURL, "", http.StatusUnauthorized},
		{"the broker, an identity no EventPolicy admits", s.BrokerURL, authtest.Token(t, s.Hub.Kube, devrun.Namespace, "cloudevents-player", scoreflowBrokerAudience), http.StatusForbidden},
		{"the writer, no token", writerURL, "", http.StatusUnauthorized},
		{"the writer, an identity that is not its Trigger's", writerURL, authtest.Token(t, s.Hub.Kube, devrun.Namespace, "cloudevents-player", "scoreflow/score-writer"), http.StatusForbidden},
	}
	for _, c := range refused {
		if st := postEvent(t, c.url, c.token, forged()); st != c.status {
			t.Errorf("forged score.updated to %s: %d, want %d", c.name, st, c.status)
		}
	}
	time.Sleep(3 * time.Second) // time for a forged write to land, had one got through
	obj, err := s.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster3").Get(ctx, devrun.DemoResource, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if v := obj.Status.Scores[0].Value; v == 100 || decision() != "cluster2" {
		t.Errorf("a forged score moved something: cluster3 %s=%d, decision %s", devrun.DemoScoreName, v, decision())
	}

	// The dead-letter function takes posts only from the broker's Triggers.
	deadLetterURL := s.Functions["dead-letter"].URL
	direct := forged()
	direct.SetExtension("knativeerrorcode", "400")
	if st := postEvent(t, deadLetterURL, "", direct); st != http.StatusUnauthorized {
		t.Errorf("dead-letter, a post without a token: %d, want 401", st)
	}
	if st := postEvent(t, deadLetterURL, authtest.Token(t, s.Hub.Kube, devrun.Namespace, "cloudevents-player", deadLetterAudience), direct); st != http.StatusForbidden {
		t.Errorf("dead-letter, a post from an identity that is no Trigger: %d, want 403", st)
	}

	// The broker dead-letters a score.updated the writer refuses (400, not JSON): the Trigger's
	// token for the dead-letter sink's audience is admitted, and the report comes back. The
	// sender is a person's client admitted as oidc/README.md says.
	alice, err := s.AdmitClient(ctx, "alice", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	broken := scoreEvent(t, "scoreflow/alice", nil)
	_ = broken.SetData(cloudevents.ApplicationJSON, []byte(`{"resource":"cpu-idle","items":[{"cluster":"cluster3",`))
	admitted := time.Now()
	st := postEvent(t, s.BrokerURL, alice, broken)
	for ; st == http.StatusForbidden && time.Since(admitted) < 60*time.Second; st = postEvent(t, s.BrokerURL, alice, broken) {
		time.Sleep(100 * time.Millisecond)
	}
	// The in-memory channel answers the ingress only once the dead-letter sink has taken the
	// event: a dead-letter function refusing the broker's delivery makes this 500.
	if st != http.StatusAccepted {
		t.Fatalf("alice's broken score.updated: the broker answered %d, want 202", st)
	}
	t.Logf("the Broker admitted a new identity %s after its EventPolicy named it", time.Since(admitted).Round(time.Millisecond))
	eventually(t, 60*time.Second, "no dead-letter report for the broken event", func() bool { return len(seen.results(broken.ID())) > 0 })
	if r := seen.results(broken.ID())[0]; r.Reason != contract.ReasonDeadLettered {
		t.Errorf("the broken event's report: %+v, want DeadLettered", r)
	}
	if r := seen.results(direct.ID()); len(r) > 0 {
		t.Errorf("the dead-letter function reported a post it refused: %+v", r[0])
	}

	// Knative renews a SinkBinding's token by rewriting its Secret; the mounted file follows and
	// the running metric-watcher presents whatever it holds. A token the Broker refuses (another
	// audience) stops the watcher's events; a renewed valid one lets the change through, without a
	// restart.
	renew := func(audience string) {
		t.Helper()
		renewToken(t, ctx, s, "metric-watcher", audience, s.Mounted("metric-watcher", function.SinkTokenFile))
	}
	renew("scoreflow/not-the-broker")
	refusedBefore := watcherSends(t, s, "error")
	if err := s.PushIdle(ctx, map[string]float64{"cluster1": 0.1, "cluster2": 0.2, "cluster3": 0.95}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the metric-watcher's sends with a refused token did not fail", func() bool { return watcherSends(t, s, "error") > refusedBefore })
	if d := decision(); d != "cluster2" {
		t.Errorf("with the metric-watcher's token refused the decision moved to %s", d)
	}
	renewed := time.Now()
	renew(scoreflowBrokerAudience)
	eventually(t, 60*time.Second, "after its token was renewed the metric-watcher's change did not move the placement to cluster3", func() bool { return decision() == "cluster3" })
	t.Logf("the decision moved %s after the token Secret was renewed", time.Since(renewed).Round(time.Millisecond))

	checkMCPOptimizes(t, ctx, s)
	checkAgentThroughGateway(t, ctx, s)
	checkSourceIsTheSender(t, ctx, s)

	if crashed := s.Knative.Crashed(); len(crashed) > 0 {
		t.Errorf("Knative processes crashed: %v", crashed)
	}
}

func scoreEvent(t *testing.T, source string, data any) event.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource(source)
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	if data != nil {
		if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
			t.Fatal(err)
		}
	}
	return e
}

// postEvent posts e with token (none if empty) and returns the status.
func postEvent(t *testing.T, url, token string, e event.Event) int {
	t.Helper()
	req := functest.Request(t, url, e)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// events records what cloudevents-player's Trigger receives.
type events struct {
	mu  sync.Mutex
	all []event.Event
}

func (o *events) add(e event.Event) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.all = append(o.all, e)
}

// results are the write results answering the event with this id.
func (o *events) results(id string) []*contract.WriteResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*contract.WriteResult
	for i := range o.all {
		if r, err := contract.DecodeWriteResult(&o.all[i]); err == nil && r.Input.ID == id {
			out = append(out, r)
		}
	}
	return out
}

func eventually(t *testing.T, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, what)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// renewToken rewrites the token Secret of SinkBinding name, as Knative does when it renews it, with
// a token of the SinkBinding's identity for audience, and waits until the mounted file at path
// holds it.
func renewToken(t *testing.T, ctx context.Context, s *devrun.Stack, name, audience, path string) {
	t.Helper()
	ri, err := s.Knative.Applier.Resource(knlocal.SinkBindingKind, devrun.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	sb, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secretName, _, _ := unstructured.NestedString(sb.Object, "status", "oidcTokenSecretName")
	sa, _, _ := unstructured.NestedString(sb.Object, "status", "auth", "serviceAccountName")
	if secretName == "" || sa == "" {
		t.Fatalf("SinkBinding %s has no token Secret or identity in its status", name)
	}
	// Two hours: longer than Knative's renewal margin, so its own resync leaves the token alone.
	tr, err := s.Hub.Kube.CoreV1().ServiceAccounts(devrun.Namespace).CreateToken(ctx, sa, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(7200))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret, err := s.Hub.Kube.CoreV1().Secrets(devrun.Namespace).Get(ctx, secretName, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	secret.Data["token"] = []byte(tr.Status.Token)
	if _, err := s.Hub.Kube.CoreV1().Secrets(devrun.Namespace).Update(ctx, secret, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 30*time.Second, "the mounted token did not follow its Secret", func() bool {
		b, err := os.ReadFile(path)
		return err == nil && string(b) == tr.Status.Token
	})
}

// watcherSends is how many of the metric-watcher's sends have had result ("ok": the Broker
// accepted the event; "error": it did not).
func watcherSends(t *testing.T, s *devrun.Stack, result string) float64 {
	t.Helper()
	return functest.MetricValue(t, nil, s.Functions["metric-watcher"].URL+"/metrics",
		`scoreflow_watcher_events_sent_total{result="`+result+`"}`)
}
