package scorewriter

import (
	"context"
	"errors"
	"time"

	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterlisters "open-cluster-management.io/api/client/cluster/listers/cluster/v1"
)

// ManagedClusters answers whether a ManagedCluster exists, from an informer's cache: one watch,
// no request per event.
type ManagedClusters struct {
	lister clusterlisters.ManagedClusterLister
	synced func() bool
}

// WatchManagedClusters starts an informer on ManagedClusters that runs until ctx ends.
func WatchManagedClusters(ctx context.Context, client clusterclient.Interface) *ManagedClusters {
	factory := clusterinformers.NewSharedInformerFactory(client, 10*time.Minute)
	inf := factory.Cluster().V1().ManagedClusters()
	mc := &ManagedClusters{lister: inf.Lister(), synced: inf.Informer().HasSynced}
	factory.Start(ctx.Done())
	return mc
}

// Exists reports whether a ManagedCluster named name exists and is not being deleted.
func (m *ManagedClusters) Exists(name string) bool {
	c, err := m.lister.Get(name)
	return err == nil && c.DeletionTimestamp == nil
}

// Ready is nil once the informer has synced: before that, every cluster would look unknown.
func (m *ManagedClusters) Ready() error {
	if !m.synced() {
		return errors.New("ManagedCluster informer has not synced")
	}
	return nil
}
