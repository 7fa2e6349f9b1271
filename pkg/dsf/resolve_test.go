package dsf

import (
	"reflect"
	"strings"
	"testing"
	"time"
)

var testSettings = Settings{
	Endpoints: Endpoints{
		"http://<nodeip>:30007":           "http://10.0.0.5:30007",
		"http://prom.monitoring.svc:9090": "http://10.0.0.9:9090",
		"http://scorer.example":           "http://10.0.0.7",
		"http://other-prom:9090":          "http://10.0.0.8:9090",
	},
}

func scorerOf(spec ScorerSpec) *DynamicScorer {
	ds := &DynamicScorer{Spec: spec}
	ds.Name = "s"
	return ds
}

const withheldMark = "(withheld)"

var (
	promToken = &SecretRef{Name: "source-query-secret", Key: "token"}
	apiToken  = &SecretRef{Name: "api-auth-secret", Key: "token"}
)

// TestResolveMergesLikeDSF: with configSyncMode Full a field /config sets wins, field by field;
// what it leaves out comes from the spec, and hosts from configURL last, as DSF's controller builds
// its summaries (getValid* in internal/controller/dynamicscoringconfig_controller.go). The spec's
// tokens go only to the hosts the spec gives them for: a host /config moves elsewhere gets none.
func TestResolveMergesLikeDSF(t *testing.T) {
	base := ScorerSpec{
		ConfigURL: "http://<NodeIP>:30007/config", ConfigSyncMode: SyncFull, Location: "Internal", ScoreDestination: DestinationAPS,
		ScoreDimensionFormat: "${node};${namespace};${pod}",
		Source: SourceSpec{Host: "http://prom.monitoring.svc:9090", Path: "/api/v1/query_range", Params: &SourceParams{Query: "spec_query", Range: 600, Step: 30},
			Auth: &Auth{TokenSecretRef: SecretRef{Name: "source-query-secret", Key: "token"}}},
		Scoring: ScoringSpec{Path: "/spec-scoring", Params: &ScoringParams{Name: "spec_score", Interval: 45},
			Auth: &Auth{TokenSecretRef: SecretRef{Name: "api-auth-secret", Key: "token"}}},
	}
	sample := &RemoteConfig{Name: "sample-scorer",
		Source:  RemoteSource{Type: "Prometheus", Host: "http://other-prom:9090", Path: "/api/v1/query_range", Params: RemoteSourceParams{Query: "a; b ;", Range: 3600, Step: 60}},
		Scoring: RemoteScoring{Path: "/scoring", Params: RemoteScoringParams{Name: "sample_my_score", Interval: 30}}}
	tests := []struct {
		name   string
		spec   func(*ScorerSpec)
		remote *RemoteConfig
		want   Plan
	}{
		{"Full: /config wins field by field, auth stays the spec's", nil, sample, Plan{
			ScoreName: "sample_my_score", Resource: "sample-my-score", Interval: 30 * time.Second,
			Queries: []string{"a", "b"}, Range: time.Hour, Step: time.Minute, PromURL: "http://10.0.0.8:9090", PromWithheld: withheldMark,
			ScoringURL: "http://10.0.0.5:30007/scoring", ScoringAuth: apiToken}},
		{"Full: what /config leaves out falls back to the spec", nil, &RemoteConfig{
			Source:  RemoteSource{Type: "prometheus", Params: RemoteSourceParams{Range: 120}},
			Scoring: RemoteScoring{Params: RemoteScoringParams{Name: "partial"}}}, Plan{
			ScoreName: "partial", Resource: "partial", Interval: 45 * time.Second,
			Queries: []string{"spec_query"}, Range: 2 * time.Minute, Step: 30 * time.Second, PromURL: "http://10.0.0.9:9090", PromAuth: promToken,
			ScoringURL: "http://10.0.0.5:30007/spec-scoring", ScoringAuth: apiToken}},
		{"/config's scoring.host is the scoring host (DSF's controller takes the source host: not copied)", nil, &RemoteConfig{
			Source:  RemoteSource{Type: "None", Host: "http://other-prom:9090"},
			Scoring: RemoteScoring{Host: "http://scorer.example", Path: "/s", Params: RemoteScoringParams{Name: "n", Interval: 10}}}, Plan{
			ScoreName: "n", Resource: "n", Interval: 10 * time.Second, ScoringURL: "http://10.0.0.7/s", ScoringWithheld: withheldMark}},
		{"None: the spec alone, hosts from configURL when it names none", func(s *ScorerSpec) {
			s.ConfigSyncMode, s.Source.Type, s.Source.Host = SyncNone, "Prometheus", ""
		}, nil, Plan{
			ScoreName: "spec_score", Resource: "spec-score", Interval: 45 * time.Second,
			Queries: []string{"spec_query"}, Range: 10 * time.Minute, Step: 30 * time.Second, PromURL: "http://10.0.0.5:30007", PromAuth: promToken,
			ScoringURL: "http://10.0.0.5:30007/spec-scoring", ScoringAuth: apiToken}},
		{"scoreDestination None: resolved, written nowhere", func(s *ScorerSpec) {
			s.ConfigSyncMode, s.Source.Type, s.ScoreDestination = SyncNone, "None", DestinationNone
		}, nil, Plan{
			ScoreName: "spec_score", Resource: "spec-score", Interval: 45 * time.Second,
			ScoringURL: "http://10.0.0.5:30007/spec-scoring", ScoringAuth: apiToken}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			spec := base
			spec.Source.Params, spec.Scoring.Params = new(SourceParams), new(ScoringParams)
			*spec.Source.Params, *spec.Scoring.Params = *base.Source.Params, *base.Scoring.Params
			if tt.spec != nil {
				tt.spec(&spec)
			}
			ds := scorerOf(spec)
			if _, err := Prepare(ds, testSettings); err != nil {
				t.Fatal(err)
			}
			got, err := Resolve(ds, tt.remote, testSettings)
			if err != nil {
				t.Fatal(err)
			}
			want := tt.want
			want.Scorer, want.Format, want.Write = "s", "${node};${namespace};${pod}", spec.ScoreDestination == DestinationAPS
			// A withheld token says why, naming both hosts; the message itself is not the point.
			for _, w := range []struct{ got, want *string }{{&got.PromWithheld, &want.PromWithheld}, {&got.ScoringWithheld, &want.ScoringWithheld}} {
				if *w.want == withheldMark && strings.Contains(*w.got, "not sent to") {
					*w.got = withheldMark
				}
			}
			if !reflect.DeepEqual(*got, want) {
				t.Errorf("plan\n  %+v\nwant\n  %+v", *got, want)
			}
		})
	}
}

