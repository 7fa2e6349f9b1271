// Package tracing joins a function to the trace Knative Eventing propagates and exports its spans
// over OTLP, configured as Knative's own components are (config-observability's tracing-protocol,
// tracing-endpoint and tracing-sampling-rate; here the flags --tracing-protocol,
// --tracing-endpoint and --tracing-sampling-rate, or TRACING_PROTOCOL, TRACING_ENDPOINT and
// TRACING_SAMPLING_RATE), and, as there, the standard OTEL_EXPORTER_OTLP_ENDPOINT (or
// OTEL_EXPORTER_OTLP_TRACES_ENDPOINT) and OTEL_TRACES_SAMPLER_ARG override the endpoint and rate.
//
// The broker ingress, the channel dispatcher and the trigger filter pass the W3C traceparent
// header on; Handler continues that trace in a function (or starts one for an event that carries
// none), Transport passes it on to what a function calls (its sink, Prometheus, the hub). The
// trace is continued even with export off (protocol none): a function then records nothing of
// its own but the hops after it stay in the caller's trace.
//
// Sampling follows the caller: a span whose parent was sampled is sampled, one whose parent was
// not is not; a trace that starts here (an event without traceparent, the metric-watcher's poll)
// is sampled at the rate. (Knative's components, at rate 1, sample everything whatever the
// parent says.)
package tracing

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"strconv"
	"strings"

	"go.opentelemetry.io/contrib/instrumentation/net/http/otelhttp"
	"go.opentelemetry.io/otel"
	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/exporters/otlp/otlptrace/otlptracehttp"
	"go.opentelemetry.io/otel/propagation"
	"go.opentelemetry.io/otel/sdk/resource"
	sdktrace "go.opentelemetry.io/otel/sdk/trace"
	semconv "go.opentelemetry.io/otel/semconv/v1.41.0"
	"go.opentelemetry.io/otel/trace"
)

// Protocols, as Knative's config-observability names them. gRPC is left out: its exporter would
// bring gRPC into every function for what OTLP over HTTP does as well.
const (
	ProtocolNone         = "none"
	ProtocolHTTPProtobuf = "http/protobuf"
)

// Config is how spans are exported.
type Config struct {
	// Protocol is none (export nothing) or http/protobuf (OTLP over HTTP).
	Protocol string
	// Endpoint is the OTLP endpoint's URL, e.g. http://jaeger-collector.observability:4318/v1/traces.
	Endpoint string
	// SamplingRate is the share of the traces that start here that are sampled, 0 to 1.
	SamplingRate float64
}

// RegisterFlags registers --tracing-protocol, --tracing-endpoint and --tracing-sampling-rate on fs.
func RegisterFlags(fs *flag.FlagSet) *Config {
	c := &Config{}
	fs.StringVar(&c.Protocol, "tracing-protocol", ProtocolNone, "how spans are exported, as Knative's config-observability says it: none, or http/protobuf (OTLP over HTTP to --tracing-endpoint). Even with none, the trace a request carries (traceparent) is passed on")
	fs.StringVar(&c.Endpoint, "tracing-endpoint", "", "OTLP endpoint spans are exported to, e.g. http://jaeger-collector.observability:4318/v1/traces (OTEL_EXPORTER_OTLP_ENDPOINT or OTEL_EXPORTER_OTLP_TRACES_ENDPOINT overrides it)")
	fs.Float64Var(&c.SamplingRate, "tracing-sampling-rate", 0, "share of the traces starting in this function that are sampled, 0 to 1 (OTEL_TRACES_SAMPLER_ARG overrides it); a trace a caller started is sampled as the caller decided")
	return c
}

// Validate checks the configuration as Knative checks config-observability's.
func (c *Config) Validate() error {
	switch c.Protocol {
	case ProtocolHTTPProtobuf:
		if c.Endpoint == "" && endpointFromEnv() == "" {
			return fmt.Errorf("--tracing-endpoint is required with --tracing-protocol %s", c.Protocol)
		}
	case ProtocolNone:
	default:
		return fmt.Errorf("--tracing-protocol %q: want %s or %s", c.Protocol, ProtocolNone, ProtocolHTTPProtobuf)
	}
	if !(c.SamplingRate >= 0 && c.SamplingRate <= 1) {
		return fmt.Errorf("--tracing-sampling-rate %v: want 0 to 1", c.SamplingRate)
	}
	return nil
}

func endpointFromEnv() string {
	if v := os.Getenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT"); v != "" {
		return v
	}
	return os.Getenv("OTEL_EXPORTER_OTLP_ENDPOINT")
}

