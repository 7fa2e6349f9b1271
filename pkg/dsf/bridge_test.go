package dsf_test

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promtest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
)

// Series every test queries, on a one-minute grid ending at `at`; a range of 120s with a step of
// 60s sees the three points:
//
//	cpu_usage{cluster, app="web"}  east 10 20 30 (mean 20, forecast 30+20 = 50), west 40 50 60 (mean 50, forecast 80)
//	mem_free{cluster, app="db"}    east 5 5 5
func pushSeries(t *testing.T, srv *promtest.Server, at time.Time) {
	m := time.Minute
	srv.MustPush(t,
		promtest.Grid(l("__name__", "cpu_usage", "cluster", "east", "app", "web"), at, m, 10, 20, 30),
		promtest.Grid(l("__name__", "cpu_usage", "cluster", "west", "app", "web"), at, m, 40, 50, 60),
		promtest.Grid(l("__name__", "mem_free", "cluster", "east", "app", "db"), at, m, 5, 5, 5),
	)
}

// expectScores pings the bridge with data and checks the reply is exactly want, dated at, valid
// until validUntil (zero: none set).
func expectScores(t *testing.T, b *bridge, data string, want contract.ScoreUpdated, at, validUntil time.Time) {
	t.Helper()
	status, reply := functest.Send(t, b.url, functest.Ping(data))
	got, fail := functest.Reply(t, reply)
	if status != http.StatusOK || fail != nil {
		t.Fatalf("status %d failure %+v", status, fail)
	}
	vu := got.ValidUntil
	got.ValidUntil = nil
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("scores =\n  %+v\nwant\n  %+v", *got, want)
	}
	if !reply.Time().Equal(at) {
		t.Errorf("event time %v, want %v", reply.Time(), at)
	}
	switch {
	case validUntil.IsZero() && vu != nil:
		t.Errorf("validUntil %v, want none", vu)
	case !validUntil.IsZero() && (vu == nil || !vu.Equal(validUntil)):
		t.Errorf("validUntil %v, want %v", vu, validUntil)
	}
}

// expectFailure pings the bridge with data and checks for a score.failed with status, reason
// and retriable, whose message mentions quote and whose body stays under Knative's limit.
func expectFailure(t *testing.T, b *bridge, data string, status int, reason contract.Reason, retriable bool, quote string) {
	t.Helper()
	got, reply := functest.Send(t, b.url, functest.Ping(data))
	_, fail := functest.Reply(t, reply)
	if got != status || fail == nil || fail.Reason != reason || fail.Retriable != retriable || !strings.Contains(fail.Message, quote) {
		t.Fatalf("status %d failure %+v; want %d %s retriable=%v mentioning %q", got, fail, status, reason, retriable, quote)
	}
	if n := len(reply.Data()); n >= 700 {
		t.Errorf("failure body is %d bytes: Knative's dispatcher needs non-2xx bodies under 768", n)
	}
}

func TestBridge(t *testing.T) {
	prom := promtest.Start(t)
	at := promtest.Aligned(time.Minute)
	pushSeries(t, prom, at)
	t.Run("go scorers", func(t *testing.T) { testGoScorers(t, prom.URL, at) })
	t.Run("python scorers", func(t *testing.T) { testPythonScorers(t, prom.URL, at) })
}

