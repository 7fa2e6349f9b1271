package oidc

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"

	jsonpatch "github.com/evanphx/json-patch/v5"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"knative.dev/eventing/pkg/auth"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/pkg/function"
)

const repo = "../.."

func read(t *testing.T, path string) []*unstructured.Unstructured {
	t.Helper()
	objs, err := knlocal.ReadFiles(filepath.Join(repo, path))
	if err != nil {
		t.Fatal(err)
	}
	return objs
}

// The OIDC variant stays the default manifests plus what sender identity needs: each Trigger in
// oidc/triggers/ is its triggers/ twin with only subscriber.audience and the dead-letter sink's
// audience added, and oidc/broker.yaml the Broker with only the dead-letter sink's audience; each
// function that a Trigger with an audience calls gets, from its patch, exactly that audience and
// that Trigger's OIDC identity (named as Knative names it), plus the account of every Service that
// presents its own token for that audience, in a configuration the function accepts; the dead-letter function takes the dead-letter sink's audience from exactly the Triggers
// whose failed deliveries reach it; the Broker's EventPolicies admit every source (the agent
// gateway's SinkBinding among them: agents never post to the Broker) and every replying Trigger
// of the manifests, and not cloudevents-player.
func TestOIDCVariantMatchesTheManifests(t *testing.T) {
	base := map[string]*unstructured.Unstructured{}
	for _, o := range read(t, "triggers") {
		base[o.GetName()] = o
	}
	variant := read(t, "oidc/triggers")
	if len(variant) != len(base) {
		t.Fatalf("oidc/triggers has %d Triggers, triggers/ %d", len(variant), len(base))
	}
	// The Broker's dead-letter sink serves every Trigger without a delivery of its own.
	broker := read(t, "oidc/broker.yaml")[0]
	dlsAudience, _, _ := unstructured.NestedString(broker.Object, "spec", "delivery", "deadLetterSink", "audience")
	strippedBroker := broker.DeepCopy()
	unstructured.RemoveNestedField(strippedBroker.Object, "spec", "delivery", "deadLetterSink", "audience")
	if !reflect.DeepEqual(strippedBroker.Object, read(t, "brokers/scoreflow.yaml")[0].Object) {
		t.Error("oidc/broker.yaml differs from brokers/scoreflow.yaml in more than delivery.deadLetterSink.audience")
	}
	var deadLettered []string // identities of the Triggers whose failures reach the dead-letter function
	services := map[string]*unstructured.Unstructured{}
	for _, o := range read(t, "deploy") {
		if o.GetKind() == "Service" && o.GetAPIVersion() == "serving.knative.dev/v1" {
			services[o.GetName()] = o
		}
	}
	// Services of deploy/ that call a function themselves present a projected token of their own
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
			t.Fatalf("oidc/triggers has %s, triggers/ does not", tr.GetName())
		}
		audience, _, _ := unstructured.NestedString(tr.Object, "spec", "subscriber", "audience")
		stripped := tr.DeepCopy()
		unstructured.RemoveNestedField(stripped.Object, "spec", "subscriber", "audience")
		unstructured.RemoveNestedField(stripped.Object, "spec", "delivery", "deadLetterSink", "audience")
		if !reflect.DeepEqual(stripped.Object, twin.Object) {
			t.Errorf("oidc/triggers/%s differs from triggers/ in more than subscriber.audience and delivery.deadLetterSink.audience", tr.GetName())
		}
		identity := authtest.Subject(ns, auth.GetOIDCServiceAccountNameForResource(tr.GroupVersionKind(), metav1.ObjectMeta{Name: tr.GetName(), Namespace: ns}))
		if _, own, _ := unstructured.NestedMap(tr.Object, "spec", "delivery"); !own {
			deadLettered = append(deadLettered, identity)
		} else if _, hasDLS, _ := unstructured.NestedMap(tr.Object, "spec", "delivery", "deadLetterSink"); hasDLS {
			deadLettered = append(deadLettered, identity)
			if a, _, _ := unstructured.NestedString(tr.Object, "spec", "delivery", "deadLetterSink", "audience"); a != dlsAudience {
				t.Errorf("oidc/triggers/%s: dead-letter sink audience %q, the Broker's is %q", tr.GetName(), a, dlsAudience)
			}
		}
		if audience == "" {
			continue
		}
		replying = append(replying, identity)
		svcName, _, _ := unstructured.NestedString(tr.Object, "spec", "subscriber", "ref", "name")
		env := patchedEnv(t, services[svcName], "oidc/patches/"+svcName+".json")
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
	env := patchedEnv(t, services["dead-letter"], "oidc/patches/dead-letter.json")
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
	for _, o := range read(t, "deploy") {
		switch o.GetKind() {
		case "PingSource", "ApiServerSource", "SinkBinding":
			senders = append(senders, authtest.Subject(ns, auth.GetOIDCServiceAccountNameForResource(o.GroupVersionKind(), metav1.ObjectMeta{Name: o.GetName(), Namespace: ns})))
		}
	}
	admitted := map[string]bool{}
	for _, p := range read(t, "oidc/eventpolicies.yaml") {
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
	player := patched(t, services["cloudevents-player"], "oidc/patches/cloudevents-player.json")
	if player.GetLabels()["networking.knative.dev/visibility"] != "cluster-local" {
		t.Error("the OIDC variant leaves cloudevents-player reachable from outside the cluster")
	}
}

func patched(t *testing.T, svc *unstructured.Unstructured, patchPath string) *unstructured.Unstructured {
	t.Helper()
	if svc == nil {
		t.Fatalf("no Service for %s", patchPath)
	}
	raw, err := os.ReadFile(filepath.Join(repo, patchPath))
	if err != nil {
		t.Fatal(err)
	}
	p, err := jsonpatch.DecodePatch(raw)
	if err != nil {
		t.Fatalf("%s: %v", patchPath, err)
	}
	doc, _ := json.Marshal(svc.Object)
	out, err := p.Apply(doc)
	if err != nil {
		t.Fatalf("%s does not apply to deploy/%s.yaml: %v", patchPath, svc.GetName(), err)
	}
	var o unstructured.Unstructured
	if err := json.Unmarshal(out, &o.Object); err != nil {
		t.Fatal(err)
	}
	return &o
}

func patchedEnv(t *testing.T, svc *unstructured.Unstructured, patchPath string) map[string]string {
	t.Helper()
	o := patched(t, svc, patchPath)
	containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
	env := map[string]string{}
	vars, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
	for _, v := range vars {
		m := v.(map[string]any)
		val, _ := m["value"].(string)
		env[m["name"].(string)] = val
	}
	return env
}

// The alertmanager-adapter, which no Trigger calls, verifies its callers in the OIDC variant too:
// whatever reaches it goes to the Broker under the adapter's admitted identity. Its patch gives it
// its own audience and Alertmanager's identity, in a configuration it accepts.
func TestAlertmanagerAdapterVerifiesCallers(t *testing.T) {
	var svc *unstructured.Unstructured
	for _, o := range read(t, "deploy") {
		if o.GetKind() == "Service" && o.GetAPIVersion() == "serving.knative.dev/v1" && o.GetName() == "alertmanager-adapter" {
			svc = o
		}
	}
	env := patchedEnv(t, svc, "oidc/patches/alertmanager-adapter.json")
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
