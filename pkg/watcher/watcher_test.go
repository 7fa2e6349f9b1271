package watcher

import (
	"context"
	"fmt"
	"log/slog"
	"math"
	"net"
	"net/http"
	"net/http/httputil"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
)

// staleNaN is Prometheus' staleness marker (model/value.StaleNaN): a series pushed with it is
// gone from instant queries from that time on, as when a scrape target disappears.
var staleNaN = math.Float64frombits(0x7ff0000000000002)

type received struct {
	time    time.Time
	source  string
	ext     any
	samples []contract.Sample
}

// take returns the events the sink standing in for the broker accepted since the last take.
func take(s *functest.Sink) []received {
	var out []received
	for _, e := range s.Take() {
		m, _ := contract.DecodeMetricChanged(&e) // the sink checked it
		out = append(out, received{e.Time(), e.Source(), e.Extensions()["sinkbinding"], m.Samples})
	}
	return out
}

// gate is a reverse proxy in front of Prometheus at a fixed address: down closes its listener
// (connection refused, as a Prometheus that is down), up reopens it with the data intact.
type gate struct {
	t      *testing.T
	addr   string
	target *url.URL
	srv    *http.Server
}

func newGate(t *testing.T, target string) *gate {
	u, err := url.Parse(target)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{t: t, addr: ln.Addr().String(), target: u}
	g.serve(ln)
	t.Cleanup(g.down)
	return g
}

func (g *gate) serve(ln net.Listener) {
	g.srv = &http.Server{Handler: httputil.NewSingleHostReverseProxy(g.target)}
	go func() { _ = g.srv.Serve(ln) }()
}

func (g *gate) down() { _ = g.srv.Close() }

func (g *gate) up() {
	ln, err := net.Listen("tcp", g.addr)
	if err != nil {
		g.t.Fatalf("reopening %s: %v", g.addr, err)
	}
	g.serve(ln)
}

const overrides = `{"extensions":{"sinkbinding":"metric-watcher"}}`

