package broker

import (
	"log/slog"
	"slices"
	"testing"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.uber.org/zap"
	"knative.dev/eventing/pkg/eventfilter/subscriptionsapi"
)

// TestFilters sends four events through one broker whose triggers cover every filter dialect,
// and checks which trigger got which event.
func TestFilters(t *testing.T) {
	rec := newSink(t, nil)
	objs := decodeFile(t, "testdata/filters.yaml")
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Resolver: Services{"scoreflow/recorder": rec.URL}})

	score := newEvent("score", "io.scoreflow.score.updated", map[string]any{"cluster": "c1"})
	metric := newEvent("metric", "io.scoreflow.metric.changed", map[string]any{"cluster": "c2"})
	failed := newEvent("failed", "io.scoreflow.score.write.failed", nil)
	failed.SetSource("scoreflow/score-writer")
	ping := newEvent("ping", "dev.knative.sources.ping", nil)
	ping.SetSource("/apis/v1/namespaces/scoreflow/pingsources/every-minute")
	for _, e := range []event.Event{score, metric, failed, ping} {
		if code := post(t, s.URL("scoreflow", "default"), e); code != 202 {
			t.Fatalf("posting %s: %d, want 202", e.ID(), code)
		}
	}
	drain(t, s)

	got := map[string][]string{}
	for _, r := range rec.events() {
		got[r.path] = append(got[r.path], r.event.ID())
	}
	tests := []struct {
		trigger string
		want    []string
	}{
		{"exact", []string{"score"}},
		{"exact-extension", []string{"score"}}, // an event without the extension fails the filter
		{"prefix", []string{"failed", "score"}},
		{"suffix", []string{"failed"}},
		{"all", []string{"metric"}},
		{"any", []string{"ping", "score"}},
		{"not", []string{"ping"}},
		{"cesql", []string{"metric", "score"}},
		{"list", []string{"failed", "score"}},
		{"legacy", []string{"metric"}},
		{"legacy-present", []string{"metric", "score"}},
		{"override", []string{"ping"}},
		{"everything", []string{"failed", "metric", "ping", "score"}},
	}
	for _, tt := range tests {
		t.Run(tt.trigger, func(t *testing.T) {
			ids := got["/"+tt.trigger]
			slices.Sort(ids)
			if !slices.Equal(ids, tt.want) {
				t.Errorf("trigger %s got %v, want %v", tt.trigger, ids, tt.want)
			}
		})
	}
}

// TestFiltersMatchKnative compares the filters built here with Knative's own all/any
// (subscriptionsapi.CreateSubscriptionsAPIFilters) on every trigger of the table above plus edge
// cases, for events with and without the attributes they test.
func TestFiltersMatchKnative(t *testing.T) {
	objs := decodeFile(t, "testdata/filters.yaml")
	edge := decode(t, `apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: edges, namespace: scoreflow}
spec:
  broker: default
  filters:
    - any:
        - all: [{prefix: {type: io.}}, {not: {suffix: {type: .ping}}}]
        - not: {exact: {cluster: c2}}
        - {}
    - not: {}
  subscriber: {uri: http://127.0.0.1:1}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: any-ends-with-nothing, namespace: scoreflow}
spec:
  broker: default
  filters:
    - any: [{exact: {type: never}}, {not: {}}]
  subscriber: {uri: http://127.0.0.1:1}
`)
	events := []event.Event{
		newEvent("score", "io.scoreflow.score.updated", map[string]any{"cluster": "c1"}),
		newEvent("metric", "io.scoreflow.metric.changed", map[string]any{"cluster": "c2"}),
		newEvent("bare", "io.scoreflow.score.write.failed", nil),
		newEvent("ping", "dev.knative.sources.ping", nil),
	}
	ctx := filterContext()
	for _, tr := range append(objs.triggers, edge.triggers...) {
		if len(tr.Spec.Filters) == 0 {
			continue
		}
		ours := newFilter(tr, slog.New(slog.DiscardHandler))
		for _, e := range events {
			// A fresh Knative filter per evaluation, never cleaned up: its reordering goroutines race
			// with later evaluations and with Cleanup (which also panics on a "not" of nothing).
			// The few parked goroutines end with the test binary.
			want := subscriptionsapi.CreateSubscriptionsAPIFilters(zap.NewNop(), tr.Spec.Filters).Filter(ctx, e)
			if got := ours.Filter(ctx, e); got != want {
				t.Errorf("trigger %s, event %s: %s, Knative says %s", tr.Name, e.ID(), got, want)
			}
		}
	}

	// Knative's webhook accepts "not: {}"; its filters then panic in Cleanup, ours do not care.
	s, err := New(Config{Brokers: objs.brokers, Triggers: edge.triggers})
	if err != nil {
		t.Fatalf("New with the edge cases: %v", err)
	}
	if err := s.Shutdown(ctx); err != nil {
		t.Fatal(err)
	}
}

// TestFiltersStartNoGoroutines: building filters, all and any included, starts nothing that
// would need stopping.
func TestFiltersStartNoGoroutines(t *testing.T) {
	objs := decodeFile(t, "testdata/filters.yaml")
	before := countGoroutines()
	if _, err := New(Config{Brokers: objs.brokers, Triggers: objs.triggers}); err != nil {
		t.Fatal(err)
	}
	if n := countGoroutines(); n > before {
		t.Errorf("%d goroutines after New, %d before", n, before)
	}
}
