package solver

import (
	"context"
	"testing"
	"time"
)

// caseNames are testdata/'s instances: shapes on which the solver once ran far past its limits
// (many workload groups, fractional or whole scores, both senses). caseOptima are CBC 2.10.8's
// proven optima of them, from the model written from the raw data alone (cbc_test.go).
var (
	caseNames  = []string{"R24_frac_11x3x77", "R26_frac_11x5x81", "R33_distinct_11x3x77", "V24_max", "V24_neg_max", "V24_round_min"}
	caseOptima = map[string]float64{
		"R24_frac_11x3x77":     1215.61,
		"R26_frac_11x5x81":     644.51,
		"R33_distinct_11x3x77": 3964,
		"V24_max":              3171.53,
		"V24_neg_max":          -1215.61,
		"V24_round_min":        1214,
	}
)

// TestCasesReachCBCOptima: Solve proves CBC's optimum on each of the cases.
func TestCasesReachCBCOptima(t *testing.T) {
	for _, name := range caseNames {
		t.Run(name, func(t *testing.T) {
			in := loadInstance(t, name)
			start := time.Now()
			s, err := Solve(context.Background(), in.problem(), Options{TimeLimit: 5 * time.Minute})
			if err != nil {
				t.Fatal(err)
			}
			if v := checkPlan(t, in.problem(), s); !s.Optimal || !sameObjective(v, caseOptima[name]) {
				t.Fatalf("plan %v, bound %v, optimal %v; CBC's optimum %v", v, s.Bound, s.Optimal, caseOptima[name])
			}
			t.Logf("proven optimal %v in %d nodes, %v", s.Objective, s.Nodes, time.Since(start))
		})
	}
}

// TestSolveStopsWithinItsLimits: on each case, a time limit of one second ends the search within a
// fraction of a second after it, and a budget of one node ends it after the root however long the
// root takes; either way the reply is a feasible plan no better than the optimum, with a bound no
// worse than it, and marked optimal only if it is the optimum.
func TestSolveStopsWithinItsLimits(t *testing.T) {
	const limit, slack = time.Second, time.Second // slack: a loaded machine delays the wake-up
	for _, name := range caseNames {
		t.Run(name, func(t *testing.T) {
			in := loadInstance(t, name)
			opt := caseOptima[name]
			for _, opts := range []Options{{TimeLimit: limit}, {MaxNodes: 1, TimeLimit: time.Minute}} {
				start := time.Now()
				s, err := Solve(context.Background(), in.problem(), opts)
				took := time.Since(start)
				if opts.MaxNodes == 0 && took > limit+slack {
					t.Errorf("time limit %v: returned after %v", limit, took)
				}
				if opts.MaxNodes == 1 && s != nil && s.Nodes > 1 {
					t.Errorf("node budget 1: %d nodes", s.Nodes)
				}
				if err != nil {
					t.Errorf("%+v: %v after %v", opts, err, took)
					continue
				}
				sign := 1.0
				if in.Minimize {
					sign = -1
				}
				v := checkPlan(t, in.problem(), s)
				if sign*v > sign*opt+1e-6 || sign*s.Bound < sign*opt-1e-6 || (s.Optimal && !sameObjective(v, opt)) {
					t.Errorf("%+v: plan %v, bound %v, optimal %v; optimum %v", opts, v, s.Bound, s.Optimal, opt)
				}
				t.Logf("%+v: %v (bound %v, optimal %v, %d nodes) after %v", opts, v, s.Bound, s.Optimal, s.Nodes, took)
			}
		})
	}
}
