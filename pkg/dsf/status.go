package dsf

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
)

// DefaultStatusInterval is how often each scorer is probed: DSF's controller's health check
// interval (common.DynamicScorerHealthCheckInterval, 30 seconds).
const DefaultStatusInterval = 30 * time.Second

// StatusOptions configure a StatusWriter.
type StatusOptions struct {
	// Endpoints rewrite hosts the specs name, for where the hub reaches them.
	Endpoints Endpoints
	// Timeout bounds each probe (DefaultTimeout when zero).
	Timeout time.Duration
	// CAFile as Options.CAFile.
	CAFile string
	// Interval between two probes of one scorer (DefaultStatusInterval when zero).
	Interval time.Duration
	// Workers probe scorers at once (4 when zero): a scorer that does not answer holds one of them
	// for Timeout, not the others.
	Workers int
}

// StatusWriter is the hub side of DSF's controller's health check, the one component that writes
// the status of the DynamicScorers of one namespace (run it under leader election: one replica at
// a time). Every Interval, as DSF's controller does (internal/controller/dynamicscorer_controller.go),
// it lists the DynamicScorers and probes each:
//
//   - configSyncMode Full: GET configURL. An answer that decodes is Active, and is written as
//     status.lastSyncedConfig; anything else is Inactive and the last synced config stays.
//   - configSyncMode None: GET /healthz on configURL's scheme and host: 200 is Active, anything
//     else Inactive.
//
// The status is written (dynamicscorers/status, update) only when it changed: with Full when the
// health or the config did, with None when the health did. Agents run a scorer only while its
// status says Active, with the synced config: no agent probes a scorer itself. A list per round,
// not a watch: the account needs list and update on the status, nothing more, and a new scorer
// gets its status within one Interval, as with DSF.
//
// Where it differs from DSF's controller: the first round is at once, probes run Workers at a time,
// each bounded by Timeout, follows no redirect, and counts only a 2xx /config answer (DSF decodes
// any); a /config answer is at most MaxConfigBytes.
type StatusWriter struct {
	hub       dynamic.Interface
	namespace string
	opts      StatusOptions
	client    client
	log       *slog.Logger
	active    *prometheus.GaugeVec
	seen      map[string]bool // the scorers of the last round
}

// NewStatusWriter writes the status of the DynamicScorers of namespace on hub; reg receives its
// metrics.
func NewStatusWriter(hub dynamic.Interface, namespace string, opts StatusOptions, reg prometheus.Registerer, log *slog.Logger) (*StatusWriter, error) {
	if namespace == "" {
		return nil, errors.New("the DynamicScorers' namespace is required")
	}
	if opts.Timeout == 0 {
		opts.Timeout = DefaultTimeout
	}
	if opts.Interval == 0 {
		opts.Interval = DefaultStatusInterval
	}
	if opts.Workers == 0 {
		opts.Workers = 4
	}
	if opts.Timeout < 0 || opts.Interval < 0 || opts.Workers < 0 {
		return nil, fmt.Errorf("timeout %v, interval %v and workers %d must be positive", opts.Timeout, opts.Interval, opts.Workers)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	if reg == nil {
		reg = prometheus.NewRegistry()
	}
	tr, err := newTransport(opts.CAFile, log)
	if err != nil {
		return nil, err
	}
	w := &StatusWriter{hub: hub, namespace: namespace, opts: opts, client: newClient(tr, opts.Timeout), log: log, seen: map[string]bool{},
		active: prometheus.NewGaugeVec(prometheus.GaugeOpts{
			Name: "scoreflow_dsf_scorer_active",
			Help: "1 when a DynamicScorer's last probe made it Active, 0 when Inactive, by scorer (DynamicScorer name); exported by the status writer that leads.",
		}, []string{"scorer"})}
	if err := reg.Register(w.active); err != nil {
		return nil, err
	}
	return w, nil
}

// Run writes statuses, a round at once and then every Interval, until ctx ends.
func (w *StatusWriter) Run(ctx context.Context) error {
	w.log.Info("writing the DynamicScorers' status", "namespace", w.namespace, "interval", w.opts.Interval)
	tick := time.NewTicker(w.opts.Interval)
	defer tick.Stop()
	for {
		w.round(ctx)
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
	}
}

// round probes every DynamicScorer of the namespace, Workers at a time.
func (w *StatusWriter) round(ctx context.Context) {
	l, err := w.hub.Resource(ScorersResource).Namespace(w.namespace).List(ctx, metav1.ListOptions{})
	if err != nil {
		if ctx.Err() == nil {
			w.log.Warn("listing the DynamicScorers failed", "namespace", w.namespace, "err", apiError(err))
		}
		return
	}
	now := map[string]bool{}
	sem := make(chan struct{}, w.opts.Workers)
	var wg sync.WaitGroup
	for i := range l.Items {
		u := &l.Items[i]
		now[u.GetName()] = true
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer func() { <-sem; wg.Done() }()
			if err := w.sync(ctx, u); err != nil && ctx.Err() == nil {
				w.log.Warn("writing a DynamicScorer's status failed", "scorer", u.GetName(), "err", err)
			}
		}()
	}
	wg.Wait()
	for name := range w.seen {
		if !now[name] {
			w.active.DeleteLabelValues(name)
		}
	}
	w.seen = now
}

