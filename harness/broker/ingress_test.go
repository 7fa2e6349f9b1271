package broker

import (
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// TestIngress checks the statuses Knative's broker ingress answers.
func TestIngress(t *testing.T) {
	sub := newSink(t, nil)
	objs := decode(t, oneTrigger("", ""))
	reg := prometheus.NewRegistry()
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Registerer: reg, Resolver: Services{"scoreflow/subscriber": sub.URL}})
	url := s.URL("scoreflow", "default")
	binary := map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "b1", "Ce-Source": "curl", "Ce-Type": "io.scoreflow.test", "Content-Type": "application/json"}
	tests := []struct {
		name   string
		method string
		url    string
		header map[string]string
		body   string
		want   int
	}{
		{"binary", "POST", url, binary, `{"a":1}`, 202},
		{"structured", "POST", url, map[string]string{"Content-Type": "application/cloudevents+json"},
			`{"specversion":"1.0","id":"s1","source":"curl","type":"io.scoreflow.test","data":{"a":1}}`, 202},
		{"trailing slash", "POST", url + "/", binary, `{}`, 202},
		{"unknown broker", "POST", s.URL("scoreflow", "nope"), binary, `{}`, 404},
		{"unknown namespace", "POST", s.URL("other", "default"), binary, `{}`, 404},
		{"no broker in path", "POST", strings.TrimSuffix(url, "/default"), binary, `{}`, 404},
		{"not a CloudEvent", "POST", url, map[string]string{"Content-Type": "application/json"}, `{"a":1}`, 400},
		{"missing id", "POST", url, map[string]string{"Ce-Specversion": "1.0", "Ce-Source": "curl", "Ce-Type": "t"}, ``, 400},
		{"bad structured JSON", "POST", url, map[string]string{"Content-Type": "application/cloudevents+json"}, `{"specversion":`, 400},
		{"GET", "GET", url, nil, ``, 405},
		{"OPTIONS", "OPTIONS", url, nil, ``, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if got := postRaw(t, tt.method, tt.url, tt.header, tt.body); got != tt.want {
				t.Errorf("%s %s answered %d, want %d", tt.method, tt.url, got, tt.want)
			}
		})
	}
	drain(t, s)
	if got := ids(sub.events()); len(got) != 3 {
		t.Errorf("subscriber got %v, want the three accepted events", got)
	}
	wantMetrics := []struct {
		metric string
		labels map[string]string
		want   float64
	}{
		{"scoreflow_broker_ingress_events_total", map[string]string{"broker": "scoreflow/default", "via": "ingress", "code": "202"}, 3},
		{"scoreflow_broker_ingress_events_total", map[string]string{"broker": "scoreflow/default", "via": "ingress", "code": "400"}, 3},
		{"scoreflow_broker_ingress_events_total", map[string]string{"broker": "unknown", "via": "ingress", "code": "404"}, 3},
		{"scoreflow_broker_deliveries_total", map[string]string{"trigger": "scoreflow/t", "outcome": "delivered"}, 3},
		{"scoreflow_broker_delivery_attempts_total", map[string]string{"trigger": "scoreflow/t", "code": "202"}, 3},
		{"scoreflow_broker_queue_length", map[string]string{"trigger": "scoreflow/t"}, 0},
	}
	for _, tt := range wantMetrics {
		if got, ok := metricValue(t, reg, tt.metric, tt.labels); !ok || got != tt.want {
			t.Errorf("%s%v = %v (found %v), want %v", tt.metric, tt.labels, got, ok, tt.want)
		}
	}
}

// metricValue finds the counter or gauge with exactly these labels.
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) (float64, bool) {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			got := map[string]string{}
			for _, l := range m.GetLabel() {
				got[l.GetName()] = l.GetValue()
			}
			if maps.Equal(got, labels) {
				if m.GetCounter() != nil {
					return m.GetCounter().GetValue(), true
				}
				return m.GetGauge().GetValue(), true
			}
		}
	}
	return 0, false
}

// TestBackpressure: with every worker busy and the queue full, ingress answers 429, and the
// events it accepted are all delivered once the subscriber frees up.
func TestBackpressure(t *testing.T) {
	release := make(chan struct{})
	sub := newSink(t, func(int, received) answer { <-release; return answer{} })
	objs := decode(t, oneTrigger("", ""))
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Workers: 1, QueueSize: 2, Resolver: Services{"scoreflow/subscriber": sub.URL}})
	url := s.URL("scoreflow", "default")
	if code := post(t, url, newEvent("e1", "io.scoreflow.test", nil)); code != 202 {
		t.Fatalf("e1: %d", code)
	}
	sub.waitFor(t, 1, 5*time.Second) // the only worker holds e1
	var codes []int
	for _, id := range []string{"e2", "e3", "e4", "e5"} {
		codes = append(codes, post(t, url, newEvent(id, "io.scoreflow.test", nil)))
	}
	if want := []int{202, 202, 429, 429}; !equalInts(codes, want) {
		t.Fatalf("answers %v, want %v", codes, want)
	}
	close(release)
	drain(t, s)
	if got := ids(sub.events()); strings.Join(got, ",") != "e1,e2,e3" {
		t.Errorf("delivered %v, want e1,e2,e3", got)
	}
}

// TestBackpressureAllOrNothing: an event matching two triggers, one of them full, is refused for
// both, so a client's retry does not duplicate it at the other.
func TestBackpressureAllOrNothing(t *testing.T) {
	release := make(chan struct{})
	slow := newSink(t, func(int, received) answer { <-release; return answer{} })
	fast := newSink(t, nil)
	objs := decode(t, oneTrigger("", "")+`---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: fast, namespace: scoreflow}
spec:
  broker: default
  subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: fast}}
`)
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Workers: 1, QueueSize: 1,
		Resolver: Services{"scoreflow/subscriber": slow.URL, "scoreflow/fast": fast.URL}})
	url := s.URL("scoreflow", "default")
	post(t, url, newEvent("e1", "io.scoreflow.test", nil))
	slow.waitFor(t, 1, 5*time.Second)
	post(t, url, newEvent("e2", "io.scoreflow.test", nil)) // fills the slow trigger's queue
	fast.waitFor(t, 2, 5*time.Second)
	if code := post(t, url, newEvent("e3", "io.scoreflow.test", nil)); code != http.StatusTooManyRequests {
		t.Fatalf("e3: %d, want 429", code)
	}
	close(release)
	drain(t, s)
	if got := ids(fast.events()); strings.Join(got, ",") != "e1,e2" {
		t.Errorf("fast trigger got %v, want e1,e2 (not the refused e3)", got)
	}
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
