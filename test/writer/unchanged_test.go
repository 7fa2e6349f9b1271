package writer

import (
	"net/http"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Write avoidance keeps order across a restart. A refresh that repeats the value on the hub is
// answered Skipped/Unchanged with the object's resourceVersion and costs no write; an older
// observation arriving after a newer one, written or unchanged, is Stale and changes nothing, in
// the writer that saw the newer one and in a new writer started after it stopped (which knows
// only what the object holds).
func TestUnchangedRefreshesAreNotWrittenAndKeepOrderAcrossARestart(t *testing.T) {
	const cluster, resource = "c4", "unchanged-order"
	now := time.Now()
	at := func(d time.Duration) time.Time { return now.Add(d) }
	send := func(t *testing.T, s *server, observed time.Time, v float64) contract.ItemResult {
		t.Helper()
		status, reply := s.send(t, scoreEvent(t, observed, contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{item(cluster, score("x", v))}}))
		r := result(t, reply)
		if status != http.StatusOK || len(r.Items) != 1 {
			t.Fatalf("x=%v observed %s: status %d %+v", v, observed.Format(time.RFC3339Nano), status, r)
		}
		return r.Items[0]
	}
	expect := func(t *testing.T, what string, got contract.ItemResult, outcome contract.Outcome, reason string) {
		t.Helper()
		if got.Outcome != outcome || string(got.Reason) != reason {
			t.Errorf("%s: %s/%s (%s), want %s/%s", what, got.Outcome, got.Reason, got.Message, outcome, reason)
		}
	}
	onHub := func(t *testing.T, want int32) string {
		t.Helper()
		obj := get(t, cluster, resource)
		if got := scoresOf(obj)["x"]; obj == nil || got != want {
			t.Fatalf("x=%d on the hub, want %d", got, want)
		}
		return obj.ResourceVersion
	}

	t.Run("first writer", func(t *testing.T) {
		s := startWriter(t, serverOpts{})
		written := send(t, s, at(-50*time.Second), 20)
		expect(t, "first value", written, contract.OutcomeWritten, "")
		rv := onHub(t, 20)
		expect(t, "older, after it", send(t, s, at(-60*time.Second), 10), contract.OutcomeSkipped, "Stale")

		writes := s.apiRequests(t, "create", "update_status")
		same := send(t, s, at(-40*time.Second), 20)
		expect(t, "same value, newer", same, contract.OutcomeSkipped, "Unchanged")
		if same.ResourceVersion != rv {
			t.Errorf("unchanged answer names resourceVersion %q, the hub holds %q", same.ResourceVersion, rv)
		}
		if n := s.apiRequests(t, "create", "update_status") - writes; n != 0 || onHub(t, 20) != rv {
			t.Errorf("an unchanged refresh cost %v API writes (object rv %s, was %s), want none", n, onHub(t, 20), rv)
		}
		// Newer than the written observation, older than the unchanged one.
		expect(t, "older than the unchanged one", send(t, s, at(-45*time.Second), 30), contract.OutcomeSkipped, "Stale")
		if onHub(t, 20) != rv {
			t.Error("a Stale update changed the object")
		}
	})

	t.Run("second writer", func(t *testing.T) {
		s := startWriter(t, serverOpts{})
		rv := onHub(t, 20)
		expect(t, "older than the written one", send(t, s, at(-55*time.Second), 15), contract.OutcomeSkipped, "Stale")
		writes := s.apiRequests(t, "create", "update_status")
		same := send(t, s, at(-30*time.Second), 20)
		expect(t, "same value, newer", same, contract.OutcomeSkipped, "Unchanged")
		if same.ResourceVersion != rv || s.apiRequests(t, "create", "update_status") != writes {
			t.Errorf("unchanged after the restart: rv %q (hub %q), %v writes", same.ResourceVersion, rv, s.apiRequests(t, "create", "update_status")-writes)
		}
		expect(t, "older than the unchanged one", send(t, s, at(-35*time.Second), 40), contract.OutcomeSkipped, "Stale")
		onHub(t, 20)
		expect(t, "a new value", send(t, s, at(-10*time.Second), 50), contract.OutcomeWritten, "")
		expect(t, "older than the new value", send(t, s, at(-20*time.Second), 45), contract.OutcomeSkipped, "Stale")
		onHub(t, 50)
	})
}
