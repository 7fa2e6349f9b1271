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
	"go.opentelemetry.io/otel/trace"
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
// which); 400 for a malformed event (a validUntil past contract.MaxValidity or the zero time
// included), and, with reason Forbidden, for one whose contract.ExtResource names another
// resource than its data (or, with RequireResourceAttribute, has none); 422 when every item
// failed for good (an item whose validUntil has passed on arrival fails, Stale: nothing of it is
// written, the sender's clock may be behind); 503 when any item failed
// in a way that may pass (hub unavailable, conflicts, overload), or when the event's writes have
// not all landed by its deadline (HandlerOptions.EventDeadline), so that the broker redelivers.
// Work is never acknowledged before it is on the hub. Every refused item is logged with its reason
// and message: a non-2xx answer only counts them.
//
// An event's writes outlive the request that brought them: when it ends first (deadline, or the
// sender gone), they go on, and a redelivery of the event (same source and id) waits for them
// rather than submitting them again; once they have landed, it gets their answer.
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
	// the bytes their answers hold, so that large events cost what they weigh. Events whose
	// writes are under way count too, at what their answers will hold; one forgotten under this
	// bound before its writes land makes a redelivery submit them again, which the observation
	// ledger then answers Duplicate (or coalesces into the same write). 0 means
	// DefaultRememberBytes.
	RememberBytes int
	// MaxPendingBytes bounds what accepted, unwritten updates hold (score names, source); beyond
	// it events get 503. Updates of a request that gave up still count until they are written.
	// 0 means DefaultMaxPendingBytes.
	MaxPendingBytes int
	// EventDeadline bounds how long a request waits for its event's writes, counted from when the
	// request arrived (function.ReceivedAt). When it passes first, the event is answered 503 and
	// its writes go on; a redelivery joins them (see Handler). Keep it below the delivery timeout
	// of the Trigger that calls the writer (45s in triggers/score-writer.yaml), so that the broker
	// hears a 503 rather than giving up on a request that never answered. 0: no deadline of its
	// own (the request's context only).
	EventDeadline time.Duration
	// Source is the CloudEvents source of the replies.
	Source string
	// RequireResourceAttribute refuses events without the contract.ExtResource attribute,
	// where every legitimate sender stamps it and the broker's EventPolicies filter on it.
	RequireResourceAttribute bool
}

// DefaultEventDeadline is the writer's --event-deadline: 5s below the 45s delivery timeout of the
// score-writer Trigger (triggers/score-writer.yaml), time for the 503 to reach the broker.
const DefaultEventDeadline = 40 * time.Second

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

// answer is an event's answer, remembered by source and id. Until done is closed, the event's
// updates are being written, and flight tells how far they have come.
type answer struct {
	done    chan struct{}
	weight  int
	evicted bool // no longer in seen, its weight given back
	result  contract.WriteResult
	status  int
	flight  flight
}

// flight is what an event's submitted updates have come to while they are written.
type flight struct {
	mu       sync.Mutex
	finished bool // answer.result and status are set; done closes next
	res      contract.WriteResult
	pending  []bool // per item: submitted and not yet resolved
	left     int    // items pending
}

// NewHandler creates the handler.
func NewHandler(w *Writer, clusters ClusterChecker, opts HandlerOptions) *Handler {
	if opts.RememberBytes <= 0 {
		opts.RememberBytes = DefaultRememberBytes
	}
	if opts.MaxPendingBytes <= 0 {
		opts.MaxPendingBytes = DefaultMaxPendingBytes
	}
	h := &Handler{writer: w, clusters: clusters, opts: opts, metrics: w.metrics, log: w.log, now: w.Now}
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

	if fe := h.checkResource(&e, su); fe != nil {
		return h.reply(contract.WriteResult{Input: ref, Reason: fe.Reason, Message: contract.Truncate(fe.Error(), maxEchoedMessage)}, http.StatusBadRequest)
	}
	now := h.now()
	observed := contract.ObservedTime(&e, now)
	if ahead := observed.Sub(now); ahead > h.opts.MaxClockSkew {
		return h.reply(contract.WriteResult{Input: ref, Reason: contract.ReasonInvalidData,
			Message: fmt.Sprintf("time: %s is %s ahead of the writer's clock (more than %s): scores cannot be observed in the future",
				observed.UTC().Format(time.RFC3339Nano), ahead.Round(time.Second), h.opts.MaxClockSkew)}, http.StatusBadRequest)
	}
	if fe := su.CheckValidUntil(observed); fe != nil {
		return h.reply(contract.WriteResult{Input: ref, Reason: fe.Reason, Message: contract.Truncate(fe.Error(), maxEchoedMessage)}, http.StatusBadRequest)
	}

	start, ok := function.ReceivedAt(ctx)
	if !ok {
		start = time.Now()
	}
	key := e.Source() + "\x00" + e.ID()
	a, first := h.claim(key, len(su.Items))
	if first {
		h.start(trace.SpanContextFromContext(ctx), key, a, &e, su, observed)
	}
	return h.await(ctx, a, first, start)
}

