package broker

import (
	"strings"
	"testing"
	"time"
)

// TestPingSourceFires: a PingSource on a per-second schedule sends Knative's ping event (type,
// source, data, content type, ceOverrides) to its sink, the broker, which delivers it.
func TestPingSourceFires(t *testing.T) {
	t.Parallel()
	scorer := newSink(t, nil)
	objs := decode(t, `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: scoreflow}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: scorer, namespace: scoreflow}
spec:
  broker: default
  filters: [{exact: {type: dev.knative.sources.ping}}]
  subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: scorer}}
---
apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: cpu-scores, namespace: scoreflow}
spec:
  schedule: "* * * * * *"   # every second: the seconds field is optional, as in Knative
  timezone: Europe/Paris
  contentType: application/json
  data: '{"resource":"cpu"}'
  ceOverrides:
    extensions: {scorer: cpu}
  sink:
    ref: {apiVersion: eventing.knative.dev/v1, kind: Broker, name: default}
`)
	rec := &recorder{}
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, PingSources: objs.pings, OnEvent: rec.add,
		Resolver: Services{"scoreflow/scorer": scorer.URL}})
	got := scorer.waitFor(t, 2, 5*time.Second)
	drain(t, s)
	if got[0].at.Sub(got[1].at).Abs() < 500*time.Millisecond {
		t.Errorf("two pings %s apart, want about a second", got[1].at.Sub(got[0].at))
	}
	for _, r := range got[:2] {
		e := r.event
		if e.Type() != "dev.knative.sources.ping" || e.Source() != "/apis/v1/namespaces/scoreflow/pingsources/cpu-scores" {
			t.Errorf("ping %s from %s, want Knative's type and source", e.Type(), e.Source())
		}
		if string(e.Data()) != `{"resource":"cpu"}` || e.DataContentType() != "application/json" {
			t.Errorf("ping data %s (%s)", e.Data(), e.DataContentType())
		}
		if e.Extensions()["scorer"] != "cpu" || e.Time().IsZero() || e.ID() == "" {
			t.Errorf("ping %s: extensions %v, time %v", e.ID(), e.Extensions(), e.Time())
		}
	}
	if got[0].event.ID() == got[1].event.ID() {
		t.Error("two firings share an id")
	}
	pings := rec.of(KindPing)
	if len(pings) < 2 || pings[0].Status != 202 || pings[0].Target != s.URL("scoreflow", "default") {
		t.Errorf("ping records %+v, want 202 from the broker", pings)
	}
}

// TestPingSourceDataBase64: dataBase64 is decoded; a sink can be a plain URI.
func TestPingSourceDataBase64(t *testing.T) {
	t.Parallel()
	sink := newSink(t, nil)
	objs := decode(t, fmtYAML(`apiVersion: sources.knative.dev/v1
kind: PingSource
metadata: {name: raw, namespace: scoreflow}
spec:
  schedule: "* * * * * *"
  contentType: text/plain
  dataBase64: aGVsbG8=
  sink: {uri: %q}
`, sink.URL+"/pings"))
	s := start(t, Config{PingSources: objs.pings})
	got := sink.waitFor(t, 1, 5*time.Second)
	drain(t, s)
	if e := got[0].event; string(e.Data()) != "hello" || e.DataContentType() != "text/plain" || got[0].path != "/pings" {
		t.Errorf("got %q (%s) at %s, want hello as text/plain at /pings", e.Data(), e.DataContentType(), got[0].path)
	}
}

// TestInvalidObjects: New refuses what Knative's webhooks refuse, and more that would make
// the local broker silently differ from the cluster.
func TestInvalidObjects(t *testing.T) {
	broker := "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata: {name: default, namespace: scoreflow}\n---\n"
	trigger := func(spec string) string {
		return broker + "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata: {name: t, namespace: scoreflow}\nspec:\n  broker: default\n  subscriber: {uri: http://127.0.0.1:1}\n" + spec
	}
	ping := func(spec string) string {
		return "apiVersion: sources.knative.dev/v1\nkind: PingSource\nmetadata: {name: p, namespace: scoreflow}\nspec:\n  sink: {uri: http://127.0.0.1:1}\n" + spec
	}
	tests := []struct {
		name, yaml, want string
	}{
		{"trigger to an unknown broker", strings.Replace(trigger(""), "broker: default\n", "broker: other\n", 1), "broker scoreflow/other is not defined"},
		{"trigger twice", trigger("") + "---\n" + strings.TrimPrefix(trigger(""), broker), "defined twice"},
		{"broker twice", broker + broker, "defined twice"},
		{"bad cesql", trigger("  filters: [{cesql: \"type = \"}]\n"), "cesql"},
		{"two dialects in one filter", trigger("  filters: [{exact: {type: a}, prefix: {type: b}}]\n"), "multiple dialects"},
		{"bad attribute name", trigger("  filter: {attributes: {Bad-Name: x}}\n"), "Bad-Name"},
		{"bad backoff delay", trigger("  delivery: {retry: 1, backoffPolicy: linear, backoffDelay: soon}\n"), "backoffDelay"},
		{"bad broker delivery", strings.Replace(broker, "metadata: {name: default, namespace: scoreflow}\n", "metadata: {name: default, namespace: scoreflow}\nspec: {delivery: {timeout: later}}\n", 1), "timeout"},
		{"bad schedule", ping("  schedule: \"every minute\"\n"), "schedule"},
		{"@every is refused as in Knative", ping("  schedule: \"@every 1s\"\n"), "@every"},
		{"bad timezone", ping("  schedule: \"* * * * *\"\n  timezone: Mars/Olympus\n"), "timezone"},
		{"data and dataBase64", ping("  schedule: \"* * * * *\"\n  data: a\n  dataBase64: YQ==\n"), "expected exactly one"},
		{"JSON data that is not JSON", ping("  schedule: \"* * * * *\"\n  contentType: application/json\n  data: '{'\n"), "data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			objs := decode(t, tt.yaml)
			_, err := New(Config{Brokers: objs.brokers, Triggers: objs.triggers, PingSources: objs.pings})
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Errorf("New() = %v, want an error containing %q", err, tt.want)
			}
		})
	}
}
