package scorewriter

import (
	"context"
	"sync"
	"testing"
	"time"

	clocktesting "k8s.io/utils/clock/testing"
)

// wallStepped is a fake clock whose wall time can be stepped apart from its timers, as a node's
// wall clock is stepped while Go's timers run on the monotonic clock.
type wallStepped struct {
	*clocktesting.FakeClock
	mu   sync.Mutex
	wall time.Duration
}

func (c *wallStepped) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.FakeClock.Now().Add(c.wall)
}

func (c *wallStepped) Since(t time.Time) time.Duration { return c.Now().Sub(t) }

func (c *wallStepped) stepWall(d time.Duration) {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.wall += d
}

// An object's time falls due by the wall clock: at its time when nothing steps, and within
// recheck of a forward step of the wall clock that passes it, not when the wait the timer was
// set for has run out.
func TestTimetableFollowsTheWallClock(t *testing.T) {
	clk := &wallStepped{FakeClock: clocktesting.NewFakeClock(t0)}
	tt := newTimetable(clk)
	woken := make(chan Key, 10)
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { tt.run(ctx, func(k Key) { woken <- k }); close(done) }()
	defer func() { cancel(); <-done }()

	a, b := Key{"c1", "a"}, Key{"c1", "b"}
	tt.add(a, t0.Add(10*time.Second))
	tt.add(b, t0.Add(time.Hour))
	tt.add(b, t0.Add(2*time.Hour)) // later than its time: kept at the hour
	// Timers fire as the fake clock steps: a at +10s, not before.
	advanceUntil(t, clk.FakeClock, 500*time.Millisecond, func() bool { return len(woken) > 0 })
	if k := <-woken; k != a || clk.Since(t0) < 10*time.Second || clk.Since(t0) > 11*time.Second {
		t.Errorf("woke %v at +%s, want %v at +10s", k, clk.Since(t0), a)
	}

	// The wall clock steps an hour ahead, past b's time: b falls due within recheck of the timers' time.
	clk.stepWall(time.Hour)
	stepped := clk.FakeClock.Now()
	advanceUntil(t, clk.FakeClock, 100*time.Millisecond, func() bool { return len(woken) > 0 })
	if k, after := <-woken, clk.FakeClock.Since(stepped); k != b || after > recheck+100*time.Millisecond {
		t.Errorf("woke %v %s after the step, want %v within %s", k, after, b, recheck)
	}
	if n := tt.len(); n != 0 {
		t.Errorf("%d times left, want none", n)
	}
}
