package scorewriter

import (
	"context"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	"open-cluster-management.io/api/client/cluster/clientset/versioned/fake"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// These tests look at the writer's bookkeeping (what it keeps per object, when it writes of its
// own accord), which the hub cannot show; a fake clientset stands in for the hub's answers and a
// fake clock for time. Writing itself is tested against a real hub in test/writer.

// newHub is a fake hub (clientset) whose objects carry resourceVersions: each create and update
// gives a new one, and an update of another version than the stored one is a conflict, as the
// API server answers. The plain fake keeps none, which the writer's bookkeeping of versions
// (object.own, the informer's news) cannot be tested with.
func newHub(objs ...runtime.Object) *fake.Clientset {
	var rv atomic.Int64
	for _, o := range objs {
		o.(*clusterv1alpha1.AddOnPlacementScore).ResourceVersion = fmt.Sprint(rv.Add(1))
	}
	client := fake.NewSimpleClientset(objs...)
	gvr := clusterv1alpha1.SchemeGroupVersion.WithResource("addonplacementscores")
	client.PrependReactor("create", "addonplacementscores", func(a k8stesting.Action) (bool, runtime.Object, error) {
		a.(k8stesting.CreateAction).GetObject().(*clusterv1alpha1.AddOnPlacementScore).ResourceVersion = fmt.Sprint(rv.Add(1))
		return false, nil, nil
	})
	client.PrependReactor("update", "addonplacementscores", func(a k8stesting.Action) (bool, runtime.Object, error) {
		obj := a.(k8stesting.UpdateAction).GetObject().(*clusterv1alpha1.AddOnPlacementScore)
		cur, err := client.Tracker().Get(gvr, obj.Namespace, obj.Name)
		if err != nil {
			return true, nil, err
		}
		if v := cur.(*clusterv1alpha1.AddOnPlacementScore).ResourceVersion; v != obj.ResourceVersion {
			return true, nil, apierrors.NewConflict(gvr.GroupResource(), obj.Name, fmt.Errorf("version %s, not %s", v, obj.ResourceVersion))
		}
		obj.ResourceVersion = fmt.Sprint(rv.Add(1))
		return false, nil, nil
	})
	return client
}

func runWriter(t *testing.T, client *fake.Clientset, opts Options) *Writer {
	t.Helper()
	// The fake's watch does not resume from the list's resourceVersion: what is written between
	// the informer's list and its watch would be lost. Start writing once the watch is there.
	watching := make(chan struct{})
	var once sync.Once
	client.PrependWatchReactor("addonplacementscores", func(a k8stesting.Action) (bool, watch.Interface, error) {
		wi, err := client.Tracker().Watch(a.GetResource(), a.GetNamespace())
		if err != nil {
			return false, nil, err
		}
		once.Do(func() { close(watching) })
		return true, wi, nil
	})
	w, err := NewWriter(client, opts, NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	waitFor(t, "the informer to sync", func() bool { return w.Ready() == nil })
	select {
	case <-watching:
	case <-time.After(10 * time.Second):
		t.Fatal("the informer does not watch")
	}
	return w
}

// waitFor polls cond until it holds, for what other goroutines do meanwhile (not for time to pass:
// the tests that need time step a fake clock).
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(10 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("waited 10s for %s", what)
		}
	}
}

// advanceUntil steps clk by step until cond holds, letting the writer's goroutines act between steps.
func advanceUntil(t *testing.T, clk *clocktesting.FakeClock, step time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("stepped the clock for 20s (to %s) and the condition does not hold", clk.Now())
		}
		clk.Step(step)
	}
}

func write(t *testing.T, w *Writer, key Key, v float64) contract.ItemResult {
	t.Helper()
	now := w.Now()
	u := NewUpdate(key, []contract.Score{{Name: "a", Value: v}}, now, now.Add(time.Hour), "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	return resultOf(t, u)
}

// resultOf waits for u's outcome, failing the test rather than waiting for ever.
func resultOf(t *testing.T, u *Update) contract.ItemResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	r, err := u.Result(ctx)
	if err != nil {
		t.Fatalf("no outcome for %s: %v", u.Key, err)
	}
	return r
}

// fakeTimed are options for a writer on a fake clock at t0, without a coalescing window (whose
// rests would wait for the clock).
func fakeTimed() (Options, *clocktesting.FakeClock) {
	clk := clocktesting.NewFakeClock(t0)
	opts := DefaultOptions()
	opts.Clock, opts.Window = clk, 0
	return opts, clk
}

func failWith(err error) k8stesting.ReactionFunc {
	return func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err }
}

func statusUpdates(client *fake.Clientset) int {
	n := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" && a.GetSubresource() == "status" {
			n++
		}
	}
	return n
}

