package contract

import (
	"errors"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
)

func TestValidateClusterName(t *testing.T) {
	for name, ok := range map[string]bool{
		"cluster1": true, "east-1": true, "a": true,
		"": false, "Cluster1": false, "../x": false, "a.b": false, "-a": false,
		"default": false, "kube-system": false, "kube-public": false, "open-cluster-management-hub": false,
		"kube-flannel": false, "scoreflow": false, "monitoring": false, "knative-eventing": false, "knative-serving": false,
		"kubelet": true, "scoreflow1": true, "my-monitoring": true, "knative": true,
		strings.Repeat("a", 1<<20): false,
		strings.Repeat("a", 64):    false, strings.Repeat("a", 63): true,
	} {
		if err := ValidateClusterName(name); (err == nil) != ok {
			t.Errorf("ValidateClusterName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestValidateScoreName(t *testing.T) {
	for name, ok := range map[string]bool{
		"cpuAvailable": true, "free-capacity": true, "ResourceRatioCPU": true, "app1;gpu0": true, "a.b_c:d": true,
		"": false, "${app};${device}": false, "a b": false, "a/b": false, "-a": false, "a-": false,
		strings.Repeat("x", 254): false, strings.Repeat("x", 253): true,
	} {
		if err := ValidateScoreName(name); (err == nil) != ok {
			t.Errorf("ValidateScoreName(%q) = %v, want ok=%v", name, err, ok)
		}
	}
}

func TestCheckScoreValue(t *testing.T) {
	for v, ok := range map[float64]bool{0: true, -100: true, 100: true, 42: true, 101: false, -101: false, 0.5: false, 99.999: false} {
		if err := CheckScoreValue(v); (err == nil) != ok {
			t.Errorf("CheckScoreValue(%v) = %v, want ok=%v", v, err, ok)
		}
	}
}

func TestScoreUpdatedValidate(t *testing.T) {
	good := func() ScoreUpdated {
		return ScoreUpdated{Resource: "resource-usage-score", Items: []ClusterScores{
			{Cluster: "c1", Scores: []Score{{Name: "cpuAvailable", Value: 40}, {Name: "memAvailable", Value: -3}}},
			{Cluster: "c2", Scores: []Score{{Name: "cpuAvailable", Value: 100}}},
		}}
	}
	tests := []struct {
		name       string
		mutate     func(*ScoreUpdated)
		wantField  string // "" = valid
		wantReason Reason
		itemLevel  bool
	}{
		{name: "valid", mutate: func(*ScoreUpdated) {}},
		{name: "bad resource", mutate: func(s *ScoreUpdated) { s.Resource = "Bad_Name" }, wantField: "resource", wantReason: ReasonInvalidData},
		{name: "no items", mutate: func(s *ScoreUpdated) { s.Items = nil }, wantField: "items", wantReason: ReasonInvalidData},
		{name: "duplicate cluster", mutate: func(s *ScoreUpdated) { s.Items[1].Cluster = "c1" }, wantField: "items[1].cluster", wantReason: ReasonInvalidData},
		{name: "hostile cluster", mutate: func(s *ScoreUpdated) { s.Items[1].Cluster = "../x" }, wantField: "items[1].cluster", wantReason: ReasonUnknownCluster, itemLevel: true},
		{name: "hub namespace", mutate: func(s *ScoreUpdated) { s.Items[0].Cluster = "kube-system" }, wantField: "items[0].cluster", wantReason: ReasonUnknownCluster, itemLevel: true},
		{name: "no scores", mutate: func(s *ScoreUpdated) { s.Items[0].Scores = nil }, wantField: "items[0].scores", wantReason: ReasonInvalidScore, itemLevel: true},
		{name: "repeated score", mutate: func(s *ScoreUpdated) { s.Items[0].Scores[1].Name = "cpuAvailable" }, wantField: "items[0].scores[1].name", wantReason: ReasonInvalidScore, itemLevel: true},
		{name: "unfilled format", mutate: func(s *ScoreUpdated) { s.Items[0].Scores[0].Name = "${app}" }, wantField: "items[0].scores[0].name", wantReason: ReasonInvalidScore, itemLevel: true},
		{name: "too high", mutate: func(s *ScoreUpdated) { s.Items[1].Scores[0].Value = 101 }, wantField: "items[1].scores[0].value", wantReason: ReasonOutOfRange, itemLevel: true},
		{name: "fractional", mutate: func(s *ScoreUpdated) { s.Items[0].Scores[0].Value = 0.5 }, wantField: "items[0].scores[0].value", wantReason: ReasonOutOfRange, itemLevel: true},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s := good()
			tt.mutate(&s)
			err := s.Validate()
			if tt.wantField == "" {
				if err != nil {
					t.Fatalf("Validate() = %v, want nil", err)
				}
				return
			}
			var fes FieldErrors
			if !errors.As(err, &fes) {
				t.Fatalf("Validate() = %v, want FieldErrors", err)
			}
			if fes[0].Field != tt.wantField || fes[0].Reason != tt.wantReason {
				t.Errorf("first problem = %s (%s), want field %s reason %s", fes[0].Field, fes[0].Reason, tt.wantField, tt.wantReason)
			}
			// Item problems must not fail the envelope: the other items are still written.
			if envErr := s.ValidateEnvelope(); (envErr == nil) != tt.itemLevel {
				t.Errorf("ValidateEnvelope() = %v, item-level=%v", envErr, tt.itemLevel)
			}
		})
	}
}

func TestMetricChangedValidate(t *testing.T) {
	now := time.Now()
	m := MetricChanged{Samples: []Sample{{Metric: "up", Cluster: "c1", Value: 1, ObservedAt: now, Labels: map[string]string{"bad-label": "x"}}, {Metric: "9x", Cluster: "C", ObservedAt: now}}}
	err := m.Validate()
	var fes FieldErrors
	if !errors.As(err, &fes) {
		t.Fatalf("Validate() = %v", err)
	}
	got := map[string]bool{}
	for _, fe := range fes {
		got[fe.Field] = true
	}
	for _, f := range []string{"samples[0].labels", "samples[1].metric", "samples[1].cluster"} {
		if !got[f] {
			t.Errorf("no problem reported for %s in %v", f, err)
		}
	}
	m.Samples = m.Samples[:1]
	m.Samples[0].Labels = map[string]string{"app": "web"}
	if err := m.Validate(); err != nil {
		t.Errorf("valid sample: %v", err)
	}
}

func scoreEvent(data string) *event.Event {
	e := cloudevents.NewEvent()
	e.SetID("1")
	e.SetSource("test")
	e.SetType(TypeScoreUpdated)
	e.SetTime(time.Now())
	_ = e.SetData(cloudevents.ApplicationJSON, []byte(data))
	return &e
}

func TestDecodeScoreUpdated(t *testing.T) {
	tests := []struct {
		name   string
		edit   func(*event.Event)
		data   string
		reason Reason
	}{
		{name: "ok", data: `{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`},
		{name: "item problems are left to ValidateItem", data: `{"resource":"r","items":[{"cluster":"../x","scores":[{"name":"a","value":1000}]}]}`},
		{name: "unknown field", data: `{"resource":"r","itemz":[]}`, reason: ReasonInvalidData},
		{name: "not json", data: `hello`, reason: ReasonInvalidData},
		{name: "trailing", data: `{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]} {}`, reason: ReasonInvalidData},
		{name: "wrong type", edit: func(e *event.Event) { e.SetType("io.scoreflow.other") }, data: `{}`, reason: ReasonWrongType},
		{name: "no time: dated by ObservedTime", edit: func(e *event.Event) { e.SetTime(time.Time{}) }, data: `{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`},
		{name: "duplicate key", data: `{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}],"resource":"s"}`, reason: ReasonInvalidData},
		{name: "xml", edit: func(e *event.Event) { e.SetDataContentType("application/xml") }, data: `<a/>`, reason: ReasonInvalidData},
		{name: "huge number", data: `{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1e400}]}]}`, reason: ReasonInvalidData},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := scoreEvent(tt.data)
			if tt.edit != nil {
				tt.edit(e)
			}
			_, err := DecodeScoreUpdated(e)
			var fes FieldErrors
			switch {
			case tt.reason == "" && err != nil:
				t.Fatalf("DecodeScoreUpdated() = %v", err)
			case tt.reason != "" && !errors.As(err, &fes):
				t.Fatalf("DecodeScoreUpdated() = %v, want FieldErrors with %s", err, tt.reason)
			case tt.reason != "" && fes.Reason() != tt.reason:
				t.Fatalf("reason = %s, want %s (%v)", fes.Reason(), tt.reason, err)
			}
		})
	}
}

