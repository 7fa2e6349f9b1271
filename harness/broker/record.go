package broker

import (
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// Kind is what happened to an event.
type Kind string

const (
	KindAccepted     Kind = "accepted"      // the broker took an event, from its ingress or a reply
	KindRejected     Kind = "rejected"      // the broker refused an event; Status and Reason say why
	KindDelivered    Kind = "delivered"     // a subscriber answered 2xx
	KindRetry        Kind = "retry"         // an attempt failed and will be retried
	KindDeadLettered Kind = "dead-lettered" // delivery gave up and the dead-letter sink took the event
	KindDropped      Kind = "dropped"       // the event is lost for this trigger; Reason says why
	KindPing         Kind = "ping"          // a PingSource fired; Status is its sink's answer
)

// Record is one step of an event through the broker, for a live view. Fields that do not apply
// to a Kind are empty.
type Record struct {
	Time     time.Time
	Kind     Kind
	Broker   string // namespace/name
	Trigger  string // namespace/name, for deliveries
	Via      string // for accepted and rejected: "ingress" or "reply"
	ID       string
	Type     string
	Source   string
	Target   string // URL delivered or sent to
	Status   int    // HTTP status of the last answer; 0 when there was none
	Attempts int
	Reason   string
	Duration time.Duration // from acceptance to the outcome, for deliveries
	Data     []byte        // for accepted events, their data: a live view can say why a failure event failed
}

// emit stamps and hands r to the hook, if any.
func (s *Server) emit(r Record, e *event.Event) {
	if s.hook == nil {
		return
	}
	if e != nil {
		r.ID, r.Type, r.Source = e.ID(), e.Type(), e.Source()
		if r.Kind == KindAccepted {
			r.Data = e.Data()
		}
	}
	r.Time = time.Now()
	s.hook(r)
}
