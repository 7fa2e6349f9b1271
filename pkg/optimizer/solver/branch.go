package solver

import (
	"cmp"
	"context"
	"math"
	"slices"
)

// Branching. A node whose master is fractional splits on a cluster's policy (the child that fixes
// it, "up", and the one that forbids it, "down") while any policy is fractional, and then on a
// cluster's count of a group (≤ ⌊x⌋ down, ≥ ⌈x⌉ up): once the policies are whole the rest is an
// assignment problem, and while they move the counts' falls say little (trying counts alongside
// policies made the trees of 50 × 5 × 200 four times larger). Only when the best policy split is
// flat, moving neither child's bound, are the counts tried as well and the better split taken:
// where several policies hold the same workloads equally well (supplies in natural units, large
// beside every demand) policy splits can stay flat for dozens of levels while the counts decide
// the bound. Which candidate is chosen by
// reliability branching: each candidate's bound falls in either direction are estimated by
// pseudocosts (the average fall per unit of fractionality seen when the candidate was branched
// on before), and a candidate whose pseudocosts rest on fewer than `reliable` observations is
// evaluated by strong branching (both children's masters solved) instead. The score of a split
// is the product of its two falls, so that both must fall.

// candidate is a fractional policy or count of a node's master.
type candidate struct {
	key   int     // pseudocost index: c*64+p for a policy, policyKeys + c*groups+g for a count
	x     float64 // the master's value
	score float64
}

// pseudocosts are per candidate key and direction (0 down, 1 up): the sum of the bound falls per
// unit of fractionality observed, and how many.
type pseudocosts struct {
	sum [2][]float64
	n   [2][]int32
	// all: the sum and count over every key, per direction and kind (0 policy, 1 count), the
	// estimate for keys not seen yet.
	allSum [2][2]float64
	allN   [2][2]int
}

// Branching parameters: a candidate with fewer observations than reliable in a direction is
// evaluated by strong branching, at most maxStrong per node, and no more after lookahead strong
// evaluations in a row that did not improve the best score. Set on the instances of testdata/, the
// GPU-slice benchmarks and generated instances of those shapes (BenchmarkVersusCBC); more
// evaluations cost more than the nodes they save there.
const (
	reliable  = 2
	maxStrong = 8
	lookahead = 4
)

func newPseudocosts(keys int) *pseudocosts {
	pc := &pseudocosts{}
	for d := range 2 {
		pc.sum[d] = make([]float64, keys)
		pc.n[d] = make([]int32, keys)
	}
	return pc
}

// policyKeys is where count keys start.
func (ms *master) policyKeys() int { return ms.m.nc * 64 }

func (ms *master) kind(key int) int {
	if key < ms.policyKeys() {
		return 0
	}
	return 1
}

// fraction is how far the master's value x must move for the child in direction d: down to
// ⌊x⌋ (a forbidden policy: to 0), up to ⌈x⌉ (a fixed policy: to 1).
func fraction(x float64, d int) float64 {
	if d == 0 {
		return x - math.Floor(x)
	}
	return math.Ceil(x) - x
}

// observe records a child's bound fall.
func (s *search) observe(b *branchOrigin, bound float64) {
	if b == nil {
		return
	}
	f := fraction(b.x, b.dir)
	if f < 1e-6 {
		return
	}
	v := math.Max(b.parent-bound, 0) / f
	pc, k := s.pc, s.ms.kind(b.key)
	pc.sum[b.dir][b.key] += v
	pc.n[b.dir][b.key]++
	pc.allSum[b.dir][k] += v
	pc.allN[b.dir][k]++
}

// estimate is the expected fall of the child in direction d.
func (s *search) estimate(c candidate, d int) float64 {
	pc, k := s.pc, s.ms.kind(c.key)
	psi := 1.0
	switch {
	case pc.n[d][c.key] > 0:
		psi = pc.sum[d][c.key] / float64(pc.n[d][c.key])
	case pc.allN[d][k] > 0:
		psi = pc.allSum[d][k] / float64(pc.allN[d][k])
	}
	return psi * fraction(c.x, d)
}

func splitScore(down, up float64) float64 { return math.Max(down, 1e-6) * math.Max(up, 1e-6) }

// branchOrigin is how a node came from its parent: the candidate, direction, master value and the
// parent's bound, so that the node's own bound updates the pseudocosts.
type branchOrigin struct {
	key, dir int
	x        float64
	parent   float64
}

// candidates are the master's fractional policies (counts false) or its fractional counts that
// the node's bounds leave free (counts true).
func (s *search) candidates(res *lpResult, counts bool) []candidate {
	var cands []candidate
	if !counts {
		for c := range res.xcp {
			for p, x := range res.xcp[c] {
				if frac(x) > 1e-6 {
					cands = append(cands, candidate{key: c*64 + p, x: x})
				}
			}
		}
		return cands
	}
	for i, x := range res.xcg {
		if frac(x) > 1e-6 && (res.lo == nil || res.lo[i] < res.hi[i]) {
			cands = append(cands, candidate{key: s.ms.policyKeys() + i, x: x})
		}
	}
	return cands
}

