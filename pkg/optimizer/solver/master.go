package solver

import (
	"context"
	"math"
	"math/bits"
	"slices"
)

// The master problem. Its linear program picks a convex combination of patterns per cluster so
// that every group is placed in full:
//
//	maximise   Σ_j v[j]·x[j]
//	           Σ_j n[g,j]·x[j] = N[g]   every group placed (dual π[g])
//	           Σ_{j of c} x[j] = 1       one pattern per cluster (dual μ[c])
//
// Only a pool of patterns is in it; column generation adds, at each round, every cluster and
// policy's best pattern for the current duals whose reduced value is positive. For any π,
//
//	L(π) = Σ_g N[g]·π[g] + Σ_c max_{p, pattern of c under p} (v - n·π)
//
// bounds every plan (it is the Lagrangian relaxation of the group rows), so a node's bound is
// valid at every round, converged or not, and its least value is the linear program's. The
// duals are smoothed (Wentges): patterns are priced at a point between the duals that gave the
// best bound so far and the master's, which damps the oscillation that otherwise takes column
// generation on degenerate masters through hundreds of rounds; when that point yields no
// improving column, the master's own duals are priced, and only they can end the generation.

// smoothing is the weight of the best-bound duals in the pricing point.
const smoothing = 0.5

// master is the restricted master problem over the pool of patterns generated so far.
type master struct {
	m    *model
	gr   *groups
	pr   *pricer
	pool []pattern
	lp   *simplex // artificials, then the pool's columns in order
	bigM float64
}

func newMaster(m *model) *master {
	gr := m.groups()
	ms := &master{m: m, gr: gr, pr: newPricer(m, gr)}
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
	ms.bigM = 100 * spread
	b := make([]float64, gr.n+m.nc)
	for g := 0; g < gr.n; g++ {
		b[g] = float64(gr.count[g])
	}
	for c := 0; c < m.nc; c++ {
		b[gr.n+c] = 1
	}
	ms.lp = newSimplex(b, ms.bigM)
	return ms
}

// lpResult is what column generation at a node found.
type lpResult struct {
	bound   float64  // the least Lagrangian bound seen at the node (never above the parent's)
	allowed []uint64 // the node's policies, less those whose choice alone brings the bound under the incumbent
	// converged: the generation ended (no improving pattern, or the bound met the master's
	// value), so the master's solution below is the node's; false when the context or the
	// simplex's iteration cap stopped it first. The bound and infeas hold either way.
	converged bool
	stalled   bool // the simplex hit its iteration cap
	infeas    bool // no plan satisfies the node's constraints
	pruned    bool // the bound fell under the incumbent
	basis     []int
	artif     bool        // an artificial (or a column the node bars) is still positive
	xcp       [][]float64 // per cluster and policy, the weight of its patterns
	xcg       []float64   // [c*ng+g]: per cluster, the group's count over its patterns
	// lo, hi: the node's count bounds tightened by fixCounts (nil: unchanged), fixed how many.
	lo, hi []int32
	fixed  int
}

// rounds is one column generation at a node: its state between rounds.
type rounds struct {
	ms      *master
	n       *bpNode
	res     *lpResult
	prunes  func(float64) bool
	bestL   float64   // the least bound priced at this node
	center  []float64 // its group duals (nil: none yet)
	sep     []float64 // the pricing point
	reduced []float64 // [c*64+p]: the best pattern's reduced value, less the cluster's best
}

// solve runs column generation at node n, starting from the node's basis. prunes tells it when a
// bound is under the incumbent. With tighten, a converged master's duals also fix the counts they
// can (fixCounts, the result's lo and hi); a trial solve of strong branching, whose children keep
// only their bound and basis, goes without. n is not changed.
func (ms *master) solve(ctx context.Context, n *bpNode, prunes func(float64) bool, tighten bool) *lpResult {
	r := &rounds{ms: ms, n: n, prunes: prunes, bestL: math.Inf(1), sep: make([]float64, ms.gr.n), reduced: make([]float64, ms.m.nc*64),
		res: &lpResult{bound: n.bound, allowed: slices.Clone(n.allowed)}}
	ms.bar(r.res.allowed, n)
	ms.lp.warm(n.basis)
	for !r.done(ctx) {
	}
	if r.res.infeas || r.res.pruned {
		return r.res
	}
	if tighten && r.res.converged && r.center != nil {
		r.fixCounts(ctx)
	}
	ms.read(r.n, r.res)
	return r.res
}

