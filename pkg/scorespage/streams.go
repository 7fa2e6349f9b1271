package scorespage

import (
	"context"
	"net"
	"net/http"
	"sync"
)

// Bounds of the live streams: each holds a goroutine and a connection.
const (
	// MaxStreams bounds the streams served at once.
	MaxStreams = 64
	// MaxStreamsPerClient bounds one client's streams, a client being its remote address. Behind
	// a port-forward or Knative's queue-proxy every browser has the same address, so they share
	// this bound: it must cover a team's open pages.
	MaxStreamsPerClient = 16
)

// streams admits every new stream, ending an older one when a bound is reached: the client's own
// oldest when it has MaxStreamsPerClient, else the oldest of all. Idle streams therefore never
// lock a newcomer out; the browser of an ended stream reconnects (EventSource does so by itself),
// ending the next oldest in turn, so a client holding many idle streams loses them first.
type streams struct {
	mu   sync.Mutex
	open []*openStream // oldest first
}

type openStream struct {
	client string
	end    context.CancelFunc
}

// admit registers a stream of client and returns the context it runs under (ended when the stream
// is evicted or ctx ends) and the function that unregisters it.
func (s *streams) admit(ctx context.Context, client string) (context.Context, func()) {
	ctx, cancel := context.WithCancel(ctx)
	st := &openStream{client: client, end: cancel}
	s.mu.Lock()
	mine := 0
	for _, o := range s.open {
		if o.client == client {
			mine++
		}
	}
	switch {
	case mine >= MaxStreamsPerClient:
		for _, o := range s.open {
			if o.client == client {
				s.evictLocked(o)
				break
			}
		}
	case len(s.open) >= MaxStreams:
		s.evictLocked(s.open[0])
	}
	s.open = append(s.open, st)
	s.mu.Unlock()
	return ctx, func() {
		cancel()
		s.mu.Lock()
		s.removeLocked(st)
		s.mu.Unlock()
	}
}

func (s *streams) evictLocked(o *openStream) {
	o.end()
	s.removeLocked(o)
}

func (s *streams) removeLocked(o *openStream) {
	for i, x := range s.open {
		if x == o {
			s.open = append(s.open[:i], s.open[i+1:]...)
			return
		}
	}
}

// clientOf is the remote address of r without its port.
func clientOf(r *http.Request) string {
	host, _, err := net.SplitHostPort(r.RemoteAddr)
	if err != nil {
		return r.RemoteAddr
	}
	return host
}
