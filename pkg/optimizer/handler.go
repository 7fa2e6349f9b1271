package optimizer

import (
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"mime"
	"net/http"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// maxMessage keeps failure bodies far under the 768 bytes past which Knative's dispatcher fails.
const maxMessage = 400

// Handler answers optimisation and reset requests, as CloudEvents and as plain JSON POSTs.
type Handler struct {
	Optimizer *Optimizer
	Source    string
	Log       *slog.Logger
}

// Handle is the CloudEvents entry point.
func (h *Handler) Handle(ctx context.Context, e event.Event) function.Response {
	in := function.Ref(&e)
	switch e.Type() {
	case TypeRequested:
		var p Params
		if err := decode(e.Data(), &p); err != nil {
			return h.failed(in, http.StatusBadRequest, contract.ReasonInvalidData, err.Error())
		}
		// The id follows the event, so a redelivery rewrites the same objects, not new ones.
		plan, ferr := h.Optimizer.Optimize(ctx, &p, planID(e.Source()+"\x00"+e.ID()))
		if ferr != nil {
			return h.failed(in, ferr.Status, ferr.Reason, ferr.Message)
		}
		plan.Input = &in
		h.Log.Info("plan applied", "plan", plan.ID, "namespace", plan.Namespace, "objective", plan.Objective, "optimal", plan.Optimal, "source", e.Source(), "id", e.ID())
		return function.Reply(h.event(TypeDone, plan))
	case TypeResetRequested:
		var r ResetRequest
		if err := decode(e.Data(), &r); err != nil {
			return h.failed(in, http.StatusBadRequest, contract.ReasonInvalidData, err.Error())
		}
		res, ferr := h.Optimizer.Reset(ctx, &r)
		if ferr != nil {
			return h.failed(in, ferr.Status, ferr.Reason, ferr.Message)
		}
		res.Input = &in
		h.Log.Info("plans reset", "namespace", r.Namespace, "plan", r.Plan, "removed", len(res.Removed))
		return function.Reply(h.event(TypeResetDone, res))
	default:
		return h.failed(in, http.StatusBadRequest, contract.ReasonWrongType, "type "+e.Type()+" is not "+TypeRequested+" or "+TypeResetRequested)
	}
}

type validator interface{ Validate() error }

func decode(data []byte, v validator) error {
	if err := contract.DecodeJSON(data, v); err != nil {
		return err
	}
	return v.Validate()
}

func planID(seed string) string {
	sum := sha256.Sum256([]byte(seed))
	return hex.EncodeToString(sum[:4])
}

func randomID() string {
	b := make([]byte, 4)
	_, _ = rand.Read(b)
	return hex.EncodeToString(b)
}

func (h *Handler) event(typ string, data any) event.Event {
	e := event.New()
	e.SetID(uuid.NewString())
	e.SetType(typ)
	e.SetSource(h.Source)
	_ = e.SetData(event.ApplicationJSON, data)
	return e
}

func truncate(s string) string {
	if len(s) > maxMessage {
		return s[:maxMessage-3] + "..."
	}
	return s
}

func (h *Handler) failed(in contract.EventRef, status int, reason contract.Reason, message string) function.Response {
	message = truncate(message)
	h.Log.Info("optimisation refused", "status", status, "reason", reason, "message", message, "source", in.Source, "id", in.ID)
	e := h.event(TypeFailed, Failure{Input: shortRef(in), Reason: reason, Message: message, Retriable: status >= 500})
	return function.Response{Status: status, Event: &e}
}

// shortRef bounds the sender-chosen attributes echoed in a failure, so that the whole body stays
// under the dispatcher's limit whatever the sender put in them.
func shortRef(in contract.EventRef) *contract.EventRef {
	cut := func(s string, n int) string {
		if len(s) > n {
			return s[:n-3] + "..."
		}
		return s
	}
	return &contract.EventRef{Source: cut(in.Source, 80), ID: cut(in.ID, 60), Type: cut(in.Type, 60)}
}

// FailureReply answers requests that are not usable CloudEvents with optimize.failed.
func (h *Handler) FailureReply(in contract.EventRef, reason contract.Reason, message string) *event.Event {
	e := h.event(TypeFailed, Failure{Input: shortRef(in), Reason: reason, Message: truncate(message)})
	return &e
}

// ServeOptimize is POST /optimize: the params document in, the plan out, as the Dynamic Scoring
// Framework's optimisation API answers.
func (h *Handler) ServeOptimize(w http.ResponseWriter, r *http.Request) {
	var p Params
	if !h.readJSON(w, r, &p) {
		return
	}
	plan, ferr := h.Optimizer.Optimize(r.Context(), &p, randomID())
	if ferr != nil {
		h.writeFailure(w, ferr.Status, ferr.Reason, ferr.Message)
		return
	}
	h.Log.Info("plan applied", "plan", plan.ID, "namespace", plan.Namespace, "objective", plan.Objective, "optimal", plan.Optimal)
	writeJSON(w, http.StatusOK, plan)
}

// ServeReset is POST /reset: {"namespace", "plan"?}.
func (h *Handler) ServeReset(w http.ResponseWriter, r *http.Request) {
	var req ResetRequest
	if !h.readJSON(w, r, &req) {
		return
	}
	res, ferr := h.Optimizer.Reset(r.Context(), &req)
	if ferr != nil {
		h.writeFailure(w, ferr.Status, ferr.Reason, ferr.Message)
		return
	}
	writeJSON(w, http.StatusOK, res)
}

func (h *Handler) readJSON(w http.ResponseWriter, r *http.Request, v validator) bool {
	if r.Method != http.MethodPost {
		w.Header().Set("Allow", http.MethodPost)
		h.writeFailure(w, http.StatusMethodNotAllowed, contract.ReasonInvalidData, "POST a JSON document")
		return false
	}
	// Only JSON: a web page may post text/plain (or a form) to another origin without asking, and
	// this API changes the hub; application/json needs the browser's CORS preflight, which it
	// never passes here.
	if mt, _, err := mime.ParseMediaType(r.Header.Get("Content-Type")); err != nil || mt != "application/json" {
		h.writeFailure(w, http.StatusUnsupportedMediaType, contract.ReasonInvalidData, "POST the document as Content-Type: application/json")
		return false
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, function.MaxBodyBytes))
	if err != nil {
		status := http.StatusBadRequest
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			status = http.StatusRequestEntityTooLarge
		}
		h.writeFailure(w, status, contract.ReasonInvalidData, err.Error())
		return false
	}
	if err := decode(body, v); err != nil {
		h.writeFailure(w, http.StatusBadRequest, contract.ReasonInvalidData, err.Error())
		return false
	}
	return true
}

func (h *Handler) writeFailure(w http.ResponseWriter, status int, reason contract.Reason, message string) {
	message = truncate(message)
	h.Log.Info("optimisation refused", "status", status, "reason", reason, "message", message)
	writeJSON(w, status, Failure{Reason: reason, Message: message, Retriable: status >= 500})
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	_ = json.NewEncoder(w).Encode(v)
}

// Mux serves CloudEvents on / (through cloudEvents, the function's handler with health and
// metrics) and the JSON API on /optimize and /reset.
func (h *Handler) Mux(cloudEvents http.Handler) http.Handler {
	return h.ProtectedMux(cloudEvents, func(h http.Handler) http.Handler { return h })
}

// ProtectedMux is Mux with protect (the function's caller authentication) in front of the JSON
// API too: it changes the hub as the events do.
func (h *Handler) ProtectedMux(cloudEvents http.Handler, protect func(http.Handler) http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/optimize", protect(http.HandlerFunc(h.ServeOptimize)))
	mux.Handle("/reset", protect(http.HandlerFunc(h.ServeReset)))
	mux.Handle("/", cloudEvents)
	return mux
}
