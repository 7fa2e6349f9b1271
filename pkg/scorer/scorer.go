// Package scorer is what every scoring function shares: it routes a scorer's inputs (PingSource
// events carrying its configuration, metric.changed events carrying samples), maps its errors to
// the right HTTP status and score.failed reply, and sends exactly one validated score.updated.
package scorer

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// Error is a scoring failure with its reason. Retriable failures (Prometheus unreachable) answer
// 503 so the broker redelivers; others answer 400.
type Error struct {
	Reason    contract.Reason
	Retriable bool
	Err       error
}

func (e *Error) Error() string { return string(e.Reason) + ": " + e.Err.Error() }
func (e *Error) Unwrap() error { return e.Err }

// BadConfig reports a configuration (PingSource data) that cannot be used.
func BadConfig(format string, args ...any) error {
	return &Error{Reason: contract.ReasonBadConfig, Err: fmt.Errorf(format, args...)}
}

// Fail wraps err with a reason.
func Fail(reason contract.Reason, retriable bool, err error) error {
	return &Error{Reason: reason, Retriable: retriable, Err: err}
}

// Result is one evaluation: the scores and the time they hold as of, which dates the
// score.updated (the writer orders by it and counts its TTL from it): the evaluation time for a
// query run on a ping, the samples' observation time for a metric.changed.
type Result struct {
	Scores   contract.ScoreUpdated
	Observed time.Time
}

// Func scores one input event. Returning (nil, nil) means there was nothing to score (no cluster
// had data): the scorer answers 202 with no event rather than inventing zeros.
type Func func(ctx context.Context, e event.Event) (*Result, error)

// Route maps event types to scoring functions.
type Route map[string]Func

// Handler answers each event with one score.updated, or a score.failed with the reason.
func Handler(source string, routes Route) function.Handler {
	return func(ctx context.Context, e event.Event) function.Response {
		score, ok := routes[e.Type()]
		if !ok {
			return failure(source, e, http.StatusBadRequest, &Error{Reason: contract.ReasonWrongType,
				Err: fmt.Errorf("type %q is not one this scorer takes (%s)", e.Type(), keys(routes))})
		}
		res, err := score(ctx, e)
		if err != nil {
			var se *Error
			if !errors.As(err, &se) {
				var fes contract.FieldErrors
				if errors.As(err, &fes) {
					se = &Error{Reason: fes.Reason(), Err: err}
				} else {
					se = &Error{Reason: contract.ReasonMetricsUnavailable, Retriable: true, Err: err}
				}
			}
			status := http.StatusBadRequest
			if se.Retriable {
				status = http.StatusServiceUnavailable
			}
			return failure(source, e, status, se)
		}
		if res == nil || len(res.Scores.Items) == 0 {
			return function.Response{Status: http.StatusAccepted}
		}
		out, err := contract.NewScoreUpdated(source, res.Observed, res.Scores)
		if err != nil {
			// A scorer bug: never send what the writer would refuse.
			return failure(source, e, http.StatusInternalServerError, &Error{Reason: contract.ReasonInvalidData, Err: err})
		}
		return function.Reply(out)
	}
}

func failure(source string, in event.Event, status int, se *Error) function.Response {
	f := contract.NewFailure(source, contract.Failure{Input: function.Ref(&in), Reason: se.Reason, Message: se.Err.Error(), Retriable: se.Retriable})
	return function.Response{Status: status, Event: &f}
}

// Config is a scorer's configuration, as carried in a PingSource's data.
type Config interface{ Validate() error }

// DecodeConfig decodes a PingSource event's data into cfg, strictly (a misspelt field is an
// error), and validates it. Errors are BadConfig.
func DecodeConfig(e event.Event, cfg Config) error {
	if err := contract.DecodeJSON(e.Data(), cfg); err != nil {
		return BadConfig("PingSource data: %v", err)
	}
	if err := cfg.Validate(); err != nil {
		return BadConfig("PingSource data: %v", err)
	}
	return nil
}

func keys(r Route) string {
	s := ""
	for k := range r {
		if s != "" {
			s += ", "
		}
		s += k
	}
	return s
}
