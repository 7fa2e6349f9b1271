package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// startOnHub starts a local hub with cluster1 (accepted) and the writer binary against it.
func startOnHub(t *testing.T, env ...string) (*localhub.Hub, *functest.Process) {
	t.Helper()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.AddCluster(context.Background(), "cluster1", nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.AcceptCluster(context.Background(), "cluster1"); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	// POD_NAMESPACE: the Lease of the writer's leader election, in a namespace every hub has.
	return hub, functest.Start(t, append([]string{"KUBECONFIG=" + kubeconfig, "TTL=1m", "POD_NAMESPACE=default"}, env...))
}

// vm reads a VmRSS-style line of /proc/PID/status, in bytes.
func vm(t *testing.T, pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(l, field+":") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10
		}
	}
	t.Fatalf("no %s in /proc/%d/status", field, pid)
	return 0
}

// rawPost posts body as a binary-mode CloudEvent with extra headers and returns the status.
func rawPost(client *http.Client, url, id string, body []byte, headers map[string]string) (int, error) {
	req, err := http.NewRequest(http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", id)
	req.Header.Set("Ce-Source", "test/flood/"+strings.Repeat("s", 200))
	req.Header.Set("Ce-Type", contract.TypeScoreUpdated)
	req.Header.Set("Ce-Time", time.Now().UTC().Format(time.RFC3339Nano))
	req.Header.Set("Content-Type", "application/json")
	for k, v := range headers {
		req.Header.Set(k, v)
	}
	resp, err := client.Do(req)
	if err != nil {
		return 0, err
	}
	_, _ = io.Copy(io.Discard, resp.Body)
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

// A hostile or broken sender floods the writer binary with the largest requests it can make:
// bodies just under the limit whose one item names an 8 MiB "cluster" (a refusal must not be
// remembered at its own size), 10,000 refused items per event, bodies over the limit, and
// near 1 MiB of headers. Its resident memory stays well under the pod's 512 MiB limit, and it
// still writes a valid event afterwards.
func TestFloodOfMaximalRequestsStaysUnderThePodLimit(t *testing.T) {
	hub, fn := startOnHub(t)
	pid := fn.PID()
	const podLimit, headroom = 512 << 20, 128 << 20

	hugeName := func() []byte {
		prefix := []byte(`{"resource":"flood","items":[{"scores":[{"name":"a","value":1}],"cluster":"`)
		suffix := []byte(`"}]}`)
		b := make([]byte, 0, function.MaxBodyBytes)
		b = append(b, prefix...)
		b = append(b, bytes.Repeat([]byte("x"), function.MaxBodyBytes-len(prefix)-len(suffix)-64)...)
		return append(b, suffix...)
	}()
	manyRefused := func() []byte {
		items := make([]contract.ClusterScores, contract.MaxItems)
		for i := range items {
			items[i] = contract.ClusterScores{Cluster: fmt.Sprintf("%s%05d", strings.Repeat("u", 58), i), Scores: []contract.Score{{Name: strings.Repeat("n", 200), Value: 1}}}
		}
		b, _ := json.Marshal(contract.ScoreUpdated{Resource: "flood", Items: items})
		return b
	}()
	tooBig := make([]byte, function.MaxBodyBytes+1)
	bigHeader := map[string]string{"Ce-Padding": strings.Repeat("p", 900<<10)}

	type job struct {
		body    []byte
		headers map[string]string
	}
	var jobs []job
	for i := 0; i < 60; i++ {
		jobs = append(jobs, job{body: hugeName})
		if i%3 == 0 {
			jobs = append(jobs, job{body: manyRefused})
		}
		if i%6 == 0 {
			jobs = append(jobs, job{body: tooBig}, job{body: []byte(`{}`), headers: bigHeader})
		}
	}
	var (
		peak   atomic.Int64
		stop   = make(chan struct{})
		probed sync.WaitGroup
	)
	probed.Add(1)
	go func() {
		defer probed.Done()
		for {
			if rss := vm(t, pid, "VmRSS"); rss > peak.Load() {
				peak.Store(rss)
			}
			select {
			case <-stop:
				return
			case <-time.After(20 * time.Millisecond):
			}
		}
	}()
	start := time.Now()
	statuses := map[int]int{}
	var mu sync.Mutex
	var wg sync.WaitGroup
	next := atomic.Int64{}
	client := &http.Client{Timeout: 2 * time.Minute}
	for w := 0; w < 8; w++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1)) - 1
				if i >= len(jobs) || time.Since(start) > 3*time.Minute {
					return
				}
				status, err := rawPost(client, fn.URL, fmt.Sprintf("flood-%d", i), jobs[i].body, jobs[i].headers)
				mu.Lock()
				if err != nil {
					statuses[-1]++
				} else {
					statuses[status]++
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	close(stop)
	probed.Wait()
	hwm := vm(t, pid, "VmHWM")
	t.Logf("%d requests in %s, statuses %v; peak VmRSS %d MiB, VmHWM %d MiB", len(jobs), time.Since(start).Round(time.Millisecond), statuses, peak.Load()>>20, hwm>>20)
	if hwm > podLimit-headroom {
		t.Errorf("VmHWM %d MiB, want under %d MiB (the pod's 512 MiB less %d MiB headroom)", hwm>>20, (podLimit-headroom)>>20, headroom>>20)
	}
	if statuses[http.StatusRequestEntityTooLarge] < 10 || statuses[http.StatusRequestHeaderFieldsTooLarge] < 10 {
		t.Errorf("statuses %v: want the over-large bodies answered 413 and the headers 431", statuses)
	}

	// Still serving.
	e := cloudevents.NewEvent()
	e.SetID("after-flood")
	e.SetSource("test")
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: "after-flood", Items: []contract.ClusterScores{functest.ClusterScores("cluster1", "a", 5)}})
	status, reply := functest.Send(t, fn.URL, e)
	if status != http.StatusOK || reply == nil || reply.Type() != contract.TypeWriteDone {
		t.Fatalf("after the flood: status %d reply %v", status, reply)
	}
	obj, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("cluster1").Get(context.Background(), "after-flood", metav1.GetOptions{})
	if err != nil || len(obj.Status.Scores) != 1 || obj.Status.Scores[0].Value != 5 {
		t.Errorf("after the flood the score is not on the hub: %v %+v", err, obj)
	}
}

