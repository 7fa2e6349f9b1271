// Package dsf runs scorers of the OCM Dynamic Scoring Framework (DSF) from their DynamicScorer
// specs as DSF users write them, with DSF's semantics, in one of two places.
//
// Agent mode (Agent) is DSF's agent on one managed cluster, distributed by OCM as an addon
// (addon/dsf): it watches the hub's DynamicScorers and the DynamicScoringConfig
// dynamic-scoring-config in one namespace with the agent's hub identity, and runs each scorer on
// its scoring.params.interval against that cluster's own Prometheus, sending the cluster's scores
// to the hub's agent gateway. This is how DSF's published specs work unchanged: their queries
// carry no cluster label because each agent asks its own cluster's Prometheus.
//
// Hub mode (Bridge) answers PingSource events that name one DynamicScorer of a mounted file
// ({"scorer": NAME}), run against a hub-side Prometheus or Thanos whose series carry a cluster
// label; results without one answer score.failed NoClusterLabel.
//
// One round of a scorer (Runner.Evaluate) is one tick of DSF's agent:
//
//  1. probe the scorer as DSF's controller does: with configSyncMode Full GET configURL (an answer
//     that decodes is Active, and its fields are used), with None GET /healthz on configURL's host
//     (200 is Active); an Inactive scorer is not called;
//  2. merge /config into the spec field by field, as DSF's controller builds its summaries: a field
//     /config sets wins, else the spec's, else (hosts) configURL's scheme and host; auth, location,
//     destination and format are the spec's; location and scoreDestination are required, as DSF
//     leaves out scorers without them;
//  3. a scorer masked for the agent's cluster ({clusterName, scoreName}) stops here: its data never
//     reaches the scorer (hub mode: the masked clusters' series are removed instead);
//  4. for source type Prometheus, a query_range per query (queries are joined by ";") over
//     [now-range, now], now aligned down to step, all series concatenated;
//  5. POST {"data": <matrix>} to the scoring endpoint ({"data": []} for source type None);
//  6. map {"results": [{"metric": {...}, "score": <float>}]} to scores: the name is
//     scoreDimensionFormat filled from the result's labels (a label missing is empty, as in DSF;
//     default ${scoreName}); the AddOnPlacementScore is scoring.params.name made an object name
//     exactly as DSF's agent does (sample_my_score -> sample-my-score).
//
// What the deployment decides, never a spec, a scorer's answer or an event: the hosts that may be
// contacted and where they are (Endpoints: a spec's http://<NodeIP>:30007 or in-cluster
// Prometheus name maps to a real URL; an unlisted host is never contacted), the Secrets tokens
// come from (tokenSecretRef{name, key} reads <token dir>/<name>/<key>, a mounted Secret, on every
// request), and in hub mode the scorers a ping may name.
//
// Where scoreflow differs from DSF's agent, on purpose:
//   - values are truncated toward zero as DSF does, then clamped to [-100, 100] (counted in
//     scoreflow_dsf_scores_clamped_total); DSF leaves out-of-range values to the hub to refuse;
//   - validUntil is 3 intervals (at least a minute each) after the data's time; DSF sets none;
//   - the writer merges by score name, where DSF replaces every score of the object;
//   - a name twice for one cluster keeps the first result (DSF: one at random); a name no
//     AddOnPlacementScore item may have here (a leading ";" from a missing label, a "/") is left
//     out; each is counted in scoreflow_dsf_results_dropped_total and logged with an example;
//   - source.type is matched without regard to case (a DSF sample writes "prometheus", which
//     DSF's agent takes for no source);
//   - the scoring host is /config's scoring.host when set (DSF's controller takes its source.host
//     there, a bug not copied);
//   - a scorer's error answers are not echoed (a reply names the status only), redirects are not
//     followed, and requests are bounded (30s, as DSF's agent; 8 MiB answers);
//   - hub mode: a scorer failing retriably (no answer, 5xx) more than --max-retries times in a row
//     answers 400 ScorerFailed, so the broker stops redelivering; each ping still asks it once.
package dsf
