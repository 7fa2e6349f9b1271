package solver

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// TestKnapsackMatchesEnumeration: the pricing knapsack (bounded group counts with lower bounds,
// binary pieces, zero demands, groups a policy cannot hold; amounts of a few units, and in natural
// units: supplies of 8,000-60,000, demands of 1,000-12,000) finds the best pattern that counting
// every admissible count vector finds, and the counts it returns are admissible and worth what
// it reports; both by the table (capacities up to tableMax) and by the states' programme (on
// every capacity). Stopped by its context, it reports no less than the best pattern's value, with
// counts that fit.
func TestKnapsackMatchesEnumeration(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 8))
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	checked, natural := 0, 0
	for i := 0; i < 600; i++ {
		prob := random(r, 1+r.IntN(3), 1+r.IntN(3), 1+r.IntN(8), []string{"gpu", "cpu"}[:1+i%2])
		if i%4 >= 2 {
			for c := range prob.Clusters {
				for p := range prob.Clusters[c].Policies {
					prob.Clusters[c].Policies[p].Supply = int64(8000 + r.IntN(52001))
				}
			}
			for w := range prob.Workloads {
				if r.IntN(8) > 0 {
					prob.Workloads[w].Demand = int64(1000 + r.IntN(11001))
				}
			}
		}
		m, err := build(prob)
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
				bound, boundOK := pr.knapsack(stopped, n.lo, n.hi, c, p, pi)
				if boundOK != ok || (ok && bound < want-1e-9) {
					t.Fatalf("instance %d cluster %d policy %d: stopped knapsack %v (ok %v), enumeration %v (ok %v)", i, c, p, bound, boundOK, want, ok)
				}
				if ok {
					checkCounts(t, pr, n, c, p, pi, math.Inf(1))
				}
				for _, max := range []int64{tableMax, -1} {
					pr.tableMax = max
					got, gotOK := pr.knapsack(context.Background(), n.lo, n.hi, c, p, pi)
					if ok != gotOK || (ok && math.Abs(got-want) > 1e-9) {
						t.Fatalf("instance %d cluster %d policy %d, table up to %d: knapsack %v (ok %v), enumeration %v (ok %v)", i, c, p, max, got, gotOK, want, ok)
					}
					if ok {
						checkCounts(t, pr, n, c, p, pi, got)
					}
				}
				if !ok {
					continue
				}
				checked++
				if m.policies[c][p].supply > tableMax {
					natural++
				}
			}
		}
	}
	if checked < 600 || natural < 200 {
		t.Errorf("only %d feasible knapsacks checked, %d of them in natural units", checked, natural)
	}
}

// checkCounts: the counts of the pricer's last pattern are within n's bounds, allowed, fit the
// supply and (unless want is infinite) are worth want.
func checkCounts(t *testing.T, pr *pricer, n *bpNode, c, p int, pi []float64, want float64) {
	t.Helper()
	m, ng := pr.m, pr.gr.n
	used, value := int64(0), 0.0
	for g, k := range pr.cnt {
		lo, hi := n.lo[c*ng+g], n.hi[c*ng+g]
		if k < lo || k > hi || (k > 0 && math.IsNaN(pr.gr.s[g][c][p])) {
			t.Fatalf("cluster %d policy %d: group %d count %d outside [%d, %d] or not allowed", c, p, g, k, lo, hi)
		}
		if k > 0 {
			used += int64(k) * pr.gr.d[g]
			value += float64(k) * (pr.gr.s[g][c][p] - pi[g])
		}
	}
	if used > m.policies[c][p].supply || (!math.IsInf(want, 1) && math.Abs(value-want) > 1e-9) {
		t.Fatalf("cluster %d policy %d: counts %v use %d of %d, worth %v, reported %v", c, p, pr.cnt, used, m.policies[c][p].supply, value, want)
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

// TestPricingNaturalUnits: supplies in natural units (8,000-60,000, greatest common divisor 1) do
// not make the pricing slow: the root of a 20 × 4 × 80 instance (column generation, its heuristics
// and branching's strong evaluations) is done within 30 s, where tabulating every unit of supply
// took over a minute; its plan is no better than CBC's proven optimum and its bound no worse.
func TestPricingNaturalUnits(t *testing.T) {
	in := generate(rand.New(rand.NewPCG(8, 2026)), shape{nc: 20, np: 4, nw: 80, natural: true})
	start := time.Now()
	s, err := Solve(context.Background(), in.problem(), Options{MaxNodes: 1, TimeLimit: time.Minute})
	took := time.Since(start)
	if err != nil {
		t.Fatal(err)
	}
	if took > 30*time.Second {
		t.Fatalf("the root took %v", took)
	}
	want := solveCBC(t, in, 5*time.Minute)
	if want.unfinished || !want.feasible {
		t.Fatalf("CBC: %+v", want)
	}
	if v := checkPlan(t, in.problem(), s); v > want.objective+1e-6 || s.Bound < want.objective-1e-6 || (s.Optimal && !sameObjective(v, want.objective)) {
		t.Errorf("plan %v, bound %v, optimal %v; CBC's optimum %v", v, s.Bound, s.Optimal, want.objective)
	}
	t.Logf("root: %v, bound %v, after %v; CBC's optimum %v", s.Objective, s.Bound, took, want.objective)
}
