// Package e2e runs scoreflow as `make run` does (harness/devrun: the local broker with brokers/ and
// triggers/, every function of deploy/ as a process, a real hub, the real OCM placement
// controller, a real Prometheus) and checks what a user would see.
package e2e

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	duckv1 "knative.dev/pkg/apis/duck/v1"

	"github.com/scoreflow/scoreflow/harness/broker"
	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

var (
	binDir   string // the functions and the CLI, built once
	stack    *devrun.Stack
	observed = &observer{}
	loops    = &echo{}
	records  = &recorder{}
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
	obs := httptest.NewServer(observed)
	defer obs.Close()
	loop := httptest.NewServer(loops)
	defer loop.Close()

	stack, err = devrun.Start(context.Background(), devrun.Options{
		Root:          "../..",
		BinDir:        bin,
		OnEvent:       records.add,
		ExtraServices: broker.Services{"scoreflow/observer": obs.URL, "scoreflow/loop": loop.URL},
		ExtraTriggers: []*eventingv1.Trigger{
			trigger("observer", nil), // like cloudevents-player: everything, no filter
			trigger("loop", []eventingv1.SubscriptionsAPIFilter{{Exact: map[string]string{"type": loopType}}}),
		},
	})
	if err != nil {
		fmt.Fprintln(os.Stderr, "starting the local stack:", err)
		return 1
	}
	defer stack.Stop()
	return m.Run()
}

func trigger(name string, filters []eventingv1.SubscriptionsAPIFilter) *eventingv1.Trigger {
	return &eventingv1.Trigger{
		TypeMeta:   metav1.TypeMeta{APIVersion: "eventing.knative.dev/v1", Kind: "Trigger"},
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: devrun.Namespace},
		Spec: eventingv1.TriggerSpec{
			Broker:     "scoreflow",
			Filters:    filters,
			Subscriber: duckv1.Destination{Ref: &duckv1.KReference{APIVersion: "serving.knative.dev/v1", Kind: "Service", Name: name}},
		},
	}
}

// observer records every event the broker routes to it, as cloudevents-player would show them.
type observer struct {
	mu     sync.Mutex
	events []event.Event
}

func (o *observer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
	if err != nil {
		w.WriteHeader(http.StatusBadRequest)
		return
	}
	o.mu.Lock()
	o.events = append(o.events, *e)
	o.mu.Unlock()
	w.WriteHeader(http.StatusAccepted)
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

// recorder keeps the broker's records.
type recorder struct {
	mu   sync.Mutex
	list []broker.Record
}

func (r *recorder) add(rec broker.Record) {
	r.mu.Lock()
	r.list = append(r.list, rec)
	r.mu.Unlock()
}

func (r *recorder) find(match func(broker.Record) bool) []broker.Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []broker.Record
	for _, rec := range r.list {
		if match(rec) {
			out = append(out, rec)
		}
	}
	return out
}

// post sends e to the broker's ingress and returns the HTTP status.
func post(t testing.TB, e event.Event) int {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, stack.BrokerURL, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
		t.Fatal(err)
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
