package knlocal

import (
	"context"
	"encoding/json"
	"fmt"
	neturl "net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/wait"
)

// Kinds whose readiness a scoreflow install waits for.
var (
	BrokerKind          = schema.GroupVersionKind{Group: "eventing.knative.dev", Version: "v1", Kind: "Broker"}
	TriggerKind         = schema.GroupVersionKind{Group: "eventing.knative.dev", Version: "v1", Kind: "Trigger"}
	PingSourceKind      = schema.GroupVersionKind{Group: "sources.knative.dev", Version: "v1", Kind: "PingSource"}
	SinkBindingKind     = schema.GroupVersionKind{Group: "sources.knative.dev", Version: "v1", Kind: "SinkBinding"}
	ApiServerSourceKind = schema.GroupVersionKind{Group: "sources.knative.dev", Version: "v1", Kind: "ApiServerSource"}
	ServiceKind         = schema.GroupVersionKind{Group: "serving.knative.dev", Version: "v1", Kind: "Service"}
	DeploymentKind      = schema.GroupVersionKind{Group: "apps", Version: "v1", Kind: "Deployment"}
	EventPolicyKind     = schema.GroupVersionKind{Group: "eventing.knative.dev", Version: "v1alpha1", Kind: "EventPolicy"}
)

// ServeService stands in for Knative Serving: the Service namespace/name is served at url (a local
// process), which is what Triggers, SinkBindings and dead-letter sinks resolve it to. An https url
// (transport encryption on, the process serving a certificate of IssueServiceCert) is published
// with the CA as its CACerts, as Serving does with cluster-local-domain-tls.
func (k *Knative) ServeService(ctx context.Context, namespace, name, url string) error {
	ri, err := k.Applier.Resource(ServiceKind, namespace)
	if err != nil {
		return err
	}
	address := map[string]any{"url": url}
	var addresses any // none for http, as before (merge patch: null leaves none)
	if strings.HasPrefix(url, "https://") {
		if k.CA == nil {
			return fmt.Errorf("service %s/%s: an https address needs transport encryption on", namespace, name)
		}
		address["name"], address["CACerts"] = "https", string(k.CA.PEM())
		addresses = []any{address}
	}
	now := time.Now().UTC().Format(time.RFC3339)
	status := map[string]any{"status": map[string]any{
		"url":       url,
		"address":   address,
		"addresses": addresses,
		"conditions": []any{map[string]any{"type": "Ready", "status": "True", "lastTransitionTime": now,
			"reason": "LocalProcess", "message": "served by a local process"}},
	}}
	patch, _ := json.Marshal(status)
	if _, err = ri.Patch(ctx, name, types.MergePatchType, patch, metav1.PatchOptions{}, "status"); err != nil {
		return err
	}
	return k.serviceName(ctx, namespace, name, url)
}

// serviceName makes http://<name>.<namespace>.svc.cluster.local reach the local process at url, as
// the Kubernetes Service that Serving creates for a Knative Service does on a cluster: a function
// that calls another by that name (the mcp-server calls the optimizer) gets there through the
// service proxy.
func (k *Knative) serviceName(ctx context.Context, namespace, name, url string) error {
	u, err := neturl.Parse(url)
	if err != nil {
		return err
	}
	p, err := strconv.Atoi(u.Port())
	if err != nil {
		return fmt.Errorf("Service %s/%s at %s: no port", namespace, name, url)
	}
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace, Labels: map[string]string{"serving.knative.dev/service": name}},
		Spec:       corev1.ServiceSpec{Ports: []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080)}}},
	}
	if _, err := k.kube.CoreV1().Services(namespace).Create(ctx, svc, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	_ = k.kube.DiscoveryV1().EndpointSlices(namespace).Delete(ctx, name+"-local", metav1.DeleteOptions{}) // a new address
	return k.publishEndpoints(ctx, namespace, name, []discoveryv1.EndpointPort{port("http", p)})
}

// WorkloadEnv is the environment of the first container of a workload (kind ServiceKind or
// DeploymentKind) as it is on the hub, where a SinkBinding has injected K_SINK, K_CE_OVERRIDES
// and K_CA_CERTS.
func (k *Knative) WorkloadEnv(ctx context.Context, kind schema.GroupVersionKind, namespace, name string) (map[string]string, error) {
	obj, err := k.workload(ctx, kind, namespace, name)
	if err != nil {
		return nil, err
	}
	containers, _, _ := unstructured.NestedSlice(obj.Object, "spec", "template", "spec", "containers")
	env := map[string]string{}
	if len(containers) == 0 {
		return env, nil
	}
	vars, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	for _, v := range vars {
		m, _ := v.(map[string]any)
		n, _ := m["name"].(string)
		val, _ := m["value"].(string)
		env[n] = val
	}
	return env, nil
}

// workload is the hub's copy of a Knative Service or Deployment.
func (k *Knative) workload(ctx context.Context, kind schema.GroupVersionKind, namespace, name string) (*unstructured.Unstructured, error) {
	if kind != ServiceKind && kind != DeploymentKind {
		return nil, fmt.Errorf("%s %s/%s: only Knative Services and Deployments run locally", kind.Kind, namespace, name)
	}
	ri, err := k.Applier.Resource(kind, namespace)
	if err != nil {
		return nil, err
	}
	return ri.Get(ctx, name, metav1.GetOptions{})
}

// WaitReady waits until every object of the given kinds in namespace has condition Ready=True, and
// otherwise names those that are not, with their reasons.
func (k *Knative) WaitReady(ctx context.Context, namespace string, timeout time.Duration, kinds ...schema.GroupVersionKind) error {
	var notReady []string
	err := wait.PollUntilContextTimeout(ctx, 100*time.Millisecond, timeout, true, func(ctx context.Context) (bool, error) {
		notReady = notReady[:0]
		for _, gvk := range kinds {
			ri, err := k.Applier.Resource(gvk, namespace)
			if err != nil {
				return false, err
			}
			list, err := ri.List(ctx, metav1.ListOptions{})
			if err != nil {
				return false, nil
			}
			for _, o := range list.Items {
				if !conditionTrue(&o, "Ready") {
					notReady = append(notReady, fmt.Sprintf("%s %s (%s)", gvk.Kind, o.GetName(), readyReason(&o)))
				}
			}
		}
		return len(notReady) == 0, nil
	})
	if err != nil {
		sort.Strings(notReady)
		return fmt.Errorf("not Ready after %s: %s (Knative logs: %s)", timeout, strings.Join(notReady, "; "), k.LogDir)
	}
	return nil
}

func readyReason(o *unstructured.Unstructured) string {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, _ := c.(map[string]any)
		if m["type"] == "Ready" {
			return fmt.Sprintf("%v: %v", m["reason"], m["message"])
		}
	}
	return "no Ready condition yet"
}
