package scorespage

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

var t0 = time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)

func score(cluster, resource string, validUntil *time.Time, kv ...any) *clusterv1alpha1.AddOnPlacementScore {
	o := &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: cluster, CreationTimestamp: metav1.NewTime(t0.Add(-time.Hour))}}
	for i := 0; i < len(kv); i += 2 {
		o.Status.Scores = append(o.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: kv[i].(string), Value: int32(kv[i+1].(int))})
	}
	if validUntil != nil {
		vu := metav1.NewTime(*validUntil)
		o.Status.ValidUntil = &vu
	}
	return o
}

func ptr[T any](v T) *T { return &v }

// Freshness comes from the writer's ledger when there is one (per score), else from when the
// status was last written (managedFields), else from the creation time.
func TestFreshness(t *testing.T) {
	objVU := t0.Add(time.Minute)
	o := score("c1", "r", &objVU, "a", 1, "b", 2, "other", 3)
	o.Status.Conditions = []metav1.Condition{{Type: observationsCondition, Status: metav1.ConditionTrue, Reason: "ObservationTimes",
		Message: `{"a":["2026-11-23T11:59:50Z","2026-11-23T12:05:00Z"],"b":["2026-11-23T11:59:40Z","0001-01-01T00:00:00Z"]}`}}
	o.ManagedFields = []metav1.ManagedFieldsEntry{
		{Manager: "x", Subresource: "status", Time: ptr(metav1.NewTime(t0.Add(-20 * time.Second)))},
		{Manager: "y", Time: ptr(metav1.NewTime(t0.Add(-5 * time.Second)))}, // not status: ignored
	}
	so := fromAddOnPlacementScore(o)
	check := func(name string, observed time.Time, validUntil *time.Time) {
		t.Helper()
		c := so.scores[name]
		if c.Observed == nil || !c.Observed.Equal(observed) {
			t.Errorf("%s observed %v, want %v", name, c.Observed, observed)
		}
		if !sameTime(c.ValidUntil, validUntil) {
			t.Errorf("%s validUntil %v, want %v", name, c.ValidUntil, validUntil)
		}
	}
	check("a", t0.Add(-10*time.Second), ptr(t0.Add(5*time.Minute)))
	check("b", t0.Add(-20*time.Second), nil) // the ledger's zero time: never expires
	check("other", t0.Add(-20*time.Second), &objVU)

	bare := fromAddOnPlacementScore(score("c1", "r", nil, "x", 1))
	check = func(name string, observed time.Time, validUntil *time.Time) {
		if c := bare.scores[name]; !c.Observed.Equal(observed) || c.ValidUntil != nil {
			t.Errorf("without ledger or managedFields: %+v, want observed at creation, no expiry", c)
		}
	}
	check("x", t0.Add(-time.Hour), nil)

	// A rewrite seen by the page dates scores whose value or validUntil changed, and only those.
	next := fromAddOnPlacementScore(score("c1", "r", nil, "x", 1))
	refreshed(bare, next, t0)
	if !next.scores["x"].Observed.Equal(t0.Add(-time.Hour)) {
		t.Errorf("an unchanged score was re-dated: %v", next.scores["x"].Observed)
	}
	next = fromAddOnPlacementScore(score("c1", "r", nil, "x", 2))
	refreshed(bare, next, t0)
	if !next.scores["x"].Observed.Equal(t0) {
		t.Errorf("a changed score is dated %v, want now", next.scores["x"].Observed)
	}
}

func view(now time.Time, objs ...*clusterv1alpha1.AddOnPlacementScore) ScoresView {
	m := map[string]scoreObject{}
	for _, o := range objs {
		m[o.Namespace+"/"+o.Name] = fromAddOnPlacementScore(o)
	}
	return scoresView(m, now)
}