func hubScores(t *testing.T, client *fake.Clientset, key Key) *clusterv1alpha1.AddOnPlacementScore {
	t.Helper()
	obj, err := client.ClusterV1alpha1().AddOnPlacementScores(key.Cluster).Get(context.Background(), key.Resource, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

// An object whose writes fail for good, or whose retries run out, leaves no state behind:
// arbitrary resource names must not grow the writer's memory.
func TestObjectStateIsForgottenWhenWritesFailForGood(t *testing.T) {
	gr := schema.GroupResource{Group: "cluster.open-cluster-management.io", Resource: "addonplacementscores"}
	for name, err := range map[string]error{
		"forbidden": apierrors.NewForbidden(gr, "r", fmt.Errorf("no")),
		"throttled": apierrors.NewTooManyRequests("slow down", 0),
	} {
		t.Run(name, func(t *testing.T) {
			client := newHub()
			for _, verb := range []string{"get", "create", "update"} {
				client.PrependReactor(verb, "addonplacementscores", failWith(err))
			}
			opts := DefaultOptions()
			opts.RetryFor = 300 * time.Millisecond
			w := runWriter(t, client, opts)
			for i := range 20 {
				if r := write(t, w, Key{"c1", fmt.Sprintf("r%d", i)}, 1); r.Outcome != contract.OutcomeFailed {
					t.Fatalf("write %d: %+v, want Failed", i, r)
				}
			}
			// A throttled object is retried for its own sake until the retry finds nothing to
			// write; then nothing of it is kept.
			waitFor(t, "every object's state to go", func() bool {
				w.mu.Lock()
				defer w.mu.Unlock()
				return len(w.objects) == 0 && len(w.creating) == 0
			})
		})
	}
}

// Once its writes have landed and the informer has caught up, an object costs the writer nothing
// besides the informer's copy.
func TestObjectStateIsReleasedAfterWrites(t *testing.T) {
	client := newHub()
	w := runWriter(t, client, DefaultOptions())
	for i := range 20 {
		if r := write(t, w, Key{"c1", fmt.Sprintf("r%d", i)}, 1); r.Outcome != contract.OutcomeWritten {
			t.Fatalf("write %d: %+v", i, r)
		}
	}
	waitFor(t, "the writer's own copies to go", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for k, o := range w.objects {
			t.Logf("%s: %d pending, retry %v, rest %v, creating %v, own %+v", k, len(o.pending), o.retryAt, o.rest != nil, o.creating, o.own)
			if o.own != nil && o.own.written != nil {
				t.Logf("  written rv %q; informer %v", o.own.written.ResourceVersion, w.hub.get(k) != nil)
			}
		}
		return len(w.objects) == 0
	})
	if n := len(w.hub.informer.GetStore().ListKeys()); n != 20 {
		t.Errorf("the informer knows %d objects, want 20", n)
	}
}

// A score is removed from the hub when its validUntil passes, by the writer of its own accord,
// at that time and not before.
func TestExpiredScoreIsRemovedAtItsValidUntil(t *testing.T) {
	client := newHub()
	opts, clk := fakeTimed()
	w := runWriter(t, client, opts)
	key := Key{"c1", "r"}
	short := NewUpdate(key, []contract.Score{sc("short", 1), sc("long", 2)}, t0, t0.Add(time.Minute), "a")
	if err := w.Submit(short); err != nil {
		t.Fatal(err)
	}
	if r := resultOf(t, short); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v", r)
	}
	long := NewUpdate(key, []contract.Score{sc("long", 3)}, t0.Add(time.Second), t0.Add(time.Hour), "b")
	if err := w.Submit(long); err != nil {
		t.Fatal(err)
	}
	if r := resultOf(t, long); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v", r)
	}
	writes := statusUpdates(client)
	advanceUntil(t, clk, 10*time.Second, func() bool { return clk.Since(t0) >= 50*time.Second })
	if n := statusUpdates(client); n != writes {
		t.Fatalf("%d writes before the validUntil", n-writes)
	}
	advanceUntil(t, clk, time.Second, func() bool { _, ok := values(hubScores(t, client, key))["short"]; return !ok })
	if at := clk.Since(t0); at > time.Minute+2*time.Second {
		t.Errorf("removed at +%s, want at the validUntil (+1m)", at)
	}
	if got := values(hubScores(t, client, key)); fmt.Sprint(got) != "map[long:3]" {
		t.Errorf("scores %v, want long=3", got)
	}
}

