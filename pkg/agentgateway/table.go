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
	// Resources are the AddOnPlacementScore resources they may score.
	Resources []string `json:"resources"`
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
		if len(a.Types) == 0 || len(a.Resources) == 0 {
			return fmt.Errorf("agents[%d] (%s): name at least one type and one resource", i, a.Addon)
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

// agent is the row of addon, or nil.
func (t *Table) agent(addon string) *Agent {
	for i := range t.Agents {
		if t.Agents[i].Addon == addon {
			return &t.Agents[i]
		}
	}
	return nil
}
