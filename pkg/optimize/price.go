package optimize

import (
	"cmp"
	"container/heap"
	"fmt"
	"math"
	"math/bits"
	"slices"
	"time"
)

// Branch and price over workload groups. Twins (workloads of the same kind and demand scoring the
// same everywhere) are interchangeable, so a cluster's part of a plan is a pattern: its policy and
// how many workloads of each group it holds. The master linear program picks a convex combination
// of patterns per cluster so that every group is placed in full:
//
//	maximise   Σ_j v[j]·x[j]
//	           Σ_j n[g,j]·x[j] = N[g]   every group placed (dual π[g])
//	           Σ_{j of c} x[j] = 1       one pattern per cluster (dual μ[c])
//
// Patterns are generated as needed: the best pattern of cluster c under policy p for duals π is a
// bounded knapsack over the groups with profits s[g,c,p] - π[g], solved by dynamic programming.
// For any π, Σ_g N[g]·π[g] + Σ_c max_pattern (v - n·π) bounds every plan (it is the Lagrangian
// relaxation of the group rows), so a node's bound is valid at every round, not only once the
// column generation has converged. Its best value is the linear program's, which equals the
// Lagrangian dual of the per-workload relaxation; with whole scores it rounds down.
//
// Branching first fixes or forbids a cluster's policy, then splits a cluster's count of a group
// (≤ k or ≥ k+1). A solution whose every cluster has one policy and whole group counts is a plan:
// the counts, averaged over a cluster's patterns of one policy, form a pattern themselves.

// groups are the twin classes, in order of their first workload.
type groups struct {
	n     int
	ws    [][]int       // workloads of each group
	d     []int64       // demand
	count []int         // len(ws[g])
	s     [][][]float64 // s[g][c][p], NaN when not allowed
}

func (m *model) groups() *groups {
	gr := &groups{}
	seen := map[int]int{}
	for w := 0; w < m.nw; w++ {
		first := m.twins[w][0]
		g, ok := seen[first]
		if !ok {
			g = gr.n
			seen[first] = g
			gr.n++
			gr.ws = append(gr.ws, nil)
			gr.d = append(gr.d, m.demand[w])
			gr.s = append(gr.s, m.score[w])
		}
		gr.ws[g] = append(gr.ws[g], w)
	}
	for _, ws := range gr.ws {
		gr.count = append(gr.count, len(ws))
	}
	return gr
}

// pattern is one cluster's policy and group counts, and its value.
type pattern struct {
	c, p  int
	cnt   []int32
	value float64
}

// bpNode is a subproblem: the policies each cluster may take and bounds on each cluster's count of
// each group.
type bpNode struct {
	allowed []uint64
	lo, hi  []int32 // [c*ng+g]
	bound   float64 // the parent's bound
	depth   int
	seq     int
	basis   []int // the parent's final basis in the master (nil: the artificials)
}

// child copies n's policies; the count bounds are shared until setBound changes them (most
// branches only touch policies, and the bounds are clusters × groups).
func (n *bpNode) child() *bpNode {
	return &bpNode{allowed: append([]uint64(nil), n.allowed...), lo: n.lo, hi: n.hi, bound: n.bound,
		depth: n.depth + 1, basis: n.basis}
}

// setBound sets the count bounds of entry i (cluster × groups + group) on n alone.
func (n *bpNode) setBound(i int, lo, hi int32) {
	n.lo = append([]int32(nil), n.lo...)
	n.hi = append([]int32(nil), n.hi...)
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

// pricer holds the column pool and the knapsack scratch.
type pricer struct {
	m    *model
	gr   *groups
	pool []pattern
	bigM float64
	lp   *simplex // the master: artificials, then the pool's columns in order
	// tried: the policy vectors already handed to the assignment heuristic.
	tried map[string]bool
	// scratch
	dp    []float64
	keep  [][]bool
	piece []struct {
		g int
		k int32
		d int64
		r float64
	}
	cnt []int32
}

func newPricer(m *model) *pricer {
	pr := &pricer{m: m, gr: m.groups(), tried: map[string]bool{}}
	spread := 1.0
	for w := range m.score {
		lo, hi := math.Inf(1), math.Inf(-1)
		for _, row := range m.score[w] {
			for _, v := range row {
				if !math.IsNaN(v) {
					lo, hi = math.Min(lo, v), math.Max(hi, v)
				}
			}
		}
		spread += hi - lo + math.Abs(hi)
	}
	// An artificial unit costs more than any plan can gain: its dual then never hides a column.
	pr.bigM = 100 * spread
	pr.cnt = make([]int32, pr.gr.n)
	return pr
}

func (pr *pricer) root() *bpNode {
	m, ng := pr.m, pr.gr.n
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
			n.hi[c*ng+g] = int32(pr.gr.count[g])
		}
	}
	return n
}

