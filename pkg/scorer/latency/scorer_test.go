package latency

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// scorerServer serves the latency scorer's real HTTP surface (hub mode) deployed with
// targetsFile and returns its URL and the buffer its logs go to.
func scorerServer(t *testing.T, targetsFile string) (string, *bytes.Buffer) {
	t.Helper()
	fn := function.New("latency-scorer", "test")
	logs := &bytes.Buffer{}
	s := New("", slog.New(slog.NewJSONHandler(logs, &slog.HandlerOptions{Level: slog.LevelDebug})), fn.Registry)
	s.Allowed = DeploymentTargets(targetsFile, "", "")
	return functest.Serve(t, fn, scorer.Handler(fn.Source(), scorer.Route{contract.TypePing: s.Ping})), logs
}

// targetsFile writes a targets file allowing each URL for its cluster ("" none) and returns its path.
func targetsFile(t *testing.T, path string, urlCluster ...string) string {
	t.Helper()
	if path == "" {
		path = filepath.Join(t.TempDir(), "targets.yaml")
	}
	yml := "targets:\n"
	if len(urlCluster) == 0 {
		yml = "targets: []\n"
	}
	for i := 0; i < len(urlCluster); i += 2 {
		yml += fmt.Sprintf("- url: %q\n", urlCluster[i])
		if urlCluster[i+1] != "" {
			yml += fmt.Sprintf("  cluster: %s\n", urlCluster[i+1])
		}
	}
	if err := os.WriteFile(path, []byte(yml), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// ping posts a PingSource event with data to url and returns the HTTP status and the reply event.
func ping(t *testing.T, url, data string) (int, *event.Event) {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID("ping-1")
	e.SetSource("/apis/v1/namespaces/scoreflow/pingsources/latency")
	e.SetType(contract.TypePing)
	if err := e.SetData(cloudevents.ApplicationJSON, []byte(data)); err != nil {
		t.Fatal(err)
	}
	return functest.Send(t, url, e)
}

// scores flattens a score.updated reply to cluster/name -> value.
func scores(t *testing.T, e *event.Event) map[string]float64 {
	t.Helper()
	su, err := contract.DecodeScoreUpdated(e)
	if err != nil {
		t.Fatal(err)
	}
	if err := su.Validate(); err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, it := range su.Items {
		for _, s := range it.Scores {
			out[it.Cluster+"/"+s.Name] = s.Value
		}
	}
	return out
}

func TestPingHubMode(t *testing.T) {
	fast := newServer(t, 0, http.StatusOK, false)
	mid := newServer(t, 150*time.Millisecond, http.StatusOK, false)
	slow := newServer(t, 300*time.Millisecond, http.StatusOK, false)
	linear := newServer(t, 200*time.Millisecond, http.StatusOK, false)
	closed := httptest.NewServer(http.NotFoundHandler())
	closed.Close()
	withPassword := "http://user:hunter2@" + strings.TrimPrefix(closed.URL, "http://")
	url, logs := scorerServer(t, targetsFile(t, "", fast.URL, "fast", mid.URL, "mid", slow.URL, "slow", closed.URL+"/?token=s3cret", "gone",
		linear.URL, "c1", closed.URL, "c1", withPassword, "c2"))

	entry := func(name, cluster, u string) string {
		return fmt.Sprintf(`{"name":%q,"cluster":%q,"url":%q,"runs":2,"waitBetweenRuns":"100ms","timeout":"2s"}`, name, cluster, u)
	}

	t.Run("minmax across clusters, unreachable target left out", func(t *testing.T) {
		data := `{"resource":"latency","normalize":{"method":"minmax"},"latencies":[` +
			entry("ingress", "fast", fast.URL) + `,` + entry("ingress", "mid", mid.URL) + `,` + entry("ingress", "slow", slow.URL) + `,` +
			entry("ingress", "gone", closed.URL+"/?token=s3cret") + `]}`
		status, reply := ping(t, url, data)
		if status != http.StatusOK || reply == nil || reply.Type() != contract.TypeScoreUpdated {
			t.Fatalf("status %d reply %v", status, reply)
		}
		got := scores(t, reply)
		// minmax: fastest 100, slowest -100; mid (150 ms of 0..300 ms) about 0, give or take
		// 80 ms of noise on either end: 200*80/300 = 53 points at worst; 25 here in practice.
		if got["fast/ingress"] != 100 || got["slow/ingress"] != -100 {
			t.Errorf("scores %v: want fast 100, slow -100", got)
		}
		if v, ok := got["mid/ingress"]; !ok || v < -50 || v > 50 {
			t.Errorf("mid = %v (present %v), want about 0", v, ok)
		}
		if _, ok := got["gone/ingress"]; ok || len(got) != 3 {
			t.Errorf("scores %v: the unreachable cluster must have no score", got)
		}
		if !strings.Contains(logs.String(), `"cluster":"gone"`) || !strings.Contains(logs.String(), "connect") {
			t.Errorf("the failure of cluster gone is not logged with its phase:\n%s", logs)
		}
		if strings.Contains(logs.String(), "s3cret") {
			t.Errorf("a URL query reached the logs:\n%s", logs)
		}
	})

	t.Run("linear in milliseconds", func(t *testing.T) {
		// 200 ms on 0..1000 ms, lower is better: 100 - 200*200/1000 = 60. Noise only adds latency,
		// so the score is at most 60; 50 ms of noise would make it 50.
		data := `{"resource":"latency","normalize":{"method":"linear","min":0,"max":1000},"latencies":[` + entry("api", "c1", linear.URL) + `]}`
		status, reply := ping(t, url, data)
		if status != http.StatusOK {
			t.Fatalf("status %d reply %v", status, reply)
		}
		if v := scores(t, reply)["c1/api"]; v > 60 || v < 50 {
			t.Errorf("c1/api = %v, want 50..60", v)
		}
	})

	t.Run("every target failing is a retriable failure naming each", func(t *testing.T) {
		data := `{"resource":"latency","latencies":[` + entry("a", "c1", closed.URL) + `,` + entry("b", "c2", withPassword) + `]}`
		status, reply := ping(t, url, data)
		if status != http.StatusServiceUnavailable || reply == nil {
			t.Fatalf("status %d reply %v, want 503 with score.failed", status, reply)
		}
		f, err := contract.DecodeFailure(reply)
		if err != nil {
			t.Fatal(err)
		}
		if f.Reason != contract.ReasonMetricsUnavailable || !f.Retriable || !strings.Contains(f.Message, "a (cluster c1") || !strings.Contains(f.Message, "b (cluster c2") {
			t.Errorf("failure = %+v", f)
		}
		if strings.Contains(f.Message, "hunter2") || strings.Contains(logs.String(), "hunter2") {
			t.Errorf("a password leaked: %s", f.Message)
		}
	})

	for _, tt := range []struct{ name, data, want string }{
		{"hub entry without cluster", `{"resource":"latency","latencies":[{"name":"a","url":"http://x"}]}`, "required on the hub"},
		{"misspelt field", `{"resource":"latency","latencies":[{"name":"a","url":"http://x","cluster":"c1","run":2}]}`, "run"},
		{"not JSON", `latencies: []`, "not valid JSON"},
	} {
		t.Run("bad config: "+tt.name, func(t *testing.T) {
			status, reply := ping(t, url, tt.data)
			if status != http.StatusBadRequest || reply == nil {
				t.Fatalf("status %d reply %v, want 400 with score.failed", status, reply)
			}
			f, err := contract.DecodeFailure(reply)
			if err != nil || f.Reason != contract.ReasonBadConfig || f.Retriable || !strings.Contains(f.Message, tt.want) {
				t.Errorf("failure = %+v, %v; want BadConfig mentioning %q", f, err, tt.want)
			}
		})
	}
}

func TestScoresAreGroupedPerCluster(t *testing.T) {
	a := newServer(t, 0, http.StatusOK, false)
	b := newServer(t, 100*time.Millisecond, http.StatusOK, false)
	cfg := Config{Resource: "latency", Latencies: []Target{
		{Name: "x", Cluster: "c2", URL: a.URL, Runs: 1},
		{Name: "y", Cluster: "c2", URL: b.URL, Runs: 1},
		{Name: "x", Cluster: "c1", URL: b.URL, Runs: 1},
	}}
	if err := cfg.Validate(); err != nil {
		t.Fatal(err)
	}
	if err := cfg.Resolve(""); err != nil {
		t.Fatal(err)
	}
	s := New("", slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), prometheus.NewRegistry())
	res, err := s.Evaluate(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	b2, _ := json.Marshal(res.Scores.Items)
	// One item per cluster, sorted; names sorted within; one score per entry.
	if len(res.Scores.Items) != 2 || res.Scores.Items[0].Cluster != "c1" || len(res.Scores.Items[1].Scores) != 2 ||
		res.Scores.Items[1].Scores[0].Name != "x" || res.Scores.Items[1].Scores[1].Name != "y" {
		t.Errorf("items = %s", b2)
	}
	if time.Since(res.Observed) > time.Second || res.Observed.After(time.Now()) {
		t.Errorf("observed %s, want just now", res.Observed)
	}
}

// A ping chooses among the targets the scorer's deployment lists (exact URLs, each scoring its
// cluster) and tunes runs and timeouts; anything else is refused 400 BadConfig before any target,
// listed or not, is contacted. The list is read on every ping: an edit applies to the next one.
func TestPingMeasuresOnlyAllowedTargets(t *testing.T) {
	allowed := newServer(t, 0, http.StatusOK, false)
	unlisted := newServer(t, 0, http.StatusOK, false)
	file := targetsFile(t, "", allowed.URL, "c1")
	url, logs := scorerServer(t, file)
	entry := func(cluster, u string) string {
		return fmt.Sprintf(`{"name":"ingress","cluster":%q,"url":%q,"runs":2,"waitBetweenRuns":"100ms","timeout":"2s"}`, cluster, u)
	}
	config := func(entries ...string) string {
		return `{"resource":"latency","latencies":[` + strings.Join(entries, ",") + `]}`
	}
	for _, tt := range []struct{ name, data, want string }{
		{"a URL not on the list", config(entry("c1", unlisted.URL)), "not a target this scorer's deployment allows"},
		{"a listed URL for another cluster", config(entry("c2", allowed.URL)), `has ` + allowed.URL + ` score cluster "c1"`},
		{"a listed URL, not exactly", config(entry("c1", allowed.URL+"/")), "not a target"},
		{"a listed URL beside an unlisted one", `{"resource":"latency","latencies":[` + entry("c1", allowed.URL) + `,{"name":"other","cluster":"c1","url":"` + unlisted.URL + `"}]}`, "latencies[1].url"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := ping(t, url, tt.data)
			if status != http.StatusBadRequest || reply == nil {
				t.Fatalf("status %d reply %v, want 400 with score.failed", status, reply)
			}
			f, err := contract.DecodeFailure(reply)
			if err != nil || f.Reason != contract.ReasonBadConfig || f.Retriable || !strings.Contains(f.Message, tt.want) {
				t.Errorf("failure = %+v, %v; want BadConfig mentioning %q", f, err, tt.want)
			}
		})
	}
	if a, u := allowed.conns.Load(), unlisted.conns.Load(); a != 0 || u != 0 {
		t.Fatalf("refused pings opened %d connections to the listed target and %d to the unlisted one, want none", a, u)
	}

	status, reply := ping(t, url, config(entry("c1", allowed.URL)))
	if status != http.StatusOK || reply == nil || reply.Type() != contract.TypeScoreUpdated {
		t.Fatalf("a listed target: status %d reply %v; logs:\n%s", status, reply, logs)
	}
	if n := allowed.conns.Load(); n != 2 {
		t.Errorf("the listed target got %d connections, want 2 (runs: 2)", n)
	}

	// The administrator lists the other target: the next ping may measure it.
	targetsFile(t, file, allowed.URL, "c1", unlisted.URL, "c2")
	if status, reply := ping(t, url, config(entry("c2", unlisted.URL))); status != http.StatusOK {
		t.Errorf("after the list names it: status %d reply %v", status, reply)
	}
	if n := unlisted.conns.Load(); n != 2 {
		t.Errorf("the newly listed target got %d connections, want 2", n)
	}

	// A deployment without a list measures nothing.
	bare, _ := scorerServer(t, "")
	if status, _ := ping(t, bare, config(entry("c1", allowed.URL))); status != http.StatusBadRequest {
		t.Errorf("no targets file: status %d, want 400", status)
	}
	if n := allowed.conns.Load(); n != 2 {
		t.Errorf("a scorer without a targets file contacted a target (%d connections)", n)
	}
}

// In agent mode the agent's own configuration file (mounted by its deployment) names what a ping
// may measure, besides --targets-file.
func TestAgentPingMeasuresOnlyItsConfiguredTargets(t *testing.T) {
	configured := newServer(t, 0, http.StatusOK, false)
	other := newServer(t, 0, http.StatusOK, false)
	cfgFile := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfgFile, []byte("resource: latency\nlatencies:\n- {name: hub-api, url: '"+configured.URL+"', runs: 1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := function.New("latency-scorer", "test")
	s := New("east-1", slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), fn.Registry)
	s.Allowed = DeploymentTargets("", cfgFile, "east-1")
	url := functest.Serve(t, fn, scorer.Handler(fn.Source(), scorer.Route{contract.TypePing: s.Ping}))

	if status, reply := ping(t, url, `{"resource":"latency","latencies":[{"name":"x","url":"`+other.URL+`","runs":1}]}`); status != http.StatusBadRequest {
		t.Errorf("a URL outside the agent's configuration: status %d reply %v, want 400", status, reply)
	}
	if n := other.conns.Load(); n != 0 {
		t.Errorf("the unlisted target got %d connections", n)
	}
	if status, reply := ping(t, url, `{"resource":"latency","latencies":[{"name":"x","url":"`+configured.URL+`","runs":1}]}`); status != http.StatusOK {
		t.Errorf("the agent's own target: status %d reply %v, want 200", status, reply)
	}
}

// Entries name the metrics' (cluster, name) labels; however many a sender invents, the series stay
// bounded. (Evaluate is called directly with entries validated one by one: a ping of these would
// ask the one test server for more runs than MaxRunsPerHost.)
func TestMetricLabelsAreBounded(t *testing.T) {
	target := newServer(t, 0, http.StatusOK, false)
	reg := prometheus.NewRegistry()
	s := New("", slog.New(slog.NewTextHandler(&bytes.Buffer{}, nil)), reg)
	n := DefaultNormalization()
	for round := 0; round < 2*MaxSeries/MaxEntries; round++ {
		cfg := Config{Resource: "latency", Normalize: &n}
		for i := 0; i < MaxEntries; i++ {
			cfg.Latencies = append(cfg.Latencies, Target{Name: fmt.Sprintf("n%d-%d", round, i), Cluster: fmt.Sprintf("c%d", i), URL: target.URL, Runs: 1})
			if err := cfg.Latencies[i].validate(); err != nil {
				t.Fatal(err)
			}
		}
		if _, err := s.Evaluate(context.Background(), cfg); err != nil {
			t.Fatal(err)
		}
	}
	families, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range families {
		if f.GetName() == "scoreflow_latency_run_seconds" && len(f.GetMetric()) > MaxSeries+1 {
			t.Errorf("%s has %d series after %d distinct (cluster, name) pairs, want at most %d", f.GetName(), len(f.GetMetric()), 2*MaxSeries, MaxSeries+1)
		}
	}
}

// countingServer is an HTTP server that counts the requests it answers.
type countingServer struct {
	*httptest.Server
	requests atomic.Int64
}

func newCountingServer(t *testing.T) *countingServer {
	t.Helper()
	c := &countingServer{}
	c.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		c.requests.Add(1)
	}))
	t.Cleanup(c.Close)
	return c
}