// TestResolveRefuses: what DSF's controller would leave out is refused with the field named; a
// host the deployment did not list is never resolved to a URL.
func TestResolveRefuses(t *testing.T) {
	ok := ScorerSpec{ConfigURL: "http://scorer.example/config", ConfigSyncMode: SyncNone, Location: "External", ScoreDestination: DestinationAPS,
		Source: SourceSpec{Type: "None"}, Scoring: ScoringSpec{Path: "/scoring", Params: &ScoringParams{Name: "n", Interval: 30}}}
	tests := []struct {
		name  string
		edit  func(*ScorerSpec)
		quote string
	}{
		{"no configURL", func(s *ScorerSpec) { s.ConfigURL = "" }, "configURL: is required"},
		{"configURL a placeholder nobody filled in", func(s *ScorerSpec) { s.ConfigURL = "http://${EXTERNAL_SCORER_IP}:8000/config" }, "http://${external_scorer_ip}:8000 is a placeholder"},
		{"configURL not http", func(s *ScorerSpec) { s.ConfigURL = "file:///etc/passwd" }, "configURL:"},
		{"sync mode", func(s *ScorerSpec) { s.ConfigSyncMode = "" }, "configSyncMode"},
		{"location (DSF skips such a scorer)", func(s *ScorerSpec) { s.Location = "" }, "location: is required"},
		{"destination (DSF skips such a scorer)", func(s *ScorerSpec) { s.ScoreDestination = "" }, "scoreDestination: is required"},
		{"unknown placeholder", func(s *ScorerSpec) { s.ScoreDimensionFormat = "${rack}" }, "unknown placeholder ${rack}"},
		{"a Secret key out of its directory", func(s *ScorerSpec) {
			s.Scoring.Auth = &Auth{TokenSecretRef: SecretRef{Name: "api-auth-secret", Key: "../../etc/passwd"}}
		}, "tokenSecretRef.key"},
		{"a Secret name out of its directory", func(s *ScorerSpec) { s.Source.Auth = &Auth{TokenSecretRef: SecretRef{Name: "..", Key: "token"}} }, "tokenSecretRef.name"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			s.Scoring.Params = &ScoringParams{Name: "n", Interval: 30}
			tt.edit(&s)
			_, err := Prepare(scorerOf(s), testSettings)
			if err == nil || !strings.Contains(err.Error(), tt.quote) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.quote)
			}
		})
	}
	resolveTests := []struct {
		name   string
		edit   func(*ScorerSpec)
		remote *RemoteConfig
		quote  string
	}{
		{"no interval anywhere", func(s *ScorerSpec) { s.Scoring.Params.Interval = 0 }, nil, "scoring.params.interval: is required"},
		{"no score name anywhere", func(s *ScorerSpec) { s.Scoring.Params.Name = "" }, nil, "scoring.params.name: is required"},
		{"no source type", func(s *ScorerSpec) { s.Source.Type = "" }, nil, "source.type: is required"},
		{"another source", func(s *ScorerSpec) { s.Source.Type = "OpenTelemetry" }, nil, `source.type: "OpenTelemetry"`},
		{"no query", func(s *ScorerSpec) {
			s.Source.Type = "Prometheus"
			s.Source.Params = &SourceParams{Range: 60, Step: 60}
		}, nil, "source.params.query: is required"},
		{"step over range", func(s *ScorerSpec) {
			s.Source.Type = "Prometheus"
			s.Source.Params = &SourceParams{Query: "up", Range: 60, Step: 120}
		}, nil, "source.params.range, step"},
		{"not query_range", func(s *ScorerSpec) {
			s.Source.Type, s.Source.Path = "Prometheus", "/api/v1/query"
			s.Source.Params = &SourceParams{Query: "up", Range: 60, Step: 60}
		}, nil, "source.path"},
		{"/config names a placeholder", nil, &RemoteConfig{
			Source:  RemoteSource{Type: "Prometheus", Host: "http://${PROM}", Path: "/api/v1/query_range", Params: RemoteSourceParams{Query: "up", Range: 60, Step: 60}},
			Scoring: RemoteScoring{Path: "/scoring", Params: RemoteScoringParams{Name: "n", Interval: 30}}}, "the scorer's /config source.host: http://${prom} is a placeholder"},
		{"a score name that makes an invalid object name", func(s *ScorerSpec) { s.Scoring.Params.Name = "a..b" }, nil, `"a..b" is not a valid AddOnPlacementScore name`},
	}
	for _, tt := range resolveTests {
		t.Run(tt.name, func(t *testing.T) {
			s := ok
			s.Scoring.Params = &ScoringParams{Name: "n", Interval: 30}
			if tt.edit != nil {
				tt.edit(&s)
			}
			_, err := Resolve(scorerOf(s), tt.remote, testSettings)
			if err == nil || !strings.Contains(err.Error(), tt.quote) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.quote)
			}
		})
	}
}

