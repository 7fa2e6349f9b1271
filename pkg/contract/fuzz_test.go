package contract

import (
	"encoding/json"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"
)

// The decoders face bytes from anyone who can reach the broker. They must never panic, and whatever
// they accept must be what they promise: a valid envelope that survives a round trip.

func FuzzDecodeScoreUpdated(f *testing.F) {
	f.Add([]byte(`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`))
	f.Add([]byte(`{"resource":"r","validUntil":"2030-01-01T00:00:00Z","items":[{"cluster":"c1","scores":[{"name":"a","value":1e2}]}]}`))
	f.Add([]byte(`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":-0}]},{"cluster":"c1"}]}`))
	f.Add([]byte(`null`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := scoreEvent("{}")
		_ = e.SetData(cloudevents.ApplicationJSON, data)
		s, err := DecodeScoreUpdated(e)
		if err != nil {
			return
		}
		if err := s.ValidateEnvelope(); err != nil {
			t.Fatalf("accepted an invalid envelope: %v", err)
		}
		for i := range s.Items {
			if fe := s.ValidateItem(i); fe == nil {
				for _, sc := range s.Items[i].Scores {
					if CheckScoreValue(sc.Value) != nil {
						t.Fatalf("item %d passed with value %v", i, sc.Value)
					}
				}
			}
		}
		b, err := json.Marshal(s)
		if err != nil {
			t.Fatalf("re-encode: %v", err)
		}
		var again ScoreUpdated
		if err := DecodeJSON(b, &again); err != nil {
			t.Fatalf("round trip of %s: %v", b, err)
		}
	})
}

func FuzzDecodeMetricChanged(f *testing.F) {
	f.Add([]byte(`{"samples":[{"metric":"up","cluster":"c1","value":1,"observedAt":"2026-01-01T00:00:00Z"}]}`))
	f.Add([]byte(`{"samples":[{"metric":"up","cluster":"c1","labels":{"a":"b"},"value":1,"observedAt":"2026-01-01T00:00:00+02:00"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := scoreEvent("{}")
		e.SetType(TypeMetricChanged)
		_ = e.SetData(cloudevents.ApplicationJSON, data)
		m, err := DecodeMetricChanged(e)
		if err != nil {
			return
		}
		if err := m.Validate(); err != nil {
			t.Fatalf("accepted invalid data: %v", err)
		}
	})
}

func FuzzDecodeWriteResult(f *testing.F) {
	f.Add([]byte(`{"input":{"source":"s","id":"1"},"items":[{"cluster":"c1","outcome":"Written","resourceVersion":"3"}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := scoreEvent("{}")
		e.SetType(TypeWriteFailed)
		_ = e.SetData(cloudevents.ApplicationJSON, data)
		if _, err := DecodeWriteResult(e); err != nil {
			return
		}
	})
}
