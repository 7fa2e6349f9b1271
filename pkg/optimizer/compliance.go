package optimizer

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
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
//
// It reads only the namespaces the optimizer acts in, and there only the bindings the optimizer
// wrote: named after their cluster and plan, bound to that plan's Placement for the cluster, which
// selects exactly that cluster (a binding merely labelled generated labels nothing). It touches
// only the compliance labels of those namespaces.
type Marker struct {
	Cluster clusterclient.Interface
	Dynamic dynamic.Interface
	// Namespaces are the optimizer's (Options.Namespaces).
	Namespaces []string
	Log        *slog.Logger
}

// Sync brings every ManagedCluster's compliance labels in line with the root policies' status.
func (mk *Marker) Sync(ctx context.Context) error {
	want := map[string]map[string]string{} // cluster → label → policy
	owned := map[string]bool{}             // the labels this marker manages
	for _, ns := range mk.Namespaces {
		owned[ComplianceLabelPrefix+ns] = true
		bl, err := mk.Dynamic.Resource(PlacementBindingResource).Namespace(ns).List(ctx, metav1.ListOptions{LabelSelector: LabelGenerated + "=true," + LabelCluster})
		if apierrors.IsNotFound(err) {
			// Not a missing object: the hub does not serve the kind at all.
			return fmt.Errorf("the hub serves no PlacementBindings: install the governance policy framework (clusteradm install hub-addon --names governance-policy-framework), or run without --mark-compliance: %w", err)
		}
		if err != nil {
			return fmt.Errorf("list PlacementBindings in %s: %w", ns, err)
		}
		for _, b := range bl.Items {
			cluster, policy, err := mk.bound(ctx, &b)
			if err != nil {
				return err
			}
			if cluster == "" {
				continue
			}
			compliant, err := mk.compliant(ctx, ns, policy, cluster)
			if err != nil {
				return err
			}
			if compliant {
				if want[cluster] == nil {
					want[cluster] = map[string]string{}
				}
				want[cluster][ComplianceLabelPrefix+ns] = policy
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
			if owned[k] && want[mc.Name][k] != v {
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

// bound returns the cluster and policy of a binding the optimizer wrote, and an empty cluster for
// one it did not (logged at debug level: every sync meets it again) or whose Placement is gone (a
// plan being replaced).
func (mk *Marker) bound(ctx context.Context, b *unstructured.Unstructured) (cluster, policy string, err error) {
	cluster, plan, policy, err := generatedBinding(b)
	if err != nil {
		mk.Log.Debug("compliance: binding ignored", "err", err)
		return "", "", nil
	}
	name := policyPlacementName(cluster, plan)
	p, err := mk.Cluster.ClusterV1beta1().Placements(b.GetNamespace()).Get(ctx, name, metav1.GetOptions{})
	switch {
	case apierrors.IsNotFound(err):
		return "", "", nil
	case err != nil:
		return "", "", fmt.Errorf("get Placement %s/%s: %w", b.GetNamespace(), name, err)
	}
	if on, ok := selectedCluster(p); !generatedPlacement(p) || !ok || on != cluster || p.Labels[LabelPlan] != plan {
		mk.Log.Debug("compliance: binding ignored", "err", fmt.Sprintf("PlacementBinding %s/%s binds Placement %s, which is not the plan's for cluster %s", b.GetNamespace(), b.GetName(), name, cluster))
		return "", "", nil
	}
	return cluster, policy, nil
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

// Run syncs every interval until ctx ends. A failed sync is retried at the next tick; its error is
// logged when it first happens and whenever it changes, and the recovery once: a hub without the
// policy framework would otherwise log the same error every few seconds.
func (mk *Marker) Run(ctx context.Context, interval time.Duration) {
	t := time.NewTicker(interval)
	defer t.Stop()
	var failing string
	for {
		err := mk.Sync(ctx)
		switch {
		case ended(ctx):
		case err != nil && err.Error() != failing:
			failing = err.Error()
			mk.Log.Error("compliance sync", "err", err, "retryEvery", interval.String())
		case err == nil && failing != "":
			failing = ""
			mk.Log.Info("compliance sync recovered")
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// ended reports whether ctx is done or past its deadline. Between the deadline and its timer firing,
// ctx.Err is still nil while client-go's rate limiter already refuses to wait, and that refusal is
// the end of the run, not a sync failure to report.
func ended(ctx context.Context) bool {
	if ctx.Err() != nil {
		return true
	}
	d, ok := ctx.Deadline()
	return ok && !time.Now().Before(d)
}
