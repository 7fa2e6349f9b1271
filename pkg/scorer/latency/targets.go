package latency

import (
	"errors"
	"fmt"
	"os"

	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// MaxTargets bounds a targets file.
const MaxTargets = 1000

// TargetsFile is the list of what pings may make the scorer measure (--targets-file, a mounted
// ConfigMap): its administrator's, not the sender's, choice.
type TargetsFile struct {
	Targets []AllowedTarget `json:"targets"`
}

// AllowedTarget is one URL a ping may name, and the cluster whose score it measures.
type AllowedTarget struct {
	URL string `json:"url"`
	// Cluster is the only cluster an entry measuring URL may score. Required on the hub, where
	// a URL is an endpoint of one cluster; in agent mode it may be left out (the agent's own).
	Cluster string `json:"cluster,omitempty"`
}

// Allowlist maps each URL a ping may name to the cluster it scores ("": any, agent mode only).
type Allowlist map[string]string

// LoadTargets reads a targets file (JSON or YAML, strictly) for a scorer running on agentCluster
// ("" on the hub). A missing path allows nothing.
func LoadTargets(path, agentCluster string) (Allowlist, error) {
	a := Allowlist{}
	if path == "" {
		return a, nil
	}
	b, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("targets file: %w", err)
	}
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return nil, fmt.Errorf("targets file %s: %w", path, err)
	}
	var f TargetsFile
	if err := contract.DecodeJSON(j, &f); err != nil {
		return nil, fmt.Errorf("targets file %s: %w", path, err)
	}
	if len(f.Targets) > MaxTargets {
		return nil, fmt.Errorf("targets file %s: %d targets, more than %d", path, len(f.Targets), MaxTargets)
	}
	for i, t := range f.Targets {
		at := fmt.Sprintf("targets file %s: targets[%d]", path, i)
		if err := validURL(t.URL); err != nil {
			return nil, fmt.Errorf("%s.url: %w", at, err)
		}
		switch {
		case t.Cluster == "" && agentCluster == "":
			return nil, fmt.Errorf("%s.cluster: required on the hub (which cluster's endpoint is %s?)", at, redact(t.URL))
		case t.Cluster != "" && agentCluster != "" && t.Cluster != agentCluster:
			return nil, fmt.Errorf("%s.cluster: %q, but this scorer runs on cluster %q", at, t.Cluster, agentCluster)
		case t.Cluster != "":
			if err := contract.ValidateClusterName(t.Cluster); err != nil {
				return nil, fmt.Errorf("%s.cluster: %v", at, err)
			}
		}
		if _, dup := a[t.URL]; dup {
			return nil, fmt.Errorf("%s: %s is listed twice", at, redact(t.URL))
		}
		a[t.URL] = t.Cluster
	}
	return a, nil
}

// Add allows every entry of a resolved configuration: the agent's own configuration file, which
// its deployment mounts, names what it may measure.
func (a Allowlist) Add(cfg Config) {
	for _, t := range cfg.Latencies {
		if _, ok := a[t.URL]; !ok {
			a[t.URL] = t.Cluster
		}
	}
}

// Check refuses a resolved configuration with an entry whose URL is not exactly one on the list, or
// that scores another cluster than the list gives its URL.
func (a Allowlist) Check(cfg Config) error {
	var errs []error
	for i, t := range cfg.Latencies {
		cluster, ok := a[t.URL]
		switch {
		case !ok:
			errs = append(errs, fmt.Errorf("latencies[%d].url: %s is not a target this scorer's deployment allows (its --targets-file)", i, redact(t.URL)))
		case cluster != "" && cluster != t.Cluster:
			errs = append(errs, fmt.Errorf("latencies[%d].cluster: %q, but this scorer's deployment has %s score cluster %q", i, t.Cluster, redact(t.URL), cluster))
		}
	}
	return errors.Join(errs...)
}
