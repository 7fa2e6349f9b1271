// Package tools finds the real servers that `make tools` builds (tools/build.sh) into a cache
// outside the clone.
package tools

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// Names of the binaries `make tools` builds.
const (
	Etcd          = "etcd"
	KubeAPIServer = "kube-apiserver"
	// KubeControllerManager is Kubernetes' controller manager, built from kube-apiserver's pinned
	// module; the local hub runs only its garbage collector.
	KubeControllerManager = "kube-controller-manager"
	Prometheus            = "prometheus"
	// PrometheusKubernetesSD is Prometheus with its Kubernetes service discovery, which Prometheus
	// leaves out: for the scrape configuration the Prometheus Operator renders (monitoring/).
	PrometheusKubernetesSD = "prometheus-kubernetes-sd"
	Placement              = "placement"
	// AddonManager is OCM's addon manager (ocm cmd/addon), built from the placement controller's
	// pinned module.
	AddonManager = "addon-manager"
	// Knative is a directory: one binary per Knative Eventing main (knative.dev/eventing/cmd/...).
	Knative = "knative"
	// GovernancePolicyPropagator is the governance policy framework's hub controller.
	GovernancePolicyPropagator = "governance-policy-propagator"
	// Jaeger is Jaeger's all-in-one: an OTLP receiver, an in-memory trace store and its query API.
	Jaeger = "jaeger"
)

// ForRun are the tools `scoreflow run` (harness/devrun) starts: `make run` builds only these
// (the Makefile's RUN_TOOLS), so a first run does not wait for the servers only tests use.
var ForRun = []string{Etcd, KubeAPIServer, Prometheus, Placement, Knative}

// BinDir is where `make tools` puts binaries: $SCOREFLOW_CACHE/bin, by default
// ${XDG_CACHE_HOME:-$HOME/.cache}/scoreflow/bin (the same rule as tools/build.sh).
func BinDir() string {
	if d := os.Getenv("SCOREFLOW_CACHE"); d != "" {
		return filepath.Join(d, "bin")
	}
	base := os.Getenv("XDG_CACHE_HOME")
	if base == "" {
		home, err := os.UserHomeDir()
		if err != nil {
			home = os.TempDir()
		}
		base = filepath.Join(home, ".cache")
	}
	return filepath.Join(base, "scoreflow", "bin")
}

// Missing returns an error naming every tool of names that is not built, with the command that
// builds them; nil when all are there.
func Missing(names ...string) error {
	var missing []string
	for _, n := range names {
		p := filepath.Join(BinDir(), n)
		if n == Knative {
			p = filepath.Join(p, "controller") // one of the directory's binaries
		}
		if st, err := os.Stat(p); err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
			missing = append(missing, n)
		}
	}
	if len(missing) == 0 {
		return nil
	}
	return fmt.Errorf("not built in %s: %s: run `make tools` (or tools/build.sh %s) first",
		BinDir(), strings.Join(missing, ", "), strings.Join(missing, " "))
}

// Path returns the path of a built tool, or an error that says how to build it.
func Path(name string) (string, error) {
	p := filepath.Join(BinDir(), name)
	st, err := os.Stat(p)
	if err != nil || st.IsDir() || st.Mode()&0o111 == 0 {
		return "", fmt.Errorf("%s is not built at %s: run `make tools` (or tools/build.sh %s) first", name, p, name)
	}
	return p, nil
}
