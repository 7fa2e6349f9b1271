package prom

import (
	"encoding/binary"
	"math"
	"slices"
	"strconv"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/jsonscan"
)

// decodeAnswer reads a successful Prometheus API answer whose result is an instant vector or a
// matrix in one pass over its bytes, building the result directly: client_golang reads such an
// answer three times (envelope, data, result) and each sample once more through encoding/json,
// which for a fleet's answer costs many times the scoring.
//
// It takes only the plain shape Prometheus writes: {"status":"success","data":{"resultType",
// "result"},"warnings"?}, samples as {"metric":{...},"value":[ts,"v"]} or
// {"metric":{...},"values":[[ts,"v"],...]}, strings without escapes or bytes outside printable
// ASCII. Anything else (an error answer, histograms, escapes, an unknown key, a repeated key,
// anything malformed) returns ok=false, and the caller decodes the answer as client_golang does,
// which then gives the same result or error as before: this path changes nothing but the cost.
func decodeAnswer(body []byte) (v model.Value, warnings []string, ok bool) {
	d := decoder{Scanner: jsonscan.Scanner{B: body}, names: map[string]model.LabelName{}}
	v, warnings = d.answer()
	if d.Bad {
		return nil, nil, false
	}
	return v, warnings, true
}

// decodePicked is decodeAnswer for an instant vector of which only the labels named are kept
// (Client.QueryLabels): no label map per series. It takes the same plain answers as
// decodeAnswer, less those with more than 16 label names (left to the general path), and
// returns ok=false for anything else, a matrix included.
func decodePicked(body []byte, names []string) (v []Picked, warnings []string, ok bool) {
	d := decoder{Scanner: jsonscan.Scanner{B: body}, names: map[string]model.LabelName{}, pick: names}
	got, warnings := d.answer()
	if d.Bad || got != nil {
		return nil, nil, false
	}
	return d.picked, warnings, true
}

type decoder struct {
	jsonscan.Scanner
	// names interns label names: a fleet's series share a handful of them.
	few   []model.LabelName
	names map[string]model.LabelName
	// recent interns the values of the label few[k]: its last few values, compared in turn. A
	// fleet's series come grouped by cluster and share a few values of each other label (a
	// resource, a device), so most values are one already made.
	recent [][recentValues]model.LabelValue
	// pairs is scratch for one series' points, copied out at its exact length.
	pairs []model.SamplePair
	// samples, streams and points are where the samples, series and points of the result are
	// taken from, a block at a time rather than one allocation each.
	samples []model.Sample
	streams []model.SampleStream
	points  []model.SamplePair
	// pick, when set, names the labels kept of an instant vector's series: the result goes to
	// picked, each series' values taken from blocks of pickedLabels; slot[k] is the place in
	// pick of the name few[k] (-1: not kept).
	pick         []string
	picked       []Picked
	pickedLabels []model.LabelValue
	slot         []int
}

// recentValues is how many values of a label are kept for reuse.
const recentValues = 4

// blockSize is how many samples or series a block holds, and (times 64) how many points.
const blockSize = 256

// take returns the next element of *block, starting a new block when it is full. Each element
// is used for one sample or series only: those of a full block stay where they are.
func take[T any](block *[]T) *T {
	if len(*block) == cap(*block) {
		*block = make([]T, 0, blockSize)
	}
	*block = (*block)[:len(*block)+1]
	return &(*block)[len(*block)-1]
}

func (d *decoder) answer() (v model.Value, warnings []string) {
	var seen [3]bool // status, data, warnings
	once := func(k int) {
		if seen[k] {
			d.Fail()
		}
		seen[k] = true
	}
	d.Object(func(key []byte) {
		switch string(key) {
		case "status":
			once(0)
			if string(d.Str()) != "success" {
				d.Fail()
			}
		case "data":
			once(1)
			v = d.data()
		case "warnings":
			once(2)
			warnings = []string{}
			d.Array(func() { warnings = append(warnings, string(d.Str())) })
		default:
			d.Fail()
		}
	})
	d.WS()
	if !seen[0] || !seen[1] || d.I != len(d.B) {
		d.Fail()
	}
	return v, warnings
}

