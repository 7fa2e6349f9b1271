package broker

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// shutdownTopology has two triggers (workers each) and a PingSource (the cron), so the
// goroutine checks cover every kind the server starts.
func shutdownTopology(delivery string) string {
	return oneTrigger("", delivery) + `---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: filtered, namespace: scoreflow}
spec:
  broker: default
  filters:
    - any: [{exact: {type: never}}, {prefix: {type: nor.this}}]
    - all: [{exact: {type: never}}, {exact: {id: x}}]
  subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: subscriber}}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: hourly, namespace: scoreflow}
spec:
  schedule: "0 * * * *"
  sink: {ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: default}}
`
}

// TestShutdownDrains: Shutdown lets every accepted event finish, refuses new ones, and leaves
// no goroutine behind.
func TestShutdownDrains(t *testing.T) {
	sub := newSink(t, func(int, received) answer { return answer{delay: 5 * time.Millisecond} })
	settleGoroutines(t, countGoroutines()) // let earlier tests' connections wind down
	baseline := countGoroutines()

	objs := decode(t, shutdownTopology(""))
	s, err := New(Config{Brokers: objs.brokers, Triggers: objs.triggers, PingSources: objs.pings, Workers: 4,
		Resolver: Services{"scoreflow/subscriber": sub.URL}, Log: quietLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ln); err != nil {
		t.Fatal(err)
	}
	for i := range 40 {
		if code := post(t, s.URL("scoreflow", "default"), newEvent(fmt.Sprint(i), "io.scoreflow.test", nil)); code != 202 {
			t.Fatalf("event %d: %d", i, code)
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
	if n := len(sub.events()); n != 40 {
		t.Errorf("%d events delivered, want all 40", n)
	}
	if _, err := testClient.Post(s.URL("scoreflow", "default"), "application/json", strings.NewReader("{}")); err == nil {
		t.Error("ingress still answers after Shutdown")
	}
	settleGoroutines(t, baseline)
}

// TestShutdownDropsWithReason: when ctx ends first, queued and in-flight deliveries are dropped,
// each with a record saying why, and Shutdown says how many.
func TestShutdownDropsWithReason(t *testing.T) {
	sub := newSink(t, func(int, received) answer { return answer{hang: true} })
	settleGoroutines(t, countGoroutines())
	baseline := countGoroutines()

	objs := decode(t, shutdownTopology("  delivery: {retry: 5, backoffPolicy: exponential, backoffDelay: PT1S}"))
	rec := &recorder{}
	s, err := New(Config{Brokers: objs.brokers, Triggers: objs.triggers, PingSources: objs.pings, Workers: 2, OnEvent: rec.add,
		Resolver: Services{"scoreflow/subscriber": sub.URL}, Log: quietLog(t)})
	if err != nil {
		t.Fatal(err)
	}
	ln, _ := net.Listen("tcp", "127.0.0.1:0")
	if err := s.Start(ln); err != nil {
		t.Fatal(err)
	}
	for i := range 6 {
		post(t, s.URL("scoreflow", "default"), newEvent(fmt.Sprint(i), "io.scoreflow.test", nil))
	}
	sub.waitFor(t, 2, 5*time.Second) // both workers are stuck
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	began := time.Now()
	err = s.Shutdown(ctx)
	if took := time.Since(began); took > 2*time.Second {
		t.Errorf("Shutdown took %s with a 200ms deadline", took)
	}
	if err == nil || !strings.Contains(err.Error(), "6 deliveries dropped") {
		t.Errorf("Shutdown = %v, want 6 deliveries dropped", err)
	}
	reasons := map[string]int{}
	for _, d := range rec.of(KindDropped) {
		reasons[d.Reason]++
	}
	if reasons["shutdown: delivery interrupted"] != 2 || reasons["shutdown: never attempted"] != 4 {
		t.Errorf("drop reasons %v, want 2 interrupted and 4 never attempted", reasons)
	}
	settleGoroutines(t, baseline)
}

// TestShutdownRefusesIngress: while draining, ingress answers 503.
func TestShutdownRefusesIngress(t *testing.T) {
	release := make(chan struct{})
	sub := newSink(t, func(int, received) answer { <-release; return answer{} })
	objs := decode(t, oneTrigger("", ""))
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Resolver: Services{"scoreflow/subscriber": sub.URL}})
	post(t, s.URL("scoreflow", "default"), newEvent("held", "io.scoreflow.test", nil))
	sub.waitFor(t, 1, 5*time.Second)
	b := s.brokers["scoreflow/default"]
	done := make(chan error)
	go func() { done <- s.Shutdown(context.Background()) }()
	for s.gate.current() == running {
		time.Sleep(time.Millisecond)
	}
	e := newEvent("late", "io.scoreflow.test", nil)
	if code, _ := s.accept(b, &e, viaIngress); code != http.StatusServiceUnavailable {
		t.Errorf("ingress while draining answered %d, want 503", code)
	}
	close(release)
	if err := <-done; err != nil {
		t.Errorf("Shutdown: %v", err)
	}
}

func quietLog(t *testing.T) *slog.Logger {
	return slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelError}))
}
