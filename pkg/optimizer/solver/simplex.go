package solver

import (
	"context"
	"math"
	"math/rand/v2"
	"slices"
)

// simplex is a small linear program in equality form, maximise c·x subject to A·x = b, x ≥ 0 with
// b ≥ 0, solved by the revised simplex method with an explicit (dense) basis inverse. It is sized
// for a restricted master problem: a few hundred rows and a few thousand sparse columns, so an
// m×m inverse is cheap and the columns are priced one by one. Every row starts with an artificial
// unit column of cost -bigM, so the artificial basis is feasible from the start and columns can be
// added between solves.
//
// Masters of set-partitioning shape are highly degenerate: most basic variables sit at zero, and
// a pivot that moves nothing can follow another for thousands of iterations (Bland's rule, which
// cannot cycle, stalls there just as long). So each solve perturbs the right-hand side: every
// basic variable is raised by a small random amount, which makes every basic solution of the
// perturbed program non-degenerate (with probability one). Each pivot then raises the objective
// strictly, no basis can come back, and the method ends. The final basis is dual feasible for the
// true program too (reduced costs do not depend on b); its primal values are recomputed from the
// true b, and the few that come out a hair below zero (by at most the perturbation, far under
// feasTol) are read as zero. An iteration cap stays as a safety net: solve then reports that it
// stopped, and the search reports its bound instead of a proof.
type simplex struct {
	m      int
	b      []float64 // the true right-hand side
	bw     []float64 // the right-hand side a solve works with: b perturbed
	cols   []lpCol   // the first m are the artificials
	basis  []int     // per row, its basic column
	pos    []int     // per column, its row in the basis, or -1
	binv   []float64
	x      []float64 // per row, the value of its basic column
	y      []float64 // the duals c_B·B⁻¹, after duals()
	alpha  []float64
	since  int // pivots since the inverse was last rebuilt
	pivots int // pivots in all, for tests
	next   int // where partial pricing resumes
	rng    *rand.Rand
	// the dual phase's scratch: the candidates to enter, and per column its reduced cost and
	// its entry of the pivot row
	cand []int
	d    []float64
	arow []float64
	// warmBasis and warmInv: the last basis warm rebuilt the inverse of, and that inverse. Strong
	// branching and the heuristics start several solves in a row from one node's basis; the
	// columns never change once added, so the inverse is the same each time.
	warmBasis []int
	warmInv   []float64
}

type lpCol struct {
	idx  []int
	val  []float64
	cost float64
	off  bool // barred: fixed at zero; it never enters, and the primal phase prices it as an artificial
}

const (
	// Reduced costs under simplexTol count as zero: the objective's coefficients are sums of
	// normalised scores (a workload's range at most 128, or whole numbers), so anything smaller is
	// rounding.
	simplexTol = 1e-7
	// perturbation is the scale of the random amount each basic variable is raised by.
	perturbation = 1e-7
	// feasTol: a basic value this far below zero, after the perturbation is taken away, is zero.
	feasTol = 1e-6
)

// lpStatus is how a solve ended.
type lpStatus int

const (
	lpOptimal   lpStatus = iota // no column improves
	lpStopped                   // the context is done
	lpIterLimit                 // the iteration cap: a numerical failure, never seen on real masters
)

func newSimplex(b []float64, bigM float64) *simplex {
	m := len(b)
	s := &simplex{m: m, b: b, bw: make([]float64, m), basis: make([]int, m), binv: make([]float64, m*m),
		x: append([]float64(nil), b...), y: make([]float64, m), alpha: make([]float64, m),
		rng: rand.New(rand.NewPCG(1, uint64(m)))} // seeded: the search stays deterministic
	for i := 0; i < m; i++ {
		s.add(lpCol{idx: []int{i}, val: []float64{1}, cost: -bigM})
		s.pos[i] = i
		s.basis[i] = i
		s.binv[i*m+i] = 1
	}
	return s
}

// add appends a column (non-basic) and returns its index.
func (s *simplex) add(c lpCol) int {
	s.cols = append(s.cols, c)
	s.pos = append(s.pos, -1)
	return len(s.cols) - 1
}

// duals sets y = c_B·B⁻¹.
func (s *simplex) duals() {
	m := s.m
	clear(s.y)
	for k := 0; k < m; k++ {
		cb := s.cols[s.basis[k]].cost
		if cb == 0 {
			continue
		}
		for i, v := range s.binv[k*m : (k+1)*m] {
			s.y[i] += cb * v
		}
	}
}

// reduced is column j's reduced cost.
func (s *simplex) reduced(j int) float64 {
	c := &s.cols[j]
	d := c.cost
	for t, i := range c.idx {
		d -= s.y[i] * c.val[t]
	}
	return d
}

