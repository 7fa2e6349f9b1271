package writer

import (
	"context"
	"fmt"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// A fleet's refresh that repeats the values on the hub is answered Unchanged without a read per
// object: one list of the resource's objects confirms them all. What the reads guaranteed holds:
// the writer's copies are those of an informer that has heard nothing for a while (its watch
// frozen), and meanwhile another replica wrote a newer value to one object and someone deleted
// another; the refresh, newer than both, is written to those two and to no other.
func TestUnchangedFleetRefreshIsConfirmedByAList(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	const n = 150
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("confirm-%03d", i)
	}
	parallel(t, 16, n, func(i int) error {
		if err := hub.AddCluster(ctx, names[i], nil); err != nil {
			return err
		}
		return hub.AcceptCluster(ctx, names[i])
	})
	p := newFaultyHub(t)
	a := startWriter(t, serverOpts{hub: p.config()})
	refresh := func(s *server, observed time.Time, value func(i int) float64) *contract.WriteResult {
		t.Helper()
		su := contract.ScoreUpdated{Resource: "confirmed", Items: make([]contract.ClusterScores, n)}
		for i, c := range names {
			su.Items[i] = item(c, score("a", value(i)))
		}
		status, reply := s.send(t, scoreEvent(t, observed, su))
		r := result(t, reply)
		if status != http.StatusOK {
			t.Fatalf("refresh: %d %+v", status, r)
		}
		return r
	}
	outcomes := func(r *contract.WriteResult) map[string]int {
		out := map[string]int{}
		for _, it := range r.Items {
			out[string(it.Outcome)+"/"+string(it.Reason)]++
		}
		return out
	}
	base := time.Now().Add(-time.Minute)
	same := func(int) float64 { return 7 }
	if got := outcomes(refresh(a, base, same)); got["Written/"] != n {
		t.Fatalf("first refresh: %v, want %d written", got, n)
	}
	// An object the writer's informer does not show yet is read (a loaded machine delays the
	// informer): refresh until it shows them all, which the old reads per object never reach.
	var gets, listed float64
	for deadline, k := time.Now().Add(20*time.Second), 1; ; k++ {
		reads, lists := a.apiRequests(t, "get"), a.apiRequests(t, "list")
		if got := outcomes(refresh(a, base.Add(time.Duration(k)*time.Millisecond), same)); got["Skipped/Unchanged"] != n {
			t.Errorf("unchanged refresh: %v, want %d Unchanged", got, n)
		}
		gets, listed = a.apiRequests(t, "get")-reads, a.apiRequests(t, "list")-lists
		t.Logf("unchanged refresh of %d objects: %v reads, %v list pages", n, gets, listed)
		if gets == 0 || time.Now().After(deadline) {
			break
		}
		time.Sleep(500 * time.Millisecond)
	}
	if gets != 0 || listed < 1 || listed > 2 {
		t.Errorf("unchanged refresh of %d objects: %v reads and %v list pages, want none and one list", n, gets, listed)
	}

	// The writer hears nothing from now on; another replica writes a newer value to one object,
	// and someone deletes another.
	p.freeze()
	b := startWriter(t, serverOpts{})
	raced, deleted := names[3], names[4]
	status, reply := b.send(t, scoreEvent(t, base.Add(2*time.Second), contract.ScoreUpdated{Resource: "confirmed", Items: []contract.ClusterScores{item(raced, score("a", 9))}}))
	if status != http.StatusOK || result(t, reply).Items[0].Outcome != contract.OutcomeWritten {
		t.Fatalf("the other replica's write: %d %+v", status, result(t, reply))
	}
	b.stop()
	if err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(deleted).Delete(ctx, "confirmed", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	writes := a.apiRequests(t, "update_status")
	r := refresh(a, base.Add(3*time.Second), same)
	for _, it := range r.Items {
		want := contract.OutcomeSkipped
		if it.Cluster == raced || it.Cluster == deleted {
			want = contract.OutcomeWritten
		}
		if it.Outcome != want {
			t.Errorf("%s: %s/%s, want %s", it.Cluster, it.Outcome, it.Reason, want)
		}
	}
	if w := a.apiRequests(t, "update_status") - writes; w != 2 {
		t.Errorf("%v status writes, want 2 (the raced and the deleted object)", w)
	}
	for _, c := range []string{raced, deleted} {
		if got := scoresOf(get(t, c, "confirmed")); got["a"] != 7 {
			t.Errorf("%s holds %v after the newer refresh, want a=7", c, got)
		}
	}
	p.expire()
}
