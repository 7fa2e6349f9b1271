package scorewriter

import (
	"time"

	"k8s.io/utils/clock"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
)

// object is what the writer keeps about one AddOnPlacementScore besides the informer's copy of
// it: all of it, in one place, under Writer.mu. An object with nothing to keep has no entry
// (tidy): a fleet's objects cost the informer's copy alone between their writes, and one waiting
// to be written little more than its updates (BenchmarkPendingUpdateBytes).
type object struct {
	// pending are the accepted updates not yet written.
	pending []*Update
	// retryAt is when a write that failed transiently is tried again (zero: not waiting). Until
	// then arrivals join pending and wait for that try instead of starting another.
	retryAt time.Time
	// rest, while the object rests after a write started (Options.Window), ends the rest: the
	// queue holds the object as being processed until then, so that arrivals share one next write.
	rest clock.Timer
	// own is what the writer knows of the object beyond the informer's copy; nil: nothing.
	own *own
	// creating: this writer created the object and the informer has not shown it yet; it counts
	// against its cluster's bound meanwhile (Writer.creating).
	creating bool
}

// own is what the writer knows of an object that the informer's copy does not show (yet).
type own struct {
	// written is the object as this writer last wrote or read it (at writtenAt), until the
	// informer shows that version or moves past it: newer than the informer's copy meanwhile.
	written   *clusterv1alpha1.AddOnPlacementScore
	writtenAt time.Time
	// skipped are the lines of updates answered Unchanged (makePlan) while the hub held version
	// skippedRV: observation times and validity the hub does not hold yet. They stand while the
	// hub's object is at that version, and are written with its next write.
	skipped   skippedLines
	skippedRV string
}

// idle reports whether the object has nothing the writer must keep.
func (o *object) idle() bool {
	return len(o.pending) == 0 && o.retryAt.IsZero() && o.rest == nil && o.own == nil && !o.creating
}

// written is the writer's own copy of the object; nil when it has none.
func (o *object) written() *clusterv1alpha1.AddOnPlacementScore {
	if o == nil || o.own == nil {
		return nil
	}
	return o.own.written
}

// skippedAt are the lines skipped at version rv; nil when none.
func (o *object) skippedAt(rv string) skippedLines {
	if o == nil || o.own == nil || o.own.skippedRV != rv {
		return nil
	}
	return o.own.skipped
}

// setCopy records obj, just written or read, as the writer's copy: what was skipped at another
// version is in obj now, or lost with a write by someone else.
func (o *object) setCopy(obj *clusterv1alpha1.AddOnPlacementScore, at time.Time) {
	if o.own == nil {
		o.own = &own{}
	}
	o.own.written, o.own.writtenAt = obj, at
	if o.own.skippedRV != obj.ResourceVersion {
		o.own.skipped, o.own.skippedRV = nil, ""
	}
}

// dropCopy forgets the writer's copy, keeping what was skipped at version rv (if any).
func (o *object) dropCopy() {
	if o.own == nil {
		return
	}
	o.own.written = nil
	if o.own.skipped == nil {
		o.own = nil
	}
}

// dropSkippedUnless forgets what was skipped, unless at version rv.
func (o *object) dropSkippedUnless(rv string) {
	if o.own == nil || o.own.skippedRV == rv {
		return
	}
	o.own.skipped, o.own.skippedRV = nil, ""
	if o.own.written == nil {
		o.own = nil
	}
}

// object returns key's entry, made if missing. w.mu is held.
func (w *Writer) object(key Key) *object {
	o := w.objects[key]
	if o == nil {
		o = &object{}
		w.objects[key] = o
	}
	return o
}

// tidy drops key's entry once it keeps nothing.
func (w *Writer) tidy(key Key) {
	w.mu.Lock()
	defer w.mu.Unlock()
	if o := w.objects[key]; o != nil && o.idle() {
		delete(w.objects, key)
	}
}

