package dsf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
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
	// system's roots (an OpenShift service CA, say); read again when it changes, and skipped while
	// missing or empty.
	CAFile string
}

// Runner does for one DynamicScorer what DSF's agent does on one tick: resolve the spec (with the
// scorer's /config: from the hub's status in agent mode, asked of the scorer in hub mode), run the
// range queries, POST them to the scoring endpoint and map the results. Tokens go only to the
// hosts the specs pair them with.
type Runner struct {
	opts      Options
	client    client
	transport http.RoundTripper
	log       *slog.Logger
	metrics   *metrics
	dsf       *dsfMetrics
	now       func() time.Time

	mu       sync.Mutex
	queriers map[string]cachedQuerier // by scorer: one per configured scorer at most
}

type cachedQuerier struct {
	url string
	q   prom.Querier
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
	tr, err := newTransport(opts.CAFile, log)
	if err != nil {
		return nil, err
	}
	m, err := newMetrics(reg)
	if err != nil {
		return nil, err
	}
	dm, err := newDSFMetrics(reg)
	if err != nil {
		return nil, err
	}
	return &Runner{opts: opts, client: newClient(tr, opts.Timeout), transport: tr, log: log, metrics: m, dsf: dm, now: time.Now, queriers: map[string]cachedQuerier{}}, nil
}

// SetNow pins the evaluation time (tests write samples at known times).
func (r *Runner) SetNow(now func() time.Time) { r.now = now }

// Evaluation is one round of one scorer.
type Evaluation struct {
	// Plan is the resolved spec; nil when the round stopped before it could be resolved.
	Plan     *Plan
	Observed time.Time // the end of the queried range, or when the scorer answered
	Results  []Result  // the scorer's answer
	Mapped   Mapped    // the answer as scores (none with scoreDestination None)
	// Skipped says why nothing was asked of the scoring endpoint: the scorer is masked for the
	// agent's cluster, not Active, or its /config is not synced yet.
	Skipped string
}

