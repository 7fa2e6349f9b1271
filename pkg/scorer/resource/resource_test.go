package resource

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

const gib = 1 << 30

func cfgWith(edit func(*Config)) *Config {
	c := DefaultConfig()
	if edit != nil {
		edit(&c)
	}
	return &c
}

type value struct {
	cluster, resource string
	alloc             bool
	v                 float64
}

func TestScores(t *testing.T) {
	tests := []struct {
		name   string
		cfg    *Config
		values []value
		want   []contract.ClusterScores
	}{
		{
			// alloc 32 cores, 128 GiB, 8 GPUs; requested 12, 48 GiB, 2: available 20, 80 GiB, 6.
			//   cpuAvailable      20/64*200-100  = -37.5  -> -38 (half away from zero)
			//   memAvailable      80/256*200-100 = -37.5  -> -38
			//   gpuAvailable      6/8*200-100    =  50
			//   cpuAvailableRatio 100*20/32      =  62.5  -> 63
			//   memAvailableRatio 100*80/128     =  62.5  -> 63
			//   gpuAvailableRatio 100*6/8        =  75
			name: "defaults",
			cfg:  cfgWith(nil),
			values: []value{
				{"east", "cpu", true, 32}, {"east", "memory", true, 128 * gib}, {"east", "nvidia_com_gpu", true, 8},
				{"east", "cpu", false, 12}, {"east", "memory", false, 48 * gib}, {"east", "nvidia_com_gpu", false, 2},
			},
			want: []contract.ClusterScores{{Cluster: "east", Scores: []contract.Score{
				{Name: "cpuAvailable", Value: -38}, {Name: "memAvailable", Value: -38}, {Name: "gpuAvailable", Value: 50},
				{Name: "cpuAvailableRatio", Value: 63}, {Name: "memAvailableRatio", Value: 63}, {Name: "gpuAvailableRatio", Value: 75},
			}}},
		},
		{
			// No GPU series: no GPU scores, not zeros. No requests: everything free.
			//   cpuAvailable 8/64*200-100 = -75; cpuAvailableRatio 100.
			name: "no gpu, no requests",
			cfg: cfgWith(func(c *Config) {
				c.Scores = []string{"cpuAvailable", "gpuAvailable", "cpuAvailableRatio", "free-capacity"}
			}),
			values: []value{{"west", "cpu", true, 8}},
			want:   []contract.ClusterScores{{Cluster: "west", Scores: []contract.Score{{Name: "cpuAvailable", Value: -75}, {Name: "cpuAvailableRatio", Value: 100}}}},
		},
		{
			// Requests alone (the node series are missing) score nothing: the cluster is left out.
			name:   "requests without allocatable",
			cfg:    cfgWith(nil),
			values: []value{{"ghost", "cpu", false, 4}, {"west", "cpu", true, 64}},
			want:   []contract.ClusterScores{{Cluster: "west", Scores: []contract.Score{{Name: "cpuAvailable", Value: 100}, {Name: "cpuAvailableRatio", Value: 100}}}},
		},
		{
			// Overcommitted: requested 12 of 8 -> available -4.
			//   ResourceRatioCPU 100*-4/8 = -50; cpuAvailable -4 is below min 0 -> clamped -100.
			name:   "overcommitted",
			cfg:    cfgWith(func(c *Config) { c.Scores = []string{"ResourceRatioCPU", "cpuAvailable"} }),
			values: []value{{"c1", "cpu", true, 8}, {"c1", "cpu", false, 12}},
			want:   []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "ResourceRatioCPU", Value: -50}, {Name: "cpuAvailable", Value: -100}}}},
		},
		{
			// Allocatable 0 (all nodes cordoned to 0 GPUs): no ratio (division by zero), absolute -100.
			name:   "zero allocatable",
			cfg:    cfgWith(func(c *Config) { c.Scores = []string{"free-capacity", "gpuAvailable"} }),
			values: []value{{"c1", "nvidia_com_gpu", true, 0}},
			want:   []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "gpuAvailable", Value: -100}}}},
		},
		{
			// ResourceAllocatableMemory ignores requests: 96 GiB in 0-128 GiB -> 96/128*200-100 = 50.
			// Sums over nodes: 64 + 32 GiB.
			name: "allocatable memory, custom bounds",
			cfg: cfgWith(func(c *Config) {
				c.Scores = []string{"ResourceAllocatableMemory"}
				c.Bounds.Memory = &Bound{Max: 128 * gib}
			}),
			values: []value{{"c1", "memory", true, 64 * gib}, {"c1", "memory", true, 32 * gib}, {"c1", "memory", false, 96 * gib}},
			want:   []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "ResourceAllocatableMemory", Value: 50}}}},
		},
		{
			// AMD GPUs: gpuResource picks the series; nvidia ones are ignored. 3 of 4 free -> 75.
			name:   "other gpu resource",
			cfg:    cfgWith(func(c *Config) { c.Scores = []string{"free-capacity"}; c.GPUResource = "amd_com_gpu" }),
			values: []value{{"c1", "amd_com_gpu", true, 4}, {"c1", "amd_com_gpu", false, 1}, {"c1", "nvidia_com_gpu", true, 100}},
			want:   []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "free-capacity", Value: 75}}}},
		},
		{
			name:   "invalid cluster names and unknown resources are dropped",
			cfg:    cfgWith(func(c *Config) { c.Scores = []string{"cpuAvailableRatio"} }),
			values: []value{{"Bad_Name", "cpu", true, 8}, {"kube-system", "cpu", true, 8}, {"c1", "ephemeral_storage", true, 8}},
			want:   []contract.ClusterScores{},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if err := tt.cfg.Validate(); err != nil {
				t.Fatal(err)
			}
			c := NewCollector(tt.cfg)
			c.AbsentRequestsAreZero = true // values as a ping's two queries return them
			for _, v := range tt.values {
				c.Add(v.cluster, v.resource, v.alloc, v.v)
			}
			if got := c.Scores(); !reflect.DeepEqual(got, tt.want) {
				t.Errorf("Scores() =\n  %+v\nwant\n  %+v", got, tt.want)
			}
		})
	}
}

