package forecast_test

import (
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/manifests/lifetime"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/forecast"
)

// cs keeps the tables of expected scores short.
var cs = functest.ClusterScores

func line(from, slope float64, n int) []float64 {
	v := make([]float64, n)
	for i := range v {
		v[i] = from + slope*float64(i)
	}
	return v
}

// series on a one-minute grid ending at `at` (the evaluation time):
//
//	cpu_usage  east 10, 11, ..., 20 (11 points, +1/min)   west flat 32
//	           north 40 down to 30 (-1/min)               south 50 up to 60 (+1/min)
//	           stale: 4 points ending 7 minutes ago        newbie: one point, at `at`
//	           nocap: flat 10, and no capacity series
//	allocatable{resource="cpu"} 64 for every cluster but nocap; east also has a memory series
//	gpu_mem    east 10, 14, 13, 17 and west flat 20 (4 points), for a hand-worked Holt
func data(at time.Time) []promserver.Series {
	m := time.Minute
	usage := func(cluster string, end time.Time, v ...float64) promserver.Series {
		return promserver.Grid(map[string]string{"__name__": "cpu_usage", "cluster": cluster}, end, m, v...)
	}
	alloc := func(cluster, res string) promserver.Series {
		return promserver.Gauge(map[string]string{"__name__": "allocatable", "cluster": cluster, "resource": res}, at, 64)
	}
	return []promserver.Series{
		usage("east", at, line(10, 1, 11)...),
		usage("west", at, line(32, 0, 11)...),
		usage("north", at, line(40, -1, 11)...),
		usage("south", at, line(50, 1, 11)...),
		usage("stale", at.Add(-7*m), 1, 2, 3, 4),
		usage("newbie", at, 5),
		usage("nocap", at, line(10, 0, 11)...),
		alloc("east", "cpu"), alloc("west", "cpu"), alloc("north", "cpu"), alloc("south", "cpu"), alloc("stale", "cpu"), alloc("newbie", "cpu"),
		alloc("east", "memory"),
		promserver.Grid(map[string]string{"__name__": "gpu_mem", "cluster": "east"}, at, m, 10, 14, 13, 17),
		promserver.Grid(map[string]string{"__name__": "gpu_mem", "cluster": "west"}, at, m, 20, 20, 20, 20),
	}
}

