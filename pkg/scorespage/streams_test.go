package scorespage

import (
	"bufio"
	"context"
	"net/http"
	"net/http/cookiejar"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"
)

// liveStream is one open /ui/stream: admitted once its first message arrived; ended is closed
// when the server ends it. close ends it from the client's side.
type liveStream struct {
	ended chan struct{}
	close context.CancelFunc
}

// openStream opens the page's stream with client and, if admitted, waits for its first message.
// It returns the stream (nil if refused) and the status.
func openStream(t *testing.T, client *http.Client, url string) (*liveStream, int) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/ui/stream", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		if resp.Header.Get("Retry-After") == "" {
			t.Errorf("a refused stream (%d) without Retry-After", resp.StatusCode)
		}
		return nil, resp.StatusCode
	}
	first := make(chan bool, 1)
	s := &liveStream{ended: make(chan struct{}), close: cancel}
	go func() {
		defer close(s.ended)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		sent := false
		for sc.Scan() {
			if !sent && strings.HasPrefix(sc.Text(), "event: scores") {
				first <- true
				sent = true
			}
		}
		if !sent {
			first <- false
		}
	}()
	select {
	case ok := <-first:
		if !ok {
			t.Fatal("a stream ended before its first message")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("a stream sent no first message within 5s")
	}
	return s, http.StatusOK
}

func (s *liveStream) endsWithin(d time.Duration) bool {
	select {
	case <-s.ended:
		return true
	case <-time.After(d):
		return false
	}
}

// browser is a viewer's browser: it loads the page (which gives it its viewer cookie) and keeps its cookies.
func browser(t *testing.T, url string) *http.Client {
	t.Helper()
	jar, _ := cookiejar.New(nil)
	c := &http.Client{Jar: jar, Transport: &http.Transport{}}
	resp, err := c.Get(url + "/ui/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK || len(jar.Cookies(resp.Request.URL)) != 1 {
		t.Fatalf("loading the page: %d, cookies %v; want 200 and the viewer cookie", resp.StatusCode, jar.Cookies(resp.Request.URL))
	}
	return c
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) Now() time.Time { c.mu.Lock(); defer c.mu.Unlock(); return c.t }
func (c *fakeClock) Add(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
}

// One client opening stream after stream, from the same address as everyone (behind Knative's
// queue-proxy all viewers share one) and without keeping a cookie (a new viewer each time), takes
// only the free places: a viewer watching the page keeps its stream throughout and gets its place
// back when it reconnects, even while the page is full; a newcomer waits (503) until places free
// up. One browser's tabs get at most MaxStreamsPerViewer streams (429 beyond), and its earlier
// ones stay open.
func TestOneClientCannotLockOthersOut(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	clock := &fakeClock{t: time.Now()}
	p := New(nil, Options{Now: clock.Now})
	srv := httptest.NewServer(p.Mux(ctx, http.NotFoundHandler()))
	// Ending the page's context ends the streams, which the server's Close waits for.
	defer srv.Close()
	defer cancel()

	alice := browser(t, srv.URL)
	watching, _ := openStream(t, alice, srv.URL)
	if watching == nil {
		t.Fatal("alice's stream was refused on an empty page")
	}

	// The flood: 5*MaxStreams streams, every other one dropped at once.
	flood := &http.Client{Transport: &http.Transport{}}
	admitted, refused := 0, 0
	for i := range 5 * MaxStreams {
		s, st := openStream(t, flood, srv.URL)
		switch {
		case st == http.StatusOK:
			admitted++
			if i%2 == 0 {
				s.close()
			}
		case st == http.StatusServiceUnavailable:
			refused++
		default:
			t.Fatalf("flood stream %d: %d, want 200 or 503", i, st)
		}
	}
	if admitted != MaxStreams-1 || refused != 4*MaxStreams+1 {
		t.Errorf("the flood got %d streams and %d refusals, want %d and %d: every free place, no more", admitted, refused, MaxStreams-1, 4*MaxStreams+1)
	}
	if watching.endsWithin(200 * time.Millisecond) {
		t.Fatal("alice's stream ended during the flood")
	}

	// Alice reloads: her place is kept for her while the page is full. (Her new stream may
	// arrive before the server saw the old one go, as in a browser; she then retries.)
	watching.close()
	var back *liveStream
	for deadline := time.Now().Add(5 * time.Second); back == nil && time.Now().Before(deadline); {
		if back, _ = openStream(t, alice, srv.URL); back == nil {
			time.Sleep(50 * time.Millisecond)
		}
	}
	if back == nil {
		t.Fatal("alice could not reconnect to her kept place while the page was full")
	}
	// A newcomer waits while the page is full, and gets in once the flood's dropped streams have
	// given their kept places back.
	bob := browser(t, srv.URL)
	if _, st := openStream(t, bob, srv.URL); st != http.StatusServiceUnavailable {
		t.Errorf("a newcomer on a full page: %d, want 503", st)
	}
	clock.Add(KeepPlace)
	if s, st := openStream(t, bob, srv.URL); s == nil {
		t.Errorf("a newcomer after the flood's dropped streams' places lapsed: %d, want 200", st)
	}

	// Alice's tabs: MaxStreamsPerViewer in all, the next refused 429 with her others still open.
	clock.Add(KeepPlace) // the flood's streams dropped since
	tabs := []*liveStream{back}
	for len(tabs) < MaxStreamsPerViewer {
		s, st := openStream(t, alice, srv.URL)
		if s == nil {
			t.Fatalf("alice's tab %d: %d, want 200", len(tabs)+1, st)
		}
		tabs = append(tabs, s)
	}
	if _, st := openStream(t, alice, srv.URL); st != http.StatusTooManyRequests {
		t.Errorf("alice's tab %d: %d, want 429", MaxStreamsPerViewer+1, st)
	}
	for i, s := range tabs {
		if s.endsWithin(20 * time.Millisecond) {
			t.Errorf("alice's tab %d ended", i+1)
		}
	}
}

// The viewer cookie the page issues is the one its streams count by; a stream that comes without
// one, or with one the page could not have issued, is given a new one.
func TestViewerCookie(t *testing.T) {
	rec := httptest.NewRecorder()
	id := viewerOf(rec, httptest.NewRequest(http.MethodGet, "/ui/stream", nil))
	c := rec.Result().Cookies()
	if len(c) != 1 || c[0].Name != viewerCookie || c[0].Value != id || !c[0].HttpOnly || c[0].SameSite != http.SameSiteStrictMode || len(id) != 22 {
		t.Fatalf("a request without a cookie: id %q, cookies %+v", id, c)
	}
	again := httptest.NewRequest(http.MethodGet, "/ui/stream", nil)
	again.AddCookie(c[0])
	rec = httptest.NewRecorder()
	if got := viewerOf(rec, again); got != id || len(rec.Result().Cookies()) != 0 {
		t.Errorf("with its cookie: %q (set %v), want %q and nothing set", got, rec.Result().Cookies(), id)
	}
	forged := httptest.NewRequest(http.MethodGet, "/ui/stream", nil)
	forged.AddCookie(&http.Cookie{Name: viewerCookie, Value: strings.Repeat("x", 5000)})
	rec = httptest.NewRecorder()
	if got := viewerOf(rec, forged); len(got) != 22 || len(rec.Result().Cookies()) != 1 {
		t.Errorf("with a cookie the page could not have issued: %q, set %v; want a new one", got, rec.Result().Cookies())
	}
}