// fits reports whether a pattern respects n's constraints.
func (pr *pricer) fits(n *bpNode, pt *pattern) bool {
	if n.allowed[pt.c]&(1<<pt.p) == 0 {
		return false
	}
	ng := pr.gr.n
	for g, k := range pt.cnt {
		if k < n.lo[pt.c*ng+g] || k > n.hi[pt.c*ng+g] {
			return false
		}
	}
	return true
}

// knapsack is the best pattern of cluster c under policy p within n's count bounds for group duals
// pi: its reduced value Σ n[g]·(s - π[g]) and counts (in pr.cnt); ok false when the lower bounds
// do not fit or need a group the policy cannot hold.
func (pr *pricer) knapsack(n *bpNode, c, p int, pi []float64) (float64, bool) {
	m, gr, ng := pr.m, pr.gr, pr.gr.n
	capacity := m.policies[c][p].supply
	value := 0.0
	pr.piece = pr.piece[:0]
	for g := 0; g < ng; g++ {
		lo, hi := n.lo[c*ng+g], n.hi[c*ng+g]
		pr.cnt[g] = lo
		s := gr.s[g][c][p]
		if math.IsNaN(s) {
			if lo > 0 {
				return 0, false
			}
			continue
		}
		r := s - pi[g]
		capacity -= int64(lo) * gr.d[g]
		value += float64(lo) * r
		extra := hi - lo
		if r <= 0 || extra <= 0 {
			continue
		}
		if gr.d[g] == 0 {
			pr.cnt[g] += extra
			value += float64(extra) * r
			continue
		}
		// Binary pieces 1, 2, 4, … make the bounded knapsack a 0-1 one.
		for k := int32(1); extra > 0; k *= 2 {
			t := min(k, extra)
			pr.piece = append(pr.piece, struct {
				g int
				k int32
				d int64
				r float64
			}{g, t, int64(t) * gr.d[g], float64(t) * r})
			extra -= t
		}
	}
	if capacity < 0 {
		return 0, false
	}
	if len(pr.piece) == 0 || capacity == 0 {
		return value, true
	}
	capn := int(capacity)
	if cap(pr.dp) < capn+1 {
		pr.dp = make([]float64, capn+1)
	}
	dp := pr.dp[:capn+1]
	clear(dp)
	for len(pr.keep) < len(pr.piece) {
		pr.keep = append(pr.keep, nil)
	}
	for i, pc := range pr.piece {
		if cap(pr.keep[i]) < capn+1 {
			pr.keep[i] = make([]bool, capn+1)
		}
		k := pr.keep[i][:capn+1]
		clear(k)
		d := int(pc.d)
		for j := capn; j >= d; j-- {
			if v := dp[j-d] + pc.r; v > dp[j] {
				dp[j] = v
				k[j] = true
			}
		}
	}
	value += dp[capn]
	j := capn
	for i := len(pr.piece) - 1; i >= 0; i-- {
		if pr.keep[i][j] {
			pr.cnt[pr.piece[i].g] += pr.piece[i].k
			j -= int(pr.piece[i].d)
		}
	}
	return value, true
}

// lpResult is a node's solved master.
type lpResult struct {
	bound  float64     // best Lagrangian bound seen at the node
	basis  []int       // the master's final basis, where the children start
	artif  bool        // an artificial (or a column the node bars) is still positive
	xcp    [][]float64 // per cluster and policy, the weight of its patterns
	xcg    []float64   // [c*ng+g]: per cluster, the group's count over its patterns
	infeas bool        // no plan satisfies the node's constraints
	pruned bool        // the bound fell under the incumbent
}