// take hands the flush of key its pending updates. ok is false while key waits for a retry that
// is not due yet: it is queued again for then (an earlier wake-up, such as an expiry, must not cut
// the backoff short). retrying: this flush is that retry.
func (w *Writer) take(key Key) (us []*Update, retrying, ok bool) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.objects[key]
	if o == nil {
		return nil, false, true
	}
	if !o.retryAt.IsZero() {
		if wait := o.retryAt.Sub(w.clock.Now()); wait > 0 {
			w.queue.AddAfter(key, wait)
			return nil, false, false
		}
		o.retryAt, retrying = time.Time{}, true
	}
	us, o.pending = o.pending, nil
	return us, retrying, true
}

// current is the writer's best copy of key's object: the one it last wrote or read while the
// informer has not caught up with it (own true), else the informer's; nil when neither knows of
// one. With it, the lines skipped at its version. The copy is shared: whoever changes it changes a
// deep copy.
func (w *Writer) current(key Key) (obj *clusterv1alpha1.AddOnPlacementScore, skipped skippedLines, own bool) {
	w.mu.Lock()
	obj = w.objects[key].written()
	w.mu.Unlock()
	if own = obj != nil; !own {
		obj = w.hub.get(key)
	}
	return obj, w.skippedAt(key, obj), own
}

// skippedAt are the lines skipped at obj's version, if any.
func (w *Writer) skippedAt(key Key, obj *clusterv1alpha1.AddOnPlacementScore) skippedLines {
	if obj == nil {
		return nil
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.objects[key].skippedAt(obj.ResourceVersion)
}

// saw records obj, just written or read by this writer, as its copy of key's object, unless the
// informer has that version already (its news may come before the API's answer). What was skipped
// at an earlier version is in obj now, or lost with a write by someone else. The informer's store
// is read under w.mu, which its handler (observed) takes after updating the store: either the
// store has obj's version here, or the handler sees the copy and drops it.
func (w *Writer) saw(key Key, obj *clusterv1alpha1.AddOnPlacementScore) {
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.object(key)
	o.setCopy(obj, w.clock.Now())
	if cur := w.hub.get(key); cur != nil && cur.ResourceVersion == obj.ResourceVersion {
		o.dropCopy()
	}
}

// remember keeps what a plan skipped at obj's version (nil: nothing).
func (w *Writer) remember(key Key, obj *clusterv1alpha1.AddOnPlacementScore, skipped skippedLines) {
	if obj == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	o := w.object(key)
	if skipped == nil {
		o.dropSkippedUnless(obj.ResourceVersion)
		return
	}
	if o.own == nil {
		o.own = &own{}
	}
	o.own.skipped, o.own.skippedRV = skipped, obj.ResourceVersion
}

// retryAfter makes key wait d for its retry, with us back in front of what arrived meanwhile.
func (w *Writer) retryAfter(key Key, us []*Update, d time.Duration) {
	w.mu.Lock()
	o := w.object(key)
	o.retryAt = w.clock.Now().Add(d)
	o.pending = append(us, o.pending...)
	w.mu.Unlock()
	// Always queued: updates that arrived while it waited wait for this try, and so do its own writes.
	w.queue.AddAfter(key, d)
}

// forget drops key's copies: the hub no longer has the object.
func (w *Writer) forget(key Key) {
	w.mu.Lock()
	if o := w.objects[key]; o != nil {
		o.own = nil
		w.created(key, o)
		if o.idle() {
			delete(w.objects, key)
		}
	}
	w.mu.Unlock()
	w.metrics.forget(key)
}

// created ends the count of o as being created. w.mu is held.
func (w *Writer) created(key Key, o *object) {
	if !o.creating {
		return
	}
	o.creating = false
	if w.creating[key.Cluster]--; w.creating[key.Cluster] <= 0 {
		delete(w.creating, key.Cluster)
	}
}

// ForgetCluster releases what the writer keeps for a cluster that is gone (its ManagedCluster was
// deleted): its objects' copies and their metric series. Updates still waiting are written (or
// fail) as usual.
func (w *Writer) ForgetCluster(cluster string) {
	w.mu.Lock()
	for key, o := range w.objects {
		if key.Cluster != cluster {
			continue
		}
		o.own = nil
		w.created(key, o)
		if o.idle() {
			delete(w.objects, key)
		}
	}
	w.mu.Unlock()
	w.metrics.forgetCluster(cluster)
}