// Why weighs the prioritizers as the placement controller does: weight x score, a missing or
// expired AddOn score counts 0, Steady gives the held clusters 100, Balance from other
// Placements' decisions; highest total first.
func TestWhy(t *testing.T) {
	past := t0.Add(-time.Second)
	v := view(t0,
		score("c1", "cpu", nil, "idle", 50), score("c1", "lat", nil, "p99", -10),
		score("c2", "cpu", nil, "idle", 40), score("c2", "lat", nil, "p99", 30),
		score("c3", "cpu", &past, "idle", 100), // expired
	)
	if !v.Cells["c3"]["cpu/idle"].Expired || v.Cells["c1"]["cpu/idle"].Expired {
		t.Errorf("expiry: %+v", v.Cells)
	}
	prios := []Prioritizer{{Type: "AddOn", Column: "cpu/idle", Weight: 2}, {Type: "BuiltIn", Name: "Steady", Weight: 1},
		{Type: "AddOn", Column: "lat/p99", Weight: 1}, {Type: "BuiltIn", Name: "ResourceAllocatableCPU", Weight: 1}}
	in := builtIns{steady: map[string]bool{"c2": true, "c9": true}}
	got := why(prios, v, []string{"c2", "c9"}, in)
	var b strings.Builder
	for _, w := range got {
		fmt.Fprintf(&b, "%s:%d:%v:", w.Cluster, w.Total, w.Chosen)
		for _, term := range w.Terms {
			fmt.Fprintf(&b, "[%s%s %dx%d m%v e%v u%v]", term.Column, term.Name, term.Score, term.Weight, term.Missing, term.Expired, term.Unknown)
		}
		b.WriteString(" ")
	}
	want := "c2:210:true:[cpu/idle 40x2 mfalse efalse ufalse][Steady 100x1 mfalse efalse ufalse][lat/p99 30x1 mfalse efalse ufalse][ResourceAllocatableCPU 0x1 mfalse efalse utrue] " +
		"c9:100:true:[cpu/idle 0x2 mtrue efalse ufalse][Steady 100x1 mfalse efalse ufalse][lat/p99 0x1 mtrue efalse ufalse][ResourceAllocatableCPU 0x1 mfalse efalse utrue] " +
		"c1:90:false:[cpu/idle 50x2 mfalse efalse ufalse][Steady 0x1 mfalse efalse ufalse][lat/p99 -10x1 mfalse efalse ufalse][ResourceAllocatableCPU 0x1 mfalse efalse utrue] " +
		"c3:0:false:[cpu/idle 0x2 mfalse etrue ufalse][Steady 0x1 mfalse efalse ufalse][lat/p99 0x1 mtrue efalse ufalse][ResourceAllocatableCPU 0x1 mfalse efalse utrue] "
	if b.String() != want {
		t.Errorf("why:\n got %s\nwant %s", b.String(), want)
	}
}

// Balance scores as ocm's plugins/balance does: 100 for a cluster no other Placement holds, else
// 2 x int(100 x (0.5 - n/max)), truncated toward zero.
func TestBalance(t *testing.T) {
	in := builtIns{others: map[string]int64{"a": 3, "b": 1, "c": 2, "z": 0}}
	for c, want := range map[string]int32{"a": -100, "b": 32, "c": -32, "d": 100, "z": 100} {
		if got, ok := in.score("Balance", c); !ok || got != want {
			t.Errorf("Balance(%s) = %d, %v; want %d", c, got, ok, want)
		}
	}
}