func (d *decoder) data() (v model.Value) {
	typ := ""
	d.Object(func(key []byte) {
		switch string(key) {
		case "resultType":
			if typ != "" {
				d.Fail()
			}
			typ = string(d.Str())
		case "result":
			// Prometheus writes resultType first; an answer that does not is left to client_golang.
			switch {
			case v != nil:
				d.Fail()
			case typ == model.ValVector.String() && d.pick != nil:
				d.picked = d.pickedVector()
			case typ == model.ValVector.String():
				v = d.vector()
			case typ == model.ValMatrix.String():
				v = d.matrix()
			default:
				d.Fail()
			}
		default:
			d.Fail()
		}
	})
	if v == nil && d.picked == nil {
		d.Fail()
	}
	return v
}

func (d *decoder) vector() model.Vector {
	vec := model.Vector{}
	d.Array(func() {
		s := take(&d.samples)
		p := d.sample(func() { s.Metric = d.metric() })
		s.Timestamp, s.Value = p.Timestamp, p.Value
		vec = append(jsonscan.Grow(vec), s)
	})
	return vec
}

// pickedVector reads an instant vector keeping the labels d.pick names.
func (d *decoder) pickedVector() []Picked {
	out := []Picked{}
	d.Array(func() {
		if cap(d.pickedLabels)-len(d.pickedLabels) < len(d.pick) {
			d.pickedLabels = make([]model.LabelValue, 0, blockSize*len(d.pick))
		}
		n := len(d.pickedLabels)
		d.pickedLabels = d.pickedLabels[:n+len(d.pick)]
		labels := d.pickedLabels[n : n+len(d.pick) : n+len(d.pick)]
		p := d.sample(func() { d.pickLabels(labels) })
		out = append(jsonscan.Grow(out), Picked{Labels: labels, Value: p.Value, Timestamp: p.Timestamp})
	})
	return out
}

// sample reads one {"metric":{...},"value":[ts,"v"]}, metric reading the labels.
func (d *decoder) sample(metric func()) (p model.SamplePair) {
	var seen [2]bool
	d.Object(func(key []byte) {
		switch string(key) {
		case "metric":
			if seen[0] {
				d.Fail()
			}
			seen[0] = true
			metric()
		case "value":
			if seen[1] {
				d.Fail()
			}
			seen[1] = true
			p = d.pair()
		default:
			d.Fail()
		}
	})
	if !seen[0] || !seen[1] {
		d.Fail()
	}
	return p
}

func (d *decoder) matrix() model.Matrix {
	m := model.Matrix{}
	d.Array(func() {
		s := take(&d.streams)
		var seen [2]bool
		d.Object(func(key []byte) {
			switch string(key) {
			case "metric":
				if seen[0] {
					d.Fail()
				}
				seen[0] = true
				s.Metric = d.metric()
			case "values":
				if seen[1] {
					d.Fail()
				}
				seen[1] = true
				d.values()
				if n := len(d.pairs); n > 0 {
					// Each series' points in a block of points, at their exact length: an
					// append to them copies them out rather than writing over the next series'.
					if cap(d.points)-len(d.points) < n {
						d.points = make([]model.SamplePair, 0, max(n, 64*blockSize))
					}
					start := len(d.points)
					d.points = append(d.points, d.pairs...)
					s.Values = d.points[start:len(d.points):len(d.points)]
				}
			default:
				d.Fail()
			}
		})
		if !seen[0] || !seen[1] {
			d.Fail()
		}
		m = append(jsonscan.Grow(m), s)
	})
	return m
}

// name is the interned label name key, and its index in few (-1 if it is not there): the few
// names of a result are compared in turn, which costs less than hashing them; a result with many
// goes on to a map.
func (d *decoder) name(key []byte) (model.LabelName, int) {
	for k, n := range d.few {
		if string(n) == string(key) {
			return n, k
		}
	}
	if n, ok := d.names[string(key)]; ok {
		return n, -1
	}
	n := model.LabelName(key)
	if len(d.few) < 16 {
		d.few = append(d.few, n)
		d.recent = append(d.recent, [recentValues]model.LabelValue{})
		return n, len(d.few) - 1
	}
	d.names[string(n)] = n
	return n, -1
}

// labelValue reads the value of label few[k] (k -1: of another label), interned as recent says.
func (d *decoder) labelValue(k int) model.LabelValue {
	b := d.Str()
	if k < 0 {
		return model.LabelValue(b)
	}
	r := &d.recent[k]
	for _, v := range r {
		if string(v) == string(b) {
			return v
		}
	}
	v := model.LabelValue(b)
	copy(r[1:], r[:])
	r[0] = v
	return v
}

