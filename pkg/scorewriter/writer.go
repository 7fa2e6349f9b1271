// Package scorewriter writes scores to AddOnPlacementScore objects on the OCM hub: merged by score
// name, ordered by observation time, coalesced per object, under optimistic concurrency, and
// answered per cluster item. Handler turns it into a CloudEvents receiver.
package scorewriter

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"
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
	result   chan contract.ItemResult
}

// NewUpdate prepares an update for Submit.
func NewUpdate(key Key, scores []contract.Score, observed, validUntil time.Time, source string) *Update {
	return &Update{Key: key, Scores: scores, Observed: observed, ValidUntil: validUntil, Source: source, result: make(chan contract.ItemResult, 1)}
}

// Result waits for the update's outcome. Cancelling ctx stops the wait, not the write.
func (u *Update) Result(ctx context.Context) (contract.ItemResult, error) {
	select {
	case r := <-u.result:
		return r, nil
	case <-ctx.Done():
		return contract.ItemResult{}, ctx.Err()
	}
}

// Options tune a Writer.
type Options struct {
	// Window is how long the first update for an idle object waits for others to join its write.
	// While a write is in flight, new updates wait for it and go in the next one.
	Window time.Duration
	// Workers bounds concurrent object writes.
	Workers int
	// MaxConflicts bounds re-reads after optimistic-concurrency conflicts per write.
	MaxConflicts int
	// RetryFor bounds how long an update is retried while the hub fails transiently; after it the
	// update fails as retriable and the event is handed back to the broker.
	RetryFor time.Duration
	// MaxPending bounds accepted, unwritten updates; beyond it Submit refuses.
	MaxPending int
	// Masks, when set, turns scores off: see planMasked.
	Masks Masks
}

// DefaultOptions are the writer's defaults (and its flags').
func DefaultOptions() Options {
	return Options{Window: 10 * time.Millisecond, Workers: 64, MaxConflicts: 16, RetryFor: 15 * time.Second, MaxPending: 200000}
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
	}
	return nil
}

// DefaultTTL is the validity given to scores whose event sets no validUntil: a few scoring intervals.
const DefaultTTL = 3 * time.Minute

// ErrOverloaded is returned by Submit when MaxPending updates are already waiting.
var ErrOverloaded = errors.New("too many updates waiting to be written")

// Writer coalesces updates per object and writes them.
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

	// objects caches the last version written or read per object, so a write normally needs no
	// read. A stale copy costs one conflict and a re-read.
	objects sync.Map // Key -> *clusterv1alpha1.AddOnPlacementScore
}

// NewWriter creates a writer with opts (start from DefaultOptions). Call Run to start writing.
func NewWriter(client clusterclient.Interface, opts Options, metrics *Metrics, log *slog.Logger) (*Writer, error) {
	if err := opts.Validate(); err != nil {
		return nil, err
	}
	return &Writer{
		client:  client,
		opts:    opts,
		log:     log,
		metrics: metrics,
		now:     time.Now,
		queue:   workqueue.NewTypedDelayingQueue[Key](),
		pending: map[Key][]*Update{},
		backoff: map[Key]time.Duration{},
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
	for _, u := range us {
		u.arrived = now
		w.pending[u.Key] = append(w.pending[u.Key], u)
	}
	w.npending += len(us)
	w.mu.Unlock()
	for _, u := range us {
		// AddAfter keeps the earliest due time of a key already waiting: the window never stretches.
		w.queue.AddAfter(u.Key, w.opts.Window)
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
				w.flush(ctx, key)
				w.queue.Done(key)
			}
		}()
	}
	<-ctx.Done()
	w.mu.Lock()
	w.closed = true
	w.mu.Unlock()
	w.queue.ShutDownWithDrain()
	wg.Wait()
	w.mu.Lock()
	left := w.pending
	w.pending = map[Key][]*Update{}
	w.mu.Unlock()
	for _, us := range left {
		w.resolveAll(us, failed(contract.ReasonUnavailable, true, "the writer stopped before writing"))
	}
}

func (w *Writer) take(key Key) []*Update {
	w.mu.Lock()
	defer w.mu.Unlock()
	us := w.pending[key]
	delete(w.pending, key)
	return us
}

