package dsf_test

import (
	"fmt"
	"math"
	"net/http"
	"os"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
)

// Series the hub-mode tests query, on a one-minute grid ending at `at`, labelled by cluster as a
// hub-side Prometheus (Thanos, federation) labels them; a range of 120s with a step of 60s sees
// the three points:
//
//	cpu_usage{cluster, app="web"}  east 10 20 30 (mean 20), west 40 50 60 (mean 50)
//	mem_free{cluster, app="db"}    east 5 5 5
//	nan_usage{cluster="east"}      1 NaN 3
//
// and, as a managed cluster's own Prometheus would hold them (no cluster label), the counter DSF's
// published sample query rates.
func pushSeries(t *testing.T, srv *promserver.Server, at time.Time) {
	m := time.Minute
	srv.MustPush(t,
		promserver.Grid(l("__name__", "cpu_usage", "cluster", "east", "app", "web"), at, m, 10, 20, 30),
		promserver.Grid(l("__name__", "cpu_usage", "cluster", "west", "app", "web"), at, m, 40, 50, 60),
		promserver.Grid(l("__name__", "mem_free", "cluster", "east", "app", "db"), at, m, 5, 5, 5),
		promserver.Grid(l("__name__", "nan_usage", "cluster", "east"), at, m, 1, math.NaN(), 3),
		promserver.Grid(l("__name__", "container_cpu_usage_seconds_total", "node", "n1", "namespace", "ns", "pod", "p1", "container", "c"), at, 15*time.Second, 0, 15, 30, 45, 60, 75, 90, 105, 120),
	)
}

// expectScores pings the bridge naming scorer and checks the reply is exactly want, dated at.
func expectScores(t *testing.T, b *bridge, scorer string, want contract.ScoreUpdated, at time.Time) {
	t.Helper()
	status, reply := functest.Send(t, b.url, functest.Ping(fmt.Sprintf(`{"scorer": %q}`, scorer)))
	got, fail := functest.Reply(t, reply)
	if status != http.StatusOK || fail != nil {
		t.Fatalf("status %d failure %+v", status, fail)
	}
	got.ValidUntil = nil
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("scores =\n  %+v\nwant\n  %+v", *got, want)
	}
	if !reply.Time().Equal(at) {
		t.Errorf("event time %v, want %v", reply.Time(), at)
	}
}

// expectFailure pings the bridge naming scorer and checks for a score.failed with status, reason
// and retriable, whose message mentions quote and whose body stays under Knative's limit.
func expectFailure(t *testing.T, b *bridge, scorer string, status int, reason contract.Reason, retriable bool, quote string) *contract.Failure {
	t.Helper()
	got, reply := functest.Send(t, b.url, functest.Ping(fmt.Sprintf(`{"scorer": %q}`, scorer)))
	_, fail := functest.Reply(t, reply)
	if got != status || fail == nil || fail.Reason != reason || fail.Retriable != retriable || !strings.Contains(fail.Message, quote) {
		t.Fatalf("status %d failure %+v; want %d %s retriable=%v mentioning %q", got, fail, status, reason, retriable, quote)
	}
	if n := len(reply.Data()); n >= 700 {
		t.Errorf("failure body is %d bytes: Knative's dispatcher needs non-2xx bodies under 768", n)
	}
	return fail
}

// hubSpec is a hub-mode DynamicScorer: configSyncMode None, the query keeping the cluster label.
func hubSpec(configHost, query, scoring, name, extra string) string {
	return fmt.Sprintf(`  description: hub mode
  configURL: %s/config
  configSyncMode: None
  location: External
  scoreDestination: AddOnPlacementScore
  source:
    type: Prometheus
    host: http://thanos.example:9090
    path: /api/v1/query_range
    params: {query: %q, range: 120, step: 60}
  scoring:
    path: %s
    params: {name: %s, interval: 30}
%s`, configHost, query, scoring, name, extra)
}

