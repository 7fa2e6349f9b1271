package scorewriter

import (
	"context"
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	k8stesting "k8s.io/client-go/testing"
	clocktesting "k8s.io/utils/clock/testing"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

type maskList map[Key][]string

func (m maskList) Scores(cluster, resource string) []string { return m[Key{cluster, resource}] }

// TestPlanMasked plans against objects the writer already knows (no hub is read): the hub side
// is tested in test/writer with the real hub and placement controller.
func TestPlanMasked(t *testing.T) {
	now := t0.Add(time.Minute)
	// a, b and x, each with its ledger line; x's validUntil is the earliest.
	withX := onHub(makePlan(nil, nil, []*Update{upd(0, sc("a", 1), sc("b", 2)), NewUpdate(Key{"c1", "r"}, []contract.Score{sc("x", 9)}, t0, t0.Add(10*time.Minute), "src")}, now))
	if withX.Status.ValidUntil == nil || !withX.Status.ValidUntil.Time.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("fixture: validUntil %v", withX.Status.ValidUntil)
	}
	noX := onHub(makePlan(nil, nil, []*Update{upd(0, sc("a", 1), sc("b", 2))}, now))

	tests := []struct {
		name     string
		cur      *clusterv1alpha1.AddOnPlacementScore
		updates  []*Update
		changed  bool
		outcomes []string // per update: outcome/reason/message part
		want     map[string]int32
	}{
		{"masked score of an update is not written, the rest is", noX, []*Update{upd(time.Second, sc("a", 5), sc("x", 7))}, true,
			[]string{"Written/Masked/written except the masked x"}, map[string]int32{"a": 5, "b": 2}},
		{"an update of masked scores only writes nothing", noX, []*Update{upd(time.Second, sc("x", 7))}, false,
			[]string{"Skipped/Masked/masked, not written: x"}, map[string]int32{"a": 1, "b": 2}},
		{"a masked score present is removed", withX, []*Update{upd(time.Second, sc("x", 7))}, true,
			[]string{"Skipped/Masked/removed from the object: x"}, map[string]int32{"a": 1, "b": 2}},
		{"removed along with a write", withX, []*Update{upd(time.Second, sc("b", 3))}, true,
			[]string{"Written//"}, map[string]int32{"a": 1, "b": 3}},
		{"removed without an update (EnforceMasks)", withX, nil, true, nil, map[string]int32{"a": 1, "b": 2}},
		{"nothing masked present, no update: no change", noX, nil, false, nil, map[string]int32{"a": 1, "b": 2}},
		{"a stale update says both", withX, []*Update{upd(-time.Second, sc("a", 5), sc("x", 1))}, true,
			[]string{"Skipped/Stale/masked, not written: x"}, map[string]int32{"a": 1, "b": 2}},
	}
	clk := clocktesting.NewFakeClock(now)
	opts := DefaultOptions()
	opts.Clock = clk
	opts.Masks = maskList{{"c1", "r"}: {"x"}}
	w, err := NewWriter(newHub(), opts, NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := w.plan(Key{"c1", "r"}, tt.cur, nil, tt.updates)
			if p.changed != tt.changed {
				t.Fatalf("changed %v, want %v", p.changed, tt.changed)
			}
			for i, want := range tt.outcomes {
				parts := strings.SplitN(want, "/", 3)
				r := p.outcomes[i]
				if string(r.Outcome) != parts[0] || string(r.Reason) != parts[1] || !strings.Contains(r.Message, parts[2]) {
					t.Errorf("outcome %d = %+v, want %s", i, r, want)
				}
			}
			got := values(tt.cur)
			if p.changed {
				got = values(onHub(p))
				if _, ok := lines(t, onHub(p))["x"]; ok {
					t.Error("the ledger still orders the masked score")
				}
				// validUntil is no longer x's.
				if vu := onHub(p).Status.ValidUntil; vu == nil || vu.Time.Before(t0.Add(time.Hour-time.Second)) {
					t.Errorf("validUntil %v, want that of a or b", vu)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("scores %v, want %v", got, tt.want)
			}
		})
	}

	// Without masks, plan is makePlan.
	w.opts.Masks = nil
	p := w.plan(Key{"c1", "r"}, withX, nil, []*Update{upd(time.Second, sc("x", 1))})
	if got := values(onHub(p)); !reflect.DeepEqual(got, map[string]int32{"a": 1, "b": 2, "x": 1}) {
		t.Errorf("unmasked: scores %v", got)
	}
}

