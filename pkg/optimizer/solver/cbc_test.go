package solver

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
)

// writeLP writes the instance as a mixed-integer program in CPLEX LP format, from its raw fields
// alone (none of the solver's code), as docs/optimizer.md states the model:
//
//	y[c,p] binary: cluster c gets policy p;   z[w,c,p] binary: workload w on cluster c under p,
//	for every listed score whose policy supplies the workload's kind;
//	optimise Σ score·z;  Σ_{c,p} z[w,c,p] = 1;  Σ_p y[c,p] = 1;
//	z[w,c,p] ≤ y[c,p];  Σ_w demand[w]·z[w,c,p] ≤ supply[p]·y[c,p].
//
// The z ≤ y rows follow from the supply rows where a demand is positive; written for every option
// they also tie zero demands to the cluster's policy, and they give CBC a much tighter relaxation
// (R24: 52 nodes and 1.5 s instead of 35,000 nodes and 23 s).
func writeLP(in *instance, out io.Writer) error {
	w := bufio.NewWriter(out)
	num := func(v float64) string { return strconv.FormatFloat(v, 'g', -1, 64) }
	type opt struct {
		w, c, p int
		score   float64
	}
	var opts []opt
	for _, s := range in.Scores {
		o := opt{int(s[0]), int(s[1]), int(s[2]), s[3]}
		if in.Workloads[o.w].Kind == in.Clusters[o.c].Policies[o.p].Kind {
			opts = append(opts, o)
		}
	}
	z := func(o opt) string { return fmt.Sprintf("z_%d_%d_%d", o.w, o.c, o.p) }
	y := func(c, p int) string { return fmt.Sprintf("y_%d_%d", c, p) }
	if in.Minimize {
		fmt.Fprintln(w, "Minimize")
	} else {
		fmt.Fprintln(w, "Maximize")
	}
	fmt.Fprint(w, " obj:")
	for _, o := range opts {
		fmt.Fprintf(w, "\n  + %s %s", num(o.score), z(o))
	}
	fmt.Fprintln(w, "\nSubject To")
	for wi := range in.Workloads {
		fmt.Fprintf(w, " place_%d: 0 y_0_0", wi) // a workload without options makes the program infeasible
		for _, o := range opts {
			if o.w == wi {
				fmt.Fprintf(w, "\n  + %s", z(o))
			}
		}
		fmt.Fprintln(w, " = 1")
	}
	for ci, c := range in.Clusters {
		fmt.Fprintf(w, " policy_%d:", ci)
		for pi := range c.Policies {
			fmt.Fprintf(w, " + %s", y(ci, pi))
		}
		fmt.Fprintln(w, " = 1")
		for pi, p := range c.Policies {
			fmt.Fprintf(w, " supply_%d_%d: - %d %s", ci, pi, p.Supply, y(ci, pi))
			for _, o := range opts {
				if o.c == ci && o.p == pi {
					fmt.Fprintf(w, "\n  + %d %s", in.Workloads[o.w].Demand, z(o))
				}
			}
			fmt.Fprintln(w, " <= 0")
		}
	}
	for _, o := range opts {
		fmt.Fprintf(w, " link_%d_%d_%d: %s - %s <= 0\n", o.w, o.c, o.p, z(o), y(o.c, o.p))
	}
	fmt.Fprintln(w, "Binary")
	for ci, c := range in.Clusters {
		for pi := range c.Policies {
			fmt.Fprintf(w, " %s\n", y(ci, pi))
		}
	}
	for _, o := range opts {
		fmt.Fprintf(w, " %s\n", z(o))
	}
	fmt.Fprintln(w, "End")
	return w.Flush()
}

// cbcResult is what CBC proved of an instance.
type cbcResult struct {
	objective float64
	feasible  bool
	elapsed   time.Duration // wall time of the cbc process, reading the file included
	cpu       time.Duration // its user and system CPU time
	// unfinished: CBC had proven nothing when its time ran out; elapsed and cpu are what it
	// spent until then.
	unfinished bool
}

var cbcObjective = regexp.MustCompile(`(?m)^Objective value:\s+(\S+)`)

