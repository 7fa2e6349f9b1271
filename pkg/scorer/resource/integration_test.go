package resource_test

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/resource"
)

const gib = 1 << 30

// kube-state-metrics as a hub Prometheus holds it (remote-written with a cluster label):
//
//	east: nodes e1, e2 with 16 cores, 64 GiB, 4 GPUs each    -> allocatable 32, 128 GiB, 8
//	      plus a node of another job (cpu 32), seen only without a selector
//	      pod p1 Running  requests 8 cores, 32 GiB, 2 GPUs
//	      pod p2 Pending  requests 4 cores, 16 GiB
//	      pod p3 Succeeded requests 10 cores (finished: holds nothing)
//	                                                          -> requested 12, 48 GiB, 2
//	west: node w1 with 8 cores, 32 GiB, no GPU; pod w1p Running requests 6 cores, 8 GiB
//	ghost: a running pod but no node series: left out
//	Bad_Name: a node whose cluster label is not a cluster name: dropped
func ksm(at time.Time) []promserver.Series {
	job := "kube-state-metrics"
	node := func(cluster, node, res string, v float64) promserver.Series {
		return promserver.Gauge(map[string]string{"__name__": resource.MetricAllocatable, "job": job, "cluster": cluster, "node": node, "resource": res}, at, v)
	}
	req := func(cluster, pod, res string, v float64) promserver.Series {
		return promserver.Gauge(map[string]string{"__name__": resource.MetricRequests, "job": job, "cluster": cluster, "namespace": "apps", "pod": pod, "container": "main", "resource": res}, at, v)
	}
	phase := func(cluster, pod, phase string, v float64) promserver.Series {
		return promserver.Gauge(map[string]string{"__name__": "kube_pod_status_phase", "job": job, "cluster": cluster, "namespace": "apps", "pod": pod, "phase": phase}, at, v)
	}
	other := node("east", "x1", "cpu", 32)
	other.Labels["job"] = "other"
	return []promserver.Series{
		node("east", "e1", "cpu", 16), node("east", "e1", "memory", 64*gib), node("east", "e1", "nvidia_com_gpu", 4),
		node("east", "e2", "cpu", 16), node("east", "e2", "memory", 64*gib), node("east", "e2", "nvidia_com_gpu", 4),
		other,
		req("east", "p1", "cpu", 8), req("east", "p1", "memory", 32*gib), req("east", "p1", "nvidia_com_gpu", 2),
		phase("east", "p1", "Running", 1), phase("east", "p1", "Pending", 0),
		req("east", "p2", "cpu", 4), req("east", "p2", "memory", 16*gib),
		phase("east", "p2", "Pending", 1), phase("east", "p2", "Running", 0),
		req("east", "p3", "cpu", 10), phase("east", "p3", "Succeeded", 1), phase("east", "p3", "Running", 0),
		node("west", "w1", "cpu", 8), node("west", "w1", "memory", 32*gib),
		req("west", "w1p", "cpu", 6), req("west", "w1p", "memory", 8*gib), phase("west", "w1p", "Running", 1),
		req("ghost", "g", "cpu", 1), phase("ghost", "g", "Running", 1),
		node("Bad_Name", "b1", "cpu", 8),
	}
}

// serve runs the scorer as its function does: function runtime, scorer.Handler, real HTTP.
func serve(t *testing.T, q prom.Querier, at time.Time) string {
	t.Helper()
	fn := function.New("resource-scorer", "test")
	s := &resource.Scorer{Prom: q, Log: fn.Log, Now: func() time.Time { return at }}
	return functest.Serve(t, fn, scorer.Handler(fn.Source(), s.Routes()))
}

// scores and failure decode a reply that must be a score.updated, or a score.failed.
func scores(t *testing.T, reply *event.Event) contract.ScoreUpdated {
	t.Helper()
	s, f := functest.Reply(t, reply)
	if s == nil {
		t.Fatalf("reply is a failure: %+v", f)
	}
	return *s
}

func failure(t *testing.T, reply *event.Event) contract.Failure {
	t.Helper()
	s, f := functest.Reply(t, reply)
	if f == nil {
		t.Fatalf("reply is scores: %+v", s)
	}
	return *f
}

// cs keeps the tables of expected scores short.
var cs = functest.ClusterScores

