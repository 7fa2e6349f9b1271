package tracing

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"go.opentelemetry.io/otel"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	"go.opentelemetry.io/otel/sdk/trace/tracetest"
	"go.opentelemetry.io/otel/trace"
	collectortrace "go.opentelemetry.io/proto/otlp/collector/trace/v1"
	"google.golang.org/protobuf/proto"
)

const (
	traceID  = "4bf92f3577b34da6a3ce929d0e0e4736"
	parentID = "00f067aa0ba902b7"
)

// record makes the global tracer provider record into a SpanRecorder for the test.
func record(t *testing.T) *tracetest.SpanRecorder {
	t.Helper()
	if _, err := Start(context.Background(), Config{Protocol: ProtocolNone}, "test", "dev"); err != nil {
		t.Fatal(err)
	}
	rec := tracetest.NewSpanRecorder()
	prev := otel.GetTracerProvider()
	otel.SetTracerProvider(sdktrace.NewTracerProvider(sdktrace.WithSpanProcessor(rec),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.NeverSample()))))
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	return rec
}

// A request that carries Knative's traceparent is served in a span of that trace, child of the
// caller's span, named after the event; what the function sends from there carries the same
// trace on, as a child of that span. Probes and metrics are not traced, and a caller cannot put
// what it likes into a span's name.
func TestHandlerContinuesTheTrace(t *testing.T) {
	rec := record(t)
	var sent http.Header
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent = r.Header.Clone() }))
	defer sink.Close()
	client := &http.Client{Transport: Transport(http.DefaultTransport)}
	srv := httptest.NewServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, sink.URL, nil)
		resp, err := client.Do(req)
		if err != nil {
			t.Error(err)
			return
		}
		resp.Body.Close()
	})))
	defer srv.Close()
	post := func(path string, h map[string]string) {
		req, _ := http.NewRequest(http.MethodPost, srv.URL+path, strings.NewReader("{}"))
		for k, v := range h {
			req.Header.Set(k, v)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
	}
	post("/", map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01", "Ce-Type": "io.scoreflow.score.updated", "Ce-Id": "e1", "Ce-Source": "scoreflow/test"})

	spans := rec.Ended()
	var server, client2 sdktrace.ReadOnlySpan
	for _, s := range spans {
		switch s.SpanKind() {
		case trace.SpanKindServer:
			server = s
		case trace.SpanKindClient:
			client2 = s
		}
	}
	if server == nil || client2 == nil {
		t.Fatalf("spans %v, want a server and a client span", names(spans))
	}
	if server.SpanContext().TraceID().String() != traceID || server.Parent().SpanID().String() != parentID || server.Name() != "receive io.scoreflow.score.updated" {
		t.Errorf("server span %q in trace %s, parent %s; want receive io.scoreflow.score.updated in %s under %s",
			server.Name(), server.SpanContext().TraceID(), server.Parent().SpanID(), traceID, parentID)
	}
	attrs := map[string]string{}
	for _, a := range server.Attributes() {
		attrs[string(a.Key)] = a.Value.Emit()
	}
	if attrs["cloudevents.event_id"] != "e1" || attrs["cloudevents.event_source"] != "scoreflow/test" {
		t.Errorf("server span attributes %v, want the event's id and source", attrs)
	}
	if client2.Parent().SpanID() != server.SpanContext().SpanID() || !strings.Contains(sent.Get("traceparent"), traceID+"-"+client2.SpanContext().SpanID().String()) {
		t.Errorf("the request sent from the handler: span parent %s, traceparent %q; want under %s, in trace %s", client2.Parent().SpanID(), sent.Get("traceparent"), server.SpanContext().SpanID(), traceID)
	}

	n := len(rec.Ended())
	post("/healthz", map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"})
	post("/metrics", map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01"})
	if len(rec.Ended()) != n {
		t.Errorf("probes and metrics were traced: %v", names(rec.Ended()[n:]))
	}
	post("/", map[string]string{"traceparent": "00-" + traceID + "-" + parentID + "-01", "Ce-Type": "evil\ttype " + strings.Repeat("x", 200)})
	for _, s := range rec.Ended()[n:] {
		if s.SpanKind() == trace.SpanKindServer && s.Name() != "receive" {
			t.Errorf("a caller's bad Ce-Type named a span %q", s.Name())
		}
	}
}

// A caller that did not sample its trace is not sampled here either, and the trace still goes on.
func TestUnsampledCallerStaysUnsampled(t *testing.T) {
	rec := record(t)
	var sent string
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { sent = r.Header.Get("traceparent") }))
	defer sink.Close()
	client := &http.Client{Transport: Transport(http.DefaultTransport)}
	srv := httptest.NewServer(Handler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		req, _ := http.NewRequestWithContext(r.Context(), http.MethodPost, sink.URL, nil)
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
		}
	})))
	defer srv.Close()
	req, _ := http.NewRequest(http.MethodPost, srv.URL, nil)
	req.Header.Set("traceparent", "00-"+traceID+"-"+parentID+"-00")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if n := len(rec.Ended()); n != 0 {
		t.Errorf("%d spans recorded of an unsampled trace", n)
	}
	if !strings.HasPrefix(sent, "00-"+traceID+"-") || !strings.HasSuffix(sent, "-00") {
		t.Errorf("traceparent sent on %q, want trace %s, unsampled", sent, traceID)
	}
}

// Start with http/protobuf exports the spans, as OTLP over HTTP, to the endpoint, under the
// function's service name; shutdown sends what is left.
func TestStartExportsOverOTLP(t *testing.T) {
	var mu sync.Mutex
	var got []*collectortrace.ExportTraceServiceRequest
	otlp := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		var req collectortrace.ExportTraceServiceRequest
		if r.URL.Path != "/v1/traces" || proto.Unmarshal(body, &req) != nil {
			http.Error(w, "not OTLP", http.StatusBadRequest)
			return
		}
		mu.Lock()
		got = append(got, &req)
		mu.Unlock()
		w.Header().Set("Content-Type", "application/x-protobuf")
	}))
	defer otlp.Close()
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	shutdown, err := Start(context.Background(), Config{Protocol: ProtocolHTTPProtobuf, Endpoint: otlp.URL + "/v1/traces", SamplingRate: 1}, "score-writer", "v1")
	if err != nil {
		t.Fatal(err)
	}
	_, span := Tracer().Start(context.Background(), "hub write")
	span.End()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(ctx); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	var service, name string
	for _, req := range got {
		for _, rs := range req.ResourceSpans {
			for _, a := range rs.Resource.Attributes {
				if a.Key == "service.name" {
					service = a.Value.GetStringValue()
				}
			}
			for _, ss := range rs.ScopeSpans {
				for _, s := range ss.Spans {
					name = s.Name
				}
			}
		}
	}
	if service != "score-writer" || name != "hub write" {
		t.Errorf("exported span %q of service %q, want hub write of score-writer", name, service)
	}
}

func TestConfigValidate(t *testing.T) {
	for _, c := range []Config{{Protocol: "grpc", Endpoint: "x"}, {Protocol: ProtocolHTTPProtobuf}, {Protocol: ProtocolNone, SamplingRate: 2}, {Protocol: ""}} {
		if c.Validate() == nil {
			t.Errorf("%+v passed", c)
		}
	}
	if err := (&Config{Protocol: ProtocolHTTPProtobuf, Endpoint: "http://x:4318/v1/traces", SamplingRate: 0.5}).Validate(); err != nil {
		t.Error(err)
	}
}

func names(spans []sdktrace.ReadOnlySpan) []string {
	var out []string
	for _, s := range spans {
		out = append(out, s.Name())
	}
	return out
}
