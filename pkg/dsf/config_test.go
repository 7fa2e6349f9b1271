package dsf

import (
	"reflect"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

func f(v float64) *float64 { return &v }

func TestValidate(t *testing.T) {
	good := `"source": {"type": "Prometheus", "params": {"query": "up", "range": 300, "step": 60}},
	         "scoring": {"host": "http://s:8000", "path": "/scoring", "params": {"name": "my_score", "interval": 30}}`
	tests := []struct {
		name, data, quote string // quote: "" means valid
	}{
		{"inline, Prometheus", `{` + good + `}`, ""},
		{"a DynamicScorer spec as it is", `{"description": "d", "configURL": "http://s:8000/config", "configSyncMode": "None", "location": "External", "scoreDestination": "AddOnPlacementScore", "scoreDimensionFormat": "${node};${pod}", ` + good + `}`, ""},
		{"configURL only", `{"configURL": "http://s:8000/config"}`, ""},
		{"static scorer", `{"source": {"type": "none"}, "scoring": {"host": "http://s:8000", "path": "/performance/scoring", "params": {"name": "example_performance_score"}}, "scoreDimensionFormat": "${app};${device}"}`, ""},
		{"misspelt field", `{"scorng": {}}`, `unknown field "scorng"`},
		{"nothing to score", `{}`, "source: is required"},
		{"Full without configURL", `{"configSyncMode": "Full", ` + good + `}`, "configSyncMode: Full needs a configURL"},
		{"bad sync mode", `{"configURL": "http://s/config", "configSyncMode": "Sometimes"}`, `configSyncMode: "Sometimes"`},
		{"configURL not http", `{"configURL": "ftp://s/config"}`, "configURL:"},
		{"scoreDestination None", `{"scoreDestination": "None", ` + good + `}`, "scoreDestination:"},
		{"unknown placeholder", `{"scoreDimensionFormat": "${node}-${rack}", ` + good + `}`, "unknown placeholder ${rack}"},
		{"illegal format", `{"scoreDimensionFormat": "${node} x", ` + good + `}`, "cannot make a legal score name"},
		{"source type", `{"source": {"type": "OpenTelemetry"}, "scoring": {"host": "http://s", "path": "/scoring", "params": {"name": "n"}}}`, `source.type: "OpenTelemetry"`},
		{"no query", `{"source": {"type": "Prometheus", "params": {"range": 60, "step": 60}}, "scoring": {"host": "http://s", "path": "/scoring", "params": {"name": "n"}}}`, "source.params.query: is required"},
		{"step over range", `{"source": {"type": "Prometheus", "params": {"query": "up", "range": 60, "step": 120}}, "scoring": {"host": "http://s", "path": "/scoring", "params": {"name": "n"}}}`, "source.params.range, step"},
		{"source path", `{"source": {"type": "Prometheus", "path": "/api/v1/query", "params": {"query": "up", "range": 60, "step": 60}}, "scoring": {"host": "http://s", "path": "/scoring", "params": {"name": "n"}}}`, "source.path:"},
		{"no score name", `{"source": {"type": "None"}, "scoring": {"host": "http://s", "path": "/scoring", "params": {}}}`, "scoring.params.name: is required"},
		{"no scoring host", `{"source": {"type": "None"}, "scoring": {"path": "/scoring", "params": {"name": "n"}}}`, "scoring.host: is required"},
		{"scoring path", `{"source": {"type": "None"}, "scoring": {"host": "http://s", "path": "scoring", "params": {"name": "n"}}}`, "scoring.path:"},
		{"name makes no resource", `{"source": {"type": "None"}, "scoring": {"host": "http://s", "path": "/s", "params": {"name": "__"}}, "scoreDimensionFormat": "x"}`, "set resource"},
		{"secret key escapes its directory", `{"source": {"type": "None"}, "scoring": {"host": "http://s", "path": "/s", "params": {"name": "n"}, "auth": {"tokenSecretRef": {"name": "api-auth-secret", "key": "../../etc/passwd"}}}}`, "scoring.auth.tokenSecretRef.key"},
		{"relative token file", `{"source": {"type": "None"}, "scoring": {"host": "http://s", "path": "/s", "params": {"name": "n"}, "auth": {"tokenFile": "token"}}}`, "scoring.auth.tokenFile"},
		{"both token forms", `{"source": {"type": "None"}, "scoring": {"host": "http://s", "path": "/s", "params": {"name": "n"}, "auth": {"tokenFile": "/t", "tokenSecretRef": {"name": "a", "key": "b"}}}}`, "not both"},
		{"bad cluster", `{"clusters": ["kube-system"], ` + good + `}`, "clusters[0]"},
		{"bad resource", `{"resource": "Not_A_Name", ` + good + `}`, "resource:"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var c Config
			err := contract.DecodeJSON([]byte(tt.data), &c)
			if err == nil {
				err = c.Validate()
			}
			switch {
			case tt.quote == "" && err != nil:
				t.Fatalf("refused: %v", err)
			case tt.quote != "" && (err == nil || !strings.Contains(err.Error(), tt.quote)):
				t.Fatalf("err = %v, want one mentioning %q", err, tt.quote)
			}
		})
	}
}

