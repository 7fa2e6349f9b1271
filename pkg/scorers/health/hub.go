package health

import (
	"context"
	"fmt"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterscheme "open-cluster-management.io/api/client/cluster/clientset/versioned/scheme"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	sigsjson "sigs.k8s.io/json"
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
		// The list's JSON is read into the fields the score uses only (listPage), not into whole
		// ManagedCluster objects: decoding every field of a fleet's clusters cost several times
		// scoring them. A plain page is read in one pass (scanListPage); any other goes through
		// sigs.k8s.io/json, as client-go decodes. The request, and its errors, are the typed
		// client's List.
		raw, err := h.Client.ClusterV1().RESTClient().Get().Resource("managedclusters").
			VersionedParams(&opts, clusterscheme.ParameterCodec).Do(ctx).Raw()
		if err != nil {
			return nil, err
		}
		page, ok := scanListPage(raw)
		if !ok {
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &page); err != nil {
				return nil, fmt.Errorf("decoding the ManagedClusterList: %w", err)
			}
		}
		out = slices.Grow(out, len(page.Items))
		for i := range page.Items {
			out = append(out, page.Items[i].managedCluster())
		}
		if page.Metadata.Continue == "" {
			return out, nil
		}
		opts.Continue = page.Metadata.Continue
	}
}

// listPage is one page of a ManagedClusterList, as much of it as FromAPI reads. Its fields have
// the API types' JSON names and types, and are decoded as client-go decodes (case-sensitive).
type listPage struct {
	Metadata struct {
		Continue string `json:"continue,omitempty"`
	} `json:"metadata"`
	Items []listItem `json:"items"`
}

// listItem is one ManagedCluster of a listPage.
type listItem struct {
	Metadata struct {
		Name              string       `json:"name,omitempty"`
		DeletionTimestamp *metav1.Time `json:"deletionTimestamp,omitempty"`
	} `json:"metadata"`
	Spec struct {
		HubAcceptsClient     bool  `json:"hubAcceptsClient"`
		LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
	} `json:"spec"`
	Status struct {
		Conditions []listCondition `json:"conditions,omitempty"`
	} `json:"status"`
}

// listCondition is one condition of a listItem.
type listCondition struct {
	Type               string                 `json:"type"`
	Status             metav1.ConditionStatus `json:"status"`
	Reason             string                 `json:"reason"`
	LastTransitionTime metav1.Time            `json:"lastTransitionTime"`
}

// managedCluster is FromAPI of the item: the same fields, set the same way.
func (it *listItem) managedCluster() ManagedCluster {
	var mc ManagedCluster
	mc.APIVersion = apiVersion
	mc.Kind = Kind
	mc.Metadata.Name = it.Metadata.Name
	if it.Metadata.DeletionTimestamp != nil {
		t := it.Metadata.DeletionTimestamp.Time
		mc.Metadata.DeletionTimestamp = &t
	}
	mc.Spec.HubAcceptsClient = it.Spec.HubAcceptsClient
	mc.Spec.LeaseDurationSeconds = it.Spec.LeaseDurationSeconds
	if n := len(it.Status.Conditions); n > 0 {
		mc.Status.Conditions = make([]Condition, 0, n)
	}
	for _, cond := range it.Status.Conditions {
		mc.Status.Conditions = append(mc.Status.Conditions, Condition{
			Type: cond.Type, Status: string(cond.Status), Reason: cond.Reason, LastTransitionTime: cond.LastTransitionTime.Time,
		})
	}
	return mc
}

// apiVersion is a ManagedCluster's, worked out once rather than for each cluster of a list.
var apiVersion = clusterv1.SchemeGroupVersion.String()

// FromAPI copies the fields the score reads from an OCM ManagedCluster.
func FromAPI(c *clusterv1.ManagedCluster) ManagedCluster {
	var mc ManagedCluster
	mc.APIVersion = apiVersion
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
