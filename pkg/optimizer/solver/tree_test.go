package solver

import (
	"context"
	"errors"
	"math/rand/v2"
	"testing"
)

// TestBareTreeAgreesWithHeuristics: on seeded GPU-slice instances too large for brute force (4-8
// clusters, 20-40 workloads in few groups), the tree alone (no greedy, rounding, fixed-policy
// search or dive: plans only from whole masters, so it branches on group counts as well as
// policies) proves the same optimum as the full search.
func TestBareTreeAgreesWithHeuristics(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	branches := 0
	for i := 0; i < 30; i++ {
		nc := 4 + r.IntN(5)
		pr := bench(r, nc, 1+r.IntN(3), 5*nc)
		full, err := Solve(context.Background(), pr, Options{})
		if errors.Is(err, ErrInfeasible) {
			continue
		} else if err != nil || !full.Optimal {
			t.Fatalf("instance %d: %+v, %v", i, full, err)
		}
		m, err := build(pr)
		if err != nil {
			t.Fatal(err)
		}
		bare, s, err := solveModel(context.Background(), m, Options{noHeuristics: true})
		branches += s.countBranches
		if err != nil || !bare.Optimal || checkPlan(t, pr, bare) != checkPlan(t, pr, full) {
			t.Fatalf("instance %d: tree alone %+v, %v; full search %v", i, bare, err, full.Objective)
		}
	}
	if n := branches; n < 10 {
		t.Errorf("the tree branched on group counts %d times: the instances do not exercise it", n)
	}
}