// fixCounts tightens the node's count bounds where moving a cluster's count of a group by one,
// alone, brings the bound under the incumbent: with duals π, a plan where cluster c holds at least
// lo+1 (at most hi-1) of group g is bounded by L(π) with c's term replaced by its best pattern
// under that bound, so if that prunes, the count stays at lo (hi). Only groups whose count at c is
// free by one (workloads with no twin, or the last of a group) are tried: one knapsack per policy,
// and only for the side c's best pattern is not on (that side's best is c's best, which does not
// prune: L(π) itself does not). The best pattern stays within every count fixed here, since each
// fix keeps the side it is on, so it stays c's best throughout.
func (r *rounds) fixCounts(ctx context.Context) {
	ms, res, ng := r.ms, r.res, r.ms.gr.n
	pi := r.center
	L := 0.0
	for g := 0; g < ng; g++ {
		L += float64(ms.gr.count[g]) * pi[g]
	}
	best := make([]float64, ms.m.nc)
	bestCnt := make([][]int32, ms.m.nc) // per cluster, its best pattern's counts
	for c := range best {
		best[c] = math.Inf(-1)
		for mask := res.allowed[c]; mask != 0; mask &= mask - 1 {
			if v, ok := ms.pr.knapsack(ctx, r.n.lo, r.n.hi, c, bits.TrailingZeros64(mask), pi); ok && v > best[c] {
				best[c] = v
				bestCnt[c] = append(bestCnt[c][:0], ms.pr.cnt...)
			}
		}
		L += best[c]
	}
	// Tried on a copy of the node's bounds, which the result keeps if anything is fixed.
	lo, hi := slices.Clone(r.n.lo), slices.Clone(r.n.hi)
	bestWith := func(c int) float64 {
		v := math.Inf(-1)
		for mask := res.allowed[c]; mask != 0; mask &= mask - 1 {
			if k, ok := ms.pr.knapsack(ctx, lo, hi, c, bits.TrailingZeros64(mask), pi); ok {
				v = math.Max(v, k)
			}
		}
		return v
	}
	for c := range best {
		for g := 0; g < ng; g++ {
			i := c*ng + g
			if hi[i]-lo[i] != 1 {
				continue
			}
			l, h := lo[i], hi[i]
			switch {
			case bestCnt[c] == nil:
			case bestCnt[c][g] == l: // the best pattern holds l: try one more
				lo[i] = h
				more := bestWith(c)
				lo[i] = l
				if r.prunes(L - best[c] + more) {
					hi[i] = l
					res.fixed++
				}
			default: // it holds h: try one fewer
				hi[i] = l
				fewer := bestWith(c)
				hi[i] = h
				if r.prunes(L - best[c] + fewer) {
					lo[i] = h
					res.fixed++
				}
			}
		}
	}
	if res.fixed > 0 {
		res.lo, res.hi = lo, hi
	}
}

// done runs one round: solve the master, price, tighten. It reports whether the generation ended.
func (r *rounds) done(ctx context.Context) bool {
	ms, res, ng := r.ms, r.res, r.ms.gr.n
	st := ms.lp.solve(ctx)
	if st == lpIterLimit {
		// A numerical failure: once more from the artificial basis before giving up.
		ms.lp.cold()
		st = ms.lp.solve(ctx)
	}
	switch st {
	case lpStopped:
		return true
	case lpIterLimit:
		res.stalled = true
		return true
	}
	z, pi := ms.lp.objective(), ms.lp.y[:ng]
	added := 0
	if r.center != nil {
		for g := range r.sep {
			r.sep[g] = smoothing*r.center[g] + (1-smoothing)*pi[g]
		}
		added = r.price(ctx, r.sep)
	}
	if added == 0 && !res.infeas && !res.pruned && ctx.Err() == nil {
		added = r.price(ctx, pi) // no improving pattern at the smoothed point: price the master's duals
	}
	switch {
	case res.infeas || res.pruned || ctx.Err() != nil:
		return true
	case added == 0 || r.closed(z):
		res.converged = true
		return true
	}
	return false
}