// solveNode runs column generation at n. prunes tells it when a bound can stop early.
func (pr *pricer) solveNode(n *bpNode, prunes func(float64) bool, stop func() bool) *lpResult {
	m, gr, ng := pr.m, pr.gr, pr.gr.n
	rows := ng + m.nc
	b := make([]float64, rows)
	for g := 0; g < ng; g++ {
		b[g] = float64(gr.count[g])
	}
	for c := 0; c < m.nc; c++ {
		b[ng+c] = 1
	}
	if pr.lp == nil {
		pr.lp = newSimplex(b, pr.bigM)
	}
	lp := pr.lp
	res := &lpResult{bound: n.bound}
	// Columns the node excludes stay in the master at the artificials' cost, so a basis from the
	// parent stays feasible and the simplex starts from it.
	bar := func() {
		for i := range pr.pool {
			c := &lp.cols[rows+i]
			c.off = !pr.fits(n, &pr.pool[i])
			c.cost = pr.pool[i].value
			if c.off {
				c.cost = -pr.bigM
			}
		}
	}
	bar()
	if n.basis != nil && !slices.Equal(n.basis, lp.basis) {
		lp.warm(n.basis)
	} else if n.basis == nil {
		lp.warm(lp.basis)
	}
	addCol := func(i int) {
		pt := &pr.pool[i]
		col := lpCol{cost: pt.value}
		for g, k := range pt.cnt {
			if k != 0 {
				col.idx = append(col.idx, g)
				col.val = append(col.val, float64(k))
			}
		}
		col.idx = append(col.idx, ng+pt.c)
		col.val = append(col.val, 1)
		lp.add(col)
	}
	kp := make([]float64, 64)
	kpAll := make([]float64, m.nc*64)
	for round := 0; ; round++ {
		lp.solve()
		lp.duals()
		pi := lp.y[:ng]
		L := 0.0
		for g := 0; g < ng; g++ {
			L += float64(gr.count[g]) * pi[g]
		}
		added := 0
		for c := 0; c < m.nc; c++ {
			best := math.Inf(-1)
			for mask := n.allowed[c]; mask != 0; mask &= mask - 1 {
				p := bits.TrailingZeros64(mask)
				kp[p] = math.Inf(-1)
				v, ok := pr.knapsack(n, c, p, pi)
				if !ok {
					n.allowed[c] &^= 1 << p // no pattern of this policy fits the node's bounds
					continue
				}
				kp[p] = v
				best = math.Max(best, v)
				if v-lp.y[ng+c] > 1e-6 {
					cnt := append([]int32(nil), pr.cnt...)
					val := 0.0
					for g, k := range cnt {
						if k != 0 {
							val += float64(k) * gr.s[g][c][p]
						}
					}
					pr.pool = append(pr.pool, pattern{c: c, p: p, cnt: cnt, value: val})
					addCol(len(pr.pool) - 1)
					added++
				}
			}
			if math.IsInf(best, -1) {
				res.infeas = true
				return res
			}
			L += best
			// Store per-policy reduced values for fixing below.
			for mask := n.allowed[c]; mask != 0; mask &= mask - 1 {
				p := bits.TrailingZeros64(mask)
				kpAll[c*64+p] = kp[p] - best
			}
		}
		if L < res.bound {
			res.bound = L
		}
		// A policy whose choice alone brings the bound under the incumbent is dropped for the
		// subtree: with c on p, the bound is L - best[c] + kp[c][p].
		dropped := false
		for c := 0; c < m.nc; c++ {
			for mask := n.allowed[c]; mask != 0; mask &= mask - 1 {
				p := bits.TrailingZeros64(mask)
				if prunes(L + kpAll[c*64+p]) {
					n.allowed[c] &^= 1 << p
					dropped = true
				}
			}
			if n.allowed[c] == 0 {
				res.infeas = true
				return res
			}
		}
		if dropped {
			bar() // the master's columns of dropped policies leave it
		}
		if prunes(res.bound) {
			res.pruned = true
			return res
		}
		if (added == 0 && !dropped) || stop() {
			break
		}
	}
	res.basis = append([]int(nil), lp.basis...)
	res.xcp = make([][]float64, m.nc)
	for c := range res.xcp {
		res.xcp[c] = make([]float64, len(m.policies[c]))
	}
	res.xcg = make([]float64, m.nc*ng)
	for k, j := range lp.basis {
		x := lp.x[k]
		if x <= 1e-9 {
			continue
		}
		if j < rows {
			res.artif = true
			continue
		}
		pt := &pr.pool[j-rows]
		if !pr.fits(n, pt) {
			res.artif = true
			continue
		}
		res.xcp[pt.c][pt.p] += x
		for g, k := range pt.cnt {
			res.xcg[pt.c*ng+g] += x * float64(k)
		}
	}
	return res
}

