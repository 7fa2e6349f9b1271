package resource

import (
	"math"
	"slices"
	"sort"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
)

// Kind is a resource.
type Kind string

// Resources scored.
const (
	CPU    Kind = "cpu"
	Memory Kind = "memory"
	GPU    Kind = "gpu"
)

// Score names. See the package doc for what each measures.
const (
	CPUAvailable              = "cpuAvailable"
	MemAvailable              = "memAvailable"
	GPUAvailable              = "gpuAvailable"
	CPUAvailableRatio         = "cpuAvailableRatio"
	MemAvailableRatio         = "memAvailableRatio"
	GPUAvailableRatio         = "gpuAvailableRatio"
	FreeCapacity              = "free-capacity"
	ResourceRatioCPU          = "ResourceRatioCPU"
	ResourceAllocatableMemory = "ResourceAllocatableMemory"
)

type measure int

const (
	available   measure = iota // allocatable - requested, linear between the kind's bounds
	ratio                      // 100 * (allocatable - requested) / allocatable
	allocatable                // allocatable, linear between the kind's bounds
)

type def struct {
	kind    Kind
	measure measure
}

var catalogue = map[string]def{
	CPUAvailable:              {CPU, available},
	MemAvailable:              {Memory, available},
	GPUAvailable:              {GPU, available},
	CPUAvailableRatio:         {CPU, ratio},
	MemAvailableRatio:         {Memory, ratio},
	GPUAvailableRatio:         {GPU, ratio},
	FreeCapacity:              {GPU, ratio},
	ResourceRatioCPU:          {CPU, ratio},
	ResourceAllocatableMemory: {Memory, allocatable},
}

// Names lists every score name the scorer knows, sorted.
func Names() []string {
	out := make([]string, 0, len(catalogue))
	for n := range catalogue {
		out = append(out, n)
	}
	sort.Strings(out)
	return out
}

// Amount is one resource of one cluster, summed over its nodes and pods.
type Amount struct {
	Allocatable float64
	Requested   float64
	// Known is set once an allocatable series was seen: requests alone score nothing.
	Known bool
	// RequestsKnown is set once a requests series was seen.
	RequestsKnown bool
}

// Usage is one cluster's resources, indexed by Kind.Index.
type Usage [3]Amount

// Index is a kind's position in Usage.
func (k Kind) Index() int {
	switch k {
	case CPU:
		return 0
	case Memory:
		return 1
	}
	return 2
}

func (u *Usage) add(k Kind, isAllocatable bool, v float64) {
	a := &u[k.Index()]
	if isAllocatable {
		a.Allocatable += v
		a.Known = true
	} else {
		a.Requested += v
		a.RequestsKnown = true
	}
}

// Metric names read from kube-state-metrics.
const (
	MetricAllocatable = "kube_node_status_allocatable"
	MetricRequests    = "kube_pod_container_resource_requests"
)

// Collector gathers per-cluster usage for one configuration.
type Collector struct {
	cfg *Config
	// kinds maps kube-state-metrics resource label values to the kinds they count for.
	kinds map[string]Kind
	// Usage by cluster.
	Usage map[string]*Usage
	// Dropped counts values whose cluster label was missing or not a valid cluster name.
	Dropped int
	// AbsentRequestsAreZero says the requests were collected for every cluster at once (a query
	// summing the requests of active pods: a cluster without a series has no pod requesting the
	// resource). Unset, as for a metric.changed event, which holds only what its producer sent
	// (a deadband sends only what changed), a resource without a requests value has no score net
	// of requests: its requests are unknown, not zero.
	AbsentRequestsAreZero bool
}

// NewCollector starts an empty collection for cfg (validated).
func NewCollector(cfg *Config) *Collector {
	kinds, _ := cfg.needs()
	c := &Collector{cfg: cfg, kinds: map[string]Kind{}, Usage: map[string]*Usage{}}
	for _, k := range kinds {
		c.kinds[cfg.ksmResource(k)] = k
	}
	return c
}

// Add records one value: a sum over a cluster's nodes (allocatable) or pods (requested).
func (c *Collector) Add(cluster, resource string, isAllocatable bool, v float64) {
	k, ok := c.kinds[resource]
	if !ok || math.IsNaN(v) || math.IsInf(v, 0) {
		return
	}
	u := c.Usage[cluster]
	if u == nil {
		if contract.ValidateClusterName(cluster) != nil {
			c.Dropped++
			return
		}
		u = &Usage{}
		c.Usage[cluster] = u
	}
	u.add(k, isAllocatable, v)
}

// AddVector records a query result summed by cluster label and resource.
func (c *Collector) AddVector(v model.Vector, isAllocatable bool) {
	for _, s := range v {
		cluster := s.Metric[model.LabelName(c.cfg.ClusterLabel)]
		if cluster == "" {
			c.Dropped++
			continue
		}
		c.Add(string(cluster), string(s.Metric["resource"]), isAllocatable, float64(s.Value))
	}
}

// Scores turns the usage into one item per cluster that has at least one score, sorted by cluster.
// A resource without an allocatable series scores nothing (a cluster without GPUs gets no GPU
// scores, not a 0), one without a requests value has no score net of requests unless
// AbsentRequestsAreZero, and a ratio needs allocatable > 0.
func (c *Collector) Scores() []contract.ClusterScores {
	clusters := make([]string, 0, len(c.Usage))
	for name := range c.Usage {
		clusters = append(clusters, name)
	}
	slices.Sort(clusters)
	out := make([]contract.ClusterScores, 0, len(clusters))
	for _, name := range clusters {
		var scores []contract.Score
		for _, s := range c.cfg.Scores {
			d := catalogue[s]
			if v, ok := score(c.cfg, d, &c.Usage[name][d.kind.Index()], c.AbsentRequestsAreZero); ok {
				scores = append(scores, contract.Score{Name: s, Value: float64(v)})
			}
		}
		if len(scores) > 0 {
			out = append(out, contract.ClusterScores{Cluster: name, Scores: scores})
		}
	}
	return out
}

func score(cfg *Config, d def, a *Amount, absentRequestsAreZero bool) (int32, bool) {
	if !a.Known || (d.measure != allocatable && !a.RequestsKnown && !absentRequestsAreZero) {
		return 0, false
	}
	b := cfg.bound(d.kind)
	switch d.measure {
	case available:
		return normalize.Linear{Min: b.Min, Max: b.Max}.Score(a.Allocatable - a.Requested)
	case ratio:
		if a.Allocatable <= 0 {
			return 0, false
		}
		return normalize.Round(100 * (a.Allocatable - a.Requested) / a.Allocatable)
	default:
		return normalize.Linear{Min: b.Min, Max: b.Max}.Score(a.Allocatable)
	}
}