// The prioritizers that count, as the controller's getWeights merges them: Additive (and unset)
// adds Balance and Steady at 1, a configured BuiltIn replaces its weight, weight 0 turns one off,
// two AddOn configurations of one score both count; Exact counts only what is configured.
func TestPlacementPolicy(t *testing.T) {
	addOn := func(w int32) clusterv1beta1.PrioritizerConfig {
		return clusterv1beta1.PrioritizerConfig{Weight: w, ScoreCoordinate: &clusterv1beta1.ScoreCoordinate{Type: "AddOn", AddOn: &clusterv1beta1.AddOnScore{ResourceName: "cpu", ScoreName: "idle"}}}
	}
	builtIn := func(name string, w int32) clusterv1beta1.PrioritizerConfig {
		return clusterv1beta1.PrioritizerConfig{Weight: w, ScoreCoordinate: &clusterv1beta1.ScoreCoordinate{Type: "BuiltIn", BuiltIn: name}}
	}
	for _, tt := range []struct {
		mode    clusterv1beta1.PrioritizerPolicyModeType
		configs []clusterv1beta1.PrioritizerConfig
		want    string
	}{
		{"", nil, "Additive: Balance x1 (default), Steady x1 (default)"},
		{"Additive", []clusterv1beta1.PrioritizerConfig{addOn(1)}, "Additive: Balance x1 (default), Steady x1 (default), cpu/idle x1"},
		{"Additive", []clusterv1beta1.PrioritizerConfig{builtIn("Steady", 0), addOn(2), builtIn("Balance", 3), addOn(1)}, "Additive: Balance x3, cpu/idle x2, cpu/idle x1"},
		{"Exact", []clusterv1beta1.PrioritizerConfig{addOn(1), builtIn("Steady", 2), addOn(0)}, "Exact: cpu/idle x1, Steady x2"},
		{"Exact", nil, "Exact: "},
	} {
		pl := &clusterv1beta1.Placement{}
		pl.Spec.PrioritizerPolicy = clusterv1beta1.PrioritizerPolicy{Mode: tt.mode, Configurations: tt.configs}
		mode, prios := placementPolicy(pl)
		var parts []string
		for _, p := range prios {
			s := fmt.Sprintf("%s%s x%d", p.Column, p.Name, p.Weight)
			if p.Default {
				s += " (default)"
			}
			parts = append(parts, s)
		}
		if got := mode + ": " + strings.Join(parts, ", "); got != tt.want {
			t.Errorf("%s %v:\n got %s\nwant %s", tt.mode, tt.configs, got, tt.want)
		}
	}
}

func decision(ns, name, placement string, clusters ...string) *clusterv1beta1.PlacementDecision {
	d := &clusterv1beta1.PlacementDecision{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{clusterv1beta1.PlacementLabel: placement}}}
	for _, c := range clusters {
		d.Status.Decisions = append(d.Status.Decisions, clusterv1beta1.ClusterDecision{ClusterName: c})
	}
	return d
}

