package dsf_test

import (
	"bytes"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// cs keeps the tables of expected scores short.
var cs = functest.ClusterScores

// l keeps label sets short.
var l = functest.Labels

// bridge is a dsf-bridge served as its main serves it, with its log kept for inspection.
type bridge struct {
	url string
	fn  *function.Function
	log *syncBuffer
}

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// serve starts a bridge querying promURL (any URL when no test needs Prometheus), evaluating at
// `at` (zero: now), with scorers given timeout and tokens under tokenDir.
func serve(t *testing.T, promURL string, at time.Time, timeout time.Duration, tokenDir string) *bridge {
	t.Helper()
	fn := function.New("dsf-bridge", "test")
	logs := &syncBuffer{}
	fn.Log = slog.New(slog.NewJSONHandler(logs, nil))
	b, err := dsf.New(dsf.Options{TokenDir: tokenDir}, prom.Config{URL: promURL, Timeout: 5 * time.Second}, timeout, fn.Registry, fn.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !at.IsZero() {
		b.SetNow(func() time.Time { return at })
	}
	return &bridge{url: functest.Serve(t, fn, scorer.Handler(fn.Source(), b.Routes())), fn: fn, log: logs}
}

func (b *bridge) metrics(t *testing.T) string {
	t.Helper()
	_, body := functest.Get(t, b.url+"/metrics")
	return body
}

// scoringRequest is what a scorer receives: {"data": <matrix>}.
type scoringRequest struct {
	Data []struct {
		Metric map[string]string `json:"metric"`
		Values [][2]any          `json:"values"`
	} `json:"data"`
}

// goScorer is a DSF scorer in Go, written from the documented API: /healthz, /config, POST to
// its scoring path. score answers one scoring request; it runs after the checks every scorer
// makes of a request (method, JSON body of {"data": [...]}).
type goScorer struct {
	*httptest.Server
	mu       sync.Mutex
	config   any // GET /config's answer; nil: 404
	health   int // /healthz status; 0: 200
	scored   int // scoring requests received
	lastAuth string
	score    func(w http.ResponseWriter, req scoringRequest)
}

func newGoScorer(t *testing.T, score func(w http.ResponseWriter, req scoringRequest)) *goScorer {
	s := &goScorer{score: score}
	s.Server = httptest.NewServer(http.HandlerFunc(s.serve))
	t.Cleanup(s.Close)
	return s
}

func (s *goScorer) serve(w http.ResponseWriter, r *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	switch {
	case r.Method == http.MethodGet && r.URL.Path == "/healthz":
		if s.health != 0 {
			w.WriteHeader(s.health)
		}
		_, _ = io.WriteString(w, "ok")
	case r.Method == http.MethodGet && r.URL.Path == "/config" && s.config != nil:
		_ = json.NewEncoder(w).Encode(s.config)
	case r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/scoring"):
		s.scored++
		s.lastAuth = r.Header.Get("Authorization")
		var req scoringRequest
		if r.Header.Get("Content-Type") != "application/json" || json.NewDecoder(r.Body).Decode(&req) != nil || req.Data == nil {
			http.Error(w, `{"detail":"want {\"data\": [...]} as application/json"}`, http.StatusBadRequest)
			return
		}
		s.score(w, req)
	default:
		http.NotFound(w, r)
	}
}

func (s *goScorer) set(f func(s *goScorer)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	f(s)
}

func (s *goScorer) count() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.scored
}

// results answers {"results": [...]}.
func results(w http.ResponseWriter, rs ...map[string]any) {
	if rs == nil {
		rs = []map[string]any{}
	}
	w.Header().Set("Content-Type", "application/json")
	_ = json.NewEncoder(w).Encode(map[string]any{"results": rs})
}

// meanOf scores each series with the mean of its values, as DSF's sample scorer scores time series.
func meanOf(w http.ResponseWriter, req scoringRequest) {
	var rs []map[string]any
	for _, s := range req.Data {
		sum := 0.0
		for _, v := range s.Values {
			var x float64
			_ = json.Unmarshal([]byte(v[1].(string)), &x)
			sum += x
		}
		rs = append(rs, map[string]any{"metric": s.Metric, "score": sum / float64(len(s.Values))})
	}
	results(w, rs...)
}

// python runs testdata/dsf_scorer.py with args (a scorer written in Python's standard library
// only) and returns its base URL; the test's cleanup stops it.
func python(t *testing.T, args ...string) string {
	t.Helper()
	return functest.Python(t, nil, filepath.Join("testdata", "dsf_scorer.py"), args...)
}

// writeFile writes content to dir/name (making dir) and returns the path.
func writeFile(t *testing.T, dir, name, content string) string {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}
