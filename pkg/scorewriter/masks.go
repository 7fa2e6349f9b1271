package scorewriter

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Masks says which scores are turned off (pkg/masks.File). Scores lists the masked score names of
// one AddOnPlacementScore of one cluster, sorted; nil when none is.
type Masks interface {
	Scores(cluster, resource string) []string
}

// maskSource is the source of the writes EnforceMasks queues.
const maskSource = "scoreflow/masks"

// EnforceMasks queues a write of each object so that scores masked since it was last written
// leave it now, not at its next update: call it with the objects of added masks. The writes
// change nothing where no masked score is present.
func (w *Writer) EnforceMasks(keys ...Key) error {
	var us []*Update
	seen := map[Key]bool{}
	for _, k := range keys {
		if !seen[k] {
			seen[k] = true
			us = append(us, NewUpdate(k, nil, time.Time{}, time.Time{}, maskSource))
		}
	}
	if len(us) == 0 {
		return nil
	}
	return w.Submit(us...)
}

// planMasked is makePlan with the masks applied: masked scores are taken out of the updates (an
// update left with none is not planned) and out of the object, scores and ledger lines both, so
// that unmasking lets the next update through whatever its time. An object not known here is
// read first, as it may hold masked scores written before the mask. The updates' decisions say
// Masked where a mask took scores out.
func (w *Writer) planMasked(ctx context.Context, key Key, cur *clusterv1alpha1.AddOnPlacementScore, us []*Update) (*clusterv1alpha1.AddOnPlacementScore, plan, error) {
	now := w.now()
	var masked []string
	if w.opts.Masks != nil {
		masked = w.opts.Masks.Scores(key.Cluster, key.Resource)
	}
	if len(masked) == 0 {
		return cur, makePlan(cur, us, now), nil
	}
	if cur == nil {
		obj, err := w.load(ctx, key) // nil when not on the hub: nothing to remove
		if err != nil {
			return nil, plan{}, err
		}
		cur = obj
	}
	isMasked := func(name string) bool { _, ok := slices.BinarySearch(masked, name); return ok }

	base, removed := withoutMasked(cur, isMasked)
	var kept []*Update
	var slots []int
	dropped := make([][]string, len(us))
	for i, u := range us {
		var scores []contract.Score
		for _, s := range u.Scores {
			if isMasked(s.Name) {
				dropped[i] = append(dropped[i], s.Name)
			} else {
				scores = append(scores, s)
			}
		}
		if len(scores) > 0 {
			k := *u
			k.Scores = scores
			kept = append(kept, &k)
			slots = append(slots, i)
		}
	}
	p := makePlan(base, kept, now)
	decisions := make([]decision, len(us))
	for j, i := range slots {
		decisions[i] = p.decisions[j]
	}
	p.decisions = decisions
	if !p.changed && len(removed) > 0 {
		p.changed, p.status = true, removalStatus(base, removed)
	}
	// The score gauge forgets removed scores as it forgets expired ones.
	p.expired = append(p.expired, removed...)

	note := ""
	if len(removed) > 0 {
		note = "; removed from the object: " + strings.Join(removed, ", ")
	}
	for i, u := range us {
		d := &p.decisions[i]
		switch {
		case len(u.Scores) == 0: // an EnforceMasks write
			*d = decision{reason: contract.ReasonMasked, message: "masks applied" + note}
		case len(dropped[i]) == 0:
		case len(dropped[i]) == len(u.Scores):
			*d = decision{reason: contract.ReasonMasked, message: "masked, not written: " + strings.Join(dropped[i], ", ") + note}
		case d.written:
			d.reason, d.message = contract.ReasonMasked, "written except the masked "+strings.Join(dropped[i], ", ")+note
		default:
			d.message += "; masked, not written: " + strings.Join(dropped[i], ", ")
		}
	}
	return cur, p, nil
}

// withoutMasked copies obj without its masked scores and their ledger lines, and lists the scores
// it removed. nil stays nil.
func withoutMasked(obj *clusterv1alpha1.AddOnPlacementScore, isMasked func(string) bool) (*clusterv1alpha1.AddOnPlacementScore, []string) {
	if obj == nil {
		return nil, nil
	}
	out := obj.DeepCopy()
	var removed []string
	out.Status.Scores = slices.DeleteFunc(out.Status.Scores, func(s clusterv1alpha1.AddOnPlacementScoreItem) bool {
		if isMasked(s.Name) {
			removed = append(removed, s.Name)
			return true
		}
		return false
	})
	if led, err := readLedger(out); err == nil {
		n := len(led)
		for name := range led {
			if isMasked(name) {
				delete(led, name)
			}
		}
		if len(led) != n {
			c := meta.FindStatusCondition(out.Status.Conditions, ConditionObservations)
			c.Message = led.encode()
		}
	}
	slices.Sort(removed)
	return out, removed
}

// removalStatus is the status of an object whose masked scores were removed and nothing else
// changed: its validUntil is again the earliest of the remaining scores' (nil when none expires).
func removalStatus(obj *clusterv1alpha1.AddOnPlacementScore, removed []string) clusterv1alpha1.AddOnPlacementScoreStatus {
	status := obj.Status
	if led, err := readLedger(obj); err == nil && len(led) > 0 {
		var earliest time.Time
		for _, e := range led {
			if !e.ValidUntil.IsZero() && (earliest.IsZero() || e.ValidUntil.Before(earliest)) {
				earliest = e.ValidUntil
			}
		}
		status.ValidUntil = nil
		if !earliest.IsZero() {
			vu := metav1.NewTime(earliest)
			status.ValidUntil = &vu
		}
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:    ConditionUpdated,
		Status:  metav1.ConditionTrue,
		Reason:  reasonScoresMasked,
		Message: fmt.Sprintf("masked scores removed: %s", strings.Join(removed, ", ")),
	})
	return status
}
