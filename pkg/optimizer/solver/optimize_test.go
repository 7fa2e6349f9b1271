package solver

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"
	"time"
)

// table is a Problem's scores as a map, with a Score function over it.
type table map[[3]int]float64

func (t table) score(w, c, p int) (float64, bool) { v, ok := t[[3]int{w, c, p}]; return v, ok }

// bruteForce tries every policy vector and every assignment, reading the Problem directly (not the
// solver's model): the oracle. It returns the best objective in the problem's own sense and
// whether any plan is feasible.
func bruteForce(pr Problem) (float64, bool) {
	nc, nw := len(pr.Clusters), len(pr.Workloads)
	pol := make([]int, nc)
	cl := make([]int, nw)
	best, found := 0.0, false
	better := func(v float64) bool {
		if !found {
			return true
		}
		if pr.Minimize {
			return v < best
		}
		return v > best
	}
	var assign func(w int)
	assign = func(w int) {
		if w == nw {
			used := map[[2]any]int64{}
			total := 0.0
			for wi, c := range cl {
				p := pr.Clusters[c].Policies[pol[c]]
				wl := pr.Workloads[wi]
				if wl.Kind != p.Kind {
					return // a workload runs only under a policy of its kind, even for a demand of 0
				}
				s, ok := pr.Score(wi, c, pol[c])
				if !ok {
					return
				}
				total += s
				used[[2]any{c, wl.Kind}] += wl.Demand
			}
			for c := range pr.Clusters {
				p := pr.Clusters[c].Policies[pol[c]]
				for k, u := range used {
					if k[0] != c {
						continue
					}
					supply := int64(0)
					if k[1] == p.Kind {
						supply = p.Supply
					}
					if u > supply {
						return
					}
				}
			}
			if better(total) {
				best, found = total, true
			}
			return
		}
		for c := 0; c < nc; c++ {
			cl[w] = c
			assign(w + 1)
		}
	}
	var choose func(c int)
	choose = func(c int) {
		if c == nc {
			assign(0)
			return
		}
		for p := range pr.Clusters[c].Policies {
			pol[c] = p
			choose(c + 1)
		}
	}
	choose(0)
	return best, found
}

// checkPlan verifies a solution against the Problem directly and returns its objective.
func checkPlan(t *testing.T, pr Problem, s *Solution) float64 {
	t.Helper()
	used := map[int]int64{}
	total := 0.0
	for w, c := range s.Cluster {
		p := pr.Clusters[c].Policies[s.Policy[c]]
		wl := pr.Workloads[w]
		if wl.Kind != p.Kind {
			t.Fatalf("workload %d (%s) on cluster %d whose policy supplies %s", w, wl.Kind, c, p.Kind)
		}
		v, ok := pr.Score(w, c, s.Policy[c])
		if !ok {
			t.Fatalf("workload %d on cluster %d policy %d: no score", w, c, s.Policy[c])
		}
		total += v
		used[c] += wl.Demand
	}
	for c, u := range used {
		if sup := pr.Clusters[c].Policies[s.Policy[c]].Supply; u > sup {
			t.Fatalf("cluster %d: demand %d > supply %d", c, u, sup)
		}
	}
	if math.Abs(total-s.Objective) > 1e-9 {
		t.Fatalf("reported objective %v, plan's %v", s.Objective, total)
	}
	return total
}

// random builds a seeded random instance: nc clusters with np policies each, nw workloads of kinds
// gpu and (sometimes) cpu, scores in [-100, 100] for most (app, cluster, device) triples.
func random(r *rand.Rand, nc, np, nw int, kinds []string) Problem {
	devices := []string{"all", "1g", "2g", "3g", "7g"}
	apps := []string{"app01", "app02", "app03"}
	pr := Problem{Minimize: r.IntN(3) == 0}
	for c := 0; c < nc; c++ {
		cl := Cluster{Name: fmt.Sprintf("c%d", c)}
		for p := 0; p < np; p++ {
			cl.Policies = append(cl.Policies, Policy{
				Name: fmt.Sprintf("c%d-p%d", c, p), Kind: kinds[r.IntN(len(kinds))],
				Supply: int64(r.IntN(5)), Device: devices[r.IntN(len(devices))],
			})
		}
		pr.Clusters = append(pr.Clusters, cl)
	}
	for w := 0; w < nw; w++ {
		pr.Workloads = append(pr.Workloads, Workload{
			Name: fmt.Sprintf("w%d", w), App: apps[r.IntN(len(apps))],
			Kind: kinds[r.IntN(len(kinds))], Demand: int64(r.IntN(4)),
		})
	}
	// Scores per (app, cluster, device), as an AddOnPlacementScore holds them; some missing.
	byDim := map[string]float64{}
	for c := range pr.Clusters {
		for _, a := range apps {
			for _, d := range devices {
				if r.IntN(6) > 0 {
					byDim[fmt.Sprintf("%d/%s;%s", c, a, d)] = float64(r.IntN(201) - 100)
				}
			}
		}
	}
	pr.Score = func(w, c, p int) (float64, bool) {
		v, ok := byDim[fmt.Sprintf("%d/%s;%s", c, pr.Workloads[w].App, pr.Clusters[c].Policies[p].Device)]
		return v, ok
	}
	return pr
}