// Evaluate runs one round of ds for sc (the agent's cluster, or the hub's cluster label) and
// returns its scores. Errors are *scorer.Error with DSF's reasons.
//
// In agent mode (sc.Synced) nothing is contacted before the scorer is known to run for this
// cluster: its health and /config are the hub's (status.healthStatus, status.lastSyncedConfig), as
// DSF's agents get them in their summaries; a masked, inactive or unsynced scorer stops here. In
// hub mode the runner probes the scorer itself, as DSF's controller would, every round.
func (r *Runner) Evaluate(ctx context.Context, ds *DynamicScorer, sc scope) (*Evaluation, error) {
	probe, err := Prepare(ds, r.opts.Settings)
	if err != nil {
		return nil, scorer.BadConfig("DynamicScorer %s: %v", ds.Name, err)
	}
	var remote *RemoteConfig
	switch {
	case !sc.Synced && probe.ConfigURL != "":
		remote, err = r.client.config(ctx, probe.ConfigURL)
	case !sc.Synced:
		err = r.client.healthy(ctx, probe.HealthURL)
	case ds.Spec.ConfigSyncMode == SyncFull:
		if remote = ds.Status.LastSyncedConfig; remote == nil {
			return &Evaluation{Skipped: "configSyncMode Full and no status.lastSyncedConfig yet: the hub has not synced the scorer's /config"}, nil
		}
	}
	if err != nil {
		return nil, err
	}
	p, err := Resolve(ds, remote, r.opts.Settings)
	if err != nil {
		return nil, scorer.BadConfig("DynamicScorer %s: %v", ds.Name, err)
	}
	ev := &Evaluation{Plan: p, Observed: r.now()}
	switch {
	case sc.Synced && ds.Status.HealthStatus != HealthActive:
		ev.Skipped = fmt.Sprintf("status.healthStatus is %q, not Active", first(ds.Status.HealthStatus, HealthUnknown))
		return ev, nil
	case sc.Cluster != "" && sc.Masks.Has(sc.Cluster, p.ScoreName):
		ev.Skipped = fmt.Sprintf("masked: DynamicScoringConfig masks %s for cluster %s", p.ScoreName, sc.Cluster)
		return ev, nil
	}
	if sc.Owns != nil && p.Write {
		if err := sc.Owns(p.Resource); err != nil {
			return nil, err
		}
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
	token, err := r.token(ctx, p.ScoringAuth, "scoring.auth")
	if err != nil {
		return nil, err
	}
	began := time.Now()
	results, err := r.client.score(ctx, p.ScoringURL, token, data)
	r.metrics.observe(r.metrics.scoring, ds.Name, began, err)
	if err != nil {
		return nil, withheld(err, p.ScoringWithheld)
	}
	addSince(r.dsf.perform, p.ScoreName, began)
	ev.Results = results
	r.dsf.scores(p.ScoreName, results, func(res Result) string {
		if sc.Cluster != "" {
			return sc.Cluster
		}
		return res.Metric[sc.ClusterLabel]
	})
	if !p.Write {
		return ev, nil
	}
	ev.Mapped = p.mapResults(results, sc)
	r.metrics.clamped.WithLabelValues(ds.Name).Add(float64(ev.Mapped.Clamped))
	for why, n := range ev.Mapped.Dropped {
		r.metrics.dropped.WithLabelValues(ds.Name, why).Add(float64(n))
		r.log.Warn("scorer results not written", "scorer", ds.Name, "why", why, "count", n, "example", ev.Mapped.Example[why], "rule", dropRules[why])
	}
	return ev, nil
}

// token reads the token of ref, "" for none.
func (r *Runner) token(ctx context.Context, ref *SecretRef, field string) (string, error) {
	if ref == nil {
		return "", nil
	}
	if r.opts.Tokens == nil {
		return "", scorer.BadConfig("%s: tokenSecretRef %s/%s: no Secrets are readable here", field, ref.Name, ref.Key)
	}
	return r.opts.Tokens.Token(ctx, *ref)
}

// withheld adds to a request's failure why the spec's token was not sent with it: a 401 from a
// host the scorer's /config named is the usual consequence.
func withheld(err error, why string) error {
	var se *scorer.Error
	if why == "" || !errors.As(err, &se) {
		return err
	}
	return &scorer.Error{Reason: se.Reason, Retriable: se.Retriable, Err: fmt.Errorf("%w (%s)", se.Err, why)}
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
	token, err := r.token(ctx, p.PromAuth, "source.auth")
	if err != nil {
		return nil, time.Time{}, err
	}
	ctx = withBearer(ctx, token)
	start, end := prom.AlignedRange(r.now(), p.Range, p.Step)
	began := time.Now()
	var all model.Matrix
	for _, query := range p.Queries {
		m, err := q.QueryRange(ctx, query, start, end, p.Step)
		if err != nil {
			err = withheld(scorer.Classify(err), p.PromWithheld)
			r.metrics.observe(r.metrics.source, p.Scorer, began, err)
			return nil, time.Time{}, err
		}
		all = append(all, m...)
	}
	r.metrics.observe(r.metrics.source, p.Scorer, began, nil)
	addSince(r.dsf.fetch, p.ScoreName, began)
	return all, end, nil
}

// querier returns the Prometheus client of a scorer, made again when its URL changes. The token
// travels with each round's context (withBearer), read afresh every round.
func (r *Runner) querier(p *Plan) (prom.Querier, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if c, ok := r.queriers[p.Scorer]; ok && c.url == p.PromURL {
		return c.q, nil
	}
	q, err := prom.New(prom.Config{URL: p.PromURL, Timeout: r.opts.Timeout, Transport: bearerTransport{r.transport}}, r.log.With("scorer", p.Scorer), nil)
	if err != nil {
		return nil, err
	}
	r.queriers[p.Scorer] = cachedQuerier{url: p.PromURL, q: q}
	return q, nil
}

type bearerKey struct{}

// withBearer makes the requests made under ctx carry token (none when empty).
func withBearer(ctx context.Context, token string) context.Context {
	return context.WithValue(ctx, bearerKey{}, token)
}

// bearerTransport sets the Authorization of a request from its context (withBearer).
type bearerTransport struct{ next http.RoundTripper }

func (t bearerTransport) RoundTrip(req *http.Request) (*http.Response, error) {
	token, _ := req.Context().Value(bearerKey{}).(string)
	if token == "" {
		return t.next.RoundTrip(req)
	}
	req = req.Clone(req.Context())
	req.Header.Set("Authorization", "Bearer "+token)
	return t.next.RoundTrip(req)
}

// Forget drops what the runner keeps for a scorer no longer configured: its Prometheus client
// and its metrics' series; scoreName, when known, is its score name (DSF's metrics' label).
func (r *Runner) Forget(name, scoreName string) {
	r.mu.Lock()
	delete(r.queriers, name)
	r.mu.Unlock()
	r.metrics.forget(name)
	if scoreName != "" {
		r.dsf.forgetScores(scoreName)
	}
}

// Settings are the runner's deployment settings.
func (r *Runner) Settings() Settings { return r.opts.Settings }
