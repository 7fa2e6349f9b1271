package broker

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"knative.dev/eventing/pkg/broker"
)

// work is one of a trigger's delivery workers.
func (s *Server) work(t *triggerState) {
	defer s.wg.Done()
	for {
		select {
		case <-s.stop:
			return
		case tk := <-t.queue.ch:
			t.queue.release()
			if s.stopping() { // select picks at random among ready cases: stop may have won
				s.dropAtShutdown(t, tk, 0, 0, "shutdown: never attempted")
			} else {
				s.deliver(t, tk)
			}
			s.gate.leave(1)
		}
	}
}

func (s *Server) stopping() bool {
	select {
	case <-s.stop:
		return true
	default:
		return false
	}
}

// deliver sends one task to its trigger's subscriber, then routes the reply or dead-letters.
// As the broker filter does, it removes knativebrokerttl before sending and puts the same value
// on the reply, which ingress then decrements.
func (s *Server) deliver(t *triggerState, tk *task) {
	ctx := s.workCtx
	e := tk.event.Clone()
	ttl, _ := broker.GetTTL(e.Context) // accept always sets it
	_ = broker.DeleteTTL(e.Context)

	o := s.send(ctx, &e, sendSpec{
		dest: t.subscriber, namespace: t.namespace, retry: &t.retry, format: t.format, preferReply: true,
		observe: func(o *outcome) { s.metrics.attempt(t.key, o) },
		retrying: func(o *outcome, wait time.Duration) {
			s.emit(Record{Kind: KindRetry, Broker: t.broker.key, Trigger: t.key, Target: o.target, Status: o.status, Attempts: o.attempts,
				Reason: fmt.Sprintf("%s; retrying in %s", describe(o), wait)}, tk.event)
		},
	})
	switch {
	case o.interrupted:
		s.dropAtShutdown(t, tk, o.attempts, o.status, "shutdown: delivery interrupted")
	case !o.ok():
		s.deadLetter(ctx, t, tk, errorDest(o.target, t.namespace, t.subscriber), o.status, o.body, o.attempts)
	default:
		s.metrics.delivered(t.key, tk.accepted)
		s.emit(Record{Kind: KindDelivered, Broker: t.broker.key, Trigger: t.key, Target: o.target, Status: o.status,
			Attempts: o.attempts, Duration: time.Since(tk.accepted)}, tk.event)
		if o.reply != nil {
			s.forwardReply(ctx, t, tk, o.reply, ttl)
		}
	}
}

// forwardReply puts a subscriber's reply into the trigger's broker. Ingress refusals are retried
// with the trigger's policy like any send (429 is, 400 is not); when the reply cannot get in,
// the original event is dead-lettered, as Knative's dispatcher does when forwarding fails. A
// reply whose TTL has run out is such a refusal (400), so a reply loop ends there.
func (s *Server) forwardReply(ctx context.Context, t *triggerState, tk *task, reply *event.Event, ttl int32) {
	if err := broker.SetTTL(reply.Context, ttl); err != nil {
		s.deadLetter(ctx, t, tk, s.ingressURL(t.broker), http.StatusBadRequest, []byte(err.Error()), 1)
		return
	}
	var status int
	var reason string
	for i := 0; ; i++ {
		r := reply.Clone() // accept stamps and decrements: every try starts from the reply as sent
		status, reason = s.accept(t.broker, &r, viaReply)
		if status == http.StatusAccepted {
			return
		}
		resp := &http.Response{StatusCode: status}
		if retry, _ := t.retry.CheckRetry(ctx, resp, nil); !retry || i >= t.retry.RetryMax {
			break
		}
		if !sleep(ctx, t.retry.Backoff(i, resp)) {
			break
		}
	}
	if ctx.Err() != nil {
		s.dropAtShutdown(t, tk, 1, status, "shutdown: reply not forwarded")
		return
	}
	s.deadLetter(ctx, t, tk, s.ingressURL(t.broker), status, []byte("reply refused: "+reason), 1)
}

// deadLetter sends the event as the broker holds it, plus the knativeerror* extensions, to the
// trigger's dead-letter sink with the same retry policy. The sink's reply is ignored, as in Knative.
func (s *Server) deadLetter(ctx context.Context, t *triggerState, tk *task, dest url.URL, status int, body []byte, attempts int) {
	if t.deadLetter == nil {
		s.drop(t, tk, attempts, status, fmt.Sprintf("HTTP %d from %s and no dead-letter sink", status, dest.String()))
		return
	}
	e := tk.event.Clone()
	stripErrorExtensions(&e)
	o := s.send(ctx, &e, sendSpec{
		dest: *t.deadLetter, namespace: t.namespace, retry: &t.retry, transformers: errorTransformers(dest, status, body),
	})
	switch {
	case o.ok():
		s.metrics.outcome(t.key, outcomeDeadLettered)
		s.emit(Record{Kind: KindDeadLettered, Broker: t.broker.key, Trigger: t.key, Target: o.target, Status: status, Attempts: attempts,
			Reason: fmt.Sprintf("HTTP %d from %s", status, dest.String()), Duration: time.Since(tk.accepted)}, tk.event)
		s.log.Info("dead-lettered", "trigger", t.key, "id", tk.event.ID(), "type", tk.event.Type(), "status", status, "dest", dest.String(), "sink", o.target)
	case o.interrupted:
		s.dropAtShutdown(t, tk, attempts, status, "shutdown: dead-lettering interrupted")
	default:
		s.drop(t, tk, attempts, status, fmt.Sprintf("HTTP %d from %s, then dead-letter sink failed: %s", status, dest.String(), describe(&o)))
	}
}

// drop records an event lost for a trigger.
func (s *Server) drop(t *triggerState, tk *task, attempts, status int, reason string) {
	s.recordDrop(t, tk, attempts, status, reason)
	s.log.Warn("event dropped", "trigger", t.key, "id", tk.event.ID(), "type", tk.event.Type(), "source", tk.event.Source(), "reason", reason)
}

// dropAtShutdown records an event lost because the server stopped before it was done; Shutdown
// logs one line for all of them.
func (s *Server) dropAtShutdown(t *triggerState, tk *task, attempts, status int, reason string) {
	s.dropped.Add(1)
	s.recordDrop(t, tk, attempts, status, reason)
	s.log.Debug("event dropped", "trigger", t.key, "id", tk.event.ID(), "type", tk.event.Type(), "source", tk.event.Source(), "reason", reason)
}

func (s *Server) recordDrop(t *triggerState, tk *task, attempts, status int, reason string) {
	s.metrics.outcome(t.key, outcomeDropped)
	s.emit(Record{Kind: KindDropped, Broker: t.broker.key, Trigger: t.key, Status: status, Attempts: attempts, Reason: reason,
		Duration: time.Since(tk.accepted)}, tk.event)
}

func describe(o *outcome) string {
	if o.netErr != nil {
		return o.netErr.Error()
	}
	if o.status == statusNotEvent || o.status == statusUnresolved && o.target == "" {
		return fmt.Sprintf("HTTP %d: %s", o.status, truncate(o.body, 200))
	}
	return fmt.Sprintf("HTTP %d", o.status)
}

func truncate(b []byte, n int) string {
	if len(b) > n {
		return string(b[:n]) + "..."
	}
	return string(b)
}

func (s *Server) ingressURL(b *brokerState) url.URL {
	u, _ := url.Parse(s.URL(b.namespace, b.name))
	return *u
}
