package scorewriter

import (
	"context"
	"fmt"

	"go.opentelemetry.io/otel/attribute"
	"go.opentelemetry.io/otel/codes"
	"go.opentelemetry.io/otel/trace"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/tracing"
)

// flush writes every pending update of one object in one status update (plus a create the first
// time), re-reading and re-planning on conflict; with no updates, what the object owes of its
// own (expired or masked scores removed, validity of skipped updates). A transient failure does
// not hold the worker: the updates go back to pending and the object is retried after a backoff,
// the updates until their deadline (RetryFor after their first attempt), its own writes until
// they succeed. It reports whether it had updates or wrote: the object then rests for the window.
func (w *Writer) flush(ctx context.Context, key Key) bool {
	us, retrying, ok := w.take(key)
	if !ok {
		return false
	}
	w.startDeadlines(us)
	f := &flushing{w: w, ctx: ctx, key: key, us: us}
	var own bool
	f.cur, f.skipped, own = w.current(key)
	// After a failure the object's state is unknown. A write of the writer's own accord was
	// scheduled from a version the informer showed, which the writer's copy may be behind (a
	// relist shows versions out of turn): either way the hub says which is current.
	if (retrying || len(us) == 0 && own) && !f.read() {
		return true
	}
	for conflicts := 0; ; {
		if len(us) == 0 && !w.mayWrite(key, f.cur) {
			return false
		}
		if since, empty := emptySince(f.cur); empty && len(us) == 0 {
			// An object left without scores: deleted once its grace period is over, so that it
			// no longer holds its cluster's quota (a Placement counts a missing score as an
			// expired one).
			if end := since.Add(w.opts.DeleteEmptyAfter); w.clock.Now().Before(end) {
				w.schedule(key, end)
				return false
			}
			err := w.deleteEmpty(ctx, key, f.cur)
			switch {
			case err == nil:
				return true
			case !apierrors.IsConflict(err):
				w.failed(ctx, key, nil, err)
				return true
			}
			// Written since (its preconditions failed): look again.
			if conflicts++; conflicts > w.opts.MaxConflicts || !f.read() {
				return true
			}
			continue
		}
		p := w.plan(key, f.cur, f.skipped, us)
		switch {
		case !p.changed && len(us) > 0 && !f.confirmed && f.cur != nil:
			// Duplicate, Stale or Unchanged would be answered from a copy: make sure the hub
			// still has it, at a moment after the updates arrived. At the same resourceVersion the
			// copy stands, with what was skipped at it. A list of the resource's objects confirms
			// a fleet's refresh at once (confirm.go); else, or when the object differs, a read.
			if f.confirmListed() {
				continue
			}
			if !f.read() {
				return true
			}
		case !p.changed:
			f.settle(p)
			return len(us) > 0
		case f.cur == nil && w.atResourceBound(key) && !f.confirmed:
			// The informer may not have seen an object created elsewhere: ask the hub first.
			if !f.read() {
				return true
			}
		case f.cur == nil && w.atResourceBound(key):
			f.refuseCreate()
			return true
		default:
			err := f.commit(p)
			if err == nil {
				return true
			}
			if !apierrors.IsConflict(err) && !apierrors.IsAlreadyExists(err) && !(apierrors.IsNotFound(err) && f.cur != nil) {
				w.failed(ctx, key, us, err)
				return true
			}
			// The object changed under us, or is gone (deleted, or its namespace re-created):
			// read it and plan again; a missing object is created anew.
			if conflicts++; conflicts > w.opts.MaxConflicts {
				w.resolveAll(us, failed(contract.ReasonConflict, true, fmt.Sprintf("%d conflicting writes in a row: %v", conflicts, err)))
				w.retryLater(key, nil, contract.ReasonConflict, err) // the object's own writes
				return true
			}
			if !f.read() {
				return true
			}
		}
	}
}

// startDeadlines sets the deadline of updates at their first attempt.
func (w *Writer) startDeadlines(us []*Update) {
	if len(us) == 0 {
		return
	}
	w.metrics.batchSize.Observe(float64(len(us)))
	deadline := w.clock.Now().Add(w.opts.RetryFor)
	for _, u := range us {
		if u.deadline.IsZero() {
			u.deadline = deadline
		}
	}
}

// flushing is one flush of one object under way.
type flushing struct {
	w   *Writer
	ctx context.Context
	key Key
	us  []*Update
	// cur is the object planned over (nil: not on the hub), with what was skipped at its version.
	cur     *clusterv1alpha1.AddOnPlacementScore
	skipped skippedLines
	// confirmed: cur (or its absence) was read or written in this flush, so it is what the hub
	// holds, not a copy that may be behind.
	confirmed bool
}

// read reads the object from the hub; false when that failed (and the failure is handled).
func (f *flushing) read() bool {
	var err error
	if f.cur, f.skipped, err = f.w.load(f.ctx, f.key); err != nil {
		f.w.failed(f.ctx, f.key, f.us, err)
		return false
	}
	f.confirmed = true
	return true
}

