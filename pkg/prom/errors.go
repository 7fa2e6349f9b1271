package prom

import (
	"context"
	"errors"
	"fmt"
	"strings"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
)

// Kind sorts query errors by what the caller should do about them; what that means for an event
// (its status and reason) is the caller's to say: the scorer runtime's scorer.Classify.
type Kind int

const (
	// Unavailable: Prometheus unreachable or overloaded (network errors, timeouts, 5xx, 429, a
	// refused token, an unparsable answer), or a query that failed while it ran (422 execution:
	// too many samples, a Thanos or Mimir limit, series it could not match at that moment).
	// Retrying later may work; meanwhile nothing is scored.
	Unavailable Kind = iota + 1
	// BadQuery: Prometheus refused the query itself (400 bad_data: a syntax error, a bad
	// parameter) or its result has the wrong shape. Retrying will not help.
	BadQuery
)

func (k Kind) String() string {
	switch k {
	case Unavailable:
		return "Prometheus unreachable or overloaded"
	case BadQuery:
		return "bad query"
	}
	return fmt.Sprintf("Kind(%d)", int(k))
}

// Error is a failed query.
type Error struct {
	Kind  Kind
	Query string
	Err   error
}

func (e *Error) Error() string { return fmt.Sprintf("%s: %q: %v", e.Kind, e.Query, e.Err) }
func (e *Error) Unwrap() error { return e.Err }

// KindOf tells an error's kind. Errors that did not come from this package count as Unavailable:
// a scorer that cannot tell must not answer with a score, and a retry costs little.
func KindOf(err error) Kind {
	var e *Error
	if errors.As(err, &e) {
		return e.Kind
	}
	return Unavailable
}

// classify sorts a client_golang error. client_golang maps 400 and 422 answers to their API
// errorType (bad_data, execution, or what a proxy put there) and every other non-2xx status to
// client_error (4xx) or server_error (5xx, including Prometheus' own 503 for a query timeout).
//
// Only bad_data is about the query's text and parameters, so only it is a bad query. Execution
// errors are about what the query met when it ran: Prometheus' --query.max-samples, Thanos and
// Mimir limits, timeouts inside the engine, and matching errors that depend on which series exist
// (duplicates while a pod is replaced). The same query may pass on the next try, so they are
// retried; a query that always fails this way shows its message in every score.failed and log.
func classify(query string, err error) *Error {
	var apiErr *v1.Error
	switch {
	case errors.As(err, &apiErr):
		switch apiErr.Type {
		case v1.ErrBadData:
			return &Error{Kind: BadQuery, Query: query, Err: errors.New(apiErr.Msg)}
		case v1.ErrExec, v1.ErrTimeout, v1.ErrCanceled:
			return &Error{Kind: Unavailable, Query: query, Err: fmt.Errorf("%s: %s", apiErr.Type, apiErr.Msg)}
		case v1.ErrClient:
			return &Error{Kind: Unavailable, Query: query, Err: fmt.Errorf("%s (check --prometheus-url and the token): %s", apiErr.Msg, brief(apiErr.Detail))}
		default:
			return &Error{Kind: Unavailable, Query: query, Err: fmt.Errorf("%s: %s %s", apiErr.Type, apiErr.Msg, brief(apiErr.Detail))}
		}
	case errors.Is(err, context.DeadlineExceeded):
		return &Error{Kind: Unavailable, Query: query, Err: fmt.Errorf("timed out: %w", err)}
	default:
		// Network errors: refused, reset, DNS, TLS. http.Client strips any URL password from them.
		return &Error{Kind: Unavailable, Query: query, Err: err}
	}
}

// brief keeps an error body short and on one line: it ends up in a CloudEvent and a log line.
func brief(body string) string {
	body = strings.Join(strings.Fields(body), " ")
	if len(body) > 300 {
		body = body[:300] + "..."
	}
	return body
}
