package optimize

import (
	"math"
	"sort"
)

// repair turns a relaxation's solution into a plan: clusters keep the policies it chose, a
// workload taken by several knapsacks stays where it scores best, untaken ones go where they fit
// best (largest first), and then single moves and pairwise swaps that raise the objective are
// made until none is left. ok false when some workload fits nowhere.
func (m *model) repair(h *hint) ([]int, []int, bool) {
	n := h.n
	pol := append([]int(nil), h.choice...)
	cl := make([]int, m.nw)
	for w := range cl {
		cl[w] = -1
	}
	allowed := func(w, c int) bool {
		if (n.forced[w] >= 0 && int(n.forced[w]) != c) || n.forbid[w*m.nc+c] {
			return false
		}
		return !math.IsNaN(m.score[w][c][pol[c]])
	}
	for c, ws := range h.take {
		for _, w := range ws {
			if cl[w] < 0 || m.score[w][c][pol[c]] > m.score[w][cl[w]][pol[cl[w]]] {
				cl[w] = c
			}
		}
	}
	used := make([]int64, m.nc)
	var rest []int
	for w, c := range cl {
		if c >= 0 {
			used[c] += m.demand[w]
		} else {
			rest = append(rest, w)
		}
	}
	sort.SliceStable(rest, func(i, j int) bool { return m.demand[rest[i]] > m.demand[rest[j]] })
	room := func(c int) int64 { return m.policies[c][pol[c]].supply - used[c] }
	for _, w := range rest {
		bc := -1
		for c := 0; c < m.nc; c++ {
			if allowed(w, c) && m.demand[w] <= room(c) && (bc < 0 || m.score[w][c][pol[c]] > m.score[w][bc][pol[bc]]) {
				bc = c
			}
		}
		if bc < 0 {
			return nil, nil, false
		}
		cl[w] = bc
		used[bc] += m.demand[w]
	}
	score := func(w, c int) float64 { return m.score[w][c][pol[c]] }
	for improved, rounds := true, 0; improved && rounds < 20; rounds++ {
		improved = false
		for w := 0; w < m.nw; w++ {
			if n.forced[w] >= 0 {
				continue
			}
			from := cl[w]
			for c := 0; c < m.nc; c++ {
				if c != from && allowed(w, c) && m.demand[w] <= room(c) && score(w, c) > score(w, cl[w])+1e-9 {
					used[cl[w]] -= m.demand[w]
					cl[w] = c
					used[c] += m.demand[w]
				}
			}
			improved = improved || cl[w] != from
		}
		for a := 0; a < m.nw; a++ {
			for b := a + 1; b < m.nw; b++ {
				ca, cb := cl[a], cl[b]
				if ca == cb || n.forced[a] >= 0 || n.forced[b] >= 0 || !allowed(a, cb) || !allowed(b, ca) {
					continue
				}
				gain := score(a, cb) + score(b, ca) - score(a, ca) - score(b, cb)
				if gain <= 1e-9 {
					continue
				}
				d := m.demand[a] - m.demand[b]
				if room(cb) < d || room(ca) < -d {
					continue
				}
				cl[a], cl[b] = cb, ca
				used[ca] -= d
				used[cb] += d
				improved = true
			}
		}
	}
	return pol, cl, true
}

// improve is a local search over whole plans, free of any node's constraints: it moves single
// workloads, and switches a cluster's policy (evicting what no longer fits, re-placing it
// elsewhere, then pulling in workloads that gain by coming), keeping every change that raises the
// objective. It returns the improved plan and its value.
func (m *model) improve(pol, cl []int, v float64) ([]int, []int, float64) {
	pol = append([]int(nil), pol...)
	cl = append([]int(nil), cl...)
	for pass := 0; pass < 5; pass++ {
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
		if !better {
			break
		}
	}
	return pol, cl, v
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
