// Package scorer is what every scoring function shares: it routes a scorer's inputs (PingSource
// events carrying its configuration, metric.changed events carrying samples), maps its errors to
// the right HTTP status and score.failed reply, and answers with a validated score.updated.
//
// A result too large for one event (more than contract.MaxItems clusters, or more than
// contract.MaxScoreUpdatedDataBytes of data) is split into several, each within the contract's
// bounds (contract.NewScoreUpdates). A Knative subscriber replies with exactly one event, so the
// others go to the scorer's sink (K_SINK: the broker, injected by a SinkBinding) before the reply;
// a scorer without a sink answers such a result 500 (score.failed naming the missing sink) rather
// than leave clusters out. --max-items-per-event (Flags) makes the parts smaller than the contract
// requires.
//
// A scorer scores only the resources its deployment names (--resources, Options.Resources): a ping
// whose configuration names another is refused (400, BadConfig) before the scorer runs, so an
// event cannot make it query or write for someone else's resource. Every score.updated it sends,
// reply and parts, carries its resource in the scoreflowresource extension (contract.ExtResource),
// which the broker's EventPolicy filters check against the same list.
package scorer

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
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

// Classify gives err its reason and whether a retry may help: an *Error as it is; a contract
// decoder's FieldErrors their reason (not retriable); a query Prometheus refused (prom.BadQuery)
// BadQuery, not retriable, so the broker does not redeliver and the reason tells the operator to
// fix the PingSource; anything else MetricsUnavailable, retriable (503), so the broker redelivers
// and no stale or zero score is sent meanwhile: a scorer that cannot tell must not answer with a
// score, and a retry costs little.
func Classify(err error) *Error {
	var se *Error
	if errors.As(err, &se) {
		return se
	}
	var fes contract.FieldErrors
	if errors.As(err, &fes) {
		return &Error{Reason: fes.Reason(), Err: err}
	}
	var qe *prom.Error
	if errors.As(err, &qe) && qe.Kind == prom.BadQuery {
		return &Error{Reason: contract.ReasonBadQuery, Err: err}
	}
	return &Error{Reason: contract.ReasonMetricsUnavailable, Retriable: true, Err: err}
}

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

// Handler answers each event with one score.updated, or a score.failed with the reason. It has no
// sink: a result that needs more than one event is answered 500 (see HandlerTo).
func Handler(source string, routes Route) function.Handler { return HandlerTo(source, routes, nil) }

// HandlerTo is Handler sending, when a result needs several events, all but the first to sink
// (which may be nil: no sink) and replying with the first. Those parts carry ids derived from the
// input's, so that a redelivered input's parts deduplicate at the writer; if sink does not take
// them the answer is 503 (retriable), so the broker redelivers the input.
func HandlerTo(source string, routes Route, sink *function.Sender) function.Handler {
	return HandlerWith(source, routes, sink, Options{})
}

// Options tune how a scorer turns a result into events.
type Options struct {
	// MaxItemsPerEvent caps the clusters of one score.updated below the contract's bounds
	// (0: contract.MaxItems and contract.MaxScoreUpdatedDataBytes only). See Flags for why.
	MaxItemsPerEvent int
	// Resources are the AddOnPlacementScore resources this scorer may score, from its deployment
	// (--resources): a ping whose configuration names another is refused with BadConfig before
	// the scorer runs, and a result for another is never sent. Empty: any resource.
	Resources []string
}

// Flags registers the Options every scorer takes on fs: --max-items-per-event (a negative value is
// refused when parsed) and --resources (each must be a valid resource name).
func Flags(fs *flag.FlagSet) *Options {
	o := &Options{}
	fs.Var(nonNegative{&o.MaxItemsPerEvent}, "max-items-per-event",
		"at most this many clusters per score.updated; a larger result is split and all parts but the reply go to the sink (0: only the contract's limits, "+
			fmt.Sprint(contract.MaxItems)+" clusters or 8 MiB). Smaller parts suit a large fleet: the writer answers each part within the Knative Service's "+
			"timeoutSeconds instead of one event's worth of writes, and the broker delivers the parts to it in parallel")
	fs.Var(resourceList{&o.Resources}, "resources",
		"comma-separated AddOnPlacementScore resources this scorer may score: a ping naming another is refused (400, BadConfig) before anything is queried. "+
			"The deployment's choice, matching the scorer's EventPolicy filter (oidc/eventpolicies.yaml); empty: any")
	return o
}

// resourceList is a comma-separated list of resource names.
type resourceList struct{ p *[]string }

func (r resourceList) String() string {
	if r.p == nil {
		return ""
	}
	return strings.Join(*r.p, ",")
}

