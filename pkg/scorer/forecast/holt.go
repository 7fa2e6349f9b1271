package forecast

import (
	"math"
	"time"

	"github.com/prometheus/common/model"
)

// Point is one observation: X in steps from any origin, Y the value.
type Point struct{ X, Y float64 }

// Holt forecasts the value `ahead` steps after the last point with Holt's linear (double
// exponential) smoothing: a level and a trend, each an exponentially weighted average, alpha
// weighting new values into the level and beta new slopes into the trend. It starts from the first
// point and the first slope. A gap (missing steps) is bridged by advancing the level along the
// trend for the missing steps and measuring the new slope per step. With fewer than two points it
// returns ok=false.
//
// A perfectly linear series is forecast exactly, whatever alpha and beta.
func Holt(ps []Point, alpha, beta, ahead float64) (v float64, ok bool) {
	if len(ps) < 2 {
		return math.NaN(), false
	}
	level := ps[0].Y
	trend := (ps[1].Y - ps[0].Y) / (ps[1].X - ps[0].X)
	for i := 1; i < len(ps); i++ {
		dt := ps[i].X - ps[i-1].X
		prev := level
		level = alpha*ps[i].Y + (1-alpha)*(level+trend*dt)
		trend = beta*(level-prev)/dt + (1-beta)*trend
	}
	return level + trend*ahead, true
}

// Points are a range query's series as Holt reads it: the samples whose value is not NaN, at X
// = (t - end) / step, so that the point at end has X 0.
func Points(vs []model.SamplePair, end model.Time, step time.Duration) []Point {
	ps := make([]Point, 0, len(vs))
	for _, p := range vs {
		if !math.IsNaN(float64(p.Value)) {
			ps = append(ps, Point{X: float64(p.Timestamp-end) / float64(step.Milliseconds()), Y: float64(p.Value)})
		}
	}
	return ps
}
