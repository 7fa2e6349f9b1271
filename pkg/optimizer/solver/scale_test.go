package solver

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// scaled is an instance whose scores sit at an unusual scale, and the same instance brought back
// to everyday scores (hundreds) by a positive factor and a shift, which change no plan's rank: the
// reference CBC solves.
type scaled struct {
	in, ref *instance
}

// scaleKinds draw an instance's scores at one scale, from a generated instance's score s (in
// [-100, 100], hundredths) or afresh: "tiny" draws them log-uniformly from [1e-6, 1e-3] (the
// reference is ×1e6), "huge" is s×1e6 (reference ×1e-6), "offset" is 1e7 + s/1000 (reference:
// less 1e7, ×1000).
var scaleKinds = []struct {
	name   string
	draw   func(r *rand.Rand, s float64) float64
	factor float64 // reference = (score - shift) × factor
	shift  float64
}{
	{name: "tiny", draw: func(r *rand.Rand, _ float64) float64 { return math.Pow(10, -6+3*r.Float64()) }, factor: 1e6},
	{name: "huge", draw: func(_ *rand.Rand, s float64) float64 { return s * 1e6 }, factor: 1e-6},
	{name: "offset", draw: func(_ *rand.Rand, s float64) float64 { return 1e7 + s/1000 }, factor: 1000, shift: 1e7},
}

// scaledInstances are n seeded instances of the generated shapes (10-40 workloads, whole-number
// amounts, both senses, apps shared or one per workload), their scores drawn at the scales of
// scaleKinds in turn, each with its reference.
func scaledInstances(n int) []scaled {
	r := rand.New(rand.NewPCG(32, 17))
	var out []scaled
	for i := 0; len(out) < n; i++ {
		k := scaleKinds[len(out)%len(scaleKinds)]
		sh := shape{nc: 3 + r.IntN(6), np: 2 + r.IntN(3), nw: 10 + r.IntN(31), fractional: true, distinct: i%2 == 0, minimize: i/2%2 == 1, missing: 0.1}
		base := generate(r, sh)
		in, ref := *base, *base
		in.Name = fmt.Sprintf("%s-%s#%d", k.name, base.Name, len(out))
		in.Scores, ref.Scores = nil, nil
		for _, s := range base.Scores {
			s[3] = k.draw(r, s[3])
			in.Scores = append(in.Scores, s)
			s[3] = (s[3] - k.shift) * k.factor
			ref.Scores = append(ref.Scores, s)
		}
		// Keep the feasible ones: the test is about optima.
		if _, err := Solve(context.Background(), ref.problem(), Options{MaxNodes: 1}); err != nil {
			continue
		}
		out = append(out, scaled{in: &in, ref: &ref})
	}
	return out
}

// TestSolveOptimalAtEveryScale: with scores tiny (1e-6 to 1e-3), huge (up to 1e8) or offset by a
// large constant (1e7 plus a part of at most 0.1), Solve's plan is proven optimal only when it is:
// read on the reference instance (the same scores rescaled to everyday values, which ranks plans
// the same), it is worth CBC's proven optimum of the reference. Its objective is its own scores'
// sum, and its bound equals it.
func TestSolveOptimalAtEveryScale(t *testing.T) {
	for _, sc := range scaledInstances(17) {
		in, ref := sc.in, sc.ref
		want := solveCBC(t, ref, 5*time.Minute)
		if want.unfinished || !want.feasible {
			t.Fatalf("%s: CBC on the reference: %+v", in.Name, want)
		}
		got, err := Solve(context.Background(), in.problem(), Options{TimeLimit: time.Minute})
		if err != nil {
			t.Fatalf("%s: %v", in.Name, err)
		}
		v := checkPlan(t, in.problem(), got)
		onRef := planValue(ref.problem(), got)
		if !got.Optimal || got.Bound != got.Objective {
			t.Errorf("%s: not proven optimal: objective %v, bound %v (reference: plan %v, CBC's optimum %v)", in.Name, v, got.Bound, onRef, want.objective)
			continue
		}
		if !sameObjective(onRef, want.objective) {
			t.Errorf("%s: proven optimal at %v after %d nodes, but on the reference the plan is worth %v and CBC proves %v", in.Name, v, got.Nodes, onRef, want.objective)
		}
	}
}

// planValue is a plan's objective read from another instance's scores (the plan must be allowed
// there).
func planValue(pr Problem, s *Solution) float64 {
	total := 0.0
	for w, c := range s.Cluster {
		v, ok := pr.Score(w, c, s.Policy[c])
		if !ok {
			return math.NaN()
		}
		total += v
	}
	return total
}
