// Package e2e runs scoreflow as `make run` does (harness/devrun: the stock Knative Eventing running
// config/default's objects unmodified, every function of it as a process, a real hub,
// the real OCM placement controller, a real Prometheus) and checks what a user would see.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

var (
	binDir   string // the functions and the CLI, built once
	stack    *devrun.Stack
	observed = &observer{}
	loops    = &echo{}
	refusals = &refuser{}
)

// watchedSeries is the Prometheus series the metric-watcher polls in these tests; watchInterval is
// how often (the shipped deploy/metric-watcher.yaml polls every 30s).
const (
	watchedSeries = "scoreflow_e2e_cpu_idle_ratio"
	watchInterval = 2 * time.Second
	watcherConfig = `queries:
  - metric: cluster_cpu_idle_ratio
    query: avg by (cluster) (` + watchedSeries + `)
    clusterLabel: cluster
    deadband: {absolute: 0.02}
`
)

// loopType is the event type of the reply-loop test: its Trigger's subscriber answers with an
// event of the same type, which the Trigger matches again.
const loopType = "io.scoreflow.test.loop"

func TestMain(m *testing.M) {
	os.Exit(runMain(m))
}

func runMain(m *testing.M) int {
	bin, err := os.MkdirTemp("", "scoreflow-e2e-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	defer os.RemoveAll(bin)
	binDir = bin
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./functions/...", "./cmd/scoreflow")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building functions: %v\n%s", err, out)
		return 1
	}
	loop := httptest.NewServer(loops)
	defer loop.Close()
	failing := httptest.NewServer(refusals)
	defer failing.Close()

	ctx := context.Background()
	stack, err = devrun.Start(ctx, devrun.Options{
		Root:    "../..",
		BinDir:  bin,
		OnEvent: observed.add, // what cloudevents-player's Trigger (everything) receives
		// The metric-watcher polls a series only the benchmark writes (so nothing moves the other
		// tests' scores), under the metric name the shipped promql-scorer scores into cpu-idle.
		WatcherConfig: watcherConfig,
		WatchInterval: watchInterval,
		// Small parts, so that a few hundred clusters make a split result (TestFleetResultLandsInParts).
		FunctionEnv: map[string][]string{"promql-scorer": {fmt.Sprintf("MAX_ITEMS_PER_EVENT=%d", splitMaxItems)}},
		// Knative's data plane and every function export their spans to a Jaeger, so that one
		// event's trace shows each hop (TestOneEventsTraceCrossesEveryHop, BenchmarkEndToEnd).
		Tracing: true,
		// One local Knative runs per machine (its dispatcher's ports are fixed): wait for another
		// test package's to stop.
		LockWait: 15 * time.Minute,
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local stack:", err)
		return 1
	}
	defer stack.Stop()
	// Subscribers of the tests' own, added to the running broker as a user adds a Trigger.
	if err := applyYAML(ctx, fmt.Sprintf(`
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: loop, namespace: scoreflow}
spec:
  broker: scoreflow
  filters: [{exact: {type: %s}}]
  subscriber: {uri: %q}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: refuser, namespace: scoreflow}
spec:
  broker: scoreflow
  filters: [{exact: {type: %s}}]
  subscriber: {uri: %q}
`, loopType, loop.URL, refusedType, failing.URL)); err != nil {
		fmt.Fprintln(os.Stderr, "test triggers:", err)
		return 1
	}
	if err := stack.Knative.WaitReady(ctx, devrun.Namespace, time.Minute, knlocal.TriggerKind); err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	code := m.Run()
	// Every scenario must leave Knative running: a crashed dispatcher loses every in-flight event.
	if crashed := stack.Knative.Crashed(); len(crashed) > 0 {
		fmt.Fprintln(os.Stderr, "Knative processes crashed during the tests:", crashed)
		code = 1
	}
	return code
}

// applyYAML applies YAML to the hub through Knative's webhook, as kubectl apply would.
func applyYAML(ctx context.Context, doc string) error {
	objs, err := knlocal.Decode(strings.NewReader(doc))
	if err != nil {
		return err
	}
	return stack.Knative.Applier.Apply(ctx, objs...)
}

