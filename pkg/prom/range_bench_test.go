package prom_test

import (
	stdjson "encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strconv"
	"strings"
	"testing"
	"time"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"github.com/prometheus/client_golang/api"
	v1 "github.com/prometheus/client_golang/api/prometheus/v1"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
	"github.com/scoreflow/scoreflow/harness/benchrss"
	"github.com/scoreflow/scoreflow/harness/promserver/canned"
)

// BenchmarkRangeAnswer compares, on the range answers the scorers' Handle10000 benchmarks read
// (10,000 clusters), four ways of reading a Prometheus range answer into a model.Matrix, each
// from the request to the result: this package's Client (decodeMatrix), client_golang's v1 API,
// and the answer's body read and decoded by encoding/json and by github.com/go-json-experiment/json
// (as it comes, and with unmarshalers of its own for model's points and series).
// docs/performance.md keeps decodeMatrix for what this shows: cpu-ns/op and peak-rss-MiB.
func BenchmarkRangeAnswer(b *testing.B) {
	end := time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)
	matrix := func(points int, step time.Duration, value func(i, j int) float64) []byte {
		m := make(model.Matrix, 10000)
		for i := range m {
			s := &model.SampleStream{Metric: model.Metric{"cluster": model.LabelValue(fmt.Sprintf("cluster-%05d", i))}}
			for j := range points {
				t := end.Add(-time.Duration(points-1-j) * step)
				s.Values = append(s.Values, model.SamplePair{Timestamp: model.TimeFromUnixNano(t.UnixNano()), Value: model.SampleValue(value(i, j))})
			}
			m[i] = s
		}
		return canned.Matrix(m)
	}
	inputs := []struct {
		name   string
		points int // per series
		step   time.Duration
		value  func(i, j int) float64
	}{
		{"promql=31points", 31, time.Minute, func(i, j int) float64 { return float64((i+j)%100) + 0.25 }},
		{"forecast=73points", 73, 5 * time.Minute, func(i, j int) float64 { return float64(i%32) + float64(j%7) + 0.125 }},
		// Values as a rate() gives them: up to 17 significant digits.
		{"forecast=73rates", 73, 5 * time.Minute, func(i, j int) float64 { return float64(i%32+j%7) / 7 }},
	}
	for _, in := range inputs {
		const q = "q"
		body := matrix(in.points, in.step, in.value)
		tr := canned.Transport{q: body}
		start := end.Add(-time.Duration(in.points-1) * in.step)
		hc := &http.Client{Transport: tr}
		raw := func(b *testing.B) []byte {
			resp, err := hc.Post("http://prometheus.invalid:9090/api/v1/query_range", "application/x-www-form-urlencoded",
				strings.NewReader(url.Values{"query": {q}}.Encode()))
			if err != nil {
				b.Fatal(err)
			}
			defer resp.Body.Close()
			body, err := io.ReadAll(resp.Body)
			if err != nil {
				b.Fatal(err)
			}
			return body
		}
		type answer struct {
			Status string `json:"status"`
			Data   struct {
				ResultType string       `json:"resultType"`
				Result     model.Matrix `json:"result"`
			} `json:"data"`
		}
		ours := canned.Querier(b, tr)
		golang := v1.NewAPI(must(api.NewClient(api.Config{Address: "http://prometheus.invalid:9090", Client: hc})))
		decoders := []struct {
			name string
			read func(b *testing.B) model.Matrix
		}{
			{"scoreflow", func(b *testing.B) model.Matrix {
				return must(ours.QueryRange(b.Context(), q, start, end, in.step))
			}},
			{"client_golang", func(b *testing.B) model.Matrix {
				v, _, err := golang.QueryRange(b.Context(), q, v1.Range{Start: start, End: end, Step: in.step})
				if err != nil {
					b.Fatal(err)
				}
				return v.(model.Matrix)
			}},
			{"encoding_json", func(b *testing.B) model.Matrix {
				var a answer
				if err := stdjson.Unmarshal(raw(b), &a); err != nil {
					b.Fatal(err)
				}
				return a.Data.Result
			}},
			{"go-json-experiment", func(b *testing.B) model.Matrix {
				var a answer
				if err := jsonv2.Unmarshal(raw(b), &a); err != nil {
					b.Fatal(err)
				}
				return a.Data.Result
			}},
			{"go-json-experiment+funcs", func(b *testing.B) model.Matrix {
				var a answer
				if err := jsonv2.Unmarshal(raw(b), &a, v2funcs); err != nil {
					b.Fatal(err)
				}
				return a.Data.Result
			}},
		}
		for _, d := range decoders {
			b.Run(in.name+"/"+d.name, func(b *testing.B) {
				check := func(m model.Matrix) {
					if len(m) != 10000 || len(m[9999].Values) != in.points {
						b.Fatalf("%d series, want 10000 of %d points", len(m), in.points)
					}
				}
				check(d.read(b))
				b.ReportAllocs()
				rss := benchrss.Start(b)
				cpu := benchcpu.Start()
				for b.Loop() {
					check(d.read(b))
				}
				cpu.Report(b)
				rss.Report(b)
				b.ReportMetric(float64(len(body))/(1<<20), "body-MiB")
			})
		}
	}
}

// v2funcs decode model's points and series with go-json-experiment itself, where their
// UnmarshalJSON methods would go back to encoding/json for every one.
var v2funcs = jsonv2.WithUnmarshalers(jsonv2.JoinUnmarshalers(
	jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, p *model.SamplePair) error {
		var pair [2]jsontext.Value
		if err := jsonv2.UnmarshalDecode(dec, &pair); err != nil {
			return err
		}
		var v string
		if err := jsonv2.Unmarshal(pair[1], &v); err != nil {
			return err
		}
		if err := p.Timestamp.UnmarshalJSON(pair[0]); err != nil {
			return err
		}
		f, err := strconv.ParseFloat(v, 64)
		p.Value = model.SampleValue(f)
		return err
	}),
	jsonv2.UnmarshalFromFunc(func(dec *jsontext.Decoder, s *model.SampleStream) error {
		var raw struct {
			Metric model.Metric       `json:"metric"`
			Values []model.SamplePair `json:"values"`
		}
		if err := jsonv2.UnmarshalDecode(dec, &raw); err != nil {
			return err
		}
		s.Metric, s.Values = raw.Metric, raw.Values
		return nil
	}),
))

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}