// TestSolveMatchesBruteForce: on 600 seeded random small instances (up to 3 clusters × 3
// policies × 6 workloads, two resource kinds, missing scores, both senses; every fourth a packing
// instance, 3 clusters × 6 workloads of demand 2-3 on supplies of 3 or 5) Solve's plan is
// feasible, its objective is the brute-force optimum, and it reports infeasibility exactly when
// brute force finds no plan. Stopped after one node, its plan is no better than the optimum and
// its bound no worse; without heuristics, the tree alone finds and proves the optimum.
func TestSolveMatchesBruteForce(t *testing.T) {
	r := rand.New(rand.NewPCG(2026, 11))
	feasible, infeasible, noPlan := 0, 0, 0
	for i := 0; i < 600; i++ {
		kinds := []string{"gpu"}
		if i%3 == 0 {
			kinds = append(kinds, "cpu")
		}
		nc, np, nw := 1+r.IntN(3), 1+r.IntN(3), 1+r.IntN(6)
		if i%4 == 1 {
			// Packing: odd supplies, demands of 2-3, many twins, so the master's group counts
			// come out fractional and the search branches on them.
			nc, np, nw, kinds = 3, 1+r.IntN(2), 6, []string{"gpu"}
		}
		pr := random(r, nc, np, nw, kinds)
		if i%4 == 1 {
			for c := range pr.Clusters {
				for p := range pr.Clusters[c].Policies {
					pr.Clusters[c].Policies[p].Supply = int64(3 + 2*r.IntN(2))
				}
			}
			for w := range pr.Workloads {
				pr.Workloads[w].Demand = int64(2 + r.IntN(2))
			}
		}
		want, ok := bruteForce(pr)
		got, err := Solve(context.Background(), pr, Options{})
		if !ok {
			if !errors.Is(err, ErrInfeasible) && !errors.Is(err, ErrNoOption) {
				t.Fatalf("instance %d: brute force finds no plan, Solve: %+v, %v", i, got, err)
			}
			infeasible++
			continue
		}
		if err != nil {
			t.Fatalf("instance %d: brute force finds %v, Solve: %v", i, want, err)
		}
		if !got.Optimal || got.Bound != got.Objective {
			t.Fatalf("instance %d: finished search not marked optimal: %+v", i, got)
		}
		if v := checkPlan(t, pr, got); v != want {
			t.Fatalf("instance %d (minimize=%v): Solve %v, brute force %v", i, pr.Minimize, v, want)
		}
		// Stopped after the root, the bound still holds the optimum and the plan is no better
		// than it; optimal only when it is the optimum.
		root, err := Solve(context.Background(), pr, Options{MaxNodes: 1})
		if err != nil {
			// Allowed: the budget ran out before any plan was found; never a claim of none.
			if errors.Is(err, ErrInfeasible) || errors.Is(err, ErrNoOption) {
				t.Fatalf("instance %d: one node: %v", i, err)
			}
			noPlan++
			feasible++
			continue
		}
		sign := 1.0
		if pr.Minimize {
			sign = -1
		}
		if v := checkPlan(t, pr, root); sign*v > sign*want || sign*root.Bound < sign*want || (root.Optimal && v != want) {
			t.Fatalf("instance %d (minimize=%v): one node: plan %v, bound %v, optimal %v; optimum %v", i, pr.Minimize, v, root.Bound, root.Optimal, want)
		}
		// The tree alone, without the heuristics' plans, finds and proves the optimum too.
		bare, err := Solve(context.Background(), pr, Options{noHeuristics: true})
		if err != nil || !bare.Optimal || checkPlan(t, pr, bare) != want {
			t.Fatalf("instance %d: without heuristics: %+v, %v; optimum %v", i, bare, err, want)
		}
		feasible++
	}
	if noPlan > 5 {
		t.Errorf("one node found no plan on %d instances", noPlan)
	}
	// The generator must exercise both outcomes, or the test proves little.
	if feasible < 200 || infeasible < 50 {
		t.Errorf("feasible %d, infeasible %d: the generator is lopsided", feasible, infeasible)
	}
}

