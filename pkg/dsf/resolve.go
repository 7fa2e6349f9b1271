package dsf

import (
	"errors"
	"fmt"
	"regexp"
	"strings"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/prom"
)

// queryRangePath is where Prometheus' HTTP API serves range queries; a source path is this,
// possibly behind a prefix (a proxy's /prometheus/api/v1/query_range).
const queryRangePath = "/api/v1/query_range"

// Settings are what the deployment decides: where hosts the specs name are when elsewhere than
// written, and where the Secrets they name are read.
type Settings struct {
	Endpoints Endpoints
	// Tokens reads tokenSecretRef{name, key}: the agent's namespace on its managed cluster, or
	// mounted files in hub mode. Nil: a spec naming a Secret fails.
	Tokens Tokens
}

// Probe is how a scorer is asked whether it is up, as DSF's controller asks it: with
// configSyncMode Full, GET configURL (an answer that decodes is Active, and its fields are used);
// with None, GET /healthz on configURL's host (200 is Active).
type Probe struct {
	Scorer string // metadata.name
	// ConfigURL is set with Full sync, HealthURL with None; both already mapped through Endpoints.
	ConfigURL string
	HealthURL string
}

// Plan is a DynamicScorer resolved for one round: every URL mapped, every name decided.
type Plan struct {
	Scorer    string // metadata.name: the metrics' label and the logs' key
	ScoreName string // scoring.params.name: ${scoreName}, and what masks name
	Resource  string // the AddOnPlacementScore: ScoreName made an object name as DSF does
	Format    string
	Interval  time.Duration
	// Write is false for scoreDestination None: DSF computes the score and writes it nowhere.
	Write bool

	Queries     []string // none for source type None
	PromURL     string   // Prometheus' base URL (query_range's path removed)
	Range, Step time.Duration
	ScoringURL  string

	// PromAuth and ScoringAuth are the spec's tokens, each set only when the request goes to the
	// host the spec pairs it with (its source.host or scoring.host, else configURL's host): a host
	// that comes from the scorer's /config gets no token. When a token is withheld, the Withheld
	// field says why (for the log, and the error if the request then fails).
	PromAuth, ScoringAuth         *SecretRef
	PromWithheld, ScoringWithheld string
}

