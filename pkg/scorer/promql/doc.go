// Package promql scores any PromQL query: a new score is a new PingSource, not new code (the idea
// of OCM's AddOnPlacementScoreGenerator proposal and of the Dynamic Scoring Framework's
// DynamicScorer source parameters).
//
// A PingSource's data is a Config: the query; optionally range and step (then it is a
// query_range over [now-range, now], now aligned down to a multiple of step, and each series'
// points are reduced by aggregation: last, avg, min, max or p95); the cluster label; the score
// resource; a score-name format filled from each series' labels ("${app};${device}"); and a
// normalisation (linear between bounds, min-max per score name across the clusters of one
// evaluation, or none). The reply is one score.updated with every cluster scored, dated at the
// evaluation (the ping) for range queries too: the writer counts its TTL from that date, so each
// ping renews the scores, whatever the step.
//
// Each series gives one score: cluster from its cluster label, name from scoreName, value
// normalised. Series without a valid cluster name, or that scoreName cannot name legally, are
// dropped with a warning; NaN and infinite values score nothing; a cluster with no series is left
// out. Two series naming the same score of the same cluster are a bad query (400): aggregate
// them in PromQL.
//
// metric.changed: a metric.changed event has samples but no query, so the function takes it only
// when started with --metric-config (a MetricConfig naming the metric to score); each series'
// samples in the event are reduced by its aggregation (default last). This suits producers that
// push a per-cluster value (say, GPU utilisation measured on the managed cluster) and want it
// scored at once, not at the next ping. Without --metric-config such events are refused (400
// WrongType).
package promql