// TestSolveChoosesPolicyForWorkloads: the seed's two-cluster example. Performance prefers the
// 3g layout, power the 2g one; capacity makes the two apps share or split as the scores say.
func TestSolveChoosesPolicyForWorkloads(t *testing.T) {
	clusters := []Cluster{
		{Name: "worker01", Policies: []Policy{{Name: "mig-2g-w1", Kind: "gpu", Supply: 3, Device: "2g"}, {Name: "mig-3g-w1", Kind: "gpu", Supply: 2, Device: "3g"}, {Name: "no-mig-w1", Kind: "gpu", Supply: 1, Device: "all"}}},
		{Name: "worker02", Policies: []Policy{{Name: "mig-2g-w2", Kind: "gpu", Supply: 3, Device: "2g"}, {Name: "mig-3g-w2", Kind: "gpu", Supply: 2, Device: "3g"}, {Name: "no-mig-w2", Kind: "gpu", Supply: 1, Device: "all"}}},
	}
	workloads := []Workload{{Name: "mwrs-app01", App: "app01", Kind: "gpu", Demand: 2}, {Name: "mwrs-app02", App: "app02", Kind: "gpu", Demand: 2}}
	perf := map[string]float64{"2g": 40, "3g": 80, "all": 60}
	power := map[string]float64{"2g": 20, "3g": 50, "all": 70}
	for _, tt := range []struct {
		name     string
		scores   map[string]float64
		minimize bool
		want     string
		obj      float64
	}{
		{"performance", perf, false, "3g", 160},
		{"power", power, true, "2g", 40},
	} {
		t.Run(tt.name, func(t *testing.T) {
			pr := Problem{Clusters: clusters, Workloads: workloads, Minimize: tt.minimize, Score: func(w, c, p int) (float64, bool) {
				return tt.scores[clusters[c].Policies[p].Device], true
			}}
			s, err := Solve(context.Background(), pr, Options{})
			if err != nil {
				t.Fatal(err)
			}
			checkPlan(t, pr, s)
			if s.Objective != tt.obj {
				t.Errorf("objective %v, want %v", s.Objective, tt.obj)
			}
			for c, p := range s.Policy {
				used := false
				for _, wc := range s.Cluster {
					used = used || wc == c
				}
				if used && clusters[c].Policies[p].Device != tt.want {
					t.Errorf("cluster %s got %s, want a %s policy", clusters[c].Name, clusters[c].Policies[p].Name, tt.want)
				}
			}
		})
	}
}

func TestSolveErrors(t *testing.T) {
	one := []Cluster{{Name: "c", Policies: []Policy{{Name: "p", Kind: "gpu", Supply: 2, Device: "d"}}}}
	all := func(int, int, int) (float64, bool) { return 1, true }
	none := func(int, int, int) (float64, bool) { return 0, false }
	for _, tt := range []struct {
		name string
		pr   Problem
		want error
	}{
		{"demand beyond supply", Problem{Clusters: one, Workloads: []Workload{{Name: "w", Kind: "gpu", Demand: 3}}, Score: all}, ErrInfeasible},
		{"together beyond supply", Problem{Clusters: one, Workloads: []Workload{{Name: "a", Kind: "gpu", Demand: 2}, {Name: "b", Kind: "gpu", Demand: 1}}, Score: all}, ErrInfeasible},
		{"no score", Problem{Clusters: one, Workloads: []Workload{{Name: "w", Kind: "gpu", Demand: 1}}, Score: none}, ErrNoOption},
		{"wrong kind", Problem{Clusters: one, Workloads: []Workload{{Name: "w", Kind: "cpu", Demand: 1}}, Score: all}, ErrInfeasible},
		{"wrong kind, demand 0", Problem{Clusters: one, Workloads: []Workload{{Name: "w", Kind: "cpu", Demand: 0}}, Score: all}, ErrInfeasible},
		{"negative demand", Problem{Clusters: one, Workloads: []Workload{{Name: "w", Kind: "gpu", Demand: -1}}, Score: all}, ErrInvalid},
		{"cluster without policies", Problem{Clusters: []Cluster{{Name: "c"}}, Score: all}, ErrInvalid},
		{"too fine", Problem{Clusters: []Cluster{{Name: "c", Policies: []Policy{{Name: "p", Kind: "mem", Supply: 1 << 50}}}}, Workloads: []Workload{{Name: "w", Kind: "mem", Demand: 3}}, Score: all}, ErrInvalid},
	} {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Solve(context.Background(), tt.pr, Options{})
			if !errors.Is(err, tt.want) {
				t.Errorf("got %v, want %v", err, tt.want)
			}
		})
	}
}

