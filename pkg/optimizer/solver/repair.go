package solver

import (
	"context"
	"math"
	"slices"
	"sort"
)

// improve is a local search over whole plans, free of any node's constraints: it moves single
// workloads, and switches a cluster's policy (evicting what no longer fits, re-placing it
// elsewhere, then pulling in workloads that gain by coming), keeping every change that raises the
// objective, until ctx is done. It returns the improved plan and its value.
func (m *model) improve(ctx context.Context, pol, cl []int, v float64) ([]int, []int, float64) {
	pol = append([]int(nil), pol...)
	cl = append([]int(nil), cl...)
	for pass := 0; pass < 5 && ctx.Err() == nil; pass++ {
		better := false
		for c := 0; c < m.nc; c++ {
			for p := range m.policies[c] {
				if p == pol[c] {
					continue
				}
				np, ncl := m.switchPolicy(pol, cl, c, p)
				if ncl == nil {
					continue
				}
				if nv, ok := m.value(np, ncl); ok && nv > v+1e-9 {
					pol, cl, v = np, ncl, nv
					better = true
				}
			}
		}
		if nv := m.exchange(ctx, pol, cl, v); nv > v+1e-9 {
			v = nv
			better = true
		}
		if !better {
			break
		}
	}
	return pol, cl, v
}

// exchange improves a plan in place with the policies kept: it moves single workloads to another
// cluster and swaps pairs of workloads between clusters, whenever that raises the objective and
// fits, until no such move is left. Policy switches alone leave plans whose clusters are full of
// the wrong workloads; swaps fix them. It stops early when ctx is done, and returns the new
// objective.
func (m *model) exchange(ctx context.Context, pol, cl []int, v float64) float64 {
	used := make([]int64, m.nc)
	for w, c := range cl {
		used[c] += m.demand[w]
	}
	room := func(c int) int64 { return m.policies[c][pol[c]].supply - used[c] }
	sc := func(w, c int) float64 { return m.score[w][c][pol[c]] }
	for pass := 0; pass < 50 && ctx.Err() == nil; pass++ {
		better := false
		for w := 0; w < m.nw; w++ {
			c1 := cl[w]
			cur := sc(w, c1)
			for c2 := 0; c2 < m.nc; c2++ {
				s := sc(w, c2)
				if c2 == c1 || math.IsNaN(s) || s <= cur+1e-9 || m.demand[w] > room(c2) {
					continue
				}
				used[c1] -= m.demand[w]
				used[c2] += m.demand[w]
				cl[w], v, cur, c1 = c2, v+s-cur, s, c2
				better = true
			}
		}
		for w1 := 0; w1 < m.nw && ctx.Err() == nil; w1++ {
			for w2 := w1 + 1; w2 < m.nw; w2++ {
				c1, c2 := cl[w1], cl[w2]
				if c1 == c2 {
					continue
				}
				a, b := sc(w1, c2), sc(w2, c1)
				if math.IsNaN(a) || math.IsNaN(b) {
					continue
				}
				gain := a + b - sc(w1, c1) - sc(w2, c2)
				d := m.demand[w2] - m.demand[w1]
				if gain <= 1e-9 || d > room(c1) || -d > room(c2) {
					continue
				}
				used[c1] += d
				used[c2] -= d
				cl[w1], cl[w2] = c2, c1
				v += gain
				better = true
			}
		}
		if nv := m.cycles(ctx, pol, cl, used, v); nv > v+1e-9 {
			v = nv
			better = true
		}
		if !better {
			break
		}
	}
	return v
}

// cycles applies improving ejection chains with the policies kept: along a cycle of clusters each
// hands one workload of demand d to the next, so no cluster's load changes, or along a path from
// any cluster to one with room for d. Pairwise moves cannot find these when the clusters are
// full; for workloads of one demand they are exactly what the transportation problem's optimality
// needs. Chains are found by Bellman-Ford on a graph of clusters plus one node standing for "room"
// (edge c→room when c has room for d, room→c always). It updates cl and used and returns the new
// objective; it stops early when ctx is done.
func (m *model) cycles(ctx context.Context, pol, cl []int, used []int64, v float64) float64 {
	// The distinct demands, in order: the chains found (and so the plan) do not depend on map
	// iteration order.
	var demands []int64
	for w := range cl {
		if !slices.Contains(demands, m.demand[w]) {
			demands = append(demands, m.demand[w])
		}
	}
	slices.Sort(demands)
	nn := m.nc + 1 // node m.nc is the room node
	gain := make([]float64, nn*nn)
	who := make([]int, nn*nn)
	dist := make([]float64, nn)
	pred := make([]int, nn)
	for rounds := 0; rounds < 10*m.nw && ctx.Err() == nil; rounds++ {
		improved := false
		for _, d := range demands {
			// gain[a*nn+b]: the best score gained by moving a demand-d workload from a to b.
			for i := range gain {
				gain[i], who[i] = math.Inf(-1), -1
			}
			for w, a := range cl {
				if m.demand[w] != d {
					continue
				}
				cur := m.score[w][a][pol[a]]
				for b := 0; b < m.nc; b++ {
					s := m.score[w][b][pol[b]]
					if b == a || math.IsNaN(s) {
						continue
					}
					if g := s - cur; g > gain[a*nn+b] {
						gain[a*nn+b], who[a*nn+b] = g, w
					}
				}
			}
			for c := 0; c < m.nc; c++ {
				gain[m.nc*nn+c] = 0 // the chain may start anywhere
				if m.policies[c][pol[c]].supply-used[c] >= d {
					gain[c*nn+m.nc] = 0 // and end where there is room
				}
			}
			cyc := positiveCycle(nn, gain, dist, pred)
			if cyc == nil {
				continue
			}
			// Apply the moves along the cycle; each is read before any is made.
			type mv struct{ w, to int }
			var moves []mv
			for i, a := range cyc {
				b := cyc[(i+1)%len(cyc)]
				if a == m.nc || b == m.nc {
					continue
				}
				moves = append(moves, mv{who[a*nn+b], b})
			}
			for _, x := range moves {
				a := cl[x.w]
				v += m.score[x.w][x.to][pol[x.to]] - m.score[x.w][a][pol[a]]
				used[a] -= d
				used[x.to] += d
				cl[x.w] = x.to
			}
			improved = true
		}
		if !improved {
			break
		}
	}
	return v
}

