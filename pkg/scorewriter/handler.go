package scorewriter

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/utils/lru"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// ClusterChecker tells whether a managed cluster exists.
type ClusterChecker interface {
	Exists(name string) bool
}

// Handler answers io.scoreflow.score.updated events with exactly one write.done or write.failed.
//
// Status codes: 200 when the event was handled (even if some items failed for good: the reply says
// which); 400 for a malformed event; 422 when every item failed for good; 503 when any item failed
// in a way that may pass (hub unavailable, conflicts, overload), so that the broker redelivers.
// Work is never acknowledged before it is on the hub.
type Handler struct {
	writer   *Writer
	clusters ClusterChecker
	opts     HandlerOptions
	metrics  *Metrics
	now      func() time.Time

	mu    sync.Mutex
	seen  *lru.Cache // source+id -> *answer, for redeliveries
	items int        // cluster items held by seen's answers
}

// HandlerOptions configure a Handler.
type HandlerOptions struct {
	// TTL sets validUntil for events without one, counted from when their metrics were observed.
	TTL time.Duration
	// MaxClockSkew is how far ahead of this clock an event's time may be. A time further ahead is
	// refused: it would order every later, honest observation out as stale.
	MaxClockSkew time.Duration
	// RememberItems bounds the memory of answered events (recalled for redeliveries), counted in
	// cluster items so that large events cost what they weigh.
	RememberItems int
	// Source is the CloudEvents source of the replies.
	Source string
}

type answer struct {
	done   chan struct{}
	weight int
	result contract.WriteResult
	status int
}

// NewHandler creates the handler.
func NewHandler(w *Writer, clusters ClusterChecker, opts HandlerOptions) *Handler {
	h := &Handler{writer: w, clusters: clusters, opts: opts, metrics: w.metrics, now: time.Now}
	h.seen = lru.NewWithEvictionFunc(0, func(_ lru.Key, v any) { h.items -= v.(*answer).weight })
	return h
}

// Handle is a function.Handler.
func (h *Handler) Handle(ctx context.Context, e event.Event) function.Response {
	ref := function.Ref(&e)
	su, err := contract.DecodeScoreUpdated(&e)
	if err != nil {
		var fes contract.FieldErrors
		reason := contract.ReasonInvalidData
		if errors.As(err, &fes) {
			reason = fes.Reason()
		}
		return h.reply(contract.WriteResult{Input: ref, Reason: reason, Message: err.Error()}, http.StatusBadRequest)
	}

	if ahead := e.Time().Sub(h.now()); ahead > h.opts.MaxClockSkew {
		return h.reply(contract.WriteResult{Input: ref, Reason: contract.ReasonInvalidData,
			Message: fmt.Sprintf("time: %s is %s ahead of the writer's clock (more than %s): scores cannot be observed in the future",
				e.Time().UTC().Format(time.RFC3339Nano), ahead.Round(time.Second), h.opts.MaxClockSkew)}, http.StatusBadRequest)
	}

	key := e.Source() + "\x00" + e.ID()
	a, first := h.claim(key, len(su.Items))
	if !first {
		select {
		case <-a.done:
		case <-ctx.Done():
			return function.Response{Status: http.StatusServiceUnavailable}
		}
		r := a.result
		r.Duplicate = true
		return h.reply(r, a.status)
	}
	defer close(a.done) // even on a panic, so that duplicates waiting for it do not hang
	a.result, a.status = h.write(ctx, &e, su)
	if a.status >= 500 {
		h.forget(key) // a redelivery must try again
	}
	return h.reply(a.result, a.status)
}

// FailureReply answers requests that are not CloudEvents at all.
func (h *Handler) FailureReply(in contract.EventRef, reason contract.Reason, message string) *event.Event {
	e := contract.NewWriteResult(h.opts.Source, contract.WriteResult{Input: in, Reason: reason, Message: message})
	return &e
}

