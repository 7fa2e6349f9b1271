// Package scorewriter writes scores to AddOnPlacementScore objects on the OCM hub: merged by score
// name, ordered by observation time, coalesced per object, under optimistic concurrency, and
// answered per cluster item. Handler turns it into a CloudEvents receiver.
//
// The writer learns what the hub holds from an informer on AddOnPlacementScores (hub.go), so that
// an object's expiry is kept after a restart and whatever another replica wrote: each object that
// carries the writer's ledger is rewritten when one of its scores expires. That work of its own
// accord (expiry, masks, owed validity, deleting objects left without scores) runs in one replica
// at a time, under a Lease (Options.Elector), once the informers on AddOnPlacementScores and
// ManagedClusters have synced; a timetable (timetable.go) wakes each object when its time comes by
// the wall clock. Every replica answers events. Per object the writer keeps what its writes need while they are under
// way (object.go); one queue, with client-go's rate limiter for retries, hands objects to the
// workers (flush.go); makePlan (plan.go) decides what a write holds and what each update comes to.
//
// Write avoidance (makePlan): a newer observation of a value the object holds is not written
// while the stored validUntil keeps at least half the validity the update gives; it is answered
// Unchanged once the hub confirms the object. Its observation time and validity are kept with the
// object (object.skipped, at the hub's resourceVersion): they order later updates, and the writer
// writes the validity before that half is used up. Other replicas and restarts see only the
// stored times.
package scorewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"go.opentelemetry.io/otel/trace"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/clock"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/leader"
)

// Key names one AddOnPlacementScore: the cluster's namespace and the score resource.
type Key struct {
	Cluster  string
	Resource string
}

func (k Key) String() string { return k.Cluster + "/" + k.Resource }

// Update is one cluster item of a score.updated event, validated, on its way to the hub.
type Update struct {
	Key
	Scores     []contract.Score
	Observed   time.Time // the event's time: orders updates per score
	ValidUntil time.Time // zero: never expires
	Source     string    // the event's source: the producer

	arrived  time.Time
	seq      uint64    // order of arrival in this writer: which confirming lists started after it
	deadline time.Time // set at the first attempt: transient failures are retried until then
	// trace is the span of the event that brought the update: the hub write joins its trace.
	trace trace.SpanContext
	// sink receives the update's outcome, once, as slot. A fleet's refresh keeps every one of its
	// updates waiting at once, so an update carries no channel of its own: those of one event share
	// the sink that answers it.
	sink resultSink
	slot int
}

// resultSink receives the outcomes of the updates that name it, each by the update's slot. It is
// called by the goroutine that wrote (or failed) the update, holding none of the writer's locks.
type resultSink interface {
	resolved(slot int, r contract.ItemResult)
}

// resultChan is the sink of an update made by NewUpdate, read by Result.
type resultChan chan contract.ItemResult

func (c resultChan) resolved(_ int, r contract.ItemResult) { c <- r }

// NewUpdate prepares an update for Submit, whose outcome Result waits for.
func NewUpdate(key Key, scores []contract.Score, observed, validUntil time.Time, source string) *Update {
	return &Update{Key: key, Scores: scores, Observed: observed, ValidUntil: validUntil, Source: source, sink: make(resultChan, 1)}
}

// Result waits for the outcome of an update made by NewUpdate. Cancelling ctx stops the wait, not
// the write.
func (u *Update) Result(ctx context.Context) (contract.ItemResult, error) {
	c, ok := u.sink.(resultChan)
	if !ok {
		return contract.ItemResult{}, errors.New("the update's outcome goes to its event's sink, not to Result")
	}
	select {
	case r := <-c:
		return r, nil
	case <-ctx.Done():
		return contract.ItemResult{}, ctx.Err()
	}
}