// A writer that starts after an object was written (a restart, another replica) learns its
// expiry from the informer and removes the expired score without any update for it.
func TestExpiryIsKeptAcrossARestart(t *testing.T) {
	client := newHub()
	key := Key{"c1", "r"}
	opts, clk := fakeTimed()
	first, err := NewWriter(client, opts, NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { first.Run(ctx); close(done) }()
	u := NewUpdate(key, []contract.Score{sc("short", 1)}, t0, t0.Add(time.Minute), "a")
	if err := first.Submit(u); err != nil {
		t.Fatal(err)
	}
	if r := resultOf(t, u); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v", r)
	}
	stop()
	<-done

	runWriter(t, client, opts)
	advanceUntil(t, clk, time.Second, func() bool { return len(hubScores(t, client, key).Status.Scores) == 0 })
	if at := clk.Since(t0); at < time.Minute {
		t.Errorf("removed at +%s, before its validUntil", at)
	}
}

// Write avoidance keeps the tolerance to missed refreshes: after refreshes answered Unchanged,
// the validity they gave is written by the writer when the stored one keeps half of it, so the
// score lives as long as the last refresh said, refresh or not.
func TestSkippedRefreshesValidityIsWrittenWithoutAnotherRefresh(t *testing.T) {
	client := newHub()
	opts, clk := fakeTimed()
	w := runWriter(t, client, opts)
	key := Key{"c1", "r"}
	const ttl = 5 * time.Minute
	refresh := func(at time.Duration) contract.ItemResult {
		t.Helper()
		u := NewUpdate(key, []contract.Score{sc("a", 1)}, t0.Add(at), t0.Add(at+ttl), "src")
		if err := w.Submit(u); err != nil {
			t.Fatal(err)
		}
		return resultOf(t, u)
	}
	if r := refresh(0); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("first: %+v", r)
	}
	for _, at := range []time.Duration{time.Minute, 2 * time.Minute} {
		advanceUntil(t, clk, 10*time.Second, func() bool { return clk.Since(t0) >= at })
		if r := refresh(at); r.Reason != contract.ReasonUnchanged {
			t.Fatalf("refresh at +%s: %+v, want Unchanged", at, r)
		}
	}
	// The producer stops. Stored +5m, owed +7m: written at +3m (5 - (7 - 5)).
	advanceUntil(t, clk, 5*time.Second, func() bool {
		vu := hubScores(t, client, key).Status.ValidUntil
		return vu != nil && vu.Time.Equal(t0.Add(7*time.Minute))
	})
	if at := clk.Since(t0); at < 3*time.Minute || at > 3*time.Minute+10*time.Second {
		t.Errorf("owed validity written at +%s, want +3m", at)
	}
	// And the score lapses when the last refresh said, +7m, not at +5m.
	advanceUntil(t, clk, 5*time.Second, func() bool { return clk.Since(t0) >= 6*time.Minute+30*time.Second })
	if got := values(hubScores(t, client, key)); got["a"] != 1 {
		t.Errorf("at +6m30s the hub holds %v, want a=1 still valid", got)
	}
	advanceUntil(t, clk, 5*time.Second, func() bool { return len(hubScores(t, client, key).Status.Scores) == 0 })
}

// When the rewrite at an object's expiry fails for good (here the hub forbids it), the writer
// does not try again at once, forever: the informer's next news of the object (its resync) does.
func TestFailedExpiryRewriteIsNotRetriedInALoop(t *testing.T) {
	client := newHub()
	opts, clk := fakeTimed()
	w := runWriter(t, client, opts)
	key := Key{"c1", "r"}
	u := NewUpdate(key, []contract.Score{{Name: "a", Value: 1}}, t0, t0.Add(time.Minute), "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	if r := resultOf(t, u); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v", r)
	}
	gr := schema.GroupResource{Group: "cluster.open-cluster-management.io", Resource: "addonplacementscores"}
	var refused atomic.Int32
	client.PrependReactor("update", "addonplacementscores", func(k8stesting.Action) (bool, runtime.Object, error) {
		refused.Add(1)
		return true, nil, apierrors.NewForbidden(gr, "r", fmt.Errorf("no"))
	})
	advanceUntil(t, clk, 10*time.Second, func() bool { return refused.Load() > 0 })
	// A minute more of the writer's time: no second try.
	for range 60 {
		clk.Step(time.Second)
		time.Sleep(time.Millisecond)
	}
	if n := refused.Load(); n != 1 {
		t.Errorf("%d rewrites tried after the first was forbidden, want 1", n)
	}
}

// A lone update of an idle object is written at once, whatever the coalescing window: the window
// only spaces writes of an object that was just written. With an hour's window, the update would
// otherwise wait an hour. Stopping the writer does not wait for an object's rest either.
func TestLoneUpdateOfIdleObjectIsWrittenAtOnce(t *testing.T) {
	opts := DefaultOptions()
	opts.Window = time.Hour
	opts.Clock = clocktesting.NewFakeClock(t0)
	w, err := NewWriter(newHub(), opts, NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	if r := write(t, w, Key{"c1", "lone"}, 1); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("lone update with a 1h window: %+v; want Written at once", r)
	}
	// The object now rests for the window; stopping must not wait for that.
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return while an object rested for its window")
	}
}

