package dsf

import (
	"errors"
	"fmt"
	"net/url"
	"path/filepath"
	"regexp"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
)

// Values of the DynamicScorer fields the bridge reads.
const (
	SyncFull = "Full"
	SyncNone = "None"

	SourcePrometheus = "Prometheus"
	SourceNone       = "None"

	DestinationAPS = "AddOnPlacementScore"

	// queryRangePath is where Prometheus' HTTP API serves range queries; a source path is this,
	// possibly behind a prefix (a proxy's /prometheus/api/v1/query_range).
	queryRangePath = "/api/v1/query_range"

	// DefaultDimensionFormat names each score when a configuration names none.
	DefaultDimensionFormat = "${scoreName}"
	// DefaultClusterLabel is the result label naming the managed cluster.
	DefaultClusterLabel = "cluster"
)

// Config is a PingSource's data: a DynamicScorer's spec, field for field, plus three optional
// fields of scoreflow's (resource, clusterLabel, clusters). A DynamicScorer's spec pasted in as it
// is decodes; fields the bridge has no use for (description, location) are accepted and ignored.
type Config struct {
	Description string `json:"description,omitempty"`
	// ConfigURL is the scorer's GET /config. With ConfigSyncMode Full (the default when it is set)
	// the scorer's answer decides source and scoring on every ping; with None the fields here do.
	// Its scheme and host also locate the scorer's /healthz.
	ConfigURL        string   `json:"configURL,omitempty"`
	ConfigSyncMode   string   `json:"configSyncMode,omitempty"`
	Location         string   `json:"location,omitempty"`
	Source           *Source  `json:"source,omitempty"`
	Scoring          *Scoring `json:"scoring,omitempty"`
	ScoreDestination string   `json:"scoreDestination,omitempty"`
	// ScoreDimensionFormat names each score from its result's labels, with DSF's placeholders.
	ScoreDimensionFormat string `json:"scoreDimensionFormat,omitempty"`

	// Resource is the AddOnPlacementScore to write; default: scoring.params.name made a valid
	// object name the way DSF's agent does (sample_my_score -> sample-my-score).
	Resource string `json:"resource,omitempty"`
	// ClusterLabel is the result label that names the managed cluster (default cluster).
	ClusterLabel string `json:"clusterLabel,omitempty"`
	// Clusters receive the results that carry no cluster label: where a DSF agent on each managed
	// cluster got the same answer from a scorer that does not tell clusters apart (a static table).
	Clusters []string `json:"clusters,omitempty"`
}

// Source is DynamicScorer.spec.source (and /config's source).
type Source struct {
	Type   string       `json:"type,omitempty"`
	Host   string       `json:"host,omitempty"`
	Path   string       `json:"path,omitempty"`
	Params SourceParams `json:"params"`
	Auth   *Auth        `json:"auth,omitempty"`
}

// SourceParams are the range query: query (several joined by ";"), range and step in seconds.
type SourceParams struct {
	Query string `json:"query,omitempty"`
	Range int    `json:"range,omitempty"`
	Step  int    `json:"step,omitempty"`
}

// Scoring is DynamicScorer.spec.scoring (and /config's scoring).
type Scoring struct {
	Host   string        `json:"host,omitempty"`
	Path   string        `json:"path,omitempty"`
	Params ScoringParams `json:"params"`
	Auth   *Auth         `json:"auth,omitempty"`
}

// ScoringParams name the score and say how often DSF's agent would call the scorer (seconds).
type ScoringParams struct {
	Name     string `json:"name,omitempty"`
	Interval int    `json:"interval,omitempty"`
}

// Auth is a bearer token from a mounted Secret, read on every request. TokenSecretRef is DSF's
// form: the Secret must be mounted at <token dir>/<name> (deploy/dsf-bridge.yaml mounts them);
// TokenFile is any path.
type Auth struct {
	TokenSecretRef *SecretKeyRef `json:"tokenSecretRef,omitempty"`
	TokenFile      string        `json:"tokenFile,omitempty"`
}

