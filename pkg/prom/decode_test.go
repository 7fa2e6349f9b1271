package prom

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"net/url"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/jsonscan"
)

// answerOnce is an api.Client whose every request gets body with status 200: client_golang's own
// decoding of that body is the reference decodeAnswer must agree with.
type answerOnce []byte

func (a answerOnce) URL(ep string, _ map[string]string) *url.URL {
	return &url.URL{Scheme: "http", Host: "prometheus.invalid", Path: ep}
}

func (a answerOnce) Do(_ context.Context, req *http.Request) (*http.Response, []byte, error) {
	return &http.Response{StatusCode: http.StatusOK, Request: req, Header: http.Header{}}, a, nil
}

// reference decodes body the way client_golang does, as a vector or matrix answer.
func reference(body []byte, matrix bool) (model.Value, error) {
	api := v1.NewAPI(answerOnce(body))
	if matrix {
		v, _, err := api.QueryRange(context.Background(), "q", v1.Range{Start: time.Unix(0, 0), End: time.Unix(60, 0), Step: time.Minute})
		return v, err
	}
	v, _, err := api.Query(context.Background(), "q", time.Unix(0, 0))
	return v, err
}

func sameFloat(a, b float64) bool {
	return math.Float64bits(a) == math.Float64bits(b) || (math.IsNaN(a) && math.IsNaN(b))
}

// same compares two results exactly: labels, timestamps, and values bit for bit (NaN as NaN).
func same(a, b model.Value) error {
	switch a := a.(type) {
	case model.Vector:
		b, ok := b.(model.Vector)
		if !ok || len(a) != len(b) {
			return fmt.Errorf("vector of %d, other %T %v", len(a), b, b)
		}
		for i := range a {
			if !a[i].Metric.Equal(b[i].Metric) || (a[i].Metric == nil) != (b[i].Metric == nil) || a[i].Timestamp != b[i].Timestamp ||
				!sameFloat(float64(a[i].Value), float64(b[i].Value)) || b[i].Histogram != nil {
				return fmt.Errorf("sample %d: %v, other %v", i, a[i], b[i])
			}
		}
	case model.Matrix:
		b, ok := b.(model.Matrix)
		if !ok || len(a) != len(b) {
			return fmt.Errorf("matrix of %d, other %T %v", len(a), b, b)
		}
		for i := range a {
			if !a[i].Metric.Equal(b[i].Metric) || (a[i].Metric == nil) != (b[i].Metric == nil) || len(a[i].Values) != len(b[i].Values) ||
				(a[i].Values == nil) != (b[i].Values == nil) || b[i].Histograms != nil {
				return fmt.Errorf("series %d: %v, other %v", i, a[i], b[i])
			}
			for j := range a[i].Values {
				p, q := a[i].Values[j], b[i].Values[j]
				if p.Timestamp != q.Timestamp || !sameFloat(float64(p.Value), float64(q.Value)) {
					return fmt.Errorf("series %d point %d: %v, other %v", i, j, p, q)
				}
			}
		}
	default:
		return fmt.Errorf("unexpected %T", a)
	}
	return nil
}

