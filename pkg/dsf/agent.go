package dsf

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// The hub resources the agent watches.
var (
	ScorersResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "dynamicscorers"}
	ConfigsResource = schema.GroupVersionResource{Group: Group, Version: Version, Resource: "dynamicscoringconfigs"}
)

// DefaultScorersNamespace is the hub namespace of the DynamicScorers: where DSF's guide installs
// DSF (its Helm chart's hubSetting.namespace) and applies them. DSF's kustomize install
// (config/default) uses dynamic-scoring instead.
const DefaultScorersNamespace = "open-cluster-management"

// retryInterval is when a scorer whose interval is not known yet (its /config did not answer, its
// spec does not resolve) is tried again: DSF's controller probes scorers every 30 seconds.
const retryInterval = 30 * time.Second

// Sender delivers an event; function.Sender (K_SINK: the hub's agent gateway) is the one used.
type Sender interface {
	Send(ctx context.Context, e event.Event) error
}

// Agent is agent mode, DSF's agent on one managed cluster. As DSF distributes scorers, it runs the
// DynamicScorers of one hub namespace only while the DynamicScoringConfig dynamic-scoring-config
// exists there, each only while its status says Active (with configSyncMode Full, with the
// status's lastSyncedConfig), unless a mask names it for this cluster: such a scorer is never
// contacted. Each runs on its own scoring.params.interval against this cluster's Prometheus and
// scorers, and sends this cluster's scores as one score.updated per round to Sender; with
// scoreDestination None it scores and exports dynamic_score only.
type Agent struct {
	Runner  *Runner
	Cluster string
	// Source is the events' source (the gateway names the sender again, from its identity).
	Source string
	Sender Sender
	Log    *slog.Logger
	// Owns, when not nil, refuses a resource the deployment does not let the agent score (the
	// gateway refuses it anyway): the scorer is not asked.
	Owns func(resource string) error

	masks      atomic.Pointer[Masks]
	mu         sync.Mutex
	workers    map[string]*worker
	configured bool // the DynamicScoringConfig exists
	reported   bool // its absence was logged
	wg         sync.WaitGroup
	synced     atomic.Bool
}

type worker struct {
	key    []byte // the DynamicScorer's spec and status as JSON: a change restarts the worker
	cancel context.CancelFunc
	done   chan struct{} // closed when the worker has stopped
}

// workerKey is what a worker runs from: its spec, health and synced /config.
func workerKey(ds *DynamicScorer) []byte {
	b, _ := json.Marshal(struct {
		Spec   ScorerSpec
		Status ScorerStatus
	}{ds.Spec, ds.Status})
	return b
}

// Ready reports whether the agent has read the hub's DynamicScorers once.
func (a *Agent) Ready() error {
	if !a.synced.Load() {
		return errors.New("the hub's DynamicScorers are not read yet")
	}
	return nil
}

// Run watches the DynamicScorers and DynamicScoringConfigs of namespace on the hub until ctx
// ends, keeping one worker per scorer, and returns when every worker has stopped.
func (a *Agent) Run(ctx context.Context, hub dynamic.Interface, namespace string) error {
	if err := contract.ValidateClusterName(a.Cluster); err != nil {
		return fmt.Errorf("--cluster: %v", err)
	}
	none := Masks{}
	a.masks.Store(&none)
	a.workers = map[string]*worker{}
	f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(hub, 10*time.Minute, namespace, nil)
	scorers := f.ForResource(ScorersResource).Informer()
	configs := f.ForResource(ConfigsResource).Informer()
	changed := make(chan struct{}, 1)
	poke := func(any) {
		select {
		case changed <- struct{}{}:
		default:
		}
	}
	h := cache.ResourceEventHandlerFuncs{AddFunc: poke, UpdateFunc: func(_, n any) { poke(n) }, DeleteFunc: poke}
	for _, inf := range []cache.SharedIndexInformer{scorers, configs} {
		if _, err := inf.AddEventHandler(h); err != nil {
			return err
		}
	}
	f.Start(ctx.Done())
	defer f.Shutdown()
	if !cache.WaitForCacheSync(ctx.Done(), scorers.HasSynced, configs.HasSynced) {
		a.stopAll()
		return ctx.Err()
	}
	a.synced.Store(true)
	a.Log.Info("watching the hub's DynamicScorers", "namespace", namespace, "cluster", a.Cluster)
	for {
		a.reconcile(ctx, scorers.GetStore().List(), configs.GetStore().List())
		select {
		case <-ctx.Done():
			a.stopAll()
			return nil
		case <-changed:
		}
	}
}

