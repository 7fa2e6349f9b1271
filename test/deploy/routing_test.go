package deploy

import (
	"context"
	"fmt"
	"sort"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"go.uber.org/zap"
	eventingduckv1 "knative.dev/eventing/pkg/apis/duck/v1"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	"knative.dev/eventing/pkg/apis/sources"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	"knative.dev/eventing/pkg/eventfilter"
	"knative.dev/eventing/pkg/eventfilter/attributes"
	"knative.dev/eventing/pkg/eventfilter/subscriptionsapi"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

const player = "cloudevents-player"

// page is the scores page: it takes every io.scoreflow event, and no other.
const page = "scores-page"

// route is one Trigger with its filter materialised by knative.dev/eventing's own code, chosen
// the way the broker's filter handler chooses: spec.filters when set, else the legacy attribute
// filter, else none. (test/e2e routes the same Triggers through the real broker.)
type route struct {
	trigger *eventingv1.Trigger
	filter  eventfilter.Filter
}

func routes(t testing.TB, triggers []manifests.Item[*eventingv1.Trigger]) []route {
	var out []route
	for _, it := range triggers {
		tr := it.Object
		var f eventfilter.Filter
		switch {
		case len(tr.Spec.Filters) > 0:
			f = subscriptionsapi.CreateSubscriptionsAPIFilters(zap.NewNop(), tr.Spec.Filters)
		case tr.Spec.Filter != nil && len(tr.Spec.Filter.Attributes) > 0:
			f = attributes.NewAttributesFilter(tr.Spec.Filter.Attributes)
		default:
			f = subscriptionsapi.NewNoFilter()
		}
		// No f.Cleanup: the any/all filters reorder their children from a goroutine of their own
		// (swapWithEarlierFilter) while Cleanup walks the children unlocked, so a Cleanup soon
		// after Filter can close one child twice and panic. The broker keeps a Trigger's filter
		// for the Trigger's life; here a filter lives as long as the test process.
		out = append(out, route{trigger: tr, filter: f})
	}
	return out
}

// matching returns the Triggers an event passes, as the broker would deliver it.
func matching(rs []route, e cloudevents.Event) []*eventingv1.Trigger {
	var out []*eventingv1.Trigger
	for _, r := range rs {
		if r.filter.Filter(context.Background(), e) != eventfilter.FailFilter {
			out = append(out, r.trigger)
		}
	}
	return out
}

func subscribers(trs []*eventingv1.Trigger) []string {
	var out []string
	for _, tr := range trs {
		out = append(out, tr.Spec.Subscriber.Ref.Name)
	}
	sort.Strings(out)
	return out
}

// newEvent is an event as a scoreflow function sends it: its source names the function.
func newEvent(typ, fn string) cloudevents.Event {
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetType(typ)
	e.SetSource("scoreflow/" + fn)
	e.SetTime(time.Now())
	return e
}

// pingEvent is the event a PingSource sends (pkg/adapter/mtping): its type and source, with its
// ceOverrides extensions.
func pingEvent(ps *sourcesv1.PingSource) cloudevents.Event {
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetType(sourcesv1.PingSourceEventType)
	e.SetSource(sourcesv1.PingSourceSource(ps.Namespace, ps.Name))
	if o := ps.Spec.CloudEventOverrides; o != nil {
		for k, v := range o.Extensions {
			e.SetExtension(k, v)
		}
	}
	_ = e.SetData(ps.Spec.ContentType, []byte(ps.Spec.Data))
	return e
}

// apiServerEvents are the events the ApiServerSource adapter makes for an object in Resource mode,
// with the attributes knative.dev/eventing/pkg/adapter/apiserver/events.makeEvent sets: the type
// per verb, the API server as source, a self-link subject and the extensions kind, apiversion,
// name and namespace. (That package is not imported: it pulls in modules go.mod does not have.)
func apiServerEvents(apiVersion, kind, plural, name string) map[string]cloudevents.Event {
	out := map[string]cloudevents.Event{}
	for verb, typ := range map[string]string{
		"add": sources.ApiServerSourceAddEventType, "update": sources.ApiServerSourceUpdateEventType, "delete": sources.ApiServerSourceDeleteEventType,
	} {
		e := cloudevents.NewEvent()
		e.SetID("1")
		e.SetType(typ)
		e.SetSource("https://10.96.0.1:443")
		e.SetSubject(fmt.Sprintf("/apis/%s/namespaces//%s/%s", apiVersion, plural, name))
		e.SetExtension("kind", kind)
		e.SetExtension("apiversion", apiVersion)
		e.SetExtension("name", name)
		e.SetExtension("namespace", "")
		out[verb] = e
	}
	return out
}

// TestRouting: every event scoreflow produces reaches exactly the functions meant for it, through
// the Triggers' real filters; cloudevents-player sees everything.
func TestRouting(t *testing.T) {
	s := load(t, setHub) // the hub's PingSources
	rs := routes(t, s.Triggers)
	type tc struct {
		name  string
		event cloudevents.Event
		want  []string
	}
	var tests []tc
	for _, it := range s.PingSources {
		ps := it.Object
		var fn string
		if o := ps.Spec.CloudEventOverrides; o != nil {
			fn = o.Extensions["scorer"]
		}
		if fn == "" {
			t.Errorf("%s: PingSource %s has no ceOverrides extension `scorer`: no Trigger takes its events", it.Source, ps.Name)
			continue
		}
		tests = append(tests, tc{"ping " + ps.Name, pingEvent(ps), []string{player, fn}})
	}
	stray := pingEvent(&sourcesv1.PingSource{})
	stray.SetSource(sourcesv1.PingSourceSource(Namespace, "someone-elses"))
	tests = append(tests, tc{"ping without scorer extension", stray, []string{player}})
	otherScorer := pingEvent(s.PingSources[0].Object)
	otherScorer.SetExtension("scorer", "no-such-scorer")
	tests = append(tests, tc{"ping for a scorer that does not exist", otherScorer, []string{player}})

	for verb, e := range apiServerEvents("cluster.open-cluster-management.io/v1", "ManagedCluster", "managedclusters", "cluster1") {
		want := []string{"health-scorer", player}
		if verb == "delete" {
			want = []string{player} // a deleted cluster has nothing to score
		}
		tests = append(tests, tc{"ManagedCluster " + verb, e, want})
	}
	for verb, e := range apiServerEvents("v1", "Namespace", "namespaces", "cluster1") {
		tests = append(tests, tc{"Namespace " + verb + " (another ApiServerSource)", e, []string{player}})
	}
	tests = append(tests,
		tc{"metric.changed from metric-watcher", newEvent(contract.TypeMetricChanged, "metric-watcher"), []string{player, page, "promql-scorer", "resource-scorer"}},
		tc{"metric.changed from alertmanager-adapter", newEvent(contract.TypeMetricChanged, "alertmanager-adapter"), []string{player, page, "promql-scorer", "resource-scorer"}},
		tc{"score.updated", newEvent(contract.TypeScoreUpdated, "promql-scorer"), []string{player, page, "score-writer"}},
		tc{"write.done", newEvent(contract.TypeWriteDone, "score-writer"), []string{player, page}},
		tc{"write.failed", newEvent(contract.TypeWriteFailed, "score-writer"), []string{player, page}},
		tc{"write.failed from dead-letter", newEvent(contract.TypeWriteFailed, deadLetter), []string{player, page}},
		tc{"score.failed", newEvent(contract.TypeScoreFailed, "health-scorer"), []string{player, page}},
		tc{"optimize.requested", newEvent(optimizer.TypeRequested, "scoreflow-cli"), []string{player, page, "optimizer"}},
		tc{"optimize.reset.requested", newEvent(optimizer.TypeResetRequested, "scoreflow-cli"), []string{player, page, "optimizer"}},
		tc{"optimize.done", newEvent(optimizer.TypeDone, "optimizer"), []string{player, page}},
		tc{"optimize.failed", newEvent(optimizer.TypeFailed, "optimizer"), []string{player, page}},
		tc{"optimize.reset.done", newEvent(optimizer.TypeResetDone, "optimizer"), []string{player, page}},
	)
	agent := newEvent(contract.TypeScoreUpdated, "latency-scorer/cluster1")
	agent.SetExtension("scoreflowagent", "latency")
	tests = append(tests, tc{"score.updated from a managed-cluster agent", agent, []string{player, page, "score-writer"}})

	sort.Slice(tests, func(i, j int) bool { return tests[i].name < tests[j].name })
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			sort.Strings(tt.want)
			if got := subscribers(matching(rs, tt.event)); strings.Join(got, ",") != strings.Join(tt.want, ",") {
				t.Errorf("delivered to %v, want %v", got, tt.want)
			}
		})
	}
}

