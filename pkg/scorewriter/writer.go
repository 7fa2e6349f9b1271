// Package scorewriter writes scores to AddOnPlacementScore objects on the OCM hub: merged by score
// name, ordered by observation time, coalesced per object, under optimistic concurrency, and
// answered per cluster item. Handler turns it into a CloudEvents receiver.
//
// Write avoidance (makePlan): a newer observation of a value the object holds is not written
// while the stored validUntil keeps at least half the validity the update would give; it is
// answered Unchanged once the hub confirms the object, and its observation time is kept on the
// writer's cached copy (at the hub's resourceVersion), which orders later updates and is written
// with the object's next change. Other replicas and restarts see only the stored times.
package scorewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/lru"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
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
	ValidUntil time.Time
	Source     string

	arrived  time.Time
	deadline time.Time // set at the first attempt: transient failures are retried until then
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
	// update fails as retriable and the event is handed back to the broker.
	RetryFor time.Duration
	// MaxPending bounds accepted, unwritten updates; beyond it Submit refuses.
	MaxPending int
	// MaxResourcesPerCluster bounds the AddOnPlacementScores the writer keeps in one cluster's
	// namespace: creating one more is refused (TooManyResources), so that arbitrary resource
	// names cannot grow the hub without limit. Counted from the objects this process has written,
	// created or read since it started (the writer may not list objects).
	MaxResourcesPerCluster int
	// CachedObjects bounds the objects remembered between writes (least recently used go first;
	// a forgotten object costs one read at its next write). A fleet refreshes every object in
	// turn, so a bound below its objects makes every write a miss: the default covers 10,000
	// clusters with 6 resources each (copies keep only what a write needs: copyOf).
	CachedObjects int
	// MaxScoreSeries bounds the per-cluster series of scoreflow_score and its freshness gauges
	// (each object has one per score, plus when it was updated and when it expires): about half a
	// KiB of heap each, so 10,000 clusters x 5 resources x 2 scores would hold some 100 MiB. An
	// object beyond it gets none; the per-resource freshness aggregates cover every object.
	MaxScoreSeries int
	// Masks, when set, turns scores off: see planMasked.
	Masks Masks
}

// DefaultOptions are the writer's defaults (and its flags').
func DefaultOptions() Options {
	return Options{Window: 10 * time.Millisecond, Workers: 64, MaxConflicts: 16, RetryFor: 15 * time.Second, MaxPending: 200000,
		MaxResourcesPerCluster: 64, CachedObjects: 65536, MaxScoreSeries: 10000}
}

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
	case o.CachedObjects < 1:
		return fmt.Errorf("cached objects must be at least 1, not %d", o.CachedObjects)
	case o.MaxScoreSeries < 0:
		return fmt.Errorf("max score series %d is negative", o.MaxScoreSeries)
	}
	return nil
}

// DefaultTTL is the validity given to scores whose event sets no validUntil: a few scoring intervals.
const DefaultTTL = 3 * time.Minute

// ErrOverloaded is returned by Submit when MaxPending updates are already waiting.
var ErrOverloaded = errors.New("too many updates waiting to be written")

// Writer coalesces updates per object and writes them. It also rewrites an object when one of its
// scores expires, so that the expiry reaches Placements as a change (they re-evaluate on changes
// only, and count an expired score as 0 only when something else makes them look).
type Writer struct {
	client  clusterclient.Interface
	opts    Options
	log     *slog.Logger
	metrics *Metrics
	now     func() time.Time

	queue workqueue.TypedDelayingInterface[Key]

	mu       sync.Mutex
	pending  map[Key][]*Update
	npending int
	closed   bool
	backoff  map[Key]time.Duration // next wait of an object whose writes fail transiently
	// held are objects in backoff, with when their next try is due: arrivals join the pending
	// updates and wait for it rather than shortening it to the coalescing window.
	held map[Key]time.Time
	// resting are the objects resting until Window after their last write started: the queue
	// holds them as being processed until a timer ends the rest, so arrivals meanwhile wait for
	// one next write.
	resting map[Key]*time.Timer
	// expiries is when each known object's first score expires: the object is rewritten then.
	expiries map[Key]time.Time
	// resources are, per cluster, the AddOnPlacementScores known to exist (MaxResourcesPerCluster).
	resources map[string]map[string]struct{}

	// objects caches the last version written or read per object (Key -> *copyOf), so a write
	// normally needs no read. A stale copy costs one conflict and a re-read; answers that write
	// nothing are never given from it unconfirmed.
	objects *lru.Cache
}