// branchAndPrice searches from the root until the queue empties or the budget runs out, and
// returns the open nodes left.
func (s *search) branchAndPrice(pr *pricer, ctx interface{ Err() error }, maxNodes int) ([]*bpNode, error) {
	q := &nodeQueue{}
	heap.Push(q, pr.root())
	seq := 0
	stop := func() bool { return !s.deadline.IsZero() && time.Now().After(s.deadline) }
	for q.Len() > 0 {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		if s.nodes >= maxNodes || stop() {
			break
		}
		n := heap.Pop(q).(*bpNode)
		if s.prunes(n.bound) {
			continue
		}
		s.nodes++
		for _, ch := range s.evaluateBP(pr, n, stop) {
			seq++
			ch.seq = seq
			heap.Push(q, ch)
		}
	}
	return *q, nil
}

// evaluateBP solves n's master, turns it into plans, and returns n's children (or n itself when
// the budget stopped its column generation before it converged).
func (s *search) evaluateBP(pr *pricer, n *bpNode, stop func() bool) []*bpNode {
	res := pr.solveNode(n, s.prunes, stop)
	if res.infeas || res.pruned {
		return nil
	}
	n.bound = res.bound
	n.basis = res.basis
	pol := s.rounded(pr, res, n.depth == 0)
	if n.depth == 0 && !bareTree {
		s.dive(pr, n, stop)
	}
	if s.prunes(n.bound) {
		return nil
	}
	if stop() {
		return []*bpNode{n}
	}
	frac := func(x float64) float64 { return math.Min(x-math.Floor(x), math.Ceil(x)-x) }
	type cand struct {
		c, p int
		f    float64
	}
	var cands []cand
	for c := range res.xcp {
		for p, x := range res.xcp[c] {
			if f := frac(x); f > 1e-6 {
				cands = append(cands, cand{c, p, f})
			}
		}
	}
	if len(cands) > 0 {
		slices.SortStableFunc(cands, func(a, b cand) int { return cmp.Compare(b.f, a.f) })
		split := func(k cand) (*bpNode, *bpNode) {
			fix, drop := n.child(), n.child()
			fix.allowed[k.c] &= 1 << k.p
			drop.allowed[k.c] &^= 1 << k.p
			return fix, drop
		}
		if n.depth >= strongDepth || len(cands) == 1 {
			fix, drop := split(cands[0])
			return []*bpNode{fix, drop}
		}
		// Strong branching near the root: solve both children of the most fractional
		// candidates and keep the split whose children's bounds fall furthest (the product of
		// the falls, so that both must fall).
		var best []*bpNode
		bestScore := math.Inf(-1)
		for _, k := range cands[:min(len(cands), strongCandidates)] {
			fix, drop := split(k)
			var kids []*bpNode
			score := 1.0
			for _, ch := range []*bpNode{fix, drop} {
				r := pr.solveNode(ch, s.prunes, stop)
				if r.infeas || r.pruned {
					score *= n.bound - math.Floor(s.best) + 1
					continue
				}
				ch.bound = r.bound
				ch.basis = r.basis
				score *= math.Max(n.bound-r.bound, 1e-3)
				kids = append(kids, ch)
			}
			if score > bestScore {
				best, bestScore = kids, score
			}
			if len(kids) == 0 {
				break
			}
		}
		return best
	}
	bi, bf := -1, 1e-6
	for i, x := range res.xcg {
		if f := frac(x); f > bf {
			bi, bf = i, f
		}
	}
	if bi >= 0 {
		k := int32(math.Floor(res.xcg[bi]))
		le, ge := n.child(), n.child()
		le.setBound(bi, le.lo[bi], k)
		ge.setBound(bi, k+1, ge.hi[bi])
		countBranches++
		return []*bpNode{le, ge}
	}
	if res.artif {
		return nil // whole counts with a workload left out: no plan here
	}
	s.whole(pr, res, pol)
	return nil
}

// Strong branching is tried on this many candidates at nodes shallower than strongDepth: at
// 50 × 5 × 200 it cuts the nodes by a third to two thirds for about as much work per node.
const (
	strongCandidates = 8
	strongDepth      = 8
)

// bareTree turns the heuristics off (the greedy, rounding, the fixed-policy search, the dive),
// so that tests see the tree alone find and prove optima.
var bareTree = false

// whole offers the plan of a master solution whose every cluster has one policy and whole group
// counts.
func (s *search) whole(pr *pricer, res *lpResult, pol []int) {
	m, ng := s.m, pr.gr.n
	cl := make([]int, m.nw)
	next := make([]int, ng)
	for c := 0; c < m.nc; c++ {
		for g := 0; g < ng; g++ {
			k := int(math.Round(res.xcg[c*ng+g]))
			for ; k > 0 && next[g] < len(pr.gr.ws[g]); k-- {
				cl[pr.gr.ws[g][next[g]]] = c
				next[g]++
			}
		}
	}
	if v, ok := m.value(pol, cl); ok {
		s.offer(v, pol, cl)
	}
}

