package oidc

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"sort"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"go.uber.org/zap"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"knative.dev/eventing/pkg/apis/eventing/v1alpha1"
	"knative.dev/eventing/pkg/apis/feature"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	"knative.dev/eventing/pkg/auth"
	"knative.dev/eventing/pkg/eventfilter"
	"knative.dev/eventing/pkg/eventfilter/subscriptionsapi"
	"knative.dev/pkg/apis"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/pkg/agentgateway"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// policies are oidc/eventpolicies.yaml's EventPolicies, typed.
func policies(t *testing.T) []v1alpha1.EventPolicy {
	t.Helper()
	var out []v1alpha1.EventPolicy
	for _, o := range read(t, "oidc/eventpolicies.yaml") {
		var p v1alpha1.EventPolicy
		raw, _ := json.Marshal(o.Object)
		if err := json.Unmarshal(raw, &p); err != nil {
			t.Fatal(err)
		}
		out = append(out, p)
	}
	return out
}

// sender is an identity the manifests send as, and what it sends: its legitimate events, and
// what its policy must refuse.
type sender struct {
	subject      string
	what         string
	legitimate   []event.Event
	illegitimate []event.Event
	// owns are the resources its deployment lets it score.
	owns []string
}

func ce(typ string, ext map[string]string) event.Event {
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetSource("test")
	e.SetType(typ)
	for k, v := range ext {
		e.SetExtension(k, v)
	}
	return e
}

// from is e with source src.
func from(src string, e event.Event) event.Event {
	e = e.Clone()
	e.SetSource(src)
	return e
}

// posing are sources a sender may try to pass its own events off under: an agent's (whose
// never-expiring scores the writer retires by source), another function's, another schedule's.
var posing = []string{agentgateway.SourcePrefix + "scoreflow-dsf-agent/cluster2", "scoreflow/static-scorer", "scoreflow/another-function",
	"/apis/v1/namespaces/scoreflow/pingsources/another-schedule"}

// bindSources makes s's legitimate events carry its own source and adds each of them, under every
// source of posing but its own, to what it must be refused.
func bindSources(s sender, own string) sender {
	for i, e := range s.legitimate {
		s.legitimate[i] = from(own, e)
		for _, src := range posing {
			agents := strings.HasPrefix(own, agentgateway.SourcePrefix)
			if src != own && (!agents || !strings.HasPrefix(src, agentgateway.SourcePrefix)) {
				s.illegitimate = append(s.illegitimate, from(src, e))
			}
		}
	}
	return s
}

// Types a sender may be tempted to send: every type of the contract and the optimizer's.
var allTypes = []string{contract.TypePing, contract.TypeMetricChanged, contract.TypeScoreUpdated, contract.TypeScoreFailed,
	contract.TypeWriteDone, contract.TypeWriteFailed, optimizer.TypeRequested, optimizer.TypeDone, optimizer.TypeFailed,
	optimizer.TypeResetRequested, optimizer.TypeResetDone, "dev.knative.apiserver.resource.update"}

