package optimize

import (
	"context"
	"fmt"
	"math"
	"math/bits"
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

// Subgradient steps per node: many at the root, where the multipliers start from scratch; fewer
// below, where they start from the parent's.
const (
	rootIterations = 400
	nodeIterations = 100
)

// heuristicEvery is how many subgradient steps pass between turning the relaxation into a plan:
// often at the root, whose plans seed the whole search, less often below.
func heuristicEvery(depth int) int {
	if depth == 0 {
		return 10
	}
	return 10
}

// node is one subproblem: which policies each cluster may still take, which cluster a workload is
// forced onto (-1: free), and which (workload, cluster) pairs are forbidden.
type node struct {
	allowed []uint64
	forced  []int32
	forbid  []bool // w*nc + c
	lambda  []float64
	depth   int
	bound   float64 // the parent's bound: no plan in this subtree is better
}

func (n *node) child() *node {
	return &node{
		allowed: append([]uint64(nil), n.allowed...),
		forced:  append([]int32(nil), n.forced...),
		forbid:  append([]bool(nil), n.forbid...),
		lambda:  append([]float64(nil), n.lambda...),
		depth:   n.depth + 1,
		bound:   n.bound,
	}
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
	s.alloc()
	// A greedy plan gives the search a cutoff from the start.
	for _, h := range []*hint{nil, m.roomiest()} {
		if pol, cl, ok := m.greedy(h); ok {
			v, _ := m.value(pol, cl)
			s.offer(v, pol, cl)
		}
	}
	root := &node{bound: math.Inf(1), allowed: make([]uint64, m.nc), forced: make([]int32, m.nw), forbid: make([]bool, m.nw*m.nc), lambda: make([]float64, m.nw)}
	for c := range root.allowed {
		root.allowed[c] = (uint64(1) << len(m.policies[c])) - 1
		if len(m.policies[c]) == 64 {
			root.allowed[c] = math.MaxUint64
		}
	}
	for w := range root.forced {
		root.forced[w] = -1
	}
	// Start the multipliers at each workload's best score: the knapsacks then begin nearly empty
	// and the subgradient fills them.
	for w := range root.lambda {
		best := math.Inf(-1)
		for c := range m.score[w] {
			for _, v := range m.score[w][c] {
				if !math.IsNaN(v) && v > best {
					best = v
				}
			}
		}
		root.lambda[w] = best
	}
	stack := []*node{root}
	for len(stack) > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s.nodes >= opts.MaxNodes || (!deadline.IsZero() && time.Now().After(deadline)) {
			break
		}
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		stack = append(stack, s.evaluate(n)...)
	}
	bound := s.best
	for _, n := range stack {
		bound = math.Max(bound, n.bound)
	}
	if s.bestCl == nil {
		if len(stack) > 0 {
			return nil, fmt.Errorf("search stopped after %d nodes without finding a plan", s.nodes)
		}
		return nil, fmt.Errorf("%w: no assignment satisfies every cluster's supply", ErrInfeasible)
	}
	if m.integral {
		bound = math.Floor(bound + 1e-6)
	}
	return &Solution{Policy: s.bestPol, Cluster: s.bestCl, Objective: m.sign * s.best, Nodes: s.nodes,
		Optimal: len(stack) == 0, Bound: m.sign * bound}, nil
}

type search struct {
	m       *model
	nodes   int
	best    float64 // incumbent, maximisation sense
	floor   float64 // the lowest objective any plan can have
	bestPol []int
	bestCl  []int
	// deadline: when set, the policy search stops there too (a round of it is long).
	deadline time.Time

	// scratch
	count  []int
	choice []int       // per cluster, the policy of the relaxation's best knapsack
	kval   []float64   // per cluster, that knapsack's value
	kp     [][]float64 // per cluster and policy, its knapsack's value (-Inf: cannot hold its forced workloads)
	take   [][]int     // per cluster, the workloads in that knapsack
	items  []int
	free   []int
	dp     []float64
	keep   [][]bool
}

