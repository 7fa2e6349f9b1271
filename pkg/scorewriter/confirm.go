package scorewriter

import (
	"context"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
)

// An update answered Duplicate, Stale or Unchanged is answered from the writer's copy of its
// object, which must be what the hub holds at some moment after the update arrived: the informer
// may be behind (another replica wrote a newer version, or someone deleted the object). One read
// of the object confirms it. A fleet's refresh brings one update per cluster for one resource at
// once, and mostly unchanged values: instead of a read each, one list of that resource's objects
// in every namespace (a field selector on the name, in pages) confirms all of them, each whose
// resourceVersion on the list is the copy's. A list confirms the updates that arrived before it
// started; those that arrived later wait for the next one.

// listConfirmMin is how many updates of a resource must be waiting before a list confirms them:
// below, a read each costs less than listing every cluster's object of that resource.
const listConfirmMin = 100

// listPage is the page size of a confirming list (client-go's pager uses 500 too).
const listPage = 500

// listings holds, per resource, the last list of its objects and the one under way.
type listings struct {
	mu  sync.Mutex
	res map[string]*listing
}

// listing is one list of a resource's objects in every namespace.
type listing struct {
	seq  uint64            // it confirms updates whose Update.seq is at most this
	rvs  map[string]string // cluster -> the resourceVersion of its object then
	err  error
	done chan struct{} // closed when the list has finished (rvs or err set)
}

// listedVersion is the resourceVersion of key's object as a list of key.Resource's objects that
// started after the update with sequence number seq arrived found it ("" when it had none); ok is
// false when no such list is worth making (few updates of the resource wait) or it failed: then
// the caller reads the object.
func (w *Writer) listedVersion(ctx context.Context, key Key, seq uint64) (rv string, ok bool) {
	l := &w.listings
	l.mu.Lock()
	cur := l.res[key.Resource]
	if cur == nil || cur.seq < seq {
		if w.pendingOf(key.Resource) < listConfirmMin {
			l.mu.Unlock()
			return "", false
		}
		cur = &listing{seq: w.lastSeq(), done: make(chan struct{})}
		if l.res == nil {
			l.res = map[string]*listing{}
		}
		l.res[key.Resource] = cur
		go w.list(ctx, key.Resource, cur)
	}
	l.mu.Unlock()
	select {
	case <-cur.done:
	case <-ctx.Done():
		return "", false
	}
	if cur.err != nil {
		return "", false
	}
	return cur.rvs[key.Cluster], true
}

// list lists every object named resource, page by page, into l.
func (w *Writer) list(ctx context.Context, resource string, l *listing) {
	defer close(l.done)
	rvs := map[string]string{}
	opts := metav1.ListOptions{FieldSelector: fields.OneTermEqualSelector("metadata.name", resource).String(), Limit: listPage}
	for {
		rctx, cancel := w.requestContext(ctx)
		page, err := w.client.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).List(rctx, opts)
		cancel()
		w.count("list", err)
		if err != nil {
			w.log.Debug("confirming list failed: reading each object instead", "resource", resource, "err", err)
			l.err = err
			return
		}
		for i := range page.Items {
			rvs[page.Items[i].Namespace] = page.Items[i].ResourceVersion
		}
		if page.Continue == "" {
			l.rvs = rvs
			if w.pendingOf(resource) == 0 {
				go w.forgetListing(resource) // after done is closed
			}
			return
		}
		opts.Continue = page.Continue
	}
}

// forgetListing drops what is kept of resource's lists: no update of it waits any more.
func (w *Writer) forgetListing(resource string) {
	w.listings.mu.Lock()
	defer w.listings.mu.Unlock()
	if cur := w.listings.res[resource]; cur != nil {
		select {
		case <-cur.done:
			delete(w.listings.res, resource)
		default: // under way: its waiters still need it
		}
	}
}
