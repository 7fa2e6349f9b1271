package scorewriter

import (
	"encoding/json"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
)

// ConditionObservations carries the ledger: per score name, which producer (event source) applied
// it, when the applied value was observed and until when it is valid, as JSON in the message. It
// lives on the object so that ordering and expiry survive writer restarts and are shared by
// replicas; it lives in status, not in an annotation, so that the ledger and the scores change in
// one atomic status write (annotations cannot be written through /status) - one API write per
// flush, and no RBAC beyond the status.
//
// A condition's message holds at most 32,768 characters, about 300 names of 100 characters: a
// larger ledger continues in conditions of the same type with a suffix, scoreflow.io/Observations-1,
// -2 and so on (ledgerConditions), each a JSON document of its own. Together they are bounded with
// the scores by contract.MaxObjectStatusBytes.
const ConditionObservations = "scoreflow.io/Observations"

// maxConditionMessage is the CRD's limit on a condition's message.
const maxConditionMessage = 32768

// line is one score name's record in the ledger.
type line struct {
	source     string    // the event source that applied the value
	observed   time.Time // when the applied value was observed: orders later updates of the name
	validUntil time.Time // when the value stops being valid; zero: never
}

// skippedLines are the lines of updates answered Unchanged, each with its name. A slice rather
// than a map: after an unchanged refresh a fleet keeps one for every object until its next write,
// and a map of two lines costs as much as the informer's copy of the object
// (BenchmarkSkippedObjectBytes).
type skippedLines []namedLine

type namedLine struct {
	name string
	line line
}

// ledger is what the writer records about the scores of one object.
type ledger struct {
	lines map[string]line
	// others is the validity of the object's scores without a line: written by someone else, or
	// before the writer kept a ledger. The writer records it when it merges with such scores, as
	// the object's status.validUntil was then, so that its own writes of validUntil do not change
	// what those scores are worth (makePlan).
	others validity
}

// validity is a recorded validUntil: known false when none is recorded; until zero: never expires.
type validity struct {
	known bool
	until time.Time
}

// The JSON of one ledger condition: the lines grouped by what an event applies to all its scores
// (source, observation time, validity), so that a name costs its own bytes and a comma. Times are
// RFC 3339 in UTC with all nine digits of nanoseconds (ledgerTime): a ledger's size depends on its
// names and sources, not on its times, so that refreshing the same names never grows it. A group
// without validUntil never expires.
type ledgerDoc struct {
	Groups []ledgerGroup `json:"groups"`
	Others *othersDoc    `json:"others,omitempty"`
}

type ledgerGroup struct {
	Source     string      `json:"source"`
	Observed   ledgerTime  `json:"observed"`
	ValidUntil *ledgerTime `json:"validUntil,omitempty"`
	Names      []string    `json:"names"`
}

type othersDoc struct {
	ValidUntil *ledgerTime `json:"validUntil,omitempty"`
}

// ledgerTime is a time as the ledger writes it: always the same width. It reads any RFC 3339 time
// (earlier writers trimmed the trailing zeros of the fraction).
type ledgerTime time.Time

const ledgerTimeLayout = "2006-01-02T15:04:05.000000000Z07:00"

func (t ledgerTime) MarshalJSON() ([]byte, error) {
	return []byte(`"` + time.Time(t).UTC().Format(ledgerTimeLayout) + `"`), nil
}

func (t *ledgerTime) UnmarshalJSON(b []byte) error { return (*time.Time)(t).UnmarshalJSON(b) }

// isLedgerCondition reports whether a condition type is one of the ledger's: ConditionObservations,
// or it followed by "-" and a number.
func isLedgerCondition(t string) bool {
	if t == ConditionObservations {
		return true
	}
	n, ok := strings.CutPrefix(t, ConditionObservations+"-")
	if !ok || n == "" {
		return false
	}
	_, err := strconv.ParseUint(n, 10, 16)
	return err == nil
}

// ledgerConditionType is the type of the ledger's i-th condition.
func ledgerConditionType(i int) string {
	if i == 0 {
		return ConditionObservations
	}
	return ConditionObservations + "-" + strconv.Itoa(i)
}

// hasLedger reports whether obj carries a ledger: the writer has written it.
func hasLedger(obj *clusterv1alpha1.AddOnPlacementScore) bool {
	if obj == nil {
		return false
	}
	for _, c := range obj.Status.Conditions {
		if isLedgerCondition(c.Type) {
			return true
		}
	}
	return false
}

// readLedger decodes obj's ledger. An unreadable condition is an error: the caller then treats
// the object's scores as having no line (its ordering restarts, their validity is the object's).
func readLedger(obj *clusterv1alpha1.AddOnPlacementScore) (ledger, error) {
	l := ledger{lines: map[string]line{}}
	if obj == nil {
		return l, nil
	}
	for _, c := range obj.Status.Conditions {
		if !isLedgerCondition(c.Type) {
			continue
		}
		if err := l.decode(c.Message); err != nil {
			return ledger{lines: map[string]line{}}, fmt.Errorf("condition %s: %w", c.Type, err)
		}
	}
	return l, nil
}

func (l *ledger) decode(msg string) error {
	var doc ledgerDoc
	if err := json.Unmarshal([]byte(msg), &doc); err != nil || doc.Groups == nil {
		return l.decodeFlat(msg)
	}
	for _, g := range doc.Groups {
		for _, name := range g.Names {
			l.set(name, line{source: g.Source, observed: time.Time(g.Observed), validUntil: timeOrZero(g.ValidUntil)})
		}
	}
	if doc.Others != nil {
		l.others.known = true
		l.others.until = timeOrZero(doc.Others.ValidUntil)
	}
	return nil
}

