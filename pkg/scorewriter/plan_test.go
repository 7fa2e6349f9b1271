package scorewriter

import (
	"fmt"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func upd(at time.Duration, scores ...contract.Score) *Update {
	return NewUpdate(Key{Cluster: "c1", Resource: "r"}, scores, t0.Add(at), t0.Add(time.Hour), "src")
}

func sc(name string, v float64) contract.Score { return contract.Score{Name: name, Value: v} }

// object applies p to a fresh object, as the hub would store it.
func object(p plan) *clusterv1alpha1.AddOnPlacementScore {
	return &clusterv1alpha1.AddOnPlacementScore{Status: *p.status.DeepCopy()}
}

func values(o *clusterv1alpha1.AddOnPlacementScore) map[string]int32 {
	m := map[string]int32{}
	for _, s := range o.Status.Scores {
		m[s.Name] = s.Value
	}
	return m
}

func TestMakePlan(t *testing.T) {
	now := t0.Add(time.Minute)
	base := object(makePlan(nil, []*Update{upd(0, sc("a", 1), sc("b", 2))}, now))
	foreign := base.DeepCopy()
	foreign.Status.Scores = append(foreign.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: "other", Value: 9})

	tests := []struct {
		name      string
		cur       *clusterv1alpha1.AddOnPlacementScore
		updates   []*Update
		changed   bool
		decisions []string // per update: Written, Duplicate or Stale
		want      map[string]int32
	}{
		{"create", nil, []*Update{upd(0, sc("a", 1))}, true, []string{"Written"}, map[string]int32{"a": 1}},
		{"newer wins", base, []*Update{upd(time.Second, sc("a", 5))}, true, []string{"Written"}, map[string]int32{"a": 5, "b": 2}},
		{"older is stale", base, []*Update{upd(-time.Second, sc("a", 5))}, false, []string{"Stale"}, map[string]int32{"a": 1, "b": 2}},
		{"same time same value is a duplicate", base, []*Update{upd(0, sc("a", 1), sc("b", 2))}, false, []string{"Duplicate"}, map[string]int32{"a": 1, "b": 2}},
		{"same time other value is applied", base, []*Update{upd(0, sc("a", 7))}, true, []string{"Written"}, map[string]int32{"a": 7, "b": 2}},
		{"older event, new score name, merges", base, []*Update{upd(-time.Second, sc("c", 3), sc("a", 0))}, true, []string{"Written"}, map[string]int32{"a": 1, "b": 2, "c": 3}},
		{"superseded in the same batch is stale", base, []*Update{upd(3*time.Second, sc("a", 30)), upd(2*time.Second, sc("a", 20))}, true, []string{"Written", "Stale"}, map[string]int32{"a": 30, "b": 2}},
		{"arrival order breaks time ties", base, []*Update{upd(time.Second, sc("a", 10)), upd(time.Second, sc("a", 11))}, true, []string{"Stale", "Written"}, map[string]int32{"a": 11, "b": 2}},
		{"scores of other producers are kept", foreign, []*Update{upd(time.Second, sc("a", 4))}, true, []string{"Written"}, map[string]int32{"a": 4, "b": 2, "other": 9}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			p := makePlan(tt.cur, tt.updates, now)
			if p.changed != tt.changed {
				t.Errorf("changed = %v, want %v", p.changed, tt.changed)
			}
			for i, d := range p.decisions {
				got := string(d.reason)
				if d.written {
					got = "Written"
				}
				if got != tt.decisions[i] {
					t.Errorf("update %d: %s, want %s", i, got, tt.decisions[i])
				}
			}
			if !p.changed {
				return
			}
			if got := values(object(p)); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("scores = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMakePlanExpiryAndValidUntil(t *testing.T) {
	short := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("short", 1)}, t0, t0.Add(time.Minute), "a")
	long := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("long", 2)}, t0, t0.Add(time.Hour), "b")
	p := makePlan(nil, []*Update{short, long}, t0)
	if !p.status.ValidUntil.Time.Equal(t0.Add(time.Minute)) {
		t.Errorf("validUntil = %v, want the earliest score's (%v)", p.status.ValidUntil, t0.Add(time.Minute))
	}
	// Two minutes later "short" has expired: the next write drops it rather than keep it alive.
	later := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("long", 3)}, t0.Add(2*time.Minute), t0.Add(time.Hour), "b")
	p = makePlan(object(p), []*Update{later}, t0.Add(2*time.Minute))
	if got := values(object(p)); len(got) != 1 || got["long"] != 3 {
		t.Errorf("scores = %v, want only long=3", got)
	}
	if len(p.expired) != 1 || p.expired[0] != "short" || !p.status.ValidUntil.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("expired %v validUntil %v", p.expired, p.status.ValidUntil)
	}
	led, err := readLedger(object(p))
	if err != nil || len(led) != 1 || !led["long"].Observed.Equal(t0.Add(2*time.Minute)) {
		t.Errorf("ledger = %v, %v", led, err)
	}
	if c := meta.FindStatusCondition(p.status.Conditions, ConditionUpdated); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("conditions = %+v", p.status.Conditions)
	}
}

