package solver

import (
	"fmt"
	"math"
	"sort"
)

// hint is what the greedy may be told: constraints, and a policy per cluster.
type hint struct {
	n      *node
	choice []int
}

// Greedy is a fast plan without a proof: workloads in order of regret (how much they lose if their
// best option is taken), each on its best option that still fits, a cluster's policy fixed by its
// first workload. Solve uses it for a first cutoff; benchmarks compare against it.
func Greedy(pr Problem) (*Solution, error) {
	m, err := build(pr)
	if err != nil {
		return nil, err
	}
	pol, cl, ok := m.greedy(nil)
	if !ok {
		pol, cl, ok = m.greedy(m.roomiest())
	}
	if !ok {
		return nil, fmt.Errorf("%w: the greedy found no plan", ErrInfeasible)
	}
	return &Solution{Policy: pol, Cluster: cl, Objective: m.objective(cl, pol)}, nil
}

// roomiest is a hint that gives every cluster its policy of largest supply: when preferring scores
// first runs out of room, room first usually still finds a plan.
func (m *model) roomiest() *hint {
	n := &node{allowed: make([]uint64, m.nc), forced: make([]int32, m.nw), forbid: make([]bool, m.nw*m.nc)}
	choice := make([]int, m.nc)
	for c := range choice {
		for p, pp := range m.policies[c] {
			if pp.supply > m.policies[c][choice[c]].supply {
				choice[c] = p
			}
		}
		n.allowed[c] = 1 << choice[c]
	}
	for w := range n.forced {
		n.forced[w] = -1
	}
	return &hint{n: n, choice: choice}
}

// greedy builds a plan. With a hint, clusters keep the relaxation's policies and the node's
// constraints hold; without, a cluster's policy is whichever its first workload prefers.
func (m *model) greedy(h *hint) ([]int, []int, bool) {
	pol := make([]int, m.nc)
	used := make([]int64, m.nc)
	for c := range pol {
		pol[c] = -1
		if h != nil {
			pol[c] = h.choice[c]
		}
	}
	allowedOpt := func(w, c, p int) bool {
		if math.IsNaN(m.score[w][c][p]) {
			return false
		}
		if h == nil {
			return true
		}
		n := h.n
		if (n.forced[w] >= 0 && int(n.forced[w]) != c) || n.forbid[w*m.nc+c] {
			return false
		}
		return n.allowed[c]&(1<<p) != 0
	}
	fits := func(w, c, p int) bool {
		if pol[c] >= 0 && pol[c] != p {
			return false
		}
		return used[c]+m.demand[w] <= m.policies[c][p].supply
	}
	// Regret against the options under the current policies (all of them when none is fixed).
	regret := make([]float64, m.nw)
	order := make([]int, m.nw)
	for w := range order {
		order[w] = w
		b1, b2 := math.Inf(-1), math.Inf(-1)
		for c := 0; c < m.nc; c++ {
			for p, v := range m.score[w][c] {
				if !allowedOpt(w, c, p) || (pol[c] >= 0 && pol[c] != p) {
					continue
				}
				if v > b1 {
					b1, b2 = v, b1
				} else if v > b2 {
					b2 = v
				}
			}
		}
		switch {
		case math.IsInf(b1, -1):
			return nil, nil, false
		case math.IsInf(b2, -1):
			regret[w] = math.Inf(1) // one option: place it before anything takes its room
		default:
			regret[w] = b1 - b2
		}
		if h != nil && h.n.forced[w] >= 0 {
			regret[w] = math.Inf(1)
		}
	}
	sort.SliceStable(order, func(i, j int) bool {
		if regret[order[i]] != regret[order[j]] {
			return regret[order[i]] > regret[order[j]]
		}
		return m.demand[order[i]] > m.demand[order[j]]
	})
	cl := make([]int, m.nw)
	for _, w := range order {
		bc, bp := -1, -1
		best := math.Inf(-1)
		for c := 0; c < m.nc; c++ {
			for p, v := range m.score[w][c] {
				if allowedOpt(w, c, p) && fits(w, c, p) && v > best {
					best, bc, bp = v, c, p
				}
			}
		}
		if bc < 0 {
			return nil, nil, false
		}
		pol[bc] = bp
		used[bc] += m.demand[w]
		cl[w] = bc
	}
	for c := range pol {
		if pol[c] < 0 {
			pol[c] = 0 // holds nothing: any policy does
		}
	}
	return pol, cl, true
}
