package function

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Response is a handler's answer: an HTTP status and at most one event (a Knative subscriber may
// reply with exactly one). Status 0 means 200 with an event, 202 without.
type Response struct {
	Status int
	Event  *event.Event
}

// Reply answers 200 with e.
func Reply(e event.Event) Response { return Response{Status: http.StatusOK, Event: &e} }

// Handler handles one CloudEvent. Its status decides delivery: 2xx done, 4xx refused for good (the
// broker dead-letters it), 5xx retried by the broker.
type Handler func(ctx context.Context, e event.Event) Response

// FailureReply builds the event that answers a request that is not a usable CloudEvent.
type FailureReply func(in contract.EventRef, reason contract.Reason, message string) *event.Event

// MaxBodyBytes bounds a request: the largest valid event (10,000 clusters) is well under it.
const MaxBodyBytes = 8 << 20

type receiver struct {
	handle    Handler
	onFailure FailureReply
	log       *slog.Logger
	events    *prometheus.CounterVec
	latency   *prometheus.HistogramVec

	mu     sync.Mutex
	labels map[string]bool // event types with a metric label of their own
}

// MaxTypeLabels bounds the type label's values: the type is chosen by whoever sends, and each new
// value is a new series. A function takes a handful of types; the rest count as "other".
const MaxTypeLabels = 32

func (r *receiver) typeLabel(t string) string {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.labels[t] {
		return t
	}
	if len(r.labels) >= MaxTypeLabels {
		return "other"
	}
	r.labels[t] = true
	return t
}

func newReceiver(h Handler, onFailure FailureReply, log *slog.Logger, reg prometheus.Registerer) *receiver {
	r := &receiver{
		handle:    h,
		onFailure: onFailure,
		log:       log,
		labels:    map[string]bool{},
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_events_received_total",
			Help: "CloudEvents received, by type and HTTP status answered.",
		}, []string{"type", "code"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "scoreflow_event_handle_seconds",
			Help:    "Time from receiving a CloudEvent to answering it, by type.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"type"}),
	}
	reg.MustRegister(r.events, r.latency)
	return r
}

// ServeHTTP decodes a CloudEvent (binary or structured mode) with sdk-go and answers with the
// handler's status and event. Requests that are not CloudEvents get 400 and the failure reply, not
// the sdk's bare 415/500, so a sender always learns why.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "CloudEvents are POSTed", http.StatusMethodNotAllowed)
		return
	}
	req.Body = http.MaxBytesReader(w, req.Body, MaxBodyBytes)
	msg := cehttp.NewMessageFromHttpRequest(req)
	defer func() { _ = msg.Finish(nil) }()

	e, err := binding.ToEvent(req.Context(), msg)
	var resp Response
	typ := "invalid"
	switch {
	case err != nil:
		status, reason := http.StatusBadRequest, contract.ReasonNotCloudEvent
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		resp = Response{Status: status, Event: r.onFailure(contract.EventRef{}, reason, fmt.Sprintf("not a CloudEvent: %v", err))}
	default:
		if verr := e.Validate(); verr != nil {
			resp = Response{Status: http.StatusBadRequest, Event: r.onFailure(Ref(e), contract.ReasonNotCloudEvent, fmt.Sprintf("invalid CloudEvent: %v", verr))}
			break
		}
		typ = e.Type()
		resp = r.handle(req.Context(), *e)
	}
	if resp.Status == 0 {
		resp.Status = http.StatusAccepted
		if resp.Event != nil {
			resp.Status = http.StatusOK
		}
	}
	r.write(req.Context(), w, resp)
	label := r.typeLabel(typ)
	r.events.WithLabelValues(label, strconv.Itoa(resp.Status)).Inc()
	r.latency.WithLabelValues(label).Observe(time.Since(start).Seconds())
	if resp.Status >= 400 {
		attrs := []any{"status", resp.Status, "type", typ}
		if e != nil {
			attrs = append(attrs, "source", e.Source(), "id", e.ID())
		}
		if resp.Event != nil {
			attrs = append(attrs, "reply", resp.Event.Type())
		}
		r.log.Info("event refused", attrs...)
	}
}

func (r *receiver) write(ctx context.Context, w http.ResponseWriter, resp Response) {
	if resp.Event == nil {
		w.WriteHeader(resp.Status)
		return
	}
	// Binary mode, as Knative's own components reply.
	if err := cehttp.WriteResponseWriter(ctx, binding.ToMessage(resp.Event), resp.Status, w); err != nil {
		r.log.Error("writing reply", "err", err)
	}
}

// Ref names an event for correlation.
func Ref(e *event.Event) contract.EventRef {
	if e == nil {
		return contract.EventRef{}
	}
	return contract.EventRef{Source: e.Source(), ID: e.ID(), Type: e.Type()}
}