// sync probes the scorer of u and writes its status when it changed.
func (w *StatusWriter) sync(ctx context.Context, u *unstructured.Unstructured) error {
	var ds DynamicScorer
	if err := fromUnstructured(u, &ds); err != nil {
		return fmt.Errorf("does not decode: %w", err)
	}
	st, why := w.probe(ctx, &ds)
	active := 0.0
	if st.HealthStatus == HealthActive {
		active = 1
	}
	w.active.WithLabelValues(ds.Name).Set(active)
	changed := st.HealthStatus != ds.Status.HealthStatus
	if ds.Spec.ConfigSyncMode == SyncFull {
		changed = !reflect.DeepEqual(st, ds.Status)
	}
	if !changed {
		return nil
	}
	obj, err := runtime.DefaultUnstructuredConverter.ToUnstructured(&st)
	if err != nil {
		return err
	}
	next := u.DeepCopy()
	next.Object["status"] = obj
	if _, err := w.hub.Resource(ScorersResource).Namespace(w.namespace).UpdateStatus(ctx, next, metav1.UpdateOptions{}); err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) {
			return nil // changed or deleted meanwhile: the next round sees it as it is
		}
		return fmt.Errorf("updating its status: %s", apiError(err))
	}
	if st.HealthStatus != ds.Status.HealthStatus {
		w.log.Info("scorer health", "scorer", ds.Name, "healthStatus", st.HealthStatus, "was", first(ds.Status.HealthStatus, HealthUnknown), "why", why)
	} else {
		w.log.Info("scorer config synced", "scorer", ds.Name)
	}
	return nil
}

// probe asks the scorer as DSF's controller does and returns its new status, and why when it is
// Inactive.
func (w *StatusWriter) probe(ctx context.Context, ds *DynamicScorer) (ScorerStatus, string) {
	st := ScorerStatus{HealthStatus: HealthInactive, LastSyncedConfig: ds.Status.LastSyncedConfig}
	o, _, err := origin(ds.Spec.ConfigURL)
	if err != nil {
		return st, "configURL: " + err.Error()
	}
	if ds.Spec.ConfigSyncMode == SyncFull {
		u, err := w.opts.Endpoints.Resolve(ds.Spec.ConfigURL)
		if err != nil {
			return st, "configURL: " + err.Error()
		}
		rc, err := w.client.config(ctx, u)
		if err != nil {
			return st, err.Error()
		}
		st.HealthStatus, st.LastSyncedConfig = HealthActive, rc
		return st, ""
	}
	u, err := w.opts.Endpoints.Resolve(o + "/healthz")
	if err != nil {
		return st, "configURL: " + err.Error()
	}
	if err := w.client.healthy(ctx, u); err != nil {
		return st, err.Error()
	}
	st.HealthStatus = HealthActive
	return st, ""
}
