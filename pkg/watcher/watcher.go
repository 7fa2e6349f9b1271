// Package watcher polls PromQL queries and emits io.scoreflow.metric.changed only for the series
// whose value moved beyond a deadband since the value last emitted, so metric noise does not
// become an event storm. One poll's changes, across all queries, go out in one event (more when
// they exceed contract.MaxSamples).
//
// What is remembered is the last value *delivered*: a query that fails keeps its state (no false
// change after Prometheus recovers), and a send that fails does not advance it (the change goes
// out again on the next poll). A series that vanishes from a result is not emitted (not as 0,
// not at all) and its last value is kept.
package watcher

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"
	"go.opentelemetry.io/otel/trace"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/tracing"
)

// Querier evaluates PromQL at one instant; *prom.Client is one.
type Querier interface {
	Query(ctx context.Context, query string, at time.Time) (model.Vector, error)
}

// Sender delivers an event to the sink (function.Sender in production).
type Sender interface {
	Send(ctx context.Context, e event.Event) error
}

// Options tune a Watcher.
type Options struct {
	// Source is the CloudEvents source of emitted events.
	Source string
	// SendTimeout bounds delivering one event, retries included (default 30s).
	SendTimeout time.Duration
	// Concurrency is how many queries run at once (default 4).
	Concurrency int
	// Now gives the time of the first poll in Run (default time.Now).
	Now func() time.Time
}

// Skip reasons: why a result series produced no sample. They are metric label values.
const (
	SkipNoCluster      = "no_cluster_label"
	SkipInvalidCluster = "invalid_cluster"
	SkipNotFinite      = "not_finite"
	SkipDuplicate      = "duplicate_series"
)

// Watcher is the poll loop's state. Poll and Run are not safe for concurrent use.
type Watcher struct {
	queries []Query
	q       Querier
	send    Sender
	opts    Options
	log     *slog.Logger
	m       metrics

	// last[i] maps a series of query i (cluster and labels) to the value last delivered.
	last []map[string]float64
	// failing[i] and skips[i] make logs say when something starts and stops, not every poll.
	failing []bool
	skips   []string
}