// value is x's value of column j.
func (s *simplex) value(j int) float64 {
	if k := s.pos[j]; k >= 0 {
		return s.x[k]
	}
	return 0
}

// objective is c·x.
func (s *simplex) objective() float64 {
	v := 0.0
	for k, j := range s.basis {
		v += s.cols[j].cost * s.x[k]
	}
	return v
}

// maxIterations bounds one solve. A non-degenerate simplex needs a small multiple of the rows from
// a cold start and far fewer warm; the cap is the safety net behind the perturbation.
func (s *simplex) maxIterations() int { return 50*s.m + 5*len(s.cols) + 1000 }

// solve brings the master to optimality from the current basis: a dual phase first takes out
// what the node's changes made infeasible, then the primal simplex on the perturbed program runs
// until no column improves, the context is done, or the iteration cap is hit. Dantzig's rule with
// partial pricing picks the entering column. On return x holds the basis's values for the true b
// and y its duals.
func (s *simplex) solve(ctx context.Context) lpStatus {
	switch s.dual(ctx) {
	case lpStopped:
		return lpStopped
	case lpIterLimit:
		// The dual phase could not restore feasibility: start again from the artificial basis,
		// always feasible, and let the big M drive the artificials out.
		s.cold()
	}
	s.perturb()
	defer s.restore()
	m := s.m
	s.duals()
	for iter, limit := 0, s.maxIterations(); ; iter++ {
		if iter%32 == 31 && ctx.Err() != nil {
			return lpStopped
		}
		if iter >= limit {
			return lpIterLimit
		}
		if s.since >= 100 {
			if s.refactor() {
				s.values(s.bw)
			} else {
				s.since = 0 // singular by rounding: keep the updated inverse
			}
			s.duals()
		}
		enter, d := s.price()
		if enter < 0 {
			return lpOptimal
		}
		s.column(enter)
		leave := s.leaving()
		if leave < 0 {
			// Unbounded, which the master's rows rule out (every column has a 1 in its
			// cluster's row): the inverse has drifted. Rebuild it and price again, once.
			if s.since == 0 || !s.refactor() {
				return lpIterLimit
			}
			s.values(s.bw)
			s.duals()
			continue
		}
		s.pivot(leave, enter)
		// The duals follow the pivot: y += d·(row r of the new inverse).
		for i, v := range s.binv[leave*m : (leave+1)*m] {
			s.y[i] += d * v
		}
	}
}

// zeroTol: an entry of a pivot column smaller than this is zero. pivotTol: the pivot element of a
// barred column's row, or of the dual phase, must be larger, or pivoting on it would wreck the
// inverse.
const (
	zeroTol  = 1e-9
	pivotTol = 1e-7
)

// leaving is the primal ratio test for the entering column in alpha. A barred basic column sits
// at zero, fixed there, so it blocks any step that moves it: the one with the largest pivot
// element leaves. Otherwise the row of least ratio leaves, the larger pivot element among equals;
// the perturbation makes that step positive, so the objective rises at every pivot. It returns -1
// when nothing blocks.
func (s *simplex) leaving() int {
	leave, size := -1, 0.0
	for k, a := range s.alpha {
		if s.cols[s.basis[k]].off && math.Abs(a) > pivotTol && math.Abs(a) > size {
			leave, size = k, math.Abs(a)
		}
	}
	if leave >= 0 {
		return leave
	}
	ratio := math.Inf(1)
	for k, a := range s.alpha {
		if a <= zeroTol || s.cols[s.basis[k]].off {
			continue
		}
		if r := s.x[k] / a; r < ratio || (r == ratio && a > size) {
			leave, ratio, size = k, r, a
		}
	}
	return leave
}

