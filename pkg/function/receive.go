package function

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"strconv"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/semaphore"

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

// MaxBodyBytes bounds a request body: contract.MaxEventBytes, which fits the largest legitimate
// event. A request that declares more is refused with 413 before its body is read; one that sends
// more without declaring it is cut off there.
const MaxBodyBytes = contract.MaxEventBytes

// MaxBodyBytesInFlight bounds the request bodies handled at once, by their declared length (a body
// of unknown length counts as the receiver's limit, MaxBodyBytes unless SetMaxBodyBytes lowered
// it): each costs a few times its size while it is decoded and answered, so a burst of large
// events waits here rather than exhausting the pod's memory. Small events are not held up by
// large ones beyond this sum.
const MaxBodyBytesInFlight = 2 * MaxBodyBytes

// CallerShareBytes is the part of MaxBodyBytesInFlight one caller's requests may hold while their
// bodies are still arriving (at least one body of the receiver's limit): a caller whose requests
// stall, or arrive slowly, waits on its own share, and the rest of the budget stays for the
// others. A caller is the identity authentication established (CallerFrom), else the remote
// address. Once a body has arrived, its bytes count against the whole budget only.
const CallerShareBytes = MaxBodyBytesInFlight / 4

type receiver struct {
	handle    Handler
	onFailure FailureReply
	log       *slog.Logger
	events    *prometheus.CounterVec
	latency   *prometheus.HistogramVec

	limit    int64               // the largest body taken
	inFlight *semaphore.Weighted // body bytes being handled
	arriving *shares             // body bytes still arriving, per caller

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

func newReceiver(h Handler, onFailure FailureReply, limit int64, log *slog.Logger, reg prometheus.Registerer) *receiver {
	r := &receiver{
		handle:    h,
		onFailure: onFailure,
		log:       log,
		labels:    map[string]bool{},
		limit:     limit,
		inFlight:  semaphore.NewWeighted(MaxBodyBytesInFlight),
		arriving:  newShares(max(limit, CallerShareBytes)),
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
// the sdk's bare 415/500, so a sender always learns why. Bodies over the receiver's limit get 413
// (before they are read when their length is declared), and attributes over the contract's bounds
// get 400 before the handler sees them. A request is admitted within its caller's share of the
// in-flight budget (CallerShareBytes) and the whole of it (MaxBodyBytesInFlight), waiting at most
// admissionWait, else 503.
func (r *receiver) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	start := time.Now()
	req = req.WithContext(context.WithValue(req.Context(), receivedKey{}, start))
	if req.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		http.Error(w, "CloudEvents are POSTed", http.StatusMethodNotAllowed)
		return
	}
	var resp Response
	var e *event.Event
	typ := "invalid"
	if req.ContentLength > r.limit {
		resp = Response{Status: http.StatusRequestEntityTooLarge, Event: r.onFailure(contract.EventRef{}, contract.ReasonNotCloudEvent,
			fmt.Sprintf("body of %d bytes is over the limit of %d", req.ContentLength, r.limit))}
		// The body is not read: the connection closes after the answer.
		w.Header().Set("Connection", "close")
	} else {
		// Weighed by what it may bring: its declared length, else the most this receiver takes.
		weight := req.ContentLength
		if weight < 0 {
			weight = r.limit
		}
		wait, cancel := context.WithTimeout(req.Context(), admissionWait)
		arrived, busy := r.admit(wait, req, weight)
		cancel()
		switch {
		case req.Context().Err() != nil:
			if busy == "" {
				arrived()
				r.inFlight.Release(weight)
			}
			return // the sender has gone
		case busy != "":
			w.Header().Set("Retry-After", "1")
			resp = Response{Status: http.StatusServiceUnavailable, Event: r.onFailure(contract.EventRef{}, contract.ReasonUnavailable, busy)}
		default:
			defer r.inFlight.Release(weight)
			e, resp, typ = r.receive(w, req, arrived)
		}
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
		attrs := []any{"status", resp.Status, "type", contract.Truncate(typ, contract.MaxTypeLength)}
		if e != nil {
			ref := Ref(e)
			attrs = append(attrs, "source", ref.Source, "id", ref.ID)
		}
		if resp.Event != nil {
			reason, message := why(resp.Event)
			attrs = append(attrs, "reply", resp.Event.Type(), "reason", reason, "message", message)
		}
		r.log.Info("event refused", attrs...)
	}
}

type receivedKey struct{}

// ReceivedAt is when the request that carries the event handled under ctx arrived, before it
// waited for admission and its body was read: a sender's delivery timeout counts from about then,
// so a handler's own deadline should too. False outside a request.
func ReceivedAt(ctx context.Context) (time.Time, bool) {
	t, ok := ctx.Value(receivedKey{}).(time.Time)
	return t, ok
}

// Waits that keep a stalled sender from holding the in-flight budget: how long a request waits
// for its share (then 503), and how long its body may take to arrive once admitted.
var (
	admissionWait   = 10 * time.Second
	bodyReadTimeout = 30 * time.Second
)

// admit takes weight bytes of the caller's share, then of the whole budget. arrived gives the
// share back (call it once the body has been read); busy says why the request was not admitted
// ("" when it was).
func (r *receiver) admit(ctx context.Context, req *http.Request, weight int64) (arrived func(), busy string) {
	caller, ok := CallerFrom(req.Context())
	if !ok {
		caller = "remote " + remoteHost(req.RemoteAddr)
	}
	arrived, err := r.arriving.acquire(ctx, caller, weight)
	if err != nil {
		return nil, fmt.Sprintf("busy: this caller's requests still arriving hold its share of %d bytes; retry", r.arriving.size)
	}
	if err := r.inFlight.Acquire(ctx, weight); err != nil {
		arrived()
		return nil, fmt.Sprintf("busy: %d bytes of requests are being handled; retry", MaxBodyBytesInFlight)
	}
	return arrived, ""
}

// remoteHost is the host of a request's RemoteAddr.
func remoteHost(addr string) string {
	if host, _, err := net.SplitHostPort(addr); err == nil {
		return host
	}
	return addr
}

// receive reads and decodes the event of an admitted request and hands it to the handler; arrived
// is called once the body has been read.
func (r *receiver) receive(w http.ResponseWriter, req *http.Request, arrived func()) (*event.Event, Response, string) {
	rc := http.NewResponseController(w)
	_ = rc.SetReadDeadline(time.Now().Add(bodyReadTimeout))
	req.Body = http.MaxBytesReader(w, req.Body, r.limit)
	msg := cehttp.NewMessageFromHttpRequest(req)
	defer func() { _ = msg.Finish(nil) }()
	e, err := binding.ToEvent(req.Context(), msg)
	_ = rc.SetReadDeadline(time.Time{})
	arrived()
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		return nil, Response{Status: status, Event: r.onFailure(contract.EventRef{}, contract.ReasonNotCloudEvent, fmt.Sprintf("not a CloudEvent: %v", err))}, "invalid"
	}
	if verr := e.Validate(); verr != nil {
		return e, Response{Status: http.StatusBadRequest, Event: r.onFailure(Ref(e), contract.ReasonNotCloudEvent, fmt.Sprintf("invalid CloudEvent: %v", verr))}, "invalid"
	}
	if problem := oversized(e); problem != "" {
		return e, Response{Status: http.StatusBadRequest, Event: r.onFailure(Ref(e), contract.ReasonInvalidData, problem)}, "invalid"
	}
	return e, r.handle(req.Context(), *e), e.Type()
}

