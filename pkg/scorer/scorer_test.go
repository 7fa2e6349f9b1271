package scorer

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
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
		case "query-refused":
			return nil, fmt.Errorf("usage: %w", &prom.Error{Kind: prom.BadQuery, Query: "sum(", Err: errors.New("parse error")})
		case "query-unavailable":
			return nil, &prom.Error{Kind: prom.Unavailable, Query: "up", Err: errors.New("connection refused")}
		case "fields":
			return nil, contract.FieldErrors{{Field: "x", Reason: contract.ReasonInvalidData, Message: "bad"}}
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
		// The Prometheus client's own errors, classified here: a query Prometheus refused is the
		// configuration's fault (400, not redelivered); one it could not answer is retried.
		{"query refused", ping(`{"resource":"query-refused"}`), http.StatusBadRequest, contract.TypeScoreFailed, contract.ReasonBadQuery},
		{"query unavailable", ping(`{"resource":"query-unavailable"}`), http.StatusServiceUnavailable, contract.TypeScoreFailed, contract.ReasonMetricsUnavailable},
		{"field errors", ping(`{"resource":"fields"}`), http.StatusBadRequest, contract.TypeScoreFailed, contract.ReasonInvalidData},
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

// A scorer whose deployment owns only "cpu-idle" refuses a ping naming another resource with
// BadConfig before its scoring function runs (nothing queried), in every spelling a JSON decoder
// may read; a result for another resource (a default the configuration left out) is refused
// rather than sent; an owned resource is scored and its score.updated carries the resource in the
// scoreflowresource extension.
func TestScoresOnlyItsOwnResources(t *testing.T) {
	fs := flag.NewFlagSet("scorer", flag.ContinueOnError)
	opts := Flags(fs)
	if err := fs.Parse([]string{"--resources", "cpu-idle, gpu-free"}); err != nil {
		t.Fatal(err)
	}
	ran := 0
	h := HandlerWith("scoreflow/test", Route{contract.TypePing: func(ctx context.Context, e event.Event) (*Result, error) {
		ran++
		var c struct {
			Resource string `json:"resource,omitempty"`
		}
		if err := contract.DecodeJSON(e.Data(), &c); err != nil {
			return nil, BadConfig("%v", err)
		}
		if c.Resource == "" {
			c.Resource = "default-resource"
		}
		return &Result{Observed: time.Now(), Scores: contract.ScoreUpdated{Resource: c.Resource, Items: []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "a", Value: 5}}}}}}, nil
	}}, nil, *opts)

	for _, tc := range []struct {
		name, data string
		status     int
		runs       bool
	}{
		{"owned", `{"resource":"cpu-idle"}`, http.StatusOK, true},
		{"another owned", `{"resource":"gpu-free"}`, http.StatusOK, true},
		{"another resource", `{"resource":"cost"}`, http.StatusBadRequest, false},
		{"another resource, other case", `{"Resource":"cost"}`, http.StatusBadRequest, false},
		{"owned, then another repeated", `{"resource":"cpu-idle","resource":"cost"}`, http.StatusBadRequest, false},
		{"the scorer's default, not owned", `{}`, http.StatusBadRequest, true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			ran = 0
			r := h(context.Background(), ping(tc.data))
			if r.Status != tc.status || (ran > 0) != tc.runs {
				t.Fatalf("status %d, scoring function ran %d times; want %d, ran: %v", r.Status, ran, tc.status, tc.runs)
			}
			if tc.status != http.StatusOK {
				f, err := contract.DecodeFailure(r.Event)
				if err != nil || f.Reason != contract.ReasonBadConfig {
					t.Fatalf("failure %+v, %v; want BadConfig", f, err)
				}
				return
			}
			s, err := contract.DecodeScoreUpdated(r.Event)
			if err != nil {
				t.Fatal(err)
			}
			if got := r.Event.Extensions()[contract.ExtResource]; got != s.Resource {
				t.Errorf("scoreflowresource %v, data.resource %q", got, s.Resource)
			}
		})
	}

	bad := Flags(flag.NewFlagSet("scorer", flag.ContinueOnError))
	if err := (resourceList{&bad.Resources}).Set("cpu-idle,Not_A_Name"); err == nil {
		t.Error("--resources took an invalid resource name")
	}
}