func TestBridgeHubMode(t *testing.T) {
	prom := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	pushSeries(t, prom, at)
	thanos := "http://thanos.example:9090=" + prom.URL

	t.Run("DSF's sample scorer on a hub Prometheus whose series carry the cluster", func(t *testing.T) {
		sample := dsfupstream.Scorer(t, "sample-scorer")
		b := serve(t, scorerDoc("sample", hubSpec("http://sample-scorer.dynamic-scoring.svc:8000", "cpu_usage; mem_free", "/scoring", "sample_my_score", "  scoreDimensionFormat: ${scoreName}.${app}")),
			bridgeOptions{endpoints: thanos + ",http://sample-scorer.dynamic-scoring.svc:8000=" + sample, at: at})
		expectScores(t, b, "sample", contract.ScoreUpdated{Resource: "sample-my-score", Items: []contract.ClusterScores{
			cs("east", "sample_my_score.db", 5, "sample_my_score.web", 20), cs("west", "sample_my_score.web", 50)}}, at)
	})

	t.Run("DSF's published sample spec: its score named in the spec, then no cluster label, score.failed instead of silence", func(t *testing.T) {
		sample := dsfupstream.Scorer(t, "sample-scorer")
		spec, err := os.ReadFile(dsfupstream.Spec(t, "mydynamicscorer-sample.yaml"))
		if err != nil {
			t.Fatal(err)
		}
		endpoints := "http://<NodeIP>:30007=" + sample + ",http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090=" + prom.URL
		// Unchanged, only its scorer's /config names the score: the bridge writes no resource
		// its scorers file does not name.
		b := serve(t, string(spec), bridgeOptions{at: at, endpoints: endpoints})
		expectFailure(t, b, "sample-scorer", http.StatusBadRequest, contract.ReasonBadConfig, false, "its spec names no valid scoring.params.name")
		named := strings.Replace(string(spec), "    path: /scoring\n", "    path: /scoring\n    params: {name: sample_my_score}\n", 1)
		if named == string(spec) {
			t.Fatal("DSF's sample spec has no scoring path to name the score beside")
		}
		b = serve(t, named, bridgeOptions{at: at, endpoints: endpoints})
		expectFailure(t, b, "sample-scorer", http.StatusBadRequest, dsf.ReasonNoCluster, false, `none of the scorer's results carries a cluster label "cluster"`)
	})

	t.Run("a mask keeps the masked cluster's data from the scorer", func(t *testing.T) {
		s := newGoScorer(t, meanOf)
		b := serve(t, scorerDoc("s", hubSpec(s.URL, "cpu_usage", "/scoring", "s_score", ""))+`---
apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScoringConfig
metadata: {name: dynamic-scoring-config}
spec:
  masks: [{clusterName: west, scoreName: s_score}, {clusterName: east, scoreName: another_score}]
`, bridgeOptions{endpoints: thanos + "," + s.URL, at: at})
		expectScores(t, b, "s", contract.ScoreUpdated{Resource: "s-score", Items: []contract.ClusterScores{cs("east", "s_score", 20)}}, at)
		s.set(func(s *goScorer) {
			if len(s.received) != 1 || s.received[0]["cluster"] != "east" {
				t.Errorf("the scorer received %v: want east's series alone", s.received)
			}
		})
	})

	t.Run("a NaN makes DSF's sample scorer fail for good: retried a bounded number of times", func(t *testing.T) {
		sample := dsfupstream.Scorer(t, "sample-scorer")
		b := serve(t, scorerDoc("nan", hubSpec("http://sample-scorer.dynamic-scoring.svc:8000", "nan_usage", "/scoring", "nan_score", "")),
			bridgeOptions{endpoints: thanos + ",http://sample-scorer.dynamic-scoring.svc:8000=" + sample, at: at, maxRetries: 2})
		for range 2 {
			expectFailure(t, b, "nan", http.StatusServiceUnavailable, dsf.ReasonScorerUnavailable, true, "answered 500")
		}
		expectFailure(t, b, "nan", http.StatusBadRequest, dsf.ReasonScorerFailed, false, "3 retriable failures in a row: not retried")
		expectFailure(t, b, "nan", http.StatusBadRequest, dsf.ReasonScorerFailed, false, "4 retriable failures in a row")
	})

	t.Run("one success resets the count; error answers are not echoed", func(t *testing.T) {
		s := newGoScorer(t, status(500))
		b := serve(t, scorerDoc("s", hubSpec(s.URL, "cpu_usage", "/scoring", "s_score", "")), bridgeOptions{endpoints: thanos + "," + s.URL, at: at, maxRetries: 1})
		f := expectFailure(t, b, "s", http.StatusServiceUnavailable, dsf.ReasonScorerUnavailable, true, "answered 500")
		expectFailure(t, b, "s", http.StatusBadRequest, dsf.ReasonScorerFailed, false, "not retried")
		s.set(func(s *goScorer) { s.score = meanOf })
		expectScores(t, b, "s", contract.ScoreUpdated{Resource: "s-score", Items: []contract.ClusterScores{cs("east", "s_score", 20), cs("west", "s_score", 50)}}, at)
		s.set(func(s *goScorer) { s.score = status(503) })
		expectFailure(t, b, "s", http.StatusServiceUnavailable, dsf.ReasonScorerUnavailable, true, "answered 503")
		if strings.Contains(f.Message, "SECRET-DETAIL") || strings.Contains(b.log.String(), "SECRET-DETAIL") {
			t.Errorf("the scorer's error answer is echoed: %s", f.Message)
		}
	})

	t.Run("/healthz only with configSyncMode None, as DSF's controller", func(t *testing.T) {
		s := newGoScorer(t, meanOf)
		s.health = http.StatusServiceUnavailable
		s.config = map[string]any{"name": "s", "description": "d",
			"source":  map[string]any{"type": "Prometheus", "host": "http://thanos.example:9090", "path": "/api/v1/query_range", "params": map[string]any{"query": "cpu_usage", "range": 120, "step": 60}},
			"scoring": map[string]any{"path": "/scoring", "params": map[string]any{"name": "s_score", "interval": 30}}}
		full := fmt.Sprintf("  description: d\n  configURL: %s/config\n  configSyncMode: Full\n  location: External\n  scoreDestination: AddOnPlacementScore\n  scoring: {params: {name: s_score}}\n", s.URL)
		b := serve(t, scorerDoc("full", full)+scorerDoc("none", hubSpec(s.URL, "cpu_usage", "/scoring", "s_score", "")), bridgeOptions{endpoints: thanos + "," + s.URL, at: at})
		expectScores(t, b, "full", contract.ScoreUpdated{Resource: "s-score", Items: []contract.ClusterScores{cs("east", "s_score", 20), cs("west", "s_score", 50)}}, at)
		if h, n := s.counts(); h != 0 || n != 1 {
			t.Errorf("Full: /healthz asked %d times, scoring %d; want 0 and 1", h, n)
		}
		expectFailure(t, b, "none", http.StatusServiceUnavailable, dsf.ReasonScorerUnavailable, true, "/healthz answered 503: the scorer is Inactive")
		if h, n := s.counts(); h != 1 || n != 1 {
			t.Errorf("None: /healthz asked %d times, scoring %d; want 1 and still 1 (an Inactive scorer is not called)", h, n)
		}
		// DSF's round counter, by score name: one success (full), one failure (none).
		if m := b.metrics(t); !strings.Contains(m, `dynamic_scoring_requests_total{score_name="s_score",status="success"} 1`) ||
			!strings.Contains(m, `dynamic_scoring_requests_total{score_name="s_score",status="failure"} 1`) {
			t.Errorf("/metrics does not count a success and a failure:\n%s", grep(m, "dynamic_scoring_requests_total"))
		}
	})

	t.Run("placeholders are never contacted, redirects never followed", func(t *testing.T) {
		tr := newTrap(t)
		redirect := python(t, "redirect", "--to", tr.URL)
		tokens := t.TempDir()
		writeFile(t, tokens, "api-auth-secret/token", "redirect-token")
		b := serve(t, scorerDoc("placeholder", hubSpec("http://${EXTERNAL_SCORER_IP}:8000", "cpu_usage", "/scoring", "s_score", ""))+
			scorerDoc("redirects", hubSpec(redirect, "cpu_usage", "/scoring", "r_score", "    auth: {tokenSecretRef: {name: api-auth-secret, key: token}}")),
			bridgeOptions{endpoints: thanos, at: at, tokenDir: tokens})
		expectFailure(t, b, "placeholder", http.StatusBadRequest, contract.ReasonBadConfig, false, "is a placeholder, not a host")
		expectFailure(t, b, "redirects", http.StatusBadRequest, dsf.ReasonScorerFailed, false, "answered 302, a redirect: not followed")
		if n := tr.conns.Load(); n != 0 {
			t.Errorf("the redirect's target got %d connections", n)
		}
	})

	t.Run("destination None: scored, exported as dynamic_score, no reply", func(t *testing.T) {
		s := newGoScorer(t, meanOf)
		spec := strings.Replace(hubSpec(s.URL, "cpu_usage", "/scoring", "s_score", ""), "scoreDestination: AddOnPlacementScore", "scoreDestination: None", 1)
		b := serve(t, scorerDoc("metric-only", spec), bridgeOptions{endpoints: thanos, at: at})
		status, reply := functest.Send(t, b.url, functest.Ping(`{"scorer": "metric-only"}`))
		if status != http.StatusAccepted || reply != nil {
			t.Errorf("status %d reply %v, want 202 and none", status, reply)
		}
		if _, n := s.counts(); n != 1 {
			t.Errorf("the scorer was called %d times, want 1", n)
		}
		m := b.metrics(t)
		for _, want := range []string{
			`dynamic_score{ds_app="web",ds_cluster="east",ds_container="",ds_device="",ds_meta="",ds_namespace="",ds_node="",ds_pod="",ds_score_name="s_score"} 20`,
			`dynamic_score{ds_app="web",ds_cluster="west",ds_container="",ds_device="",ds_meta="",ds_namespace="",ds_node="",ds_pod="",ds_score_name="s_score"} 50`,
		} {
			if !strings.Contains(m, want) {
				t.Errorf("/metrics lacks %s:\n%s", want, grep(m, "dynamic_score{"))
			}
		}
	})

	t.Run("tokens come from mounted Secrets, re-read on every request, never logged", func(t *testing.T) {
		want := "s3cr3t-one"
		s := newGoScorer(t, nil)
		s.score = func(w http.ResponseWriter, req scoringRequest) {
			if s.lastAuth != "Bearer "+want {
				http.Error(w, `{"detail":"bad token"}`, http.StatusUnauthorized)
				return
			}
			meanOf(w, req)
		}
		tokens := t.TempDir()
		file := writeFile(t, tokens, "api-auth-secret/token", "s3cr3t-one\n")
		auth := "    auth: {tokenSecretRef: {name: api-auth-secret, key: token}}"
		b := serve(t, scorerDoc("llm", hubSpec(s.URL, "cpu_usage", "/scoring", "llm_forecast_score", auth))+
			scorerDoc("unmounted", hubSpec(s.URL, "cpu_usage", "/scoring", "llm_forecast_score", strings.Replace(auth, "api-auth-secret", "not-mounted", 1))),
			bridgeOptions{endpoints: thanos + "," + s.URL, at: at, tokenDir: tokens})
		ok := contract.ScoreUpdated{Resource: "llm-forecast-score", Items: []contract.ClusterScores{cs("east", "llm_forecast_score", 20), cs("west", "llm_forecast_score", 50)}}
		expectScores(t, b, "llm", ok, at)
		s.set(func(*goScorer) { want = "s3cr3t-two" })
		expectFailure(t, b, "llm", http.StatusBadRequest, dsf.ReasonScorerFailed, false, "answered 401")
		if err := os.WriteFile(file, []byte("s3cr3t-two"), 0o600); err != nil {
			t.Fatal(err)
		}
		expectScores(t, b, "llm", ok, at)
		expectFailure(t, b, "unmounted", http.StatusBadRequest, contract.ReasonBadConfig, false, "is the Secret mounted?")
		if strings.Contains(b.log.String(), "s3cr3t") {
			t.Errorf("a token is in the log:\n%s", b.log.String())
		}
	})

	t.Run("a ping writes only the resource its spec names: a /config naming another is refused before any query", func(t *testing.T) {
		s := newGoScorer(t, meanOf)
		// A scorer's /config decides the score's name, hence its resource, with configSyncMode Full.
		s.config = map[string]any{"name": "s", "description": "d",
			"source":  map[string]any{"type": "Prometheus", "host": "http://thanos.example:9090", "path": "/api/v1/query_range", "params": map[string]any{"query": "cpu_usage", "range": 120, "step": 60}},
			"scoring": map[string]any{"path": "/scoring", "params": map[string]any{"name": "other_score", "interval": 30}}}
		full := fmt.Sprintf("  description: d\n  configURL: %s/config\n  configSyncMode: Full\n  location: External\n  scoreDestination: AddOnPlacementScore\n", s.URL)
		// "other" is a configured spec whose resource, other-score, the /config names: still
		// not the Full spec's own.
		b := serve(t, scorerDoc("full", full+"  scoring: {params: {name: s_score}}\n")+scorerDoc("unnamed", full)+
			scorerDoc("other", hubSpec(s.URL, "cpu_usage", "/scoring", "other_score", "")),
			bridgeOptions{endpoints: thanos + "," + s.URL, at: at})
		expectFailure(t, b, "full", http.StatusBadRequest, contract.ReasonBadConfig, false, `the scorer's /config makes its score resource "other-score", not the spec's "s-score"`)
		expectFailure(t, b, "unnamed", http.StatusBadRequest, contract.ReasonBadConfig, false, `its spec names no valid scoring.params.name and the scorer's /config makes it resource "other-score"`)
		if _, n := s.counts(); n != 0 {
			t.Errorf("the scorer was called %d times", n)
		}
		// Its own spec's resource, as any configured scorer's, whatever its name.
		expectScores(t, b, "other", contract.ScoreUpdated{Resource: "other-score", Items: []contract.ClusterScores{cs("east", "other_score", 20), cs("west", "other_score", 50)}}, at)
	})

	t.Run("the scorers file is read again when it changes; a scorer gone is forgotten", func(t *testing.T) {
		s := newGoScorer(t, meanOf)
		b := serve(t, scorerDoc("first", hubSpec(s.URL, "cpu_usage", "/scoring", "s_score", "")), bridgeOptions{endpoints: thanos + "," + s.URL, at: at})
		expectScores(t, b, "first", contract.ScoreUpdated{Resource: "s-score", Items: []contract.ClusterScores{cs("east", "s_score", 20), cs("west", "s_score", 50)}}, at)
		writeFile(t, b.scorers[:strings.LastIndex(b.scorers, "/")], "scorers.yaml", scorerDoc("second", hubSpec(s.URL, "mem_free", "/scoring", "m_score", "")))
		expectScores(t, b, "second", contract.ScoreUpdated{Resource: "m-score", Items: []contract.ClusterScores{cs("east", "m_score", 5)}}, at)
		expectFailure(t, b, "first", http.StatusBadRequest, contract.ReasonBadConfig, false, `no DynamicScorer "first" in the bridge's scorers file (it has second)`)
		if m := b.metrics(t); strings.Contains(m, `scorer="first"`) {
			t.Errorf("/metrics keeps a scorer no longer configured:\n%s", grep(m, "first"))
		}
	})
}

