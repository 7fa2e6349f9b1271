package scorewriter

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// ConditionUpdated is the status condition the writer sets on every write.
const ConditionUpdated = "ScoresUpdated"

// ConditionObservations carries the ledger: per score name, when the applied value was observed
// and until when it is valid, as JSON in the message. It lives on the object so that ordering
// survives writer restarts and is shared by replicas; it lives in status, not in an annotation, so
// that the ledger and the scores change in one atomic status write (annotations cannot be written
// through /status) - one API write per flush instead of two, and no RBAC beyond the status.
const ConditionObservations = "scoreflow.io/Observations"

// Reasons of the writer's conditions.
const (
	reasonObservationTimes = "ObservationTimes"
	reasonScoresWritten    = "ScoresWritten"
	reasonScoresMasked     = "ScoresMasked"
)

// maxLedgerBytes is the CRD's limit on a condition message.
const maxLedgerBytes = 32768

// entry is one score's line in the ledger: [observed, validUntil], compact so that a few hundred
// score names fit in one condition message. A zero ValidUntil means the score never expires.
type entry struct {
	Observed   time.Time
	ValidUntil time.Time
}

func (e entry) MarshalJSON() ([]byte, error) {
	return json.Marshal([2]string{e.Observed.UTC().Format(time.RFC3339Nano), e.ValidUntil.UTC().Format(time.RFC3339Nano)})
}

func (e *entry) UnmarshalJSON(b []byte) error {
	var pair [2]time.Time
	if err := json.Unmarshal(b, &pair); err != nil {
		return err
	}
	e.Observed, e.ValidUntil = pair[0], pair[1]
	return nil
}

type ledger map[string]entry

func readLedger(obj *clusterv1alpha1.AddOnPlacementScore) (ledger, error) {
	l := ledger{}
	if obj == nil {
		return l, nil
	}
	c := meta.FindStatusCondition(obj.Status.Conditions, ConditionObservations)
	if c == nil {
		return l, nil
	}
	if err := json.Unmarshal([]byte(c.Message), &l); err != nil {
		return ledger{}, fmt.Errorf("condition %s: %w", ConditionObservations, err)
	}
	return l, nil
}

func (l ledger) encode() string {
	b, _ := json.Marshal(l) // map of times: always marshals; keys come out sorted
	return string(b)
}

// decision is what became of one update in a plan.
type decision struct {
	written  bool
	rejected bool            // refused for good (Rejected); otherwise not written means skipped
	reason   contract.Reason // Duplicate, Stale or Rejected when not written
	message  string
}

// plan is the result of merging updates into an object.
type plan struct {
	// changed: the object must be written. A plan whose updates only repeat the values on the
	// object (see unchanged) is not a change: its ledger then holds their newer observation times,
	// which the writer remembers with its copy of the object (remembered) instead of writing them.
	changed   bool
	unchanged bool
	ledger    ledger
	status    clusterv1alpha1.AddOnPlacementScoreStatus
	decisions []decision
	// expired are score names dropped because their validUntil passed.
	expired []string
}

