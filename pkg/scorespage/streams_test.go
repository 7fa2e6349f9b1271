package scorespage

import (
	"bufio"
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// liveStream is one open /ui/stream: admitted once its first message arrived; ended is closed
// when the server ends it.
type liveStream struct {
	ended chan struct{}
}

// openStreamFrom opens the page's stream from local address ip (127.0.0.0/8 all reach a loopback
// server) and waits for its first message.
func openStreamFrom(t *testing.T, url, ip string) *liveStream {
	t.Helper()
	d := &net.Dialer{LocalAddr: &net.TCPAddr{IP: net.ParseIP(ip)}}
	client := &http.Client{Transport: &http.Transport{DialContext: d.DialContext}}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/ui/stream", nil)
	resp, err := client.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		t.Fatalf("stream from %s: %d", ip, resp.StatusCode)
	}
	first := make(chan bool, 1)
	s := &liveStream{ended: make(chan struct{})}
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
			t.Fatalf("stream from %s ended before its first message", ip)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("stream from %s: no first message within 5s", ip)
	}
	return s
}

func (s *liveStream) endsWithin(d time.Duration) bool {
	select {
	case <-s.ended:
		return true
	case <-time.After(d):
		return false
	}
}

// Idle streams never lock a newcomer out of the page: a client's stream beyond
// MaxStreamsPerClient ends that client's oldest, and once MaxStreams are open a new client's
// stream ends the oldest of all. Each admitted stream starts with the whole state.
func TestIdleStreamsDoNotLockOthersOut(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	p := New(nil, Options{})
	srv := httptest.NewServer(p.Mux(ctx, http.NotFoundHandler()))
	// Ending the page's context ends the streams, which the server's Close waits for.
	defer srv.Close()
	defer cancel()

	var first []*liveStream
	for range MaxStreamsPerClient {
		first = append(first, openStreamFrom(t, srv.URL, "127.0.0.1"))
	}
	openStreamFrom(t, srv.URL, "127.0.0.1")
	if !first[0].endsWithin(2 * time.Second) {
		t.Fatalf("a client's stream beyond %d did not end its oldest", MaxStreamsPerClient)
	}
	if first[1].endsWithin(100 * time.Millisecond) {
		t.Fatal("a stream other than the client's oldest ended")
	}

	// Other clients fill the page up to MaxStreams.
	for c := 2; (c-1)*MaxStreamsPerClient < MaxStreams; c++ {
		for range MaxStreamsPerClient {
			openStreamFrom(t, srv.URL, fmt.Sprintf("127.0.0.%d", c))
		}
	}
	openStreamFrom(t, srv.URL, "127.0.0.9")
	if !first[1].endsWithin(2 * time.Second) {
		t.Fatalf("with %d streams open, a new client's stream did not end the oldest", MaxStreams)
	}
	if first[2].endsWithin(100 * time.Millisecond) {
		t.Fatal("more than the oldest stream ended")
	}
}
