package function

import (
	"context"
	"encoding/json"
	"fmt"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// Sender posts events to a sink: the broker, or whatever a SinkBinding put in K_SINK.
type Sender struct {
	client    cloudevents.Client
	target    string
	overrides map[string]any
	retries   int
}

// NewSender sends to sink. ceOverrides is K_CE_OVERRIDES ({"extensions":{...}}), set by a
// SinkBinding; its extensions are added to every event sent.
func NewSender(sink, ceOverrides string) (*Sender, error) {
	if sink == "" {
		return nil, fmt.Errorf("no sink: set --sink or K_SINK (a SinkBinding sets it)")
	}
	p, err := cehttp.New(cehttp.WithTarget(sink))
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", sink, err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		return nil, err
	}
	s := &Sender{client: c, target: sink, retries: 5}
	if ceOverrides != "" {
		var o struct {
			Extensions map[string]any `json:"extensions"`
		}
		if err := json.Unmarshal([]byte(ceOverrides), &o); err != nil {
			return nil, fmt.Errorf("K_CE_OVERRIDES: %w", err)
		}
		s.overrides = o.Extensions
	}
	return s, nil
}

// Send delivers e, retrying network errors and 5xx/429 answers with exponential backoff.
func (s *Sender) Send(ctx context.Context, e event.Event) error {
	for k, v := range s.overrides {
		e.SetExtension(k, v)
	}
	ctx = cloudevents.ContextWithRetriesExponentialBackoff(ctx, 50*time.Millisecond, s.retries)
	res := s.client.Send(ctx, e)
	if cloudevents.IsUndelivered(res) {
		return fmt.Errorf("send %s to %s: %w", e.Type(), s.target, res)
	}
	var httpRes *cehttp.Result
	if cloudevents.ResultAs(res, &httpRes) && httpRes.StatusCode >= 300 {
		return fmt.Errorf("send %s to %s: HTTP %d", e.Type(), s.target, httpRes.StatusCode)
	}
	return nil
}