// checkResource checks the event's contract.ExtResource attribute against its data: the
// broker's EventPolicies admit a sender for the resources it may score by that attribute, so an
// event whose data names another resource is refused, as is one without it when required.
func (h *Handler) checkResource(e *event.Event, su *contract.ScoreUpdated) *contract.FieldError {
	v, ok := e.Extensions()[contract.ExtResource]
	if !ok {
		if h.opts.RequireResourceAttribute {
			return &contract.FieldError{Field: contract.ExtResource, Reason: contract.ReasonForbidden,
				Message: "is missing: this writer takes score.updated only with the resource it is for as that attribute"}
		}
		return nil
	}
	if s, _ := v.(string); s != su.Resource {
		return &contract.FieldError{Field: contract.ExtResource, Reason: contract.ReasonForbidden,
			Message: fmt.Sprintf("is %q, but the data is for resource %q", contract.Truncate(fmt.Sprint(v), maxEchoedName), su.Resource)}
	}
	return nil
}

// await answers the request of an event whose answer is a: once its writes are done, or with 503
// when the event's deadline (counted from start) passes first. A redelivery's request (first
// false) gets the answer marked as a duplicate.
func (h *Handler) await(ctx context.Context, a *answer, first bool, start time.Time) function.Response {
	wait := ctx
	if h.opts.EventDeadline > 0 {
		var cancel context.CancelFunc
		wait, cancel = context.WithDeadline(ctx, start.Add(h.opts.EventDeadline))
		defer cancel()
	}
	select {
	case <-a.done:
		return h.answered(a, first)
	case <-wait.Done():
	}
	if ctx.Err() != nil {
		// The sender has gone and reads no answer. The writes go on; a redelivery joins them.
		return function.Response{Status: http.StatusServiceUnavailable}
	}
	return h.late(a, first, time.Since(start))
}

func (h *Handler) answered(a *answer, first bool) function.Response {
	r := a.result
	r.Duplicate = !first
	return h.reply(r, a.status)
}

