package devrun

import (
	"context"
	"encoding/json"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	workv1alpha1 "open-cluster-management.io/api/work/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// The optimiser demo: cluster1 and cluster2 may each be given a policy that supplies one GPU as
// device gpu0 (the device the static-scorer's table scores), and workload mwrs-app01 (app01) needs
// one. Its Placement is app01-placement.
const (
	DemoWorkload          = "mwrs-app01"
	DemoWorkloadPlacement = "app01-placement"
)

// DemoOptimizeRequest is the optimisation request for the demo, preferring score (the
// static-scorer writes demo-performance-score and demo-powerconsumption-score).
func DemoOptimizeRequest(score string) optimizer.Params {
	p := optimizer.Params{Namespace: Namespace, TargetWorkloads: []optimizer.Named{{Name: DemoWorkload}},
		Preference: optimizer.Preference{AddonPlacementScore: score, ScoreDimensionFormat: optimizer.DefaultDimensionFormat}}
	for _, c := range []string{"cluster1", "cluster2"} {
		p.Clusters = append(p.Clusters, optimizer.Cluster{Name: c, AvailablePolicies: []optimizer.Named{{Name: "gpu0-" + c}}})
	}
	return p
}

// DemoOptimizeJSON is DemoOptimizeRequest as the JSON to send.
func DemoOptimizeJSON(score string) string {
	b, _ := json.Marshal(DemoOptimizeRequest(score))
	return string(b)
}

// optimizerDemo installs the workload and policy CRDs and creates the demo's policies and workload.
func (s *Stack) optimizerDemo(ctx context.Context) error {
	if err := s.Hub.InstallWorkloadCRDs(); err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(s.Hub.Config)
	if err != nil {
		return err
	}
	for _, c := range []string{"cluster1", "cluster2"} {
		pol := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "policy.open-cluster-management.io/v1", "kind": "Policy",
			"metadata": map[string]any{"name": "gpu0-" + c, "namespace": Namespace, "labels": map[string]any{
				optimizer.LabelSupplyKind: "gpu", optimizer.LabelSupplyAmount: "1", optimizer.LabelSupplyDevice: "gpu0"}},
			"spec": map[string]any{"disabled": false, "policy-templates": []any{}},
		}}
		if _, err := dyn.Resource(optimizer.PolicyResource).Namespace(Namespace).Create(ctx, pol, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	wk, err := workclient.NewForConfig(s.Hub.Config)
	if err != nil {
		return err
	}
	_, err = wk.WorkV1alpha1().ManifestWorkReplicaSets(Namespace).Create(ctx, &workv1alpha1.ManifestWorkReplicaSet{
		ObjectMeta: metav1.ObjectMeta{Name: DemoWorkload, Namespace: Namespace, Labels: map[string]string{
			optimizer.LabelApp: "app01", optimizer.LabelRequestKind: "gpu", optimizer.LabelRequestAmount: "1"}},
		Spec: workv1alpha1.ManifestWorkReplicaSetSpec{PlacementRefs: []workv1alpha1.LocalPlacementReference{{Name: DemoWorkloadPlacement}}},
	}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}