// senders derives, from deploy/ and triggers/, every identity that sends to the Broker and what
// it may send: PingSources their pings for their scorer; the ApiServerSource its apiserver events;
// each Service or Deployment (its SinkBinding's identity, and a Service's Trigger's for its replies) the types its
// scoreflow.io/emits annotation names, score.updated only for the resources its deployment
// names (RESOURCES, the agent gateway's table, from /scoreflow/agents/, or any the dsf-bridge's
// scorers file names). Each sends under its
// own source only: scoreflow/<function>, the PingSource's, the agent gateway's agents'.
func senders(t *testing.T) []sender {
	t.Helper()
	var out []sender
	emits := map[string][]string{}
	owns := map[string][]string{}
	anyResource := map[string]bool{} // senders that may send any resource, decided beyond the Broker
	for _, o := range read(t, "deploy") {
		switch o.GetKind() {
		case "Service", "Deployment": // a function, or a source (the metric-watcher)
			if a := o.GetAnnotations()["scoreflow.io/emits"]; a != "" {
				emits[o.GetName()] = strings.Split(a, ",")
			}
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			vars, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
			for _, v := range vars {
				if m := v.(map[string]any); m["name"] == "RESOURCES" {
					owns[o.GetName()] = strings.Split(m["value"].(string), ",")
				}
			}
		case "ConfigMap":
			if o.GetName() == "dsf-bridge" {
				// The bridge writes the resources its scorers file's specs name (pkg/dsf), which
				// the bridge alone checks: any name, such as a new scorer's no manifest lists.
				anyResource["dsf-bridge"] = true
			}
			if o.GetName() == "agent-gateway" {
				raw, _, _ := unstructured.NestedString(o.Object, "data", "agents.yaml")
				var table agentgateway.Table
				if err := yaml.UnmarshalStrict([]byte(raw), &table); err != nil {
					t.Fatal(err)
				}
				for _, a := range table.Agents {
					owns["agent-gateway"] = append(owns["agent-gateway"], a.Resources...)
					// Resources the hub's objects decide, which the gateway alone checks: any
					// name, such as a DynamicScorer's no manifest lists.
					if a.ResourcesFrom != nil {
						anyResource["agent-gateway"] = true
					}
				}
			}
		}
	}
	subject := func(o *unstructured.Unstructured) string {
		return authtest.Subject(ns, auth.GetOIDCServiceAccountNameForResource(o.GroupVersionKind(), metav1.ObjectMeta{Name: o.GetName(), Namespace: ns}))
	}
	serviceSends := func(svc string) (legit, not []event.Event) {
		for _, typ := range allTypes {
			if !contains(emits[svc], typ) {
				not = append(not, ce(typ, nil))
				continue
			}
			if typ != contract.TypeScoreUpdated {
				legit = append(legit, ce(typ, nil))
				continue
			}
			resources := owns[svc]
			if anyResource[svc] {
				resources = append(resources, "a-scorer-nobody-listed")
			}
			if len(resources) == 0 {
				t.Errorf("%s sends score.updated and its deployment names no resources", svc)
			}
			for _, r := range resources {
				legit = append(legit, ce(typ, map[string]string{contract.ExtResource: r}))
			}
			if !anyResource[svc] {
				not = append(not, from(sourceOf(svc), ce(typ, map[string]string{contract.ExtResource: "someone-elses"})))
			}
			not = append(not, from(sourceOf(svc), ce(typ, nil)))
			if svc == "agent-gateway" {
				// Not from an agent's source: its own function source, or one merely containing
				// the agents' prefix.
				for _, src := range []string{"scoreflow/agent-gateway", "/x" + agentgateway.SourcePrefix + "a/cluster1"} {
					not = append(not, from(src, ce(typ, map[string]string{contract.ExtResource: resources[0]})))
				}
			}
		}
		return legit, not
	}
	for _, o := range read(t, "deploy") {
		switch o.GetKind() {
		case "PingSource":
			scorer, _, _ := unstructured.NestedString(o.Object, "spec", "ceOverrides", "extensions", "scorer")
			own := sourcesv1.PingSourceSource(ns, o.GetName())
			s := sender{subject: subject(o), what: "PingSource " + o.GetName(),
				legitimate:   []event.Event{ce(contract.TypePing, map[string]string{"scorer": scorer})},
				illegitimate: []event.Event{from(own, ce(contract.TypePing, map[string]string{"scorer": "another-scorer"})), from(own, ce(contract.TypePing, nil))}}
			for _, typ := range allTypes[1:] {
				s.illegitimate = append(s.illegitimate, from(own, ce(typ, map[string]string{"scorer": scorer})))
			}
			out = append(out, bindSources(s, own))
		case "ApiServerSource":
			// Its events' source is the address of the API server it watches.
			const own = "https://10.96.0.1:443"
			s := sender{subject: subject(o), what: "ApiServerSource " + o.GetName(),
				legitimate: []event.Event{ce("dev.knative.apiserver.resource.add", nil), ce("dev.knative.apiserver.resource.update", nil), ce("dev.knative.apiserver.resource.delete", nil)}}
			for _, typ := range allTypes[:len(allTypes)-1] {
				s.illegitimate = append(s.illegitimate, from(own, ce(typ, nil)))
			}
			out = append(out, bindSources(s, own))
		case "SinkBinding":
			svc, _, _ := unstructured.NestedString(o.Object, "spec", "subject", "name")
			legit, not := serviceSends(svc)
			out = append(out, bindSources(sender{subject: subject(o), what: "SinkBinding of " + svc, legitimate: legit, illegitimate: not, owns: owns[svc]}, sourceOf(svc)))
		}
	}
	for _, tr := range read(t, "oidc/triggers") {
		if a, _, _ := unstructured.NestedString(tr.Object, "spec", "subscriber", "audience"); a == "" {
			continue // its subscriber replies nothing the broker takes: not admitted
		}
		svc, _, _ := unstructured.NestedString(tr.Object, "spec", "subscriber", "ref", "name")
		legit, not := serviceSends(svc)
		out = append(out, bindSources(sender{subject: subject(tr), what: "Trigger of " + svc + " (its replies)", legitimate: legit, illegitimate: not, owns: owns[svc]}, sourceOf(svc)))
	}
	return out
}

