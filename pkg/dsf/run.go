package dsf

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// DefaultTimeout bounds each request to a scorer or Prometheus: DSF's agent's (30s). The LLM
// forecast scorer asks its model once per series, in turn, so its answer may take that long.
const DefaultTimeout = 30 * time.Second

// Options configure a Runner.
type Options struct {
	Settings
	// Timeout bounds each request (DefaultTimeout when zero).
	Timeout time.Duration
	// CAFile, when set, is a PEM bundle trusted for https scorers and Prometheus besides the
	// system's roots (an OpenShift service CA, say).
	CAFile string
}

// Runner does for one DynamicScorer what DSF's agent does on one tick: probe the scorer (its
// /config with configSyncMode Full, else its /healthz), resolve the spec, run the range queries,
// POST them to the scoring endpoint and map the results. It contacts only what the deployment's
// Endpoints list and reads tokens only from the mounted Secrets.
type Runner struct {
	opts      Options
	client    client
	transport http.RoundTripper
	log       *slog.Logger
	metrics   *metrics
	now       func() time.Time

	mu       sync.Mutex
	queriers map[string]cachedQuerier // by scorer: one per configured scorer at most
}

type cachedQuerier struct {
	url, token string
	q          prom.Querier
}

// NewRunner makes a runner; reg receives its metrics.
func NewRunner(opts Options, reg prometheus.Registerer, log *slog.Logger) (*Runner, error) {
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Timeout < 0 {
		return nil, fmt.Errorf("the request timeout must be positive, not %v", opts.Timeout)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		if err != nil {
			return nil, fmt.Errorf("--ca-file: %w", err)
		}
		pool, err := x509.SystemCertPool()
		if err != nil {
			pool = x509.NewCertPool()
		}
		if !pool.AppendCertsFromPEM(pem) {
			return nil, fmt.Errorf("--ca-file %s holds no PEM certificate", opts.CAFile)
		}
		tr.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Runner{opts: opts, client: newClient(tr, opts.Timeout), transport: tr, log: log, metrics: m, now: time.Now, queriers: map[string]cachedQuerier{}}, nil
}

// SetNow pins the evaluation time (tests write samples at known times).
func (r *Runner) SetNow(now func() time.Time) { r.now = now }

// Evaluation is one round of one scorer.
type Evaluation struct {
	Plan     *Plan
	Observed time.Time // the end of the queried range, or when the scorer answered
	Mapped   Mapped
	// Skipped says why nothing was asked of the scoring endpoint: the scorer is masked for the
	// agent's cluster, or its destination is None.
	Skipped string
}

// Evaluate runs one round of ds for sc (the agent's cluster, or the hub's cluster label) and
// returns its scores. Errors are *scorer.Error with DSF's reasons.
func (r *Runner) Evaluate(ctx context.Context, ds *DynamicScorer, sc scope) (*Evaluation, error) {
	probe, err := Prepare(ds, r.opts.Settings)
	if err != nil {
		return nil, scorer.BadConfig("DynamicScorer %s: %v", ds.Name, err)
	}
	var remote *RemoteConfig
	if probe.ConfigURL != "" {
		remote, err = r.client.config(ctx, probe.ConfigURL)
	} else {
		err = r.client.healthy(ctx, probe.HealthURL)
	}
	r.metrics.healthy.WithLabelValues(ds.Name).Set(boolValue(err == nil))
	if err != nil {
		return nil, err
	}
	p, err := Resolve(ds, remote, r.opts.Settings)
	if err != nil {
		return nil, scorer.BadConfig("DynamicScorer %s: %v", ds.Name, err)
	}
	if sc.Owns != nil {
		if err := sc.Owns(p.Resource); err != nil {
			return nil, err
		}
	}
	ev := &Evaluation{Plan: p, Observed: r.now()}
	switch {
	case sc.Cluster != "" && sc.Masks.Has(sc.Cluster, p.ScoreName):
		ev.Skipped = fmt.Sprintf("masked: DynamicScoringConfig masks %s for cluster %s", p.ScoreName, sc.Cluster)
		return ev, nil
	case !p.Write:
		ev.Skipped = "scoreDestination None: the score is written nowhere"
		return ev, nil
	}
	data := model.Matrix{}
	if len(p.Queries) > 0 {
		if data, ev.Observed, err = r.fetch(ctx, p); err != nil {
			return nil, err
		}
		if sc.Cluster == "" {
			data = withoutMasked(data, sc, p.ScoreName)
		}
	}
	began := time.Now()
	results, err := r.client.score(ctx, p.ScoringURL, p.ScoringToken, data)
	r.metrics.observe(r.metrics.scoring, ds.Name, began, err)
	if err != nil {
		return nil, err
	}
	ev.Mapped = p.mapResults(results, sc)
	r.metrics.clamped.WithLabelValues(ds.Name).Add(float64(ev.Mapped.Clamped))
	for why, n := range ev.Mapped.Dropped {
		r.metrics.dropped.WithLabelValues(ds.Name, why).Add(float64(n))
		r.log.Warn("scorer results not written", "scorer", ds.Name, "why", why, "count", n, "example", ev.Mapped.Example[why], "rule", dropRules[why])
	}
	return ev, nil
}

// dropRules say in the log why a result was left out.
var dropRules = map[string]string{
	dropScore:     "a result without a finite score is never written as a value",
	dropCluster:   "hub mode: a result's cluster is its cluster label, a managed cluster's name",
	dropMasked:    "DynamicScoringConfig masks this score for the cluster",
	dropName:      "an AddOnPlacementScore item name here is letters, digits and . _ : ; @ + = -, starting and ending with a letter or digit, at most 253 bytes (a label the format names may be missing)",
	dropDuplicate: "scoreDimensionFormat gives two results one name: the first is kept (DSF keeps one of them)",
	dropCap:       "more score names for one cluster than one AddOnPlacementScore holds",
}

// withoutMasked removes, in hub mode, the series of clusters masked for score: their data never
// reaches the scorer.
func withoutMasked(data model.Matrix, sc scope, score string) model.Matrix {
	if len(sc.Masks) == 0 {
		return data
	}
	out := data[:0:0]
	for _, s := range data {
		if !sc.Masks.Has(string(s.Metric[model.LabelName(sc.ClusterLabel)]), score) {
			out = append(out, s)
		}
	}
	return out
}

// fetch runs each query over [now-range, now] (now aligned down to step, so that successive
// rounds sample the same grid) and concatenates the series, as DSF's agent does.
func (r *Runner) fetch(ctx context.Context, p *Plan) (model.Matrix, time.Time, error) {
	q, err := r.querier(p)
	if err != nil {
		return nil, time.Time{}, scorer.BadConfig("source: %v", err)
	}
	start, end := prom.AlignedRange(r.now(), p.Range, p.Step)
	began := time.Now()
	var all model.Matrix
	for _, query := range p.Queries {
		m, err := q.QueryRange(ctx, query, start, end, p.Step)
		if err != nil {
			err = prom.Fail(err)
			r.metrics.observe(r.metrics.source, p.Scorer, began, err)
			return nil, time.Time{}, err
		}
		all = append(all, m...)
	}
	r.metrics.observe(r.metrics.source, p.Scorer, began, nil)
	return all, end, nil
}

// querier returns the Prometheus client of a scorer, made again when its URL or token changes.
func (r *Runner) querier(p *Plan) (prom.Querier, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.queriers[p.Scorer]; ok && c.url == p.PromURL && c.token == p.PromToken {
		return c.q, nil
	}
	q, err := prom.New(prom.Config{URL: p.PromURL, BearerTokenFile: p.PromToken, Timeout: r.opts.Timeout, Transport: r.transport}, r.log.With("scorer", p.Scorer), nil)
	if err != nil {
		return nil, err
	}
	r.queriers[p.Scorer] = cachedQuerier{url: p.PromURL, token: p.PromToken, q: q}
	return q, nil
}

// Forget drops what the runner keeps for a scorer no longer configured: its Prometheus client
// and its metrics' series.
func (r *Runner) Forget(name string) {
	r.mu.Lock()
	delete(r.queriers, name)
	r.mu.Unlock()
	r.metrics.forget(name)
}

// Settings are the runner's deployment settings.
func (r *Runner) Settings() Settings { return r.opts.Settings }

func boolValue(b bool) float64 {
	if b {
		return 1
	}
	return 0
}
