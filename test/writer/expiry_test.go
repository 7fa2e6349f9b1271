package writer

import (
	"slices"
	"testing"
	"time"

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