// solveCBC solves the instance with COIN-OR CBC (single-threaded, default settings, proven
// optimality: no gap allowed), giving it up to timeout, after which it is stopped and the result
// is unfinished. A missing cbc fails the test: hack/install-cbc.sh installs it.
func solveCBC(t testing.TB, in *instance, timeout time.Duration) cbcResult {
	t.Helper()
	bin, err := exec.LookPath("cbc")
	if err != nil {
		t.Fatalf("cbc not on PATH (run hack/install-cbc.sh, as make test does): %v", err)
	}
	lp := filepath.Join(t.TempDir(), "model.lp")
	f, err := os.Create(lp)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeLP(in, f); err != nil {
		t.Fatal(err)
	}
	if err := f.Close(); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, lp, "ratioGap", "0", "allowableGap", "0", "solve", "quit")
	start := time.Now()
	out, err := cmd.CombinedOutput()
	elapsed := time.Since(start)
	if ctx.Err() != nil && cmd.ProcessState != nil {
		return cbcResult{elapsed: elapsed, cpu: cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime(), unfinished: true}
	}
	if err != nil {
		t.Fatalf("cbc: %v\n%s", err, out)
	}
	cpu := cmd.ProcessState.UserTime() + cmd.ProcessState.SystemTime()
	text := string(out)
	switch {
	case strings.Contains(text, "Result - Optimal solution found"):
		m := cbcObjective.FindStringSubmatch(text)
		if m == nil {
			t.Fatalf("cbc: no objective in\n%s", text)
		}
		v, err := strconv.ParseFloat(m[1], 64)
		if err != nil {
			t.Fatal(err)
		}
		return cbcResult{objective: v, feasible: true, elapsed: elapsed, cpu: cpu}
	case strings.Contains(text, "Result - Problem proven infeasible") || strings.Contains(text, "Problem is infeasible"):
		return cbcResult{elapsed: elapsed, cpu: cpu}
	}
	t.Fatalf("cbc did not prove an answer:\n%s", text)
	return cbcResult{}
}

// sameObjective compares objectives of plans: sums of the same scores, so equal up to rounding.
func sameObjective(a, b float64) bool { return math.Abs(a-b) <= 1e-6*math.Max(1, math.Abs(b)) }

// TestSolveMatchesCBC: on generated instances of every shape (apps shared or one per workload,
// whole or fractional scores, options missing or not, both senses, one resource kind or two with
// demands of 0), small enough for CBC to take a fraction of a second each, Solve's proven optimum
// equals CBC's, its plan is feasible and worth what it says, and it reports no plan exactly when
// CBC proves the program infeasible.
func TestSolveMatchesCBC(t *testing.T) {
	r := rand.New(rand.NewPCG(24, 11))
	feasible, infeasible := 0, 0
	for i := range 64 {
		sh := shape{nc: 2 + r.IntN(5), np: 1 + r.IntN(4), nw: 4 + r.IntN(21),
			distinct: i%2 == 1, fractional: i/2%2 == 1, minimize: i/4%2 == 1, kinds: i/8%2 == 1, missing: []float64{0, 0.1}[i/16%2]}
		in := generate(r, sh)
		want := solveCBC(t, in, 5*time.Minute)
		if want.unfinished {
			t.Fatalf("%s: CBC proved nothing in 5 minutes", in.Name)
		}
		got, err := Solve(context.Background(), in.problem(), Options{TimeLimit: time.Minute})
		if !want.feasible {
			if !errors.Is(err, ErrInfeasible) && !errors.Is(err, ErrNoOption) {
				t.Fatalf("instance %d (%s): CBC proves it infeasible, Solve: %+v, %v", i, sh, got, err)
			}
			infeasible++
			continue
		}
		if err != nil || !got.Optimal {
			t.Fatalf("instance %d (%s): CBC's optimum %v, Solve: %+v, %v", i, sh, want.objective, got, err)
		}
		if v := checkPlan(t, in.problem(), got); !sameObjective(v, want.objective) {
			t.Fatalf("instance %d (%s): Solve's proven optimum %v, CBC's %v", i, sh, v, want.objective)
		}
		feasible++
	}
	if feasible < 32 || infeasible < 4 {
		t.Errorf("feasible %d, infeasible %d: the generator is lopsided", feasible, infeasible)
	}
}

// versus are the instance classes BenchmarkVersusCBC times, each a few seeded instances: the
// shapes of testdata/ and the GPU-slice benchmark's, at their sizes, and supplies in natural
// units. cbcFor bounds CBC's time on an instance (0: an hour); solveFor the solver's (0: none).
var versus = []struct {
	sh       shape
	n        int
	cbcFor   time.Duration
	solveFor time.Duration
}{
	{shape{nc: 14, np: 4, nw: 60}, 3, 0, 0},
	// CBC runs for many minutes here: the benchmark stops it after 5, which bounds the ratio.
	{shape{nc: 50, np: 5, nw: 200}, 1, 5 * time.Minute, 0},
	{shape{nc: 11, np: 3, nw: 77, distinct: true}, 3, 0, 0},
	{shape{nc: 11, np: 3, nw: 77, distinct: true, fractional: true, missing: 0.1}, 3, 0, 0},
	{shape{nc: 11, np: 3, nw: 77, fractional: true, missing: 0.1, minimize: true}, 3, 0, 0},
	{shape{nc: 11, np: 5, nw: 81, fractional: true, missing: 0.1, minimize: true}, 3, 0, 0},
	{shape{nc: 11, np: 3, nw: 77, missing: 0.1, minimize: true}, 3, 0, 0},
	{shape{nc: 11, np: 3, nw: 77, missing: 0.1, kinds: true}, 3, 0, 0},
	// Supplies of 8,000-60,000 and demands of 1,000-12,000. The solver may stop after 5 minutes
	// with its bound: not every instance is proven in that time.
	{shape{nc: 20, np: 4, nw: 80, natural: true}, 5, 0, 5 * time.Minute},
}

