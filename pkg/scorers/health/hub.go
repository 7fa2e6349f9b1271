package health

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
)

// Lister lists every ManagedCluster on the hub.
type Lister interface {
	List(ctx context.Context) ([]ManagedCluster, error)
}

// HubClusters lists ManagedClusters with an OCM client. It needs list on managedclusters
// (cluster-scoped) and nothing else: no watch, no cache, so the scorer holds nothing between
// pings and each evaluation sees the hub as it is.
type HubClusters struct {
	Client clusterclient.Interface
	// PageSize bounds each list request; 0 means 500.
	PageSize int64
}

// List implements Lister, a page at a time.
func (h HubClusters) List(ctx context.Context) ([]ManagedCluster, error) {
	limit := h.PageSize
	if limit <= 0 {
		limit = 500
	}
	var out []ManagedCluster
	opts := metav1.ListOptions{Limit: limit}
	for {
		l, err := h.Client.ClusterV1().ManagedClusters().List(ctx, opts)
		if err != nil {
			return nil, err
		}
		for i := range l.Items {
			out = append(out, FromAPI(&l.Items[i]))
		}
		if l.Continue == "" {
			return out, nil
		}
		opts.Continue = l.Continue
	}
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