// sourceOf is the CloudEvents source of what Service svc sends: function.Function's, or for the
// agent gateway an agent's.
func sourceOf(svc string) string {
	if svc == "agent-gateway" {
		return agentgateway.SourcePrefix + "scoreflow-latency-agent/cluster1"
	}
	return (&function.Function{Name: svc}).Source()
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if strings.TrimSpace(x) == s {
			return true
		}
	}
	return false
}

// TestEventPoliciesLetEachSenderSayOnlyItsOwn evaluates oidc/eventpolicies.yaml as the broker
// ingress does (knative.dev/eventing's SubjectAndFiltersPass and filter code): every sender of the
// manifests is named by exactly one policy, which has exactly one cesql, exact or prefix filter;
// each sender's own events pass; its events of other types, a ping for another scorer, a
// score.updated for a resource its deployment does not name or without the scoreflowresource
// extension, an agent's score not from the gateway's agent source, and optimize.* from anyone are
// refused.
func TestEventPoliciesLetEachSenderSayOnlyItsOwn(t *testing.T) {
	ps := policies(t)
	named := map[string][]string{} // subject -> policies naming it
	var swf []auth.SubjectsWithFilters
	for _, p := range ps {
		if len(p.Spec.Filters) != 1 {
			t.Errorf("EventPolicy %s has %d filters, want exactly one", p.Name, len(p.Spec.Filters))
		}
		for _, f := range p.Spec.Filters {
			if len(f.All) > 0 || len(f.Any) > 0 || f.Not != nil || (f.CESQL == "" && len(f.Exact) == 0 && len(f.Prefix) == 0) || len(f.Suffix) > 0 {
				t.Errorf("EventPolicy %s: filter %+v is not one cesql, exact or prefix", p.Name, f)
			}
		}
		var subs []string
		for _, f := range p.Spec.From {
			if f.Sub == nil {
				t.Errorf("EventPolicy %s names a sender by ref, not sub", p.Name)
				continue
			}
			named[*f.Sub] = append(named[*f.Sub], p.Name)
			subs = append(subs, *f.Sub)
		}
		swf = append(swf, auth.SubjectsWithFilters{Subjects: subs, Filters: p.Spec.Filters})
	}
	for sub, in := range named {
		if len(in) > 1 {
			t.Errorf("%s is named by %d EventPolicies (%v): the ingress would judge it by whichever comes first", sub, len(in), in)
		}
	}
	logger := zap.NewNop().Sugar()
	pass := func(sub string, e event.Event) bool {
		return auth.SubjectAndFiltersPass(context.Background(), sub, swf, &e, logger)
	}
	ss := senders(t)
	if len(ss) < 20 {
		t.Fatalf("only %d senders found in the manifests", len(ss))
	}
	for _, s := range ss {
		switch {
		case len(s.legitimate) == 0:
			// It emits nothing (cloudevents-player: its SinkBinding only tells the player's form
			// where the Broker is): no policy may name it, so everything it posts is refused.
			if len(named[s.subject]) > 0 {
				t.Errorf("%s emits nothing, yet EventPolicies %v name %s", s.what, named[s.subject], s.subject)
			}
		case len(named[s.subject]) == 0:
			t.Errorf("%s (%s) is named by no EventPolicy", s.what, s.subject)
			continue
		}
		for _, e := range s.legitimate {
			if !pass(s.subject, e) {
				t.Errorf("%s: its own %s (extensions %v) is refused", s.what, e.Type(), e.Extensions())
			}
		}
		for _, e := range s.illegitimate {
			if pass(s.subject, e) {
				t.Errorf("%s may send %s from %s with extensions %v", s.what, e.Type(), e.Source(), e.Extensions())
			}
		}
	}
	var unused []string
	for sub := range named {
		found := false
		for _, s := range ss {
			found = found || s.subject == sub
		}
		if !found {
			unused = append(unused, sub)
		}
	}
	sort.Strings(unused)
	if len(unused) > 0 {
		t.Errorf("EventPolicies name %v, which no manifest sends as", unused)
	}
	// The resources a policy admits are exactly those its senders' deployments name: one more
	// would let a scorer write a resource no deployment gave it.
	bySubject := map[string]sender{}
	for _, s := range ss {
		bySubject[s.subject] = s
	}
	for _, p := range ps {
		expr := p.Spec.Filters[0].CESQL
		_, list, ok := strings.Cut(expr, contract.ExtResource+" IN (")
		if !ok {
			continue
		}
		list, _, _ = strings.Cut(list, ")")
		var admitted []string
		for _, r := range strings.Split(list, ",") {
			admitted = append(admitted, strings.Trim(strings.TrimSpace(r), "'"))
		}
		var owned []string
		for _, f := range p.Spec.From {
			for _, r := range bySubject[*f.Sub].owns {
				if !contains(owned, r) {
					owned = append(owned, r)
				}
			}
		}
		sort.Strings(admitted)
		sort.Strings(owned)
		if strings.Join(admitted, ",") != strings.Join(owned, ",") {
			t.Errorf("EventPolicy %s admits resources %v; its senders' deployments name %v", p.Name, admitted, owned)
		}
	}
	// A filter that Knative's code cannot build refuses everything, silently: build each.
	for _, p := range ps {
		f := subscriptionsapi.CreateSubscriptionsAPIFilters(zap.NewNop(), p.Spec.Filters)
		if f.Filter(context.Background(), ce("x", nil)) == eventfilter.NoFilter {
			t.Errorf("EventPolicy %s: Knative materialised no filter from %s", p.Name, fmt.Sprint(p.Spec.Filters))
		}
		f.Cleanup()
	}
}

