// Package benchrss reports how much a benchmark's loop grew its process's resident memory at
// its peak: what a container's memory limit sees, garbage the collector has not yet returned
// included, and the benchmark's own inputs (prepared before the loop) left out.
package benchrss

import (
	"bufio"
	"bytes"
	"os"
	"runtime"
	"runtime/debug"
	"strconv"
	"testing"
)

// Peak is the resident memory when Start was called.
type Peak struct{ base int64 }

// Start collects garbage, returns freed memory to the system, and resets the process's peak
// resident memory (VmHWM) to its current size (Linux: /proc/self/clear_refs, 5).
func Start(tb testing.TB) Peak {
	tb.Helper()
	runtime.GC()
	debug.FreeOSMemory()
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		tb.Fatalf("benchrss: resetting the peak resident memory: %v", err)
	}
	return Peak{base: status(tb, "VmRSS")}
}

// Report adds "peak-rss-MiB": the peak resident memory since Start, less the resident memory at
// Start. Call it right after the benchmark loop.
func (p Peak) Report(b *testing.B) {
	b.ReportMetric(float64(status(b, "VmHWM")-p.base)/(1<<20), "peak-rss-MiB")
}

// status reads a field of /proc/self/status, in bytes.
func status(tb testing.TB, field string) int64 {
	tb.Helper()
	raw, err := os.ReadFile("/proc/self/status")
	if err != nil {
		tb.Fatalf("benchrss: %v", err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		name, rest, ok := bytes.Cut(sc.Bytes(), []byte(":"))
		if !ok || string(name) != field {
			continue
		}
		f := bytes.Fields(rest) // "123456 kB"
		if len(f) == 2 && string(f[1]) == "kB" {
			if kb, err := strconv.ParseInt(string(f[0]), 10, 64); err == nil {
				return kb << 10
			}
		}
		break
	}
	tb.Fatalf("benchrss: no %s in /proc/self/status", field)
	return 0
}