func newWatcher(t *testing.T, cfg Config, promURL, sinkURL string, reg *prometheus.Registry, sendTimeout time.Duration) *Watcher {
	t.Helper()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	pc, err := prom.New(prom.Config{URL: promURL, Timeout: 5 * time.Second}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	snd, err := function.NewSender(sinkURL, overrides)
	if err != nil {
		t.Fatal(err)
	}
	w, err := New(cfg, pc, snd, Options{Source: "scoreflow/metric-watcher", SendTimeout: sendTimeout}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	return w
}

func cpu(cluster string, at time.Time, v float64) promserver.Series {
	l := map[string]string{"__name__": "test_cpu"}
	if cluster != "" {
		l["cluster"] = cluster
	}
	return promserver.Gauge(l, at, v)
}

func mem(cluster string, at time.Time, v float64) promserver.Series {
	return promserver.Gauge(map[string]string{"__name__": "test_mem", "managed_cluster": cluster, "zone": "a"}, at, v)
}

func cpuSample(cluster string, at time.Time, v float64) contract.Sample {
	return contract.Sample{Metric: "cluster_cpu_ratio", Cluster: cluster, Value: v, ObservedAt: at.UTC()}
}

func memSample(cluster string, at time.Time, v float64) contract.Sample {
	return contract.Sample{Metric: "cluster_mem_free_bytes", Cluster: cluster, Labels: map[string]string{"zone": "a"}, Value: v, ObservedAt: at.UTC()}
}

// The whole life of a watcher against a real Prometheus, one poll per step, each at its own
// instant on a one-minute grid, each step's samples pushed at exactly that instant.
func TestWatchAgainstPrometheus(t *testing.T) {
	p := promserver.Start(t)
	g := newGate(t, p.URL)
	s := functest.NewSink(t, functest.MetricChanged)
	reg := prometheus.NewRegistry()
	cfg := Config{Queries: []Query{
		{Metric: "cluster_cpu_ratio", Query: `sum by (cluster) (test_cpu)`, Deadband: Deadband{Absolute: 0.1}},
		{Metric: "cluster_mem_free_bytes", Query: `test_mem`, ClusterLabel: "managed_cluster", Deadband: Deadband{Relative: 0.1}},
	}}
	w := newWatcher(t, cfg, "http://"+g.addr, s.URL, reg, 300*time.Millisecond)

	base := promserver.Aligned(time.Minute).Add(-30 * time.Minute)
	at := func(i int) time.Time { return base.Add(time.Duration(i) * time.Minute) }
	steps := []struct {
		name    string
		push    func(t time.Time) []promserver.Series
		before  func()
		report  Report // SendErr compared as nil / not nil
		want    []contract.Sample
		sendErr bool
	}{
		{
			name: "first observation emits every cluster; no cluster label or a bad one is skipped",
			push: func(t time.Time) []promserver.Series {
				return []promserver.Series{cpu("c1", t, 0.50), cpu("c2", t, 0.20), cpu("c3", t, 0.70), cpu("", t, 9), cpu("Not_A_Cluster", t, 9),
					mem("c1", t, 1000), mem("c2", t, 2000)}
			},
			report: Report{Changed: 5, Skipped: 2, Sent: 5, Events: 1},
			want: []contract.Sample{cpuSample("c1", at(0), 0.50), cpuSample("c2", at(0), 0.20), cpuSample("c3", at(0), 0.70),
				memSample("c1", at(0), 1000), memSample("c2", at(0), 2000)},
		},
		{
			name: "moves within the deadbands emit nothing",
			push: func(t time.Time) []promserver.Series {
				return []promserver.Series{cpu("c1", t, 0.55), cpu("c2", t, 0.25), cpu("c3", t, 0.70), cpu("", t, staleNaN), cpu("Not_A_Cluster", t, staleNaN),
					mem("c1", t, 1050), mem("c2", t, 2000)}
			},
			report: Report{Unchanged: 5},
		},
		{
			name: "beyond the deadband: exactly the clusters that moved",
			push: func(t time.Time) []promserver.Series {
				// cpu c1 +0.125 > 0.1; c2 +0.08 <= 0.1; mem c1 +125 > 10% of 1000; c2 -150 <= 10% of 2000
				return []promserver.Series{cpu("c1", t, 0.625), cpu("c2", t, 0.28), cpu("c3", t, 0.70), mem("c1", t, 1125), mem("c2", t, 1850)}
			},
			report: Report{Changed: 2, Unchanged: 3, Sent: 2, Events: 1},
			want:   []contract.Sample{cpuSample("c1", at(2), 0.625), memSample("c1", at(2), 1125)},
		},
		{
			name: "measured from the value last emitted: slow drift emits, a vanished cluster is not emitted, NaN and Inf are skipped",
			push: func(t time.Time) []promserver.Series {
				// cpu c1 0.70 is 0.2 from c1's first value but 0.075 from the 0.625 emitted; c2 0.31 drifted 0.11 from 0.20.
				return []promserver.Series{cpu("c1", t, 0.70), cpu("c2", t, 0.31), cpu("c3", t, staleNaN), cpu("c4", t, math.Inf(1)),
					mem("c1", t, 1200), mem("c2", t, math.NaN())}
			},
			report: Report{Changed: 1, Unchanged: 2, Skipped: 2, Sent: 1, Events: 1},
			want:   []contract.Sample{cpuSample("c2", at(3), 0.31)},
		},
		{
			name:   "Prometheus down: nothing emitted, both queries counted as failed",
			before: g.down,
			push: func(t time.Time) []promserver.Series {
				return []promserver.Series{cpu("c1", t, 0.9), cpu("c2", t, 0.31), cpu("c4", t, staleNaN), mem("c1", t, 5000), mem("c2", t, 2000)}
			},
			report: Report{FailedQueries: 2},
		},
		{
			name:   "Prometheus back: no false change, a returning cluster within its band is not emitted, a real change is",
			before: g.up,
			push: func(t time.Time) []promserver.Series {
				return []promserver.Series{cpu("c1", t, 0.70), cpu("c2", t, 0.50), cpu("c3", t, 0.70), mem("c1", t, 1200), mem("c2", t, 2000)}
			},
			report: Report{Changed: 1, Unchanged: 4, Sent: 1, Events: 1},
			want:   []contract.Sample{cpuSample("c2", at(5), 0.50)},
		},
		{
			name:    "sink refuses: nothing delivered, the change is kept",
			before:  func() { s.Answer(http.StatusServiceUnavailable) },
			push:    func(t time.Time) []promserver.Series { return []promserver.Series{cpu("c1", t, 1.0)} },
			report:  Report{Changed: 1, Unchanged: 4},
			sendErr: true,
		},
		{
			name:   "sink back: the same change goes out on the next poll",
			before: func() { s.Answer(0) },
			push:   func(t time.Time) []promserver.Series { return []promserver.Series{cpu("c1", t, 1.0)} },
			report: Report{Changed: 1, Unchanged: 4, Sent: 1, Events: 1},
			want:   []contract.Sample{cpuSample("c1", at(7), 1.0)},
		},
		{
			name:   "and the state advanced with the delivery",
			push:   func(t time.Time) []promserver.Series { return []promserver.Series{cpu("c1", t, 1.05)} },
			report: Report{Unchanged: 5},
		},
	}
	for i, st := range steps {
		t.Logf("step %d: %s", i, st.name)
		if st.before != nil {
			st.before()
		}
		p.MustPush(t, st.push(at(i))...)
		got := w.Poll(context.Background(), at(i))
		if (got.SendErr != nil) != st.sendErr {
			t.Fatalf("step %d (%s): SendErr = %v, want error: %v", i, st.name, got.SendErr, st.sendErr)
		}
		got.SendErr = nil
		if got != st.report {
			t.Fatalf("step %d (%s): report = %+v, want %+v", i, st.name, got, st.report)
		}
		events := take(s)
		if st.want == nil {
			if len(events) != 0 {
				t.Fatalf("step %d (%s): sink got %+v, want nothing", i, st.name, events)
			}
			continue
		}
		if len(events) != 1 {
			t.Fatalf("step %d (%s): sink got %d events, want 1", i, st.name, len(events))
		}
		e := events[0]
		if !e.time.Equal(at(i)) || e.source != "scoreflow/metric-watcher" || e.ext != "metric-watcher" {
			t.Errorf("step %d: event time/source/extension = %v %q %v", i, e.time, e.source, e.ext)
		}
		functest.EqualSamples(t, fmt.Sprintf("step %d (%s)", i, st.name), e.samples, st.want)
	}

	for _, tt := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"scoreflow_watcher_query_errors_total", map[string]string{"metric": "cluster_cpu_ratio", "kind": "unavailable"}, 1},
		{"scoreflow_watcher_query_errors_total", map[string]string{"metric": "cluster_mem_free_bytes", "kind": "unavailable"}, 1},
		{"scoreflow_watcher_events_sent_total", map[string]string{"result": "ok"}, 5},
		{"scoreflow_watcher_events_sent_total", map[string]string{"result": "error"}, 1},
		{"scoreflow_watcher_samples_sent_total", map[string]string{"metric": "cluster_cpu_ratio"}, 7},
		{"scoreflow_watcher_series_total", map[string]string{"metric": "cluster_cpu_ratio", "outcome": SkipNotFinite}, 1},
		{"scoreflow_watcher_series_total", map[string]string{"metric": "cluster_cpu_ratio", "outcome": SkipInvalidCluster}, 1},
		{"scoreflow_watcher_series_total", map[string]string{"metric": "cluster_cpu_ratio", "outcome": SkipNoCluster}, 1},
		{"scoreflow_watcher_polls_total", nil, float64(len(steps))},
		{"scoreflow_watcher_tracked_series", nil, 5},
	} {
		if got := metricValue(t, reg, tt.name, tt.labels); got != tt.want {
			t.Errorf("%s%v = %v, want %v", tt.name, tt.labels, got, tt.want)
		}
	}
}