// A Placement's timeline: its decisions as they change (an empty first one is not a choice),
// each explained with the scores of its moment; decisions seen before their Placement are
// explained once its policy is known; the history is bounded.
func TestPlacementHistory(t *testing.T) {
	now := t0
	p := New(nil, Options{History: 3, Now: func() time.Time { return now }})
	p.setScore(score("c1", "cpu", nil, "idle", 10))
	p.setScore(score("c2", "cpu", nil, "idle", 20))
	p.setDecision(decision("ns", "pl-1", "pl"))
	p.setDecision(decision("ns", "pl-1", "pl", "c2"))
	pl := &clusterv1beta1.Placement{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "pl"}}
	pl.Spec.PrioritizerPolicy.Configurations = []clusterv1beta1.PrioritizerConfig{{Weight: 3,
		ScoreCoordinate: &clusterv1beta1.ScoreCoordinate{Type: "AddOn", AddOn: &clusterv1beta1.AddOnScore{ResourceName: "cpu", ScoreName: "idle"}}}}
	p.setPlacement(pl)
	pv := p.Snapshot().Placements
	if len(pv) != 1 || pv[0].Mode != "Additive" || len(pv[0].History) != 1 || pv[0].History[0].Why[0].Total != 160 {
		t.Fatalf("after the first decision: %+v", pv)
	}
	now = now.Add(time.Minute)
	p.setScore(score("c1", "cpu", nil, "idle", 90))
	p.setDecision(decision("ns", "pl-1", "pl", "c2")) // unchanged: no entry
	p.setDecision(decision("ns", "pl-1", "pl", "c1"))
	p.setDecision(decision("ns", "pl-2", "pl", "c2")) // a second PlacementDecision object adds to it
	pv = p.Snapshot().Placements
	h := pv[0].History
	if len(h) != 3 || strings.Join(h[1].Clusters, ",") != "c1" || strings.Join(h[2].Clusters, ",") != "c1,c2" || !h[1].At.Equal(now) {
		t.Fatalf("history %+v", h)
	}
	// Additive: Balance gives both 100 (no other Placement), Steady still held c2 when c1 won.
	if h[1].Why[0].Cluster != "c1" || h[1].Why[0].Total != 370 || !h[1].Why[0].Chosen || h[1].Why[1].Total != 260 {
		t.Errorf("the second decision's why: %+v", h[1].Why)
	}
	if strings.Join(pv[0].Current.Clusters, ",") != "c1,c2" || !pv[0].Current.At.Equal(now) {
		t.Errorf("current %+v", pv[0].Current)
	}
	p.deleteDecision(decision("ns", "pl-2", "pl"))
	p.setDecision(decision("ns", "pl-1", "pl", "c2"))
	if h := p.Snapshot().Placements[0].History; len(h) != 3 || strings.Join(h[0].Clusters, ",") != "c1,c2" || strings.Join(h[2].Clusters, ",") != "c2" {
		t.Errorf("history not bounded to 3, oldest first: %+v", h)
	}
	p.deletePlacement(pl)
	if pv := p.Snapshot().Placements; len(pv) != 0 {
		t.Errorf("a deleted Placement is still shown: %+v", pv)
	}
}

func ce(typ, source string, data any) event.Event {
	e := event.New()
	e.SetID("id-1")
	e.SetType(typ)
	e.SetSource(source)
	if s, ok := data.(string); ok {
		_ = e.SetData("application/json", []byte(s))
	} else {
		_ = e.SetData("application/json", data)
	}
	return e
}

// Events show why they failed: the event's own reason, else the first refused item's; every
// refused cluster up to a bound; failures of any kind by their reason; data that does not decode
// is shown, not refused.
func TestEventViews(t *testing.T) {
	var items []contract.ItemResult
	items = append(items, contract.ItemResult{Cluster: "ok", Outcome: contract.OutcomeWritten})
	for i := range 12 {
		items = append(items, contract.ItemResult{Cluster: fmt.Sprintf("c%d", i), Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnknownCluster, Message: strings.Repeat("m", 1000)})
	}
	v := viewEvent(ce(contract.TypeWriteFailed, "scoreflow/score-writer", contract.WriteResult{Resource: "r", Items: items}), t0)
	if !v.Refusal || v.Reason != "UnknownCluster" || len(v.Items) != maxItemsShown || v.More != 2 || v.Summary != "r: 1 written, 12 failed" || len(v.Message) > maxText {
		t.Errorf("write.failed: %+v", v)
	}
	v = viewEvent(ce(contract.TypeWriteFailed, "scoreflow/dead-letter", contract.WriteResult{Reason: contract.ReasonDeadLettered, Message: "gave up", Counts: map[string]int{"Failed": 2}}), t0)
	if !v.Refusal || v.Reason != "DeadLettered" || v.Message != "gave up" || v.Counts["Failed"] != 2 {
		t.Errorf("dead-lettered: %+v", v)
	}
	v = viewEvent(ce(contract.TypeWriteDone, "scoreflow/score-writer", contract.WriteResult{Resource: "r", Duplicate: true, Items: items[:1]}), t0)
	if v.Refusal || v.Summary != "r: 1 written, duplicate" {
		t.Errorf("write.done: %+v", v)
	}
	v = viewEvent(ce(contract.TypeScoreFailed, "scoreflow/promql-scorer", contract.Failure{Reason: contract.ReasonBadQuery, Message: "parse error"}), t0)
	if !v.Refusal || v.Reason != "BadQuery" || v.Message != "parse error" {
		t.Errorf("score.failed: %+v", v)
	}
	v = viewEvent(ce(contract.TypeScoreUpdated, "s", contract.ScoreUpdated{Resource: "cpu", Items: []contract.ClusterScores{{Cluster: "c1", Scores: []contract.Score{{Name: "idle", Value: 42}}}}}), t0)
	if v.Refusal || v.Summary != "cpu: c1 idle=42" {
		t.Errorf("score.updated: %+v", v)
	}
	v = viewEvent(ce(contract.TypeWriteFailed, "s", `[1,2`), t0)
	if !v.Refusal || v.Summary != "data is not a write result" {
		t.Errorf("undecodable write.failed: %+v", v)
	}
	v = viewEvent(ce("com.example.other", "s", `{"x":1}`), t0)
	if v.Refusal || v.Type != "com.example.other" {
		t.Errorf("another type: %+v", v)
	}
}

