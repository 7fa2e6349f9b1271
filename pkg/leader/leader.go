// Package leader runs a function's background work (expiry, polling, marking) in one replica at a
// time, under a coordination.k8s.io Lease held with client-go's leader election; whatever serves
// requests runs on every replica. A replica that loses the Lease stops its work at once and runs
// for election again; one that stops releases the Lease, so the next takes over without waiting
// for it to expire.
//
// The replica's ServiceAccount needs get, create and update on Leases in Options.Namespace (a
// Role; create cannot be narrowed to a name, get and update can: resourceNames).
package leader

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/leaderelection"
	"k8s.io/client-go/tools/leaderelection/resourcelock"
	"k8s.io/client-go/util/retry"
	"k8s.io/utils/ptr"
)

// Defaults of the Lease's timing, those of Kubernetes' own controllers: a crashed leader's work
// resumes elsewhere within LeaseDuration; a partitioned one stops within RenewDeadline.
const (
	DefaultLeaseDuration = 15 * time.Second
	DefaultRenewDeadline = 10 * time.Second
	DefaultRetryPeriod   = 2 * time.Second
)

// Options name the Lease and its timing.
type Options struct {
	// Namespace and Name are the Lease's.
	Namespace, Name string
	// Identity names this replica in the Lease (default: the host name and a random suffix, so
	// that a restarted pod of the same name is a new candidate).
	Identity string
	// LeaseDuration, RenewDeadline and RetryPeriod as in client-go (defaults above).
	LeaseDuration, RenewDeadline, RetryPeriod time.Duration
	Log                                       *slog.Logger
}

// Elector campaigns for one Lease.
type Elector struct {
	opts    Options
	client  kubernetes.Interface
	leading atomic.Bool
}

// New checks opts and fills in the defaults.
func New(client kubernetes.Interface, opts Options) (*Elector, error) {
	if opts.Namespace == "" || opts.Name == "" {
		return nil, errors.New("leader election needs the Lease's namespace and name")
	}
	if opts.Identity == "" {
		host, err := os.Hostname()
		if err != nil {
			return nil, err
		}
		opts.Identity = host + "_" + rand.String(8)
	}
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = DefaultLeaseDuration
	}
	if opts.RenewDeadline == 0 {
		opts.RenewDeadline = DefaultRenewDeadline
	}
	if opts.RetryPeriod == 0 {
		opts.RetryPeriod = DefaultRetryPeriod
	}
	if !(opts.LeaseDuration > opts.RenewDeadline && opts.RenewDeadline > opts.RetryPeriod && opts.RetryPeriod > 0) {
		return nil, fmt.Errorf("leader election needs lease duration %v > renew deadline %v > retry period %v > 0",
			opts.LeaseDuration, opts.RenewDeadline, opts.RetryPeriod)
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	return &Elector{opts: opts, client: client}, nil
}

// Leading reports whether this replica holds the Lease now.
func (e *Elector) Leading() bool { return e.leading.Load() }

// Identity is this replica's name in the Lease.
func (e *Elector) Identity() string { return e.opts.Identity }

// Run campaigns until ctx ends. Each time this replica is elected it calls work with a context
// that ends when the Lease is lost or ctx ends, and gives the Lease up (or campaigns again) only
// once work has returned: work never runs twice at once, here or in another replica.
func (e *Elector) Run(ctx context.Context, work func(ctx context.Context)) {
	lock := &resourcelock.LeaseLock{
		LeaseMeta:  metav1.ObjectMeta{Namespace: e.opts.Namespace, Name: e.opts.Name},
		Client:     e.client.CoordinationV1(),
		LockConfig: resourcelock.ResourceLockConfig{Identity: e.opts.Identity},
	}
	var (
		mu        sync.Mutex
		working   bool
		stopRound context.CancelFunc
	)
	// client-go gives the Lease up as soon as its context ends, whether or not the work has
	// stopped; so each round of the election runs under a context of its own, which ends when ctx
	// does only if no work runs, and otherwise once the work has returned.
	defer context.AfterFunc(ctx, func() {
		mu.Lock()
		defer mu.Unlock()
		if !working && stopRound != nil {
			stopRound()
		}
	})()
	for ctx.Err() == nil {
		round, stop := context.WithCancel(context.WithoutCancel(ctx))
		mu.Lock()
		stopRound = stop
		mu.Unlock()
		elected := make(chan context.Context, 1)
		le, err := leaderelection.NewLeaderElector(leaderelection.LeaderElectionConfig{
			Lock:            lock,
			LeaseDuration:   e.opts.LeaseDuration,
			RenewDeadline:   e.opts.RenewDeadline,
			RetryPeriod:     e.opts.RetryPeriod,
			ReleaseOnCancel: true,
			Name:            e.opts.Name,
			Callbacks: leaderelection.LeaderCallbacks{
				// lctx ends when a renewal fails: the next leader takes the Lease only once it
				// expires, LeaseDuration after the last renewal, while the work was told to stop
				// RenewDeadline after it.
				OnStartedLeading: func(lctx context.Context) { elected <- lctx },
				OnStoppedLeading: func() {},
			},
		})
		if err != nil {
			// Only a bad configuration, which New has already refused.
			stop()
			e.opts.Log.Error("leader election", "err", err)
			return
		}
		ended := make(chan struct{})
		go func() { defer close(ended); le.Run(round) }()
		if ctx.Err() != nil {
			// ctx ended before this round's stop was known to the AfterFunc.
			stop()
		}
		led := false
		select {
		case lctx := <-elected:
			led = true
			e.lead(ctx, lctx, work, &mu, &working)
		case <-ended:
		}
		stop()
		<-ended
		if led && ctx.Err() != nil {
			e.release(context.WithoutCancel(ctx))
		}
	}
}

