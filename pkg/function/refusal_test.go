package function_test

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// post sends e and returns the status, the raw body and the reply event decoded from it.
func post(t *testing.T, url string, e event.Event) (int, []byte, *event.Event) {
	t.Helper()
	resp, err := http.DefaultClient.Do(functest.Request(t, url, e))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	msg := cehttp.NewMessageFromHttpResponse(resp)
	if msg.ReadEncoding() == binding.EncodingUnknown {
		return resp.StatusCode, body, nil
	}
	reply, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		t.Fatalf("reply is not a CloudEvent: %v\n%s", err, body)
	}
	return resp.StatusCode, body, reply
}

func input() event.Event {
	e := cloudevents.NewEvent()
	e.SetID("in-1")
	e.SetSource("test/refusals")
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, map[string]string{})
	return e
}

func items(n int, outcome contract.Outcome, reasons []contract.Reason, retriable bool, msg string) []contract.ItemResult {
	out := make([]contract.ItemResult, n)
	for i := range out {
		out[i] = contract.ItemResult{Cluster: fmt.Sprintf("%s%05d", strings.Repeat("c", 58), i), Outcome: outcome,
			Reason: reasons[i%len(reasons)], Retriable: retriable, Message: msg}
	}
	return out
}

// Knative v0.50's dispatcher base64-encodes a refusal's body into a 1024-byte buffer when it
// dead-letters (pkg/kncloudevents/event_dispatcher.go) and panics over 768 bytes, taking the
// channel dispatcher down. Every non-2xx answer of every function stays under 700 bytes and is
// still a valid failure event with its reason; a 2xx answer keeps every detail.
func TestRefusalBodiesStaySmall(t *testing.T) {
	long := strings.Repeat("the hub said no and explained at length; ", 2500)
	longSource := "https://" + strings.Repeat("s", 10000)
	allReasons := []contract.Reason{contract.ReasonUnknownCluster, contract.ReasonInvalidScore, contract.ReasonOutOfRange,
		contract.ReasonForbidden, contract.ReasonRejected, contract.ReasonConflict, contract.ReasonUnavailable, contract.ReasonClusterNotAccepted}
	tests := []struct {
		name      string
		status    int
		reply     func(in contract.EventRef) event.Event
		reason    contract.Reason
		retriable bool
		failed    int // failed items the compact answer counts
	}{
		{name: "all 10,000 items refused", status: http.StatusUnprocessableEntity, reason: contract.ReasonUnknownCluster, failed: contract.MaxItems,
			reply: func(in contract.EventRef) event.Event {
				return contract.NewWriteResult("scoreflow/score-writer", contract.WriteResult{Input: in, Resource: strings.Repeat("r", 253),
					Items: items(contract.MaxItems, contract.OutcomeFailed, []contract.Reason{contract.ReasonUnknownCluster}, false, "no ManagedCluster named that")})
			}},
		{name: "every reason at once", status: http.StatusUnprocessableEntity, reason: contract.ReasonUnknownCluster, failed: contract.MaxItems,
			reply: func(in contract.EventRef) event.Event {
				return contract.NewWriteResult("scoreflow/score-writer", contract.WriteResult{Input: in, Resource: strings.Repeat("r", 253),
					Items: items(contract.MaxItems, contract.OutcomeFailed, allReasons, false, long[:300])})
			}},
		{name: "503 after retries, one Unavailable per cluster", status: http.StatusServiceUnavailable, reason: contract.ReasonUnavailable, retriable: true, failed: contract.MaxItems,
			reply: func(in contract.EventRef) event.Event {
				return contract.NewWriteResult("scoreflow/score-writer", contract.WriteResult{Input: in, Resource: "cpu",
					Items: items(contract.MaxItems, contract.OutcomeFailed, []contract.Reason{contract.ReasonUnavailable}, true, "Put \"https://hub:6443/apis/...\": dial tcp: connection refused")})
			}},
		{name: "very long message", status: http.StatusBadRequest, reason: contract.ReasonInvalidData,
			reply: func(in contract.EventRef) event.Event {
				return contract.NewWriteResult("scoreflow/score-writer", contract.WriteResult{Input: in, Reason: contract.ReasonInvalidData, Message: long})
			}},
		{name: "long source echoed", status: http.StatusBadRequest, reason: contract.ReasonInvalidData,
			reply: func(in contract.EventRef) event.Event {
				in.Source, in.ID = longSource, strings.Repeat("i", 5000)
				return contract.NewWriteResult(longSource, contract.WriteResult{Input: in, Resource: strings.Repeat("r", 253), Reason: contract.ReasonInvalidData, Message: long})
			}},
		{name: "score.failed quoting a whole query", status: http.StatusBadRequest, reason: contract.ReasonBadQuery,
			reply: func(in contract.EventRef) event.Event {
				return contract.NewFailure("scoreflow/promql-scorer", contract.Failure{Input: in, Reason: contract.ReasonBadQuery, Message: long})
			}},
		{name: "score.failed retriable, long source", status: http.StatusServiceUnavailable, reason: contract.ReasonMetricsUnavailable, retriable: true,
			reply: func(in contract.EventRef) event.Event {
				in.Source = longSource
				return contract.NewFailure("scoreflow/promql-scorer", contract.Failure{Input: in, Reason: contract.ReasonMetricsUnavailable, Retriable: true, Message: long})
			}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			fn := function.New("test", "test")
			url := functest.Serve(t, fn, func(_ context.Context, e event.Event) function.Response {
				r := tt.reply(function.Ref(&e))
				return function.Response{Status: tt.status, Event: &r}
			})
			status, body, reply := post(t, url, input())
			if status != tt.status {
				t.Fatalf("status %d, want %d", status, tt.status)
			}
			if len(body) >= 700 {
				t.Errorf("refusal body is %d bytes, want under 700", len(body))
			}
			if reply == nil || reply.Validate() != nil {
				t.Fatalf("reply is not a valid CloudEvent: %v", reply)
			}
			switch reply.Type() {
			case contract.TypeWriteFailed:
				r, err := contract.DecodeWriteResult(reply)
				if err != nil {
					t.Fatalf("write.failed does not decode: %v\n%s", err, body)
				}
				if r.Reason != tt.reason || r.AnyRetriable() != tt.retriable || r.Message == "" {
					t.Errorf("reason %q retriable %v message %q, want %s retriable %v and a message", r.Reason, r.AnyRetriable(), r.Message, tt.reason, tt.retriable)
				}
				if tt.failed > 0 && r.Counts[string(contract.OutcomeFailed)] != tt.failed {
					t.Errorf("counts %v, want %d failed", r.Counts, tt.failed)
				}
			case contract.TypeScoreFailed:
				f, err := contract.DecodeFailure(reply)
				if err != nil {
					t.Fatalf("score.failed does not decode: %v\n%s", err, body)
				}
				if f.Reason != tt.reason || f.Retriable != tt.retriable || f.Message == "" {
					t.Errorf("reason %q retriable %v message %q, want %s retriable %v", f.Reason, f.Retriable, f.Message, tt.reason, tt.retriable)
				}
			default:
				t.Fatalf("reply type %s", reply.Type())
			}
			t.Logf("%d bytes: %s", len(body), body)
		})
	}

	t.Run("2xx keeps every item", func(t *testing.T) {
		fn := function.New("test", "test")
		url := functest.Serve(t, fn, func(_ context.Context, e event.Event) function.Response {
			return function.Reply(contract.NewWriteResult("w", contract.WriteResult{Input: function.Ref(&e),
				Items: items(contract.MaxItems, contract.OutcomeFailed, []contract.Reason{contract.ReasonUnknownCluster}, false, "no")}))
		})
		status, _, reply := post(t, url, input())
		r, err := contract.DecodeWriteResult(reply)
		if status != http.StatusOK || err != nil || len(r.Items) != contract.MaxItems {
			t.Fatalf("status %d err %v: want 200 with all %d items", status, err, contract.MaxItems)
		}
	})

	t.Run("not a CloudEvent, huge content type", func(t *testing.T) {
		fn := function.New("test", "test")
		url := functest.Serve(t, fn, func(context.Context, event.Event) function.Response { return function.Response{} })
		req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader("{}"))
		req.Header.Set("Content-Type", "application/"+strings.Repeat("x", 20000))
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusBadRequest || len(body) >= 700 {
			t.Errorf("status %d, %d bytes: want 400 under 700 bytes", resp.StatusCode, len(body))
		}
	})

	t.Run("plain error bodies of any handler", func(t *testing.T) {
		fn := function.New("test", "test")
		fn.SetReadiness(func() error { return errors.New(long) })
		srv := serve(t, fn, fn.Mux(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
			http.Error(w, long, http.StatusBadGateway)
		})))
		for _, path := range []string{"/", "/readyz"} {
			resp, err := http.Get(srv + path)
			if err != nil {
				t.Fatal(err)
			}
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			if resp.StatusCode < 300 || len(body) >= 700 || len(body) == 0 {
				t.Errorf("%s: status %d, %d bytes: want a non-2xx body under 700 bytes", path, resp.StatusCode, len(body))
			}
		}
	})
}

