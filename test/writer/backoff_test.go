package writer

import (
	"net/http"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// An update whose validUntil passes while the hub is throttled and the writer retries would be
// dropped in the very write that carries it; it is answered Stale, not Written.
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
	if status != http.StatusOK || r.Items[0].Outcome != contract.OutcomeSkipped || r.Items[0].Reason != contract.ReasonStale {
		t.Errorf("update whose validUntil passed during retries: %d %+v, want 200 Skipped Stale", status, r.Items[0])
	}
	if got := scoresOf(get(t, "c1", "lapsing")); got["short"] != 0 || got["long"] != 1 {
		t.Errorf("scores on the hub = %v, want only long=1", got)
	}
}