func TestAgainstPrometheus(t *testing.T) {
	srv := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	srv.MustPush(t, data(at)...)
	fn := function.New("forecast-scorer", "test")
	s := &forecast.Scorer{Prom: promserver.Client(t, srv.URL), Log: fn.Log, Now: func() time.Time { return at.Add(20 * time.Second) }}
	url := functest.Serve(t, fn, scorer.Handler(fn.Source(), s.Routes()))

	const usage = `"resource":"cpu-forecast","scoreName":"cpuHeadroom30m","query":"cpu_usage","range":"10m","step":"1m","horizon":"30m"`
	tests := []struct {
		name string
		ping string
		want contract.ScoreUpdated
	}{
		{
			// Now is at+20s, aligned down to at. Lines are forecast exactly, 30 steps on:
			//   east  20 + 30 = 50  (64-50)/64 = 0.21875  -> 21.875  -> 22
			//   west  32            (64-32)/64 = 0.5      -> 50
			//   north 30 - 30 = 0   (64-0)/64  = 1        -> 100
			//   south 60 + 30 = 90  (64-90)/64 = -0.40625 -> -40.625 -> -41
			// stale (no point at the end), newbie (one point), nocap (no capacity): left out.
			name: "capacity query",
			ping: `{` + usage + `,"capacityQuery":"sum by (cluster) (allocatable{resource=\"cpu\"})"}`,
			want: contract.ScoreUpdated{Resource: "cpu-forecast", Items: []contract.ClusterScores{
				cs("east", "cpuHeadroom30m", 22), cs("north", "cpuHeadroom30m", 100), cs("south", "cpuHeadroom30m", -41), cs("west", "cpuHeadroom30m", 50),
			}},
		},
		{
			// One capacity, 100, for all: east (100-50)/100 -> 50, north 100, south (100-90)/100 -> 10,
			// west (100-32)/100 -> 68, nocap (100-10)/100 -> 90.
			name: "constant capacity",
			ping: `{` + usage + `,"capacity":100}`,
			want: contract.ScoreUpdated{Resource: "cpu-forecast", Items: []contract.ClusterScores{
				cs("east", "cpuHeadroom30m", 50), cs("nocap", "cpuHeadroom30m", 90), cs("north", "cpuHeadroom30m", 100),
				cs("south", "cpuHeadroom30m", 10), cs("west", "cpuHeadroom30m", 68),
			}},
		},
		{
			// Holt with alpha = beta = 0.5 over east 10, 14, 13, 17 forecasts 22.5 two steps on (the
			// arithmetic is in TestHolt); (30-22.5)/30 = 0.25 -> 25. west flat 20: (30-20)/30 -> 33.3 -> 33.
			name: "hand-worked Holt",
			ping: `{"resource":"gpu-forecast","scoreName":"gpuMemHeadroom","query":"gpu_mem","range":"3m","step":"1m","horizon":"2m","alpha":0.5,"beta":0.5,"capacity":30}`,
			want: contract.ScoreUpdated{Resource: "gpu-forecast", Items: []contract.ClusterScores{cs("east", "gpuMemHeadroom", 25), cs("west", "gpuMemHeadroom", 33)}},
		},
		{
			// min-max of the headrooms 0.21875, 1, -0.40625, 0.5: north 100, south -100,
			// east (0.21875+0.40625)*200/1.40625-100 = -11.1 -> -11, west (0.90625*200/1.40625)-100 = 28.9 -> 29.
			name: "minmax",
			ping: `{` + usage + `,"capacityQuery":"sum by (cluster) (allocatable{resource=\"cpu\"})","normalize":{"method":"minmax"}}`,
			want: contract.ScoreUpdated{Resource: "cpu-forecast", Items: []contract.ClusterScores{
				cs("east", "cpuHeadroom30m", -11), cs("north", "cpuHeadroom30m", 100), cs("south", "cpuHeadroom30m", -100), cs("west", "cpuHeadroom30m", 29),
			}},
		},
	}
	for _, tt := range tests {
		// Dated at the evaluation, not at the aligned end of the range.
		t.Run(tt.name, func(t *testing.T) { functest.ExpectScores(t, url, tt.ping, tt.want, at.Add(20*time.Second)) })
	}

	refusals := []struct {
		name   string
		ping   string
		reason contract.Reason
		quote  string
	}{
		{"bad usage query", `{` + strings.Replace(usage, `"query":"cpu_usage"`, `"query":"rate(cpu_usage"`, 1) + `,"capacity":1}`, contract.ReasonBadQuery, "parse error"},
		{"bad capacity query", `{` + usage + `,"capacityQuery":"sum by (cluster) (allocatable"}`, contract.ReasonBadQuery, "parse error"},
		// east has a cpu and a memory allocatable series: which is its capacity?
		{"two capacities", `{` + usage + `,"capacityQuery":"allocatable"}`, contract.ReasonBadQuery, `two series for cluster "east"`},
		{"no horizon", `{"resource":"r","scoreName":"s","query":"cpu_usage","range":"10m","step":"1m","capacity":1}`, contract.ReasonBadConfig, "horizon"},
		{"two capacities given", `{` + usage + `,"capacity":1,"capacityQuery":"allocatable"}`, contract.ReasonBadConfig, "give exactly one"},
	}
	for _, tt := range refusals {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := functest.Send(t, url, functest.Ping(tt.ping))
			_, fail := functest.Reply(t, reply)
			if status != http.StatusBadRequest || fail == nil || fail.Reason != tt.reason || fail.Retriable || !strings.Contains(fail.Message, tt.quote) {
				t.Errorf("status %d failure %+v, want 400 %s mentioning %q", status, fail, tt.reason, tt.quote)
			}
		})
	}

	t.Run("no series", func(t *testing.T) {
		status, reply := functest.Send(t, url, functest.Ping(`{"resource":"r","scoreName":"s","query":"nothing","range":"10m","step":"1m","horizon":"5m","capacity":1}`))
		if status != http.StatusAccepted || reply != nil {
			t.Errorf("status %d reply %v, want 202 and no event", status, reply)
		}
	})

	t.Run("metric.changed refused", func(t *testing.T) {
		e, _ := contract.NewMetricChanged("p", at, contract.MetricChanged{Samples: []contract.Sample{{Metric: "cpu_usage", Cluster: "east", Value: 1, ObservedAt: at}}})
		status, reply := functest.Send(t, url, e)
		if _, fail := functest.Reply(t, reply); status != http.StatusBadRequest || fail == nil || fail.Reason != contract.ReasonWrongType {
			t.Errorf("status %d failure %+v, want 400 WrongType", status, fail)
		}
	})

	srv.Stop()
	status, reply := functest.Send(t, url, functest.Ping(`{`+usage+`,"capacity":1}`))
	if _, fail := functest.Reply(t, reply); status != http.StatusServiceUnavailable || fail == nil || fail.Reason != contract.ReasonMetricsUnavailable || !fail.Retriable {
		t.Errorf("Prometheus down: status %d failure %+v, want 503 retriable MetricsUnavailable", status, fail)
	}
}

