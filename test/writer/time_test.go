package writer

import (
	"context"
	"net/http"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/clock"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// processCPU is the CPU time this test process has used.
func processCPU(t *testing.T) time.Duration {
	t.Helper()
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		t.Fatal(err)
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// Every time an event carries is bounded: a validUntil more than contract.MaxValidity after the
// event's time, or the zero time, is refused (400) and changes nothing. An object that already
// holds a line valid until year 9999 (written by another writer, or by hand) costs the writer
// nothing while it waits: its CPU over three seconds stays near zero (that time, turned into a
// time.Duration naively, overflows into a negative wait that requeues at once, forever).
func TestFarFutureValidUntilLeavesTheWriterIdle(t *testing.T) {
	// Not parallel: the CPU of this process is measured.
	s := startWriter(t, serverOpts{})
	far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	observed := time.Now().Truncate(time.Second)
	for i, tc := range []struct {
		name string
		vu   func(at time.Time) time.Time
	}{
		{"year 9999", func(time.Time) time.Time { return far }},
		{"zero time", func(time.Time) time.Time { return time.Time{} }},
		{"a week and a second after the event", func(at time.Time) time.Time { return at.Add(contract.MaxValidity + time.Second) }},
	} {
		// Each observed a second after the one before: none can pass for a repetition of another.
		at := observed.Add(time.Duration(i) * time.Second)
		vu := tc.vu(at)
		status, reply := s.send(t, scoreEvent(t, at, contract.ScoreUpdated{Resource: "far-future", ValidUntil: &vu, Items: []contract.ClusterScores{item("c2", score("a", 1))}}))
		if r := result(t, reply); status != http.StatusBadRequest || r.Reason != contract.ReasonInvalidData || !strings.Contains(r.Message, "validUntil") {
			t.Errorf("%s: %d %+v, want 400 InvalidData naming validUntil", tc.name, status, r)
		}
	}
	vu := observed.Add(contract.MaxValidity)
	if status, reply := s.send(t, scoreEvent(t, observed, contract.ScoreUpdated{Resource: "week", ValidUntil: &vu, Items: []contract.ClusterScores{item("c2", score("a", 1))}})); status != http.StatusOK || result(t, reply).Failed() {
		t.Errorf("validUntil a week after the event's time: %d %+v, want written", status, result(t, reply))
	}
	if get(t, "c2", "far-future") != nil {
		t.Error("a refused validUntil was written")
	}

	// An object with a far-future line in the ledger earlier writers wrote.
	ctx := context.Background()
	api := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c2")
	obj, err := api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "far-future-line", Namespace: "c2"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = api.Delete(ctx, "far-future-line", metav1.DeleteOptions{}) })
	farTime := metav1.NewTime(far)
	obj.Status = clusterv1alpha1.AddOnPlacementScoreStatus{ValidUntil: &farTime, Scores: []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "a", Value: 1}}}
	meta.SetStatusCondition(&obj.Status.Conditions, metav1.Condition{Type: scorewriter.ConditionObservations, Status: metav1.ConditionTrue, Reason: "ObservationTimes",
		Message: `{"a":["` + observed.Format(time.RFC3339Nano) + `","` + far.Format(time.RFC3339Nano) + `"]}`})
	if _, err := api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The writer plans it: through its informer, and for an update of another of its scores, one
	// that never expires, so that the year-9999 line stays the object's first expiry.
	if status, reply := s.send(t, scoreEvent(t, observed, contract.ScoreUpdated{Resource: "far-future-line", NeverExpires: true, Items: []contract.ClusterScores{item("c2", score("b", 2))}})); status != http.StatusOK || result(t, reply).Failed() {
		t.Fatalf("update of the far-future object: %d %+v", status, result(t, reply))
	}
	if got := scoresOf(get(t, "c2", "far-future-line")); got["a"] != 1 || got["b"] != 2 {
		t.Errorf("scores %v, want a=1 (valid until 9999) and b=2", got)
	}

	time.Sleep(500 * time.Millisecond) // the writes' aftermath (informer events, rests)
	start, cpu := time.Now(), processCPU(t)
	time.Sleep(3 * time.Second)
	used, wall := processCPU(t)-cpu, time.Since(start)
	t.Logf("CPU of this process over %s: %s", wall.Round(time.Millisecond), used)
	if used > wall/10 {
		t.Errorf("the process used %s of CPU in %s with nothing to write: the writer is busy", used, wall.Round(time.Millisecond))
	}
}

// A sender whose clock is behind by the TTL hears that nothing was written: its items fail,
// Stale, in a write.failed (422), saying so, instead of a write.done of skipped items.
func TestClockBehindByTheTTLIsTold(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{ttl: time.Minute})
	status, reply := s.send(t, scoreEvent(t, time.Now().Add(-time.Minute-10*time.Second), contract.ScoreUpdated{Resource: "clock-behind", Items: []contract.ClusterScores{item("c5", score("a", 1))}}))
	r := result(t, reply)
	if status != http.StatusUnprocessableEntity || reply.Type() != contract.TypeWriteFailed || r.Items[0].Outcome != contract.OutcomeFailed ||
		r.Items[0].Reason != contract.ReasonStale || !strings.Contains(r.Items[0].Message, "behind") {
		t.Errorf("clock behind by the TTL: %d %s %+v, want 422 write.failed, Failed/Stale saying the clock is behind", status, reply.Type(), r.Items)
	}
	if get(t, "c5", "clock-behind") != nil {
		t.Error("something was written")
	}
}