// Prepare checks the fields DSF requires of a spec before any request (configURL, configSyncMode,
// location, scoreDestination, the format's placeholders, the token references) and returns how to
// probe the scorer. Errors name the fields.
func Prepare(ds *DynamicScorer, s Settings) (*Probe, error) {
	sp := &ds.Spec
	var errs []error
	p := &Probe{Scorer: ds.Name}
	switch sp.ConfigSyncMode {
	case SyncFull, SyncNone:
	default:
		errs = append(errs, fmt.Errorf("configSyncMode: %q is not Full or None", sp.ConfigSyncMode))
	}
	if sp.ConfigURL == "" {
		errs = append(errs, errors.New("configURL: is required"))
	} else if o, _, err := origin(sp.ConfigURL); err != nil {
		errs = append(errs, fmt.Errorf("configURL: %v", err))
	} else if sp.ConfigSyncMode == SyncFull {
		if p.ConfigURL, err = s.Endpoints.Resolve(sp.ConfigURL); err != nil {
			errs = append(errs, fmt.Errorf("configURL: %v", err))
		}
	} else if p.HealthURL, err = s.Endpoints.Resolve(o + "/healthz"); err != nil {
		errs = append(errs, fmt.Errorf("configURL: %v", err))
	}
	// DSF's controller leaves out a scorer without a location or a destination.
	switch sp.Location {
	case "Internal", "External":
	case "":
		errs = append(errs, errors.New("location: is required (Internal or External; DSF skips a scorer without one)"))
	default:
		errs = append(errs, fmt.Errorf("location: %q is not Internal or External", sp.Location))
	}
	switch sp.ScoreDestination {
	case DestinationAPS, DestinationNone:
	case "":
		errs = append(errs, errors.New("scoreDestination: is required (AddOnPlacementScore or None; DSF skips a scorer without one)"))
	default:
		errs = append(errs, fmt.Errorf("scoreDestination: %q is not AddOnPlacementScore or None", sp.ScoreDestination))
	}
	if err := checkFormat(sp.ScoreDimensionFormat); err != nil {
		errs = append(errs, fmt.Errorf("scoreDimensionFormat: %v", err))
	}
	if err := checkRef(sp.Source.Auth); err != nil {
		errs = append(errs, fmt.Errorf("source.auth: %v", err))
	}
	if err := checkRef(sp.Scoring.Auth); err != nil {
		errs = append(errs, fmt.Errorf("scoring.auth: %v", err))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

// Resolve merges a prepared spec with the scorer's /config (nil with configSyncMode None) as DSF
// does, field by field: a field /config sets wins, else the spec's, else (for hosts) configURL's
// scheme and host. Location, destination and format are always the spec's; so are the tokens,
// which go only to the hosts the spec pairs them with. Every host is rewritten as the
// deployment's Endpoints say.
func Resolve(ds *DynamicScorer, remote *RemoteConfig, s Settings) (*Plan, error) {
	sp := &ds.Spec
	if remote == nil {
		remote = &RemoteConfig{}
	}
	var sParams SourceParams
	if sp.Source.Params != nil {
		sParams = *sp.Source.Params
	}
	var cParams ScoringParams
	if sp.Scoring.Params != nil {
		cParams = *sp.Scoring.Params
	}
	from := func(remoteSet bool, field string) string {
		if remoteSet {
			return "the scorer's /config " + field
		}
		return field
	}
	var errs []error
	p := &Plan{
		Scorer:    ds.Name,
		ScoreName: scoreName(ds, remote),
		Format:    first(sp.ScoreDimensionFormat, DefaultDimensionFormat),
		Write:     sp.ScoreDestination != DestinationNone,
	}
	if p.ScoreName == "" {
		errs = append(errs, errors.New("scoring.params.name: is required (in the spec or the scorer's /config)"))
	}
	p.Resource = ResourceName(p.ScoreName)
	if err := contract.ValidateResourceName(p.Resource); err != nil && p.ScoreName != "" {
		errs = append(errs, fmt.Errorf("scoring.params.name %q: %v", p.ScoreName, err))
	}
	interval := firstPositive(remote.Scoring.Params.Interval, cParams.Interval)
	if interval <= 0 {
		errs = append(errs, errors.New("scoring.params.interval: is required, in seconds (in the spec or the scorer's /config)"))
	}
	p.Interval = time.Duration(interval) * time.Second
	configOrigin, _, _ := origin(sp.ConfigURL)

	specHost := first(sp.Scoring.Host, configOrigin)
	host := first(remote.Scoring.Host, specHost)
	path := first(remote.Scoring.Path, sp.Scoring.Path)
	if u, err := s.Endpoints.Resolve(joinPath(host, path)); err != nil {
		errs = append(errs, fmt.Errorf("%s: %v", from(remote.Scoring.Host != "", "scoring.host"), err))
	} else {
		p.ScoringURL = u
	}
	p.ScoringAuth, p.ScoringWithheld = pair(sp.Scoring.Auth, specHost, host, "scoring")

	typ := first(remote.Source.Type, sp.Source.Type)
	switch {
	case strings.EqualFold(typ, SourceNone):
	case strings.EqualFold(typ, SourcePrometheus):
		// DSF's own samples write "prometheus", which DSF's agent takes for no source at all.
		errs = append(errs, p.source(sp, remote, sParams, configOrigin, s, from)...)
	case typ == "":
		errs = append(errs, errors.New("source.type: is required, Prometheus or None (in the spec or the scorer's /config)"))
	default:
		errs = append(errs, fmt.Errorf("%s: %q is not Prometheus or None", from(remote.Source.Type != "", "source.type"), typ))
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	return p, nil
}

func (p *Plan) source(sp *ScorerSpec, remote *RemoteConfig, sParams SourceParams, configOrigin string, s Settings, from func(bool, string) string) []error {
	var errs []error
	query := first(remote.Source.Params.Query, sParams.Query)
	for _, q := range strings.Split(query, ";") {
		if q = strings.TrimSpace(q); q != "" {
			p.Queries = append(p.Queries, q)
		}
	}
	if len(p.Queries) == 0 {
		errs = append(errs, errors.New("source.params.query: is required with type Prometheus"))
	}
	p.Range = time.Duration(firstPositive(remote.Source.Params.Range, sParams.Range)) * time.Second
	p.Step = time.Duration(firstPositive(remote.Source.Params.Step, sParams.Step)) * time.Second
	if err := prom.CheckRange(p.Range, p.Step); err != nil {
		errs = append(errs, fmt.Errorf("source.params.range, step (seconds): %v", err))
	}
	specHost := first(sp.Source.Host, configOrigin)
	host := first(remote.Source.Host, specHost)
	path := strings.TrimRight(first(remote.Source.Path, sp.Source.Path, queryRangePath), "/")
	if !strings.HasSuffix(path, queryRangePath) {
		errs = append(errs, fmt.Errorf("%s: %q is not Prometheus' %s", from(remote.Source.Path != "", "source.path"), path, queryRangePath))
	} else if u, err := s.Endpoints.Resolve(joinPath(host, strings.TrimSuffix(path, queryRangePath))); err != nil {
		errs = append(errs, fmt.Errorf("%s: %v", from(remote.Source.Host != "", "source.host"), err))
	} else {
		p.PromURL = strings.TrimRight(u, "/")
	}
	p.PromAuth, p.PromWithheld = pair(sp.Source.Auth, specHost, host, "source")
	return errs
}

// scoreName is ds's scoring.params.name merged with remote (its /config) as Resolve merges it.
func scoreName(ds *DynamicScorer, remote *RemoteConfig) string {
	if remote != nil && remote.Scoring.Params.Name != "" {
		return remote.Scoring.Params.Name
	}
	return specScoreName(ds)
}

// AgentResource is the AddOnPlacementScore an agent's rounds of ds write, as Resolve names it in
// agent mode: the score name (with configSyncMode Full, status.lastSyncedConfig's when it names
// one, else the spec's) made an object name (ResourceName). It is "" when ds writes none:
// scoreDestination is not AddOnPlacementScore, or no score name is known yet, or it makes no
// valid resource name. The agent gateway admits exactly these for the DSF agents.
func AgentResource(ds *DynamicScorer) string {
	if ds.Spec.ScoreDestination != DestinationAPS {
		return ""
	}
	var synced *RemoteConfig
	if ds.Spec.ConfigSyncMode == SyncFull {
		synced = ds.Status.LastSyncedConfig
	}
	name := scoreName(ds, synced)
	if name == "" {
		return ""
	}
	r := ResourceName(name)
	if contract.ValidateResourceName(r) != nil {
		return ""
	}
	return r
}

// SpecResource is the AddOnPlacementScore the bridge (hub mode) lets ds write: its spec's own
// scoring.params.name made an object name (ResourceName), whatever its scorer's /config says. It
// is "" when ds may write none: scoreDestination is not AddOnPlacementScore, the spec names no
// score, or the name makes no valid resource name.
func SpecResource(ds *DynamicScorer) string {
	name := specScoreName(ds)
	if ds.Spec.ScoreDestination != DestinationAPS || name == "" {
		return ""
	}
	r := ResourceName(name)
	if contract.ValidateResourceName(r) != nil {
		return ""
	}
	return r
}

// pair returns the spec's token for a request to host (as written, before any rewrite) only when
// host is the one the spec itself gives for it (specHost: the spec's own host field, else
// configURL's host). A /config answer that moves the request elsewhere, to the scorer's own
// address say, gets no token; why is returned instead.
func pair(a *Auth, specHost, host, field string) (*SecretRef, string) {
	if a == nil {
		return nil, ""
	}
	if sameOrigin(specHost, host) {
		ref := a.TokenSecretRef
		return &ref, ""
	}
	return nil, fmt.Sprintf("the spec's %s token (Secret %s) is for %s: not sent to %s, which the scorer's /config names as %s.host",
		field, a.TokenSecretRef.Name, hostOf(specHost), hostOf(host), field)
}

// hostOf is a URL's scheme://host[:port] as written, or the URL itself when it has none.
func hostOf(u string) string {
	if o, _, err := origin(u); err == nil {
		return o
	}
	return u
}

// placeholders are DSF's: a result's labels fill them, except scoreName (scoring.params.name)
// and cluster (the scored cluster).
var placeholders = []string{"scoreName", "cluster", "node", "pod", "container", "device", "namespace", "app", "meta"}

var placeholderPattern = regexp.MustCompile(`\$\{([^}]*)\}`)

// checkFormat refuses placeholders DSF does not know: DSF leaves them in the name as they are,
// which no score name scoreflow writes can hold.
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
	return nil
}

// render fills a format as DSF does: a label the result lacks is empty.
func render(f string, values map[string]string) string {
	return placeholderPattern.ReplaceAllStringFunc(f, func(m string) string { return values[m[2:len(m)-1]] })
}

var (
	notNameChars = regexp.MustCompile(`[^a-z0-9.-]`)
	dashes       = regexp.MustCompile(`-+`)
)

// ResourceName makes a score name the AddOnPlacementScore's name exactly as DSF's agent does:
// lower case, each character outside [a-z0-9.-] a "-", runs of "-" one, trimmed of "-" and ".",
// cut to 253 characters ending in a letter or digit; "score" when nothing is left.
func ResourceName(scoreName string) string {
	s := dashes.ReplaceAllString(notNameChars.ReplaceAllString(strings.ToLower(scoreName), "-"), "-")
	s = strings.Trim(s, "-.")
	if len(s) > 253 {
		s = strings.TrimRightFunc(s[:253], func(r rune) bool { return !isAlnum(r) })
	}
	if s == "" {
		return "score"
	}
	if !isAlnum(rune(s[0])) {
		s = "a" + s
	}
	if !isAlnum(rune(s[len(s)-1])) {
		s += "a"
	}
	return s
}

func isAlnum(r rune) bool { return ('a' <= r && r <= 'z') || ('0' <= r && r <= '9') }

// joinPath appends path to host as DSF's url.JoinPath does, without parsing the host (it may be a
// placeholder until Endpoints maps it).
func joinPath(host, path string) string {
	if path == "" {
		return host
	}
	return strings.TrimRight(host, "/") + "/" + strings.TrimLeft(path, "/")
}

func first(vs ...string) string {
	for _, v := range vs {
		if v != "" {
			return v
		}
	}
	return ""
}

func firstPositive(vs ...int) int {
	for _, v := range vs {
		if v > 0 {
			return v
		}
	}
	return 0
}
