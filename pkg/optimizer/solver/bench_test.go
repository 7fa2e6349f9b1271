package solver

import (
	"context"
	"fmt"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// bench builds a seeded instance shaped like GPU partitioning: each cluster has 1-4 GPUs and np
// policies from {whole GPUs, 7×1g, 3×2g, 2×3g, 1×7g} slices per GPU; 20 apps; each workload
// demands 1 or 2 slices of the "gpu" kind; scores per (app, cluster, device) grow with the slice
// size (performance) with noise, as a static scorer's table would give.
func bench(r *rand.Rand, nc, np, nw int) Problem {
	layouts := []struct {
		device string
		perGPU int64
		perf   int
	}{{"all", 1, 90}, {"1g", 7, 20}, {"2g", 3, 40}, {"3g", 2, 60}, {"7g", 1, 85}}
	pr := Problem{}
	type dim struct {
		c        int
		app, dev string
	}
	scores := map[dim]float64{}
	for c := 0; c < nc; c++ {
		gpus := int64(1 + r.IntN(4))
		cl := Cluster{Name: fmt.Sprintf("cluster%02d", c)}
		for _, i := range r.Perm(len(layouts))[:min(np, len(layouts))] {
			l := layouts[i]
			cl.Policies = append(cl.Policies, Policy{Name: fmt.Sprintf("cluster%02d-%s", c, l.device), Kind: "gpu", Supply: gpus * l.perGPU, Device: l.device})
			for a := 0; a < 20; a++ {
				v := l.perf + r.IntN(31) - 15
				scores[dim{c, fmt.Sprintf("app%02d", a), l.device}] = float64(max(-100, min(100, v)))
			}
		}
		pr.Clusters = append(pr.Clusters, cl)
	}
	for w := 0; w < nw; w++ {
		pr.Workloads = append(pr.Workloads, Workload{Name: fmt.Sprintf("w%03d", w), App: fmt.Sprintf("app%02d", r.IntN(20)), Kind: "gpu", Demand: int64(1 + r.IntN(2))})
	}
	pr.Score = func(w, c, p int) (float64, bool) {
		v, ok := scores[dim{c, pr.Workloads[w].App, pr.Clusters[c].Policies[p].Device}]
		return v, ok
	}
	return pr
}

// BenchmarkSolve50x5x200 runs the search at the size the issue names with a 20 s budget and
// reports the plan's objective, the proven bound and the gap between them; BenchmarkGreedy50x5x200
// is the baseline on the same instance. BenchmarkSolve14x4x60 is a size the search proves optimal.
// Run with -benchtime 1x; compare figures from one run.
func BenchmarkSolve50x5x200(b *testing.B) {
	benchSolve(b, bench(rand.New(rand.NewPCG(50, 200)), 50, 5, 200), 20*time.Second)
}

// BenchmarkSolve50x5x200Nodes60 stops after 60 nodes instead of 20 s: its objective and bound do
// not depend on how busy the machine is, so runs on shared machines compare.
func BenchmarkSolve50x5x200Nodes60(b *testing.B) {
	benchSolveOpts(b, bench(rand.New(rand.NewPCG(50, 200)), 50, 5, 200), Options{MaxNodes: 60})
}

// BenchmarkImprove50x5x200 is the local search alone, from the greedy's plan.
func BenchmarkImprove50x5x200(b *testing.B) {
	m, err := build(bench(rand.New(rand.NewPCG(50, 200)), 50, 5, 200))
	if err != nil {
		b.Fatal(err)
	}
	pol, cl, ok := m.greedy(nil)
	if !ok {
		pol, cl, ok = m.greedy(m.roomiest()) // as Greedy falls back
	}
	if !ok {
		b.Fatal("no greedy plan")
	}
	v, _ := m.value(pol, cl)
	var ip, ic []int
	for b.Loop() {
		ip, ic, _ = m.improve(context.Background(), pol, cl, v)
	}
	b.ReportMetric(m.objective(cl, pol), "start")
	b.ReportMetric(m.objective(ic, ip), "objective")
}

func BenchmarkGreedy50x5x200(b *testing.B) {
	benchGreedy(b, bench(rand.New(rand.NewPCG(50, 200)), 50, 5, 200))
}

func BenchmarkSolve14x4x60(b *testing.B) {
	benchSolve(b, bench(rand.New(rand.NewPCG(7, 9)), 14, 4, 60), 0)
}

func BenchmarkGreedy14x4x60(b *testing.B) {
	benchGreedy(b, bench(rand.New(rand.NewPCG(7, 9)), 14, 4, 60))
}

func benchSolve(b *testing.B, pr Problem, limit time.Duration) {
	benchSolveOpts(b, pr, Options{TimeLimit: limit})
}

func benchSolveOpts(b *testing.B, pr Problem, opts Options) {
	var s *Solution
	cpu := cpuTime()
	for b.Loop() {
		var err error
		if s, err = Solve(context.Background(), pr, opts); err != nil {
			b.Fatal(err)
		}
	}
	// CPU seconds per solve: on a shared machine the wall clock counts other processes' turns.
	b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
	optimal := 0.0
	if s.Optimal {
		optimal = 1
	}
	b.ReportMetric(s.Objective, "objective")
	b.ReportMetric(s.Bound, "bound")
	b.ReportMetric(100*(s.Bound-s.Objective)/s.Bound, "gap%")
	b.ReportMetric(optimal, "optimal")
	b.ReportMetric(float64(s.Nodes), "nodes")
}

func benchGreedy(b *testing.B, pr Problem) {
	var s *Solution
	for b.Loop() {
		var err error
		if s, err = Greedy(pr); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(s.Objective, "objective")
}

// cpuTime is the process's user and system CPU time so far.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkPricingSmallSupply solves the GPU-slice instances (supplies of at most 28 slices) with
// the pricing's two exact methods: the table over the supply that the pricing uses up to tableMax
// ("table") and the programme over non-dominated states that it uses above ("states"). Run with
// -benchtime 1x and compare cpu-s/op of the two in one run: docs/performance.md holds the table to
// it.
func BenchmarkPricingSmallSupply(b *testing.B) {
	for _, c := range []struct {
		name string
		pr   Problem
	}{
		{"14x4x60", bench(rand.New(rand.NewPCG(7, 9)), 14, 4, 60)},
		{"50x5x200", bench(rand.New(rand.NewPCG(50, 200)), 50, 5, 200)},
	} {
		for _, method := range []struct {
			name     string
			tableMax int64
		}{{"table", tableMax}, {"states", -1}} {
			b.Run(c.name+"/"+method.name, func(b *testing.B) {
				m, err := build(c.pr)
				if err != nil {
					b.Fatal(err)
				}
				var s *search
				cpu := cpuTime()
				for b.Loop() {
					s = newSearch(m, Options{MaxNodes: 1000000})
					s.ms.pr.tableMax = method.tableMax
					if open := s.run(context.Background()); len(open) > 0 {
						b.Fatalf("%d nodes open", len(open))
					}
				}
				b.ReportMetric((cpuTime()-cpu).Seconds()/float64(b.N), "cpu-s/op")
				b.ReportMetric(m.objective(s.bestCl, s.bestPol), "objective")
				b.ReportMetric(float64(s.nodes), "nodes")
			})
		}
	}
}