// makePlan merges updates into cur (nil: the object does not exist yet) as of now. Per score name
// the newest observation wins; an update older than what is applied is Stale; one equal in time
// and value is a Duplicate; one whose own validUntil has passed is Stale (it would be dropped in
// the same write). Scores other producers wrote (absent from the ledger) are kept. A score whose
// validUntil has passed is dropped, so that an expired score never rides along with fresh ones,
// and its removal alone is a change worth writing; the object's validUntil is the earliest of its
// remaining scores' (nil when none of them expires).
//
// Write avoidance: a newer observation of the value the object already holds is no change while
// the stored validUntil keeps at least half the validity the update would give (unchangedFor). A
// plan made only of such updates writes nothing: its updates are answered Unchanged, and its
// ledger carries their observation times so that the writer can remember them (see remembered);
// any later write of the object records them. Once the stored validUntil would lapse within that
// half, the update is written again, so that skipping never lets a refreshed score expire.
func makePlan(cur *clusterv1alpha1.AddOnPlacementScore, updates []*Update, now time.Time) plan {
	led, _ := readLedger(cur) // an unreadable ledger is rebuilt from the updates: ordering restarts
	next := make(ledger, len(led)+4)
	for k, v := range led {
		next[k] = v
	}
	values := map[string]int32{}
	var status clusterv1alpha1.AddOnPlacementScoreStatus
	if cur != nil {
		status = *cur.Status.DeepCopy()
	}
	for _, s := range status.Scores {
		values[s.Name] = s.Value
	}
	p := plan{decisions: make([]decision, len(updates)), ledger: next}

	// Expired entries go first: they order nothing (a clock that ran ahead once must not block
	// every later observation) and their room in the ledger is free again.
	for name, e := range next {
		if e.expired(now) {
			delete(next, name)
			delete(values, name)
			p.expired = append(p.expired, name)
		}
	}
	sort.Strings(p.expired)
	size := newLedgerSize(next)

	// Apply in observation order; arrival order breaks ties (sort.SliceStable keeps it).
	order := make([]int, len(updates))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return updates[order[a]].Observed.Before(updates[order[b]].Observed) })

	owner := map[string]int{} // score name -> index of the update whose value stands
	real := false             // some applied score changes a value, a validity or adds a name
	dupOnly := make([]bool, len(updates))
	superseded := make([]bool, len(updates))
	lapsed := make([]bool, len(updates))
	rejected := make([]string, len(updates))
	for _, i := range order {
		u := updates[i]
		if !u.ValidUntil.IsZero() && !u.ValidUntil.After(now) {
			lapsed[i] = true // it expired while waiting (retries): writing it would drop it at once
			continue
		}
		dupOnly[i] = true
		var apply []contract.Score
		for _, s := range u.Scores {
			v := int32(s.Value)
			prev, known := next[s.Name]
			switch {
			case known && u.Observed.Before(prev.Observed):
				dupOnly[i] = false // stale
				continue
			case known && u.Observed.Equal(prev.Observed) && hasValue(values, s.Name, v):
				if _, mine := owner[s.Name]; !mine {
					continue // duplicate of what is on the object
				}
			}
			apply = append(apply, s)
		}
		// The ledger's encoded size after this update, counting rewrites (a nanosecond time is
		// longer than a whole second) as well as new names. An update that would overflow the
		// condition is refused alone, so that it cannot fail the others coalesced into this write.
		grown := size
		e := entry{Observed: u.Observed, ValidUntil: u.ValidUntil}
		for _, s := range apply {
			if prev, ok := next[s.Name]; ok {
				grown = grown.replace(s.Name, prev, e)
			} else {
				grown = grown.add(s.Name, e)
			}
		}
		if grown.bytes() > maxLedgerBytes {
			dupOnly[i] = false
			rejected[i] = fmt.Sprintf("these scores would make this object's observation ledger %d bytes, over the %d a condition holds: spread them over more AddOnPlacementScore resources", grown.bytes(), maxLedgerBytes)
			continue
		}
		size = grown
		for _, s := range apply {
			dupOnly[i] = false // applied, though a newer update in this batch may supersede it
			if j, ok := owner[s.Name]; ok {
				superseded[j] = true
			}
			prev, known := next[s.Name]
			if !known || !hasValue(values, s.Name, int32(s.Value)) || !unchangedFor(prev, e, now) {
				real = true
			}
			next[s.Name] = e
			values[s.Name] = int32(s.Value)
			owner[s.Name] = i
		}
	}

	p.changed = real || len(p.expired) > 0
	p.unchanged = !p.changed && len(owner) > 0
	unchanged := make([]bool, len(updates))
	for _, i := range owner {
		if p.changed {
			p.decisions[i].written = true
		} else {
			unchanged[i] = true
		}
	}
	for i, u := range updates {
		switch {
		case p.decisions[i].written:
		case unchanged[i]:
			p.decisions[i] = decision{reason: contract.ReasonUnchanged, message: "the object already holds these values, valid long enough: not written again"}
		case lapsed[i]:
			p.decisions[i] = decision{reason: contract.ReasonStale, message: "validUntil " + u.ValidUntil.UTC().Format(time.RFC3339Nano) + " passed before the hub could be written"}
		case rejected[i] != "":
			p.decisions[i] = decision{rejected: true, reason: contract.ReasonRejected, message: rejected[i]}
		case dupOnly[i]:
			p.decisions[i] = decision{reason: contract.ReasonDuplicate, message: "these scores, observed at this time, are already applied"}
		case superseded[i]:
			p.decisions[i] = decision{reason: contract.ReasonStale, message: "superseded by a newer update of the same scores in the same write"}
		default:
			p.decisions[i] = decision{reason: contract.ReasonStale, message: fmt.Sprintf("newer scores than %s are already applied", u.Observed.UTC().Format(time.RFC3339Nano))}
		}
	}
	if !p.changed {
		return p
	}

	// Keep the existing order of scores; append new names sorted, so writes are deterministic.
	var scores []clusterv1alpha1.AddOnPlacementScoreItem
	seen := map[string]bool{}
	for _, s := range status.Scores {
		if v, ok := values[s.Name]; ok {
			scores = append(scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: s.Name, Value: v})
		}
		seen[s.Name] = true
	}
	var added []string
	for name := range values {
		if !seen[name] {
			added = append(added, name)
		}
	}
	sort.Strings(added)
	for _, name := range added {
		scores = append(scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: name, Value: values[name]})
	}
	status.Scores = scores

	// The object is valid until its first score expires; nil (never) when none of them does.
	status.ValidUntil = nil
	if earliest, ok := next.firstExpiry(); ok {
		vu := metav1.NewTime(earliest)
		status.ValidUntil = &vu
	}
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:    ConditionObservations,
		Status:  metav1.ConditionTrue,
		Reason:  reasonObservationTimes,
		Message: next.encode(),
	})
	meta.SetStatusCondition(&status.Conditions, metav1.Condition{
		Type:    ConditionUpdated,
		Status:  metav1.ConditionTrue,
		Reason:  reasonScoresWritten,
		Message: conditionMessage(updates, p.decisions, p.expired),
	})
	p.status = status
	return p
}