// New validates cfg and builds a watcher; reg receives its metrics.
func New(cfg Config, q Querier, send Sender, opts Options, log *slog.Logger, reg prometheus.Registerer) (*Watcher, error) {
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	if opts.Source == "" {
		return nil, errors.New("event source is required")
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 30 * time.Second
	}
	if opts.Concurrency <= 0 {
		opts.Concurrency = 4
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	n := len(cfg.Queries)
	w := &Watcher{queries: cfg.Queries, q: q, send: send, opts: opts, log: log, m: newMetrics(reg),
		last: make([]map[string]float64, n), failing: make([]bool, n), skips: make([]string, n)}
	for i := range w.last {
		w.last[i] = map[string]float64{}
	}
	return w, nil
}

// Report is what one poll did.
type Report struct {
	// FailedQueries could not be evaluated; their series kept their state.
	FailedQueries int
	// Changed series moved beyond their deadband (or were seen for the first time).
	Changed int
	// Unchanged series stayed within their deadband.
	Unchanged int
	// Skipped series had no usable cluster or value.
	Skipped int
	// Sent samples were delivered, in Events events.
	Sent, Events int
	// SendErr is why the changes not sent were not; they are retried on the next poll.
	SendErr error
}

// Run polls now and then at every tick until ctx ends or ticks closes. Each poll evaluates the
// queries at the tick's time.
//
// Run starts from no memory: its first poll emits every series, as at the process's start. Under
// leader election a replica runs it once per term, and while it did not lead another replica
// delivered values this one never saw; comparing with its own old memory would hold back a change
// back to a value it had delivered before.
func (w *Watcher) Run(ctx context.Context, ticks <-chan time.Time) {
	for i := range w.last {
		clear(w.last[i])
	}
	w.Poll(ctx, w.opts.Now())
	for {
		select {
		case <-ctx.Done():
			return
		case t, ok := <-ticks:
			if !ok {
				return
			}
			w.Poll(ctx, t)
		}
	}
}

type change struct {
	query  int
	key    string
	sample contract.Sample
}

// Poll evaluates every query at at, and sends the series that changed.
func (w *Watcher) Poll(ctx context.Context, at time.Time) Report {
	start := time.Now()
	defer func() { w.m.pollSeconds.Observe(time.Since(start).Seconds()) }()
	// Each poll starts a trace (sampled at the function's tracing rate): its queries, and the
	// metric.changed it sends with what follows in the broker and the scorers, are its spans.
	ctx, span := tracing.Tracer().Start(ctx, "poll", trace.WithNewRoot())
	defer span.End()
	var r Report
	vecs, errs := w.queryAll(ctx, at)
	if ctx.Err() != nil {
		return r // shutting down: the failures are ours, not Prometheus'
	}
	var changes []change
	for i := range w.queries {
		if errs[i] != nil {
			r.FailedQueries++
			w.queryFailed(i, errs[i])
			continue
		}
		if w.failing[i] {
			w.failing[i] = false
			w.log.Info("query recovered", "metric", w.queries[i].Metric)
		}
		changes = append(changes, w.diff(i, vecs[i], &r)...)
	}
	w.m.polls.Inc()

	for batch := range slices.Chunk(changes, contract.MaxSamples) {
		if err := w.deliver(ctx, at, batch); err != nil {
			// Later batches wait too: the sink is likely down, and each try costs retries.
			r.SendErr = err
			w.log.Warn("sink failed: changes kept for the next poll", "err", err, "pending", len(changes)-r.Sent)
			break
		}
		r.Sent += len(batch)
		r.Events++
	}
	tracked := 0
	for _, l := range w.last {
		tracked += len(l)
	}
	w.m.tracked.Set(float64(tracked))
	if r.Events > 0 || r.FailedQueries > 0 {
		w.log.Debug("poll", "at", at, "changed", r.Changed, "unchanged", r.Unchanged, "sent", r.Sent, "events", r.Events, "failedQueries", r.FailedQueries)
	}
	return r
}

func (w *Watcher) queryAll(ctx context.Context, at time.Time) ([]model.Vector, []error) {
	vecs := make([]model.Vector, len(w.queries))
	errs := make([]error, len(w.queries))
	sem := make(chan struct{}, w.opts.Concurrency)
	var wg sync.WaitGroup
	for i, q := range w.queries {
		wg.Go(func() {
			sem <- struct{}{}
			defer func() { <-sem }()
			vecs[i], errs[i] = w.q.Query(ctx, q.Query, at)
		})
	}
	wg.Wait()
	return vecs, errs
}

func (w *Watcher) queryFailed(i int, err error) {
	q := w.queries[i]
	kind := "unavailable"
	if prom.KindOf(err) == prom.BadQuery {
		kind = "bad_query"
	}
	w.m.queryErrors.WithLabelValues(q.Metric, kind).Inc()
	if !w.failing[i] {
		w.failing[i] = true
		w.log.Warn("query failed: nothing emitted for it until it recovers", "metric", q.Metric, "kind", kind, "err", err)
		return
	}
	w.log.Debug("query still failing", "metric", q.Metric, "kind", kind, "err", err)
}

// diff returns query i's series that moved beyond the deadband, ordered by cluster and labels.
func (w *Watcher) diff(i int, vec model.Vector, r *Report) []change {
	q := w.queries[i]
	var out []change
	seen := map[string]bool{}
	skipped := map[string]int{}
	skip := func(reason string) {
		skipped[reason]++
		r.Skipped++
		w.m.series.WithLabelValues(q.Metric, reason).Inc()
	}
	for _, s := range vec {
		cluster := string(s.Metric[model.LabelName(q.ClusterLabel)])
		v := float64(s.Value)
		switch {
		case cluster == "":
			skip(SkipNoCluster)
			continue
		case contract.ValidateClusterName(cluster) != nil:
			skip(SkipInvalidCluster)
			continue
		case math.IsNaN(v) || math.IsInf(v, 0):
			skip(SkipNotFinite)
			continue
		}
		labels := sampleLabels(s.Metric, q.ClusterLabel)
		key := seriesKey(cluster, labels)
		if seen[key] {
			// Only when labels were dropped (UTF-8 names): the two would overwrite each other.
			skip(SkipDuplicate)
			continue
		}
		seen[key] = true
		if last, ok := w.last[i][key]; ok && !q.Deadband.Beyond(last, v) {
			r.Unchanged++
			w.m.series.WithLabelValues(q.Metric, "unchanged").Inc()
			continue
		}
		r.Changed++
		w.m.series.WithLabelValues(q.Metric, "changed").Inc()
		out = append(out, change{query: i, key: key, sample: contract.Sample{
			Metric: q.Metric, Cluster: cluster, Labels: labels, Value: v, ObservedAt: s.Timestamp.Time().UTC(),
		}})
	}
	sort.Slice(out, func(a, b int) bool { return out[a].key < out[b].key })
	w.logSkips(i, skipped)
	return out
}

// logSkips logs a query's skipped series when their count changes, not on every poll.
func (w *Watcher) logSkips(i int, skipped map[string]int) {
	var parts []string
	for _, reason := range []string{SkipNoCluster, SkipInvalidCluster, SkipNotFinite, SkipDuplicate} {
		if n := skipped[reason]; n > 0 {
			parts = append(parts, fmt.Sprintf("%s=%d", reason, n))
		}
	}
	summary := strings.Join(parts, " ")
	if summary == w.skips[i] {
		return
	}
	w.skips[i] = summary
	if summary == "" {
		w.log.Info("query result series usable again", "metric", w.queries[i].Metric)
		return
	}
	w.log.Warn("query result series skipped", "metric", w.queries[i].Metric, "clusterLabel", w.queries[i].ClusterLabel, "skipped", summary)
}

// deliver sends one event and, only once it is delivered, remembers its values.
func (w *Watcher) deliver(ctx context.Context, at time.Time, batch []change) error {
	samples := make([]contract.Sample, len(batch))
	for j, c := range batch {
		samples[j] = c.sample
	}
	e, err := contract.NewMetricChanged(w.opts.Source, at, contract.MetricChanged{Samples: samples})
	if err != nil {
		return err // diff builds valid samples only: a bug
	}
	sctx, cancel := context.WithTimeout(ctx, w.opts.SendTimeout)
	defer cancel()
	if err := w.send.Send(sctx, e); err != nil {
		w.m.events.WithLabelValues("error").Inc()
		return err
	}
	w.m.events.WithLabelValues("ok").Inc()
	for _, c := range batch {
		w.last[c.query][c.key] = c.sample.Value
		w.m.samples.WithLabelValues(c.sample.Metric).Inc()
	}
	return nil
}

// sampleLabels are a series' labels but its name and cluster label; names the contract refuses
// (Prometheus 3 allows UTF-8 names) are dropped.
func sampleLabels(m model.Metric, clusterLabel string) map[string]string {
	var out map[string]string
	for k, v := range m {
		name := string(k)
		if name == model.MetricNameLabel || name == clusterLabel || contract.ValidateLabelName(name) != nil {
			continue
		}
		if out == nil {
			out = map[string]string{}
		}
		out[name] = string(v)
	}
	return out
}

// seriesKey identifies a series within its query: cluster first, so keys sort by cluster.
func seriesKey(cluster string, labels map[string]string) string {
	var b strings.Builder
	b.WriteString(cluster)
	for _, k := range slices.Sorted(maps.Keys(labels)) {
		b.WriteString("\x00" + k + "=" + labels[k])
	}
	return b.String()
}

type metrics struct {
	polls       prometheus.Counter
	pollSeconds prometheus.Histogram
	queryErrors *prometheus.CounterVec
	series      *prometheus.CounterVec
	samples     *prometheus.CounterVec
	events      *prometheus.CounterVec
	tracked     prometheus.Gauge
}

func newMetrics(reg prometheus.Registerer) metrics {
	m := metrics{
		polls: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scoreflow_watcher_polls_total", Help: "Polls of the configured queries.",
		}),
		pollSeconds: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "scoreflow_watcher_poll_seconds", Help: "Time one poll took: every query, then the send.",
			Buckets: prometheus.ExponentialBuckets(0.005, 2, 14),
		}),
		queryErrors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_watcher_query_errors_total",
			Help: "Failed query evaluations, by metric and kind (unavailable: Prometheus unreachable or overloaded; bad_query: fix the query).",
		}, []string{"metric", "kind"}),
		series: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_watcher_series_total",
			Help: "Result series seen, by metric and outcome: changed (beyond the deadband, or new), unchanged, or why it was skipped.",
		}, []string{"metric", "outcome"}),
		samples: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_watcher_samples_sent_total", Help: "Samples delivered to the sink, by metric.",
		}, []string{"metric"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_watcher_events_sent_total", Help: "metric.changed events sent, by result (ok or error).",
		}, []string{"result"}),
		tracked: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "scoreflow_watcher_tracked_series", Help: "Series whose last delivered value is remembered.",
		}),
	}
	reg.MustRegister(m.polls, m.pollSeconds, m.queryErrors, m.series, m.samples, m.events, m.tracked)
	return m
}
