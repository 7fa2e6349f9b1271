package static

import (
	"bytes"
	"log/slog"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

func serve(t *testing.T, path string) (string, *bytes.Buffer) {
	t.Helper()
	fn := function.New("static-scorer", "test")
	logs := &bytes.Buffer{}
	s := &Scorer{File: &File{Path: path, Log: slog.New(slog.NewJSONHandler(logs, nil))}}
	return functest.Serve(t, fn, scorer.Handler(fn.Source(), scorer.Route{contract.TypePing: s.Ping})), logs
}

func ping(t *testing.T, url, data string) (int, *event.Event) {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID("p1")
	e.SetSource("/apis/v1/namespaces/scoreflow/pingsources/static")
	e.SetType(contract.TypePing)
	if data != "" {
		if err := e.SetData(cloudevents.ApplicationJSON, []byte(data)); err != nil {
			t.Fatal(err)
		}
	}
	return functest.Send(t, url, e)
}

func scoresOf(t *testing.T, e *event.Event) (string, map[string]float64) {
	t.Helper()
	if e == nil || e.Type() != contract.TypeScoreUpdated {
		t.Fatalf("reply %v, want score.updated", e)
	}
	su, err := contract.DecodeScoreUpdated(e)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, it := range su.Items {
		for _, s := range it.Scores {
			out[it.Cluster+"/"+s.Name] = s.Value
		}
	}
	return su.Resource, out
}

func failure(t *testing.T, e *event.Event) *contract.Failure {
	t.Helper()
	if e == nil {
		t.Fatal("no reply, want score.failed")
	}
	f, err := contract.DecodeFailure(e)
	if err != nil {
		t.Fatal(err)
	}
	return f
}

const twoClusters = `rows:
- {cluster: w1, app: app01, device: gpu0, performance: 90, power: 300}
- {cluster: w2, app: app01, device: gpu0, performance: 60, power: 200}
`

func TestPingScoresTheNamedResource(t *testing.T) {
	path, _ := functest.ConfigMapFile(t, "table.yaml", twoClusters)
	url, _ := serve(t, path)
	for _, tt := range []struct {
		resource string
		want     map[string]float64
	}{
		{"demo-performance-score", map[string]float64{"w1/app01;gpu0": 100, "w2/app01;gpu0": -100}},
		{"demo-powerconsumption-score", map[string]float64{"w1/app01;gpu0": -100, "w2/app01;gpu0": 100}},
	} {
		status, reply := ping(t, url, `{"resource":"`+tt.resource+`"}`)
		res, got := scoresOf(t, reply)
		if status != http.StatusOK || res != tt.resource || !equal(got, tt.want) {
			t.Errorf("%s: status %d, %s %v; want %v", tt.resource, status, res, got, tt.want)
		}
		if time.Since(reply.Time()) > 5*time.Second {
			t.Errorf("event time %s, want when the table was read", reply.Time())
		}
	}
}

func TestTableChangesArePickedUp(t *testing.T) {
	path, publish := functest.ConfigMapFile(t, "table.yaml", twoClusters)
	url, logs := serve(t, path)
	const perf = `{"resource":"demo-performance-score"}`
	if _, got := scoresOf(t, second(ping(t, url, perf))); got["w1/app01;gpu0"] != 100 {
		t.Fatalf("before: %v", got)
	}

	// The ConfigMap is edited: w2 is now the faster one.
	publish(strings.Replace(twoClusters, "performance: 60", "performance: 95", 1))
	if _, got := scoresOf(t, second(ping(t, url, perf))); got["w1/app01;gpu0"] != -100 || got["w2/app01;gpu0"] != 100 {
		t.Errorf("after the edit: %v, want w2 ahead", got)
	}

	// A malformed edit: 400 BadConfig naming the problem, not the old scores.
	publish("rows:\n- {cluster: w1, app: app01, device: gpu0, performance: fast}\n")
	status, reply := ping(t, url, perf)
	if f := failure(t, reply); status != http.StatusBadRequest || f.Reason != contract.ReasonBadConfig || f.Retriable || !strings.Contains(f.Message, "performance") {
		t.Errorf("malformed table: status %d, failure %+v", status, f)
	}

	// Fixed again: scores come back, from the new content.
	publish("rows:\n- {cluster: w3, app: app01, device: gpu0, performance: 1}\n- {cluster: w4, app: app01, device: gpu0, performance: 2}\n")
	if _, got := scoresOf(t, second(ping(t, url, perf))); !equal(got, map[string]float64{"w3/app01;gpu0": -100, "w4/app01;gpu0": 100}) {
		t.Errorf("after the fix: %v", got)
	}
	if n := strings.Count(logs.String(), "table loaded"); n != 3 {
		t.Errorf("table parsed %d times for 3 good versions and 4 events, want 3 (only on change):\n%s", n, logs)
	}
}

func second(_ int, e *event.Event) *event.Event { return e }

func TestPingRefusals(t *testing.T) {
	path, _ := functest.ConfigMapFile(t, "table.yaml", twoClusters)
	url, _ := serve(t, path)
	onePath, _ := functest.ConfigMapFile(t, "table.yaml", "resources:\n- {name: perf, value: performance, normalize: {method: minmax}}\n"+twoClusters)
	oneURL, _ := serve(t, onePath)
	missingURL, _ := serve(t, filepath.Join(t.TempDir(), "missing.yaml"))

	for _, tt := range []struct {
		name, url, data string
		status          int
		want            string // in the failure message; "" = a score.updated
	}{
		{"no data, two resources", url, "", http.StatusBadRequest, "one PingSource per resource"},
		{"no data, one resource", oneURL, "", http.StatusOK, ""},
		{"unknown resource", url, `{"resource":"gpu-score"}`, http.StatusBadRequest, "not in the table"},
		{"misspelt field", url, `{"resorce":"x"}`, http.StatusBadRequest, "resorce"},
		{"table missing", missingURL, `{"resource":"demo-performance-score"}`, http.StatusBadRequest, "no such file"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			status, reply := ping(t, tt.url, tt.data)
			if status != tt.status {
				t.Fatalf("status %d, want %d (reply %v)", status, tt.status, reply)
			}
			if tt.want == "" {
				scoresOf(t, reply)
				return
			}
			if f := failure(t, reply); f.Reason != contract.ReasonBadConfig || !strings.Contains(f.Message, tt.want) {
				t.Errorf("failure %+v, want BadConfig mentioning %q", f, tt.want)
			}
		})
	}
}

func TestPingNothingToScore(t *testing.T) {
	path, _ := functest.ConfigMapFile(t, "table.yaml", "rows:\n- {cluster: w1, app: a, device: d, performance: 1}\n")
	url, _ := serve(t, path)
	if status, reply := ping(t, url, `{"resource":"demo-powerconsumption-score"}`); status != http.StatusAccepted || reply != nil {
		t.Errorf("no power values: status %d reply %v, want 202 and no event (not zeros)", status, reply)
	}
}
