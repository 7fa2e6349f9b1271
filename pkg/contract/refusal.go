package contract

import (
	"encoding/json"
	"fmt"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
)

// MaxRefusalBytes bounds the body of every non-2xx answer (in binary mode, the reply event's data).
// Knative v0.50's dispatcher copies a failed answer's body, base64-encoded, into a 1024-byte buffer
// when it dead-letters the event (pkg/kncloudevents/event_dispatcher.go) and panics when the body
// is over 768 bytes, taking the channel dispatcher, and every event in it, down. 700 leaves room.
const MaxRefusalBytes = 700

// FitRefusal returns e with data under MaxRefusalBytes, for a non-2xx answer, and whether it had to
// change it. A write result too large keeps its input, resource, reason (for item failures, the
// most common), retriable flag and a short message, and counts its items instead of listing them;
// a score.failed keeps its reason with a shorter message. Whatever else is too large loses its data.
func FitRefusal(e event.Event) (event.Event, bool) {
	if len(e.Data()) < MaxRefusalBytes {
		return e, false
	}
	var data any
	switch e.Type() {
	case TypeWriteDone, TypeWriteFailed:
		var r WriteResult
		if json.Unmarshal(e.Data(), &r) != nil {
			break
		}
		s := summarise(r)
		full := s.Message
		data = fit(&s,
			func() { s.Message = Truncate(full, 300) },
			func() { s.Message = Truncate(full, 160) },
			func() { s.Counts = onlyOutcomes(s.Counts) },
			func() { s.Resource, s.Input.Type = Truncate(s.Resource, 64), "" },
			func() { s.Message = Truncate(full, 40) },
			func() { shrinkRef(&s.Input, 128, 64) },
			func() {
				shrinkRef(&s.Input, 40, 40)
				s.Resource, s.Message, s.Counts = Truncate(s.Resource, 40), Truncate(full, 40), nil
			})
	case TypeScoreFailed:
		var f Failure
		if json.Unmarshal(e.Data(), &f) != nil {
			break
		}
		f.Reason = Reason(Truncate(string(f.Reason), 40))
		full := f.Message
		data = fit(&f,
			func() { f.Message = Truncate(full, 300) },
			func() { f.Message = Truncate(full, 160) },
			func() { f.Input.Type = "" },
			func() { f.Message = Truncate(full, 40) },
			func() { shrinkRef(&f.Input, 128, 64) },
			func() { shrinkRef(&f.Input, 40, 40) })
	}
	out := e.Clone()
	if data == nil {
		out.DataEncoded, out.DataBase64 = nil, false
		return out, true
	}
	if err := out.SetData(cloudevents.ApplicationJSON, data); err != nil {
		out.DataEncoded = nil
	}
	return out, true
}

// fit applies steps to *v in order until it marshals under MaxRefusalBytes. The steps cut the
// message first and what correlates the answer (the input's source and id) last; the last step
// leaves only short strings, which always fit.
func fit[T any](v *T, steps ...func()) *T {
	for _, step := range steps {
		step()
		if b, _ := json.Marshal(v); len(b) < MaxRefusalBytes {
			break
		}
	}
	return v
}

func shrinkRef(r *EventRef, source, id int) {
	r.Source, r.ID, r.Type = Truncate(r.Source, source), Truncate(r.ID, id), ""
}

// summarise turns a write result's items into counts, and names the failure they share.
func summarise(r WriteResult) WriteResult {
	s := r
	s.Items = nil
	s.Reason = Reason(Truncate(string(r.Reason), 40))
	if len(r.Items) == 0 {
		return s
	}
	s.Counts = map[string]int{}
	byReason := map[Reason]int{}
	var order []Reason // failure reasons as first seen: ties go to the earliest
	var first *ItemResult
	failed := 0
	for i := range r.Items {
		it := &r.Items[i]
		s.Counts[string(it.Outcome)]++
		if it.Reason != "" {
			s.Counts[string(it.Outcome)+"/"+string(Truncate(string(it.Reason), 40))]++
		}
		if it.Outcome != OutcomeFailed {
			continue
		}
		failed++
		if byReason[it.Reason] == 0 {
			order = append(order, it.Reason)
		}
		byReason[it.Reason]++
		if first == nil {
			first = it
		}
	}
	if s.Reason != "" || first == nil {
		return s
	}
	s.Reason = first.Reason
	for _, reason := range order {
		if byReason[reason] > byReason[s.Reason] {
			s.Reason = reason
		}
	}
	s.Reason = Reason(Truncate(string(s.Reason), 40))
	s.Retriable = r.AnyRetriable()
	s.Message = fmt.Sprintf("%d of %d items failed (the writer's log lists each); first: %s: %s",
		failed, len(r.Items), Truncate(first.Cluster, 64), first.Message)
	return s
}

// onlyOutcomes keeps the counts by outcome, without the reasons.
func onlyOutcomes(c map[string]int) map[string]int {
	if c == nil {
		return nil
	}
	out := map[string]int{}
	for _, o := range []Outcome{OutcomeWritten, OutcomeSkipped, OutcomeFailed} {
		if n, ok := c[string(o)]; ok {
			out[string(o)] = n
		}
	}
	return out
}
