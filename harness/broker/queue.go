package broker

import (
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// task is one event to deliver to one trigger.
type task struct {
	event    *event.Event // as the broker holds it (TTL, arrival time); shared, never mutated
	accepted time.Time
}

// queue is a trigger's bounded backlog. Slots are reserved before anything is pushed, so an
// event matching several triggers is either queued for all of them or refused (429) by all.
type queue struct {
	ch   chan *task
	used atomic.Int64 // reserved or waiting slots
	size int64
}

func newQueue(size int) *queue { return &queue{ch: make(chan *task, size), size: int64(size)} }

func (q *queue) reserve() bool {
	for {
		n := q.used.Load()
		if n >= q.size {
			return false
		}
		if q.used.CompareAndSwap(n, n+1) {
			return true
		}
	}
}

// release gives back a reserved slot that was not used, or one whose task a worker took.
func (q *queue) release() { q.used.Add(-1) }

// push never blocks: the caller holds a reservation.
func (q *queue) push(t *task) { q.ch <- t }

func (q *queue) len() int { return len(q.ch) }

type phase int

const (
	running  phase = iota
	draining       // ingress refuses; replies of in-flight work are still taken
	stopped        // everything is refused
)

// gate counts accepted deliveries not yet finished and refuses new ones by phase, under one
// lock, so that Shutdown's "nothing in flight" is never raced by a late acceptance.
type gate struct {
	mu    sync.Mutex
	phase phase
	n     int
	idle  []chan struct{}
}

// enter admits k deliveries. Ingress is admitted only while running; replies also while draining.
func (g *gate) enter(k int, reply bool) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.phase == stopped || (g.phase == draining && !reply) {
		return false
	}
	g.n += k
	return true
}

func (g *gate) leave(k int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.n -= k
	if g.n == 0 {
		for _, c := range g.idle {
			close(c)
		}
		g.idle = nil
	}
}

// drain refuses ingress from now on and returns a channel closed once nothing is in flight.
func (g *gate) drain() <-chan struct{} {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.phase == running {
		g.phase = draining
	}
	c := make(chan struct{})
	if g.n == 0 {
		close(c)
	} else {
		g.idle = append(g.idle, c)
	}
	return c
}

func (g *gate) stop() {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.phase = stopped
}

func (g *gate) current() phase {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.phase
}
