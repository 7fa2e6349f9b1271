package solver

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

// TestSimplexCertifiesOptimum: on random feasible, bounded programs (A ≥ 0 with a positive entry
// in every column, b = A·x₀), the simplex ends with the artificials at zero, A·x = b, x ≥ 0, no
// column of positive reduced cost and c·x = b·y: primal and dual feasible with equal objectives,
// so optimal. Columns added after a first solve, warm starts from a basis, and barred columns
// (before a solve, and basic ones after it, which the dual phase takes out) are exercised too.
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
		s.solve(context.Background())
		for _, c := range cols[half:] {
			s.add(c)
		}
		if i%3 == 0 {
			s.warm(append([]int(nil), s.basis...))
		}
		if i%5 == 0 && ncols > 1 {
			// A barred column keeps the artificials' cost and never enters.
			s.cols[rows].off = true
		}
		if s.solve(context.Background()) != lpOptimal {
			t.Fatalf("program %d: no optimum", i)
		}
		certify(t, i, s, rows)
		if i%2 == 0 {
			// Bar the basic real column of largest value, as branching does, and solve again.
			bk := -1
			for k, j := range s.basis {
				if j >= rows && !s.cols[j].off && (bk < 0 || s.x[k] > s.x[bk]) {
					bk = k
				}
			}
			if bk >= 0 {
				s.cols[s.basis[bk]].off = true
				if s.solve(context.Background()) != lpOptimal {
					t.Fatalf("program %d: no optimum after barring", i)
				}
				certify(t, i, s, rows)
			}
		}
	}
}

// certify checks an optimum within the simplex's tolerances: values within feasTol of feasible,
// reduced costs within 1e-6 of non-positive, c·x = b·y. With barred columns the program may need
// an artificial, at the artificials' cost; the optimality conditions are the same.
func certify(t *testing.T, i int, s *simplex, rows int) {
	t.Helper()
	s.duals()
	barred := false
	for _, c := range s.cols {
		barred = barred || c.off
	}
	ax := make([]float64, rows)
	for j := range s.cols {
		x := s.value(j)
		if x < 0 {
			t.Fatalf("program %d: x[%d] = %v", i, j, x)
		}
		if j < rows && x > feasTol && !barred {
			t.Fatalf("program %d: artificial %d at %v on a feasible program", i, j, x)
		}
		for k, row := range s.cols[j].idx {
			ax[row] += s.cols[j].val[k] * x
		}
		if s.pos[j] < 0 && !s.cols[j].off && s.reduced(j) > 1e-6 {
			t.Fatalf("program %d: column %d has reduced cost %v at the end", i, j, s.reduced(j))
		}
	}
	by := 0.0
	for k := range ax {
		if math.Abs(ax[k]-s.b[k]) > 10*feasTol {
			t.Fatalf("program %d: row %d: A·x = %v, b = %v", i, k, ax[k], s.b[k])
		}
		by += s.b[k] * s.y[k]
	}
	if math.Abs(by-s.objective()) > 10*feasTol*(1+math.Abs(by)) {
		t.Fatalf("program %d: c·x = %v, b·y = %v", i, s.objective(), by)
	}
}

// TestSimplexEndsOnDegenerateMasters: on masters shaped like the solver's when no two workloads
// are alike (a row per workload and per cluster, columns that put a subset of the workloads on one
// cluster, most basic values zero), the simplex proves an optimum (certified as above) within a
// small multiple of the rows in pivots, from the artificial basis and again after barring the
// basic columns of one cluster, as branching does. Dantzig's rule falling back to Bland's took
// thousands of degenerate pivots per solve on such masters.
func TestSimplexEndsOnDegenerateMasters(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 77))
	for i := range 40 {
		nw, nc := 20+r.IntN(60), 3+r.IntN(8)
		rows := nw + nc
		b := make([]float64, rows)
		for k := range b {
			b[k] = 1
		}
		s := newSimplex(b, 1e6)
		column := func(c int, ws []int) {
			col := lpCol{cost: 0}
			for _, w := range ws {
				col.idx = append(col.idx, w)
				col.val = append(col.val, 1)
				col.cost += float64(20 + r.IntN(80))
			}
			col.idx = append(col.idx, nw+c)
			col.val = append(col.val, 1)
			s.add(col)
		}
		// A partition, so that the program is feasible, then many overlapping patterns.
		for c, w := 0, 0; c < nc; c++ {
			end := w + nw/nc
			if c == nc-1 {
				end = nw
			}
			column(c, seq(w, end))
			w = end
		}
		for range 30 * nc {
			c := r.IntN(nc)
			column(c, r.Perm(nw)[:1+r.IntN(nw/nc+2)])
		}
		s.pivots = 0
		if st := s.solve(context.Background()); st != lpOptimal {
			t.Fatalf("master %d: status %v", i, st)
		}
		certify(t, i, s, rows)
		if s.pivots > 10*rows {
			t.Errorf("master %d (%d rows): %d pivots from the artificial basis", i, rows, s.pivots)
		}
		c := r.IntN(nc)
		for k, j := range s.basis {
			if j >= rows && s.cols[j].idx[len(s.cols[j].idx)-1] == nw+c && s.x[k] > 0 {
				s.cols[j].off = true
			}
		}
		s.pivots = 0
		if st := s.solve(context.Background()); st != lpOptimal {
			t.Fatalf("master %d, cluster %d's columns barred: status %v", i, c, st)
		}
		certify(t, i, s, rows)
		if s.pivots > 5*rows {
			t.Errorf("master %d (%d rows): %d pivots after barring", i, rows, s.pivots)
		}
	}
}

