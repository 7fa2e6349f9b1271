package function_test

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"os"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/function"
)

// closedWithin reads c until the server closes it and returns how long that took from start, or
// fails when it is still open after limit.
func closedWithin(t *testing.T, c net.Conn, start time.Time, limit time.Duration) time.Duration {
	t.Helper()
	_ = c.SetReadDeadline(start.Add(limit))
	_, err := io.Copy(io.Discard, c)
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		t.Fatalf("the connection is still open after %s", limit)
	}
	return time.Since(start)
}

// Connections that do nothing are closed, whoever opened them: an unauthenticated caller's
// keep-alive connection within IdleTimeout of its last answer, and a request whose body never
// finishes (to any route, not only the CloudEvents receiver) within ReadTimeout.
func TestIdleAndSlowConnectionsAreClosed(t *testing.T) {
	t.Run("idle after a refusal", func(t *testing.T) {
		t.Parallel()
		fn := function.New("test", "test")
		// The token is never verified: a request without one is refused before.
		a, err := function.NewAuthenticator(function.AuthOptions{Audience: "a", Subjects: []string{"system:serviceaccount:x:y"}, DiscoveryURL: "https://127.0.0.1:1"})
		if err != nil {
			t.Fatal(err)
		}
		fn.RequireAuth(a)
		url := serve(t, fn, fn.Handler(func(context.Context, event.Event) function.Response { return function.Response{} }, nil))
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprint(c, "POST / HTTP/1.1\r\nHost: x\r\nCe-Specversion: 1.0\r\nCe-Id: 1\r\nCe-Source: s\r\nCe-Type: t\r\nContent-Length: 2\r\n\r\n{}")
		br := bufio.NewReader(c)
		resp, err := http.ReadResponse(br, nil)
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusUnauthorized || resp.Close {
			t.Fatalf("got %d (close %v), want 401 on a connection kept alive", resp.StatusCode, resp.Close)
		}
		d := closedWithin(t, c, time.Now(), function.IdleTimeout+5*time.Second)
		t.Logf("idle connection closed after %s", d.Round(time.Millisecond))
		if d < function.IdleTimeout-time.Second {
			t.Errorf("closed after %s, before IdleTimeout (%s): the test proves nothing", d, function.IdleTimeout)
		}
	})
	t.Run("a body that never finishes", func(t *testing.T) {
		t.Parallel()
		fn := function.New("test", "test")
		url := serve(t, fn, fn.Mux(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
			_, _ = io.Copy(io.Discard, r.Body)
		})))
		c, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		start := time.Now()
		fmt.Fprint(c, "POST /anything HTTP/1.1\r\nHost: x\r\nContent-Length: 100\r\n\r\n{")
		d := closedWithin(t, c, start, function.ReadTimeout+5*time.Second)
		t.Logf("slow body's connection closed after %s", d.Round(time.Millisecond))
	})
}

// At most --max-connections are served at once: one more waits to be accepted until another
// closes.
func TestConnectionsAreBounded(t *testing.T) {
	fn := function.New("test", "test")
	if err := fn.Parse([]string{"--max-connections", "2"}); err != nil {
		t.Fatal(err)
	}
	url := serve(t, fn, fn.Mux(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {})))
	addr := strings.TrimPrefix(url, "http://")
	get := func(c net.Conn) error {
		_ = c.SetDeadline(time.Now().Add(time.Second))
		fmt.Fprint(c, "GET /x HTTP/1.1\r\nHost: x\r\n\r\n")
		resp, err := http.ReadResponse(bufio.NewReader(c), nil)
		if err == nil {
			resp.Body.Close()
		}
		return err
	}
	var open []net.Conn
	for range 3 {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		open = append(open, c)
	}
	for i, c := range open[:2] {
		if err := get(c); err != nil {
			t.Fatalf("connection %d of 2: %v", i+1, err)
		}
	}
	if err := get(open[2]); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("a third connection while 2 are open: %v, want no answer", err)
	}
	// The waiting connection is served once another closes: its request, sent already, is
	// answered.
	open[0].Close()
	_ = open[2].SetDeadline(time.Now().Add(time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(open[2]), nil)
	if err != nil {
		t.Fatalf("the third connection after one of the 2 closed: %v", err)
	}
	resp.Body.Close()
}
