package contract

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// reservedNamespaces are hub namespaces that are never a managed cluster's, whatever objects exist.
var reservedNamespaces = map[string]bool{
	"default": true, "kube-system": true, "kube-public": true, "kube-node-lease": true,
}

// ValidateClusterName checks that name can be a managed cluster's namespace on the hub: a DNS-1123
// label that is not one of the hub's own namespaces.
func ValidateClusterName(name string) error {
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%q is not a valid cluster name: %s", name, strings.Join(errs, "; "))
	}
	if reservedNamespaces[name] || strings.HasPrefix(name, "open-cluster-management") {
		return fmt.Errorf("%q is a hub namespace, not a managed cluster", name)
	}
	return nil
}

// ValidateResourceName checks an AddOnPlacementScore name (a DNS-1123 subdomain, like any object name).
func ValidateResourceName(name string) error {
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%q is not a valid AddOnPlacementScore name: %s", name, strings.Join(errs, "; "))
	}
	return nil
}

// MaxScoreNameLength bounds a score name. The CRD itself accepts any string; Placements name scores
// in spec.prioritizerPolicy, so names stay short, printable and free of separators.
const MaxScoreNameLength = 253

// scoreNamePattern admits names such as cpuAvailable, free-capacity, ResourceRatioCPU and the
// "${app};${device}" names of the Dynamic Scoring Framework once filled in (app1;gpu0).
var scoreNamePattern = regexp.MustCompile(`^[A-Za-z0-9]([A-Za-z0-9._:;@+=-]*[A-Za-z0-9])?$`)

// ScoreNamePattern is the pattern score names must match (also in the JSON Schemas).
const ScoreNamePattern = `^[A-Za-z0-9]([A-Za-z0-9._:;@+=-]*[A-Za-z0-9])?$`

// ValidateScoreName checks one score item name.
func ValidateScoreName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("score name is empty")
	case len(name) > MaxScoreNameLength:
		return fmt.Errorf("score name is %d characters long, more than %d", len(name), MaxScoreNameLength)
	case !scoreNamePattern.MatchString(name):
		return fmt.Errorf("%q is not a valid score name: use letters, digits and . _ : ; @ + = -, starting and ending with a letter or digit", name)
	}
	return nil
}

var (
	metricNamePattern = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNamePattern  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// ValidateMetricName checks a Prometheus metric name.
func ValidateMetricName(name string) error {
	if !metricNamePattern.MatchString(name) {
		return fmt.Errorf("%q is not a valid Prometheus metric name", name)
	}
	return nil
}

// ValidateLabelName checks a Prometheus label name.
func ValidateLabelName(name string) error {
	if !labelNamePattern.MatchString(name) {
		return fmt.Errorf("%q is not a valid Prometheus label name", name)
	}
	return nil
}