// genAnswer writes a random answer in Prometheus's shape, with the variations a server, a proxy or
// a bad actor might produce: fractional and negative timestamps, every way of writing a value,
// escapes and non-ASCII in labels, reordered keys, extra keys, histograms, whitespace.
func genAnswer(r *rand.Rand, matrix bool) []byte {
	var b bytes.Buffer
	ws := func() {
		if r.IntN(8) == 0 {
			b.WriteString([]string{" ", "\n", "\t ", "\r\n  "}[r.IntN(4)])
		}
	}
	str := func() string {
		switch r.IntN(12) {
		case 0:
			return `"a\"b"`
		case 1:
			return `"caf\u00e9"`
		case 2:
			return `"café"`
		case 3:
			return `"x<y&z"`
		case 4:
			return `""`
		default:
			return strconv.Quote(fmt.Sprintf("cluster-%d", r.IntN(50)))
		}
	}
	name := func() string {
		return strconv.Quote([]string{"cluster", "job", "resource", "__name__", "device", "le", "a_b9"}[r.IntN(7)])
	}
	ts := func() string {
		sec := 1772366400 + r.IntN(100000)
		switch r.IntN(10) {
		case 0:
			return fmt.Sprintf("%d.%d", sec, r.IntN(10))
		case 1:
			return fmt.Sprintf("%d.%03d", sec, r.IntN(1000))
		case 2:
			return fmt.Sprintf("%d.%04d", sec, r.IntN(10000))
		case 3:
			return fmt.Sprintf("-%d.%02d", r.IntN(5), r.IntN(100))
		case 4:
			return []string{"0", "0.5", "1e9", "01", "1.", `"1"`, "-0", "12345678901234567890"}[r.IntN(8)]
		}
		return strconv.Itoa(sec)
	}
	val := func() string {
		f := (r.Float64() - 0.5) * math.Pow(10, float64(r.IntN(30)-10))
		switch r.IntN(12) {
		case 0:
			return `"` + strconv.FormatFloat(f, 'e', -1, 64) + `"`
		case 1:
			return `"` + strconv.FormatFloat(f, 'f', r.IntN(25), 64) + `"`
		case 2:
			return `"` + []string{"NaN", "+Inf", "-Inf", "Inf", "0", "-0", "1.", ".5", "-.5", "00012", "1e400", "abc", "", "0.1234567890123456789", "123456789012345678"}[r.IntN(15)] + `"`
		case 3:
			return strconv.Itoa(r.IntN(100)) // a number, not a string
		case 4:
			return `"` + strconv.Itoa(r.IntN(1000)) + `"`
		}
		return `"` + strconv.FormatFloat(f, 'f', -1, 64) + `"`
	}
	pair := func() {
		b.WriteString("[")
		ws()
		b.WriteString(ts())
		ws()
		b.WriteString(",")
		b.WriteString(val())
		if r.IntN(60) == 0 {
			b.WriteString(`,"1"`)
		}
		b.WriteString("]")
	}
	metric := func() {
		b.WriteString("{")
		for k := range r.IntN(4) {
			if k > 0 {
				b.WriteString(",")
			}
			ws()
			b.WriteString(name())
			b.WriteString(":")
			ws()
			b.WriteString(str())
		}
		b.WriteString("}")
	}
	sample := func() {
		parts := []func(){func() { b.WriteString(`"metric":`); metric() }}
		if matrix {
			parts = append(parts, func() {
				b.WriteString(`"values":[`)
				for k := range r.IntN(5) {
					if k > 0 {
						b.WriteString(",")
					}
					pair()
				}
				b.WriteString("]")
			})
		} else {
			parts = append(parts, func() { b.WriteString(`"value":`); pair() })
		}
		switch r.IntN(40) {
		case 0:
			parts = append(parts, func() { b.WriteString(`"histogram":[1,{"count":"1","sum":"2"}]`) })
		case 1:
			parts = append(parts, func() { b.WriteString(`"extra":1`) })
		case 2:
			parts = parts[:1]
		}
		if r.IntN(10) == 0 {
			parts[0], parts[len(parts)-1] = parts[len(parts)-1], parts[0]
		}
		b.WriteString("{")
		for k, p := range parts {
			if k > 0 {
				b.WriteString(",")
			}
			ws()
			p()
		}
		b.WriteString("}")
	}
	typ := "vector"
	if matrix {
		typ = "matrix"
	}
	if r.IntN(30) == 0 {
		typ = []string{"scalar", "string", "vector", "matrix"}[r.IntN(4)]
	}
	b.WriteString(`{"status":"success",`)
	ws()
	if r.IntN(20) == 0 {
		b.WriteString(`"data":{"result":[],"resultType":"` + typ + `"}`)
	} else {
		b.WriteString(`"data":{"resultType":"` + typ + `","result":[`)
		for k := range r.IntN(6) {
			if k > 0 {
				b.WriteString(",")
			}
			sample()
		}
		b.WriteString("]}")
	}
	switch r.IntN(20) {
	case 0:
		b.WriteString(`,"warnings":["partial answer"]`)
	case 1:
		b.WriteString(`,"warnings":[]`)
	case 2:
		b.WriteString(`,"infos":["x"]`)
	}
	b.WriteString("}")
	ws()
	return b.Bytes()
}