// TestSolveNoWorkloads: with nothing to place, the empty plan is feasible and optimal (objective
// and bound 0, every cluster on one of its policies), in both senses and with or without clusters.
func TestSolveNoWorkloads(t *testing.T) {
	two := []Cluster{
		{Name: "a", Policies: []Policy{{Name: "a-gpu", Kind: "gpu", Supply: 2, Device: "g"}}},
		{Name: "b", Policies: []Policy{{Name: "b-gpu", Kind: "gpu", Supply: 2, Device: "g"}, {Name: "b-cpu", Kind: "cpu", Supply: 4, Device: "c"}}},
	}
	for _, clusters := range [][]Cluster{two, nil} {
		for _, minimize := range []bool{false, true} {
			pr := Problem{Clusters: clusters, Minimize: minimize, Score: func(int, int, int) (float64, bool) { return 1, true }}
			s, err := Solve(context.Background(), pr, Options{})
			if err != nil {
				t.Fatalf("%d clusters, minimize %v: %v", len(clusters), minimize, err)
			}
			if !s.Optimal || s.Objective != 0 || s.Bound != 0 || len(s.Cluster) != 0 || len(s.Policy) != len(clusters) {
				t.Fatalf("%d clusters, minimize %v: %+v, want the empty plan, optimal", len(clusters), minimize, s)
			}
			for c, p := range s.Policy {
				if p < 0 || p >= len(clusters[c].Policies) {
					t.Fatalf("cluster %d: policy %d of %d", c, p, len(clusters[c].Policies))
				}
			}
		}
	}
}