// release gives the Lease up if it still names this replica. client-go's own release writes the
// Lease at the version its last renewal saw; a renewal cut off by the stop may still have been
// applied, or anyone may have touched the Lease since, and that release then fails on the
// version: the next replica would wait the whole LeaseDuration. This one reads the Lease afresh.
func (e *Elector) release(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, e.opts.RenewDeadline)
	defer cancel()
	leases := e.client.CoordinationV1().Leases(e.opts.Namespace)
	err := retry.RetryOnConflict(retry.DefaultRetry, func() error {
		l, err := leases.Get(ctx, e.opts.Name, metav1.GetOptions{})
		if err != nil {
			return err
		}
		if l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity != e.opts.Identity {
			return nil // released already, or taken over
		}
		// What client-go's release writes: no holder, and a Lease that lasts a second.
		now := metav1.NewMicroTime(time.Now())
		l.Spec.HolderIdentity, l.Spec.LeaseDurationSeconds = ptr.To(""), ptr.To[int32](1)
		l.Spec.AcquireTime, l.Spec.RenewTime = &now, &now
		_, err = leases.Update(ctx, l, metav1.UpdateOptions{})
		return err
	})
	if err != nil {
		e.opts.Log.Warn("releasing the Lease failed: the next leader waits for it to expire", "lease", e.opts.Namespace+"/"+e.opts.Name, "err", err)
	}
}

// lead runs work while this replica holds the Lease (lctx) and ctx lasts.
func (e *Elector) lead(ctx, lctx context.Context, work func(context.Context), mu *sync.Mutex, working *bool) {
	mu.Lock()
	if ctx.Err() != nil {
		mu.Unlock()
		return
	}
	*working = true
	mu.Unlock()
	e.leading.Store(true)
	lease := e.opts.Namespace + "/" + e.opts.Name
	e.opts.Log.Info("leading", "lease", lease, "identity", e.opts.Identity)
	wctx, cancel := context.WithCancel(lctx)
	stopWork := context.AfterFunc(ctx, cancel)
	work(wctx)
	stopWork()
	cancel()
	e.leading.Store(false)
	e.opts.Log.Info("stopped leading", "lease", lease, "identity", e.opts.Identity)
	mu.Lock()
	*working = false
	mu.Unlock()
}

// Flags is the command-line side of Options.
type Flags struct {
	enabled                   *bool
	namespace, name           *string
	lease, renew, retryPeriod *time.Duration
}

// AddFlags registers --leader-elect and its settings on fs, the Lease named name by default. The
// namespace defaults to POD_NAMESPACE (the downward API), then the ServiceAccount's own.
func AddFlags(fs *flag.FlagSet, name string) *Flags {
	return &Flags{
		enabled:     fs.Bool("leader-elect", true, "run the background work in one replica at a time, under a Lease (off: in every replica, for a single one outside a cluster)"),
		namespace:   fs.String("leader-elect-namespace", "", "namespace of the Lease (empty: POD_NAMESPACE, then the ServiceAccount's namespace)"),
		name:        fs.String("leader-elect-lease", name, "name of the Lease whose holder does the background work"),
		lease:       fs.Duration("leader-elect-lease-duration", DefaultLeaseDuration, "how long a Lease lasts unrenewed: a crashed leader's work resumes elsewhere within it"),
		renew:       fs.Duration("leader-elect-renew-deadline", DefaultRenewDeadline, "how long the leader retries renewing before it stops its work"),
		retryPeriod: fs.Duration("leader-elect-retry-period", DefaultRetryPeriod, "how often candidates try for the Lease and the leader renews it"),
	}
}

// Enabled reports whether --leader-elect is on.
func (f *Flags) Enabled() bool { return *f.enabled }

// Elector is the elector the flags ask for, or nil when --leader-elect is off.
func (f *Flags) Elector(client kubernetes.Interface, log *slog.Logger) (*Elector, error) {
	if !*f.enabled {
		return nil, nil
	}
	ns := *f.namespace
	if ns == "" {
		ns = os.Getenv("POD_NAMESPACE")
	}
	if ns == "" {
		b, err := os.ReadFile(serviceAccountNamespace)
		if err != nil {
			return nil, fmt.Errorf("--leader-elect: no namespace for the Lease (set --leader-elect-namespace or POD_NAMESPACE): %w", err)
		}
		ns = string(b)
	}
	return New(client, Options{Namespace: ns, Name: *f.name, LeaseDuration: *f.lease, RenewDeadline: *f.renew, RetryPeriod: *f.retryPeriod, Log: log})
}

const serviceAccountNamespace = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"

// RunOrAlways runs work under e, or, with no elector (leader election off), until ctx ends.
func RunOrAlways(ctx context.Context, e *Elector, work func(ctx context.Context)) {
	if e == nil {
		work(ctx)
		return
	}
	e.Run(ctx, work)
}
