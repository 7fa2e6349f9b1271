// Package benchcpu reports the CPU time a benchmark's process spent per operation, beside Go's
// wall-clock ns/op: on a shared machine wall time grows with every other process's load, while
// CPU time counts only the work this process had to do (its garbage collection included).
package benchcpu

import (
	"syscall"
	"testing"
	"time"
)

// Clock is the process's CPU time (user and system) when it was started.
type Clock struct{ start time.Duration }

// Start reads the process's CPU time now.
func Start() Clock { return Clock{start: used()} }

// Report adds "cpu-ns/op": the process's CPU time since Start, divided by b.N. Call it right
// after the benchmark loop.
func (c Clock) Report(b *testing.B) {
	if b.N > 0 {
		b.ReportMetric(float64(used()-c.start)/float64(b.N), "cpu-ns/op")
	}
}

func used() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}
