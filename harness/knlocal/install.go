package knlocal

import (
	"context"
	_ "embed"
	"fmt"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	discoveryv1 "k8s.io/api/discovery/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/utils/ptr"
)

// ksvcCRD stands in for Knative Serving's Service: enough for serving.knative.dev/v1 Service refs
// to resolve through the Addressable duck type (knative.dev/pkg's resolver reads only
// status.address), with the status written by the harness.
//
//go:embed ksvc-crd.yaml
var ksvcCRD string

// adapterImage is what the ApiServerSource controller puts in the Deployments it creates; the
// kubelet runs the binary of that name.
const adapterImage = "ko://knative.dev/eventing/cmd/apiserver_receive_adapter"

// install applies, from the eventing module's own config/: the CRDs, the system namespace and
// ConfigMaps (the feature stores refuse to start when one is missing), the Services and
// Deployments that readiness rules look for, and what stands in for a kubelet and an EndpointSlice
// controller. Only ports are changed: the webhook's Service becomes ExternalName localhost, so the
// API server reaches the local webhook on the port the webhook configurations and conversion
// webhooks are given.
func (k *Knative) install(ctx context.Context, config string) error {
	crds, err := ReadFiles(filepath.Join(config, "core", "resources"),
		filepath.Join(config, "channels", "in-memory-channel", "resources", "in-memory-channel.yaml"))
	if err != nil {
		return err
	}
	stand, err := Decode(strings.NewReader(ksvcCRD))
	if err != nil {
		return err
	}
	crds = append(crds, stand...)
	for _, c := range crds {
		k.routeWebhook(c)
	}
	if err := k.Applier.Apply(ctx, crds...); err != nil {
		return err
	}
	if err := k.waitEstablished(ctx, crds); err != nil {
		return err
	}
	system, err := ReadFiles(
		filepath.Join(config, "core", "100-namespace.yaml"),
		filepath.Join(config, "core", "configmaps"),
		filepath.Join(config, "channels", "in-memory-channel", "configmaps"),
		filepath.Join(config, "brokers", "mt-channel-broker", "deployments", "broker-ingress.yaml"),
		filepath.Join(config, "brokers", "mt-channel-broker", "deployments", "broker-filter.yaml"),
		filepath.Join(config, "channels", "in-memory-channel", "deployments", "dispatcher.yaml"),
		filepath.Join(config, "channels", "in-memory-channel", "deployments", "dispatcher-service.yaml"),
		filepath.Join(config, "core", "deployments", "pingsource-mt-adapter.yaml"),
		filepath.Join(config, "core", "webhooks", "secret.yaml"))
	if err != nil {
		return err
	}
	var objs []*unstructured.Unstructured
	for _, o := range system {
		// HorizontalPodAutoscalers and the like come in the same files; a hub without the
		// controllers that read them gains nothing from them.
		if o.GetKind() == "HorizontalPodAutoscaler" || o.GetKind() == "PodDisruptionBudget" {
			continue
		}
		objs = append(objs, o)
	}
	if err := k.Applier.Apply(ctx, objs...); err != nil {
		return err
	}
	if err := k.webhookService(ctx); err != nil {
		return err
	}
	for name, ports := range map[string][]discoveryv1.EndpointPort{
		"broker-ingress": {port("http", k.ports.ingress), port("https", k.ports.ingressTLS)},
		"broker-filter":  {port("http", k.ports.filter), port("https", k.ports.filterTLS)},
		"imc-dispatcher": {port("http-dispatcher", DispatcherHTTPPort), port("https-dispatcher", DispatcherHTTPSPort)},
	} {
		if err := k.publishEndpoints(ctx, SystemNamespace, name, ports); err != nil {
			return err
		}
	}
	for _, d := range []string{"imc-dispatcher", "mt-broker-ingress", "mt-broker-filter"} {
		if err := k.markAvailable(ctx, SystemNamespace, d, 1); err != nil {
			return err
		}
	}
	return nil
}

// routeWebhook points a CRD's conversion webhook at the local webhook's port.
func (k *Knative) routeWebhook(crd *unstructured.Unstructured) {
	svc, found, _ := unstructured.NestedMap(crd.Object, "spec", "conversion", "webhook", "clientConfig", "service")
	if !found {
		return
	}
	svc["port"] = int64(k.ports.webhook)
	_ = unstructured.SetNestedMap(crd.Object, svc, "spec", "conversion", "webhook", "clientConfig", "service")
}