// TestResourceNameAsDSF: the AddOnPlacementScore's name is the score name sanitised exactly as
// DSF's agent does (sanitizeResourceName).
func TestResourceNameAsDSF(t *testing.T) {
	for in, want := range map[string]string{
		"sample_my_score":               "sample-my-score",
		"llm_forecast_score":            "llm-forecast-score",
		"LLM__Forecast Score":           "llm-forecast-score",
		"":                              "score",
		"__":                            "score",
		".x.":                           "x",
		"-a.b-":                         "a.b",
		strings.Repeat("a", 252) + "_b": strings.Repeat("a", 252),
	} {
		if got := ResourceName(in); got != want {
			t.Errorf("ResourceName(%q) = %q, want %q", in, got, want)
		}
	}
}

// TestAgentResourceIsWhatTheAgentWrites: AgentResource, what the agent gateway admits for a
// DynamicScorer, is the Resource of the plan an agent resolves from the same object (its status's
// synced /config with configSyncMode Full), and nothing with scoreDestination None.
func TestAgentResourceIsWhatTheAgentWrites(t *testing.T) {
	spec := func(sync, dest, name string, synced string) *DynamicScorer {
		ds := &DynamicScorer{Spec: ScorerSpec{ConfigURL: "http://acme.example:8000/config", ConfigSyncMode: sync, Location: "External",
			ScoreDestination: dest, Source: SourceSpec{Type: SourceNone}, Scoring: ScoringSpec{Path: "/scoring"}}}
		ds.Name = "acme"
		if name != "" {
			ds.Spec.Scoring.Params = &ScoringParams{Name: name, Interval: 60}
		}
		if synced != "" {
			ds.Status.LastSyncedConfig = &RemoteConfig{Scoring: RemoteScoring{Params: RemoteScoringParams{Name: synced, Interval: 60}}}
		}
		return ds
	}
	for _, c := range []struct {
		what string
		ds   *DynamicScorer
		want string
	}{
		{"the spec's name", spec(SyncNone, DestinationAPS, "acme_cpu", ""), "acme-cpu"},
		{"Full: the synced /config's name wins", spec(SyncFull, DestinationAPS, "acme_cpu", "Acme Memory"), "acme-memory"},
		{"Full: DSF's sample, named by its /config only", spec(SyncFull, DestinationAPS, "", "sample_my_score"), "sample-my-score"},
		{"Full, not synced yet: the spec's", spec(SyncFull, DestinationAPS, "acme_cpu", ""), "acme-cpu"},
		{"None sync: a status's config is not the agent's", spec(SyncNone, DestinationAPS, "acme_cpu", "other"), "acme-cpu"},
		{"scoreDestination None", spec(SyncNone, DestinationNone, "acme_cpu", ""), ""},
		{"no destination", spec(SyncNone, "", "acme_cpu", ""), ""},
		{"no name anywhere", spec(SyncFull, DestinationAPS, "", ""), ""},
	} {
		got := AgentResource(c.ds)
		if got != c.want {
			t.Errorf("%s: AgentResource = %q, want %q", c.what, got, c.want)
		}
		var synced *RemoteConfig
		if c.ds.Spec.ConfigSyncMode == SyncFull {
			synced = c.ds.Status.LastSyncedConfig
		}
		if _, err := Prepare(c.ds, Settings{}); err != nil {
			continue // the agent does not run it
		}
		if p, err := Resolve(c.ds, synced, Settings{}); err == nil && p.Write && p.Resource != got {
			t.Errorf("%s: the agent writes %q, AgentResource says %q", c.what, p.Resource, got)
		}
	}
}

