package scorewriter

import (
	"container/heap"
	"context"
	"sync"
	"time"

	"k8s.io/utils/clock"
)

// recheck bounds how long the timetable sleeps: it looks at the wall clock at least this often,
// so that a write falls due within recheck of the wall clock passing its time, whatever the clock
// does meanwhile (a timer counts elapsed time, and a step of the wall clock does not move it).
const recheck = time.Second

// timetable holds, per object, when the writer must next write it of its own accord (a score's
// validUntil, owed validity, a grace period's end): times by the wall clock, as validUntil is.
// Run wakes each object when its time has come.
type timetable struct {
	clock clock.WithTicker

	mu      sync.Mutex
	due     map[Key]time.Time // each object's earliest time
	entries dueHeap           // by time; an entry whose time is no longer its key's in due is spent
	sooner  chan struct{}     // an earlier time than Run waits for was added
}

func newTimetable(clk clock.WithTicker) *timetable {
	return &timetable{clock: clk, due: map[Key]time.Time{}, sooner: make(chan struct{}, 1)}
}

// add has key woken at t, unless it is to be woken earlier already: that wake-up's write
// schedules the next time again.
func (t *timetable) add(key Key, at time.Time) {
	at = at.Round(0) // the wall clock only: that is what validUntil counts in
	t.mu.Lock()
	defer t.mu.Unlock()
	if cur, ok := t.due[key]; ok && !at.Before(cur) {
		return
	}
	sooner := len(t.entries) == 0 || at.Before(t.entries[0].at)
	t.due[key] = at
	heap.Push(&t.entries, dueEntry{key: key, at: at})
	if sooner {
		select {
		case t.sooner <- struct{}{}:
		default:
		}
	}
}

// clear forgets every time.
func (t *timetable) clear() {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.due, t.entries = map[Key]time.Time{}, nil
}

// len is the number of objects with a time.
func (t *timetable) len() int {
	t.mu.Lock()
	defer t.mu.Unlock()
	return len(t.due)
}

// take removes and returns the keys whose time is not after now, and the earliest time left.
func (t *timetable) take(now time.Time) ([]Key, time.Time) {
	t.mu.Lock()
	defer t.mu.Unlock()
	var out []Key
	for len(t.entries) > 0 {
		e := t.entries[0]
		if cur, ok := t.due[e.key]; !ok || !cur.Equal(e.at) {
			heap.Pop(&t.entries) // spent
			continue
		}
		if e.at.After(now) {
			return out, e.at
		}
		heap.Pop(&t.entries)
		delete(t.due, e.key)
		out = append(out, e.key)
	}
	return out, time.Time{}
}

// run wakes each key when its time has come, until ctx ends.
func (t *timetable) run(ctx context.Context, wake func(Key)) {
	for {
		keys, next := t.take(t.clock.Now().Round(0))
		for _, k := range keys {
			wake(k)
		}
		wait := recheck
		if !next.IsZero() {
			wait = min(wait, next.Sub(t.clock.Now().Round(0)))
		}
		timer := t.clock.NewTimer(wait)
		select {
		case <-ctx.Done():
			timer.Stop()
			return
		case <-t.sooner:
		case <-timer.C():
		}
		timer.Stop()
	}
}

type dueEntry struct {
	key Key
	at  time.Time
}

// dueHeap orders entries by time (container/heap).
type dueHeap []dueEntry

func (h dueHeap) Len() int           { return len(h) }
func (h dueHeap) Less(i, j int) bool { return h[i].at.Before(h[j].at) }
func (h dueHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *dueHeap) Push(x any)        { *h = append(*h, x.(dueEntry)) }
func (h *dueHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}
