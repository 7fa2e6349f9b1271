package latency

import (
	"encoding/json"
	"errors"
	"fmt"
	"net/url"
	"strings"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
)

// Limits and defaults of one entry (see the package doc).
const (
	DefaultRuns = 3
	MaxRuns     = 20
	DefaultWait = time.Second
	// MinWait is the least waitBetweenRuns: the runs of one entry are spaced at least this far.
	MinWait        = 100 * time.Millisecond
	MaxWait        = time.Minute
	DefaultTimeout = 10 * time.Second
	MaxTimeout     = time.Minute
	// MaxEntryTime bounds runs*timeout + (runs-1)*waitBetweenRuns: an evaluation must finish
	// within the Trigger's delivery timeout.
	MaxEntryTime = 5 * time.Minute
	MaxEntries   = 100
)

// Limits of the requests one configuration (one ping, one round of an agent) makes. Entries run
// concurrently and may name the same host under different score names, paths or ports, so each
// entry's bounds alone would let a small event ask one host for MaxEntries*MaxRuns requests.
const (
	// MaxRunsPerHost bounds the runs of all entries measuring one host (the URL's host name,
	// whatever its port): as many as one entry may make.
	MaxRunsPerHost = MaxRuns
	// MaxRunsPerPing bounds the runs of all entries: every entry at DefaultRuns.
	MaxRunsPerPing = MaxEntries * DefaultRuns
)

// DefaultNormalization maps 0 ms to 100 and 1000 ms or more to -100.
func DefaultNormalization() normalize.Normalization {
	lo, hi := 0.0, 1000.0
	return normalize.Normalization{Method: normalize.MethodLinear, Min: &lo, Max: &hi, LowerIsBetter: true}
}

// Config is the scorer's configuration.
type Config struct {
	Resource  string                   `json:"resource"`
	Latencies []Target                 `json:"latencies"`
	Normalize *normalize.Normalization `json:"normalize,omitempty"`
}

// Target is one URL to measure and the score it feeds.
type Target struct {
	Name            string   `json:"name"`
	URL             string   `json:"url"`
	Cluster         string   `json:"cluster,omitempty"`
	Runs            int      `json:"runs,omitempty"`
	WaitBetweenRuns Duration `json:"waitBetweenRuns,omitempty"`
	Timeout         Duration `json:"timeout,omitempty"`
}

// Duration is a Go duration string in JSON ("10s").
type Duration time.Duration

// UnmarshalJSON accepts only strings, so that a bare number (seconds? nanoseconds?) is an error.
func (d *Duration) UnmarshalJSON(b []byte) error {
	var s string
	if err := json.Unmarshal(b, &s); err != nil {
		return fmt.Errorf("a duration is a string such as \"10s\" or \"500ms\", not %s", b)
	}
	v, err := time.ParseDuration(s)
	if err != nil {
		return err
	}
	*d = Duration(v)
	return nil
}

// MarshalJSON writes the duration string.
func (d Duration) MarshalJSON() ([]byte, error) { return json.Marshal(time.Duration(d).String()) }

// Validate checks what does not depend on the mode, and fills in defaults.
func (c *Config) Validate() error {
	if err := contract.ValidateResourceName(c.Resource); err != nil {
		return fmt.Errorf("resource: %v", err)
	}
	if c.Normalize == nil {
		n := DefaultNormalization()
		c.Normalize = &n
	}
	if c.Normalize.Method == normalize.MethodNone {
		return errors.New("normalize.method: none would score milliseconds as points; use linear or minmax")
	}
	c.Normalize.LowerIsBetter = true
	if err := c.Normalize.Validate(); err != nil {
		return err
	}
	switch {
	case len(c.Latencies) == 0:
		return errors.New("latencies: at least one entry is required")
	case len(c.Latencies) > MaxEntries:
		return fmt.Errorf("latencies: %d entries, more than %d", len(c.Latencies), MaxEntries)
	}
	for i := range c.Latencies {
		if err := c.Latencies[i].validate(); err != nil {
			return fmt.Errorf("latencies[%d]: %w", i, err)
		}
	}
	return c.checkRequests()
}