// TestShippedScheduleStaysValid runs the shipped forecast PingSource (deploy/schedules.yaml: its
// schedule and its configuration, a 6h range at 5m steps) against a real Prometheus at each of 12
// firings, and checks that under each TTL the score-writer is shipped with, the score written at
// one firing is still valid when the next firing's score lands (allowing 30 s for the ping, the
// queries and the write). A score dated at the range's step-aligned end would expire minutes
// before the next step's first score, every step.
func TestShippedScheduleStaysValid(t *testing.T) {
	deployment := lifetime.Load(t)
	ps := deployment.PingSource(t, "forecast-cpu-headroom")
	if ps.Spec.CloudEventOverrides.Extensions["scorer"] != "forecast-scorer" {
		t.Fatalf("PingSource %s is not the forecast-scorer's", ps.Name)
	}
	const landing = 30 * time.Second

	// A 5-minute boundary well in the past, so that every firing evaluates data already written.
	base := promserver.Aligned(5 * time.Minute).Add(-15 * time.Minute)
	firings := lifetime.Firings(t, ps, base.Add(-time.Second), 12, 400*time.Millisecond)

	// CPU counters rising at 0.5 and 1.5 cores, and 4 allocatable cores, every minute from 7h
	// before the first firing to past the last: the shipped 6h range is covered at every firing.
	end := firings[len(firings)-1].Truncate(time.Minute).Add(time.Minute)
	n := int(end.Sub(base.Add(-7*time.Hour))/time.Minute) + 1
	counter := func(perSecond float64) []float64 {
		v := make([]float64, n)
		for i := range v {
			v[i] = perSecond * 60 * float64(i)
		}
		return v
	}
	srv := promserver.Start(t)
	usage := func(cluster string) map[string]string {
		return map[string]string{"__name__": "container_cpu_usage_seconds_total", "cluster": cluster, "container": "app", "pod": "p"}
	}
	alloc := func(cluster string) map[string]string {
		return map[string]string{"__name__": "kube_node_status_allocatable", "cluster": cluster, "resource": "cpu", "node": "n"}
	}
	srv.MustPush(t,
		promserver.Grid(usage("east"), end, time.Minute, counter(0.5)...),
		promserver.Grid(usage("west"), end, time.Minute, counter(1.5)...),
		promserver.Grid(alloc("east"), end, time.Minute, line(4, 0, n)...),
		promserver.Grid(alloc("west"), end, time.Minute, line(4, 0, n)...),
	)

	var now time.Time
	fn := function.New("forecast-scorer", "test")
	s := &forecast.Scorer{Prom: promserver.Client(t, srv.URL), Log: fn.Log, Now: func() time.Time { return now }}
	url := functest.Serve(t, fn, scorer.Handler(fn.Source(), s.Routes()))

	type written struct {
		at, time time.Time
		su       *contract.ScoreUpdated
	}
	var got []written
	for _, at := range firings {
		now = at
		status, reply := functest.Send(t, url, functest.Ping(ps.Spec.Data))
		su, fail := functest.Reply(t, reply)
		if status != http.StatusOK || fail != nil || len(su.Items) != 2 {
			t.Fatalf("firing at %s: status %d failure %+v scores %+v, want both clusters scored", at.Format(time.TimeOnly), status, fail, su)
		}
		if reply.Time().After(at) {
			t.Errorf("firing at %s: scores dated %s, in the future", at.Format(time.TimeOnly), reply.Time().Format(time.TimeOnly))
		}
		got = append(got, written{at, reply.Time(), su})
	}
	for i := 1; i < len(got); i++ {
		prev, next := got[i-1], got[i]
		if !next.time.After(prev.time) {
			t.Errorf("firing at %s: scores dated %s, not after the previous firing's %s: the writer would not refresh them",
				next.at.Format(time.TimeOnly), next.time.Format(time.TimeOnly), prev.time.Format(time.TimeOnly))
		}
		for _, ttl := range deployment.WriterTTLs {
			vu := lifetime.WriterValidUntil(prev.su, prev.time, prev.at, ttl)
			if !vu.IsZero() && !vu.After(next.at.Add(landing)) {
				t.Errorf("TTL %s: the score of the firing at %s is valid until %s, before the next firing's (%s) lands",
					ttl, prev.at.Format(time.TimeOnly), vu.Format(time.TimeOnly), next.at.Format(time.TimeOnly))
			}
		}
	}
}
