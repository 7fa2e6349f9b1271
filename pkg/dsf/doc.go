// Package dsf runs scorers of the OCM Dynamic Scoring Framework (DSF) from their DynamicScorer
// specs as DSF users write them, with DSF's semantics, and writes their status as DSF's
// controller does.
//
// StatusWriter is the hub side of DSF's controller: every 30 seconds it probes each DynamicScorer
// of one namespace (configSyncMode Full: GET configURL, an answer that decodes is Active and is
// written as status.lastSyncedConfig; None: GET /healthz, 200 is Active) and writes
// status.healthStatus. One replica writes, under leader election (functions/dsf-status).
//
// Agent mode (Agent) is DSF's agent on one managed cluster, distributed by OCM as an addon
// (addon/dsf). It watches the hub's DynamicScorers and the DynamicScoringConfig
// dynamic-scoring-config in one namespace with the agent's hub identity and runs a scorer as DSF
// distributes it: only while the DynamicScoringConfig exists, only while the scorer's status is
// Active (with configSyncMode Full, with its lastSyncedConfig), and not when a mask names it for
// this cluster. Such a scorer is never contacted: the agent asks no scorer for /config or /healthz
// itself. Each runs on its scoring.params.interval against this cluster's own Prometheus: DSF's
// published specs work unchanged because their queries carry no cluster label.
//
// Hub mode (Bridge) answers PingSource events that name one DynamicScorer of a mounted file
// ({"scorer": NAME}), run against a hub-side Prometheus or Thanos whose series carry a cluster
// label; it probes the scorer itself, as DSF's controller would, every ping. It writes only the
// resource the spec's own scoring.params.name makes (SpecResource): the file, the deployment's
// configuration, is the one list of what the bridge may score.
//
// One round of a scorer (Runner.Evaluate) is one tick of DSF's agent:
//
//  1. merge the scorer's /config into the spec field by field, as DSF's controller builds its
//     summaries: a field /config sets wins, else the spec's, else (hosts) configURL's scheme and
//     host; location, destination and format are the spec's, and so are the tokens;
//  2. for source type Prometheus, a query_range per query (queries are joined by ";") over
//     [now-range, now], now aligned down to step, all series concatenated;
//  3. POST {"data": <matrix>} to the scoring endpoint ({"data": []} for source type None);
//  4. export each result's raw score as DSF's dynamic_score{ds_cluster, ds_node, ..., ds_score_name}
//     (also with scoreDestination None, which stops here);
//  5. map {"results": [{"metric": {...}, "score": <float>}]} to scores: the name is
//     scoreDimensionFormat filled from the result's labels (a label missing is empty, as in DSF;
//     default ${scoreName}); the AddOnPlacementScore is scoring.params.name made an object name
//     exactly as DSF's agent does (sample_my_score -> sample-my-score).
//
// Hosts and credentials. A host a spec (or, with configSyncMode Full, the scorer's /config) names
// is contacted as written: which scorers exist is the hub's DynamicScorers' business, decided by
// whoever may create them. Endpoints optionally rewrite a host that is elsewhere than written (a
// spec's http://<NodeIP>:30007). A token (tokenSecretRef{name, key}) goes only to the host the
// spec pairs it with: its own source.host or scoring.host, else configURL's host; a host that comes
// from the scorer's /config gets none. Tokens are read on every round: in agent mode from the
// Secrets of the agent's namespace through the managed cluster's API (get only, never the agent's
// own hub credentials), in hub mode from mounted files.
//
// Where scoreflow differs from DSF's agent, on purpose:
//   - values are truncated toward zero as DSF does, then clamped to [-100, 100] (counted in
//     scoreflow_dsf_scores_clamped_total); DSF leaves out-of-range values to the hub to refuse;
//   - validUntil is 3 intervals (at least a minute each) after the data's time; DSF sets none;
//   - the writer merges by score name, where DSF replaces every score of the object;
//   - a name twice for one cluster keeps the first result (DSF: one at random); a name no
//     AddOnPlacementScore item may have here (a leading ";" from a missing label, a "/") is left
//     out; each is counted in scoreflow_dsf_results_dropped_total and logged with an example;
//   - source.type is matched without regard to case (scoreflow's CRD accepts the "prometheus" of
//     DSF's simple-prediction sample, which DSF's CRD refuses at apply time);
//   - the scoring host is /config's scoring.host when set (DSF's controller takes its source.host
//     there, a bug not copied);
//   - a token is sent only to the host its spec names for it (DSF sends it wherever /config says);
//   - the first round runs at once (DSF's after one interval);
//   - a scorer's error answers are not echoed (a reply names the status only), redirects are not
//     followed, and requests are bounded (30s, as DSF's agent; 8 MiB answers, 64 KiB /config);
//   - hub mode: a scorer failing retriably (no answer, 5xx) more than --max-retries times in a row
//     answers 400 ScorerFailed, so the broker stops redelivering; each ping still asks it once.
package dsf