// serve runs handler with the function's own server (ServeListener) on a loopback port.
func serve(t *testing.T, fn *function.Function, handler http.Handler) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- fn.ServeListener(ctx, ln, handler) }()
	t.Cleanup(func() {
		cancel()
		<-done
	})
	return "http://" + ln.Addr().String()
}

// The attributes a sender chooses are bounded before any handler sees them: the writer keys its
// redelivery memory by source and id, and every answer echoes them.
func TestOversizedAttributesAreRefused(t *testing.T) {
	fn := function.New("test", "test")
	called := 0
	url := functest.Serve(t, fn, func(context.Context, event.Event) function.Response {
		called++
		return function.Response{Status: http.StatusAccepted}
	})
	for _, attr := range []string{"source", "id", "type"} {
		t.Run(attr, func(t *testing.T) {
			e := input()
			big := strings.Repeat("x", 5000)
			switch attr {
			case "source":
				e.SetSource(big)
			case "id":
				e.SetID(big)
			case "type":
				e.SetType(big)
			}
			status, body, reply := post(t, url, e)
			if status != http.StatusBadRequest || reply == nil || len(body) >= 700 {
				t.Fatalf("status %d reply %v (%d bytes), want 400 with a failure under 700 bytes", status, reply, len(body))
			}
			f, err := contract.DecodeFailure(reply)
			if err != nil || f.Reason != contract.ReasonInvalidData || !strings.Contains(f.Message, attr) {
				t.Errorf("failure %+v (%v), want InvalidData naming %s", f, err, attr)
			}
		})
	}
	if called != 0 {
		t.Errorf("the handler saw %d oversized events", called)
	}
	e := input()
	e.SetSource(strings.Repeat("s", contract.MaxSourceLength))
	e.SetID(strings.Repeat("i", contract.MaxIDLength))
	if status, _, _ := post(t, url, e); status != http.StatusAccepted || called != 1 {
		t.Errorf("source and id at their limits: status %d, want 202", status)
	}
}

