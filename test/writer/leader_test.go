package writer

import (
	"net/http"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Two replicas under leader election, as deployed: both answer events, only the one holding the
// Lease removes expired scores (the other writes nothing of its own accord), and when it stops
// the other takes over. Not parallel: every writer of the parallel tests expires every object on
// the hub, which would hide whose work it was.
func TestOneReplicaAtATimeDoesTheWritersOwnWork(t *testing.T) {
	const lease = "writer-leader-test"
	a, b := startWriter(t, serverOpts{lease: lease}), startWriter(t, serverOpts{lease: lease})
	leading := func(s *server) bool { return s.sum(t, "scoreflow_writer_leading", nil) == 1 }
	var first, second *server
	for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if leading(a) != leading(b) {
			first, second = a, b
			if leading(b) {
				first, second = b, a
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after 20s: a leading %v, b leading %v; want exactly one", leading(a), leading(b))
		}
	}
	// removed sends a score valid for a second through s, and reports which replica's writes of
	// its own removed it once it expired.
	removed := func(s *server, resource string) (byFirst, bySecond float64) {
		t.Helper()
		soon := time.Now().Add(time.Second)
		later := time.Now().Add(time.Hour)
		for _, su := range []contract.ScoreUpdated{
			{Resource: resource, ValidUntil: &soon, Items: []contract.ClusterScores{item("c4", score("short", 1))}},
			{Resource: resource, ValidUntil: &later, Items: []contract.ClusterScores{item("c4", score("long", 2))}},
		} {
			if status, reply := s.send(t, scoreEvent(t, time.Now(), su)); status != http.StatusOK || result(t, reply).Failed() {
				t.Fatalf("%d %+v", status, result(t, reply))
			}
		}
		f, g := first.apiRequests(t, "update_status"), second.apiRequests(t, "update_status")
		for deadline := soon.Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			if _, ok := scoresOf(get(t, "c4", resource))["short"]; !ok {
				time.Sleep(200 * time.Millisecond) // the write's count
				return first.apiRequests(t, "update_status") - f, second.apiRequests(t, "update_status") - g
			}
			if time.Now().After(deadline) {
				t.Fatalf("5s after its validUntil the score is still on the hub")
			}
		}
	}
	// An event through each replica: the leader removes both scores.
	for _, s := range []*server{second, first} {
		if byFirst, bySecond := removed(s, "leader-"+map[*server]string{a: "a", b: "b"}[s]); byFirst != 1 || bySecond != 0 {
			t.Errorf("expiry rewrites: %v by the leader, %v by the other replica; want 1 and 0", byFirst, bySecond)
		}
	}
	if leading(second) {
		t.Error("both replicas lead")
	}
	first.stop()
	for deadline := time.Now().Add(10 * time.Second); !leading(second); time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("10s after the leader stopped the other replica does not lead")
		}
	}
	first = second
	if byNew, _ := removed(second, "leader-after"); byNew != 1 {
		t.Errorf("after the leader stopped: %v expiry rewrites by the replica that took over, want 1", byNew)
	}
}
