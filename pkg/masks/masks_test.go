package masks_test

import (
	"context"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/masks"
)

func TestParse(t *testing.T) {
	s, err := masks.Parse([]byte(`
- {cluster: cluster2, resource: cpu-idle, score: cpuIdle}
- {cluster: cluster2, resource: cpu-idle, score: memFree}
- {cluster: cluster1, resource: demo-performance-score, score: "app01;gpu0"}
- {cluster: cluster2, resource: cpu-idle, score: cpuIdle}
`))
	if err != nil {
		t.Fatal(err)
	}
	if got := s.Scores("cluster2", "cpu-idle"); !reflect.DeepEqual(got, []string{"cpuIdle", "memFree"}) {
		t.Errorf("cluster2/cpu-idle masks %v", got)
	}
	if got := s.Scores("cluster1", "cpu-idle"); got != nil {
		t.Errorf("cluster1/cpu-idle masks %v, want none", got)
	}
	if s.Len() != 3 {
		t.Errorf("len %d, want 3 (a repeated entry counts once)", s.Len())
	}
	want := []masks.Entry{{"cluster1", "demo-performance-score", "app01;gpu0"}, {"cluster2", "cpu-idle", "cpuIdle"}, {"cluster2", "cpu-idle", "memFree"}}
	if got := s.Entries(); !reflect.DeepEqual(got, want) {
		t.Errorf("entries %v, want %v", got, want)
	}
	for _, empty := range []string{"", "[]", "# nothing masked\n"} {
		if s, err := masks.Parse([]byte(empty)); err != nil || s.Len() != 0 {
			t.Errorf("%q: %v, %d entries", empty, err, s.Len())
		}
	}
	var none *masks.Set
	if none.Scores("a", "b") != nil || none.Len() != 0 {
		t.Error("a nil set must mask nothing")
	}

	for in, quote := range map[string]string{
		`- {clusterName: c, scoreName: s}`:                                                   `unknown field "clusterName"`,
		`- {cluster: kube-system, resource: r, score: s}`:                                    "[0].cluster",
		`- {cluster: c, resource: Not_Valid, score: s}`:                                      "[0].resource",
		"- {cluster: c, resource: r, score: s}\n- {cluster: c, resource: r, score: \"a b\"}": "[1].score",
		`{cluster: c}`: "cannot unmarshal",
	} {
		if _, err := masks.Parse([]byte(in)); err == nil || !strings.Contains(err.Error(), quote) {
			t.Errorf("%s: err = %v, want one mentioning %q", in, err, quote)
		}
	}
}

func TestAdded(t *testing.T) {
	a, _ := masks.Parse([]byte(`[{cluster: c1, resource: r, score: x}, {cluster: c2, resource: r, score: x}]`))
	b, _ := masks.Parse([]byte(`[{cluster: c2, resource: r, score: x}, {cluster: c3, resource: r, score: z}]`))
	if got := masks.Added(a, b); !reflect.DeepEqual(got, []masks.Entry{{"c3", "r", "z"}}) {
		t.Errorf("added %v", got)
	}
	if got := masks.Added(nil, a); len(got) != 2 {
		t.Errorf("added from nothing %v", got)
	}
}

func TestFileFollowsConfigMapUpdates(t *testing.T) {
	path, publish := functest.ConfigMapFile(t, "masks.yaml", "[]")
	reg := prometheus.NewRegistry()
	f, err := masks.Open(path, nil, reg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	added := make(chan []masks.Entry, 10)
	go f.Watch(ctx, 10*time.Millisecond, func(es []masks.Entry) { added <- es })
	next := func() []masks.Entry {
		t.Helper()
		select {
		case es := <-added:
			return es
		case <-time.After(5 * time.Second):
			t.Fatal("no change seen in 5s")
			return nil
		}
	}

	publish("- {cluster: c1, resource: r, score: x}\n")
	if es := next(); !reflect.DeepEqual(es, []masks.Entry{{"c1", "r", "x"}}) {
		t.Errorf("added %v", es)
	}
	if !reflect.DeepEqual(f.Scores("c1", "r"), []string{"x"}) {
		t.Errorf("masks in force: %v", f.Scores("c1", "r"))
	}

	// A refused content keeps the masks in force, and says so in the metrics.
	publish("- {cluster: c1, resource: r, scor: z}\n")
	deadline := time.Now().Add(5 * time.Second)
	for metric(t, reg, "scoreflow_masks_last_reload_successful") != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the refused content was not noticed")
		}
		time.Sleep(10 * time.Millisecond)
	}
	if !reflect.DeepEqual(f.Scores("c1", "r"), []string{"x"}) {
		t.Errorf("after a refused content the masks are %v, want the previous ones", f.Scores("c1", "r"))
	}

	// Unmasking x and masking z: only z is added.
	publish("- {cluster: c1, resource: r, score: z}\n")
	if es := next(); !reflect.DeepEqual(es, []masks.Entry{{"c1", "r", "z"}}) {
		t.Errorf("added %v", es)
	}
	if !reflect.DeepEqual(f.Scores("c1", "r"), []string{"z"}) {
		t.Errorf("masks in force: %v", f.Scores("c1", "r"))
	}
	for name, want := range map[string]float64{"scoreflow_masks": 1, "scoreflow_masks_last_reload_successful": 1, "scoreflow_masks_reloads_total": 4} {
		if got := metric(t, reg, name); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
}

func TestOpenRefusesABadFile(t *testing.T) {
	dir := t.TempDir()
	if _, err := masks.Open(filepath.Join(dir, "missing.yaml"), nil, nil); err == nil {
		t.Error("a missing file was accepted")
	}
	bad := filepath.Join(dir, "bad.yaml")
	if err := os.WriteFile(bad, []byte("- {cluster: default, resource: r, score: s}"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := masks.Open(bad, nil, nil); err == nil || !strings.Contains(err.Error(), "[0].cluster") {
		t.Errorf("err = %v", err)
	}
}

// metric sums the values of a gauge or counter in reg.
func metric(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
		for _, m := range mf.GetMetric() {
			sum += m.GetGauge().GetValue() + m.GetCounter().GetValue()
		}
	}
	return sum
}
