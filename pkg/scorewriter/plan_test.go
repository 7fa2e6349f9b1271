package scorewriter

import (
	"encoding/json"
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

// onHub applies p to a fresh object, as the hub would store it.
func onHub(p plan) *clusterv1alpha1.AddOnPlacementScore {
	return &clusterv1alpha1.AddOnPlacementScore{Status: *p.status.DeepCopy()}
}

func values(o *clusterv1alpha1.AddOnPlacementScore) map[string]int32 {
	m := map[string]int32{}
	for _, s := range o.Status.Scores {
		m[s.Name] = s.Value
	}
	return m
}

// verdict is an outcome as the tables spell it: Written, or the reason.
func verdict(r contract.ItemResult) string {
	if r.Outcome == contract.OutcomeWritten {
		return "Written"
	}
	return string(r.Reason)
}

func lines(t *testing.T, o *clusterv1alpha1.AddOnPlacementScore) map[string]line {
	t.Helper()
	l, err := readLedger(o)
	if err != nil {
		t.Fatal(err)
	}
	return l.lines
}

func TestMakePlan(t *testing.T) {
	now := t0.Add(time.Minute)
	base := onHub(makePlan(nil, nil, []*Update{upd(0, sc("a", 1), sc("b", 2))}, now))
	foreign := base.DeepCopy()
	foreign.Status.Scores = append(foreign.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: "other", Value: 9})

	tests := []struct {
		name     string
		cur      *clusterv1alpha1.AddOnPlacementScore
		updates  []*Update
		changed  bool
		verdicts []string // per update: Written, or the reason
		want     map[string]int32
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
			p := makePlan(tt.cur, nil, tt.updates, now)
			if p.changed != tt.changed {
				t.Errorf("changed = %v, want %v", p.changed, tt.changed)
			}
			for i, r := range p.outcomes {
				if got := verdict(r); got != tt.verdicts[i] {
					t.Errorf("update %d: %s, want %s", i, got, tt.verdicts[i])
				}
			}
			if !p.changed {
				return
			}
			if got := values(onHub(p)); fmt.Sprint(got) != fmt.Sprint(tt.want) {
				t.Errorf("scores = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestMakePlanExpiryAndValidUntil(t *testing.T) {
	short := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("short", 1)}, t0, t0.Add(time.Minute), "a")
	long := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("long", 2)}, t0, t0.Add(time.Hour), "b")
	p := makePlan(nil, nil, []*Update{short, long}, t0)
	if !p.status.ValidUntil.Time.Equal(t0.Add(time.Minute)) || !p.due.Equal(t0.Add(time.Minute)) {
		t.Errorf("validUntil = %v, due %v, want the earliest score's (%v)", p.status.ValidUntil, p.due, t0.Add(time.Minute))
	}
	// Two minutes later "short" has expired: the next write drops it rather than keep it alive.
	later := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("long", 3)}, t0.Add(2*time.Minute), t0.Add(time.Hour), "b")
	p = makePlan(onHub(p), nil, []*Update{later}, t0.Add(2*time.Minute))
	if got := values(onHub(p)); len(got) != 1 || got["long"] != 3 {
		t.Errorf("scores = %v, want only long=3", got)
	}
	if len(p.removed) != 1 || p.removed[0] != "short" || !p.status.ValidUntil.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("removed %v validUntil %v", p.removed, p.status.ValidUntil)
	}
	if led := lines(t, onHub(p)); len(led) != 1 || !led["long"].observed.Equal(t0.Add(2*time.Minute)) || led["long"].source != "b" {
		t.Errorf("ledger = %v", led)
	}
	if c := meta.FindStatusCondition(p.status.Conditions, ConditionUpdated); c == nil || c.Status != metav1.ConditionTrue {
		t.Errorf("conditions = %+v", p.status.Conditions)
	}
}

