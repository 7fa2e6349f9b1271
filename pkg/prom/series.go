package prom

import (
	"fmt"
	"time"

	"github.com/prometheus/common/model"
)

// MaxPoints is the most points per series a range query may ask for (Prometheus refuses more
// than 11,000 with bad_data; checking first names the config field instead).
const MaxPoints = 11000

// AlignedRange returns the range [end-rng, end] with end = now rounded down to a multiple of step
// (since the Unix epoch). Successive evaluations then sample the same grid, so a score does not
// wobble with the second at which a PingSource fired, and samples written on that grid are
// evaluated exactly.
func AlignedRange(now time.Time, rng, step time.Duration) (start, end time.Time) {
	ms := now.UnixMilli()
	ms -= ms % step.Milliseconds()
	end = time.UnixMilli(ms)
	return end.Add(-rng), end
}

// CheckRange validates a range and step from a configuration, naming the fields.
func CheckRange(rng, step time.Duration) error {
	switch {
	case rng <= 0:
		return fmt.Errorf("range must be positive, not %v", rng)
	case step < time.Millisecond:
		return fmt.Errorf("step must be at least 1ms, not %v", step)
	case step > rng:
		return fmt.Errorf("step (%v) must not exceed range (%v)", step, rng)
	case int64(rng/step)+1 > MaxPoints:
		return fmt.Errorf("range/step is %d points per series, more than Prometheus' %d", int64(rng/step)+1, MaxPoints)
	}
	return nil
}

// Labels copies a series' labels into a plain map (for normalize.NameFormat).
func Labels(m model.Metric) map[string]string {
	out := make(map[string]string, len(m))
	for k, v := range m {
		out[string(k)] = string(v)
	}
	return out
}
