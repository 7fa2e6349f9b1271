package broker

import (
	"bytes"
	"encoding/base64"
	"strconv"
	"strings"
	"testing"
)

const withDLS = `  delivery:
    retry: 1
    deadLetterSink: {ref: {apiVersion: serving.knative.dev/v1, kind: Service, name: dls}}`

// TestDeadLetterExtensions: the sink gets the original event plus knativeerrordest,
// knativeerrorcode and knativeerrordata (base64 of the failed answer, cut to 1024 characters
// that still decode). The long body is the case where Knative's own dispatcher panics.
func TestDeadLetterExtensions(t *testing.T) {
	tests := []struct {
		name     string
		status   int
		body     string
		wantData string // decoded
	}{
		{"short body", 500, `{"error":"hub unavailable"}`, `{"error":"hub unavailable"}`},
		{"empty body", 503, "", ""},
		{"long body is cut", 500, strings.Repeat("0123456789", 200), strings.Repeat("0123456789", 200)[:768]},
		{"permanent refusal", 422, "bad data", "bad data"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := newSink(t, func(int, received) answer { return answer{status: tt.status, body: tt.body} })
			dls := newSink(t, nil)
			objs := decode(t, oneTrigger("", withDLS))
			rec := &recorder{}
			s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, OnEvent: rec.add,
				Resolver: Services{"scoreflow/subscriber": sub.URL, "scoreflow/dls": dls.URL}})
			in := newEvent("orig-1", "io.scoreflow.score.updated", map[string]any{"cluster": "c1"})
			post(t, s.URL("scoreflow", "default"), in)
			drain(t, s)

			got := dls.events()
			if len(got) != 1 {
				t.Fatalf("dead-letter sink got %d events, want 1", len(got))
			}
			e := got[0].event
			if e.ID() != in.ID() || e.Type() != in.Type() || e.Source() != in.Source() || !bytes.Equal(e.Data(), in.Data()) {
				t.Errorf("dead-lettered %s/%s/%s %s, want the original event", e.Source(), e.ID(), e.Type(), e.Data())
			}
			ext := e.Extensions()
			if ext["cluster"] != "c1" {
				t.Errorf("original extension lost: %v", ext)
			}
			if ext["knativeerrordest"] != sub.URL {
				t.Errorf("knativeerrordest = %v, want %s", ext["knativeerrordest"], sub.URL)
			}
			if ext["knativeerrorcode"] != strconv.Itoa(tt.status) {
				t.Errorf("knativeerrorcode = %v, want %d", ext["knativeerrorcode"], tt.status)
			}
			raw, _ := ext["knativeerrordata"].(string)
			if len(raw) > 1024 {
				t.Errorf("knativeerrordata has %d characters, want at most 1024", len(raw))
			}
			data, err := base64.StdEncoding.DecodeString(raw)
			if err != nil || string(data) != tt.wantData {
				t.Errorf("knativeerrordata decodes to %q (%v), want %q", data, err, tt.wantData)
			}
			if dl := rec.of(KindDeadLettered); len(dl) != 1 || dl[0].Status != tt.status || dl[0].Target != dls.URL {
				t.Errorf("dead-lettered records %+v", dl)
			}
		})
	}
}

// TestDeadLetterStaleExtensions: an event dead-lettered once, then sent again, carries the new
// failure's extensions, not the old ones.
func TestDeadLetterStaleExtensions(t *testing.T) {
	sub := newSink(t, func(int, received) answer { return answer{status: 500, body: "new"} })
	dls := newSink(t, nil)
	objs := decode(t, oneTrigger("", withDLS))
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers,
		Resolver: Services{"scoreflow/subscriber": sub.URL, "scoreflow/dls": dls.URL}})
	post(t, s.URL("scoreflow", "default"), newEvent("again", "io.scoreflow.test", map[string]any{
		"knativeerrorcode": "418", "knativeerrordest": "http://old", "knativeerrordata": "b2xk",
	}))
	drain(t, s)
	got := dls.events()
	if len(got) != 1 {
		t.Fatalf("dead-letter sink got %d events", len(got))
	}
	if ext := got[0].event.Extensions(); ext["knativeerrorcode"] != "500" || ext["knativeerrordest"] != sub.URL || ext["knativeerrordata"] != "bmV3" {
		t.Errorf("extensions %v, want this failure's", ext)
	}
}

// TestDeadLetterFailures: without a sink, or with a failing one, the event is dropped with a
// reason, never silently.
func TestDeadLetterFailures(t *testing.T) {
	tests := []struct {
		name       string
		delivery   string
		dlsStatus  int
		wantReason string
	}{
		{"no sink", "  delivery:\n    retry: 1", 0, "no dead-letter sink"},
		{"sink fails", withDLS, 500, "dead-letter sink failed: HTTP 500"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sub := newSink(t, func(int, received) answer { return answer{status: 500} })
			dls := newSink(t, func(int, received) answer { return answer{status: tt.dlsStatus} })
			objs := decode(t, oneTrigger("", tt.delivery))
			rec := &recorder{}
			s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, OnEvent: rec.add,
				Resolver: Services{"scoreflow/subscriber": sub.URL, "scoreflow/dls": dls.URL}})
			post(t, s.URL("scoreflow", "default"), newEvent("lost", "io.scoreflow.test", nil))
			drain(t, s)
			d := rec.of(KindDropped)
			if len(d) != 1 || !strings.Contains(d[0].Reason, tt.wantReason) || d[0].ID != "lost" {
				t.Fatalf("dropped records %+v, want one for lost saying %q", d, tt.wantReason)
			}
			if len(rec.of(KindDeadLettered)) != 0 {
				t.Error("recorded as dead-lettered")
			}
		})
	}
}