// Options tune a Writer.
type Options struct {
	// Window spaces the writes of a busy object: after a write starts, the object's next write
	// starts no sooner than Window later (at once after it, when the write took longer). Updates
	// that arrive meanwhile share that next write. An update of an idle object is written at once.
	Window time.Duration
	// WaitWhenIdle makes an update of an idle object wait Window too, for others to join its
	// write, and drops the rest after a write. Fewer writes when producers send to one object in
	// bursts closer than Window, at the cost of Window's delay on every update; benchmarks compare
	// the two.
	WaitWhenIdle bool
	// Workers bounds concurrent object writes.
	Workers int
	// MaxConflicts bounds re-reads after optimistic-concurrency conflicts per write.
	MaxConflicts int
	// RetryFor bounds how long an update is retried while the hub fails transiently; after it the
	// update fails as retriable and the event is handed back to the broker. The object's own
	// writes (expiry, masks, owed validity) are retried until they succeed.
	RetryFor time.Duration
	// MaxPending bounds accepted, unwritten updates; beyond it Submit refuses.
	MaxPending int
	// MaxResourcesPerCluster bounds the AddOnPlacementScores the writer keeps in one cluster's
	// namespace: creating one more is refused (TooManyResources), so that arbitrary resource names
	// cannot grow the hub without limit. Counted over the namespace's objects the informer knows,
	// whoever created them, and those this writer is creating.
	MaxResourcesPerCluster int
	// MaxScoreSeries bounds the per-cluster series of scoreflow_score and its freshness gauges
	// (each object has one per score, plus when it was updated and when it expires): about half a
	// KiB of heap each, so 10,000 clusters x 5 resources x 2 scores would hold some 100 MiB. An
	// object beyond it gets none; the per-resource freshness aggregates cover every object.
	MaxScoreSeries int
	// RequestTimeout bounds each hub request: one unanswered by then (a frozen hub, a connection
	// that went silent) is abandoned and handled as the hub being unavailable (retried until
	// RetryFor).
	RequestTimeout time.Duration
	// DeleteEmptyAfter is how long an object the writer left without scores (every one expired,
	// was retired or masked) stays before the writer deletes it, so that made-up resources do not
	// hold a cluster's MaxResourcesPerCluster for good. A Placement counts a missing score as an
	// expired one; a producer that writes again meanwhile keeps the object.
	DeleteEmptyAfter time.Duration
	// Masks, when set, turns scores off: see Writer.plan.
	Masks Masks
	// Clusters admits the clusters whose objects the writer writes on its own (a score's expiry,
	// masks, owed validity): the informer sees every namespace, the writer writes only in those
	// of accepted ManagedClusters. Its work of its own accord waits until Clusters has synced, and
	// an object is scheduled again when its cluster is admitted again (ClusterAdmitted). Nil
	// admits every cluster.
	Clusters ClusterView
	// Elector runs the writer's work of its own accord in one replica at a time, under a Lease;
	// nil: in this replica, always (a single writer). Every replica writes the updates it
	// receives.
	Elector *leader.Elector
	// Clock is the writer's time; nil is the real clock. Tests step a fake one.
	Clock clock.WithTickerAndDelayedExecution
}

// ClusterView is what the writer's work of its own accord needs of the managed clusters: whether
// one is admitted, and whether that answer can be trusted yet (an informer that has not synced
// knows no cluster).
type ClusterView interface {
	ClusterChecker
	HasSynced() bool
}

// DefaultOptions are the writer's defaults (and its flags').
func DefaultOptions() Options {
	return Options{Window: 10 * time.Millisecond, Workers: 64, MaxConflicts: 16, RetryFor: 15 * time.Second, MaxPending: 200000,
		MaxResourcesPerCluster: 64, MaxScoreSeries: 10000, RequestTimeout: DefaultRequestTimeout, DeleteEmptyAfter: DefaultDeleteEmptyAfter}
}

// DefaultRequestTimeout bounds a hub request: far above what the largest write takes (an object
// at contract.MaxObjectStatusBytes, a fraction of a second), far below the event deadline.
const DefaultRequestTimeout = 10 * time.Second

// DefaultDeleteEmptyAfter is how long an object left without scores stays: long enough that a
// producer late by a few refreshes finds it again, short enough that junk leaves within minutes.
const DefaultDeleteEmptyAfter = 10 * time.Minute

