package oidc

import (
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"knative.dev/eventing/pkg/auth"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/function"
)

const repo = "../.."

// build returns the objects of a kustomization of the repository, as kubectl apply -k builds it.
func build(t *testing.T, dir string) []*unstructured.Unstructured {
	t.Helper()
	if !filepath.IsAbs(dir) {
		dir = filepath.Join(repo, dir)
	}
	items, err := manifests.Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	var out []*unstructured.Unstructured
	for _, it := range items {
		out = append(out, it.Object)
	}
	return out
}

func read(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := knlocal.ReadFiles(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

func key(o *unstructured.Unstructured) string {
	return o.GetAPIVersion() + " " + o.GetKind() + " " + o.GetNamespace() + "/" + o.GetName()
}

// envOf is the first container's env of a Knative Service, by name.
func envOf(svc *unstructured.Unstructured) map[string]string {
	containers, _, _ := unstructured.NestedSlice(svc.Object, "spec", "template", "spec", "containers")
	env := map[string]string{}
	if len(containers) == 0 {
		return env
	}
	vars, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	for _, v := range vars {
		m := v.(map[string]any)
		val, _ := m["value"].(string)
		env[m["name"].(string)] = val
	}
	return env
}

// withoutIdentity is a Service of config/oidc without what sender identity adds to it: the AUTH_
// variables.
func withoutIdentity(svc *unstructured.Unstructured) *unstructured.Unstructured {
	o := svc.DeepCopy()
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	c := containers[0].(map[string]any)
	vars, _, _ := unstructured.NestedSlice(c, "env")
	var kept []any
	for _, v := range vars {
		// AUTH_*: the caller a function verifies; REQUIRE_RESOURCE_ATTRIBUTE: the score-writer
		// takes score.updated only with the scoreflowresource attribute the EventPolicies filter on.
		if name := v.(map[string]any)["name"].(string); !strings.HasPrefix(name, "AUTH_") && name != "REQUIRE_RESOURCE_ATTRIBUTE" {
			kept = append(kept, v)
		}
	}
	if kept == nil {
		delete(c, "env")
	} else {
		c["env"] = kept
	}
	_ = unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers")
	return o
}

// The OIDC variant (config/oidc) is the default (config/default) plus what sender identity needs:
// the same objects with the Broker's EventPolicies and the discovery binding added; each Trigger its
// default twin with only subscriber.audience and the dead-letter sink's audience added, the Broker
// with only the dead-letter sink's audience, every Service with only AUTH_ variables (and the
// score-writer REQUIRE_RESOURCE_ATTRIBUTE); each function that a Trigger with an audience calls gets exactly that audience and that Trigger's OIDC identity (named as Knative names it), plus the account of every Service that
// presents its own token for that audience, in a configuration the function accepts; the dead-letter function takes the dead-letter sink's audience from exactly the Triggers
// whose failed deliveries reach it; the Broker's EventPolicies admit every source (the agent
// gateway's SinkBinding among them: agents never post to the Broker) and every replying Trigger
// of the manifests, and not cloudevents-player.
func TestOIDCVariantMatchesTheManifests(t *testing.T) {
	defaults := map[string]*unstructured.Unstructured{}
	base := map[string]*unstructured.Unstructured{}
	for _, o := range build(t, "config/default") {
		defaults[key(o)] = o
		if o.GetKind() == "Trigger" {
			base[o.GetName()] = o
		}
	}
	oidcObjs := build(t, "config/oidc")
	var variant []*unstructured.Unstructured
	var broker *unstructured.Unstructured
	var policies []*unstructured.Unstructured
	services := map[string]*unstructured.Unstructured{}
	var added []string
	for _, o := range oidcObjs {
		twin, ok := defaults[key(o)]
		if !ok {
			added = append(added, o.GetKind()+" "+o.GetName())
		}
		switch {
		case o.GetKind() == "Trigger":
			variant = append(variant, o)
		case o.GetKind() == "Broker":
			broker = o
		case o.GetKind() == "EventPolicy":
			policies = append(policies, o)
		case o.GetKind() == "Service" && o.GetAPIVersion() == "serving.knative.dev/v1":
			services[o.GetName()] = o
			if ok && !reflect.DeepEqual(withoutIdentity(o).Object, twin.Object) {
				t.Errorf("Service %s differs from config/default's in more than AUTH_ variables and REQUIRE_RESOURCE_ATTRIBUTE", o.GetName())
			}
		case ok && !reflect.DeepEqual(o.Object, twin.Object):
			t.Errorf("%s differs from config/default's", key(o))
		}
		delete(defaults, key(o))
	}
	want := []string{"ClusterRoleBinding scoreflow-oidc-discovery"}
	for _, p := range read(t, "oidc/eventpolicies.yaml") {
		want = append(want, "EventPolicy "+p.GetName())
	}
	sort.Strings(added)
	sort.Strings(want)
	if got := strings.Join(added, ", "); got != strings.Join(want, ", ") {
		t.Errorf("config/oidc adds %s to config/default; want the discovery binding and the EventPolicies of oidc/eventpolicies.yaml", got)
	}
	for k := range defaults {
		t.Errorf("config/oidc lacks %s", k)
	}
	if len(variant) != len(base) {
		t.Fatalf("config/oidc has %d Triggers, config/default %d", len(variant), len(base))
	}
	// The Broker's dead-letter sink serves every Trigger without a delivery of its own.
	dlsAudience, _, _ := unstructured.NestedString(broker.Object, "spec", "delivery", "deadLetterSink", "audience")
	strippedBroker := broker.DeepCopy()
	unstructured.RemoveNestedField(strippedBroker.Object, "spec", "delivery", "deadLetterSink", "audience")
	for _, o := range build(t, "config/default") {
		if o.GetKind() == "Broker" && !reflect.DeepEqual(strippedBroker.Object, o.Object) {
			t.Error("config/oidc's Broker differs from config/default's in more than delivery.deadLetterSink.audience")
		}
	}
	if dlsAudience == "" {
		t.Error("config/oidc's Broker gives its dead-letter sink no audience: the dead-letter function would get no token")
	}
	var deadLettered []string // identities of the Triggers whose failures reach the dead-letter function
	// Services that call a function themselves present a projected token of their own
	// account for its audience (the mcp-server calls the optimizer's JSON API): that function
	// admits them besides its Trigger.
	presenters := map[string][]string{} // audience -> identities
	for _, svc := range services {
		sa, _, _ := unstructured.NestedString(svc.Object, "spec", "template", "spec", "serviceAccountName")
		vols, _, _ := unstructured.NestedSlice(svc.Object, "spec", "template", "spec", "volumes")
		for _, v := range vols {
			sources, _, _ := unstructured.NestedSlice(v.(map[string]any), "projected", "sources")
			for _, src := range sources {
				if a, ok, _ := unstructured.NestedString(src.(map[string]any), "serviceAccountToken", "audience"); ok {
					presenters[a] = append(presenters[a], authtest.Subject(ns, sa))
				}
			}
		}
	}
	var replying []string
	for _, tr := range variant {
		twin, ok := base[tr.GetName()]
		if !ok {
			t.Fatalf("config/oidc has Trigger %s, config/default does not", tr.GetName())
		}
		audience, _, _ := unstructured.NestedString(tr.Object, "spec", "subscriber", "audience")
		stripped := tr.DeepCopy()
		unstructured.RemoveNestedField(stripped.Object, "spec", "subscriber", "audience")
		unstructured.RemoveNestedField(stripped.Object, "spec", "delivery", "deadLetterSink", "audience")
		if !reflect.DeepEqual(stripped.Object, twin.Object) {
			t.Errorf("Trigger %s of config/oidc differs from config/default's in more than subscriber.audience and delivery.deadLetterSink.audience (oidc/triggers/%s.yaml)", tr.GetName(), tr.GetName())
		}
		identity := authtest.Subject(ns, auth.GetOIDCServiceAccountNameForResource(tr.GroupVersionKind(), metav1.ObjectMeta{Name: tr.GetName(), Namespace: ns}))
		if _, own, _ := unstructured.NestedMap(tr.Object, "spec", "delivery"); !own {
			deadLettered = append(deadLettered, identity)
		} else if _, hasDLS, _ := unstructured.NestedMap(tr.Object, "spec", "delivery", "deadLetterSink"); hasDLS {
			deadLettered = append(deadLettered, identity)
			if a, _, _ := unstructured.NestedString(tr.Object, "spec", "delivery", "deadLetterSink", "audience"); a != dlsAudience {
				t.Errorf("Trigger %s of config/oidc: dead-letter sink audience %q, the Broker's is %q", tr.GetName(), a, dlsAudience)
			}
		}
		if audience == "" {
			continue
		}
		replying = append(replying, identity)
		svcName, _, _ := unstructured.NestedString(tr.Object, "spec", "subscriber", "ref", "name")
		env := envOf(services[svcName])
		subjects := append([]string{identity}, presenters[audience]...)
		sort.Strings(subjects[1:])
		if want := strings.Join(subjects, ","); env["AUTH_OIDC"] != "true" || env["AUTH_AUDIENCE"] != audience || env["AUTH_ALLOWED_SUBJECTS"] != want {
			t.Errorf("%s: AUTH_OIDC=%q AUTH_AUDIENCE=%q AUTH_ALLOWED_SUBJECTS=%q; want true, %q, %q",
				svcName, env["AUTH_OIDC"], env["AUTH_AUDIENCE"], env["AUTH_ALLOWED_SUBJECTS"], audience, want)
		}
		delete(presenters, audience)
		for k, v := range env {
			if strings.HasPrefix(k, "AUTH_") {
				t.Setenv(k, v)
			}
		}
		if err := function.New(svcName, "test").Parse(nil); err != nil {
			t.Errorf("%s does not start with its patched environment: %v", svcName, err)
		}
	}
	for a, ids := range presenters {
		t.Errorf("%v present a token for audience %q, which no function verifies", ids, a)
	}
	env := envOf(services["dead-letter"])
	sort.Strings(deadLettered)
	if want := strings.Join(deadLettered, ","); env["AUTH_OIDC"] != "true" || env["AUTH_AUDIENCE"] != dlsAudience || env["AUTH_ALLOWED_SUBJECTS"] != want {
		t.Errorf("dead-letter: AUTH_OIDC=%q AUTH_AUDIENCE=%q AUTH_ALLOWED_SUBJECTS=%q; want true, %q, %q",
			env["AUTH_OIDC"], env["AUTH_AUDIENCE"], env["AUTH_ALLOWED_SUBJECTS"], dlsAudience, want)
	}
	for k, v := range env {
		if strings.HasPrefix(k, "AUTH_") {
			t.Setenv(k, v)
		}
	}
	if err := function.New("dead-letter", "test").Parse(nil); err != nil {
		t.Errorf("dead-letter does not start with its patched environment: %v", err)
	}

	var senders []string
	for _, o := range oidcObjs {
		switch o.GetKind() {
		case "PingSource", "ApiServerSource", "SinkBinding":
			if o.GetKind() == "SinkBinding" && o.GetName() == "cloudevents-player" {
				// Its SinkBinding only tells the player's form where the Broker is. The player
				// presents no token, so the Broker refuses its posts (401): it is no admitted sender.
				continue
			}
			senders = append(senders, authtest.Subject(ns, auth.GetOIDCServiceAccountNameForResource(o.GroupVersionKind(), metav1.ObjectMeta{Name: o.GetName(), Namespace: ns})))
		}
	}
	admitted := map[string]bool{}
	for _, p := range policies {
		from, _, _ := unstructured.NestedSlice(p.Object, "spec", "from")
		for _, f := range from {
			if sub, ok := f.(map[string]any)["sub"].(string); ok {
				admitted[sub] = true
			}
		}
	}
	for _, s := range append(senders, replying...) {
		if !admitted[s] {
			t.Errorf("the Broker's EventPolicies do not admit %s", s)
		}
		delete(admitted, s)
	}
	for s := range admitted {
		t.Errorf("the Broker's EventPolicies admit %s, which no manifest sends as", s)
	}
	if player := services["cloudevents-player"]; player.GetLabels()["networking.knative.dev/visibility"] != "cluster-local" {
		t.Error("the OIDC variant leaves cloudevents-player reachable from outside the cluster")
	}
}

// The overlay of one's own that oidc/README.md shows (keeping an admitted scorer across deploys)
// builds on config/oidc and adds an EventPolicy admitting its subject, alone in that policy.
func TestReadmeOverlayKeepsAnAddition(t *testing.T) {
	raw, err := os.ReadFile(filepath.Join(repo, "oidc", "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	_, section, ok := strings.Cut(string(raw), "## Keep your additions across deploys")
	if !ok {
		t.Fatal("oidc/README.md has no section Keep your additions across deploys")
	}
	section, _, _ = strings.Cut(section, "\n## ")
	var blocks []string
	for _, b := range strings.Split(section, "```yaml\n")[1:] {
		b, _, _ = strings.Cut(b, "```")
		blocks = append(blocks, b)
	}
	if len(blocks) != 2 {
		t.Fatalf("the section has %d yaml blocks, want the kustomization and its EventPolicy", len(blocks))
	}
	const base = "../scoreflow/config/oidc"
	if !strings.Contains(blocks[0], base) || !strings.Contains(blocks[0], "my-scorer-policy.yaml") {
		t.Fatalf("the example does not build on %s with my-scorer-policy.yaml:\n%s", base, blocks[0])
	}
	dir := t.TempDir()
	abs, err := filepath.Abs(filepath.Join(repo, "config", "oidc"))
	if err != nil {
		t.Fatal(err)
	}
	rel, err := filepath.Rel(dir, abs)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "kustomization.yaml"), []byte(strings.Replace(blocks[0], base, rel, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "my-scorer-policy.yaml"), []byte(blocks[1]), 0o644); err != nil {
		t.Fatal(err)
	}
	const want = "system:serviceaccount:scoreflow:my-scorer-oidc-eventing.knative.dev-trigger"
	named := 0
	for _, o := range build(t, dir) {
		if o.GetKind() != "EventPolicy" {
			continue
		}
		from, _, _ := unstructured.NestedSlice(o.Object, "spec", "from")
		for _, f := range from {
			if f.(map[string]any)["sub"] == want {
				named++
				filters, _, _ := unstructured.NestedSlice(o.Object, "spec", "filters")
				if len(filters) != 1 || len(from) != 1 {
					t.Errorf("EventPolicy %s admits %v with filters %v; want the scorer alone, with one filter", o.GetName(), from, filters)
				} else if cesql, _ := filters[0].(map[string]any)["cesql"].(string); !strings.HasPrefix(cesql, "source = ") {
					t.Errorf("EventPolicy %s's filter %v does not bind the scorer's source", o.GetName(), filters[0])
				}
			}
		}
	}
	if named != 1 {
		t.Errorf("%d EventPolicies of the example admit %s, want 1", named, want)
	}
}

// The alertmanager-adapter, which no Trigger calls, verifies its callers in the OIDC variant too:
// whatever reaches it goes to the Broker under the adapter's admitted identity. config/oidc gives it
// its own audience and Alertmanager's identity, in a configuration it accepts.
func TestAlertmanagerAdapterVerifiesCallers(t *testing.T) {
	var svc *unstructured.Unstructured
	for _, o := range build(t, "config/oidc") {
		if o.GetKind() == "Service" && o.GetAPIVersion() == "serving.knative.dev/v1" && o.GetName() == "alertmanager-adapter" {
			svc = o
		}
	}
	if svc == nil {
		t.Fatal("config/oidc has no Service alertmanager-adapter")
	}
	env := envOf(svc)
	if env["AUTH_OIDC"] != "true" || env["AUTH_AUDIENCE"] != "scoreflow/alertmanager-adapter" || !strings.HasPrefix(env["AUTH_ALLOWED_SUBJECTS"], "system:serviceaccount:") {
		t.Errorf("AUTH_OIDC=%q AUTH_AUDIENCE=%q AUTH_ALLOWED_SUBJECTS=%q; want true, scoreflow/alertmanager-adapter and Alertmanager's account",
			env["AUTH_OIDC"], env["AUTH_AUDIENCE"], env["AUTH_ALLOWED_SUBJECTS"])
	}
	for k, v := range env {
		if strings.HasPrefix(k, "AUTH_") {
			t.Setenv(k, v)
		}
	}
	if err := function.New("alertmanager-adapter", "test").Parse(nil); err != nil {
		t.Errorf("alertmanager-adapter does not start with its patched environment: %v", err)
	}
}