// TestZeroDemandRunsUnderItsKind: a workload demanding 0 of its kind takes no supply, but it runs
// only on a cluster whose chosen policy supplies that kind. The idle cpu workload scores 20 on a,
// which has only a gpu policy, and 10 on b: it must go to b, under b's cpu policy, and the gpu
// workloads to a (30 in all; 40 if it could run on a).
func TestZeroDemandRunsUnderItsKind(t *testing.T) {
	pr := Problem{
		Clusters: []Cluster{
			{Name: "a", Policies: []Policy{{Name: "a-gpu", Kind: "gpu", Supply: 2, Device: "g"}}},
			{Name: "b", Policies: []Policy{{Name: "b-gpu", Kind: "gpu", Supply: 2, Device: "g"}, {Name: "b-cpu", Kind: "cpu", Supply: 4, Device: "c"}}},
		},
		Workloads: []Workload{{Name: "idle", App: "x", Kind: "cpu", Demand: 0}, {Name: "g1", App: "y", Kind: "gpu", Demand: 1}, {Name: "g2", App: "y", Kind: "gpu", Demand: 1}},
		Score: func(w, c, p int) (float64, bool) {
			if w == 0 && c == 0 {
				return 20, true
			}
			return 10, true
		},
	}
	s, err := Solve(context.Background(), pr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v := checkPlan(t, pr, s); v != 30 || s.Cluster[0] != 1 || s.Policy[1] != 1 {
		t.Errorf("objective %v, idle workload on cluster %d, b's policy %d; want 30, idle on b under b-cpu", v, s.Cluster[0], s.Policy[1])
	}
	if want, ok := bruteForce(pr); !ok || want != 30 {
		t.Errorf("brute force %v (ok %v), want 30", want, ok)
	}
}

// TestSolveScalesAmounts: amounts in bytes are divided by their common divisor, so a table stays
// small and the plan is still right.
func TestSolveScalesAmounts(t *testing.T) {
	gi := int64(1) << 30
	pr := Problem{
		Clusters:  []Cluster{{Name: "a", Policies: []Policy{{Name: "small", Kind: "mem", Supply: 4 * gi, Device: "x"}}}, {Name: "b", Policies: []Policy{{Name: "big", Kind: "mem", Supply: 64 * gi, Device: "x"}}}},
		Workloads: []Workload{{Name: "w1", App: "a", Kind: "mem", Demand: 8 * gi}, {Name: "w2", App: "a", Kind: "mem", Demand: 2 * gi}},
		Score:     func(w, c, p int) (float64, bool) { return float64(10 * (1 + c*w)), true },
	}
	s, err := Solve(context.Background(), pr, Options{})
	if err != nil {
		t.Fatal(err)
	}
	if v := checkPlan(t, pr, s); v != 30 {
		t.Errorf("objective %v, want 30 (w1 must go to b; w2 scores 20 on b)", v)
	}
}

// TestSolveHonoursContext: a cancelled context stops the search with its error.
func TestSolveHonoursContext(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	pr := bench(rand.New(rand.NewPCG(1, 2)), 10, 3, 40)
	if _, err := Solve(ctx, pr, Options{}); !errors.Is(err, context.Canceled) {
		t.Errorf("got %v, want context.Canceled", err)
	}
}

// TestSolveMediumInstancesBeatOrMatchGreedy: on seeded instances of 10-14 clusters (4 policies,
// 40-60 workloads), Solve proves a plan optimal, it is feasible and never worse than the greedy's.
func TestSolveMediumInstancesBeatOrMatchGreedy(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 7))
	for i := 0; i < 3; i++ {
		pr := bench(r, 10+2*i, 4, 40+10*i)
		start := time.Now()
		s, err := Solve(context.Background(), pr, Options{})
		if err != nil {
			t.Fatalf("instance %d: %v", i, err)
		}
		if !s.Optimal {
			t.Errorf("instance %d: not proven optimal (bound %v)", i, s.Bound)
		}
		g, err := Greedy(pr)
		if err != nil {
			t.Fatalf("instance %d greedy: %v", i, err)
		}
		if v := checkPlan(t, pr, s); v < g.Objective {
			t.Errorf("instance %d: solve %v < greedy %v", i, v, g.Objective)
		}
		t.Logf("instance %d: %v (greedy %v) in %d nodes, %v", i, s.Objective, g.Objective, s.Nodes, time.Since(start))
	}
}

