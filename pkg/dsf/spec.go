package dsf

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
)

// The DynamicScorer API, as the Dynamic Scoring Framework publishes it (group
// dynamic-scoring.open-cluster-management.io, version v1alpha1). The types are written from DSF's
// API documentation and CRD, field for field, so that a DynamicScorer a DSF user wrote decodes as
// it is; addon/dsf/crds holds the CRDs scoreflow ships for hubs without DSF.
const (
	Group   = "dynamic-scoring.open-cluster-management.io"
	Version = "v1alpha1"

	KindScorer = "DynamicScorer"
	KindConfig = "DynamicScoringConfig"

	// ConfigName is the one DynamicScoringConfig DSF reads (its masks); others are ignored.
	ConfigName = "dynamic-scoring-config"
)

// Values of the DynamicScorer fields.
const (
	SyncFull = "Full"
	SyncNone = "None"

	SourcePrometheus = "Prometheus"
	SourceNone       = "None"

	DestinationAPS  = "AddOnPlacementScore"
	DestinationNone = "None"

	// DefaultDimensionFormat names each score when a spec names no format (DSF's default).
	DefaultDimensionFormat = "${scoreName}"

	// status.healthStatus: Active when the last probe succeeded, Inactive when it failed, Unknown
	// (or empty) before any.
	HealthActive   = "Active"
	HealthInactive = "Inactive"
	HealthUnknown  = "Unknown"
)

// DynamicScorer is one scorer a cluster administrator registered.
type DynamicScorer struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              ScorerSpec   `json:"spec"`
	Status            ScorerStatus `json:"status,omitempty"`
}

// ScorerStatus is DynamicScorer.status, as DSF's controller writes it and scoreflow's hub-side
// StatusWriter writes it in its place: every 30 seconds the scorer's health, and with
// configSyncMode Full its /config answer. The agents run a scorer only while it is Active, with
// the /config synced here: they never ask the scorer for its /config themselves.
type ScorerStatus struct {
	HealthStatus string `json:"healthStatus,omitempty"`
	// LastSyncedConfig is the last /config answer that decoded (configSyncMode Full only).
	LastSyncedConfig *RemoteConfig `json:"lastSyncedConfig,omitempty"`
}

// ScorerSpec is DynamicScorer.spec.
type ScorerSpec struct {
	Description string `json:"description,omitempty"`
	// ConfigURL is the scorer's GET /config; its scheme and host also locate /healthz and, when
	// nothing else names one, the scoring and source hosts.
	ConfigURL string `json:"configURL,omitempty"`
	// ConfigSyncMode Full: /config's fields win, field by field, over the spec's; None: the spec's.
	ConfigSyncMode       string      `json:"configSyncMode,omitempty"`
	Location             string      `json:"location,omitempty"`
	Source               SourceSpec  `json:"source,omitempty"`
	Scoring              ScoringSpec `json:"scoring,omitempty"`
	ScoreDestination     string      `json:"scoreDestination,omitempty"`
	ScoreDimensionFormat string      `json:"scoreDimensionFormat,omitempty"`
}

// SourceSpec is DynamicScorer.spec.source: where the agent reads the series the scorer is sent.
type SourceSpec struct {
	Type   string        `json:"type,omitempty"`
	Host   string        `json:"host,omitempty"`
	Path   string        `json:"path,omitempty"`
	Params *SourceParams `json:"params,omitempty"`
	Auth   *Auth         `json:"auth,omitempty"`
}

// ScoringSpec is DynamicScorer.spec.scoring: the scorer's scoring endpoint.
type ScoringSpec struct {
	Host   string         `json:"host,omitempty"`
	Path   string         `json:"path,omitempty"`
	Params *ScoringParams `json:"params,omitempty"`
	Auth   *Auth          `json:"auth,omitempty"`
}

// SourceParams are the range query: query (several joined by ";"), range and step in seconds.
type SourceParams struct {
	Query string `json:"query,omitempty"`
	Range int    `json:"range,omitempty"`
	Step  int    `json:"step,omitempty"`
}

// ScoringParams name the score and say how often the scorer is called (seconds).
type ScoringParams struct {
	Name     string `json:"name,omitempty"`
	Interval int    `json:"interval,omitempty"`
}

// Auth is a bearer token from a key of a Secret, sent only to the host the spec itself names for
// it (Tokens says where Secrets are read from).
type Auth struct {
	TokenSecretRef SecretRef `json:"tokenSecretRef"`
}

// SecretRef names a key of a Secret.
type SecretRef struct {
	Name string `json:"name"`
	Key  string `json:"key"`
}

