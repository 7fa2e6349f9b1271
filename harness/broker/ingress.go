package broker

import (
	"errors"
	"fmt"
	"net/http"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"knative.dev/eventing/pkg/broker"
)

const (
	viaIngress = "ingress"
	viaReply   = "reply"
)

// defaultTTL is the hop budget Knative's MT broker ingress gives an event that has none.
const defaultTTL = 255

// ingress is the HTTP face: POST /<namespace>/<broker>, answered as Knative's broker ingress does.
type ingress struct{ s *Server }

func (h ingress) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	s := h.s
	w.Header().Set("Allow", "POST, OPTIONS")
	switch r.Method {
	case http.MethodOptions: // CloudEvents webhook validation
		w.Header().Set("WebHook-Allowed-Origin", "*")
		w.Header().Set("WebHook-Allowed-Rate", "*")
		w.WriteHeader(http.StatusOK)
		return
	case http.MethodPost:
	default:
		http.Error(w, "events are POSTed to /<namespace>/<broker>", http.StatusMethodNotAllowed)
		return
	}
	parts := strings.Split(strings.Trim(r.URL.Path, "/"), "/")
	if len(parts) != 2 || parts[0] == "" || parts[1] == "" {
		s.refuse(w, nil, "", http.StatusNotFound, "events are POSTed to /<namespace>/<broker>")
		return
	}
	b, ok := s.brokers[parts[0]+"/"+parts[1]]
	if !ok {
		s.refuse(w, nil, "", http.StatusNotFound, fmt.Sprintf("no broker %s/%s", parts[0], parts[1]))
		return
	}
	r.Body = http.MaxBytesReader(w, r.Body, maxBodyBytes)
	msg := cehttp.NewMessageFromHttpRequest(r)
	defer func() { _ = msg.Finish(nil) }()
	e, err := binding.ToEvent(r.Context(), msg)
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		s.refuse(w, nil, b.key, status, "not a CloudEvent: "+err.Error())
		return
	}
	status, reason := s.accept(b, e, viaIngress)
	if status != http.StatusAccepted {
		http.Error(w, reason, status)
		return
	}
	w.WriteHeader(status)
}

// refuse answers a request that never became an accepted event.
func (s *Server) refuse(w http.ResponseWriter, e *event.Event, brokerKey string, status int, reason string) {
	s.metrics.ingressed(brokerKey, viaIngress, status)
	s.emit(Record{Kind: KindRejected, Broker: brokerKey, Via: viaIngress, Status: status, Reason: reason}, e)
	http.Error(w, reason, status)
}

// accept takes e into broker b, from ingress or as a reply, as Knative's ingress does: it
// validates, stamps knativearrivaltime and applies Knative's TTL defaulter (255 on first entry,
// one less on every re-entry), refusing at 0. Then it queues e for every trigger whose filter
// passes, or for none (429) when one of their queues is full. It returns the status ingress
// answers and, unless 202, why.
func (s *Server) accept(b *brokerState, e *event.Event, via string) (int, string) {
	matched, status, reason := s.admit(b, e, via)
	s.metrics.ingressed(b.key, via, status)
	if status != http.StatusAccepted {
		s.emit(Record{Kind: KindRejected, Broker: b.key, Via: via, Status: status, Reason: reason}, e)
		return status, reason
	}
	// Recorded before queueing, so a live view never shows a delivery before its acceptance.
	s.emit(Record{Kind: KindAccepted, Broker: b.key, Via: via, Status: status}, e)
	tk := &task{event: e, accepted: time.Now()}
	for _, t := range matched {
		t.queue.push(tk)
	}
	return status, ""
}

// admit checks e, stamps it and reserves a queue slot in every matching trigger.
func (s *Server) admit(b *brokerState, e *event.Event, via string) ([]*triggerState, int, string) {
	if err := e.Validate(); err != nil {
		return nil, http.StatusBadRequest, "invalid CloudEvent: " + err.Error()
	}
	e.SetExtension(broker.EventArrivalTime, cloudevents.Timestamp{Time: time.Now()})
	*e = s.ttlDefaulter(s.filterCtx, *e)
	if ttl, err := broker.GetTTL(e.Context); err != nil || ttl <= 0 {
		return nil, http.StatusBadRequest, fmt.Sprintf("%s exhausted: dropped so that reply loops end", broker.TTLAttribute)
	}
	var matched []*triggerState
	for _, t := range b.triggers {
		if passes(s.filterCtx, t.filter, e) {
			matched = append(matched, t)
		}
	}
	if !s.gate.enter(len(matched), via == viaReply) {
		return nil, http.StatusServiceUnavailable, "broker is shutting down"
	}
	for i, t := range matched {
		if !t.queue.reserve() {
			for _, r := range matched[:i] {
				r.queue.release()
			}
			s.gate.leave(len(matched))
			return nil, http.StatusTooManyRequests, fmt.Sprintf("queue of trigger %s is full", t.key)
		}
	}
	return matched, http.StatusAccepted, ""
}