// The stream starts with the whole state, then sends what changes as it changes, and ends when
// the page's context does.
func TestStream(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	p := New(nil, Options{Events: 2})
	p.Handle(ctx, ce(contract.TypeWriteDone, "old", `{}`))
	srv := httptest.NewServer(p.Mux(ctx, http.NotFoundHandler()))
	defer srv.Close()

	resp, err := http.Get(srv.URL + "/ui/stream")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if ct := resp.Header.Get("Content-Type"); ct != "text/event-stream" {
		t.Fatalf("Content-Type %q", ct)
	}
	type msg struct{ event, data string }
	msgs := make(chan msg, 16)
	go func() {
		defer close(msgs)
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(nil, 1<<20)
		var m msg
		for sc.Scan() {
			line := sc.Text()
			switch {
			case strings.HasPrefix(line, "event: "):
				m.event = strings.TrimPrefix(line, "event: ")
			case strings.HasPrefix(line, "data: "):
				m.data = strings.TrimPrefix(line, "data: ")
			case line == "" && m.event != "":
				msgs <- m
				m = msg{}
			}
		}
	}()
	next := func() msg {
		t.Helper()
		select {
		case m, ok := <-msgs:
			if !ok {
				t.Fatal("stream ended")
			}
			return m
		case <-time.After(2 * time.Second):
			t.Fatal("no message within 2s")
		}
		return msg{}
	}
	var got []string
	for range 3 {
		got = append(got, next().event)
	}
	if strings.Join(got, ",") != "scores,placements,events" {
		t.Errorf("first messages %v, want the whole state", got)
	}
	p.Handle(ctx, ce(contract.TypeWriteFailed, "new", contract.WriteResult{Reason: contract.ReasonInvalidData, Message: "bad"}))
	m := next()
	var evs []EventView
	if err := json.Unmarshal([]byte(m.data), &evs); err != nil || m.event != "events" || len(evs) != 1 || evs[0].Source != "new" || evs[0].Reason != "InvalidData" || evs[0].Seq != 2 {
		t.Errorf("after an event: %s %s (%v)", m.event, m.data, err)
	}
	p.setScore(score("c1", "cpu", nil, "idle", 7))
	if m := next(); m.event != "scores" || !strings.Contains(m.data, `"value":7`) {
		t.Errorf("after a score: %s %s", m.event, m.data)
	}
	if m := next(); m.event != "placements" {
		t.Errorf("placements do not follow scores: %s", m.event)
	}
	// Only Events are kept: the oldest goes.
	p.Handle(ctx, ce("x", "third", `{}`))
	if s := p.Snapshot(); len(s.Events) != 2 || s.Events[0].Seq != 2 {
		t.Errorf("kept events %+v", s.Events)
	}
	cancel()
	select {
	case _, ok := <-msgs:
		for ok {
			_, ok = <-msgs
		}
	case <-time.After(2 * time.Second):
		t.Error("the stream did not end with the page's context")
	}
}

