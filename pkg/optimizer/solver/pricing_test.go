package solver

import (
	"errors"
	"math"
	"math/rand/v2"
	"testing"
)

// TestKnapsackMatchesEnumeration: the pricing knapsack (bounded group counts with lower bounds,
// binary pieces, zero demands, groups a policy cannot hold) finds the best pattern that counting
// every admissible count vector finds, and the counts it returns are admissible and worth what
// it reports.
func TestKnapsackMatchesEnumeration(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	checked := 0
	for i := 0; i < 300; i++ {
		m, err := build(random(r, 1+r.IntN(3), 1+r.IntN(3), 1+r.IntN(8), []string{"gpu", "cpu"}[:1+i%2]))
		if errors.Is(err, ErrInfeasible) || errors.Is(err, ErrNoOption) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		ms := newMaster(m)
		pr, ng := ms.pr, ms.gr.n
		n := ms.root()
		for j := range n.lo {
			k := int32(pr.gr.count[j%ng])
			if r.IntN(3) == 0 {
				n.lo[j] = int32(r.IntN(int(k) + 1))
			}
			if r.IntN(3) == 0 {
				n.hi[j] = n.lo[j] + int32(r.IntN(int(k-n.lo[j])+1))
			}
		}
		pi := make([]float64, ng)
		for g := range pi {
			pi[g] = float64(r.IntN(201) - 100)
		}
		for c := 0; c < m.nc; c++ {
			for p := range m.policies[c] {
				want, ok := enumerate(pr, n, c, p, pi)
				got, gotOK := pr.knapsack(n.lo, n.hi, c, p, pi)
				if ok != gotOK || (ok && math.Abs(got-want) > 1e-9) {
					t.Fatalf("instance %d cluster %d policy %d: knapsack %v (ok %v), enumeration %v (ok %v)", i, c, p, got, gotOK, want, ok)
				}
				if !ok {
					continue
				}
				checked++
				used, value := int64(0), 0.0
				for g, k := range pr.cnt {
					lo, hi := n.lo[c*ng+g], n.hi[c*ng+g]
					if k < lo || k > hi || (k > 0 && math.IsNaN(pr.gr.s[g][c][p])) {
						t.Fatalf("instance %d: group %d count %d outside [%d, %d] or not allowed", i, g, k, lo, hi)
					}
					if k > 0 {
						used += int64(k) * pr.gr.d[g]
						value += float64(k) * (pr.gr.s[g][c][p] - pi[g])
					}
				}
				if used > m.policies[c][p].supply || math.Abs(value-got) > 1e-9 {
					t.Fatalf("instance %d: counts %v use %d of %d, worth %v, reported %v", i, pr.cnt, used, m.policies[c][p].supply, value, got)
				}
			}
		}
	}
	if checked < 300 {
		t.Errorf("only %d feasible knapsacks checked", checked)
	}
}

// enumerate is the best reduced value of a pattern of cluster c under policy p by trying every
// count vector within n's bounds.
func enumerate(pr *pricer, n *bpNode, c, p int, pi []float64) (float64, bool) {
	ng := pr.gr.n
	best, found := math.Inf(-1), false
	cnt := make([]int32, ng)
	var rec func(g int, used int64, v float64)
	rec = func(g int, used int64, v float64) {
		if used > pr.m.policies[c][p].supply {
			return
		}
		if g == ng {
			if v > best {
				best = v
			}
			found = true
			return
		}
		for k := n.lo[c*ng+g]; k <= n.hi[c*ng+g]; k++ {
			s := pr.gr.s[g][c][p]
			if k > 0 && math.IsNaN(s) {
				return
			}
			cnt[g] = k
			add := 0.0
			if k > 0 {
				add = float64(k) * (s - pi[g])
			}
			rec(g+1, used+int64(k)*pr.gr.d[g], v+add)
		}
	}
	rec(0, 0, 0)
	return best, found
}
