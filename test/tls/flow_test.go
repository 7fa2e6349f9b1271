// Package tls runs scoreflow on the stock Knative Eventing with transport encryption strict (and
// sender identity on, as users run both): harness/devrun with Options.TLS and Options.OIDC.
package tls

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

const repo = "../.."

var subscriptionKind = schema.GroupVersionKind{Group: "messaging.knative.dev", Version: "v1", Kind: "Subscription"}

// TestFlowWithStrictTLS runs `scoreflow run --tls --oidc` and checks that the normal flow works
// over HTTPS only: a metric change in Prometheus goes metric-watcher -> Broker -> promql-scorer ->
// score.updated -> Broker -> score-writer -> AddOnPlacementScore, and the Placement's decision
// moves; a score.updated posted over https by an admitted client is written. The Broker's
// addresses, its channel's, and every Trigger's subscriber, dead-letter sink and Subscription
// are https with the local CA as CACerts. Plain HTTP to the broker ingress gets Knative's strict
// 404, to a function a refusal before any handler; a client that does not trust the CA fails the
// TLS handshake with either. Stop leaves no process behind.
func TestFlowWithStrictTLS(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	bin := t.TempDir()
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./functions/...")
	build.Dir = repo
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("building the functions: %v\n%s", err, out)
	}
	state, err := os.MkdirTemp("", "scoreflow-tls-flow-")
	if err != nil {
		t.Fatal(err)
	}
	defer func() {
		if !t.Failed() {
			_ = os.RemoveAll(state)
		}
	}()
	start := time.Now()
	s, err := devrun.Start(ctx, devrun.Options{Root: repo, BinDir: bin, StateDir: state, OIDC: true, TLS: true,
		Demo: true, DemoManual: true, WatchInterval: time.Second, LockWait: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			s.Stop()
		}
	}()
	t.Logf("the stack with strict TLS and sender identity started in %s", time.Since(start).Round(100*time.Millisecond))
	defer func() {
		if t.Failed() {
			t.Logf("function logs: %s; Knative logs: %s", filepath.Join(s.StateDir, "logs"), s.Knative.LogDir)
		}
	}()
	caPEM := string(s.Knative.CA.PEM())

	// Addresses: https only, each with the CA.
	broker := get(t, ctx, s, knlocal.BrokerKind, "scoreflow")
	addrs, _, _ := unstructured.NestedSlice(broker.Object, "status", "addresses")
	addr, _, _ := unstructured.NestedMap(broker.Object, "status", "address")
	if len(addrs) == 0 {
		t.Error("the Broker publishes no addresses")
	}
	for _, a := range append(addrs, any(addr)) {
		m, _ := a.(map[string]any)
		if u, _ := m["url"].(string); !strings.HasPrefix(u, "https://broker-ingress.knative-eventing.svc.cluster.local/") || m["CACerts"] != caPEM {
			t.Errorf("a Broker address is %v with CACerts %.40q..., want https with the local CA", m["url"], m["CACerts"])
		}
	}
	statusAnn, _, _ := unstructured.NestedStringMap(broker.Object, "status", "annotations")
	if ch := statusAnn["knative.dev/channelAddress"]; !strings.HasPrefix(ch, "https://imc-dispatcher.knative-eventing.svc.cluster.local/") || statusAnn["knative.dev/channelCACerts"] != caPEM {
		t.Errorf("the Broker's channel address is %q (CACerts set: %v), want the dispatcher's https with the CA", ch, statusAnn["knative.dev/channelCACerts"] == caPEM)
	}
	triggers := list(t, ctx, s, knlocal.TriggerKind)
	if len(triggers) == 0 {
		t.Fatal("no Triggers")
	}
	for _, tr := range triggers {
		for _, field := range [][2]string{{"subscriberUri", "subscriberCACerts"}, {"deadLetterSinkUri", "deadLetterSinkCACerts"}} {
			u, _, _ := unstructured.NestedString(tr.Object, "status", field[0])
			ca, _, _ := unstructured.NestedString(tr.Object, "status", field[1])
			if u == "" && field[0] == "deadLetterSinkUri" {
				continue
			}
			if !strings.HasPrefix(u, "https://") || ca != caPEM {
				t.Errorf("Trigger %s: %s %q, %s set to the CA: %v; want https with the CA", tr.GetName(), field[0], u, field[1], ca == caPEM)
			}
		}
	}
	subs := list(t, ctx, s, subscriptionKind)
	if len(subs) != len(triggers) {
		t.Errorf("%d Subscriptions for %d Triggers", len(subs), len(triggers))
	}
	for _, sub := range subs {
		u, _, _ := unstructured.NestedString(sub.Object, "spec", "subscriber", "uri")
		ca, _, _ := unstructured.NestedString(sub.Object, "spec", "subscriber", "CACerts")
		if !strings.HasPrefix(u, "https://broker-filter.knative-eventing.svc.cluster.local/") || ca != caPEM {
			t.Errorf("Subscription %s: the channel delivers to %q (CACerts the CA: %v), want the filter's https with the CA", sub.GetName(), u, ca == caPEM)
		}
	}

	// The flow, every hop over TLS.
	decision := func() string {
		d, err := devrun.Decision(ctx, s.Hub.Cluster, devrun.Namespace, devrun.Placement)
		if err != nil || len(d) != 1 {
			return fmt.Sprint(d, err)
		}
		return d[0]
	}
	if err := s.PushIdle(ctx, map[string]float64{"cluster1": 0.9, "cluster2": 0.2, "cluster3": 0.1}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 90*time.Second, "the placement did not choose cluster1", func() bool { return decision() == "cluster1" })
	watcherSent := func() float64 {
		return functest.MetricValue(t, s.Client, s.Functions["metric-watcher"].URL+"/metrics", `scoreflow_watcher_events_sent_total{result="ok"}`)
	}
	sentBefore := watcherSent()
	moved := time.Now()
	if err := s.PushIdle(ctx, map[string]float64{"cluster1": 0.1, "cluster2": 0.95, "cluster3": 0.2}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the placement did not move to cluster2", func() bool { return decision() == "cluster2" })
	t.Logf("with strict TLS, the decision moved %s after the metric changed in Prometheus", time.Since(moved).Round(time.Millisecond))
	// Through the metric-watcher over https, not the scorer's schedule: the Broker accepted its
	// metric.changed. The watcher counts a send when the ingress answers, which the in-memory
	// channel does only after delivering to every Trigger, replies included: after the decision.
	eventually(t, 30*time.Second, "the Broker accepted none of the metric-watcher's metric.changed", func() bool { return watcherSent() > sentBefore })

	// An admitted client posting over https, trusting the CA: the score is written.
	alice, err := s.AdmitClient(ctx, "alice", 10*time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	manual := scoreEvent(t, contract.ScoreUpdated{Resource: "tls-manual",
		Items: []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "x", Value: 42}}}}})
	admitted := time.Now()
	st, err := post(s.Client, s.BrokerURL, alice, manual)
	for ; err == nil && st == http.StatusForbidden && time.Since(admitted) < 60*time.Second; st, err = post(s.Client, s.BrokerURL, alice, manual) {
		time.Sleep(100 * time.Millisecond)
	}
	if err != nil || st != http.StatusAccepted {
		t.Fatalf("a score.updated over https to the broker: %d, %v; want 202", st, err)
	}
	eventually(t, 60*time.Second, "the score posted over https was not written", func() bool {
		o, err := s.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster1").Get(ctx, "tls-manual", metav1.GetOptions{})
		return err == nil && len(o.Status.Scores) == 1 && o.Status.Scores[0].Value == 42
	})

	// Plain HTTP is not served: the ingress's http port answers Knative's strict-mode 404; a
	// function's port answers only TLS.
	forged := scoreEvent(t, contract.ScoreUpdated{Resource: "tls-plain",
		Items: []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "x", Value: 1}}}}})
	if st, err := post(http.DefaultClient, s.Knative.IngressURL+"/"+devrun.Namespace+"/scoreflow", alice, forged); err != nil || st != http.StatusNotFound {
		t.Errorf("plain http to the broker ingress: %d, %v; want Knative's strict-mode 404", st, err)
	}
	writer := s.Functions["score-writer"]
	plainWriter := "http://" + strings.TrimPrefix(writer.URL, "https://")
	if !strings.HasPrefix(writer.URL, "https://") {
		t.Errorf("the writer is served at %s, want https", writer.URL)
	}
	if st, err := post(http.DefaultClient, plainWriter, "", forged); err == nil && st < 400 {
		t.Errorf("plain http to the score-writer: %d, want a refusal", st)
	}
	// A client that does not trust the local CA (the system roots only).
	untrusting := &http.Client{Timeout: 10 * time.Second}
	for name, u := range map[string]string{"the broker ingress": s.BrokerURL, "the score-writer": writer.URL} {
		_, err := post(untrusting, u, alice, forged)
		var verr *tls.CertificateVerificationError
		if !errors.As(err, &verr) {
			t.Errorf("a client not trusting the CA, to %s: %v; want a failed certificate verification", name, err)
		}
	}
	time.Sleep(3 * time.Second) // time for a write, had one got through
	if _, err := s.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster1").Get(ctx, "tls-plain", metav1.GetOptions{}); err == nil {
		t.Error("a score sent over plain http or without trusting the CA was written")
	}
	if crashed := s.Knative.Crashed(); len(crashed) > 0 {
		t.Errorf("Knative processes crashed: %v", crashed)
	}

	// Nothing outlives the stack.
	children := descendants(os.Getpid())
	if len(children) < 10 {
		t.Errorf("only %d child processes while the stack runs: %v", len(children), children)
	}
	s.Stop()
	stopped = true
	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range children {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("process %d (%s) outlived Stop", pid, comm(pid))
		}
	}
}

