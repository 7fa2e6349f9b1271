package contract

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Bounds of one score.updated event.
const (
	MaxItems = 10000
	// MaxScoresPerItem bounds one cluster's scores in one event: room for a Dynamic Scoring
	// Framework scorer over ${node};${namespace};${pod} on a cluster of a few thousand pods. What
	// one AddOnPlacementScore holds is bounded by MaxObjectStatusBytes, whatever the count.
	MaxScoresPerItem = 4096

	maxClusterNameLength = 63 // a DNS-1123 label
)

// MaxValidity bounds validUntil: at most this long after the event's time (its observation). A
// validUntil further ahead is refused, as is the zero time (0001-01-01T00:00:00Z, which some
// encoders write for "unset"): scores that never expire say neverExpires. Scorers refresh their
// scores every few minutes; a week covers producers that send only daily.
const MaxValidity = 7 * 24 * time.Hour

// MaxObjectStatusBytes bounds what the score-writer keeps in one AddOnPlacementScore: its
// status.scores and the writer's order ledger (the status conditions scoreflow.io/Observations,
// one line per score name: source, observation time, validUntil), as the writer encodes them.
// 640 KiB holds 2,906 scores of 100-character names from one producer (a few thousand pods of a
// cluster, each its own score; 1,231 of 253 characters), a little fewer when several producers
// share the object (each event's source and times are recorded once), and keeps the stored
// object (663,014 bytes at the bound, managedFields included: test/writer) well inside etcd's
// 1.5 MiB request limit. An item that would take an object past it is refused alone (Failed,
// Rejected, saying so); the items and updates written with it are not.
const MaxObjectStatusBytes = 640 << 10

// ScoreUpdated is the data of io.scoreflow.score.updated: the scores of one AddOnPlacementScore
// resource for every cluster a scorer evaluated. One event carries every cluster because a Knative
// subscriber replies with exactly one event, unless they exceed one event's bounds
// (NewScoreUpdates splits them). The CloudEvent's time is when the underlying metrics
// were observed (it orders updates); its source names the scorer.
type ScoreUpdated struct {
	// Resource is the AddOnPlacementScore name, the same in each cluster's namespace.
	Resource string          `json:"resource"`
	Items    []ClusterScores `json:"items"`
	// ValidUntil, when set, is when these scores stop being valid; the writer defaults it to the
	// observation time plus its TTL. At most MaxValidity after the event's time, never the zero time.
	ValidUntil *time.Time `json:"validUntil,omitempty"`
	// NeverExpires keeps the scores valid until they are replaced (OCM's validUntil nil): for
	// producers that send only on change, such as cluster health from ApiServerSource events.
	NeverExpires bool `json:"neverExpires,omitempty"`
}

// ClusterScores is one cluster's scores within a ScoreUpdated.
type ClusterScores struct {
	Cluster string  `json:"cluster"`
	Scores  []Score `json:"scores"`
}

// Score is one named score. Value is a number so that a fractional or out-of-range value reaches
// validation (and is refused for its item alone) instead of failing to decode the whole event.
type Score struct {
	Name  string  `json:"name"`
	Value float64 `json:"value"`
}

// Validate reports every problem of the event, each naming its field.
func (s *ScoreUpdated) Validate() error {
	errs := s.validateEnvelope()
	for i := range s.Items {
		errs = append(errs, s.Items[i].validateAt(func() string { return fmt.Sprintf("items[%d]", i) })...)
	}
	return errs.orNil()
}

// ValidateEnvelope reports the problems that make the whole event unusable; item problems are left
// to ValidateItem, so that one bad item does not stop the others.
func (s *ScoreUpdated) ValidateEnvelope() error { return s.validateEnvelope().orNil() }

