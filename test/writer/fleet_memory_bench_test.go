package writer

import (
	"fmt"
	"os"
	"testing"
	"time"
)

// BenchmarkFleetMemory compares, in one run, the writer binary's peak resident memory (VmHWM)
// over the same work under settings that differ only in what bounds its memory: n clusters x 5
// resources, created first by a writer that is then stopped, so each measured writer starts cold
// and does refreshes that change every value of objects that exist (verified on the hub): two at
// 1,000 clusters, one at 10,000 (about 5 minutes each there).
//   - unbounded: every per-cluster score series, no GOMEMLIMIT (the writer before the series
//     bound);
//   - deployed: deploy/score-writer.yaml's MAX_SCORE_SERIES and GOMEMLIMIT (read from it);
//   - deployed-scaled (below 10,000 clusters): the deployed series bound with GOMEMLIMIT scaled
//     to the fleet (the deployed limit x n/10,000): what the soft limit does once the heap
//     reaches it, which below 10,000 clusters the deployed one never does.
//
// Reported per variant: peak-MiB (VmHWM), heap-MiB (heap in use after the refreshes, from the
// writer's own go_memstats) and series (per-cluster series exported).
//
// With FLEET_MEMORY_BASELINE set to a writer binary (another revision's, built with
// `go build -o /tmp/base ./functions/score-writer` there), each variant runs with it too, as
// baseline-<variant>, in the same run: before and after a change, on the same hub and load.
//
//	go test ./test/writer -run '^$' -bench 'FleetMemory/clusters=1000$' -benchtime 1x -timeout 1h
//	go test ./test/writer -run '^$' -bench 'FleetMemory/clusters=2000$' -benchtime 1x -timeout 1h
//	go test ./test/writer -run '^$' -bench 'FleetMemory/clusters=10000' -benchtime 1x -timeout 2h
func BenchmarkFleetMemory(b *testing.B) {
	bin := writerBinary(b, b.TempDir())
	baseline := os.Getenv("FLEET_MEMORY_BASELINE")
	for _, n := range []int{1000, 2000, 10000} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) { benchFleetMemory(b, bin, baseline, n) })
	}
}

func benchFleetMemory(b *testing.B, bin, baseline string, n int) {
	names := fleetClusters(b, n)
	start := time.Now()
	w := startWriterBinary(b, bin)
	tally(w.refresh(b, names, 1, start))
	verifyFleet(b, names, 1)
	w.p.Stop(30 * time.Second)
	progress(b, "%d objects created in %s", n*len(fleetResources), time.Since(start).Round(time.Second))

	type variant struct {
		name string
		env  []string
		bin  string
	}
	series := deployedEnv(b, "MAX_SCORE_SERIES")[0]
	variants := []variant{
		{name: "unbounded", env: []string{"MAX_SCORE_SERIES=1000000000", "GOMEMLIMIT=off"}},
		{name: "deployed", env: deployedEnv(b, "MAX_SCORE_SERIES", "GOMEMLIMIT")},
	}
	refreshes := 1
	if n < 10000 {
		// Below 10,000 clusters the deployed limit is never reached: scaled to the fleet, it is.
		variants = append(variants, variant{name: "deployed-scaled", env: []string{series, fmt.Sprintf("GOMEMLIMIT=%dMiB", deployedMemLimitMiB(b)*n/10000)}})
		refreshes = 2
	}
	// Each variant with this binary, then (when given) with the baseline's, so that both see
	// about the same load.
	var runs []variant
	for _, v := range variants {
		v.bin = bin
		runs = append(runs, v)
		if baseline != "" {
			runs = append(runs, variant{name: "baseline-" + v.name, env: v.env, bin: baseline})
		}
	}
	variants = runs
	gen := 1
	for _, v := range variants {
		w := startWriterBinary(b, v.bin, v.env...)
		start := time.Now()
		for range refreshes {
			gen++
			outcomes := tally(w.refresh(b, names, gen, time.Now()))
			verifyFleet(b, names, gen)
			if outcomes["Written"] != n*len(fleetResources) {
				b.Fatalf("%s refresh %d: items %v, want every one Written", v.name, gen, outcomes)
			}
		}
		m := w.metrics(b)
		hwm, heap, series := w.vm(b, "VmHWM"), m.sum("go_memstats_heap_inuse_bytes"), m.sum("scoreflow_writer_score_series")
		dropped := m.sum("scoreflow_writer_score_series_dropped_total")
		w.p.Stop(30 * time.Second)
		b.ReportMetric(float64(hwm)/(1<<20), v.name+"-peak-MiB")
		b.ReportMetric(heap/(1<<20), v.name+"-heap-MiB")
		b.ReportMetric(series, v.name+"-series")
		progress(b, "%s %v: %d refreshes in %s; VmHWM %d MiB, heap in use %.0f MiB, %.0f series exported, %.0f dropped",
			v.name, v.env, refreshes, time.Since(start).Round(time.Second), hwm>>20, heap/(1<<20), series, dropped)
	}
}
