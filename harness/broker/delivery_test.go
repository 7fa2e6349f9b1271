package broker

import (
	"encoding/base64"
	"net/http"
	"strings"
	"testing"
	"time"
)

// oneTrigger is a broker and one trigger to the "subscriber" Service, with YAML delivery specs
// (indented for spec:) for each; "" leaves one out.
func oneTrigger(brokerDelivery, triggerDelivery string) string {
	return fmtYAML(`apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: scoreflow}
spec:
%s
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: t, namespace: scoreflow}
spec:
  broker: default
  subscriber: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: subscriber}}
%s
`, brokerDelivery, triggerDelivery)
}

// TestRetryAndBackoff checks the number of attempts and the waits between them for each
// policy, and which statuses are retried at all.
func TestRetryAndBackoff(t *testing.T) {
	tests := []struct {
		name     string
		delivery string
		status   int
		attempts int
		gaps     []time.Duration // minimum wait before each retry
	}{
		// Delays are ISO-8601 durations parsed by Knative to a tenth of a second (PT0.05S is 0).
		{"exponential on 500", "retry: 3\n    backoffPolicy: exponential\n    backoffDelay: PT0.1S", 500, 4, []time.Duration{100, 200, 400}},
		// Knative's linear backoff is delay x n with n from 0: the first retry is immediate (an
		// exponential wait would be 500ms there, beyond the tolerance).
		{"linear on 503", "retry: 3\n    backoffPolicy: linear\n    backoffDelay: PT0.5S", 503, 4, []time.Duration{0, 500, 1000}},
		{"404 is retried", "retry: 2", 404, 3, nil},
		{"408 is retried", "retry: 2", 408, 3, nil},
		{"409 is retried", "retry: 2", 409, 3, nil},
		{"429 is retried", "retry: 2", 429, 3, nil},
		{"400 is not retried", "retry: 3\n    backoffPolicy: linear\n    backoffDelay: PT0.1S", 400, 1, nil},
		{"403 is not retried", "retry: 3", 403, 1, nil},
		{"no retry configured", "", 500, 1, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := newSink(t, func(int, received) answer { return answer{status: tt.status} })
			delivery := ""
			if tt.delivery != "" {
				delivery = "  delivery:\n    " + tt.delivery
			}
			objs := decode(t, oneTrigger("", delivery))
			rec := &recorder{}
			s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Resolver: Services{"scoreflow/subscriber": sub.URL}, OnEvent: rec.add})
			if code := post(t, s.URL("scoreflow", "default"), newEvent("e1", "io.scoreflow.test", nil)); code != 202 {
				t.Fatalf("ingress answered %d", code)
			}
			drain(t, s)
			got := sub.events()
			if len(got) != tt.attempts {
				t.Fatalf("%d attempts, want %d", len(got), tt.attempts)
			}
			for i, min := range tt.gaps {
				gap := got[i+1].at.Sub(got[i].at)
				if gap < min*time.Millisecond {
					t.Errorf("wait before retry %d = %s, want at least %s", i+1, gap, min*time.Millisecond)
				}
				if gap > min*time.Millisecond+400*time.Millisecond {
					t.Errorf("wait before retry %d = %s, want about %s", i+1, gap, min*time.Millisecond)
				}
			}
			if n := len(rec.of(KindRetry)); n != tt.attempts-1 {
				t.Errorf("%d retry records, want %d", n, tt.attempts-1)
			}
			if d := rec.of(KindDropped); len(d) != 1 || d[0].Status != tt.status || d[0].Attempts != tt.attempts {
				t.Errorf("dropped records %+v, want one with status %d after %d attempts", d, tt.status, tt.attempts)
			}
		})
	}
}

// TestDeliverySpecSource: a Trigger's delivery replaces the Broker's whole (no dead-letter sink
// inherited); a Trigger without one uses the Broker's.
func TestDeliverySpecSource(t *testing.T) {
	brokerDelivery := `  delivery:
    retry: 2
    deadLetterSink: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: dls}}`
	tests := []struct {
		name         string
		trigger      string
		attempts     int
		deadLettered int
	}{
		{"broker's", "", 3, 1},
		{"trigger's replaces", "  delivery:\n    retry: 1", 2, 0},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := newSink(t, func(int, received) answer { return answer{status: 500} })
			dls := newSink(t, nil)
			objs := decode(t, oneTrigger(brokerDelivery, tt.trigger))
			s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers,
				Resolver: Services{"scoreflow/subscriber": sub.URL, "scoreflow/dls": dls.URL}})
			post(t, s.URL("scoreflow", "default"), newEvent("e1", "io.scoreflow.test", nil))
			drain(t, s)
			if n := len(sub.events()); n != tt.attempts {
				t.Errorf("%d attempts, want %d", n, tt.attempts)
			}
			if n := len(dls.events()); n != tt.deadLettered {
				t.Errorf("dead-letter sink got %d events, want %d", n, tt.deadLettered)
			}
		})
	}
}

