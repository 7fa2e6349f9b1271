package solver

import (
	"cmp"
	"context"
	"math"
	"slices"
	"sort"
)

// Pricing: the column generation's subproblem. Twins (workloads of the same kind and demand
// scoring the same everywhere) are interchangeable, so a cluster's part of a plan is a pattern:
// its policy and how many workloads of each group it holds. For group duals π, the best pattern
// of cluster c under policy p within a node's count bounds is a bounded knapsack over the groups
// with profits s[g,c,p] - π[g] and weights the groups' demands (amounts divided by their common
// divisor), solved exactly: by a table over a small supply, by a dynamic programme over partial
// patterns, pruned by linear bounds, over a large one.

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

// pricer solves the pricing knapsacks; it holds their scratch space.
type pricer struct {
	m  *model
	gr *groups
	// tableMax: capacities up to it are solved by the table (see knapsack); tests lower it.
	tableMax int64
	item     []item    // the groups that may gain
	piece    []piece   // the items' binary pieces
	dp       []float64 // the table: the best value per capacity
	keep     [][]bool  // per piece and capacity: the table took the piece
	wsum     []int64   // wsum[i]: the weight of piece[:i]
	vsum     []float64 // vsum[i]: their value
	st       []state   // every stage's states, one stage after another
	take     []bool    // per piece: in the greedy's pattern
	cnt      []int32   // the counts of the last knapsack's pattern
}

// tableMax is the largest capacity the pricing solves by a table over the capacity: up to it the
// table (pieces × (capacity+1) cells) costs less than sorting the items and bounding the states,
// which proving GPU-slice plans within the optimizer's limit needs (docs/performance.md;
// BenchmarkPricingSmallSupply).
const tableMax = 128

// piece is k workloads of group g taken together: weight d, value r.
type piece struct {
	g int
	k int32
	d int64
	r float64
}

// item is a group that gains from being in the pattern: its free count n, each worth r, r/d per
// unit of supply.
type item struct {
	q, r float64
	g, n int32
}

// state is a partial pattern of the dynamic programme over states: the weight and value of the
// pieces taken so far, and the state of the previous stage it extends (took: by taking that
// stage's piece).
type state struct {
	w      int64
	v      float64
	parent int32
	took   bool
}

func newPricer(m *model, gr *groups) *pricer {
	return &pricer{m: m, gr: gr, tableMax: tableMax, cnt: make([]int32, gr.n)}
}

// knapsack is the best pattern of cluster c under policy p within the count bounds lo and hi
// ([c*groups+g]) for group duals pi: its reduced value Σ n[g]·(s - π[g]) and counts (in pr.cnt);
// ok false when the lower bounds do not fit or need a group the policy cannot hold.
//
// It is exact: the column generation's bound L(π) and its proof that no column improves rest on
// it. Only when ctx is done part way does it return, instead of the optimum, an upper bound on it
// (the linear relaxation's), with a pattern that fits: L(π) stays a valid bound, and the search
// stops there anyway.
//
// A small capacity (at most tableMax, as GPU slices are) is solved by a table over the capacity;
// a larger one, a supply of 60,000 millicores say, by a dynamic programme over the pieces' states
// (pieces), whose cost does not grow with the capacity.
func (pr *pricer) knapsack(ctx context.Context, lo, hi []int32, c, p int, pi []float64) (float64, bool) {
	m, gr, ng := pr.m, pr.gr, pr.gr.n
	capacity := m.policies[c][p].supply
	value := 0.0
	pr.item = pr.item[:0]
	for g := 0; g < ng; g++ {
		l, h := lo[c*ng+g], hi[c*ng+g]
		pr.cnt[g] = l
		s := gr.s[g][c][p]
		if math.IsNaN(s) {
			if l > 0 {
				return 0, false
			}
			continue
		}
		r := s - pi[g]
		capacity -= int64(l) * gr.d[g]
		value += float64(l) * r
		extra := h - l
		if r <= 0 || extra <= 0 {
			continue
		}
		if gr.d[g] == 0 {
			pr.cnt[g] += extra
			value += float64(extra) * r
			continue
		}
		pr.item = append(pr.item, item{q: r / float64(gr.d[g]), r: r, g: int32(g), n: extra})
	}
	if capacity < 0 {
		return 0, false
	}
	pr.item = slices.DeleteFunc(pr.item, func(it item) bool { return gr.d[it.g] > capacity })
	if len(pr.item) == 0 {
		return value, true
	}
	if capacity <= pr.tableMax {
		pr.split()
		return value + pr.table(capacity), true
	}
	// Best value per unit first (ties by group, so that the search is deterministic).
	slices.SortFunc(pr.item, func(a, b item) int {
		switch {
		case a.q > b.q:
			return -1
		case a.q < b.q:
			return 1
		}
		return cmp.Compare(a.g, b.g)
	})
	pr.split()
	best, ok := pr.pieces(ctx, capacity)
	if !ok {
		return value + pr.relaxed(0, capacity), true
	}
	return value + best, true
}

// split makes pr.piece the items' binary pieces 1, 2, 4, … in the items' order, which make the
// bounded knapsack a 0-1 one.
func (pr *pricer) split() {
	pr.piece = pr.piece[:0]
	for _, it := range pr.item {
		d := pr.gr.d[it.g]
		for k, extra := int32(1), it.n; extra > 0; k *= 2 {
			t := min(k, extra)
			pr.piece = append(pr.piece, piece{int(it.g), t, int64(t) * d, float64(t) * it.r})
			extra -= t
		}
	}
}

