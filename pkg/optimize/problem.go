// Package optimize chooses, for every cluster, one configuration policy and, for every workload, one
// cluster, so that the sum of the workloads' preference scores is best while each cluster's chosen
// policy supplies at least what the workloads placed there demand of its resource kind.
//
// The integer program is
//
//	maximise   Σ s[w,c,p] · z[w,c,p]
//	subject to Σ_{c,p} z[w,c,p] = 1                 every workload on exactly one cluster
//	           Σ_p     y[c,p]   = 1                 one policy per cluster
//	           Σ_w a[w] · z[w,c,p] ≤ S[p] · y[c,p]  supply ≥ demand for the policy's kind
//	           z, y ∈ {0,1}
//
// where s[w,c,p] is the score of the workload's app on cluster c with the device policy p
// configures (an option without a score, or of another resource kind, does not exist). Solve finds
// a proven optimum by branch and bound. Its bound is the Lagrangian relaxation of the assignment
// rows: for multipliers λ the problem splits into one 0-1 knapsack per cluster and policy, solved
// exactly by dynamic programming over the (integer) supply, so every node's bound is at least as
// tight as the linear-programming relaxation's. Multipliers are improved by subgradient steps and
// inherited by child nodes.
package optimize

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"
)

// Policy is one configuration a cluster may be given, and what it then supplies.
type Policy struct {
	Name   string
	Kind   string // resource kind supplied, e.g. "gpu"
	Supply int64  // amount of Kind supplied
	Device string // the device it configures: the ${device} of score names
}

// Cluster is a cluster and the policies it may be given.
type Cluster struct {
	Name     string
	Policies []Policy
}

// Workload is one workload to place and what it demands.
type Workload struct {
	Name   string
	App    string // the ${app} of score names
	Kind   string
	Demand int64
}

// Problem is one instance. Score(w, c, p) is the preference score of workload w on cluster c given
// policy p; ok false means no score exists and the option is not allowed.
type Problem struct {
	Clusters  []Cluster
	Workloads []Workload
	Score     func(w, c, p int) (score float64, ok bool)
	// Minimize: lower scores are better (e.g. power consumption).
	Minimize bool
}

// Solution is a plan.
type Solution struct {
	Policy    []int   // per cluster, the index of its chosen policy
	Cluster   []int   // per workload, the index of its cluster
	Objective float64 // the sum of the chosen options' scores
	Nodes     int     // branch-and-bound nodes evaluated
	// Optimal: the search finished, so no plan is better. When a budget stopped it first, Bound is
	// the best objective any plan could still reach (equal to Objective when Optimal).
	Optimal bool
	Bound   float64
}

// Errors. ErrNoOption and ErrInfeasible wrap details; test with errors.Is.
var (
	// ErrNoOption: a workload has no allowed option at all (no score for it on any cluster and
	// policy of its kind that could hold it).
	ErrNoOption = errors.New("workload has no scored option")
	// ErrInfeasible: no plan satisfies every constraint.
	ErrInfeasible = errors.New("no plan fits the supply")
	// ErrInvalid: the problem itself is malformed (negative amounts, no policies, too fine amounts).
	ErrInvalid = errors.New("invalid problem")
)

// MaxScaledSupply bounds a policy's supply after dividing every amount of its kind by their
// greatest common divisor: the knapsack tables grow with it.
const MaxScaledSupply = 1 << 16

// option is an allowed (workload, cluster, policy) triple.
type option struct {
	w, c, p int
	score   float64 // in the maximisation sense
}

// model is a problem in the solver's terms: integer amounts, maximisation, options indexed.
type model struct {
	nw, nc   int
	policies [][]policy // per cluster
	demand   []int64    // per workload, scaled
	kind     []int      // per workload
	// score[w][c][p], NaN when the option does not exist.
	score    [][][]float64
	integral bool // every score is a whole number, so is every objective
	// twins[w]: the workloads interchangeable with w (same kind, demand and scores everywhere),
	// w included, in index order. Plans are searched with twins on non-decreasing clusters only.
	twins [][]int
	// byDemand: the workloads in order of demand, then of index downwards (how the knapsacks break
	// ties; it changes which of several equal relaxed solutions the branching sees).
	byDemand []int
	sign     float64
}

type policy struct {
	kind   int
	supply int64
}