// NewWriter creates a writer with opts (start from DefaultOptions). Call Run to start writing.
func NewWriter(client clusterclient.Interface, opts Options, metrics *Metrics, log *slog.Logger) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	metrics.mu.Lock()
	metrics.maxSeries = opts.MaxScoreSeries
	metrics.mu.Unlock()
	return &Writer{
		client:    client,
		opts:      opts,
		log:       log,
		metrics:   metrics,
		now:       time.Now,
		queue:     workqueue.NewTypedDelayingQueue[Key](),
		pending:   map[Key][]*Update{},
		backoff:   map[Key]time.Duration{},
		held:      map[Key]time.Time{},
		resting:   map[Key]*time.Timer{},
		expiries:  map[Key]time.Time{},
		resources: map[string]map[string]struct{}{},
		objects:   lru.New(opts.CachedObjects),
	}, nil
}

// Pending is the number of accepted updates not yet answered.
func (w *Writer) Pending() int {
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.npending
}

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
	now := time.Now()
	var wake []Key
	for _, u := range us {
		u.arrived = now
		w.pending[u.Key] = append(w.pending[u.Key], u)
		if _, held := w.held[u.Key]; !held {
			wake = append(wake, u.Key)
		}
	}
	w.npending += len(us)
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

// Run writes until ctx ends. Then it cancels the writes under way, fails every update still
// waiting as retriable (their events are answered 503, so the broker redelivers them) and returns.
func (w *Writer) Run(ctx context.Context) {
	var wg sync.WaitGroup
	for i := 0; i < w.opts.Workers; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				key, quit := w.queue.Get()
				if quit {
					return
				}
				started := time.Now()
				if w.flush(ctx, key) {
					w.rest(key, w.opts.Window-time.Since(started))
				} else {
					w.queue.Done(key)
				}
			}
		}()
	}
	<-ctx.Done()
	w.mu.Lock()
	w.closed = true
	resting := w.resting
	w.resting = map[Key]*time.Timer{}
	w.mu.Unlock()
	// Rests end now: the drain below waits for every object being processed, and what they hold
	// is failed as retriable after it.
	for key, t := range resting {
		t.Stop()
		w.queue.Done(key)
	}
	w.queue.ShutDownWithDrain()
	wg.Wait()
	// ShutDownWithDrain stops only the queue inside: the delaying queue's own goroutine (which
	// holds the AddAfter timers) stops with ShutDown.
	w.queue.ShutDown()
	w.mu.Lock()
	left := w.pending
	w.pending = map[Key][]*Update{}
	w.mu.Unlock()
	for _, us := range left {
		w.resolveAll(us, failed(contract.ReasonUnavailable, true, "the writer stopped before writing"))
	}
}

// rest keeps key out of the queue's hands for d after a write (the queue counts it as being
// processed until Done), so that what arrives meanwhile goes in one next write.
func (w *Writer) rest(key Key, d time.Duration) {
	w.mu.Lock()
	if w.opts.WaitWhenIdle || d <= 0 || w.closed {
		w.mu.Unlock()
		w.queue.Done(key)
		return
	}
	w.resting[key] = time.AfterFunc(d, func() {
		w.mu.Lock()
		_, ok := w.resting[key] // not when shutdown ended the rest first
		delete(w.resting, key)
		w.mu.Unlock()
		if ok {
			w.queue.Done(key)
		}
	})
	w.mu.Unlock()
}

func (w *Writer) take(key Key) []*Update {
	w.mu.Lock()
	defer w.mu.Unlock()
	us := w.pending[key]
	delete(w.pending, key)
	return us
}

// waitBackoff reports whether key is held by a backoff that has not run out; if so it queues the
// key again for when it does (the queue keeps only a key's earliest due time, so an earlier wake-up
// may have replaced that one).
func (w *Writer) waitBackoff(key Key) bool {
	w.mu.Lock()
	due, ok := w.held[key]
	if ok && !time.Now().Before(due) {
		delete(w.held, key)
		ok = false
	}
	w.mu.Unlock()
	if ok {
		w.queue.AddAfter(key, time.Until(due))
	}
	return ok
}