// positiveCycle finds a simple cycle of positive total gain in a complete graph of nn nodes
// (gain -Inf: no edge) by Bellman-Ford on the negated gains, or nil.
func positiveCycle(nn int, gain, dist []float64, pred []int) []int {
	for i := range dist {
		dist[i], pred[i] = 0, -1
	}
	last := -1
	for it := 0; it < nn; it++ {
		last = -1
		for a := 0; a < nn; a++ {
			for b := 0; b < nn; b++ {
				g := gain[a*nn+b]
				if math.IsInf(g, -1) {
					continue
				}
				if nd := dist[a] - g; nd < dist[b]-1e-9 {
					dist[b], pred[b] = nd, a
					last = b
				}
			}
		}
		if last < 0 {
			return nil
		}
	}
	// last was relaxed in round nn: walking back nn steps lands on the cycle.
	x := last
	for i := 0; i < nn; i++ {
		x = pred[x]
	}
	var cyc []int
	for y := x; ; y = pred[y] {
		cyc = append(cyc, y)
		if y == x && len(cyc) > 1 {
			cyc = cyc[:len(cyc)-1]
			break
		}
	}
	// cyc lists the cycle backwards along pred; reverse it into edge order.
	for i, j := 0, len(cyc)-1; i < j; i, j = i+1, j-1 {
		cyc[i], cyc[j] = cyc[j], cyc[i]
	}
	return cyc
}

// switchPolicy gives cluster c policy p and re-fits the plan around it; nil when something fits
// nowhere.
func (m *model) switchPolicy(pol0, cl0 []int, c, p int) ([]int, []int) {
	pol := append([]int(nil), pol0...)
	cl := append([]int(nil), cl0...)
	pol[c] = p
	used := make([]int64, m.nc)
	var out []int
	var here []int
	for w, wc := range cl {
		if wc == c {
			here = append(here, w)
		} else {
			used[wc] += m.demand[w]
		}
	}
	sort.SliceStable(here, func(i, j int) bool { return m.score[here[i]][c][p] > m.score[here[j]][c][p] })
	for _, w := range here {
		if s := m.score[w][c][p]; !math.IsNaN(s) && used[c]+m.demand[w] <= m.policies[c][p].supply {
			used[c] += m.demand[w]
		} else {
			out = append(out, w)
		}
	}
	room := func(c int) int64 { return m.policies[c][pol[c]].supply - used[c] }
	sort.SliceStable(out, func(i, j int) bool { return m.demand[out[i]] > m.demand[out[j]] })
	for _, w := range out {
		bc := -1
		for o := 0; o < m.nc; o++ {
			s := m.score[w][o][pol[o]]
			if o != c && !math.IsNaN(s) && m.demand[w] <= room(o) && (bc < 0 || s > m.score[w][bc][pol[bc]]) {
				bc = o
			}
		}
		if bc < 0 {
			return nil, nil
		}
		cl[w] = bc
		used[bc] += m.demand[w]
	}
	// Pull in workloads that score better on c than where they are, best gain first.
	type move struct {
		w    int
		gain float64
	}
	var moves []move
	for w, wc := range cl {
		if wc == c {
			continue
		}
		if s := m.score[w][c][p]; !math.IsNaN(s) && s > m.score[w][wc][pol[wc]] {
			moves = append(moves, move{w, s - m.score[w][wc][pol[wc]]})
		}
	}
	sort.Slice(moves, func(i, j int) bool { return moves[i].gain > moves[j].gain })
	for _, mv := range moves {
		if m.demand[mv.w] <= room(c) {
			used[cl[mv.w]] -= m.demand[mv.w]
			cl[mv.w] = c
			used[c] += m.demand[mv.w]
		}
	}
	return pol, cl
}
