// Package scorespage is a live web page of what scoreflow does on a hub: every cluster's
// AddOnPlacementScores as a heat map with their freshness (age, validUntil), each Placement's
// decision over time and the scores and weights that made it, and the stream of events the page
// receives (score updates, write results, refusals with their reasons).
//
// The state comes from informers on AddOnPlacementScores, Placements and PlacementDecisions (read
// only: get, list, watch) and from the CloudEvents the page is sent (Handle). The page itself is
// plain HTML, CSS and JavaScript embedded in the binary: no build step, nothing fetched from
// elsewhere, so it works offline. It stays current through server-sent events.
package scorespage

import (
	"context"
	"errors"
	"log/slog"
	"net/http"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/client-go/tools/cache"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/pkg/function"
)

// Options configure a Page. Zero values take the defaults shown.
type Options struct {
	// Events is how many received events the page keeps and shows (default 200); routine events
	// make room before refusals do, which keep up to half of it.
	Events int
	// History is how many decisions per Placement the page keeps (default 50).
	History int
	// Resync is the informers' resync period (default 10 minutes).
	Resync time.Duration
	Log    *slog.Logger
	// Registry receives the page's metrics (nil: none).
	Registry prometheus.Registerer
	// Now is the clock (default time.Now).
	Now func() time.Time
}

// Page holds the state the web page shows and serves it.
type Page struct {
	client clusterclient.Interface
	opts   Options
	log    *slog.Logger

	mu         sync.Mutex
	scores     map[string]scoreObject // "cluster/resource"
	placements map[string]*placementState
	events     []EventView // oldest first, at most opts.Events
	seq        uint64      // of the last event
	scoresVer  uint64
	placeVer   uint64
	changed    chan struct{} // closed and replaced on every change
	synced     bool
	lastTick   time.Time

	clients prometheus.Gauge
}

// New returns a page over the hub that client reaches. Run starts watching it.
func New(client clusterclient.Interface, opts Options) *Page {
	if opts.Events <= 0 {
		opts.Events = 200
	}
	if opts.History <= 0 {
		opts.History = 50
	}
	if opts.Resync <= 0 {
		opts.Resync = 10 * time.Minute
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.DiscardHandler)
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	p := &Page{client: client, opts: opts, log: opts.Log, scores: map[string]scoreObject{},
		placements: map[string]*placementState{}, changed: make(chan struct{}),
		clients: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scoreflow_page_clients", Help: "Browsers connected to the page's live stream."})}
	if opts.Registry != nil {
		opts.Registry.MustRegister(p.clients)
	}
	return p
}

// Run watches the hub until ctx ends. Ready reports when the first lists are in.
func (p *Page) Run(ctx context.Context) {
	f := clusterinformers.NewSharedInformerFactory(p.client, p.opts.Resync)
	handlers := []struct {
		inf cache.SharedIndexInformer
		h   cache.ResourceEventHandler
	}{
		{f.Cluster().V1alpha1().AddOnPlacementScores().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    p.setScore,
			UpdateFunc: func(_, o any) { p.setScore(o) },
			DeleteFunc: p.deleteScore,
		}},
		{f.Cluster().V1beta1().Placements().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    p.setPlacement,
			UpdateFunc: func(_, o any) { p.setPlacement(o) },
			DeleteFunc: p.deletePlacement,
		}},
		{f.Cluster().V1beta1().PlacementDecisions().Informer(), cache.ResourceEventHandlerFuncs{
			AddFunc:    p.setDecision,
			UpdateFunc: func(_, o any) { p.setDecision(o) },
			DeleteFunc: p.deleteDecision,
		}},
	}
	for _, h := range handlers {
		if _, err := h.inf.AddEventHandler(h.h); err != nil {
			p.log.Error("informer handler", "err", err)
		}
	}
	f.Start(ctx.Done())
	for typ, ok := range f.WaitForCacheSync(ctx.Done()) {
		if !ok {
			p.log.Warn("informer did not sync", "type", typ.String())
			f.Shutdown()
			return
		}
	}
	p.mu.Lock()
	p.synced = true
	p.mu.Unlock()
	p.log.Info("watching the hub", "scores", len(p.scoresSnapshot().Columns))
	// Scores expire without their objects changing: a tick lets open pages and the Placements'
	// explanations see that (browsers also age cells on their own between ticks).
	t := time.NewTicker(time.Second)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			f.Shutdown()
			return
		case <-t.C:
			p.expireTick()
		}
	}
}