func TestConfigValidate(t *testing.T) {
	tests := []struct {
		name  string
		json  string
		quote string // "" = valid
	}{
		{"empty means defaults", `{}`, ""},
		{"seed 000", `{"resource":"gpu-usage-score","scores":["free-capacity"]}`, ""},
		{"half a bound", `{"bounds":{"cpu":{"max":128}}}`, ""},
		{"unknown score", `{"scores":["cpuAvail"]}`, `scores[0]: "cpuAvail" is not one of`},
		{"repeated score", `{"scores":["cpuAvailable","cpuAvailable"]}`, `scores[1]: "cpuAvailable" appears twice`},
		{"no scores", `{"scores":[]}`, "scores: name at least one score"},
		{"bad resource", `{"resource":"Bad Name"}`, "resource:"},
		{"bad cluster label", `{"clusterLabel":"cluster-name"}`, "clusterLabel:"},
		{"selector with braces", `{"selector":"} or vector(1) or {"}`, "selector:"},
		{"gpu resource regex", `{"gpuResource":"nvidia.*"}`, "gpuResource:"},
		{"inverted bounds", `{"bounds":{"memory":{"min":10,"max":1}}}`, "bounds.memory: max (1) must be greater than min (10)"},
		{"null bound", `{"bounds":{"gpu":null}}`, "bounds.gpu: is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			err := contract.DecodeJSON([]byte(tt.json), &cfg)
			if err == nil {
				err = cfg.Validate()
			}
			if (tt.quote == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.quote)) {
				t.Fatalf("err = %v, want %q", err, tt.quote)
			}
		})
	}
	cfg := DefaultConfig()
	_ = contract.DecodeJSON([]byte(`{"bounds":{"cpu":{"max":128}}}`), &cfg)
	if *cfg.Bounds.CPU != (Bound{0, 128}) || *cfg.Bounds.GPU != (Bound{0, DefaultGPUMax}) {
		t.Errorf("partial bounds = %+v %+v, want cpu 0-128 and the default gpu bound", *cfg.Bounds.CPU, *cfg.Bounds.GPU)
	}
}

func TestQueries(t *testing.T) {
	tests := []struct {
		cfg          *Config
		alloc, req   string
		noRequestsOK bool
	}{
		{
			cfg:   cfgWith(func(c *Config) { c.Scores = []string{"free-capacity"} }),
			alloc: `sum by (cluster, resource) (kube_node_status_allocatable{resource=~"nvidia_com_gpu"})`,
			req:   `sum by (cluster, resource) (kube_pod_container_resource_requests{resource=~"nvidia_com_gpu"} * on (cluster, namespace, pod) group_left () (kube_pod_status_phase{phase=~"Pending|Running"} == 1))`,
		},
		{
			cfg: cfgWith(func(c *Config) {
				c.Scores = []string{"ResourceAllocatableMemory"}
				c.ClusterLabel = "cluster_name"
				c.Selector = `job="ksm"`
			}),
			alloc: `sum by (cluster_name, resource) (kube_node_status_allocatable{resource=~"memory", job="ksm"})`,
			req:   "", // allocatable only: no requests query
		},
	}
	for _, tt := range tests {
		alloc, req := tt.cfg.Queries()
		if alloc != tt.alloc || req != tt.req {
			t.Errorf("Queries() =\n  %s\n  %s\nwant\n  %s\n  %s", alloc, req, tt.alloc, tt.req)
		}
	}
}