// closed reports whether the bound has met the master's value z, so that more rounds cannot lower
// the node's bound (with whole scores: its whole part).
func (r *rounds) closed(z float64) bool {
	if r.ms.m.integral {
		return math.Floor(r.res.bound+1e-6) <= math.Floor(z+1e-6)
	}
	return r.res.bound-z <= r.ms.m.tol(z)
}

// price solves every allowed cluster and policy's knapsack at group duals at, adds to the master
// the patterns whose reduced value at the master's duals is positive, and lowers the node's bound
// to L(at). It returns how many patterns it added.
func (r *rounds) price(ctx context.Context, at []float64) int {
	ms, res, m, ng := r.ms, r.res, r.ms.m, r.ms.gr.n
	y := ms.lp.y // the master's duals: π (groups), then μ (clusters)
	L := 0.0
	for g := 0; g < ng; g++ {
		L += float64(ms.gr.count[g]) * at[g]
	}
	var kp [64]float64
	added := 0
	for c := 0; c < m.nc; c++ {
		best := math.Inf(-1)
		for mask := res.allowed[c]; mask != 0; mask &= mask - 1 {
			p := bits.TrailingZeros64(mask)
			v, ok := ms.pr.knapsack(ctx, r.n.lo, r.n.hi, c, p, at)
			if !ok {
				res.allowed[c] &^= 1 << p // no pattern of this policy fits the node's bounds
				kp[p] = math.Inf(-1)
				continue
			}
			kp[p] = v
			best = math.Max(best, v)
			pt := pattern{c: c, p: p, cnt: slices.Clone(ms.pr.cnt)}
			rc := -y[ng+c]
			for g, k := range pt.cnt {
				if k != 0 {
					pt.value += float64(k) * ms.gr.s[g][c][p]
					rc += float64(k) * (ms.gr.s[g][c][p] - y[g])
				}
			}
			if rc > 1e-6 {
				ms.add(pt)
				added++
			}
		}
		if math.IsInf(best, -1) {
			res.infeas = true
			return added
		}
		L += best
		for mask := res.allowed[c]; mask != 0; mask &= mask - 1 {
			p := bits.TrailingZeros64(mask)
			r.reduced[c*64+p] = kp[p] - best
		}
	}
	if L < r.bestL {
		r.bestL = L
		r.center = append(r.center[:0], at...)
	}
	res.bound = math.Min(res.bound, L)
	if r.prunes(res.bound) {
		res.pruned = true
		return added
	}
	// A policy whose choice alone brings the bound under the incumbent is dropped for the
	// subtree: with c on p, the bound is L - best[c] + kp[c][p].
	dropped := false
	for c := 0; c < m.nc; c++ {
		for mask := res.allowed[c]; mask != 0; mask &= mask - 1 {
			p := bits.TrailingZeros64(mask)
			if r.prunes(L + r.reduced[c*64+p]) {
				res.allowed[c] &^= 1 << p
				dropped = true
			}
		}
		if res.allowed[c] == 0 {
			res.infeas = true
			return added
		}
	}
	if dropped {
		ms.bar(res.allowed, r.n) // the master's columns of dropped policies leave it
		added++                  // the master changed: solve it again
	}
	return added
}

// fits reports whether a pattern respects a node's policies and count bounds.
func (ms *master) fits(allowed []uint64, n *bpNode, pt *pattern) bool {
	if allowed[pt.c]&(1<<pt.p) == 0 {
		return false
	}
	ng := ms.gr.n
	for g, k := range pt.cnt {
		if k < n.lo[pt.c*ng+g] || k > n.hi[pt.c*ng+g] {
			return false
		}
	}
	return true
}

