package scorewriter

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
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

// Reasons of the writer's conditions.
const (
	reasonObservationTimes = "ObservationTimes"
	reasonScoresWritten    = "ScoresWritten"
	reasonScoresMasked     = "ScoresMasked"
	// reasonNoScores: the object holds no score (every one expired, was retired or masked) since
	// the condition's lastTransitionTime; the writer deletes it Options.DeleteEmptyAfter later.
	reasonNoScores = "NoScores"
)

// plan is what merging updates into an object comes to.
type plan struct {
	// changed: the object must be written, with status.
	changed bool
	status  clusterv1alpha1.AddOnPlacementScoreStatus
	// outcomes are the updates' results, in their order (the writer adds cluster and
	// resourceVersion).
	outcomes []contract.ItemResult
	// wrote: some update's scores are in status (the object counts as refreshed).
	wrote bool
	// removed are the scores the write takes off the object (expired, retired, masked).
	removed []string
	// skipped, when nothing is written, are the lines of updates answered Unchanged: newer than
	// the hub's, kept by the writer with the object until its next write.
	skipped skippedLines
	// due is when the object next needs a write of its own: a score's expiry, or the validity
	// owed to skipped updates (see unchangedFor). Zero: never.
	due time.Time
}

// makePlan merges updates into cur (nil: the object does not exist yet) as of now. skipped are
// lines the writer applied at cur's resourceVersion without writing them (plan.skipped).
//
// Per score name the newest observation wins: an update older than the line applied is Stale,
// one equal in time and value a Duplicate. Scores without a line (other producers') are kept,
// valid as long as the object said when the writer first met them (ledger.others). A score whose
// validUntil has passed is removed, so that an expired score never rides along with fresh ones;
// its removal alone is a change worth writing. A neverExpires update replaces its source's
// neverExpires names: those it no longer carries leave the object (retire). The object's
// validUntil is the earliest of its scores' (nil when none of them expires): OCM has one
// validUntil per object, so no score is valid longer than its producer said, and one may count as
// expired from another's validUntil until the writer removes that one (it is due then).
//
// Write avoidance: a newer observation of the value the object holds is no change while the
// stored validUntil keeps at least half the validity the update gives (unchangedFor). A plan made
// only of such updates writes nothing: they are answered Unchanged and their lines are returned as
// skipped; the validity they were given is owed, and due before the stored one would fall below
// that half, when the writer writes it without waiting for another update. A skip therefore
// never shortens a score's life: missed refreshes are tolerated as long as without it.
func makePlan(cur *clusterv1alpha1.AddOnPlacementScore, skipped skippedLines, updates []*Update, now time.Time) plan {
	m := newMerge(cur, skipped, now)
	m.dropExpired()
	outcomes := make([]contract.ItemResult, len(updates))
	applied := make([]bool, len(updates))
	for _, i := range observationOrder(updates) {
		outcomes[i], applied[i] = m.apply(i, updates[i])
	}
	p := plan{changed: m.changed || len(m.removed) > 0 || m.validUntilOff || m.owedDue(), removed: m.removed}
	owns := map[int]bool{}
	for _, i := range m.owner {
		owns[i] = true
	}
	for i := range updates {
		if applied[i] {
			outcomes[i] = appliedOutcome(owns[i] || m.retiredBy[i], p.changed)
			p.wrote = p.wrote || outcomes[i].Outcome == contract.OutcomeWritten
		}
	}
	p.outcomes = outcomes
	if !p.changed {
		p.skipped = m.unwritten()
		p.due = m.due()
		return p
	}
	m.store()
	p.status = m.status(updates, outcomes)
	p.due = m.due()
	return p
}

// merge is makePlan's work: the object's scores and ledger as updates are applied.
type merge struct {
	now       time.Time
	cur       *clusterv1alpha1.AddOnPlacementScore
	hub       ledger           // the ledger on the hub
	lines     map[string]line  // the ledger as merged so far
	stored    map[string]line  // the hub's line of each name (validUntil as the hub holds it)
	values    map[string]int32 // the object's scores
	others    validity         // of scores without a line
	owner     map[string]int   // name -> the update (index) whose value stands
	retiredBy map[int]bool     // updates that retired names
	changed   bool             // an applied update changes a value, a validity or a name
	removed   []string         // expired and retired names
	// validUntilOff: the object's validUntil is not what its scores say (someone else changed or
	// cleared it); the object is rewritten.
	validUntilOff bool
}

