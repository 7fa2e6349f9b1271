package contract

import (
	"encoding/json"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
)

// Parsers disagree on which of two equal keys wins (Go's encoding/json takes the last, others the
// first), so a document with a repeated key means different things to different readers: every
// decoder refuses it, naming the key.
func TestDuplicateKeysAreRefused(t *testing.T) {
	tests := []struct {
		name, typ, data, key string
	}{
		{"resource", TypeScoreUpdated, `{"resource":"a","resource":"b","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`, `"resource"`},
		{"cluster in an item", TypeScoreUpdated, `{"resource":"r","items":[{"cluster":"c1","cluster":"c2","scores":[{"name":"a","value":1}]}]}`, `"cluster"`},
		{"score value", TypeScoreUpdated, `{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1,"value":100}]}]}`, `"value"`},
		{"keys differing only in case", TypeScoreUpdated, `{"resource":"a","Resource":"b","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`, `key "Resource" is not "resource"`},
		{"field in the wrong case", TypeScoreUpdated, `{"Resource":"a","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`, `key "Resource" is not "resource"`},
		{"label", TypeMetricChanged, `{"samples":[{"metric":"up","cluster":"c1","labels":{"a":"x","a":"y"},"value":1,"observedAt":"2026-01-01T00:00:00Z"}]}`, `"a"`},
		{"write result", TypeWriteFailed, `{"input":{"source":"s","id":"1","id":"2"}}`, `"id"`},
		{"failure", TypeScoreFailed, `{"input":{"source":"s","id":"1"},"reason":"BadQuery","reason":"BadConfig","message":"m"}`, `"reason"`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			e := scoreEvent("{}")
			e.SetType(tt.typ)
			_ = e.SetData(cloudevents.ApplicationJSON, []byte(tt.data))
			var err error
			switch tt.typ {
			case TypeScoreUpdated:
				_, err = DecodeScoreUpdated(e)
			case TypeMetricChanged:
				_, err = DecodeMetricChanged(e)
			case TypeWriteFailed:
				_, err = DecodeWriteResult(e)
			case TypeScoreFailed:
				_, err = DecodeFailure(e)
			}
			var fes FieldErrors
			want := tt.key
			if strings.HasPrefix(want, `"`) {
				want = "duplicate key " + want
			}
			if !errors.As(err, &fes) || fes.Reason() != ReasonInvalidData || !strings.Contains(err.Error(), want) {
				t.Fatalf("decode = %v, want InvalidData saying %s", err, want)
			}
		})
	}
	var cfg struct{ A int }
	if err := DecodeJSON([]byte(`{"A":1,"A":2}`), &cfg); err == nil || !strings.Contains(err.Error(), `duplicate key "A"`) {
		t.Errorf("DecodeJSON (scorer configuration) = %v, want a duplicate key error", err)
	}
	// Label names are case-sensitive in Prometheus: two labels differing in case are two labels.
	var m MetricChanged
	if err := DecodeJSON([]byte(`{"samples":[{"metric":"up","cluster":"c1","labels":{"a":"x","A":"y"},"value":1,"observedAt":"2026-01-01T00:00:00Z"}]}`), &m); err != nil || len(m.Samples[0].Labels) != 2 {
		t.Errorf("labels a and A: %v %+v, want both kept", err, m)
	}
}

// cloudevents-player's form sends no time. A score.updated without one is dated when the broker
// received it (Knative's knativearrivaltime extension), else when the writer receives it.
func TestObservedTime(t *testing.T) {
	now := time.Date(2026, 11, 23, 12, 0, 0, 0, time.UTC)
	arrival := now.Add(-3 * time.Second)
	explicit := now.Add(-time.Minute)
	mk := func(at time.Time, ext any) *event.Event {
		e := scoreEvent(`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`)
		e.SetTime(at)
		if ext != nil {
			e.SetExtension(ExtArrivalTime, ext)
		}
		return e
	}
	tests := []struct {
		name string
		e    *event.Event
		want time.Time
	}{
		{"explicit time wins", mk(explicit, arrival.Format(time.RFC3339Nano)), explicit},
		{"broker's arrival time", mk(time.Time{}, arrival.Format(time.RFC3339Nano)), arrival},
		{"arrival time as a timestamp", mk(time.Time{}, cloudevents.Timestamp{Time: arrival}), arrival},
		{"no time at all: receipt", mk(time.Time{}, nil), now},
		{"unreadable arrival time: receipt", mk(time.Time{}, "yesterday"), now},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if _, err := DecodeScoreUpdated(tt.e); err != nil {
				t.Fatalf("DecodeScoreUpdated: %v", err)
			}
			if got := ObservedTime(tt.e, now); !got.Equal(tt.want) {
				t.Errorf("ObservedTime = %s, want %s", got, tt.want)
			}
		})
	}
}

