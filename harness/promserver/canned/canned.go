// Package canned answers Prometheus HTTP API queries in-process from canned answers: a
// benchmark of a scorer then counts the work its process does with Prometheus's answer (reading
// the body, decoding the JSON, scoring) and not a server's, a socket's or another process's.
package canned

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
	"github.com/scoreflow/scoreflow/harness/benchrss"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
)

// Transport is an http.RoundTripper answering /api/v1/query and /api/v1/query_range requests
// (POST form or GET, as client_golang sends them) with the body canned for their query text;
// other queries get Prometheus's 400 bad_data answer.
type Transport map[string][]byte

// RoundTrip implements http.RoundTripper.
func (t Transport) RoundTrip(req *http.Request) (*http.Response, error) {
	form := req.URL.Query()
	if req.Body != nil {
		b, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		if len(b) > 0 {
			if form, err = url.ParseQuery(string(b)); err != nil {
				return nil, err
			}
		}
	}
	body, ok := t[form.Get("query")]
	status := http.StatusOK
	if !ok || !strings.HasPrefix(req.URL.Path, "/api/v1/query") {
		status = http.StatusBadRequest
		body = []byte(`{"status":"error","errorType":"bad_data","error":"no canned answer"}`)
	}
	return &http.Response{
		StatusCode:    status,
		Status:        http.StatusText(status),
		Proto:         "HTTP/1.1",
		ProtoMajor:    1,
		ProtoMinor:    1,
		Header:        http.Header{"Content-Type": {"application/json"}},
		Body:          io.NopCloser(bytes.NewReader(body)),
		ContentLength: int64(len(body)),
		Request:       req,
	}, nil
}

// Vector is Prometheus's answer to an instant query whose result is v.
func Vector(v model.Vector) []byte { return answer("vector", v) }

// Matrix is Prometheus's answer to a range query whose result is m.
func Matrix(m model.Matrix) []byte { return answer("matrix", m) }

func answer(typ string, result any) []byte {
	r, err := json.Marshal(result)
	if err != nil {
		panic(fmt.Sprintf("canned: %v", err))
	}
	return fmt.Appendf(nil, `{"status":"success","data":{"resultType":%q,"result":%s}}`, typ, r)
}

// Querier is a prom.Client whose queries t answers.
func Querier(tb testing.TB, t Transport) *prom.Client {
	tb.Helper()
	c, err := prom.New(prom.Config{URL: "http://prometheus.invalid:9090", Timeout: time.Minute, Transport: t}, nil, nil)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// BenchHandle runs h on e b.N times, reporting CPU per op (benchcpu) and the peak growth of
// resident memory over the loop (benchrss): the whole answer to a ping, from its configuration
// to the score.updated events encoded (their data is marshalled when they are built). Every
// answer must be 200 with a score.updated covering items clusters.
func BenchHandle(b *testing.B, h function.Handler, e event.Event, items int) {
	b.Helper()
	res := h(context.Background(), e)
	if res.Status != http.StatusOK || res.Event == nil {
		b.Fatalf("answer %d %v", res.Status, res.Event)
	}
	su, err := contract.DecodeScoreUpdated(res.Event)
	if err != nil || len(su.Items) != items {
		b.Fatalf("score.updated: %v, %d items, want %d", err, len(su.Items), items)
	}
	b.ReportAllocs()
	rss := benchrss.Start(b)
	cpu := benchcpu.Start()
	for b.Loop() {
		if res := h(context.Background(), e); res.Status != http.StatusOK || len(res.Event.Data()) == 0 {
			b.Fatalf("answer %d", res.Status)
		}
	}
	cpu.Report(b)
	rss.Report(b)
	b.ReportMetric(float64(len(res.Event.Data())), "data-bytes")
}
