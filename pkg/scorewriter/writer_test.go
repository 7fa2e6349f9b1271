package scorewriter

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"open-cluster-management.io/api/client/cluster/clientset/versioned/fake"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// These tests look at the writer's bookkeeping (what it remembers per object), which the hub
// cannot show; a fake clientset stands in for the hub's answers. Writing itself is tested against
// a real hub in test/writer.

func runWriter(t *testing.T, client *fake.Clientset, opts Options) *Writer {
	t.Helper()
	w, err := NewWriter(client, opts, NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	t.Cleanup(func() { cancel(); <-done })
	return w
}

func write(t *testing.T, w *Writer, key Key, v float64) contract.ItemResult {
	t.Helper()
	u := NewUpdate(key, []contract.Score{{Name: "a", Value: v}}, time.Now(), time.Now().Add(time.Hour), "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	r, err := u.Result(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func failWith(err error) k8stesting.ReactionFunc {
	return func(k8stesting.Action) (bool, runtime.Object, error) { return true, nil, err }
}

// An object whose writes fail for good, or whose retries run out, leaves no backoff state behind:
// arbitrary resource names must not grow the writer's memory.
func TestBackoffStateIsForgottenWhenWritesFailForGood(t *testing.T) {
	gr := schema.GroupResource{Group: "cluster.open-cluster-management.io", Resource: "addonplacementscores"}
	for name, err := range map[string]error{
		"forbidden": apierrors.NewForbidden(gr, "r", fmt.Errorf("no")),
		"throttled": apierrors.NewTooManyRequests("slow down", 0),
	} {
		t.Run(name, func(t *testing.T) {
			client := fake.NewSimpleClientset()
			client.PrependReactor("*", "addonplacementscores", failWith(err))
			opts := DefaultOptions()
			opts.RetryFor = 300 * time.Millisecond
			w := runWriter(t, client, opts)
			for i := range 20 {
				if r := write(t, w, Key{"c1", fmt.Sprintf("r%d", i)}, 1); r.Outcome != contract.OutcomeFailed {
					t.Fatalf("write %d: %+v, want Failed", i, r)
				}
			}
			deadline := time.Now().Add(5 * time.Second)
			for {
				w.mu.Lock()
				backoff, held, pending := len(w.backoff), len(w.held), len(w.pending)
				w.mu.Unlock()
				if backoff == 0 && held == 0 && pending == 0 {
					return
				}
				if time.Now().After(deadline) {
					t.Fatalf("after every write failed: %d backoff, %d held, %d pending entries remain", backoff, held, pending)
				}
				time.Sleep(20 * time.Millisecond)
			}
		})
	}
}

// The cache of written objects keeps at most CachedObjects of them.
func TestObjectCacheIsBounded(t *testing.T) {
	opts := DefaultOptions()
	opts.CachedObjects = 4
	w := runWriter(t, fake.NewSimpleClientset(), opts)
	for i := range 20 {
		if r := write(t, w, Key{"c1", fmt.Sprintf("r%d", i)}, 1); r.Outcome != contract.OutcomeWritten {
			t.Fatalf("write %d: %+v", i, r)
		}
	}
	if n := w.objects.Len(); n > 4 {
		t.Errorf("%d objects cached, bound 4", n)
	}
}

// When the rewrite at an object's expiry fails for good (here the hub forbids it), the writer
// gives that expiry up instead of trying again at once, forever.
func TestFailedExpiryRewriteIsNotRetriedInALoop(t *testing.T) {
	client := fake.NewSimpleClientset()
	w := runWriter(t, client, DefaultOptions())
	key := Key{"c1", "r"}
	u := NewUpdate(key, []contract.Score{{Name: "a", Value: 1}}, time.Now(), time.Now().Add(100*time.Millisecond), "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	if r, err := u.Result(context.Background()); err != nil || r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v %v", r, err)
	}
	gr := schema.GroupResource{Group: "cluster.open-cluster-management.io", Resource: "addonplacementscores"}
	client.PrependReactor("update", "addonplacementscores", failWith(apierrors.NewForbidden(gr, "r", fmt.Errorf("no"))))
	client.ClearActions()
	time.Sleep(time.Second)
	updates := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" {
			updates++
		}
	}
	if updates < 1 || updates > 3 {
		t.Errorf("%d status updates in the second after the expiry, want the one rewrite (at most a few)", updates)
	}
}

// A lone update of an idle object is written at once, whatever the coalescing window: the window
// only spaces writes of an object that was just written. With an hour's window, the update would
// otherwise wait an hour. Stopping the writer does not wait for an object's rest either.
func TestLoneUpdateOfIdleObjectIsWrittenAtOnce(t *testing.T) {
	opts := DefaultOptions()
	opts.Window = time.Hour
	w, err := NewWriter(fake.NewSimpleClientset(), opts, NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	defer func() { cancel(); <-done }()

	u := NewUpdate(Key{"c1", "lone"}, []contract.Score{{Name: "a", Value: 1}}, time.Now(), time.Now().Add(time.Hour), "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	wait, stop := context.WithTimeout(context.Background(), 20*time.Second)
	defer stop()
	if r, err := u.Result(wait); err != nil || r.Outcome != contract.OutcomeWritten {
		t.Fatalf("lone update with a 1h window: %+v, %v; want Written at once", r, err)
	}

	// The object now rests for the window; stopping must not wait for that.
	cancel()
	select {
	case <-done:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return while an object rested for its window")
	}
}

// Updates that arrive while an object rests after a write share its next write.
func TestUpdatesArrivingDuringRestShareOneWrite(t *testing.T) {
	client := fake.NewSimpleClientset()
	opts := DefaultOptions()
	opts.Window = 300 * time.Millisecond
	w := runWriter(t, client, opts)
	key := Key{"c1", "rest"}
	if r := write(t, w, key, 1); r.Outcome != contract.OutcomeWritten {
		t.Fatalf("first write: %+v", r)
	}
	client.ClearActions()
	var us []*Update
	for i := range 5 {
		us = append(us, NewUpdate(key, []contract.Score{{Name: fmt.Sprintf("s%d", i), Value: float64(i)}}, time.Now(), time.Now().Add(time.Hour), "test"))
	}
	if err := w.Submit(us...); err != nil {
		t.Fatal(err)
	}
	for i, u := range us {
		if r, err := u.Result(context.Background()); err != nil || r.Outcome != contract.OutcomeWritten {
			t.Fatalf("update %d: %+v %v", i, r, err)
		}
	}
	updates := 0
	for _, a := range client.Actions() {
		if a.GetVerb() == "update" {
			updates++
		}
	}
	if updates != 1 {
		t.Errorf("%d status writes for 5 updates arriving while the object rested, want 1", updates)
	}
}