// flush writes every pending update of one object in one status update (plus a create the first
// time), re-reading and re-planning on conflict. A transient failure does not hold the worker: the
// updates go back to pending and the object is queued again after a backoff, until each update's
// deadline (RetryFor after its first attempt) has passed. With no updates it removes the object's
// expired scores, if any. It reports whether it had updates or an expiry to write: the object then
// rests for the window.
func (w *Writer) flush(ctx context.Context, key Key) bool {
	if w.waitBackoff(key) {
		return false
	}
	defer w.scheduleExpiry(key)
	us := w.take(key)
	if len(us) == 0 && !w.expiryDue(key) {
		return false
	}
	w.flushUpdates(ctx, key, us)
	return true
}

// flushUpdates is flush's write of us (none: of the object's expiry).
func (w *Writer) flushUpdates(ctx context.Context, key Key, us []*Update) {
	if len(us) > 0 {
		w.metrics.batchSize.Observe(float64(len(us)))
	}
	now := time.Now()
	for _, u := range us {
		if u.deadline.IsZero() {
			u.deadline = now.Add(w.opts.RetryFor)
		}
	}
	w.mu.Lock()
	retrying := w.backoff[key] > 0
	w.mu.Unlock()

	cur := w.cached(key)
	// confirmed: cur (or its absence) was read or written in this flush, so it is what the hub
	// holds, not a copy from an earlier write that someone may have deleted since.
	confirmed := false
	conflicts := 0
	fail := func(err error) {
		f := classify(err)
		if !f.wait || ctx.Err() != nil {
			w.log.Warn("write failed", "object", key.String(), "reason", f.reason, "err", err)
			w.forgetBackoff(key)
			w.giveUpExpiry(key, us)
			w.resolveAll(us, failed(f.reason, f.redeliver, err.Error()))
			return
		}
		w.retryLater(key, us, f.reason, err)
	}
	for {
		// After a failure the object's state is unknown; an expiry with no copy at hand, or an
		// object that may have to be created over the per-cluster bound, needs the hub's word too.
		// So does one known to exist whose copy was dropped from the cache: reading it costs one
		// request, where creating it first would cost a refused create and the read.
		if !confirmed && cur == nil && (retrying || len(us) == 0 || w.atResourceBound(key) || w.exists(key)) {
			var err error
			if cur, err = w.load(ctx, key); err != nil {
				fail(err)
				return
			}
			confirmed = true
		}
		read, p, err := w.planMasked(ctx, key, cur, us)
		if err != nil {
			fail(err)
			return
		}
		if read != cur {
			cur, confirmed = read, true
		}
		if !p.changed {
			if len(us) > 0 && cur != nil && !confirmed {
				// Duplicate, Stale or Unchanged would be answered from a copy: make sure the hub
				// still has it. At the same resourceVersion the copy stands, with the observation
				// times this process remembers of updates it did not write.
				read, err := w.load(ctx, key)
				if err != nil {
					fail(err)
					return
				}
				if read != nil && read.ResourceVersion == cur.ResourceVersion {
					w.keep(key, cur)
				} else {
					cur = read
				}
				confirmed = true
				continue
			}
			w.forgetBackoff(key)
			if p.unchanged {
				w.keep(key, remembered(cur, p))
			}
			w.resolve(us, attemptResult{plan: p, rv: resourceVersion(cur)})
			return
		}
		if cur == nil && w.atResourceBound(key) {
			w.forgetBackoff(key)
			w.resolveAll(us, failed(ReasonTooManyResources, false, fmt.Sprintf(
				"cluster %s already has the %d AddOnPlacementScores the writer keeps per cluster (--max-resources-per-cluster): resource %s is not created",
				key.Cluster, w.opts.MaxResourcesPerCluster, key.Resource)))
			return
		}
		res, err := w.attempt(ctx, key, cur, p)
		if err == nil {
			w.forgetBackoff(key)
			w.resolve(us, res)
			return
		}
		switch {
		case apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) || (apierrors.IsNotFound(err) && cur != nil):
			// The object changed under us, or is gone (deleted, or its namespace re-created):
			// re-read and plan again; a missing object is created anew.
			conflicts++
			if conflicts > w.opts.MaxConflicts {
				w.forgetBackoff(key)
				w.giveUpExpiry(key, us)
				w.resolveAll(us, failed(contract.ReasonConflict, true, fmt.Sprintf("%d conflicting writes in a row: %v", conflicts, err)))
				return
			}
			if cur, err = w.load(ctx, key); err != nil {
				fail(err)
				return
			}
			confirmed = true
		default:
			fail(err)
			return
		}
	}
}