func TestNewScoreUpdatedRefusesInvalid(t *testing.T) {
	_, err := NewScoreUpdated("s", time.Now(), ScoreUpdated{Resource: "r", Items: []ClusterScores{{Cluster: "c1", Scores: []Score{{Name: "a", Value: 150}}}}})
	if err == nil || !strings.Contains(err.Error(), "items[0].scores[0].value") {
		t.Fatalf("NewScoreUpdated with 150 = %v, want an error naming the field", err)
	}
}

func TestWriteResultType(t *testing.T) {
	r := WriteResult{Input: EventRef{Source: "s", ID: "1"}, Items: []ItemResult{{Cluster: "c1", Outcome: OutcomeWritten}, {Cluster: "c2", Outcome: OutcomeSkipped, Reason: ReasonStale}}}
	if r.EventType() != TypeWriteDone {
		t.Errorf("written+skipped = %s, want done", r.EventType())
	}
	r.Items = append(r.Items, ItemResult{Cluster: "c3", Outcome: OutcomeFailed, Reason: ReasonUnknownCluster})
	if r.EventType() != TypeWriteFailed || r.AnyRetriable() {
		t.Errorf("with a permanent failure: type %s retriable %v", r.EventType(), r.AnyRetriable())
	}
	a, b := NewWriteResult("w", r), NewWriteResult("w", r)
	if a.ID() != b.ID() {
		t.Errorf("answers to one input have ids %s and %s, want equal", a.ID(), b.ID())
	}
	got, err := DecodeWriteResult(&a)
	if err != nil || len(got.Items) != 3 {
		t.Fatalf("round trip: %v %+v", err, got)
	}
}

