package scorewriter

import (
	"context"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterlisters "open-cluster-management.io/api/client/cluster/listers/cluster/v1alpha1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
)

// maxCopyAge bounds how long the writer prefers its own copy of an object to the informer's, which
// normally shows that version within milliseconds: a relist skips versions, and a copy the
// informer never shows must not hide the hub's later news for good.
const maxCopyAge = time.Minute

// resyncPeriod is how often the informer hands every object to the writer again: an object whose
// own write was refused for good (Forbidden, Rejected) is tried again then.
const resyncPeriod = 10 * time.Minute

// hubView is the writer's view of the hub's AddOnPlacementScores: an informer over every
// namespace (list and watch), keeping of each object what a write needs (slimScore). From it the
// writer learns the objects that exist (including those written by other replicas, or before a
// restart), and schedules each carrying its ledger for its next expiry.
type hubView struct {
	factory  clusterinformers.SharedInformerFactory
	informer cache.SharedIndexInformer
	lister   clusterlisters.AddOnPlacementScoreLister
}

func newHubView(client clusterclient.Interface, w *Writer) *hubView {
	factory := clusterinformers.NewSharedInformerFactoryWithOptions(client, resyncPeriod, clusterinformers.WithTransform(slimScore))
	inf := factory.Cluster().V1alpha1().AddOnPlacementScores()
	h := &hubView{factory: factory, informer: inf.Informer(), lister: inf.Lister()}
	_, _ = h.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { w.observed(nil, obj) },
		UpdateFunc: func(old, obj any) { w.observed(old, obj) },
		DeleteFunc: w.deleted,
	})
	return h
}

func (h *hubView) start(ctx context.Context) { h.factory.Start(ctx.Done()) }

func (h *hubView) synced() bool { return h.informer.HasSynced() }

// get is the informer's copy of key's object; nil when it knows of none.
func (h *hubView) get(key Key) *clusterv1alpha1.AddOnPlacementScore {
	obj, err := h.lister.AddOnPlacementScores(key.Cluster).Get(key.Resource)
	if err != nil {
		return nil
	}
	return obj
}

// count is the number of AddOnPlacementScores the informer knows in a namespace.
func (h *hubView) count(namespace string) int {
	objs, _ := h.lister.AddOnPlacementScores(namespace).List(labels.Everything())
	return len(objs)
}

// slimScore keeps of an AddOnPlacementScore only what a write needs: name, namespace, uid,
// resourceVersion and status. The rest of the metadata (managedFields, labels, annotations, owner
// references, timestamps) a status update does not change, and the message of the writer's own
// ScoresUpdated condition every write sets anew. At fleet size these copies are most of the
// writer's heap (BenchmarkKnownObjectBytes).
func slimScore(obj any) (any, error) {
	in, ok := obj.(*clusterv1alpha1.AddOnPlacementScore)
	if !ok {
		return obj, nil // a tombstone: its object was slimmed when it was stored
	}
	out := &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: in.Name, Namespace: in.Namespace, UID: in.UID, ResourceVersion: in.ResourceVersion}}
	out.Status.ValidUntil = in.Status.ValidUntil
	if len(in.Status.Scores) > 0 {
		out.Status.Scores = slices.Clone(in.Status.Scores)
	}
	if len(in.Status.Conditions) > 0 {
		out.Status.Conditions = make([]metav1.Condition, len(in.Status.Conditions))
		for i, c := range in.Status.Conditions {
			// The writer's own condition strings are the same in every object: the constants
			// stand for the decoded copies.
			c.Type, c.Status, c.Reason = interned(c.Type), metav1.ConditionStatus(interned(string(c.Status))), interned(c.Reason)
			if c.Type == ConditionUpdated {
				c.Message = ""
			}
			out.Status.Conditions[i] = c
		}
	}
	return out, nil
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
	case string(metav1.ConditionFalse):
		return string(metav1.ConditionFalse)
	case reasonNoScores:
		return reasonNoScores
	case reasonObservationTimes:
		return reasonObservationTimes
	case reasonScoresWritten:
		return reasonScoresWritten
	case reasonScoresMasked:
		return reasonScoresMasked
	}
	return s
}

