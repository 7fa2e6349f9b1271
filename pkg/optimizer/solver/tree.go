package solver

import (
	"container/heap"
	"context"
	"math"
	"slices"
)

// The branch-and-price tree. A node fixes or forbids clusters' policies and bounds clusters'
// counts of groups (branch.go chooses which). A master solution whose every cluster has one
// policy and whole group counts is a plan: the counts, averaged over a cluster's patterns of one
// policy, form a pattern themselves. Nodes are taken best bound first.

// bpNode is a subproblem: the policies each cluster may take and bounds on each cluster's count of
// each group.
type bpNode struct {
	allowed []uint64
	lo, hi  []int32 // [c*ng+g]
	bound   float64 // the best objective a plan of the node can have, as far as known
	depth   int
	seq     int
	basis   []int // a basis of the master to start from (nil: the artificials)
	origin  *branchOrigin
}

// root is the node without constraints.
func (ms *master) root() *bpNode {
	m, ng := ms.m, ms.gr.n
	// Until a master is solved, no plan beats every workload on its best option.
	best := 0.0
	for w := range m.score {
		b := math.Inf(-1)
		for _, row := range m.score[w] {
			for _, v := range row {
				if !math.IsNaN(v) {
					b = math.Max(b, v)
				}
			}
		}
		best += b
	}
	n := &bpNode{allowed: make([]uint64, m.nc), lo: make([]int32, m.nc*ng), hi: make([]int32, m.nc*ng), bound: best}
	for c := range n.allowed {
		n.allowed[c] = (uint64(1) << len(m.policies[c])) - 1
		if len(m.policies[c]) == 64 {
			n.allowed[c] = math.MaxUint64
		}
		for g := 0; g < ng; g++ {
			n.hi[c*ng+g] = int32(ms.gr.count[g])
		}
	}
	return n
}

// child is a subproblem of n with n's solved master: its policies as the master left them, its
// bound and basis. The count bounds are shared until setBound changes them (most branches only
// touch policies, and the bounds are clusters × groups).
func (n *bpNode) child(res *lpResult) *bpNode {
	ch := &bpNode{allowed: slices.Clone(res.allowed), lo: n.lo, hi: n.hi, bound: res.bound, depth: n.depth + 1, basis: res.basis}
	if res.lo != nil {
		ch.lo, ch.hi = res.lo, res.hi
	}
	return ch
}

// again is n itself with what a stopped column generation learnt: its bound and basis.
func (n *bpNode) again(res *lpResult) *bpNode {
	a := *n
	a.allowed, a.bound = slices.Clone(res.allowed), res.bound
	if res.basis != nil {
		a.basis = res.basis
	}
	return &a
}

// setBound sets the count bounds of entry i (cluster × groups + group) on n alone.
func (n *bpNode) setBound(i int, lo, hi int32) {
	n.lo = slices.Clone(n.lo)
	n.hi = slices.Clone(n.hi)
	n.lo[i], n.hi[i] = lo, hi
}

// nodeQueue is best bound first, deeper first among equals, then oldest.
type nodeQueue []*bpNode

func (q nodeQueue) Len() int { return len(q) }
func (q nodeQueue) Less(i, j int) bool {
	if q[i].bound != q[j].bound {
		return q[i].bound > q[j].bound
	}
	if q[i].depth != q[j].depth {
		return q[i].depth > q[j].depth
	}
	return q[i].seq < q[j].seq
}
func (q nodeQueue) Swap(i, j int) { q[i], q[j] = q[j], q[i] }
func (q *nodeQueue) Push(x any)   { *q = append(*q, x.(*bpNode)) }
func (q *nodeQueue) Pop() any {
	old := *q
	n := old[len(old)-1]
	*q = old[:len(old)-1]
	return n
}

// branchAndPrice searches from the root (its master starting from basis) until the queue empties,
// the context is done, the node budget runs out or the simplex stalls, and returns the open nodes
// left.
func (s *search) branchAndPrice(ctx context.Context, basis []int) []*bpNode {
	q := &nodeQueue{}
	root := s.ms.root()
	root.basis = basis
	heap.Push(q, root)
	seq := 0
	for q.Len() > 0 && ctx.Err() == nil && s.nodes < s.maxNodes && !s.stalled {
		n := heap.Pop(q).(*bpNode)
		if s.prunes(n.bound) {
			continue
		}
		s.nodes++
		for _, ch := range s.evaluate(ctx, n) {
			seq++
			ch.seq = seq
			heap.Push(q, ch)
		}
	}
	return *q
}

// evaluate solves n's master, turns it into plans, and returns n's children (or n again when its
// column generation was stopped before it converged).
func (s *search) evaluate(ctx context.Context, n *bpNode) []*bpNode {
	res := s.solveMaster(ctx, n)
	switch {
	case res.infeas:
		return nil
	case res.pruned:
		s.observe(n.origin, res.bound)
		return nil
	case !res.converged:
		return []*bpNode{n.again(res)}
	}
	s.observe(n.origin, res.bound)
	if n.depth == 0 && res.lo != nil {
		s.rootLo, s.rootHi = res.lo, res.hi
	}
	pol := s.roundedPolicies(res)
	if s.heuristics {
		s.searchRounded(ctx, res, pol, n.depth == 0)
		if n.depth == 0 {
			s.dive(ctx, n, res)
		}
	}
	if s.prunes(res.bound) {
		return nil
	}
	if ctx.Err() != nil {
		return []*bpNode{n.again(res)}
	}
	if kids, ok := s.branch(ctx, n, res); ok {
		return kids
	}
	if !res.artif {
		s.whole(ctx, res, pol) // whole counts and policies: a plan
	}
	return nil // or whole counts with a workload left out: no plan here
}

// solveMaster is column generation at n, noting a stalled simplex in the search.
func (s *search) solveMaster(ctx context.Context, n *bpNode) *lpResult {
	return s.solveMasterTight(ctx, n, true)
}

// solveMasterTight is solveMaster with count fixing (tighten) or without.
func (s *search) solveMasterTight(ctx context.Context, n *bpNode, tighten bool) *lpResult {
	res := s.ms.solve(ctx, n, s.prunes, tighten)
	s.stalled = s.stalled || res.stalled
	return res
}

func frac(x float64) float64 { return math.Min(x-math.Floor(x), math.Ceil(x)-x) }