// Updates that arrive while an object rests after a write share its next write, when the rest ends.
func TestUpdatesArrivingDuringRestShareOneWrite(t *testing.T) {
	client := newHub()
	clk := clocktesting.NewFakeClock(t0)
	opts := DefaultOptions()
	opts.Window = time.Second
	opts.Clock = clk
	w := runWriter(t, client, opts)
	key := Key{"c1", "rest"}
	if r := write(t, w, key, 1); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("first write: %+v", r)
	}
	client.ClearActions()
	var us []*Update
	for i := range 5 {
		us = append(us, NewUpdate(key, []contract.Score{{Name: fmt.Sprintf("s%d", i), Value: float64(i)}}, t0, t0.Add(time.Hour), "test"))
	}
	if err := w.Submit(us...); err != nil {
		t.Fatal(err)
	}
	if n := statusUpdates(client); n != 0 {
		t.Fatalf("%d writes while the object rests", n)
	}
	clk.Step(time.Second)
	for i, u := range us {
		if r := resultOf(t, u); r.Outcome != contract.OutcomeWritten {
			t.Fatalf("update %d: %+v", i, r)
		}
	}
	if n := statusUpdates(client); n != 1 {
		t.Errorf("%d status writes for 5 updates arriving while the object rested, want 1", n)
	}
}

// A deleted ManagedCluster's objects leave the writer: their copies, and their metric series,
// the stale-score aggregate included.
func TestForgetClusterReleasesItsState(t *testing.T) {
	client := newHub()
	w := runWriter(t, client, DefaultOptions())
	for _, key := range []Key{{"gone", "r1"}, {"gone", "r2"}, {"stays", "r1"}} {
		u := NewUpdate(key, []contract.Score{sc("a", 1)}, w.Now(), time.Time{}, "test")
		if err := w.Submit(u); err != nil {
			t.Fatal(err)
		}
		if r := resultOf(t, u); r.Outcome != contract.OutcomeWritten {
			t.Fatalf("%s: %+v", key, r)
		}
	}
	w.ForgetCluster("gone")
	if got := collect(t, byResource{w.metrics})["scoreflow_score_updated_objects"]; got != 1 {
		t.Errorf("%v objects counted fresh for r1, want 1 (the deleted cluster's gone)", got)
	}
	if n := seriesCount(w.metrics.score); n != 1 {
		t.Errorf("%d scoreflow_score series, want the remaining cluster's 1", n)
	}
	waitFor(t, "the deleted cluster's state to go", func() bool {
		w.mu.Lock()
		defer w.mu.Unlock()
		for key := range w.objects {
			if key.Cluster == "gone" {
				return false
			}
		}
		return true
	})
}

// An object left without scores is deleted its grace period later; a delete the hub fails
// transiently is retried, with backoff, until it lands.
func TestEmptiedObjectIsDeletedAfterItsGracePeriod(t *testing.T) {
	client := newHub()
	opts, clk := fakeTimed()
	opts.DeleteEmptyAfter = 5 * time.Minute
	w := runWriter(t, client, opts)
	key := Key{"c1", "r"}
	u := NewUpdate(key, []contract.Score{sc("a", 1)}, t0, t0.Add(time.Minute), "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	if r := resultOf(t, u); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v", r)
	}
	var failures atomic.Int32
	client.PrependReactor("delete", "addonplacementscores", func(k8stesting.Action) (bool, runtime.Object, error) {
		if failures.Add(1) == 1 {
			return true, nil, apierrors.NewServiceUnavailable("the hub is busy")
		}
		return false, nil, nil
	})
	advanceUntil(t, clk, 10*time.Second, func() bool { return len(hubScores(t, client, key).Status.Scores) == 0 })
	emptied := clk.Now()
	gone := func() bool {
		_, err := client.ClusterV1alpha1().AddOnPlacementScores("c1").Get(context.Background(), "r", metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	}
	advanceUntil(t, clk, 10*time.Second, func() bool { return clk.Since(emptied) >= 4*time.Minute })
	if gone() || failures.Load() > 0 {
		t.Fatalf("deleted (%d tries) before its grace period", failures.Load())
	}
	advanceUntil(t, clk, time.Second, gone)
	if n := failures.Load(); n < 2 {
		t.Errorf("%d deletes tried, want the failed one and its retry", n)
	}
	if at := clk.Since(emptied); at > 5*time.Minute+10*time.Second {
		t.Errorf("deleted %s after it was emptied, want at the grace period's end (5m)", at)
	}
}
