package optimize

import "math"

// simplex is a small linear program in equality form, maximise c·x subject to A·x = b, x ≥ 0 with
// b ≥ 0, solved by the revised simplex method with an explicit (dense) basis inverse. It is sized
// for a restricted master problem: a hundred or so rows and a few thousand sparse columns, so an
// m×m inverse is cheap and the columns are priced one by one. Every row starts with an artificial
// unit column of cost -bigM, so the artificial basis is feasible from the start and columns can be
// added between solves.
type simplex struct {
	m     int
	b     []float64
	cols  []lpCol // the first m are the artificials
	basis []int   // per row, its basic column
	pos   []int   // per column, its row in the basis, or -1
	binv  []float64
	x     []float64 // per row, the value of its basic column
	y     []float64 // the duals c_B·B⁻¹, after duals()
	alpha []float64
	since int // pivots since the inverse was last rebuilt
	next  int // where partial pricing resumes
}

type lpCol struct {
	idx  []int
	val  []float64
	cost float64
	off  bool // barred: never enters (its cost is the artificials')
}

// Reduced costs under simplexTol count as zero: the objective's coefficients are scores (whole
// numbers in practice), so anything smaller is rounding.
const simplexTol = 1e-7

func newSimplex(b []float64, bigM float64) *simplex {
	m := len(b)
	s := &simplex{m: m, b: b, basis: make([]int, m), binv: make([]float64, m*m), x: append([]float64(nil), b...),
		y: make([]float64, m), alpha: make([]float64, m)}
	for i := 0; i < m; i++ {
		s.cols = append(s.cols, lpCol{idx: []int{i}, val: []float64{1}, cost: -bigM})
		s.pos = append(s.pos, i)
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

// solve runs primal simplex iterations from the current basis until no column improves (true) or
// an iteration limit is hit (false). Dantzig's rule picks the entering column; after a run of
// degenerate pivots it falls back to Bland's rule, which cannot cycle.
func (s *simplex) solve() bool {
	m := s.m
	degenerate := 0
	s.duals()
	for iter := 0; iter < 100000; iter++ {
		if s.since >= 100 {
			if !s.refactor() {
				s.since = 0 // singular by rounding: keep the updated inverse
			}
			s.duals()
		}
		bland := degenerate > 30
		enter, best := -1, simplexTol
		if bland {
			for j := range s.cols {
				if s.pos[j] < 0 && !s.cols[j].off && s.reduced(j) > simplexTol {
					enter, best = j, s.reduced(j)
					break
				}
			}
		} else {
			// Partial pricing: the best of a window of columns that has an improving one, the
			// windows taken in turn; only a full round without one proves optimality.
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
		}
		if enter < 0 {
			return true
		}
		c := &s.cols[enter]
		for k := 0; k < m; k++ {
			row := s.binv[k*m : (k+1)*m]
			a := 0.0
			for t, i := range c.idx {
				a += row[i] * c.val[t]
			}
			s.alpha[k] = a
		}
		leave, ratio := -1, math.Inf(1)
		for k := 0; k < m; k++ {
			a := s.alpha[k]
			if a <= 1e-9 {
				continue
			}
			r := s.x[k] / a
			switch {
			case r < ratio-1e-12:
				leave, ratio = k, r
			case r < ratio+1e-12:
				if (bland && s.basis[k] < s.basis[leave]) || (!bland && a > s.alpha[leave]) {
					leave, ratio = k, math.Min(r, ratio)
				}
			}
		}
		if leave < 0 {
			return false // unbounded: the master's rows bound every column, so only by rounding
		}
		if ratio <= 1e-12 {
			degenerate++
		} else {
			degenerate = 0
		}
		s.pivot(leave, enter)
		// The duals follow the pivot: y += d·(row r of the new inverse).
		for i, v := range s.binv[leave*m : (leave+1)*m] {
			s.y[i] += best * v
		}
	}
	return false
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
		if math.Abs(s.x[k]) < 1e-11 {
			s.x[k] = 0
		}
	}
	s.pos[s.basis[r]] = -1
	s.basis[r] = enter
	s.pos[enter] = r
	s.since++
}

// refactor rebuilds B⁻¹ and x from the basis by Gauss-Jordan elimination, which stops rounding
// errors from accumulating over many pivots. It reports false, changing nothing, when the basis
// is singular.
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
	for k := 0; k < m; k++ {
		v := 0.0
		for i, bi := range s.b {
			v += inv[k*m+i] * bi
		}
		if math.Abs(v) < 1e-11 {
			v = 0
		}
		s.x[k] = v
	}
	s.since = 0
	return true
}

// warm starts from a basis another solve ended with (a feasible one: the rows and right-hand
// sides never change, only costs). It falls back to the artificial basis when the given one is
// singular or infeasible by rounding, and reports whether it kept the given one.
func (s *simplex) warm(basis []int) bool {
	for j := range s.pos {
		s.pos[j] = -1
	}
	copy(s.basis, basis)
	for k, j := range s.basis {
		s.pos[j] = k
	}
	if s.refactor() {
		ok := true
		for _, v := range s.x {
			if v < -1e-9 {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
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
	return false
}