// statusBytes is what contract.MaxObjectStatusBytes bounds in an object: its scores and ledger.
func statusBytes(t *testing.T, o *clusterv1alpha1.AddOnPlacementScore) int {
	t.Helper()
	n := 0
	for _, c := range o.Status.Conditions {
		if isLedgerCondition(c.Type) {
			n += len(c.Message)
		}
	}
	b, err := json.Marshal(o.Status.Scores)
	if err != nil {
		t.Fatal(err)
	}
	return n + len(b)
}

func names(prefix string, n, length int) []contract.Score {
	out := make([]contract.Score, n)
	for i := range out {
		name := fmt.Sprintf("%s-%05d-", prefix, i)
		out[i] = sc(name+strings.Repeat("x", length-len(name)), float64(i%201-100))
	}
	return out
}

// One object holds the scores of a DSF scorer over ${node};${namespace};${pod} on a cluster of
// 2,000 pods, 100-character names, and those of several producers; the ledger spreads over
// conditions that each stay within the CRD's 32,768 characters, and reads back as written.
func TestLedgerHoldsThousandsOfScores(t *testing.T) {
	for name, producers := range map[string]int{"one producer": 1, "four producers": 4} {
		t.Run(name, func(t *testing.T) {
			var us []*Update
			for i := range producers {
				u := NewUpdate(Key{"c1", "r"}, names(fmt.Sprintf("p%d", i), 2000/producers, 100), t0.Add(time.Duration(i)*time.Millisecond), t0.Add(time.Hour), fmt.Sprintf("scorer-%d", i))
				us = append(us, u)
			}
			p := makePlan(nil, nil, us, t0)
			for i, r := range p.outcomes {
				if r.Outcome != contract.OutcomeWritten {
					t.Fatalf("producer %d: %+v", i, r)
				}
			}
			obj := onHub(p)
			shards := 0
			for _, c := range obj.Status.Conditions {
				if isLedgerCondition(c.Type) {
					shards++
					if len(c.Message) > maxConditionMessage {
						t.Errorf("%s: %d characters, over %d", c.Type, len(c.Message), maxConditionMessage)
					}
				}
			}
			if n := statusBytes(t, obj); n > contract.MaxObjectStatusBytes {
				t.Errorf("%d bytes of scores and ledger, over %d", n, contract.MaxObjectStatusBytes)
			}
			led := lines(t, obj)
			if len(led) != 2000 || len(obj.Status.Scores) != 2000 {
				t.Fatalf("%d lines, %d scores, want 2000", len(led), len(obj.Status.Scores))
			}
			for i, u := range us {
				for _, s := range u.Scores {
					if ln := led[s.Name]; ln.source != u.Source || !ln.observed.Equal(u.Observed) || !ln.validUntil.Equal(u.ValidUntil) {
						t.Fatalf("producer %d, %s: line %+v", i, s.Name, ln)
					}
				}
			}
			t.Logf("%d producers: %d bytes of scores and ledger in %d conditions", producers, statusBytes(t, obj), shards)
		})
	}
}

