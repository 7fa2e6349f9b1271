package benchrss

import (
	"runtime"
	"testing"
)

// Memory touched after Start counts in the peak; memory resident before it does not.
func TestPeakCountsWhatTheLoopTouches(t *testing.T) {
	before := make([]byte, 64<<20)
	for i := range before {
		before[i] = 1
	}
	p := Start(t)
	if hwm := status(t, "VmHWM"); hwm-p.base > 8<<20 {
		t.Fatalf("peak %d bytes over the resident %d right after Start", hwm-p.base, p.base)
	}
	during := make([]byte, 32<<20)
	for i := range during {
		during[i] = 1
	}
	if grew := status(t, "VmHWM") - p.base; grew < 30<<20 {
		t.Errorf("touching 32 MiB after Start grew the peak by %d bytes", grew)
	}
	runtime.KeepAlive(before)
	runtime.KeepAlive(during)
}