// webhookService makes eventing-webhook.knative-eventing an ExternalName for localhost: the API
// server then calls https://localhost:<port> and checks the certificate against
// eventing-webhook.knative-eventing.svc, the name Knative's certificate controller issues.
func (k *Knative) webhookService(ctx context.Context) error {
	svc := &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: "eventing-webhook", Namespace: SystemNamespace},
		Spec:       corev1.ServiceSpec{Type: corev1.ServiceTypeExternalName, ExternalName: "localhost"},
	}
	_, err := k.kube.CoreV1().Services(SystemNamespace).Create(ctx, svc, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

func port(name string, p int) discoveryv1.EndpointPort {
	return discoveryv1.EndpointPort{Name: ptr.To(name), Port: ptr.To(int32(p)), Protocol: ptr.To(corev1.ProtocolTCP)}
}

// publishEndpoints writes the EndpointSlice a kubelet and the EndpointSlice controller would. The
// API server refuses loopback addresses, so the address is a placeholder (TEST-NET-1); readiness
// rules need only a ready endpoint, and the service proxy uses only the port.
func (k *Knative) publishEndpoints(ctx context.Context, namespace, service string, ports []discoveryv1.EndpointPort) error {
	es := &discoveryv1.EndpointSlice{
		ObjectMeta: metav1.ObjectMeta{Name: service + "-local", Namespace: namespace, Labels: map[string]string{
			discoveryv1.LabelServiceName: service, discoveryv1.LabelManagedBy: "scoreflow-knlocal"}},
		AddressType: discoveryv1.AddressTypeIPv4,
		Endpoints:   []discoveryv1.Endpoint{{Addresses: []string{"192.0.2.1"}, Conditions: discoveryv1.EndpointConditions{Ready: ptr.To(true)}}},
		Ports:       ports,
	}
	_, err := k.kube.DiscoveryV1().EndpointSlices(namespace).Create(ctx, es, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// markAvailable writes the Deployment status a kubelet and the Deployment controller would once
// the pods run.
func (k *Knative) markAvailable(ctx context.Context, namespace, name string, replicas int32) error {
	now := metav1.Now()
	patch := fmt.Sprintf(`{"status":{"observedGeneration":%d,"replicas":%d,"readyReplicas":%d,"availableReplicas":%d,"updatedReplicas":%d,"unavailableReplicas":0,`+
		`"conditions":[{"type":"Available","status":"True","reason":"MinimumReplicasAvailable","message":"local process","lastUpdateTime":%q,"lastTransitionTime":%q}]}}`,
		1<<30, replicas, replicas, replicas, replicas, now.UTC().Format(time.RFC3339), now.UTC().Format(time.RFC3339))
	// observedGeneration must not trail the generation; a large value always satisfies the rule.
	_, err := k.kube.AppsV1().Deployments(namespace).Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}, "status")
	return err
}

// registerWebhooks registers Knative's webhook configurations on the local webhook's port, then
// waits until the webhook has filled in their CA bundles and admits a Broker.
func (k *Knative) registerWebhooks(ctx context.Context, dir string) error {
	objs, err := ReadFiles(
		filepath.Join(dir, "defaulting.yaml"), filepath.Join(dir, "resource-validation.yaml"),
		filepath.Join(dir, "config-validation.yaml"), filepath.Join(dir, "sinkbindings.yaml"))
	if err != nil {
		return err
	}
	for _, o := range objs {
		hooks, _, _ := unstructured.NestedSlice(o.Object, "webhooks")
		for i := range hooks {
			h := hooks[i].(map[string]any)
			if svc, ok, _ := unstructured.NestedMap(h, "clientConfig", "service"); ok {
				svc["port"] = int64(k.ports.webhook)
				_ = unstructured.SetNestedMap(h, svc, "clientConfig", "service")
			}
		}
		_ = unstructured.SetNestedSlice(o.Object, hooks, "webhooks")
	}
	if err := k.Applier.Apply(ctx, objs...); err != nil {
		return err
	}
	probe := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "eventing.knative.dev/v1", "kind": "Broker",
		"metadata": map[string]any{"name": "admission-probe", "namespace": SystemNamespace},
	}}
	ri, err := k.Applier.Resource(schema.GroupVersionKind{Group: "eventing.knative.dev", Version: "v1", Kind: "Broker"}, SystemNamespace)
	if err != nil {
		return err
	}
	var last error
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, 90*time.Second, true, func(ctx context.Context) (bool, error) {
		got, err := ri.Create(ctx, probe, metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}})
		if err != nil {
			last = err
			return false, nil
		}
		// Admitted by the webhook: it defaulted the broker's config.
		if _, ok, _ := unstructured.NestedMap(got.Object, "spec", "config"); !ok {
			last = fmt.Errorf("the broker was not defaulted: the webhook is not in the path yet")
			return false, nil
		}
		return true, nil
	})
	if err != nil {
		return fmt.Errorf("the Knative webhook does not admit objects (last: %v; logs: %s)", last, k.LogDir)
	}
	return nil
}

// waitEstablished waits until every CRD among objs is served.
func (k *Knative) waitEstablished(ctx context.Context, objs []*unstructured.Unstructured) error {
	crdGVK := schema.GroupVersionKind{Group: "apiextensions.k8s.io", Version: "v1", Kind: "CustomResourceDefinition"}
	ri, err := k.Applier.Resource(crdGVK, "")
	if err != nil {
		return err
	}
	for _, o := range objs {
		if o.GroupVersionKind() != crdGVK {
			continue
		}
		err := wait.PollUntilContextTimeout(ctx, 50*time.Millisecond, 30*time.Second, true, func(ctx context.Context) (bool, error) {
			got, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
			if err != nil {
				return false, nil
			}
			return conditionTrue(got, "Established"), nil
		})
		if err != nil {
			return fmt.Errorf("CRD %s not established: %w", o.GetName(), err)
		}
	}
	return nil
}

// conditionTrue reports whether status.conditions has type t with status True.
func conditionTrue(o *unstructured.Unstructured, t string) bool {
	conds, _, _ := unstructured.NestedSlice(o.Object, "status", "conditions")
	for _, c := range conds {
		m, ok := c.(map[string]any)
		if ok && m["type"] == t && m["status"] == "True" {
			return true
		}
	}
	return false
}