func newMerge(cur *clusterv1alpha1.AddOnPlacementScore, skipped skippedLines, now time.Time) *merge {
	hub, _ := readLedger(cur) // an unreadable ledger leaves every score without a line
	m := &merge{now: now, cur: cur, hub: hub, lines: make(map[string]line, len(hub.lines)+4), values: map[string]int32{},
		owner: map[string]int{}, retiredBy: map[int]bool{}}
	if cur != nil {
		for _, s := range cur.Status.Scores {
			m.values[s.Name] = s.Value
		}
	}
	for name, ln := range hub.lines {
		if _, ok := m.values[name]; ok { // a line without its score (removed by someone else) orders nothing more
			m.lines[name] = ln
		}
	}
	m.stored = maps.Clone(m.lines)
	for _, s := range skipped {
		if _, ok := m.lines[s.name]; ok {
			m.lines[s.name] = s.line
		}
	}
	m.others = m.othersValidity()
	m.validUntilOff = cur != nil && !objectValidUntil(m.stored, m.others, m.hasOthers()).Equal(storedValidUntil(cur))
	return m
}

// othersValidity is the validity of the object's scores without a line: the one recorded when
// the writer last wrote, unless the object's validUntil has changed since (someone else wrote it),
// when the object's word stands.
func (m *merge) othersValidity() validity {
	if !m.hasOthers() {
		return validity{}
	}
	stored := storedValidUntil(m.cur)
	if m.hub.others.known && objectValidUntil(m.stored, m.hub.others, true).Equal(stored) {
		return m.hub.others
	}
	return validity{known: true, until: stored}
}

func (m *merge) hasOthers() bool {
	for name := range m.values {
		if _, ok := m.lines[name]; !ok {
			return true
		}
	}
	return false
}

// dropExpired removes the scores whose validUntil has passed. An expired line orders nothing (a
// clock that ran ahead once must not block every later observation) and its room is free again.
func (m *merge) dropExpired() {
	for name, ln := range m.lines {
		if expired(ln.validUntil, m.now) {
			m.remove(name)
		}
	}
	if m.others.known && expired(m.others.until, m.now) {
		for name := range m.values {
			if _, ok := m.lines[name]; !ok {
				m.remove(name)
			}
		}
		m.others = validity{}
	}
	sort.Strings(m.removed)
}

func (m *merge) remove(name string) {
	delete(m.lines, name)
	delete(m.values, name)
	m.removed = append(m.removed, name)
}

// observationOrder is the order updates apply in: by observation time, arrival breaking ties.
func observationOrder(updates []*Update) []int {
	order := make([]int, len(updates))
	for i := range order {
		order[i] = i
	}
	sort.SliceStable(order, func(a, b int) bool { return updates[order[a]].Observed.Before(updates[order[b]].Observed) })
	return order
}

// undo restores what applying one update changed, when it is refused.
type undo struct {
	lines   map[string]*line // nil: the name had no line
	values  map[string]*int32
	owner   map[string]int // -1: none
	n       int            // len(m.removed) before
	changed bool
	update  int
}

// apply merges update i. It returns the update's outcome when that is decided here (lapsed,
// refused, nothing newer to apply), else applied true: the outcome then depends on the whole
// plan (merge.outcome).
func (m *merge) apply(i int, u *Update) (contract.ItemResult, bool) {
	if expired(u.ValidUntil, m.now) {
		return failed(contract.ReasonStale, false, "validUntil "+u.ValidUntil.UTC().Format(time.RFC3339Nano)+" passed before the hub could be written: nothing was written"), false
	}
	e := line{source: u.Source, observed: u.Observed, validUntil: u.ValidUntil}
	var apply []contract.Score
	dup := true
	for _, s := range u.Scores {
		prev, known := m.lines[s.Name]
		_, mine := m.owner[s.Name]
		switch {
		case known && u.Observed.Before(prev.observed):
			dup = false // stale
			continue
		case known && u.Observed.Equal(prev.observed) && m.hasValue(s.Name, int32(s.Value)) && !mine:
			continue // the object holds it already
		}
		apply = append(apply, s)
	}
	retire := m.retired(u)
	if len(apply) == 0 && len(retire) == 0 {
		if dup {
			return contract.ItemResult{Outcome: contract.OutcomeSkipped, Reason: contract.ReasonDuplicate, Message: "these scores, observed at this time, are already applied"}, false
		}
		return contract.ItemResult{Outcome: contract.OutcomeSkipped, Reason: contract.ReasonStale,
			Message: fmt.Sprintf("newer scores than %s are already applied", u.Observed.UTC().Format(time.RFC3339Nano))}, false
	}

	adds := false // names the object does not hold: only these may be refused for size
	for _, sc := range apply {
		if _, held := m.values[sc.Name]; !held {
			adds = true
		}
	}
	un := m.save(i, apply, retire)
	for _, name := range retire {
		m.remove(name)
		m.changed = true
		m.retiredBy[i] = true
	}
	for _, s := range apply {
		v := int32(s.Value)
		_, known := m.lines[s.Name]
		stored, onHub := m.stored[s.Name]
		if !known || !onHub || !m.hasValue(s.Name, v) || !unchangedFor(stored, e, m.now) {
			m.changed = true
		}
		m.lines[s.Name] = e
		m.values[s.Name] = v
		m.owner[s.Name] = i
	}
	bound := contract.MaxObjectStatusBytes
	if !adds {
		bound = maxObjectStatusCeiling
	}
	if size := m.size(); size > bound {
		m.restore(un)
		return failed(contract.ReasonRejected, false, fmt.Sprintf(
			"these scores would make this AddOnPlacementScore's scores and observation ledger %d bytes, over the %d it may hold: spread them over more resources, or fewer names",
			size, bound)), false
	}
	return contract.ItemResult{}, true
}

