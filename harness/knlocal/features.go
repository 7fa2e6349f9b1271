package knlocal

import (
	"context"
	"encoding/json"
	"fmt"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
)

// Feature flags of Knative Eventing (config-features), for Options.Features.
const (
	FeatureOIDC                     = "authentication-oidc"
	FeatureDefaultAuthorizationMode = "default-authorization-mode"
	FeatureOIDCDiscoveryBaseURL     = "oidc-discovery-base-url"
)

// OIDCFeatures turn on sender identity with every sender refused unless an EventPolicy admits it
// (default-authorization-mode deny-all; Knative's own default admits the whole namespace).
func OIDCFeatures() map[string]string {
	return map[string]string{FeatureOIDC: "enabled", FeatureDefaultAuthorizationMode: "deny-all"}
}

// trustBundle is the ConfigMap through which Knative's data plane trusts the hub's API server
// when it reads OIDC discovery from a URL of its own (eventingtls trust bundles).
const trustBundle = "scoreflow-hub-ca"

// configureFeatures sets config-features before Knative starts. With sender identity on it also
// does what a cluster provides: Knative reads the API server's OIDC discovery and keys at the
// hub's own address (not kubernetes.default.svc, which no local DNS resolves) and trusts the
// hub's CA; anonymous callers may read discovery, as the Kubernetes documentation suggests for
// token verifiers (ClusterRole system:service-account-issuer-discovery); and the API server
// publishes its keys at an address a local process reaches (--service-account-jwks-uri).
func (k *Knative) configureFeatures(ctx context.Context, features map[string]string) error {
	if len(features) == 0 {
		return nil
	}
	data := map[string]string{}
	for key, v := range features {
		data[key] = v
	}
	if data[FeatureOIDC] == "enabled" {
		if _, ok := data[FeatureOIDCDiscoveryBaseURL]; !ok {
			data[FeatureOIDCDiscoveryBaseURL] = strings.TrimSuffix(k.hub.Config.Host, "/") + "/"
		}
		if err := k.hub.PublishKeysAtHost(); err != nil {
			return err
		}
		if err := k.hub.WaitForAPI(ctx, time.Minute); err != nil {
			return err
		}
		if err := k.allowAnonymousDiscovery(ctx); err != nil {
			return err
		}
		// The identity the broker ingress sends to its channel with.
		sa := &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "mt-broker-ingress-oidc", Namespace: SystemNamespace}}
		if _, err := k.kube.CoreV1().ServiceAccounts(SystemNamespace).Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
		cm := &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: trustBundle, Namespace: SystemNamespace,
				Labels: map[string]string{"networking.knative.dev/trust-bundle": "true"}},
			Data: map[string]string{"ca.crt": string(k.hub.Config.CAData)},
		}
		if _, err := k.kube.CoreV1().ConfigMaps(SystemNamespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return err
		}
	}
	patch, _ := json.Marshal(map[string]any{"data": data})
	if _, err := k.kube.CoreV1().ConfigMaps(SystemNamespace).Patch(ctx, "config-features", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("config-features: %w", err)
	}
	return nil
}

func (k *Knative) allowAnonymousDiscovery(ctx context.Context) error {
	crb := &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "scoreflow-knlocal-oidc-discovery"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "ClusterRole", Name: "system:service-account-issuer-discovery"},
		Subjects:   []rbacv1.Subject{{APIGroup: "rbac.authorization.k8s.io", Kind: "Group", Name: "system:unauthenticated"}},
	}
	_, err := k.kube.RbacV1().ClusterRoleBindings().Create(ctx, crb, metav1.CreateOptions{})
	if apierrors.IsAlreadyExists(err) {
		return nil
	}
	return err
}

// reloadDiscovery makes Knative's data plane read OIDC discovery again once it runs. Its verifier
// reads discovery only when config-features changes, and the first read races the informer of
// the trust-bundle ConfigMaps (the hub's CA is not trusted yet, and it never retries). Changing
// the discovery URL between two spellings of the same address (with and without the trailing
// slash) is a change it acts on.
func (k *Knative) reloadDiscovery(ctx context.Context, features map[string]string) error {
	if features[FeatureOIDC] != "enabled" || features[FeatureOIDCDiscoveryBaseURL] != "" {
		return nil
	}
	url := strings.TrimSuffix(k.hub.Config.Host, "/")
	patch, _ := json.Marshal(map[string]any{"data": map[string]string{FeatureOIDCDiscoveryBaseURL: url}})
	_, err := k.kube.CoreV1().ConfigMaps(SystemNamespace).Patch(ctx, "config-features", types.MergePatchType, patch, metav1.PatchOptions{})
	return err
}

// configureObservability sets config-observability's keys before Knative starts (its processes
// read it once, when they start).
func (k *Knative) configureObservability(ctx context.Context, data map[string]string) error {
	if len(data) == 0 {
		return nil
	}
	patch, _ := json.Marshal(map[string]any{"data": data})
	if _, err := k.kube.CoreV1().ConfigMaps(SystemNamespace).Patch(ctx, "config-observability", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("config-observability: %w", err)
	}
	return nil
}

// TracingTo is the config-observability that has Knative's data plane export the spans of every
// trace its caller sampled over OTLP/HTTP to endpoint. The rate is just under 1 because at 1
// Knative records every span whatever the caller decided, and below it samples as its caller did
// (parent based, as scoreflow's functions do): a trace a producer did not sample then costs no
// span at any hop, which is how the end-to-end benchmark measures latency with tracing and without
// in one run. Traces that start inside Knative are sampled at 0.99.
func TracingTo(endpoint string) map[string]string {
	return map[string]string{"tracing-protocol": "http/protobuf", "tracing-endpoint": endpoint, "tracing-sampling-rate": "0.99"}
}
