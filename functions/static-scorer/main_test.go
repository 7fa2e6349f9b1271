package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

func build(t *testing.T) string {
	t.Helper()
	bin := filepath.Join(t.TempDir(), "static-scorer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	return bin
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

func TestBinary(t *testing.T) {
	bin := build(t)
	dir := t.TempDir()
	table := filepath.Join(dir, "table.yaml")
	if err := os.WriteFile(table, []byte("rows:\n- {cluster: w1, app: a, device: d, power: 1}\n- {cluster: w2, app: a, device: d, power: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("help names every flag", func(t *testing.T) {
		out, err := exec.Command(bin, "--help").CombinedOutput()
		if err != nil || !strings.Contains(string(out), "--table  [env TABLE]") {
			t.Errorf("--help: %v\n%s", err, out)
		}
	})

	t.Run("a bad table at start is fatal", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte("rows: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, err := exec.Command(bin, "--table", bad, "--port", "0").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "empty") {
			t.Errorf("exit %v, output:\n%s", err, out)
		}
	})

	t.Run("answers a ping from the table given by env", func(t *testing.T) {
		port := freePort(t)
		cmd := exec.Command(bin, "--port", fmt.Sprint(port))
		cmd.Env = append(os.Environ(), "TABLE="+table)
		var stderr syncBuffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		defer func() { _ = cmd.Process.Signal(syscall.SIGTERM); _ = cmd.Wait() }()

		c, err := cloudevents.NewClientHTTP(cloudevents.WithTarget(fmt.Sprintf("http://127.0.0.1:%d/", port)))
		if err != nil {
			t.Fatal(err)
		}
		e := cloudevents.NewEvent()
		e.SetID("p1")
		e.SetSource("/apis/v1/namespaces/scoreflow/pingsources/power")
		e.SetType(contract.TypePing)
		_ = e.SetData(cloudevents.ApplicationJSON, map[string]string{"resource": "example-powerconsumption-score"})
		var reply *cloudevents.Event
		for deadline := time.Now().Add(10 * time.Second); reply == nil; time.Sleep(50 * time.Millisecond) {
			var res error
			reply, res = c.Request(context.Background(), e)
			if reply == nil && time.Now().After(deadline) {
				t.Fatalf("no reply within 10s: %v\n%s", res, stderr.String())
			}
		}
		su, err := contract.DecodeScoreUpdated(reply)
		if err != nil {
			t.Fatal(err)
		}
		// Power, minmax, lower is better: w1 (1 W) 100, w2 (3 W) -100.
		got := map[string]float64{}
		for _, it := range su.Items {
			got[it.Cluster] = it.Scores[0].Value
		}
		if su.Resource != "example-powerconsumption-score" || got["w1"] != 100 || got["w2"] != -100 || su.Items[0].Scores[0].Name != "a;d" {
			t.Errorf("reply %+v", su)
		}
		resp, err := http.Get(fmt.Sprintf("http://127.0.0.1:%d/readyz", port))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK {
			t.Errorf("/readyz: %s", resp.Status)
		}
	})
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