// A bad query is counted as such and does not hold back the others.
func TestBadQuery(t *testing.T) {
	p := promserver.Start(t)
	s := functest.NewSink(t, functest.MetricChanged)
	reg := prometheus.NewRegistry()
	w := newWatcher(t, Config{Queries: []Query{
		{Metric: "broken", Query: `sum(`},
		{Metric: "cluster_cpu_ratio", Query: `test_cpu`},
	}}, p.URL, s.URL, reg, 5*time.Second)
	at := promserver.Aligned(time.Minute)
	p.MustPush(t, cpu("c1", at, 0.5))
	r := w.Poll(context.Background(), at)
	if r.FailedQueries != 1 || r.Sent != 1 {
		t.Fatalf("report = %+v, want 1 failed query and 1 sample sent", r)
	}
	if got := metricValue(t, reg, "scoreflow_watcher_query_errors_total", map[string]string{"metric": "broken", "kind": "bad_query"}); got != 1 {
		t.Errorf("bad_query errors = %v, want 1", got)
	}
	functest.EqualSamples(t, "bad query", take(s)[0].samples, []contract.Sample{cpuSample("c1", at, 0.5)})
}

// Run polls once at start, then at each tick's time, and stops when the ticks end.
func TestRunUsesTicks(t *testing.T) {
	p := promserver.Start(t)
	s := functest.NewSink(t, functest.MetricChanged)
	t0 := promserver.Aligned(time.Minute).Add(-10 * time.Minute)
	t1 := t0.Add(time.Minute)
	p.MustPush(t, promserver.Grid(map[string]string{"__name__": "test_cpu", "cluster": "c1"}, t1, time.Minute, 0.5, 0.9))

	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	pc, err := prom.New(prom.Config{URL: p.URL, Timeout: 5 * time.Second}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	snd, _ := function.NewSender(s.URL, "")
	w, err := New(Config{Queries: []Query{{Metric: "cluster_cpu_ratio", Query: `test_cpu`, Deadband: Deadband{Absolute: 0.1}}}}, pc, snd,
		Options{Source: "scoreflow/metric-watcher", Now: func() time.Time { return t0 }}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	ticks := make(chan time.Time)
	done := make(chan struct{})
	go func() { defer close(done); w.Run(context.Background(), ticks) }()

	wait := func(what string) {
		select {
		case <-s.Arrived():
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %s", what)
		}
	}
	wait("from the poll at start")
	ticks <- t1
	wait("from the tick")
	close(ticks)
	<-done
	ev := take(s)
	if len(ev) != 2 {
		t.Fatalf("got %d events, want 2", len(ev))
	}
	functest.EqualSamples(t, "start", ev[0].samples, []contract.Sample{cpuSample("c1", t0, 0.5)})
	functest.EqualSamples(t, "tick", ev[1].samples, []contract.Sample{cpuSample("c1", t1, 0.9)})
}

// A second Run starts from no memory: its first poll emits the unchanged value again, since
// another replica may have delivered other values while this one was not running.
func TestRunStartsFromNoMemory(t *testing.T) {
	p := promserver.Start(t)
	s := functest.NewSink(t, functest.MetricChanged)
	at := promserver.Aligned(time.Minute)
	p.MustPush(t, cpu("c1", at, 0.5))
	reg := prometheus.NewRegistry()
	log := slog.New(slog.NewTextHandler(t.Output(), nil))
	pc, err := prom.New(prom.Config{URL: p.URL, Timeout: 5 * time.Second}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	snd, _ := function.NewSender(s.URL, "")
	w, err := New(Config{Queries: []Query{{Metric: "cluster_cpu_ratio", Query: `test_cpu`, Deadband: Deadband{Absolute: 0.1}}}}, pc, snd,
		Options{Source: "scoreflow/metric-watcher", Now: func() time.Time { return at }}, log, reg)
	if err != nil {
		t.Fatal(err)
	}
	closed := make(chan time.Time)
	close(closed)
	for term := 1; term <= 2; term++ {
		w.Run(context.Background(), closed) // one poll, at start
		ev := take(s)
		if len(ev) != 1 {
			t.Fatalf("term %d: %d events, want 1 (the first poll of a term emits every series)", term, len(ev))
		}
		functest.EqualSamples(t, fmt.Sprintf("term %d", term), ev[0].samples, []contract.Sample{cpuSample("c1", at, 0.5)})
	}
}

// More changed series than one event may carry go out in several events, none over the bound.
func TestSplitsLargePolls(t *testing.T) {
	p := promserver.Start(t)
	s := functest.NewSink(t, functest.MetricChanged)
	at := promserver.Aligned(time.Minute)
	n := contract.MaxSamples + 1
	series := make([]promserver.Series, n)
	for i := range series {
		series[i] = cpu(fmt.Sprintf("c%05d", i), at, float64(i))
	}
	p.MustPush(t, series...)
	w := newWatcher(t, Config{Queries: []Query{{Metric: "cluster_cpu_ratio", Query: `test_cpu`}}}, p.URL, s.URL, prometheus.NewRegistry(), 30*time.Second)
	r := w.Poll(context.Background(), at)
	if r.Sent != n || r.Events != 2 {
		t.Fatalf("report = %+v, want %d sent in 2 events", r, n)
	}
	ev := take(s)
	if len(ev) != 2 || len(ev[0].samples) != contract.MaxSamples || len(ev[1].samples) != 1 {
		t.Fatalf("got %d events, want 2 of %d and 1 samples", len(ev), contract.MaxSamples)
	}
	if last := ev[1].samples[0]; last.Cluster != fmt.Sprintf("c%05d", n-1) || last.Value != float64(n-1) {
		t.Errorf("last sample = %+v, want cluster c%05d", last, n-1)
	}
}

// metricValue reads one series from reg (testutil would need a module go.mod does not list).
func metricValue(t *testing.T, reg *prometheus.Registry, name string, labels map[string]string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != name {
			continue
		}
	metric:
		for _, m := range mf.GetMetric() {
			for _, lp := range m.GetLabel() {
				if labels[lp.GetName()] != lp.GetValue() {
					continue metric
				}
			}
			return value(m)
		}
	}
	return 0
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.GetCounter().GetValue()
	case m.Gauge != nil:
		return m.GetGauge().GetValue()
	}
	return math.NaN()
}