func (r resourceList) Set(s string) error {
	var out []string
	for _, name := range strings.Split(s, ",") {
		if name = strings.TrimSpace(name); name == "" {
			continue
		}
		if err := contract.ValidateResourceName(name); err != nil {
			return fmt.Errorf("%q: %v", name, err)
		}
		out = append(out, name)
	}
	*r.p = out
	return nil
}

// CheckResource refuses, with BadConfig, a resource the deployment does not let this scorer
// score. A scorer whose resource comes from elsewhere than its configuration's "resource" field
// (derived from another field) calls it before it queries anything.
func (o *Options) CheckResource(resource string) error {
	if len(o.Resources) == 0 || slices.Contains(o.Resources, resource) {
		return nil
	}
	return BadConfig("resource %q is not one this scorer may score (its deployment allows %s)",
		contract.Truncate(resource, 64), strings.Join(o.Resources, ", "))
}

// namedResource is the "resource" a ping's configuration names, if it names one. It reads the
// field as encoding/json does (the last of repeated keys, any case); the scorer's own strict
// decoding refuses what it would read differently, so a resource this lets through is the one
// the scorer sees.
func namedResource(e event.Event) (string, bool) {
	var c struct {
		Resource *string `json:"resource"`
	}
	if json.Unmarshal(e.Data(), &c) != nil || c.Resource == nil {
		return "", false
	}
	return *c.Resource, true
}

type nonNegative struct{ p *int }

func (n nonNegative) String() string {
	if n.p == nil {
		return "0"
	}
	return strconv.Itoa(*n.p)
}

func (n nonNegative) Set(s string) error {
	v, err := strconv.Atoi(s)
	if err != nil {
		return err
	}
	if v < 0 {
		return fmt.Errorf("%d: must be 0 (the contract's limits) or more", v)
	}
	*n.p = v
	return nil
}

// HandlerWith is HandlerTo with opts.
func HandlerWith(source string, routes Route, sink *function.Sender, opts Options) function.Handler {
	return func(ctx context.Context, e event.Event) function.Response {
		score, ok := routes[e.Type()]
		if !ok {
			return failure(source, e, http.StatusBadRequest, &Error{Reason: contract.ReasonWrongType,
				Err: fmt.Errorf("type %q is not one this scorer takes (%s)", e.Type(), keys(routes))})
		}
		if e.Type() == contract.TypePing {
			if r, ok := namedResource(e); ok {
				if err := opts.CheckResource(r); err != nil {
					return failure(source, e, http.StatusBadRequest, err.(*Error))
				}
			}
		}
		res, err := score(ctx, e)
		if err != nil {
			se := Classify(err)
			status := http.StatusBadRequest
			if se.Retriable {
				status = http.StatusServiceUnavailable
			}
			return failure(source, e, status, se)
		}
		if res == nil || len(res.Scores.Items) == 0 {
			return function.Response{Status: http.StatusAccepted}
		}
		// A resource the configuration left to the scorer's default, or a metric.changed mapped
		// by its deployment: never sent unless owned.
		if err := opts.CheckResource(res.Scores.Resource); err != nil {
			return failure(source, e, http.StatusBadRequest, err.(*Error))
		}
		outs, err := contract.SplitScoreUpdates(source, res.Observed, res.Scores, opts.MaxItemsPerEvent)
		if err != nil {
			// A scorer bug: never send what the writer would refuse.
			return failure(source, e, http.StatusInternalServerError, &Error{Reason: contract.ReasonInvalidData, Err: err})
		}
		if len(outs) == 1 {
			return function.Reply(outs[0])
		}
		if sink == nil {
			return failure(source, e, http.StatusInternalServerError, &Error{Reason: contract.ReasonInvalidData,
				Err: fmt.Errorf("%d clusters make %d score.updated events and this scorer has no sink for all but one: give it one (--sink or K_SINK, from a SinkBinding to the broker)", len(res.Scores.Items), len(outs))})
		}
		in := function.Ref(&e)
		for k := range outs {
			outs[k].SetID(partID(in, k, len(outs)))
		}
		for k := 1; k < len(outs); k++ {
			if err := sink.Send(ctx, outs[k]); err != nil {
				return failure(source, e, http.StatusServiceUnavailable, &Error{Reason: contract.ReasonUnavailable, Retriable: true,
					Err: fmt.Errorf("score.updated %d of %d: %w", k+1, len(outs), err)})
			}
		}
		return function.Reply(outs[0])
	}
}

// partID is the id of part k of n of the result answering in: the same for a redelivered input.
func partID(in contract.EventRef, k, n int) string {
	sum := sha256.Sum256([]byte(in.Source + "\x00" + in.ID))
	return fmt.Sprintf("part-%s-%d-of-%d", hex.EncodeToString(sum[:12]), k+1, n)
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