func TestResolve(t *testing.T) {
	o := Options{PrometheusURL: "http://prom:9090", PrometheusTokenFile: "/prom-token", TokenDir: "/tokens"}
	c := Config{
		ConfigURL: "https://scorer.example:8443/v1/config",
		Source:    &Source{Auth: &Auth{TokenFile: "/src-token"}},
		Scoring:   &Scoring{Auth: &Auth{TokenSecretRef: &SecretKeyRef{Name: "api-auth-secret", Key: "token"}}},
	}
	remote := &RemoteConfig{
		Source:  Source{Type: "prometheus", Host: "http://in-cluster:9090", Path: "/api/v1/query_range", Params: SourceParams{Query: "a; b ;", Range: 600, Step: 60}},
		Scoring: Scoring{Path: "/scoring", Params: ScoringParams{Name: "LLM_forecast_score", Interval: 30}},
	}
	p, err := c.resolve(remote, o)
	if err != nil {
		t.Fatal(err)
	}
	want := &plan{
		name: "LLM_forecast_score", resource: "llm-forecast-score", format: "${scoreName}", clusterLabel: "cluster", interval: 30e9,
		queries: []string{"a", "b"}, promURL: "http://prom:9090", promToken: "/src-token", rng: 600e9, step: 60e9,
		scoringURL: "https://scorer.example:8443/scoring", scoreToken: "/tokens/api-auth-secret/token", healthURL: "https://scorer.example:8443/healthz",
	}
	if !reflect.DeepEqual(p, want) {
		t.Errorf("plan\n  %+v\nwant\n  %+v", p, want)
	}

	// The PingSource's own source host (behind a prefix) is queried; the bridge's token is not sent there.
	c = Config{
		Source:  &Source{Type: "Prometheus", Host: "https://thanos.example/", Path: "/prometheus/api/v1/query_range", Params: SourceParams{Query: "up", Range: 60, Step: 60}},
		Scoring: &Scoring{Host: "http://s:8000/", Path: "/scoring", Params: ScoringParams{Name: "n"}},
	}
	if p, err = c.resolve(nil, o); err != nil {
		t.Fatal(err)
	}
	if p.promURL != "https://thanos.example/prometheus" || p.promToken != "" || p.scoringURL != "http://s:8000/scoring" || p.healthURL != "http://s:8000/healthz" {
		t.Errorf("prom %q token %q scoring %q health %q", p.promURL, p.promToken, p.scoringURL, p.healthURL)
	}
}