// SecretKeyRef names a key of a Secret.
type SecretKeyRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// Validate checks what a configuration can be checked for before the scorer is asked: the fields
// /config does not decide, and those it does when sync is None.
func (c *Config) Validate() error {
	var errs []error
	if c.ConfigURL != "" {
		if _, err := baseURL(c.ConfigURL); err != nil {
			errs = append(errs, fmt.Errorf("configURL: %v", err))
		}
	}
	switch c.ConfigSyncMode {
	case "", SyncFull, SyncNone:
	default:
		errs = append(errs, fmt.Errorf("configSyncMode: %q is not Full or None", c.ConfigSyncMode))
	}
	if c.ConfigSyncMode == SyncFull && c.ConfigURL == "" {
		errs = append(errs, errors.New("configSyncMode: Full needs a configURL"))
	}
	switch c.ScoreDestination {
	case "", DestinationAPS:
	default:
		errs = append(errs, fmt.Errorf("scoreDestination: %q: the bridge writes AddOnPlacementScores only", c.ScoreDestination))
	}
	if c.ScoreDimensionFormat != "" {
		if err := checkFormat(c.ScoreDimensionFormat); err != nil {
			errs = append(errs, fmt.Errorf("scoreDimensionFormat: %v", err))
		}
	}
	if c.Resource != "" {
		if err := contract.ValidateResourceName(c.Resource); err != nil {
			errs = append(errs, fmt.Errorf("resource: %v", err))
		}
	}
	if c.ClusterLabel != "" {
		if err := contract.ValidateLabelName(c.ClusterLabel); err != nil {
			errs = append(errs, fmt.Errorf("clusterLabel: %v", err))
		}
	}
	for i, cl := range c.Clusters {
		if err := contract.ValidateClusterName(cl); err != nil {
			errs = append(errs, fmt.Errorf("clusters[%d]: %v", i, err))
		}
	}
	if c.Source != nil {
		errs = append(errs, c.Source.Auth.validate("source.auth")...)
		if c.Source.Host != "" {
			if _, err := baseURL(c.Source.Host); err != nil {
				errs = append(errs, fmt.Errorf("source.host: %v", err))
			}
		}
	}
	if c.Scoring != nil {
		errs = append(errs, c.Scoring.Auth.validate("scoring.auth")...)
	}
	if c.syncs() {
		return errors.Join(errs...)
	}
	// No /config to ask: the fields here must make a whole scorer now.
	if c.Source == nil {
		errs = append(errs, errors.New("source: is required without a configURL to read it from (type None for a scorer that takes no data)"))
	}
	if c.Scoring == nil {
		errs = append(errs, errors.New("scoring: is required without a configURL to read it from"))
	}
	if len(errs) > 0 {
		return errors.Join(errs...)
	}
	// Resolved as a ping would be, with a stand-in for the bridge's own Prometheus (a flag, not
	// part of the configuration).
	_, err := c.resolve(nil, Options{PrometheusURL: "http://prometheus.invalid"})
	return err
}

// syncs reports whether source and scoring come from the scorer's /config.
func (c *Config) syncs() bool {
	return c.ConfigURL != "" && c.ConfigSyncMode != SyncNone
}

func (a *Auth) validate(field string) []error {
	if a == nil {
		return nil
	}
	switch {
	case a.TokenSecretRef != nil && a.TokenFile != "":
		return []error{fmt.Errorf("%s: give tokenSecretRef or tokenFile, not both", field)}
	case a.TokenSecretRef != nil:
		var errs []error
		if es := validation.IsDNS1123Subdomain(a.TokenSecretRef.Name); len(es) > 0 {
			errs = append(errs, fmt.Errorf("%s.tokenSecretRef.name: %q: %s", field, a.TokenSecretRef.Name, strings.Join(es, "; ")))
		}
		if es := validation.IsConfigMapKey(a.TokenSecretRef.Key); len(es) > 0 {
			errs = append(errs, fmt.Errorf("%s.tokenSecretRef.key: %q: %s", field, a.TokenSecretRef.Key, strings.Join(es, "; ")))
		}
		return errs
	case a.TokenFile == "":
		return []error{fmt.Errorf("%s: give tokenSecretRef or tokenFile", field)}
	case !filepath.IsAbs(a.TokenFile):
		return []error{fmt.Errorf("%s.tokenFile: %q is not an absolute path", field, a.TokenFile)}
	}
	return nil
}