// Whatever decodeAnswer takes, client_golang decodes to the same result; what it does not take
// goes to client_golang, so results and errors are as before. Random answers, and random
// mutations of them (bytes dropped, changed, repeated), check it; most plain answers must take the
// fast path, or this proves nothing.
func TestDecodeAnswerAgreesWithClientGolang(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var fast, total int
	check := func(body []byte, matrix bool) {
		total++
		v, _, ok := decodeAnswer(body)
		if !ok {
			return
		}
		fast++
		want, err := reference(body, matrix)
		if err != nil {
			// A type decodeAnswer read differently from what was asked is passed on as it came.
			if (v.Type() == model.ValMatrix) != matrix {
				return
			}
			t.Fatalf("decodeAnswer took what client_golang refuses (%v):\n%s", err, body)
		}
		if err := same(want, v); err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
	}
	for range 20000 {
		matrix := r.IntN(2) == 0
		body := genAnswer(r, matrix)
		check(body, matrix)
		m := bytes.Clone(body)
		for range 1 + r.IntN(3) {
			if len(m) == 0 {
				break
			}
			i := r.IntN(len(m))
			switch r.IntN(3) {
			case 0:
				m = append(m[:i], m[i+1:]...)
			case 1:
				const alphabet = `{}[]",:.-0123456789e"\ a`
				m[i] = alphabet[r.IntN(len(alphabet))]
			case 2:
				m = append(m[:i], append([]byte{m[i]}, m[i:]...)...)
			}
		}
		check(m, matrix)
	}
	if fast < total/10 {
		t.Fatalf("only %d of %d answers took the fast path", fast, total)
	}
	t.Logf("%d of %d answers took the fast path", fast, total)
}

// samePicked compares picked series exactly (values bit for bit).
func samePicked(a, b []Picked) error {
	if len(a) != len(b) {
		return fmt.Errorf("%d series, other %d", len(a), len(b))
	}
	for i := range a {
		if !slices.Equal(a[i].Labels, b[i].Labels) || a[i].Timestamp != b[i].Timestamp || !sameFloat(float64(a[i].Value), float64(b[i].Value)) {
			return fmt.Errorf("series %d: %v, other %v", i, a[i], b[i])
		}
	}
	return nil
}

// Whatever decodePicked takes, client_golang decodes to a vector whose labels, picked, are the
// same; a label name not in any series picks "". Random answers and mutations of them, as for
// decodeAnswer; most plain vectors must take the fast path.
func TestDecodePickedAgreesWithPick(t *testing.T) {
	r := rand.New(rand.NewPCG(13, 17))
	names := []string{"cluster", "resource", "absent", "le"}
	var fast, total int
	check := func(body []byte) {
		total++
		got, warnings, ok := decodePicked(body, names)
		if !ok {
			return
		}
		fast++
		want, err := reference(body, false)
		if err != nil {
			t.Fatalf("decodePicked took what client_golang refuses (%v):\n%s", err, body)
		}
		vec, isVec := want.(model.Vector)
		if !isVec {
			t.Fatalf("decodePicked took a %T:\n%s", want, body)
		}
		if err := samePicked(Pick(vec, names...), got); err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
		if _, w, _ := decodeAnswer(body); !slices.Equal(w, warnings) {
			t.Fatalf("warnings %q, decodeAnswer's %q", warnings, w)
		}
	}
	for range 20000 {
		body := genAnswer(r, r.IntN(4) == 0)
		check(body)
		m := bytes.Clone(body)
		if len(m) > 0 {
			i := r.IntN(len(m))
			m = append(m[:i], m[i+1:]...)
		}
		check(m)
	}
	if fast < total/10 {
		t.Fatalf("only %d of %d answers took the fast path", fast, total)
	}
	t.Logf("%d of %d answers took the fast path", fast, total)
}