func (s *ScoreUpdated) validateEnvelope() FieldErrors {
	var errs FieldErrors
	if err := ValidateResourceName(s.Resource); err != nil {
		errs = append(errs, fieldErr(ReasonInvalidData, "resource", "%v", err))
	}
	switch {
	case len(s.Items) == 0:
		errs = append(errs, fieldErr(ReasonInvalidData, "items", "at least one item is required"))
	case len(s.Items) > MaxItems:
		errs = append(errs, fieldErr(ReasonInvalidData, "items", "%d items, more than %d", len(s.Items), MaxItems))
	}
	if s.NeverExpires && s.ValidUntil != nil {
		errs = append(errs, fieldErr(ReasonInvalidData, "neverExpires", "contradicts validUntil: set one or the other"))
	}
	if s.ValidUntil != nil && s.ValidUntil.IsZero() {
		errs = append(errs, fieldErr(ReasonInvalidData, "validUntil", "is the zero time (0001-01-01T00:00:00Z): set neverExpires for scores that never expire"))
	}
	seen := make(map[string]int, len(s.Items))
	for i, it := range s.Items {
		if len(it.Cluster) > maxClusterNameLength {
			continue // not a cluster name: ValidateItem refuses it, and no lookup pays for its length
		}
		if j, dup := seen[it.Cluster]; dup {
			errs = append(errs, fieldErr(ReasonInvalidData, fmt.Sprintf("items[%d].cluster", i), "cluster %q also appears in items[%d]", it.Cluster, j))
		}
		seen[it.Cluster] = i
	}
	return errs
}

// CheckValidUntil refuses a validUntil more than MaxValidity after observed, the event's time (see
// ObservedTime): every time the writer schedules must be bounded.
func (s *ScoreUpdated) CheckValidUntil(observed time.Time) *FieldError {
	if s.ValidUntil == nil {
		return nil
	}
	if horizon := observed.Add(MaxValidity); s.ValidUntil.After(horizon) {
		fe := fieldErr(ReasonInvalidData, "validUntil", "%s is more than %s after the event's time %s (at most %s)",
			s.ValidUntil.UTC().Format(time.RFC3339), MaxValidity, observed.UTC().Format(time.RFC3339), horizon.UTC().Format(time.RFC3339))
		return &fe
	}
	return nil
}

// ValidateItem reports the first problem of item i, or nil. Its Reason says how the writer answers:
// UnknownCluster, InvalidScore or OutOfRange.
func (s *ScoreUpdated) ValidateItem(i int) *FieldError {
	if errs := s.Items[i].validateAt(func() string { return fmt.Sprintf("items[%d]", i) }); len(errs) > 0 {
		return &errs[0]
	}
	return nil
}

// validateAt reports the item's problems, each naming its field under the item's path, which is
// made only when there is an error to name: a fleet's event holds tens of thousands of scores,
// nearly always valid.
func (c *ClusterScores) validateAt(field func() string) FieldErrors {
	var errs FieldErrors
	if err := ValidateClusterName(c.Cluster); err != nil {
		errs = append(errs, fieldErr(ReasonUnknownCluster, field()+".cluster", "%v", err))
	}
	switch {
	case len(c.Scores) == 0:
		errs = append(errs, fieldErr(ReasonInvalidScore, field()+".scores", "at least one score is required"))
	case len(c.Scores) > MaxScoresPerItem:
		errs = append(errs, fieldErr(ReasonInvalidScore, field()+".scores", "%d scores, more than %d", len(c.Scores), MaxScoresPerItem))
	}
	// An item's few scores are checked for a repeated name by comparing with those before; a
	// map is made only for many (a fleet's event has an item per cluster).
	var seen map[string]bool
	if len(c.Scores) > 16 {
		seen = make(map[string]bool, len(c.Scores))
	}
	for j, sc := range c.Scores {
		sf := func() string { return fmt.Sprintf("%s.scores[%d]", field(), j) }
		if err := ValidateScoreName(sc.Name); err != nil {
			errs = append(errs, fieldErr(ReasonInvalidScore, sf()+".name", "%v", err))
		} else if seen[sc.Name] || (seen == nil && slices.ContainsFunc(c.Scores[:j], func(o Score) bool { return o.Name == sc.Name })) {
			errs = append(errs, fieldErr(ReasonInvalidScore, sf()+".name", "score %q appears twice", sc.Name))
		}
		if seen != nil {
			seen[sc.Name] = true
		}
		if err := CheckScoreValue(sc.Value); err != nil {
			errs = append(errs, fieldErr(ReasonOutOfRange, sf()+".value", "%v", err))
		}
	}
	return errs
}

// CheckScoreValue accepts whole numbers in [MinScore, MaxScore]. Scorers normalise; the writer is strict.
func CheckScoreValue(v float64) error {
	switch {
	case math.IsNaN(v) || math.IsInf(v, 0):
		return fmt.Errorf("%v is not a finite number", v)
	case v != math.Trunc(v):
		return fmt.Errorf("%v is not a whole number", v)
	case v < MinScore || v > MaxScore:
		return fmt.Errorf("%v is outside [%d, %d]", v, MinScore, MaxScore)
	}
	return nil
}
