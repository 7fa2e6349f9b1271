package agentgateway

import (
	"fmt"
	"os"
	"slices"

	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Agent is one row of the gateway's table: the agents of one OCM addon, and what they may send.
type Agent struct {
	// Addon is the addon's name: its ManagedClusterAddOn in each cluster's namespace, and the hub
	// ServiceAccount <cluster>/<addon> its agents' tokens are of (pkg/hubtoken).
	Addon string `json:"addon"`
	// Types are the event types its agents may send.
	Types []string `json:"types"`
	// Resources, when the table fixes them, are the AddOnPlacementScore resources they may score.
	Resources []string `json:"resources,omitempty"`
	// ResourcesFrom, instead, names the hub objects that decide them, so that whoever may edit
	// those decides what the agents may score, not the gateway's deployment.
	ResourcesFrom *ResourcesFrom `json:"resourcesFrom,omitempty"`
}

// ResourcesFrom says where on the hub an addon's resources come from: its AddOnTemplate, read one
// of the ways below (exactly one is set).
type ResourcesFrom struct {
	// AddOnTemplate names the addon's AddOnTemplate (cluster-scoped), the one its
	// ClusterManagementAddOn installs.
	AddOnTemplate string `json:"addOnTemplate"`
	// LatencyConfig: the resource of the latency agent's configuration (package
	// pkg/scorer/latency), which the template ships as a key of a ConfigMap: what the agent scores
	// and what it may send are one value.
	LatencyConfig *ConfigMapKey `json:"latencyConfig,omitempty"`
	// DynamicScorers: the resources the hub's DynamicScorers produce (dsf.AgentResource), in the
	// one namespace where the template's registration lets its agents read them (a hub permission
	// of type SingleNamespace). A DynamicScorer with scoreDestination None produces none.
	DynamicScorers bool `json:"dynamicScorers,omitempty"`
}

// ConfigMapKey names a key of a ConfigMap among an AddOnTemplate's manifests.
type ConfigMapKey struct {
	ConfigMap string `json:"configMap"`
	Key       string `json:"key"`
}

// Table is the gateway's deployment's list of agents.
type Table struct {
	Agents []Agent `json:"agents"`
}

// Types the gateway knows how to check against the sender's cluster.
var checkable = []string{contract.TypeScoreUpdated}

// LoadTable reads a table (YAML or JSON, decoded strictly: a misspelt field is an error).
func LoadTable(path string) (*Table, error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("agents table: %w", err)
	}
	var t Table
	if err := yaml.UnmarshalStrict(raw, &t); err != nil {
		return nil, fmt.Errorf("agents table %s: %w", path, err)
	}
	if err := t.Validate(); err != nil {
		return nil, fmt.Errorf("agents table %s: %w", path, err)
	}
	return &t, nil
}

// Validate refuses a table the gateway could not enforce.
func (t *Table) Validate() error {
	if len(t.Agents) == 0 {
		return fmt.Errorf("no agents")
	}
	seen := map[string]bool{}
	for i, a := range t.Agents {
		if errs := validation.IsDNS1123Subdomain(a.Addon); len(errs) > 0 {
			return fmt.Errorf("agents[%d].addon %q: %v", i, a.Addon, errs)
		}
		if seen[a.Addon] {
			return fmt.Errorf("agents[%d]: addon %q appears twice", i, a.Addon)
		}
		seen[a.Addon] = true
		if len(a.Types) == 0 {
			return fmt.Errorf("agents[%d] (%s): name at least one type", i, a.Addon)
		}
		if (len(a.Resources) == 0) == (a.ResourcesFrom == nil) {
			return fmt.Errorf("agents[%d] (%s): name its resources or where they come from (resourcesFrom), one of the two", i, a.Addon)
		}
		if a.ResourcesFrom != nil {
			if err := a.ResourcesFrom.validate(); err != nil {
				return fmt.Errorf("agents[%d] (%s).resourcesFrom: %v", i, a.Addon, err)
			}
		}
		for _, typ := range a.Types {
			if !slices.Contains(checkable, typ) {
				return fmt.Errorf("agents[%d] (%s): type %q: the gateway can check only %v against the sender's cluster", i, a.Addon, typ, checkable)
			}
		}
		for _, r := range a.Resources {
			if err := contract.ValidateResourceName(r); err != nil {
				return fmt.Errorf("agents[%d] (%s): %v", i, a.Addon, err)
			}
		}
	}
	return nil
}

func (f *ResourcesFrom) validate() error {
	if errs := validation.IsDNS1123Subdomain(f.AddOnTemplate); len(errs) > 0 {
		return fmt.Errorf("addOnTemplate %q: %v", f.AddOnTemplate, errs)
	}
	if (f.LatencyConfig != nil) == f.DynamicScorers {
		return fmt.Errorf("set one of latencyConfig and dynamicScorers")
	}
	if c := f.LatencyConfig; c != nil {
		if errs := validation.IsDNS1123Subdomain(c.ConfigMap); len(errs) > 0 {
			return fmt.Errorf("latencyConfig.configMap %q: %v", c.ConfigMap, errs)
		}
		if errs := validation.IsConfigMapKey(c.Key); len(errs) > 0 {
			return fmt.Errorf("latencyConfig.key %q: %v", c.Key, errs)
		}
	}
	return nil
}

// agent is the row of addon, or nil.
func (t *Table) agent(addon string) *Agent {
	for i := range t.Agents {
		if t.Agents[i].Addon == addon {
			return &t.Agents[i]
		}
	}
	return nil
}