// Every time a score.updated carries is bounded: validUntil at most MaxValidity after the event's
// time, and never the zero time (some encoders' "unset", which would read as never expiring).
func TestValidUntilIsBounded(t *testing.T) {
	observed := time.Date(2026, 11, 26, 12, 0, 0, 0, time.UTC)
	item := []ClusterScores{{Cluster: "c1", Scores: []Score{{Name: "a", Value: 1}}}}
	at := func(t time.Time) *ScoreUpdated { return &ScoreUpdated{Resource: "r", ValidUntil: &t, Items: item} }
	if err := at(time.Time{}).Validate(); err == nil || !strings.Contains(err.Error(), "zero time") {
		t.Errorf("zero validUntil: %v, want refused", err)
	}
	if fe := at(observed.Add(MaxValidity)).CheckValidUntil(observed); fe != nil {
		t.Errorf("validUntil MaxValidity after the event: %v", fe)
	}
	for _, vu := range []time.Time{observed.Add(MaxValidity + time.Nanosecond), time.Date(9999, 12, 31, 23, 59, 59, 0, time.UTC)} {
		if fe := at(vu).CheckValidUntil(observed); fe == nil || fe.Reason != ReasonInvalidData || fe.Field != "validUntil" {
			t.Errorf("validUntil %s: %v, want refused", vu, fe)
		}
		if _, err := NewScoreUpdated("test", observed, *at(vu)); err == nil {
			t.Errorf("NewScoreUpdated built an event valid until %s", vu)
		}
	}
	if fe := (&ScoreUpdated{Resource: "r", NeverExpires: true, Items: item}).CheckValidUntil(observed); fe != nil {
		t.Errorf("neverExpires: %v", fe)
	}
}
