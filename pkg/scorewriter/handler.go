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
	ttl      time.Duration
	source   string
	metrics  *Metrics
	now      func() time.Time

	mu   sync.Mutex
	seen *lru.Cache // source+id -> *answer, for redeliveries
}

type answer struct {
	done   chan struct{}
	result contract.WriteResult
	status int
}

// NewHandler creates the handler. ttl sets validUntil for events without one, counted from when
// their metrics were observed; remember bounds how many answered events are recalled for
// redeliveries.
func NewHandler(w *Writer, clusters ClusterChecker, ttl time.Duration, remember int, source string) *Handler {
	return &Handler{writer: w, clusters: clusters, ttl: ttl, source: source, metrics: w.metrics, now: time.Now, seen: lru.New(remember)}
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

	key := e.Source() + "\x00" + e.ID()
	a, first := h.claim(key)
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
	result, status := h.write(ctx, &e, su)
	if status >= 500 {
		h.forget(key) // a redelivery must try again
	}
	a.result, a.status = result, status
	close(a.done)
	return h.reply(result, status)
}

// FailureReply answers requests that are not CloudEvents at all.
func (h *Handler) FailureReply(in contract.EventRef, reason contract.Reason, message string) *event.Event {
	e := contract.NewWriteResult(h.source, contract.WriteResult{Input: in, Reason: reason, Message: message})
	return &e
}

func (h *Handler) claim(key string) (*answer, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.seen.Get(key); ok {
		return v.(*answer), false
	}
	a := &answer{done: make(chan struct{})}
	h.seen.Add(key, a)
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
	validUntil = validUntil.Add(h.ttl)
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
	e := contract.NewWriteResult(h.source, r)
	h.metrics.replies.WithLabelValues(e.Type(), strconv.FormatBool(r.Duplicate)).Inc()
	return function.Response{Status: status, Event: &e}
}