// An over-large body is refused from its Content-Length, before it is read: the sender need not
// even send it.
func TestOversizedBodyIsRefusedBeforeItIsRead(t *testing.T) {
	fn := function.New("test", "test")
	url := serve(t, fn, fn.Handler(func(context.Context, event.Event) function.Response {
		return function.Response{Status: http.StatusAccepted}
	}, nil))
	conn, err := net.Dial("tcp", strings.TrimPrefix(url, "http://"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	fmt.Fprintf(conn, "POST / HTTP/1.1\r\nHost: x\r\nCe-Specversion: 1.0\r\nCe-Id: 1\r\nCe-Source: s\r\nCe-Type: t\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n", function.MaxBodyBytes+1)
	_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("no answer before the body was sent: %v", err)
	}
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode != http.StatusRequestEntityTooLarge || len(body) >= 700 {
		t.Errorf("status %d (%d bytes), want 413 under 700 bytes", resp.StatusCode, len(body))
	}

	// Without a Content-Length (chunked), the limit applies while reading.
	req, _ := http.NewRequest(http.MethodPost, url, io.LimitReader(zeros{}, function.MaxBodyBytes+1))
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", "1")
	req.Header.Set("Ce-Source", "s")
	req.Header.Set("Ce-Type", "t")
	req.ContentLength = -1
	resp, err = http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestEntityTooLarge {
		t.Errorf("chunked: status %d, want 413", resp.StatusCode)
	}
}

type zeros struct{}

func (zeros) Read(p []byte) (int, error) {
	for i := range p {
		p[i] = ' '
	}
	return len(p), nil
}

// Headers are bounded well below Go's default 1 MiB.
func TestOversizedHeadersAreRefused(t *testing.T) {
	fn := function.New("test", "test")
	url := serve(t, fn, fn.Handler(func(context.Context, event.Event) function.Response {
		return function.Response{Status: http.StatusAccepted}
	}, nil))
	e := input()
	req := functest.Request(t, url, e)
	req.Header.Set("Ce-Padding", strings.Repeat("p", 200<<10))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("200 KiB of headers: status %d, want 431", resp.StatusCode)
	}
}