func get(t *testing.T, ctx context.Context, s *devrun.Stack, gvk schema.GroupVersionKind, name string) *unstructured.Unstructured {
	t.Helper()
	ri, err := s.Knative.Applier.Resource(gvk, devrun.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	o, err := ri.Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return o
}

func list(t *testing.T, ctx context.Context, s *devrun.Stack, gvk schema.GroupVersionKind) []unstructured.Unstructured {
	t.Helper()
	ri, err := s.Knative.Applier.Resource(gvk, devrun.Namespace)
	if err != nil {
		t.Fatal(err)
	}
	l, err := ri.List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return l.Items
}

func scoreEvent(t *testing.T, data contract.ScoreUpdated) event.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("scoreflow/tls-test")
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	// The strict overlays' writer refuses a score.updated whose attribute does not name its
	// resource: the attribute is what the broker's EventPolicies filter on.
	e.SetExtension(contract.ExtResource, data.Resource)
	if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
		t.Fatal(err)
	}
	return e
}

// post sends e with token (none if empty) through client and returns the status.
func post(client *http.Client, url, token string, e event.Event) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		return 0, err
	}
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
		return 0, err
	}
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
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

// descendants lists the processes below pid (from /proc), children first.
func descendants(pid int) []int {
	entries, _ := os.ReadDir("/proc")
	parent := map[int]int{}
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if pp, ok := ppid(p); ok {
			parent[p] = pp
		}
	}
	var out []int
	frontier := []int{pid}
	for len(frontier) > 0 {
		cur := frontier[0]
		frontier = frontier[1:]
		for p, pp := range parent {
			if pp == cur {
				out = append(out, p)
				frontier = append(frontier, p)
			}
		}
	}
	return out
}

func ppid(pid int) (int, bool) {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// pid (comm) state ppid ...: comm may hold spaces, so parse after the last ')'.
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	if len(fields) < 2 {
		return 0, false
	}
	p, err := strconv.Atoi(fields[1])
	return p, err == nil
}

// alive reports whether pid runs (a zombie waiting to be reaped does not).
func alive(pid int) bool {
	if syscall.Kill(pid, 0) != nil {
		return false
	}
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	fields := strings.Fields(string(b[strings.LastIndexByte(string(b), ')')+1:]))
	return len(fields) > 0 && fields[0] != "Z"
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}
