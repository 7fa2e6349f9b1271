package scorewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/utils/lru"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// ClusterChecker tells whether scores may be written for a managed cluster: nil, or why not (the
// reason and message of the item's failure).
type ClusterChecker interface {
	Admit(name string) *contract.FieldError
}

// Handler answers io.scoreflow.score.updated events with exactly one write.done or write.failed.
//
// Status codes: 200 when the event was handled (even if some items failed for good: the reply says
// which); 400 for a malformed event; 422 when every item failed for good; 503 when any item failed
// in a way that may pass (hub unavailable, conflicts, overload), so that the broker redelivers.
// Work is never acknowledged before it is on the hub. Every refused item is logged with its reason
// and message: a non-2xx answer only counts them.
type Handler struct {
	writer   *Writer
	clusters ClusterChecker
	opts     HandlerOptions
	metrics  *Metrics
	log      *slog.Logger
	now      func() time.Time

	mu      sync.Mutex
	seen    *lru.Cache // source+id -> *answer, for redeliveries
	bytes   int        // what seen's answers hold
	pending int        // what this handler's updates hold while the writer has them
}

// HandlerOptions configure a Handler.
type HandlerOptions struct {
	// TTL sets validUntil for events without one, counted from when their metrics were observed.
	TTL time.Duration
	// MaxClockSkew is how far ahead of this clock an event's time may be. A time further ahead is
	// refused: it would order every later, honest observation out as stale.
	MaxClockSkew time.Duration
	// RememberBytes bounds the memory of answered events (recalled for redeliveries), counted in
	// the bytes their answers hold, so that large events cost what they weigh. 0 means
	// DefaultRememberBytes.
	RememberBytes int
	// MaxPendingBytes bounds what accepted, unwritten updates hold (score names, source); beyond
	// it events get 503. Updates of a request that gave up still count until they are written.
	// 0 means DefaultMaxPendingBytes.
	MaxPendingBytes int
	// Source is the CloudEvents source of the replies.
	Source string
}

// Memory bounds of a Handler by default: well inside the writer pod's 512 MiB with the requests
// in flight (function.MaxBodyBytesInFlight).
const (
	DefaultRememberBytes   = 32 << 20
	DefaultMaxPendingBytes = 64 << 20
)

// Bounds of what an answer echoes of the input: a name a sender chose is cut to what a valid one
// could be, a hub error to a readable length.
const (
	maxEchoedName    = 80
	maxEchoedMessage = 1024
	// maxItemLogs bounds the log lines of one event's refused items; the rest are counted.
	maxItemLogs = 1000
)

type answer struct {
	done    chan struct{}
	weight  int
	evicted bool // no longer in seen, its weight given back
	result  contract.WriteResult
	status  int
}

// NewHandler creates the handler.
func NewHandler(w *Writer, clusters ClusterChecker, opts HandlerOptions) *Handler {
	if opts.RememberBytes <= 0 {
		opts.RememberBytes = DefaultRememberBytes
	}
	if opts.MaxPendingBytes <= 0 {
		opts.MaxPendingBytes = DefaultMaxPendingBytes
	}
	h := &Handler{writer: w, clusters: clusters, opts: opts, metrics: w.metrics, log: w.log, now: time.Now}
	// Called under h.mu: every change of seen is.
	h.seen = lru.NewWithEvictionFunc(0, func(_ lru.Key, v any) {
		a := v.(*answer)
		h.bytes -= a.weight
		a.evicted = true
	})
	return h
}

// Handle is a function.Handler. The receiver in front of it (pkg/function) has bounded the
// event's size and its source, id and type.
func (h *Handler) Handle(ctx context.Context, e event.Event) function.Response {
	ref := function.Ref(&e)
	su, err := contract.DecodeScoreUpdated(&e)
	if err != nil {
		var fes contract.FieldErrors
		reason := contract.ReasonInvalidData
		if errors.As(err, &fes) {
			reason = fes.Reason()
		}
		return h.reply(contract.WriteResult{Input: ref, Reason: reason, Message: contract.Truncate(err.Error(), maxEchoedMessage)}, http.StatusBadRequest)
	}

	observed := contract.ObservedTime(&e, h.now())
	if ahead := observed.Sub(h.now()); ahead > h.opts.MaxClockSkew {
		return h.reply(contract.WriteResult{Input: ref, Reason: contract.ReasonInvalidData,
			Message: fmt.Sprintf("time: %s is %s ahead of the writer's clock (more than %s): scores cannot be observed in the future",
				observed.UTC().Format(time.RFC3339Nano), ahead.Round(time.Second), h.opts.MaxClockSkew)}, http.StatusBadRequest)
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
	a.result, a.status = h.write(ctx, &e, su, observed)
	h.logRefusals(&a.result)
	if a.status >= 500 {
		h.forget(key) // a redelivery must try again
	} else {
		h.settle(a, answerBytes(key, &a.result))
	}
	return h.reply(a.result, a.status)
}

// FailureReply answers requests that are not CloudEvents at all.
func (h *Handler) FailureReply(in contract.EventRef, reason contract.Reason, message string) *event.Event {
	e := contract.NewWriteResult(h.opts.Source, contract.WriteResult{Input: in, Reason: reason, Message: message, Retriable: reason == contract.ReasonUnavailable})
	return &e
}

// claim returns the answer to a redelivered event, or registers a new one, weighed by its
// expected size until settle weighs the real one.
func (h *Handler) claim(key string, items int) (*answer, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if v, ok := h.seen.Get(key); ok {
		return v.(*answer), false
	}
	a := &answer{done: make(chan struct{}), weight: answerOverhead + len(key) + items*itemOverhead, status: http.StatusInternalServerError}
	h.seen.Add(key, a)
	h.bytes += a.weight
	h.evict()
	return a, true
}

// settle weighs a's answer at what it holds, and forgets the oldest answers beyond the bound.
func (h *Handler) settle(a *answer, weight int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if a.evicted {
		return // forgotten while it was written
	}
	h.bytes += weight - a.weight
	a.weight = weight
	h.evict()
}

func (h *Handler) evict() {
	for h.bytes > h.opts.RememberBytes && h.seen.Len() > 1 {
		h.seen.RemoveOldest() // the eviction func gives its weight back
	}
}

func (h *Handler) forget(key string) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.seen.Remove(key)
}

