// Package config_test applies every deploy variant of this directory, built as `kubectl apply -k`
// builds it, through the stock Knative Eventing webhook on a real API server (harness/knlocal), in
// the order a user switching variants would: each is admitted, re-applying a variant keeps it, and
// the Broker's class cannot change in place.
package config_test

import (
	"context"
	"fmt"
	"os"
	"reflect"
	"sort"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/util/wait"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
)

// buildAll builds every variant (each directory here).
func buildAll(t *testing.T) map[string][]*unstructured.Unstructured {
	t.Helper()
	entries, err := os.ReadDir(".")
	if err != nil {
		t.Fatal(err)
	}
	out := map[string][]*unstructured.Unstructured{}
	for _, e := range entries {
		if !e.IsDir() {
			continue
		}
		items, err := manifests.Build(e.Name())
		if err != nil {
			t.Fatal(err)
		}
		for _, it := range items {
			out[e.Name()] = append(out[e.Name()], it.Object)
		}
	}
	return out
}

// TestVariantsThroughTheWebhook applies default, then large-fleet, then oidc twice, then tls and
// oidc-tls, then kafka over the channel-based Broker (refused by the webhook: the class is
// immutable), and after deleting that Broker kafka and kafka-oidc. After each the hub holds every field the variant sets
// (for the identity variants: the functions' AUTH_ variables, the Triggers' audiences, the Broker's
// dead-letter audience, the EventPolicy), and kafka after kafka-oidc takes identity off again.
// Every variant here is applied (a new one must be added).
func TestVariantsThroughTheWebhook(t *testing.T) {
	built := buildAll(t)
	order := []string{"default", "large-fleet", "oidc", "oidc", "tls", "oidc-tls", "kafka", "kafka-oidc"}
	var names []string
	for v := range built {
		names = append(names, v)
	}
	sort.Strings(names)
	if got, want := strings.Join(names, ","), "default,kafka,kafka-oidc,large-fleet,oidc,oidc-tls,tls"; got != want {
		t.Fatalf("variants %s, this test applies %s: add the new one to its order", got, want)
	}

	ctx, cancel := context.WithTimeout(context.Background(), 25*time.Minute)
	defer cancel()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	// Sender identity on, as the oidc variants need (EventPolicies are refused without it); the
	// others do not depend on it.
	kn, err := knlocal.Start(ctx, hub, knlocal.Options{StateDir: t.TempDir(), LockWait: 20 * time.Minute, Features: knlocal.OIDCFeatures()})
	if err != nil {
		t.Fatal(err)
	}
	defer kn.Stop()

	for _, v := range order {
		if v == "kafka" {
			// The class of a Broker cannot change: the quickstart has users delete it first.
			err := kn.Applier.Apply(ctx, built[v]...)
			if err == nil || !strings.Contains(err.Error(), "Immutable") {
				t.Fatalf("applying kafka over the channel-based Broker: %v; want the webhook's refusal of the class change", err)
			}
			deleteBroker(ctx, t, kn)
		}
		if err := kn.Applier.Apply(ctx, built[v]...); err != nil {
			t.Fatalf("applying config/%s: %v", v, err)
		}
		for _, o := range built[v] {
			if err := holds(ctx, kn, o); err != nil {
				t.Errorf("after config/%s: %v", v, err)
			}
		}
		t.Logf("config/%s: %d objects admitted and on the hub as built", v, len(built[v]))
	}
	// holds checked every field above after each apply, the second oidc included; what remains is
	// that the identity variants have such fields to check, and that holds sees them go: applying
	// kafka again turns identity off (server-side apply drops the fields it no longer sets).
	if n := identityFields(built["kafka-oidc"]); n < 10 {
		t.Errorf("config/kafka-oidc sets only %d identity fields", n)
	}
	if err := kn.Applier.Apply(ctx, built["kafka"]...); err != nil {
		t.Fatal(err)
	}
	for _, o := range built["kafka-oidc"] {
		if o.GetKind() == "Service" && o.GetName() == "score-writer" {
			if err := holds(ctx, kn, o); err == nil || !strings.Contains(err.Error(), "containers[0].env") {
				t.Errorf("after config/kafka-oidc then config/kafka, the score-writer's identity settings: %v; want them gone", err)
			}
		}
	}
}