// flush writes every pending update of one object in one status update (plus a create the first
// time), re-reading and re-planning on conflict. A transient failure does not hold the worker: the
// updates go back to pending and the object is queued again after a backoff, until each update's
// deadline (RetryFor after its first attempt) has passed.
func (w *Writer) flush(ctx context.Context, key Key) {
	us := w.take(key)
	if len(us) == 0 {
		return
	}
	w.metrics.batchSize.Observe(float64(len(us)))
	now := time.Now()
	for _, u := range us {
		if u.deadline.IsZero() {
			u.deadline = now.Add(w.opts.RetryFor)
		}
	}
	conflicts := 0
	cur := w.cached(key)
	for {
		res, err := w.attempt(ctx, key, cur, us)
		if err == nil {
			w.mu.Lock()
			delete(w.backoff, key)
			w.mu.Unlock()
			w.resolve(us, res)
			return
		}
		if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
			conflicts++
			if conflicts > w.opts.MaxConflicts {
				w.resolveAll(us, failed(contract.ReasonConflict, true, fmt.Sprintf("%d conflicting writes in a row: %v", conflicts, err)))
				return
			}
			// Re-read: the object changed under us. Unreadable counts as missing: a create
			// then either works or conflicts and reads again.
			cur, _ = w.read(ctx, key)
			continue
		}
		f := classify(err)
		if !f.wait || ctx.Err() != nil {
			w.log.Warn("write failed", "object", key.String(), "reason", f.reason, "err", err)
			w.resolveAll(us, failed(f.reason, f.redeliver, err.Error()))
			return
		}
		w.retryLater(key, us, f.reason, err)
		return
	}
}

// retryLater fails the updates whose deadline comes before the next try and puts the others back
// in front of whatever arrived meanwhile, to be written after a backoff (doubling, up to 2s).
func (w *Writer) retryLater(key Key, us []*Update, reason contract.Reason, err error) {
	w.objects.Delete(key) // its state is unknown: read it before the next write
	w.mu.Lock()
	wait := max(w.backoff[key], 50*time.Millisecond)
	w.backoff[key] = min(2*wait, 2*time.Second)
	w.mu.Unlock()
	due := time.Now().Add(wait)
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
	if len(keep) == 0 {
		return
	}
	w.log.Debug("write failed, retrying", "object", key.String(), "err", err, "backoff", wait.String())
	w.mu.Lock()
	w.pending[key] = append(keep, w.pending[key]...)
	w.mu.Unlock()
	w.queue.AddAfter(key, wait)
}

type attemptResult struct {
	plan plan
	rv   string
}

// attempt plans against cur (nil: not known to exist) and writes. Any error means nothing of this
// plan is known to have landed, and the caller re-reads and plans again.
func (w *Writer) attempt(ctx context.Context, key Key, cur *clusterv1alpha1.AddOnPlacementScore, us []*Update) (attemptResult, error) {
	cur, p, err := w.planMasked(ctx, key, cur, us)
	if err != nil {
		return attemptResult{}, err
	}
	if !p.changed {
		rv := ""
		if cur != nil {
			rv = cur.ResourceVersion
		}
		return attemptResult{plan: p, rv: rv}, nil
	}
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
		w.objects.Store(key, base)
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
	w.objects.Store(key, written)
	w.observeScores(key, written, p.expired)
	return attemptResult{plan: p, rv: written.ResourceVersion}, nil
}

func (w *Writer) cached(key Key) *clusterv1alpha1.AddOnPlacementScore {
	if v, ok := w.objects.Load(key); ok {
		return v.(*clusterv1alpha1.AddOnPlacementScore)
	}
	return nil
}

// read gets the object and caches it; on any error it forgets it and returns nil.
func (w *Writer) read(ctx context.Context, key Key) (*clusterv1alpha1.AddOnPlacementScore, error) {
	obj, err := w.client.ClusterV1alpha1().AddOnPlacementScores(key.Cluster).Get(ctx, key.Resource, metav1.GetOptions{})
	w.count("get", err)
	if err != nil {
		w.objects.Delete(key)
		return nil, err
	}
	w.objects.Store(key, obj)
	return obj, nil
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

func (w *Writer) observeScores(key Key, obj *clusterv1alpha1.AddOnPlacementScore, expired []string) {
	for _, s := range obj.Status.Scores {
		w.metrics.score.WithLabelValues(key.Cluster, key.Resource, s.Name).Set(float64(s.Value))
	}
	for _, name := range expired {
		w.metrics.score.DeleteLabelValues(key.Cluster, key.Resource, name)
	}
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
	now := time.Now()
	for i, u := range us {
		out[i].Cluster = u.Cluster
		w.metrics.items.WithLabelValues(string(out[i].Outcome), string(out[i].Reason)).Inc()
		w.metrics.latency.Observe(now.Sub(u.arrived).Seconds())
		u.result <- out[i]
	}
	w.mu.Lock()
	w.npending -= len(us)
	w.mu.Unlock()
}

func failed(reason contract.Reason, retriable bool, msg string) contract.ItemResult {
	return contract.ItemResult{Outcome: contract.OutcomeFailed, Reason: reason, Retriable: retriable, Message: msg}
}