// Approximate bytes held besides the strings: an answer's struct, channel and cache entry, and one
// item's result.
const (
	answerOverhead = 512
	itemOverhead   = 128
)

// answerBytes is what a remembered answer holds.
func answerBytes(key string, r *contract.WriteResult) int {
	n := answerOverhead + len(key) + len(r.Input.Source) + len(r.Input.ID) + len(r.Input.Type) + len(r.Resource) + len(r.Message)
	for _, it := range r.Items {
		n += itemOverhead + len(it.Cluster) + len(it.Message) + len(it.ResourceVersion) + len(it.Reason)
	}
	return n
}

// updateBytes is what an update holds while it waits to be written.
func updateBytes(u *Update) int {
	n := answerOverhead + len(u.Cluster) + len(u.Resource) + len(u.Source)
	for _, s := range u.Scores {
		n += 32 + len(s.Name)
	}
	return n
}

// reserve counts n bytes of updates as pending, unless that passes the bound.
func (h *Handler) reserve(n int) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.pending+n > h.opts.MaxPendingBytes && h.pending > 0 {
		return false
	}
	h.pending += n
	return true
}

func (h *Handler) release(n int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.pending -= n
}

// logRefusals logs each failed item with its reason and message (the first maxItemLogs of them).
func (h *Handler) logRefusals(r *contract.WriteResult) {
	n := 0
	for _, it := range r.Items {
		if it.Outcome != contract.OutcomeFailed {
			continue
		}
		if n++; n <= maxItemLogs {
			h.log.Info("item refused", "source", r.Input.Source, "id", r.Input.ID, "resource", r.Resource, "cluster", it.Cluster,
				"reason", it.Reason, "message", it.Message, "retriable", it.Retriable)
		}
	}
	if n > maxItemLogs {
		h.log.Info("more items refused", "source", r.Input.Source, "id", r.Input.ID, "resource", r.Resource, "notLogged", n-maxItemLogs)
	}
}

func (h *Handler) write(ctx context.Context, e *event.Event, su *contract.ScoreUpdated, observed time.Time) (contract.WriteResult, int) {
	now := h.now()
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
		cluster := contract.Truncate(it.Cluster, maxEchoedName)
		item.Cluster = cluster
		// The item is validated (its cluster a DNS-1123 label that is no hub namespace) before the
		// cluster is looked up.
		fe := su.ValidateItem(i)
		if fe == nil {
			if fe = h.clusters.Admit(it.Cluster); fe != nil {
				fe.Field = fmt.Sprintf("items[%d].cluster", i)
			}
		}
		switch {
		case fe != nil:
			*item = contract.ItemResult{Cluster: cluster, Outcome: contract.OutcomeFailed, Reason: fe.Reason, Message: contract.Truncate(fe.Error(), maxEchoedMessage)}
		case !validUntil.IsZero() && !validUntil.After(now):
			*item = contract.ItemResult{Cluster: cluster, Outcome: contract.OutcomeSkipped, Reason: contract.ReasonStale,
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
		weights := make([]int, len(updates))
		total := 0
		for n, u := range updates {
			weights[n] = updateBytes(u)
			total += weights[n]
		}
		fail := func(msg string) (contract.WriteResult, int) {
			for _, i := range slots {
				res.Items[i] = contract.ItemResult{Cluster: su.Items[i].Cluster, Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnavailable, Retriable: true, Message: msg}
			}
			return res, http.StatusServiceUnavailable
		}
		if !h.reserve(total) {
			return fail(fmt.Sprintf("overloaded: more than %d bytes of updates waiting to be written", h.opts.MaxPendingBytes))
		}
		if err := h.writer.Submit(updates...); err != nil {
			h.release(total)
			return fail(err.Error())
		}
		for n, u := range updates {
			r, err := u.Result(ctx)
			if err != nil {
				// The request has gone; the writer still holds what is left, until it is written.
				go h.releaseWhenWritten(updates[n:], weights[n:])
				for k := n; k < len(updates); k++ {
					res.Items[slots[k]] = contract.ItemResult{Cluster: updates[k].Cluster, Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnavailable, Retriable: true, Message: "request ended before the write: " + err.Error()}
				}
				break
			}
			h.release(weights[n])
			if len(r.Message) > maxEchoedMessage {
				r.Message = contract.Truncate(r.Message, maxEchoedMessage)
			}
			res.Items[slots[n]] = r
		}
	}
	return res, statusFor(&res)
}

// releaseWhenWritten waits for updates whose request has gone and releases their bytes.
func (h *Handler) releaseWhenWritten(updates []*Update, weights []int) {
	for n, u := range updates {
		_, _ = u.Result(context.Background())
		h.release(weights[n])
	}
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
