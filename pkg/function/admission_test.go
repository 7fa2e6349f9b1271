package function

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// Senders that declare the largest bodies and then stall must not hold the in-flight budget for
// good: their bodies time out, and meanwhile other requests are answered (503 busy at worst).
func TestStalledSendersDoNotBlockOthers(t *testing.T) {
	admissionWait, bodyReadTimeout = 300*time.Millisecond, time.Second
	t.Cleanup(func() { admissionWait, bodyReadTimeout = 10*time.Second, 30*time.Second })

	fn := New("test", "test")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- fn.ServeListener(ctx, ln, fn.Handler(func(context.Context, event.Event) Response { return Response{Status: http.StatusAccepted} }, nil))
	}()
	t.Cleanup(func() { cancel(); <-done })
	url := "http://" + ln.Addr().String()

	// Enough stalled senders to take the whole budget.
	for i := int64(0); i < MaxBodyBytesInFlight/MaxBodyBytes; i++ {
		c, err := net.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nCe-Specversion: 1.0\r\nCe-Id: stall-%d\r\nCe-Source: s\r\nCe-Type: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n{", i, MaxBodyBytes)
	}
	time.Sleep(100 * time.Millisecond)

	send := func() int {
		e := cloudevents.NewEvent()
		e.SetID("small")
		e.SetSource("s")
		e.SetType("t")
		_ = e.SetData(cloudevents.ApplicationJSON, map[string]int{"a": 1})
		req, _ := http.NewRequest(http.MethodPost, url, nil)
		if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
			t.Fatal(err)
		}
		client := &http.Client{Timeout: 5 * time.Second}
		resp, err := client.Do(req)
		if err != nil {
			t.Fatalf("a small event was not answered while others stall: %v", err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if status := send(); status != http.StatusServiceUnavailable && status != http.StatusAccepted {
		t.Errorf("while the budget is taken: status %d, want 503 busy (or 202)", status)
	}
	time.Sleep(bodyReadTimeout + 500*time.Millisecond) // the stalled bodies time out
	if status := send(); status != http.StatusAccepted {
		t.Errorf("after the stalled bodies timed out: status %d, want 202", status)
	}
}

// A caller's requests whose bodies never finish hold only that caller's share of the admission
// budget, however many it opens: another caller's events are admitted at once. Without
// authentication a caller is its remote address (the stalling one dials from 127.0.0.2).
func TestAStallingCallerHoldsOnlyItsShare(t *testing.T) {
	fn := New("test", "test")
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() {
		done <- fn.ServeListener(ctx, ln, fn.Handler(func(context.Context, event.Event) Response { return Response{Status: http.StatusAccepted} }, nil))
	}()
	t.Cleanup(func() { cancel(); <-done })

	// Unfinished chunked bodies, each weighed as the largest body: twice what the whole budget
	// holds.
	stalled := int64(2 * MaxBodyBytesInFlight / MaxBodyBytes)
	dialer := net.Dialer{LocalAddr: &net.TCPAddr{IP: net.IPv4(127, 0, 0, 2)}}
	for i := int64(0); i < stalled; i++ {
		c, err := dialer.Dial("tcp", ln.Addr().String())
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nCe-Specversion: 1.0\r\nCe-Id: stall-%d\r\nCe-Source: s\r\nCe-Type: t\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", i)
	}
	time.Sleep(200 * time.Millisecond)

	for i := range 3 {
		e := cloudevents.NewEvent()
		e.SetID(fmt.Sprintf("other-%d", i))
		e.SetSource("s")
		e.SetType("t")
		_ = e.SetData(cloudevents.ApplicationJSON, map[string]int{"a": 1})
		req, _ := http.NewRequest(http.MethodPost, "http://"+ln.Addr().String(), nil)
		if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := (&http.Client{Timeout: 5 * time.Second}).Do(req)
		if err != nil {
			t.Fatalf("another caller's event while one stalls %d requests: %v", stalled, err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusAccepted || time.Since(start) > time.Second {
			t.Errorf("another caller's event while one stalls %d requests: %d after %s, want 202 at once", stalled, resp.StatusCode, time.Since(start).Round(time.Millisecond))
		}
	}
}
