package prom_test

import (
	"bytes"
	"context"
	"encoding/pem"
	"flag"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
)

func newClient(t *testing.T, cfg prom.Config) *prom.Client {
	t.Helper()
	if cfg.Timeout == 0 {
		cfg.Timeout = 5 * time.Second
	}
	c, err := prom.New(cfg, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestRealPrometheus queries a real server fed exact samples, and checks how its refusals and its
// absence are classified.
func TestRealPrometheus(t *testing.T) {
	srv := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	srv.MustPush(t,
		promserver.Grid(map[string]string{"__name__": "load", "cluster": "c1"}, at, time.Minute, 1, 2, 3),
		promserver.Grid(map[string]string{"__name__": "load", "cluster": "c2"}, at, time.Minute, 10, 20, 30),
	)
	c := newClient(t, prom.Config{URL: srv.URL})
	ctx := context.Background()

	vec, err := c.Query(ctx, `load`, at)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]float64{}
	for _, s := range vec {
		got[string(s.Metric["cluster"])] = float64(s.Value)
	}
	if len(got) != 2 || got["c1"] != 3 || got["c2"] != 30 {
		t.Errorf("instant load at the last sample = %v, want c1=3 c2=30", got)
	}

	m, err := c.QueryRange(ctx, `load{cluster="c1"}`, at.Add(-2*time.Minute), at, time.Minute)
	if err != nil {
		t.Fatal(err)
	}
	if len(m) != 1 || len(m[0].Values) != 3 || m[0].Values[0].Value != 1 || m[0].Values[2].Value != 3 || !m[0].Values[2].Timestamp.Time().Equal(at) {
		t.Errorf("range of c1 = %v, want 1, 2, 3 ending at %v", m, at)
	}

	tests := []struct {
		name  string
		run   func() error
		kind  prom.Kind
		quote string // part of the message
	}{
		{"syntax error is 400 bad_data", func() error { _, err := c.Query(ctx, `sum(load`, at); return err }, prom.BadQuery, "parse error"},
		// 422 execution: the query met data it cannot combine. That depends on the series at
		// the time (duplicates during a rollout pass), so it is retried like an overload.
		{"many-to-many is 422 execution", func() error { _, err := c.Query(ctx, `load * on() load`, at); return err }, prom.Unavailable, "many-to-many"},
		{"scalar result", func() error { _, err := c.Query(ctx, `1 + 1`, at); return err }, prom.BadQuery, "scalar"},
		{"range vector from an instant query", func() error { _, err := c.Query(ctx, `load[2m]`, at); return err }, prom.BadQuery, "matrix"},
		{"range query of a range vector", func() error {
			_, err := c.QueryRange(ctx, `load[2m]`, at.Add(-time.Minute), at, time.Minute)
			return err
		}, prom.BadQuery, "range vector"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.run()
			if err == nil || prom.KindOf(err) != tt.kind || !strings.Contains(err.Error(), tt.quote) {
				t.Fatalf("err = %v, want %v mentioning %q", err, tt.kind, tt.quote)
			}
		})
	}

	srv.Stop()
	_, err = c.Query(ctx, `load`, at)
	if prom.KindOf(err) != prom.Unavailable || !strings.Contains(err.Error(), "connection refused") {
		t.Fatalf("stopped server: err = %v, want Unavailable (connection refused)", err)
	}
}

// TestTooManySamplesIsRetried: a real Prometheus that refuses a query for loading more samples
// than --query.max-samples (what a loaded server, or Thanos and Mimir limits, answer with 422
// execution) reads as unavailable and retriable, while its 400 bad_data stays a bad query.
func TestTooManySamplesIsRetried(t *testing.T) {
	srv := promserver.Start(t, "--query.max-samples=5")
	at := promserver.Aligned(time.Minute)
	srv.MustPush(t, promserver.Grid(map[string]string{"__name__": "load", "cluster": "c1"}, at, time.Minute, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10))
	c := newClient(t, prom.Config{URL: srv.URL})
	ctx := context.Background()

	if _, err := c.Query(ctx, `load`, at); err != nil {
		t.Fatalf("a query within the limit: %v", err)
	}
	_, err := c.QueryRange(ctx, `load`, at.Add(-9*time.Minute), at, time.Minute)
	if prom.KindOf(err) != prom.Unavailable || !strings.Contains(err.Error(), "too many samples") {
		t.Fatalf("over --query.max-samples: err = %v, want Unavailable mentioning too many samples", err)
	}
	_, err = c.Query(ctx, `sum(load`, at)
	if prom.KindOf(err) != prom.BadQuery {
		t.Errorf("syntax error: err = %v, want BadQuery", err)
	}
}