// confirmListed reports whether a list that started after f's updates arrived found cur's
// version of the object (then cur is confirmed).
func (f *flushing) confirmListed() bool {
	var seq uint64
	for _, u := range f.us {
		seq = max(seq, u.seq)
	}
	rv, ok := f.w.listedVersion(f.ctx, f.key, seq)
	if ok && rv != "" && rv == f.cur.ResourceVersion {
		f.confirmed = true
		return true
	}
	return false
}

// settle answers a plan that writes nothing, keeps what it skipped and schedules the object.
func (f *flushing) settle(p plan) {
	f.w.remember(f.key, f.cur, p.skipped)
	f.w.queue.Forget(f.key)
	f.w.resolve(f.us, p.outcomes, resourceVersion(f.cur))
	f.w.schedule(f.key, p.due)
}

// refuseCreate fails the updates of an object that would be one more than its cluster may have.
func (f *flushing) refuseCreate() {
	f.w.queue.Forget(f.key)
	f.w.resolveAll(f.us, failed(ReasonTooManyResources, false, fmt.Sprintf(
		"cluster %s already has the %d AddOnPlacementScores the writer keeps per cluster (--max-resources-per-cluster): resource %s is not created",
		f.key.Cluster, f.w.opts.MaxResourcesPerCluster, f.key.Resource)))
}

// commit writes p; on success the updates are answered and the object scheduled.
func (f *flushing) commit(p plan) error {
	ctx, span := writeSpan(f.ctx, f.key, f.us)
	written, err := f.w.write(ctx, f.key, f.cur, p)
	if err != nil {
		span.SetStatus(codes.Error, err.Error())
		span.End()
		return err
	}
	span.End()
	f.w.queue.Forget(f.key)
	f.w.metrics.observe(f.key, p.wrote, f.w.clock.Now(), written.Status.ValidUntil, written.Status.Scores)
	f.w.resolve(f.us, p.outcomes, written.ResourceVersion)
	f.w.schedule(f.key, p.due)
	return nil
}

// failed handles a failed hub request: a transient failure is retried after a backoff (the
// updates until their deadline); any other fails the updates for good, and the object's own
// writes wait for the informer's next news of it.
func (w *Writer) failed(ctx context.Context, key Key, us []*Update, err error) {
	f := classify(err)
	if f.wait && ctx.Err() == nil {
		w.retryLater(key, us, f.reason, err)
		return
	}
	w.log.Warn("write failed", "object", key.String(), "reason", f.reason, "err", err, "updates", len(us))
	w.queue.Forget(key)
	w.resolveAll(us, failed(f.reason, f.redeliver, err.Error()))
}

// retryLater fails the updates whose deadline comes before the next try and puts the others back
// in front of whatever arrived meanwhile, to be written after a backoff (the queue's rate limiter:
// doubling up to retryMax). The object waits for that try, and new arrivals with it.
func (w *Writer) retryLater(key Key, us []*Update, reason contract.Reason, err error) {
	w.forgetCopy(key) // its state is unknown: read it before the next write
	retries := w.queue.NumRequeues(key)
	d := w.retries.When(key)
	due := w.clock.Now().Add(d)
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
	if len(keep) == 0 && !w.owesWrite(key) {
		// Nothing of this write is retried, and the object owes nothing of its own.
		w.queue.Forget(key)
		w.forgetCopy(key)
		return
	}
	w.log.Debug("write failed, retrying", "object", key.String(), "err", err, "backoff", d.String(), "retries", retries, "updates", len(keep))
	w.retryAfter(key, keep, d)
}

// owesWrite reports whether key's object, as the informer last saw it, needs a write of its own
// now (or its deletion): then a failed write of it is retried until it lands.
func (w *Writer) owesWrite(key Key) bool {
	obj := w.hub.get(key)
	if !w.mayWrite(key, obj) {
		return false
	}
	if since, empty := emptySince(obj); empty {
		return !w.clock.Now().Before(since.Add(w.opts.DeleteEmptyAfter)) // its deletion
	}
	return w.plan(key, obj, w.skippedAt(key, obj), nil).changed
}

// forgetCopy drops the writer's own copy of key's object: the next write reads the hub.
func (w *Writer) forgetCopy(key Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if o := w.objects[key]; o != nil {
		o.own = nil
	}
}

