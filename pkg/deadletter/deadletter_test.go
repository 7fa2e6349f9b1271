package deadletter

import (
	"encoding/base64"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// startFunction serves the dead-letter function as functions/dead-letter's main does, sending to sink, and returns its URL.
func startFunction(t *testing.T, sink string) string {
	t.Helper()
	fn := function.New("dead-letter", "test")
	s, err := function.NewSender(sink, `{"extensions":{"origin":"local"}}`)
	if err != nil {
		t.Fatal(err)
	}
	return functest.Serve(t, fn, New(fn.Source(), s, fn.Log, fn.Registry).Handle)
}

func deadLettered(typ, data string, ext map[string]string) event.Event {
	e := cloudevents.NewEvent()
	e.SetID("orig-1")
	e.SetSource("scoreflow/promql-scorer")
	e.SetType(typ)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, []byte(data))
	for k, v := range ext {
		e.SetExtension(k, v)
	}
	return e
}

func b64(s string) string { return base64.StdEncoding.EncodeToString([]byte(s)) }

// TestReports posts dead-lettered events to the function over HTTP and checks the write.failed
// it sends to the broker.
func TestReports(t *testing.T) {
	knative := func(code, data string) map[string]string {
		return map[string]string{extErrorDest: "http://score-writer.scoreflow.svc.cluster.local", extErrorCode: code, extErrorData: data}
	}
	tests := []struct {
		name         string
		event        event.Event
		wantResource string
		wantMessage  string
	}{
		{"score.updated", deadLettered(contract.TypeScoreUpdated, `{"resource":"cpu-idle","items":[]}`, knative("503", b64("hub unavailable\n"))),
			"cpu-idle", "delivery to http://score-writer.scoreflow.svc.cluster.local failed with HTTP 503: hub unavailable"},
		{"invalid score.updated", deadLettered(contract.TypeScoreUpdated, `{"resource":"Not A Name"}`, knative("400", "")),
			"", "delivery to http://score-writer.scoreflow.svc.cluster.local failed with HTTP 400"},
		{"metric.changed", deadLettered(contract.TypeMetricChanged, `{"resource":"cpu-idle"}`, knative("500", b64("dispatch error: connection refused"))),
			"", "failed with HTTP 500: dispatch error: connection refused"},
		{"error data not base64", deadLettered(contract.TypePing, `{}`, knative("502", "not base64!")),
			"", "failed with HTTP 502: not base64!"},
		{"no broker extensions", deadLettered(contract.TypePing, `{}`, nil),
			"", "dead-lettered without the broker's knativeerror* extensions"},
		// The writer refused every item (422) with its own write.failed: its reason is carried over.
		{"refused with a scoreflow answer", deadLettered(contract.TypeScoreUpdated, `{"resource":"cpu-idle"}`, knative("422",
			b64(`{"input":{"source":"scoreflow/promql-scorer","id":"orig-1"},"resource":"cpu-idle","items":[{"cluster":"c3","outcome":"Failed","reason":"OutOfRange","message":"150 is outside [-100, 100]"}]}`))),
			"cpu-idle", "failed with HTTP 422: refused: OutOfRange: 150 is outside [-100, 100]"},
		// An answer about another event is not this event's refusal.
		{"answer about another event", deadLettered(contract.TypeScoreUpdated, `{"resource":"cpu-idle"}`, knative("422",
			b64(`{"input":{"source":"x","id":"other"},"reason":"OutOfRange","message":"m"}`))),
			"cpu-idle", `failed with HTTP 422: {"input":{"source":"x","id":"other"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			broker := functest.NewSink(t, nil)
			url := startFunction(t, broker.URL)
			if code, _ := functest.Send(t, url, tt.event); code != http.StatusAccepted {
				t.Fatalf("function answered %d, want 202", code)
			}
			got := broker.Take()
			if len(got) != 1 {
				t.Fatalf("broker got %d events, want 1", len(got))
			}
			out := got[0]
			if out.Type() != contract.TypeWriteFailed || out.Source() != "scoreflow/dead-letter" || out.Extensions()["origin"] != "local" {
				t.Errorf("sent %s from %s with %v, want write.failed from scoreflow/dead-letter with the K_CE_OVERRIDES extension", out.Type(), out.Source(), out.Extensions())
			}
			r, err := contract.DecodeWriteResult(&out)
			if err != nil {
				t.Fatalf("write.failed data: %v", err)
			}
			wantInput := contract.EventRef{Source: "scoreflow/promql-scorer", ID: "orig-1", Type: tt.event.Type()}
			if r.Input != wantInput || r.Reason != contract.ReasonDeadLettered || r.Retriable || r.Resource != tt.wantResource {
				t.Errorf("result %+v, want input %+v, DeadLettered, not retriable, resource %q", r, wantInput, tt.wantResource)
			}
			if !strings.Contains(r.Message, tt.wantMessage) {
				t.Errorf("message %q, want it to contain %q", r.Message, tt.wantMessage)
			}
		})
	}
}

// answering is the URL of a broker that answers every event with status.
func answering(t *testing.T, status int) string {
	s := functest.NewSink(t, nil)
	s.Answer(status)
	return s.URL
}

// TestBrokerUnreachable: when the report cannot be sent, the function answers 5xx so that the
// broker retries the dead-letter delivery instead of losing the event.
func TestBrokerUnreachable(t *testing.T) {
	tests := []struct {
		name string
		sink func(t *testing.T) string
	}{
		{"broker down", func(t *testing.T) string { s := functest.NewSink(t, nil); s.Close(); return s.URL }},
		{"broker answers 503", func(t *testing.T) string { return answering(t, http.StatusServiceUnavailable) }},
		{"broker refuses", func(t *testing.T) string { return answering(t, http.StatusBadRequest) }},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel() // each waits out the sender's retries
			url := startFunction(t, tt.sink(t))
			e := deadLettered(contract.TypeScoreUpdated, `{"resource":"cpu-idle"}`, map[string]string{extErrorCode: "500"})
			if code, _ := functest.Send(t, url, e); code < 500 {
				t.Errorf("function answered %d, want 5xx", code)
			}
		})
	}
}

// TestOwnReportNotRepeated: a write.failed this function sent, dead-lettered in turn, is not
// reported again, so reports cannot loop.
func TestOwnReportNotRepeated(t *testing.T) {
	broker := functest.NewSink(t, nil)
	url := startFunction(t, broker.URL)
	own := contract.NewWriteResult("scoreflow/dead-letter", contract.WriteResult{Input: contract.EventRef{Source: "s", ID: "1"}, Reason: contract.ReasonDeadLettered})
	own.SetExtension(extErrorCode, "503")
	if code, _ := functest.Send(t, url, own); code != http.StatusAccepted {
		t.Fatalf("function answered %d, want 202", code)
	}
	writer := contract.NewWriteResult("scoreflow/score-writer", contract.WriteResult{Input: contract.EventRef{Source: "s", ID: "1"}, Reason: contract.ReasonForbidden})
	if code, _ := functest.Send(t, url, writer); code != http.StatusAccepted {
		t.Fatalf("function answered %d, want 202", code)
	}
	got := broker.Take()
	if len(got) != 1 || got[0].Source() != "scoreflow/dead-letter" {
		t.Fatalf("broker got %d events, want one report, for the score-writer's write.failed only", len(got))
	}
	if r, _ := contract.DecodeWriteResult(&got[0]); r == nil || r.Input.Source != "scoreflow/score-writer" {
		t.Errorf("report %+v, want one about the score-writer's event", r)
	}
}

// TestReportsAreBounded: whatever a sender puts in the broker's extensions (a dead-letter sink can
// be posted to directly), the report it makes the function send stays small.
func TestReportsAreBounded(t *testing.T) {
	var items []string
	for i := range 2000 {
		items = append(items, fmt.Sprintf(`{"cluster":"c%d","outcome":"Failed","reason":"OutOfRange","message":"%s"}`, i, strings.Repeat("m", 10)))
	}
	answer := `{"input":{"source":"scoreflow/promql-scorer","id":"orig-1"},"resource":"cpu-idle","items":[` + strings.Join(items, ",") + `]}`
	for name, ext := range map[string]map[string]string{
		"long error data": {extErrorDest: strings.Repeat("d", 20000), extErrorCode: "500", extErrorData: b64(strings.Repeat("x", 30000))},
		"many items":      {extErrorDest: "http://score-writer", extErrorCode: "422", extErrorData: b64(answer)},
	} {
		t.Run(name, func(t *testing.T) {
			broker := functest.NewSink(t, nil)
			url := startFunction(t, broker.URL)
			if code, _ := functest.Send(t, url, deadLettered(contract.TypeScoreUpdated, `{"resource":"cpu-idle"}`, ext)); code != http.StatusAccepted {
				t.Fatalf("function answered %d, want 202", code)
			}
			got := broker.Take()
			if len(got) != 1 {
				t.Fatalf("broker got %d events, want 1", len(got))
			}
			r, err := contract.DecodeWriteResult(&got[0])
			if err != nil {
				t.Fatal(err)
			}
			if len(r.Message) > maxMessage || len(r.Items) > maxItems || len(got[0].Data()) > 8<<10 {
				t.Errorf("report of %d bytes: message %d bytes, %d items; want at most %d bytes and %d items", len(got[0].Data()), len(r.Message), len(r.Items), maxMessage, maxItems)
			}
		})
	}
}
