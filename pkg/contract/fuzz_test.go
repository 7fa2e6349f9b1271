package contract

import (
	"bytes"
	"encoding/json"
	"strings"
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
	f.Add([]byte(`{"resource":"r","items":[{"cluster":"c1","cluster":"c2","scores":[{"name":"a","value":1}]}]}`))
	f.Add([]byte(`{"resource":"r","Resource":"s","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}]}`))
	f.Add([]byte(`{"resource":"r","items":[{"cluster":"c1","scores":[{"name":"a","value":1,"valu\u0065":2}]}]}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := scoreEvent("{}")
		_ = e.SetData(cloudevents.ApplicationJSON, data)
		s, err := DecodeScoreUpdated(e)
		if err != nil {
			return
		}
		if k, ok := repeatedKey(data); ok {
			t.Fatalf("accepted a document that repeats key %q", k)
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
	f.Add([]byte(`{"input":{"source":"s","id":"1","id":"2"}}`))
	f.Add([]byte(`{"input":{"source":"\u0000\u0001\u0002\u0003\u0004\u0005\u0006\u0007\u0008\u000b\u000c\u000e\u000f\u0010\u0011\u0012\u0013\u0014\u0015\u0016\u0017\u0018\u0019\u001a\u001b\u001c\u001d\u001e\u001f<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<","id":"1"},"reason":"Rejected","message":"<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<<"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := scoreEvent("{}")
		e.SetType(TypeWriteFailed)
		_ = e.SetData(cloudevents.ApplicationJSON, data)
		r, err := DecodeWriteResult(e)
		if err != nil {
			return
		}
		if k, ok := repeatedKey(data); ok {
			t.Fatalf("accepted a document that repeats key %q", k)
		}
		// Whatever a write result holds, its refusal fits Knative's dispatcher and still decodes
		// with its reason.
		small, _ := FitRefusal(NewWriteResult("w", *r))
		if len(small.Data()) >= MaxRefusalBytes {
			t.Fatalf("refusal of %d bytes: %s", len(small.Data()), small.Data())
		}
		back, err := DecodeWriteResult(&small)
		if err != nil {
			t.Fatalf("refusal does not decode: %v\n%s", err, small.Data())
		}
		if r.Failed() && !back.Failed() {
			t.Fatalf("a failed result became a success: %s", small.Data())
		}
	})
}

func FuzzDecodeFailure(f *testing.F) {
	f.Add([]byte(`{"input":{"source":"s","id":"1","type":"dev.knative.sources.ping"},"reason":"BadQuery","message":"parse error","retriable":false}`))
	f.Add([]byte(`{"input":{"source":"s","id":"1"},"reason":"MetricsUnavailable","message":"refused","retriable":true}`))
	f.Add([]byte(`{"input":{"source":"s","id":"1"},"reason":"BadQuery","Reason":"Unavailable","message":""}`))
	f.Add([]byte(`{"input":{"source":"s","id":"1"},"reason":"` + strings.Repeat("R", 100) + `","message":"` + strings.Repeat("\u003c", 400) + `"}`))
	f.Fuzz(func(t *testing.T, data []byte) {
		e := scoreEvent("{}")
		e.SetType(TypeScoreFailed)
		_ = e.SetData(cloudevents.ApplicationJSON, data)
		fl, err := DecodeFailure(e)
		if err != nil {
			return
		}
		if k, ok := repeatedKey(data); ok {
			t.Fatalf("accepted a document that repeats key %q", k)
		}
		// Whatever a failure holds, its refusal fits Knative's dispatcher and still decodes with
		// its reason (cut to 40 bytes when the refusal had to be cut) and retriable flag.
		small, _ := FitRefusal(NewFailure("f", *fl))
		if len(small.Data()) >= MaxRefusalBytes {
			t.Fatalf("refusal of %d bytes: %s", len(small.Data()), small.Data())
		}
		back, err := DecodeFailure(&small)
		if err != nil {
			t.Fatalf("refusal does not decode: %v\n%s", err, small.Data())
		}
		if back.Reason != fl.Reason && back.Reason != Reason(Truncate(string(fl.Reason), 40)) || back.Retriable != fl.Retriable {
			t.Fatalf("refusal says %q retriable=%v, the failure %q retriable=%v", back.Reason, back.Retriable, fl.Reason, fl.Retriable)
		}
	})
}

// repeatedKey finds a key that appears twice in one object of a valid JSON document, independently
// of the decoders' own check.
func repeatedKey(data []byte) (string, bool) {
	dec := json.NewDecoder(bytes.NewReader(data))
	var stack []map[string]bool
	var inObject []bool
	expectKey := false
	for {
		tok, err := dec.Token()
		if err != nil {
			return "", false
		}
		switch tok {
		case json.Delim('{'):
			stack = append(stack, map[string]bool{})
			inObject = append(inObject, true)
			expectKey = true
			continue
		case json.Delim('['):
			inObject = append(inObject, false)
			expectKey = false
			continue
		case json.Delim('}'):
			stack = stack[:len(stack)-1]
			inObject = inObject[:len(inObject)-1]
		case json.Delim(']'):
			inObject = inObject[:len(inObject)-1]
		default:
			if expectKey {
				k := tok.(string)
				if stack[len(stack)-1][k] {
					return k, true
				}
				stack[len(stack)-1][k] = true
				expectKey = false
				continue
			}
		}
		expectKey = len(inObject) > 0 && inObject[len(inObject)-1]
	}
}