// TestSpecResourceIsTheSpecsOwn: SpecResource, what the bridge lets a DynamicScorer write, is its
// spec's scoring.params.name made an object name, never a /config's, and nothing with
// scoreDestination None or no name in the spec.
func TestSpecResourceIsTheSpecsOwn(t *testing.T) {
	spec := func(dest, name string) *DynamicScorer {
		ds := &DynamicScorer{Spec: ScorerSpec{ConfigSyncMode: SyncFull, ScoreDestination: dest}}
		if name != "" {
			ds.Spec.Scoring.Params = &ScoringParams{Name: name}
		}
		ds.Status.LastSyncedConfig = &RemoteConfig{Scoring: RemoteScoring{Params: RemoteScoringParams{Name: "from_config"}}}
		return ds
	}
	for _, c := range []struct {
		ds   *DynamicScorer
		want string
	}{
		{spec(DestinationAPS, "Team_GPU_Headroom"), "team-gpu-headroom"},
		{spec(DestinationAPS, ""), ""},
		{spec(DestinationNone, "acme_cpu"), ""},
		{spec(DestinationAPS, strings.Repeat("x", 300)), strings.Repeat("x", 253)},
	} {
		if got := SpecResource(c.ds); got != c.want {
			t.Errorf("SpecResource(%+v) = %q, want %q", c.ds.Spec, got, c.want)
		}
	}
}