// Fleet-sized plain answers, as Prometheus writes them, take the fast path and agree.
func TestDecodeAnswerFleet(t *testing.T) {
	var vb, mb strings.Builder
	vb.WriteString(`{"status":"success","data":{"resultType":"vector","result":[`)
	mb.WriteString(`{"status":"success","data":{"resultType":"matrix","result":[`)
	for i := range 2000 {
		if i > 0 {
			vb.WriteString(",")
			mb.WriteString(",")
		}
		fmt.Fprintf(&vb, `{"metric":{"cluster":"cluster-%05d","job":"node"},"value":[1772366400.123,"%g"]}`, i, float64(i)/7)
		fmt.Fprintf(&mb, `{"metric":{"cluster":"cluster-%05d"},"values":[`, i)
		for j := range 31 {
			if j > 0 {
				mb.WriteString(",")
			}
			fmt.Fprintf(&mb, `[%d,"%s"]`, 1772366400+60*j, strconv.FormatFloat(float64(i*j)/3, 'f', -1, 64))
		}
		mb.WriteString("]}")
	}
	vb.WriteString(`]}}`)
	mb.WriteString(`]}}`)
	for k, body := range []string{vb.String(), mb.String()} {
		v, _, ok := decodeAnswer([]byte(body))
		if !ok {
			t.Fatalf("answer %d did not take the fast path", k)
		}
		want, err := reference([]byte(body), k == 1)
		if err != nil {
			t.Fatal(err)
		}
		if err := same(want, v); err != nil {
			t.Fatal(err)
		}
	}
}

// Random decimals parse to the same float64 as strconv.ParseFloat, bit for bit.
func TestValueMatchesParseFloat(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for range 200000 {
		var s string
		switch r.IntN(4) {
		case 0:
			s = strconv.FormatFloat((r.Float64()-0.5)*math.Pow(10, float64(r.IntN(40)-20)), 'f', -1, 64)
		case 1:
			s = strconv.FormatFloat(r.NormFloat64()*1000, 'f', r.IntN(20), 64)
		case 2:
			s = strconv.Itoa(r.IntN(1 << 20))
		default:
			digits := make([]byte, 1+r.IntN(17))
			for i := range digits {
				digits[i] = byte('0' + r.IntN(10))
			}
			p := r.IntN(len(digits) + 1)
			s = string(digits[:p]) + "." + string(digits[p:])
			if p == 0 || p == len(digits) {
				s = string(digits)
			}
		}
		d := decoder{Scanner: jsonscan.Scanner{B: []byte(`"` + s + `"`)}}
		got := d.value()
		want, err := strconv.ParseFloat(s, 64)
		if d.Bad != (err != nil) || (err == nil && !sameFloat(got, want)) {
			t.Fatalf("%q: %v (bad %v), ParseFloat %v (%v)", s, got, d.Bad, want, err)
		}
	}
}

// canned answers every request with status and body.
type canned struct {
	status int
	body   string
}

func (c canned) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: c.status, Header: http.Header{"Content-Type": {"application/json"}},
		Body: io.NopCloser(strings.NewReader(c.body)), Request: req}, nil
}

