package scorespage

import (
	"context"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"net/http"
	"sort"
	"strconv"
	"time"
)

//go:embed ui
var uiFiles embed.FS

// heartbeat keeps idle streams from being closed by proxies between changes.
const heartbeat = 15 * time.Second

// Snapshot is everything the page shows, as /state answers it.
type Snapshot struct {
	Scores     ScoresView      `json:"scores"`
	Placements []PlacementView `json:"placements"`
	Events     []EventView     `json:"events"`
}

// Snapshot returns the page's current state.
func (p *Page) Snapshot() Snapshot {
	p.mu.Lock()
	defer p.mu.Unlock()
	v := p.scoresViewLocked()
	return Snapshot{Scores: v, Placements: p.placementsViewLocked(v), Events: append([]EventView{}, p.events...)}
}

// UI serves the page at the root of what it is mounted on (mount it with http.StripPrefix):
// index.html, its script and style, /state (a JSON Snapshot) and /stream (server-sent events:
// `scores`, `placements` and `events` as they change). Streams end when ctx does, so that a
// graceful shutdown is not held up by open pages (browsers reconnect to the next instance). A
// stream beyond its viewer's bound (MaxStreamsPerViewer, a viewer being the cookie the page
// issues) is refused 429, one beyond the page's (MaxStreams) 503; no stream is ever ended to make
// room for another.
func (p *Page) UI(ctx context.Context) http.Handler {
	static, _ := fs.Sub(uiFiles, "ui") // the embedded directory exists: fs.Sub cannot fail
	files := http.FileServerFS(static)
	mux := http.NewServeMux()
	mux.HandleFunc("GET /state", func(w http.ResponseWriter, _ *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Header().Set("Cache-Control", "no-store")
		_ = json.NewEncoder(w).Encode(p.Snapshot())
	})
	open := &streams{now: p.opts.Now, viewers: map[string]*viewer{}}
	mux.HandleFunc("GET /stream", func(w http.ResponseWriter, r *http.Request) {
		sctx, done, ref := open.admit(ctx, viewerOf(w, r))
		if ref != nil {
			p.log.Warn("stream refused", "status", ref.status, "message", ref.message)
			w.Header().Set("Retry-After", strconv.Itoa(RetryAfter))
			http.Error(w, ref.message, ref.status)
			return
		}
		defer done()
		p.stream(sctx, w, r)
	})
	mux.Handle("GET /", http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// The page names no other origin: everything it loads comes from here.
		w.Header().Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self'; script-src 'self'; connect-src 'self'")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		viewerOf(w, r) // the page's tabs share one viewer, and its bound
		files.ServeHTTP(w, r)
	}))
	return mux
}

// stream sends the state, then every change, until the client goes or ctx ends. Changes that
// arrive while a message is written are sent together as the state after them: a slow browser
// gets fewer, newer messages, never a backlog.
func (p *Page) stream(ctx context.Context, w http.ResponseWriter, r *http.Request) {
	rc := http.NewResponseController(w)
	w.Header().Set("Content-Type", "text/event-stream")
	w.Header().Set("Cache-Control", "no-store")
	w.Header().Set("X-Accel-Buffering", "no") // nginx-style proxies: do not buffer the stream
	w.WriteHeader(http.StatusOK)
	p.clients.Inc()
	defer p.clients.Dec()

	var scoresVer, placeVer, lastSeq uint64
	first := true
	beat := time.NewTicker(heartbeat)
	defer beat.Stop()
	for {
		p.mu.Lock()
		changed := p.changed
		var msgs []sseMessage
		sv, pv := p.scoresVer, p.placeVer
		if first || sv != scoresVer || pv != placeVer {
			v := p.scoresViewLocked()
			if first || sv != scoresVer {
				msgs = append(msgs, sseMessage{"scores", v})
			}
			// A Placement's explanation reads the scores: it changes with them.
			msgs = append(msgs, sseMessage{"placements", p.placementsViewLocked(v)})
		}
		if first || p.seq != lastSeq {
			evs := []EventView{}
			for _, e := range p.events {
				if e.Seq > lastSeq {
					evs = append(evs, e)
				}
			}
			msgs = append(msgs, sseMessage{"events", evs})
		}
		scoresVer, placeVer, lastSeq = sv, pv, p.seq
		p.mu.Unlock()
		first = false
		for _, m := range msgs {
			if err := m.write(w); err != nil {
				return
			}
		}
		if len(msgs) > 0 {
			if err := rc.Flush(); err != nil {
				return
			}
		}
		select {
		case <-changed:
		case <-beat.C:
			if _, err := fmt.Fprint(w, ": keep-alive\n\n"); err != nil || rc.Flush() != nil {
				return
			}
		case <-r.Context().Done():
			return
		case <-ctx.Done():
			return
		}
	}
}

type sseMessage struct {
	event string
	data  any
}

func (m sseMessage) write(w http.ResponseWriter) error {
	b, err := json.Marshal(m.data)
	if err != nil {
		return err
	}
	// JSON has no raw newlines, so the data fits one data: line.
	_, err = fmt.Fprintf(w, "event: %s\ndata: %s\n\n", m.event, b)
	return err
}

func sortedKeys[V any](m map[string]V) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// Path is where the page is served beside a function's CloudEvents receiver.
const Path = "/ui/"

// Mux serves the page at Path and everything else with cloudEvents (a function's receiver with
// /healthz, /readyz and /metrics). A browser opening / is sent to the page.
func (p *Page) Mux(ctx context.Context, cloudEvents http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle(Path, http.StripPrefix(Path[:len(Path)-1], p.UI(ctx)))
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, Path, http.StatusFound)
	})
	mux.Handle("/", cloudEvents)
	return mux
}
