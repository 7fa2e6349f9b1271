package forecast

import (
	"fmt"
	"math"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
)

func pts(ys ...float64) []Point {
	ps := make([]Point, len(ys))
	for i, y := range ys {
		ps[i] = Point{X: float64(i), Y: y}
	}
	return ps
}

func TestHolt(t *testing.T) {
	tests := []struct {
		name               string
		ps                 []Point
		alpha, beta, ahead float64
		want               float64
		ok                 bool
	}{
		// A line is forecast exactly: 1, 2, 3, 4 -> 3 steps on, 7.
		{"line", pts(1, 2, 3, 4), 0.3, 0.2, 3, 7, true},
		// Worked by hand, alpha = beta = 0.5. Start: level 10, trend 14-10 = 4.
		//   14: level .5*14 + .5*(10+4)      = 14      trend .5*(14-10)      + .5*4    = 4
		//   13: level .5*13 + .5*(14+4)      = 15.5    trend .5*(15.5-14)    + .5*4    = 2.75
		//   17: level .5*17 + .5*(15.5+2.75) = 17.625  trend .5*(17.625-15.5)+ .5*2.75 = 2.4375
		//   2 steps on: 17.625 + 2*2.4375 = 22.5
		{"hand worked", pts(10, 14, 13, 17), 0.5, 0.5, 2, 22.5, true},
		// alpha = beta = 1: level is the last value, trend the last slope: 6 + (6-7)*1 = 5.
		{"no smoothing", pts(5, 7, 6), 1, 1, 1, 5, true},
		// A gap of two steps (X 1 -> 3) on the line y = x: level .5*3 + .5*(1+1*2) = 3, trend
		// .5*(3-1)/2 + .5*1 = 1; one step on, 4.
		{"gap", []Point{{0, 0}, {1, 1}, {3, 3}}, 0.5, 0.5, 1, 4, true},
		{"one point", pts(5), 0.5, 0.5, 1, math.NaN(), false},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, ok := Holt(tt.ps, tt.alpha, tt.beta, tt.ahead)
			if ok != tt.ok || (ok && math.Abs(got-tt.want) > 1e-9) {
				t.Errorf("Holt = %v, %v; want %v, %v", got, ok, tt.want, tt.ok)
			}
		})
	}
}

func TestHeadrooms(t *testing.T) {
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	series := func(cluster string, lastOffset time.Duration, ys ...float64) *model.SampleStream {
		s := &model.SampleStream{Metric: model.Metric{"cluster": model.LabelValue(cluster)}}
		for i, y := range ys {
			at := end.Add(lastOffset - time.Duration(len(ys)-1-i)*time.Minute)
			s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(at.UnixNano()), Value: model.SampleValue(y)})
		}
		return s
	}
	cfg := DefaultConfig()
	cfg.Step, cfg.Horizon = model.Duration(time.Minute), model.Duration(5*time.Minute)
	capacity := map[string]float64{"up": 20, "down": 20, "stale": 20, "short": 20, "zero": 0, "gap": 20}
	in, skipped := cfg.Headrooms(model.Matrix{
		series("up", 0, 1, 2, 3),   // 3 + 5 = 8 predicted: (20-8)/20 = 0.6
		series("down", 0, 9, 6, 3), // 3 - 3*5 = -12 predicted, counted as 0: headroom 1
		series("stale", -time.Minute, 1, 2, 3),
		series("short", 0, 1),
		series("zero", 0, 1, 2),
		series("nocap", 0, 1, 2),
		series("gap", 0, 1, math.NaN(), 3), // a NaN is no point: 1 and 3 two steps apart, as "up"
	}, func(c string) (float64, bool) { v, ok := capacity[c]; return v, ok }, end)
	got := map[string]float64{}
	for _, i := range in {
		c, _ := i.Label("cluster")
		got[c] = i.Value
	}
	if len(got) != 3 || math.Abs(got["up"]-0.6) > 1e-9 || got["down"] != 1 || math.Abs(got["gap"]-0.6) > 1e-9 {
		t.Errorf("headrooms = %v, want up 0.6, down 1 and gap 0.6", got)
	}
	if want := (Skipped{Stale: 1, Short: 1, NoCapacity: 2}); skipped != want {
		t.Errorf("skipped = %+v, want %+v", skipped, want)
	}
}

func TestCapacities(t *testing.T) {
	caps, err := Capacities(model.Vector{{Metric: model.Metric{"c": "a"}, Value: 4}, {Metric: model.Metric{"c": "b"}, Value: 8}}, "c")
	if err != nil || !reflect.DeepEqual(caps, map[string]float64{"a": 4, "b": 8}) {
		t.Errorf("Capacities = %v, %v", caps, err)
	}
	if _, err := Capacities(model.Vector{{Metric: model.Metric{"c": "a", "x": "1"}}, {Metric: model.Metric{"c": "a", "x": "2"}}}, "c"); err == nil || !strings.Contains(err.Error(), `two series for cluster "a"`) {
		t.Errorf("duplicate capacity: %v", err)
	}
}