// TestSolveBudget: when the node budget runs out, Solve returns its best plan, marked not optimal,
// with a bound no lower than the plan (and no lower than the proven optimum found without the
// budget); so does a time limit, however early it stops.
func TestSolveBudget(t *testing.T) {
	pr := bench(rand.New(rand.NewPCG(20, 80)), 20, 5, 80)
	s, err := Solve(context.Background(), pr, Options{MaxNodes: 1})
	if err != nil {
		t.Fatal(err)
	}
	if s.Optimal {
		t.Fatalf("the root proved optimality; pick a harder instance")
	}
	v := checkPlan(t, pr, s)
	if s.Bound < v {
		t.Errorf("bound %v below the plan's %v", s.Bound, v)
	}
	full, err := Solve(context.Background(), pr, Options{TimeLimit: time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	if !full.Optimal {
		t.Fatalf("not proven optimal in a minute: %+v", full)
	}
	if full.Objective > s.Bound || full.Objective < v {
		t.Errorf("optimum %v outside [%v, %v]", full.Objective, v, s.Bound)
	}
	// A time limit that stops the root's column generation part way, or comes before it, still
	// leaves an honest, finite bound (the reply is JSON): the Lagrangian bound of whatever duals
	// it reached, at worst every workload's best score.
	for _, limit := range []time.Duration{time.Millisecond, 20 * time.Millisecond, 200 * time.Millisecond} {
		ts, err := Solve(context.Background(), pr, Options{TimeLimit: limit})
		if err != nil {
			continue // stopped before any plan: allowed, and said
		}
		tv := checkPlan(t, pr, ts)
		if math.IsInf(ts.Bound, 0) || ts.Bound < full.Objective || tv > full.Objective || (ts.Optimal && tv != full.Objective) {
			t.Errorf("limit %v: plan %v, bound %v, optimal %v; optimum %v", limit, tv, ts.Bound, ts.Optimal, full.Objective)
		}
	}
}

// TestImproveKeepsPlansFeasible: the local search (policy switches, moves, swaps, ejection chains)
// returns feasible plans whose reported objective is their own and never below the start, on
// seeded instances from greedy starts.
func TestImproveKeepsPlansFeasible(t *testing.T) {
	r := rand.New(rand.NewPCG(11, 3))
	tried := 0
	for i := 0; i < 60; i++ {
		nc := 3 + r.IntN(8)
		pr := bench(r, nc, 1+r.IntN(5), nc+r.IntN(3*nc))
		m, err := build(pr)
		if errors.Is(err, ErrInfeasible) {
			continue
		} else if err != nil {
			t.Fatal(err)
		}
		pol, cl, ok := m.greedy(nil)
		if !ok {
			continue
		}
		tried++
		v, _ := m.value(pol, cl)
		ip, ic, iv := m.improve(context.Background(), pol, cl, v)
		got, ok := m.value(ip, ic)
		if !ok || math.Abs(got-iv) > 1e-9 || iv < v {
			t.Fatalf("instance %d: start %v, improved reports %v, plan is worth %v (feasible %v)", i, v, iv, got, ok)
		}
	}
	if tried < 20 {
		t.Errorf("only %d instances had a greedy plan", tried)
	}
}

// TestCyclesFindChains: three full clusters each hold the workload the next one scores best; no
// single move fits and every pairwise swap loses, only the three-way rotation gains.
func TestCyclesFindChains(t *testing.T) {
	m := &model{nw: 3, nc: 3, sign: 1, demand: []int64{1, 1, 1}, kind: []int{0, 0, 0}}
	for c := 0; c < 3; c++ {
		m.policies = append(m.policies, []policy{{supply: 1}})
	}
	// Workload w sits on cluster w and scores 10 on cluster w+1, 0 at home, -20 on w+2.
	m.score = make([][][]float64, 3)
	for w := 0; w < 3; w++ {
		m.score[w] = make([][]float64, 3)
		for c := 0; c < 3; c++ {
			v := -20.0
			switch c {
			case w:
				v = 0
			case (w + 1) % 3:
				v = 10
			}
			m.score[w][c] = []float64{v}
		}
	}
	pol, cl := []int{0, 0, 0}, []int{0, 1, 2}
	if v := m.exchange(context.Background(), pol, cl, 0); v != 30 {
		t.Fatalf("objective %v after exchange, want 30 (plan %v)", v, cl)
	}
	if got, ok := m.value(pol, cl); !ok || got != 30 {
		t.Fatalf("plan %v worth %v (feasible %v)", cl, got, ok)
	}
}

// TestSolveIsDeterministic: the same instance and node budget give the same plan and node count
// every time (no map iteration order leaks into the search).
func TestSolveIsDeterministic(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 5))
	for k := 0; k < 6; k++ {
		pr := bench(r, 8+k, 4, 30+5*k)
		// Demands of 1 to 4 slices, so the ejection chains run over several demand classes.
		for w := range pr.Workloads {
			pr.Workloads[w].Demand = int64(1 + (w*7+k)%4)
		}
		deterministic(t, pr)
	}
}

func deterministic(t *testing.T, pr Problem) {
	t.Helper()
	var first *Solution
	for i := 0; i < 6; i++ {
		s, err := Solve(context.Background(), pr, Options{MaxNodes: 15})
		if errors.Is(err, ErrInfeasible) {
			return
		} else if err != nil {
			t.Fatal(err)
		}
		if first == nil {
			first = s
			continue
		}
		if fmt.Sprint(s.Policy, s.Cluster, s.Objective, s.Bound, s.Nodes) != fmt.Sprint(first.Policy, first.Cluster, first.Objective, first.Bound, first.Nodes) {
			t.Fatalf("run %d: objective %v bound %v nodes %d, first run %v %v %d", i, s.Objective, s.Bound, s.Nodes, first.Objective, first.Bound, first.Nodes)
		}
	}
}
