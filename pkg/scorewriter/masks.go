package scorewriter

import (
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Masks says which scores are turned off (pkg/masks.File). Scores lists the masked score names of
// one AddOnPlacementScore of one cluster, sorted; nil when none is.
type Masks interface {
	Scores(cluster, resource string) []string
}

// EnforceMasks has the objects of keys written now, so that scores masked since they were last
// written leave them, not at their next update: call it with the objects of added masks. Such a
// write changes nothing where no masked score is present. A write that fails transiently is
// retried, with backoff, until it succeeds; one refused for good is tried again when the informer
// next reports the object (at the latest its resync). Only the replica that leads enforces masks;
// one that starts leading looks at every object (masks in force before included).
func (w *Writer) EnforceMasks(keys ...Key) {
	if !w.leading.Load() {
		return
	}
	for _, k := range keys {
		w.wake(k)
	}
}

// plan is makePlan with the masks applied: masked scores are taken out of the updates (an update
// left with none is not planned) and out of the object, scores and ledger lines both, so that
// unmasking lets the next update through whatever its time. The outcomes say Masked where a mask
// took scores out.
func (w *Writer) plan(key Key, cur *clusterv1alpha1.AddOnPlacementScore, skipped skippedLines, us []*Update) plan {
	now := w.clock.Now()
	masked := w.masked(key)
	if len(masked) == 0 {
		return makePlan(cur, skipped, us, now)
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
	p := makePlan(base, skipped, kept, now)
	outcomes := make([]contract.ItemResult, len(us))
	for j, i := range slots {
		outcomes[i] = p.outcomes[j]
	}
	p.outcomes = outcomes
	if !p.changed && len(removed) > 0 {
		p.changed, p.status, p.skipped = true, removalStatus(base, removed, now), nil
	}
	// The score gauge forgets masked scores as it forgets expired ones.
	p.removed = append(p.removed, removed...)

	note := ""
	if len(removed) > 0 {
		note = "; removed from the object: " + listed(removed, "scores")
	}
	for i := range us {
		r := &p.outcomes[i]
		switch {
		case len(dropped[i]) == 0:
		case len(dropped[i]) == len(us[i].Scores):
			*r = contract.ItemResult{Outcome: contract.OutcomeSkipped, Reason: contract.ReasonMasked, Message: "masked, not written: " + listed(dropped[i], "scores") + note}
		case r.Outcome == contract.OutcomeWritten:
			r.Reason, r.Message = contract.ReasonMasked, "written except the masked "+listed(dropped[i], "scores")+note
		default:
			r.Message += "; masked, not written: " + listed(dropped[i], "scores")
		}
	}
	return p
}

// masked are the masked score names of key's object, sorted.
func (w *Writer) masked(key Key) []string {
	if w.opts.Masks == nil {
		return nil
	}
	return w.opts.Masks.Scores(key.Cluster, key.Resource)
}

// holdsMasked reports whether obj holds a score that is masked.
func (w *Writer) holdsMasked(key Key, obj *clusterv1alpha1.AddOnPlacementScore) bool {
	masked := w.masked(key)
	if obj == nil || len(masked) == 0 {
		return false
	}
	return slices.ContainsFunc(obj.Status.Scores, func(s clusterv1alpha1.AddOnPlacementScoreItem) bool {
		_, ok := slices.BinarySearch(masked, s.Name)
		return ok
	})
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
		n := len(led.lines)
		for name := range led.lines {
			if isMasked(name) {
				delete(led.lines, name)
			}
		}
		if len(led.lines) != n {
			out.Status.Conditions = setLedger(out.Status.Conditions, led.messages())
		}
	}
	slices.Sort(removed)
	return out, removed
}

// removalStatus is the status of an object whose masked scores were removed and nothing else
// changed: its validUntil is again the earliest of the remaining scores'.
func removalStatus(obj *clusterv1alpha1.AddOnPlacementScore, removed []string, now time.Time) clusterv1alpha1.AddOnPlacementScoreStatus {
	status := *obj.Status.DeepCopy()
	m := newMerge(obj, nil, time.Time{})
	status.ValidUntil = nil
	if vu := objectValidUntil(m.lines, m.others, m.hasOthers()); !vu.IsZero() {
		t := metav1.NewTime(vu)
		status.ValidUntil = &t
	}
	setUpdated(&status, reasonScoresMasked, "masked scores removed: "+listed(removed, "scores"), now)
	return status
}