func TestAddVector(t *testing.T) {
	c := NewCollector(cfgWith(func(c *Config) { c.Scores = []string{"cpuAvailableRatio"} }))
	c.AddVector(model.Vector{
		{Metric: model.Metric{"cluster": "c1", "resource": "cpu"}, Value: 10},
		{Metric: model.Metric{"resource": "cpu"}, Value: 10}, // no cluster label
		{Metric: model.Metric{"cluster": "Bad_Name", "resource": "cpu"}, Value: 10},
	}, true)
	c.AddVector(model.Vector{{Metric: model.Metric{"cluster": "c1", "resource": "cpu"}, Value: 4}}, false)
	// 100 * (10-4)/10 = 60
	want := []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "cpuAvailableRatio", Value: 60}}}}
	if got := c.Scores(); !reflect.DeepEqual(got, want) || c.Dropped != 2 {
		t.Errorf("Scores() = %+v dropped %d, want %+v dropped 2", got, c.Dropped, want)
	}
}

func metricEvent(t testing.TB, samples ...contract.Sample) cloudevents.Event {
	t.Helper()
	e, err := contract.NewMetricChanged("test/producer", time.Now(), contract.MetricChanged{Samples: samples})
	if err != nil {
		t.Fatal(err)
	}
	return e
}

func TestMetrics(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := &Scorer{MetricConfig: cfgWith(func(c *Config) { c.Resource = "gpu-usage-score"; c.Scores = []string{"free-capacity"} })}
	gpu := map[string]string{"resource": "nvidia_com_gpu"}
	node := func(n string) map[string]string { return map[string]string{"resource": "nvidia_com_gpu", "node": n} }
	res, err := s.Metrics(context.Background(), metricEvent(t,
		// Two nodes with 4 GPUs each: 8. node-a is sent twice; only its later value (4) counts.
		contract.Sample{Metric: MetricAllocatable, Cluster: "east", Labels: node("a"), Value: 2, ObservedAt: t0},
		contract.Sample{Metric: MetricAllocatable, Cluster: "east", Labels: node("a"), Value: 4, ObservedAt: t0.Add(time.Minute)},
		contract.Sample{Metric: MetricAllocatable, Cluster: "east", Labels: node("b"), Value: 4, ObservedAt: t0.Add(time.Minute)},
		// 6 requested: 100 * (8-6)/8 = 25.
		contract.Sample{Metric: MetricRequests, Cluster: "east", Labels: gpu, Value: 6, ObservedAt: t0.Add(2 * time.Minute)},
		// Not a metric this scorer reads.
		contract.Sample{Metric: "up", Cluster: "west", Value: 1, ObservedAt: t0},
	))
	if err != nil {
		t.Fatal(err)
	}
	want := contract.ScoreUpdated{Resource: "gpu-usage-score", Items: []contract.ClusterScores{{Cluster: "east", Scores: []contract.Score{{Name: "free-capacity", Value: 25}}}}}
	if res == nil || !reflect.DeepEqual(res.Scores, want) {
		t.Fatalf("Metrics() = %+v, want %+v", res, want)
	}
	// Dated by the oldest sample used (node-a's first value was superseded).
	if !res.Observed.Equal(t0.Add(time.Minute)) {
		t.Errorf("observed %v, want %v", res.Observed, t0.Add(time.Minute))
	}

	res, err = s.Metrics(context.Background(), metricEvent(t, contract.Sample{Metric: "up", Cluster: "west", Value: 1, ObservedAt: t0}))
	if err != nil || res != nil {
		t.Errorf("nothing to score: %+v, %v; want nil, nil", res, err)
	}
	bad := metricEvent(t, contract.Sample{Metric: "up", Cluster: "west", Value: 1, ObservedAt: t0})
	_ = bad.SetData(cloudevents.ApplicationJSON, []byte(`{"samples":[{"metric":"up","cluster":"West","value":1,"observedAt":"2026-01-01T00:00:00Z"}]}`))
	var fes contract.FieldErrors
	if _, err := s.Metrics(context.Background(), bad); !errors.As(err, &fes) || fes.Reason() != contract.ReasonInvalidData {
		t.Errorf("invalid cluster in metric.changed: %v, want InvalidData", err)
	}
}