// table solves the 0-1 knapsack over pr.piece by a table of the best value per capacity, adds the
// pieces taken to pr.cnt and returns their value.
func (pr *pricer) table(capacity int64) float64 {
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
	j := capn
	for i := len(pr.piece) - 1; i >= 0; i-- {
		if pr.keep[i][j] {
			pr.cnt[pr.piece[i].g] += pr.piece[i].k
			j -= int(pr.piece[i].d)
		}
	}
	return dp[capn]
}

// pieces solves the 0-1 knapsack over pr.piece, in order of value per unit (best first), with the
// given capacity, adds the pieces taken to pr.cnt and returns their value; ok false when ctx was
// done first (pr.cnt then holds the greedy's pattern). Its cost does not grow with the capacity:
// it is a dynamic programme whose states are the non-dominated (weight, value) pairs of the pieces
// decided so far, rather than one entry per unit of capacity, and a state is dropped once its
// value plus the linear relaxation of the pieces left (Dantzig's bound) cannot beat the best
// pattern known, at first the greedy's. It never has more than capacity+1 states per stage, and
// on supplies in natural units far fewer: at the root of 20 × 4 × 80 with supplies of 8,000 to
// 60,000, about 30 in all per knapsack.
func (pr *pricer) pieces(ctx context.Context, capacity int64) (float64, bool) {
	pcs := pr.piece
	n := len(pcs)
	pr.wsum, pr.vsum = append(pr.wsum[:0], 0), append(pr.vsum[:0], 0)
	for _, pc := range pcs {
		pr.wsum = append(pr.wsum, pr.wsum[len(pr.wsum)-1]+pc.d)
		pr.vsum = append(pr.vsum, pr.vsum[len(pr.vsum)-1]+pc.r)
	}
	// The greedy: every piece that still fits, in order.
	pr.take = slices.Grow(pr.take[:0], n)[:n]
	best, room := 0.0, capacity
	for i, pc := range pcs {
		pr.take[i] = pc.d <= room
		if pr.take[i] {
			best += pc.r
			room -= pc.d
		}
	}
	// A state is dropped only when its bound is under the best by more than rounding could be.
	slack := 1e-9 * (1 + pr.vsum[n])
	bestAt := -1 // the state of the best pattern when it is not the greedy's
	st := append(pr.st[:0], state{parent: -1})
	from, to := 0, 1 // the previous stage's states are st[from:to]
	for i, pc := range pcs {
		if ctx.Err() != nil {
			pr.st = st
			pr.apply(-1)
			return 0, false
		}
		// Merge the states without piece i (a) and with it (b), both in order of weight, keeping
		// only states worth more than every lighter one (the rest are dominated). The states come
		// out ever heavier, so the first piece after i that no longer fits whole in what is left
		// (j, for the bound) only moves back.
		a, b := from, from
		j := -1 // found by bisection for the first state, then walked back
		last := math.Inf(-1)
		for a < to || b < to {
			var next state
			if b >= to || (a < to && (st[a].w < st[b].w+pc.d || st[a].w == st[b].w+pc.d && st[a].v >= st[b].v+pc.r)) {
				next = state{w: st[a].w, v: st[a].v, parent: int32(a)}
				a++
			} else {
				next = state{w: st[b].w + pc.d, v: st[b].v + pc.r, parent: int32(b), took: true}
				b++
				if next.w > capacity {
					b = to // the heavier ones do not fit either
					continue
				}
			}
			if next.v <= last {
				continue // dominated
			}
			last = next.v
			left := capacity - next.w
			if j < 0 {
				j = i + 1 + sort.Search(n-i-1, func(k int) bool { return pr.wsum[i+2+k]-pr.wsum[i+1] > left })
			}
			for j > i+1 && pr.wsum[j]-pr.wsum[i+1] > left {
				j--
			}
			bound := next.v + pr.vsum[j] - pr.vsum[i+1]
			if j < n {
				bound += pcs[j].r * float64(left-(pr.wsum[j]-pr.wsum[i+1])) / float64(pcs[j].d)
			}
			if bound < best-slack {
				continue // cannot beat the best, nor can the heavier states it dominates
			}
			if next.v > best {
				best, bestAt = next.v, len(st)
			}
			st = append(st, next)
		}
		from, to = to, len(st)
	}
	pr.st = st
	pr.apply(bestAt)
	return best, true
}

// apply adds to pr.cnt the pieces of the pattern ending in state at, or the greedy's when at < 0.
func (pr *pricer) apply(at int) {
	if at < 0 {
		for i, pc := range pr.piece {
			if pr.take[i] {
				pr.cnt[pc.g] += pc.k
			}
		}
		return
	}
	// Walk back to the first state. The state at has decided len(path) pieces; the one k steps
	// back from it decided piece len(path)-1-k.
	var path []int
	for s := at; pr.st[s].parent >= 0; s = int(pr.st[s].parent) {
		path = append(path, s)
	}
	for k, s := range path {
		if pr.st[s].took {
			pc := pr.piece[len(path)-1-k]
			pr.cnt[pc.g] += pc.k
		}
	}
}

// relaxed is the linear relaxation of the pieces from i on within capacity: whole pieces in order
// while they fit, then a fraction of the next.
func (pr *pricer) relaxed(i int, capacity int64) float64 {
	n := len(pr.piece)
	j := i
	for j < n && pr.wsum[j+1]-pr.wsum[i] <= capacity {
		j++
	}
	v := pr.vsum[j] - pr.vsum[i]
	if j < n {
		v += pr.piece[j].r * float64(capacity-(pr.wsum[j]-pr.wsum[i])) / float64(pr.piece[j].d)
	}
	return v
}
