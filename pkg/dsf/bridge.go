package dsf

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// DefaultScorerTimeout bounds each request to a scorer: under a Knative delivery's usual
// timeout, so a slow scorer yields our 503 rather than the broker's own give-up.
const DefaultScorerTimeout = 10 * time.Second

// validityIntervals is how many of a scorer's intervals (scoring.params.interval, at least a
// minute) its scores stay valid: a missed ping or two does not expire them, a scorer that stopped
// answering does.
const validityIntervals = 3

// Bridge answers PingSource events carrying a DynamicScorer's configuration.
type Bridge struct {
	opts    Options
	prom    prom.Config
	reg     prometheus.Registerer
	log     *slog.Logger
	client  client
	metrics *metrics
	// now is the evaluation time; tests pin it to where they wrote samples.
	now func() time.Time

	mu      sync.Mutex
	queries map[[2]string]prom.Querier // by Prometheus URL and token file
}

// New makes a bridge. promCfg's URL and token file are the Prometheus of configurations that
// name none (opts' are ignored: promCfg sets them); its CA and timeout apply to every
// Prometheus. reg receives the bridge's and the Prometheus client's metrics.
func New(opts Options, promCfg prom.Config, scorerTimeout time.Duration, reg prometheus.Registerer, log *slog.Logger) (*Bridge, error) {
	if scorerTimeout <= 0 {
		return nil, fmt.Errorf("--scorer-timeout must be positive, not %v", scorerTimeout)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	opts.PrometheusURL, opts.PrometheusTokenFile = promCfg.URL, promCfg.BearerTokenFile
	b := &Bridge{opts: opts, prom: promCfg, reg: reg, log: log, now: time.Now, queries: map[[2]string]prom.Querier{}}
	b.client = client{http: &http.Client{Timeout: scorerTimeout}}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	b.metrics = m
	// The default Prometheus is made now, so that a bad --prometheus-url stops the start.
	if _, err := b.querier(promCfg.URL, promCfg.BearerTokenFile); err != nil {
		return nil, err
	}
	return b, nil
}

// SetNow pins the evaluation time (tests write samples at known times).
func (b *Bridge) SetNow(now func() time.Time) { b.now = now }

// Routes is the bridge's inputs for scorer.Handler: PingSource events only.
func (b *Bridge) Routes() scorer.Route { return scorer.Route{contract.TypePing: b.Ping} }

// Ping scores once as the event's data says: /config (when synced), /healthz, the range
// queries, then the scoring endpoint, whose results become one score.updated.
func (b *Bridge) Ping(ctx context.Context, e event.Event) (*scorer.Result, error) {
	var cfg Config
	if err := scorer.DecodeConfig(e, &cfg); err != nil {
		return nil, err
	}
	var remote *RemoteConfig
	if cfg.syncs() {
		rc, err := b.client.config(ctx, cfg.ConfigURL)
		if err != nil {
			return nil, b.failed("", err)
		}
		remote = rc
	}
	p, err := cfg.resolve(remote, b.opts)
	if err != nil {
		return nil, scorer.BadConfig("%v", err)
	}
	if err := b.client.healthy(ctx, p.healthURL); err != nil {
		b.metrics.healthy.WithLabelValues(p.name).Set(0)
		return nil, b.failed(p.name, err)
	}
	b.metrics.healthy.WithLabelValues(p.name).Set(1)

	data, observed := model.Matrix{}, b.now()
	if len(p.queries) > 0 {
		if data, observed, err = b.fetch(ctx, p); err != nil {
			return nil, b.failed(p.name, err)
		}
	}
	began := time.Now()
	results, err := b.client.score(ctx, p.scoringURL, p.scoreToken, data)
	b.metrics.observe(p.name, began, err)
	if err != nil {
		return nil, b.failed(p.name, err)
	}
	m, err := p.mapResults(results)
	if err != nil {
		return nil, b.failed(p.name, scorer.BadConfig("%v", err))
	}
	b.metrics.clamped.WithLabelValues(p.name).Add(float64(m.Clamped))
	for why, n := range m.Dropped {
		if n > 0 {
			b.metrics.dropped.WithLabelValues(p.name, why).Add(float64(n))
			b.log.Warn("scorer results not written", "scorer", p.name, "why", why, "count", n)
		}
	}
	if len(m.Items) == 0 {
		return nil, nil
	}
	su := contract.ScoreUpdated{Resource: p.resource, Items: m.Items}
	if p.interval > 0 {
		// A PingSource fires at most once a minute, whatever interval the scorer asks for.
		vu := observed.Add(validityIntervals * max(p.interval, time.Minute))
		su.ValidUntil = &vu
	}
	return &scorer.Result{Scores: su, Observed: observed}, nil
}

// fetch runs each query over [now-range, now] (now aligned down to step, so that successive
// pings sample the same grid) and concatenates the series, as DSF's agent does.
func (b *Bridge) fetch(ctx context.Context, p *plan) (model.Matrix, time.Time, error) {
	q, err := b.querier(p.promURL, p.promToken)
	if err != nil {
		return nil, time.Time{}, scorer.BadConfig("source: %v", err)
	}
	start, end := prom.AlignedRange(b.now(), p.rng, p.step)
	var all model.Matrix
	for _, query := range p.queries {
		m, err := q.QueryRange(ctx, query, start, end, p.step)
		if err != nil {
			return nil, time.Time{}, prom.Fail(err)
		}
		all = append(all, m...)
	}
	return all, end, nil
}

// querier returns the client of one Prometheus, made once. Only the first (the bridge's own)
// registers its latency histogram: one metric cannot be registered twice.
func (b *Bridge) querier(url, tokenFile string) (prom.Querier, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	key := [2]string{url, tokenFile}
	if q, ok := b.queries[key]; ok {
		return q, nil
	}
	cfg := b.prom
	cfg.URL, cfg.BearerTokenFile = url, tokenFile
	var reg prometheus.Registerer
	if len(b.queries) == 0 {
		reg = b.reg
	}
	c, err := prom.New(cfg, b.log, reg)
	if err != nil {
		return nil, err
	}
	b.queries[key] = c
	return c, nil
}

// maxMessage keeps a failure's message short: the score.failed reply that carries it must stay
// well under the 768 bytes Knative's dispatcher accepts in a non-2xx body.
const maxMessage = 400

// failed logs a scorer failure (the reply says the same) and shortens its message.
func (b *Bridge) failed(name string, err error) error {
	se, ok := err.(*scorer.Error)
	if !ok {
		se = &scorer.Error{Reason: ReasonScorerUnavailable, Retriable: true, Err: err}
	}
	msg := se.Err.Error()
	b.log.Warn("scoring failed", "scorer", name, "reason", se.Reason, "retriable", se.Retriable, "err", msg)
	if len(msg) > maxMessage {
		se = &scorer.Error{Reason: se.Reason, Retriable: se.Retriable, Err: fmt.Errorf("%s...", msg[:maxMessage])}
	}
	return se
}

type metrics struct {
	clamped *prometheus.CounterVec
	dropped *prometheus.CounterVec
	healthy *prometheus.GaugeVec
	seconds *prometheus.HistogramVec
}

func newMetrics(reg prometheus.Registerer) (*metrics, error) {
	m := &metrics{
		clamped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_dsf_scores_clamped_total",
			Help: "Scores a DSF scorer returned outside [-100, 100] (after rounding), written as -100 or 100, by scorer (scoring.params.name).",
		}, []string{"scorer"}),
		dropped: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_dsf_results_dropped_total",
			Help: "Scorer results not written, by scorer and why: cluster (no valid cluster label), name (the format made no legal score name), score (missing or not finite).",
		}, []string{"scorer", "why"}),
		healthy: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "scoreflow_dsf_scorer_healthy",
			Help: "1 when the scorer's /healthz answered 200 at the last ping (DSF's Active), else 0 (Inactive).",
		}, []string{"scorer"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "scoreflow_dsf_scoring_seconds",
			Help:    "Calls of a scorer's scoring endpoint by scorer and outcome (ok, unavailable, failed).",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 16),
		}, []string{"scorer", "outcome"}),
	}
	for _, c := range []prometheus.Collector{m.clamped, m.dropped, m.healthy, m.seconds} {
		if err := reg.Register(c); err != nil {
			return nil, err
		}
	}
	return m, nil
}

func (m *metrics) observe(name string, began time.Time, err error) {
	outcome := "ok"
	if se, ok := err.(*scorer.Error); ok {
		outcome = "failed"
		if se.Retriable {
			outcome = "unavailable"
		}
	}
	m.seconds.WithLabelValues(name, outcome).Observe(time.Since(began).Seconds())
}