// Validate refuses options that would stall the writer.
func (o Options) Validate() error {
	switch {
	case o.Window < 0:
		return fmt.Errorf("coalesce window %s is negative", o.Window)
	case o.Workers < 1:
		return fmt.Errorf("workers must be at least 1, not %d", o.Workers)
	case o.MaxConflicts < 0:
		return fmt.Errorf("max conflicts %d is negative", o.MaxConflicts)
	case o.RetryFor < 0:
		return fmt.Errorf("retry-for %s is negative", o.RetryFor)
	case o.MaxPending < 1:
		return fmt.Errorf("max pending must be at least 1, not %d", o.MaxPending)
	case o.MaxResourcesPerCluster < 1:
		return fmt.Errorf("max resources per cluster must be at least 1, not %d", o.MaxResourcesPerCluster)
	case o.MaxScoreSeries < 0:
		return fmt.Errorf("max score series %d is negative", o.MaxScoreSeries)
	case o.RequestTimeout <= 0:
		return fmt.Errorf("hub request timeout must be positive, not %s", o.RequestTimeout)
	case o.DeleteEmptyAfter <= 0:
		return fmt.Errorf("delete-empty-after must be positive, not %s", o.DeleteEmptyAfter)
	}
	return nil
}

// DefaultTTL is the validity given to scores whose event sets no validUntil: a few scoring intervals.
const DefaultTTL = 3 * time.Minute

// Retries of a write that failed transiently wait 50ms, doubling up to 2s (client-go's per-item
// exponential rate limiter).
const (
	retryBase = 50 * time.Millisecond
	retryMax  = 2 * time.Second
)

// ErrOverloaded is returned by Submit when MaxPending updates are already waiting.
var ErrOverloaded = errors.New("too many updates waiting to be written")

// Writer coalesces updates per object and writes them. It also rewrites an object when one of its
// scores expires, so that the expiry reaches Placements as a change (they re-evaluate on changes
// only, and count an expired score as 0 only when something else makes them look).
type Writer struct {
	client  clusterclient.Interface
	opts    Options
	clock   clock.WithTickerAndDelayedExecution
	log     *slog.Logger
	metrics *Metrics
	hub     *hubView
	// queue hands objects to the workers: at once (updates), after a delay (a retry, the window, an
	// expiry), one object to one worker at a time.
	queue workqueue.TypedRateLimitingInterface[Key]
	// retries is the queue's rate limiter: how long an object waits for the retry of a failed write.
	retries workqueue.TypedRateLimiter[Key]
	// timetable wakes objects for their writes of their own, while this replica leads.
	timetable *timetable
	// leading: this replica does the work of its own accord now (ownWork runs).
	leading atomic.Bool

	// listings confirm a fleet's unchanged updates of one resource with a list (confirm.go).
	listings listings

	mu       sync.Mutex
	objects  map[Key]*object // objects with updates, a retry, a rest or a copy of their own; see object
	creating map[string]int  // per cluster: objects created and not yet seen by the informer
	npending int
	byRes    map[string]int // accepted updates not yet answered, per resource
	// pendingNow is npending, read without mu (Pending): a scrape of /metrics computes the
	// pending gauge while Prometheus' collectors hold their vectors' locks, and it must not wait
	// for anything that may wait for those.
	pendingNow atomic.Int64
	seq        uint64 // the last Update.seq given
	closed     bool
}

// NewWriter creates a writer with opts (start from DefaultOptions). Call Run to start writing.
func NewWriter(client clusterclient.Interface, opts Options, metrics *Metrics, log *slog.Logger) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	if opts.Clock == nil {
		opts.Clock = clock.RealClock{}
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	metrics.mu.Lock()
	metrics.maxSeries = opts.MaxScoreSeries
	metrics.mu.Unlock()
	retries := workqueue.NewTypedItemExponentialFailureRateLimiter[Key](retryBase, retryMax)
	w := &Writer{
		client:    client,
		retries:   retries,
		opts:      opts,
		clock:     opts.Clock,
		log:       log,
		metrics:   metrics,
		objects:   map[Key]*object{},
		creating:  map[string]int{},
		byRes:     map[string]int{},
		queue:     workqueue.NewTypedRateLimitingQueueWithConfig(retries, workqueue.TypedRateLimitingQueueConfig[Key]{Clock: opts.Clock}),
		timetable: newTimetable(opts.Clock),
	}
	w.hub = newHubView(client, w)
	return w, nil
}

// Pending is the number of accepted updates not yet answered.
func (w *Writer) Pending() int { return int(w.pendingNow.Load()) }

// Ready is nil once the writer knows what the hub holds (its informer has synced).
func (w *Writer) Ready() error {
	if !w.hub.synced() {
		return errors.New("AddOnPlacementScore informer has not synced")
	}
	return nil
}