// An update that would overflow the ledger's condition is refused alone; the updates coalesced
// with it are still written, and what is written fits.
func TestMakePlanRefusesOnlyTheUpdateThatOverflowsTheLedger(t *testing.T) {
	var many []contract.Score
	for i := 0; i < 600; i++ {
		many = append(many, sc(fmt.Sprintf("score-with-a-long-name-%04d", i), 1))
	}
	small := upd(time.Second, sc("small", 5))
	p := makePlan(nil, []*Update{upd(0, many...), small}, t0)
	if d := p.decisions[0]; !d.rejected || d.reason != contract.ReasonRejected {
		t.Errorf("600 names: %+v, want Rejected", d)
	}
	if d := p.decisions[1]; !d.written {
		t.Errorf("the small update coalesced with it: %+v, want written", d)
	}
	if n := len(p.ledger.encode()); n > maxLedgerBytes {
		t.Errorf("ledger of %d bytes written, over %d", n, maxLedgerBytes)
	}
	if p := makePlan(nil, []*Update{upd(0, many[:200]...)}, t0); !p.decisions[0].written || len(p.ledger.encode()) > maxLedgerBytes {
		t.Errorf("200 names: %+v", p.decisions[0])
	}
}

// A score observed "in the future" (a clock ahead) that has expired must not block later honest
// observations: an expired entry orders nothing.
func TestMakePlanExpiredEntryDoesNotBlockOlderObservations(t *testing.T) {
	ahead := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("a", 10)}, t0.Add(24*time.Hour), t0.Add(time.Minute), "skewed")
	base := object(makePlan(nil, []*Update{ahead}, t0))
	honest := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("a", 20)}, t0.Add(2*time.Minute), t0.Add(time.Hour), "honest")
	p := makePlan(base, []*Update{honest}, t0.Add(2*time.Minute))
	if !p.decisions[0].written || values(object(p))["a"] != 20 {
		t.Errorf("honest update after an expired future-dated one: %+v, scores %v", p.decisions[0], values(object(p)))
	}
}

func TestMakePlanSupersededInTheSameWrite(t *testing.T) {
	p := makePlan(nil, []*Update{upd(time.Second, sc("a", 1)), upd(time.Second, sc("a", 1))}, t0)
	if d := p.decisions[0]; d.written || d.reason != contract.ReasonStale || !strings.Contains(d.message, "superseded") {
		t.Errorf("first of two equal updates: %+v, want Stale, superseded", d)
	}
}

// The ledger's size is tracked exactly as entries are added and rewritten, so that the guard
// against overflowing the condition counts rewrites with longer (nanosecond) times.
func TestLedgerSizeIsExact(t *testing.T) {
	l := ledger{}
	s := newLedgerSize(l)
	if s.bytes() != len(l.encode()) {
		t.Fatalf("empty: %d, encoded %d", s.bytes(), len(l.encode()))
	}
	whole := entry{Observed: t0, ValidUntil: t0.Add(time.Hour)}
	nano := entry{Observed: t0.Add(123456789), ValidUntil: t0.Add(time.Hour + 987654321)}
	for i, name := range []string{"a", "b-\"quoted\"", "c<&>"} {
		s = s.add(name, whole)
		l[name] = whole
		if s.bytes() != len(l.encode()) {
			t.Fatalf("after %d adds: %d, encoded %d", i+1, s.bytes(), len(l.encode()))
		}
	}
	s = s.replace("a", whole, nano)
	l["a"] = nano
	if s.bytes() != len(l.encode()) {
		t.Errorf("after a rewrite with nanoseconds: %d, encoded %d", s.bytes(), len(l.encode()))
	}
}

