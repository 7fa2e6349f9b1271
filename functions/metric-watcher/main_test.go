package main

import (
	"bytes"
	"flag"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/promtest"
)

// Every flag has its own explanation in --help.
func TestHelpExplainsEveryFlag(t *testing.T) {
	fn, _ := newFunction()
	var out bytes.Buffer
	fn.Flags.SetOutput(&out)
	if err := fn.Parse([]string{"--help"}); err != flag.ErrHelp {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	seen := map[string]bool{}
	fn.Flags.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "--"+f.Name+"  ") {
			t.Errorf("--help does not list --%s", f.Name)
		}
		if len(f.Usage) < 20 || seen[f.Usage] {
			t.Errorf("--%s has no explanation of its own: %q", f.Name, f.Usage)
		}
		seen[f.Usage] = true
	})
	for _, want := range []string{"--config", "--query", "--deadband-absolute", "--deadband-relative", "--interval", "--prometheus-url", "K_SINK", "K_CE_OVERRIDES"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %s", want)
		}
	}
}

// The binary as a SinkBinding runs it, against a real Prometheus: it polls at start and on its
// interval, emits a change once, serves probes and metrics but no events, and exits on SIGTERM.
func TestBinary(t *testing.T) {
	bin := binary(t)
	p := promtest.Start(t)
	now := time.Now()
	p.MustPush(t, promtest.Gauge(map[string]string{"__name__": "test_cpu", "cluster": "c1", "node": "n1"}, now.Add(-time.Second), 0.5))

	got := make(chan []contract.Sample, 10)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		if err != nil {
			t.Errorf("sink: %v", err)
			return
		}
		if e.Extensions()["sinkbinding"] != "mw" {
			t.Errorf("sink: extensions %v, want K_CE_OVERRIDES' sinkbinding=mw", e.Extensions())
		}
		m, err := contract.DecodeMetricChanged(e)
		if err != nil {
			t.Errorf("sink: %v", err)
			return
		}
		got <- m.Samples
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()

	cfg := filepath.Join(t.TempDir(), "watcher.yaml")
	if err := os.WriteFile(cfg, []byte("queries:\n  - metric: cluster_cpu_ratio\n    query: max by (cluster, node) (test_cpu)\n    deadband: {absolute: 0.1}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command(bin, "--interval", "100ms")
	cmd.Env = append(os.Environ(), "PORT="+port, "K_SINK="+sink.URL, `K_CE_OVERRIDES={"extensions":{"sinkbinding":"mw"}}`,
		"PROMETHEUS_URL="+p.URL, "CONFIG="+cfg)
	var logs lockedBuffer
	cmd.Stdout, cmd.Stderr = &logs, &logs
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	defer func() {
		if cmd.ProcessState == nil {
			_ = cmd.Process.Kill()
			<-exited
		}
		if t.Failed() {
			t.Logf("metric-watcher output:\n%s", logs.String())
		}
	}()
	base := "http://127.0.0.1:" + port

	next := func(what string) []contract.Sample {
		select {
		case s := <-got:
			return s
		case <-time.After(10 * time.Second):
			t.Fatalf("no event %s", what)
			return nil
		}
	}
	first := next("from the first poll")
	if len(first) != 1 || first[0].Cluster != "c1" || first[0].Value != 0.5 || first[0].Labels["node"] != "n1" {
		t.Fatalf("first event samples = %+v, want c1 (node n1) = 0.5", first)
	}
	waitOK(t, base+"/healthz")
	if code, _ := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz = %d, want 200", code)
	}
	// Unchanged polls emit nothing: wait for several, then check none reached the sink.
	polls := func() int {
		_, m := get(t, base+"/metrics")
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
	case s := <-got:
		t.Fatalf("unchanged value emitted again: %+v", s)
	default:
	}
	p.MustPush(t, promtest.Gauge(map[string]string{"__name__": "test_cpu", "cluster": "c1", "node": "n1"}, time.Now(), 0.9))
	if s := next("after a change beyond the deadband"); len(s) != 1 || s[0].Value != 0.9 {
		t.Fatalf("samples = %+v, want c1 = 0.9", s)
	}

	// A source receives no events.
	resp, err := http.Post(base+"/", "application/cloudevents+json", strings.NewReader(`{"specversion":"1.0","id":"1","source":"s","type":"t"}`))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusNotFound {
		t.Errorf("POST / = %d, want 404", resp.StatusCode)
	}

	if err := cmd.Process.Signal(syscall.SIGTERM); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-exited:
		if err != nil {
			t.Fatalf("exit after SIGTERM: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("still running 10s after SIGTERM")
	}
}

// Bad configuration stops the binary at once with exit code 1 and a message naming the problem.
func TestBinaryRefusesBadConfig(t *testing.T) {
	bin := binary(t)
	prom := "PROMETHEUS_URL=http://127.0.0.1:1"
	sink := "K_SINK=http://127.0.0.1:1"
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
		cmd := exec.Command(bin, append([]string{"--port", freePort(t)}, tt.args...)...)
		cmd.Env = append(os.Environ(), tt.env...)
		out, err := cmd.CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), tt.want) {
			t.Errorf("%v: err %v, output %s; want exit 1 naming %s", tt.args, err, out, tt.want)
		}
	}
}

var (
	buildOnce sync.Once
	binDir    string
	buildErr  error
)

// binary builds this command once for the package's tests.
func binary(t *testing.T) string {
	t.Helper()
	buildOnce.Do(func() {
		if binDir, buildErr = os.MkdirTemp("", "metric-watcher-test-"); buildErr != nil {
			return
		}
		if out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "metric-watcher"), ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "metric-watcher")
}

func TestMain(m *testing.M) {
	code := m.Run()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

func freePort(t *testing.T) string {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return fmt.Sprint(ln.Addr().(*net.TCPAddr).Port)
}

func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := http.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func waitOK(t *testing.T, url string) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		if resp, err := http.Get(url); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("%s not answering 200 after 10s", url)
}

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
