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
		level, trend = holtStep(level, trend, ps[i].Y, ps[i].X-ps[i-1].X, alpha, beta)
	}
	return level + trend*ahead, true
}

// HoltSamples is Holt over a range query's series as Prometheus returned it: the points are the
// samples' values that are not NaN, at X = (t - end) / step, and each is used as it is read, not
// copied out first. It returns what Holt returns for those points, to the bit, with how many
// there were and the last one's X.
func HoltSamples(vs []model.SamplePair, end model.Time, step time.Duration, alpha, beta, ahead float64) (v float64, n int, lastX float64) {
	stepMs := float64(step.Milliseconds())
	var h holt
	for _, p := range vs {
		h = h.add(p, end, stepMs, alpha, beta)
	}
	return h.forecast(ahead), h.n, h.lastX
}

// HoltSamples2 is HoltSamples of two series at once. Each point waits on the one before it in
// its series (Holt's level and trend) and on memory; taking the two series' points in turn lets
// the processor work on one while the other waits, a fleet's answer holding ~730,000 of them.
// The loop spells out holt.add for each series: add is too large for the compiler to inline,
// and a call per point takes the gain away (Score10000 with add called: no faster than one
// series at a time).
func HoltSamples2(a, b []model.SamplePair, end model.Time, step time.Duration, alpha, beta, ahead float64) (va float64, na int, lastXa float64, vb float64, nb int, lastXb float64) {
	stepMs := float64(step.Milliseconds())
	var ha, hb holt
	both := min(len(a), len(b))
	for i := range both {
		if y := float64(a[i].Value); y == y {
			x := float64(a[i].Timestamp-end) / stepMs
			if ha.n < 2 {
				ha = ha.start(x, y, alpha, beta)
			} else {
				ha.level, ha.trend = holtStep(ha.level, ha.trend, y, x-ha.lastX, alpha, beta)
				ha.n++
				ha.lastX = x
			}
		}
		if y := float64(b[i].Value); y == y {
			x := float64(b[i].Timestamp-end) / stepMs
			if hb.n < 2 {
				hb = hb.start(x, y, alpha, beta)
			} else {
				hb.level, hb.trend = holtStep(hb.level, hb.trend, y, x-hb.lastX, alpha, beta)
				hb.n++
				hb.lastX = x
			}
		}
	}
	for _, p := range a[both:] {
		ha = ha.add(p, end, stepMs, alpha, beta)
	}
	for _, p := range b[both:] {
		hb = hb.add(p, end, stepMs, alpha, beta)
	}
	return ha.forecast(ahead), ha.n, ha.lastX, hb.forecast(ahead), hb.n, hb.lastX
}

// holt is Holt's state over the points read so far: at most four words, which the compiler
// keeps in registers.
type holt struct {
	level, trend, lastX float64
	n                   int
}

// add reads one sample: a NaN value is no point.
func (h holt) add(p model.SamplePair, end model.Time, stepMs, alpha, beta float64) holt {
	y := float64(p.Value)
	if y != y { // NaN
		return h
	}
	x := float64(p.Timestamp-end) / stepMs
	if h.n < 2 {
		return h.start(x, y, alpha, beta)
	}
	h.level, h.trend = holtStep(h.level, h.trend, y, x-h.lastX, alpha, beta)
	h.n++
	h.lastX = x
	return h
}

// start reads the first two points: the level starts at the first, the trend at the slope to
// the second. Kept out of add so that add is small enough to be inlined.
func (h holt) start(x, y, alpha, beta float64) holt {
	if h.n == 0 {
		h.level = y
	} else {
		h.trend = (y - h.level) / (x - h.lastX)
		h.level, h.trend = holtStep(h.level, h.trend, y, x-h.lastX, alpha, beta)
	}
	h.n++
	h.lastX = x
	return h
}

func (h holt) forecast(ahead float64) float64 {
	if h.n < 2 {
		return math.NaN()
	}
	return h.level + h.trend*ahead
}

// holtStep takes the level and trend past one point y, dt steps after the previous one.
func holtStep(level, trend, y, dt, alpha, beta float64) (float64, float64) {
	prev := level
	if dt == 1 {
		// The usual step, written without the division: it would sit on the chain from one
		// point's trend to the next one's, and dividing by 1 changes no bit.
		level = alpha*y + (1-alpha)*(level+trend)
		return level, beta*(level-prev) + (1-beta)*trend
	}
	level = alpha*y + (1-alpha)*(level+trend*dt)
	return level, beta*(level-prev)/dt + (1-beta)*trend
}
