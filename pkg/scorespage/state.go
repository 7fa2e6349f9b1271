package scorespage

import (
	"sort"
	"strings"
	"time"

	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// observationsCondition is the status condition in which the score-writer keeps, per score name,
// when the applied value was observed and until when it is valid (scorewriter.Observations reads
// it): the page's freshness comes from it. Objects other producers write have none; their age is
// when their status last changed.
const observationsCondition = scorewriter.ConditionObservations

// Cell is one score of one cluster: a heat map cell.
type Cell struct {
	Value int32 `json:"value"`
	// Observed is when the value was observed (the writer's ledger), else when the object's status
	// last changed, else when it was created.
	Observed *time.Time `json:"observed,omitempty"`
	// ValidUntil is the score's own expiry when the ledger has one, else the object's; nil: never.
	ValidUntil *time.Time `json:"validUntil,omitempty"`
	// Expired: a Placement counts this score as 0.
	Expired bool `json:"expired"`

	fromLedger bool // Observed and ValidUntil are the writer's own
}

// ScoresView is the heat map: clusters x "resource/score".
type ScoresView struct {
	Now      time.Time                  `json:"now"`
	Clusters []string                   `json:"clusters"`
	Columns  []string                   `json:"columns"`
	Cells    map[string]map[string]Cell `json:"cells"` // cluster -> column -> cell
}

// scoreObject is what the page keeps of one AddOnPlacementScore.
type scoreObject struct {
	cluster, resource string
	scores            map[string]Cell // by score name; Expired is computed when viewed
}

func fromAddOnPlacementScore(o *clusterv1alpha1.AddOnPlacementScore) scoreObject {
	so := scoreObject{cluster: o.Namespace, resource: o.Name, scores: map[string]Cell{}}
	ledger, _ := scorewriter.Observations(o) // unreadable: fall back to the object's times
	changed := statusChanged(o)
	var objValid *time.Time
	if o.Status.ValidUntil != nil {
		t := o.Status.ValidUntil.Time
		objValid = &t
	}
	for _, s := range o.Status.Scores {
		c := Cell{Value: s.Value, ValidUntil: objValid}
		if !changed.IsZero() {
			c.Observed = &changed
		}
		if e, ok := ledger[s.Name]; ok {
			obs := e.Observed
			c.Observed, c.fromLedger = &obs, true
			c.ValidUntil = nil // the zero time means never
			if !e.ValidUntil.IsZero() {
				vu := e.ValidUntil
				c.ValidUntil = &vu
			}
		}
		so.scores[s.Name] = c
	}
	return so
}

// statusChanged is when the object's status was last written, as the API server recorded it in
// managedFields; the creation time when no status write is recorded.
func statusChanged(o *clusterv1alpha1.AddOnPlacementScore) time.Time {
	var latest time.Time
	for _, mf := range o.ManagedFields {
		if mf.Subresource == "status" && mf.Time != nil && mf.Time.After(latest) {
			latest = mf.Time.Time
		}
	}
	if latest.IsZero() {
		latest = o.CreationTimestamp.Time
	}
	return latest
}

// refreshed dates the scores of next that no ledger dates: one whose value or validUntil differs
// from prev was rewritten now (the page saw it happen; managedFields times do not move on every
// write), one that did not keeps the time it had.
func refreshed(prev, next scoreObject, now time.Time) {
	for name, c := range next.scores {
		if c.fromLedger {
			continue
		}
		old, ok := prev.scores[name]
		switch {
		case !ok || old.Value != c.Value || !sameTime(old.ValidUntil, c.ValidUntil):
			c.Observed = &now
		default:
			c.Observed = old.Observed
		}
		next.scores[name] = c
	}
}

func sameTime(a, b *time.Time) bool {
	return (a == nil && b == nil) || (a != nil && b != nil && a.Equal(*b))
}

func column(resource, score string) string { return resource + "/" + score }

// scoresView builds the heat map from the objects as of now.
func scoresView(objs map[string]scoreObject, now time.Time) ScoresView {
	v := ScoresView{Now: now, Cells: map[string]map[string]Cell{}}
	cols := map[string]bool{}
	for _, so := range objs {
		row := v.Cells[so.cluster]
		if row == nil {
			row = map[string]Cell{}
			v.Cells[so.cluster] = row
		}
		for name, c := range so.scores {
			c.Expired = c.ValidUntil != nil && !c.ValidUntil.After(now)
			col := column(so.resource, name)
			row[col] = c
			cols[col] = true
		}
	}
	for c := range v.Cells {
		v.Clusters = append(v.Clusters, c)
	}
	for c := range cols {
		v.Columns = append(v.Columns, c)
	}
	sort.Strings(v.Clusters)
	sort.Strings(v.Columns)
	return v
}

// Prioritizer is one prioritizer that counts in a Placement's decision, with its weight.
type Prioritizer struct {
	Type string `json:"type"` // AddOn or BuiltIn
	// Column is "resource/score" for an AddOn score; Name the BuiltIn prioritizer's name.
	Column string `json:"column,omitempty"`
	Name   string `json:"name,omitempty"`
	Weight int32  `json:"weight"`
	// Default: not configured, added by the Additive mode (Balance and Steady at weight 1).
	Default bool `json:"default,omitempty"`
}

// The BuiltIn prioritizers (ocm pkg/placement/controllers/scheduling).
const (
	builtInBalance = "Balance"
	builtInSteady  = "Steady"
	// maxClusterScore is what Steady gives a cluster the Placement already holds and Balance one no
	// other Placement holds (ocm pkg/placement/plugins MaxClusterScore).
	maxClusterScore = 100
)

// Term is one prioritizer's part in a cluster's total: the score the placement controller would
// compute (an AddOn score: 0 when missing or expired) times the weight.
type Term struct {
	Column  string `json:"column,omitempty"` // an AddOn score
	Name    string `json:"name,omitempty"`   // a BuiltIn prioritizer
	Score   int32  `json:"score"`
	Weight  int32  `json:"weight"`
	Missing bool   `json:"missing,omitempty"` // no such score for the cluster: counts 0
	Expired bool   `json:"expired,omitempty"` // past its validUntil: counts 0
	// Unknown: a BuiltIn prioritizer the page cannot compute (ResourceAllocatableCPU and
	// ResourceAllocatableMemory read ManagedCluster status, which the page does not watch); it
	// counts in the controller's total but not in Total.
	Unknown bool `json:"unknown,omitempty"`
}

// ClusterWhy is one cluster's standing under a Placement's prioritizers.
type ClusterWhy struct {
	Cluster string `json:"cluster"`
	Chosen  bool   `json:"chosen"`
	Total   int64  `json:"total"`
	Terms   []Term `json:"terms"`
}

// Decision is a Placement's decision from a moment on, and why: every known cluster's terms then.
type Decision struct {
	At       time.Time    `json:"at"`
	Clusters []string     `json:"clusters"`
	Why      []ClusterWhy `json:"why"`
}

// PlacementView is a Placement, its policy, its current decision explained, and how its decision
// moved while the page watched.
type PlacementView struct {
	Namespace        string        `json:"namespace"`
	Name             string        `json:"name"`
	Mode             string        `json:"mode"`
	NumberOfClusters *int32        `json:"numberOfClusters,omitempty"`
	Prioritizers     []Prioritizer `json:"prioritizers"`
	Current          Decision      `json:"current"`
	History          []Decision    `json:"history"` // oldest first
}

// placementState is what the page keeps of one Placement.
type placementState struct {
	namespace, name string
	known           bool // the Placement itself has been seen (decisions may arrive first)
	mode            string
	numberOf        *int32
	prioritizers    []Prioritizer
	decisions       map[string][]string // PlacementDecision name -> clusters
	decided         bool                // current holds what the decisions say
	current         []string
	history         []Decision
}

// placementPolicy is a Placement's mode and the prioritizers that count in its decisions, weighed
// as the placement controller weighs them (ocm pkg/placement/controllers/scheduling, getWeights):
// the Additive mode (also when unset) starts from Balance and Steady at weight 1, Exact from
// nothing; a BuiltIn configuration replaces its prioritizer's weight, each AddOn configuration
// adds a prioritizer (the controller keys them by a pointer, so two naming the same score both
// count); a weight of 0 turns a prioritizer off.
func placementPolicy(p *clusterv1beta1.Placement) (mode string, prios []Prioritizer) {
	mode = string(p.Spec.PrioritizerPolicy.Mode)
	if mode == "" {
		mode = string(clusterv1beta1.PrioritizerPolicyModeAdditive)
	}
	if mode == string(clusterv1beta1.PrioritizerPolicyModeAdditive) {
		prios = []Prioritizer{
			{Type: clusterv1beta1.ScoreCoordinateTypeBuiltIn, Name: builtInBalance, Weight: 1, Default: true},
			{Type: clusterv1beta1.ScoreCoordinateTypeBuiltIn, Name: builtInSteady, Weight: 1, Default: true},
		}
	}
	for _, pc := range p.Spec.PrioritizerPolicy.Configurations {
		sc := pc.ScoreCoordinate
		switch {
		case sc == nil:
		case sc.Type == clusterv1beta1.ScoreCoordinateTypeAddOn && sc.AddOn != nil:
			prios = append(prios, Prioritizer{Type: clusterv1beta1.ScoreCoordinateTypeAddOn, Column: column(sc.AddOn.ResourceName, sc.AddOn.ScoreName), Weight: pc.Weight})
		default:
			replaced := false
			for i := range prios {
				if prios[i].Type == clusterv1beta1.ScoreCoordinateTypeBuiltIn && prios[i].Name == sc.BuiltIn {
					prios[i].Weight, prios[i].Default, replaced = pc.Weight, false, true
				}
			}
			if !replaced {
				prios = append(prios, Prioritizer{Type: clusterv1beta1.ScoreCoordinateTypeBuiltIn, Name: sc.BuiltIn, Weight: pc.Weight})
			}
		}
	}
	counted := prios[:0]
	for _, pr := range prios {
		if pr.Weight != 0 {
			counted = append(counted, pr)
		}
	}
	return mode, counted
}

// builtIns is what the Steady and Balance prioritizers read when the controller schedules a
// Placement: the clusters the Placement's own decisions hold, and how many decisions of every
// other Placement hold each cluster.
type builtIns struct {
	steady map[string]bool
	others map[string]int64
}

// score is a BuiltIn prioritizer's score of cluster c; ok is false for one the page cannot compute.
// Steady (ocm plugins/steady): 100 for a cluster the Placement holds, else 0. Balance (ocm
// plugins/balance): 100 for a cluster no other Placement holds, else 2 x int(100 x (0.5 - n/max))
// with n its decisions and max the most any cluster has: from 100 down to -100.
func (b builtIns) score(name, c string) (int32, bool) {
	switch name {
	case builtInSteady:
		if b.steady[c] {
			return maxClusterScore, true
		}
		return 0, true
	case builtInBalance:
		n, ok := b.others[c]
		if !ok || n == 0 {
			return maxClusterScore, true
		}
		var most int64
		for _, m := range b.others {
			most = max(most, m)
		}
		usage := float64(n) / float64(most)
		return int32(2 * int64(float64(maxClusterScore)*(0.5-usage))), true
	}
	return 0, false
}

// why ranks clusters by prios as the placement controller weighs them (sum of weight x score; a
// missing or expired AddOn score counts 0; Steady and Balance from in): highest total first, then
// by name, the controller's order. The clusters are those with scores and those chosen: the page
// does not evaluate the Placement's cluster sets, predicates or tolerations.
func why(prios []Prioritizer, v ScoresView, chosen []string, in builtIns) []ClusterWhy {
	isChosen := map[string]bool{}
	for _, c := range chosen {
		isChosen[c] = true
	}
	clusters := append([]string(nil), v.Clusters...)
	for _, c := range chosen {
		if _, ok := v.Cells[c]; !ok {
			clusters = append(clusters, c)
		}
	}
	out := make([]ClusterWhy, 0, len(clusters))
	for _, c := range clusters {
		w := ClusterWhy{Cluster: c, Chosen: isChosen[c], Terms: []Term{}}
		for _, p := range prios {
			t := Term{Weight: p.Weight}
			if p.Type == clusterv1beta1.ScoreCoordinateTypeAddOn {
				t.Column = p.Column
				cell, ok := v.Cells[c][p.Column]
				switch {
				case !ok:
					t.Missing = true
				case cell.Expired:
					t.Expired = true
				default:
					t.Score = cell.Value
				}
			} else {
				t.Name = p.Name
				score, ok := in.score(p.Name, c)
				t.Score, t.Unknown = score, !ok
			}
			w.Total += int64(t.Score) * int64(t.Weight)
			w.Terms = append(w.Terms, t)
		}
		out = append(out, w)
	}
	sort.SliceStable(out, func(i, j int) bool {
		if out[i].Total != out[j].Total {
			return out[i].Total > out[j].Total
		}
		return out[i].Cluster < out[j].Cluster
	})
	return out
}

// decided is the union of a Placement's PlacementDecisions, sorted.
func decided(byObject map[string][]string) []string {
	seen := map[string]bool{}
	var out []string
	for _, cs := range byObject {
		for _, c := range cs {
			if !seen[c] {
				seen[c] = true
				out = append(out, c)
			}
		}
	}
	sort.Strings(out)
	return out
}

func sameClusters(a, b []string) bool { return strings.Join(a, ",") == strings.Join(b, ",") }