// unchangedFor reports whether a newer observation e of the value stored under prev may go
// unwritten: the validity stays the same kind (both never expire, or both do, the stored one not
// later than e's), and the stored validUntil keeps at least half the validity e would give from
// now. A refresh every interval then writes about once per half TTL, and the score never lapses
// while it is refreshed.
func unchangedFor(prev, e entry, now time.Time) bool {
	switch {
	case e.ValidUntil.IsZero() || prev.ValidUntil.IsZero():
		return e.ValidUntil.IsZero() && prev.ValidUntil.IsZero()
	case prev.ValidUntil.After(e.ValidUntil):
		return false // e shortens the validity: that is a change
	}
	return 2*prev.ValidUntil.Sub(now) >= e.ValidUntil.Sub(now)
}

// remembered is obj with the observation times of a plan that wrote nothing (p.unchanged): the
// writer's copy of the object, so that it orders later updates by them. Only observation times
// move; validUntil stays what the hub holds, so expiry and the rule above use the stored one.
// The copy stands for the hub's object only at obj's resourceVersion: any write or read replaces it.
func remembered(obj *clusterv1alpha1.AddOnPlacementScore, p plan) *clusterv1alpha1.AddOnPlacementScore {
	stored, err := readLedger(obj)
	if err != nil || !p.unchanged {
		return obj
	}
	l := make(ledger, len(stored))
	for name, e := range stored {
		if n, ok := p.ledger[name]; ok && n.Observed.After(e.Observed) {
			e.Observed = n.Observed
		}
		l[name] = e
	}
	out := obj.DeepCopy()
	meta.SetStatusCondition(&out.Status.Conditions, metav1.Condition{
		Type:    ConditionObservations,
		Status:  metav1.ConditionTrue,
		Reason:  reasonObservationTimes,
		Message: l.encode(),
	})
	return out
}