// dual takes out of the basis, by dual simplex pivots, the columns a node bars (fixed at zero,
// whatever their value) and the values gone below zero on the way. Branching and bound fixing
// only bar columns, so the basis a parent ended with is still dual feasible and a few such pivots
// restore an optimal basis, where the primal phase would crawl out through the big M's
// degenerate vertices. Columns that price positive (added since the basis was optimal) are left
// to the primal phase, and so is whatever the dual phase cannot take out within its bounded
// number of pivots.
func (s *simplex) dual(ctx context.Context) lpStatus {
	m := s.m
	s.duals()
	// The candidates to enter (cand[j]) and their reduced costs (d[j]), kept up to date from the
	// pivot rows. Each is lowered by a small random amount, so that no two ratios tie at zero:
	// without it the many patterns of reduced cost zero let the dual simplex stall and cycle.
	n := len(s.cols)
	s.d = slices.Grow(s.d[:0], n)[:n]
	s.arow = slices.Grow(s.arow[:0], n)[:n]
	s.cand = s.cand[:0]
	for j := range s.cols {
		if s.pos[j] < 0 && !s.cols[j].off {
			if dj := s.reduced(j); dj <= simplexTol {
				s.cand, s.d[j] = append(s.cand, j), dj-perturbation*(1+s.rng.Float64())
			}
		}
	}
	for iter := 0; iter < 20*m+10; iter++ {
		if iter%32 == 31 && ctx.Err() != nil {
			return lpStopped
		}
		if s.since >= 100 && s.refactor() {
			s.values(s.b)
			s.duals()
			for _, j := range s.cand {
				if s.pos[j] < 0 {
					s.d[j] = min(s.reduced(j), s.d[j])
				}
			}
		}
		// The leaving row: the largest infeasibility relative to the norm of its row of B⁻¹
		// (dual steepest edge), which takes far fewer pivots than the largest alone.
		r, worst := -1, 0.0
		for k, j := range s.basis {
			v := -s.x[k]
			if s.cols[j].off {
				v = math.Abs(s.x[k]) // a barred column must be zero
			}
			if v <= feasTol {
				continue
			}
			norm := 0.0
			for _, b := range s.binv[k*m : (k+1)*m] {
				norm += b * b
			}
			if v = v * v / norm; v > worst {
				r, worst = k, v
			}
		}
		if r < 0 {
			return lpOptimal
		}
		// The entering column keeps every reduced cost non-positive: the least |d|/|α| among those
		// whose entry moves the leaving value toward zero.
		row := s.binv[r*m : (r+1)*m]
		xr := s.x[r]
		eligible := func(j int) bool {
			a := s.arow[j]
			return s.pos[j] < 0 && math.Abs(a) > pivotTol && (xr <= feasTol || a > 0) && (xr >= -feasTol || a < 0)
		}
		q, ratio, size := -1, math.Inf(1), 0.0
		for _, j := range s.cand {
			if s.pos[j] >= 0 {
				continue
			}
			c := &s.cols[j]
			a := 0.0
			for u, i := range c.idx {
				a += row[i] * c.val[u]
			}
			s.arow[j] = a
			if !eligible(j) {
				continue
			}
			if v := max(-s.d[j], 0) / math.Abs(a); v < ratio || (v == ratio && math.Abs(a) > size) {
				q, ratio, size = j, v, math.Abs(a)
			}
		}
		if q < 0 {
			return lpIterLimit // nothing can take its place
		}
		dq, theta := s.d[q], s.d[q]/s.arow[q]
		for _, j := range s.cand {
			if s.pos[j] < 0 {
				s.d[j] -= theta * s.arow[j]
			}
		}
		if leaving := s.basis[r]; !s.cols[leaving].off {
			s.cand, s.d[leaving] = append(s.cand, leaving), -theta
		}
		s.column(q)
		s.pivot(r, q)
		for i, v := range s.binv[r*m : (r+1)*m] {
			s.y[i] += dq * v
		}
	}
	return lpIterLimit
}

// column sets alpha = B⁻¹·a_j.
func (s *simplex) column(j int) {
	m := s.m
	c := &s.cols[j]
	for k := 0; k < m; k++ {
		row := s.binv[k*m : (k+1)*m]
		a := 0.0
		for t, i := range c.idx {
			a += row[i] * c.val[t]
		}
		s.alpha[k] = a
	}
}

// price is Dantzig's rule over a window: the best reduced cost among a window of columns that has
// an improving one, the windows taken in turn; only a full round without one proves optimality.
func (s *simplex) price() (int, float64) {
	enter, best := -1, simplexTol
	nc := len(s.cols)
	window := max(64, nc/8)
	for k := 0; k < nc; k++ {
		j := s.next + k
		if j >= nc {
			j -= nc
		}
		if s.pos[j] < 0 && !s.cols[j].off {
			if d := s.reduced(j); d > best {
				enter, best = j, d
			}
		}
		if enter >= 0 && k+1 >= window {
			s.next = j + 1
			break
		}
	}
	if s.next >= nc {
		s.next = 0
	}
	return enter, best
}

// perturb raises every basic value by a random amount and sets bw to the right-hand side that
// makes the raised values the basis's solution.
func (s *simplex) perturb() {
	for k, j := range s.basis {
		if s.cols[j].off {
			s.x[k] = 0 // fixed there
			continue
		}
		s.x[k] = max(s.x[k], 0) + perturbation*(1+s.rng.Float64())
	}
	clear(s.bw)
	for k, j := range s.basis {
		c := &s.cols[j]
		for t, i := range c.idx {
			s.bw[i] += c.val[t] * s.x[k]
		}
	}
}