// pendingOf is the number of accepted updates of resource not yet answered.
func (w *Writer) pendingOf(resource string) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.byRes[resource]
}

// lastSeq is the sequence number of the last update accepted.
func (w *Writer) lastSeq() uint64 {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.seq
}

// Now is the writer's time.
func (w *Writer) Now() time.Time { return w.clock.Now() }

// Submit accepts updates for writing; each one's outcome arrives through its Result. All or none
// are accepted.
func (w *Writer) Submit(us ...*Update) error {
	w.mu.Lock()
	if w.closed {
		w.mu.Unlock()
		return errors.New("writer is shutting down")
	}
	if w.npending+len(us) > w.opts.MaxPending {
		w.mu.Unlock()
		return ErrOverloaded
	}
	now := w.clock.Now()
	var wake []Key
	for _, u := range us {
		w.seq++
		u.arrived, u.seq = now, w.seq
		w.byRes[u.Resource]++
		o := w.object(u.Key)
		o.pending = append(o.pending, u)
		if o.retryAt.IsZero() {
			wake = append(wake, u.Key)
		}
	}
	w.npending += len(us)
	w.pendingNow.Store(int64(w.npending))
	w.mu.Unlock()
	for _, k := range wake {
		if w.opts.WaitWhenIdle {
			// AddAfter keeps the earliest due time of a key already waiting: the window never stretches.
			w.queue.AddAfter(k, w.opts.Window)
			continue
		}
		// An idle object is written at once. One being written or resting is marked dirty by the
		// queue and handed out again when that ends; one already queued stays queued once.
		w.queue.Add(k)
	}
	return nil
}

// wake queues key for a write of its own, unless it waits for a retry, which will do.
func (w *Writer) wake(key Key) {
	w.mu.Lock()
	o := w.objects[key]
	waiting := o != nil && !o.retryAt.IsZero()
	w.mu.Unlock()
	if !waiting {
		w.queue.Add(key)
	}
}

// schedule has key written of the writer's own accord at due (zero: nothing to schedule), while
// this replica leads. The timetable keeps the earliest time of a key, so a later one may be
// dropped: the earlier wake-up schedules it again.
func (w *Writer) schedule(key Key, due time.Time) {
	if due.IsZero() || !w.leading.Load() {
		return
	}
	w.timetable.add(key, due)
}

// Run writes until ctx ends, and does the work of its own accord while it leads (Options.Elector).
// Then it cancels the writes under way, fails every update still waiting as retriable (their
// events are answered 503, so the broker redelivers them) and returns.
func (w *Writer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	w.hub.start(ctx)
	wg.Go(func() { leader.RunOrAlways(ctx, w.opts.Elector, w.ownWork) })
	if cache.WaitForCacheSync(ctx.Done(), w.hub.synced) {
		for range w.opts.Workers {
			wg.Go(func() {
				for w.processNext(ctx) {
				}
			})
		}
	}
	<-ctx.Done()
	w.mu.Lock()
	w.closed = true
	var resting []Key
	for key, o := range w.objects {
		if o.rest != nil && o.rest.Stop() {
			o.rest = nil
			resting = append(resting, key)
		}
	}
	w.mu.Unlock()
	// Rests end now: the drain below waits for every object being processed, and what they hold
	// is failed as retriable after it.
	for _, key := range resting {
		w.queue.Done(key)
	}
	w.queue.ShutDownWithDrain()
	wg.Wait()
	// ShutDownWithDrain stops only the queue inside: the delaying queue's own goroutine (which
	// holds the AddAfter timers) stops with ShutDown.
	w.queue.ShutDown()
	w.mu.Lock()
	var left [][]*Update
	for key, o := range w.objects {
		if len(o.pending) > 0 {
			left = append(left, o.pending)
		}
		delete(w.objects, key)
	}
	w.mu.Unlock()
	for _, us := range left {
		w.resolveAll(us, failed(contract.ReasonUnavailable, true, "the writer stopped before writing"))
	}
}