// firstExpiry is the earliest validUntil among the ledger's entries; false when none expires.
func (l ledger) firstExpiry() (time.Time, bool) {
	var earliest time.Time
	for _, e := range l {
		if !e.ValidUntil.IsZero() && (earliest.IsZero() || e.ValidUntil.Before(earliest)) {
			earliest = e.ValidUntil
		}
	}
	return earliest, !earliest.IsZero()
}

// nextExpiry is when the first score obj's ledger knows of expires; false when none does (or the
// object carries no ledger: another producer's).
func nextExpiry(obj *clusterv1alpha1.AddOnPlacementScore) (time.Time, bool) {
	l, err := readLedger(obj)
	if err != nil {
		return time.Time{}, false
	}
	return l.firstExpiry()
}

// ledgerSize tracks the exact length of a ledger's JSON encoding as entries are added or
// rewritten: "{" + entries joined by "," + "}", each entry `"name":["observed","validUntil"]`.
type ledgerSize struct {
	entries int // sum of the entries' encoded lengths
	n       int
}

func newLedgerSize(l ledger) ledgerSize {
	var s ledgerSize
	for name, e := range l {
		s = s.add(name, e)
	}
	return s
}

func (s ledgerSize) add(name string, e entry) ledgerSize {
	return ledgerSize{entries: s.entries + entryBytes(name, e), n: s.n + 1}
}

func (s ledgerSize) replace(name string, old, e entry) ledgerSize {
	return ledgerSize{entries: s.entries - entryBytes(name, old) + entryBytes(name, e), n: s.n}
}

func (s ledgerSize) bytes() int { return 2 + s.entries + max(s.n-1, 0) }

func entryBytes(name string, e entry) int {
	k, _ := json.Marshal(name)
	v, _ := e.MarshalJSON()
	return len(k) + 1 + len(v)
}

// expired reports whether the entry's validUntil has passed (a zero validUntil never does).
func (e entry) expired(now time.Time) bool {
	return !e.ValidUntil.IsZero() && !e.ValidUntil.After(now)
}

func hasValue(values map[string]int32, name string, v int32) bool {
	cur, ok := values[name]
	return ok && cur == v
}

// Bounds of the ScoresUpdated message: sources are chosen by senders, so the message lists a few,
// each cut short, and counts the rest; it stays far below the condition's 32 KiB whatever they send.
const (
	maxListed     = 5
	maxSourceText = 100
)

// conditionMessage says which producers' scores the last write applied, newest observation first,
// and which expired scores it removed.
func conditionMessage(updates []*Update, ds []decision, expired []string) string {
	var newest time.Time
	sources := map[string]bool{}
	for i, u := range updates {
		if !ds[i].written {
			continue
		}
		sources[u.Source] = true
		if u.Observed.After(newest) {
			newest = u.Observed
		}
	}
	names := make([]string, 0, len(sources))
	for s := range sources {
		names = append(names, s)
	}
	sort.Strings(names)
	var parts []string
	if len(names) > 0 {
		parts = append(parts, fmt.Sprintf("scores from %s observed up to %s", listed(names, "sources"), newest.UTC().Format(time.RFC3339)))
	}
	if len(expired) > 0 {
		parts = append(parts, "expired scores removed: "+listed(expired, "scores"))
	}
	return strings.Join(parts, "; ")
}

// listed joins the first maxListed names, each cut to maxSourceText bytes, and counts the others.
func listed(names []string, what string) string {
	shown := make([]string, 0, maxListed)
	for _, n := range names[:min(len(names), maxListed)] {
		shown = append(shown, truncate(n, maxSourceText))
	}
	out := strings.Join(shown, ", ")
	if more := len(names) - len(shown); more > 0 {
		out += fmt.Sprintf(" and %d more %s", more, what)
	}
	return out
}

// truncate cuts s to at most n bytes on a rune boundary, marking the cut.
func truncate(s string, n int) string {
	if len(s) <= n {
		return s
	}
	cut := n
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return strings.ToValidUTF8(s[:cut], "") + "..."
}
