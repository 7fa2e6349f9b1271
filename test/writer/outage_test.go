package writer

import (
	"context"
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// The API server goes away in the middle of a stream of events and comes back. Every event the
// writer acknowledged (200 write.done) must be on the hub afterwards; the others were answered 5xx
// and would be redelivered by the broker. This test stops the shared hub's API server, so it does
// not run in parallel with the others.
func TestAPIServerRestartMidStreamLosesNoAcknowledgedWrite(t *testing.T) {
	s := startWriter(t, serverOpts{writer: scorewriter.Options{RetryFor: 20 * time.Second}})
	type acked struct {
		cluster, name string
		value         int32
	}
	var (
		mu      sync.Mutex
		done    []acked
		refused atomic.Int64
		n       atomic.Int64
		stop    = make(chan struct{})
		wg      sync.WaitGroup
	)
	for g := 0; g < 8; g++ {
		wg.Add(1)
		go func(g int) {
			defer wg.Done()
			for {
				select {
				case <-stop:
					return
				default:
				}
				i := n.Add(1)
				cluster := clusters[int(i)%3]
				name := fmt.Sprintf("e%05d", i)
				value := int32(i % 100)
				status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "outage", Items: []contract.ClusterScores{item(cluster, score(name, float64(value)))}}))
				switch {
				case status == http.StatusOK && reply != nil && reply.Type() == contract.TypeWriteDone:
					mu.Lock()
					done = append(done, acked{cluster, name, value})
					mu.Unlock()
				case status >= 500:
					refused.Add(1)
				default:
					t.Errorf("event %s: status %d reply %v", name, status, reply)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}(g)
	}

	time.Sleep(500 * time.Millisecond)
	before := s.apiRequests(t)
	if err := hub.CrashAPIServer(); err != nil {
		t.Fatal(err)
	}
	time.Sleep(2 * time.Second) // events keep arriving; their writes retry against a dead server
	if err := hub.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := hub.WaitForAPI(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	time.Sleep(1 * time.Second)
	close(stop)
	wg.Wait()

	failedCalls := s.sum(t, "scoreflow_writer_api_requests_total", func(l map[string]string) bool { return l["result"] == "error" })
	if failedCalls == 0 {
		t.Fatal("no API request failed: the outage did not hit the stream")
	}
	if s.apiRequests(t) <= before {
		t.Fatal("no writes after the outage began")
	}
	got := map[string]map[string]int32{}
	for _, c := range clusters[:3] {
		got[c] = scoresOf(get(t, c, "outage"))
	}
	missing := 0
	for _, a := range done {
		if v, ok := got[a.cluster][a.name]; !ok || v != a.value {
			missing++
			if missing < 10 {
				t.Errorf("acknowledged %s/%s=%d is not on the hub (got %d, present %v)", a.cluster, a.name, a.value, v, ok)
			}
		}
	}
	t.Logf("%d events acknowledged, %d answered 5xx, %d failed API requests during the outage, %d acknowledged writes missing", len(done), refused.Load(), int(failedCalls), missing)
	if missing > 0 {
		t.Fatalf("%d acknowledged writes lost", missing)
	}
}

// With the API server down for longer than the writer retries, the event is answered 503 with a
// retriable write.failed; redelivered after the server is back, it is written.
func TestUnavailableHubAnswers503ThenRedeliveryWrites(t *testing.T) {
	s := startWriter(t, serverOpts{writer: scorewriter.Options{RetryFor: 500 * time.Millisecond}})
	e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "redeliver", Items: []contract.ClusterScores{item("c1", score("a", 77))}})
	if err := hub.CrashAPIServer(); err != nil {
		t.Fatal(err)
	}
	status, reply := s.send(t, e)
	if err := hub.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := hub.WaitForAPI(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	r := result(t, reply)
	if status != http.StatusServiceUnavailable || reply.Type() != contract.TypeWriteFailed || !r.Items[0].Retriable || r.Items[0].Reason != contract.ReasonUnavailable {
		t.Fatalf("with the hub down: %d %+v, want 503 retriable Unavailable", status, r)
	}
	status, reply = s.send(t, e) // the broker's redelivery: same source and id
	if r := result(t, reply); status != http.StatusOK || r.Items[0].Outcome != contract.OutcomeWritten || r.Duplicate {
		t.Fatalf("redelivery: %d %+v, want 200 Written (a 503 answer is not remembered)", status, r)
	}
	if got := scoresOf(get(t, "c1", "redeliver")); got["a"] != 77 {
		t.Errorf("score a = %d, want 77", got["a"])
	}
}

// A hub that takes requests and never answers them (frozen: an API server stuck on its storage, a
// black-holed connection) costs an event no more than a hub that refuses them: each request is
// abandoned after the writer's request timeout and retried, and the event is answered 503 once
// --retry-for has passed, well before its deadline.
func TestFrozenHubIsAnsweredAfterRetryFor(t *testing.T) {
	t.Parallel()
	p := newThrottlingHub(t)
	s := startWriter(t, serverOpts{hub: p.config(), writer: scorewriter.Options{RetryFor: 2 * time.Second}, deadline: 40 * time.Second})
	p.slowBy(time.Hour)
	start := time.Now()
	status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "frozen", Items: []contract.ClusterScores{item("c1", score("a", 1))}}))
	took := time.Since(start)
	p.slowBy(0)
	if r := result(t, reply); status != http.StatusServiceUnavailable || !r.AnyRetriable() || r.Counts["Failed/Unavailable"]+len(r.Items) != 1 {
		t.Errorf("with the hub frozen: %d %+v, want 503, the item retriable, Failed/Unavailable", status, r)
	}
	limit := 2*time.Second + scorewriter.DefaultRequestTimeout + 3*time.Second
	t.Logf("answered %d after %s", status, took.Round(time.Millisecond))
	if took > limit {
		t.Errorf("answered after %s, want within retry-for, one request timeout and some (%s)", took.Round(time.Millisecond), limit)
	}
}
