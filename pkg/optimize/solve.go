package optimize

import (
	"context"
	"fmt"
	"math"
	"time"
)

// Options tune the search. The zero value is sensible.
type Options struct {
	// MaxNodes and TimeLimit bound the search (0: 1,000,000 nodes, no time limit). When either
	// runs out, Solve returns the best plan found with Optimal false and the proven Bound, so the
	// caller sees how far from optimal it can be; never a silently worse plan.
	MaxNodes  int
	TimeLimit time.Duration
}

// node is a set of constraints on plans, as the greedy and the assignment heuristic take them:
// which policies each cluster may take, which cluster a workload is forced onto (-1: free), and
// which (workload, cluster) pairs are forbidden.
type node struct {
	allowed []uint64
	forced  []int32
	forbid  []bool // w*nc + c
}

// Solve returns a proven optimal plan, or an error wrapping ErrNoOption, ErrInfeasible or
// ErrInvalid, or ctx's error, or an error when the node budget runs out.
func Solve(ctx context.Context, pr Problem, opts Options) (*Solution, error) {
	m, err := build(pr)
	if err != nil {
		return nil, err
	}
	if opts.MaxNodes == 0 {
		opts.MaxNodes = 1000000
	}
	var deadline time.Time
	if opts.TimeLimit > 0 {
		deadline = time.Now().Add(opts.TimeLimit)
	}
	s := &search{m: m, best: math.Inf(-1), deadline: deadline}
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
	// A greedy plan gives the search a cutoff from the start.
	for _, h := range []*hint{nil, m.roomiest()} {
		if bareTree {
			break
		}
		if pol, cl, ok := m.greedy(h); ok {
			v, _ := m.value(pol, cl)
			s.offer(v, pol, cl)
		}
	}
	open, err := s.branchAndPrice(newPricer(m), ctx, opts.MaxNodes)
	if err != nil {
		return nil, err
	}
	bound := s.best
	for _, n := range open {
		bound = math.Max(bound, n.bound)
	}
	if s.bestCl == nil {
		if len(open) > 0 {
			return nil, fmt.Errorf("search stopped after %d nodes without finding a plan", s.nodes)
		}
		return nil, fmt.Errorf("%w: no assignment satisfies every cluster's supply", ErrInfeasible)
	}
	if m.integral {
		bound = math.Floor(bound + 1e-6)
	}
	return &Solution{Policy: s.bestPol, Cluster: s.bestCl, Objective: m.sign * s.best, Nodes: s.nodes,
		Optimal: len(open) == 0, Bound: m.sign * bound}, nil
}

type search struct {
	m       *model
	nodes   int
	best    float64 // incumbent, maximisation sense
	floor   float64 // the lowest objective any plan can have
	bestPol []int
	bestCl  []int
	// deadline: when set, heuristics stop there too.
	deadline time.Time
}

func (s *search) offer(v float64, pol, cl []int) {
	if v > s.best {
		if ip, ic, iv := s.m.improve(pol, cl, v); iv > v {
			if check, ok := s.m.value(ip, ic); ok && math.Abs(check-iv) < 1e-6 {
				pol, cl, v = ip, ic, check
			}
		}
		s.best = v
		s.bestPol = append([]int(nil), pol...)
		s.bestCl = append([]int(nil), cl...)
	}
}

// prunes reports whether a node whose bound is ub cannot beat the incumbent.
func (s *search) prunes(ub float64) bool {
	if math.IsInf(s.best, -1) {
		return ub < s.floor-1e-6
	}
	if s.m.integral {
		return math.Floor(ub+1e-6) <= s.best
	}
	return ub <= s.best+1e-9*math.Max(1, math.Abs(s.best))
}