// Ready is nil once the hub's objects have been listed.
func (p *Page) Ready() error {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.synced {
		return errors.New("listing AddOnPlacementScores, Placements and PlacementDecisions")
	}
	return nil
}

// Handle records a CloudEvent for the event stream. Every CloudEvent is shown, whatever its type
// or data, and answered 202 with no reply: the page emits nothing, so it can take everything the
// broker carries without making a loop.
func (p *Page) Handle(_ context.Context, e event.Event) function.Response {
	v := viewEvent(e, p.opts.Now())
	p.mu.Lock()
	p.seq++
	v.Seq = p.seq
	p.events = trimEvents(append(p.events, v), p.opts.Events)
	p.notifyLocked()
	p.mu.Unlock()
	return function.Response{Status: http.StatusAccepted}
}

// trimEvents drops the oldest events beyond max, routine ones first: under a steady flow of
// updates and answers, the refusals people come to the page for would otherwise scroll out
// within minutes. Refusals keep at most half the room.
func trimEvents(evs []EventView, max int) []EventView {
	if len(evs) <= max {
		return evs
	}
	refusals := 0
	for _, e := range evs {
		if e.Refusal {
			refusals++
		}
	}
	dropRefusal := refusals > max/2 || refusals == len(evs)
	for i, e := range evs {
		if e.Refusal == dropRefusal {
			return append(evs[:i:i], evs[i+1:]...)
		}
	}
	return evs[1:]
}

// notifyLocked wakes every stream. Call with mu held.
func (p *Page) notifyLocked() {
	close(p.changed)
	p.changed = make(chan struct{})
}

// expireTick wakes the streams when a score has passed its validUntil since the last tick: a
// Placement then counts it 0, though no object changed.
func (p *Page) expireTick() {
	p.mu.Lock()
	defer p.mu.Unlock()
	now := p.opts.Now()
	last := p.lastTick
	p.lastTick = now
	for _, so := range p.scores {
		for _, c := range so.scores {
			if c.ValidUntil != nil && !c.ValidUntil.After(now) && c.ValidUntil.After(last) {
				p.scoresVer++
				p.notifyLocked()
				return
			}
		}
	}
}

func (p *Page) setScore(o any) {
	a, ok := o.(*clusterv1alpha1.AddOnPlacementScore)
	if !ok {
		return
	}
	so := fromAddOnPlacementScore(a)
	p.mu.Lock()
	defer p.mu.Unlock()
	k := a.Namespace + "/" + a.Name
	if prev, ok := p.scores[k]; ok {
		refreshed(prev, so, p.opts.Now())
	}
	p.scores[k] = so
	p.scoresVer++
	p.notifyLocked()
}

func (p *Page) deleteScore(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	a, ok := o.(*clusterv1alpha1.AddOnPlacementScore)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.scores, a.Namespace+"/"+a.Name)
	p.scoresVer++
	p.notifyLocked()
}

func (p *Page) placement(ns, name string) *placementState {
	k := ns + "/" + name
	ps := p.placements[k]
	if ps == nil {
		ps = &placementState{namespace: ns, name: name, decisions: map[string][]string{}}
		p.placements[k] = ps
	}
	return ps
}

func (p *Page) setPlacement(o any) {
	pl, ok := o.(*clusterv1beta1.Placement)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.placement(pl.Namespace, pl.Name)
	ps.mode, ps.prioritizers = placementPolicy(pl)
	ps.numberOf = pl.Spec.NumberOfClusters
	if !ps.known {
		// Decisions listed before their Placement were explained without its policy.
		v := p.scoresViewLocked()
		var before []string
		for i := range ps.history {
			ps.history[i].Why = why(ps.prioritizers, v, ps.history[i].Clusters, p.builtInsLocked(ps, before))
			before = ps.history[i].Clusters
		}
	}
	ps.known = true
	p.placeVer++
	p.notifyLocked()
}

