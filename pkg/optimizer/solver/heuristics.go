package solver

import (
	"context"
	"fmt"
	"math"
	"math/bits"
	"slices"
)

// The heuristics turn masters into plans, so that the tree has an incumbent to prune with early:
// rounding each master (each cluster on its most used policy) and, once per such policy vector,
// searching that vector's assignments exactly by count branching (a depth-first search of at most
// fixedNodes masters); at the root also the assignment by min-cost flow with local search
// (transport.go) and a dive that fixes the policies the master has nearly decided. Every plan
// offered goes through the local search of repair.go first. Searching the rounded policies'
// assignments exactly matters: on the optimal policies of 50 × 5 × 200, the flow's rounding with
// local search finds 13,492, the exact search 13,497.

// fixedNodes bounds the masters fixed solves per policy vector.
const fixedNodes = 20

// offer makes a plan the incumbent if it is better, after improving it by local search.
func (s *search) offer(ctx context.Context, v float64, pol, cl []int) {
	if v <= s.best {
		return
	}
	if ip, ic, iv := s.m.improve(ctx, pol, cl, v); iv > v {
		if check, ok := s.m.value(ip, ic); ok && math.Abs(check-iv) < 1e-6 {
			pol, cl, v = ip, ic, check
		}
	}
	s.best = v
	s.bestPol = slices.Clone(pol)
	s.bestCl = append(make([]int, 0, len(cl)), cl...) // never nil: no workloads is the empty plan
}

// whole offers the plan of a master solution whose every cluster has one policy and whole group
// counts.
func (s *search) whole(ctx context.Context, res *lpResult, pol []int) {
	m, gr := s.m, s.ms.gr
	cl := make([]int, m.nw)
	next := make([]int, gr.n)
	for c := 0; c < m.nc; c++ {
		for g := 0; g < gr.n; g++ {
			k := int(math.Round(res.xcg[c*gr.n+g]))
			for ; k > 0 && next[g] < len(gr.ws[g]); k-- {
				cl[gr.ws[g][next[g]]] = c
				next[g]++
			}
		}
	}
	if v, ok := m.value(pol, cl); ok {
		s.offer(ctx, v, pol, cl)
	}
}

// roundedPolicies is each cluster's most used policy in a master solution.
func (s *search) roundedPolicies(res *lpResult) []int {
	pol := make([]int, s.m.nc)
	for c := range pol {
		for p, x := range res.xcp[c] {
			if x > res.xcp[c][pol[c]] {
				pol[c] = p
			}
		}
	}
	return pol
}

// searchRounded looks for plans with the rounded policies of a master, once per policy vector
// (nearby nodes round to the same one): at the root by the flow assignment, and everywhere by
// fixed.
func (s *search) searchRounded(ctx context.Context, res *lpResult, pol []int, root bool) {
	key := fmt.Sprint(pol)
	if s.tried[key] {
		return
	}
	s.tried[key] = true
	if root {
		if cl, ok := s.m.assign(ctx, pol, nil); ok {
			if v, ok := s.m.value(pol, cl); ok {
				s.offer(ctx, v, pol, cl)
			}
		}
	}
	s.fixed(ctx, pol, res.basis)
}

// fixed searches the plans with the given policies by branching on group counts, depth first,
// rounding toward the nearer whole count first, for at most fixedNodes masters. With policies
// fixed the master is nearly a transportation problem and usually nearly whole, so this finds
// the best assignment that rounding a flow can miss, or shows quickly that the policies cannot
// beat the incumbent. It searches within the counts the root's master fixed: every plan better
// than the incumbent keeps them, and without them, where the root's bound is within one of the
// incumbent, its masters go to counts that cannot improve it.
func (s *search) fixed(ctx context.Context, pol []int, basis []int) {
	root := s.ms.root()
	if s.rootLo != nil {
		root.lo, root.hi = s.rootLo, s.rootHi
	}
	for c, p := range pol {
		root.allowed[c] = 1 << p
	}
	root.basis = basis
	stack := []*bpNode{root}
	for budget := fixedNodes; len(stack) > 0 && budget > 0 && ctx.Err() == nil; budget-- {
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		res := s.solveMaster(ctx, n)
		if res.infeas || res.pruned || !res.converged {
			continue
		}
		bi, bf := -1, 1e-6
		for i, x := range res.xcg {
			if f := frac(x); f > bf {
				bi, bf = i, f
			}
		}
		if bi < 0 {
			if !res.artif {
				s.whole(ctx, res, pol)
			}
			continue
		}
		k := int32(math.Floor(res.xcg[bi]))
		le, ge := n.child(res), n.child(res)
		le.setBound(bi, le.lo[bi], k)
		ge.setBound(bi, k+1, ge.hi[bi])
		if res.xcg[bi]-float64(k) > 0.5 {
			stack = append(stack, le, ge)
		} else {
			stack = append(stack, ge, le)
		}
	}
}

// dive looks for a plan below the root by fixing policies the master already (nearly) decided:
// every cluster whose policy is used at 0.99 or more, and the most used of the rest, then solving
// the master again, until every policy is fixed or the bound falls under the incumbent. Each
// master along the way is rounded into a plan.
func (s *search) dive(ctx context.Context, root *bpNode, rootRes *lpResult) {
	n := root.child(rootRes)
	for ctx.Err() == nil {
		res := s.solveMaster(ctx, n)
		if res.infeas || res.pruned || !res.converged {
			return
		}
		pol := s.roundedPolicies(res)
		s.searchRounded(ctx, res, pol, false)
		next := n.child(res)
		bc, bp, bx := -1, -1, -1.0
		for c, xs := range res.xcp {
			if bits.OnesCount64(next.allowed[c]) < 2 {
				continue
			}
			for p, x := range xs {
				if next.allowed[c]&(1<<p) == 0 {
					continue
				}
				if x >= 0.99 {
					next.allowed[c] = 1 << p
				} else if x > bx {
					bc, bp, bx = c, p, x
				}
			}
		}
		if bc >= 0 {
			next.allowed[bc] = 1 << bp
			n = next
			continue
		}
		// Every policy fixed: round the group count nearest to a whole number, until all are.
		bi, bf := -1, 0.5
		for i, x := range res.xcg {
			if f := frac(x); f > 1e-6 && f < bf {
				bi, bf = i, f
			}
		}
		if bi < 0 {
			if !res.artif {
				s.whole(ctx, res, pol)
			}
			return
		}
		if x := res.xcg[bi]; x < math.Round(x) {
			next.setBound(bi, int32(math.Round(x)), next.hi[bi])
		} else {
			next.setBound(bi, next.lo[bi], int32(math.Round(x)))
		}
		n = next
	}
}
