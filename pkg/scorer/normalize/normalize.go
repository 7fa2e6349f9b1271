// Package normalize turns measured values into AddOnPlacementScore values: normalisation to
// [-100, 100], aggregation of a series over a range, and score names filled from labels.
package normalize

import (
	"errors"
	"fmt"
	"math"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Round turns a normalised value into a score: rounded half away from zero (math.Round), then
// clamped to [-100, 100]. NaN has no score and yields ok=false.
func Round(v float64) (score int32, ok bool) {
	if math.IsNaN(v) {
		return 0, false
	}
	return int32(math.Max(contract.MinScore, math.Min(contract.MaxScore, math.Round(v)))), true
}

// Linear maps Min to -100 and Max to 100, linearly between them and clamped outside, as OCM's
// sdk-go ScoreNormalizer does (which truncates where we round). With LowerIsBetter, Min maps to 100
// and Max to -100.
type Linear struct {
	Min, Max      float64
	LowerIsBetter bool
}

// Validate checks that the bounds make a range.
func (l Linear) Validate() error {
	if math.IsNaN(l.Min) || math.IsNaN(l.Max) || math.IsInf(l.Min, 0) || math.IsInf(l.Max, 0) {
		return errors.New("min and max must be finite")
	}
	if !(l.Max > l.Min) {
		return fmt.Errorf("max (%v) must be greater than min (%v)", l.Max, l.Min)
	}
	return nil
}

// Score normalises one value.
func (l Linear) Score(v float64) (int32, bool) {
	s := (v-l.Min)*200/(l.Max-l.Min) - 100
	if l.LowerIsBetter {
		s = -s
	}
	return Round(s)
}

// MinMax normalises the values of one evaluation against each other: the best cluster gets 100,
// the worst -100, the rest linearly between. When every value is equal there is nothing to tell
// the clusters apart and all get 0. NaN values get no score.
func MinMax(values map[string]float64, lowerIsBetter bool) map[string]int32 {
	lo, hi := math.Inf(1), math.Inf(-1)
	for _, v := range values {
		if math.IsNaN(v) {
			continue
		}
		lo, hi = math.Min(lo, v), math.Max(hi, v)
	}
	out := make(map[string]int32, len(values))
	for k, v := range values {
		if math.IsNaN(v) {
			continue
		}
		if hi == lo {
			out[k] = 0
			continue
		}
		if s, ok := (Linear{Min: lo, Max: hi, LowerIsBetter: lowerIsBetter}).Score(v); ok {
			out[k] = s
		}
	}
	return out
}

// Normalization is how a scorer's configuration asks for values to become scores.
//
//	{"method": "linear", "min": 0, "max": 64, "lowerIsBetter": false}
//	{"method": "minmax", "lowerIsBetter": true}
//	{"method": "none"}   values are already scores: rounded and clamped
type Normalization struct {
	Method        string   `json:"method"`
	Min           *float64 `json:"min,omitempty"`
	Max           *float64 `json:"max,omitempty"`
	LowerIsBetter bool     `json:"lowerIsBetter,omitempty"`
}

// Normalization methods.
const (
	MethodLinear = "linear"
	MethodMinMax = "minmax"
	MethodNone   = "none"
)

// Validate checks the configuration, naming the offending field.
func (n Normalization) Validate() error {
	switch n.Method {
	case MethodLinear:
		if n.Min == nil || n.Max == nil {
			return errors.New("normalize: linear needs min and max")
		}
		if err := (Linear{Min: *n.Min, Max: *n.Max}).Validate(); err != nil {
			return fmt.Errorf("normalize: %w", err)
		}
	case MethodMinMax, MethodNone:
		if n.Min != nil || n.Max != nil {
			return fmt.Errorf("normalize: %s takes no min or max", n.Method)
		}
	default:
		return fmt.Errorf("normalize.method: %q is not one of linear, minmax, none", n.Method)
	}
	return nil
}

// Apply scores the values of one evaluation (per cluster, or per any key). Call Validate first.
func (n Normalization) Apply(values map[string]float64) map[string]int32 {
	var lo, hi float64
	if n.Method == MethodMinMax {
		lo, hi = math.Inf(1), math.Inf(-1)
		for _, v := range values {
			lo, hi = rangeWith(lo, hi, v)
		}
	}
	out := make(map[string]int32, len(values))
	for k, v := range values {
		if s, ok := n.score(lo, hi, v); ok {
			out[k] = s
		}
	}
	return out
}

func rangeWith(lo, hi, v float64) (float64, float64) {
	if math.IsNaN(v) {
		return lo, hi
	}
	return math.Min(lo, v), math.Max(hi, v)
}

// score is one value's score; lo and hi are the range of the values for min-max.
func (n Normalization) score(lo, hi, v float64) (int32, bool) {
	switch n.Method {
	case MethodMinMax:
		if math.IsNaN(v) {
			return 0, false
		}
		if hi == lo {
			return 0, true
		}
		return Linear{Min: lo, Max: hi, LowerIsBetter: n.LowerIsBetter}.Score(v)
	case MethodLinear:
		return Linear{Min: *n.Min, Max: *n.Max, LowerIsBetter: n.LowerIsBetter}.Score(v)
	default:
		return Round(v)
	}
}