// path is the token file an Auth names, "" for none.
func (a *Auth) path(tokenDir string) string {
	switch {
	case a == nil:
		return ""
	case a.TokenSecretRef != nil:
		return filepath.Join(tokenDir, a.TokenSecretRef.Name, a.TokenSecretRef.Key)
	}
	return a.TokenFile
}

// placeholders are DSF's: a result's labels fill them, except scoreName (scoring.params.name)
// and cluster (the result's cluster).
var placeholders = []string{"scoreName", "cluster", "node", "pod", "container", "device", "namespace", "app", "meta"}

var placeholderPattern = regexp.MustCompile(`\$\{([^}]*)\}`)

// checkFormat refuses placeholders DSF does not know (DSF would leave them in the name as they
// are, which no score name can hold) and formats that cannot make a legal score name.
func checkFormat(f string) error {
	for _, m := range placeholderPattern.FindAllStringSubmatch(f, -1) {
		known := false
		for _, p := range placeholders {
			known = known || m[1] == p
		}
		if !known {
			return fmt.Errorf("%q: unknown placeholder ${%s}; DSF's are ${%s}", f, m[1], strings.Join(placeholders, "} ${"))
		}
	}
	if err := contract.ValidateScoreName(placeholderPattern.ReplaceAllString(f, "x")); err != nil {
		return fmt.Errorf("%q cannot make a legal score name: %v", f, err)
	}
	return nil
}

// render fills a format as DSF does: a label the result lacks is empty.
func render(f string, values map[string]string) string {
	return placeholderPattern.ReplaceAllStringFunc(f, func(m string) string { return values[m[2:len(m)-1]] })
}

// ResourceName makes a score name a valid AddOnPlacementScore name the way DSF's agent does:
// lower case, runs of other characters than [a-z0-9.-] become one "-", trimmed of "-" and ".".
func ResourceName(scoreName string) string {
	s := strings.ToLower(scoreName)
	s = regexp.MustCompile(`[^a-z0-9.-]+`).ReplaceAllString(s, "-")
	s = regexp.MustCompile(`-+`).ReplaceAllString(s, "-")
	s = strings.Trim(s, "-.")
	if len(s) > 253 {
		s = strings.TrimRight(s[:253], "-.")
	}
	return s
}

// baseURL is scheme://host of an http(s) URL.
func baseURL(raw string) (string, error) {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return "", fmt.Errorf("%q is not an http(s) URL", raw)
	}
	return u.Scheme + "://" + u.Host, nil
}

// Options are the bridge's own settings a configuration is resolved with.
type Options struct {
	// PrometheusURL and PrometheusTokenFile are the Prometheus queried when a configuration names
	// no source.host of its own.
	PrometheusURL       string
	PrometheusTokenFile string
	// TokenDir is where tokenSecretRef Secrets are mounted, one directory per Secret.
	TokenDir string
}

// plan is a configuration resolved for one ping: every URL, query and name fixed.
type plan struct {
	name         string // scoring.params.name: ${scoreName}, and the metrics' scorer label
	resource     string
	format       string
	clusterLabel string
	clusters     []string
	interval     time.Duration

	queries    []string // none for source type None
	promURL    string
	promToken  string
	rng, step  time.Duration
	scoringURL string
	scoreToken string
	healthURL  string
}

