package optimizer

import (
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"strings"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// allow refuses a namespace the deployment does not list (Options.Namespaces): the request is
// answered before anything is read or written there.
func (o *Optimizer) allow(namespace string) *Error {
	if slices.Contains(o.Opts.Namespaces, namespace) {
		return nil
	}
	return fail(http.StatusBadRequest, contract.ReasonForbidden,
		"namespace %q is not one this optimizer's deployment lets it act in (its --namespaces)", namespace)
}

// Names the optimizer derives for a cluster's policy Placement and PlacementBinding in plan id.
func policyPlacementName(cluster, id string) string { return "placement-" + cluster + "-" + id }
func bindingName(cluster, id string) string         { return "binding-" + cluster + "-" + id }

// generatedPlacement reports whether p is a Placement the optimizer wrote: labelled with a plan,
// and selecting exactly one cluster by name and nothing else, as onCluster does. A Placement that
// merely carries the labels (copied from a generated one, say) is not deleted.
func generatedPlacement(p *clusterv1beta1.Placement) bool {
	if p.Labels[LabelGenerated] != "true" || p.Labels[LabelPlan] == "" {
		return false
	}
	if p.Spec.NumberOfClusters == nil || *p.Spec.NumberOfClusters != 1 || len(p.Spec.Predicates) != 1 {
		return false
	}
	_, ok := selectedCluster(p)
	return ok
}

// selectedCluster is the cluster a generated Placement's predicate names.
func selectedCluster(p *clusterv1beta1.Placement) (string, bool) {
	if len(p.Spec.Predicates) != 1 {
		return "", false
	}
	exprs := p.Spec.Predicates[0].RequiredClusterSelector.CelSelector.CelExpressions
	if len(exprs) != 1 {
		return "", false
	}
	quoted, ok := strings.CutPrefix(exprs[0], "managedCluster.metadata.name == ")
	if !ok {
		return "", false
	}
	name, err := strconv.Unquote(quoted)
	if err != nil || contract.ValidateClusterName(name) != nil {
		return "", false
	}
	return name, true
}

// generatedBinding checks that b is a PlacementBinding as the optimizer writes one for a plan's
// cluster: named after the cluster and plan its labels give, bound to that cluster's policy
// Placement of the plan, with one Policy subject. It returns the cluster, the plan and the policy.
func generatedBinding(b *unstructured.Unstructured) (cluster, plan, policy string, err error) {
	l := b.GetLabels()
	cluster, plan = l[LabelCluster], l[LabelPlan]
	if l[LabelGenerated] != "true" || cluster == "" || plan == "" {
		return "", "", "", fmt.Errorf("PlacementBinding %s/%s lacks the labels of a generated one", b.GetNamespace(), b.GetName())
	}
	if b.GetName() != bindingName(cluster, plan) {
		return "", "", "", fmt.Errorf("PlacementBinding %s/%s is labelled generated but not named %s", b.GetNamespace(), b.GetName(), bindingName(cluster, plan))
	}
	ref, _, _ := unstructured.NestedString(b.Object, "placementRef", "name")
	kind, _, _ := unstructured.NestedString(b.Object, "placementRef", "kind")
	if kind != "Placement" || ref != policyPlacementName(cluster, plan) {
		return "", "", "", fmt.Errorf("PlacementBinding %s/%s does not bind Placement %s", b.GetNamespace(), b.GetName(), policyPlacementName(cluster, plan))
	}
	subjects, _, _ := unstructured.NestedSlice(b.Object, "subjects")
	if len(subjects) != 1 {
		return "", "", "", fmt.Errorf("PlacementBinding %s/%s has %d subjects, a generated one has one", b.GetNamespace(), b.GetName(), len(subjects))
	}
	m, _ := subjects[0].(map[string]any)
	policy, _ = m["name"].(string)
	if m["kind"] != "Policy" || policy == "" {
		return "", "", "", fmt.Errorf("PlacementBinding %s/%s does not bind a Policy", b.GetNamespace(), b.GetName())
	}
	return cluster, plan, policy, nil
}
