package normalize

import (
	"fmt"
	"math"
	"sort"
)

// Aggregations of a range of samples into one value.
const (
	AggLast = "last"
	AggAvg  = "avg"
	AggMin  = "min"
	AggMax  = "max"
	AggP95  = "p95"
)

// ValidateAggregation checks an aggregation name.
func ValidateAggregation(name string) error {
	switch name {
	case AggLast, AggAvg, AggMin, AggMax, AggP95:
		return nil
	}
	return fmt.Errorf("aggregation %q is not one of last, avg, min, max, p95", name)
}

// Aggregate reduces values, in time order, to one. NaN samples (Prometheus stale markers and the
// like) are ignored; with none left the result is NaN, which scores nothing. p95 is the nearest-rank
// percentile: the smallest value with at least 95% of the values at or below it.
func Aggregate(name string, values []float64) float64 {
	vs := make([]float64, 0, len(values))
	for _, v := range values {
		if !math.IsNaN(v) {
			vs = append(vs, v)
		}
	}
	if len(vs) == 0 {
		return math.NaN()
	}
	switch name {
	case AggLast:
		return vs[len(vs)-1]
	case AggAvg:
		sum := 0.0
		for _, v := range vs {
			sum += v
		}
		return sum / float64(len(vs))
	case AggMin:
		m := vs[0]
		for _, v := range vs[1:] {
			m = math.Min(m, v)
		}
		return m
	case AggMax:
		m := vs[0]
		for _, v := range vs[1:] {
			m = math.Max(m, v)
		}
		return m
	case AggP95:
		sort.Float64s(vs)
		rank := int(math.Ceil(0.95 * float64(len(vs))))
		return vs[rank-1]
	}
	return math.NaN()
}
