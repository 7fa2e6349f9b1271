package knlocal_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
)

// TestBrokerDeliversThroughRealKnative brings up the stock Knative Eventing against a local hub,
// applies a Broker and a Trigger the webhook admits, and sees an event posted to the broker's
// ingress arrive at the Trigger's subscriber, through the in-memory channel and the filter. Stop
// then leaves no process behind.
func TestBrokerDeliversThroughRealKnative(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	kn, err := knlocal.Start(ctx, hub, knlocal.Options{StateDir: t.TempDir(), LockWait: 5 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	stopped := false
	defer func() {
		if !stopped {
			kn.Stop()
		}
	}()

	got := make(chan string, 10)
	sink := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		body, _ := io.ReadAll(r.Body)
		got <- r.Header.Get("Ce-Id") + " " + string(body)
		w.WriteHeader(http.StatusAccepted)
	}))
	defer sink.Close()

	objs, err := knlocal.Decode(strings.NewReader(fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: demo}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: default, namespace: demo}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: all, namespace: demo}
spec:
  broker: default
  filters: [{exact: {type: demo.ping}}]
  subscriber: {uri: %q}
`, sink.URL)))
	if err != nil {
		t.Fatal(err)
	}
	if err := kn.Applier.Apply(ctx, objs...); err != nil {
		t.Fatal(err)
	}
	if err := kn.WaitReady(ctx, "demo", 60*time.Second, knlocal.BrokerKind, knlocal.TriggerKind); err != nil {
		t.Fatal(err)
	}
	req, _ := http.NewRequest(http.MethodPost, kn.IngressURL+"/demo/default", strings.NewReader(`{"n":1}`))
	for k, v := range map[string]string{"Ce-Specversion": "1.0", "Ce-Id": "e1", "Ce-Source": "test", "Ce-Type": "demo.ping", "Content-Type": "application/json"} {
		req.Header.Set(k, v)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	if resp.StatusCode != http.StatusAccepted {
		t.Fatalf("ingress answered %d, want 202", resp.StatusCode)
	}
	select {
	case e := <-got:
		if e != `e1 {"n":1}` {
			t.Fatalf("subscriber got %q", e)
		}
	case <-time.After(30 * time.Second):
		t.Fatalf("the event did not reach the subscriber; logs in %s", kn.LogDir)
	}

	pids := kn.Processes()
	if len(pids) < 7 {
		t.Fatalf("expected at least 7 Knative processes, got %v", pids)
	}
	kn.Stop()
	stopped = true
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); err == nil {
			if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); err == nil {
				t.Errorf("process %d outlived Stop", pid)
			}
		}
	}
}