// TestBridgeLLMForecastWithinDSFTimeout: DSF's LLM forecast scorer, unmodified, asks its model once
// per series in turn; with a model answering in 1s and 12 series it answers in about 12s, within
// DSF's 30s (the bridge's default), where a 10s timeout failed every ping.
func TestBridgeLLMForecastWithinDSFTimeout(t *testing.T) {
	prom := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	var series []promserver.Series
	var want []contract.ClusterScores
	for i := range 12 {
		c := fmt.Sprintf("cluster%02d", i)
		series = append(series, promserver.Grid(l("__name__", "app_cpu", "cluster", c, "app", "web"), at, time.Minute, 1, 2, float64(i)))
		want = append(want, cs(c, "llm_forecast_score", i+1))
	}
	prom.MustPush(t, series...)
	model := newCompletions(t, time.Second)
	llm := dsfupstream.Scorer(t, "llm-forecast-scorer", "INFERENCE_ENDPOINT="+model.URL, "MODEL_NAME=stand-in")
	tokens := t.TempDir()
	writeFile(t, tokens, "api-auth-secret/token", "dummy-token-1234")
	b := serve(t, scorerDoc("llm", hubSpec("http://llm.example:8000", "app_cpu", "/scoring", "llm_forecast_score", "    auth: {tokenSecretRef: {name: api-auth-secret, key: token}}")),
		bridgeOptions{endpoints: "http://thanos.example:9090=" + prom.URL + ",http://llm.example:8000=" + llm, at: at, tokenDir: tokens})
	began := time.Now()
	expectScores(t, b, "llm", contract.ScoreUpdated{Resource: "llm-forecast-score", Items: want}, at)
	if took := time.Since(began); took < 12*time.Second || model.calls.Load() != 12 {
		t.Errorf("answered in %v with %d model calls: want 12 calls of 1s", took, model.calls.Load())
	}
}
