package benchcpu

import (
	"testing"
	"time"
)

// Busy work counts as CPU time; sleeping does not.
func TestClockCountsWorkNotWaiting(t *testing.T) {
	c := Start()
	time.Sleep(50 * time.Millisecond)
	if d := used() - c.start; d > 40*time.Millisecond {
		t.Errorf("sleeping 50ms used %s of CPU", d)
	}
	// Spinning must show up: on a loaded machine the process gets a share of a core, so spin
	// until 20ms of CPU has been counted, allowing plenty of wall time.
	c = Start()
	deadline := time.Now().Add(10 * time.Second)
	for used()-c.start < 20*time.Millisecond {
		if time.Now().After(deadline) {
			t.Fatalf("spinning 10s counted %s of CPU", used()-c.start)
		}
	}
}