// At the bound, an object takes as many names as fit in contract.MaxObjectStatusBytes; one more
// name is refused, alone: the update coalesced with it is written, and nothing is dropped.
func TestMakePlanObjectBoundAndOnePast(t *testing.T) {
	fits := func(n int) (plan, bool) {
		p := makePlan(nil, nil, []*Update{upd(0, names("s", n, 100)...)}, t0)
		return p, p.outcomes[0].Outcome == contract.OutcomeWritten
	}
	lo, hi := 2000, 4000 // 2,000 fit; 4,000 do not
	if _, ok := fits(lo); !ok {
		t.Fatalf("%d names of 100 characters do not fit", lo)
	}
	if _, ok := fits(hi); ok {
		t.Fatalf("%d names of 100 characters fit", hi)
	}
	for hi-lo > 1 {
		if mid := (lo + hi) / 2; func() bool { _, ok := fits(mid); return ok }() {
			lo = mid
		} else {
			hi = mid
		}
	}
	at, _ := fits(lo)
	if n := statusBytes(t, onHub(at)); n > contract.MaxObjectStatusBytes || n < contract.MaxObjectStatusBytes-300 {
		t.Errorf("%d names take %d bytes: want just under %d", lo, n, contract.MaxObjectStatusBytes)
	}
	t.Logf("the bound holds %d names of 100 characters (%d bytes)", lo, statusBytes(t, onHub(at)))

	past := upd(0, names("s", hi, 100)...)
	small := upd(time.Second, sc("small", 5))
	p := makePlan(nil, nil, []*Update{past, small}, t0)
	if r := p.outcomes[0]; r.Outcome != contract.OutcomeFailed || r.Reason != contract.ReasonRejected || r.Retriable || !strings.Contains(r.Message, "over the") {
		t.Errorf("one name past the bound: %+v, want Failed/Rejected saying so", r)
	}
	if r := p.outcomes[1]; r.Outcome != contract.OutcomeWritten || fmt.Sprint(values(onHub(p))) != "map[small:5]" {
		t.Errorf("the update coalesced with it: %+v, scores %v", r, values(onHub(p)))
	}
	// Past the bound on an object already at it: the one more name is refused, the object kept.
	more := upd(2*time.Second, sc("one-more-"+strings.Repeat("y", 91), 1))
	p = makePlan(onHub(at), nil, []*Update{more}, t0)
	if r := p.outcomes[0]; r.Outcome != contract.OutcomeFailed || r.Reason != contract.ReasonRejected || p.changed {
		t.Errorf("one more name on a full object: %+v changed=%v, want Rejected, nothing written", r, p.changed)
	}
}

// The ledger reads what it writes, whatever the names' and sources' bytes, and what writers wrote
// before it grouped its lines.
func TestLedgerRoundTrip(t *testing.T) {
	l := ledger{lines: map[string]line{
		"a":            {source: "s1", observed: t0.Add(123456789), validUntil: t0.Add(time.Hour)},
		"b":            {source: "s1", observed: t0.Add(123456789), validUntil: t0.Add(time.Hour)},
		"never":        {source: `s"2<&>`, observed: t0},
		"app;gpu:0@=x": {source: "s3", observed: t0.Add(time.Second), validUntil: t0.Add(2 * time.Hour)},
	}, others: validity{known: true, until: t0.Add(time.Minute)}}
	msgs := l.messages()
	obj := &clusterv1alpha1.AddOnPlacementScore{}
	obj.Status.Conditions = setLedger(nil, msgs)
	got, err := readLedger(obj)
	if err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got.lines) != fmt.Sprint(l.lines) || got.others != l.others {
		t.Errorf("read back %v %v, want %v %v", got.lines, got.others, l.lines, l.others)
	}
	if len(msgs) != 1 || strings.Count(msgs[0], `"source"`) != 3 {
		t.Errorf("messages %q: want one with three groups", msgs)
	}

	flat := &clusterv1alpha1.AddOnPlacementScore{}
	flat.Status.Conditions = []metav1.Condition{{Type: ConditionObservations, Message: `{"a":["2026-11-23T12:00:00Z","2026-11-23T13:00:00Z"],"n":["2026-11-23T12:00:00Z","0001-01-01T00:00:00Z"]}`}}
	old, err := readLedger(flat)
	if err != nil || !old.lines["a"].validUntil.Equal(t0.Add(time.Hour)) || !old.lines["n"].validUntil.IsZero() || old.lines["n"].source != "" {
		t.Errorf("the flat ledger of earlier writers: %v, %v", old.lines, err)
	}
}

// A score observed "in the future" (a clock ahead) that has expired must not block later honest
// observations: an expired line orders nothing.
func TestMakePlanExpiredEntryDoesNotBlockOlderObservations(t *testing.T) {
	ahead := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("a", 10)}, t0.Add(24*time.Hour), t0.Add(time.Minute), "skewed")
	base := onHub(makePlan(nil, nil, []*Update{ahead}, t0))
	honest := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("a", 20)}, t0.Add(2*time.Minute), t0.Add(time.Hour), "honest")
	p := makePlan(base, nil, []*Update{honest}, t0.Add(2*time.Minute))
	if p.outcomes[0].Outcome != contract.OutcomeWritten || values(onHub(p))["a"] != 20 {
		t.Errorf("honest update after an expired future-dated one: %+v, scores %v", p.outcomes[0], values(onHub(p)))
	}
}

