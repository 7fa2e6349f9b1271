package main

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorers/health"
)

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
	bin := filepath.Join(t.TempDir(), "health-scorer")
	if out, err := exec.Command("go", "build", "-o", bin, ".").CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}

	t.Run("help names every flag", func(t *testing.T) {
		out, err := exec.Command(bin, "--help").CombinedOutput()
		for _, f := range []string{"--resource", "--score-name", "--valid-for"} {
			if err != nil || !strings.Contains(string(out), f) {
				t.Errorf("--help lacks %s (%v):\n%s", f, err, out)
			}
		}
	})

	t.Run("bad flags are fatal", func(t *testing.T) {
		out, err := exec.Command(bin, "--resource", "Not_A_Name", "--port", "0").CombinedOutput()
		if ee, ok := err.(*exec.ExitError); !ok || ee.ExitCode() != 1 || !strings.Contains(string(out), "--resource") {
			t.Errorf("exit %v, output:\n%s", err, out)
		}
	})

	t.Run("scores a deleted cluster -100", func(t *testing.T) {
		ln, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			t.Fatal(err)
		}
		port := ln.Addr().(*net.TCPAddr).Port
		ln.Close()
		cmd := exec.Command(bin, "--port", fmt.Sprint(port), "--resource", "dr-health")
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
		e.SetID("d1")
		e.SetSource("https://10.96.0.1:443")
		e.SetType(health.TypeDelete)
		e.SetTime(time.Now())
		_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"apiVersion":"cluster.open-cluster-management.io/v1","kind":"ManagedCluster","metadata":{"name":"west"},"spec":{"hubAcceptsClient":true}}`))
		var reply *cloudevents.Event
		for deadline := time.Now().Add(10 * time.Second); reply == nil; time.Sleep(50 * time.Millisecond) {
			var res error
			reply, res = c.Request(context.Background(), e)
			if reply == nil && time.Now().After(deadline) {
				t.Fatalf("no reply within 10s: %v\n%s", res, stderr.String())
			}
		}
		su, err := contract.DecodeScoreUpdated(reply)
		if err != nil || su.Resource != "dr-health" || su.Items[0].Cluster != "west" || su.Items[0].Scores[0].Value != -100 {
			t.Errorf("reply %+v, %v; want dr-health west -100", su, err)
		}
		if !strings.Contains(stderr.String(), `"state":"Deleted"`) {
			t.Errorf("no structured log of the state:\n%s", stderr.String())
		}
	})
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