// children are the two subproblems of a split: down, then up.
func (s *search) children(n *bpNode, res *lpResult, k candidate) [2]*bpNode {
	var kids [2]*bpNode
	for d := range kids {
		ch := n.child(res)
		ch.origin = &branchOrigin{key: k.key, dir: d, x: k.x, parent: res.bound}
		if k.key < s.ms.policyKeys() {
			c, p := k.key/64, k.key%64
			if d == 0 {
				ch.allowed[c] &^= 1 << p
			} else {
				ch.allowed[c] &= 1 << p
			}
		} else {
			i := k.key - s.ms.policyKeys()
			fl := int32(math.Floor(k.x))
			if d == 0 {
				ch.setBound(i, ch.lo[i], fl)
			} else {
				ch.setBound(i, fl+1, ch.hi[i])
			}
			s.countBranches++
		}
		kids[d] = ch
	}
	return kids
}

// flat is the score of a split neither of whose children's bounds falls by more than splitScore's
// floor: it tells the branching nothing.
var flat = splitScore(0, 0)

// branch splits n, whose master res is fractional, and returns the children to search (fewer than
// two when strong branching showed a side empty or pruned); ok false when res is whole. Policies
// are split first; a flat policy split gives way to a count split that moves a bound.
func (s *search) branch(ctx context.Context, n *bpNode, res *lpResult) ([]*bpNode, bool) {
	if cands := s.candidates(res, false); len(cands) > 0 {
		kids, score := s.choose(ctx, n, res, cands)
		if score > flat {
			return kids, true
		}
		if counts := s.candidates(res, true); len(counts) > 0 {
			if countKids, countScore := s.choose(ctx, n, res, counts); countScore > score {
				return countKids, true
			}
		}
		return kids, true
	}
	cands := s.candidates(res, true)
	if len(cands) == 0 {
		return nil, false
	}
	kids, _ := s.choose(ctx, n, res, cands)
	return kids, true
}

// choose picks among cands by reliability branching and returns the chosen split's children and
// score (+Inf when strong branching showed a side empty or pruned: the children are the other side).
func (s *search) choose(ctx context.Context, n *bpNode, res *lpResult, cands []candidate) ([]*bpNode, float64) {
	for i := range cands {
		cands[i].score = splitScore(s.estimate(cands[i], 0), s.estimate(cands[i], 1))
	}
	slices.SortStableFunc(cands, func(a, b candidate) int { return cmp.Compare(b.score, a.score) })
	best, bestScore := -1, math.Inf(-1)
	var bestKids []*bpNode
	strong, idle := 0, 0
	for i, k := range cands {
		unreliable := s.pc.n[0][k.key] < reliable || s.pc.n[1][k.key] < reliable
		if !unreliable || strong >= maxStrong || idle >= lookahead || ctx.Err() != nil {
			if k.score > bestScore {
				best, bestScore, bestKids = i, k.score, nil
			}
			continue
		}
		strong++
		kids, score, cut := s.strongBranch(ctx, n, res, k)
		if cut {
			return kids, math.Inf(1)
		}
		if score > bestScore {
			best, bestScore, bestKids = i, score, kids
			idle = 0
		} else {
			idle++
		}
	}
	if bestKids != nil {
		return bestKids, bestScore
	}
	kids := s.children(n, res, cands[best])
	return kids[:], bestScore
}

// strongBranch solves both children of a split and records their falls. It returns the children
// with their bounds and bases (so that their own solve starts where this one ended), the split's
// score, and cut true when a side has no plan that can beat the incumbent (the children then are
// the other side alone, or none).
func (s *search) strongBranch(ctx context.Context, n *bpNode, res *lpResult, k candidate) ([]*bpNode, float64, bool) {
	kids := s.children(n, res, k)
	var live []*bpNode
	var fall [2]float64
	for d, ch := range kids {
		// Without count fixing: the child keeps only the trial's bound and basis, and fixes
		// counts with its own duals when it is solved as a node.
		r := s.solveMasterTight(ctx, ch, false)
		if r.infeas || r.pruned {
			fall[d] = math.Inf(1)
			continue
		}
		if r.converged {
			s.observe(ch.origin, r.bound)
			ch.origin = nil // observed: its own solve would count the same fall again
		}
		ch.allowed, ch.bound = r.allowed, r.bound
		if r.basis != nil {
			ch.basis = r.basis
		}
		fall[d] = res.bound - r.bound
		live = append(live, ch)
	}
	return live, splitScore(fall[0], fall[1]), len(live) < 2
}