func TestMakePlanSupersededInTheSameWrite(t *testing.T) {
	p := makePlan(nil, nil, []*Update{upd(time.Second, sc("a", 1)), upd(time.Second, sc("a", 1))}, t0)
	if r := p.outcomes[0]; r.Outcome != contract.OutcomeSkipped || r.Reason != contract.ReasonStale || !strings.Contains(r.Message, "superseded") {
		t.Errorf("first of two equal updates: %+v, want Stale, superseded", r)
	}
}

// An update whose validUntil has passed by the time it is planned (it waited through retries)
// fails, Stale: it is not written only to be dropped as expired in the same write, and its sender
// hears that nothing landed.
func TestMakePlanUpdateExpiredBeforeItsWrite(t *testing.T) {
	lapsed := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("a", 1)}, t0, t0.Add(time.Second), "a")
	p := makePlan(nil, nil, []*Update{lapsed}, t0.Add(2*time.Second))
	if r := p.outcomes[0]; r.Outcome != contract.OutcomeFailed || r.Reason != contract.ReasonStale || r.Retriable || p.changed {
		t.Errorf("lapsed update: %+v changed=%v, want Failed/Stale, not retriable, nothing to write", r, p.changed)
	}
}

// With no update at all, an expired score is a change: the object is rewritten without it.
func TestMakePlanExpiryAloneIsAChange(t *testing.T) {
	short := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("short", 1)}, t0, t0.Add(time.Minute), "a")
	long := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("long", 2)}, t0, t0.Add(time.Hour), "b")
	base := onHub(makePlan(nil, nil, []*Update{short, long}, t0))
	if p := makePlan(base, nil, nil, t0.Add(30*time.Second)); p.changed || !p.due.Equal(t0.Add(time.Minute)) {
		t.Errorf("nothing expired yet: changed=%v due %v, want no change, due at short's validUntil", p.changed, p.due)
	}
	p := makePlan(base, nil, nil, t0.Add(time.Minute))
	if !p.changed || fmt.Sprint(values(onHub(p))) != "map[long:2]" || fmt.Sprint(p.removed) != "[short]" || !p.due.Equal(t0.Add(time.Hour)) {
		t.Errorf("at short's validUntil: changed=%v scores %v removed %v due %v", p.changed, values(onHub(p)), p.removed, p.due)
	}
	if c := meta.FindStatusCondition(p.status.Conditions, ConditionUpdated); c == nil || !strings.Contains(c.Message, "short") {
		t.Errorf("%s = %+v, want it to name the expired score", ConditionUpdated, c)
	}
}

// An object whose last score expires counts as empty from that write on (ScoresUpdated False,
// NoScores, since then), and the writer deletes it a grace period later; a score written again
// makes it an object with scores. An object the writer never wrote, or one holding scores, is
// never empty, whoever made it.
func TestEmptySince(t *testing.T) {
	u := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("a", 1)}, t0, t0.Add(time.Minute), "a")
	written := onHub(makePlan(nil, nil, []*Update{u}, t0))
	if _, empty := emptySince(written); empty {
		t.Error("an object with a score counts as empty")
	}
	expiredAt := t0.Add(time.Minute + 500*time.Millisecond)
	emptied := onHub(makePlan(written, nil, nil, expiredAt))
	since, empty := emptySince(emptied)
	if !empty || since.Sub(expiredAt).Abs() >= time.Second { // the hub keeps seconds
		t.Errorf("after its last score expired: empty=%v since %v, want since %v", empty, since, expiredAt)
	}
	// Still empty later (nothing to write): the time stays.
	if p := makePlan(emptied, nil, nil, expiredAt.Add(time.Hour)); p.changed {
		t.Errorf("an empty object is written again: %+v", p.status)
	}
	again := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("a", 2)}, expiredAt, expiredAt.Add(time.Minute), "a")
	if _, empty := emptySince(onHub(makePlan(emptied, nil, []*Update{again}, expiredAt.Add(time.Second)))); empty {
		t.Error("an object written again counts as empty")
	}
	for name, obj := range map[string]*clusterv1alpha1.AddOnPlacementScore{
		"no status":                {},
		"someone else's scores":    foreignObject(nil, clusterv1alpha1.AddOnPlacementScoreItem{Name: "x", Value: 1}),
		"someone else's condition": {Status: clusterv1alpha1.AddOnPlacementScoreStatus{Conditions: []metav1.Condition{{Type: ConditionUpdated, Status: metav1.ConditionFalse, Reason: "Theirs"}}}},
	} {
		if _, empty := emptySince(obj); empty {
			t.Errorf("%s: counts as the writer's empty object", name)
		}
	}
}