// bar marks the pool's columns that a node excludes. They stay in the master, barred, so a basis
// from the parent stays a basis and the simplex starts from it. It is fits for every column, read
// sparsely: a pattern's counts are checked where its column has entries (the groups it holds),
// and the groups it leaves out only where the node requires some of them.
func (ms *master) bar(allowed []uint64, n *bpNode) {
	ng, rows := ms.gr.n, ms.gr.n+ms.m.nc
	need := make([][]int, ms.m.nc) // per cluster, the groups it must hold some of
	for i, l := range n.lo {
		if l > 0 {
			need[i/ng] = append(need[i/ng], i%ng)
		}
	}
	for i := range ms.pool {
		pt, col := &ms.pool[i], &ms.lp.cols[rows+i]
		col.off = !ms.fitsSparse(allowed, n, pt, col.idx, need[pt.c])
	}
}

// fitsSparse is fits for a pattern whose nonzero counts are at groups (then the cluster's row,
// past the groups) and whose cluster must hold some of each group of need.
func (ms *master) fitsSparse(allowed []uint64, n *bpNode, pt *pattern, groups []int, need []int) bool {
	if allowed[pt.c]&(1<<pt.p) == 0 {
		return false
	}
	ng := ms.gr.n
	for _, g := range groups {
		if g >= ng {
			break
		}
		if k, i := pt.cnt[g], pt.c*ng+g; k < n.lo[i] || k > n.hi[i] {
			return false
		}
	}
	for _, g := range need {
		if pt.cnt[g] < n.lo[pt.c*ng+g] {
			return false
		}
	}
	return true
}

// add puts a pattern into the pool and the master.
func (ms *master) add(pt pattern) {
	ms.pool = append(ms.pool, pt)
	col := lpCol{cost: pt.value}
	for g, k := range pt.cnt {
		if k != 0 {
			col.idx = append(col.idx, g)
			col.val = append(col.val, float64(k))
		}
	}
	col.idx = append(col.idx, ms.gr.n+pt.c)
	col.val = append(col.val, 1)
	ms.lp.add(col)
}

// read sets the result's basis and the master's solution per cluster, policy and group.
func (ms *master) read(n *bpNode, res *lpResult) {
	m, ng, rows := ms.m, ms.gr.n, ms.gr.n+ms.m.nc
	lp := ms.lp
	res.basis = slices.Clone(lp.basis)
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
		pt := &ms.pool[j-rows]
		if !ms.fits(res.allowed, n, pt) {
			res.artif = true
			continue
		}
		res.xcp[pt.c][pt.p] += x
		for g, k := range pt.cnt {
			res.xcg[pt.c*ng+g] += x * float64(k)
		}
	}
}

// seed puts a plan's patterns into the master and returns the basis they make with the group rows'
// artificials (at zero): a feasible start whose value is the plan's, so that column generation at
// the root begins where the heuristics left off. Without a plan it returns nil.
func (ms *master) seed(pol, cl []int) []int {
	if pol == nil {
		return nil
	}
	ng, rows := ms.gr.n, ms.gr.n+ms.m.nc
	group := make([]int, ms.m.nw)
	for g, ws := range ms.gr.ws {
		for _, w := range ws {
			group[w] = g
		}
	}
	pts := make([]pattern, ms.m.nc)
	for c := range pts {
		pts[c] = pattern{c: c, p: pol[c], cnt: make([]int32, ng)}
	}
	for w, c := range cl {
		pts[c].cnt[group[w]]++
		pts[c].value += ms.m.score[w][c][pol[c]]
	}
	basis := make([]int, rows)
	for g := range ng {
		basis[g] = g
	}
	for c, pt := range pts {
		basis[ng+c] = rows + len(ms.pool)
		ms.add(pt)
	}
	return basis
}
