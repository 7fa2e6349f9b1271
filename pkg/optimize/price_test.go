package optimize

import (
	"context"
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
		pr := newPricer(m)
		ng := pr.gr.n
		n := pr.root()
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
				got, gotOK := pr.knapsack(n, c, p, pi)
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

// TestSimplexCertifiesOptimum: on random feasible, bounded programs (A ≥ 0 with a positive entry
// in every column, b = A·x₀), the simplex ends with the artificials at zero, A·x = b, x ≥ 0, no
// column of positive reduced cost and c·x = b·y: primal and dual feasible with equal objectives,
// so optimal. Columns added after a first solve, warm starts from a basis, and barred columns
// are exercised too.
func TestSimplexCertifiesOptimum(t *testing.T) {
	r := rand.New(rand.NewPCG(9, 9))
	for i := 0; i < 300; i++ {
		rows, ncols := 1+r.IntN(8), 1+r.IntN(25)
		cols := make([]lpCol, ncols)
		b := make([]float64, rows)
		for j := range cols {
			for k := 0; k < rows; k++ {
				if v := r.IntN(4); v > 0 && r.IntN(2) == 0 {
					cols[j].idx = append(cols[j].idx, k)
					cols[j].val = append(cols[j].val, float64(v))
				}
			}
			if len(cols[j].idx) == 0 {
				cols[j].idx, cols[j].val = []int{r.IntN(rows)}, []float64{1 + float64(r.IntN(3))}
			}
			cols[j].cost = float64(r.IntN(41) - 20)
			if x0 := float64(r.IntN(3)); x0 > 0 {
				for t, k := range cols[j].idx {
					b[k] += x0 * cols[j].val[t]
				}
			}
		}
		s := newSimplex(b, 1e4)
		half := ncols / 2
		for _, c := range cols[:half] {
			s.add(c)
		}
		s.solve()
		for _, c := range cols[half:] {
			s.add(c)
		}
		if i%3 == 0 {
			s.warm(append([]int(nil), s.basis...))
		}
		if i%5 == 0 && ncols > 1 {
			// A barred column keeps the artificials' cost and never enters.
			s.cols[rows].off, s.cols[rows].cost = true, -1e4
		}
		if !s.solve() {
			t.Fatalf("program %d: no optimum", i)
		}
		certify(t, i, s, rows)
	}
}

func certify(t *testing.T, i int, s *simplex, rows int) {
	t.Helper()
	s.duals()
	ax := make([]float64, rows)
	for j := range s.cols {
		x := s.value(j)
		if x < -1e-9 {
			t.Fatalf("program %d: x[%d] = %v", i, j, x)
		}
		if j < rows && x > 1e-9 && !s.cols[rows].off {
			t.Fatalf("program %d: artificial %d at %v on a feasible program", i, j, x)
		}
		for k, row := range s.cols[j].idx {
			ax[row] += s.cols[j].val[k] * x
		}
		if !s.cols[j].off && s.reduced(j) > 1e-6 {
			t.Fatalf("program %d: column %d has reduced cost %v at the end", i, j, s.reduced(j))
		}
	}
	by := 0.0
	for k := range ax {
		if math.Abs(ax[k]-s.b[k]) > 1e-6 {
			t.Fatalf("program %d: row %d: A·x = %v, b = %v", i, k, ax[k], s.b[k])
		}
		by += s.b[k] * s.y[k]
	}
	if math.Abs(by-s.objective()) > 1e-6 {
		t.Fatalf("program %d: c·x = %v, b·y = %v", i, s.objective(), by)
	}
}

// TestBareTreeAgreesWithHeuristics: on seeded GPU-slice instances too large for brute force (4-8
// clusters, 20-40 workloads in few groups), the tree alone (no greedy, rounding, fixed-policy
// search or dive: plans only from whole masters, so it branches on group counts as well as
// policies) proves the same optimum as the full search.
func TestBareTreeAgreesWithHeuristics(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	before := countBranches
	for i := 0; i < 30; i++ {
		nc := 4 + r.IntN(5)
		pr := bench(r, nc, 1+r.IntN(3), 5*nc)
		full, err := Solve(context.Background(), pr, Options{})
		if errors.Is(err, ErrInfeasible) {
			continue
		} else if err != nil || !full.Optimal {
			t.Fatalf("instance %d: %+v, %v", i, full, err)
		}
		bareTree = true
		bare, err := Solve(context.Background(), pr, Options{})
		bareTree = false
		if err != nil || !bare.Optimal || checkPlan(t, pr, bare) != checkPlan(t, pr, full) {
			t.Fatalf("instance %d: tree alone %+v, %v; full search %v", i, bare, err, full.Objective)
		}
	}
	if n := countBranches - before; n < 10 {
		t.Errorf("the tree branched on group counts %d times: the instances do not exercise it", n)
	}
}