// TestMetricsWithoutRequests: a producer that sends only the series that changed (the
// metric-watcher's deadband) may send a cluster's allocatable without its requests. Those are not
// zero requests: scores net of requests are left out of that event for that cluster, never
// scored as if the whole allocatable were free; scores of allocatable alone are still given.
func TestMetricsWithoutRequests(t *testing.T) {
	t0 := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	s := &Scorer{MetricConfig: cfgWith(func(c *Config) {
		c.Scores = []string{CPUAvailable, CPUAvailableRatio, MemAvailable, ResourceAllocatableMemory}
	})}
	cpu := map[string]string{"resource": "cpu"}
	mem := map[string]string{"resource": "memory"}
	res, err := s.Metrics(context.Background(), metricEvent(t,
		// east: allocatable CPU and memory changed, its requests did not and were not sent.
		contract.Sample{Metric: MetricAllocatable, Cluster: "east", Labels: cpu, Value: 64, ObservedAt: t0},
		contract.Sample{Metric: MetricAllocatable, Cluster: "east", Labels: mem, Value: 128 * gib, ObservedAt: t0},
		// west: CPU allocatable and requests (16 of 32 requested), memory allocatable only.
		contract.Sample{Metric: MetricAllocatable, Cluster: "west", Labels: cpu, Value: 32, ObservedAt: t0},
		contract.Sample{Metric: MetricRequests, Cluster: "west", Labels: cpu, Value: 16, ObservedAt: t0},
		contract.Sample{Metric: MetricAllocatable, Cluster: "west", Labels: mem, Value: 256 * gib, ObservedAt: t0},
		// north: requests only (allocatable unknown): nothing.
		contract.Sample{Metric: MetricRequests, Cluster: "north", Labels: cpu, Value: 4, ObservedAt: t0},
	))
	if err != nil {
		t.Fatal(err)
	}
	// east: ResourceAllocatableMemory 128/256 GiB -> 0. west: cpuAvailable 16/64 cores -> -50,
	// cpuAvailableRatio 50, ResourceAllocatableMemory 256 GiB -> 100.
	want := contract.ScoreUpdated{Resource: DefaultResource, Items: []contract.ClusterScores{
		{Cluster: "east", Scores: []contract.Score{{Name: ResourceAllocatableMemory, Value: 0}}},
		{Cluster: "west", Scores: []contract.Score{{Name: CPUAvailable, Value: -50}, {Name: CPUAvailableRatio, Value: 50}, {Name: ResourceAllocatableMemory, Value: 100}}},
	}}
	if res == nil || !reflect.DeepEqual(res.Scores, want) {
		t.Fatalf("Metrics() = %+v, want %+v", res, want)
	}

	// A cluster whose event holds allocatable only, for scores that all need requests: no item.
	s.MetricConfig = cfgWith(nil)
	res, err = s.Metrics(context.Background(), metricEvent(t,
		contract.Sample{Metric: MetricAllocatable, Cluster: "east", Labels: cpu, Value: 64, ObservedAt: t0}))
	if err != nil || res != nil {
		t.Errorf("allocatable alone, default scores: %+v, %v; want nothing to score", res, err)
	}
}

// A ping with a bad configuration is refused before any query (Prom is nil here).
func TestPingBadConfig(t *testing.T) {
	s := &Scorer{}
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetSource("s")
	e.SetType(contract.TypePing)
	_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"scores":["nope"]}`))
	_, err := s.Ping(context.Background(), e)
	var se *scorer.Error
	if !errors.As(err, &se) || se.Reason != contract.ReasonBadConfig || !strings.Contains(err.Error(), "scores[0]") {
		t.Errorf("Ping = %v, want BadConfig naming scores[0]", err)
	}
}

// BenchmarkScore1000 and BenchmarkScore10000 score 1,000 and 10,000 clusters from one
// allocatable and one requests query result (3 resources each): the work a ping does after
// Prometheus answers.
func BenchmarkScore1000(b *testing.B)  { benchScore(b, 1000) }
func BenchmarkScore10000(b *testing.B) { benchScore(b, 10000) }

func benchScore(b *testing.B, n int) {
	cfg := cfgWith(nil)
	var alloc, req model.Vector
	for i := range n {
		cl := model.LabelValue(fmt.Sprintf("cluster-%05d", i))
		for _, r := range []string{"cpu", "memory", "nvidia_com_gpu"} {
			alloc = append(alloc, &model.Sample{Metric: model.Metric{"cluster": cl, "resource": model.LabelValue(r)}, Value: model.SampleValue(64 + i%7)})
			req = append(req, &model.Sample{Metric: model.Metric{"cluster": cl, "resource": model.LabelValue(r)}, Value: model.SampleValue(i % 50)})
		}
	}
	b.ReportAllocs()
	cpu := benchcpu.Start()
	for b.Loop() {
		c := NewCollector(cfg)
		c.AddVector(alloc, true)
		c.AddVector(req, false)
		if items := c.Scores(); len(items) != n {
			b.Fatalf("%d items", len(items))
		}
	}
	cpu.Report(b)
}