// TestSecurityDocsCustomScorerPolicy: the EventPolicy docs/security.md gives for a custom scorer
// passes Knative's validation and, evaluated by Knative's filter code, admits its scorer's
// score.updated of its resource and score.failed from its own source, and refuses its score of
// another resource, a score without the extension, pings, and its own events under another
// source (an agent's, a scoreflow function's).
func TestSecurityDocsCustomScorerPolicy(t *testing.T) {
	raw, err := os.ReadFile(repo + "/docs/security.md")
	if err != nil {
		t.Fatal(err)
	}
	var p *v1alpha1.EventPolicy
	for _, block := range strings.Split(string(raw), "```yaml\n")[1:] {
		block, _, _ = strings.Cut(block, "```")
		var candidate v1alpha1.EventPolicy
		if err := yaml.UnmarshalStrict([]byte(dedent(block)), &candidate); err != nil {
			t.Fatalf("docs/security.md: %v\n%s", err, block)
		}
		if candidate.Kind == "EventPolicy" && candidate.Name == "scoreflow-scorer-my-scorer" {
			p = &candidate
		}
	}
	if p == nil {
		t.Fatal("docs/security.md has no EventPolicy scoreflow-scorer-my-scorer")
	}
	ctx := feature.ToContext(context.Background(), feature.Flags{feature.OIDCAuthentication: feature.Enabled})
	if err := p.Validate(apis.WithinCreate(ctx)); err != nil {
		t.Fatalf("Knative refuses the documented EventPolicy: %v", err)
	}
	const sub = "system:serviceaccount:scoreflow:my-scorer-oidc-eventing.knative.dev-trigger"
	if len(p.Spec.From) != 1 || p.Spec.From[0].Sub == nil || *p.Spec.From[0].Sub != sub {
		t.Fatalf("the documented policy admits %+v, want %s", p.Spec.From, sub)
	}
	swf := []auth.SubjectsWithFilters{{Subjects: []string{sub}, Filters: p.Spec.Filters}}
	const own = "my-scorer"
	cost := ce(contract.TypeScoreUpdated, map[string]string{contract.ExtResource: "cost"})
	for _, c := range []struct {
		e    event.Event
		pass bool
	}{
		{from(own, cost), true},
		{from(own, ce(contract.TypeScoreFailed, nil)), true},
		{from(own, ce(contract.TypeScoreUpdated, map[string]string{contract.ExtResource: "cpu-idle"})), false},
		{from(own, ce(contract.TypeScoreUpdated, nil)), false},
		{from(own, ce(contract.TypePing, map[string]string{"scorer": "my-scorer"})), false},
		{from(own, ce(optimizer.TypeRequested, nil)), false},
		{from(agentgateway.SourcePrefix+"scoreflow-latency-agent/cluster1", cost), false},
		{from("scoreflow/static-scorer", cost), false},
		{from(agentgateway.SourcePrefix+"x", ce(contract.TypeScoreFailed, nil)), false},
	} {
		if got := auth.SubjectAndFiltersPass(context.Background(), sub, swf, &c.e, zap.NewNop().Sugar()); got != c.pass {
			t.Errorf("%s from %s %v: admitted %v, want %v", c.e.Type(), c.e.Source(), c.e.Extensions(), got, c.pass)
		}
	}
}

// dedent removes the indentation of a block nested in a Markdown list.
func dedent(s string) string {
	lines := strings.Split(s, "\n")
	indent := -1
	for _, l := range lines {
		if strings.TrimSpace(l) == "" {
			continue
		}
		if n := len(l) - len(strings.TrimLeft(l, " ")); indent < 0 || n < indent {
			indent = n
		}
	}
	for i, l := range lines {
		if len(l) >= indent && indent > 0 {
			lines[i] = l[indent:]
		}
	}
	return strings.Join(lines, "\n")
}
