package contract

import (
	"fmt"
	"math"
	"slices"
	"time"
)

// Bounds of one score.updated event.
const (
	MaxItems         = 10000
	MaxScoresPerItem = 256

	maxClusterNameLength = 63 // a DNS-1123 label
)

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
	// observation time plus its TTL.
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