// ScoringConfig is DynamicScoringConfig: DSF's distribution settings, of which scoreflow reads
// the masks.
type ScoringConfig struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              struct {
		Masks []Mask `json:"masks,omitempty"`
	} `json:"spec"`
	Status json.RawMessage `json:"status,omitempty"`
}

// Mask turns one score (scoring.params.name) off for one cluster: that cluster's data is never
// sent to the scorer and no score of it is written.
type Mask struct {
	ClusterName string `json:"clusterName"`
	ScoreName   string `json:"scoreName"`
}

// Masks is a set of masks.
type Masks map[Mask]bool

// NewMasks makes the set of ms.
func NewMasks(ms []Mask) Masks {
	out := Masks{}
	for _, m := range ms {
		out[m] = true
	}
	return out
}

// Has reports whether score is masked for cluster.
func (m Masks) Has(cluster, score string) bool {
	return m[Mask{ClusterName: cluster, ScoreName: score}]
}

// RemoteConfig is a scorer's GET /config, and status.lastSyncedConfig: DSF's common.Config, its
// JSON field for field (pkg/common/types.go), so that what is written in a status is what DSF's
// controller writes.
type RemoteConfig struct {
	Name        string        `json:"name"`
	Description string        `json:"description"`
	Source      RemoteSource  `json:"source"`
	Scoring     RemoteScoring `json:"scoring"`
}

// RemoteSource is /config's source.
type RemoteSource struct {
	Type   string             `json:"type,omitempty"`
	Host   string             `json:"host,omitempty"`
	Path   string             `json:"path"`
	Params RemoteSourceParams `json:"params"`
}

// RemoteSourceParams are /config's source.params: every field written, as DSF writes them.
type RemoteSourceParams struct {
	Query string `json:"query"`
	Range int    `json:"range"`
	Step  int    `json:"step"`
}

// RemoteScoring is /config's scoring.
type RemoteScoring struct {
	Host   string              `json:"host,omitempty"`
	Path   string              `json:"path"`
	Params RemoteScoringParams `json:"params"`
}

// RemoteScoringParams are /config's scoring.params.
type RemoteScoringParams struct {
	Name     string `json:"name"`
	Interval int    `json:"interval"`
}

// Objects are DynamicScorers and the DynamicScoringConfig, as a file or the hub holds them.
type Objects struct {
	Scorers []DynamicScorer
	Masks   Masks
}

// DecodeObjects reads YAML or JSON documents (separated by "---") of DynamicScorers and
// DynamicScoringConfigs, as DSF publishes and users apply them. A field no DSF object has is an
// error, so that a misspelt field is reported rather than ignored; so are two scorers of one name.
// Only the DynamicScoringConfig named dynamic-scoring-config counts, as in DSF.
func DecodeObjects(r io.Reader) (*Objects, error) {
	out := &Objects{Masks: Masks{}}
	seen := map[string]bool{}
	docs := utilyaml.NewYAMLReader(bufio.NewReader(r))
	for n := 1; ; n++ {
		raw, err := docs.Read()
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return nil, err
		}
		j, err := utilyaml.ToJSON(raw)
		if err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if len(bytes.TrimSpace(j)) == 0 || string(bytes.TrimSpace(j)) == "null" {
			continue
		}
		var tm metav1.TypeMeta
		if err := json.Unmarshal(j, &tm); err != nil {
			return nil, fmt.Errorf("document %d: %w", n, err)
		}
		if tm.APIVersion != Group+"/"+Version {
			return nil, fmt.Errorf("document %d: apiVersion %q, want %s/%s", n, tm.APIVersion, Group, Version)
		}
		switch tm.Kind {
		case KindScorer:
			var s DynamicScorer
			if err := strict(j, &s); err != nil {
				return nil, fmt.Errorf("document %d (DynamicScorer): %w", n, err)
			}
			if s.Name == "" {
				return nil, fmt.Errorf("document %d: a DynamicScorer without metadata.name", n)
			}
			if seen[s.Name] {
				return nil, fmt.Errorf("document %d: a second DynamicScorer %q", n, s.Name)
			}
			seen[s.Name] = true
			out.Scorers = append(out.Scorers, s)
		case KindConfig:
			var c ScoringConfig
			if err := strict(j, &c); err != nil {
				return nil, fmt.Errorf("document %d (DynamicScoringConfig): %w", n, err)
			}
			if c.Name == ConfigName {
				out.Masks = NewMasks(c.Spec.Masks)
			}
		default:
			return nil, fmt.Errorf("document %d: kind %q, want %s or %s", n, tm.Kind, KindScorer, KindConfig)
		}
	}
}

func strict(j []byte, v any) error {
	dec := json.NewDecoder(bytes.NewReader(j))
	dec.DisallowUnknownFields()
	return dec.Decode(v)
}
