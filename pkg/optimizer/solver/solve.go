package solver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"time"
)

// Options tune the search. The zero value is sensible.
type Options struct {
	// MaxNodes and TimeLimit bound the search (0: 1,000,000 nodes, no time limit). When either
	// runs out, Solve returns the best plan found with Optimal false and the proven Bound, so the
	// caller sees how far from optimal it can be; never a silently worse plan. Every loop of the
	// search (simplex iterations, pricing, heuristics, local search) stops at the time limit.
	MaxNodes  int
	TimeLimit time.Duration

	// noHeuristics turns the heuristics off (the greedy, rounding, the fixed-policy search, the
	// dive), so that tests see the tree alone find and prove optima.
	noHeuristics bool
}

// node is a set of constraints on plans, as the greedy and the assignment heuristic take them:
// which policies each cluster may take, which cluster a workload is forced onto (-1: free), and
// which (workload, cluster) pairs are forbidden.
type node struct {
	allowed []uint64
	forced  []int32
	forbid  []bool // w*nc + c
}

// Solve returns a proven optimal plan, or the best plan found when a budget ran out, or an error
// wrapping ErrNoOption, ErrInfeasible or ErrInvalid, or ctx's error, or an error when a budget ran
// out before any plan was found. With no workloads the empty plan is the optimum (objective 0).
func Solve(ctx context.Context, pr Problem, opts Options) (*Solution, error) {
	m, err := build(pr)
	if err != nil {
		return nil, err
	}
	sol, _, err := solveModel(ctx, m, opts)
	return sol, err
}

// solveModel is Solve after build; it returns the search too, for tests to see its counters.
func solveModel(ctx context.Context, m *model, opts Options) (*Solution, *search, error) {
	if opts.MaxNodes <= 0 {
		opts.MaxNodes = 1000000
	}
	limited := ctx
	if opts.TimeLimit > 0 {
		var cancel context.CancelFunc
		limited, cancel = context.WithTimeout(ctx, opts.TimeLimit)
		defer cancel()
	}
	s := newSearch(m, opts)
	open := s.run(limited)
	if err := ctx.Err(); err != nil {
		return nil, s, err // the caller's context, not the time limit
	}
	bound := s.best
	for _, n := range open {
		bound = math.Max(bound, n.bound)
	}
	if math.IsInf(s.best, -1) {
		if len(open) > 0 {
			return nil, s, fmt.Errorf("%w after %d nodes without finding a plan", ErrStopped, s.nodes)
		}
		return nil, s, fmt.Errorf("%w: no assignment satisfies every cluster's supply", ErrInfeasible)
	}
	if m.integral {
		bound = math.Floor(bound + 1e-6)
	}
	sol := &Solution{Policy: s.bestPol, Cluster: s.bestCl, Objective: m.objective(s.bestCl, s.bestPol), Nodes: s.nodes,
		Optimal: len(open) == 0, Bound: m.external(bound)}
	// The bound is no worse than the plan: the two are equal when it is optimal, and mapping the
	// bound back to the problem's terms rounds differently from summing the plan's scores.
	if sol.Optimal || m.sign*sol.Bound < m.sign*sol.Objective {
		sol.Bound = sol.Objective
	}
	return sol, s, nil
}

// ErrStopped: a budget (time, nodes) ran out before the search found any plan.
var ErrStopped = errors.New("search stopped")

// search is one run of Solve: the model, the master, the incumbent and the counters.
type search struct {
	m          *model
	ms         *master
	maxNodes   int
	heuristics bool
	nodes      int
	// countBranches counts branchings on group counts, for tests to see that they happen.
	countBranches int
	// stalled: the simplex hit its iteration cap; the search ends with its bound.
	stalled bool
	best    float64 // incumbent, maximisation sense
	floor   float64 // the lowest objective any plan can have
	bestPol []int
	bestCl  []int
	// tried: the policy vectors already handed to the rounding heuristics.
	tried map[string]bool
	pc    *pseudocosts
	// rootLo, rootHi: the count bounds the root's master fixed (nil: none). They hold for every
	// plan that beats the incumbent, so the heuristics search within them.
	rootLo, rootHi []int32
}

func newSearch(m *model, opts Options) *search {
	ms := newMaster(m)
	s := &search{m: m, ms: ms, maxNodes: opts.MaxNodes, heuristics: !opts.noHeuristics,
		best: math.Inf(-1), tried: map[string]bool{}, pc: newPseudocosts(ms.policyKeys() + m.nc*ms.gr.n)}
	// No plan scores below every workload's worst option: a bound under that means no plan.
	for w := range m.score {
		worst := math.Inf(1)
		for _, row := range m.score[w] {
			for _, v := range row {
				if !math.IsNaN(v) {
					worst = math.Min(worst, v)
				}
			}
		}
		s.floor += worst
	}
	return s
}

// run searches until done or stopped and returns the open nodes.
func (s *search) run(ctx context.Context) []*bpNode {
	if s.heuristics {
		// A greedy plan gives the search a cutoff from the start.
		for _, h := range []*hint{nil, s.m.roomiest()} {
			if pol, cl, ok := s.m.greedy(h); ok {
				v, _ := s.m.value(pol, cl)
				s.offer(ctx, v, pol, cl)
			}
		}
	}
	return s.branchAndPrice(ctx, s.ms.seed(s.bestPol, s.bestCl))
}

// tol is how close two objectives near v must be to count as equal: above what column generation
// leaves between the master's value and the bound once no pattern improves by more than 1e-6 (one
// such pattern per cluster), far below the difference between two plans' values (sums of
// normalised scores, whose widest range per workload is 64 to 128: see model.normalise).
func (m *model) tol(v float64) float64 { return 1e-6*float64(m.nc+1) + 1e-9*math.Abs(v) }

// prunes reports whether a node whose bound is ub cannot beat the incumbent.
func (s *search) prunes(ub float64) bool {
	if math.IsInf(s.best, -1) {
		return ub < s.floor-s.m.tol(s.floor)
	}
	if s.m.integral {
		return math.Floor(ub+1e-6) <= s.best
	}
	return ub <= s.best+s.m.tol(s.best)
}
