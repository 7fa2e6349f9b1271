package main

import (
	"net/http"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestHelp(t *testing.T) {
	functest.Help(t, "--prometheus-url  [env PROMETHEUS_URL]", "--prometheus-token-file", "--prometheus-ca-file", "--prometheus-timeout", "--metric-config  [env METRIC_CONFIG]", "--port")
}

func TestBadStart(t *testing.T) {
	tests := []struct {
		args  []string
		quote string
	}{
		{nil, "--prometheus-url is required"},
		{[]string{"--prometheus-url=http://x:9090", `--metric-config={"scores":["x"]}`}, "--metric-config: scores[0]"},
	}
	for _, tt := range tests {
		out, code := functest.Exec(t, nil, tt.args...)
		if code != 1 || !strings.Contains(out, tt.quote) {
			t.Errorf("%v: exit %d, output %s; want 1 and %q", tt.args, code, out, tt.quote)
		}
	}
}

// The built function end to end: flags, Prometheus, CloudEvents over HTTP, graceful exit.
func TestServe(t *testing.T) {
	srv := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	srv.MustPush(t,
		promserver.Gauge(map[string]string{"__name__": "kube_node_status_allocatable", "cluster": "east", "node": "n1", "resource": "nvidia_com_gpu"}, at, 8),
		promserver.Gauge(map[string]string{"__name__": "kube_pod_container_resource_requests", "cluster": "east", "namespace": "a", "pod": "p", "resource": "nvidia_com_gpu"}, at, 6),
		promserver.Gauge(map[string]string{"__name__": "kube_pod_status_phase", "cluster": "east", "namespace": "a", "pod": "p", "phase": "Running"}, at, 1),
	)
	url := functest.Start(t, nil, "--prometheus-url="+srv.URL).URL
	status, reply := functest.Send(t, url, functest.Ping(`{"resource":"gpu-usage-score","scores":["free-capacity"]}`))
	if status != http.StatusOK || reply == nil {
		t.Fatalf("status %d reply %v", status, reply)
	}
	got, err := contract.DecodeScoreUpdated(reply)
	if err != nil {
		t.Fatal(err)
	}
	// 100 * (8-6)/8 = 25
	want := []contract.ClusterScores{{Cluster: "east", Scores: []contract.Score{{Name: "free-capacity", Value: 25}}}}
	if got.Resource != "gpu-usage-score" || !reflect.DeepEqual(got.Items, want) || reply.Source() != "scoreflow/resource-scorer" {
		t.Errorf("reply from %s: %+v, want %+v", reply.Source(), got, want)
	}
}
