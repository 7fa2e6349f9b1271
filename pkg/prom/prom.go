// Package prom is scoreflow's access to Prometheus (or anything serving its HTTP API: Thanos,
// VictoriaMetrics): instant and range queries behind a small interface, a bearer token read from a
// mounted Secret on every request, a custom CA, a per-query timeout, and errors sorted into
// "Prometheus unreachable or overloaded" (transient: retry) and "bad query" (permanent: fix it).
//
// It wraps github.com/prometheus/client_golang/api/prometheus/v1 at v1.24.1. That client's Query
// signature changed in v1.25, so scorers see only Querier and the pin stays in this package.
package prom

import (
	"bytes"
	"context"
	"crypto/tls"
	"crypto/x509"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/tracing"
)

// Querier runs PromQL. Results are typed: a query whose result is not an instant vector (or, for a
// range query, a matrix) is a bad query.
type Querier interface {
	// Query evaluates query at one instant.
	Query(ctx context.Context, query string, at time.Time) (model.Vector, error)
	// QueryRange evaluates query at start, start+step, ... up to end.
	QueryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) (model.Matrix, error)
}

// Config says how to reach Prometheus.
type Config struct {
	// URL is the server's base URL, e.g. http://prometheus.monitoring.svc:9090 (no /api/v1).
	URL string
	// BearerTokenFile, when set, is read on every request, so a rotated Secret is picked up
	// without a restart. Its content is never logged.
	BearerTokenFile string
	// CAFile, when set, is a PEM bundle that replaces the system roots for https URLs. It is read
	// once, at start.
	CAFile string
	// Timeout bounds each query; it is also sent to Prometheus so the server stops work too.
	Timeout time.Duration
	// Transport, when set, carries the requests instead of an http.Transport of its own (CAFile
	// then does not apply): benchmarks answer from canned bodies in-process with it.
	Transport http.RoundTripper
}

// LogValue shows the configuration without secrets: the URL without its password, and whether a
// token file is used (its path is not secret, its content is).
func (c Config) LogValue() slog.Value {
	return slog.GroupValue(
		slog.String("url", redact(c.URL)),
		slog.String("tokenFile", c.BearerTokenFile),
		slog.String("caFile", c.CAFile),
		slog.Duration("timeout", c.Timeout),
	)
}

// Validate checks the configuration, naming the flag at fault.
func (c Config) Validate() error {
	if c.URL == "" {
		return errors.New("--prometheus-url is required")
	}
	u, err := url.Parse(c.URL)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("--prometheus-url %q is not an http(s) URL", redact(c.URL))
	}
	if c.Timeout <= 0 {
		return fmt.Errorf("--prometheus-timeout must be positive, not %v", c.Timeout)
	}
	return nil
}

// redact hides a password in a URL (https://user:pass@host); an unparsable URL is not shown at all.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	return u.Redacted()
}

// Client is a Querier over the Prometheus HTTP API.
type Client struct {
	http    api.Client
	hc      *http.Client
	timeout time.Duration
	log     *slog.Logger
	seconds *prometheus.HistogramVec
}

