package solver

import (
	"context"
	"math"
	"slices"
	"sort"
)

// assign places every workload with the clusters' policies fixed, honouring n's forced and
// forbidden pairs (n may be nil). With policies fixed the problem is a generalized assignment;
// counted in units of supply it is nearly a transportation problem: a group of interchangeable
// workloads (twins) of demand d offers d units per workload, a cluster takes up to its supply, a
// unit earns the workload's score over d. That problem is solved exactly by a min-cost flow; a
// group then sends ⌊units/d⌋ whole workloads to each cluster, the few left over go where they fit
// best, and moves, swaps and ejection chains finish the plan (until ctx is done). ok false when
// something fits nowhere.
func (m *model) assign(ctx context.Context, pol []int, n *node) ([]int, bool) {
	cl := make([]int, m.nw)
	used := make([]int64, m.nc)
	allowed := func(w, c int) bool {
		if n != nil && ((n.forced[w] >= 0 && int(n.forced[w]) != c) || n.forbid[w*m.nc+c]) {
			return false
		}
		return !math.IsNaN(m.score[w][c][pol[c]])
	}
	// Groups: twins that are free and forbidden the same clusters.
	type group struct {
		ws []int
		d  int64
	}
	var groups []group
	index := map[string]int{}
	key := make([]byte, 0, 16+m.nc)
	for w := 0; w < m.nw; w++ {
		cl[w] = -1
		if n != nil && n.forced[w] >= 0 {
			cl[w] = int(n.forced[w])
			used[cl[w]] += m.demand[w]
			continue
		}
		if m.demand[w] == 0 {
			bc := -1
			for c := 0; c < m.nc; c++ {
				if allowed(w, c) && (bc < 0 || m.score[w][c][pol[c]] > m.score[w][bc][pol[bc]]) {
					bc = c
				}
			}
			if bc < 0 {
				return nil, false
			}
			cl[w] = bc
			continue
		}
		key = key[:0]
		t := m.twins[w][0]
		key = append(key, byte(t), byte(t>>8), byte(t>>16), byte(t>>24))
		for c := 0; c < m.nc; c++ {
			if allowed(w, c) {
				key = append(key, 1)
			} else {
				key = append(key, 0)
			}
		}
		g, ok := index[string(key)]
		if !ok {
			g = len(groups)
			index[string(key)] = g
			groups = append(groups, group{d: m.demand[w]})
		}
		groups[g].ws = append(groups[g].ws, w)
	}
	for c := 0; c < m.nc; c++ {
		if used[c] > m.policies[c][pol[c]].supply {
			return nil, false
		}
	}
	// The flow network: source, groups, clusters, sink.
	ng := len(groups)
	f := newFlow(2 + ng + m.nc)
	src, sink := 0, 1+ng+m.nc
	arcs := make([][]int, ng) // per group, the arc index to each cluster (-1: none)
	for g, gr := range groups {
		f.add(src, 1+g, gr.d*int64(len(gr.ws)), 0)
		arcs[g] = make([]int, m.nc)
		w := gr.ws[0]
		for c := 0; c < m.nc; c++ {
			arcs[g][c] = -1
			if allowed(w, c) {
				arcs[g][c] = f.add(1+g, 1+ng+c, gr.d*int64(len(gr.ws)), -m.score[w][c][pol[c]]/float64(gr.d))
			}
		}
	}
	for c := 0; c < m.nc; c++ {
		if room := m.policies[c][pol[c]].supply - used[c]; room > 0 {
			f.add(1+ng+c, sink, room, 0)
		}
	}
	f.run(ctx, src, sink)
	// Whole workloads along the flow; the rest later.
	var rest []int
	for g, gr := range groups {
		next := 0
		for c := 0; c < m.nc; c++ {
			if arcs[g][c] < 0 {
				continue
			}
			k := int(f.flowOn(1+g, arcs[g][c]) / gr.d)
			for ; k > 0 && next < len(gr.ws); k-- {
				cl[gr.ws[next]] = c
				used[c] += gr.d
				next++
			}
		}
		rest = append(rest, gr.ws[next:]...)
	}
	sort.SliceStable(rest, func(i, j int) bool { return m.demand[rest[i]] > m.demand[rest[j]] })
	for _, w := range rest {
		bc := -1
		for c := 0; c < m.nc; c++ {
			if allowed(w, c) && used[c]+m.demand[w] <= m.policies[c][pol[c]].supply &&
				(bc < 0 || m.score[w][c][pol[c]] > m.score[w][bc][pol[bc]]) {
				bc = c
			}
		}
		if bc < 0 {
			// Rounding leaves room in scraps: make room on some cluster by moving smaller
			// workloads off it to where they fit.
			if !m.makeRoom(pol, cl, used, w, allowed) {
				return nil, false
			}
			continue
		}
		cl[w] = bc
		used[bc] += m.demand[w]
	}
	if n == nil || !n.constrained() {
		v, ok := m.value(pol, cl)
		if !ok {
			return nil, false
		}
		m.exchange(ctx, pol, cl, v)
	}
	return cl, true
}