// The ScoresUpdated message names sources chosen by senders: it lists a few, each cut short, and
// counts the rest, so that no source can push it over the condition's limit.
func TestConditionMessageIsBounded(t *testing.T) {
	var us []*Update
	for i := 0; i < 50; i++ {
		u := upd(time.Duration(i), sc(fmt.Sprintf("s%d", i), 1))
		u.Source = fmt.Sprintf("src-%02d-%s", i, strings.Repeat("é", 120)) // contract.MaxSourceLength bytes
		us = append(us, u)
	}
	p := makePlan(nil, nil, us, t0)
	c := meta.FindStatusCondition(p.status.Conditions, ConditionUpdated)
	if c == nil || len(c.Message) > 1024 || !strings.Contains(c.Message, "and 45 more sources") {
		t.Fatalf("message of %d bytes: %.200q", len(c.Message), c.Message)
	}
	if !utf8.ValidString(c.Message) {
		t.Error("message is not valid UTF-8 after cutting")
	}
}

// foreignObject is an object another producer wrote: its scores and validUntil, no ledger.
func foreignObject(validUntil *time.Time, scores ...clusterv1alpha1.AddOnPlacementScoreItem) *clusterv1alpha1.AddOnPlacementScore {
	o := &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "1"}}
	o.Status.Scores = scores
	if validUntil != nil {
		t := metav1.NewTime(*validUntil)
		o.Status.ValidUntil = &t
	}
	return o
}