// late answers 503 for an event whose writes have not all landed by its deadline: the items
// counted by outcome, those still being written as Failed/Unavailable (retriable). The writes go
// on and the event's answer stays claimed, so that the broker's redelivery waits for them instead
// of writing them again.
func (h *Handler) late(a *answer, first bool, waited time.Duration) function.Response {
	f := &a.flight
	f.mu.Lock()
	if f.finished {
		f.mu.Unlock()
		<-a.done // closed right after finished is set
		return h.answered(a, first)
	}
	r := contract.WriteResult{Input: f.res.Input, Resource: f.res.Resource, Duplicate: !first, Reason: contract.ReasonUnavailable, Retriable: true,
		Counts: map[string]int{}}
	for i, it := range f.res.Items {
		if f.pending[i] {
			it = contract.ItemResult{Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnavailable}
		}
		r.Counts[string(it.Outcome)]++
		if it.Reason != "" {
			r.Counts[string(it.Outcome)+"/"+string(it.Reason)]++
		}
	}
	left, total := f.left, len(f.res.Items)
	f.mu.Unlock()
	r.Message = fmt.Sprintf("%d of %d items not written within the event deadline (%s): their writes go on, and a redelivery of this event is answered when they have landed",
		left, total, h.opts.EventDeadline)
	h.log.Warn("event deadline passed before its writes landed; answered 503, the writes go on", "source", r.Input.Source, "id", r.Input.ID,
		"resource", r.Resource, "pending", left, "items", total, "waited", waited.Round(time.Millisecond).String(), "redelivery", !first)
	return h.reply(r, http.StatusServiceUnavailable)
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

// forget removes a from seen, so that a redelivery of its event is written afresh. A evicted
// already may have been replaced by a redelivery's own answer, which stays.
func (h *Handler) forget(key string, a *answer) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if !a.evicted {
		h.seen.Remove(key)
	}
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

// start validates the event's items and submits its updates. Its answer is settled (finish) when
// every update has a result, in the background, whether or not a request still waits for it: at
// once when nothing was submitted.
func (h *Handler) start(sc trace.SpanContext, key string, a *answer, e *event.Event, su *contract.ScoreUpdated, observed time.Time) {
	handedOver := false
	defer func() {
		if !handedOver {
			// A panic: nothing may wait for this answer forever, and a redelivery must try again.
			h.forget(key, a)
			close(a.done)
		}
	}()
	res, updates, slots := h.prepare(e, su, observed)
	for _, u := range updates {
		u.trace = sc
	}
	if len(updates) == 0 {
		handedOver = true
		h.finish(key, a, res)
		return
	}
	weights := make([]int, len(updates))
	total := 0
	for n, u := range updates {
		weights[n] = updateBytes(u)
		total += weights[n]
	}
	fail := func(msg string) {
		for _, i := range slots {
			res.Items[i] = contract.ItemResult{Cluster: su.Items[i].Cluster, Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnavailable, Retriable: true, Message: msg}
		}
		handedOver = true
		h.finish(key, a, res)
	}
	if !h.reserve(total) {
		fail(fmt.Sprintf("overloaded: more than %d bytes of updates waiting to be written", h.opts.MaxPendingBytes))
		return
	}
	f := &a.flight
	f.mu.Lock()
	f.res = res
	f.pending = make([]bool, len(res.Items))
	for _, i := range slots {
		f.pending[i] = true
	}
	f.left = len(slots)
	f.mu.Unlock()
	ws := &writes{h: h, key: key, a: a, slots: slots, weights: weights}
	for n, u := range updates {
		u.sink, u.slot = ws, n
	}
	if err := h.writer.Submit(updates...); err != nil {
		h.release(total)
		fail(err.Error())
		return
	}
	handedOver = true
}

// writes gathers the outcomes of one event's updates as the writer resolves them (the writer
// resolves every update, at the latest when it stops), and settles the event's answer with the
// last. It holds only the updates' places and weights, not the event.
type writes struct {
	h       *Handler
	key     string
	a       *answer
	slots   []int // per update, the index of its item in the event
	weights []int // per update, the bytes it holds while it waits
}

func (ws *writes) resolved(n int, r contract.ItemResult) {
	ws.h.release(ws.weights[n])
	if len(r.Message) > maxEchoedMessage {
		r.Message = contract.Truncate(r.Message, maxEchoedMessage)
	}
	f := &ws.a.flight
	f.mu.Lock()
	f.res.Items[ws.slots[n]] = r
	f.pending[ws.slots[n]] = false
	f.left--
	last, res := f.left == 0, f.res
	f.mu.Unlock()
	if last {
		ws.h.finish(ws.key, ws.a, res)
	}
}

// finish settles an event's answer: remembered for redeliveries, or forgotten when it failed in a
// way that may pass, so that a redelivery tries again. Requests waiting for it are answered.
func (h *Handler) finish(key string, a *answer, res contract.WriteResult) {
	h.logRefusals(&res)
	a.result, a.status = res, statusFor(&res)
	if a.status >= 500 {
		h.forget(key, a)
	} else {
		h.settle(a, answerBytes(key, &a.result))
	}
	f := &a.flight
	f.mu.Lock()
	f.finished = true
	f.res, f.pending = contract.WriteResult{}, nil
	f.mu.Unlock()
	close(a.done)
}

// prepare checks each item of su and makes the updates of those to write; slots are their indexes
// in su.Items (and in res.Items, which holds the outcome of the others).
func (h *Handler) prepare(e *event.Event, su *contract.ScoreUpdated, observed time.Time) (res contract.WriteResult, updates []*Update, slots []int) {
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

	// Scores whose validity has passed on arrival are not written: the item fails, so that a sender
	// whose clock is behind (by the TTL, for events without validUntil) hears that nothing landed.
	var lapsed string
	if expired(validUntil, now) {
		lapsed = "validUntil " + validUntil.UTC().Format(time.RFC3339) + " has passed: nothing was written"
		if behind := now.Sub(observed); su.ValidUntil == nil && !su.NeverExpires {
			lapsed += fmt.Sprintf(" (the event's time is %s behind the writer's clock, its TTL %s: is the sender's clock behind?)", behind.Round(time.Second), h.opts.TTL)
		}
	}
	res = contract.WriteResult{Input: function.Ref(e), Resource: su.Resource, Items: make([]contract.ItemResult, len(su.Items))}
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
		case expired(validUntil, now):
			*item = contract.ItemResult{Cluster: cluster, Outcome: contract.OutcomeFailed, Reason: contract.ReasonStale, Message: lapsed}
		default:
			updates = append(updates, &Update{Key: Key{Cluster: it.Cluster, Resource: su.Resource}, Scores: it.Scores, Observed: observed, ValidUntil: validUntil, Source: e.Source()})
			slots = append(slots, i)
		}
	}
	for _, it := range res.Items {
		if it.Outcome != "" {
			h.metrics.items.WithLabelValues(string(it.Outcome), string(it.Reason)).Inc()
		}
	}
	return res, updates, slots
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
