package dsf

import (
	"cmp"
	"fmt"
	"math"
	"slices"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Mapped is a scorer's answer as scores, with what was left out and why.
type Mapped struct {
	Items []contract.ClusterScores
	// Clamped counts values outside [-100, 100] after rounding, written as -100 or 100.
	Clamped int
	// Dropped counts results left out, by why: "cluster" (no valid cluster), "name" (the format
	// made an empty or illegal score name), "score" (no score, or not a finite number).
	Dropped map[string]int
}

// mapResults turns a scorer's results into one item per cluster, sorted by cluster, scores
// sorted by name. A value is rounded half away from zero, then clamped to [-100, 100], where
// DSF's agent truncates and leaves the hub to refuse what is out of range. Two results that give
// one cluster the same score name are an error: the format must tell them apart (DSF's agent
// would keep one of them at random).
func (p *plan) mapResults(results []Result) (Mapped, error) {
	m := Mapped{Dropped: map[string]int{}}
	perCluster := map[string]map[string]int32{}
	values := map[string]string{}
	for _, r := range results {
		if r.Score == nil || math.IsNaN(*r.Score) || math.IsInf(*r.Score, 0) {
			m.Dropped["score"]++
			continue
		}
		v := math.Round(*r.Score)
		if v < contract.MinScore || v > contract.MaxScore {
			v = math.Max(contract.MinScore, math.Min(contract.MaxScore, v))
			m.Clamped++
		}
		clusters := p.clusters
		if c, ok := r.Metric[p.clusterLabel]; ok {
			clusters = []string{c}
		}
		if len(clusters) == 0 {
			m.Dropped["cluster"]++
			continue
		}
		for _, cluster := range clusters {
			if contract.ValidateClusterName(cluster) != nil {
				m.Dropped["cluster"]++
				continue
			}
			clear(values)
			for _, ph := range placeholders {
				values[ph] = r.Metric[ph]
			}
			values["scoreName"], values["cluster"] = p.name, cluster
			name := render(p.format, values)
			if contract.ValidateScoreName(name) != nil {
				m.Dropped["name"]++
				continue
			}
			scores := perCluster[cluster]
			if scores == nil {
				scores = map[string]int32{}
				perCluster[cluster] = scores
			}
			if _, dup := scores[name]; dup {
				return Mapped{}, fmt.Errorf("two results give cluster %q the score %q: make scoreDimensionFormat %q tell them apart", cluster, name, p.format)
			}
			scores[name] = int32(v)
		}
	}
	for cluster, scores := range perCluster {
		if len(scores) > contract.MaxScoresPerItem {
			return Mapped{}, fmt.Errorf("cluster %q gets %d score names from scoreDimensionFormat %q, more than %d", cluster, len(scores), p.format, contract.MaxScoresPerItem)
		}
		item := contract.ClusterScores{Cluster: cluster}
		for name, v := range scores {
			item.Scores = append(item.Scores, contract.Score{Name: name, Value: float64(v)})
		}
		slices.SortFunc(item.Scores, func(a, b contract.Score) int { return cmp.Compare(a.Name, b.Name) })
		m.Items = append(m.Items, item)
	}
	slices.SortFunc(m.Items, func(a, b contract.ClusterScores) int { return cmp.Compare(a.Cluster, b.Cluster) })
	return m, nil
}