func seq(from, to int) []int {
	var s []int
	for i := from; i < to; i++ {
		s = append(s, i)
	}
	return s
}

// TestSimplexStopsWithItsContext: a solve that needs many pivots stops at once, saying so, when
// its context is done.
func TestSimplexStopsWithItsContext(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 1))
	nw, nc := 60, 6
	b := make([]float64, nw+nc)
	for k := range b {
		b[k] = 1
	}
	s := newSimplex(b, 1e6)
	for range 200 {
		c := r.IntN(nc)
		col := lpCol{idx: []int{nw + c}, val: []float64{1}, cost: float64(r.IntN(100))}
		for _, w := range r.Perm(nw)[:10] {
			col.idx, col.val = append(col.idx, w), append(col.val, 1)
		}
		s.add(col)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if st := s.solve(ctx); st != lpStopped || s.pivots > 32 {
		t.Errorf("status %v after %d pivots, want stopped within 32", st, s.pivots)
	}
	if st := s.solve(context.Background()); st != lpOptimal || s.pivots < 40 {
		t.Errorf("status %v after %d pivots: the program is too easy to show the stop", st, s.pivots)
	}
}

// TestWarmKeepsTheBasisInverse: warm started again and again from one basis, with solves (and
// their pivots) in between, leaves exactly the inverse that rebuilding it from that basis gives,
// also when warm reuses the inverse it rebuilt before.
func TestWarmKeepsTheBasisInverse(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 7))
	for i := 0; i < 100; i++ {
		rows, ncols := 2+r.IntN(7), 4+r.IntN(20)
		b := make([]float64, rows)
		cols := make([]lpCol, ncols)
		for j := range cols {
			k := r.IntN(rows)
			cols[j] = lpCol{idx: []int{k}, val: []float64{1 + float64(r.IntN(3))}, cost: float64(r.IntN(41) - 20)}
			if k2 := r.IntN(rows); k2 > k {
				cols[j].idx, cols[j].val = append(cols[j].idx, k2), append(cols[j].val, 1)
			}
			for t, k := range cols[j].idx {
				b[k] += cols[j].val[t]
			}
		}
		s := newSimplex(b, 1e4)
		for _, c := range cols[:ncols/2] {
			s.add(c)
		}
		s.solve(context.Background())
		start := slices.Clone(s.basis)
		for _, c := range cols[ncols/2:] {
			s.add(c)
		}
		for round := range 3 {
			if round > 0 && !slices.Equal(s.warmBasis, start) {
				t.Fatalf("program %d, round %d: warm would not reuse the inverse", i, round)
			}
			if !s.warm(start) {
				t.Fatalf("program %d, round %d: the start basis was refused", i, round)
			}
			ref := &simplex{m: s.m, cols: s.cols, basis: slices.Clone(start)}
			if !ref.refactor() || !slices.Equal(ref.binv, s.binv) {
				t.Fatalf("program %d, round %d: warm's inverse is not the basis's", i, round)
			}
			// Move the basis away: bar a basic real column and solve again.
			for _, j := range s.basis {
				if j >= rows {
					s.cols[j].off = true
					break
				}
			}
			s.solve(context.Background())
			for j := range s.cols {
				s.cols[j].off = false
			}
		}
	}
}
