package writer

import (
	"context"
	"net/http"
	"slices"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// A score whose validUntil passes is removed from the hub at that time, without another event
// for its object: OCM's Placements re-evaluate only when an AddOnPlacementScore changes, so an
// expiry the writer left on the object would never move a decision. Its metric series goes too.
func TestExpiredScoreIsRemovedWithoutAnotherEvent(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	soon := time.Now().Add(1500 * time.Millisecond)
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	_, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "lapse", ValidUntil: &soon, Items: []contract.ClusterScores{item("c3", score("short", 9))}}))
	if result(t, reply).Failed() {
		t.Fatal("short write failed")
	}
	_, reply = s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "lapse", ValidUntil: &later, Items: []contract.ClusterScores{item("c3", score("long", 8))}}))
	if result(t, reply).Failed() {
		t.Fatal("long write failed")
	}
	if got := s.scoreSeries(t, "c3", "lapse"); !slices.Equal(got, []string{"long", "short"}) {
		t.Fatalf("scoreflow_score series = %v, want long and short", got)
	}

	deadline := soon.Add(3 * time.Second)
	for {
		obj := get(t, "c3", "lapse")
		got := scoresOf(obj)
		if _, ok := got["short"]; !ok {
			if got["long"] != 8 || obj.Status.ValidUntil == nil || !obj.Status.ValidUntil.Time.Equal(later) {
				t.Errorf("after the expiry: scores %v validUntil %v, want long=8 until %v", got, obj.Status.ValidUntil, later)
			}
			t.Logf("expired score removed %s after its validUntil", time.Since(soon).Round(time.Millisecond))
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after its validUntil the expired score is still on the hub: %v", time.Since(soon).Round(time.Millisecond), got)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// Whichever writer removed it (every writer's informer schedules the expiry), this one's
	// series follow the hub once its informer has the news.
	for deadline := time.Now().Add(5 * time.Second); ; time.Sleep(20 * time.Millisecond) {
		got := s.scoreSeries(t, "c3", "lapse")
		if slices.Equal(got, []string{"long"}) {
			break
		}
		if time.Now().After(deadline) {
			t.Errorf("scoreflow_score series = %v, want only long", got)
			break
		}
	}
}

// scoreSeries lists the score names of the scoreflow_score series for one object.
func (s *server) scoreSeries(t *testing.T, cluster, resource string) []string {
	t.Helper()
	mfs, err := s.fn.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, mf := range mfs {
		if mf.GetName() != "scoreflow_score" {
			continue
		}
		for _, m := range mf.GetMetric() {
			l := labelMap(m)
			if l["cluster"] == cluster && l["resource"] == resource {
				names = append(names, l["score"])
			}
		}
	}
	slices.Sort(names)
	return names
}

// A restarted writer whose ManagedCluster list comes after its AddOnPlacementScore list (a hub
// with many clusters and few scores) still removes each expired score when its validUntil passes:
// it decides an object's expiry only once it knows the object's cluster. The writer binary, as
// deployed, behind a proxy that holds the ManagedCluster requests.
func TestExpiryWaitsForTheClusterList(t *testing.T) {
	// Not parallel: every writer of the parallel tests removes every expired score on the hub,
	// which would hide whether this one did.
	bin := sharedWriterBinary(t)
	first := startWriter(t, serverOpts{})
	soon := time.Now().Add(10 * time.Second)
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, su := range []contract.ScoreUpdated{
		{Resource: "slow-clusters", ValidUntil: &soon, Items: []contract.ClusterScores{item("c1", score("short", 1))}},
		{Resource: "slow-clusters", ValidUntil: &later, Items: []contract.ClusterScores{item("c1", score("long", 2))}},
	} {
		if status, reply := first.send(t, scoreEvent(t, time.Now(), su)); status != http.StatusOK || result(t, reply).Failed() {
			t.Fatalf("%d %+v", status, result(t, reply))
		}
	}
	first.stop()

	p := newFaultyHub(t)
	p.clusterDelay.Store(int64(3 * time.Second))
	startWriterBinary(t, bin, "KUBECONFIG="+p.kubeconfig(t))
	for deadline := soon.Add(4 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		obj := get(t, "c1", "slow-clusters")
		if _, ok := scoresOf(obj)["short"]; !ok {
			if time.Now().Before(soon) {
				t.Fatal("short removed before its validUntil")
			}
			if scoresOf(obj)["long"] != 2 {
				t.Errorf("after the expiry: %v, want long=2", scoresOf(obj))
			}
			t.Logf("the restarted writer removed the expired score %s after its validUntil", time.Since(soon).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after its validUntil the expired score is still on the hub", time.Since(soon).Round(time.Millisecond))
		}
	}
}

// A score that expires while its cluster is not accepted stays (the writer writes only for
// accepted clusters) and is removed as soon as the cluster is accepted again: after
// spec.hubAcceptsClient went false and back to true, and after the ManagedCluster was deleted and
// registered again with its namespace kept.
func TestExpiryFallingWhileTheClusterIsNotAcceptedIsDoneOnceItIs(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mcs := hub.Cluster.ClusterV1().ManagedClusters()
	setAccepts := func(t *testing.T, name string, accepts bool) {
		t.Helper()
		mc, err := mcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		mc.Spec.HubAcceptsClient = accepts
		if _, err := mcs.Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for _, tc := range []struct {
		cluster  string
		away     func(t *testing.T, name string) // the cluster stops being accepted
		accepted func(t *testing.T, name string) // and is accepted again
	}{
		{"again-flag", func(t *testing.T, name string) { setAccepts(t, name, false) }, func(t *testing.T, name string) { setAccepts(t, name, true) }},
		{"again-registered", func(t *testing.T, name string) {
			if err := mcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, func(t *testing.T, name string) {
			if err := hub.AddCluster(ctx, name, nil); err != nil {
				t.Fatal(err)
			}
			if err := hub.AcceptCluster(ctx, name); err != nil {
				t.Fatal(err)
			}
		}},
	} {
		t.Run(tc.cluster, func(t *testing.T) {
			t.Parallel()
			if err := hub.AddCluster(ctx, tc.cluster, nil); err != nil {
				t.Fatal(err)
			}
			if err := hub.AcceptCluster(ctx, tc.cluster); err != nil {
				t.Fatal(err)
			}
			s := startWriter(t, serverOpts{})
			soon := time.Now().Add(2 * time.Second)
			later := time.Now().Add(time.Hour)
			for _, su := range []contract.ScoreUpdated{
				{Resource: "again", ValidUntil: &soon, Items: []contract.ClusterScores{item(tc.cluster, score("short", 1))}},
				{Resource: "again", ValidUntil: &later, Items: []contract.ClusterScores{item(tc.cluster, score("long", 2))}},
			} {
				if status, reply := s.send(t, scoreEvent(t, time.Now(), su)); status != http.StatusOK || result(t, reply).Failed() {
					t.Fatalf("%d %+v", status, result(t, reply))
				}
			}
			tc.away(t, tc.cluster)
			time.Sleep(time.Until(soon) + 2*time.Second)
			if _, ok := scoresOf(get(t, tc.cluster, "again"))["short"]; !ok {
				t.Fatal("the expired score was removed while its cluster was not accepted")
			}
			tc.accepted(t, tc.cluster)
			accepted := time.Now()
			for deadline := accepted.Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
				got := scoresOf(get(t, tc.cluster, "again"))
				if _, ok := got["short"]; !ok {
					if got["long"] != 2 {
						t.Errorf("after the expiry: %v, want long=2", got)
					}
					t.Logf("removed %s after the cluster was accepted again", time.Since(accepted).Round(time.Millisecond))
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("%s after the cluster was accepted again the expired score is still on the hub: %v", time.Since(accepted).Round(time.Millisecond), got)
				}
			}
		})
	}
}

// A writer whose watch went silent while it and another replica wrote an object, and then expired
// (410 Gone), lists the objects again: the version it lists is neither the one it wrote nor the
// one after, and the other replica's score in it, which no one else will remove (that replica has
// stopped), leaves when its validUntil passes.
func TestExpiryIsScheduledFromARelist(t *testing.T) {
	// Not parallel: every writer of the parallel tests removes every expired score on the hub,
	// which would hide whether this one did.
	p := newFaultyHub(t)
	a := startWriter(t, serverOpts{hub: p.config()})
	b := startWriter(t, serverOpts{})
	send := func(s *server, su contract.ScoreUpdated) {
		t.Helper()
		if status, reply := s.send(t, scoreEvent(t, time.Now(), su)); status != http.StatusOK || result(t, reply).Failed() {
			t.Fatalf("%d %+v", status, result(t, reply))
		}
	}
	later := time.Now().Add(time.Hour)
	send(a, contract.ScoreUpdated{Resource: "relist", ValidUntil: &later, Items: []contract.ClusterScores{item("c2", score("long", 1))}})
	time.Sleep(time.Second) // a's informer shows its write
	p.freeze()
	send(a, contract.ScoreUpdated{Resource: "relist", ValidUntil: &later, Items: []contract.ClusterScores{item("c2", score("long", 2))}})
	soon := time.Now().Add(3 * time.Second)
	send(b, contract.ScoreUpdated{Resource: "relist", ValidUntil: &soon, Items: []contract.ClusterScores{item("c2", score("short", 3))}})
	b.stop()
	p.expire()
	for deadline := soon.Add(4 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := scoresOf(get(t, "c2", "relist"))
		if _, ok := got["short"]; !ok {
			if got["long"] != 2 {
				t.Errorf("after the expiry: %v, want long=2", got)
			}
			t.Logf("removed %s after its validUntil", time.Since(soon).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after its validUntil the other replica's expired score is still on the hub: %v", time.Since(soon).Round(time.Millisecond), got)
		}
	}
}
