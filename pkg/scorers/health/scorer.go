package health

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// ApiServerSource event types (knative.dev/eventing pkg/apis/sources, not imported: function
// binaries stay free of knative.dev/eventing).
const (
	TypeAdd       = "dev.knative.apiserver.resource.add"
	TypeUpdate    = "dev.knative.apiserver.resource.update"
	TypeDelete    = "dev.knative.apiserver.resource.delete"
	TypeRefAdd    = "dev.knative.apiserver.ref.add"
	TypeRefUpdate = "dev.knative.apiserver.ref.update"
	TypeRefDelete = "dev.knative.apiserver.ref.delete"
)

// Group and kind of the objects scored.
const (
	Group = "cluster.open-cluster-management.io"
	Kind  = "ManagedCluster"
)

// Scorer turns ManagedCluster events into health scores.
type Scorer struct {
	Resource  string        // AddOnPlacementScore name, cluster-health by default
	ScoreName string        // score item name, health by default
	ValidFor  time.Duration // validUntil = event time + ValidFor; 0: never expires (until the next event)
	Log       *slog.Logger
}

// Validate checks the flags.
func (s *Scorer) Validate() error {
	if err := contract.ValidateResourceName(s.Resource); err != nil {
		return fmt.Errorf("--resource: %w", err)
	}
	if err := contract.ValidateScoreName(s.ScoreName); err != nil {
		return fmt.Errorf("--score-name: %w", err)
	}
	if s.ValidFor < 0 {
		return fmt.Errorf("--valid-for: %s is negative", s.ValidFor)
	}
	return nil
}

// Routes are the event types taken: resource events scored, reference events refused with why.
func (s *Scorer) Routes() scorer.Route {
	refused := func(context.Context, event.Event) (*scorer.Result, error) {
		return nil, scorer.BadConfig("an ApiServerSource in mode Reference sends no status; set its mode to Resource")
	}
	return scorer.Route{
		TypeAdd:       s.score(false),
		TypeUpdate:    s.score(false),
		TypeDelete:    s.score(true),
		TypeRefAdd:    refused,
		TypeRefUpdate: refused,
		TypeRefDelete: refused,
	}
}

func (s *Scorer) score(deleted bool) scorer.Func {
	return func(_ context.Context, e event.Event) (*scorer.Result, error) {
		mc, err := decode(e)
		if err != nil {
			return nil, err
		}
		at := e.Time()
		if at.IsZero() {
			at = time.Now()
		}
		a := Assess(mc, deleted, at)
		s.Log.Info("cluster health", "cluster", mc.Metadata.Name, "event", e.Type(), "state", a.State, "score", a.Score, "detail", a.Detail)
		su := contract.ScoreUpdated{
			Resource:     s.Resource,
			NeverExpires: s.ValidFor == 0,
			Items: []contract.ClusterScores{{
				Cluster: mc.Metadata.Name,
				Scores:  []contract.Score{{Name: s.ScoreName, Value: float64(a.Score)}},
			}},
		}
		if s.ValidFor > 0 {
			vu := at.Add(s.ValidFor)
			su.ValidUntil = &vu
		}
		return &scorer.Result{Observed: at, Scores: su}, nil
	}
}

// decode reads the ManagedCluster in an event's data. Unknown fields are fine: it is a whole
// Kubernetes object of which the score reads a few.
func decode(e event.Event) (*ManagedCluster, error) {
	var mc ManagedCluster
	if err := json.Unmarshal(e.Data(), &mc); err != nil {
		return nil, scorer.Fail(contract.ReasonInvalidData, false, fmt.Errorf("data is not a ManagedCluster object: %v", err))
	}
	group, _, _ := strings.Cut(mc.APIVersion, "/")
	if mc.Kind != Kind || group != Group {
		return nil, scorer.Fail(contract.ReasonInvalidData, false, fmt.Errorf("data is a %q of %q, want a %s of %s: point the ApiServerSource at managedclusters only", mc.Kind, mc.APIVersion, Kind, Group))
	}
	if err := contract.ValidateClusterName(mc.Metadata.Name); err != nil {
		return nil, scorer.Fail(contract.ReasonUnknownCluster, false, err)
	}
	return &mc, nil
}
