package broker

import (
	"context"
	"strings"
	"testing"

	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

func TestResolve(t *testing.T) {
	objs := decode(t, oneTrigger("", ""))
	s, err := New(Config{Brokers: objs.brokers, Triggers: objs.triggers, Resolver: Services{
		"scoreflow/score-writer": "http://127.0.0.1:8081",
		"other/player":           "http://127.0.0.1:8082/base/",
	}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Shutdown(context.Background())
	s.base = "http://127.0.0.1:9000" // as Start would set it
	svc := func(ns, name string) *duckv1.KReference {
		return &duckv1.KReference{APIVersion: "serving.knative.dev/v1", Kind: "Service", Namespace: ns, Name: name}
	}
	uri := func(u string) *apis.URL { p, _ := apis.ParseURL(u); return p }
	tests := []struct {
		name    string
		dest    duckv1.Destination
		want    string
		wantErr string
	}{
		{"service in the naming object's namespace", duckv1.Destination{Ref: svc("", "score-writer")}, "http://127.0.0.1:8081", ""},
		{"service in another namespace", duckv1.Destination{Ref: svc("other", "player")}, "http://127.0.0.1:8082/base/", ""},
		{"relative uri joins the ref", duckv1.Destination{Ref: svc("other", "player"), URI: uri("events")}, "http://127.0.0.1:8082/base/events", ""},
		{"absolute uri alone", duckv1.Destination{URI: uri("http://example.test/x")}, "http://example.test/x", ""},
		{"own broker", duckv1.Destination{Ref: &duckv1.KReference{APIVersion: "eventing.knative.dev/v1", Kind: "Broker", Name: "default"}}, "http://127.0.0.1:9000/scoreflow/default", ""},
		{"unknown service", duckv1.Destination{Ref: svc("", "nope")}, "", "scoreflow/nope has no local address"},
		{"absolute uri with a ref", duckv1.Destination{Ref: svc("", "score-writer"), URI: uri("http://x/")}, "", "must be relative"},
		{"other kinds", duckv1.Destination{Ref: &duckv1.KReference{Kind: "InMemoryChannel", Name: "c"}}, "", "cannot resolve InMemoryChannel scoreflow/c"},
		{"a broker this server does not have", duckv1.Destination{Ref: &duckv1.KReference{APIVersion: "eventing.knative.dev/v1", Kind: "Broker", Name: "kafka"}}, "", "cannot resolve Broker scoreflow/kafka"},
		{"relative uri alone", duckv1.Destination{URI: uri("/x")}, "", "absolute uri"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, err := s.resolve(context.Background(), "scoreflow", tt.dest)
			switch {
			case tt.wantErr != "" && (err == nil || !strings.Contains(err.Error(), tt.wantErr)):
				t.Errorf("resolve = %v, %v; want error containing %q", got, err, tt.wantErr)
			case tt.wantErr == "" && (err != nil || got.String() != tt.want):
				t.Errorf("resolve = %v, %v; want %s", got, err, tt.want)
			}
		})
	}
}

// TestUnresolvedSubscriber: a subscriber without an address fails like Knative's filter does for
// a Trigger without subscriber URI (404, retried), and the dead-letter event names where the
// subscriber would live in a cluster.
func TestUnresolvedSubscriber(t *testing.T) {
	dls := newSink(t, nil)
	objs := decode(t, oneTrigger("", withDLS))
	s := start(t, Config{Brokers: objs.brokers, Triggers: objs.triggers, Resolver: Services{"scoreflow/dls": dls.URL}})
	post(t, s.URL("scoreflow", "default"), newEvent("e1", "io.scoreflow.test", nil))
	drain(t, s)
	got := dls.events()
	if len(got) != 1 {
		t.Fatalf("dead-letter sink got %d events", len(got))
	}
	ext := got[0].event.Extensions()
	if ext["knativeerrorcode"] != "404" || ext["knativeerrordest"] != "http://subscriber.scoreflow.svc.cluster.local" {
		t.Errorf("extensions %v, want 404 for subscriber.scoreflow.svc.cluster.local", ext)
	}
}