// One producer's validity never makes another producer's score valid longer, or shorter, than
// that producer said: the object's validUntil is the earliest, the others' is recorded, and a
// score whose validity passed leaves.
func TestMakePlanKeepsOtherProducersValidity(t *testing.T) {
	other := clusterv1alpha1.AddOnPlacementScoreItem{Name: "other", Value: 90}
	never := func(at time.Duration) *Update {
		u := upd(at, sc("mine", 5))
		u.ValidUntil = time.Time{}
		return u
	}

	// other=90 expired a minute ago; a neverExpires update of mine must not make it valid for ever.
	expiredAt := t0.Add(-time.Minute)
	p := makePlan(foreignObject(&expiredAt, other), nil, []*Update{never(0)}, t0)
	if _, kept := values(onHub(p))["other"]; kept || p.status.ValidUntil != nil || values(onHub(p))["mine"] != 5 {
		t.Errorf("scores %v validUntil %v, want the expired other=90 removed (not valid for ever), mine=5 never expiring", values(onHub(p)), p.status.ValidUntil)
	}

	// other=90 valid for another 10 minutes: a neverExpires mine keeps that validUntil, and a later
	// expiry of mine does not extend it.
	for name, u := range map[string]*Update{"never expires": never(0), "expires later": upd(0, sc("mine", 5))} {
		until := t0.Add(10 * time.Minute)
		p := makePlan(foreignObject(&until, other), nil, []*Update{u}, t0)
		if vu := p.status.ValidUntil; vu == nil || !vu.Time.Equal(until) || values(onHub(p))["other"] != 90 {
			t.Errorf("%s: validUntil %v scores %v, want other=90 kept until %v", name, vu, values(onHub(p)), until)
		}
		// Once other's validity has passed, the writer removes it (it is due then), and mine stands.
		if !p.due.Equal(until) {
			t.Errorf("%s: due %v, want other's validUntil %v", name, p.due, until)
		}
		later := makePlan(onHub(p), nil, nil, until)
		if _, ok := values(onHub(later))["other"]; !later.changed || ok || values(onHub(later))["mine"] != 5 {
			t.Errorf("%s: at other's validUntil changed=%v scores %v, want other removed, mine kept", name, later.changed, values(onHub(later)))
		}
	}

	// An earlier expiry of mine does not shorten other's: the object's validUntil is mine's until
	// the writer removes mine, then other's again.
	until := t0.Add(10 * time.Minute)
	short := upd(0, sc("mine", 5))
	short.ValidUntil = t0.Add(time.Minute)
	p = makePlan(foreignObject(&until, other), nil, []*Update{short}, t0)
	if vu := p.status.ValidUntil; vu == nil || !vu.Time.Equal(t0.Add(time.Minute)) {
		t.Fatalf("validUntil %v, want mine's (the earliest)", vu)
	}
	p = makePlan(onHub(p), nil, nil, t0.Add(time.Minute))
	if vu := p.status.ValidUntil; !p.changed || vu == nil || !vu.Time.Equal(until) || values(onHub(p))["other"] != 90 {
		t.Errorf("after mine expired: validUntil %v scores %v, want other=90 until %v", vu, values(onHub(p)), until)
	}
}

// If someone else shortens or clears the object's validUntil, a refresh of the same values is a
// change: the writer puts back what its scores say instead of answering Unchanged.
func TestMakePlanRewritesAValidUntilChangedBySomeoneElse(t *testing.T) {
	base := onHub(makePlan(nil, nil, []*Update{upd(0, sc("a", 1))}, t0))
	cleared := base.DeepCopy()
	cleared.Status.ValidUntil = nil
	shortened := base.DeepCopy()
	soon := metav1.NewTime(t0.Add(time.Minute))
	shortened.Status.ValidUntil = &soon
	for name, cur := range map[string]*clusterv1alpha1.AddOnPlacementScore{"cleared": cleared, "shortened": shortened} {
		p := makePlan(cur, nil, []*Update{upd(time.Second, sc("a", 1))}, t0.Add(time.Second))
		if !p.changed || p.outcomes[0].Outcome != contract.OutcomeWritten {
			t.Errorf("%s: changed=%v %+v, want the refresh written", name, p.changed, p.outcomes[0])
		}
		if vu := p.status.ValidUntil; vu == nil || !vu.Time.Equal(t0.Add(time.Hour)) {
			t.Errorf("%s: validUntil %v", name, vu)
		}
	}
	if p := makePlan(base, nil, []*Update{upd(time.Second, sc("a", 1))}, t0.Add(time.Second)); p.changed {
		t.Errorf("untouched: a refresh of the same value is written")
	}
}