// ownWork does what the writer does of its own accord (expiry, masks, owed validity, deleting
// objects left without scores), until ctx ends: it schedules every object the informer knows, then each object the informer shows, and
// wakes each when its time comes. It decides only from synced listers: before the ManagedCluster
// informer has synced every cluster would look unknown, and its objects would be scheduled for
// nothing.
func (w *Writer) ownWork(ctx context.Context) {
	if !cache.WaitForCacheSync(ctx.Done(), w.hub.synced, w.clustersSynced) {
		return
	}
	w.timetable.clear()
	w.leading.Store(true)
	w.metrics.leading.Set(1)
	defer func() {
		w.leading.Store(false)
		w.metrics.leading.Set(0)
		w.timetable.clear()
	}()
	w.log.Info("scheduling the writer's own writes", "objects", len(w.hub.informer.GetStore().ListKeys()))
	for _, obj := range w.hub.informer.GetStore().List() {
		if cur, ok := obj.(*clusterv1alpha1.AddOnPlacementScore); ok {
			key := Key{Cluster: cur.Namespace, Resource: cur.Name}
			w.schedule(key, w.dueAt(key, cur))
		}
	}
	w.timetable.run(ctx, w.wake)
}

func (w *Writer) clustersSynced() bool { return w.opts.Clusters == nil || w.opts.Clusters.HasSynced() }

// ClusterAdmitted schedules the objects of a cluster the hub has admitted (again: its ManagedCluster
// registered anew, or accepted after it was not): what fell due while the writer could not write
// for it is written now.
func (w *Writer) ClusterAdmitted(cluster string) {
	if !w.leading.Load() {
		return
	}
	objs, _ := w.hub.lister.AddOnPlacementScores(cluster).List(labels.Everything())
	for _, obj := range objs {
		key := Key{Cluster: obj.Namespace, Resource: obj.Name}
		w.schedule(key, w.dueAt(key, obj))
	}
}

// processNext writes the next object the queue hands out; false once the queue shuts down. An
// object that had updates or was written rests for the window before the queue hands it out again.
func (w *Writer) processNext(ctx context.Context) bool {
	key, quit := w.queue.Get()
	if quit {
		return false
	}
	started := w.clock.Now()
	if w.flush(ctx, key) {
		w.rest(key, w.opts.Window-w.clock.Since(started))
	} else {
		w.queue.Done(key)
	}
	w.tidy(key)
	return true
}

// rest keeps key out of the queue's hands for d after a write (the queue counts it as being
// processed until Done), so that what arrives meanwhile goes in one next write.
func (w *Writer) rest(key Key, d time.Duration) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.opts.WaitWhenIdle || d <= 0 || w.closed {
		w.queue.Done(key)
		return
	}
	o := w.object(key)
	var t clock.Timer
	t = w.clock.AfterFunc(d, func() {
		w.mu.Lock()
		ours := o.rest == t // not when shutdown ended the rest first
		if ours {
			o.rest = nil
		}
		w.mu.Unlock()
		if ours {
			w.queue.Done(key)
			w.tidy(key)
		}
	})
	o.rest = t
}

// resolve delivers a plan's outcomes to its updates: those written or skipped name rv, the
// object's resourceVersion after the plan.
func (w *Writer) resolve(us []*Update, outcomes []contract.ItemResult, rv string) {
	for i := range outcomes {
		if outcomes[i].Outcome != contract.OutcomeFailed {
			outcomes[i].ResourceVersion = rv
		}
	}
	w.deliver(us, outcomes)
}

func (w *Writer) resolveAll(us []*Update, r contract.ItemResult) {
	out := make([]contract.ItemResult, len(us))
	for i := range out {
		out[i] = r
	}
	w.deliver(us, out)
}

func (w *Writer) deliver(us []*Update, out []contract.ItemResult) {
	if len(us) == 0 {
		return
	}
	var idle []string // resources with no update waiting any more
	w.mu.Lock()
	w.npending -= len(us)
	w.pendingNow.Store(int64(w.npending))
	for _, u := range us {
		if w.byRes[u.Resource]--; w.byRes[u.Resource] <= 0 {
			delete(w.byRes, u.Resource)
			idle = append(idle, u.Resource)
		}
	}
	w.mu.Unlock()
	for _, r := range idle {
		w.forgetListing(r)
	}
	now := w.clock.Now()
	for i, u := range us {
		out[i].Cluster = u.Cluster
		w.metrics.items.WithLabelValues(string(out[i].Outcome), string(out[i].Reason)).Inc()
		w.metrics.latency.Observe(now.Sub(u.arrived).Seconds())
		u.sink.resolved(u.slot, out[i])
	}
}