// checkRequests refuses a configuration asking for more runs than MaxRunsPerPing in all or
// MaxRunsPerHost of one host. Call after the entries are validated (defaults filled in).
func (c *Config) checkRequests() error {
	total := 0
	perHost := map[string]int{}
	var hosts []string
	for _, t := range c.Latencies {
		total += t.Runs
		h := hostOf(t.URL)
		if _, ok := perHost[h]; !ok {
			hosts = append(hosts, h)
		}
		perHost[h] += t.Runs
	}
	if total > MaxRunsPerPing {
		return fmt.Errorf("latencies: %d runs in all, more than %d: measure fewer targets or with fewer runs", total, MaxRunsPerPing)
	}
	for _, h := range hosts {
		if n := perHost[h]; n > MaxRunsPerHost {
			return fmt.Errorf("latencies: %d runs measure host %s, more than %d: the runs of every entry naming one host count together", n, contract.Truncate(h, 100), MaxRunsPerHost)
		}
	}
	return nil
}

// hostOf is the host name of a URL validURL accepted, in lower case and without its port.
func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return raw
	}
	return strings.ToLower(u.Hostname())
}

func (t *Target) validate() error {
	if err := contract.ValidateScoreName(t.Name); err != nil {
		return fmt.Errorf("name: %v", err)
	}
	if err := validURL(t.URL); err != nil {
		return fmt.Errorf("url: %w", err)
	}
	if t.Cluster != "" {
		if err := contract.ValidateClusterName(t.Cluster); err != nil {
			return fmt.Errorf("cluster: %v", err)
		}
	}
	if t.Runs == 0 {
		t.Runs = DefaultRuns
	}
	if t.Runs < 1 || t.Runs > MaxRuns {
		return fmt.Errorf("runs: %d is not between 1 and %d", t.Runs, MaxRuns)
	}
	if t.WaitBetweenRuns == 0 {
		t.WaitBetweenRuns = Duration(DefaultWait)
	}
	if time.Duration(t.WaitBetweenRuns) < MinWait || time.Duration(t.WaitBetweenRuns) > MaxWait {
		return fmt.Errorf("waitBetweenRuns: %s is not between %s and %s", time.Duration(t.WaitBetweenRuns), MinWait, MaxWait)
	}
	if t.Timeout == 0 {
		t.Timeout = Duration(DefaultTimeout)
	}
	if t.Timeout < 0 || time.Duration(t.Timeout) > MaxTimeout {
		return fmt.Errorf("timeout: %s is not between 0 and %s", time.Duration(t.Timeout), MaxTimeout)
	}
	if w := t.worstCase(); w > MaxEntryTime {
		return fmt.Errorf("runs*timeout + (runs-1)*waitBetweenRuns is %s, more than %s", w, MaxEntryTime)
	}
	return nil
}

func (t *Target) worstCase() time.Duration {
	return time.Duration(t.Runs)*time.Duration(t.Timeout) + time.Duration(t.Runs-1)*time.Duration(t.WaitBetweenRuns)
}

// Resolve applies the mode: in agent mode (agentCluster set) entries score agentCluster and may not
// name another; in hub mode every entry must name its cluster. Call after Validate.
func (c *Config) Resolve(agentCluster string) error {
	seen := map[[2]string]int{}
	for i := range c.Latencies {
		t := &c.Latencies[i]
		switch {
		case agentCluster == "" && t.Cluster == "":
			return fmt.Errorf("latencies[%d].cluster: required on the hub (which cluster does %q score?); on a managed cluster run with --cluster", i, t.Name)
		case agentCluster != "" && t.Cluster != "" && t.Cluster != agentCluster:
			return fmt.Errorf("latencies[%d].cluster: %q, but this scorer runs on cluster %q and measures from there", i, t.Cluster, agentCluster)
		case t.Cluster == "":
			t.Cluster = agentCluster
		}
		key := [2]string{t.Cluster, t.Name}
		if j, dup := seen[key]; dup {
			return fmt.Errorf("latencies[%d]: score %q of cluster %q is also latencies[%d]", i, t.Name, t.Cluster, j)
		}
		seen[key] = i
	}
	if agentCluster != "" && c.Normalize.Method == normalize.MethodMinMax {
		return errors.New("normalize.method: minmax compares clusters, but an agent measures only its own; use linear")
	}
	return nil
}

func validURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("%q is not an absolute http or https URL", redact(raw))
	}
	return nil
}

// redact drops user info and query from a URL, either of which may carry credentials.
func redact(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return "(unparsable URL)"
	}
	u.User, u.RawQuery, u.Fragment = nil, "", ""
	return u.String()
}