func testGoScorers(t *testing.T, promURL string, at time.Time) {
	tokens := t.TempDir()
	b := serve(t, promURL, at, 2*time.Second, tokens)
	sample := newGoScorer(t, meanOf)
	// interval 30s: valid for 3 intervals of at least a minute (a PingSource fires once a minute at most).
	validUntil := at.Add(3 * time.Minute)

	t.Run("inline configuration, range query", func(t *testing.T) {
		data := fmt.Sprintf(`{"source": {"type": "Prometheus", "path": "/api/v1/query_range", "params": {"query": "cpu_usage", "range": 120, "step": 60}},
			"scoring": {"host": %q, "path": "/scoring", "params": {"name": "sample_my_score", "interval": 30}}}`, sample.URL)
		expectScores(t, b, data, contract.ScoreUpdated{Resource: "sample-my-score", Items: []contract.ClusterScores{
			cs("east", "sample_my_score", 20), cs("west", "sample_my_score", 50)}}, at, validUntil)
	})

	t.Run("configURL, synced: the scorer's /config decides, its in-cluster Prometheus host is not used", func(t *testing.T) {
		sample.set(func(s *goScorer) {
			s.config = map[string]any{"name": "sample-scorer", "description": "d",
				"source":  map[string]any{"type": "prometheus", "host": "http://kube-prometheus.monitoring.svc:9090", "path": "/api/v1/query_range", "params": map[string]any{"query": "cpu_usage", "range": 120, "step": 60}},
				"scoring": map[string]any{"path": "/scoring", "params": map[string]any{"name": "sample_my_score", "interval": 30}}}
		})
		expectScores(t, b, fmt.Sprintf(`{"configURL": "%s/config", "configSyncMode": "Full"}`, sample.URL), contract.ScoreUpdated{Resource: "sample-my-score", Items: []contract.ClusterScores{
			cs("east", "sample_my_score", 20), cs("west", "sample_my_score", 50)}}, at, validUntil)
	})

	t.Run("several queries joined by ; are concatenated", func(t *testing.T) {
		data := fmt.Sprintf(`{"source": {"type": "Prometheus", "params": {"query": "cpu_usage; mem_free", "range": 120, "step": 60}},
			"scoring": {"host": %q, "path": "/scoring", "params": {"name": "mix"}}, "scoreDimensionFormat": "${app}", "resource": "usage"}`, sample.URL)
		expectScores(t, b, data, contract.ScoreUpdated{Resource: "usage", Items: []contract.ClusterScores{
			cs("east", "db", 5, "web", 20), cs("west", "web", 50)}}, at, time.Time{})
	})

	t.Run("token-protected scorer (the LLM forecast scorer's stand-in)", func(t *testing.T) {
		want := "s3cr3t-one"
		llm := newGoScorer(t, nil)
		llm.score = func(w http.ResponseWriter, req scoringRequest) {
			if llm.lastAuth != "Bearer "+want {
				http.Error(w, `{"detail":"bad token"}`, http.StatusUnauthorized)
				return
			}
			meanOf(w, req)
		}
		file := writeFile(t, tokens, "api-auth-secret/token", "s3cr3t-one\n")
		data := fmt.Sprintf(`{"source": {"type": "Prometheus", "params": {"query": "cpu_usage", "range": 120, "step": 60}},
			"scoring": {"host": %q, "path": "/scoring", "params": {"name": "llm_forecast_score", "interval": 60},
			            "auth": {"tokenSecretRef": {"name": "api-auth-secret", "key": "token"}}}}`, llm.URL)
		ok := contract.ScoreUpdated{Resource: "llm-forecast-score", Items: []contract.ClusterScores{cs("east", "llm_forecast_score", 20), cs("west", "llm_forecast_score", 50)}}
		expectScores(t, b, data, ok, at, validUntil)

		// The Secret rotates: the file is read again on the next request.
		llm.set(func(*goScorer) { want = "s3cr3t-two" })
		expectFailure(t, b, data, http.StatusBadRequest, dsf.ReasonScorerFailed, false, "answered 401")
		if err := os.WriteFile(file, []byte("s3cr3t-two"), 0o600); err != nil {
			t.Fatal(err)
		}
		expectScores(t, b, data, ok, at, validUntil)

		expectFailure(t, b, strings.Replace(data, `"name": "api-auth-secret"`, `"name": "not-mounted"`, 1), http.StatusBadRequest, contract.ReasonBadConfig, false, "is the Secret mounted?")
		if strings.Contains(b.log.String(), "s3cr3t") {
			t.Errorf("a token is in the log:\n%s", b.log.String())
		}
	})

	t.Run("static scorer, source type None: no data, values rounded and clamped", func(t *testing.T) {
		static := newGoScorer(t, func(w http.ResponseWriter, req scoringRequest) {
			if len(req.Data) != 0 {
				http.Error(w, `{"detail":"source type none: want no data"}`, http.StatusBadRequest)
				return
			}
			results(w,
				map[string]any{"metric": l("cluster", "worker01", "app", "app01", "device", "gpu0"), "score": 150.0},
				map[string]any{"metric": l("cluster", "worker02", "app", "app01", "device", "gpu0"), "score": 42.5},
				map[string]any{"metric": l("cluster", "worker02", "app", "app02", "device", "cpu"), "score": -7.4})
		})
		data := fmt.Sprintf(`{"source": {"type": "None"}, "scoring": {"host": %q, "path": "/performance/scoring", "params": {"name": "example_performance_score"}},
			"scoreDimensionFormat": "${app};${device}"}`, static.URL)
		expectScores(t, b, data, contract.ScoreUpdated{Resource: "example-performance-score", Items: []contract.ClusterScores{
			cs("worker01", "app01;gpu0", 100), cs("worker02", "app01;gpu0", 43, "app02;cpu", -7)}}, at, time.Time{})
		if m := b.metrics(t); !strings.Contains(m, `scoreflow_dsf_scores_clamped_total{scorer="example_performance_score"} 1`) {
			t.Errorf("/metrics does not count the clamped value:\n%s", grep(m, "scoreflow_dsf"))
		}
	})

	t.Run("failures: never an old or zero value", func(t *testing.T) {
		tests := []struct {
			name      string
			score     func(http.ResponseWriter, scoringRequest)
			health    int
			query     string
			status    int
			reason    contract.Reason
			retriable bool
			quote     string
			scored    int // scoring requests the scorer should have seen
		}{
			{name: "5xx", score: status(500), status: 503, reason: dsf.ReasonScorerUnavailable, retriable: true, quote: "answered 500", scored: 1},
			{name: "429", score: status(429), status: 503, reason: dsf.ReasonScorerUnavailable, retriable: true, quote: "answered 429", scored: 1},
			{name: "4xx", score: status(422), status: 400, reason: dsf.ReasonScorerFailed, quote: "answered 422", scored: 1},
			{name: "timeout", score: func(w http.ResponseWriter, r scoringRequest) { time.Sleep(3 * time.Second); meanOf(w, r) }, status: 503, reason: dsf.ReasonScorerUnavailable, retriable: true, quote: "Timeout", scored: 1},
			{name: "/healthz not 200: Inactive, not called", score: meanOf, health: 503, status: 503, reason: dsf.ReasonScorerUnavailable, retriable: true, quote: "/healthz answered 503"},
			{name: "answer without results", score: raw(`{"scores": []}`), status: 400, reason: dsf.ReasonScorerFailed, quote: "has no results", scored: 1},
			{name: "score not a number", score: raw(`{"results": [{"metric": {"cluster": "east"}, "score": "high"}]}`), status: 400, reason: dsf.ReasonScorerFailed, quote: "not {\"results\"", scored: 1},
			{name: "two results, one score name", score: raw(`{"results": [{"metric": {"cluster": "east", "node": "n1", "pod": "a"}, "score": 1}, {"metric": {"cluster": "east", "node": "n2", "pod": "a"}, "score": 2}]}`), status: 400, reason: contract.ReasonBadConfig, quote: "tell them apart", scored: 1},
			{name: "bad query: Prometheus refuses, scorer not called", score: meanOf, query: "sum(cpu_usage", status: 400, reason: contract.ReasonBadQuery, quote: "parse error"},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				s := newGoScorer(t, tt.score)
				s.health = tt.health
				query := "cpu_usage"
				if tt.query != "" {
					query = tt.query
				}
				data := fmt.Sprintf(`{"source": {"type": "Prometheus", "params": {"query": %q, "range": 120, "step": 60}},
					"scoring": {"host": %q, "path": "/scoring", "params": {"name": "failing"}}, "scoreDimensionFormat": "${pod}"}`, query, s.URL)
				expectFailure(t, b, data, tt.status, tt.reason, tt.retriable, tt.quote)
				if n := s.count(); n != tt.scored {
					t.Errorf("scoring requests: %d, want %d", n, tt.scored)
				}
				if m := b.metrics(t); tt.health != 0 && !strings.Contains(m, `scoreflow_dsf_scorer_healthy{scorer="failing"} 0`) {
					t.Errorf("/metrics does not show the Inactive scorer:\n%s", grep(m, "scoreflow_dsf"))
				}
			})
		}
		gone := newGoScorer(t, meanOf)
		gone.Close()
		expectFailure(t, b, fmt.Sprintf(`{"configURL": "%s/config"}`, gone.URL), http.StatusServiceUnavailable, dsf.ReasonScorerUnavailable, true, "connection refused")
	})

	t.Run("no results: no event, not zeros", func(t *testing.T) {
		empty := newGoScorer(t, raw(`{"results": []}`))
		status, reply := functest.Send(t, b.url, functest.Ping(fmt.Sprintf(`{"source": {"type": "None"}, "scoring": {"host": %q, "path": "/scoring", "params": {"name": "n"}}}`, empty.URL)))
		if status != http.StatusAccepted || reply != nil {
			t.Errorf("status %d reply %v, want 202 and none", status, reply)
		}
	})
}

