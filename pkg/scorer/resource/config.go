package resource

import (
	"errors"
	"fmt"
	"regexp"
	"strings"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
)

// Config is the resource scorer's configuration: a PingSource's data, or --metric-config for
// metric.changed events. Every field is optional; DefaultConfig says what is assumed.
//
//	{"resource": "gpu-usage-score", "scores": ["free-capacity"], "selector": "job=\"kube-state-metrics\""}
type Config struct {
	// Resource is the AddOnPlacementScore to write. Default resource-usage-score.
	Resource string `json:"resource,omitempty"`
	// Scores are the score names to emit, in this order (see the package doc). Default
	// cpuAvailable, memAvailable, gpuAvailable, cpuAvailableRatio, memAvailableRatio, gpuAvailableRatio.
	Scores []string `json:"scores,omitempty"`
	// ClusterLabel is the series label naming the managed cluster. Default cluster.
	ClusterLabel string `json:"clusterLabel,omitempty"`
	// Selector is extra label matchers added to every series selector, e.g. job="kube-state-metrics".
	Selector string `json:"selector,omitempty"`
	// GPUResource is kube-state-metrics' name of the GPU resource. Default nvidia_com_gpu
	// (nvidia.com/gpu with the dots sanitised); amd_com_gpu for AMD.
	GPUResource string `json:"gpuResource,omitempty"`
	// Bounds of the absolute scores: an amount at Min scores -100, at Max 100, linearly between and
	// clamped outside.
	Bounds Bounds `json:"bounds,omitzero"`
}

// Bounds per resource, in kube-state-metrics units: cores, bytes, devices.
type Bounds struct {
	CPU    *Bound `json:"cpu,omitempty"`
	Memory *Bound `json:"memory,omitempty"`
	GPU    *Bound `json:"gpu,omitempty"`
}

// Bound is a linear normalisation range.
type Bound struct {
	Min float64 `json:"min"`
	Max float64 `json:"max"`
}

// Defaults. The bounds suit a mid-size cluster; set them to the range of your fleet, or every
// large cluster scores 100.
const (
	DefaultResource     = "resource-usage-score"
	DefaultClusterLabel = "cluster"
	DefaultGPUResource  = "nvidia_com_gpu"
	DefaultCPUMax       = 64              // cores
	DefaultMemoryMax    = 256 * (1 << 30) // 256 GiB
	DefaultGPUMax       = 8               // devices
)

// DefaultScores are emitted when a configuration names none: the resource-usage-collect-addon's
// names (absolute amounts) and their ratios.
var DefaultScores = []string{CPUAvailable, MemAvailable, GPUAvailable, CPUAvailableRatio, MemAvailableRatio, GPUAvailableRatio}

// DefaultConfig is the configuration with every default filled in. Decode a configuration on top
// of it: fields the JSON sets replace the defaults (within bounds, min and max separately).
func DefaultConfig() Config {
	return Config{
		Resource:     DefaultResource,
		Scores:       append([]string(nil), DefaultScores...),
		ClusterLabel: DefaultClusterLabel,
		GPUResource:  DefaultGPUResource,
		Bounds: Bounds{
			CPU:    &Bound{Max: DefaultCPUMax},
			Memory: &Bound{Max: DefaultMemoryMax},
			GPU:    &Bound{Max: DefaultGPUMax},
		},
	}
}

var resourceNamePattern = regexp.MustCompile(`^[A-Za-z0-9_]+$`)

// Validate checks a configuration after defaults, naming the field at fault.
func (c *Config) Validate() error {
	var errs []error
	if err := contract.ValidateResourceName(c.Resource); err != nil {
		errs = append(errs, fmt.Errorf("resource: %v", err))
	}
	if len(c.Scores) == 0 {
		errs = append(errs, errors.New("scores: name at least one score"))
	}
	seen := map[string]bool{}
	for i, s := range c.Scores {
		switch {
		case catalogue[s].kind == "":
			errs = append(errs, fmt.Errorf("scores[%d]: %q is not one of %s", i, s, strings.Join(Names(), ", ")))
		case seen[s]:
			errs = append(errs, fmt.Errorf("scores[%d]: %q appears twice", i, s))
		}
		seen[s] = true
	}
	if err := contract.ValidateLabelName(c.ClusterLabel); err != nil {
		errs = append(errs, fmt.Errorf("clusterLabel: %v", err))
	}
	if strings.ContainsAny(c.Selector, "{}") {
		errs = append(errs, fmt.Errorf("selector: %q must be label matchers only (no braces), e.g. job=\"kube-state-metrics\"", c.Selector))
	}
	if !resourceNamePattern.MatchString(c.GPUResource) {
		errs = append(errs, fmt.Errorf("gpuResource: %q is not a kube-state-metrics resource name (letters, digits, _)", c.GPUResource))
	}
	for _, b := range []struct {
		field string
		b     *Bound
	}{{"bounds.cpu", c.Bounds.CPU}, {"bounds.memory", c.Bounds.Memory}, {"bounds.gpu", c.Bounds.GPU}} {
		if b.b == nil {
			errs = append(errs, fmt.Errorf("%s: is required", b.field))
			continue
		}
		if err := (normalize.Linear{Min: b.b.Min, Max: b.b.Max}).Validate(); err != nil {
			errs = append(errs, fmt.Errorf("%s: %v", b.field, err))
		}
	}
	return errors.Join(errs...)
}

func (c *Config) bound(k Kind) Bound {
	switch k {
	case CPU:
		return *c.Bounds.CPU
	case Memory:
		return *c.Bounds.Memory
	}
	return *c.Bounds.GPU
}

// ksmResource is kube-state-metrics' resource label value for a kind.
func (c *Config) ksmResource(k Kind) string {
	if k == GPU {
		return c.GPUResource
	}
	return string(k)
}

// needs reports which kinds the configured scores use, and whether any needs requests.
func (c *Config) needs() (kinds []Kind, requests bool) {
	seen := map[Kind]bool{}
	for _, s := range c.Scores {
		d := catalogue[s]
		if !seen[d.kind] {
			seen[d.kind] = true
			kinds = append(kinds, d.kind)
		}
		requests = requests || d.measure != allocatable
	}
	return kinds, requests
}
