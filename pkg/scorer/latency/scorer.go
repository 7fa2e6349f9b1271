package latency

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"sort"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// Scorer measures configured targets and scores them.
type Scorer struct {
	Prober Prober
	// Cluster is --cluster: set in agent mode.
	Cluster string
	Log     *slog.Logger
	// Allowed returns what a ping may make the scorer measure, read from its deployment on every
	// ping (DeploymentTargets). Nil allows nothing: every ping is refused.
	Allowed func() (Allowlist, error)

	seconds  *prometheus.HistogramVec
	failures *prometheus.CounterVec

	mu     sync.Mutex
	series map[[2]string]bool // (cluster, name) label pairs in use
}

// MaxSeries bounds the (cluster, score name) pairs the metrics are labelled with: a ping names
// its entries, and each new pair is a new series of each metric. Runs of pairs beyond it are
// counted under cluster and name "_other" (no cluster or score name starts with "_").
const MaxSeries = 500

// DeploymentTargets is the Allowed of a scorer deployed with targetsFile and, in agent mode
// (agentCluster set), its own configFile, whose entries it may measure on a ping too. Both are
// read on every call, so an edited ConfigMap applies from the next ping.
func DeploymentTargets(targetsFile, configFile, agentCluster string) func() (Allowlist, error) {
	return func() (Allowlist, error) {
		a, err := LoadTargets(targetsFile, agentCluster)
		if err != nil {
			return nil, err
		}
		if agentCluster != "" && configFile != "" {
			cfg, err := LoadFile(configFile, agentCluster)
			if err != nil {
				return nil, err
			}
			a.Add(cfg)
		}
		return a, nil
	}
}

// New creates a scorer and registers its metrics with reg.
func New(cluster string, log *slog.Logger, reg prometheus.Registerer) *Scorer {
	s := &Scorer{
		Cluster: cluster,
		Log:     log,
		series:  map[[2]string]bool{},
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "scoreflow_latency_run_seconds",
			Help:    "Latency of successful runs (request start to first response byte, fresh connection), by cluster and score name.",
			Buckets: prometheus.ExponentialBuckets(0.001, 2, 15),
		}, []string{"cluster", "name"}),
		failures: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_latency_run_failures_total",
			Help: "Failed runs, by cluster, score name and the phase that failed (dns, connect, tls, wait, status).",
		}, []string{"cluster", "name", "phase"}),
	}
	reg.MustRegister(s.seconds, s.failures)
	return s
}

// Ping scores the configuration carried by a PingSource event.
func (s *Scorer) Ping(ctx context.Context, e event.Event) (*scorer.Result, error) {
	var cfg Config
	if err := scorer.DecodeConfig(e, &cfg); err != nil {
		return nil, err
	}
	if err := cfg.Resolve(s.Cluster); err != nil {
		return nil, scorer.BadConfig("PingSource data: %v", err)
	}
	// What the scorer contacts is its deployment's choice: a ping only picks among it.
	allowed := Allowlist{}
	if s.Allowed != nil {
		var err error
		if allowed, err = s.Allowed(); err != nil {
			s.Log.Error("reading the targets this scorer may measure", "err", err)
			return nil, scorer.Fail(contract.ReasonBadConfig, true, fmt.Errorf("this scorer's deployment: %w", err))
		}
	}
	if err := allowed.Check(cfg); err != nil {
		return nil, scorer.BadConfig("PingSource data: %v", err)
	}
	return s.Evaluate(ctx, cfg)
}

// labels returns the metric labels of (cluster, name): their own while under MaxSeries pairs.
func (s *Scorer) labels(cluster, name string) (string, string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	k := [2]string{cluster, name}
	if s.series[k] {
		return cluster, name
	}
	if len(s.series) >= MaxSeries {
		return "_other", "_other"
	}
	s.series[k] = true
	return cluster, name
}

// Evaluate measures every entry of a validated, resolved configuration and scores the ones with
// at least one successful run. When none has, it fails as retriable (MetricsUnavailable), naming
// each entry's failure.
func (s *Scorer) Evaluate(ctx context.Context, cfg Config) (*scorer.Result, error) {
	// Entries run concurrently (runs of one entry one after another), so an evaluation lasts as
	// long as its slowest entry, which validation bounds by MaxEntryTime.
	ms := make([]Measurement, len(cfg.Latencies))
	var wg sync.WaitGroup
	for i, t := range cfg.Latencies {
		wg.Add(1)
		go func() {
			defer wg.Done()
			ms[i] = s.Prober.Measure(ctx, t)
		}()
	}
	wg.Wait()
	observed := time.Now()
	if err := ctx.Err(); err != nil {
		return nil, scorer.Fail(contract.ReasonMetricsUnavailable, true, fmt.Errorf("measuring stopped: %w", err))
	}

	// Normalise per score name across clusters: minmax compares clusters on the same target.
	byName := map[string]map[string]float64{}
	var failed []error
	for _, m := range ms {
		s.record(m)
		if !m.OK {
			failed = append(failed, fmt.Errorf("%s (cluster %s, %s): %w", m.Target.Name, m.Target.Cluster, redact(m.Target.URL), errors.Join(m.Errors...)))
			continue
		}
		if byName[m.Target.Name] == nil {
			byName[m.Target.Name] = map[string]float64{}
		}
		byName[m.Target.Name][m.Target.Cluster] = float64(m.Mean) / float64(time.Millisecond)
	}
	if len(byName) == 0 {
		return nil, scorer.Fail(contract.ReasonMetricsUnavailable, true, fmt.Errorf("no target could be measured: %w", errors.Join(failed...)))
	}
	perCluster := map[string][]contract.Score{}
	for name, values := range byName {
		for cluster, v := range cfg.Normalize.Apply(values) {
			perCluster[cluster] = append(perCluster[cluster], contract.Score{Name: name, Value: float64(v)})
		}
	}
	res := &scorer.Result{Observed: observed, Scores: contract.ScoreUpdated{Resource: cfg.Resource}}
	for cluster, scores := range perCluster {
		sort.Slice(scores, func(i, j int) bool { return scores[i].Name < scores[j].Name })
		res.Scores.Items = append(res.Scores.Items, contract.ClusterScores{Cluster: cluster, Scores: scores})
	}
	sort.Slice(res.Scores.Items, func(i, j int) bool { return res.Scores.Items[i].Cluster < res.Scores.Items[j].Cluster })
	return res, nil
}

// record logs and counts one entry's outcome.
func (s *Scorer) record(m Measurement) {
	t := m.Target
	cluster, name := s.labels(t.Cluster, t.Name)
	for _, r := range m.Runs {
		s.seconds.WithLabelValues(cluster, name).Observe(r.Total.Seconds())
	}
	for _, err := range m.Errors {
		phase := "canceled"
		var re *RunError
		if errors.As(err, &re) {
			phase = re.Phase
		}
		s.failures.WithLabelValues(cluster, name, phase).Inc()
	}
	attrs := []any{"cluster", t.Cluster, "name", t.Name, "url", redact(t.URL), "runs", t.Runs, "succeeded", len(m.Runs)}
	if m.OK {
		attrs = append(attrs, "meanMs", math.Round(float64(m.Mean)/float64(time.Microsecond))/1000)
	}
	if len(m.Errors) > 0 {
		attrs = append(attrs, "err", errors.Join(m.Errors...).Error())
	}
	switch {
	case !m.OK:
		s.Log.Warn("target not measured: no score", attrs...)
	case len(m.Errors) > 0:
		s.Log.Warn("target measured with failed runs", attrs...)
	default:
		s.Log.Debug("target measured", attrs...)
	}
}
