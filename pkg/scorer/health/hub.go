package health

import (
	"cmp"
	"context"
	"errors"
	"io"
	"log/slog"
	"slices"
	"sync"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/tools/cache"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterlisters "open-cluster-management.io/api/client/cluster/listers/cluster/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
)

// Lister lists every ManagedCluster on the hub.
type Lister interface {
	List(ctx context.Context) ([]ManagedCluster, error)
}

// HubClusters lists the hub's ManagedClusters from an informer's cache: one list and a watch
// for the life of the scorer, so that a ping reads memory rather than the API server. It needs
// list and watch on managedclusters (cluster-scoped) and nothing else.
type HubClusters struct {
	lister clusterlisters.ManagedClusterLister
	synced func() bool

	mu      sync.Mutex
	lastErr error // the informer's last list or watch error, until it has synced
}

// errNotSynced answers a ping that comes before the informer has listed the hub once.
var errNotSynced = errors.New("the ManagedCluster informer has not listed the hub yet")

// WatchClusters starts an informer on ManagedClusters that runs until ctx ends.
func WatchClusters(ctx context.Context, client clusterclient.Interface, log *slog.Logger) *HubClusters {
	// No resync: pings read the cache, nothing reacts to its events.
	factory := clusterinformers.NewSharedInformerFactoryWithOptions(client, 0, clusterinformers.WithTransform(slimCluster))
	inf := factory.Cluster().V1().ManagedClusters()
	h := &HubClusters{lister: inf.Lister(), synced: inf.Informer().HasSynced}
	// Before Start, as client-go requires. The informer retries with backoff after calling it.
	_ = inf.Informer().SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		h.mu.Lock()
		h.lastErr = err
		h.mu.Unlock()
		if errors.Is(err, io.EOF) || apierrors.IsResourceExpired(err) || apierrors.IsGone(err) {
			return // a watch's usual end: the informer watches or lists again
		}
		log.Warn("listing or watching ManagedClusters failed; retrying", "err", brief(err))
	})
	factory.Start(ctx.Done())
	return h
}

// slimCluster keeps of a ManagedCluster only what FromAPI reads. A fleet's ManagedClusters carry
// managedFields, client configs with CA bundles, claims and capacity: kilobytes each, which at
// 10,000 clusters would be tens of MiB held for nothing.
func slimCluster(obj any) (any, error) {
	c, ok := obj.(*clusterv1.ManagedCluster)
	if !ok {
		return obj, nil // a tombstone: its object was slimmed when it was stored
	}
	out := &clusterv1.ManagedCluster{}
	out.Name, out.ResourceVersion, out.DeletionTimestamp = c.Name, c.ResourceVersion, c.DeletionTimestamp
	out.Spec.HubAcceptsClient = c.Spec.HubAcceptsClient
	out.Spec.LeaseDurationSeconds = c.Spec.LeaseDurationSeconds
	for _, cond := range c.Status.Conditions {
		cond.Message, cond.ObservedGeneration = "", 0
		out.Status.Conditions = append(out.Status.Conditions, cond)
	}
	return out, nil
}

// List implements Lister: every ManagedCluster in the cache, sorted by name. Before the informer
// has listed the hub once it returns its last error (a refusal by RBAC says what to grant), or
// errNotSynced.
func (h *HubClusters) List(context.Context) ([]ManagedCluster, error) {
	if !h.synced() {
		h.mu.Lock()
		defer h.mu.Unlock()
		if h.lastErr != nil {
			return nil, h.lastErr
		}
		return nil, errNotSynced
	}
	cs, err := h.lister.List(labels.Everything())
	if err != nil {
		return nil, err
	}
	slices.SortFunc(cs, func(a, b *clusterv1.ManagedCluster) int { return cmp.Compare(a.Name, b.Name) })
	out := make([]ManagedCluster, len(cs))
	for i, c := range cs {
		out[i] = FromAPI(c)
	}
	return out, nil
}

// FromAPI copies the fields the score reads from an OCM ManagedCluster.
func FromAPI(c *clusterv1.ManagedCluster) ManagedCluster {
	var mc ManagedCluster
	mc.APIVersion = clusterv1.SchemeGroupVersion.String()
	mc.Kind = Kind
	mc.Metadata.Name = c.Name
	if c.DeletionTimestamp != nil {
		t := c.DeletionTimestamp.Time
		mc.Metadata.DeletionTimestamp = &t
	}
	mc.Spec.HubAcceptsClient = c.Spec.HubAcceptsClient
	mc.Spec.LeaseDurationSeconds = c.Spec.LeaseDurationSeconds
	for _, cond := range c.Status.Conditions {
		mc.Status.Conditions = append(mc.Status.Conditions, Condition{
			Type: cond.Type, Status: string(cond.Status), Reason: cond.Reason, LastTransitionTime: cond.LastTransitionTime.Time,
		})
	}
	return mc
}