// Rewriting every entry of a near-full ledger with nanosecond times would overflow it: that
// update is refused, and one coalesced with it that rewrites a name at the same length is written.
func TestMakePlanCountsLedgerRewrites(t *testing.T) {
	var names []contract.Score
	for i := 0; i < 200; i++ {
		names = append(names, sc(fmt.Sprintf("s%03d-%s", i, strings.Repeat("n", 103)), 1))
	}
	base := object(makePlan(nil, []*Update{upd(0, names...)}, t0))
	if n := len(base.Status.Conditions[0].Message); n < 31000 || n > maxLedgerBytes {
		t.Fatalf("ledger of %d bytes, want just under %d", n, maxLedgerBytes)
	}
	rewrite := upd(time.Second+123456789, names...)
	rewrite.ValidUntil = rewrite.Observed.Add(time.Hour)
	honest := upd(2*time.Second, sc(names[0].Name, 3))
	p := makePlan(base, []*Update{rewrite, honest}, t0.Add(time.Minute))
	if d := p.decisions[0]; !d.rejected {
		t.Errorf("nanosecond rewrite of a near-full ledger: %+v, want rejected", d)
	}
	if !p.decisions[1].written {
		t.Errorf("honest update: %+v, want written", p.decisions[1])
	}
	if n := len(p.ledger.encode()); n > maxLedgerBytes {
		t.Errorf("ledger of %d bytes", n)
	}
}

// An update whose validUntil has passed by the time it is planned (it waited through retries) is
// Stale: it is not written only to be dropped as expired in the same write.
func TestMakePlanUpdateExpiredBeforeItsWrite(t *testing.T) {
	lapsed := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("a", 1)}, t0, t0.Add(time.Second), "a")
	p := makePlan(nil, []*Update{lapsed}, t0.Add(2*time.Second))
	if d := p.decisions[0]; d.written || d.reason != contract.ReasonStale || p.changed {
		t.Errorf("lapsed update: %+v changed=%v, want Stale and nothing to write", d, p.changed)
	}
}

// With no update at all, an expired score is a change: the object is rewritten without it.
func TestMakePlanExpiryAloneIsAChange(t *testing.T) {
	short := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("short", 1)}, t0, t0.Add(time.Minute), "a")
	long := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("long", 2)}, t0, t0.Add(time.Hour), "b")
	base := object(makePlan(nil, []*Update{short, long}, t0))
	if p := makePlan(base, nil, t0.Add(30*time.Second)); p.changed {
		t.Error("nothing expired yet, but the plan changes the object")
	}
	p := makePlan(base, nil, t0.Add(time.Minute))
	if !p.changed || fmt.Sprint(values(object(p))) != "map[long:2]" || fmt.Sprint(p.expired) != "[short]" {
		t.Errorf("at short's validUntil: changed=%v scores %v expired %v", p.changed, values(object(p)), p.expired)
	}
	if c := meta.FindStatusCondition(p.status.Conditions, ConditionUpdated); c == nil || !strings.Contains(c.Message, "short") {
		t.Errorf("%s = %+v, want it to name the expired score", ConditionUpdated, c)
	}
}

// The ScoresUpdated message names sources chosen by senders: it lists a few, each cut short, and
// counts the rest, so that no source can push it over the condition's limit.
func TestConditionMessageIsBounded(t *testing.T) {
	var us []*Update
	for i := 0; i < 50; i++ {
		u := upd(time.Duration(i), sc(fmt.Sprintf("s%d", i), 1))
		u.Source = fmt.Sprintf("src-%02d-%s", i, strings.Repeat("é", 20000))
		us = append(us, u)
	}
	p := makePlan(nil, us, t0)
	c := meta.FindStatusCondition(p.status.Conditions, ConditionUpdated)
	if c == nil || len(c.Message) > 1024 || !strings.Contains(c.Message, "and 45 more sources") {
		t.Fatalf("message of %d bytes: %.200q", len(c.Message), c.Message)
	}
	if !utf8.ValidString(c.Message) {
		t.Error("message is not valid UTF-8 after cutting")
	}
}