// TestFilterDialects: every exact, prefix and suffix filter names exactly one attribute, as the
// CloudEvents Subscriptions API requires (knative's webhook accepts more, other brokers may not).
func TestFilterDialects(t *testing.T) {
	s := load(t, setHub)
	var check func(where string, fs []eventingv1.SubscriptionsAPIFilter)
	check = func(where string, fs []eventingv1.SubscriptionsAPIFilter) {
		for i, f := range fs {
			at := fmt.Sprintf("%s[%d]", where, i)
			for dialect, m := range map[string]map[string]string{"exact": f.Exact, "prefix": f.Prefix, "suffix": f.Suffix} {
				if len(m) > 1 {
					t.Errorf("%s.%s has %d attributes: use one per filter, combined with all", at, dialect, len(m))
				}
			}
			check(at+".all", f.All)
			check(at+".any", f.Any)
			if f.Not != nil {
				check(at+".not", []eventingv1.SubscriptionsAPIFilter{*f.Not})
			}
		}
	}
	for _, it := range s.Triggers {
		if it.Object.Spec.Filter != nil {
			t.Errorf("%s: trigger %s uses the legacy spec.filter: use spec.filters", it.Source, it.Object.Name)
		}
		check(it.Source.String()+" filters", it.Object.Spec.Filters)
	}
}

