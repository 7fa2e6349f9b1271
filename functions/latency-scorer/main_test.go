package main

import (
	"bytes"
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
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// build compiles this function into a temporary directory.
func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "latency-scorer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
}

func TestHelpNamesEveryFlag(t *testing.T) {
	out, err := exec.Command(build(t), "--help").CombinedOutput()
	if err != nil {
		t.Fatalf("--help: %v\n%s", err, out)
	}
	for _, f := range []string{"--cluster", "--config-file", "--interval", "--sink  [env SINK]", "$K_SINK", "--ce-overrides  [env CE_OVERRIDES]", "$K_CE_OVERRIDES", "--port"} {
		if !bytes.Contains(out, []byte(f)) {
			t.Errorf("--help does not mention %s:\n%s", f, out)
		}
	}
}

func TestNoKnativeEventingImport(t *testing.T) {
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	if bytes.Contains(out, []byte("knative.dev/eventing")) {
		t.Error("this function imports knative.dev/eventing")
	}
}

// TestAgentModeAsDeployed runs the binary as a SinkBinding configures it (K_SINK and
// K_CE_OVERRIDES in the environment, --cluster and --config-file from the Deployment) and checks
// the score.updated that reaches the sink.
func TestAgentModeAsDeployed(t *testing.T) {
	bin := build(t)
	target := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {}))
	defer target.Close()
	got := make(chan event.Event, 4)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		got <- *e
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()
	cfg := filepath.Join(t.TempDir(), "config.yaml")
	if err := os.WriteFile(cfg, []byte("resource: latency\nlatencies:\n- {name: hub-api, url: '"+target.URL+"', runs: 2, waitBetweenRuns: 10ms}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	port := freePort(t)
	cmd := exec.Command(bin, "--cluster", "east-1", "--config-file", cfg, "--interval", "1h", "--port", fmt.Sprint(port))
	cmd.Env = append(os.Environ(), "K_SINK="+sink.URL, `K_CE_OVERRIDES={"extensions":{"fromcluster":"east-1"}}`)
	var stderr syncBuffer
	cmd.Stderr = &stderr
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
	}()

	select {
	case e := <-got:
		if e.Type() != contract.TypeScoreUpdated || e.Extensions()["fromcluster"] != "east-1" {
			t.Errorf("sink got %s with extensions %v", e.Type(), e.Extensions())
		}
		su, err := contract.DecodeScoreUpdated(&e)
		if err != nil || su.Items[0].Cluster != "east-1" || su.Items[0].Scores[0].Name != "hub-api" {
			t.Errorf("sink got %+v, %v", su, err)
		}
	case err := <-exited:
		t.Fatalf("exited early: %v\n%s", err, stderr.String())
	case <-time.After(20 * time.Second):
		t.Fatalf("nothing reached K_SINK within 20s\n%s", stderr.String())
	}

	base := fmt.Sprintf("http://127.0.0.1:%d", port)
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		resp, err := http.Get(base + "/readyz")
		if err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				break
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz not 200 within 5s: %v", err)
		}
	}
	resp, err := http.Get(base + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `scoreflow_latency_run_seconds_count{cluster="east-1",name="hub-api"} 2`) {
		t.Errorf("/metrics lacks the two runs:\n%s", body)
	}

	_ = cmd.Process.Signal(syscall.SIGTERM)
	select {
	case err := <-exited:
		if err != nil {
			t.Errorf("exit after SIGTERM: %v\n%s", err, stderr.String())
		}
	case <-time.After(25 * time.Second):
		t.Errorf("still running 25s after SIGTERM")
	}
}

func freePort(t *testing.T) int {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().(*net.TCPAddr).Port
}

// syncBuffer is a bytes.Buffer safe to read while the child process writes to it.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}
func (s *syncBuffer) String() string { s.mu.Lock(); defer s.mu.Unlock(); return s.b.String() }