// Proxies and load balancers in front of Prometheus answer in their own ways; each must read as
// "unavailable", never as a bad query.
func TestUnavailableAnswers(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		quote   string
	}{
		{"prometheus too many samples 422", answer(422, `{"status":"error","errorType":"execution","error":"query processing would load too many samples into memory in query execution"}`), "too many samples"},
		{"thanos store limit 422", answer(422, `{"status":"error","errorType":"execution","error":"expanding series: the query hit the max number of series limit (limit: 100000 series)"}`), "series limit"},
		{"mimir limit 422", answer(422, `{"status":"error","errorType":"execution","error":"the query exceeded the maximum number of chunks (limit: 2000000 chunks) (err-mimir-max-chunks-per-query)"}`), "maximum number of chunks"},
		{"timeout behind a proxy 422", answer(422, `{"status":"error","errorType":"timeout","error":"query timed out in query execution"}`), "timed out"},
		{"canceled 422", answer(422, `{"status":"error","errorType":"canceled","error":"query was canceled in query execution"}`), "canceled"},
		{"prometheus query timeout 503", answer(503, `{"status":"error","errorType":"timeout","error":"query timed out in expression evaluation"}`), "query timed out"},
		{"internal 500", answer(500, `{"status":"error","errorType":"internal","error":"storage error"}`), "server error: 500"},
		{"bad gateway html", answer(502, `<html><body>Bad Gateway</body></html>`), "Bad Gateway"},
		{"throttled 429", answer(429, `slow down`), "client error: 429"},
		{"refused token 401", answer(401, `unauthorized`), "check --prometheus-url and the token"},
		{"200 that is not the API", answer(200, `<html>login</html>`), "bad_response"},
		{"too slow", func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body) // the server notices a gone client only once the body is read
			select {
			case <-r.Context().Done():
			case <-time.After(5 * time.Second):
			}
		}, "timed out"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			ts := httptest.NewServer(tt.handler)
			defer ts.Close()
			c := newClient(t, prom.Config{URL: ts.URL, Timeout: 200 * time.Millisecond})
			_, err := c.Query(context.Background(), "up", time.Now())
			if prom.KindOf(err) != prom.Unavailable || !strings.Contains(err.Error(), tt.quote) {
				t.Fatalf("err = %v, want Unavailable mentioning %q", err, tt.quote)
			}
		})
	}
}

func answer(code int, body string) http.HandlerFunc {
	return func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_, _ = w.Write([]byte(body))
	}
}

const emptyVector = `{"status":"success","data":{"resultType":"vector","result":[]}}`

// The token is read on every request (rotation needs no restart) and never appears in logs or errors.
func TestBearerTokenFile(t *testing.T) {
	var mu sync.Mutex
	var seen []string
	ts := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		seen = append(seen, r.Header.Get("Authorization"))
		mu.Unlock()
		answer(200, emptyVector)(w, r)
	}))
	defer ts.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("first-secret\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	var logs bytes.Buffer
	c, err := prom.New(prom.Config{URL: ts.URL, BearerTokenFile: file, Timeout: time.Second}, slog.New(slog.NewTextHandler(&logs, nil)), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if _, err := c.Query(ctx, "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte("second-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(ctx, "up", time.Now()); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(file, []byte(" \n"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(ctx, "up", time.Now()); prom.KindOf(err) != prom.Unavailable || !strings.Contains(err.Error(), "is empty") {
		t.Errorf("empty token file: %v, want Unavailable saying it is empty", err)
	}
	if err := os.Remove(file); err != nil {
		t.Fatal(err)
	}
	_, missingErr := c.Query(ctx, "up", time.Now())
	if prom.KindOf(missingErr) != prom.Unavailable || !strings.Contains(missingErr.Error(), "bearer token file") {
		t.Errorf("missing token file: %v, want Unavailable naming the token file", missingErr)
	}
	mu.Lock()
	defer mu.Unlock()
	if len(seen) != 2 || seen[0] != "Bearer first-secret" || seen[1] != "Bearer second-secret" {
		t.Errorf("Authorization headers = %q, want the first then the rotated token", seen)
	}
	if strings.Contains(logs.String(), "secret") || !strings.Contains(logs.String(), "tokenFile="+file) {
		t.Errorf("logs leak the token or omit the file: %s", logs.String())
	}
}

// A Prometheus that redirects to another host does not get its token forwarded there: the
// redirect is not followed (the token is for the server the deployment named, and an answer from
// another host is not that Prometheus' either).
func TestTokenNotSentOnRedirectAway(t *testing.T) {
	var elsewhere atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		elsewhere.Add(1)
		if r.Header.Get("Authorization") != "" {
			t.Errorf("the token went to %s", r.Host)
		}
		answer(200, emptyVector)(w, r)
	}))
	defer other.Close()
	redirecting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.RequestURI(), http.StatusTemporaryRedirect)
	}))
	defer redirecting.Close()
	file := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(file, []byte("the-secret"), 0o600); err != nil {
		t.Fatal(err)
	}
	c, err := prom.New(prom.Config{URL: redirecting.URL, BearerTokenFile: file, Timeout: time.Second}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(context.Background(), "up", time.Now()); err == nil || prom.KindOf(err) != prom.Unavailable || !strings.Contains(err.Error(), "redirect") {
		t.Errorf("a redirect to another host: %v, want Unavailable naming the redirect", err)
	}
	if n := elsewhere.Load(); n != 0 {
		t.Errorf("the redirect was followed %d times", n)
	}
}