// rounded turns a master solution into a plan: each cluster on its most used policy, the
// workloads assigned anew (once per policy vector: nearby nodes round to the same one). It
// returns the policies.
func (s *search) rounded(pr *pricer, res *lpResult, root bool) []int {
	m := s.m
	pol := make([]int, m.nc)
	for c := range pol {
		for p, x := range res.xcp[c] {
			if x > res.xcp[c][pol[c]] {
				pol[c] = p
			}
		}
	}
	if key := fmt.Sprint(pol); !pr.tried[key] && !bareTree {
		pr.tried[key] = true
		if root {
			if cl, ok := m.assign(pol, nil); ok {
				if v, ok := m.value(pol, cl); ok {
					s.offer(v, pol, cl)
				}
			}
		}
		s.fixed(pr, pol, res.basis, fixedNodes)
	}
	return pol
}

// fixedNodes bounds the search fixed does per policy vector.
const fixedNodes = 20

// fixed searches the plans with the given policies by branching on group counts, depth first,
// rounding toward the nearer whole count first, for at most budget masters. With policies fixed
// the master is nearly a transportation problem and usually nearly whole, so this finds the
// best assignment that rounding a flow can miss, or shows quickly that the policies cannot beat
// the incumbent.
func (s *search) fixed(pr *pricer, pol []int, basis []int, budget int) {
	root := pr.root()
	for c, p := range pol {
		root.allowed[c] = 1 << p
	}
	root.basis = basis
	stack := []*bpNode{root}
	for len(stack) > 0 && budget > 0 && (s.deadline.IsZero() || time.Now().Before(s.deadline)) {
		budget--
		n := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		res := pr.solveNode(n, s.prunes, func() bool { return false })
		if res.infeas || res.pruned {
			continue
		}
		bi, bf := -1, 1e-6
		for i, x := range res.xcg {
			if f := math.Abs(x - math.Round(x)); f > bf {
				bi, bf = i, f
			}
		}
		if bi < 0 {
			if !res.artif {
				s.whole(pr, res, pol)
			}
			continue
		}
		k := int32(math.Floor(res.xcg[bi]))
		le, ge := n.child(), n.child()
		le.basis, ge.basis = res.basis, res.basis
		le.setBound(bi, le.lo[bi], k)
		ge.setBound(bi, k+1, ge.hi[bi])
		if res.xcg[bi]-float64(k) > 0.5 {
			stack = append(stack, le, ge)
		} else {
			stack = append(stack, ge, le)
		}
	}
}

// dive looks for a plan below n by fixing policies the master already (nearly) decided: every
// cluster whose policy is used at 0.99 or more, and the most used of the rest, then solving the
// master again, until every policy is fixed or the bound falls under the incumbent. Each master
// along the way is rounded into a plan.
func (s *search) dive(pr *pricer, root *bpNode, stop func() bool) {
	n := root.child()
	for step := 0; !stop(); step++ {
		res := pr.solveNode(n, s.prunes, stop)
		if res.infeas || res.pruned {
			return
		}
		pol := s.rounded(pr, res, n.depth == 0)
		n = n.child()
		n.basis = res.basis
		bc, bp, bx := -1, -1, -1.0
		for c, xs := range res.xcp {
			if bits.OnesCount64(n.allowed[c]) < 2 {
				continue
			}
			for p, x := range xs {
				if n.allowed[c]&(1<<p) == 0 {
					continue
				}
				if x >= 0.99 {
					n.allowed[c] = 1 << p
				} else if x > bx {
					bc, bp, bx = c, p, x
				}
			}
		}
		if bc >= 0 {
			n.allowed[bc] = 1 << bp
			continue
		}
		// Every policy fixed: round the group count nearest to a whole number, until all are.
		bi, bf := -1, 0.5
		for i, x := range res.xcg {
			if f := math.Abs(x - math.Round(x)); f > 1e-6 && f < bf {
				bi, bf = i, f
			}
		}
		if bi < 0 {
			if !res.artif {
				s.whole(pr, res, pol)
			}
			return
		}
		if x := res.xcg[bi]; x < math.Round(x) {
			n.setBound(bi, int32(math.Round(x)), n.hi[bi])
		} else {
			n.setBound(bi, n.lo[bi], int32(math.Round(x)))
		}
	}
}

// countBranches counts branchings on group counts, for tests to see that they happen.
var countBranches int
