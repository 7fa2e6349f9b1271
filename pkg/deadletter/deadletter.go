// Package deadletter is the broker's dead-letter sink. Every event whose delivery was refused or
// ran out of retries arrives with the broker's knativeerrordest, knativeerrorcode and
// knativeerrordata extensions; the Handler sends an io.scoreflow.score.write.failed naming it
// (reason DeadLettered) to the broker. It sends rather than replies because Knative drops a
// dead-letter sink's reply. It answers 202 once the broker took the report, 503 when it could not,
// so the broker retries the dead-letter delivery.
package deadletter

import (
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"strings"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// The extensions a Knative broker adds to a dead-lettered event (knative.dev/eventing
// pkg/kncloudevents/attributes; spelled out here so the function does not link Knative).
const (
	extErrorDest = "knativeerrordest"
	extErrorCode = "knativeerrorcode"
	extErrorData = "knativeerrordata"
)

// Bounds of what a report carries over from the dead-lettered event's extensions, which whoever
// posts to this function chooses: the broker cuts knativeerrordata to about 1 KiB, but in
// structured mode a sender's extension may run to megabytes.
const (
	maxErrorData = 4 << 10 // bytes of knativeerrordata read
	maxDest      = 256     // bytes of knativeerrordest kept
	maxMessage   = 1 << 10 // bytes of the report's message
	maxItems     = 32      // item outcomes carried over from a refusal
)

// Sender delivers an event to the broker (function.Sender).
type Sender interface {
	Send(ctx context.Context, e event.Event) error
}

// Handler turns dead-lettered events into write.failed reports.
type Handler struct {
	source  string
	send    Sender
	log     *slog.Logger
	reports *prometheus.CounterVec
}

// New is a Handler sending its reports, from source, through s; its counter of dead letters is
// registered with reg.
func New(source string, s Sender, log *slog.Logger, reg prometheus.Registerer) *Handler {
	h := &Handler{source: source, send: s, log: log, reports: prometheus.NewCounterVec(prometheus.CounterOpts{
		Name: "scoreflow_dead_letters_total",
		Help: "Dead-lettered events received, by outcome: reported (write.failed sent), send_failed (answered 503) or own_report (not re-reported).",
	}, []string{"outcome"})}
	reg.MustRegister(h.reports)
	return h
}

// Handle reports one dead-lettered event (a function.Handler).
func (h *Handler) Handle(ctx context.Context, e event.Event) function.Response {
	attrs := []any{"id", e.ID(), "type", e.Type(), "source", e.Source(), "code", contract.Truncate(ext(e, extErrorCode), 16), "dest", contract.Truncate(ext(e, extErrorDest), maxDest)}
	// A write.failed of ours that could not be delivered in turn is logged, not reported
	// again: a report about a report could go round for ever.
	if e.Type() == contract.TypeWriteFailed && e.Source() == h.source {
		h.reports.WithLabelValues("own_report").Inc()
		h.log.Warn("own write.failed was dead-lettered; not reported again", attrs...)
		return function.Response{Status: http.StatusAccepted}
	}
	out := contract.NewWriteResult(h.source, report(e))
	if err := h.send.Send(ctx, out); err != nil {
		h.reports.WithLabelValues("send_failed").Inc()
		h.log.Error("could not report dead-lettered event", append(attrs, "err", err)...)
		return function.Response{Status: http.StatusServiceUnavailable}
	}
	h.reports.WithLabelValues("reported").Inc()
	h.log.Info("dead-lettered event reported", append(attrs, "report", out.ID())...)
	return function.Response{Status: http.StatusAccepted}
}

// report is the write.failed data for a dead-lettered event: never retriable, since the broker
// has already spent its retries.
// When the destination refused the event with one of scoreflow's own answers (a write.failed or
// score.failed body), its reason and per-item outcomes are carried over, so the report says
// OutOfRange or BadConfig rather than only "HTTP 422".
func report(e event.Event) contract.WriteResult {
	r := contract.WriteResult{
		Input:    contract.EventRef{Source: e.Source(), ID: e.ID(), Type: e.Type()},
		Resource: resourceOf(e),
		Reason:   contract.ReasonDeadLettered,
		Message:  message(e),
	}
	if ans, ok := refusal(e); ok {
		r.Items = ans.Items[:min(len(ans.Items), maxItems)]
		if contract.ValidateResourceName(ans.Resource) == nil {
			r.Resource = ans.Resource
		}
	}
	return r
}

// answer is the part of a write result or failure the destination may have sent back.
type answer struct {
	Input    contract.EventRef     `json:"input"`
	Resource string                `json:"resource"`
	Reason   contract.Reason       `json:"reason"`
	Message  string                `json:"message"`
	Items    []contract.ItemResult `json:"items"`
}

// refusal decodes knativeerrordata as scoreflow's answer to e. A body cut by the broker, or any
// other body, is not one.
func refusal(e event.Event) (answer, bool) {
	var a answer
	if json.Unmarshal([]byte(errorData(ext(e, extErrorData))), &a) != nil || a.Input.ID != e.ID() || a.Input.Source != e.Source() {
		return answer{}, false
	}
	return a, true
}

// message says where delivery failed, with what status, and what the destination answered.
func message(e event.Event) string {
	dest, code := contract.Truncate(ext(e, extErrorDest), maxDest), contract.Truncate(ext(e, extErrorCode), 16)
	if dest == "" && code == "" {
		return "dead-lettered without the broker's knativeerror* extensions"
	}
	msg := fmt.Sprintf("delivery to %s failed with HTTP %s", orUnknown(dest), orUnknown(code))
	if a, ok := refusal(e); ok {
		reason, text := a.Reason, a.Message
		if reason == "" && len(a.Items) > 0 {
			reason, text = a.Items[0].Reason, a.Items[0].Message
		}
		return contract.Truncate(msg+": refused: "+string(reason)+": "+text, maxMessage)
	}
	if data := errorData(ext(e, extErrorData)); data != "" {
		msg += ": " + data
	}
	return contract.Truncate(msg, maxMessage)
}

// errorData decodes knativeerrordata: base64 of the failed answer's body, cut by the broker. Data
// that is not base64 is kept as it is.
func errorData(raw string) string {
	if len(raw) > maxErrorData {
		raw = raw[:maxErrorData]
	}
	b, err := base64.StdEncoding.DecodeString(raw)
	if err != nil {
		b = []byte(raw)
	}
	return strings.TrimSpace(strings.ToValidUTF8(string(b), "\uFFFD"))
}

// resourceOf names the AddOnPlacementScore a dead-lettered score.updated was for. The data is
// read leniently: it may have been dead-lettered precisely because it is invalid.
func resourceOf(e event.Event) string {
	if e.Type() != contract.TypeScoreUpdated {
		return ""
	}
	var d struct {
		Resource string `json:"resource"`
	}
	if json.Unmarshal(e.Data(), &d) != nil || contract.ValidateResourceName(d.Resource) != nil {
		return ""
	}
	return d.Resource
}

func ext(e event.Event, name string) string {
	v, ok := e.Extensions()[name]
	if !ok {
		return ""
	}
	return fmt.Sprint(v)
}

func orUnknown(s string) string {
	if s == "" {
		return "(unknown)"
	}
	return s
}
