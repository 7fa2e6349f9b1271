package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

// Every flag has its own explanation in --help.
func TestHelpExplainsEveryFlag(t *testing.T) {
	fn, _ := newFunction()
	functest.HelpExplainsEveryFlag(t, fn, "--cluster-label", "--metric-name", "--metric-prefix", "--sink", "K_SINK", "K_CE_OVERRIDES",
		"--token-file", "--max-body-bytes", "--max-concurrent")
}

// The binary as a SinkBinding runs it: K_SINK and K_CE_OVERRIDES from the environment, webhooks
// on /, the runtime's probes and metrics beside them, and a clean exit on SIGTERM.
func TestBinary(t *testing.T) {
	sink := functest.NewSink(t, func(e *event.Event) error {
		if e.Extensions()["sinkbinding"] != "am" {
			return fmt.Errorf("extensions %v, want K_CE_OVERRIDES' sinkbinding=am", e.Extensions())
		}
		return functest.MetricChanged(e)
	})
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte("am-token\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"K_SINK=" + sink.URL, `K_CE_OVERRIDES={"extensions":{"sinkbinding":"am"}}`, "CLUSTER_LABEL=managed_cluster", "TOKEN_FILE=" + tokenFile},
		"--metric-name", "scoreflow_alert_firing")
	if code, _ := functest.Get(t, fn.URL+"/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz = %d, want 200", code)
	}

	if code, _ := functest.Get(t, fn.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz = %d, want 200", code)
	}
	body := `{"version":"4","status":"firing","alerts":[{"status":"firing","labels":{"alertname":"HighCPU","managed_cluster":"c1"},"startsAt":"2026-03-01T11:50:00Z","endsAt":"0001-01-01T00:00:00Z"}]}`
	for _, c := range []struct {
		token  string
		status int
	}{{"", http.StatusUnauthorized}, {"other", http.StatusUnauthorized}, {"am-token", http.StatusOK}} {
		req, _ := http.NewRequest(http.MethodPost, fn.URL+"/", strings.NewReader(body))
		req.Header.Set("Content-Type", "application/json")
		if c.token != "" {
			req.Header.Set("Authorization", "Bearer "+c.token)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != c.status {
			t.Fatalf("POST / with token %q = %d, want %d", c.token, resp.StatusCode, c.status)
		}
	}
	select {
	case e := <-sink.Arrived():
		m, _ := contract.DecodeMetricChanged(&e) // the sink checked it
		if len(m.Samples) != 1 || m.Samples[0].Metric != "scoreflow_alert_firing" || m.Samples[0].Cluster != "c1" || m.Samples[0].Value != 1 {
			t.Errorf("samples = %+v, want scoreflow_alert_firing c1 = 1", m.Samples)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event reached the sink")
	}
	if _, metrics := functest.Get(t, fn.URL+"/metrics"); !strings.Contains(metrics, `scoreflow_alertmanager_alerts_total{outcome="firing"} 1`) {
		t.Errorf("/metrics lacks the firing count:\n%s", metrics)
	}

	fn.Stop(t, 10*time.Second)
}

// Bad configuration stops the binary at once with exit code 1 and a message naming the problem.
func TestBinaryRefusesBadConfig(t *testing.T) {
	for _, tt := range []struct {
		args, env []string
		want      string
	}{
		{nil, []string{"K_SINK=", "TOKEN_FILE=/t"}, "K_SINK"},
		{[]string{"--cluster-label", "managed-cluster"}, []string{"K_SINK=http://127.0.0.1:1", "TOKEN_FILE=/t"}, "cluster label"},
		{nil, []string{"K_SINK=http://127.0.0.1:1"}, "--token-file"},
		{[]string{"--max-concurrent", "0"}, []string{"K_SINK=http://127.0.0.1:1", "TOKEN_FILE=/t"}, "--max-concurrent"},
	} {
		out, code := functest.Exec(t, tt.env, append([]string{"--port", "0"}, tt.args...)...)
		if code != 1 || !strings.Contains(out, tt.want) {
			t.Errorf("%v: exit %d, output %s; want exit 1 naming %s", tt.args, code, out, tt.want)
		}
	}
}
