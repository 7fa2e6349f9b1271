package functest

import (
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Sink is a real CloudEvents receiver standing in for a broker or a SinkBinding's K_SINK. It
// accepts each event with 202 and keeps it for Take, or, told to Answer a status that is not 2xx,
// refuses it as a broker that is down would, keeping nothing but the count of Attempts. A request
// that is not a CloudEvent, or an event its check refuses, fails the test and gets 400.
type Sink struct {
	*httptest.Server
	t       testing.TB
	check   func(*event.Event) error
	arrived chan event.Event

	mu       sync.Mutex
	status   int
	events   []event.Event
	attempts int
}

// NewSink serves a Sink on a free loopback port until the test ends. check, if not nil, vets
// every event as it arrives.
func NewSink(t testing.TB, check func(*event.Event) error) *Sink {
	t.Helper()
	return NewSinkAt(t, "127.0.0.1:0", check)
}

// NewSinkAt is NewSink on addr: a sink coming back where a sender already sends.
func NewSinkAt(t testing.TB, addr string, check func(*event.Event) error) *Sink {
	t.Helper()
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		t.Fatalf("listening on %s: %v", addr, err)
	}
	s := &Sink{t: t, check: check, arrived: make(chan event.Event, 100)}
	s.Server = &httptest.Server{Listener: ln, Config: &http.Server{Handler: s}}
	s.Start()
	t.Cleanup(s.Close)
	return s
}

// ServeHTTP receives one event: see Sink.
func (s *Sink) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
	if err != nil {
		s.t.Errorf("sink: not a CloudEvent: %v", err)
		http.Error(w, err.Error(), http.StatusBadRequest)
		return
	}
	if s.check != nil {
		if err := s.check(e); err != nil {
			s.t.Errorf("sink: %v", err)
			http.Error(w, err.Error(), http.StatusBadRequest)
			return
		}
	}
	s.mu.Lock()
	s.attempts++
	status := s.status
	if status == 0 {
		status = http.StatusAccepted
	}
	accepted := status >= 200 && status < 300
	if accepted {
		s.events = append(s.events, *e)
	}
	s.mu.Unlock()
	if accepted {
		select {
		case s.arrived <- *e:
		default: // nobody waits for that many
		}
	}
	w.WriteHeader(status)
}

// Answer sets the status the sink answers from now on; 0 is the default, 202.
func (s *Sink) Answer(status int) {
	s.mu.Lock()
	s.status = status
	s.mu.Unlock()
}

// Take returns the events accepted since the last Take.
func (s *Sink) Take() []event.Event {
	s.mu.Lock()
	defer s.mu.Unlock()
	ev := s.events
	s.events = nil
	return ev
}

// Attempts counts the events sent to the sink, accepted or refused: a sender's retries.
func (s *Sink) Attempts() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.attempts
}

// Arrived delivers each accepted event as it arrives (the first 100 not yet received), for tests
// that wait for one; Take still returns it.
func (s *Sink) Arrived() <-chan event.Event { return s.arrived }

// MetricChanged is the check of a source's sink (NewSink): every event must be a valid
// io.scoreflow.metric.changed.
func MetricChanged(e *event.Event) error {
	if _, err := contract.DecodeMetricChanged(e); err != nil {
		return fmt.Errorf("invalid metric.changed: %w", err)
	}
	return nil
}

// EqualSamples fails the test unless got are the samples want, observation times compared in UTC
// (reflect.DeepEqual would tell one instant in two locations apart).
func EqualSamples(t testing.TB, what string, got, want []contract.Sample) {
	t.Helper()
	norm := func(ss []contract.Sample) []contract.Sample {
		out := make([]contract.Sample, len(ss))
		for i, s := range ss {
			s.ObservedAt = s.ObservedAt.UTC()
			out[i] = s
		}
		return out
	}
	if g, w := norm(got), norm(want); !reflect.DeepEqual(g, w) {
		t.Errorf("%s: samples\n got %+v\nwant %+v", what, g, w)
	}
}
