// Package dsf bridges scorers of the OCM Dynamic Scoring Framework (DSF) into scoreflow: a
// scorer that serves DSF's REST API (/healthz, /config, POST /scoring) scores clusters through one
// PingSource whose data is its DynamicScorer's spec, with no change to the scorer.
//
// On each ping the bridge does what DSF's agent does on each tick, once for the whole fleet:
//
//  1. with a configURL and configSyncMode Full (the default with a configURL), GET /config: its
//     source and scoring replace the PingSource's (auth stays the PingSource's, as it stays in
//     the DynamicScorer);
//  2. GET <scheme://host of configURL, else of scoring.host>/healthz, as DSF's controller probes
//     it: anything but 200 means Inactive, and the ping fails (retriable) without scoring;
//  3. for source type Prometheus, a query_range per query (queries are joined by ";") over
//     [now-range, now], now aligned down to step, all series concatenated;
//  4. POST {"data": <matrix>} to the scoring endpoint ({"data": []} for source type None);
//  5. map {"results": [{"metric": {...}, "score": <float>}]} to one score.updated: the cluster is
//     the result's cluster label (clusterLabel) or, for results without one, each of clusters;
//     the score name is scoreDimensionFormat filled from the result's labels (${scoreName}
//     ${cluster} ${node} ${pod} ${container} ${device} ${namespace} ${app} ${meta}; a missing
//     label is empty, as in DSF; default ${scoreName}); the resource is scoring.params.name made
//     an object name as DSF does (sample_my_score -> sample-my-score) unless resource is set.
//
// Where the bridge differs from DSF's agent, on purpose:
//   - values are rounded (half away from zero) and clamped to [-100, 100], counted in
//     scoreflow_dsf_scores_clamped_total; DSF truncates and leaves the hub to refuse them;
//   - validUntil is 3 scoring intervals (at least 3 minutes, a PingSource fires once a minute at
//     most) after the data's time; DSF sets none, so a dead scorer's scores live forever;
//   - the writer merges by score name, where DSF replaces every score of the object;
//   - a scorer that fails, times out or is Inactive yields score.failed, never an old or zero
//     value: ScorerUnavailable (503, retriable) for no answer, 5xx, 408, 429 or /healthz not 200;
//     ScorerFailed (400) for another 4xx or an answer the API does not allow; BadConfig (400) for
//     a configuration that cannot work, or results that give one cluster the same score name twice
//     (DSF keeps one of them at random); Prometheus errors as the promql-scorer reports them;
//   - source.type is matched without regard to case (DSF's samples write "prometheus", which its
//     agent takes for "no source");
//   - the Prometheus queried is the bridge's --prometheus-url (a hub-side Prometheus that sees
//     every cluster, with a cluster label) unless the PingSource's own source.host names another;
//     a host in the scorer's /config names a Prometheus inside one managed cluster and is not used.
//
// Tokens: auth.tokenSecretRef{name, key} reads <--token-dir>/<name>/<key> (the bridge's Service
// mounts each Secret there), auth.tokenFile any path; the file is read on every request, so a
// rotated Secret applies at once, and its content is never logged. /healthz and /config are asked
// without a token, as DSF does.
package dsf
