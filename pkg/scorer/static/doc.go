// Package static scores clusters from a table of per-cluster, per-app, per-device performance and
// power values, as the Dynamic Scoring Framework's static scorer does (by default resources
// demo-performance-score and demo-powerconsumption-score, item names "${app};${device}"; DSF's
// own are example-...-score, names the demo keeps clear of).
//
// # The table
//
// One file, YAML or JSON (a ConfigMap mounted as a file in Kubernetes), decoded strictly: a
// misspelt field is an error. It is read on every event and parsed again whenever its bytes
// change, so an edited ConfigMap applies on the next event without a restart. A table that cannot
// be read or parsed is answered with 400 BadConfig, never with the previous table's scores.
//
//	resources:                       # optional; these two are the default
//	- name: demo-performance-score
//	  value: performance             # the column scored: performance or power
//	  normalize: {method: minmax}    # pkg/scorer/normalize.Normalization
//	  nameFormat: "${app};${device}" # optional, this is the default; also ${cluster}
//	- name: demo-powerconsumption-score
//	  value: power
//	  normalize: {method: minmax, lowerIsBetter: true}
//	rows:
//	- {cluster: worker01, app: app01, device: gpu0, performance: 90, power: 300}
//	- {cluster: worker02, app: app01, device: gpu0, performance: 60, power: 200}
//	- {cluster: worker02, app: app01, device: cpu, performance: 10}
//
// A row may leave out performance or power (it then has no score in that resource) but not both.
// Normalisation applies per score name across clusters: with minmax, the best cluster for
// "app01;gpu0" gets 100 and the worst -100 (a name only one cluster has gets 0). Above,
// demo-performance-score is worker01 app01;gpu0=100, worker02 app01;gpu0=-100 and app01;cpu=0;
// demo-powerconsumption-score is worker01 app01;gpu0=-100 and worker02 app01;gpu0=100.
//
// # Events
//
// A PingSource event triggers one score.updated for one resource. Its data picks the resource,
// {"resource": "demo-powerconsumption-score"}; it may be empty when the table defines a single
// resource. Two resources therefore take two PingSources. The event's time is when the table was
// read: the values are current as of then.
package static
