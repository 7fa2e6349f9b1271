package prom

import (
	"slices"
	"strconv"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/jsonscan"
)

// decodeMatrix reads a successful range query answer in one pass over its bytes, building the
// matrix as it reads. client_golang copies the answer twice on its way (the envelope's data,
// then the result, each kept as raw JSON) and allocates every series' points as it grows them:
// for a fleet's range answer (10,000 clusters x 73 points, 16-22 MB) that took the process's
// peak memory past what docs/performance.md allows a scorer. See there for the measurements.
//
// It takes only the plain shape Prometheus writes: {"status":"success","data":{"resultType":
// "matrix","result":[{"metric":{...},"values":[[ts,"v"],...]},...]},"warnings"?}, with strings
// without escapes or bytes outside printable ASCII. Anything else (an error answer, another
// result type, histograms, escapes, an unknown or repeated key, anything malformed) returns
// ok=false, and the caller leaves the answer to client_golang, which then gives the result or
// the error it always gives: this path changes the cost, never the result.
func decodeMatrix(body []byte) (m model.Matrix, warnings []string, ok bool) {
	d := decoder{Scanner: jsonscan.Scanner{B: body}, names: map[string]model.LabelName{}}
	m, warnings = d.answer()
	if d.Bad {
		return nil, nil, false
	}
	return m, warnings, true
}

type decoder struct {
	jsonscan.Scanner
	// names interns label names: a fleet's series share a handful of them.
	names map[string]model.LabelName
	// pairs is scratch for one series' points, copied out at their exact length.
	pairs []model.SamplePair
}

func (d *decoder) answer() (m model.Matrix, warnings []string) {
	seen := map[string]bool{}
	d.Object(func(key []byte) {
		if seen[string(key)] {
			d.Fail()
			return
		}
		seen[string(key)] = true
		switch string(key) {
		case "status":
			if string(d.Str()) != "success" {
				d.Fail()
			}
		case "data":
			m = d.data()
		case "warnings":
			warnings = []string{}
			d.Array(func() { warnings = append(warnings, string(d.Str())) })
		default:
			d.Fail()
		}
	})
	d.End()
	if !seen["status"] || !seen["data"] {
		d.Fail()
	}
	return m, warnings
}

func (d *decoder) data() (m model.Matrix) {
	seen := map[string]bool{}
	d.Object(func(key []byte) {
		if seen[string(key)] {
			d.Fail()
			return
		}
		seen[string(key)] = true
		switch string(key) {
		case "resultType":
			if string(d.Str()) != model.ValMatrix.String() {
				d.Fail()
			}
		case "result":
			// Prometheus writes resultType first; an answer that does not is left to client_golang.
			if !seen["resultType"] {
				d.Fail()
				return
			}
			m = model.Matrix{}
			d.Array(func() { m = append(m, d.series()) })
		default:
			d.Fail()
		}
	})
	if !seen["result"] {
		d.Fail()
	}
	return m
}

// series reads {"metric":{...},"values":[[ts,"v"],...]}.
func (d *decoder) series() *model.SampleStream {
	s := &model.SampleStream{}
	var seenMetric, seenValues bool
	d.Object(func(key []byte) {
		switch {
		case string(key) == "metric" && !seenMetric:
			seenMetric = true
			s.Metric = d.metric()
		case string(key) == "values" && !seenValues:
			seenValues = true
			d.pairs = d.pairs[:0]
			d.Array(func() { d.pairs = append(d.pairs, d.pair()) })
			if len(d.pairs) > 0 { // no points leave Values nil, as client_golang does
				s.Values = slices.Clone(d.pairs)
			}
		default:
			d.Fail()
		}
	})
	if !seenMetric || !seenValues {
		d.Fail()
	}
	return s
}

func (d *decoder) metric() model.Metric {
	m := model.Metric{}
	d.Object(func(key []byte) {
		name, ok := d.names[string(key)]
		if !ok {
			name = model.LabelName(key)
			d.names[string(key)] = name
		}
		if _, dup := m[name]; dup {
			d.Fail()
			return
		}
		m[name] = model.LabelValue(d.Str())
	})
	return m
}

// pair reads [ts, "value"] as client_golang does: the timestamp by model.Time's UnmarshalJSON,
// the value by strconv.ParseFloat.
func (d *decoder) pair() model.SamplePair {
	var p model.SamplePair
	d.Expect('[')
	if err := p.Timestamp.UnmarshalJSON(d.Number()); err != nil {
		d.Fail()
	}
	d.Expect(',')
	v, err := strconv.ParseFloat(string(d.Str()), 64)
	if err != nil {
		d.Fail()
	}
	p.Value = model.SampleValue(v)
	d.Expect(']')
	return p
}