// reconcile starts a worker per DynamicScorer, restarts those whose spec or status changed and
// stops those deleted; masks apply from the next round of every worker. Without the
// DynamicScoringConfig dynamic-scoring-config no worker runs: DSF distributes no scorer without it.
func (a *Agent) reconcile(ctx context.Context, scorerObjs, configObjs []any) {
	masks := Masks{}
	configured := false
	for _, o := range configObjs {
		var c ScoringConfig
		if err := fromUnstructured(o, &c); err != nil {
			a.Log.Error("a DynamicScoringConfig does not decode", "err", err)
			continue
		}
		if c.Name == ConfigName {
			masks, configured = NewMasks(c.Spec.Masks), true
		}
	}
	a.masks.Store(&masks)

	want := map[string]DynamicScorer{}
	keys := map[string][]byte{}
	if configured {
		for _, o := range scorerObjs {
			var ds DynamicScorer
			if err := fromUnstructured(o, &ds); err != nil {
				a.Log.Error("a DynamicScorer does not decode", "err", err)
				continue
			}
			want[ds.Name], keys[ds.Name] = ds, workerKey(&ds)
		}
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	if configured != a.configured || !a.reported {
		a.configured, a.reported = configured, true
		if !configured {
			a.Log.Info("no DynamicScoringConfig "+ConfigName+" on the hub: no scorer runs, as in DSF", "scorers", len(scorerObjs))
		}
	}
	stopped := map[string]chan struct{}{}
	for name, w := range a.workers {
		if _, ok := want[name]; !ok || string(keys[name]) != string(w.key) {
			w.cancel()
			delete(a.workers, name)
			stopped[name] = w.done
			if !ok {
				a.Log.Info("scorer removed", "scorer", name)
				go func() { <-w.done; a.Runner.Forget(name, "") }()
			}
		}
	}
	for name, ds := range want {
		if _, ok := a.workers[name]; ok {
			continue
		}
		wctx, cancel := context.WithCancel(ctx)
		w := &worker{key: keys[name], cancel: cancel, done: make(chan struct{})}
		a.workers[name] = w
		a.wg.Add(1)
		go func(previous chan struct{}) {
			defer a.wg.Done()
			defer close(w.done)
			if previous != nil {
				<-previous // its last round's metrics are gone before this one's first
			}
			a.work(wctx, ds)
		}(stopped[name])
	}
}

func (a *Agent) stopAll() {
	a.mu.Lock()
	for _, w := range a.workers {
		w.cancel()
	}
	a.mu.Unlock()
	a.wg.Wait()
}

// work runs rounds of one scorer: the first at once, then every interval. When it stops, its
// dynamic_score series go with it, as DSF's agent removes a stopped worker's.
func (a *Agent) work(ctx context.Context, ds DynamicScorer) {
	a.Log.Info("scorer started", "scorer", ds.Name, "healthStatus", ds.Status.HealthStatus)
	interval := time.Duration(0)
	lastSkip, scoreName := "", specScoreName(&ds)
	defer func() {
		if scoreName != "" {
			a.Runner.dsf.forgetScores(scoreName)
		}
	}()
	for {
		r := a.Round(ctx, &ds)
		if r.Interval > 0 {
			interval = r.Interval
		}
		if r.ScoreName != "" {
			if scoreName != "" && r.ScoreName != scoreName {
				a.Runner.dsf.forgetScores(scoreName)
			}
			scoreName = r.ScoreName
		}
		if r.Skipped != lastSkip && r.Skipped != "" {
			a.Log.Info("scorer not run", "scorer", ds.Name, "why", r.Skipped)
		}
		lastSkip = r.Skipped
		wait := interval
		if wait == 0 {
			wait = retryInterval
		}
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
	}
}

// RoundResult is what one round of a scorer did.
type RoundResult struct {
	// Interval is the scorer's interval, 0 when not known (the spec did not resolve).
	Interval time.Duration
	// ScoreName is the scorer's score name, "" when not known.
	ScoreName string
	// Skipped says why nothing was asked of the scoring endpoint ("" when it was).
	Skipped string
}

// Round runs ds once for the agent's cluster and sends its scores (none with scoreDestination
// None: the score is exported as DSF's dynamic_score only).
func (a *Agent) Round(ctx context.Context, ds *DynamicScorer) RoundResult {
	rounds := a.Runner.metrics.rounds
	dm := a.Runner.dsf
	ev, err := a.Runner.Evaluate(ctx, ds, scope{Cluster: a.Cluster, Masks: *a.masks.Load(), Owns: a.Owns, Synced: true})
	var out RoundResult
	if ev != nil && ev.Plan != nil {
		out.Interval, out.ScoreName = ev.Plan.Interval, ev.Plan.ScoreName
	}
	if err != nil {
		if ctx.Err() == nil {
			rounds.WithLabelValues(ds.Name, "failed").Inc()
			if name := first(out.ScoreName, specScoreName(ds)); name != "" {
				dm.round(name, err)
			}
			a.failed(ds.Name, err)
		}
		return out
	}
	if ev.Skipped != "" {
		rounds.WithLabelValues(ds.Name, "skipped").Inc()
		if out.ScoreName != "" {
			dm.forgetScores(out.ScoreName)
		}
		out.Skipped = ev.Skipped
		return out
	}
	p := ev.Plan
	if !p.Write {
		dm.round(p.ScoreName, nil)
		addSince(dm.sendTo, p.ScoreName, time.Now())
		rounds.WithLabelValues(ds.Name, "scored").Inc()
		a.Log.Info("scored: scoreDestination None, exported as dynamic_score only", "scorer", ds.Name, "results", len(ev.Results))
		return out
	}
	if len(ev.Mapped.Items) == 0 {
		dm.round(p.ScoreName, nil)
		rounds.WithLabelValues(ds.Name, "empty").Inc()
		a.Log.Info("the scorer answered no scores: nothing sent", "scorer", ds.Name, "dropped", ev.Mapped.Dropped)
		return out
	}
	su := contract.ScoreUpdated{Resource: p.Resource, Items: ev.Mapped.Items}
	vu := ev.Observed.Add(validityIntervals * max(p.Interval, time.Minute))
	su.ValidUntil = &vu
	began := time.Now()
	e, err := contract.NewScoreUpdated(a.Source, ev.Observed, su)
	if err == nil {
		err = a.Sender.Send(ctx, e)
	}
	if err != nil {
		if ctx.Err() == nil {
			dm.round(p.ScoreName, err)
			rounds.WithLabelValues(ds.Name, "failed").Inc()
			a.Log.Error("sending the scores failed", "scorer", ds.Name, "resource", su.Resource, "err", err)
		}
		return out
	}
	addSince(dm.sendTo, p.ScoreName, began)
	dm.round(p.ScoreName, nil)
	rounds.WithLabelValues(ds.Name, "sent").Inc()
	a.Log.Info("scores sent", "scorer", ds.Name, "resource", su.Resource, "scores", len(su.Items[0].Scores), "id", e.ID())
	return out
}

func (a *Agent) failed(name string, err error) {
	var se *scorer.Error
	if errors.As(err, &se) {
		a.Log.Warn("scoring failed", "scorer", name, "reason", se.Reason, "retriable", se.Retriable, "err", se.Err.Error())
		return
	}
	a.Log.Warn("scoring failed", "scorer", name, "err", err.Error())
}

// fromUnstructured decodes an informer's object into v (the API server has pruned unknown fields).
func fromUnstructured(o any, v any) error {
	u, ok := o.(*unstructured.Unstructured)
	if !ok {
		return fmt.Errorf("unexpected %T", o)
	}
	b, err := u.MarshalJSON()
	if err != nil {
		return err
	}
	return json.Unmarshal(b, v)
}