// makeRoom places w on the cluster where it scores best after moving, for each candidate cluster,
// the fewest and cheapest of its other movable workloads to other clusters with room; it updates
// cl and used and reports whether some cluster could be cleared enough.
func (m *model) makeRoom(pol, cl []int, used []int64, w int, allowed func(w, c int) bool) bool {
	type move struct{ w, to int }
	bestGain := math.Inf(-1)
	bc := -1
	var bestMoves []move
	on := make([][]int, m.nc)
	for x, c := range cl {
		if c >= 0 && x != w && allowed(x, c) && m.demand[x] > 0 {
			on[c] = append(on[c], x)
		}
	}
	extra := make([]int64, m.nc)
	for c := 0; c < m.nc; c++ {
		if !allowed(w, c) || m.demand[w] > m.policies[c][pol[c]].supply {
			continue
		}
		need := used[c] + m.demand[w] - m.policies[c][pol[c]].supply
		for i := range extra {
			extra[i] = 0
		}
		gain := m.score[w][c][pol[c]]
		var moves []move
		// Cheapest loss per unit freed first.
		type cand struct {
			x, to int
			loss  float64
		}
		var cands []cand
		for _, x := range on[c] {
			to := -1
			for o := 0; o < m.nc; o++ {
				if o != c && allowed(x, o) && (to < 0 || m.score[x][o][pol[o]] > m.score[x][to][pol[to]]) &&
					used[o]+m.demand[x] <= m.policies[o][pol[o]].supply {
					to = o
				}
			}
			if to >= 0 {
				cands = append(cands, cand{x, to, (m.score[x][c][pol[c]] - m.score[x][to][pol[to]]) / float64(m.demand[x])})
			}
		}
		sort.SliceStable(cands, func(i, j int) bool { return cands[i].loss < cands[j].loss })
		for _, k := range cands {
			if need <= 0 {
				break
			}
			if used[k.to]+extra[k.to]+m.demand[k.x] > m.policies[k.to][pol[k.to]].supply {
				continue
			}
			extra[k.to] += m.demand[k.x]
			need -= m.demand[k.x]
			gain -= k.loss * float64(m.demand[k.x])
			moves = append(moves, move{k.x, k.to})
		}
		if need <= 0 && gain > bestGain {
			bestGain, bc, bestMoves = gain, c, moves
		}
	}
	if bc < 0 {
		return false
	}
	for _, mv := range bestMoves {
		used[cl[mv.w]] -= m.demand[mv.w]
		used[mv.to] += m.demand[mv.w]
		cl[mv.w] = mv.to
	}
	cl[w] = bc
	used[bc] += m.demand[w]
	return true
}

// constrained reports whether n forces or forbids anything a plan-wide local search could break.
func (n *node) constrained() bool {
	return slices.ContainsFunc(n.forced, func(c int32) bool { return c >= 0 }) || slices.Contains(n.forbid, true)
}

// flow is a min-cost flow network solved by successive shortest paths (Bellman-Ford with a
// queue: costs are negative and the networks small).
type flow struct {
	head [][]int
	arcs []flowArc
	dist []float64
	prev []int
	inq  []bool
}

type flowArc struct {
	to   int
	cap  int64
	cost float64
}

func newFlow(nodes int) *flow {
	return &flow{head: make([][]int, nodes), dist: make([]float64, nodes), prev: make([]int, nodes), inq: make([]bool, nodes)}
}

// add adds an arc and its residual twin (index ^1) and returns the arc's index.
func (f *flow) add(from, to int, capacity int64, cost float64) int {
	i := len(f.arcs)
	f.arcs = append(f.arcs, flowArc{to: to, cap: capacity, cost: cost}, flowArc{to: from, cap: 0, cost: -cost})
	f.head[from] = append(f.head[from], i)
	f.head[to] = append(f.head[to], i+1)
	return i
}

// flowOn is the flow on arc i (its residual twin's capacity).
func (f *flow) flowOn(_ int, i int) int64 { return f.arcs[i^1].cap }

// run sends as much flow as fits from src to sink at least cost, augmenting along cheapest paths
// while they cost less than nothing or until the sources are drained. It stops early, with the
// flow sent so far, when ctx is done or rounding leaves a cycle of negative cost in the residual
// network (a node relaxed as many times as there are nodes, or predecessors that close a cycle),
// where the shortest paths would never settle.
func (f *flow) run(ctx context.Context, src, sink int) {
	queue := make([]int, 0, len(f.head))
	relaxed := make([]int, len(f.head))
	var path []int // arcs, from the sink back
	for ctx.Err() == nil {
		for i := range f.dist {
			f.dist[i], f.prev[i], f.inq[i], relaxed[i] = math.Inf(1), -1, false, 0
		}
		f.dist[src] = 0
		queue = append(queue[:0], src)
		f.inq[src] = true
		for len(queue) > 0 {
			u := queue[0]
			queue = queue[1:]
			f.inq[u] = false
			for _, i := range f.head[u] {
				a := f.arcs[i]
				if a.cap <= 0 {
					continue
				}
				if nd := f.dist[u] + a.cost; nd < f.dist[a.to]-1e-9 {
					f.dist[a.to], f.prev[a.to] = nd, i
					if relaxed[a.to]++; relaxed[a.to] >= len(f.head) {
						return
					}
					if !f.inq[a.to] {
						f.inq[a.to] = true
						queue = append(queue, a.to)
					}
				}
			}
		}
		if math.IsInf(f.dist[sink], 1) {
			return
		}
		path = path[:0]
		for v := sink; v != src; v = f.arcs[f.prev[v]^1].to {
			if len(path) == len(f.head) {
				return // the predecessors close a cycle: rounding again
			}
			path = append(path, f.prev[v])
		}
		push := int64(math.MaxInt64)
		for _, i := range path {
			push = min(push, f.arcs[i].cap)
		}
		for _, i := range path {
			f.arcs[i].cap -= push
			f.arcs[i^1].cap += push
		}
	}
}
