// Package functest drives scoreflow functions in tests the way the platform does: CloudEvents
// over HTTP in binary mode (Send), a sink that records what a function emits (Sink), and the
// function's own main run as a separate process (Exec, Start). It is imported only by tests;
// harness/promserver adds a real Prometheus.
package functest

import (
	"context"
	"io"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/google/uuid"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// Serve serves fn's whole HTTP surface, h on / beside the probes and /metrics, on a loopback
// port until the test ends and returns its URL: the function as its main serves it, in process.
func Serve(t testing.TB, fn *function.Function, h function.Handler) string {
	t.Helper()
	srv := httptest.NewServer(fn.Handler(h, nil))
	t.Cleanup(srv.Close)
	return srv.URL
}

// Ping is the event a Knative PingSource sends with data as its configuration.
func Ping(data string) event.Event {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("/apis/v1/namespaces/scoreflow/pingsources/test")
	e.SetType(contract.TypePing)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, []byte(data))
	return e
}

// Request is a POST of e to url in binary mode, as the broker delivers events, for tests that
// send it with an HTTP client of their own.
func Request(t testing.TB, url string, e event.Event) *http.Request {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
		t.Fatal(err)
	}
	return req
}

// Send posts e to a function at url in binary mode and returns the HTTP status and the reply
// event, nil when the answer carries none. A reply that is not a CloudEvent fails the test.
func Send(t testing.TB, url string, e event.Event) (int, *event.Event) {
	t.Helper()
	resp, err := http.DefaultClient.Do(Request(t, url, e))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	msg := cehttp.NewMessageFromHttpResponse(resp)
	if msg.ReadEncoding() == binding.EncodingUnknown {
		return resp.StatusCode, nil
	}
	reply, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		t.Fatalf("reply is not a CloudEvent: %v", err)
	}
	return resp.StatusCode, reply
}

// Get fetches url and returns the status and the body: for probes and /metrics.
func Get(t testing.TB, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

// MetricValue is the value of one series in the Prometheus text a function serves at metricsURL,
// named as it is written there (`name{label="value"}`, labels in the order served), fetched with
// client (nil: http.DefaultClient). A series not yet written counts 0, as a counter never
// incremented is not served at all.
func MetricValue(t testing.TB, client *http.Client, metricsURL, series string) float64 {
	t.Helper()
	if client == nil {
		client = http.DefaultClient
	}
	resp, err := client.Get(metricsURL)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: %d %v", metricsURL, resp.StatusCode, err)
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, series+" "); ok {
			f, err := strconv.ParseFloat(strings.TrimSpace(v), 64)
			if err != nil {
				t.Fatalf("%s: %q: %v", metricsURL, line, err)
			}
			return f
		}
	}
	return 0
}

// Reply decodes a scorer's reply: the scores of a score.updated, or the failure of a
// score.failed. No reply, or one that does not decode, fails the test.
func Reply(t testing.TB, reply *event.Event) (*contract.ScoreUpdated, *contract.Failure) {
	t.Helper()
	if reply == nil {
		t.Fatal("no reply event")
	}
	if reply.Type() == contract.TypeScoreFailed {
		f, err := contract.DecodeFailure(reply)
		if err != nil {
			t.Fatal(err)
		}
		return nil, f
	}
	s, err := contract.DecodeScoreUpdated(reply)
	if err != nil {
		t.Fatalf("reply %s: %v", reply.Type(), err)
	}
	return s, nil
}

// ClusterScores is one cluster's expected scores from name, value pairs, so that tables of
// expected replies stay short: ClusterScores("east", "cpuIdle", 50, "memFree", -10).
func ClusterScores(cluster string, kv ...any) contract.ClusterScores {
	c := contract.ClusterScores{Cluster: cluster}
	for i := 0; i < len(kv); i += 2 {
		c.Scores = append(c.Scores, contract.Score{Name: kv[i].(string), Value: float64(kv[i+1].(int))})
	}
	return c
}

// ExpectScores pings the scorer at url with data (its configuration) and checks that it answers
// 200 with exactly want, in a score.updated whose time is at.
func ExpectScores(t testing.TB, url, data string, want contract.ScoreUpdated, at time.Time) {
	t.Helper()
	status, reply := Send(t, url, Ping(data))
	got, fail := Reply(t, reply)
	if status != http.StatusOK || fail != nil {
		t.Fatalf("status %d failure %+v", status, fail)
	}
	if !reflect.DeepEqual(*got, want) {
		t.Errorf("scores =\n  %+v\nwant\n  %+v", *got, want)
	}
	if !reply.Time().Equal(at) {
		t.Errorf("event time %v, want %v", reply.Time(), at)
	}
}

// Labels builds a label set from name, value pairs: Labels("cluster", "c1", "app", "a").
func Labels(kv ...string) map[string]string {
	m := map[string]string{}
	for i := 0; i+1 < len(kv); i += 2 {
		m[kv[i]] = kv[i+1]
	}
	return m
}