// maxObjectStatusCeiling bounds an object's scores and ledger whatever updates do to them. Only an
// update that adds names is held to contract.MaxObjectStatusBytes: one that refreshes names the
// object holds, with new values, times or validity, may grow it a little past that bound (wider
// values; the ledger's groups split when a producer refreshes some of its names at a time) and is
// never refused for it, so that a producer is never refused what it already holds. Only an
// object split into thousands of ledger groups could reach this ceiling, which keeps it far below
// etcd's 1.5 MiB per object.
const maxObjectStatusCeiling = 2 * contract.MaxObjectStatusBytes

// retired are the names a neverExpires update of source u.Source no longer carries: lines of that
// source, never expiring and observed before u. An update that expires retires nothing: its
// source's names expire on their own.
func (m *merge) retired(u *Update) []string {
	if !u.ValidUntil.IsZero() {
		return nil
	}
	carried := make(map[string]bool, len(u.Scores))
	for _, s := range u.Scores {
		carried[s.Name] = true
	}
	var out []string
	for name, ln := range m.lines {
		if ln.source == u.Source && ln.validUntil.IsZero() && ln.observed.Before(u.Observed) && !carried[name] {
			out = append(out, name)
		}
	}
	sort.Strings(out)
	return out
}

func (m *merge) save(i int, apply []contract.Score, retire []string) undo {
	un := undo{lines: map[string]*line{}, values: map[string]*int32{}, owner: map[string]int{}, n: len(m.removed), changed: m.changed, update: i}
	keep := func(name string) {
		if _, ok := un.lines[name]; ok {
			return
		}
		un.lines[name], un.values[name], un.owner[name] = nil, nil, -1
		if ln, ok := m.lines[name]; ok {
			un.lines[name] = &ln
		}
		if v, ok := m.values[name]; ok {
			un.values[name] = &v
		}
		if o, ok := m.owner[name]; ok {
			un.owner[name] = o
		}
	}
	for _, s := range apply {
		keep(s.Name)
	}
	for _, name := range retire {
		keep(name)
	}
	return un
}

func (m *merge) restore(un undo) {
	for name, ln := range un.lines {
		if ln == nil {
			delete(m.lines, name)
		} else {
			m.lines[name] = *ln
		}
		if v := un.values[name]; v == nil {
			delete(m.values, name)
		} else {
			m.values[name] = *v
		}
		if o := un.owner[name]; o < 0 {
			delete(m.owner, name)
		} else {
			m.owner[name] = o
		}
	}
	m.removed = m.removed[:un.n]
	m.changed = un.changed
	delete(m.retiredBy, un.update)
}

// size is what the object's scores and ledger would take, as written (contract.MaxObjectStatusBytes).
func (m *merge) size() int {
	n := 0
	for _, msg := range m.ledger().messages() {
		n += len(msg)
	}
	b, _ := json.Marshal(m.scores())
	return n + len(b)
}

func (m *merge) hasValue(name string, v int32) bool {
	cur, ok := m.values[name]
	return ok && cur == v
}