// The JSON Schema and the docs say the same as the code: time is optional.
func TestSchemaSaysTimeIsOptional(t *testing.T) {
	var s struct {
		Description string `json:"description"`
	}
	if err := json.Unmarshal(Schema(TypeScoreUpdated), &s); err != nil {
		t.Fatal(err)
	}
	if strings.Contains(s.Description, "(required)") || !strings.Contains(s.Description, "knativearrivaltime") {
		t.Errorf("score-updated schema description does not explain a missing time: %q", s.Description)
	}
}

// Names a sender chooses are echoed in answers; they are cut, so an answer costs what a valid name
// costs, whatever was sent.
func TestTruncate(t *testing.T) {
	long := strings.Repeat("é", 100)
	got := Truncate(long, 21)
	if len(got) > 21 || !strings.HasSuffix(got, "…") || !json.Valid([]byte(`"`+got+`"`)) {
		t.Errorf("Truncate = %q (%d bytes), want at most 21 bytes of valid UTF-8 ending in …", got, len(got))
	}
	if Truncate("short", 21) != "short" {
		t.Error("Truncate changed a short string")
	}
}

// The largest legitimate score.updated fits the body limit the functions enforce (see MaxEventBytes).
func TestLargestLegitimateEventFitsTheBodyLimit(t *testing.T) {
	s := ScoreUpdated{Resource: strings.Repeat("r", 253)}
	for i := 0; i < MaxItems; i++ {
		c := ClusterScores{Cluster: fmt.Sprintf("%s%05d", strings.Repeat("c", 58), i)}
		for j := 0; j < 14; j++ {
			c.Scores = append(c.Scores, Score{Name: fmt.Sprintf("%s%02d", strings.Repeat("s", 18), j), Value: -100})
		}
		s.Items = append(s.Items, c)
	}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	b, _ := json.Marshal(s)
	if len(b) > MaxEventBytes {
		t.Errorf("%d clusters with 63-character names and 14 scores of 20 characters: %d bytes, more than MaxEventBytes %d", MaxItems, len(b), MaxEventBytes)
	}
	t.Logf("largest documented event: %d bytes of %d", len(b), MaxEventBytes)
}

// A refusal keeps what correlates it (the input's source and id, at their longest) and its reason,
// however many items and reasons it counts and whatever characters its messages hold.
func TestFitRefusalKeepsCorrelation(t *testing.T) {
	in := EventRef{Source: strings.Repeat("s", MaxSourceLength), ID: strings.Repeat("i", MaxIDLength), Type: strings.Repeat("t", MaxTypeLength)}
	reasons := []Reason{ReasonUnknownCluster, ReasonClusterNotAccepted, ReasonInvalidScore, ReasonOutOfRange, ReasonConflict, ReasonUnavailable, ReasonForbidden, ReasonRejected}
	r := WriteResult{Input: in, Resource: strings.Repeat("r", 253)}
	for i := 0; i < MaxItems; i++ {
		r.Items = append(r.Items, ItemResult{Cluster: strings.Repeat("c", 63), Outcome: OutcomeFailed, Reason: reasons[i%len(reasons)],
			Message: strings.Repeat("<\u0001\"é", 200)})
	}
	r.Items[0].Outcome, r.Items[1].Outcome = OutcomeWritten, OutcomeSkipped
	small, changed := FitRefusal(NewWriteResult("scoreflow/score-writer", r))
	got, err := DecodeWriteResult(&small)
	if !changed || err != nil || len(small.Data()) >= MaxRefusalBytes {
		t.Fatalf("changed %v, %d bytes, %v:\n%s", changed, len(small.Data()), err, small.Data())
	}
	if got.Input.Source != in.Source || got.Input.ID != in.ID || got.Reason == "" || !got.Failed() || got.Counts["Failed"] != MaxItems-2 {
		t.Errorf("compact refusal lost its correlation, reason or counts:\n%s", small.Data())
	}
	t.Logf("%d bytes: %s", len(small.Data()), small.Data())
}