// The page's routes: / sends a browser to the page, the page and its files are served with a
// policy that loads nothing from elsewhere, everything else goes to the CloudEvents receiver.
func TestMux(t *testing.T) {
	p := New(nil, Options{})
	ce := http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusTeapot) })
	srv := httptest.NewServer(p.Mux(context.Background(), ce))
	defer srv.Close()
	noRedirect := &http.Client{CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
	resp, err := noRedirect.Get(srv.URL + "/")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusFound || resp.Header.Get("Location") != Path {
		t.Errorf("GET / answered %d to %q", resp.StatusCode, resp.Header.Get("Location"))
	}
	for path, want := range map[string]string{"/ui/": `<script src="app.js">`, "/ui/app.js": "new EventSource(", "/ui/style.css": "td.cell"} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		b := new(strings.Builder)
		_, _ = bufio.NewReader(resp.Body).WriteTo(b)
		resp.Body.Close()
		if resp.StatusCode != 200 || !strings.Contains(b.String(), want) || !strings.Contains(resp.Header.Get("Content-Security-Policy"), "default-src 'self'") {
			t.Errorf("GET %s: %d, CSP %q", path, resp.StatusCode, resp.Header.Get("Content-Security-Policy"))
		}
		if strings.Contains(b.String(), "http://") || strings.Contains(b.String(), "https://") {
			t.Errorf("%s names another origin: the page must work offline", path)
		}
	}
	resp, err = http.Post(srv.URL+"/", "application/json", strings.NewReader("{}"))
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusTeapot {
		t.Errorf("POST / answered %d, not by the CloudEvents receiver", resp.StatusCode)
	}
}

// A score passing its validUntil is a change (Placements now count it 0) though no object
// changed: the tick wakes the streams once for it, not on every tick after.
func TestExpiryWakesStreams(t *testing.T) {
	now := t0
	p := New(nil, Options{Now: func() time.Time { return now }})
	vu := t0.Add(1500 * time.Millisecond)
	p.setScore(score("c1", "cpu", &vu, "idle", 1))
	p.expireTick()
	before := p.scoresVer
	for i, want := range []uint64{before, before + 1, before + 1} {
		now = now.Add(time.Second)
		p.expireTick()
		if p.scoresVer != want {
			t.Errorf("tick %d (%s): version %d, want %d", i+1, now.Sub(t0), p.scoresVer, want)
		}
	}
	if c := p.Snapshot().Scores.Cells["c1"]["cpu/idle"]; !c.Expired {
		t.Errorf("cell %+v not expired", c)
	}
}

// Routine events make room for new ones before refusals do, until refusals fill half of it.
func TestRefusalsOutliveRoutineEvents(t *testing.T) {
	p := New(nil, Options{Events: 4})
	ok := ce(contract.TypeWriteDone, "w", `{}`)
	bad := ce(contract.TypeWriteFailed, "w", contract.WriteResult{Reason: contract.ReasonInvalidData})
	kinds := func() string {
		var b strings.Builder
		for _, e := range p.Snapshot().Events {
			fmt.Fprintf(&b, "%d%v ", e.Seq, map[bool]string{true: "!", false: ""}[e.Refusal])
		}
		return b.String()
	}
	for _, e := range []event.Event{bad, ok, ok, ok, ok, ok} {
		p.Handle(context.Background(), e)
	}
	if got := kinds(); got != "1! 4 5 6 " {
		t.Errorf("after a refusal and 5 routine events: %s", got)
	}
	for range 3 {
		p.Handle(context.Background(), bad)
	}
	// Refusals hold at most half of the room: the oldest refusals go, the newest routine events stay.
	if got := kinds(); got != "5 6 8! 9! " {
		t.Errorf("after 3 more refusals: %s", got)
	}
}