// Expiry survives a restart: a writer started after another wrote an object (a new pod, another
// replica) learns the object's expiry from the hub and removes the expired score when its
// validUntil passes, without an event for it.
func TestExpiryIsKeptAcrossARestart(t *testing.T) {
	// Not parallel: every writer of the parallel tests removes every expired score on the hub,
	// which would hide whether this one did.
	first := startWriter(t, serverOpts{})
	soon := time.Now().Add(3 * time.Second)
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	for _, su := range []contract.ScoreUpdated{
		{Resource: "restart-expiry", ValidUntil: &soon, Items: []contract.ClusterScores{item("c5", score("short", 1))}},
		{Resource: "restart-expiry", ValidUntil: &later, Items: []contract.ClusterScores{item("c5", score("long", 2))}},
	} {
		if status, reply := first.send(t, scoreEvent(t, time.Now(), su)); status != http.StatusOK || result(t, reply).Failed() {
			t.Fatalf("%d %+v", status, result(t, reply))
		}
	}
	first.stop()
	startWriter(t, serverOpts{})
	for deadline := soon.Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		obj := get(t, "c5", "restart-expiry")
		if _, ok := scoresOf(obj)["short"]; !ok {
			if time.Now().Before(soon) {
				t.Fatalf("short removed before its validUntil")
			}
			if scoresOf(obj)["long"] != 2 || !obj.Status.ValidUntil.Time.Equal(later) {
				t.Errorf("after the expiry: %v until %v, want long=2 until %v", scoresOf(obj), obj.Status.ValidUntil, later)
			}
			t.Logf("the restarted writer removed the expired score %s after its validUntil", time.Since(soon).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("5s after its validUntil the expired score is still on the hub: the restarted writer did not know of it")
		}
	}
}

// A deleted ManagedCluster's objects leave the writer's metrics: its score series and its place
// in the stale-score aggregate, so that neither a stale alert nor --max-score-series is held by
// clusters that are gone. The scores never expire: no write would ever release them.
func TestDeletedClusterReleasesItsSeries(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if err := hub.AddCluster(ctx, "leaving", nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.AcceptCluster(ctx, "leaving"); err != nil {
		t.Fatal(err)
	}
	s := startWriter(t, serverOpts{})
	if status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "leaving", NeverExpires: true, Items: []contract.ClusterScores{item("leaving", score("a", 1))}})); status != http.StatusOK || result(t, reply).Failed() {
		t.Fatalf("%d %+v", status, result(t, reply))
	}
	objects := func() float64 {
		return s.sum(t, "scoreflow_score_updated_objects", func(l map[string]string) bool { return l["resource"] == "leaving" })
	}
	if got := s.scoreSeries(t, "leaving", "leaving"); len(got) != 1 || objects() != 1 {
		t.Fatalf("series %v, %v objects in the aggregate, want a and 1", got, objects())
	}
	if err := hub.Cluster.ClusterV1().ManagedClusters().Delete(ctx, "leaving", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); len(s.scoreSeries(t, "leaving", "leaving")) > 0 || objects() > 0; time.Sleep(50 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("10s after the ManagedCluster's deletion: series %v, %v objects in the aggregate", s.scoreSeries(t, "leaving", "leaving"), objects())
		}
	}
}

// steppedClock is the real clock whose wall time a test steps, as an NTP correction or an
// administrator steps a node's: its timers keep running on the real clock, as Go's timers keep
// running on the monotonic clock whatever the wall clock does.
type steppedClock struct {
	clock.RealClock
	offset atomic.Int64 // nanoseconds added to the wall time
}

func (c *steppedClock) Now() time.Time                  { return time.Now().Add(time.Duration(c.offset.Load())) }
func (c *steppedClock) Since(t time.Time) time.Duration { return c.Now().Sub(t) }
func (c *steppedClock) step(d time.Duration)            { c.offset.Add(int64(d)) }

// The wall clock steps forward past a score's validUntil: the score is removed within a bounded
// delay of the step, not when the time that was left before the step has run out. Not parallel:
// the stepped writer expires every object on the hub by its clock.
func TestExpiryFollowsAWallClockStep(t *testing.T) {
	clk := &steppedClock{}
	s := startWriter(t, serverOpts{writer: scorewriter.Options{Clock: clk}})
	validUntil := time.Now().Add(40 * time.Second)
	later := time.Now().Add(time.Hour)
	for _, su := range []contract.ScoreUpdated{
		{Resource: "clock-step", ValidUntil: &validUntil, Items: []contract.ClusterScores{item("c3", score("short", 1))}},
		{Resource: "clock-step", ValidUntil: &later, Items: []contract.ClusterScores{item("c3", score("long", 2))}},
	} {
		if status, reply := s.send(t, scoreEvent(t, time.Now(), su)); status != http.StatusOK || result(t, reply).Failed() {
			t.Fatalf("%d %+v", status, result(t, reply))
		}
	}
	clk.step(45 * time.Second)
	stepped := time.Now()
	for deadline := stepped.Add(5 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		got := scoresOf(get(t, "c3", "clock-step"))
		if _, ok := got["short"]; !ok {
			if got["long"] != 2 {
				t.Errorf("after the expiry: %v, want long=2", got)
			}
			t.Logf("removed %s after the clock stepped past its validUntil", time.Since(stepped).Round(time.Millisecond))
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s after the wall clock stepped 5s past its validUntil the score is still on the hub: %v", time.Since(stepped).Round(time.Millisecond), got)
		}
	}
}