func TestAgainstPrometheus(t *testing.T) {
	srv := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	srv.MustPush(t, ksm(at)...)
	url := serve(t, promserver.Client(t, srv.URL), at)

	tests := []struct {
		name string
		ping string
		want contract.ScoreUpdated
	}{
		{
			// With the selector: east allocatable 32, 128 GiB, 8; requested 12, 48 GiB, 2; available 20, 80 GiB, 6.
			//   cpuAvailable 20/64*200-100 = -37.5 -> -38; memAvailable 80/256*200-100 = -37.5 -> -38
			//   gpuAvailable 6/8*200-100 = 50; ratios 100*20/32 = 62.5 -> 63, 100*80/128 = 62.5 -> 63, 100*6/8 = 75
			// west: allocatable 8, 32 GiB; requested 6, 8 GiB; available 2, 24 GiB; no GPU scores.
			//   cpuAvailable 2/64*200-100 = -93.75 -> -94; memAvailable 24/256*200-100 = -81.25 -> -81
			//   ratios 100*2/8 = 25, 100*24/32 = 75
			name: "default scores",
			ping: `{"selector":"job=\"kube-state-metrics\""}`,
			want: contract.ScoreUpdated{Resource: "resource-usage-score", Items: []contract.ClusterScores{
				cs("east", "cpuAvailable", -38, "memAvailable", -38, "gpuAvailable", 50, "cpuAvailableRatio", 63, "memAvailableRatio", 63, "gpuAvailableRatio", 75),
				cs("west", "cpuAvailable", -94, "memAvailable", -81, "cpuAvailableRatio", 25, "memAvailableRatio", 75),
			}},
		},
		{
			// Without the selector east's cpu also counts the other job's 32 cores: 64 allocatable,
			// 52 available: 100*52/64 = 81.25 -> 81.
			name: "no selector",
			ping: `{"resource":"cpu-ratio","scores":["cpuAvailableRatio"]}`,
			want: contract.ScoreUpdated{Resource: "cpu-ratio", Items: []contract.ClusterScores{
				cs("east", "cpuAvailableRatio", 81), cs("west", "cpuAvailableRatio", 25),
			}},
		},
		{
			// Seed 000: only east has GPUs: 100*6/8 = 75; west is left out, not 0.
			name: "free-capacity",
			ping: `{"resource":"gpu-usage-score","scores":["free-capacity"]}`,
			want: contract.ScoreUpdated{Resource: "gpu-usage-score", Items: []contract.ClusterScores{cs("east", "free-capacity", 75)}},
		},
		{
			// Seed 004, memory bounds 0-128 GiB: east 128 GiB -> 100; west 32 GiB -> 32/128*200-100 = -50.
			// ResourceRatioCPU as cpuAvailableRatio with the selector: 63 and 25.
			name: "seed 004 names",
			ping: `{"resource":"cluster-resources","selector":"job=\"kube-state-metrics\"","scores":["ResourceRatioCPU","ResourceAllocatableMemory"],"bounds":{"memory":{"max":137438953472}}}`,
			want: contract.ScoreUpdated{Resource: "cluster-resources", Items: []contract.ClusterScores{
				cs("east", "ResourceRatioCPU", 63, "ResourceAllocatableMemory", 100),
				cs("west", "ResourceRatioCPU", 25, "ResourceAllocatableMemory", -50),
			}},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) { functest.ExpectScores(t, url, tt.ping, tt.want, at) })
	}

	refusals := []struct {
		name   string
		ping   string
		reason contract.Reason
		quote  string
	}{
		{"bad selector regex", `{"selector":"cluster=~\"(\""}`, contract.ReasonBadQuery, "parse error"},
		{"unknown score", `{"scores":["cpuAvail"]}`, contract.ReasonBadConfig, "scores[0]"},
		{"misspelt field", `{"resorce":"x"}`, contract.ReasonBadConfig, "resorce"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := functest.Send(t, url, functest.Ping(tt.ping))
			f := failure(t, reply)
			if status != http.StatusBadRequest || f.Reason != tt.reason || f.Retriable || !strings.Contains(f.Message, tt.quote) {
				t.Errorf("status %d failure %+v, want 400 %s mentioning %q", status, f, tt.reason, tt.quote)
			}
		})
	}

	// metric.changed scores from the event alone: it works with Prometheus gone.
	srv.Stop()
	e, err := contract.NewMetricChanged("test/producer", at, contract.MetricChanged{Samples: []contract.Sample{
		{Metric: resource.MetricAllocatable, Cluster: "south", Labels: map[string]string{"resource": "cpu"}, Value: 16, ObservedAt: at},
		{Metric: resource.MetricRequests, Cluster: "south", Labels: map[string]string{"resource": "cpu"}, Value: 4, ObservedAt: at},
	}})
	if err != nil {
		t.Fatal(err)
	}
	status, reply := functest.Send(t, url, e)
	// Default scores: cpuAvailable 12/64*200-100 = -62.5 -> -63; cpuAvailableRatio 100*12/16 = 75.
	want := contract.ScoreUpdated{Resource: "resource-usage-score", Items: []contract.ClusterScores{cs("south", "cpuAvailable", -63, "cpuAvailableRatio", 75)}}
	if got := scores(t, reply); status != http.StatusOK || !reflect.DeepEqual(got, want) {
		t.Errorf("metric.changed: status %d scores %+v, want 200 %+v", status, got, want)
	}

	// A ping now cannot reach Prometheus: 503 and a retriable failure, never a score.
	status, reply = functest.Send(t, url, functest.Ping(`{}`))
	if f := failure(t, reply); status != http.StatusServiceUnavailable || f.Reason != contract.ReasonMetricsUnavailable || !f.Retriable {
		t.Errorf("Prometheus down: status %d failure %+v, want 503 retriable MetricsUnavailable", status, f)
	}
}

// An empty Prometheus has no series: nothing is scored and nothing is sent (202, no event).
func TestNoSeries(t *testing.T) {
	srv := promserver.Start(t)
	url := serve(t, promserver.Client(t, srv.URL), time.Now())
	status, reply := functest.Send(t, url, functest.Ping(`{}`))
	if status != http.StatusAccepted || reply != nil {
		t.Errorf("status %d reply %v, want 202 and no event", status, reply)
	}
}