// Write avoidance: a newer observation of the values the object holds writes nothing while the
// stored validUntil keeps half the validity the update would give; the plan's observation times
// are remembered on the writer's copy, so an update older than them is Stale, not applied.
func TestMakePlanUnchangedValuesAreNotWrittenAgain(t *testing.T) {
	const ttl = 5 * time.Minute
	at := func(d time.Duration, scores ...contract.Score) *Update {
		return NewUpdate(Key{"c1", "r"}, scores, t0.Add(d), t0.Add(d+ttl), "src")
	}
	base := object(makePlan(nil, []*Update{at(0, sc("a", 1), sc("b", 2))}, t0))
	base.ResourceVersion = "7"

	now := t0.Add(time.Minute)
	p := makePlan(base, []*Update{at(time.Minute, sc("a", 1), sc("b", 2))}, now)
	if p.changed || !p.unchanged || p.decisions[0].written || p.decisions[0].reason != contract.ReasonUnchanged {
		t.Fatalf("same values a minute later: changed=%v unchanged=%v %+v, want Unchanged and no write", p.changed, p.unchanged, p.decisions[0])
	}
	mem := remembered(base, p)
	led, err := readLedger(mem)
	if err != nil || !led["a"].Observed.Equal(t0.Add(time.Minute)) || !led["a"].ValidUntil.Equal(t0.Add(ttl)) || mem.ResourceVersion != "7" {
		t.Fatalf("remembered copy: ledger %v (%v) rv %s, want a observed at +1m, still valid until +5m, rv 7", led, err, mem.ResourceVersion)
	}
	if stored, _ := readLedger(base); !stored["a"].Observed.Equal(t0) {
		t.Fatal("remembered changed the object it was given")
	}

	// Older than the remembered observation, newer than the stored one: Stale, as if written.
	p = makePlan(mem, []*Update{at(30*time.Second, sc("a", 9))}, now)
	if p.changed || p.decisions[0].reason != contract.ReasonStale {
		t.Errorf("update older than an unchanged one: changed=%v %+v, want Stale", p.changed, p.decisions[0])
	}
	// The remembered times are written with the next real change.
	p = makePlan(mem, []*Update{at(90*time.Second, sc("a", 3))}, now)
	if led, _ := readLedger(object(p)); !p.changed || !led["b"].Observed.Equal(t0.Add(time.Minute)) || !led["a"].Observed.Equal(t0.Add(90*time.Second)) {
		t.Errorf("change after an unchanged update: changed=%v ledger %v, want b's remembered time written", p.changed, led)
	}

	// A changed value and an unchanged one in the same write: both written.
	p = makePlan(base, []*Update{at(time.Minute, sc("a", 1)), at(time.Minute, sc("b", 5))}, now)
	if !p.changed || !p.decisions[0].written || !p.decisions[1].written {
		t.Errorf("changed and unchanged together: %+v", p.decisions)
	}
	// Once the stored validUntil would lapse within half the TTL the update gives, it is written.
	p = makePlan(base, []*Update{at(3*time.Minute, sc("a", 1), sc("b", 2))}, t0.Add(3*time.Minute))
	if vu := object(p).Status.ValidUntil; !p.changed || !p.decisions[0].written || vu == nil || !vu.Time.Equal(t0.Add(8*time.Minute)) {
		t.Errorf("same values with 2 of 5 minutes left: changed=%v %+v validUntil %v, want written until +8m", p.changed, p.decisions[0], vu)
	}
	// A different kind of validity is a change: never expiring, or a shorter validUntil.
	never := at(time.Minute, sc("a", 1), sc("b", 2))
	never.ValidUntil = time.Time{}
	shorter := at(time.Minute, sc("a", 1), sc("b", 2))
	shorter.ValidUntil = t0.Add(4 * time.Minute)
	for name, u := range map[string]*Update{"never expires": never, "shorter": shorter} {
		if p := makePlan(base, []*Update{u}, now); !p.changed || !p.decisions[0].written {
			t.Errorf("%s: changed=%v %+v, want written", name, p.changed, p.decisions[0])
		}
	}
	// Scores that never expire, unchanged: never written again.
	forever := object(makePlan(nil, []*Update{never}, now))
	again := at(time.Hour, sc("a", 1), sc("b", 2))
	again.ValidUntil = time.Time{}
	if p := makePlan(forever, []*Update{again}, t0.Add(time.Hour)); p.changed || p.decisions[0].reason != contract.ReasonUnchanged {
		t.Errorf("never-expiring, unchanged an hour later: changed=%v %+v", p.changed, p.decisions[0])
	}
}
