package leader

import (
	"context"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/scoreflow/scoreflow/harness/localhub"
)

// replica is one candidate: its work counts how many replicas work at once.
type replica struct {
	e      *Elector
	cancel context.CancelFunc
	done   chan struct{}
}

// TestOneReplicaWorksAtATime starts two replicas on a real API server: exactly one works; when it
// stops, it releases the Lease and the other takes over well before the Lease would expire, and
// the two never work at once.
func TestOneReplicaWorksAtATime(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx := t.Context()
	if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "scoreflow"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	var working, most atomic.Int32
	var mu sync.Mutex
	starts := map[string]int{}
	work := func(id string) func(context.Context) {
		return func(ctx context.Context) {
			n := working.Add(1)
			for m := most.Load(); n > m && !most.CompareAndSwap(m, n); m = most.Load() {
			}
			mu.Lock()
			starts[id]++
			mu.Unlock()
			<-ctx.Done()
			// Work that takes a while to stop must still not overlap the next leader's.
			time.Sleep(200 * time.Millisecond)
			working.Add(-1)
		}
	}
	const lease = 10 * time.Second
	start := func(id string) *replica {
		e, err := New(hub.Kube, Options{Namespace: "scoreflow", Name: "test-lease", Identity: id,
			LeaseDuration: lease, RenewDeadline: 6 * time.Second, RetryPeriod: 250 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		rctx, cancel := context.WithCancel(ctx)
		r := &replica{e: e, cancel: cancel, done: make(chan struct{})}
		go func() { defer close(r.done); e.Run(rctx, work(id)) }()
		t.Cleanup(func() { cancel(); <-r.done })
		return r
	}
	a, b := start("a"), start("b")

	leaderOf := func(within time.Duration) *replica {
		t.Helper()
		deadline := time.Now().Add(within)
		for time.Now().Before(deadline) {
			if a.e.Leading() != b.e.Leading() {
				if a.e.Leading() {
					return a
				}
				return b
			}
			time.Sleep(20 * time.Millisecond)
		}
		t.Fatalf("no single leader within %v (a leading %v, b leading %v)", within, a.e.Leading(), b.e.Leading())
		return nil
	}
	first := leaderOf(5 * time.Second)
	for range 20 {
		time.Sleep(50 * time.Millisecond)
		if a.e.Leading() && b.e.Leading() {
			t.Fatal("both replicas lead")
		}
	}
	if got := working.Load(); got != 1 {
		t.Fatalf("%d replicas work, want 1", got)
	}

	stopped := time.Now()
	first.cancel()
	<-first.done
	second := leaderOf(lease / 2)
	if second == first {
		t.Fatal("the stopped replica still leads")
	}
	took := time.Since(stopped)
	// The Lease was released: the other candidate took it at its next try, not after the Lease's
	// duration.
	if took >= lease/2 {
		t.Errorf("took over %v after the leader stopped; a released Lease is taken within a few retry periods", took)
	}
	deadline := time.Now().Add(5 * time.Second)
	for working.Load() != 1 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if got := working.Load(); got != 1 {
		t.Fatalf("%d replicas work after the hand-over, want 1", got)
	}
	if m := most.Load(); m != 1 {
		t.Errorf("at most %d replicas worked at once, want 1", m)
	}
	mu.Lock()
	defer mu.Unlock()
	if starts["a"]+starts["b"] != 2 {
		t.Errorf("work started %v, want once in each replica", starts)
	}
	t.Logf("hand-over after the leader stopped: %v", took.Round(time.Millisecond))
}

func TestNewRefusesInconsistentTiming(t *testing.T) {
	for _, o := range []Options{
		{Namespace: "ns"},
		{Name: "n"},
		{Namespace: "ns", Name: "n", LeaseDuration: time.Second, RenewDeadline: 2 * time.Second},
		{Namespace: "ns", Name: "n", RenewDeadline: time.Second, RetryPeriod: time.Second},
	} {
		if _, err := New(nil, o); err == nil {
			t.Errorf("New(%+v) accepted", o)
		}
	}
	e, err := New(nil, Options{Namespace: "ns", Name: "n"})
	if err != nil {
		t.Fatal(err)
	}
	if e.opts.LeaseDuration != DefaultLeaseDuration || e.Identity() == "" {
		t.Errorf("defaults not filled in: %+v", e.opts)
	}
}

// TestReleaseAfterTheLeaseChanged: a leader that stops gives the Lease up even when the Lease
// changes between client-go's read and write of the release (a renewal cut off by the stop but
// applied late does that), so that the next replica need not wait for it to expire.
func TestReleaseAfterTheLeaseChanged(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx := t.Context()
	leases := hub.Kube.CoordinationV1().Leases("default")
	// The leader's client: once armed, someone else writes the Lease just before the leader's
	// first write of it goes out.
	var armed atomic.Bool
	var puts atomic.Int32 // the leader's writes of the Lease that have come back
	cfg := rest.CopyConfig(hub.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method != http.MethodPut {
				return rt.RoundTrip(r)
			}
			if armed.CompareAndSwap(true, false) {
				l, err := leases.Get(ctx, "test-lease", metav1.GetOptions{})
				if err == nil {
					l.Annotations = map[string]string{"touched": "yes"}
					_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
				}
				if err != nil {
					t.Errorf("touching the Lease: %v", err)
				}
			}
			defer puts.Add(1)
			return rt.RoundTrip(r)
		})
	})
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	// Renewals far apart (after the first): the leader's only write after arming is its release.
	e, err := New(client, Options{Namespace: "default", Name: "test-lease", Identity: "a",
		LeaseDuration: time.Minute, RenewDeadline: 50 * time.Second, RetryPeriod: 40 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	defer cancel()
	done := make(chan struct{})
	go func() {
		defer close(done)
		e.Run(rctx, func(wctx context.Context) {
			// client-go renews once as soon as it leads: arm only after that write, so that the
			// leader's next write of the Lease is its release.
			for deadline := time.Now().Add(20 * time.Second); puts.Load() == 0 && time.Now().Before(deadline); {
				time.Sleep(10 * time.Millisecond)
			}
			armed.Store(true)
			cancel()
			<-wctx.Done()
		})
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("the elector did not stop")
	}
	if armed.Load() {
		t.Fatal("the leader never wrote the Lease after it stopped")
	}
	l, err := leases.Get(ctx, "test-lease", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if h := l.Spec.HolderIdentity; h != nil && *h != "" {
		t.Errorf("the stopped leader still holds the Lease: holder %q, lasting %ds", *h, *l.Spec.LeaseDurationSeconds)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