func (d *decoder) metric() model.Metric {
	m := make(model.Metric, 4)
	d.Object(func(key []byte) {
		name, k := d.name(key)
		n := len(m)
		if m[name] = d.labelValue(k); len(m) == n {
			d.Fail() // a label given twice
		}
	})
	return m
}

// pickLabels reads a series' labels, keeping into labels the values of those d.pick names.
func (d *decoder) pickLabels(labels []model.LabelValue) {
	var seen uint32 // bit k: few[k] read (a label given twice is not plain)
	d.Object(func(key []byte) {
		_, k := d.name(key)
		if k < 0 || seen&(1<<k) != 0 {
			d.Fail() // more names than few holds, or a label given twice
			return
		}
		seen |= 1 << k
		for len(d.slot) < len(d.few) {
			d.slot = append(d.slot, slices.Index(d.pick, string(d.few[len(d.slot)])))
		}
		if i := d.slot[k]; i >= 0 {
			labels[i] = d.labelValue(k)
		} else {
			d.Str()
		}
	})
}

// pair reads [ts, "value"].
func (d *decoder) pair() model.SamplePair {
	var p model.SamplePair
	d.Expect('[')
	p.Timestamp = d.timestamp()
	d.Expect(',')
	p.Value = model.SampleValue(d.value())
	d.Expect(']')
	return p
}

// timestamp reads seconds since the epoch as Prometheus writes them (up to millisecond
// precision) into milliseconds, as model.Time's UnmarshalJSON does: more than three decimals are
// cut, not rounded.
func (d *decoder) timestamp() model.Time {
	d.WS()
	t, next, ok := parseTimestamp(d.B, d.I)
	if !ok {
		d.Fail()
		return 0
	}
	d.I = next
	return t
}

// parseTimestamp parses the timestamp at b[i:], returning where it ends.
func parseTimestamp(b []byte, i int) (model.Time, int, bool) {
	neg := i < len(b) && b[i] == '-'
	if neg {
		i++
	}
	start := i
	var sec int64
	if v, ok := eightDigits(b, i); ok {
		sec, i = int64(v), i+8
	}
	for i < len(b) && '0' <= b[i] && b[i] <= '9' {
		sec = sec*10 + int64(b[i]-'0')
		i++
	}
	digits := i - start
	// A leading zero before another digit is not JSON; over 18 digits might overflow.
	if digits == 0 || digits > 18 || (digits > 1 && b[start] == '0') {
		return 0, i, false
	}
	var ms int64
	if i < len(b) && b[i] == '.' {
		i++
		fs := i
		for i < len(b) && '0' <= b[i] && b[i] <= '9' {
			if i-fs < 3 {
				ms = ms*10 + int64(b[i]-'0')
			}
			i++
		}
		n := i - fs
		if n == 0 || n > 9 {
			return 0, i, false
		}
		for k := n; k < 3; k++ {
			ms *= 10
		}
	}
	if i < len(b) && (b[i] == 'e' || b[i] == 'E') {
		return 0, i, false
	}
	if neg {
		// model.Time: base (negative) in seconds, plus the negated fraction.
		return model.Time(-sec*1000 - ms), i, true
	}
	return model.Time(sec*1000 + ms), i, true
}

// values reads a series' points into d.pairs. Points written tightly, [ts,"v"] as Prometheus
// writes them, are read in a loop of their own; any other spelling goes through pair.
func (d *decoder) values() {
	d.pairs = d.pairs[:0]
	d.Expect('[')
	if d.Bad {
		return
	}
	if d.Peek() == ']' {
		d.I++
		return
	}
	b := d.B
	for !d.Bad {
		if p, next, ok := tightPair(b, d.I); ok {
			d.pairs = append(d.pairs, p)
			d.I = next
		} else {
			d.pairs = append(d.pairs, d.pair())
		}
		if d.I < len(b) && b[d.I] == ',' {
			d.I++
			continue
		}
		switch d.Peek() {
		case ',':
			d.I++
		case ']':
			d.I++
			return
		default:
			d.Fail()
		}
	}
}

// eightDigits reads the eight bytes at b[i:] as a decimal number, if they are all digits, in a
// few word operations rather than a loop: a range answer's timestamps are ten digits each.
func eightDigits(b []byte, i int) (uint64, bool) {
	if len(b)-i < 8 {
		return 0, false
	}
	v := binary.LittleEndian.Uint64(b[i:]) // the first digit in the lowest byte
	// A byte is a digit when its high half is 3 and adding 6 leaves it 3.
	if v&0xF0F0F0F0F0F0F0F0 != 0x3030303030303030 || (v+0x0606060606060606)&0xF0F0F0F0F0F0F0F0 != 0x3030303030303030 {
		return 0, false
	}
	v &= 0x0F0F0F0F0F0F0F0F
	v = (v*10 + v>>8) & 0x00FF00FF00FF00FF   // pairs of digits, in every other byte
	v = (v*100 + v>>16) & 0x0000FFFF0000FFFF // fours, in every other 16 bits
	return (v*10000 + v>>32) & 0xFFFFFFFF, true
}