// BenchmarkVersusCBC solves each class's instances with Solve and with CBC in the same run and
// reports both CPU times per instance (solver-s, cbc-s: means over the class) and the worst
// ratio of the two (worst-ratio: the solver's time over CBC's, so under 1 is faster). A solve that
// does not prove CBC's optimum fails the benchmark. Where CBC's time runs out first
// (cbc-unfinished counts those instances), Solve must still prove its plan optimal, cbc-s counts
// the time CBC spent without an answer, and the ratio is an upper bound. Where the class gives
// the solver a time limit, a solve stopped by it (solver-unproven counts those instances) must
// hold a plan no better than CBC's optimum and a bound no worse, worst-gap% is the largest
// distance from its plan to the optimum, in percent of the optimum, and proven-max-s the most CPU
// time a proven instance took. "cases" are testdata/'s instances. Run with -benchtime 1x.
func BenchmarkVersusCBC(b *testing.B) {
	run := func(b *testing.B, ins []*instance, cbcFor, solveFor time.Duration) {
		if cbcFor == 0 {
			cbcFor = time.Hour
		}
		var solver, cbc time.Duration
		worst, worstGap, provenMax, unfinished, unproven := 0.0, 0.0, 0.0, 0, 0
		for b.Loop() {
			solver, cbc, worst, worstGap, provenMax, unfinished, unproven = 0, 0, 0, 0, 0, 0, 0
			for _, in := range ins {
				start := cpuTime()
				got, err := Solve(context.Background(), in.problem(), Options{TimeLimit: solveFor})
				spent := cpuTime() - start
				want := solveCBC(b, in, cbcFor)
				sign := 1.0
				if in.Minimize {
					sign = -1
				}
				switch {
				case want.unfinished:
					if err != nil || !got.Optimal {
						b.Fatalf("%s: Solve %+v, %v; CBC proved nothing in %s", in.Name, got, err, cbcFor)
					}
					unfinished++
				case !want.feasible && (errors.Is(err, ErrInfeasible) || errors.Is(err, ErrNoOption)):
				case solveFor > 0 && err == nil && !got.Optimal && want.feasible:
					if sign*got.Objective > sign*want.objective+1e-6 || sign*got.Bound < sign*want.objective-1e-6 {
						b.Fatalf("%s: Solve stopped with plan %v, bound %v; CBC's optimum %v", in.Name, got.Objective, got.Bound, want.objective)
					}
					unproven++
					worstGap = math.Max(worstGap, 100*math.Abs(want.objective-got.Objective)/math.Abs(want.objective))
				case err != nil || !got.Optimal || !sameObjective(got.Objective, want.objective):
					b.Fatalf("%s: Solve %+v, %v; CBC %+v", in.Name, got, err, want)
				}
				if err == nil && got.Optimal {
					provenMax = math.Max(provenMax, spent.Seconds())
				}
				solver += spent
				cbc += want.cpu
				worst = math.Max(worst, spent.Seconds()/math.Max(want.cpu.Seconds(), 1e-3))
			}
		}
		b.ReportMetric(solver.Seconds()/float64(len(ins)), "solver-s")
		b.ReportMetric(cbc.Seconds()/float64(len(ins)), "cbc-s")
		b.ReportMetric(worst, "worst-ratio")
		b.ReportMetric(float64(unfinished), "cbc-unfinished")
		if solveFor > 0 {
			b.ReportMetric(float64(unproven), "solver-unproven")
			b.ReportMetric(worstGap, "worst-gap%")
			b.ReportMetric(provenMax, "proven-max-s")
		}
	}
	b.Run("cases", func(b *testing.B) {
		var ins []*instance
		for _, name := range caseNames {
			ins = append(ins, loadInstance(b, name))
		}
		run(b, ins, 0, 0)
	})
	for k, v := range versus {
		b.Run(v.sh.String(), func(b *testing.B) {
			r := rand.New(rand.NewPCG(uint64(k), 2026))
			var ins []*instance
			for len(ins) < v.n {
				in := generate(r, v.sh)
				in.Name = fmt.Sprintf("%s#%d", in.Name, len(ins))
				ins = append(ins, in)
			}
			run(b, ins, v.cbcFor, v.solveFor)
		})
	}
}
