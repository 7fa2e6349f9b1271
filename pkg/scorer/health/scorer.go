package health

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	apierrors "k8s.io/apimachinery/pkg/api/errors"

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

// Scorer turns ManagedCluster events into health scores, and on each ping scores every
// ManagedCluster Clusters lists.
type Scorer struct {
	Resource  string        // AddOnPlacementScore name, cluster-health by default
	ScoreName string        // score item name, health by default
	ValidFor  time.Duration // validUntil = evaluation time + ValidFor; 0: never expires (until the next score)
	Log       *slog.Logger
	// Clusters lists the hub's ManagedClusters for pings (HubClusters: from an informer's
	// cache); nil refuses pings (WrongType).
	Clusters Lister
	// Now is the clock of ping evaluations; nil means time.Now.
	Now func() time.Time
}

// DefaultValidFor is how long a health score stays valid without a newer one: five pings of the
// shipped schedule (every minute), so a few lost pings change nothing, while a score nobody
// renews (the scorer, its PingSource or its hub access gone) lapses instead of claiming a
// cluster's health long after anyone looked.
const DefaultValidFor = 5 * time.Minute

// PingConfig is a PingSource's data for the health-scorer: an empty object. The resource and score
// names are flags, as for the ApiServerSource's events, so that both write the same score.
type PingConfig struct{}

// Validate implements scorer.Config.
func (PingConfig) Validate() error { return nil }

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

// Routes are the event types taken: resource events scored, reference events refused with why,
// and pings (when Clusters is set) scoring every cluster.
func (s *Scorer) Routes() scorer.Route {
	refused := func(context.Context, event.Event) (*scorer.Result, error) {
		return nil, scorer.BadConfig("an ApiServerSource in mode Reference sends no status; set its mode to Resource")
	}
	r := scorer.Route{
		TypeAdd:       s.score(false),
		TypeUpdate:    s.score(false),
		TypeDelete:    s.score(true),
		TypeRefAdd:    refused,
		TypeRefUpdate: refused,
		TypeRefDelete: refused,
	}
	if s.Clusters != nil {
		r[contract.TypePing] = s.Ping
	}
	return r
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
		if !a.Scored() {
			return nil, nil // 202: nothing to score
		}
		return s.result(at, []contract.ClusterScores{s.item(mc.Metadata.Name, a)}), nil
	}
}

// Ping scores every ManagedCluster on the hub as of now. The ApiServerSource sends only the
// changes it sees while it watches: nothing for the clusters that exist when it starts or for
// changes made while it relists, and nothing at all while a cluster is silent, whose Unreachable
// score must still fall with every lease period. Pings make the scores right whatever events
// were missed.
func (s *Scorer) Ping(ctx context.Context, e event.Event) (*scorer.Result, error) {
	var cfg PingConfig
	if len(e.Data()) > 0 {
		if err := scorer.DecodeConfig(e, &cfg); err != nil {
			return nil, err
		}
	}
	at := time.Now()
	if s.Now != nil {
		at = s.Now()
	}
	clusters, err := s.Clusters.List(ctx)
	if err != nil {
		return nil, listFailure(err)
	}
	items := make([]contract.ClusterScores, 0, len(clusters))
	states := map[string]int{}
	// Each cluster's line is built only when it is logged: its attributes alone cost a fleet's
	// ping more than assessing it.
	debug := s.Log.Enabled(ctx, slog.LevelDebug)
	for i := range clusters {
		mc := &clusters[i]
		if err := contract.ValidateClusterName(mc.Metadata.Name); err != nil {
			s.Log.Warn("ManagedCluster not scored: its name cannot be a cluster namespace", "cluster", mc.Metadata.Name, "err", err)
			continue
		}
		a := Assess(mc, false, at)
		states[a.State]++
		if debug {
			s.Log.Debug("cluster health", "cluster", mc.Metadata.Name, "event", e.Type(), "state", a.State, "score", a.Score, "detail", a.Detail)
		}
		if a.Scored() {
			items = append(items, s.item(mc.Metadata.Name, a))
		}
	}
	s.Log.Info("cluster health of every cluster", "clusters", len(clusters), "scored", len(items), "states", states)
	if len(items) == 0 {
		return nil, nil
	}
	return s.result(at, items), nil
}

func (s *Scorer) item(cluster string, a Assessment) contract.ClusterScores {
	return contract.ClusterScores{Cluster: cluster, Scores: []contract.Score{{Name: s.ScoreName, Value: float64(a.Score)}}}
}

func (s *Scorer) result(at time.Time, items []contract.ClusterScores) *scorer.Result {
	su := contract.ScoreUpdated{Resource: s.Resource, NeverExpires: s.ValidFor == 0, Items: items}
	if s.ValidFor > 0 {
		vu := at.Add(s.ValidFor)
		su.ValidUntil = &vu
	}
	return &scorer.Result{Observed: at, Scores: su}
}

// listFailure sorts a failed list: refused by RBAC is a deployment error (400: a retry will not
// help, the reason says what to fix); anything else (hub down, timeout, throttled) is retried.
func listFailure(err error) error {
	if apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) {
		return scorer.Fail(contract.ReasonForbidden, false, fmt.Errorf("listing ManagedClusters: %v (the health-scorer's ServiceAccount needs list and watch on managedclusters)", brief(err)))
	}
	return scorer.Fail(contract.ReasonUnavailable, true, fmt.Errorf("listing ManagedClusters: %v", brief(err)))
}

// brief keeps an error short: it goes into a score.failed, whose non-2xx body must stay small.
func brief(err error) string {
	s := err.Error()
	if len(s) > 300 {
		s = s[:300] + "..."
	}
	return s
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