// One ping asks one listed host for a bounded number of requests, spaced: MaxEntries entries of
// MaxRuns runs each with a 1 ns wait, all naming one listed URL (a 13 KB event), is refused
// before a single request, as are its variants within each entry's own bounds; a configuration
// within the bounds makes exactly the runs it asks, which the listed host answers.
func TestPingBoundsTheRequestsToOneHost(t *testing.T) {
	target := newCountingServer(t)
	other := newCountingServer(t) // another port of the same host: 127.0.0.1
	url, _ := scorerServer(t, targetsFile(t, "", target.URL, "c1", other.URL, "c1"))
	config := func(entries int, runs int, wait string, urls ...string) string {
		var es []string
		for i := range entries {
			es = append(es, fmt.Sprintf(`{"name":"e%d","cluster":"c1","url":%q,"runs":%d,"waitBetweenRuns":%q,"timeout":"2s"}`, i, urls[i%len(urls)], runs, wait))
		}
		return `{"resource":"latency","latencies":[` + strings.Join(es, ",") + `]}`
	}
	for _, tt := range []struct{ name, data, want string }{
		{"100 entries x 20 runs, 1ns apart", config(MaxEntries, MaxRuns, "1ns", target.URL), "waitBetweenRuns: 1ns is not between 100ms"},
		{"100 entries x 20 runs, 100ms apart", config(MaxEntries, MaxRuns, "100ms", target.URL), "2000 runs in all, more than 300"},
		{"100 entries x 3 runs", config(MaxEntries, 3, "100ms", target.URL), "300 runs measure host 127.0.0.1, more than 20"},
		{"two ports of one host", config(2, 11, "100ms", target.URL, other.URL), "22 runs measure host 127.0.0.1, more than 20"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := ping(t, url, tt.data)
			if status != http.StatusBadRequest || reply == nil {
				t.Fatalf("status %d reply %v, want 400 with score.failed", status, reply)
			}
			f, err := contract.DecodeFailure(reply)
			if err != nil || f.Reason != contract.ReasonBadConfig || f.Retriable || !strings.Contains(f.Message, tt.want) {
				t.Errorf("failure = %+v, %v; want BadConfig mentioning %q", f, err, tt.want)
			}
		})
	}
	if n := target.requests.Load() + other.requests.Load(); n != 0 {
		t.Fatalf("refused pings made %d requests, want none", n)
	}
	// Within the bounds: ten entries of two runs each, over both ports of the host.
	start := time.Now()
	status, reply := ping(t, url, config(10, 2, "100ms", target.URL, other.URL))
	if status != http.StatusOK || reply == nil || reply.Type() != contract.TypeScoreUpdated {
		t.Fatalf("a ping within the bounds: status %d reply %v", status, reply)
	}
	if a, b := target.requests.Load(), other.requests.Load(); a != 10 || b != 10 {
		t.Errorf("the host got %d + %d requests, want 10 + 10 (10 entries x 2 runs)", a, b)
	}
	if d := time.Since(start); d < MinWait {
		t.Errorf("two runs of an entry took %s, less than the %s between them", d, MinWait)
	}
}