// appliedOutcome is the result of an applied update: Written (or Unchanged, when the plan writes
// nothing) if a value of it stands or it retired names, else Stale: superseded in this plan.
func appliedOutcome(stands, changed bool) contract.ItemResult {
	switch {
	case stands && changed:
		return contract.ItemResult{Outcome: contract.OutcomeWritten}
	case stands:
		return contract.ItemResult{Outcome: contract.OutcomeSkipped, Reason: contract.ReasonUnchanged, Message: "the object already holds these values, valid long enough: not written again"}
	}
	return contract.ItemResult{Outcome: contract.OutcomeSkipped, Reason: contract.ReasonStale, Message: "superseded by a newer update of the same scores in the same write"}
}

// ledger is the merged ledger.
func (m *merge) ledger() ledger {
	l := ledger{lines: m.lines}
	if m.hasOthers() {
		l.others = m.others
	}
	return l
}

// owedDue reports whether a skipped update's validity is due: the stored validUntil of one of its
// names keeps less than half of what the update gave.
func (m *merge) owedDue() bool {
	t, ok := m.owedAt()
	return ok && !t.After(m.now)
}

// owedAt is the earliest time a skipped update's validity must be written.
func (m *merge) owedAt() (time.Time, bool) {
	var first time.Time
	for name, ln := range m.lines {
		stored, ok := m.stored[name]
		if !ok || ln.validUntil.IsZero() || stored.validUntil.IsZero() || !ln.validUntil.After(stored.validUntil) {
			continue
		}
		if t := halfway(stored.validUntil, ln.validUntil); first.IsZero() || t.Before(first) {
			first = t
		}
	}
	return first, !first.IsZero()
}

// due is when the object next needs a write of its own: its first expiry, or owed validity.
func (m *merge) due() time.Time {
	var first time.Time
	earlier := func(t time.Time) {
		if !t.IsZero() && (first.IsZero() || t.Before(first)) {
			first = t
		}
	}
	for _, ln := range m.lines {
		earlier(ln.validUntil)
	}
	if m.hasOthers() {
		earlier(m.others.until)
	}
	if t, ok := m.owedAt(); ok {
		earlier(t)
	}
	return first
}

// unwritten are the merged lines that differ from the hub's.
func (m *merge) unwritten() skippedLines {
	var out skippedLines
	for name, ln := range m.lines {
		if stored, ok := m.stored[name]; ok && stored != ln {
			out = append(out, namedLine{name: name, line: ln})
		}
	}
	return slices.Clip(out)
}

// store makes the merged lines what the hub holds: the plan writes them.
func (m *merge) store() { m.stored = m.lines }

// scores lists the object's scores: its existing order, then new names sorted, so that writes
// are deterministic.
func (m *merge) scores() []clusterv1alpha1.AddOnPlacementScoreItem {
	out := make([]clusterv1alpha1.AddOnPlacementScoreItem, 0, len(m.values))
	seen := map[string]bool{}
	if m.cur != nil {
		for _, s := range m.cur.Status.Scores {
			if v, ok := m.values[s.Name]; ok && !seen[s.Name] {
				out = append(out, clusterv1alpha1.AddOnPlacementScoreItem{Name: s.Name, Value: v})
			}
			seen[s.Name] = true
		}
	}
	var added []string
	for name := range m.values {
		if !seen[name] {
			added = append(added, name)
		}
	}
	sort.Strings(added)
	for _, name := range added {
		out = append(out, clusterv1alpha1.AddOnPlacementScoreItem{Name: name, Value: m.values[name]})
	}
	return out
}

// status is the status to write: the merged scores, validUntil and ledger, and the message.
func (m *merge) status(updates []*Update, outcomes []contract.ItemResult) clusterv1alpha1.AddOnPlacementScoreStatus {
	var status clusterv1alpha1.AddOnPlacementScoreStatus
	if m.cur != nil {
		status = *m.cur.Status.DeepCopy()
	}
	status.Scores = m.scores()
	status.ValidUntil = nil
	if vu := objectValidUntil(m.lines, m.others, m.hasOthers()); !vu.IsZero() {
		t := metav1.NewTime(vu)
		status.ValidUntil = &t
	}
	status.Conditions = setLedger(status.Conditions, m.ledger().messages())
	setUpdated(&status, reasonScoresWritten, conditionMessage(updates, outcomes, m.removed), m.now)
	return status
}

