// Package latency scores clusters by HTTP latency: the mean time from starting a request to its
// first response byte, over a few runs, each on a fresh connection (new DNS lookup, TCP connect
// and TLS handshake), so the score reflects what a new client sees. Lower latency scores higher.
//
// # Configuration
//
// The configuration is JSON (a PingSource's data) or, for a file, JSON or YAML. Durations are Go
// duration strings ("500ms", "10s", "1m30s"), as in OCM's AddOnPlacementScoreGenerator proposal.
//
//	{
//	  "resource": "latency",
//	  "latencies": [
//	    {"name": "redhat-com-avgLatency", "url": "https://redhat.com", "runs": 2, "waitBetweenRuns": "10s", "timeout": "5s"},
//	    {"name": "ingress", "cluster": "cluster1", "url": "https://ingress.cluster1.example.com/healthz"}
//	  ],
//	  "normalize": {"method": "linear", "min": 0, "max": 500}
//	}
//
// resource is the AddOnPlacementScore name. Each entry's name is its score name; runs defaults to
// 3 (1 to 20), waitBetweenRuns to 1s (100ms to 1m), timeout (per run) to 10s (at most 1m); the
// worst case of one entry, runs*timeout + (runs-1)*waitBetweenRuns, may not exceed 5m. Entries are
// measured concurrently, the runs of one entry one after another, so an evaluation lasts as long
// as its slowest entry (the Trigger's delivery timeout must cover it). What one configuration may
// ask of the hosts is bounded too: at most 20 runs (MaxRunsPerHost) to one host name, over all the
// entries naming it (whatever their score names, paths or ports), and 300 (MaxRunsPerPing) in all;
// a configuration asking more is refused whole, naming the bound, before anything is contacted. normalize is
// normalize.Normalization over milliseconds, default linear from 0 ms (100) to 1000 ms (-100);
// lower is always better, so lowerIsBetter is implied and method none is refused. minmax compares the clusters measured for one score name.
//
// # What a ping may measure
//
// A ping's configuration comes from whoever can send the scorer an event; the hosts it contacts
// come from its deployment. --targets-file (TARGETS_FILE, a mounted ConfigMap, re-read on every
// ping) lists the URLs a ping may name, each with the cluster whose score it measures:
//
//	targets:
//	  - url: https://ingress.cluster1.example.com/healthz
//	    cluster: cluster1
//
// Every entry of a ping must name one of these URLs exactly (same scheme, host, port, path and
// query) and, where the list gives it a cluster, score that cluster; it still chooses the score
// name and tunes runs, waitBetweenRuns and timeout within the bounds above. Anything else refuses
// the whole ping (400 BadConfig) before any target is contacted, so a ping cannot probe hosts, or
// learn from the failure phases which ports answer. On the hub each target names its cluster; in
// agent mode the cluster may be left out (the agent's own) and the agent's --config-file entries
// are allowed too. Without a targets file a hub scorer measures nothing. An allow-list of exact
// URLs, rather than names that pings refer to, keeps a ping's configuration the same shape as the
// agent's file and the AddOnPlacementScoreGenerator proposal's.
//
// The metrics are labelled by cluster and score name, which pings choose: at most MaxSeries pairs
// get series of their own, and the runs of any further pair count under "_other".
//
// # Two modes
//
// Hub mode (no --cluster): the function runs on the hub behind a PingSource Trigger and measures
// from the hub. Every entry names the cluster it scores with "cluster" (for example an endpoint
// served by that cluster), and the reply is one score.updated covering every cluster.
//
// Agent mode (--cluster NAME): the function runs on managed cluster NAME and measures from there,
// as the proposal's latency addon does. Entries score NAME (naming another cluster is refused).
// It reads its configuration from --config-file (a mounted ConfigMap, re-read every round),
// measures at start and then every --interval, and sends each score.updated to K_SINK with the
// K_CE_OVERRIDES extensions, both injected by a SinkBinding that points at the hub broker. It still
// answers PingSource events with a reply, scoring NAME.
//
// # Failures
//
// A run fails on a network error, a timeout or an HTTP 5xx answer (any other status, redirects
// included, is a measurement: redirects are not followed). An entry scores the mean of its
// successful runs; an entry whose every run failed gets no score, never 0, and the failure is
// logged with its phase (dns, connect, tls, wait). When no entry could be measured the answer is a
// retriable score.failed (503, MetricsUnavailable) naming each failure. URLs are logged without
// user info or query, which may carry credentials.
package latency
