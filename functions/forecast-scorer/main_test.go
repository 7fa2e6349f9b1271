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
	functest.Help(t, "--prometheus-url  [env PROMETHEUS_URL]", "--prometheus-token-file", "--prometheus-ca-file", "--prometheus-timeout", "Holt")
}

func TestBadStart(t *testing.T) {
	out, code := functest.Exec(t, nil, "--prometheus-url=prometheus:9090")
	if code != 1 || !strings.Contains(out, "not an http(s) URL") {
		t.Errorf("exit %d, output %s; want 1 and a URL error", code, out)
	}
}

func TestServe(t *testing.T) {
	srv := promserver.Start(t)
	at := promserver.Aligned(time.Minute)
	// Flat, so the forecast does not depend on the minute the ping lands in: 32 of 64 -> 50.
	srv.MustPush(t, promserver.Grid(map[string]string{"__name__": "usage", "cluster": "east"}, at, time.Minute, 32, 32, 32, 32, 32, 32))
	url := functest.Start(t, nil, "--prometheus-url="+srv.URL).URL
	status, reply := functest.Send(t, url, functest.Ping(`{"resource":"cpu-forecast","scoreName":"headroom","query":"usage","range":"5m","step":"1m","horizon":"10m","capacity":64}`))
	if status != http.StatusOK || reply == nil {
		t.Fatalf("status %d reply %v", status, reply)
	}
	got, err := contract.DecodeScoreUpdated(reply)
	if err != nil {
		t.Fatal(err)
	}
	want := []contract.ClusterScores{{Cluster: "east", Scores: []contract.Score{{Name: "headroom", Value: 50}}}}
	if !reflect.DeepEqual(got.Items, want) {
		t.Errorf("items %+v, want %+v", got.Items, want)
	}
}
