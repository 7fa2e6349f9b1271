package solver

import (
	"fmt"
	"math"
	"math/rand/v2"
)

// shape is a class of generated instances, the shapes of testdata/: GPU-slice clusters as bench
// builds them, with variations that change how hard the problem is for the solver.
type shape struct {
	nc, np, nw int
	// distinct: every workload scores on its own (no two are interchangeable), as when every
	// workload is its own app; otherwise workloads of one app (of 20) score alike.
	distinct bool
	// fractional: scores in hundredths, the app's score plus a per-workload offset within ±0.5
	// (which makes workloads distinct too); otherwise whole numbers.
	fractional bool
	// missing is the share of options without a score (per workload when workloads are
	// distinct, per app otherwise).
	missing  float64
	minimize bool
	// kinds: some policies supply "cpu" instead (2-8) and a quarter of the workloads demand 0-2
	// cpu, so that kinds must match and demands of 0 occur.
	kinds bool
	// natural: amounts in natural units (millicores or MiB, as a user writes them): each policy
	// supplies 8,000-60,000 and each workload demands 1,000-12,000, their greatest common divisor
	// 1, instead of counting slices.
	natural bool
}

func (sh shape) String() string {
	kind := "apps"
	if sh.distinct {
		kind = "distinct"
	}
	scores := "int"
	if sh.fractional {
		scores = "frac"
	}
	sense := "max"
	if sh.minimize {
		sense = "min"
	}
	if sh.kinds {
		sense += "-kinds"
	}
	if sh.natural {
		sense += "-natural"
	}
	return fmt.Sprintf("%s-%s-miss%02.0f-%s-%dx%dx%d", kind, scores, 100*sh.missing, sense, sh.nc, sh.np, sh.nw)
}

// generate draws an instance of the shape: each cluster has 1-4 GPUs and np policies from {whole
// GPUs, 7×1g, 3×2g, 2×3g, 1×7g} slices per GPU; each workload demands 1 or 2 slices; a score
// grows with the slice size (performance) with noise, as a static scorer's table would give.
// Scores exist for options of any kind: the model, not the data, rules out a workload under a
// policy of another kind.
func generate(r *rand.Rand, sh shape) *instance {
	layouts := []struct {
		device string
		perGPU int64
		perf   int
	}{{"all", 1, 90}, {"1g", 7, 20}, {"2g", 3, 40}, {"3g", 2, 60}, {"7g", 1, 85}}
	in := &instance{Name: sh.String(), Minimize: sh.minimize}
	in.Clusters = make([]instanceCluster, sh.nc)
	perf := make([][]int, sh.nc) // per cluster and policy
	for c := range in.Clusters {
		gpus := int64(1 + r.IntN(4))
		in.Clusters[c].Name = fmt.Sprintf("cluster%02d", c)
		for _, i := range r.Perm(len(layouts))[:min(sh.np, len(layouts))] {
			l := layouts[i]
			pol := instancePolicy{Name: fmt.Sprintf("cluster%02d-%s", c, l.device), Kind: "gpu", Supply: gpus * l.perGPU, Device: l.device}
			if sh.kinds && r.IntN(3) == 0 {
				pol.Kind, pol.Supply = "cpu", int64(2+r.IntN(7))
			}
			if sh.natural {
				pol.Supply = int64(8000 + r.IntN(52001))
			}
			in.Clusters[c].Policies = append(in.Clusters[c].Policies, pol)
			perf[c] = append(perf[c], l.perf)
		}
	}
	in.Workloads = make([]instanceWorkload, sh.nw)
	for w := range in.Workloads {
		app := fmt.Sprintf("app%02d", r.IntN(20))
		if sh.distinct {
			app = fmt.Sprintf("app%03d", w)
		}
		in.Workloads[w] = instanceWorkload{Name: fmt.Sprintf("w%03d", w), App: app, Kind: "gpu", Demand: int64(1 + r.IntN(2))}
		if sh.kinds && r.IntN(4) == 0 {
			in.Workloads[w].Kind, in.Workloads[w].Demand = "cpu", int64(r.IntN(3))
		}
		if sh.natural {
			in.Workloads[w].Demand = int64(1000 + r.IntN(11001))
		}
	}
	// Per app: a whole score and whether it is missing, per cluster and policy.
	type appScore struct {
		v    float64
		miss bool
	}
	apps := map[string][][]appScore{}
	for _, wl := range in.Workloads {
		if _, ok := apps[wl.App]; ok {
			continue
		}
		t := make([][]appScore, sh.nc)
		for c := range t {
			t[c] = make([]appScore, len(perf[c]))
			for p := range t[c] {
				t[c][p] = appScore{v: float64(max(-100, min(100, perf[c][p]+r.IntN(31)-15))), miss: r.Float64() < sh.missing}
			}
		}
		apps[wl.App] = t
	}
	for w, wl := range in.Workloads {
		for c := range in.Clusters {
			for p := range perf[c] {
				a := apps[wl.App][c][p]
				if sh.fractional {
					a.v += math.Round(100*(r.Float64()-0.5)) / 100
					a.miss = r.Float64() < sh.missing
				}
				if !a.miss {
					in.Scores = append(in.Scores, [4]float64{float64(w), float64(c), float64(p), a.v})
				}
			}
		}
	}
	return in
}