// tightPair reads [ts,"v"] at b[i:] with no whitespace and a plain value string.
func tightPair(b []byte, i int) (model.SamplePair, int, bool) {
	var p model.SamplePair
	if i >= len(b) || b[i] != '[' {
		return p, i, false
	}
	t, j, ok := parseTimestamp(b, i+1)
	if !ok || j+1 >= len(b) || b[j] != ',' || b[j+1] != '"' {
		return p, i, false
	}
	j += 2
	v, end, ok := plainValue(b, j)
	if !ok {
		start := j
		for j < len(b) && b[j] != '"' {
			if c := b[j]; c < 0x20 || c >= 0x7f || c == '\\' {
				return p, i, false
			}
			j++
		}
		if v, ok = parseValue(b[start:j]); !ok {
			return p, i, false
		}
		end = j
	}
	if end+1 >= len(b) || b[end+1] != ']' {
		return p, i, false
	}
	p.Timestamp, p.Value = t, model.SampleValue(v)
	return p, end + 2, true
}

// plainValue reads, in the same pass that finds the closing quote at end, a value string at b[j:]
// that parseValue reads without strconv (-?digits, a point within them, at most 15 digits): the
// same float64. Any other value string is not taken (ok=false), for parseValue to read.
func plainValue(b []byte, j int) (f float64, end int, ok bool) {
	neg := j < len(b) && b[j] == '-'
	if neg {
		j++
	}
	var mant uint64
	digits, frac, dot := 0, 0, false
	for ; j < len(b); j++ {
		c := b[j]
		if c-'0' <= 9 {
			mant = mant*10 + uint64(c-'0')
			digits++
			if dot {
				frac++
			}
			continue
		}
		if c == '.' && !dot && digits > 0 {
			dot = true
			continue
		}
		break
	}
	if j >= len(b) || b[j] != '"' || digits == 0 || digits > 15 || (dot && frac == 0) {
		return 0, j, false
	}
	f = float64(mant) / pow10[frac]
	if neg {
		f = -f
	}
	return f, j, true
}

// pow10 holds the powers of ten a float64 represents exactly.
var pow10 = [...]float64{1e0, 1e1, 1e2, 1e3, 1e4, 1e5, 1e6, 1e7, 1e8, 1e9, 1e10, 1e11, 1e12, 1e13, 1e14, 1e15, 1e16, 1e17, 1e18, 1e19, 1e20, 1e21, 1e22}

// value reads a sample value, a quoted number. A plain decimal of at most 15 significant digits
// and 22 decimals is an exact integer divided by an exact power of ten, which IEEE division
// rounds correctly: the same float64 strconv.ParseFloat returns, at a fraction of its cost.
// Anything else (exponents, NaN, Inf, long mantissas) goes to strconv.ParseFloat.
func (d *decoder) value() float64 {
	s := d.Str()
	if d.Bad {
		return 0
	}
	f, ok := parseValue(s)
	if !ok {
		d.Fail()
	}
	return f
}

func parseValue(s []byte) (float64, bool) {
	i, neg := 0, false
	if len(s) > 0 && s[0] == '-' {
		neg, i = true, 1
	}
	var mant uint64
	digits, frac, dot := 0, 0, false
	simple := i < len(s)
	for ; i < len(s) && simple; i++ {
		switch c := s[i]; {
		case '0' <= c && c <= '9':
			mant = mant*10 + uint64(c-'0')
			digits++
			if dot {
				frac++
			}
		case c == '.' && !dot:
			dot = true
		default:
			simple = false
		}
	}
	if simple && digits > 0 && digits <= 15 && frac <= 22 && s[len(s)-1] != '.' && s[0] != '.' && !(neg && s[1] == '.') {
		f := float64(mant) / pow10[frac]
		if neg {
			f = -f
		}
		return f, true
	}
	f, err := strconv.ParseFloat(string(s), 64)
	if err != nil {
		return math.NaN(), false
	}
	return f, true
}