// A neverExpires update replaces its source's neverExpires names: those it no longer carries
// leave (devices that come and go), so name churn cannot fill the object. Other sources' names,
// and names of this source that expire, stay.
func TestMakePlanNeverExpiresUpdateRetiresItsOldNames(t *testing.T) {
	never := func(at time.Duration, source string, scores ...contract.Score) *Update {
		u := NewUpdate(Key{"c1", "r"}, scores, t0.Add(at), time.Time{}, source)
		return u
	}
	expiring := NewUpdate(Key{"c1", "r"}, []contract.Score{sc("exp", 3)}, t0, t0.Add(time.Hour), "dsf")
	base := onHub(makePlan(nil, nil, []*Update{never(0, "dsf", sc("app;gpu0", 1), sc("app;gpu1", 2)), never(0, "health", sc("health", 9)), expiring}, t0))
	p := makePlan(base, nil, []*Update{never(time.Minute, "dsf", sc("app;gpu1", 2), sc("app;gpu2", 4))}, t0.Add(time.Minute))
	want := map[string]int32{"app;gpu1": 2, "app;gpu2": 4, "health": 9, "exp": 3}
	if got := values(onHub(p)); fmt.Sprint(got) != fmt.Sprint(want) || fmt.Sprint(p.removed) != "[app;gpu0]" {
		t.Errorf("scores %v removed %v, want %v, app;gpu0 retired", got, p.removed, want)
	}
	// Retiring alone is a change; an older update retires nothing.
	p = makePlan(onHub(p), nil, []*Update{never(2*time.Minute, "dsf", sc("app;gpu2", 4))}, t0.Add(2*time.Minute))
	if !p.changed || p.outcomes[0].Outcome != contract.OutcomeWritten || fmt.Sprint(p.removed) != "[app;gpu1]" {
		t.Errorf("retiring app;gpu1 alone: changed=%v %+v removed %v", p.changed, p.outcomes[0], p.removed)
	}
	if p := makePlan(onHub(p), nil, []*Update{never(30*time.Second, "dsf", sc("app;gpu9", 4))}, t0.Add(2*time.Minute)); len(p.removed) != 0 {
		t.Errorf("an older update retired %v", p.removed)
	}
}