// write writes p over cur (nil: not on the hub, so created first). Any error means nothing of
// this plan is known to have landed, and the caller re-reads and plans again.
func (w *Writer) write(ctx context.Context, key Key, cur *clusterv1alpha1.AddOnPlacementScore, p plan) (*clusterv1alpha1.AddOnPlacementScore, error) {
	api := w.client.ClusterV1alpha1().AddOnPlacementScores(key.Cluster)
	base := cur
	if base == nil {
		// Status given on create is dropped (status subresource): create, then write status.
		w.creatingNow(key, true)
		rctx, cancel := w.requestContext(ctx)
		created, err := api.Create(rctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: key.Resource, Namespace: key.Cluster}}, metav1.CreateOptions{})
		cancel()
		w.count("create", err)
		if err != nil {
			w.creatingNow(key, false)
			return nil, err
		}
		base = slim(created)
		w.saw(key, base)
	}
	next := base.DeepCopy()
	next.Status = p.status
	// One write: scores, validUntil and ledger together, guarded by resourceVersion, so concurrent
	// writers (here or in other replicas) never overwrite each other.
	rctx, cancel := w.requestContext(ctx)
	defer cancel()
	written, err := api.UpdateStatus(rctx, next, metav1.UpdateOptions{})
	w.count("update_status", err)
	if err != nil {
		return nil, err
	}
	written = slim(written)
	w.saw(key, written)
	return written, nil
}

// deleteEmpty deletes obj, an object left without scores, unless it changed since (its uid and
// resourceVersion are preconditions: a score written meanwhile, by anyone, keeps it). Gone
// already is done.
func (w *Writer) deleteEmpty(ctx context.Context, key Key, obj *clusterv1alpha1.AddOnPlacementScore) error {
	rctx, cancel := w.requestContext(ctx)
	defer cancel()
	uid, rv := obj.UID, obj.ResourceVersion
	err := w.client.ClusterV1alpha1().AddOnPlacementScores(key.Cluster).Delete(rctx, key.Resource,
		metav1.DeleteOptions{Preconditions: &metav1.Preconditions{UID: &uid, ResourceVersion: &rv}})
	w.count("delete", err)
	if err != nil && !apierrors.IsNotFound(err) {
		return err
	}
	w.log.Info("deleted an AddOnPlacementScore left without scores", "object", key.String(), "after", w.opts.DeleteEmptyAfter.String())
	w.queue.Forget(key)
	w.forget(key)
	return nil
}

// requestContext bounds one hub request by Options.RequestTimeout: a hub that takes a request and
// never answers costs a retry, not a worker.
func (w *Writer) requestContext(ctx context.Context) (context.Context, context.CancelFunc) {
	return context.WithTimeout(ctx, w.opts.RequestTimeout)
}

// load reads key's object from the hub (nil without error when it does not exist), with what was
// skipped at its version.
func (w *Writer) load(ctx context.Context, key Key) (*clusterv1alpha1.AddOnPlacementScore, skippedLines, error) {
	rctx, cancel := w.requestContext(ctx)
	defer cancel()
	obj, err := w.client.ClusterV1alpha1().AddOnPlacementScores(key.Cluster).Get(rctx, key.Resource, metav1.GetOptions{})
	w.count("get", err)
	switch {
	case apierrors.IsNotFound(err):
		w.forget(key)
		return nil, nil, nil
	case err != nil:
		w.forgetCopy(key)
		return nil, nil, err
	}
	obj = slim(obj)
	w.saw(key, obj)
	return obj, w.skippedAt(key, obj), nil
}

func slim(obj *clusterv1alpha1.AddOnPlacementScore) *clusterv1alpha1.AddOnPlacementScore {
	s, _ := slimScore(obj)
	return s.(*clusterv1alpha1.AddOnPlacementScore)
}

func resourceVersion(obj *clusterv1alpha1.AddOnPlacementScore) string {
	if obj == nil {
		return ""
	}
	return obj.ResourceVersion
}

// creatingNow counts key as being created (or not, when its create failed).
func (w *Writer) creatingNow(key Key, on bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.object(key)
	if on && !o.creating {
		o.creating = true
		w.creating[key.Cluster]++
		return
	}
	if !on {
		w.created(key, o)
	}
}

// atResourceBound reports whether creating key would exceed its cluster's bound.
func (w *Writer) atResourceBound(key Key) bool {
	n := w.hub.count(key.Cluster)
	w.mu.Lock()
	n += w.creating[key.Cluster]
	w.mu.Unlock()
	return n >= w.opts.MaxResourcesPerCluster
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

// writeSpan is the span of one hub write, in the trace of the first update's event and linked to
// the others' (a write carries the updates of several events). Its hub requests are its children.
// A write no traced event asked for (the object's own: an expiry) starts no trace.
func writeSpan(ctx context.Context, key Key, us []*Update) (context.Context, trace.Span) {
	var parent trace.SpanContext
	var links []trace.Link
	for _, u := range us {
		switch {
		case !u.trace.IsValid():
		case !parent.IsValid():
			parent = u.trace
		case !u.trace.Equal(parent):
			links = append(links, trace.Link{SpanContext: u.trace})
		}
	}
	if !parent.IsValid() {
		return ctx, trace.SpanFromContext(ctx)
	}
	return tracing.Tracer().Start(trace.ContextWithRemoteSpanContext(ctx, parent), "hub write AddOnPlacementScore",
		trace.WithSpanKind(trace.SpanKindInternal), trace.WithLinks(links...),
		trace.WithAttributes(attribute.String("k8s.namespace.name", key.Cluster), attribute.String("scoreflow.resource", key.Resource),
			attribute.Int("scoreflow.updates", len(us))))
}