// flow is the event graph of a set: which functions an event from each function can reach, by
// reply or send through the broker (to a Trigger's subscriber) or by failing there (to the
// dead-letter sink of that Trigger's delivery, its own or, when it has none, the broker's).
type flow map[string][]string

func eventFlow(t testing.TB, s *manifests.Set, triggers []manifests.Item[*eventingv1.Trigger]) flow {
	rs := routes(t, triggers)
	brokers := map[string]*eventingv1.Broker{}
	for _, b := range s.Brokers {
		brokers[b.Object.Name] = b.Object
	}
	g := flow{}
	for _, w := range s.Workloads() {
		from := w.ObjectMeta.Name
		for _, typ := range splitList(w.ObjectMeta.Annotations[emitsAnnotation]) {
			for _, tr := range matching(rs, newEvent(typ, from)) {
				g[from] = append(g[from], tr.Spec.Subscriber.Ref.Name)
				if dls := deadLetterSink(tr, brokers[tr.Spec.Broker]); dls != "" {
					g[tr.Spec.Subscriber.Ref.Name] = append(g[tr.Spec.Subscriber.Ref.Name], dls)
				}
			}
		}
	}
	return g
}

// deadLetterSink is the Service an event that tr fails to deliver goes to: the Trigger's delivery
// replaces the broker's as a whole (pkg/reconciler/broker/trigger).
func deadLetterSink(tr *eventingv1.Trigger, b *eventingv1.Broker) string {
	var d *eventingduckv1.DeliverySpec
	switch {
	case tr.Spec.Delivery != nil:
		d = tr.Spec.Delivery
	case b != nil:
		d = b.Spec.Delivery
	}
	if d == nil || d.DeadLetterSink == nil || d.DeadLetterSink.Ref == nil {
		return ""
	}
	return d.DeadLetterSink.Ref.Name
}