func TestCAFile(t *testing.T) {
	ts := httptest.NewTLSServer(answer(200, emptyVector))
	defer ts.Close()
	ca := filepath.Join(t.TempDir(), "ca.pem")
	if err := os.WriteFile(ca, pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: ts.Certificate().Raw}), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := newClient(t, prom.Config{URL: ts.URL, CAFile: ca}).Query(context.Background(), "up", time.Now()); err != nil {
		t.Errorf("with the CA: %v", err)
	}
	_, err := newClient(t, prom.Config{URL: ts.URL}).Query(context.Background(), "up", time.Now())
	if prom.KindOf(err) != prom.Unavailable || !strings.Contains(err.Error(), "certificate") {
		t.Errorf("without the CA: %v, want an Unavailable certificate error", err)
	}
	if _, err := prom.New(prom.Config{URL: ts.URL, CAFile: filepath.Join(t.TempDir(), "none"), Timeout: time.Second}, nil, nil); err == nil {
		t.Error("a missing CA file was accepted")
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		cfg   prom.Config
		quote string // "" = valid
	}{
		{prom.Config{URL: "http://prometheus:9090", Timeout: time.Second}, ""},
		{prom.Config{URL: "https://thanos.example/prefix", Timeout: time.Second}, ""},
		{prom.Config{Timeout: time.Second}, "--prometheus-url is required"},
		{prom.Config{URL: "ftp://x", Timeout: time.Second}, "not an http(s) URL"},
		{prom.Config{URL: "prometheus:9090", Timeout: time.Second}, "not an http(s) URL"},
		{prom.Config{URL: "http://prometheus:9090"}, "--prometheus-timeout"},
	}
	for _, tt := range tests {
		err := tt.cfg.Validate()
		if (tt.quote == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.quote)) {
			t.Errorf("Validate(%+v) = %v, want %q", tt.cfg, err, tt.quote)
		}
	}
	err := prom.Config{URL: "ftp://user:hunter2@x", Timeout: time.Second}.Validate()
	if err == nil || strings.Contains(err.Error(), "hunter2") {
		t.Errorf("error %v shows the URL's password", err)
	}
}

func TestRegisterFlags(t *testing.T) {
	fs := flag.NewFlagSet("x", flag.ContinueOnError)
	cfg := prom.RegisterFlags(fs)
	if err := fs.Parse([]string{"--prometheus-url=http://flag:9090"}); err != nil {
		t.Fatal(err)
	}
	env := map[string]string{"PROMETHEUS_URL": "http://env:9090", "PROMETHEUS_TOKEN_FILE": "/var/run/token", "PROMETHEUS_CA_FILE": "/ca.pem", "PROMETHEUS_TIMEOUT": "3s"}
	if err := function.ApplyEnv(fs, func(k string) (string, bool) { v, ok := env[k]; return v, ok }); err != nil {
		t.Fatal(err)
	}
	want := prom.Config{URL: "http://flag:9090", BearerTokenFile: "/var/run/token", CAFile: "/ca.pem", Timeout: 3 * time.Second}
	if *cfg != want {
		t.Errorf("config = %+v, want %+v (the flag wins over PROMETHEUS_URL)", *cfg, want)
	}
}

func TestRanges(t *testing.T) {
	now := time.Date(2026, 3, 1, 12, 7, 42, 0, time.UTC)
	start, end := prom.AlignedRange(now, time.Hour, 5*time.Minute)
	if want := time.Date(2026, 3, 1, 12, 5, 0, 0, time.UTC); !end.Equal(want) || !start.Equal(want.Add(-time.Hour)) {
		t.Errorf("AlignedRange = %v..%v, want %v..%v", start, end, want.Add(-time.Hour), want)
	}
	// 7m does not divide a day: the grid counts from the Unix epoch, not from year 1.
	if _, end := prom.AlignedRange(now, time.Hour, 7*time.Minute); end.Unix()%420 != 0 {
		t.Errorf("end %v is not on the 7m grid since the epoch", end)
	}
	tests := []struct {
		rng, step time.Duration
		ok        bool
	}{
		{time.Hour, time.Minute, true},
		{time.Hour, 0, false},
		{0, time.Minute, false},
		{time.Minute, time.Hour, false},
		{24 * time.Hour, time.Second, false}, // 86,401 points
	}
	for _, tt := range tests {
		if err := prom.CheckRange(tt.rng, tt.step); (err == nil) != tt.ok {
			t.Errorf("CheckRange(%v, %v) = %v, want ok=%v", tt.rng, tt.step, err, tt.ok)
		}
	}
	if got := prom.Labels(model.Metric{"a": "1", "__name__": "m"}); len(got) != 2 || got["a"] != "1" {
		t.Errorf("Labels = %v", got)
	}
}
