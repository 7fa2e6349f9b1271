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
	"strconv"
	"strings"
	"testing"
	"time"

	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"
)

// answerOnce is an api.Client whose every request gets body with status 200: client_golang's own
// decoding of that body is the reference decodeMatrix must agree with.
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

// Whatever decodeMatrix takes, client_golang decodes to the same matrix; what it does not take
// goes to client_golang, so results and errors are as before. Random answers (matrices, and
// vectors it must not take), and random mutations of them (bytes dropped, changed, repeated),
// check it; most plain matrices must take the one-pass path, or this proves nothing.
func TestDecodeMatrixAgreesWithClientGolang(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 11))
	var taken, total int
	check := func(body []byte, matrix bool) {
		m, _, ok := decodeMatrix(body)
		if !ok {
			return
		}
		if !matrix {
			if want, err := reference(body, false); err == nil && want.Type() == model.ValVector {
				t.Fatalf("decodeMatrix took a vector:\n%s", body)
			}
		}
		want, err := reference(body, true)
		if err != nil {
			t.Fatalf("decodeMatrix took what client_golang refuses (%v):\n%s", err, body)
		}
		if err := same(want, m); err != nil {
			t.Fatalf("%v\n%s", err, body)
		}
		if matrix {
			taken++
		}
	}
	for range 20000 {
		matrix := r.IntN(3) > 0
		if matrix {
			total++
		}
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
	if taken < total/10 {
		t.Fatalf("only %d of %d matrix answers took the one-pass path", taken, total)
	}
	t.Logf("%d of %d matrix answers took the one-pass path", taken, total)
}

// A fleet-sized plain answer, as Prometheus writes it, takes the one-pass path and agrees.
func TestDecodeMatrixFleet(t *testing.T) {
	var mb strings.Builder
	mb.WriteString(`{"status":"success","data":{"resultType":"matrix","result":[`)
	for i := range 2000 {
		if i > 0 {
			mb.WriteString(",")
		}
		fmt.Fprintf(&mb, `{"metric":{"cluster":"cluster-%05d","job":"node"},"values":[`, i)
		for j := range 31 {
			if j > 0 {
				mb.WriteString(",")
			}
			fmt.Fprintf(&mb, `[%d.%03d,"%s"]`, 1772366400+60*j, j, strconv.FormatFloat(float64(i*j)/3, 'f', -1, 64))
		}
		mb.WriteString("]}")
	}
	mb.WriteString(`]}}`)
	m, _, ok := decodeMatrix([]byte(mb.String()))
	if !ok {
		t.Fatal("the answer did not take the one-pass path")
	}
	want, err := reference([]byte(mb.String()), true)
	if err != nil {
		t.Fatal(err)
	}
	if err := same(want, m); err != nil {
		t.Fatal(err)
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

// Through the client: a plain range answer (one pass), one with an escape (client_golang's
// path) and an error answer give what client_golang gives, warnings included; an instant
// query's answer is client_golang's; an answer of the other type is a bad query.
func TestClientAnswers(t *testing.T) {
	client := func(status int, body string) *Client {
		c, err := New(Config{URL: "http://prometheus.invalid", Timeout: time.Second, Transport: canned{status, body}}, nil, nil)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	plain := `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"cluster":"a"},"values":[[1772366400.5,"1.25"]]}]},"warnings":["partial"]}`
	escaped := `{"status":"success","data":{"resultType":"matrix","result":[{"metric":{"cluster":"a\u0026b"},"values":[[1772366400.5,"1.25"]]}]}}`
	for _, body := range []string{plain, escaped} {
		c := client(200, body)
		got, err := c.QueryRange(context.Background(), "q", time.Now().Add(-time.Hour), time.Now(), time.Minute)
		if err != nil {
			t.Fatal(err)
		}
		want, err := reference([]byte(body), true)
		if err != nil {
			t.Fatal(err)
		}
		if err := same(want, got); err != nil || len(got) != 1 {
			t.Errorf("%s: %v (%v)", body, err, got)
		}
		if _, err := c.Query(context.Background(), "q", time.Now()); err == nil || KindOf(err) != BadQuery || !strings.Contains(err.Error(), "matrix") {
			t.Errorf("a matrix for an instant query: %v, want a bad query naming it", err)
		}
	}
	vector := `{"status":"success","data":{"resultType":"vector","result":[{"metric":{"cluster":"a"},"value":[1772366400.5,"1.25"]}]}}`
	c := client(200, vector)
	got, err := c.Query(context.Background(), "q", time.Now())
	if err != nil {
		t.Fatal(err)
	}
	if want, _ := reference([]byte(vector), false); same(want, got) != nil || len(got) != 1 {
		t.Errorf("vector: %v, want %v", got, want)
	}
	if _, err := c.QueryRange(context.Background(), "q", time.Now().Add(-time.Hour), time.Now(), time.Minute); err == nil || KindOf(err) != BadQuery {
		t.Errorf("a vector for a range query: %v, want a bad query", err)
	}
	c = client(400, `{"status":"error","errorType":"bad_data","error":"parse error"}`)
	if _, err := c.QueryRange(context.Background(), "q", time.Now().Add(-time.Hour), time.Now(), time.Minute); KindOf(err) != BadQuery || !strings.Contains(err.Error(), "parse error") {
		t.Errorf("bad_data: %v, want a bad query quoting it", err)
	}
}

// Each series' points are its own: appending to one series' points leaves the next series' as
// they were, and every series is a value of its own.
func TestDecodedSeriesAreApart(t *testing.T) {
	body := []byte(`{"status":"success","data":{"resultType":"matrix","result":[` +
		`{"metric":{"cluster":"a"},"values":[[1,"1"],[2,"2"]]},{"metric":{"cluster":"a"},"values":[[1,"3"]]},` +
		`{"metric":{"cluster":"b"},"values":[[1,"4"]]}]}}`)
	m, _, ok := decodeMatrix(body)
	if !ok {
		t.Fatal("not taken")
	}
	m[0].Values = append(m[0].Values, model.SamplePair{Timestamp: 3, Value: 99})
	m[0].Metric["cluster"] = "z"
	if got := m[1].Values; len(got) != 1 || got[0].Value != 3 || m[1].Metric["cluster"] != "a" {
		t.Fatalf("second series changed: %v %v", m[1].Metric, got)
	}
	if m[0] == m[1] || m[1] == m[2] {
		t.Fatal("two series share a value")
	}
}