// Write avoidance: a newer observation of the values the object holds writes nothing while the
// stored validUntil keeps half the validity the update gives; the skipped lines order later
// updates, and the validity they were given is due before that half is used up, refresh or not.
func TestMakePlanUnchangedValuesAreNotWrittenAgain(t *testing.T) {
	const ttl = 5 * time.Minute
	at := func(d time.Duration, scores ...contract.Score) *Update {
		return NewUpdate(Key{"c1", "r"}, scores, t0.Add(d), t0.Add(d+ttl), "src")
	}
	base := onHub(makePlan(nil, nil, []*Update{at(0, sc("a", 1), sc("b", 2))}, t0))
	base.ResourceVersion = "7"

	now := t0.Add(time.Minute)
	p := makePlan(base, nil, []*Update{at(time.Minute, sc("a", 1), sc("b", 2))}, now)
	if p.changed || p.outcomes[0].Outcome != contract.OutcomeSkipped || p.outcomes[0].Reason != contract.ReasonUnchanged {
		t.Fatalf("same values a minute later: changed=%v %+v, want Unchanged and no write", p.changed, p.outcomes[0])
	}
	skipped := p.skipped
	if ln := skippedLine(skipped, "a"); !ln.observed.Equal(t0.Add(time.Minute)) || !ln.validUntil.Equal(t0.Add(time.Minute+ttl)) {
		t.Fatalf("skipped %v, want a observed at +1m, valid until +6m", skipped)
	}
	// Due when the stored +5m keeps half of what +6m gives: at +4m.
	if !p.due.Equal(t0.Add(4 * time.Minute)) {
		t.Errorf("due %v, want +4m", p.due.Sub(t0))
	}

	// Older than the skipped observation, newer than the stored one: Stale, as if written.
	p = makePlan(base, skipped, []*Update{at(30*time.Second, sc("a", 9))}, now)
	if p.changed || p.outcomes[0].Reason != contract.ReasonStale {
		t.Errorf("update older than an unchanged one: changed=%v %+v, want Stale", p.changed, p.outcomes[0])
	}
	// The skipped lines are written with the next real change.
	p = makePlan(base, skipped, []*Update{at(90*time.Second, sc("a", 3))}, now)
	if led := lines(t, onHub(p)); !p.changed || !led["b"].observed.Equal(t0.Add(time.Minute)) || !led["a"].observed.Equal(t0.Add(90*time.Second)) {
		t.Errorf("change after an unchanged update: changed=%v ledger %v, want b's skipped time written", p.changed, led)
	}
	// Without any update, the owed validity is written when due, no sooner.
	if p := makePlan(base, skipped, nil, t0.Add(4*time.Minute-time.Second)); p.changed {
		t.Error("owed validity written before it is due")
	}
	p = makePlan(base, skipped, nil, t0.Add(4*time.Minute))
	if vu := onHub(p).Status.ValidUntil; !p.changed || vu == nil || !vu.Time.Equal(t0.Add(6*time.Minute)) {
		t.Errorf("owed validity at +4m: changed=%v validUntil %v, want written until +6m", p.changed, vu)
	}

	// A changed value and an unchanged one in the same write: both written.
	p = makePlan(base, nil, []*Update{at(time.Minute, sc("a", 1)), at(time.Minute, sc("b", 5))}, now)
	if !p.changed || p.outcomes[0].Outcome != contract.OutcomeWritten || p.outcomes[1].Outcome != contract.OutcomeWritten {
		t.Errorf("changed and unchanged together: %+v", p.outcomes)
	}
	// Once the stored validUntil would lapse within half the validity the update gives, it is written.
	p = makePlan(base, nil, []*Update{at(3*time.Minute, sc("a", 1), sc("b", 2))}, t0.Add(3*time.Minute))
	if vu := onHub(p).Status.ValidUntil; !p.changed || p.outcomes[0].Outcome != contract.OutcomeWritten || vu == nil || !vu.Time.Equal(t0.Add(8*time.Minute)) {
		t.Errorf("same values with 2 of 5 minutes left: changed=%v %+v validUntil %v, want written until +8m", p.changed, p.outcomes[0], vu)
	}
	// A different kind of validity is a change: never expiring, or a shorter validUntil.
	never := at(time.Minute, sc("a", 1), sc("b", 2))
	never.ValidUntil = time.Time{}
	shorter := at(time.Minute, sc("a", 1), sc("b", 2))
	shorter.ValidUntil = t0.Add(4 * time.Minute)
	for name, u := range map[string]*Update{"never expires": never, "shorter": shorter} {
		if p := makePlan(base, nil, []*Update{u}, now); !p.changed || p.outcomes[0].Outcome != contract.OutcomeWritten {
			t.Errorf("%s: changed=%v %+v, want written", name, p.changed, p.outcomes[0])
		}
	}
	// Scores that never expire, unchanged: never written again.
	forever := onHub(makePlan(nil, nil, []*Update{never}, now))
	again := at(time.Hour, sc("a", 1), sc("b", 2))
	again.ValidUntil = time.Time{}
	if p := makePlan(forever, nil, []*Update{again}, t0.Add(time.Hour)); p.changed || p.outcomes[0].Reason != contract.ReasonUnchanged || !p.due.IsZero() {
		t.Errorf("never-expiring, unchanged an hour later: changed=%v %+v due %v", p.changed, p.outcomes[0], p.due)
	}
}

// A ledger line valid until year 9999 (written before validUntil was bounded, or by hand) is
// planned without overflow: nothing is due before it, and a refresh with a bounded validUntil is
// a change (it shortens the validity).
func TestMakePlanFarFutureLine(t *testing.T) {
	far := time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)
	u := upd(0, sc("a", 1))
	u.ValidUntil = far
	base := onHub(makePlan(nil, nil, []*Update{u}, t0))
	p := makePlan(base, nil, nil, t0.Add(time.Minute))
	if p.changed || !p.due.Equal(far) {
		t.Errorf("no update: changed=%v due %v, want nothing before %v", p.changed, p.due, far)
	}
	p = makePlan(base, nil, []*Update{upd(time.Minute, sc("a", 1))}, t0.Add(time.Minute))
	if !p.changed || !p.status.ValidUntil.Time.Equal(t0.Add(time.Hour)) {
		t.Errorf("a bounded refresh: changed=%v validUntil %v", p.changed, p.status.ValidUntil)
	}
}

// skippedLine is name's line among skipped; the zero line when it is not there.
func skippedLine(skipped skippedLines, name string) line {
	for _, s := range skipped {
		if s.name == name {
			return s.line
		}
	}
	return line{}
}
