package contract

import (
	"fmt"
	"regexp"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
)

// reservedNamespaces and reservedPrefixes are the hub's own namespaces, never a managed cluster's,
// whatever ManagedClusters exist: anyone holding a bootstrap token can create a ManagedCluster
// (pending acceptance) with any name, and the writer must never put objects in these.
var (
	reservedNamespaces = map[string]bool{"default": true, "scoreflow": true, "monitoring": true}
	reservedPrefixes   = []string{"kube-", "knative-", "open-cluster-management"}
)

// ReservedClusterNames describes the names ValidateClusterName refuses as hub namespaces.
const ReservedClusterNames = "default, scoreflow, monitoring, kube-*, knative-*, open-cluster-management*"

// echo quotes a name a sender chose for a message, cut to what a valid name could be: answers and
// logs cost what a valid name costs, whatever was sent.
func echo(s string) string { return fmt.Sprintf("%q", Truncate(s, 80)) }

// ValidateClusterName checks that name can be a managed cluster's namespace on the hub: a DNS-1123
// label that is not one of the hub's own namespaces (ReservedClusterNames).
func ValidateClusterName(name string) error {
	if isDNS1123Label(name) {
		if IsHubNamespace(name) {
			return fmt.Errorf("%q is a hub namespace (%s), not a managed cluster", name, ReservedClusterNames)
		}
		return nil
	}
	// Not a label: the slow path only words the error.
	if len(name) > validation.DNS1123LabelMaxLength {
		return fmt.Errorf("%s is not a valid cluster name: %d characters, more than %d", echo(name), len(name), validation.DNS1123LabelMaxLength)
	}
	if errs := validation.IsDNS1123Label(name); len(errs) > 0 {
		return fmt.Errorf("%s is not a valid cluster name: %s", echo(name), strings.Join(errs, "; "))
	}
	if IsHubNamespace(name) {
		return fmt.Errorf("%q is a hub namespace (%s), not a managed cluster", name, ReservedClusterNames)
	}
	return nil
}

// isDNS1123Label is validation.IsDNS1123Label without its regular expression (a scorer checks
// every cluster of a fleet on every evaluation): 1 to 63 of [a-z0-9-], starting and ending with a
// letter or digit.
func isDNS1123Label(s string) bool {
	if len(s) == 0 || len(s) > validation.DNS1123LabelMaxLength {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', '0' <= c && c <= '9':
		case c == '-' && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

// IsHubNamespace reports whether name is reserved for the hub's own namespaces.
func IsHubNamespace(name string) bool {
	if reservedNamespaces[name] {
		return true
	}
	for _, p := range reservedPrefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}

// ValidateResourceName checks an AddOnPlacementScore name (a DNS-1123 subdomain, like any object name).
func ValidateResourceName(name string) error {
	if len(name) > validation.DNS1123SubdomainMaxLength {
		return fmt.Errorf("%s is not a valid AddOnPlacementScore name: %d characters, more than %d", echo(name), len(name), validation.DNS1123SubdomainMaxLength)
	}
	if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
		return fmt.Errorf("%s is not a valid AddOnPlacementScore name: %s", echo(name), strings.Join(errs, "; "))
	}
	return nil
}

// MaxScoreNameLength bounds a score name. The CRD itself accepts any string; Placements name scores
// in spec.prioritizerPolicy, so names stay short, printable and free of separators.
const MaxScoreNameLength = 253

// ScoreNamePattern is the pattern score names must match (also in the JSON Schemas). It admits
// names such as cpuAvailable, free-capacity, ResourceRatioCPU and the "${app};${device}" names of
// the Dynamic Scoring Framework once filled in (app1;gpu0).
const ScoreNamePattern = `^[A-Za-z0-9]([A-Za-z0-9._:;@+=-]*[A-Za-z0-9])?$`

// ValidateScoreName checks one score item name.
func ValidateScoreName(name string) error {
	switch {
	case name == "":
		return fmt.Errorf("score name is empty")
	case len(name) > MaxScoreNameLength:
		return fmt.Errorf("score name is %d characters long, more than %d", len(name), MaxScoreNameLength)
	case !isScoreName(name):
		return fmt.Errorf("%s is not a valid score name: use letters, digits and . _ : ; @ + = -, starting and ending with a letter or digit", echo(name))
	}
	return nil
}

// isScoreName is ScoreNamePattern without a regular expression (every score of every cluster is
// checked, at the scorer and again at the writer).
func isScoreName(s string) bool {
	if len(s) == 0 {
		return false
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case 'a' <= c && c <= 'z', 'A' <= c && c <= 'Z', '0' <= c && c <= '9':
		case strings.IndexByte("._:;@+=-", c) >= 0 && i > 0 && i < len(s)-1:
		default:
			return false
		}
	}
	return true
}

var (
	metricNamePattern = regexp.MustCompile(`^[a-zA-Z_:][a-zA-Z0-9_:]*$`)
	labelNamePattern  = regexp.MustCompile(`^[a-zA-Z_][a-zA-Z0-9_]*$`)
)

// ValidateMetricName checks a Prometheus metric name.
func ValidateMetricName(name string) error {
	if !metricNamePattern.MatchString(name) {
		return fmt.Errorf("%s is not a valid Prometheus metric name", echo(name))
	}
	return nil
}

// ValidateLabelName checks a Prometheus label name.
func ValidateLabelName(name string) error {
	if !labelNamePattern.MatchString(name) {
		return fmt.Errorf("%s is not a valid Prometheus label name", echo(name))
	}
	return nil
}