// holds checks that the object on the hub carries every field of o's spec, labels and
// annotations (the webhook's defaults may add more).
func holds(ctx context.Context, kn *knlocal.Knative, o *unstructured.Unstructured) error {
	ri, err := kn.Applier.Resource(o.GroupVersionKind(), o.GetNamespace())
	if err != nil {
		return err
	}
	got, err := ri.Get(ctx, o.GetName(), metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
	}
	for _, f := range [][]string{{"spec"}, {"data"}, {"rules"}, {"subjects"}, {"metadata", "labels"}, {"metadata", "annotations"}} {
		want, ok, _ := unstructured.NestedFieldNoCopy(o.Object, f...)
		if !ok {
			continue
		}
		have, _, _ := unstructured.NestedFieldNoCopy(got.Object, f...)
		if path := missing(want, have, strings.Join(f, ".")); path != "" {
			return fmt.Errorf("%s %s on the hub lacks %s as built", o.GetKind(), o.GetName(), path)
		}
	}
	return nil
}

// missing returns the first path of want that have does not hold (maps may have more keys, lists
// must have as many elements, each holding want's), or "".
func missing(want, have any, path string) string {
	switch w := want.(type) {
	case map[string]any:
		h, ok := have.(map[string]any)
		if !ok {
			return path
		}
		keys := make([]string, 0, len(w))
		for k := range w {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for _, k := range keys {
			if p := missing(w[k], h[k], path+"."+k); p != "" {
				return p
			}
		}
	case []any:
		h, ok := have.([]any)
		if !ok || len(h) != len(w) {
			return fmt.Sprintf("%s (%d elements, hub %d)", path, len(w), len(h))
		}
		for i := range w {
			if p := missing(w[i], h[i], fmt.Sprintf("%s[%d]", path, i)); p != "" {
				return p
			}
		}
	default:
		if !reflect.DeepEqual(want, have) {
			return fmt.Sprintf("%s (%v, hub %v)", path, want, have)
		}
	}
	return ""
}

// identityFields counts what sender identity sets in objs: AUTH_ variables, audiences, EventPolicies.
func identityFields(objs []*unstructured.Unstructured) int {
	n := 0
	var walk func(any)
	walk = func(v any) {
		switch x := v.(type) {
		case map[string]any:
			for k, e := range x {
				if k == "audience" {
					n++
				}
				if s, ok := e.(string); ok && k == "name" && strings.HasPrefix(s, "AUTH_") {
					n++
				}
				walk(e)
			}
		case []any:
			for _, e := range x {
				walk(e)
			}
		}
	}
	for _, o := range objs {
		if o.GetKind() == "EventPolicy" {
			n++
		}
		walk(o.Object["spec"])
	}
	return n
}

// deleteBroker deletes the Broker scoreflow and waits until it is gone (its controller removes
// its finalizer).
func deleteBroker(ctx context.Context, t *testing.T, kn *knlocal.Knative) {
	t.Helper()
	ri, err := kn.Applier.Resource(knlocal.BrokerKind, "scoreflow")
	if err != nil {
		t.Fatal(err)
	}
	if err := ri.Delete(ctx, "scoreflow", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	err = wait.PollUntilContextTimeout(ctx, 200*time.Millisecond, time.Minute, true, func(ctx context.Context) (bool, error) {
		_, err := ri.Get(ctx, "scoreflow", metav1.GetOptions{})
		return apierrors.IsNotFound(err), nil
	})
	if err != nil {
		t.Fatalf("the channel-based Broker is not gone a minute after its deletion: %v", err)
	}
}
