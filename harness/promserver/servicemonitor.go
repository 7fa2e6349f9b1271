package promserver

import (
	"encoding/json"
	"fmt"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/yaml"
)

// ServiceMonitor is the part of the Prometheus Operator's ServiceMonitor that DSF's uses (one
// label selector, namespaces by name, endpoints by port name and interval).
type ServiceMonitor struct {
	APIVersion string            `json:"apiVersion"`
	Kind       string            `json:"kind"`
	Metadata   metav1.ObjectMeta `json:"metadata"`
	Spec       struct {
		Selector          metav1.LabelSelector `json:"selector"`
		NamespaceSelector struct {
			MatchNames []string `json:"matchNames"`
		} `json:"namespaceSelector"`
		Endpoints []struct {
			Port     string `json:"port"`
			Interval string `json:"interval"`
		} `json:"endpoints"`
	} `json:"spec"`
}

// ParseServiceMonitor decodes a ServiceMonitor (YAML or JSON) strictly: a field it does not model
// is an error, so that what the scrape configuration leaves out is never silently ignored.
func ParseServiceMonitor(b []byte) (ServiceMonitor, error) {
	var sm ServiceMonitor
	err := yaml.UnmarshalStrict(b, &sm)
	return sm, err
}

// ScrapeConfigs are the scrape_configs the Prometheus Operator renders from sm, as its
// configuration generator does (prometheus-operator pkg/prometheus/promcfg.go,
// generateServiceMonitorConfig; golden file NoEnforcedNamespaceLabelServiceMonitor_Expected.golden):
// Kubernetes endpoints discovery in the selected namespaces, the Service kept by its labels, the
// endpoint's port kept by name, node, pod, namespace, service, container, job and endpoint labels,
// and hash-mod sharding (one shard). sd is added to the discovery: the API server and credentials.
// Run them with RunTool(tools.PrometheusKubernetesSD, ...).
func (sm ServiceMonitor) ScrapeConfigs(sd string) (string, error) {
	var keep []string
	for k, v := range sm.Spec.Selector.MatchLabels {
		name := strings.NewReplacer(".", "_", "/", "_", "-", "_").Replace(k)
		keep = append(keep, fmt.Sprintf(`  - action: keep
    source_labels: [__meta_kubernetes_service_label_%[1]s, __meta_kubernetes_service_labelpresent_%[1]s]
    regex: (%[2]s);true
`, name, v))
	}
	if len(keep) != 1 || len(sm.Spec.Selector.MatchExpressions) > 0 {
		return "", fmt.Errorf("ServiceMonitor %s: the selector %+v is not one label, as DSF's is", sm.Metadata.Name, sm.Spec.Selector)
	}
	var b strings.Builder
	for i, ep := range sm.Spec.Endpoints {
		names, _ := json.Marshal(sm.Spec.NamespaceSelector.MatchNames)
		fmt.Fprintf(&b, `- job_name: serviceMonitor/%[1]s/%[2]s/%[3]d
  honor_labels: false
  kubernetes_sd_configs:
  - role: endpoints
    namespaces:
      names: %[4]s
%[5]s
  scrape_interval: %[6]s
  relabel_configs:
  - source_labels: [job]
    target_label: __tmp_prometheus_job_name
%[7]s  - action: keep
    source_labels: [__meta_kubernetes_endpoint_port_name]
    regex: %[8]s
  - source_labels: [__meta_kubernetes_endpoint_address_target_kind, __meta_kubernetes_endpoint_address_target_name]
    separator: ;
    regex: Node;(.*)
    replacement: ${1}
    target_label: node
  - source_labels: [__meta_kubernetes_endpoint_address_target_kind, __meta_kubernetes_endpoint_address_target_name]
    separator: ;
    regex: Pod;(.*)
    replacement: ${1}
    target_label: pod
  - source_labels: [__meta_kubernetes_namespace]
    target_label: namespace
  - source_labels: [__meta_kubernetes_service_name]
    target_label: service
  - source_labels: [__meta_kubernetes_pod_name]
    target_label: pod
  - source_labels: [__meta_kubernetes_pod_container_name]
    target_label: container
  - action: drop
    source_labels: [__meta_kubernetes_pod_phase]
    regex: (Failed|Succeeded)
  - source_labels: [__meta_kubernetes_service_name]
    target_label: job
    replacement: ${1}
  - target_label: endpoint
    replacement: %[8]s
  - source_labels: [__address__]
    target_label: __tmp_hash
    modulus: 1
    action: hashmod
  - source_labels: [__tmp_hash]
    regex: 0
    action: keep
`, sm.Metadata.Namespace, sm.Metadata.Name, i, names, sd, ep.Interval, strings.Join(keep, ""), ep.Port)
	}
	return b.String(), nil
}
