package scorer

import (
	"context"
	"errors"
	"net/http"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

type cfg struct {
	Resource string `json:"resource"`
}

func (c *cfg) Validate() error {
	if c.Resource == "" {
		return errors.New("resource is required")
	}
	return nil
}

func ping(data string) event.Event {
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetSource("/apis/v1/namespaces/scoreflow/pingsources/p")
	e.SetType(contract.TypePing)
	_ = e.SetData(cloudevents.ApplicationJSON, []byte(data))
	return e
}

func TestHandler(t *testing.T) {
	h := Handler("scoreflow/test", Route{contract.TypePing: func(ctx context.Context, e event.Event) (*Result, error) {
		var c cfg
		if err := DecodeConfig(e, &c); err != nil {
			return nil, err
		}
		switch c.Resource {
		case "down":
			return nil, Fail(contract.ReasonMetricsUnavailable, true, errors.New("connection refused"))
		case "empty":
			return nil, nil
		case "bad-value":
			return &Result{Observed: time.Now(), Scores: contract.ScoreUpdated{Resource: c.Resource, Items: []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "a", Value: 500}}}}}}, nil
		}
		return &Result{Observed: time.Now(), Scores: contract.ScoreUpdated{Resource: c.Resource, Items: []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "a", Value: 5}}}}}}, nil
	}})
	tests := []struct {
		name      string
		in        event.Event
		status    int
		replyType string
		reason    contract.Reason
	}{
		{"scores", ping(`{"resource":"r"}`), http.StatusOK, contract.TypeScoreUpdated, ""},
		{"misspelt field", ping(`{"resourse":"r"}`), http.StatusBadRequest, contract.TypeScoreFailed, contract.ReasonBadConfig},
		{"invalid config", ping(`{}`), http.StatusBadRequest, contract.TypeScoreFailed, contract.ReasonBadConfig},
		{"prometheus down", ping(`{"resource":"down"}`), http.StatusServiceUnavailable, contract.TypeScoreFailed, contract.ReasonMetricsUnavailable},
		{"nothing to score", ping(`{"resource":"empty"}`), http.StatusAccepted, "", ""},
		{"scorer bug", ping(`{"resource":"bad-value"}`), http.StatusInternalServerError, contract.TypeScoreFailed, contract.ReasonInvalidData},
		{"wrong type", func() event.Event { e := ping(`{}`); e.SetType("x.y"); return e }(), http.StatusBadRequest, contract.TypeScoreFailed, contract.ReasonWrongType},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := h(context.Background(), tt.in)
			if r.Status != tt.status {
				t.Fatalf("status = %d, want %d", r.Status, tt.status)
			}
			if tt.replyType == "" {
				if r.Event != nil {
					t.Fatalf("reply %s, want none", r.Event.Type())
				}
				return
			}
			if r.Event == nil || r.Event.Type() != tt.replyType {
				t.Fatalf("reply = %v, want %s", r.Event, tt.replyType)
			}
			if tt.reason != "" {
				f, err := contract.DecodeFailure(r.Event)
				if err != nil || f.Reason != tt.reason || f.Input.ID != "1" {
					t.Fatalf("failure = %+v, %v; want reason %s for input 1", f, err, tt.reason)
				}
			}
		})
	}
}