// A refusal says why where the user looks: the writer's log has the reason and the message, per
// refused item and per refused event.
func TestRefusalsAreLoggedWithReasonAndMessage(t *testing.T) {
	_, fn := startOnHub(t)
	send := func(id string, data string) int {
		status, err := rawPost(http.DefaultClient, fn.URL, id, []byte(data), map[string]string{"Ce-Source": "test/logs"})
		if err != nil {
			t.Fatal(err)
		}
		return status
	}
	if s := send("partly", `{"resource":"logs","items":[{"cluster":"cluster1","scores":[{"name":"a","value":1}]},{"cluster":"nowhere","scores":[{"name":"a","value":1}]},{"cluster":"cluster1x","scores":[{"name":"a","value":500}]}]}`); s != http.StatusOK {
		t.Fatalf("partly refused: status %d", s)
	}
	if s := send("malformed", `{"resource":"logs","itemz":[]}`); s != http.StatusBadRequest {
		t.Fatalf("malformed: status %d", s)
	}
	if s := send("all-refused", `{"resource":"logs","items":[{"cluster":"gone","scores":[{"name":"a","value":1}]}]}`); s != http.StatusUnprocessableEntity {
		t.Fatalf("all refused: status %d", s)
	}
	want := []map[string]string{
		{"id": "partly", "cluster": "nowhere", "reason": "UnknownCluster", "message": "no ManagedCluster named"},
		{"id": "partly", "cluster": "cluster1x", "reason": "OutOfRange", "message": "500"},
		{"id": "malformed", "reason": "InvalidData", "message": "itemz"},
		{"id": "all-refused", "cluster": "gone", "reason": "UnknownCluster", "message": "no ManagedCluster named"},
	}
	deadline := time.Now().Add(10 * time.Second)
	for _, w := range want {
		for !logged(fn.Output(), w) {
			if time.Now().After(deadline) {
				t.Errorf("no log line with %v in:\n%s", w, fn.Output())
				break
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
}

// logged reports whether a JSON log line has every attribute of want (message: contained).
func logged(out string, want map[string]string) bool {
	sc := bufio.NewScanner(strings.NewReader(out))
	sc.Buffer(make([]byte, 1<<20), 1<<24)
	for sc.Scan() {
		var line map[string]any
		if json.Unmarshal(sc.Bytes(), &line) != nil {
			continue
		}
		ok := true
		for k, v := range want {
			got := fmt.Sprint(line[k])
			if k == "message" && !strings.Contains(got, v) || k != "message" && got != v {
				ok = false
				break
			}
		}
		if ok {
			return true
		}
	}
	return false
}
