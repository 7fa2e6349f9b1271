package dsf_test

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/pkg/dsf"
)

// TestDecodesDSFPublishedObjects: every DynamicScorer and the DynamicScoringConfig DSF publishes
// decode as they are, with the fields DSF's API gives them.
func TestDecodesDSFPublishedObjects(t *testing.T) {
	specs, err := filepath.Glob(filepath.Join(dsfupstream.Dir(t), "samples", "*.yaml"))
	if err != nil || len(specs) < 8 {
		t.Fatalf("DSF's published samples: %v %v", specs, err)
	}
	for _, p := range specs {
		f, err := os.Open(p)
		if err != nil {
			t.Fatal(err)
		}
		objs, err := dsf.DecodeObjects(f)
		_ = f.Close()
		if err != nil {
			t.Errorf("%s: %v", filepath.Base(p), err)
			continue
		}
		if len(objs.Scorers)+len(objs.Masks) == 0 {
			t.Errorf("%s: nothing decoded", filepath.Base(p))
		}
	}

	f, err := os.Open(dsfupstream.Spec(t, "mydynamicscorer-external-llm.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	objs, err := dsf.DecodeObjects(f)
	if err != nil {
		t.Fatal(err)
	}
	s := objs.Scorers[0]
	if s.Name != "llm-forecast-scorer" || s.Spec.ConfigSyncMode != "Full" || s.Spec.ConfigURL != "http://${EXTERNAL_SCORER_IP}:8000/config" ||
		s.Spec.Scoring.Auth == nil || s.Spec.Scoring.Auth.TokenSecretRef != (dsf.SecretRef{Name: "api-auth-secret", Key: "token"}) ||
		s.Spec.Source.Params == nil || s.Spec.Source.Params.Range != 3600 || s.Spec.ScoreDimensionFormat != "${node};${namespace};${pod}" {
		t.Errorf("decoded %+v", s)
	}
	m, err := dsf.DecodeObjects(strings.NewReader(`apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScoringConfig
metadata: {name: dynamic-scoring-config}
spec:
  masks:
    - clusterName: "cluster2"
      scoreName: "llm_forecast_score"
---
apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScoringConfig
metadata: {name: another}
spec:
  masks: [{clusterName: cluster1, scoreName: llm_forecast_score}]
`))
	if err != nil {
		t.Fatal(err)
	}
	if !m.Masks.Has("cluster2", "llm_forecast_score") || m.Masks.Has("cluster1", "llm_forecast_score") || len(m.Masks) != 1 {
		t.Errorf("masks %v: want only dynamic-scoring-config's (DSF reads no other)", m.Masks)
	}
}

func TestDecodeObjectsRefuses(t *testing.T) {
	head := "apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1\nkind: DynamicScorer\n"
	for _, tt := range []struct{ name, doc, quote string }{
		{"misspelt field", head + "metadata: {name: a}\nspec: {configURL: http://s/config, scorng: {}}\n", `unknown field "scorng"`},
		{"no name", head + "spec: {configURL: http://s/config}\n", "without metadata.name"},
		{"two of one name", head + "metadata: {name: a}\nspec: {}\n---\n" + head + "metadata: {name: a}\nspec: {}\n", `a second DynamicScorer "a"`},
		{"another kind", "apiVersion: v1\nkind: ConfigMap\nmetadata: {name: a}\n", "apiVersion"},
		{"another DSF kind", "apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1\nkind: Scorer\nmetadata: {name: a}\n", `kind "Scorer"`},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := dsf.DecodeObjects(strings.NewReader(tt.doc))
			if err == nil || !strings.Contains(err.Error(), tt.quote) {
				t.Errorf("err = %v, want one mentioning %q", err, tt.quote)
			}
		})
	}
}

func TestEndpoints(t *testing.T) {
	e, err := dsf.ParseEndpoints("http://<NodeIP>:30007=http://10.0.0.5:30007, http://${EXTERNAL_SCORER_IP}:8000=https://llm.example/v1/\n http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090")
	if err != nil {
		t.Fatal(err)
	}
	for raw, want := range map[string]string{
		"http://<NodeIP>:30007/config":                                     "http://10.0.0.5:30007/config",
		"http://<nodeip>:30007/healthz":                                    "http://10.0.0.5:30007/healthz",
		"http://${EXTERNAL_SCORER_IP}:8000/scoring":                        "https://llm.example/v1/scoring",
		"http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090": "http://kube-prometheus-kube-prome-prometheus.monitoring.svc:9090",
	} {
		got, err := e.Resolve(raw)
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", raw, got, err, want)
		}
	}
	// A host not mapped is contacted as written.
	for raw, want := range map[string]string{
		"http://10.0.0.5:30007/config":          "http://10.0.0.5:30007/config",
		"HTTP://Scorer.Example:8000/x?y=1":      "http://scorer.example:8000/x?y=1",
		"https://llm.example/v1/completions":    "https://llm.example/v1/completions",
		"http://static-scorer:8000/performance": "http://static-scorer:8000/performance",
	} {
		got, err := e.Resolve(raw)
		if err != nil || got != want {
			t.Errorf("Resolve(%s) = %q, %v; want %q", raw, got, err, want)
		}
	}
	// Placeholders nobody filled in, and what is no http(s) host, never are.
	for _, raw := range []string{"https://<NodeIP>:30007/config", "http://<NodeIP>:30008/", "http://${AI_WORKLOAD_SCORER_HOST}/config", "file:///etc/passwd", "http://@evil/x", "http://a b/"} {
		if got, err := e.Resolve(raw); err == nil {
			t.Errorf("Resolve(%s) = %q, want an error", raw, got)
		}
	}
	for _, bad := range []string{"http://a/path=http://b", "http://a=ftp://b", "http://a=http://b?x=1", "http://a=http://b,http://a=http://c", "nohost"} {
		if _, err := dsf.ParseEndpoints(bad); err == nil {
			t.Errorf("ParseEndpoints(%q) accepted", bad)
		}
	}
}
