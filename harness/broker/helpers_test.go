package broker

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"runtime/pprof"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/functest"
)

// received is one request a sink got.
type received struct {
	event  event.Event
	header http.Header
	path   string
	at     time.Time
}

// answer is how a sink responds; the zero value is an empty 202.
type answer struct {
	status int
	reply  *event.Event
	body   string
	hang   bool // wait until the request is cancelled
	delay  time.Duration
}

// sink is a real HTTP subscriber that records what it gets.
type sink struct {
	*httptest.Server
	respond func(n int, r received) answer // n counts from 1
	mu      sync.Mutex
	got     []received
	notify  chan struct{}
}

func newSink(t testing.TB, respond func(n int, r received) answer) *sink {
	s := &sink{respond: respond, notify: make(chan struct{}, 1)}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *sink) serve(w http.ResponseWriter, r *http.Request) {
	msg := cehttp.NewMessageFromHttpRequest(r)
	e, err := binding.ToEvent(r.Context(), msg)
	if err != nil {
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	rec := received{event: *e, header: r.Header.Clone(), path: r.URL.Path, at: time.Now()}
	s.mu.Lock()
	s.got = append(s.got, rec)
	n := len(s.got)
	s.mu.Unlock()
	select {
	case s.notify <- struct{}{}:
	default:
	}
	a := answer{}
	if s.respond != nil {
		a = s.respond(n, rec)
	}
	if a.hang {
		<-r.Context().Done()
		return
	}
	if a.delay > 0 {
		select {
		case <-time.After(a.delay):
		case <-r.Context().Done():
			return
		}
	}
	status := a.status
	if status == 0 {
		status = http.StatusAccepted
		if a.reply != nil {
			status = http.StatusOK
		}
	}
	if a.reply != nil {
		_ = cehttp.WriteResponseWriter(r.Context(), binding.ToMessage(a.reply), status, w)
		return
	}
	w.WriteHeader(status)
	_, _ = w.Write([]byte(a.body))
}

func (s *sink) events() []received {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]received(nil), s.got...)
}

// waitFor waits until the sink has at least n requests.
func (s *sink) waitFor(t testing.TB, n int, within time.Duration) []received {
	t.Helper()
	deadline := time.After(within)
	for {
		if got := s.events(); len(got) >= n {
			return got
		}
		select {
		case <-s.notify:
		case <-deadline:
			t.Fatalf("sink got %d requests within %s, want %d", len(s.events()), within, n)
		}
	}
}

// recorder collects the server's records.
type recorder struct {
	mu   sync.Mutex
	recs []Record
}

func (r *recorder) add(rec Record) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.recs = append(r.recs, rec)
}

func (r *recorder) of(k Kind) []Record {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []Record
	for _, rec := range r.recs {
		if rec.Kind == k {
			out = append(out, rec)
		}
	}
	return out
}

// objects are decoded manifests.
type objects struct {
	brokers  []*eventingv1.Broker
	triggers []*eventingv1.Trigger
	pings    []*sourcesv1.PingSource
}

// decode reads multi-document YAML into typed Knative objects, as the manifests loader will.
func decode(t testing.TB, doc string) objects {
	t.Helper()
	var o objects
	for _, part := range strings.Split(doc, "\n---") {
		if strings.TrimSpace(part) == "" {
			continue
		}
		var meta struct{ Kind string }
		if err := yaml.Unmarshal([]byte(part), &meta); err != nil {
			t.Fatalf("decoding %q: %v", part, err)
		}
		var err error
		switch meta.Kind {
		case "Broker":
			b := &eventingv1.Broker{}
			err = yaml.UnmarshalStrict([]byte(part), b)
			o.brokers = append(o.brokers, b)
		case "Trigger":
			tr := &eventingv1.Trigger{}
			err = yaml.UnmarshalStrict([]byte(part), tr)
			o.triggers = append(o.triggers, tr)
		case "PingSource":
			p := &sourcesv1.PingSource{}
			err = yaml.UnmarshalStrict([]byte(part), p)
			o.pings = append(o.pings, p)
		default:
			t.Fatalf("unexpected kind %q in %q", meta.Kind, part)
		}
		if err != nil {
			t.Fatalf("decoding %s: %v", meta.Kind, err)
		}
	}
	return o
}

func decodeFile(t testing.TB, name string) objects {
	t.Helper()
	b, err := os.ReadFile(name)
	if err != nil {
		t.Fatal(err)
	}
	return decode(t, string(b))
}

// start builds and starts a server on a loopback port; the test's cleanup shuts it down.
func start(t testing.TB, cfg Config) *Server {
	t.Helper()
	if cfg.Log == nil {
		cfg.Log = slog.New(slog.NewTextHandler(testWriter{t}, &slog.HandlerOptions{Level: slog.LevelWarn}))
	}
	s, err := New(cfg)
	if err != nil {
		t.Fatalf("New: %v", err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Start(ln); err != nil {
		t.Fatalf("Start: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		_ = s.Shutdown(ctx)
	})
	return s
}

// drain shuts s down and waits for every delivery, failing the test if any was dropped.
func drain(t testing.TB, s *Server) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := s.Shutdown(ctx); err != nil {
		t.Fatalf("Shutdown: %v", err)
	}
}

type testWriter struct{ t testing.TB }

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Log(strings.TrimSpace(string(p)))
	return len(p), nil
}

var testClient = &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 64}, Timeout: 10 * time.Second}

func newEvent(id, typ string, ext map[string]any) event.Event {
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetType(typ)
	e.SetSource("scoreflow/test")
	for k, v := range ext {
		e.SetExtension(k, v)
	}
	_ = e.SetData(cloudevents.ApplicationJSON, map[string]string{"id": id})
	return e
}

// post sends e in binary mode with testClient, whose idle connections settleGoroutines closes,
// and returns the status.
func post(t testing.TB, url string, e event.Event) int {
	t.Helper()
	return do(t, functest.Request(t, url, e))
}

func postRaw(t testing.TB, method, url string, header map[string]string, body string) int {
	t.Helper()
	req, err := http.NewRequest(method, url, bytes.NewBufferString(body))
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	return do(t, req)
}

func do(t testing.TB, req *http.Request) int {
	t.Helper()
	resp, err := testClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", req.Method, req.URL, err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// settleGoroutines waits for the goroutine count to fall back to at most want, and dumps the
// stacks when it does not.
func settleGoroutines(t testing.TB, want int) {
	t.Helper()
	testClient.CloseIdleConnections()
	deadline := time.Now().Add(3 * time.Second)
	for runtime.NumGoroutine() > want {
		if time.Now().After(deadline) {
			var buf bytes.Buffer
			_ = pprof.Lookup("goroutine").WriteTo(&buf, 1)
			t.Fatalf("%d goroutines left, want at most %d:\n%s", runtime.NumGoroutine(), want, buf.String())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func ids(rs []received) []string {
	out := make([]string, len(rs))
	for i, r := range rs {
		out[i] = r.event.ID()
	}
	return out
}

func fmtYAML(format string, args ...any) string { return fmt.Sprintf(format, args...) }

func countGoroutines() int { return runtime.NumGoroutine() }
