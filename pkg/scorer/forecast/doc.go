// Package forecast predicts each cluster's usage a configurable horizon ahead and scores the
// predicted headroom, (capacity - predicted) / capacity. It replaces the Dynamic Scoring
// Framework's Python "simple prediction" sample.
//
// Method: Holt's linear (double exponential) smoothing, computed here over the points of one
// query_range (see Holt). Why Holt rather than least squares:
//   - Least squares over the window is already in PromQL as predict_linear: the promql scorer
//     scores "predict_linear(x[6h], 3600)" with no new code. This scorer exists for what PromQL
//     cannot do by default: Prometheus 3 has Holt (double_exponential_smoothing) only behind the
//     promql-experimental-functions feature flag, and Thanos or VictoriaMetrics may lack it.
//   - Holt weights recent points more. A cluster whose load turned upward an hour ago is forecast
//     on that new trend, where a straight line fitted over six hours averages it away with the
//     flat hours before; for placement, the recent trend is what decides the next hour.
//   - It is O(n) with no matrix algebra, and forecasts a linear series exactly whatever its factors.
//
// Its price is two factors to choose (alpha for the level, beta for the trend; defaults 0.5 and
// 0.1) and a sensitivity to the last few points, which a modest beta damps.
//
// Evaluation: the usage query runs over [now-range, now] at step, now aligned down to a multiple
// of step; each series is forecast horizon/step steps past its last point. The capacity comes from
// an instant query at the same end (one series per cluster, matched on the cluster label), or is
// one number for all clusters. A predicted usage below 0 counts as 0. The scores are dated at the
// evaluation (the ping), not at the aligned end: the writer counts its TTL from that date, so
// each ping renews them, and a step longer than the TTL does not let them lapse between steps.
//
// Left out (never scored 0): series with fewer than two points, series with no point at the end
// of the range (they have stopped: forecasting them would pass old data off as fresh), clusters
// with no capacity series or a capacity not above 0, and clusters with no usage series at all.
//
// Score: the headroom fraction, normalised by "normalize" (default linear -1..1, i.e.
// round(100 * headroom): 100 predicted idle, 0 predicted full, negative predicted over capacity),
// named by "scoreName" from the usage series' labels, one score.updated for every cluster.
//
// Only PingSource events are taken: a metric.changed event carries no history to forecast from.
package forecast