// applyDelete deletes one object, as kubectl delete would.
func applyDelete(ctx context.Context, group, version, kind, namespace, name string) error {
	ri, err := stack.Knative.Applier.Resource(schema.GroupVersionKind{Group: group, Version: version, Kind: kind}, namespace)
	if err != nil {
		return err
	}
	return ri.Delete(ctx, name, metav1.DeleteOptions{})
}

// observer records every event the broker routes to cloudevents-player's Trigger.
type observer struct {
	mu     sync.Mutex
	events []event.Event
}

func (o *observer) add(e event.Event) {
	o.mu.Lock()
	o.events = append(o.events, e)
	o.mu.Unlock()
}

// find returns the recorded events that match.
func (o *observer) find(match func(*event.Event) bool) []event.Event {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []event.Event
	for i := range o.events {
		if match(&o.events[i]) {
			out = append(out, o.events[i])
		}
	}
	return out
}

// results returns the write.done / write.failed events answering the event with this id.
func (o *observer) results(id string) []*contract.WriteResult {
	o.mu.Lock()
	defer o.mu.Unlock()
	var out []*contract.WriteResult
	for i := range o.events {
		e := &o.events[i]
		if e.Type() == contract.TypeWriteDone || e.Type() == contract.TypeWriteFailed {
			if r, err := contract.DecodeWriteResult(e); err == nil && r.Input.ID == id {
				out = append(out, r)
			}
		}
	}
	return out
}

// echo answers every event with a new event of the same type: a reply loop.
type echo struct {
	mu sync.Mutex
	n  int
}

func (l *echo) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	in, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	l.mu.Lock()
	l.n++
	l.mu.Unlock()
	out := cloudevents.NewEvent()
	out.SetID(uuid.NewString())
	out.SetSource("test/loop")
	out.SetType(in.Type())
	_ = cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(&out), http.StatusOK, w)
}

func (l *echo) count() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.n
}

// refusedType is routed to a subscriber that always answers 503, to count the broker's retries.
const refusedType = "io.scoreflow.test.refused"

// refuser answers 503 to every delivery and counts them by event id.
type refuser struct {
	mu       sync.Mutex
	attempts map[string]int
}

func (r *refuser) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	r.mu.Lock()
	if r.attempts == nil {
		r.attempts = map[string]int{}
	}
	r.attempts[req.Header.Get("Ce-Id")]++
	r.mu.Unlock()
	http.Error(w, "unavailable", http.StatusServiceUnavailable)
}

func (r *refuser) count(id string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.attempts[id]
}

// post sends e to the broker's ingress and returns the HTTP status.
func post(t testing.TB, e event.Event) int {
	t.Helper()
	return postIn(t, e, "")
}

// postTraced is post in a new trace, as a producer that traces its sends would post it, sampled
// or not; it returns the trace's id too.
func postTraced(t testing.TB, e event.Event, sampled bool) (int, string) {
	t.Helper()
	id := strings.ReplaceAll(uuid.NewString(), "-", "")
	flags := "00"
	if sampled {
		flags = "01"
	}
	return postIn(t, e, "00-"+id+"-"+id[:16]+"-"+flags), id
}

// postIn posts e with a traceparent header, when one is given.
func postIn(t testing.TB, e event.Event, traceparent string) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, stack.BrokerURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
		t.Fatal(err)
	}
	if traceparent != "" {
		req.Header.Set("traceparent", traceparent)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	return resp.StatusCode
}

// idle builds the metric.changed the metric-watcher would send: cluster_cpu_idle_ratio per cluster.
func idle(t testing.TB, values map[string]float64) event.Event {
	t.Helper()
	now := time.Now()
	var m contract.MetricChanged
	for c, v := range values {
		m.Samples = append(m.Samples, contract.Sample{Metric: "cluster_cpu_idle_ratio", Cluster: c, Value: v, ObservedAt: now})
	}
	e, err := contract.NewMetricChanged("test/e2e", now, m)
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func decision(t testing.TB) string {
	t.Helper()
	d, err := devrun.Decision(context.Background(), stack.Hub.Cluster, devrun.Namespace, devrun.Placement)
	if err != nil {
		t.Fatal(err)
	}
	if len(d) != 1 {
		return fmt.Sprint(d)
	}
	return d[0]
}

// eventually polls cond every 20ms until it holds or timeout passes.
func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("after %s: %s", timeout, what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
