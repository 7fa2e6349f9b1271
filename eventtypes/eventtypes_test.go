// Package eventtypes_test checks scoreflow's EventTypes: one per event type of the contract, each
// pointing at its JSON Schema's $id and at the scoreflow Broker, and admitted by the real Knative
// Eventing webhook.
package eventtypes_test

import (
	"context"
	"encoding/json"
	"path/filepath"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	eventingv1beta2 "knative.dev/eventing/pkg/apis/eventing/v1beta2"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

var (
	v1beta2 = schema.GroupVersionKind{Group: "eventing.knative.dev", Version: "v1beta2", Kind: "EventType"}
	v1beta3 = schema.GroupVersionKind{Group: "eventing.knative.dev", Version: "v1beta3", Kind: "EventType"}
)

// load reads every EventType of this directory's kustomization (what the variants of config/ apply).
func load(t *testing.T) ([]*unstructured.Unstructured, []eventingv1beta2.EventType) {
	t.Helper()
	built, err := manifests.Build(".")
	if err != nil || len(built) == 0 {
		t.Fatalf("no EventTypes in eventtypes/ (%v)", err)
	}
	var objs []*unstructured.Unstructured
	var ets []eventingv1beta2.EventType
	for _, it := range built {
		o := it.Object
		objs = append(objs, o)
		if o.GroupVersionKind() != v1beta2 {
			t.Fatalf("%s %s is not an %v", o.GetKind(), o.GetName(), v1beta2)
		}
		var et eventingv1beta2.EventType
		if err := runtime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.Object, &et, true); err != nil {
			t.Fatalf("EventType %s: %v", o.GetName(), err)
		}
		ets = append(ets, et)
	}
	return objs, ets
}

// schemaID is the $id of the embedded JSON Schema of an event type's data.
func schemaID(t *testing.T, eventType string) string {
	t.Helper()
	var s struct {
		ID string `json:"$id"`
	}
	if err := json.Unmarshal(contract.Schema(eventType), &s); err != nil || s.ID == "" {
		t.Fatalf("schema of %s has no $id (%v)", eventType, err)
	}
	return s.ID
}

// Every event type of the contract has exactly one EventType, whose schema is its JSON Schema's
// $id, on the scoreflow Broker in namespace scoreflow.
func TestEveryContractTypeHasItsSchema(t *testing.T) {
	_, ets := load(t)
	var got []string
	for _, et := range ets {
		got = append(got, et.Spec.Type)
		if contract.Schema(et.Spec.Type) == nil {
			t.Errorf("EventType %s: %s is not a type of the contract", et.Name, et.Spec.Type)
			continue
		}
		if et.Spec.Schema == nil || et.Spec.Schema.String() != schemaID(t, et.Spec.Type) {
			t.Errorf("EventType %s: schema %v, want %s", et.Name, et.Spec.Schema, schemaID(t, et.Spec.Type))
		}
		if et.Name != et.Spec.Type || et.Namespace != "scoreflow" {
			t.Errorf("EventType %s/%s: want it named after its type in namespace scoreflow", et.Namespace, et.Name)
		}
		if ref := et.Spec.Reference; ref == nil || ref.Kind != "Broker" || ref.Name != "scoreflow" || ref.APIVersion != "eventing.knative.dev/v1" {
			t.Errorf("EventType %s: reference %+v, want the Broker scoreflow", et.Name, ref)
		}
		if len(et.Spec.Description) < 20 {
			t.Errorf("EventType %s: description %q says too little", et.Name, et.Spec.Description)
		}
	}
	sort.Strings(got)
	if want := contract.EventTypes(); !reflect.DeepEqual(got, want) {
		t.Errorf("EventTypes for %v, want one for each of %v", got, want)
	}
}

// TestWebhookAdmitsEventTypes applies the namespace, the Broker and the EventTypes through the stock
// Knative Eventing webhook running locally, reads each back (as v1beta2, and as v1beta3 through the
// webhook's conversion, which is what newer clients see), and checks that the webhook refuses an
// EventType without a type, so the admission really ran.
func TestWebhookAdmitsEventTypes(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	kn, err := knlocal.Start(ctx, hub, knlocal.Options{StateDir: t.TempDir(), LockWait: 20 * time.Minute})
	if err != nil {
		t.Fatal(err)
	}
	defer kn.Stop()

	base, err := knlocal.ReadFiles(filepath.Join("..", "deploy", "00-namespace.yaml"), filepath.Join("..", "brokers", "scoreflow.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	objs, ets := load(t)
	if err := kn.Applier.Apply(ctx, append(base, objs...)...); err != nil {
		t.Fatal(err)
	}

	stored, err := kn.Applier.Resource(v1beta2, "scoreflow")
	if err != nil {
		t.Fatal(err)
	}
	converted, err := kn.Applier.Resource(v1beta3, "scoreflow")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range ets {
		o, err := stored.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("EventType %s: %v", want.Name, err)
			continue
		}
		typ, _, _ := unstructured.NestedString(o.Object, "spec", "type")
		sch, _, _ := unstructured.NestedString(o.Object, "spec", "schema")
		if typ != want.Spec.Type || sch != schemaID(t, want.Spec.Type) {
			t.Errorf("EventType %s on the hub: type %q schema %q, want %q and %q", want.Name, typ, sch, want.Spec.Type, schemaID(t, want.Spec.Type))
		}
		o3, err := converted.Get(ctx, want.Name, metav1.GetOptions{})
		if err != nil {
			t.Errorf("EventType %s as v1beta3: %v", want.Name, err)
			continue
		}
		attrs, _, _ := unstructured.NestedSlice(o3.Object, "spec", "attributes")
		if got := attributes(attrs); got["type"] != want.Spec.Type || got["schemadata"] != schemaID(t, want.Spec.Type) {
			t.Errorf("EventType %s as v1beta3: attributes %v, want type %s and schemadata %s", want.Name, got, want.Spec.Type, schemaID(t, want.Spec.Type))
		}
	}

	bad := objs[0].DeepCopy()
	bad.SetName("no-type")
	unstructured.RemoveNestedField(bad.Object, "spec", "type")
	if err := kn.Applier.Apply(ctx, bad); err == nil || !strings.Contains(err.Error(), "spec.type") {
		t.Errorf("applying an EventType without a type: %v, want the webhook's refusal naming spec.type", err)
	}
}

// attributes maps a v1beta3 EventType's attributes by name to value.
func attributes(list []any) map[string]string {
	out := map[string]string{}
	for _, a := range list {
		m, _ := a.(map[string]any)
		name, _ := m["name"].(string)
		value, _ := m["value"].(string)
		out[name] = value
	}
	return out
}
