package normalize

import (
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"
)

func f(v float64) *float64 { return &v }

func TestLinear(t *testing.T) {
	tests := []struct {
		l    Linear
		v    float64
		want int32
	}{
		{Linear{Min: 0, Max: 1}, 0, -100},
		{Linear{Min: 0, Max: 1}, 1, 100},
		{Linear{Min: 0, Max: 1}, 0.5, 0},
		{Linear{Min: 0, Max: 1}, 0.75, 50},
		{Linear{Min: 0, Max: 1}, 2, 100},   // clamped
		{Linear{Min: 0, Max: 1}, -3, -100}, // clamped
		{Linear{Min: 0, Max: 64}, 16, -50},
		{Linear{Min: 0, Max: 200}, 0.5, -100}, // -99.5 rounds half away from zero
		{Linear{Min: 0, Max: 200}, 1.5, -99},  // -98.5 rounds half away from zero
		{Linear{Min: 0, Max: 1, LowerIsBetter: true}, 0.25, 50},
	}
	for _, tt := range tests {
		if got, _ := tt.l.Score(tt.v); got != tt.want {
			t.Errorf("%+v.Score(%v) = %d, want %d", tt.l, tt.v, got, tt.want)
		}
	}
	if _, ok := (Linear{Min: 0, Max: 1}).Score(math.NaN()); ok {
		t.Error("NaN scored")
	}
}

func TestMinMax(t *testing.T) {
	got := MinMax(map[string]float64{"a": 10, "b": 20, "c": 15, "d": math.NaN()}, false)
	want := map[string]int32{"a": -100, "b": 100, "c": 0}
	if len(got) != len(want) {
		t.Fatalf("MinMax = %v, want %v", got, want)
	}
	for k, v := range want {
		if got[k] != v {
			t.Errorf("MinMax[%s] = %d, want %d", k, got[k], v)
		}
	}
	inv := MinMax(map[string]float64{"a": 10, "b": 20}, true)
	if inv["a"] != 100 || inv["b"] != -100 {
		t.Errorf("lower is better: %v", inv)
	}
	flat := MinMax(map[string]float64{"a": 3, "b": 3}, false)
	if flat["a"] != 0 || flat["b"] != 0 {
		t.Errorf("equal values: %v", flat)
	}
}

func TestNormalizationValidate(t *testing.T) {
	for _, tt := range []struct {
		n  Normalization
		ok bool
	}{
		{Normalization{Method: "linear", Min: f(0), Max: f(1)}, true},
		{Normalization{Method: "linear", Min: f(1), Max: f(1)}, false},
		{Normalization{Method: "linear", Min: f(0)}, false},
		{Normalization{Method: "minmax"}, true},
		{Normalization{Method: "minmax", Min: f(0)}, false},
		{Normalization{Method: "none"}, true},
		{Normalization{Method: "log"}, false},
	} {
		if err := tt.n.Validate(); (err == nil) != tt.ok {
			t.Errorf("%+v: %v, want ok=%v", tt.n, err, tt.ok)
		}
	}
}

func TestAggregate(t *testing.T) {
	vs := []float64{5, 1, math.NaN(), 3, 9}
	for name, want := range map[string]float64{AggLast: 9, AggAvg: 4.5, AggMin: 1, AggMax: 9} {
		if got := Aggregate(name, vs); got != want {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	var hundred []float64
	for i := 1; i <= 100; i++ {
		hundred = append(hundred, float64(i))
	}
	if got := Aggregate(AggP95, hundred); got != 95 {
		t.Errorf("p95 of 1..100 = %v, want 95", got)
	}
	if got := Aggregate(AggP95, []float64{7}); got != 7 {
		t.Errorf("p95 of one value = %v", got)
	}
	if !math.IsNaN(Aggregate(AggAvg, []float64{math.NaN()})) {
		t.Error("all-NaN aggregate should be NaN")
	}
}

func TestNameFormat(t *testing.T) {
	f := NameFormat("${app};${device}")
	if err := f.Validate(); err != nil {
		t.Fatal(err)
	}
	if got, err := f.Name(map[string]string{"app": "web", "device": "gpu0", "x": "y"}); err != nil || got != "web;gpu0" {
		t.Errorf("Name = %q, %v", got, err)
	}
	if _, err := f.Name(map[string]string{"app": "web"}); err == nil {
		t.Error("missing label accepted")
	}
	if _, err := f.Name(map[string]string{"app": "my app", "device": "gpu0"}); err == nil {
		t.Error("illegal result accepted")
	}
	if err := NameFormat("${app} ${device}").Validate(); err == nil {
		t.Error("format with a space accepted")
	}
}

// fill replaces exactly what the placeholder pattern matches, with the same missing label.
func TestFillMatchesPlaceholderPattern(t *testing.T) {
	labels := map[string]string{"a": "1", "app": "web", "_x9": "z", "B": "b"}
	lookup := func(k string) (string, bool) { v, ok := labels[k]; return v, ok }
	want := func(f string) (string, string) {
		var missing string
		name := placeholder.ReplaceAllStringFunc(f, func(m string) string {
			key := m[2 : len(m)-1]
			v, ok := labels[key]
			if !ok && missing == "" {
				missing = key
			}
			return v
		})
		return name, missing
	}
	cases := []string{"", "x", "${a}", "${app};${B}", "${", "${}", "${a", "$${a}}", "${9}", "${a9}", "${_x9}-${nope}-${other}", "${${a}}", "a${b c}${a}"}
	rng := rand.New(rand.NewPCG(3, 4))
	const alphabet = "${}a_9B;x "
	for range 100000 {
		b := make([]byte, rng.IntN(10))
		for i := range b {
			b[i] = alphabet[rng.IntN(len(alphabet))]
		}
		cases = append(cases, string(b))
	}
	for _, f := range cases {
		gotName, gotMissing := NameFormat(f).fill(lookup)
		wantName, wantMissing := want(f)
		if gotName != wantName || gotMissing != wantMissing {
			t.Errorf("fill(%q) = %q, missing %q; the pattern gives %q, missing %q", f, gotName, gotMissing, wantName, wantMissing)
		}
	}
}

// Apply with min-max scores exactly as MinMax, NaN and infinite values included.
func TestApplyMinMaxIsMinMax(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	for range 20000 {
		n := Normalization{Method: MethodMinMax, LowerIsBetter: rng.IntN(2) == 0}
		m := map[string]float64{}
		for i := range rng.IntN(8) {
			v := (rng.Float64() - 0.3) * 150
			switch rng.IntN(8) {
			case 0:
				v = math.NaN()
			case 1:
				v = math.Inf(1 - 2*rng.IntN(2))
			case 2:
				v = 3
			}
			m[string(rune('a'+i))] = v
		}
		if got, want := n.Apply(m), MinMax(m, n.LowerIsBetter); !reflect.DeepEqual(got, want) {
			t.Fatalf("%+v %v: Apply %v, MinMax %v", n, m, got, want)
		}
	}
}

// TestNameFormatLabels: the labels a format refers to, each once, in order; "${" that is not a
// placeholder refers to none.
func TestNameFormatLabels(t *testing.T) {
	for f, want := range map[NameFormat][]string{
		"load":                       nil,
		"${app};${device}":           {"app", "device"},
		"${device}-${app}-${device}": {"device", "app"},
		"a${-b${x}":                  {"x"},
	} {
		if got := f.Labels(); !slices.Equal(got, want) {
			t.Errorf("%q.Labels() = %q, want %q", f, got, want)
		}
	}
}