func TestResourceName(t *testing.T) {
	for in, want := range map[string]string{
		"sample_my_score":                "sample-my-score",
		"example_performance_score":      "example-performance-score",
		"LLM__Forecast":                  "llm-forecast",
		"_x.y_":                          "x.y",
		"simple-prediction-score":        "simple-prediction-score",
		"example_powerconsumption_score": "example-powerconsumption-score",
	} {
		if got := ResourceName(in); got != want {
			t.Errorf("ResourceName(%q) = %q, want %q", in, got, want)
		}
	}
}

func TestMapResults(t *testing.T) {
	cs := func(cluster string, kv ...any) contract.ClusterScores {
		c := contract.ClusterScores{Cluster: cluster}
		for i := 0; i < len(kv); i += 2 {
			c.Scores = append(c.Scores, contract.Score{Name: kv[i].(string), Value: float64(kv[i+1].(int))})
		}
		return c
	}
	m := func(kv ...string) map[string]string {
		out := map[string]string{}
		for i := 0; i < len(kv); i += 2 {
			out[kv[i]] = kv[i+1]
		}
		return out
	}
	p := &plan{name: "perf", format: "${app};${device}", clusterLabel: "cluster"}
	got, err := p.mapResults([]Result{
		{Metric: m("cluster", "east", "app", "web", "device", "gpu0"), Score: f(150)},      // clamped to 100
		{Metric: m("cluster", "east", "app", "db", "device", "gpu1"), Score: f(-100.4)},    // rounds to -100: not clamped
		{Metric: m("cluster", "west", "app", "web", "device", "gpu0"), Score: f(42.5)},     // half away from zero: 43
		{Metric: m("cluster", "west", "app", "db", "device", "gpu1"), Score: f(-100.5)},    // -101: clamped
		{Metric: m("cluster", "west", "app", "web"), Score: f(1)},                          // "web;" is no score name
		{Metric: m("app", "web", "device", "gpu0"), Score: f(1)},                           // no cluster
		{Metric: m("cluster", "kube-system", "app", "web", "device", "gpu0"), Score: f(1)}, // not a cluster
		{Metric: m("cluster", "east", "app", "x", "device", "y")},                          // no score: never a 0
	})
	if err != nil {
		t.Fatal(err)
	}
	want := []contract.ClusterScores{cs("east", "db;gpu1", -100, "web;gpu0", 100), cs("west", "db;gpu1", -100, "web;gpu0", 43)}
	if !reflect.DeepEqual(got.Items, want) {
		t.Errorf("items %+v, want %+v", got.Items, want)
	}
	if got.Clamped != 2 || !reflect.DeepEqual(got.Dropped, map[string]int{"name": 1, "cluster": 2, "score": 1}) {
		t.Errorf("clamped %d dropped %v, want 2 and name 1, cluster 2, score 1", got.Clamped, got.Dropped)
	}

	// Results without a cluster label go to each listed cluster (a static table); ${cluster} and
	// ${scoreName} are filled by the bridge.
	p = &plan{name: "perf", format: "${scoreName}.${cluster}.${meta}", clusterLabel: "cluster", clusters: []string{"a", "b"}}
	got, err = p.mapResults([]Result{{Metric: m("meta", "m1"), Score: f(5)}, {Metric: m("cluster", "c", "meta", "m2"), Score: f(6)}})
	if err != nil {
		t.Fatal(err)
	}
	want = []contract.ClusterScores{cs("a", "perf.a.m1", 5), cs("b", "perf.b.m1", 5), cs("c", "perf.c.m2", 6)}
	if !reflect.DeepEqual(got.Items, want) {
		t.Errorf("items %+v, want %+v", got.Items, want)
	}

	// Two results naming one score of one cluster: refused, not one picked at random.
	p = &plan{name: "cpu", format: "${node}", clusterLabel: "cluster"}
	_, err = p.mapResults([]Result{{Metric: m("cluster", "a", "node", "n1", "pod", "p1"), Score: f(1)}, {Metric: m("cluster", "a", "node", "n1", "pod", "p2"), Score: f(2)}})
	if err == nil || !strings.Contains(err.Error(), `two results give cluster "a" the score "n1"`) {
		t.Errorf("err = %v", err)
	}
}
