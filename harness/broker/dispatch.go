package broker

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	eventingapis "knative.dev/eventing/pkg/apis"
	eventingduckv1 "knative.dev/eventing/pkg/apis/duck/v1"
	"knative.dev/eventing/pkg/kncloudevents"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// maxBodyBytes bounds what the broker reads: an ingress request, or a subscriber's answer.
const maxBodyBytes = 8 << 20

// Statuses Knative records when there is no usable answer.
const (
	statusNetworkError = http.StatusInternalServerError // kncloudevents records 500 for a failed request
	statusNotEvent     = http.StatusBadGateway          // the broker filter answers 502 for a non-event 2xx body
	statusUnresolved   = http.StatusNotFound            // the broker filter answers 404 for a Trigger without subscriber URI
)

// sendSpec is where and how to send one event.
type sendSpec struct {
	dest         duckv1.Destination
	namespace    string // of the object naming dest; also sent as Kn-Namespace
	retry        *kncloudevents.RetryConfig
	format       *eventingduckv1.FormatType
	preferReply  bool
	transformers binding.Transformers
	observe      func(o *outcome)                     // after every attempt, if set
	retrying     func(o *outcome, wait time.Duration) // before every retry, if set
}

// outcome is how a send ended: the last answer and, on success, the reply event if any.
type outcome struct {
	target      string      // resolved URL ("" if it never resolved)
	status      int         // HTTP status, or one of the status* stand-ins above
	body        []byte      // the answer's body, or a description of the failure
	header      http.Header // nil unless there was an answer
	netErr      error       // the request failed without an answer
	reply       *event.Event
	attempts    int
	interrupted bool // the context ended (shutdown) before an answer that counts
}

func (o *outcome) ok() bool { return o.netErr == nil && o.status >= 200 && o.status < 300 }

// response is what Knative's retry predicate looks at: nil when the request never got an answer.
func (o *outcome) response() *http.Response {
	if o.netErr != nil {
		return nil
	}
	return &http.Response{StatusCode: o.status, Header: o.header}
}

// send delivers e with spec.retry's policy, as kncloudevents does through retryablehttp: after
// attempt i (from 0) fails, it asks CheckRetry (Knative's SelectiveRetry), stops after RetryMax
// retries and waits Backoff(i). Knative's own dispatcher is not used: its dead-letter path
// panics on error bodies over 768 bytes, it cannot treat a non-event 2xx body as a failure in
// the same retry loop, and its process-wide client pool cannot be closed at shutdown.
func (s *Server) send(ctx context.Context, e *event.Event, spec sendSpec) outcome {
	for i := 0; ; i++ {
		o := s.attempt(ctx, e, spec)
		o.attempts = i + 1
		if spec.observe != nil {
			spec.observe(&o)
		}
		if o.ok() {
			return o
		}
		if ctx.Err() != nil {
			o.interrupted = true
			return o
		}
		if i >= spec.retry.RetryMax {
			return o
		}
		resp := o.response()
		if retry, err := spec.retry.CheckRetry(ctx, resp, o.netErr); !retry || err != nil {
			return o
		}
		var wait time.Duration
		if spec.retry.Backoff != nil {
			wait = spec.retry.Backoff(i, resp)
		}
		if spec.retrying != nil {
			spec.retrying(&o, wait)
		}
		if !sleep(ctx, wait) {
			o.interrupted = true
			return o
		}
	}
}

// attempt makes one request, bounded by the delivery timeout, and classifies the answer as the
// broker filter does: 2xx with no body or one CloudEvent succeeds; any other 2xx body is a 502.
func (s *Server) attempt(ctx context.Context, e *event.Event, spec sendSpec) outcome {
	url, err := s.resolve(ctx, spec.namespace, spec.dest)
	if err != nil {
		return outcome{status: statusUnresolved, body: []byte(err.Error())}
	}
	o := outcome{target: url.String()}
	if t := spec.retry.RequestTimeout; t > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t)
		defer cancel()
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, o.target, nil)
	if err != nil {
		return o.failed(err)
	}
	if err := cehttp.WriteRequest(formatContext(ctx, spec.format), binding.ToMessage(e), req, spec.transformers...); err != nil {
		return o.failed(err)
	}
	if spec.preferReply {
		req.Header.Set("Prefer", "reply")
	}
	req.Header.Set(eventingapis.KnNamespaceHeader, spec.namespace)
	resp, err := s.client.Do(req)
	if err != nil {
		return o.failed(err)
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxBodyBytes+1))
	_ = resp.Body.Close()
	if err != nil {
		return o.failed(fmt.Errorf("reading the answer: %w", err))
	}
	o.status, o.header, o.body = resp.StatusCode, resp.Header, body
	if !o.ok() {
		return o
	}
	if len(body) > maxBodyBytes {
		o.status, o.body = statusNotEvent, []byte(fmt.Sprintf("reply larger than %d bytes", maxBodyBytes))
		return o
	}
	msg := cehttp.NewMessage(resp.Header, io.NopCloser(bytes.NewReader(body)))
	if msg.ReadEncoding() == binding.EncodingUnknown {
		if len(body) > 0 {
			o.status = statusNotEvent // body kept: it is the dead-letter sink's knativeerrordata
		}
		return o
	}
	reply, err := binding.ToEvent(ctx, msg)
	if err != nil {
		o.status, o.body = statusNotEvent, []byte(fmt.Sprintf("malformed reply event: %v", err))
		return o
	}
	o.reply = reply
	return o
}

// failed records a request that got no answer, with the body Knative's dispatcher records.
func (o outcome) failed(err error) outcome {
	o.netErr, o.status, o.body = err, statusNetworkError, []byte("dispatch error: "+err.Error())
	return o
}

func formatContext(ctx context.Context, f *eventingduckv1.FormatType) context.Context {
	if f == nil {
		return ctx
	}
	switch *f {
	case eventingduckv1.DeliveryFormatJson:
		return binding.WithForceStructured(ctx)
	case eventingduckv1.DeliveryFormatBinary:
		return binding.WithForceBinary(ctx)
	}
	return ctx
}

// sleep waits d, or less if ctx ends; it reports whether ctx is still live.
func sleep(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}