// TestTimeout: an attempt is cut at the delivery timeout and counts as a failed request
// (retried; dead-lettered with code 500 as Knative records a request without answer).
func TestTimeout(t *testing.T) {
	sub := newSink(t, func(int, received) answer { return answer{hang: true} })
	dls := newSink(t, nil)
	objs := decode(t, oneTrigger("", `  delivery:
    retry: 1
    timeout: PT0.1S
    deadLetterSink: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: dls}}`))
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers,
		Resolver: Services{"scoreflow/subscriber": sub.URL, "scoreflow/dls": dls.URL}})
	began := time.Now()
	post(t, s.URL("scoreflow", "default"), newEvent("slow", "io.scoreflow.test", nil))
	got := dls.waitFor(t, 1, 5*time.Second)
	if took := time.Since(began); took < 200*time.Millisecond || took > 2*time.Second {
		t.Errorf("dead-lettered after %s, want two 100ms timeouts", took)
	}
	drain(t, s)
	if n := len(sub.events()); n != 2 {
		t.Errorf("%d attempts, want 2", n)
	}
	if code := got[0].event.Extensions()["knativeerrorcode"]; code != "500" {
		t.Errorf("knativeerrorcode = %v, want 500", code)
	}
	data, _ := base64.StdEncoding.DecodeString(got[0].event.Extensions()["knativeerrordata"].(string))
	if !strings.Contains(string(data), "deadline exceeded") {
		t.Errorf("knativeerrordata = %q, want the timeout error", data)
	}
}

// TestNonEventReply: a 2xx with a body that is not a CloudEvent fails like a 502: retried, then
// dead-lettered with the body as error data.
func TestNonEventReply(t *testing.T) {
	sub := newSink(t, func(int, received) answer { return answer{status: http.StatusOK, body: "ok, thanks"} })
	dls := newSink(t, nil)
	objs := decode(t, oneTrigger("", `  delivery:
    retry: 1
    deadLetterSink: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: dls}}`))
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers,
		Resolver: Services{"scoreflow/subscriber": sub.URL, "scoreflow/dls": dls.URL}})
	post(t, s.URL("scoreflow", "default"), newEvent("e1", "io.scoreflow.test", nil))
	drain(t, s)
	if n := len(sub.events()); n != 2 {
		t.Errorf("%d attempts, want 2 (502 is retried)", n)
	}
	got := dls.events()
	if len(got) != 1 {
		t.Fatalf("dead-letter sink got %d events, want 1", len(got))
	}
	ext := got[0].event.Extensions()
	if ext["knativeerrorcode"] != "502" || ext["knativeerrordata"] != base64.StdEncoding.EncodeToString([]byte("ok, thanks")) {
		t.Errorf("error extensions %v, want code 502 and the body", ext)
	}
}

// TestNetworkError: a subscriber that is down is retried and dead-lettered with code 500.
func TestNetworkError(t *testing.T) {
	down := newSink(t, nil)
	down.Close()
	dls := newSink(t, nil)
	objs := decode(t, oneTrigger("", `  delivery:
    retry: 2
    backoffPolicy: exponential
    backoffDelay: PT0.1S
    deadLetterSink: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: dls}}`))
	rec := &recorder{}
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, OnEvent: rec.add,
		Resolver: Services{"scoreflow/subscriber": down.URL, "scoreflow/dls": dls.URL}})
	post(t, s.URL("scoreflow", "default"), newEvent("e1", "io.scoreflow.test", nil))
	drain(t, s)
	if n := len(rec.of(KindRetry)); n != 2 {
		t.Errorf("%d retries, want 2", n)
	}
	got := dls.events()
	if len(got) != 1 || got[0].event.Extensions()["knativeerrorcode"] != "500" {
		t.Fatalf("dead-letter sink got %v, want one event with knativeerrorcode 500", ids(got))
	}
	if dest := got[0].event.Extensions()["knativeerrordest"]; dest != down.URL {
		t.Errorf("knativeerrordest = %v, want %s", dest, down.URL)
	}
}

// TestStructuredFormat: delivery.format json sends structured mode.
func TestStructuredFormat(t *testing.T) {
	sub := newSink(t, nil)
	objs := decode(t, oneTrigger("", "  delivery:\n    format: json"))
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Resolver: Services{"scoreflow/subscriber": sub.URL}})
	post(t, s.URL("scoreflow", "default"), newEvent("e1", "io.scoreflow.test", nil))
	drain(t, s)
	got := sub.events()
	if len(got) != 1 || !strings.HasPrefix(got[0].header.Get("Content-Type"), "application/cloudevents+json") {
		t.Fatalf("got %d requests, content type %q; want one structured", len(got), got[0].header.Get("Content-Type"))
	}
}