func TestConfigValidate(t *testing.T) {
	const base = `"resource":"r","scoreName":"s","query":"u","range":"1h","step":"1m","horizon":"30m"`
	tests := []struct {
		name  string
		json  string
		quote string
	}{
		{"capacity", `{` + base + `,"capacity":64}`, ""},
		{"capacity query, options", `{` + base + `,"capacityQuery":"c","alpha":0.3,"beta":1,"clusterLabel":"cluster_name","normalize":{"method":"minmax"}}`, ""},
		{"no capacity", `{` + base + `}`, "capacityQuery, capacity: give exactly one"},
		{"both capacities", `{` + base + `,"capacity":1,"capacityQuery":"c"}`, "capacityQuery, capacity: give exactly one"},
		{"zero capacity", `{` + base + `,"capacity":0}`, "capacity: must be a positive number"},
		{"no horizon", `{"resource":"r","scoreName":"s","query":"u","range":"1h","step":"1m","capacity":1}`, "horizon: is required"},
		{"no range", `{"resource":"r","scoreName":"s","query":"u","horizon":"1h","capacity":1}`, "range, step:"},
		{"alpha zero", `{` + base + `,"capacity":1,"alpha":0}`, "alpha: must be in (0, 1]"},
		{"beta above one", `{` + base + `,"capacity":1,"beta":1.5}`, "beta: must be in (0, 1]"},
		{"bad normalize", `{` + base + `,"capacity":1,"normalize":{"method":"log"}}`, "normalize.method"},
		{"no query", `{"resource":"r","scoreName":"s","range":"1h","step":"1m","horizon":"1h","capacity":1}`, "query: is required"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			cfg := DefaultConfig()
			err := contract.DecodeJSON([]byte(tt.json), &cfg)
			if err == nil {
				err = cfg.Validate()
			}
			if (tt.quote == "") != (err == nil) || (err != nil && !strings.Contains(err.Error(), tt.quote)) {
				t.Fatalf("err = %v, want %q", err, tt.quote)
			}
		})
	}
	// The default normalisation is round(100 * headroom).
	out := (&Config{}).output()
	for h, want := range map[float64]int32{0.21875: 22, -0.40625: -41, 1: 100, -3: -100} {
		if got := out.Normalize.Apply(map[string]float64{"c": h})["c"]; got != want {
			t.Errorf("headroom %v scores %d, want %d", h, got, want)
		}
	}
	if n := (&Config{Normalize: &normalize.Normalization{Method: normalize.MethodMinMax}}).output().Normalize; n.Method != normalize.MethodMinMax {
		t.Errorf("normalize override ignored: %+v", n)
	}
}

// BenchmarkScore1000 and BenchmarkScore10000 forecast and score 1,000 and 10,000 clusters from
// one range query result of 73 points each (6h at 5m) against one capacity query result.
func BenchmarkScore1000(b *testing.B)  { benchScore(b, 1000) }
func BenchmarkScore10000(b *testing.B) { benchScore(b, 10000) }

func benchScore(b *testing.B, n int) {
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	cfg := DefaultConfig()
	cfg.Resource, cfg.ScoreName = "r", "headroom"
	cfg.Range, cfg.Step, cfg.Horizon = model.Duration(6*time.Hour), model.Duration(5*time.Minute), model.Duration(time.Hour)
	m := make(model.Matrix, n)
	caps := make(model.Vector, n)
	for i := range m {
		cl := model.LabelValue(fmt.Sprintf("cluster-%05d", i))
		s := &model.SampleStream{Metric: model.Metric{"cluster": cl}}
		for j := range 73 {
			at := end.Add(-time.Duration(72-j) * 5 * time.Minute)
			s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(at.UnixNano()), Value: model.SampleValue(float64(i%32) + float64(j%7))})
		}
		m[i] = s
		caps[i] = &model.Sample{Metric: model.Metric{"cluster": cl}, Value: 64}
	}
	out := cfg.output()
	b.ReportAllocs()
	cpu := benchcpu.Start()
	for b.Loop() {
		c, err := Capacities(caps, "cluster")
		if err != nil {
			b.Fatal(err)
		}
		in, _ := cfg.Headrooms(m, func(cl string) (float64, bool) { v, ok := c[cl]; return v, ok }, end)
		sc, err := out.Score("cluster", in)
		if err != nil || len(sc.Items) != n {
			b.Fatal(err, len(sc.Items))
		}
	}
	cpu.Report(b)
}
