// Package contract defines scoreflow's CloudEvents: their types, their data as Go types, how each is
// validated, and the JSON Schemas published for scorers written in other languages.
//
// Flow: producers emit io.scoreflow.metric.changed; scorers reply with one io.scoreflow.score.updated
// per evaluation (one score resource, every cluster scored; a result over MaxItems clusters or
// MaxScoreUpdatedDataBytes is split by NewScoreUpdates into several events, each within both
// bounds and with the same resource and time, that carry every cluster exactly once, all but
// the reply sent to the scorer's sink, the Broker, which deploy/ gives each scorer through a
// SinkBinding as K_SINK); the score-writer replies with
// io.scoreflow.score.write.done or io.scoreflow.score.write.failed. Schedules are plain Knative
// PingSource events (dev.knative.sources.ping) whose data is the scorer's configuration.
//
// A score.updated's time orders updates. It may be missing (cloudevents-player's form sends none):
// ObservedTime then dates the event when the broker received it (knativearrivaltime), else when
// the writer received it.
//
// Input is bounded before anything is looked up: attributes (MaxSourceLength, MaxIDLength,
// MaxTypeLength), the body (MaxEventBytes), names (a cluster name is a DNS-1123 label that is no
// hub namespace, ReservedClusterNames), and decoders refuse a JSON key repeated in one object or a
// field spelt in another case. Names a sender chose are cut (Truncate) wherever they are echoed.
// Every non-2xx answer stays under MaxRefusalBytes (FitRefusal), for Knative's dispatcher.
package contract

// CloudEvent types.
const (
	TypeMetricChanged = "io.scoreflow.metric.changed"
	TypeScoreUpdated  = "io.scoreflow.score.updated"
	TypeWriteDone     = "io.scoreflow.score.write.done"
	TypeWriteFailed   = "io.scoreflow.score.write.failed"
	// TypeScoreFailed is a scorer's answer when it cannot score: bad configuration, bad query, or
	// metrics unavailable. Its data is a Failure.
	TypeScoreFailed = "io.scoreflow.score.failed"
	// TypePing is what a Knative PingSource emits; its data is the receiving scorer's configuration.
	TypePing = "dev.knative.sources.ping"
)

// Bounds of one score value, as the AddOnPlacementScore CRD validates it.
const (
	MinScore = -100
	MaxScore = 100
)
