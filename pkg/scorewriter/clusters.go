package scorewriter

import (
	"context"
	"errors"
	"fmt"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterlisters "open-cluster-management.io/api/client/cluster/listers/cluster/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// ManagedClusters answers whether scores may be written for a managed cluster, from an informer's
// cache: one watch, no request per event.
type ManagedClusters struct {
	lister   clusterlisters.ManagedClusterLister
	synced   func() bool
	informer cache.SharedIndexInformer
}

// WatchManagedClusters starts an informer on ManagedClusters that runs until ctx ends.
func WatchManagedClusters(ctx context.Context, client clusterclient.Interface) *ManagedClusters {
	factory := clusterinformers.NewSharedInformerFactoryWithOptions(client, 10*time.Minute, clusterinformers.WithTransform(slimCluster))
	inf := factory.Cluster().V1().ManagedClusters()
	mc := &ManagedClusters{lister: inf.Lister(), synced: inf.Informer().HasSynced, informer: inf.Informer()}
	factory.Start(ctx.Done())
	return mc
}

// slimCluster keeps of a ManagedCluster only what Admit reads. A fleet's ManagedClusters carry
// managedFields, client configs with CA bundles, claims and capacity: kilobytes each, which at
// 10,000 clusters would be tens of MiB held for nothing.
func slimCluster(obj any) (any, error) {
	c, ok := obj.(*clusterv1.ManagedCluster)
	if !ok {
		return obj, nil // a tombstone: its object was slimmed when it was stored
	}
	out := &clusterv1.ManagedCluster{}
	out.Name, out.UID, out.ResourceVersion, out.DeletionTimestamp = c.Name, c.UID, c.ResourceVersion, c.DeletionTimestamp
	out.Spec.HubAcceptsClient = c.Spec.HubAcceptsClient
	if cond := meta.FindStatusCondition(c.Status.Conditions, clusterv1.ManagedClusterConditionHubAccepted); cond != nil {
		out.Status.Conditions = []metav1.Condition{{Type: cond.Type, Status: cond.Status}}
	}
	return out, nil
}

// Admit returns nil when scores may be written for the cluster named name: a ManagedCluster the
// hub has accepted (spec.hubAcceptsClient and condition HubAcceptedManagedCluster True) and is not
// deleting. A ManagedCluster can be created, pending acceptance, by anyone holding a bootstrap
// token; until an administrator accepts it, it gets nothing. The name itself (a DNS-1123 label, not
// a hub namespace) is checked before, by contract.ValidateClusterName.
func (m *ManagedClusters) Admit(name string) *contract.FieldError {
	c, err := m.lister.Get(name)
	switch {
	case apierrors.IsNotFound(err):
		return &contract.FieldError{Reason: contract.ReasonUnknownCluster, Message: fmt.Sprintf("no ManagedCluster named %q", name)}
	case err != nil:
		return &contract.FieldError{Reason: contract.ReasonUnknownCluster, Message: fmt.Sprintf("ManagedCluster %q: %v", name, err)}
	}
	return admitted(c)
}

// admitted is Admit for the ManagedCluster c.
func admitted(c *clusterv1.ManagedCluster) *contract.FieldError {
	name := c.Name
	switch {
	case c.DeletionTimestamp != nil:
		return &contract.FieldError{Reason: contract.ReasonUnknownCluster, Message: fmt.Sprintf("ManagedCluster %q is being deleted", name)}
	case !c.Spec.HubAcceptsClient:
		return &contract.FieldError{Reason: contract.ReasonClusterNotAccepted, Message: fmt.Sprintf("ManagedCluster %q is not accepted: spec.hubAcceptsClient is false", name)}
	case !meta.IsStatusConditionTrue(c.Status.Conditions, clusterv1.ManagedClusterConditionHubAccepted):
		return &contract.FieldError{Reason: contract.ReasonClusterNotAccepted, Message: fmt.Sprintf("ManagedCluster %q is not accepted yet: condition %s is not True", name, clusterv1.ManagedClusterConditionHubAccepted)}
	}
	return nil
}

// Notify tells w of the clusters that leave the hub (Writer.ForgetCluster: what is kept for them
// goes) and of those admitted, at first or again (Writer.ClusterAdmitted: what fell due while the
// writer could not write for them is written).
func (m *ManagedClusters) Notify(w *Writer) {
	_, _ = m.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if c, ok := obj.(*clusterv1.ManagedCluster); ok && admitted(c) == nil {
				w.ClusterAdmitted(c.Name)
			}
		},
		UpdateFunc: func(old, obj any) {
			prev, _ := old.(*clusterv1.ManagedCluster)
			if c, ok := obj.(*clusterv1.ManagedCluster); ok && admitted(c) == nil && (prev == nil || admitted(prev) != nil) {
				w.ClusterAdmitted(c.Name)
			}
		},
		DeleteFunc: func(obj any) {
			if t, ok := obj.(cache.DeletedFinalStateUnknown); ok {
				obj = t.Obj
			}
			if c, ok := obj.(*clusterv1.ManagedCluster); ok {
				w.ForgetCluster(c.Name)
			}
		},
	})
}

// HasSynced reports whether the informer has synced: before that, every cluster looks unknown.
func (m *ManagedClusters) HasSynced() bool { return m.synced() }

// Ready is nil once the informer has synced: before that, every cluster would look unknown.
func (m *ManagedClusters) Ready() error {
	if !m.synced() {
		return errors.New("ManagedCluster informer has not synced")
	}
	return nil
}