func build(pr Problem) (*model, error) {
	m := &model{nw: len(pr.Workloads), nc: len(pr.Clusters), integral: true, sign: 1}
	if pr.Minimize {
		m.sign = -1
	}
	if pr.Score == nil {
		return nil, fmt.Errorf("%w: no score function", ErrInvalid)
	}
	kinds := map[string]int{}
	kindOf := func(k string) int {
		if i, ok := kinds[k]; ok {
			return i
		}
		kinds[k] = len(kinds)
		return kinds[k]
	}
	// Divide each kind's amounts by their gcd: "2, 4, 8" GPUs and "2Gi, 4Gi" tables stay small.
	gcd := map[string]int64{}
	add := func(kind string, v int64) {
		gcd[kind] = gcdOf(gcd[kind], v)
	}
	for ci, c := range pr.Clusters {
		if len(c.Policies) == 0 {
			return nil, fmt.Errorf("%w: cluster %q has no policies", ErrInvalid, c.Name)
		}
		if len(c.Policies) > 64 {
			return nil, fmt.Errorf("%w: cluster %q has %d policies, at most 64", ErrInvalid, c.Name, len(c.Policies))
		}
		for _, p := range c.Policies {
			if p.Supply < 0 {
				return nil, fmt.Errorf("%w: policy %q of cluster %q supplies %d", ErrInvalid, p.Name, pr.Clusters[ci].Name, p.Supply)
			}
			add(p.Kind, p.Supply)
		}
	}
	for _, w := range pr.Workloads {
		if w.Demand < 0 {
			return nil, fmt.Errorf("%w: workload %q demands %d", ErrInvalid, w.Name, w.Demand)
		}
		add(w.Kind, w.Demand)
	}
	scale := func(kind string, v int64) int64 {
		if g := gcd[kind]; g > 1 {
			return v / g
		}
		return v
	}
	m.policies = make([][]policy, m.nc)
	for ci, c := range pr.Clusters {
		for _, p := range c.Policies {
			s := scale(p.Kind, p.Supply)
			if s > MaxScaledSupply {
				return nil, fmt.Errorf("%w: policy %q supplies %d %s, too many distinct units (at most %d after dividing by the amounts' common divisor)", ErrInvalid, p.Name, p.Supply, p.Kind, MaxScaledSupply)
			}
			m.policies[ci] = append(m.policies[ci], policy{kind: kindOf(p.Kind), supply: s})
		}
	}
	m.demand = make([]int64, m.nw)
	m.kind = make([]int, m.nw)
	for wi, w := range pr.Workloads {
		m.demand[wi] = scale(w.Kind, w.Demand)
		m.kind[wi] = kindOf(w.Kind)
	}
	m.score = make([][][]float64, m.nw)
	for wi, wl := range pr.Workloads {
		m.score[wi] = make([][]float64, m.nc)
		fits, scored := false, false
		for ci := range pr.Clusters {
			row := make([]float64, len(m.policies[ci]))
			for pi, p := range m.policies[ci] {
				row[pi] = math.NaN()
				if m.demand[wi] > 0 && p.kind != m.kind[wi] {
					continue // the policy supplies none of this workload's kind
				}
				if m.demand[wi] > p.supply {
					continue
				}
				fits = true
				s, ok := pr.Score(wi, ci, pi)
				if !ok || math.IsNaN(s) || math.IsInf(s, 0) {
					continue
				}
				if s != math.Trunc(s) {
					m.integral = false
				}
				row[pi] = m.sign * s
				scored = true
			}
			m.score[wi][ci] = row
		}
		switch {
		case !fits:
			return nil, fmt.Errorf("%w: workload %q demands %d %s, no policy supplies that much", ErrInfeasible, wl.Name, wl.Demand, wl.Kind)
		case !scored:
			return nil, fmt.Errorf("%w: %q (app %q) on every cluster and policy that could hold it", ErrNoOption, wl.Name, wl.App)
		}
	}
	m.findTwins()
	m.byDemand = make([]int, m.nw)
	for w := range m.byDemand {
		m.byDemand[w] = w
	}
	slices.SortFunc(m.byDemand, func(a, b int) int { return cmp.Or(cmp.Compare(m.demand[a], m.demand[b]), cmp.Compare(b, a)) })
	// Quick infeasibility: a kind's total demand beyond what every cluster could supply at most.
	need := map[int]int64{}
	for wi := range pr.Workloads {
		need[m.kind[wi]] += m.demand[wi]
	}
	for k, n := range need {
		var most int64
		for ci := range m.policies {
			var best int64
			for _, p := range m.policies[ci] {
				if p.kind == k && p.supply > best {
					best = p.supply
				}
			}
			most += best
		}
		if n > most {
			name := ""
			for kn, ki := range kinds {
				if ki == k {
					name = kn
				}
			}
			g := max(gcd[name], 1)
			return nil, fmt.Errorf("%w: the workloads demand %d %s, the clusters can supply at most %d", ErrInfeasible, n*g, name, most*g)
		}
	}
	return m, nil
}

func gcdOf(a, b int64) int64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

// value is the objective of an assignment in the problem's own sense, and whether it is feasible.
func (m *model) value(pol, cl []int) (float64, bool) {
	used := make([]int64, m.nc)
	total := 0.0
	for w, c := range cl {
		p := pol[c]
		s := m.score[w][c][p]
		if math.IsNaN(s) {
			return 0, false
		}
		used[c] += m.demand[w]
		total += s
	}
	for c, u := range used {
		if u > m.policies[c][pol[c]].supply {
			return 0, false
		}
	}
	return total, true
}

func (m *model) findTwins() {
	m.twins = make([][]int, m.nw)
	key := func(w int) string {
		b := make([]byte, 0, 64)
		b = fmt.Appendf(b, "%d/%d", m.kind[w], m.demand[w])
		for _, row := range m.score[w] {
			for _, v := range row {
				b = fmt.Appendf(b, "/%g", v)
			}
		}
		return string(b)
	}
	groups := map[string][]int{}
	for w := 0; w < m.nw; w++ {
		k := key(w)
		groups[k] = append(groups[k], w)
	}
	for _, g := range groups {
		for _, w := range g {
			m.twins[w] = g
		}
	}
}
