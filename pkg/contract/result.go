package contract

// Outcome of one cluster item in a write result.
type Outcome string

const (
	OutcomeWritten Outcome = "Written" // the scores are on the hub; ResourceVersion says which version
	OutcomeSkipped Outcome = "Skipped" // nothing to write (Duplicate or Stale); not a failure
	OutcomeFailed  Outcome = "Failed"  // not written; Reason and Retriable say why and whether to retry
)

// EventRef names the event a result answers. Consumers correlate on Source and ID.
type EventRef struct {
	Source string `json:"source"`
	ID     string `json:"id"`
	Type   string `json:"type,omitempty"`
}

// WriteResult is the data of io.scoreflow.score.write.done and io.scoreflow.score.write.failed.
type WriteResult struct {
	Input    EventRef `json:"input"`
	Resource string   `json:"resource,omitempty"`
	// Duplicate is set when Input was seen before; Items then repeat the first answer.
	Duplicate bool `json:"duplicate,omitempty"`
	// Reason, Message and Retriable describe a failure of the whole event (nothing was written). In
	// a refusal too large to list its items (Counts is set), they describe the items' failures:
	// the most common reason, the first failure's message, and whether any may pass on redelivery.
	Reason    Reason       `json:"reason,omitempty"`
	Message   string       `json:"message,omitempty"`
	Retriable bool         `json:"retriable,omitempty"`
	Items     []ItemResult `json:"items,omitempty"`
	// Counts replaces Items in a non-2xx answer, which must stay small (MaxRefusalBytes): items by
	// outcome ("Failed") and by outcome and reason ("Failed/UnknownCluster"). The writer logs every
	// item; a 2xx answer lists them.
	Counts map[string]int `json:"counts,omitempty"`
}

// ItemResult is the outcome for one cluster item.
type ItemResult struct {
	Cluster         string  `json:"cluster"`
	Outcome         Outcome `json:"outcome"`
	ResourceVersion string  `json:"resourceVersion,omitempty"`
	Reason          Reason  `json:"reason,omitempty"`
	Message         string  `json:"message,omitempty"`
	Retriable       bool    `json:"retriable,omitempty"`
}

// Failed reports whether any part of the event was not applied.
func (r *WriteResult) Failed() bool {
	if r.Reason != "" {
		return true
	}
	for _, it := range r.Items {
		if it.Outcome == OutcomeFailed {
			return true
		}
	}
	return false
}

// AnyRetriable reports whether the failure may pass on redelivery: the event failed as a whole with a
// retriable reason, or some item did.
func (r *WriteResult) AnyRetriable() bool {
	if r.Reason != "" {
		return r.Retriable
	}
	for _, it := range r.Items {
		if it.Outcome == OutcomeFailed && it.Retriable {
			return true
		}
	}
	return false
}

// EventType is write.failed when anything failed, else write.done.
func (r *WriteResult) EventType() string {
	if r.Failed() {
		return TypeWriteFailed
	}
	return TypeWriteDone
}

// Failure is the data of io.scoreflow.score.failed: why a function could not handle an event.
type Failure struct {
	Input     EventRef `json:"input"`
	Reason    Reason   `json:"reason"`
	Message   string   `json:"message"`
	Retriable bool     `json:"retriable,omitempty"`
}
