package jaeger_test

import (
	"context"
	"testing"
	"time"

	"go.opentelemetry.io/otel"

	"github.com/scoreflow/scoreflow/harness/jaeger"
	"github.com/scoreflow/scoreflow/pkg/tracing"
)

// A span a function exports (pkg/tracing, OTLP over HTTP) is read back from Jaeger by its trace:
// its service, its name, its parent and its duration.
func TestExportedSpansReadBack(t *testing.T) {
	j, err := jaeger.Start(1000)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(j.Stop)
	prev := otel.GetTracerProvider()
	t.Cleanup(func() { otel.SetTracerProvider(prev) })
	shutdown, err := tracing.Start(context.Background(), tracing.Config{Protocol: tracing.ProtocolHTTPProtobuf, Endpoint: j.OTLPEndpoint, SamplingRate: 1}, "score-writer", "test")
	if err != nil {
		t.Fatal(err)
	}
	ctx, parent := tracing.Tracer().Start(context.Background(), "receive io.scoreflow.score.updated")
	_, child := tracing.Tracer().Start(ctx, "hub write AddOnPlacementScore")
	time.Sleep(20 * time.Millisecond)
	child.End()
	parent.End()
	sctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := shutdown(sctx); err != nil {
		t.Fatal(err)
	}
	id := parent.SpanContext().TraceID().String()
	var spans []jaeger.Span
	for deadline := time.Now().Add(30 * time.Second); len(spans) < 2; time.Sleep(100 * time.Millisecond) {
		if spans, err = j.Trace(context.Background(), id); err != nil {
			t.Fatal(err)
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s holds %v after 30s\n%s", id, spans, j.Output())
		}
	}
	if spans[0].Name != "receive io.scoreflow.score.updated" || spans[1].Name != "hub write AddOnPlacementScore" ||
		spans[0].Service != "score-writer" || spans[1].ParentID != spans[0].SpanID || spans[1].Duration < 20*time.Millisecond {
		t.Errorf("spans %+v, want the receive span, then the write under it, of score-writer, 20ms or more", spans)
	}
	if spans, err := j.Trace(context.Background(), "0123456789abcdef0123456789abcdef"); err != nil || len(spans) != 0 {
		t.Errorf("an unknown trace: %v, %v; want none and no error", spans, err)
	}
}
