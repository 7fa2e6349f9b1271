package resource

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// Scorer answers PingSource events (query Prometheus) and metric.changed events (score the samples).
type Scorer struct {
	Prom prom.Querier
	Log  *slog.Logger
	// MetricConfig scores metric.changed events (they carry no configuration). Nil: DefaultConfig.
	MetricConfig *Config
	// Now is the evaluation time; nil means time.Now. Tests pin it to where they wrote samples.
	Now func() time.Time
}

// Routes is the scorer's inputs for scorer.Handler.
func (s *Scorer) Routes() scorer.Route {
	return scorer.Route{contract.TypePing: s.Ping, contract.TypeMetricChanged: s.Metrics}
}

// Queries are the PromQL the configuration runs: allocatable, then requests ("" when no score
// needs them). Requests count only Pending and Running pods, as the kubernetes-mixin's recording
// rules do: finished pods keep their series but hold nothing.
func (c *Config) Queries() (alloc, requests string) {
	kinds, needRequests := c.needs()
	names := make([]string, len(kinds))
	for i, k := range kinds {
		names[i] = c.ksmResource(k)
	}
	extra := ""
	if c.Selector != "" {
		extra = ", " + c.Selector
	}
	sel := fmt.Sprintf(`resource=~"%s"%s`, strings.Join(names, "|"), extra)
	alloc = fmt.Sprintf(`sum by (%s, resource) (%s{%s})`, c.ClusterLabel, MetricAllocatable, sel)
	if needRequests {
		requests = fmt.Sprintf(`sum by (%[1]s, resource) (%[2]s{%[3]s} * on (%[1]s, namespace, pod) group_left () (kube_pod_status_phase{phase=~"Pending|Running"%[4]s} == 1))`,
			c.ClusterLabel, MetricRequests, sel, extra)
	}
	return alloc, requests
}

// Ping scores from Prometheus with the configuration in the event's data.
func (s *Scorer) Ping(ctx context.Context, e event.Event) (*scorer.Result, error) {
	cfg := DefaultConfig()
	if err := scorer.DecodeConfig(e, &cfg); err != nil {
		return nil, err
	}
	at := s.now()
	allocQ, reqQ := cfg.Queries()
	c := NewCollector(&cfg)
	c.AbsentRequestsAreZero = true // the requests query covers every cluster
	alloc, err := s.Prom.Query(ctx, allocQ, at)
	if err != nil {
		return nil, err
	}
	c.AddVector(alloc, true)
	if reqQ != "" {
		req, err := s.Prom.Query(ctx, reqQ, at)
		if err != nil {
			return nil, err
		}
		c.AddVector(req, false)
	}
	return s.result(&cfg, c, at), nil
}

// Metrics scores the samples of a metric.changed event with MetricConfig, without querying.
// Samples of kube_node_status_allocatable and kube_pod_container_resource_requests with a
// "resource" label count; others are ignored. A series sent several times counts once, at its
// latest value. The producer sends requests of active pods only. A resource whose requests the
// event does not carry for a cluster gets no score net of requests there (allocatable alone
// would pass for all of it free); the next ping scores it from Prometheus.
func (s *Scorer) Metrics(_ context.Context, e event.Event) (*scorer.Result, error) {
	m, err := contract.DecodeMetricChanged(&e)
	if err != nil {
		return nil, err
	}
	cfg := s.MetricConfig
	if cfg == nil {
		d := DefaultConfig()
		cfg = &d
	}
	latest := map[string]contract.Sample{}
	for _, smp := range m.Samples {
		if smp.Metric != MetricAllocatable && smp.Metric != MetricRequests {
			continue
		}
		k := smp.SeriesKey()
		if old, ok := latest[k]; !ok || smp.ObservedAt.After(old.ObservedAt) {
			latest[k] = smp
		}
	}
	c := NewCollector(cfg)
	var observed time.Time
	for _, smp := range latest {
		c.Add(smp.Cluster, smp.Labels["resource"], smp.Metric == MetricAllocatable, smp.Value)
		// The oldest input dates the scores: they are no fresher than that.
		if observed.IsZero() || smp.ObservedAt.Before(observed) {
			observed = smp.ObservedAt
		}
	}
	return s.result(cfg, c, observed), nil
}

func (s *Scorer) result(cfg *Config, c *Collector, observed time.Time) *scorer.Result {
	if c.Dropped > 0 && s.Log != nil {
		s.Log.Warn("values without a valid cluster name were not scored", "count", c.Dropped, "clusterLabel", cfg.ClusterLabel)
	}
	items := c.Scores()
	if len(items) == 0 {
		return nil
	}
	return &scorer.Result{Observed: observed, Scores: contract.ScoreUpdated{Resource: cfg.Resource, Items: items}}
}

func (s *Scorer) now() time.Time {
	if s.Now != nil {
		return s.Now()
	}
	return time.Now()
}