// Removing many masked scores of long names keeps the ScoresUpdated message within its bound: it
// lists a few and counts the rest.
func TestMaskRemovalMessageIsBounded(t *testing.T) {
	var masked []contract.Score
	var maskedNames []string
	for i := range 130 {
		name := fmt.Sprintf("m%03d-%s", i, strings.Repeat("n", 246))
		masked = append(masked, sc(name, 1))
		maskedNames = append(maskedNames, name)
	}
	base := onHub(makePlan(nil, nil, []*Update{upd(0, append(masked, sc("kept", 2))...)}, t0))
	opts := DefaultOptions()
	opts.Clock = clocktesting.NewFakeClock(t0)
	opts.Masks = maskList{{"c1", "r"}: maskedNames}
	w, err := NewWriter(newHub(), opts, NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), nil)
	if err != nil {
		t.Fatal(err)
	}
	p := w.plan(Key{"c1", "r"}, base, nil, nil)
	c := meta.FindStatusCondition(p.status.Conditions, ConditionUpdated)
	if !p.changed || c == nil || len(c.Message) > 1024 || !strings.Contains(c.Message, "and 125 more scores") {
		t.Fatalf("changed=%v message of %d bytes: %.300q", p.changed, len(c.Message), c.Message)
	}
	if got := values(onHub(p)); fmt.Sprint(got) != "map[kept:2]" {
		t.Errorf("scores %v, want only kept", got)
	}
}

// Mask enforcement is retried until it lands: through a hub outage longer than RetryFor, and
// without a bound on pending updates to refuse it.
func TestMaskEnforcementIsRetriedUntilItSucceeds(t *testing.T) {
	key := Key{"c1", "r"}
	obj := onHub(makePlan(nil, nil, []*Update{upd(0, sc("a", 1), sc("x", 9))}, t0))
	obj.Name, obj.Namespace = key.Resource, key.Cluster
	client := newHub(obj)
	var down atomic.Bool
	var attempts atomic.Int32
	down.Store(true)
	client.PrependReactor("update", "addonplacementscores", func(k8stesting.Action) (bool, runtime.Object, error) {
		attempts.Add(1)
		if down.Load() {
			return true, nil, apierrors.NewServiceUnavailable("hub down")
		}
		return false, nil, nil
	})
	start := t0.Add(time.Minute)
	clk := clocktesting.NewFakeClock(start)
	opts := DefaultOptions()
	opts.Clock, opts.Window = clk, 0
	opts.RetryFor = time.Second
	opts.MaxPending = 1
	opts.Masks = maskList{key: {"x"}}
	w := runWriter(t, client, opts)
	waitFor(t, "the informer's copy", func() bool { return w.hub.get(key) != nil })

	w.EnforceMasks(key)
	// A minute of outage, well past RetryFor: the writer keeps trying, every 2s at most.
	advanceUntil(t, clk, 500*time.Millisecond, func() bool { return clk.Since(start) >= time.Minute })
	if n := attempts.Load(); n < 10 {
		t.Fatalf("%d writes tried in a minute of outage, want retries until it succeeds", n)
	}
	down.Store(false)
	advanceUntil(t, clk, 500*time.Millisecond, func() bool {
		cur, err := client.ClusterV1alpha1().AddOnPlacementScores(key.Cluster).Get(context.Background(), key.Resource, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		_, ok := values(cur)["x"]
		return !ok
	})
}
