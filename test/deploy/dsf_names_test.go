package deploy

import (
	"encoding/json"
	"net/http"
	"sort"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/scorer/static"
)

// TestDemoKeepsClearOfDSFNames: no AddOnPlacementScore scoreflow's shipped demo writes (the
// static-scorer's table, its defaults and every PingSource's resource) is one a DSF user's
// published scorer writes. Two writers of one name for the same clusters would mix their scores:
// DSF's quickstart runs example-performance-score for cluster1 and cluster2. DSF's names come from
// DSF itself: each published spec's scoring.params.name, and the /config answers of DSF's own
// sample scorers, run unmodified, at the paths the published specs name.
func TestDemoKeepsClearOfDSFNames(t *testing.T) {
	dsfNames := map[string]string{} // AddOnPlacementScore -> where DSF names it
	apps := map[string]string{}     // a published spec's configURL host -> the sample app serving it
	for _, c := range []struct{ spec, app string }{
		{"mydynamicscorer-sample.yaml", "sample-scorer"},
		{"mydynamicscorer-example-performance.yaml", "static-scorer"},
		{"mydynamicscorer-example-powerconsumption.yaml", "static-scorer"},
		{"mydynamicscorer-external-llm.yaml", "llm-forecast-scorer"},
		{"mydynamicscorer-simple-prediction.yaml", ""},
		{"ai-workload-perf-scorer.yaml", ""},
		{"ai-workload-power-scorer.yaml", ""},
	} {
		objs, err := knlocal.ReadFiles(dsfupstream.Spec(t, c.spec))
		if err != nil || len(objs) != 1 {
			t.Fatalf("%s: %d objects, %v", c.spec, len(objs), err)
		}
		raw, _ := objs[0].MarshalJSON()
		var ds dsf.DynamicScorer
		if err := json.Unmarshal(raw, &ds); err != nil {
			t.Fatalf("%s: %v", c.spec, err)
		}
		if p := ds.Spec.Scoring.Params; p != nil && p.Name != "" {
			dsfNames[dsf.ResourceName(p.Name)] = c.spec
		}
		if c.app == "" {
			continue // a scorer Debian cannot run (darts) or not published: its spec is all there is
		}
		base, ok := apps[c.app]
		if !ok {
			base = dsfupstream.Scorer(t, c.app)
			apps[c.app] = base
		}
		// The path only: the host is a placeholder (${EXTERNAL_SCORER_IP}) no URL parser takes.
		_, after, _ := strings.Cut(ds.Spec.ConfigURL, "://")
		path := after[strings.Index(after, "/"):]
		resp, err := http.Get(base + path)
		if err != nil {
			t.Fatal(err)
		}
		var rc dsf.RemoteConfig
		err = json.NewDecoder(resp.Body).Decode(&rc)
		_ = resp.Body.Close()
		if err != nil || rc.Scoring.Params.Name == "" {
			t.Fatalf("%s%s: %v, scoring.params.name %q", c.app, path, err, rc.Scoring.Params.Name)
		}
		dsfNames[dsf.ResourceName(rc.Scoring.Params.Name)] = c.app + path
	}
	if dsfNames["example-performance-score"] == "" || dsfNames["sample-my-score"] == "" {
		t.Fatalf("DSF's names %v lack its quickstart's", dsfNames)
	}

	s := load(t, setHub)
	demo := map[string]string{}
	for _, r := range static.DefaultResources() {
		demo[r.Name] = "pkg/scorer/static.DefaultResources"
	}
	table, err := mountedFile(s, "static-scorer", "TABLE")
	if err != nil {
		t.Fatal(err)
	}
	tbl, err := static.Parse(table)
	if err != nil {
		t.Fatal(err)
	}
	for _, n := range tbl.ResourceNames() {
		demo[n] = "the static-scorer's table"
	}
	for _, it := range s.PingSources {
		var c struct {
			Resource string `json:"resource"`
		}
		if json.Unmarshal([]byte(it.Object.Spec.Data), &c) == nil && c.Resource != "" {
			demo[c.Resource] = it.Source.String()
		}
	}
	var clash []string
	for n, where := range demo {
		if by, ok := dsfNames[n]; ok {
			clash = append(clash, n+" ("+where+"; DSF: "+by+")")
		}
	}
	sort.Strings(clash)
	if len(clash) > 0 {
		t.Errorf("the demo writes AddOnPlacementScores DSF's published scorers write: %v", clash)
	}
	for n := range demo {
		if err := contract.ValidateResourceName(n); err != nil {
			t.Errorf("demo resource %q: %v", n, err)
		}
	}
}
