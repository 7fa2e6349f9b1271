package contract

// Reason is a machine-readable code in write results and failed events. Reasons are CamelCase, as
// Kubernetes condition reasons are.
type Reason string

const (
	// Input problems: permanent, never retried.
	ReasonNotCloudEvent  Reason = "NotCloudEvent"  // the request is not a CloudEvent
	ReasonWrongType      Reason = "WrongType"      // a CloudEvent of a type this receiver does not take
	ReasonInvalidData    Reason = "InvalidData"    // data is not JSON of the type's shape, or a field is invalid
	ReasonUnknownCluster Reason = "UnknownCluster" // no ManagedCluster of that name, one being deleted, a hub namespace's name or not a cluster name at all
	// ReasonClusterNotAccepted: a ManagedCluster the hub has not accepted (spec.hubAcceptsClient
	// false, or condition HubAcceptedManagedCluster not True): it receives no scores until it is.
	ReasonClusterNotAccepted Reason = "ClusterNotAccepted"
	ReasonOutOfRange         Reason = "OutOfRange"   // a score value outside [-100, 100], fractional or non-finite
	ReasonInvalidScore       Reason = "InvalidScore" // an item's score list is empty, repeats a name or has a bad name

	// Outcomes that write nothing and are not failures.
	ReasonDuplicate Reason = "Duplicate" // this event (source and id) was applied before
	ReasonStale     Reason = "Stale"     // newer scores (by event time) are already applied
	ReasonMasked    Reason = "Masked"    // a score mask turns this score off for this cluster: not written, removed if present
	// ReasonUnchanged: the object already holds these values, valid long enough, so they were not
	// written again (the writer's write avoidance); newer observation times order later updates.
	ReasonUnchanged Reason = "Unchanged"

	// Hub problems.
	ReasonConflict    Reason = "Conflict"    // optimistic-concurrency retries ran out (retriable)
	ReasonUnavailable Reason = "Unavailable" // the hub was unreachable, timed out or throttled (retriable)
	ReasonForbidden   Reason = "Forbidden"   // the writer's RBAC does not allow the write
	ReasonRejected    Reason = "Rejected"    // the hub refused the object (validation, admission)

	// ReasonDeadLettered marks an event the broker gave up delivering.
	ReasonDeadLettered Reason = "DeadLettered"

	// Scorer problems.
	ReasonBadConfig          Reason = "BadConfig"          // a scorer's configuration (PingSource data) is invalid
	ReasonBadQuery           Reason = "BadQuery"           // Prometheus refused the query
	ReasonMetricsUnavailable Reason = "MetricsUnavailable" // Prometheus unreachable or overloaded (retriable)
)