// oversized names an attribute longer than the contract allows, or is empty.
func oversized(e *event.Event) string {
	for _, a := range []struct {
		name  string
		value string
		max   int
	}{{"source", e.Source(), contract.MaxSourceLength}, {"id", e.ID(), contract.MaxIDLength}, {"type", e.Type(), contract.MaxTypeLength}} {
		if len(a.value) > a.max {
			return fmt.Sprintf("%s is %d bytes long, more than %d", a.name, len(a.value), a.max)
		}
	}
	return ""
}

// maxLoggedMessage bounds the message a refusal's log line quotes.
const maxLoggedMessage = 4096

// why reads the reason and message of a failure reply (a write result or score.failed), for logs.
func why(e *event.Event) (reason, message string) {
	var d struct {
		Reason  string `json:"reason"`
		Message string `json:"message"`
	}
	_ = json.Unmarshal(e.Data(), &d)
	return d.Reason, contract.Truncate(d.Message, maxLoggedMessage)
}

func (r *receiver) write(ctx context.Context, w http.ResponseWriter, resp Response) {
	if resp.Event == nil {
		w.WriteHeader(resp.Status)
		return
	}
	reply := *resp.Event
	if resp.Status < 200 || resp.Status > 299 {
		// A refusal's body must stay small for Knative's dispatcher: the full detail is in the
		// handler's logs and in 2xx answers.
		reply, _ = contract.FitRefusal(reply)
	}
	// Binary mode, as Knative's own components reply.
	if err := cehttp.WriteResponseWriter(ctx, binding.ToMessage(&reply), resp.Status, w); err != nil {
		r.log.Error("writing reply", "err", err)
	}
}

// Ref names an event for correlation, its attributes cut to the contract's bounds (an event whose
// attributes are longer is refused, and its refusal must stay small).
func Ref(e *event.Event) contract.EventRef {
	if e == nil {
		return contract.EventRef{}
	}
	return contract.EventRef{Source: contract.Truncate(e.Source(), contract.MaxSourceLength), ID: contract.Truncate(e.ID(), contract.MaxIDLength),
		Type: contract.Truncate(e.Type(), contract.MaxTypeLength)}
}

type callerKey struct{}

// WithCaller records who sent the request handled under ctx: the identity its authentication
// established (the Authenticator records the token's subject, the agent gateway its agent). The
// receiver gives each caller its own share of the admission budget.
func WithCaller(ctx context.Context, id string) context.Context {
	return context.WithValue(ctx, callerKey{}, id)
}

// CallerFrom is the identity WithCaller recorded for the request handled under ctx.
func CallerFrom(ctx context.Context) (string, bool) {
	id, ok := ctx.Value(callerKey{}).(string)
	return id, ok
}

// shares are per-caller budgets of the same size, each kept only while a request of its caller
// holds or waits for it: their number is bounded by the requests in progress.
type shares struct {
	size int64

	mu     sync.Mutex
	byName map[string]*share
}

type share struct {
	sem   *semaphore.Weighted
	users int
}

func newShares(size int64) *shares { return &shares{size: size, byName: map[string]*share{}} }

// acquire takes n bytes of caller's share, waiting while ctx allows; release gives them back.
func (s *shares) acquire(ctx context.Context, caller string, n int64) (release func(), err error) {
	s.mu.Lock()
	sh := s.byName[caller]
	if sh == nil {
		sh = &share{sem: semaphore.NewWeighted(s.size)}
		s.byName[caller] = sh
	}
	sh.users++
	s.mu.Unlock()
	done := func() {
		s.mu.Lock()
		if sh.users--; sh.users == 0 {
			delete(s.byName, caller)
		}
		s.mu.Unlock()
	}
	if err := sh.sem.Acquire(ctx, n); err != nil {
		done()
		return nil, err
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			sh.sem.Release(n)
			done()
		})
	}, nil
}
