package watcher

import (
	"math"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
)

func TestDeadbandBeyond(t *testing.T) {
	tests := []struct {
		name        string
		d           Deadband
		last, value float64
		want        bool
	}{
		{"no band: any change", Deadband{}, 1, 1.0000001, true},
		{"no band: no change", Deadband{}, 1, 1, false},
		{"absolute: within", Deadband{Absolute: 0.5}, 10, 10.25, false},
		{"absolute: on the edge is within", Deadband{Absolute: 0.5}, 10, 10.5, false},
		{"absolute: beyond, downwards", Deadband{Absolute: 0.5}, 10, 9.25, true},
		{"relative: within 10% of 200", Deadband{Relative: 0.1}, 200, 219, false},
		{"relative: beyond 10% of 200", Deadband{Relative: 0.1}, 200, 221, true},
		{"relative of a negative value", Deadband{Relative: 0.1}, -200, -179, true},
		{"relative alone at zero: any change", Deadband{Relative: 0.1}, 0, 0.001, true},
		{"absolute floors relative near zero", Deadband{Absolute: 0.01, Relative: 0.1}, 0, 0.005, false},
		{"the wider band wins: relative", Deadband{Absolute: 1, Relative: 0.1}, 100, 109, false},
		{"the wider band wins: absolute", Deadband{Absolute: 5, Relative: 0.01}, 100, 104, false},
		{"beyond both", Deadband{Absolute: 5, Relative: 0.01}, 100, 106, true},
	}
	for _, tt := range tests {
		if got := tt.d.Beyond(tt.last, tt.value); got != tt.want {
			t.Errorf("%s: Beyond(%v, %v) = %v, want %v", tt.name, tt.last, tt.value, got, tt.want)
		}
	}
}

func TestValidate(t *testing.T) {
	q := func(metric, query string) Query { return Query{Metric: metric, Query: query} }
	tests := []struct {
		name   string
		cfg    Config
		errHas []string // none: valid
	}{
		{"valid, cluster label defaulted", Config{Queries: []Query{q("m", "up")}}, nil},
		{"no queries", Config{}, []string{"no queries"}},
		{"bad metric name", Config{Queries: []Query{q("cpu-ratio", "up")}}, []string{"queries[0].metric"}},
		{"empty query", Config{Queries: []Query{q("m", " ")}}, []string{"queries[0].query: is required"}},
		{"duplicate metric", Config{Queries: []Query{q("m", "up"), q("m", "down")}}, []string{`queries[1].metric: "m" is also queries[0]'s`}},
		{"bad cluster label", Config{Queries: []Query{{Metric: "m", Query: "up", ClusterLabel: "managed-cluster"}}}, []string{"queries[0].clusterLabel"}},
		{"negative and non-finite deadbands", Config{Queries: []Query{{Metric: "m", Query: "up", Deadband: Deadband{Absolute: -1, Relative: math.NaN()}}}},
			[]string{"queries[0].deadband.absolute", "queries[0].deadband.relative"}},
		{"every problem reported", Config{Queries: []Query{q("", ""), {Metric: "n", Query: "up", Deadband: Deadband{Relative: math.Inf(1)}}}},
			[]string{"queries[0].metric", "queries[0].query", "queries[1].deadband.relative"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := tt.cfg.Validate()
			if len(tt.errHas) == 0 {
				if err != nil {
					t.Fatalf("err = %v, want valid", err)
				}
				for _, q := range tt.cfg.Queries {
					if q.ClusterLabel != DefaultClusterLabel {
						t.Errorf("cluster label = %q, want the default", q.ClusterLabel)
					}
				}
				return
			}
			if err == nil {
				t.Fatal("valid, want an error")
			}
			for _, s := range tt.errHas {
				if !strings.Contains(err.Error(), s) {
					t.Errorf("err = %v, want it to contain %q", err, s)
				}
			}
		})
	}
}

func TestLoad(t *testing.T) {
	dir := t.TempDir()
	file := func(name, content string) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, []byte(content), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	yamlFile := file("watcher.yaml", `
queries:
  - metric: cluster_cpu_ratio
    query: sum by (cluster) (rate(container_cpu_usage_seconds_total[5m]))
    deadband: {absolute: 0.02}
  - metric: cluster_mem_free_bytes
    query: sum by (managed_cluster) (node_memory_MemAvailable_bytes)
    clusterLabel: managed_cluster
    deadband:
      relative: 0.05
`)
	jsonFile := file("watcher.json", `{"queries":[{"metric":"m","query":"up","deadband":{"absolute":1,"relative":0.5}}]}`)
	typo := file("typo.yaml", "queries:\n  - metric: m\n    query: up\n    dedband: {absolute: 1}\n")
	invalid := file("invalid.yaml", "queries:\n  - metric: bad-name\n    query: up\n")

	single := Query{Metric: "single", Query: "up", ClusterLabel: "cluster", Deadband: Deadband{Absolute: 3}}
	tests := []struct {
		name   string
		path   string
		single Query
		want   []Query
		errHas string
	}{
		{name: "yaml", path: yamlFile, want: []Query{
			{Metric: "cluster_cpu_ratio", Query: "sum by (cluster) (rate(container_cpu_usage_seconds_total[5m]))", ClusterLabel: "cluster", Deadband: Deadband{Absolute: 0.02}},
			{Metric: "cluster_mem_free_bytes", Query: "sum by (managed_cluster) (node_memory_MemAvailable_bytes)", ClusterLabel: "managed_cluster", Deadband: Deadband{Relative: 0.05}},
		}},
		{name: "json", path: jsonFile, want: []Query{{Metric: "m", Query: "up", ClusterLabel: "cluster", Deadband: Deadband{Absolute: 1, Relative: 0.5}}}},
		{name: "flags only", single: single, want: []Query{single}},
		{name: "file plus flags", path: jsonFile, single: single, want: []Query{{Metric: "m", Query: "up", ClusterLabel: "cluster", Deadband: Deadband{Absolute: 1, Relative: 0.5}}, single}},
		{name: "misspelt field", path: typo, errHas: `unknown field "dedband"`},
		{name: "invalid content", path: invalid, errHas: "queries[0].metric"},
		{name: "missing file", path: filepath.Join(dir, "nope.yaml"), errHas: "no such file"},
		{name: "nothing", errHas: "no queries"},
		{name: "--query without --metric", single: Query{Query: "up"}, errHas: "--query needs --metric"},
		{name: "--metric without --query", single: Query{Metric: "m"}, errHas: "--metric needs --query"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := Load(tt.path, tt.single)
			if tt.errHas != "" {
				if err == nil || !strings.Contains(err.Error(), tt.errHas) {
					t.Fatalf("err = %v, want it to contain %q", err, tt.errHas)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(c.Queries, tt.want) {
				t.Errorf("queries =\n %+v\nwant\n %+v", c.Queries, tt.want)
			}
		})
	}
}
