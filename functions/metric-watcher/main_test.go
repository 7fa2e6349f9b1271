package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

// Every flag has its own explanation in --help.
func TestHelpExplainsEveryFlag(t *testing.T) {
	fn, _ := newFunction()
	functest.HelpExplainsEveryFlag(t, fn, "--config", "--query", "--deadband-absolute", "--deadband-relative", "--interval", "--prometheus-url", "K_SINK", "K_CE_OVERRIDES",
		"--leader-elect", "--kubeconfig")
}

// The binary as a SinkBinding runs it, against a real Prometheus: it polls at start and on its
// interval, emits a change once, serves probes and metrics but no events, and exits on SIGTERM.
func TestBinary(t *testing.T) {
	p := promserver.Start(t)
	now := time.Now()
	p.MustPush(t, promserver.Gauge(map[string]string{"__name__": "test_cpu", "cluster": "c1", "node": "n1"}, now.Add(-time.Second), 0.5))

	sink := functest.NewSink(t, func(e *event.Event) error {
		if e.Extensions()["sinkbinding"] != "mw" {
			return fmt.Errorf("extensions %v, want K_CE_OVERRIDES' sinkbinding=mw", e.Extensions())
		}
		return functest.MetricChanged(e)
	})
	samples := func(e event.Event) []contract.Sample {
		m, _ := contract.DecodeMetricChanged(&e) // the sink checked it
		return m.Samples
	}

	cfg := filepath.Join(t.TempDir(), "watcher.yaml")
	if err := os.WriteFile(cfg, []byte("queries:\n  - metric: cluster_cpu_ratio\n    query: max by (cluster, node) (test_cpu)\n    deadband: {absolute: 0.1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"K_SINK=" + sink.URL, `K_CE_OVERRIDES={"extensions":{"sinkbinding":"mw"}}`,
		"PROMETHEUS_URL=" + p.URL, "CONFIG=" + cfg, "LEADER_ELECT=false"}, "--interval", "100ms")

	next := func(what string) []contract.Sample {
		select {
		case e := <-sink.Arrived():
			return samples(e)
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %s", what)
			return nil
		}
	}
	first := next("from the first poll")
	if len(first) != 1 || first[0].Cluster != "c1" || first[0].Value != 0.5 || first[0].Labels["node"] != "n1" {
		t.Fatalf("first event samples = %+v, want c1 (node n1) = 0.5", first)
	}
	if code, _ := functest.Get(t, fn.URL+"/healthz"); code != http.StatusOK {
		t.Fatalf("GET /healthz = %d, want 200", code)
	}
	if code, _ := functest.Get(t, fn.URL+"/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz = %d, want 200", code)
	}
	// Unchanged polls emit nothing: wait for several, then check none reached the sink.
	polls := func() int {
		_, m := functest.Get(t, fn.URL+"/metrics")
		v := regexp.MustCompile(`(?m)^scoreflow_watcher_polls_total (\d+)$`).FindStringSubmatch(m)
		if v == nil {
			t.Fatalf("/metrics lacks scoreflow_watcher_polls_total:\n%s", m)
		}
		n, _ := strconv.Atoi(v[1])
		return n
	}
	for deadline := time.Now().Add(10 * time.Second); polls() < 4; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("fewer than 4 polls in 10s at --interval 100ms")
		}
	}
	select {
	case e := <-sink.Arrived():
		t.Fatalf("unchanged value emitted again: %+v", samples(e))
	default:
	}
	p.MustPush(t, promserver.Gauge(map[string]string{"__name__": "test_cpu", "cluster": "c1", "node": "n1"}, time.Now(), 0.9))
	if s := next("after a change beyond the deadband"); len(s) != 1 || s[0].Value != 0.9 {
		t.Fatalf("samples = %+v, want c1 = 0.9", s)
	}

	// A source receives no events.
	resp, err := http.Post(fn.URL+"/", "application/cloudevents+json", strings.NewReader(`{"specversion":"1.0","id":"1","source":"s","type":"t"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST / = %d, want 404", resp.StatusCode)
	}

	fn.Stop(t, 10*time.Second)
}

// Bad configuration stops the binary at once with exit code 1 and a message naming the problem.
func TestBinaryRefusesBadConfig(t *testing.T) {
	prom := "PROMETHEUS_URL=http://127.0.0.1:1"
	sink := "K_SINK=http://127.0.0.1:1"
	t.Setenv("LEADER_ELECT", "false")
	for _, tt := range []struct {
		args, env []string
		want      string
	}{
		{nil, []string{prom, sink}, "no queries"},
		{[]string{"--query", "up"}, []string{prom, sink}, "--query needs --metric"},
		{[]string{"--metric", "m", "--query", "up"}, []string{"PROMETHEUS_URL=", sink}, "--prometheus-url is required"},
		{[]string{"--metric", "m", "--query", "up"}, []string{prom, "K_SINK="}, "K_SINK"},
		{[]string{"--metric", "m", "--query", "up", "--deadband-relative", "-1"}, []string{prom, sink}, "deadband.relative"},
		{[]string{"--metric", "m", "--query", "up", "--interval", "0s"}, []string{prom, sink}, "--interval must be positive"},
	} {
		out, code := functest.Exec(t, tt.env, append([]string{"--port", "0"}, tt.args...)...)
		if code != 1 || !strings.Contains(out, tt.want) {
			t.Errorf("%v: exit %d, output %s; want exit 1 naming %s", tt.args, code, out, tt.want)
		}
	}
}

// Two replicas, as a Deployment scaled to two or a rollout's overlap runs them, against a real API
// server and Prometheus: only the one holding the Lease polls and sends; when it stops, it
// releases the Lease and the other takes over without waiting for it to expire, its first poll
// emitting every series again (the scorers may have missed nothing, but this replica cannot know).
func TestTwoReplicasOnePolls(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	p := promserver.Start(t)
	p.MustPush(t, promserver.Gauge(map[string]string{"__name__": "test_cpu", "cluster": "c1"}, time.Now().Add(-time.Second), 0.5))
	sink := functest.NewSink(t, functest.MetricChanged)
	cfg := filepath.Join(t.TempDir(), "watcher.yaml")
	if err := os.WriteFile(cfg, []byte("queries:\n  - metric: cluster_cpu_ratio\n    query: test_cpu\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A Lease that expires only 10s after its last renewal: a takeover well within that is the
	// released Lease, not an expired one.
	env := []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=default", "K_SINK=" + sink.URL, "PROMETHEUS_URL=" + p.URL, "CONFIG=" + cfg}
	args := []string{"--interval", "100ms", "--leader-elect-lease-duration", "10s", "--leader-elect-renew-deadline", "8s", "--leader-elect-retry-period", "250ms"}
	replicas := []*functest.Process{functest.Start(t, env, args...), functest.Start(t, env, args...)}
	polls := func(r *functest.Process) int {
		_, m := functest.Get(t, r.URL+"/metrics")
		v := regexp.MustCompile(`(?m)^scoreflow_watcher_polls_total (\d+)$`).FindStringSubmatch(m)
		if v == nil {
			return 0 // not registered until the first poll
		}
		n, _ := strconv.Atoi(v[1])
		return n
	}
	arrived := func(what string) {
		t.Helper()
		select {
		case <-sink.Arrived():
		case <-time.After(20 * time.Second):
			t.Fatalf("no event %s", what)
		}
	}
	arrived("from the first leader's first poll")
	var lead, follower *functest.Process
	for deadline := time.Now().Add(10 * time.Second); lead == nil; time.Sleep(50 * time.Millisecond) {
		switch a, b := polls(replicas[0]), polls(replicas[1]); {
		case a >= 10 && b == 0:
			lead, follower = replicas[0], replicas[1]
		case b >= 10 && a == 0:
			lead, follower = replicas[1], replicas[0]
		case a > 0 && b > 0:
			t.Fatalf("both replicas poll: %d and %d polls", a, b)
		case time.Now().After(deadline):
			t.Fatalf("no replica made 10 polls at --interval 100ms in 10s (%d, %d)", a, b)
		}
	}
	if n := polls(follower); n != 0 {
		t.Fatalf("the follower polled %d times while the other led", n)
	}
	select {
	case e := <-sink.Arrived():
		t.Fatalf("an unchanged value was sent again while one replica led: %v", e)
	default:
	}

	stopped := time.Now()
	lead.Stop(t, 10*time.Second)
	arrived("from the new leader's first poll, which emits every series again")
	if took := time.Since(stopped); took > 5*time.Second {
		t.Errorf("the other replica took over %s after the leader stopped: it waited for the Lease to expire instead of its release", took)
	}
	if n := polls(follower); n == 0 {
		t.Error("the replica that sent after the takeover has not polled")
	}
}