// decodeFlat reads the ledger as writers before the grouped form wrote it: one object mapping
// each name to [observed, validUntil], the zero time for never, without sources.
func (l *ledger) decodeFlat(msg string) error {
	var flat map[string][2]time.Time
	if err := json.Unmarshal([]byte(msg), &flat); err != nil {
		return err
	}
	for name, e := range flat {
		l.set(name, line{observed: e[0], validUntil: e[1]})
	}
	return nil
}

// set records a line; of two lines for one name (conditions edited by hand), the newer stands.
func (l *ledger) set(name string, ln line) {
	if prev, ok := l.lines[name]; ok && prev.observed.After(ln.observed) {
		return
	}
	l.lines[name] = ln
}

// messages encodes the ledger as the messages of its conditions, each within
// maxConditionMessage; none when it is empty.
func (l ledger) messages() []string {
	if len(l.lines) == 0 && !l.others.known {
		return nil
	}
	var others *othersDoc
	if l.others.known {
		others = &othersDoc{ValidUntil: timeOrNil(l.others.until)}
	}
	// A group's names may fill several conditions: it is cut into parts, and parts are packed
	// into conditions in order.
	limit := maxConditionMessage - 256 // room for the document around the parts, and others
	var parts [][]byte
	for _, g := range l.groups() {
		names := g.Names
		for len(names) > 0 {
			g.Names = names[:fitNames(g, names, limit)]
			names = names[len(g.Names):]
			b, _ := json.Marshal(g) // strings and times: always marshals
			parts = append(parts, b)
		}
	}
	var out []string
	var doc strings.Builder
	flush := func() {
		if doc.Len() == 0 {
			doc.WriteString(`{"groups":[`)
		}
		doc.WriteString("]")
		if others != nil && len(out) == 0 {
			b, _ := json.Marshal(others)
			doc.WriteString(`,"others":`)
			doc.Write(b)
		}
		doc.WriteString("}")
		out = append(out, doc.String())
		doc.Reset()
	}
	for _, p := range parts {
		if doc.Len() > 0 && doc.Len()+1+len(p) > limit {
			flush()
		}
		if doc.Len() == 0 {
			doc.WriteString(`{"groups":[`)
		} else {
			doc.WriteString(",")
		}
		doc.Write(p)
	}
	flush()
	return out
}

// fitNames is how many of names, at least one, fit one part of group g within limit bytes.
func fitNames(g ledgerGroup, names []string, limit int) int {
	g.Names = []string{}
	head, _ := json.Marshal(g)
	size := len(head)
	for i, name := range names {
		q, _ := json.Marshal(name)
		size += len(q) + 1
		if size > limit && i > 0 {
			return i
		}
	}
	return len(names)
}

// groups are the ledger's lines grouped by source, observation and validity, in a fixed order:
// by observation time, then source and validity; names sorted.
func (l ledger) groups() []ledgerGroup {
	index := map[line]int{}
	var gs []ledgerGroup
	for name, ln := range l.lines {
		ln.observed, ln.validUntil = ln.observed.UTC(), ln.validUntil.UTC()
		i, ok := index[ln]
		if !ok {
			i = len(gs)
			index[ln] = i
			gs = append(gs, ledgerGroup{Source: ln.source, Observed: ledgerTime(ln.observed), ValidUntil: timeOrNil(ln.validUntil)})
		}
		gs[i].Names = append(gs[i].Names, name)
	}
	for i := range gs {
		slices.Sort(gs[i].Names)
	}
	slices.SortFunc(gs, func(a, b ledgerGroup) int {
		if c := time.Time(a.Observed).Compare(time.Time(b.Observed)); c != 0 {
			return c
		}
		if c := strings.Compare(a.Source, b.Source); c != 0 {
			return c
		}
		return timeOrZero(a.ValidUntil).Compare(timeOrZero(b.ValidUntil))
	})
	return gs
}

// setLedger replaces the ledger's conditions in conds with those of msgs, keeping the others.
func setLedger(conds []metav1.Condition, msgs []string) []metav1.Condition {
	now := metav1.Now()
	old := map[string]metav1.Condition{}
	out := conds[:0:0]
	for _, c := range conds {
		if isLedgerCondition(c.Type) {
			old[c.Type] = c
			continue
		}
		out = append(out, c)
	}
	for i, m := range msgs {
		c := metav1.Condition{Type: ledgerConditionType(i), Status: metav1.ConditionTrue, Reason: reasonObservationTimes, Message: m, LastTransitionTime: now}
		if prev, ok := old[c.Type]; ok && prev.Status == c.Status {
			c.LastTransitionTime = prev.LastTransitionTime
		}
		out = append(out, c)
	}
	return out
}

func timeOrNil(t time.Time) *ledgerTime {
	if t.IsZero() {
		return nil
	}
	lt := ledgerTime(t.UTC())
	return &lt
}

func timeOrZero(t *ledgerTime) time.Time {
	if t == nil {
		return time.Time{}
	}
	return time.Time(*t)
}

// Observation is what the writer's ledger records of one score: the producer (event source) that
// applied it, when its value was observed, and until when it is valid (zero: never).
type Observation struct {
	Source     string
	Observed   time.Time
	ValidUntil time.Time
}

// Observations reads the writer's ledger on obj, per score name: none when obj carries none.
func Observations(obj *clusterv1alpha1.AddOnPlacementScore) (map[string]Observation, error) {
	l, err := readLedger(obj)
	if err != nil {
		return nil, err
	}
	out := make(map[string]Observation, len(l.lines))
	for name, ln := range l.lines {
		out[name] = Observation{Source: ln.source, Observed: ln.observed, ValidUntil: ln.validUntil}
	}
	return out, nil
}