// Start installs the W3C trace context propagator and, unless the protocol is none, a tracer
// provider exporting the spans of service (its service.name; OTEL_SERVICE_NAME overrides it) in
// batches. shutdown exports what is left; call it before the process exits.
func Start(ctx context.Context, c Config, service, version string) (shutdown func(context.Context) error, err error) {
	if err := c.Validate(); err != nil {
		return nil, err
	}
	otel.SetTextMapPropagator(propagation.NewCompositeTextMapPropagator(propagation.TraceContext{}, propagation.Baggage{}))
	if c.Protocol == ProtocolNone {
		return func(context.Context) error { return nil }, nil
	}
	var opts []otlptracehttp.Option
	if endpointFromEnv() == "" {
		opts = append(opts, otlptracehttp.WithEndpointURL(c.Endpoint))
	}
	exp, err := otlptracehttp.New(ctx, opts...)
	if err != nil {
		return nil, fmt.Errorf("tracing exporter: %w", err)
	}
	rate := c.SamplingRate
	if v := os.Getenv("OTEL_TRACES_SAMPLER_ARG"); v != "" {
		if rate, err = strconv.ParseFloat(v, 64); err != nil || rate < 0 || rate > 1 {
			return nil, errors.Join(fmt.Errorf("OTEL_TRACES_SAMPLER_ARG %q: want 0 to 1", v), err)
		}
	}
	res, err := resource.Merge(resource.Default(), resource.NewWithAttributes(semconv.SchemaURL,
		semconv.ServiceName(service), semconv.ServiceVersion(version)))
	if err != nil {
		return nil, err
	}
	if res, err = resource.Merge(res, envResource()); err != nil {
		return nil, err
	}
	tp := sdktrace.NewTracerProvider(
		sdktrace.WithBatcher(exp),
		sdktrace.WithSampler(sdktrace.ParentBased(sdktrace.TraceIDRatioBased(rate))),
		sdktrace.WithResource(res),
	)
	otel.SetTracerProvider(tp)
	return tp.Shutdown, nil
}

// envResource is what OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES say, which win.
func envResource() *resource.Resource {
	r, err := resource.New(context.Background(), resource.WithFromEnv())
	if err != nil {
		return resource.Empty()
	}
	return r
}

// Tracer makes scoreflow's own spans (a poll, a hub write).
func Tracer() trace.Tracer { return otel.Tracer("github.com/scoreflow/scoreflow") }

// Handler continues the trace of each request to h (or starts one) in a server span named after
// the CloudEvent it carries in binary mode ("receive io.scoreflow.score.updated"), with the
// event's type, id and source as attributes. Health, readiness and metrics requests are not
// traced.
func Handler(h http.Handler) http.Handler {
	attributed := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if span := trace.SpanFromContext(r.Context()); span.IsRecording() {
			span.SetAttributes(
				attribute.String("cloudevents.event_type", headerValue(r, "Ce-Type")),
				attribute.String("cloudevents.event_id", headerValue(r, "Ce-Id")),
				attribute.String("cloudevents.event_source", headerValue(r, "Ce-Source")))
		}
		h.ServeHTTP(w, r)
	})
	return otelhttp.NewHandler(attributed, "receive",
		otelhttp.WithSpanNameFormatter(func(op string, r *http.Request) string {
			if t := headerValue(r, "Ce-Type"); t != "" {
				return op + " " + t
			}
			return op
		}),
		otelhttp.WithFilter(func(r *http.Request) bool {
			switch r.URL.Path {
			case "/healthz", "/readyz", "/metrics":
				return false
			}
			return true
		}),
	)
}

// Transport makes each request through rt that is made within a trace a client span of it, and
// passes the trace on (traceparent). A request outside any trace (an informer's list and watch)
// starts none.
func Transport(rt http.RoundTripper) http.RoundTripper {
	return otelhttp.NewTransport(rt, otelhttp.WithFilter(func(r *http.Request) bool {
		return trace.SpanContextFromContext(r.Context()).IsValid()
	}))
}

// headerValue is a CloudEvents attribute from a binary-mode header, cut and checked so that what a
// caller sends cannot make a span name or attribute of any length or content.
func headerValue(r *http.Request, name string) string {
	v := r.Header.Get(name)
	if len(v) > 128 {
		v = v[:128]
	}
	if strings.IndexFunc(v, func(c rune) bool { return c < 0x21 || c > 0x7e }) >= 0 {
		return ""
	}
	return v
}
