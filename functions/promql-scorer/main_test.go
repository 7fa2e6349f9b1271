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
	functest.Help(t, "--prometheus-url  [env PROMETHEUS_URL]", "--prometheus-token-file", "--prometheus-ca-file", "--prometheus-timeout", "--metric-config  [env METRIC_CONFIG]")
}

func TestBadStart(t *testing.T) {
	tests := []struct {
		args  []string
		quote string
	}{
		{nil, "--prometheus-url is required"},
		{[]string{"--prometheus-url=http://x:9090", "--prometheus-timeout=0s"}, "--prometheus-timeout must be positive"},
		{[]string{"--prometheus-url=http://x:9090", `--metric-config={"resource":"r","metric":"m","scoreName":"s"}`}, "--metric-config: normalize.method"},
	}
	for _, tt := range tests {
		out, code := functest.Exec(t, nil, tt.args...)
		if code != 1 || !strings.Contains(out, tt.quote) {
			t.Errorf("%v: exit %d, output %s; want 1 and %q", tt.args, code, out, tt.quote)
		}
	}
}

func TestServe(t *testing.T) {
	srv := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	srv.MustPush(t,
		promserver.Gauge(map[string]string{"__name__": "load", "cluster": "east"}, at, 30),
		promserver.Gauge(map[string]string{"__name__": "load", "cluster": "west"}, at, 80),
	)
	url := functest.Start(t, nil, "--prometheus-url="+srv.URL).URL
	status, reply := functest.Send(t, url, functest.Ping(`{"resource":"load-score","query":"load","scoreName":"load","normalize":{"method":"linear","min":0,"max":100}}`))
	if status != http.StatusOK || reply == nil {
		t.Fatalf("status %d reply %v", status, reply)
	}
	got, err := contract.DecodeScoreUpdated(reply)
	if err != nil {
		t.Fatal(err)
	}
	// linear 0..100: 30 -> -40, 80 -> 60
	want := []contract.ClusterScores{{Cluster: "east", Scores: []contract.Score{{Name: "load", Value: -40}}}, {Cluster: "west", Scores: []contract.Score{{Name: "load", Value: 60}}}}
	if !reflect.DeepEqual(got.Items, want) {
		t.Errorf("items %+v, want %+v", got.Items, want)
	}
	_, body := functest.Get(t, url+"/metrics")
	if !strings.Contains(body, `scoreflow_prometheus_query_seconds_count{kind="instant",outcome="ok"} 1`) {
		t.Errorf("/metrics does not count the query:\n%s", body)
	}
}