func (p *Page) deletePlacement(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	pl, ok := o.(*clusterv1beta1.Placement)
	if !ok {
		return
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	delete(p.placements, pl.Namespace+"/"+pl.Name)
	p.placeVer++
	p.notifyLocked()
}

func (p *Page) setDecision(o any) {
	d, ok := o.(*clusterv1beta1.PlacementDecision)
	if !ok {
		return
	}
	name := d.Labels[clusterv1beta1.PlacementLabel]
	if name == "" {
		return
	}
	var cs []string
	for _, c := range d.Status.Decisions {
		cs = append(cs, c.ClusterName)
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	ps := p.placement(d.Namespace, name)
	ps.decisions[d.Name] = cs
	p.decisionChangedLocked(ps)
}

func (p *Page) deleteDecision(o any) {
	if d, ok := o.(cache.DeletedFinalStateUnknown); ok {
		o = d.Obj
	}
	d, ok := o.(*clusterv1beta1.PlacementDecision)
	if !ok {
		return
	}
	name := d.Labels[clusterv1beta1.PlacementLabel]
	p.mu.Lock()
	defer p.mu.Unlock()
	ps, ok := p.placements[d.Namespace+"/"+name]
	if !ok {
		return
	}
	delete(ps.decisions, d.Name)
	p.decisionChangedLocked(ps)
}

// decisionChangedLocked records a new decision of ps, with the scores that stand behind it now.
func (p *Page) decisionChangedLocked(ps *placementState) {
	cur := decided(ps.decisions)
	if ps.decided && sameClusters(cur, ps.current) {
		return
	}
	before := ps.current
	ps.decided, ps.current = true, cur
	p.placeVer++
	p.notifyLocked()
	if len(ps.history) == 0 && len(cur) == 0 {
		// The controller creates a Placement's PlacementDecision empty, then fills it: the
		// timeline starts at the first choice.
		return
	}
	// Explained as the controller weighed it when it decided: Steady still held the clusters before.
	d := Decision{At: p.opts.Now(), Clusters: cur, Why: why(ps.prioritizers, p.scoresViewLocked(), cur, p.builtInsLocked(ps, before))}
	ps.history = append(ps.history, d)
	if over := len(ps.history) - p.opts.History; over > 0 {
		ps.history = append(ps.history[:0:0], ps.history[over:]...)
	}
}

// builtInsLocked is what Steady and Balance read when the controller schedules ps while its
// decisions hold the clusters of holding: Balance counts the decisions of every other Placement
// the page knows (it watches them all), as the controller does.
func (p *Page) builtInsLocked(ps *placementState, holding []string) builtIns {
	b := builtIns{steady: map[string]bool{}, others: map[string]int64{}}
	for _, c := range holding {
		b.steady[c] = true
	}
	for _, q := range p.placements {
		if q == ps {
			continue
		}
		for _, cs := range q.decisions {
			for _, c := range cs {
				b.others[c]++
			}
		}
	}
	return b
}

func (p *Page) scoresViewLocked() ScoresView { return scoresView(p.scores, p.opts.Now()) }

func (p *Page) scoresSnapshot() ScoresView {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.scoresViewLocked()
}

// placementsViewLocked explains every known Placement's current decision with the scores of now.
func (p *Page) placementsViewLocked(v ScoresView) []PlacementView {
	out := []PlacementView{}
	for _, k := range sortedKeys(p.placements) {
		ps := p.placements[k]
		if !ps.known {
			continue
		}
		pv := PlacementView{Namespace: ps.namespace, Name: ps.name, Mode: ps.mode, NumberOfClusters: ps.numberOf,
			Prioritizers: append([]Prioritizer{}, ps.prioritizers...), History: append([]Decision{}, ps.history...)}
		// Explained as the controller weighs it whenever it schedules again: Steady holds the
		// current clusters, which is why a decision stays until another cluster leads by more.
		pv.Current = Decision{Clusters: append([]string{}, ps.current...), Why: why(ps.prioritizers, v, ps.current, p.builtInsLocked(ps, ps.current))}
		if n := len(ps.history); n > 0 {
			pv.Current.At = ps.history[n-1].At
		}
		out = append(out, pv)
	}
	return out
}