// observed takes the informer's news of an object (old nil: added, or listed). The writer's own
// copy goes once the informer has it or has moved past it; until then the informer's news is
// usually of versions before it, and the object's series keep following the copy. Otherwise (the
// copy's own version included) the series follow what the hub holds, whoever wrote it (another
// replica may have removed an expired score). Every version the informer shows is scheduled for
// its next write of its own: after a relist, a version that is neither the copy nor the one after
// it may well be later than the copy (another replica wrote meanwhile), and its expiry must not be
// missed; a wake-up for a version the copy has moved past finds nothing to write.
func (w *Writer) observed(old, obj any) {
	cur, ok := obj.(*clusterv1alpha1.AddOnPlacementScore)
	if !ok {
		return
	}
	key := Key{Cluster: cur.Namespace, Resource: cur.Name}
	prev, _ := old.(*clusterv1alpha1.AddOnPlacementScore)
	w.mu.Lock()
	behind := false // the writer wrote or read a later version
	if o := w.objects[key]; o != nil {
		w.created(key, o)
		if written := o.written(); written != nil {
			switch {
			case written.ResourceVersion == cur.ResourceVersion:
				// This very version: the series follow it too, as the writer may only have read
				// it (a write of another replica that its own write conflicted with).
				o.dropCopy()
			case prev != nil && prev.ResourceVersion == written.ResourceVersion:
				o.dropCopy() // the hub moved on from it
			case w.clock.Since(o.own.writtenAt) > maxCopyAge:
				o.dropCopy() // the informer never showed it (a relist skips versions)
			default:
				behind = true
			}
		}
		o.dropSkippedUnless(cur.ResourceVersion)
		if o.idle() {
			delete(w.objects, key)
		}
	}
	w.mu.Unlock()
	if !behind {
		w.metrics.follow(key, cur.Status.ValidUntil, cur.Status.Scores)
	}
	w.schedule(key, w.dueAt(key, cur))
}

// deleted takes the informer's news of a deleted object.
func (w *Writer) deleted(obj any) {
	if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		obj = t.Obj
	}
	if o, ok := obj.(*clusterv1alpha1.AddOnPlacementScore); ok {
		w.forget(Key{Cluster: o.Namespace, Resource: o.Name})
	}
}

// dueAt is when the writer must next write obj of its own accord: now if something is due
// (an expired score, a masked one, owed validity, a validUntil someone else changed), else its
// next expiry or owed validity, or for an object left without scores the end of its grace period
// (its deletion); zero when never. Only objects the writer may write on its own: those carrying
// its ledger, masked scores or left empty by it, in the namespace of an admitted cluster.
func (w *Writer) dueAt(key Key, obj *clusterv1alpha1.AddOnPlacementScore) time.Time {
	if !w.mayWrite(key, obj) {
		return time.Time{}
	}
	if since, ok := emptySince(obj); ok {
		return since.Add(w.opts.DeleteEmptyAfter)
	}
	p := w.plan(key, obj, w.skippedAt(key, obj), nil)
	if p.changed {
		return w.clock.Now()
	}
	return p.due
}

// mayWrite reports whether the writer may write obj without an update for it: while it leads.
func (w *Writer) mayWrite(key Key, obj *clusterv1alpha1.AddOnPlacementScore) bool {
	if !w.leading.Load() || obj == nil {
		return false
	}
	if _, empty := emptySince(obj); !empty && !hasLedger(obj) && !w.holdsMasked(key, obj) {
		return false
	}
	return w.opts.Clusters == nil || w.opts.Clusters.Admit(key.Cluster) == nil
}