// restore recomputes the duals and the basic values for the true b, reading values within feasTol
// below zero as zero.
func (s *simplex) restore() {
	s.duals()
	s.values(s.b)
	for k, v := range s.x {
		if v < 0 && v > -feasTol {
			s.x[k] = 0
		}
	}
}

func (s *simplex) pivot(r, enter int) {
	m := s.m
	a := s.alpha[r]
	prow := s.binv[r*m : (r+1)*m]
	for i := range prow {
		prow[i] /= a
	}
	s.x[r] /= a
	for k := 0; k < m; k++ {
		f := s.alpha[k]
		if k == r || f == 0 {
			continue
		}
		row := s.binv[k*m : (k+1)*m]
		for i, v := range prow {
			row[i] -= f * v
		}
		s.x[k] -= f * s.x[r]
	}
	s.pos[s.basis[r]] = -1
	s.basis[r] = enter
	s.pos[enter] = r
	s.since++
	s.pivots++
}

// refactor rebuilds B⁻¹ from the basis by Gauss-Jordan elimination, which stops rounding errors
// from accumulating over many pivots. It reports false, changing nothing, when the basis is
// singular.
func (s *simplex) refactor() bool {
	m := s.m
	bm := make([]float64, m*m)
	for k, j := range s.basis {
		c := &s.cols[j]
		for t, i := range c.idx {
			bm[i*m+k] = c.val[t]
		}
	}
	inv := make([]float64, m*m)
	for i := 0; i < m; i++ {
		inv[i*m+i] = 1
	}
	for col := 0; col < m; col++ {
		p := col
		for r := col + 1; r < m; r++ {
			if math.Abs(bm[r*m+col]) > math.Abs(bm[p*m+col]) {
				p = r
			}
		}
		if math.Abs(bm[p*m+col]) < 1e-12 {
			return false
		}
		if p != col {
			for i := 0; i < m; i++ {
				bm[p*m+i], bm[col*m+i] = bm[col*m+i], bm[p*m+i]
				inv[p*m+i], inv[col*m+i] = inv[col*m+i], inv[p*m+i]
			}
		}
		d := bm[col*m+col]
		for i := 0; i < m; i++ {
			bm[col*m+i] /= d
			inv[col*m+i] /= d
		}
		for r := 0; r < m; r++ {
			f := bm[r*m+col]
			if r == col || f == 0 {
				continue
			}
			for i := 0; i < m; i++ {
				bm[r*m+i] -= f * bm[col*m+i]
				inv[r*m+i] -= f * inv[col*m+i]
			}
		}
	}
	// inv = B⁻¹ with B's columns in basis order, so row k of inv belongs to basis[k].
	s.binv = inv
	s.since = 0
	return true
}

// values sets x = B⁻¹·rhs.
func (s *simplex) values(rhs []float64) {
	m := s.m
	for k := 0; k < m; k++ {
		v := 0.0
		for i, bi := range rhs {
			v += s.binv[k*m+i] * bi
		}
		s.x[k] = v
	}
}

// warm starts from a basis another solve ended with (a feasible one: the rows and right-hand
// sides never change, only costs). It falls back to the artificial basis when the given one is
// singular or infeasible beyond feasTol, and reports whether it kept the given one.
func (s *simplex) warm(basis []int) bool {
	for j := range s.pos {
		s.pos[j] = -1
	}
	copy(s.basis, basis)
	for k, j := range s.basis {
		s.pos[j] = k
	}
	if s.refactorWarm() {
		s.values(s.b)
		ok := true
		for k, v := range s.x {
			if v < -feasTol {
				ok = false
			} else if v < 0 {
				s.x[k] = 0
			}
		}
		if ok {
			return true
		}
	}
	s.cold()
	return false
}

// refactorWarm is refactor for warm, reusing the inverse of the basis warm last rebuilt when
// the basis is the same.
func (s *simplex) refactorWarm() bool {
	if s.warmInv != nil && slices.Equal(s.basis, s.warmBasis) {
		s.binv = append(s.binv[:0], s.warmInv...)
		s.since = 0
		return true
	}
	if !s.refactor() {
		return false
	}
	s.warmBasis = append(s.warmBasis[:0], s.basis...)
	s.warmInv = append(s.warmInv[:0], s.binv...)
	return true
}

// cold sets the artificial basis.
func (s *simplex) cold() {
	for j := range s.pos {
		s.pos[j] = -1
	}
	clear(s.binv)
	for i := 0; i < s.m; i++ {
		s.basis[i], s.pos[i] = i, i
		s.binv[i*s.m+i] = 1
	}
	copy(s.x, s.b)
	s.since = 0
}