// New builds a client. reg, when not nil, receives the query latency histogram.
func New(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*Client, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if cfg.CAFile != "" {
		pem, err := os.ReadFile(cfg.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--prometheus-ca-file: %w", err)
		}
		pool := x509.NewCertPool()
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--prometheus-ca-file %s holds no PEM certificate", cfg.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	var rt http.RoundTripper = tr
	if cfg.Transport != nil {
		rt = cfg.Transport
	}
	if cfg.BearerTokenFile != "" {
		rt = &tokenFile{path: cfg.BearerTokenFile, next: rt}
	}
	// A query made within a trace (a scorer answering an event) is a span of it.
	hc := &http.Client{Transport: tracing.Transport(rt), CheckRedirect: sameOrigin}
	c, err := api.NewClient(api.Config{Address: cfg.URL, Client: hc})
	if err != nil {
		return nil, fmt.Errorf("--prometheus-url: %w", err)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	cl := &Client{http: c, hc: hc, timeout: cfg.Timeout, log: log}
	cl.seconds = prometheus.NewHistogramVec(prometheus.HistogramOpts{
		Name:    "scoreflow_prometheus_query_seconds",
		Help:    "Prometheus queries by kind (instant, range) and outcome (ok, unavailable, bad_query).",
		Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
	}, []string{"kind", "outcome"})
	if reg != nil {
		if err := reg.Register(cl.seconds); err != nil {
			return nil, err
		}
	}
	log.Info("prometheus client", "prometheus", cfg)
	return cl, nil
}

// Query implements Querier.
func (c *Client) Query(ctx context.Context, query string, at time.Time) (model.Vector, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	start := time.Now()
	v, warnings, err := v1.NewAPI(c.http).Query(ctx, query, at, v1.WithTimeout(c.timeout))
	vec, err := result[model.Vector](query, v, err)
	c.done("instant", query, start, warnings, err)
	return vec, err
}

// QueryRange implements Querier. A plain matrix answer is read by decodeMatrix; any other
// answer by client_golang.
func (c *Client) QueryRange(ctx context.Context, query string, start, end time.Time, step time.Duration) (model.Matrix, error) {
	ctx, cancel := context.WithTimeout(ctx, c.timeout)
	defer cancel()
	began := time.Now()
	fast := &matrixAnswers{Client: c.http, hc: c.hc}
	v, warnings, err := v1.NewAPI(fast).QueryRange(ctx, query, v1.Range{Start: start, End: end, Step: step}, v1.WithTimeout(c.timeout))
	if err == nil && fast.got != nil {
		v = fast.got
	}
	m, err := result[model.Matrix](query, v, err)
	c.done("range", query, began, warnings, err)
	return m, err
}

func (c *Client) done(kind, query string, start time.Time, warnings v1.Warnings, err error) {
	outcome := "ok"
	if err != nil {
		outcome = map[Kind]string{Unavailable: "unavailable", BadQuery: "bad_query"}[KindOf(err)]
	}
	c.seconds.WithLabelValues(kind, outcome).Observe(time.Since(start).Seconds())
	if len(warnings) > 0 {
		// Warnings (say, a Thanos store that did not answer) mean a partial result: worth seeing.
		c.log.Warn("prometheus warnings", "query", query, "warnings", []string(warnings))
	}
}

// matrixAnswers is the HTTP client under client_golang's API for one range query: requests,
// retries and errors stay client_golang's, but a successful answer decodeMatrix takes is decoded
// there, and client_golang is handed an empty matrix with the answer's warnings instead. An
// answer decodeMatrix does not take reaches client_golang as it came.
type matrixAnswers struct {
	api.Client // for URL: Do is below
	hc         *http.Client
	got        model.Matrix
}

func (f *matrixAnswers) Do(ctx context.Context, req *http.Request) (*http.Response, []byte, error) {
	resp, body, err := do(ctx, f.hc, req)
	if err != nil || resp.StatusCode/100 != 2 || resp.StatusCode == http.StatusNoContent {
		return resp, body, err
	}
	m, warnings, ok := decodeMatrix(body)
	if !ok {
		return resp, body, err
	}
	stub := map[string]any{"status": "success", "data": map[string]any{"resultType": "matrix", "result": []any{}}}
	if warnings != nil {
		stub["warnings"] = warnings
	}
	b, merr := json.Marshal(stub)
	if merr != nil {
		return resp, body, err // what was decoded is what client_golang reads from body
	}
	f.got = m
	return resp, b, nil
}

// do is client_golang's api.Client Do (the request bound to ctx; the body read whole, or ctx's
// error when ctx ends first), reading into a buffer sized by Content-Length when the answer
// declares it: client_golang doubles a buffer through the answer, which for a fleet's range
// answer of 16-22 MB holds twice its size at the end (docs/performance.md).
func do(ctx context.Context, hc *http.Client, req *http.Request) (*http.Response, []byte, error) {
	if ctx != nil {
		req = req.WithContext(ctx)
	}
	resp, err := hc.Do(req)
	if err != nil {
		return nil, nil, err
	}
	var body []byte
	var readErr error
	done := make(chan struct{})
	go func() {
		defer close(done)
		var buf bytes.Buffer
		if n := resp.ContentLength; n > 0 && n <= MaxAnswerPrealloc {
			buf.Grow(int(n) + bytes.MinRead)
		}
		_, readErr = buf.ReadFrom(resp.Body)
		body = buf.Bytes()
	}()
	select {
	case <-ctx.Done():
		_ = resp.Body.Close()
		return resp, nil, ctx.Err()
	case <-done:
		_ = resp.Body.Close()
		return resp, body, readErr
	}
}

// MaxAnswerPrealloc bounds the buffer taken up front for an answer's declared length: a larger
// answer grows its buffer as it arrives.
const MaxAnswerPrealloc = 256 << 20

// result types a query's answer, or classifies its error.
func result[T model.Vector | model.Matrix](query string, v model.Value, err error) (T, error) {
	if err != nil {
		return nil, classify(query, err)
	}
	t, ok := v.(T)
	if !ok {
		var want T
		return nil, &Error{Kind: BadQuery, Query: query, Err: fmt.Errorf("the result is a %s, want a %s", typeName(v), typeName(any(want).(model.Value)))}
	}
	return t, nil
}

func typeName(v model.Value) string {
	switch v.(type) {
	case model.Vector:
		return "vector"
	case model.Matrix:
		return "matrix"
	case *model.Scalar:
		return "scalar"
	case *model.String:
		return "string"
	}
	return fmt.Sprintf("%T", v)
}

// sameOrigin follows a redirect only within the server the client was pointed at: tokenFile adds
// the token at the transport, where the client's own redirect handling cannot strip it, so a
// redirect to another scheme, host or port would carry it there.
func sameOrigin(req *http.Request, via []*http.Request) error {
	if len(via) >= 10 {
		return errors.New("stopped after 10 redirects")
	}
	if first := via[0].URL; req.URL.Scheme != first.Scheme || req.URL.Host != first.Host {
		return fmt.Errorf("redirect to %s://%s not followed: only the Prometheus configured is queried", req.URL.Scheme, req.URL.Host)
	}
	return nil
}

// tokenFile adds "Authorization: Bearer <token>" from a file read on every request: a Secret
// mounted as a volume is updated in place when it rotates.
type tokenFile struct {
	path string
	next http.RoundTripper
}

func (t *tokenFile) RoundTrip(req *http.Request) (*http.Response, error) {
	b, err := os.ReadFile(t.path)
	if err != nil {
		closeBody(req)
		// The error names the path, never the content.
		return nil, fmt.Errorf("bearer token file: %w", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		closeBody(req)
		return nil, fmt.Errorf("bearer token file %s is empty", t.path)
	}
	req = req.Clone(req.Context()) // a RoundTripper must not modify its request
	req.Header.Set("Authorization", "Bearer "+token)
	return t.next.RoundTrip(req)
}

// closeBody honours the RoundTripper contract: the body is closed even when no request is sent.
func closeBody(req *http.Request) {
	if req.Body != nil {
		_ = req.Body.Close()
	}
}