// Through the client: a plain answer (fast path), one with an escape (client_golang's path) and an
// error answer give what client_golang gives.
func TestClientAnswers(t *testing.T) {
	plain := `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"cluster":"a"},"value":[1772366400.5,"1.25"]}]},"warnings":["partial"]}`
	escaped := `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"cluster":"a\u0026b"},"value":[1772366400.5,"1.25"]}]}}`
	for _, body := range []string{plain, escaped} {
		c, err := New(Config{URL: "http://prometheus.invalid", Timeout: time.Second, Transport: canned{200, body}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		got, err := c.Query(context.Background(), "q", time.Now())
		if err != nil {
			t.Fatal(err)
		}
		want, err := reference([]byte(body), false)
		if err != nil {
			t.Fatal(err)
		}
		if err := same(want, got); err != nil || len(got) != 1 {
			t.Errorf("%s: %v (%v)", body, err, got)
		}
		picked, err := c.QueryLabels(context.Background(), "q", time.Now(), "cluster", "absent")
		if err != nil {
			t.Fatal(err)
		}
		if err := samePicked(Pick(want.(model.Vector), "cluster", "absent"), picked); err != nil || picked[0].Labels[1] != "" {
			t.Errorf("%s: QueryLabels %v (%v)", body, err, picked)
		}
		if none, err := c.QueryLabels(context.Background(), "q", time.Now()); err != nil || len(none) != 1 || none[0].Value != 1.25 || len(none[0].Labels) != 0 {
			t.Errorf("%s: QueryLabels of no label: %v, %v; want the one series, no labels", body, none, err)
		}
		if _, err := c.QueryRange(context.Background(), "q", time.Now().Add(-time.Hour), time.Now(), time.Minute); err == nil || KindOf(err) != BadQuery {
			t.Errorf("a vector for a range query: %v, want a bad query", err)
		}
	}
	c, err := New(Config{URL: "http://prometheus.invalid", Timeout: time.Second,
		Transport: canned{400, `{"status":"error","errorType":"bad_data","error":"parse error"}`}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.Query(context.Background(), "q", time.Now()); KindOf(err) != BadQuery || !strings.Contains(err.Error(), "parse error") {
		t.Errorf("bad_data: %v, want a bad query quoting it", err)
	}
	if _, err := c.QueryLabels(context.Background(), "q", time.Now(), "cluster"); KindOf(err) != BadQuery || !strings.Contains(err.Error(), "parse error") {
		t.Errorf("QueryLabels, bad_data: %v, want a bad query quoting it", err)
	}
	matrix := `{"status":"success","data":{"resultType":"matrix","result":[]}}`
	c, err = New(Config{URL: "http://prometheus.invalid", Timeout: time.Second, Transport: canned{200, matrix}}, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.QueryLabels(context.Background(), "q", time.Now(), "cluster"); KindOf(err) != BadQuery || !strings.Contains(err.Error(), "matrix") {
		t.Errorf("QueryLabels, a matrix: %v, want a bad query naming it", err)
	}
}

// Series read into shared blocks stay apart: appending to one series' points leaves the next
// series' as they were, and every sample and series is a value of its own.
func TestDecodedSeriesAreApart(t *testing.T) {
	body := []byte(`{"status":"success","data":{"resultType":"matrix","result":[` +
		`{"metric":{"cluster":"a"},"values":[[1,"1"],[2,"2"]]},{"metric":{"cluster":"a"},"values":[[1,"3"]]},` +
		`{"metric":{"cluster":"b"},"values":[[1,"4"]]}]}}`)
	v, _, ok := decodeAnswer(body)
	if !ok {
		t.Fatal("not taken")
	}
	m := v.(model.Matrix)
	m[0].Values = append(m[0].Values, model.SamplePair{Timestamp: 3, Value: 99})
	m[0].Metric["cluster"] = "z"
	if got := m[1].Values; len(got) != 1 || got[0].Value != 3 || m[1].Metric["cluster"] != "a" {
		t.Fatalf("second series changed: %v %v", m[1].Metric, got)
	}
	if m[0] == m[1] || m[1] == m[2] {
		t.Fatal("two series share a value")
	}
	body = []byte(`{"status":"success","data":{"resultType":"vector","result":[` +
		`{"metric":{"cluster":"a"},"value":[1,"1"]},{"metric":{"cluster":"a"},"value":[1,"2"]}]}}`)
	if v, _, ok = decodeAnswer(body); !ok {
		t.Fatal("not taken")
	}
	vec := v.(model.Vector)
	vec[0].Value = 7
	if vec[1].Value != 2 || vec[0] == vec[1] {
		t.Fatalf("second sample changed: %v", vec[1])
	}
}

// eightDigits reads eight digits as the digit loop does, and refuses any other byte among them;
// plainValue reads what it takes as parseValue does.
func TestEightDigitsAndPlainValue(t *testing.T) {
	r := rand.New(rand.NewPCG(4, 4))
	const alphabet = "0123456789/:.-e\"\x00\xff "
	for range 200000 {
		b := make([]byte, 8+r.IntN(3))
		for i := range b {
			if r.IntN(8) == 0 {
				b[i] = alphabet[r.IntN(len(alphabet))]
			} else {
				b[i] = byte('0' + r.IntN(10))
			}
		}
		got, ok := eightDigits(b, 0)
		want, allDigits := uint64(0), true
		for _, c := range b[:8] {
			allDigits = allDigits && '0' <= c && c <= '9'
			want = want*10 + uint64(c-'0')
		}
		if ok != allDigits || (ok && got != want) {
			t.Fatalf("eightDigits(%q) = %d, %v; want %d, %v", b, got, ok, want, allDigits)
		}
		v := append(b[:r.IntN(len(b))], '"')
		if f, end, ok := plainValue(v, 0); ok {
			want, wok := parseValue(v[:end])
			if !wok || end != bytes.IndexByte(v, '"') || !sameFloat(f, want) {
				t.Fatalf("plainValue(%q) = %v at %d; parseValue %v, %v", v, f, end, want, wok)
			}
		}
	}
	if _, ok := eightDigits([]byte("1234567"), 0); ok {
		t.Fatal("seven bytes taken as eight digits")
	}
}