// retryLater fails the updates whose deadline comes before the next try and puts the others back
// in front of whatever arrived meanwhile, to be written after a backoff (doubling, up to 2s). The
// object is held until then: new arrivals wait for the same try.
func (w *Writer) retryLater(key Key, us []*Update, reason contract.Reason, err error) {
	w.objects.Remove(key) // its state is unknown: read it before the next write
	w.mu.Lock()
	wait := max(w.backoff[key], 50*time.Millisecond)
	w.backoff[key] = min(2*wait, 2*time.Second)
	due := time.Now().Add(wait)
	w.held[key] = due
	w.mu.Unlock()
	var keep, give []*Update
	for _, u := range us {
		if u.deadline.Before(due) {
			give = append(give, u)
		} else {
			keep = append(keep, u)
		}
	}
	if len(give) > 0 {
		w.log.Warn("write failed, retries used up", "object", key.String(), "reason", reason, "err", err, "updates", len(give))
		w.resolveAll(give, failed(reason, true, err.Error()))
	}
	if len(us) > 0 && len(keep) == 0 {
		// Nothing of this write is retried: the next arrival starts a fresh backoff.
		w.mu.Lock()
		delete(w.backoff, key)
		w.mu.Unlock()
	}
	w.log.Debug("write failed, retrying", "object", key.String(), "err", err, "backoff", wait.String(), "updates", len(keep))
	w.mu.Lock()
	w.pending[key] = append(keep, w.pending[key]...)
	if len(w.pending[key]) == 0 {
		delete(w.pending, key)
	}
	w.mu.Unlock()
	// Always queued: updates that arrived while held wait for this try, and so may an expiry.
	w.queue.AddAfter(key, wait)
}

func (w *Writer) forgetBackoff(key Key) {
	w.mu.Lock()
	delete(w.backoff, key)
	w.mu.Unlock()
}

type attemptResult struct {
	plan plan
	rv   string
}

// attempt writes p over cur (nil: not on the hub, so created first). Any error means nothing of
// this plan is known to have landed, and the caller re-reads and plans again.
func (w *Writer) attempt(ctx context.Context, key Key, cur *clusterv1alpha1.AddOnPlacementScore, p plan) (attemptResult, error) {
	api := w.client.ClusterV1alpha1().AddOnPlacementScores(key.Cluster)
	base := cur
	if base == nil {
		// Status given on create is dropped (status subresource): create, then write status.
		var err error
		base, err = api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: key.Resource, Namespace: key.Cluster}}, metav1.CreateOptions{})
		w.count("create", err)
		if err != nil {
			return attemptResult{}, err
		}
		w.seen(key, base)
	}
	next := base.DeepCopy()
	next.Status = p.status
	// One write: scores, validUntil and ledger together, guarded by resourceVersion, so concurrent
	// writers (here or in other replicas) never overwrite each other.
	written, err := api.UpdateStatus(ctx, next, metav1.UpdateOptions{})
	w.count("update_status", err)
	if err != nil {
		return attemptResult{}, err
	}
	w.seen(key, written)
	w.observeScores(key, written, p)
	return attemptResult{plan: p, rv: written.ResourceVersion}, nil
}

func resourceVersion(obj *clusterv1alpha1.AddOnPlacementScore) string {
	if obj == nil {
		return ""
	}
	return obj.ResourceVersion
}

// copyOf is the writer's copy of an object between writes (Writer.objects), holding only what a
// write needs. Name and namespace are its key's. The resourceVersion guards the next write. The
// status is whole, as UpdateStatus replaces it (other producers' scores and conditions included),
// except the message of the writer's own ScoresUpdated condition, which every write sets anew
// (makePlan, removalStatus) and nothing reads. The rest of the metadata (managedFields, labels,
// annotations, owner references, timestamps) is left out: a status update does not change it
// (the API server keeps its own) and nothing here reads it. At fleet size these copies are most
// of the writer's heap: with what else the writer keeps per object (cache entry, expiry, resource
// names), a decoded object less its managedFields held 1,400 bytes, a copyOf 905
// (BenchmarkKnownObjectBytes; 66 MiB and 43 MiB at 50,000 objects).
type copyOf struct {
	uid    types.UID
	rv     string
	status clusterv1alpha1.AddOnPlacementScoreStatus
}

