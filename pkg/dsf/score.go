package dsf

import (
	"cmp"
	"math"
	"slices"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Why a result was left out (the dropped metric's label and the log's key).
const (
	dropScore     = "score"     // no score, or not a finite number
	dropCluster   = "cluster"   // hub mode: no valid cluster label
	dropMasked    = "masked"    // a mask turns the score off for its cluster
	dropName      = "name"      // the format made an empty name, or one no AddOnPlacementScore item may have
	dropDuplicate = "duplicate" // a second result with the name of an earlier one: DSF keeps one
	dropCap       = "cap"       // more names for one cluster than contract.MaxScoresPerItem
)

// Mapped is a scorer's answer as scores, with what was left out and why.
type Mapped struct {
	Items []contract.ClusterScores
	// Clamped counts values outside [-100, 100], written as -100 or 100.
	Clamped int
	// Dropped counts results left out, by why; Example holds one left out, for the log.
	Dropped map[string]int
	Example map[string]string
}

// scope says whose results these are: in agent mode every result is the agent's own cluster's
// (DSF's agent ignores any cluster label); in hub mode a result's cluster is its ClusterLabel.
type scope struct {
	Cluster      string
	ClusterLabel string
	Masks        Masks
	// Owns refuses a resource this scorer may not write (hub mode: any but its spec's own,
	// ownedBy; agent mode: scorer.Options' CheckResource): checked once the spec is resolved,
	// before any query.
	Owns func(resource string) error
	// Synced is agent mode: the scorer's health and /config are the hub's (its DynamicScorer's
	// status), never asked of the scorer by the agent.
	Synced bool
}

// mapResults turns a scorer's results into one item per cluster, sorted by cluster, scores sorted
// by name. A value is truncated toward zero as DSF's agent does (int32(score)), then clamped to
// [-100, 100], which DSF leaves to the hub to refuse. A name rendered twice for one cluster keeps
// the first result's value (DSF keeps one of them at random); a name that cannot be an
// AddOnPlacementScore item in scoreflow's contract (empty, or with characters Placements cannot
// name) is left out; each is counted and logged with an example, never silently.
func (p *Plan) mapResults(results []Result, sc scope) Mapped {
	m := Mapped{Dropped: map[string]int{}, Example: map[string]string{}}
	drop := func(why, example string) {
		m.Dropped[why]++
		if _, ok := m.Example[why]; !ok {
			if example == "" {
				example = "(empty)"
			}
			m.Example[why] = contract.Truncate(example, 120)
		}
	}
	type named struct {
		index map[string]int
		item  contract.ClusterScores
	}
	perCluster := map[string]*named{}
	values := map[string]string{}
	for _, r := range results {
		if r.Score == nil || math.IsNaN(*r.Score) || math.IsInf(*r.Score, 0) {
			drop(dropScore, "")
			continue
		}
		cluster := sc.Cluster
		if cluster == "" {
			cluster = r.Metric[sc.ClusterLabel]
			if contract.ValidateClusterName(cluster) != nil {
				drop(dropCluster, cluster)
				continue
			}
		}
		if sc.Masks.Has(cluster, p.ScoreName) {
			drop(dropMasked, cluster)
			continue
		}
		clear(values)
		for _, ph := range placeholders {
			values[ph] = r.Metric[ph]
		}
		values["scoreName"], values["cluster"] = p.ScoreName, cluster
		name := render(p.Format, values)
		if contract.ValidateScoreName(name) != nil {
			drop(dropName, name)
			continue
		}
		n := perCluster[cluster]
		if n == nil {
			n = &named{index: map[string]int{}, item: contract.ClusterScores{Cluster: cluster}}
			perCluster[cluster] = n
		}
		if _, dup := n.index[name]; dup {
			drop(dropDuplicate, name)
			continue
		}
		if len(n.item.Scores) >= contract.MaxScoresPerItem {
			drop(dropCap, name)
			continue
		}
		v := math.Trunc(*r.Score) + 0 // + 0: no -0 from a small negative value
		if v < contract.MinScore || v > contract.MaxScore {
			v = math.Max(contract.MinScore, math.Min(contract.MaxScore, v))
			m.Clamped++
		}
		n.index[name] = len(n.item.Scores)
		n.item.Scores = append(n.item.Scores, contract.Score{Name: name, Value: v})
	}
	for _, n := range perCluster {
		slices.SortFunc(n.item.Scores, func(a, b contract.Score) int { return cmp.Compare(a.Name, b.Name) })
		m.Items = append(m.Items, n.item)
	}
	slices.SortFunc(m.Items, func(a, b contract.ClusterScores) int { return cmp.Compare(a.Cluster, b.Cluster) })
	return m
}
