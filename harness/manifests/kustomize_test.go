package manifests

import (
	"path/filepath"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// A base and an overlay in the layout of config/: the overlay's objects are the base's with its
// patches applied (a strategic-merge patch and a JSON patch), each object's Source is the file and
// line it was written at, kustomize's origin bookkeeping is not left on the objects, and Load
// decodes the same objects strictly.
func TestBuildOverlay(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "base/kustomization.yaml", "resources:\n  - ns.yaml\n  - fn.yaml\n")
	write(t, dir, "base/ns.yaml", "# the namespace\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: ns1\n")
	write(t, dir, "base/fn.yaml", `apiVersion: v1
kind: ServiceAccount
metadata:
  name: fn
  namespace: ns1
---
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: fn
  namespace: ns1
  annotations:
    keep: "yes"
spec:
  template:
    spec:
      containers:
        - image: ko://example.com/fn
          env:
            - name: A
              value: "1"
`)
	write(t, dir, "broker/kustomization.yaml", "resources:\n  - broker.yaml\n")
	write(t, dir, "broker/broker.yaml", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata:\n  name: b\n  namespace: ns1\n")
	write(t, dir, "component/kustomization.yaml", `apiVersion: kustomize.config.k8s.io/v1alpha1
kind: Component
patches:
  - path: broker.yaml
  - path: fn.json
    target:
      kind: Service
      name: fn
`)
	write(t, dir, "component/broker.yaml", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata:\n  name: b\n  namespace: ns1\nspec:\n  delivery:\n    retry: 7\n")
	write(t, dir, "component/fn.json", `[{"op": "add", "path": "/spec/template/spec/containers/0/env/-", "value": {"name": "B", "value": "2"}}]`)
	write(t, dir, "variant/kustomization.yaml", "resources:\n  - ../base\n  - ../broker\ncomponents:\n  - ../component\n")

	variant := filepath.Join(dir, "variant")
	items, err := Build(variant)
	if err != nil {
		t.Fatal(err)
	}
	var kinds []string
	for _, it := range items {
		kinds = append(kinds, it.Object.GetKind())
		if _, ok := it.Object.GetAnnotations()[originAnnotation]; ok {
			t.Errorf("%s %s keeps kustomize's %s annotation", it.Object.GetKind(), it.Object.GetName(), originAnnotation)
		}
	}
	// kubectl's order: the namespace first.
	if got := strings.Join(kinds, ","); got != "Namespace,ServiceAccount,Service,Broker" {
		t.Errorf("kinds in order %s, want Namespace,ServiceAccount,Service,Broker", got)
	}
	if _, ok := items[0].Object.Object["metadata"].(map[string]any)["annotations"]; ok {
		t.Error("the namespace got an annotations field")
	}
	want := map[string]Source{
		"Namespace":      {Path: filepath.Join(variant, "..", "base", "ns.yaml"), Doc: 1, Line: 2},
		"ServiceAccount": {Path: filepath.Join(variant, "..", "base", "fn.yaml"), Doc: 1, Line: 1},
		"Service":        {Path: filepath.Join(variant, "..", "base", "fn.yaml"), Doc: 2, Line: 7},
		"Broker":         {Path: filepath.Join(variant, "..", "broker", "broker.yaml"), Doc: 1, Line: 1},
	}
	for _, it := range items {
		if w := want[it.Object.GetKind()]; it.Source != w {
			t.Errorf("%s: source %+v, want %+v", it.Object.GetKind(), it.Source, w)
		}
	}

	s, err := Load(variant)
	if err != nil {
		t.Fatal(err)
	}
	if len(s.Services) != 1 || len(s.Brokers) != 1 || len(s.All()) != 4 {
		t.Fatalf("Load: %d services, %d brokers, %d objects", len(s.Services), len(s.Brokers), len(s.All()))
	}
	var env []string
	for _, e := range s.Services[0].Object.Spec.Template.Spec.Containers[0].Env {
		env = append(env, e.Name+"="+e.Value)
	}
	if strings.Join(env, ",") != "A=1,B=2" {
		t.Errorf("Service env %v, want the base's A=1 and the JSON patch's B=2", env)
	}
	if a := s.Services[0].Object.Annotations; len(a) != 1 || a["keep"] != "yes" {
		t.Errorf("Service annotations %v, want only its own", a)
	}
	if r := s.Brokers[0].Object.Spec.Delivery; r == nil || r.Retry == nil || *r.Retry != 7 {
		t.Errorf("Broker delivery %+v, want the merged retry 7", r)
	}
}

// A kustomization's objects are decoded as strictly as files read one by one, and the error
// names the file the object was written in.
func TestLoadKustomizationErrors(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "k/kustomization.yaml", "resources:\n  - a.yaml\n")
	write(t, dir, "k/a.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: ok\n---\napiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\nnope: 1\n")
	write(t, dir, "missing/kustomization.yaml", "resources:\n  - gone.yaml\n")
	tests := []struct {
		name string
		path string
		want []string
	}{
		{"unknown field", "k", []string{filepath.Join(dir, "k", "a.yaml") + ":6 (document 2)", `unknown field "nope"`}},
		{"missing resource", "missing", []string{"kustomize " + filepath.Join(dir, "missing"), "gone.yaml"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Load(filepath.Join(dir, tt.path))
			if err == nil {
				t.Fatal("loaded without error")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

// Built objects are like any client-go decodes: DeepCopy (which accepts only JSON's types) works.
func TestBuildObjectsDeepCopy(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "kustomization.yaml", "resources:\n  - b.yaml\n")
	write(t, dir, "b.yaml", "apiVersion: eventing.knative.dev/v1\nkind: Broker\nmetadata:\n  name: b\n  namespace: ns1\nspec:\n  delivery:\n    retry: 5\n    ratio: 0.5\n")
	items, err := Build(dir)
	if err != nil {
		t.Fatal(err)
	}
	c := items[0].Object.DeepCopy()
	if r, _, _ := unstructured.NestedInt64(c.Object, "spec", "delivery", "retry"); r != 5 {
		t.Errorf("retry %d after DeepCopy, want 5", r)
	}
}
