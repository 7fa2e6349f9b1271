package deploy

import (
	"path/filepath"
	"reflect"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/manifests/lifetime"
)

// TestLargeFleetChangesOnlyTheSchedules: config/large-fleet is the default with the scorers'
// PingSources firing every 2 minutes, none at the same instant as another, and the writer's TTL
// 15 minutes (set once): nothing else differs, so the steady-state benchmark's measurement of it
// (test/writer BenchmarkFleetSteadyState/large-fleet) is a measurement of what users apply.
func TestLargeFleetChangesOnlyTheSchedules(t *testing.T) {
	build := func(v string) map[string]*unstructured.Unstructured {
		items, err := manifests.Build(filepath.Join(repo, "config", v))
		if err != nil {
			t.Fatal(err)
		}
		out := map[string]*unstructured.Unstructured{}
		for _, it := range items {
			o := it.Object
			out[o.GetKind()+" "+o.GetNamespace()+"/"+o.GetName()] = o
		}
		return out
	}
	def, large := build("default"), build("large-fleet")
	if len(def) != len(large) {
		t.Fatalf("config/default has %d objects, config/large-fleet %d", len(def), len(large))
	}
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	firstAt := map[time.Duration]string{}
	pings := 0
	for key, want := range def {
		got, ok := large[key]
		if !ok {
			t.Errorf("config/large-fleet has no %s", key)
			continue
		}
		want, got = want.DeepCopy(), got.DeepCopy()
		switch {
		case got.GetKind() == "PingSource":
			pings++
			var ps sourcesv1.PingSource
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(got.Object, &ps); err != nil {
				t.Fatal(err)
			}
			f := lifetime.Firings(t, &ps, from, 3, 0)
			if f[1].Sub(f[0]) != 2*time.Minute || f[2].Sub(f[1]) != 2*time.Minute {
				t.Errorf("%s (%q) fires at %v, want every 2 minutes", key, ps.Spec.Schedule, f)
			}
			if other, together := firstAt[f[0].Sub(from)]; together {
				t.Errorf("%s fires with %s", key, other)
			}
			firstAt[f[0].Sub(from)] = key
			unstructured.RemoveNestedField(want.Object, "spec", "schedule")
			unstructured.RemoveNestedField(got.Object, "spec", "schedule")
		case key == "Service scoreflow/score-writer":
			var ttls []any
			for _, o := range []*unstructured.Unstructured{want, got} {
				containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
				c := containers[0].(map[string]any)
				env, _, _ := unstructured.NestedSlice(c, "env")
				var kept []any
				for _, e := range env {
					if e.(map[string]any)["name"] == "TTL" {
						ttls = append(ttls, e.(map[string]any)["value"])
						continue
					}
					kept = append(kept, e)
				}
				if err := unstructured.SetNestedSlice(c, kept, "env"); err != nil {
					t.Fatal(err)
				}
				if err := unstructured.SetNestedSlice(o.Object, containers, "spec", "template", "spec", "containers"); err != nil {
					t.Fatal(err)
				}
			}
			if !reflect.DeepEqual(ttls, []any{"5m", "15m"}) {
				t.Errorf("the writer's TTL: default then large-fleet %v, want [5m 15m], each set once", ttls)
			}
		}
		if !reflect.DeepEqual(want.Object, got.Object) {
			t.Errorf("config/large-fleet changes %s beyond its schedule and the writer's TTL", key)
		}
	}
	if pings != 5 {
		t.Errorf("%d PingSources, want the five shipped scorers'", pings)
	}
}
