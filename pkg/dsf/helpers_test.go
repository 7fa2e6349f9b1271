package dsf_test

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// cs keeps the tables of expected scores short.
var cs = functest.ClusterScores

// l keeps label sets short.
var l = functest.Labels

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

// bridge is a hub-mode dsf-bridge served as its main serves it, with its log kept for inspection.
type bridge struct {
	url     string
	scorers string // the scorers file: rewrite it to reconfigure
	log     *syncBuffer
}

type bridgeOptions struct {
	endpoints  string
	tokenDir   string
	timeout    time.Duration
	at         time.Time // zero: now
	maxRetries int       // zero: dsf.DefaultMaxRetries
}

// serve starts a hub-mode bridge reading scorers (YAML documents) with o's settings.
func serve(t *testing.T, scorers string, o bridgeOptions) *bridge {
	t.Helper()
	fn := function.New("dsf-bridge", "test")
	logs := &syncBuffer{}
	fn.Log = slog.New(slog.NewJSONHandler(logs, nil))
	eps, err := dsf.ParseEndpoints(o.endpoints)
	if err != nil {
		t.Fatal(err)
	}
	run, err := dsf.NewRunner(dsf.Options{Settings: dsf.Settings{Endpoints: eps, Tokens: dsf.TokenDir(o.tokenDir)}, Timeout: o.timeout}, fn.Registry, fn.Log)
	if err != nil {
		t.Fatal(err)
	}
	if !o.at.IsZero() {
		run.SetNow(func() time.Time { return o.at })
	}
	file := writeFile(t, t.TempDir(), "scorers.yaml", scorers)
	if o.maxRetries == 0 {
		o.maxRetries = dsf.DefaultMaxRetries
	}
	b, err := dsf.NewBridge(run, file, "cluster", o.maxRetries, fn.Log)
	if err != nil {
		t.Fatal(err)
	}
	return &bridge{url: functest.Serve(t, fn, scorer.Handler(fn.Source(), b.Routes())), scorers: file, log: logs}
}

func (b *bridge) metrics(t *testing.T) string {
	t.Helper()
	_, body := functest.Get(t, b.url+"/metrics")
	return body
}

// scorerDoc is a DynamicScorer document named name with spec (YAML, indented by two spaces).
func scorerDoc(name, spec string) string {
	return fmt.Sprintf("---\napiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1\nkind: DynamicScorer\nmetadata:\n  name: %s\nspec:\n%s\n", name, spec)
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
// makes of a request (method, JSON body of {"data": [...]}). It records what it was sent.
type goScorer struct {
	*httptest.Server
	mu       sync.Mutex
	config   any // GET /config's answer; nil: 404
	health   int // /healthz status; 0: 200
	healthz  int // /healthz requests received
	scored   int // scoring requests received
	lastAuth string
	received []map[string]string // the metric of every series sent
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
		s.healthz++
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
		for _, d := range req.Data {
			s.received = append(s.received, d.Metric)
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

func (s *goScorer) counts() (healthz, scored int) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.healthz, s.scored
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

// status answers a scoring request with code and a body that must not be echoed.
func status(code int) func(http.ResponseWriter, scoringRequest) {
	return func(w http.ResponseWriter, _ scoringRequest) {
		http.Error(w, `{"detail":"Traceback SECRET-DETAIL"}`, code)
	}
}

// raw answers a scoring request with body.
func raw(body string) func(http.ResponseWriter, scoringRequest) {
	return func(w http.ResponseWriter, _ scoringRequest) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}
}

// python runs testdata/dsf_scorer.py with args (a stand-in for a DSF scorer Debian cannot run)
// and returns its base URL; the test's cleanup stops it.
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

// trap is a real TCP listener that counts the connections it accepts: "nothing contacted" is
// measured at the socket.
type trap struct {
	URL   string
	conns atomic.Int64
}

func newTrap(t *testing.T) *trap {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	tr := &trap{URL: "http://" + ln.Addr().String()}
	srv := &http.Server{
		Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}),
		ConnState: func(_ net.Conn, s http.ConnState) {
			if s == http.StateNew {
				tr.conns.Add(1)
			}
		},
	}
	go func() { _ = srv.Serve(ln) }()
	t.Cleanup(func() { _ = srv.Close() })
	return tr
}

// completions stands in for the OpenAI-style completions endpoint DSF's LLM forecast scorer calls
// (INFERENCE_ENDPOINT): each call answers after delay with a number the prompt's last value plus
// one, so a test can tell the forecast from the data.
type completions struct {
	URL    string
	calls  atomic.Int64
	mu     sync.Mutex
	models []string
}

func newCompletions(t *testing.T, delay time.Duration) *completions {
	t.Helper()
	c := &completions{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model  string `json:"model"`
			Prompt string `json:"prompt"`
		}
		if r.URL.Path != "/v1/completions" || json.NewDecoder(r.Body).Decode(&req) != nil {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		c.calls.Add(1)
		c.mu.Lock()
		c.models = append(c.models, req.Model)
		c.mu.Unlock()
		time.Sleep(delay)
		// The prompt lists "- <ts> : <value>" lines (templates/request_evaluation.j2): forecast the
		// last value plus one.
		last := 0.0
		for _, line := range strings.Split(req.Prompt, "\n") {
			if _, v, ok := strings.Cut(strings.TrimPrefix(strings.TrimSpace(line), "- "), " : "); ok {
				_, _ = fmt.Sscan(v, &last)
			}
		}
		_ = json.NewEncoder(w).Encode(map[string]any{"choices": []map[string]any{{"text": fmt.Sprintf(" %.2f\n", last+1)}}})
	}))
	t.Cleanup(srv.Close)
	c.URL = srv.URL + "/v1/completions"
	return c
}

func grep(s, sub string) string {
	var out []string
	for _, line := range strings.Split(s, "\n") {
		if strings.Contains(line, sub) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}
