package mcpserver

import (
	"fmt"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/modelcontextprotocol/go-sdk/auth"
	"github.com/modelcontextprotocol/go-sdk/mcp"
)

// Defaults of the session bounds (Config): each open session holds the SDK's state for it, a
// few KiB; idle ones are closed, and one caller can hold only its share.
const (
	DefaultSessionIdleTimeout   = 10 * time.Minute
	DefaultMaxSessions          = 256
	DefaultMaxSessionsPerCaller = 16
)

// sessionIDHeader is the streamable HTTP transport's session header: a POST without it creates a
// session.
const sessionIDHeader = "Mcp-Session-Id"

// sessionBounds admits a new streamable HTTP session only while its caller (the verified
// TokenInfo.UserID) has fewer than perCaller open and the server fewer than total. A session
// counts from the request that creates it until the SDK closes it: on the client's DELETE, after
// idling (StreamableHTTPOptions.SessionTimeout), or at once when its initialisation fails.
type sessionBounds struct {
	server           *mcp.Server
	total, perCaller int
	idle             time.Duration
	log              *slog.Logger

	mu       sync.Mutex
	open     int               // sessions open or being created
	byCaller map[string]int    // the same, per caller
	ids      map[string]string // open sessions' callers, by session id
}

func newSessionBounds(s *mcp.Server, cfg Config) *sessionBounds {
	return &sessionBounds{server: s, total: cfg.MaxSessions, perCaller: cfg.MaxSessionsPerCaller, idle: cfg.SessionIdleTimeout,
		log: cfg.Log, byCaller: map[string]int{}, ids: map[string]string{}}
}

// wrap bounds the sessions next (the SDK's handler) creates. It runs after the caller is verified.
func (b *sessionBounds) wrap(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		id := r.Header.Get(sessionIDHeader)
		switch {
		case r.Method == http.MethodDelete && id != "":
			// The SDK closes the session before it answers 204; its slot is free for the
			// caller's next request, not only once the session's goroutines have wound down.
			rec := &statusRecorder{ResponseWriter: w}
			next.ServeHTTP(rec, r)
			if rec.status == http.StatusNoContent {
				b.forget(id)
			}
			return
		case r.Method != http.MethodPost || id != "":
			next.ServeHTTP(w, r)
			return
		}
		var caller string
		if ti := auth.TokenInfoFromContext(r.Context()); ti != nil {
			caller = ti.UserID
		}
		if ref := b.reserve(caller); ref != nil {
			b.log.Warn("session refused", "status", ref.status, "caller", caller, "message", ref.message)
			w.Header().Set("Retry-After", "60")
			http.Error(w, ref.message, ref.status)
			return
		}
		// The SDK names the session an initialize creates in the response header; any other
		// request without a session is answered without one and keeps nothing. The slot is
		// settled as the header is sent, since the client may go on (end the session, or open
		// another) before this handler returns.
		var once sync.Once
		settle := func() {
			once.Do(func() {
				if id := w.Header().Get(sessionIDHeader); id != "" {
					b.mu.Lock()
					b.ids[id] = caller
					b.mu.Unlock()
					return
				}
				b.release(caller)
			})
		}
		next.ServeHTTP(&statusRecorder{ResponseWriter: w, onHeader: settle}, r)
		settle()
		// A session whose initialisation failed is closed already.
		if id := w.Header().Get(sessionIDHeader); id != "" {
			ss := b.live(id)
			if ss == nil {
				b.forget(id)
				return
			}
			go func() {
				_ = ss.Wait()
				b.forget(id)
			}()
		}
	})
}

// statusRecorder keeps the status a handler answered, and calls onHeader (if set) just before
// the header is sent.
type statusRecorder struct {
	http.ResponseWriter
	onHeader func()
	status   int
	wrote    bool
}

func (r *statusRecorder) WriteHeader(status int) {
	r.header(status)
	r.ResponseWriter.WriteHeader(status)
}

func (r *statusRecorder) Write(p []byte) (int, error) {
	r.header(http.StatusOK)
	return r.ResponseWriter.Write(p)
}

func (r *statusRecorder) header(status int) {
	if r.wrote {
		return
	}
	r.wrote, r.status = true, status
	if r.onHeader != nil {
		r.onHeader()
	}
}

// Unwrap lets http.ResponseController reach the connection's writer (the SDK flushes streams).
func (r *statusRecorder) Unwrap() http.ResponseWriter { return r.ResponseWriter }

func (b *sessionBounds) reserve(caller string) *refused {
	b.mu.Lock()
	defer b.mu.Unlock()
	switch {
	case b.byCaller[caller] >= b.perCaller:
		return &refused{http.StatusTooManyRequests, fmt.Sprintf(
			"TooManySessions: %s has %d sessions open, the most one caller may: end one (DELETE with its Mcp-Session-Id) or let one idle for %s",
			clip(caller, 200), b.byCaller[caller], b.idle)}
	case b.open >= b.total:
		return &refused{http.StatusServiceUnavailable, fmt.Sprintf(
			"Busy: %d sessions open, the most this server holds; idle ones close after %s", b.open, b.idle)}
	}
	b.open++
	b.byCaller[caller]++
	return nil
}

func (b *sessionBounds) release(caller string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.releaseLocked(caller)
}

func (b *sessionBounds) releaseLocked(caller string) {
	b.open--
	if b.byCaller[caller]--; b.byCaller[caller] <= 0 {
		delete(b.byCaller, caller)
	}
}

// forget releases the slot of session id once, whichever notices its end first.
func (b *sessionBounds) forget(id string) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if caller, ok := b.ids[id]; ok {
		delete(b.ids, id)
		b.releaseLocked(caller)
	}
}

// live is the open session named id, or nil.
func (b *sessionBounds) live(id string) *mcp.ServerSession {
	if id == "" {
		return nil
	}
	for ss := range b.server.Sessions() {
		if ss.ID() == id {
			return ss
		}
	}
	return nil
}