func (s *search) alloc() {
	s.count = make([]int, s.m.nw)
	s.choice = make([]int, s.m.nc)
	s.kval = make([]float64, s.m.nc)
	s.take = make([][]int, s.m.nc)
	s.kp = make([][]float64, s.m.nc)
	for c := range s.kp {
		s.kp[c] = make([]float64, len(s.m.policies[c]))
	}
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

// evaluate bounds n and returns its children (none when it is solved, pruned or infeasible).
func (s *search) evaluate(n *node) []*node {
	s.nodes++
	m := s.m
	// Every free workload needs an option left, every forced one its cluster.
	for w := 0; w < m.nw; w++ {
		if !s.hasOption(n, w) {
			return nil
		}
	}
	before := s.best
	iters := nodeIterations
	if n.depth == 0 {
		iters = rootIterations
	}
	bestUB := math.Inf(1)
	var bestLambda []float64
	theta := 1.0
	stall := 0
	for it := 0; it < iters; it++ {
		ub, ok := s.relax(n)
		if !ok {
			return nil // some cluster has no policy that can hold its forced workloads
		}
		if ub < bestUB-1e-9 {
			bestUB = ub
			bestLambda = append(bestLambda[:0], n.lambda...)
			stall = 0
		} else if stall++; stall >= 20 {
			theta /= 2
			stall = 0
		}
		if s.prunes(bestUB) {
			return nil
		}
		s.fixPolicies(n, ub)
		// The relaxation's solution is a plan when every workload is taken exactly once: then its
		// value equals the bound and the node is solved.
		norm := 0.0
		for w := 0; w < m.nw; w++ {
			g := float64(1 - s.count[w])
			norm += g * g
		}
		if norm == 0 {
			pol, cl := s.plan()
			if v, ok := m.value(pol, cl); ok {
				s.offer(v, pol, cl)
				return nil
			}
		}
		// Try turning this relaxation into a plan now and then: it raises the cutoff early.
		if it%heuristicEvery(n.depth) == 0 {
			if pol, cl, ok := m.repair(&hint{n: n, choice: s.choice, take: s.take}); ok {
				v, _ := m.value(pol, cl)
				s.offer(v, pol, cl)
				if s.prunes(bestUB) {
					return nil
				}
			}
			// The Lagrangian heuristic: the relaxation's policies with the workloads assigned
			// anew, nearly exactly, rather than repaired from the knapsacks' overlaps.
			if cl, ok := m.assign(s.choice, n); ok {
				if v, ok := m.value(s.choice, cl); ok {
					if n.depth == 0 && v <= s.best && v > 2*s.best-bestUB {
						// Close to the incumbent: worth the plan-wide local search.
						if ip, ic, iv := m.improve(s.choice, cl, v); iv > v {
							if check, ok := m.value(ip, ic); ok {
								s.offer(check, ip, ic)
							}
						}
					}
					s.offer(v, s.choice, cl)
					if s.prunes(bestUB) {
						return nil
					}
				}
			}
		}
		target := s.best
		if math.IsInf(target, -1) {
			target = ub - math.Max(1, 0.1*math.Abs(ub))
		}
		step := theta * (ub - target) / norm
		if step <= 0 {
			step = theta / norm
		}
		for w := 0; w < m.nw; w++ {
			if n.forced[w] >= 0 {
				continue
			}
			n.lambda[w] -= step * float64(1-s.count[w])
		}
	}
	copy(n.lambda, bestLambda)
	n.bound = math.Min(n.bound, bestUB)
	if s.bestCl != nil && (n.depth == 0 || s.best > before) {
		// At the root and whenever a node found a better plan: switch policies one at a time,
		// each judged by the whole assignment.
		rounds := 1
		if n.depth == 0 {
			rounds = 2
		}
		if pol, cl, v := m.policySearch(s.bestPol, s.bestCl, s.best, rounds, s.deadline); v > s.best {
			s.offer(v, pol, cl)
		}
		if s.prunes(bestUB) {
			return nil
		}
	}
	if _, ok := s.relax(n); !ok {
		return nil
	}
	return s.branch(n)
}

// fixPolicies drops, for the whole subtree, every policy whose choice alone would bring the bound
// ub under the incumbent: the bound with cluster c on policy p is ub - kval[c] + kp[c][p].
func (s *search) fixPolicies(n *node, ub float64) {
	if math.IsInf(s.best, -1) {
		return
	}
	for c := 0; c < s.m.nc; c++ {
		for mask := n.allowed[c]; mask != 0; mask &= mask - 1 {
			p := bits.TrailingZeros64(mask)
			if p != s.choice[c] && s.prunes(ub-s.kval[c]+s.kp[c][p]) {
				n.allowed[c] &^= 1 << p
			}
		}
	}
}

// hasOption reports whether workload w still has somewhere to go in n.
func (s *search) hasOption(n *node, w int) bool {
	m := s.m
	for c := 0; c < m.nc; c++ {
		if (n.forced[w] >= 0 && int(n.forced[w]) != c) || n.forbid[w*m.nc+c] {
			continue
		}
		for p, v := range m.score[w][c] {
			if !math.IsNaN(v) && n.allowed[c]&(1<<p) != 0 {
				return true
			}
		}
	}
	return false
}

// relax evaluates the Lagrangian relaxation at n.lambda: for each cluster the best of its allowed
// policies' knapsacks (forced workloads included by force). It fills count, choice, kval and take
// and returns the bound; ok false when a cluster has no policy able to hold its forced workloads.
func (s *search) relax(n *node) (float64, bool) {
	m := s.m
	for w := range s.count {
		s.count[w] = 0
	}
	ub := 0.0
	for w := 0; w < m.nw; w++ {
		if n.forced[w] < 0 {
			ub += n.lambda[w]
		}
	}
	for c := 0; c < m.nc; c++ {
		best := math.Inf(-1)
		bestP := -1
		var bestTake []int
		for mask := n.allowed[c]; mask != 0; mask &= mask - 1 {
			p := bits.TrailingZeros64(mask)
			v, take, ok := s.knapsack(n, c, p)
			s.kp[c][p] = math.Inf(-1)
			if ok {
				s.kp[c][p] = v
			}
			if ok && v > best {
				best, bestP = v, p
				bestTake = append(bestTake[:0], take...)
			}
		}
		if bestP < 0 {
			return 0, false
		}
		s.choice[c], s.kval[c] = bestP, best
		s.take[c] = append(s.take[c][:0], bestTake...)
		for _, w := range bestTake {
			s.count[w]++
		}
		ub += best
	}
	return ub, true
}

// knapsack solves cluster c under policy p exactly: forced workloads of c must fit, free ones are
// taken when their reduced profit score-λ is positive and they fit, by dynamic programming over
// the supply.
func (s *search) knapsack(n *node, c, p int) (float64, []int, bool) {
	m := s.m
	capacity := m.policies[c][p].supply
	value := 0.0
	take := s.items[:0]
	free := s.free[:0]
	// In order of demand, so a table row is only as wide as needed.
	for _, w := range m.byDemand {
		sc := m.score[w][c][p]
		if n.forced[w] == int32(c) {
			if math.IsNaN(sc) {
				return 0, nil, false
			}
			capacity -= m.demand[w]
			value += sc
			take = append(take, w)
			continue
		}
		if n.forced[w] >= 0 || n.forbid[w*m.nc+c] || math.IsNaN(sc) {
			continue
		}
		r := sc - n.lambda[w]
		if r <= 0 {
			continue
		}
		if m.demand[w] == 0 {
			value += r
			take = append(take, w)
			continue
		}
		free = append(free, w)
	}
	s.free = free
	if capacity < 0 {
		return 0, nil, false
	}
	if len(free) > 0 && capacity > 0 {
		capn := int(capacity)
		if cap(s.dp) < capn+1 {
			s.dp = make([]float64, capn+1)
		}
		dp := s.dp[:capn+1]
		for i := range dp {
			dp[i] = 0
		}
		for len(s.keep) < len(free) {
			s.keep = append(s.keep, nil)
		}
		for i, w := range free {
			if cap(s.keep[i]) < capn+1 {
				s.keep[i] = make([]bool, capn+1)
			}
			k := s.keep[i][:capn+1]
			for j := range k {
				k[j] = false
			}
			d := int(m.demand[w])
			r := m.score[w][c][p] - n.lambda[w]
			for j := capn; j >= d; j-- {
				if v := dp[j-d] + r; v > dp[j] {
					dp[j] = v
					k[j] = true
				}
			}
		}
		value += dp[capn]
		j := capn
		for i := len(free) - 1; i >= 0; i-- {
			if s.keep[i][j] {
				take = append(take, free[i])
				j -= int(m.demand[free[i]])
			}
		}
	}
	s.items = take
	return value, take, true
}

// plan reads a plan off a relaxation whose every workload is taken exactly once.
func (s *search) plan() ([]int, []int) {
	pol := append([]int(nil), s.choice...)
	cl := make([]int, s.m.nw)
	for c, ws := range s.take {
		for _, w := range ws {
			cl[w] = c
		}
	}
	return pol, cl
}

// branch splits n. While a cluster may still take several policies, it fixes the one the
// relaxation picked for the most valuable such cluster (child first) or forbids it. Then, on a
// workload the relaxation did not take exactly once: force it onto the cluster the relaxation
// likes best for it, or forbid that cluster.
func (s *search) branch(n *node) []*node {
	m := s.m
	bc := -1
	for c := 0; c < m.nc; c++ {
		if bits.OnesCount64(n.allowed[c]) > 1 && (bc < 0 || s.kval[c] > s.kval[bc]) {
			bc = c
		}
	}
	if bc >= 0 {
		p := s.choice[bc]
		fix, drop := n.child(), n.child()
		fix.allowed[bc] = 1 << p
		drop.allowed[bc] &^= 1 << p
		return []*node{drop, fix} // the stack pops fix first
	}
	bw, bcl := -1, -1
	bestR := math.Inf(-1)
	for w := 0; w < m.nw; w++ {
		if n.forced[w] >= 0 || s.count[w] == 1 {
			continue
		}
		for c := 0; c < m.nc; c++ {
			if n.forbid[w*m.nc+c] {
				continue
			}
			sc := m.score[w][c][s.choice[c]]
			if math.IsNaN(sc) {
				continue
			}
			if r := sc - n.lambda[w]; r > bestR || bw < 0 {
				bestR, bw, bcl = r, w, c
			}
		}
		if bw >= 0 {
			break
		}
	}
	if bw < 0 {
		return nil // every cluster is fixed and no workload can move: nothing left to split
	}
	force, forbid := n.child(), n.child()
	force.forced[bw] = int32(bcl)
	// Twins are interchangeable: only plans with twins on non-decreasing clusters are searched,
	// which every plan can be permuted into.
	for _, t := range m.twins[bw] {
		for c := 0; c < m.nc; c++ {
			if (t < bw && c > bcl) || (t > bw && c < bcl) {
				force.forbid[t*m.nc+c] = true
			}
		}
	}
	forbid.forbid[bw*m.nc+bcl] = true
	return []*node{forbid, force}
}
