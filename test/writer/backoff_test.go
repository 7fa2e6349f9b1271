package writer

import (
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// While the hub answers 429, the writer backs off per object (50ms doubling to 2s). Updates that
// keep arriving for that object must wait for the next try, not each cause a request: the requests
// follow the backoff schedule, not the arrival rate. Once the hub answers again, the newest
// update is on it.
func TestBackoffHoldsAgainstNewArrivals(t *testing.T) {
	t.Parallel()
	proxy := newThrottlingHub(t)
	s := startWriter(t, serverOpts{hub: proxy.config(), writer: scorewriter.Options{RetryFor: 10 * time.Second}})
	start := time.Now().Add(-time.Minute).Truncate(time.Second)
	send := func(i int) (int, *contract.WriteResult) {
		e := scoreEvent(t, start.Add(time.Duration(i)*time.Millisecond), contract.ScoreUpdated{Resource: "throttled", Items: []contract.ClusterScores{item("c1", score("a", float64(i%90)))}})
		status, reply := s.send(t, e)
		return status, result(t, reply)
	}
	if status, r := send(0); status != http.StatusOK || r.Failed() {
		t.Fatalf("first write: %d %+v", status, r)
	}

	const throttle, every, arrivals = 2 * time.Second, 20 * time.Millisecond, 100
	proxy.throttleFor(throttle)
	before := proxy.requests.Load()
	var wg sync.WaitGroup
	var mu sync.Mutex
	var failures []contract.ItemResult
	for i := 1; i <= arrivals; i++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, r := send(i)
			if status != http.StatusOK || r.Failed() {
				mu.Lock()
				failures = append(failures, r.Items[0])
				mu.Unlock()
			}
		}()
		time.Sleep(every)
	}
	wg.Wait()
	throttled := proxy.throttled.Load()
	total := proxy.requests.Load() - before
	t.Logf("%d arrivals every %s during a %s 429 period: %d requests answered 429, %d AddOnPlacementScore requests in all", arrivals, every, throttle, throttled, total)
	// Tries at 0, 50ms, 150ms, 350ms, 750ms, 1.55s (and 3.15s, after the throttle): a handful,
	// whatever the arrivals.
	if throttled > 12 {
		t.Errorf("%d requests answered 429 for %d arrivals: the backoff does not hold", throttled, arrivals)
	}
	if len(failures) > 0 {
		t.Errorf("%d updates failed, first %+v", len(failures), failures[0])
	}
	if got := scoresOf(get(t, "c1", "throttled")); got["a"] != arrivals%90 {
		t.Errorf("a = %d, want the newest value %d", got["a"], arrivals%90)
	}
}

// An update whose validUntil passes while the hub is throttled and the writer retries would be
// dropped in the very write that carries it; it fails, Stale, not Written: nothing of it landed.
func TestUpdateExpiringDuringRetriesIsStaleNotWritten(t *testing.T) {
	t.Parallel()
	proxy := newThrottlingHub(t)
	s := startWriter(t, serverOpts{hub: proxy.config(), writer: scorewriter.Options{RetryFor: 10 * time.Second}})
	now := time.Now()
	if status, reply := s.send(t, scoreEvent(t, now, contract.ScoreUpdated{Resource: "lapsing", Items: []contract.ClusterScores{item("c1", score("long", 1))}})); status != http.StatusOK || result(t, reply).Failed() {
		t.Fatalf("first write: %d %+v", status, result(t, reply))
	}

	proxy.throttleFor(2 * time.Second)
	soon := time.Now().Add(time.Second)
	status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "lapsing", ValidUntil: &soon, Items: []contract.ClusterScores{item("c1", score("short", 2))}}))
	r := result(t, reply)
	if status != http.StatusUnprocessableEntity || r.Items[0].Outcome != contract.OutcomeFailed || r.Items[0].Reason != contract.ReasonStale || r.Items[0].Retriable {
		t.Errorf("update whose validUntil passed during retries: %d %+v, want 422 Failed/Stale, not retriable", status, r.Items[0])
	}
	if got := scoresOf(get(t, "c1", "lapsing")); got["short"] != 0 || got["long"] != 1 {
		t.Errorf("scores on the hub = %v, want only long=1", got)
	}
}
