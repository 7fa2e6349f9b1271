package solver

import "math"

// Pricing: the column generation's subproblem. Twins (workloads of the same kind and demand
// scoring the same everywhere) are interchangeable, so a cluster's part of a plan is a pattern:
// its policy and how many workloads of each group it holds. For group duals π, the best pattern
// of cluster c under policy p within a node's count bounds is a bounded knapsack over the groups
// with profits s[g,c,p] - π[g] and weights the groups' demands, solved exactly by dynamic
// programming over the (integer, scaled) supply.

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
	m     *model
	gr    *groups
	dp    []float64
	keep  [][]bool
	piece []piece
	cnt   []int32 // the counts of the last knapsack's pattern
}

// piece is a binary piece of a group's free count: k workloads taken together.
type piece struct {
	g int
	k int32
	d int64
	r float64
}

func newPricer(m *model, gr *groups) *pricer {
	return &pricer{m: m, gr: gr, cnt: make([]int32, gr.n)}
}

// knapsack is the best pattern of cluster c under policy p within the count bounds lo and hi
// ([c*groups+g]) for group duals pi: its reduced value Σ n[g]·(s - π[g]) and counts (in pr.cnt);
// ok false when the lower bounds do not fit or need a group the policy cannot hold.
func (pr *pricer) knapsack(lo, hi []int32, c, p int, pi []float64) (float64, bool) {
	m, gr, ng := pr.m, pr.gr, pr.gr.n
	capacity := m.policies[c][p].supply
	value := 0.0
	pr.piece = pr.piece[:0]
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
		// Binary pieces 1, 2, 4, … make the bounded knapsack a 0-1 one.
		for k := int32(1); extra > 0; k *= 2 {
			t := min(k, extra)
			pr.piece = append(pr.piece, piece{g, t, int64(t) * gr.d[g], float64(t) * r})
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
