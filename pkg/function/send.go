package function

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
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
	backoff   time.Duration
}

// NewSender sends to sink. ceOverrides is K_CE_OVERRIDES ({"extensions":{...}}), set by a
// SinkBinding; its extensions are added to every event sent.
func NewSender(sink, ceOverrides string) (*Sender, error) {
	return NewSenderWithToken(sink, ceOverrides, SinkTokenFile)
}

// NewSenderWithToken is NewSender presenting the token in tokenFile, when it exists, as the
// sender's identity (Knative's sender identity: a SinkBinding mounts it).
func NewSenderWithToken(sink, ceOverrides, tokenFile string) (*Sender, error) {
	if sink == "" {
		return nil, errors.New("no sink: set --sink or K_SINK (a SinkBinding sets it)")
	}
	transport, err := sinkTransport(tokenFile)
	if err != nil {
		return nil, err
	}
	p, err := cehttp.New(cehttp.WithTarget(sink), cehttp.WithIsRetriableFunc(Retriable), cehttp.WithRoundTripper(transport))
	if err != nil {
		return nil, fmt.Errorf("sink %q: %w", sink, err)
	}
	c, err := cloudevents.NewClient(p)
	if err != nil {
		return nil, err
	}
	s := &Sender{client: c, target: sink, retries: 5, backoff: 50 * time.Millisecond}
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

// Retriable reports the statuses a Knative broker itself retries: 5xx, 404, 408, 409 and 429.
// (sdk-go's default leaves out 500, 408 and 409.)
func Retriable(status int) bool {
	return status >= 500 || status == 404 || status == 408 || status == 409 || status == 429
}

// Send delivers e, retrying network errors and Retriable statuses with exponential backoff (5
// retries from 50ms) or until ctx ends. Only a 2xx answer is success.
func (s *Sender) Send(ctx context.Context, e event.Event) error {
	for k, v := range s.overrides {
		e.SetExtension(k, v)
	}
	res := s.client.Send(cloudevents.ContextWithRetriesExponentialBackoff(ctx, s.backoff, s.retries), e)
	if cloudevents.IsACK(res) {
		return nil
	}
	// With retries on, sdk-go wraps the last attempt in a RetriesResult, which is a NACK but is
	// neither "undelivered" nor unwrapped by errors.As: unwrap it by hand.
	var rr *cehttp.RetriesResult
	if errors.As(res, &rr) {
		res = rr.Result
	}
	var hr *cehttp.Result
	if errors.As(res, &hr) {
		return fmt.Errorf("send %s to %s: HTTP %d", e.Type(), s.target, hr.StatusCode)
	}
	return fmt.Errorf("send %s to %s: %w", e.Type(), s.target, res)
}

// SinkFlags registers --sink, --ce-overrides and --sink-token-file on f; the first two fall back to
// K_SINK and K_CE_OVERRIDES, which a SinkBinding injects. Call the returned function after Parse.
func (f *Function) SinkFlags() func() (*Sender, error) {
	sink := f.Flags.String("sink", "", "where to send events (default: $K_SINK, set by a SinkBinding)")
	overrides := f.Flags.String("ce-overrides", "", `CloudEvents overrides, {"extensions":{...}} (default: $K_CE_OVERRIDES, set by a SinkBinding)`)
	token := f.Flags.String("sink-token-file", SinkTokenFile, "bearer token presented to the sink, re-read per event: a SinkBinding's OIDC token, or a hub-issued token mounted from a Secret on a managed cluster (missing file: none)")
	return func() (*Sender, error) {
		return NewSenderWithToken(orEnv(*sink, "K_SINK"), orEnv(*overrides, "K_CE_OVERRIDES"), *token)
	}
}

func orEnv(v, env string) string {
	if v != "" {
		return v
	}
	return os.Getenv(env)
}

// OptionalSinkFlags is SinkFlags for a function that sends only now and then besides its replies
// (a scorer whose result needs more events than its one reply): with no sink configured the
// returned function gives a nil Sender and no error.
func (f *Function) OptionalSinkFlags() func() (*Sender, error) {
	newSender := f.SinkFlags()
	return func() (*Sender, error) {
		if orEnv(f.Flags.Lookup("sink").Value.String(), "K_SINK") == "" {
			return nil, nil
		}
		return newSender()
	}
}