// cycle returns a cycle of g, or nil.
func (g flow) cycle() []string {
	const (
		unseen = iota
		onPath
		done
	)
	state := map[string]int{}
	var path []string
	var visit func(n string) []string
	visit = func(n string) []string {
		state[n] = onPath
		path = append(path, n)
		for _, m := range g[n] {
			switch state[m] {
			case onPath:
				i := 0
				for path[i] != m {
					i++
				}
				return append(append([]string(nil), path[i:]...), m)
			case unseen:
				if c := visit(m); c != nil {
					return c
				}
			}
		}
		path = path[:len(path)-1]
		state[n] = done
		return nil
	}
	for _, n := range sortedKeys(g) {
		if state[n] == unseen {
			if c := visit(n); c != nil {
				return c
			}
		}
	}
	return nil
}

// TestNoEventLoops: no event a function emits (scoreflow.io/emits) can, through replies, sends or
// dead-lettering, come back to a function that emitted it. Loops with the knativebrokerttl hop
// count would die after 255 hops; these would not all (the dead-letter function sends new events).
// The checker itself is shown to find the loops that small, plausible mistakes would make.
func TestNoEventLoops(t *testing.T) {
	s := load(t, setHub)
	trig := func(name string) *eventingv1.Trigger {
		it, ok := manifests.Find(s.Triggers, Namespace, name)
		if !ok {
			t.Fatalf("trigger %s not found", name)
		}
		return it.Object.DeepCopy()
	}
	with := func(change func([]manifests.Item[*eventingv1.Trigger]) []manifests.Item[*eventingv1.Trigger]) []manifests.Item[*eventingv1.Trigger] {
		return change(append([]manifests.Item[*eventingv1.Trigger](nil), s.Triggers...))
	}
	replace := func(items []manifests.Item[*eventingv1.Trigger], tr *eventingv1.Trigger) []manifests.Item[*eventingv1.Trigger] {
		for i := range items {
			if items[i].Object.Name == tr.Name {
				items[i].Object = tr
			}
		}
		return items
	}
	tests := []struct {
		name     string
		triggers []manifests.Item[*eventingv1.Trigger]
		loop     bool
	}{
		{"the triggers as deployed", s.Triggers, false},
		{"player inherits the broker's dead-letter sink", with(func(items []manifests.Item[*eventingv1.Trigger]) []manifests.Item[*eventingv1.Trigger] {
			tr := trig(player)
			tr.Spec.Delivery = nil
			return replace(items, tr)
		}), true},
		{"the scores page inherits the broker's dead-letter sink", with(func(items []manifests.Item[*eventingv1.Trigger]) []manifests.Item[*eventingv1.Trigger] {
			tr := trig(page)
			tr.Spec.Delivery = nil
			return replace(items, tr)
		}), true},
		{"writer also takes write results", with(func(items []manifests.Item[*eventingv1.Trigger]) []manifests.Item[*eventingv1.Trigger] {
			tr := trig("score-writer")
			tr.Spec.Filters = []eventingv1.SubscriptionsAPIFilter{{Prefix: map[string]string{"type": "io.scoreflow.score."}}}
			return replace(items, tr)
		}), true},
		{"a scorer takes everything", with(func(items []manifests.Item[*eventingv1.Trigger]) []manifests.Item[*eventingv1.Trigger] {
			tr := trig("health-scorer")
			tr.Spec.Filters = nil
			return replace(items, tr)
		}), true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			g := eventFlow(t, s, tt.triggers)
			c := g.cycle()
			switch {
			case tt.loop && c == nil:
				t.Errorf("no loop found in %v", g)
			case !tt.loop && c != nil:
				t.Errorf("events can loop: %s", strings.Join(c, " -> "))
			}
		})
	}
	// The graph as deployed has the edges the design relies on.
	g := eventFlow(t, s, s.Triggers)
	for _, e := range [][2]string{{"promql-scorer", "score-writer"}, {"score-writer", deadLetter}, {deadLetter, player}, {"metric-watcher", "promql-scorer"}} {
		if !contains(g[e[0]], e[1]) {
			t.Errorf("no flow %s -> %s in %v", e[0], e[1], g)
		}
	}
}