// resolve merges a configuration with the scorer's /config (nil unless it syncs): source and
// scoring come from /config, auth always from the PingSource (DSF keeps it in the
// DynamicScorer). The Prometheus is the configuration's own source.host or else the bridge's:
// the host in a scorer's /config names the Prometheus inside a managed cluster, which the hub
// does not reach. Every error names its field.
func (c *Config) resolve(remote *RemoteConfig, o Options) (*plan, error) {
	src, sc := c.Source, c.Scoring
	from := ""
	if remote != nil {
		src, sc = &remote.Source, &remote.Scoring
		from = "the scorer's /config "
	}
	if src == nil || sc == nil {
		return nil, fmt.Errorf("%ssource and scoring are required", from)
	}
	p := &plan{
		format:       c.ScoreDimensionFormat,
		clusterLabel: c.ClusterLabel,
		clusters:     c.Clusters,
		name:         sc.Params.Name,
		interval:     time.Duration(sc.Params.Interval) * time.Second,
	}
	if p.format == "" {
		p.format = DefaultDimensionFormat
	}
	if p.clusterLabel == "" {
		p.clusterLabel = DefaultClusterLabel
	}
	var errs []error
	if p.name == "" {
		errs = append(errs, fmt.Errorf("%sscoring.params.name: is required (it names the score)", from))
	} else if err := contract.ValidateScoreName(p.name); err != nil && strings.Contains(p.format, "${scoreName}") {
		errs = append(errs, fmt.Errorf("%sscoring.params.name: %v", from, err))
	}
	if sc.Params.Interval < 0 {
		errs = append(errs, fmt.Errorf("%sscoring.params.interval: %d is negative", from, sc.Params.Interval))
	}
	p.resource = c.Resource
	if p.resource == "" {
		p.resource = ResourceName(p.name)
		if err := contract.ValidateResourceName(p.resource); err != nil {
			errs = append(errs, fmt.Errorf("%sscoring.params.name %q makes no AddOnPlacementScore name: set resource", from, p.name))
		}
	}

	// Scoring: host, else the configURL's (DSF's /config usually names only a path).
	host := sc.Host
	if host == "" && c.ConfigURL != "" {
		host, _ = baseURL(c.ConfigURL)
	}
	switch {
	case host == "":
		errs = append(errs, fmt.Errorf("%sscoring.host: is required without a configURL", from))
	case !strings.HasPrefix(sc.Path, "/"):
		errs = append(errs, fmt.Errorf("%sscoring.path: %q must start with /", from, sc.Path))
	default:
		b, err := baseURL(host)
		if err != nil {
			errs = append(errs, fmt.Errorf("%sscoring.host: %v", from, err))
		} else {
			p.scoringURL = strings.TrimRight(host, "/") + sc.Path
			p.healthURL = b + "/healthz"
		}
	}
	if c.ConfigURL != "" {
		b, _ := baseURL(c.ConfigURL)
		p.healthURL = b + "/healthz" // as DSF's controller probes it
	}
	if c.Scoring != nil {
		p.scoreToken = c.Scoring.Auth.path(o.TokenDir)
	}

	// Source. DSF's /config samples write "prometheus"; its agent wants "Prometheus" exactly and
	// silently sends no data otherwise. Case does not matter here.
	switch {
	case strings.EqualFold(src.Type, SourceNone):
	case strings.EqualFold(src.Type, SourcePrometheus):
		errs = append(errs, p.source(c, src, from, o)...)
	default:
		errs = append(errs, fmt.Errorf("%ssource.type: %q is not Prometheus or None", from, src.Type))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *plan) source(c *Config, src *Source, from string, o Options) []error {
	var errs []error
	for _, q := range strings.Split(src.Params.Query, ";") {
		if q = strings.TrimSpace(q); q != "" {
			p.queries = append(p.queries, q)
		}
	}
	if len(p.queries) == 0 {
		errs = append(errs, fmt.Errorf("%ssource.params.query: is required with type Prometheus", from))
	}
	p.rng, p.step = time.Duration(src.Params.Range)*time.Second, time.Duration(src.Params.Step)*time.Second
	if err := prom.CheckRange(p.rng, p.step); err != nil {
		errs = append(errs, fmt.Errorf("%ssource.params.range, step (seconds): %v", from, err))
	}
	if src.Path != "" && !strings.HasSuffix(strings.TrimRight(src.Path, "/"), queryRangePath) {
		errs = append(errs, fmt.Errorf("%ssource.path: %q is not Prometheus' %s", from, src.Path, queryRangePath))
	}
	p.promURL, p.promToken = o.PrometheusURL, o.PrometheusTokenFile
	// Only the PingSource's own host: see resolve.
	if c.Source != nil && c.Source.Host != "" {
		p.promURL = strings.TrimRight(c.Source.Host, "/") + strings.TrimSuffix(strings.TrimRight(c.Source.Path, "/"), queryRangePath)
		p.promToken = ""
	}
	if c.Source != nil && c.Source.Auth != nil {
		p.promToken = c.Source.Auth.path(o.TokenDir)
	}
	if p.promURL == "" {
		errs = append(errs, fmt.Errorf("source.host: no Prometheus: give one here or start the bridge with --prometheus-url"))
	}
	return errs
}