// setUpdated sets the writer's ScoresUpdated condition of status: True with reason and message,
// or, when status holds no score, False with reason NoScores since now (its lastTransitionTime,
// kept while it stays so), the time from which the object counts as empty (emptySince).
func setUpdated(status *clusterv1alpha1.AddOnPlacementScoreStatus, reason, message string, now time.Time) {
	c := metav1.Condition{Type: ConditionUpdated, Status: metav1.ConditionTrue, Reason: reason, Message: message, LastTransitionTime: metav1.NewTime(now)}
	if len(status.Scores) == 0 {
		c.Status, c.Reason = metav1.ConditionFalse, reasonNoScores
		if c.Message == "" {
			c.Message = "no scores"
		}
	}
	meta.SetStatusCondition(&status.Conditions, c)
}

// emptySince is when obj, an object the writer wrote, came to hold no score: it holds none, nor a
// ledger line, and carries the writer's ScoresUpdated condition, since its lastTransitionTime
// (an object emptied by an earlier writer, whose condition stayed True, since it was first
// written). ok is false for any other object: one with scores, or one the writer never wrote.
func emptySince(obj *clusterv1alpha1.AddOnPlacementScore) (since time.Time, ok bool) {
	if obj == nil || len(obj.Status.Scores) > 0 || hasLedger(obj) {
		return time.Time{}, false
	}
	c := meta.FindStatusCondition(obj.Status.Conditions, ConditionUpdated)
	if c == nil || c.Reason != reasonNoScores && c.Reason != reasonScoresWritten && c.Reason != reasonScoresMasked {
		return time.Time{}, false
	}
	return c.LastTransitionTime.Time, true
}

// objectValidUntil is the validUntil of an object with these lines and, when it holds scores
// without a line, others: the earliest (zero: never), to the second, as the API stores it, cut
// down so that it never passes a score's own.
func objectValidUntil(lines map[string]line, others validity, hasOthers bool) time.Time {
	var first time.Time
	for _, ln := range lines {
		if !ln.validUntil.IsZero() && (first.IsZero() || ln.validUntil.Before(first)) {
			first = ln.validUntil
		}
	}
	if hasOthers && !others.until.IsZero() && (first.IsZero() || others.until.Before(first)) {
		first = others.until
	}
	return first.Truncate(time.Second)
}

func storedValidUntil(obj *clusterv1alpha1.AddOnPlacementScore) time.Time {
	if obj == nil || obj.Status.ValidUntil == nil {
		return time.Time{}
	}
	return obj.Status.ValidUntil.Time.Truncate(time.Second)
}

// unchangedFor reports whether e, a newer observation of the value stored under prev, may go
// unwritten: the validity stays the same kind (both never expire, or both do, the stored one not
// later than e's), and the stored validUntil keeps at least half the validity e gives from now.
// A refresh every interval then writes about once per half validity; what the skipped ones gave
// is written by the writer when that half is reached (merge.owedAt), refresh or not.
func unchangedFor(prev, e line, now time.Time) bool {
	switch {
	case e.validUntil.IsZero() || prev.validUntil.IsZero():
		return e.validUntil.IsZero() && prev.validUntil.IsZero()
	case prev.validUntil.After(e.validUntil):
		return false // e shortens the validity: that is a change
	}
	return !now.After(halfway(prev.validUntil, e.validUntil))
}

// halfway is when the stored validUntil keeps only half of what owed gives: stored less the
// difference (from then, stored - t = (owed - t) / 2). Time arithmetic, not durations, so that no
// far-off time can overflow.
func halfway(stored, owed time.Time) time.Time {
	return stored.Add(-owed.Sub(stored))
}

// expired reports whether validUntil has passed (the zero time never does).
func expired(validUntil, now time.Time) bool {
	return !validUntil.IsZero() && !validUntil.After(now)
}

// Bounds of the ScoresUpdated message: sources are chosen by senders and names may be many, so the
// message lists a few, each cut short, and counts the rest; it stays far below the condition's 32 KiB.
const (
	maxListed     = 5
	maxSourceText = 100
)

// conditionMessage says which producers' scores the last write applied, newest observation first,
// and which scores it removed.
func conditionMessage(updates []*Update, outcomes []contract.ItemResult, removed []string) string {
	var newest time.Time
	sources := map[string]bool{}
	for i, u := range updates {
		if outcomes[i].Outcome != contract.OutcomeWritten {
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
	if len(removed) > 0 {
		parts = append(parts, "expired or retired scores removed: "+listed(slices.Sorted(slices.Values(removed)), "scores"))
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

// failed is the result of an item that was not written.
func failed(reason contract.Reason, retriable bool, msg string) contract.ItemResult {
	return contract.ItemResult{Outcome: contract.OutcomeFailed, Reason: reason, Retriable: retriable, Message: msg}
}