// keep caches what the writer needs of obj (copyOf). obj itself is not changed: the caller may
// still read it.
func (w *Writer) keep(key Key, obj *clusterv1alpha1.AddOnPlacementScore) {
	c := &copyOf{uid: obj.UID, rv: obj.ResourceVersion, status: clusterv1alpha1.AddOnPlacementScoreStatus{ValidUntil: obj.Status.ValidUntil}}
	if len(obj.Status.Scores) > 0 {
		c.status.Scores = slices.Clone(obj.Status.Scores)
	}
	if len(obj.Status.Conditions) > 0 {
		c.status.Conditions = make([]metav1.Condition, len(obj.Status.Conditions))
		for i, cond := range obj.Status.Conditions {
			// The writer's own condition strings are the same in every object: the constants
			// stand for the decoded copies.
			cond.Type, cond.Status, cond.Reason = interned(cond.Type), metav1.ConditionStatus(interned(string(cond.Status))), interned(cond.Reason)
			if cond.Type == ConditionUpdated {
				cond.Message = ""
			}
			c.status.Conditions[i] = cond
		}
	}
	w.objects.Add(key, c)
}

// interned returns the constant for one of the strings the writer puts in its conditions, else s.
func interned(s string) string {
	switch s {
	case ConditionObservations:
		return ConditionObservations
	case ConditionUpdated:
		return ConditionUpdated
	case string(metav1.ConditionTrue):
		return string(metav1.ConditionTrue)
	case reasonObservationTimes:
		return reasonObservationTimes
	case reasonScoresWritten:
		return reasonScoresWritten
	case reasonScoresMasked:
		return reasonScoresMasked
	}
	return s
}

// cached is the writer's copy of key's object, nil when it has none. Its status shares memory
// with the cache: whoever changes it changes a deep copy (makePlan, attempt, remembered,
// withoutMasked do).
func (w *Writer) cached(key Key) *clusterv1alpha1.AddOnPlacementScore {
	v, ok := w.objects.Get(key)
	if !ok {
		return nil
	}
	c := v.(*copyOf)
	return &clusterv1alpha1.AddOnPlacementScore{
		ObjectMeta: metav1.ObjectMeta{Name: key.Resource, Namespace: key.Cluster, UID: c.uid, ResourceVersion: c.rv},
		Status:     c.status,
	}
}

// load reads the object from the hub: nil without error when it does not exist.
func (w *Writer) load(ctx context.Context, key Key) (*clusterv1alpha1.AddOnPlacementScore, error) {
	obj, err := w.client.ClusterV1alpha1().AddOnPlacementScores(key.Cluster).Get(ctx, key.Resource, metav1.GetOptions{})
	w.count("get", err)
	switch {
	case apierrors.IsNotFound(err):
		w.gone(key)
		return nil, nil
	case err != nil:
		w.objects.Remove(key)
		return nil, err
	}
	w.seen(key, obj)
	return obj, nil
}

// seen records obj as what the hub holds for key: cached, counted against its cluster's bound,
// and its next expiry noted.
func (w *Writer) seen(key Key, obj *clusterv1alpha1.AddOnPlacementScore) {
	w.keep(key, obj)
	w.mu.Lock()
	defer w.mu.Unlock()
	names := w.resources[key.Cluster]
	if names == nil {
		names = map[string]struct{}{}
		w.resources[key.Cluster] = names
	}
	names[key.Resource] = struct{}{}
	if t, ok := nextExpiry(obj); ok {
		w.expiries[key] = t
	} else {
		delete(w.expiries, key)
	}
}

// gone forgets an object the hub no longer has, with its score series.
func (w *Writer) gone(key Key) {
	w.objects.Remove(key)
	w.mu.Lock()
	if names := w.resources[key.Cluster]; names != nil {
		delete(names, key.Resource)
		if len(names) == 0 {
			delete(w.resources, key.Cluster)
		}
	}
	delete(w.expiries, key)
	w.mu.Unlock()
	w.metrics.forget(key)
}

