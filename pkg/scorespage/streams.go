package scorespage

import (
	"context"
	"crypto/rand"
	"encoding/base64"
	"fmt"
	"net/http"
	"sync"
	"time"
)

// Bounds of the live streams: each holds a goroutine and a connection.
const (
	// MaxStreams bounds the places of the page: open streams, and the place each viewer keeps for
	// KeepPlace after its last stream ended.
	MaxStreams = 64
	// MaxStreamsPerViewer bounds one viewer's open streams: a browser's tabs share its viewer
	// cookie.
	MaxStreamsPerViewer = 8
	// KeepPlace is how long a viewer whose streams all ended keeps one place: a browser
	// reconnects within seconds (EventSource after a dropped stream, the page's script after a
	// refusal), and gets its place back even while newcomers fill the page.
	KeepPlace = 30 * time.Second
	// RetryAfter is what a refused stream is told to wait, in seconds.
	RetryAfter = 5
)

// viewerCookie names the viewer a browser is: the page issues it, random, with the page and with a
// stream that came without one. Behind Knative's queue-proxy or a port-forward every request comes
// from the same loopback address, and X-Forwarded-For is whatever the client or the cluster's
// gateway wrote: neither tells viewers apart.
const viewerCookie = "scoreflow-viewer"

// streams admits a stream unless its viewer has MaxStreamsPerViewer open (429) or the page's
// MaxStreams places are taken (503). It never ends a stream to make room: a viewer watching the
// page keeps its stream, and its place across a reconnect, whatever others open.
type streams struct {
	now func() time.Time

	mu      sync.Mutex
	viewers map[string]*viewer
	used    int // places taken: open streams, and one kept per viewer with none open
}

type viewer struct {
	open int
	left time.Time // when its last stream ended, while open is 0
}

// refusal is why a stream is not admitted.
type refusal struct {
	status  int
	message string
}

// admit registers a stream of viewer id and returns the context it runs under and the function
// that unregisters it, or why it is refused.
func (s *streams) admit(ctx context.Context, id string) (context.Context, func(), *refusal) {
	s.mu.Lock()
	defer s.mu.Unlock()
	now := s.now()
	s.forgetLocked(now)
	v := s.viewers[id]
	switch {
	case v != nil && v.open >= MaxStreamsPerViewer:
		return nil, nil, &refusal{http.StatusTooManyRequests, fmt.Sprintf(
			"this browser has %d live streams of the page open, the most one viewer may: close a tab", v.open)}
	case v != nil && v.open == 0:
		// Its kept place.
	case s.used >= MaxStreams:
		return nil, nil, &refusal{http.StatusServiceUnavailable, fmt.Sprintf(
			"the page serves %d live streams, its most; the page retries", MaxStreams)}
	default:
		s.used++
		if v == nil {
			v = &viewer{}
			s.viewers[id] = v
		}
	}
	v.open++
	ctx, cancel := context.WithCancel(ctx)
	return ctx, func() {
		cancel()
		s.mu.Lock()
		defer s.mu.Unlock()
		if v.open--; v.open == 0 {
			v.left = s.now() // keeps its place a while
		} else {
			s.used--
		}
	}, nil
}

// forgetLocked gives back the places viewers kept longer than KeepPlace.
func (s *streams) forgetLocked(now time.Time) {
	for id, v := range s.viewers {
		if v.open == 0 && now.Sub(v.left) >= KeepPlace {
			delete(s.viewers, id)
			s.used--
		}
	}
}

// viewerOf returns the viewer id r's cookie carries, or a new one, set on w, if it carries none
// the page could have issued.
func viewerOf(w http.ResponseWriter, r *http.Request) string {
	if c, err := r.Cookie(viewerCookie); err == nil {
		if b, err := base64.RawURLEncoding.DecodeString(c.Value); err == nil && len(b) == 16 {
			return c.Value
		}
	}
	b := make([]byte, 16)
	_, _ = rand.Read(b) // never fails (crypto/rand)
	id := base64.RawURLEncoding.EncodeToString(b)
	// No Path: the cookie goes back to the directory the page is served from, wherever the
	// page is mounted.
	http.SetCookie(w, &http.Cookie{Name: viewerCookie, Value: id, HttpOnly: true, SameSite: http.SameSiteStrictMode})
	return id
}
