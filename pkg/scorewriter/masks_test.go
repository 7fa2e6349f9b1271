package scorewriter

import (
	"context"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
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
	withX := object(makePlan(nil, []*Update{upd(0, sc("a", 1), sc("b", 2)), NewUpdate(Key{"c1", "r"}, []contract.Score{sc("x", 9)}, t0, t0.Add(10*time.Minute), "src")}, now))
	if withX.Status.ValidUntil == nil || !withX.Status.ValidUntil.Time.Equal(t0.Add(10*time.Minute)) {
		t.Fatalf("fixture: validUntil %v", withX.Status.ValidUntil)
	}
	noX := object(makePlan(nil, []*Update{upd(0, sc("a", 1), sc("b", 2))}, now))
	touch := func() *Update { return NewUpdate(Key{"c1", "r"}, nil, time.Time{}, time.Time{}, maskSource) }

	tests := []struct {
		name      string
		cur       *clusterv1alpha1.AddOnPlacementScore
		updates   []*Update
		changed   bool
		decisions []string // per update: written?/reason/message part
		want      map[string]int32
	}{
		{"masked score of an update is not written, the rest is", noX, []*Update{upd(time.Second, sc("a", 5), sc("x", 7))}, true,
			[]string{"written/Masked/written except the masked x"}, map[string]int32{"a": 5, "b": 2}},
		{"an update of masked scores only writes nothing", noX, []*Update{upd(time.Second, sc("x", 7))}, false,
			[]string{"skipped/Masked/masked, not written: x"}, map[string]int32{"a": 1, "b": 2}},
		{"a masked score present is removed", withX, []*Update{upd(time.Second, sc("x", 7))}, true,
			[]string{"skipped/Masked/removed from the object: x"}, map[string]int32{"a": 1, "b": 2}},
		{"removed along with a write", withX, []*Update{upd(time.Second, sc("b", 3))}, true,
			[]string{"written//"}, map[string]int32{"a": 1, "b": 3}},
		{"EnforceMasks removes without an update", withX, []*Update{touch()}, true,
			[]string{"skipped/Masked/masks applied; removed from the object: x"}, map[string]int32{"a": 1, "b": 2}},
		{"EnforceMasks where nothing is masked changes nothing", noX, []*Update{touch()}, false,
			[]string{"skipped/Masked/masks applied"}, map[string]int32{"a": 1, "b": 2}},
		{"a stale update says both", withX, []*Update{upd(-time.Second, sc("a", 5), sc("x", 1))}, true,
			[]string{"skipped/Stale/masked, not written: x"}, map[string]int32{"a": 1, "b": 2}},
	}
	w, err := NewWriter(nil, DefaultOptions(), NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), nil)
	if err != nil {
		t.Fatal(err)
	}
	w.now = func() time.Time { return now }
	w.opts.Masks = maskList{{"c1", "r"}: {"x"}}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, p, err := w.planMasked(context.Background(), Key{"c1", "r"}, tt.cur, tt.updates)
			if err != nil {
				t.Fatal(err)
			}
			if p.changed != tt.changed {
				t.Fatalf("changed %v, want %v", p.changed, tt.changed)
			}
			for i, want := range tt.decisions {
				parts := strings.SplitN(want, "/", 3)
				d := p.decisions[i]
				if (parts[0] == "written") != d.written || string(d.reason) != parts[1] || !strings.Contains(d.message, parts[2]) {
					t.Errorf("decision %d = %+v, want %s", i, d, want)
				}
			}
			got := values(tt.cur)
			if p.changed {
				got = values(object(p))
				led, err := readLedger(object(p))
				if err != nil {
					t.Fatal(err)
				}
				if _, ok := led["x"]; ok {
					t.Errorf("the ledger still orders the masked score: %v", led)
				}
				// validUntil is no longer x's.
				if vu := object(p).Status.ValidUntil; vu == nil || !vu.Time.Equal(t0.Add(time.Hour)) && !vu.Time.Equal(t0.Add(time.Second).Add(time.Hour)) && !vu.Time.Equal(t0.Add(-time.Second).Add(time.Hour)) {
					t.Errorf("validUntil %v, want that of a or b", vu)
				}
			}
			if !reflect.DeepEqual(got, tt.want) {
				t.Errorf("scores %v, want %v", got, tt.want)
			}
		})
	}

	// Without masks, planMasked is makePlan.
	w.opts.Masks = nil
	_, p, _ := w.planMasked(context.Background(), Key{"c1", "r"}, withX, []*Update{upd(time.Second, sc("x", 1))})
	if got := values(object(p)); !reflect.DeepEqual(got, map[string]int32{"a": 1, "b": 2, "x": 1}) {
		t.Errorf("unmasked: scores %v", got)
	}
}
