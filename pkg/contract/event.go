package contract

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"mime"
	"reflect"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/cloudevents/sdk-go/v2/types"
	"github.com/google/uuid"
)

// validator is a decoded event's data.
type validator interface{ Validate() error }

// DecodeJSON decodes data strictly: unknown fields, trailing bytes, a key repeated in one object and
// a field name in the wrong case are errors, so a typo is reported instead of silently ignored and
// no two parsers can read the document differently. Errors are FieldErrors with ReasonInvalidData.
func DecodeJSON(data []byte, v any) error {
	if len(bytes.TrimSpace(data)) == 0 {
		return FieldErrors{fieldErr(ReasonInvalidData, "data", "is empty")}
	}
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(v); err != nil {
		return FieldErrors{fieldErr(ReasonInvalidData, "data", "is not valid JSON for this event type: %s", Truncate(err.Error(), 200))}
	}
	if _, err := dec.Token(); err != io.EOF {
		return FieldErrors{fieldErr(ReasonInvalidData, "data", "has content after the JSON value")}
	}
	if err := checkKeys(data, reflect.TypeOf(v)); err != nil {
		return FieldErrors{fieldErr(ReasonInvalidData, "data", "%v", err)}
	}
	return nil
}

// checkEvent checks the attributes every scoreflow event shares.
func checkEvent(e *event.Event, wantType string) error {
	if err := e.Validate(); err != nil {
		return FieldErrors{fieldErr(ReasonNotCloudEvent, "event", "%v", err)}
	}
	if e.Type() != wantType {
		return FieldErrors{fieldErr(ReasonWrongType, "type", "is %q, want %q", e.Type(), wantType)}
	}
	if ct := e.DataContentType(); ct != "" {
		mt, _, err := mime.ParseMediaType(ct)
		if err != nil || (mt != "application/json" && mt != "text/json") {
			return FieldErrors{fieldErr(ReasonInvalidData, "datacontenttype", "is %q, want application/json", ct)}
		}
	}
	return nil
}

func decode(e *event.Event, wantType string, v validator) error {
	if err := checkEvent(e, wantType); err != nil {
		return err
	}
	if err := DecodeJSON(e.Data(), v); err != nil {
		return err
	}
	return v.Validate()
}

// DecodeMetricChanged decodes and fully validates a metric.changed event.
func DecodeMetricChanged(e *event.Event) (*MetricChanged, error) {
	var m MetricChanged
	if err := decode(e, TypeMetricChanged, &m); err != nil {
		return nil, err
	}
	return &m, nil
}

// DecodeScoreUpdated decodes a score.updated event and validates what applies to the whole event:
// attributes, resource and item list. Item problems are left to ValidateItem so that the good items
// of an event are still written. A missing time is not an error: see ObservedTime.
func DecodeScoreUpdated(e *event.Event) (*ScoreUpdated, error) {
	if err := checkEvent(e, TypeScoreUpdated); err != nil {
		return nil, err
	}
	var s ScoreUpdated
	if err := DecodeJSON(e.Data(), &s); err != nil {
		return nil, err
	}
	if err := s.ValidateEnvelope(); err != nil {
		return nil, err
	}
	return &s, nil
}

// ExtArrivalTime is the extension a Knative broker's ingress stamps on every event it accepts: when
// it arrived (RFC 3339).
const ExtArrivalTime = "knativearrivaltime"

// ExtResource is the extension every scoreflow producer stamps on a score.updated: the
// AddOnPlacementScore resource it is for, data.resource again, where the broker ingress can read
// it. Knative's EventPolicy filters see attributes, not data, so this is what lets an EventPolicy
// admit a sender for its own resources only; the score-writer refuses an event whose extension
// and data.resource differ. NewScoreUpdated sets it.
const ExtResource = "scoreflowresource"

// ObservedTime is when a score.updated's metrics were observed, which orders updates: the event's
// time; when it has none (cloudevents-player's form sends none), when the broker received it
// (knativearrivaltime); else now, when the writer received it. Events without time are thus
// ordered by arrival, and an event that names a time before that arrival is older.
func ObservedTime(e *event.Event, now time.Time) time.Time {
	if t := e.Time(); !t.IsZero() {
		return t
	}
	if v, ok := e.Extensions()[ExtArrivalTime]; ok {
		if t, err := types.ToTime(v); err == nil && !t.IsZero() {
			return t
		}
	}
	return now
}

