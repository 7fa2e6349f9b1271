package optimizer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
)

// Marker makes the workload Placements' compliance gate work on the hub alone. A ClusterClaim
// comes from the managed cluster's agent, and nothing in OCM lets a Placement select on a policy's
// compliance; but the governance propagator rolls each replicated policy's compliance up into its
// root policy (status.status[]: clustername, compliant). Marker reads that for every policy the
// optimizer bound, and labels the ManagedCluster ComplianceLabelPrefix+<namespace>=<policy> while
// the policy is Compliant there, removing the label otherwise.
type Marker struct {
	Cluster clusterclient.Interface
	Dynamic dynamic.Interface
	Log     *slog.Logger
}

// Sync brings every ManagedCluster's compliance labels in line with the root policies' status.
func (mk *Marker) Sync(ctx context.Context) error {
	bl, err := mk.Dynamic.Resource(PlacementBindingResource).Namespace(metav1.NamespaceAll).List(ctx, metav1.ListOptions{LabelSelector: LabelGenerated + "=true," + LabelCluster})
	if err != nil {
		return fmt.Errorf("list PlacementBindings: %w", err)
	}
	want := map[string]map[string]string{} // cluster → label → policy
	for _, b := range bl.Items {
		cluster := b.GetLabels()[LabelCluster]
		subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
		for _, s := range subjects {
			m, _ := s.(map[string]any)
			policy, _ := m["name"].(string)
			if m["kind"] != "Policy" || policy == "" {
				continue
			}
			compliant, err := mk.compliant(ctx, b.GetNamespace(), policy, cluster)
			if err != nil {
				return err
			}
			if compliant {
				if want[cluster] == nil {
					want[cluster] = map[string]string{}
				}
				want[cluster][ComplianceLabelPrefix+b.GetNamespace()] = policy
			}
		}
	}
	mcs, err := mk.Cluster.ClusterV1().ManagedClusters().List(ctx, metav1.ListOptions{})
	if err != nil {
		return fmt.Errorf("list ManagedClusters: %w", err)
	}
	for _, mc := range mcs.Items {
		change := map[string]any{}
		for k, v := range mc.Labels {
			if strings.HasPrefix(k, ComplianceLabelPrefix) && want[mc.Name][k] != v {
				change[k] = nil
			}
		}
		for k, v := range want[mc.Name] {
			if mc.Labels[k] != v {
				change[k] = v
			}
		}
		if len(change) == 0 {
			continue
		}
		patch, _ := json.Marshal(map[string]any{"metadata": map[string]any{"labels": change}})
		if _, err := mk.Cluster.ClusterV1().ManagedClusters().Patch(ctx, mc.Name, types.MergePatchType, patch, metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("label ManagedCluster %s: %w", mc.Name, err)
		}
		mk.Log.Info("compliance labels", "cluster", mc.Name, "change", change)
	}
	return nil
}

// compliant reports whether the root policy namespace/name says it is Compliant on cluster.
func (mk *Marker) compliant(ctx context.Context, namespace, name, cluster string) (bool, error) {
	p, err := mk.Dynamic.Resource(PolicyResource).Namespace(namespace).Get(ctx, name, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return false, nil
	}
	if err != nil {
		return false, fmt.Errorf("get Policy %s/%s: %w", namespace, name, err)
	}
	per, _, _ := unstructured.NestedSlice(p.Object, "status", "status")
	for _, e := range per {
		m, _ := e.(map[string]any)
		if m["clustername"] == cluster {
			return m["compliant"] == "Compliant", nil
		}
	}
	return false, nil
}

// Run syncs every interval until ctx ends; a failed sync is logged and retried at the next tick.
func (mk *Marker) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		if err := mk.Sync(ctx); err != nil && ctx.Err() == nil {
			mk.Log.Error("compliance sync", "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}
