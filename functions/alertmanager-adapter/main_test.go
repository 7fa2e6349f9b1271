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
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/scoreflow/scoreflow/pkg/contract"
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
	for _, want := range []string{"--cluster-label", "--metric-name", "--metric-prefix", "--sink", "K_SINK", "K_CE_OVERRIDES"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("--help does not mention %s", want)
		}
	}
}

// The binary as a SinkBinding runs it: K_SINK and K_CE_OVERRIDES from the environment, webhooks
// on /, the runtime's probes and metrics beside them, and a clean exit on SIGTERM.
func TestBinary(t *testing.T) {
	bin := binary(t)
	got := make(chan *contract.MetricChanged, 1)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		if err != nil {
			t.Errorf("sink: %v", err)
			return
		}
		if e.Extensions()["sinkbinding"] != "am" {
			t.Errorf("sink: extensions %v, want K_CE_OVERRIDES' sinkbinding=am", e.Extensions())
		}
		m, err := contract.DecodeMetricChanged(e)
		if err != nil {
			t.Errorf("sink: %v", err)
		}
		got <- m
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()

	port := freePort(t)
	cmd := exec.Command(bin, "--metric-name", "scoreflow_alert_firing")
	cmd.Env = append(os.Environ(), "PORT="+port, "K_SINK="+sink.URL, `K_CE_OVERRIDES={"extensions":{"sinkbinding":"am"}}`, "CLUSTER_LABEL=managed_cluster")
	var logs bytes.Buffer
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
			t.Logf("adapter output:\n%s", logs.String())
		}
	}()
	base := "http://127.0.0.1:" + port
	waitOK(t, base+"/healthz")

	if code, _ := get(t, base+"/readyz"); code != http.StatusOK {
		t.Errorf("GET /readyz = %d, want 200", code)
	}
	body := `{"version":"4","status":"firing","alerts":[{"status":"firing","labels":{"alertname":"HighCPU","managed_cluster":"c1"},"startsAt":"2026-03-01T11:50:00Z","endsAt":"0001-01-01T00:00:00Z"}]}`
	resp, err := http.Post(base+"/", "application/json", strings.NewReader(body))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("POST / = %d, want 200", resp.StatusCode)
	}
	select {
	case m := <-got:
		if len(m.Samples) != 1 || m.Samples[0].Metric != "scoreflow_alert_firing" || m.Samples[0].Cluster != "c1" || m.Samples[0].Value != 1 {
			t.Errorf("samples = %+v, want scoreflow_alert_firing c1 = 1", m.Samples)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("no event reached the sink")
	}
	if _, metrics := get(t, base+"/metrics"); !strings.Contains(metrics, `scoreflow_alertmanager_alerts_total{outcome="firing"} 1`) {
		t.Errorf("/metrics lacks the firing count:\n%s", metrics)
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
	for _, tt := range []struct {
		args, env []string
		want      string
	}{
		{[]string{"--port", freePort(t)}, []string{"K_SINK="}, "K_SINK"},
		{[]string{"--port", freePort(t), "--cluster-label", "managed-cluster"}, []string{"K_SINK=http://127.0.0.1:1"}, "cluster label"},
	} {
		cmd := exec.Command(bin, tt.args...)
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
		if binDir, buildErr = os.MkdirTemp("", "alertmanager-adapter-test-"); buildErr != nil {
			return
		}
		if out, err := exec.Command("go", "build", "-o", filepath.Join(binDir, "alertmanager-adapter"), ".").CombinedOutput(); err != nil {
			buildErr = fmt.Errorf("go build: %v\n%s", err, out)
		}
	})
	if buildErr != nil {
		t.Fatal(buildErr)
	}
	return filepath.Join(binDir, "alertmanager-adapter")
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