// DecodeWriteResult decodes a write.done or write.failed event.
func DecodeWriteResult(e *event.Event) (*WriteResult, error) {
	want := TypeWriteDone
	if e.Type() == TypeWriteFailed {
		want = TypeWriteFailed
	}
	if err := checkEvent(e, want); err != nil {
		return nil, err
	}
	var r WriteResult
	if err := DecodeJSON(e.Data(), &r); err != nil {
		return nil, err
	}
	return &r, nil
}

// NewScoreUpdated builds a score.updated event after validating it completely: a scorer never sends
// what the writer would refuse. observed is when the scored metrics were observed.
func NewScoreUpdated(source string, observed time.Time, s ScoreUpdated) (event.Event, error) {
	if err := s.Validate(); err != nil {
		return event.Event{}, fmt.Errorf("score.updated for %q: %w", s.Resource, err)
	}
	size := 64 + len(s.Resource)
	for i := range s.Items {
		size += 24 + len(s.Items[i].Cluster)
		for _, sc := range s.Items[i].Scores {
			size += 24 + len(sc.Name)
		}
	}
	data, err := appendScoreUpdated(make([]byte, 0, size), &s)
	if err != nil {
		return event.Event{}, err
	}
	e := newEventJSON(source, uuid.NewString(), TypeScoreUpdated, s.Resource, observed, data)
	e.SetExtension(ExtResource, s.Resource)
	return e, nil
}

// NewMetricChanged builds a validated metric.changed event.
func NewMetricChanged(source string, observed time.Time, m MetricChanged) (event.Event, error) {
	if err := m.Validate(); err != nil {
		return event.Event{}, fmt.Errorf("metric.changed: %w", err)
	}
	return newEvent(source, uuid.NewString(), TypeMetricChanged, "", observed, m)
}

// NewWriteResult builds the write.done or write.failed reply to r.Input (its id: see resultID).
func NewWriteResult(source string, r WriteResult) event.Event {
	e, err := newEvent(source, resultID(r.Input), r.EventType(), r.Resource, time.Now(), r)
	if err != nil {
		panic(err) // WriteResult always marshals
	}
	return e
}

// NewFailure builds a score.failed event answering f.Input.
func NewFailure(source string, f Failure) event.Event {
	e, err := newEvent(source, resultID(f.Input), TypeScoreFailed, "", time.Now(), f)
	if err != nil {
		panic(err) // Failure always marshals
	}
	return e
}

// DecodeFailure decodes a score.failed event.
func DecodeFailure(e *event.Event) (*Failure, error) {
	if err := checkEvent(e, TypeScoreFailed); err != nil {
		return nil, err
	}
	var f Failure
	if err := DecodeJSON(e.Data(), &f); err != nil {
		return nil, err
	}
	return &f, nil
}

// resultID derives an answer's id from the input's source and id, so that the answers to a
// redelivered event carry the same id and deduplicate downstream.
func resultID(in EventRef) string {
	sum := sha256.Sum256([]byte(in.Source + "\x00" + in.ID))
	return "result-" + hex.EncodeToString(sum[:12])
}

// newEventJSON is newEvent with data already marshalled: the same event, as SetData would make it
// from a value (data not base64: SetData given bytes would mark them so).
func newEventJSON(source, id, typ, subject string, t time.Time, data []byte) event.Event {
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource(source)
	e.SetType(typ)
	e.SetTime(t)
	if subject != "" {
		e.SetSubject(subject)
	}
	e.SetDataContentType(cloudevents.ApplicationJSON)
	e.DataEncoded = data
	e.DataBase64 = false
	return e
}

func newEvent(source, id, typ, subject string, t time.Time, data any) (event.Event, error) {
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource(source)
	e.SetType(typ)
	e.SetTime(t)
	if subject != "" {
		e.SetSubject(subject)
	}
	if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
		return event.Event{}, err
	}
	return e, nil
}