func testPythonScorers(t *testing.T, promURL string, at time.Time) {
	tokens := t.TempDir()
	b := serve(t, promURL, at, time.Second, tokens)
	validUntil := at.Add(3 * time.Minute)

	t.Run("sample scorer through its /config", func(t *testing.T) {
		py := python(t, "sample")
		expectScores(t, b, fmt.Sprintf(`{"configURL": "%s/config"}`, py), contract.ScoreUpdated{Resource: "sample-my-score", Items: []contract.ClusterScores{
			cs("east", "sample_my_score", 20), cs("west", "sample_my_score", 50)}}, at, validUntil)
	})

	t.Run("several queries", func(t *testing.T) {
		py := python(t, "sample", "--query", "cpu_usage;mem_free")
		expectScores(t, b, fmt.Sprintf(`{"configURL": "%s/config", "scoreDimensionFormat": "${scoreName}.${app}"}`, py), contract.ScoreUpdated{Resource: "sample-my-score", Items: []contract.ClusterScores{
			cs("east", "sample_my_score.db", 5, "sample_my_score.web", 20), cs("west", "sample_my_score.web", 50)}}, at, validUntil)
	})

	t.Run("LLM forecast stand-in behind a token", func(t *testing.T) {
		scorerToken := filepath.Join(t.TempDir(), "expected")
		if err := os.WriteFile(scorerToken, []byte("dummy-token-1234"), 0o600); err != nil {
			t.Fatal(err)
		}
		py := python(t, "llm", "--token-file", scorerToken)
		ours := writeFile(t, tokens, "api-auth-secret/token", "dummy-token-1234")
		// As a DynamicScorer: /config decides source and scoring, the spec adds the token.
		data := fmt.Sprintf(`{"configURL": "%s/config", "configSyncMode": "Full", "location": "External",
			"scoring": {"auth": {"tokenSecretRef": {"name": "api-auth-secret", "key": "token"}}}}`, py)
		ok := contract.ScoreUpdated{Resource: "llm-forecast-score", Items: []contract.ClusterScores{cs("east", "llm_forecast_score", 50), cs("west", "llm_forecast_score", 80)}}
		expectScores(t, b, data, ok, at, validUntil)
		if err := os.WriteFile(ours, []byte("wrong"), 0o600); err != nil {
			t.Fatal(err)
		}
		expectFailure(t, b, data, http.StatusBadRequest, dsf.ReasonScorerFailed, false, "answered 401")
	})

	t.Run("static performance and power scorer, source none", func(t *testing.T) {
		py := python(t, "static")
		expectScores(t, b, fmt.Sprintf(`{"configURL": "%s/performance/config", "scoreDimensionFormat": "${app};${device}"}`, py), contract.ScoreUpdated{Resource: "example-performance-score", Items: []contract.ClusterScores{
			cs("worker01", "app01;gpu0", 100), cs("worker02", "app01;gpu0", 43, "app02;cpu", -7)}}, at, validUntil)
		expectScores(t, b, fmt.Sprintf(`{"configURL": "%s/powerconsumption/config", "scoreDimensionFormat": "${app};${device}"}`, py), contract.ScoreUpdated{Resource: "example-powerconsumption-score", Items: []contract.ClusterScores{
			cs("worker01", "app01;gpu0", -100), cs("worker02", "app01;gpu0", 80)}}, at, validUntil)
	})

	for _, tt := range []struct {
		kind      string
		status    int
		reason    contract.Reason
		retriable bool
		quote     string
	}{
		{"broken", 503, dsf.ReasonScorerUnavailable, true, "answered 500"},
		{"refusing", 400, dsf.ReasonScorerFailed, false, "answered 422"},
		{"slow", 503, dsf.ReasonScorerUnavailable, true, "Timeout"},
		{"unhealthy", 503, dsf.ReasonScorerUnavailable, true, "/healthz answered 503"},
	} {
		t.Run(tt.kind, func(t *testing.T) {
			py := python(t, tt.kind, "--sleep", "3")
			expectFailure(t, b, fmt.Sprintf(`{"configURL": "%s/config"}`, py), tt.status, tt.reason, tt.retriable, tt.quote)
		})
	}
}

// status answers a scoring request with code.
func status(code int) func(http.ResponseWriter, scoringRequest) {
	return func(w http.ResponseWriter, _ scoringRequest) {
		http.Error(w, `{"detail":"no"}`, code)
	}
}

// raw answers a scoring request with body.
func raw(body string) func(http.ResponseWriter, scoringRequest) {
	return func(w http.ResponseWriter, _ scoringRequest) {
		w.Header().Set("Content-Type", "application/json")
		_, _ = w.Write([]byte(body))
	}
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