// claim returns the answer to a redelivered event, or registers a new one of weight items.
func (h *Handler) claim(key string, items int) (*answer, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.seen.Get(key); ok {
		return v.(*answer), false
	}
	a := &answer{done: make(chan struct{}), weight: max(items, 1), status: http.StatusInternalServerError}
	h.seen.Add(key, a)
	h.items += a.weight
	for h.items > h.opts.RememberItems && h.seen.Len() > 1 {
		h.seen.RemoveOldest() // the eviction func gives its weight back
	}
	return a, true
}

func (h *Handler) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen.Remove(key)
}

func (h *Handler) write(ctx context.Context, e *event.Event, su *contract.ScoreUpdated) (contract.WriteResult, int) {
	now := h.now()
	observed := e.Time()
	validUntil := observed
	if validUntil.After(now) {
		validUntil = now // a clock ahead of ours must not buy extra validity
	}
	validUntil = validUntil.Add(h.opts.TTL)
	switch {
	case su.ValidUntil != nil:
		validUntil = *su.ValidUntil
	case su.NeverExpires:
		validUntil = time.Time{} // zero: never
	}

	res := contract.WriteResult{Input: function.Ref(e), Resource: su.Resource, Items: make([]contract.ItemResult, len(su.Items))}
	var updates []*Update
	var slots []int
	for i, it := range su.Items {
		item := &res.Items[i]
		item.Cluster = it.Cluster
		switch fe := su.ValidateItem(i); {
		case fe != nil:
			*item = contract.ItemResult{Cluster: it.Cluster, Outcome: contract.OutcomeFailed, Reason: fe.Reason, Message: fe.Error()}
		case !h.clusters.Exists(it.Cluster):
			*item = contract.ItemResult{Cluster: it.Cluster, Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnknownCluster,
				Message: fmt.Sprintf("items[%d].cluster: no ManagedCluster named %q", i, it.Cluster)}
		case !validUntil.IsZero() && !validUntil.After(now):
			*item = contract.ItemResult{Cluster: it.Cluster, Outcome: contract.OutcomeSkipped, Reason: contract.ReasonStale,
				Message: "validUntil " + validUntil.UTC().Format(time.RFC3339) + " has passed"}
		default:
			updates = append(updates, NewUpdate(Key{Cluster: it.Cluster, Resource: su.Resource}, it.Scores, observed, validUntil, e.Source()))
			slots = append(slots, i)
		}
	}
	for _, it := range res.Items {
		if it.Outcome != "" {
			h.metrics.items.WithLabelValues(string(it.Outcome), string(it.Reason)).Inc()
		}
	}
	if len(updates) > 0 {
		if err := h.writer.Submit(updates...); err != nil {
			for _, i := range slots {
				res.Items[i] = contract.ItemResult{Cluster: su.Items[i].Cluster, Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnavailable, Retriable: true, Message: err.Error()}
			}
			return res, http.StatusServiceUnavailable
		}
		for n, u := range updates {
			r, err := u.Result(ctx)
			if err != nil {
				r = contract.ItemResult{Cluster: u.Cluster, Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnavailable, Retriable: true, Message: "request ended before the write: " + err.Error()}
			}
			res.Items[slots[n]] = r
		}
	}
	return res, statusFor(&res)
}

func statusFor(r *contract.WriteResult) int {
	if r.AnyRetriable() {
		return http.StatusServiceUnavailable
	}
	for _, it := range r.Items {
		if it.Outcome != contract.OutcomeFailed {
			return http.StatusOK
		}
	}
	return http.StatusUnprocessableEntity
}

func (h *Handler) reply(r contract.WriteResult, status int) function.Response {
	e := contract.NewWriteResult(h.opts.Source, r)
	h.metrics.replies.WithLabelValues(e.Type(), strconv.FormatBool(r.Duplicate)).Inc()
	return function.Response{Status: status, Event: &e}
}
