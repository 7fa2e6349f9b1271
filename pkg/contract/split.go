package contract

import (
	"fmt"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
)

// MaxScoreUpdatedDataBytes bounds the data of one score.updated a scorer builds: MaxEventBytes
// less room for the attributes, which a structured-mode request carries in its body too (the
// contract bounds them to well under a kilobyte).
const MaxScoreUpdatedDataBytes = MaxEventBytes - 16<<10

// NewScoreUpdates builds the score.updated events for s, each validated as NewScoreUpdated does.
// When s fits one event (at most MaxItems items, data at most MaxScoreUpdatedDataBytes) that is
// the only one. Otherwise its items are split, in order, into as few events as keep each within
// both bounds: every event has s's resource, validUntil or neverExpires, source and observed time,
// and together they carry every item exactly once. A cluster may appear only once in s, as in one
// event.
func NewScoreUpdates(source string, observed time.Time, s ScoreUpdated) ([]event.Event, error) {
	return SplitScoreUpdates(source, observed, s, MaxItems)
}

// SplitScoreUpdates is NewScoreUpdates with at most maxItems items per event (0, or more than
// MaxItems: MaxItems), for a producer that wants smaller parts than the contract allows.
func SplitScoreUpdates(source string, observed time.Time, s ScoreUpdated, maxItems int) ([]event.Event, error) {
	if maxItems <= 0 || maxItems > MaxItems {
		maxItems = MaxItems
	}
	if len(s.Items) <= maxItems {
		e, err := NewScoreUpdated(source, observed, s)
		if err != nil {
			return nil, err
		}
		if len(e.Data()) <= MaxScoreUpdatedDataBytes {
			return []event.Event{e}, nil
		}
	}
	if err := s.validateClustersOnce(); err != nil {
		return nil, fmt.Errorf("score.updated for %q: %w", s.Resource, err)
	}
	empty := s
	empty.Items = nil
	head, err := appendScoreUpdated(nil, &empty) // {"resource":...,"items":null,...}: "null" stands in for "[]"
	if err != nil {
		return nil, err
	}
	var out []event.Event
	var b []byte
	for start := 0; start < len(s.Items); {
		size, end := len(head), start
		for end < len(s.Items) && end-start < maxItems {
			b, err = appendClusterScores(b[:0], &s.Items[end])
			if err != nil {
				return nil, err
			}
			if size+len(b)+1 > MaxScoreUpdatedDataBytes && end > start {
				break
			}
			size += len(b) + 1 // and a comma
			end++
		}
		part := s
		part.Items = s.Items[start:end]
		e, err := NewScoreUpdated(source, observed, part)
		if err != nil {
			return nil, err
		}
		if len(e.Data()) > MaxScoreUpdatedDataBytes {
			return nil, fmt.Errorf("score.updated for %q: item %d alone is %d bytes, more than one event holds", s.Resource, start, len(e.Data()))
		}
		out = append(out, e)
		start = end
	}
	return out, nil
}

// validateClustersOnce refuses a cluster named by two items, across the whole list.
func (s *ScoreUpdated) validateClustersOnce() error {
	seen := make(map[string]int, len(s.Items))
	var errs FieldErrors
	for i, it := range s.Items {
		if j, dup := seen[it.Cluster]; dup {
			errs = append(errs, fieldErr(ReasonInvalidData, fmt.Sprintf("items[%d].cluster", i), "cluster %s also appears in items[%d]", echo(it.Cluster), j))
		}
		seen[it.Cluster] = i
	}
	return errs.orNil()
}
