package broker

import (
	"fmt"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/types"
)

const replyTopology = `apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: scoreflow}
spec:
  delivery:
    deadLetterSink: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: dls}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: scorer, namespace: scoreflow}
spec:
  broker: default
  filters: [{exact: {type: io.scoreflow.metric.changed}}]
  subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: scorer}}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: writer, namespace: scoreflow}
spec:
  broker: default
  filters: [{exact: {type: io.scoreflow.score.updated}}]
  subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: writer}}
`

// TestReplyReentersBroker: a subscriber's reply is matched against all triggers; subscribers
// see knativearrivaltime but not the broker's TTL.
func TestReplyReentersBroker(t *testing.T) {
	scorer := newSink(t, func(_ int, r received) answer {
		reply := newEvent("reply-to-"+r.event.ID(), "io.scoreflow.score.updated", nil)
		return answer{reply: &reply}
	})
	writer := newSink(t, nil)
	dls := newSink(t, nil)
	objs := decode(t, replyTopology)
	rec := &recorder{}
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, OnEvent: rec.add,
		Resolver: Services{"scoreflow/scorer": scorer.URL, "scoreflow/writer": writer.URL, "scoreflow/dls": dls.URL}})
	before := time.Now()
	post(t, s.URL("scoreflow", "default"), newEvent("m1", "io.scoreflow.metric.changed", nil))
	drain(t, s)

	got := writer.events()
	if len(got) != 1 || got[0].event.ID() != "reply-to-m1" {
		t.Fatalf("writer got %v, want the scorer's reply", ids(got))
	}
	for _, r := range append(scorer.events(), got...) {
		ext := r.event.Extensions()
		if _, ok := ext["knativebrokerttl"]; ok {
			t.Errorf("%s reached a subscriber with knativebrokerttl", r.event.ID())
		}
		at, err := types.ToTime(ext["knativearrivaltime"])
		if err != nil || at.Before(before.Add(-time.Second)) || at.After(time.Now()) {
			t.Errorf("%s: knativearrivaltime %v (%v), want a time during the test", r.event.ID(), ext["knativearrivaltime"], err)
		}
		if r.header.Get("Prefer") != "reply" || r.header.Get("Kn-Namespace") != "scoreflow" {
			t.Errorf("headers %v, want Prefer: reply and Kn-Namespace: scoreflow", r.header)
		}
	}
	var vias []string
	for _, a := range rec.of(KindAccepted) {
		vias = append(vias, a.ID+"/"+a.Via)
	}
	if fmt.Sprint(vias) != "[m1/ingress reply-to-m1/reply]" {
		t.Errorf("accepted %v, want m1 from ingress then its reply", vias)
	}
	if len(dls.events()) != 0 {
		t.Errorf("dead-letter sink got %v", ids(dls.events()))
	}
}

// TestReplyLoopDiesAtTTL: a subscriber that answers every event with one it matches again is
// delivered 255 times from a fresh event (Knative's default TTL), fewer when the event arrives
// with a TTL. The reply that finds the TTL spent is refused (400), so, as in Knative, the event
// that produced it goes to the dead-letter sink.
func TestReplyLoopDiesAtTTL(t *testing.T) {
	tests := []struct {
		name       string
		ttl        any // knativebrokerttl on the first event; nil: none
		deliveries int
		ingress    int // ingress status for the first event
	}{
		{"default TTL", nil, 255, 202},
		{"TTL 3", "3", 2, 202},
		{"TTL 1", "1", 0, 400},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			loop := newSink(t, func(n int, r received) answer {
				reply := newEvent(fmt.Sprintf("loop-%d", n), "io.scoreflow.metric.changed", nil)
				return answer{reply: &reply}
			})
			dls := newSink(t, nil)
			objs := decode(t, replyTopology)
			s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers[:1],
				Resolver: Services{"scoreflow/scorer": loop.URL, "scoreflow/dls": dls.URL}})
			ext := map[string]any{}
			if tt.ttl != nil {
				ext["knativebrokerttl"] = tt.ttl
			}
			if code := post(t, s.URL("scoreflow", "default"), newEvent("loop-0", "io.scoreflow.metric.changed", ext)); code != tt.ingress {
				t.Fatalf("ingress answered %d, want %d", code, tt.ingress)
			}
			drain(t, s)
			if n := len(loop.events()); n != tt.deliveries {
				t.Fatalf("%d deliveries, want %d", n, tt.deliveries)
			}
			if tt.deliveries == 0 {
				return
			}
			got := dls.events()
			if len(got) != 1 {
				t.Fatalf("dead-letter sink got %d events, want 1", len(got))
			}
			last := fmt.Sprintf("loop-%d", tt.deliveries-1)
			dead := got[0].event.Extensions()
			if got[0].event.ID() != last || dead["knativeerrorcode"] != "400" || dead["knativeerrordest"] != s.URL("scoreflow", "default") || dead["knativebrokerttl"] != "1" {
				t.Errorf("dead-lettered %s with %v, want %s refused by ingress (400) at TTL 1", got[0].event.ID(), dead, last)
			}
		})
	}
}

// TestReplyRefusedWhenFull: a reply that finds its trigger's queue full is retried with the
// trigger's policy (429 is retryable) and, when it still cannot get in, the original event is
// dead-lettered with 429.
func TestReplyRefusedWhenFull(t *testing.T) {
	release := make(chan struct{})
	scorer := newSink(t, func(_ int, r received) answer {
		reply := newEvent("reply-"+r.event.ID(), "io.scoreflow.score.updated", nil)
		return answer{reply: &reply}
	})
	writer := newSink(t, func(int, received) answer { <-release; return answer{} })
	dls := newSink(t, nil)
	objs := decode(t, replyTopology)
	objs.brokers[0].Spec.Delivery.Retry = ptr(int32(1))
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Workers: 1, QueueSize: 1,
		Resolver: Services{"scoreflow/scorer": scorer.URL, "scoreflow/writer": writer.URL, "scoreflow/dls": dls.URL}})
	post(t, s.URL("scoreflow", "default"), newEvent("m1", "io.scoreflow.metric.changed", nil))
	writer.waitFor(t, 1, 5*time.Second) // the writer's worker is busy with reply-m1
	post(t, s.URL("scoreflow", "default"), newEvent("m2", "io.scoreflow.metric.changed", nil))
	scorer.waitFor(t, 2, 5*time.Second) // m2 left the scorer's one-slot queue
	post(t, s.URL("scoreflow", "default"), newEvent("m3", "io.scoreflow.metric.changed", nil))
	got := dls.waitFor(t, 1, 5*time.Second) // reply-m2 fills the writer queue; reply-m3 cannot get in
	close(release)
	drain(t, s)
	ext := got[0].event.Extensions()
	if got[0].event.ID() != "m3" || ext["knativeerrorcode"] != "429" {
		t.Errorf("dead-lettered %s with %v, want m3 with 429", got[0].event.ID(), ext)
	}
	if n := len(writer.events()); n != 2 {
		t.Errorf("writer got %d events, want reply-m1 and reply-m2", n)
	}
}

func ptr[T any](v T) *T { return &v }