// exists reports whether key is known to be on the hub (written or read since it last was not).
func (w *Writer) exists(key Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	_, ok := w.resources[key.Cluster][key.Resource]
	return ok
}

// atResourceBound reports whether creating key would exceed its cluster's bound.
func (w *Writer) atResourceBound(key Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	names := w.resources[key.Cluster]
	if _, ok := names[key.Resource]; ok {
		return false
	}
	return len(names) >= w.opts.MaxResourcesPerCluster
}

// giveUpExpiry forgets the expiry of an object whose rewrite at expiry (a flush without updates)
// failed for good, so that it is not retried at once, forever; its next read or write schedules it
// again. A failed write of updates keeps it: the rewrite at expiry is tried on its own.
func (w *Writer) giveUpExpiry(key Key, us []*Update) {
	if len(us) > 0 {
		return
	}
	w.mu.Lock()
	delete(w.expiries, key)
	w.mu.Unlock()
}

// expiryDue reports whether one of key's scores has expired by now.
func (w *Writer) expiryDue(key Key) bool {
	w.mu.Lock()
	defer w.mu.Unlock()
	t, ok := w.expiries[key]
	return ok && !t.After(w.now())
}

// scheduleExpiry queues key for when its first score expires. Called after every flush: the queue
// keeps one due time per key, so a wake-up for new updates may have replaced this one.
func (w *Writer) scheduleExpiry(key Key) {
	w.mu.Lock()
	t, ok := w.expiries[key]
	closed := w.closed
	w.mu.Unlock()
	if ok && !closed {
		// A little after: a score whose validUntil equals now has expired.
		w.queue.AddAfter(key, t.Sub(w.now())+time.Millisecond)
	}
}

func (w *Writer) count(verb string, err error) {
	result := "ok"
	switch {
	case apierrors.IsConflict(err):
		result = "conflict"
	case err != nil:
		result = "error"
	}
	w.metrics.apiRequests.WithLabelValues(verb, result).Inc()
}

// observeScores sets the series of what was written and deletes those of scores the object no
// longer has (expired, or removed by someone else).
func (w *Writer) observeScores(key Key, after *clusterv1alpha1.AddOnPlacementScore, p plan) {
	// Only a write that took new scores refreshes the object: a rewrite that drops expired scores
	// must not make a silent scorer look fresh.
	written := false
	for _, d := range p.decisions {
		if d.written {
			written = true
			break
		}
	}
	w.metrics.observe(key, written, w.now(), after.Status.ValidUntil, after.Status.Scores)
}

func (w *Writer) resolve(us []*Update, res attemptResult) {
	out := make([]contract.ItemResult, len(us))
	for i, d := range res.plan.decisions {
		switch {
		case d.written:
			out[i] = contract.ItemResult{Outcome: contract.OutcomeWritten, ResourceVersion: res.rv, Reason: d.reason, Message: d.message}
		case d.rejected:
			out[i] = failed(d.reason, false, d.message)
		default:
			out[i] = contract.ItemResult{Outcome: contract.OutcomeSkipped, Reason: d.reason, Message: d.message, ResourceVersion: res.rv}
		}
	}
	w.deliver(us, out)
}

func (w *Writer) resolveAll(us []*Update, r contract.ItemResult) {
	out := make([]contract.ItemResult, len(us))
	for i := range out {
		out[i] = r
	}
	w.deliver(us, out)
}

func (w *Writer) deliver(us []*Update, out []contract.ItemResult) {
	w.mu.Lock()
	w.npending -= len(us)
	w.mu.Unlock()
	now := time.Now()
	for i, u := range us {
		out[i].Cluster = u.Cluster
		w.metrics.items.WithLabelValues(string(out[i].Outcome), string(out[i].Reason)).Inc()
		w.metrics.latency.Observe(now.Sub(u.arrived).Seconds())
		u.sink.resolved(u.slot, out[i])
	}
}

func failed(reason contract.Reason, retriable bool, msg string) contract.ItemResult {
	return contract.ItemResult{Outcome: contract.OutcomeFailed, Reason: reason, Retriable: retriable, Message: msg}
}
