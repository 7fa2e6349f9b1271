package function

import (
	"context"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

func TestSender(t *testing.T) {
	closed := func() string {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		defer ln.Close()
		return "http://" + ln.Addr().String()
	}()
	tests := []struct {
		name     string
		answers  []int // per attempt; the last repeats
		down     bool
		errHas   string // "" means delivered
		attempts int32
	}{
		{name: "accepted", answers: []int{202}, attempts: 1},
		{name: "5xx then accepted", answers: []int{503, 500, 202}, attempts: 3},
		{name: "5xx throughout", answers: []int{503}, errHas: "HTTP 503", attempts: 6},
		{name: "refused: not retried", answers: []int{400}, errHas: "HTTP 400", attempts: 1},
		{name: "unreachable", down: true, errHas: "send io.scoreflow.metric.changed to " + closed},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var n atomic.Int32
			var gotExt atomic.Value
			srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
				if err != nil {
					t.Errorf("not a CloudEvent: %v", err)
				} else {
					gotExt.Store(e.Extensions()["sinkbinding"])
				}
				i := int(n.Add(1)) - 1
				w.WriteHeader(tt.answers[min(i, len(tt.answers)-1)])
			}))
			defer srv.Close()
			target := srv.URL
			if tt.down {
				target = closed
			}
			s, err := NewSender(target, overrides)
			if err != nil {
				t.Fatal(err)
			}
			s.backoff = time.Millisecond
			e := cloudevents.NewEvent()
			e.SetID("1")
			e.SetSource("test")
			e.SetType("io.scoreflow.metric.changed")
			err = s.Send(context.Background(), e)
			switch {
			case tt.errHas == "" && err != nil:
				t.Fatalf("err = %v, want delivered", err)
			case tt.errHas != "" && (err == nil || !strings.Contains(err.Error(), tt.errHas)):
				t.Fatalf("err = %v, want it to contain %q", err, tt.errHas)
			}
			if !tt.down {
				if got := n.Load(); got != tt.attempts {
					t.Errorf("attempts = %d, want %d", got, tt.attempts)
				}
				if ext := gotExt.Load(); ext != "metric-sources" {
					t.Errorf("K_CE_OVERRIDES extension = %v, want metric-sources", ext)
				}
			}
		})
	}
}

func TestNewSenderErrors(t *testing.T) {
	if _, err := NewSender("", ""); err == nil || !strings.Contains(err.Error(), "K_SINK") {
		t.Errorf("no target: err = %v, want it to name K_SINK", err)
	}
	if _, err := NewSender("http://x", "{not json"); err == nil || !strings.Contains(err.Error(), "K_CE_OVERRIDES") {
		t.Errorf("bad overrides: err = %v, want it to name K_CE_OVERRIDES", err)
	}
}

const overrides = `{"extensions":{"sinkbinding":"metric-sources"}}`

// An optional sink is nil when none is configured, and a Sender to it when one is.
func TestOptionalSinkFlags(t *testing.T) {
	t.Setenv("K_SINK", "")
	f := New("f", "test")
	newSink := f.OptionalSinkFlags()
	if err := f.Parse(nil); err != nil {
		t.Fatal(err)
	}
	if s, err := newSink(); s != nil || err != nil {
		t.Fatalf("no sink configured: %v, %v; want nil, nil", s, err)
	}
	f = New("f", "test")
	newSink = f.OptionalSinkFlags()
	if err := f.Parse([]string{"--sink", "http://127.0.0.1:1/"}); err != nil {
		t.Fatal(err)
	}
	if s, err := newSink(); s == nil || err != nil || s.target != "http://127.0.0.1:1/" {
		t.Fatalf("--sink given: %+v, %v", s, err)
	}
}
