package scorespage

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Bounds of what one event shows: senders choose these strings.
const (
	maxText       = 300 // a reason's message, a summary
	maxItemsShown = 10  // refused clusters listed per event
)

// EventView is one event of the stream as the page shows it.
type EventView struct {
	Seq      uint64    `json:"seq"`
	Received time.Time `json:"received"`
	// Time is the event's own time attribute, if any.
	Time    *time.Time `json:"time,omitempty"`
	Type    string     `json:"type"`
	Source  string     `json:"source"`
	ID      string     `json:"id"`
	Summary string     `json:"summary,omitempty"`
	// Refusal: something was not applied; Reason and Message say why (the event's own, else its
	// first refused item's), Items which clusters were refused and why.
	Refusal bool           `json:"refusal"`
	Reason  string         `json:"reason,omitempty"`
	Message string         `json:"message,omitempty"`
	Items   []ItemWhy      `json:"items,omitempty"`
	More    int            `json:"more,omitempty"` // refused items beyond Items
	Counts  map[string]int `json:"counts,omitempty"`
}

// ItemWhy is one refused cluster of a write result.
type ItemWhy struct {
	Cluster string `json:"cluster"`
	Reason  string `json:"reason"`
	Message string `json:"message,omitempty"`
}

// viewEvent renders a received event. Data it cannot decode is shown as such, never refused: the
// page displays what the broker carries.
func viewEvent(e event.Event, received time.Time) EventView {
	v := EventView{Received: received, Type: contract.Truncate(e.Type(), 128), Source: contract.Truncate(e.Source(), 256), ID: contract.Truncate(e.ID(), 128)}
	if t := e.Time(); !t.IsZero() {
		v.Time = &t
	}
	data := e.Data()
	switch e.Type() {
	case contract.TypeScoreUpdated:
		var s contract.ScoreUpdated
		if json.Unmarshal(data, &s) != nil {
			v.Summary = "data is not a score update"
			break
		}
		v.Summary = scoreSummary(&s)
	case contract.TypeWriteDone, contract.TypeWriteFailed:
		var r contract.WriteResult
		if json.Unmarshal(data, &r) != nil {
			v.Summary, v.Refusal = "data is not a write result", e.Type() == contract.TypeWriteFailed
			break
		}
		writeResult(&v, &r)
		v.Refusal = v.Refusal || e.Type() == contract.TypeWriteFailed
	default:
		// score.failed, optimize.failed and any other failure carry reason and message at the top.
		var f struct {
			Reason  string `json:"reason"`
			Message string `json:"message"`
		}
		if json.Unmarshal(data, &f) == nil && f.Reason != "" {
			v.Refusal, v.Reason, v.Message = true, contract.Truncate(f.Reason, 64), contract.Truncate(f.Message, maxText)
		}
		if strings.HasSuffix(e.Type(), ".failed") {
			v.Refusal = true
		}
	}
	return v
}

func scoreSummary(s *contract.ScoreUpdated) string {
	const shown = 4
	var parts []string
	for i, it := range s.Items {
		if i == shown {
			parts = append(parts, fmt.Sprintf("and %d more clusters", len(s.Items)-shown))
			break
		}
		var sc []string
		for _, x := range it.Scores {
			sc = append(sc, fmt.Sprintf("%s=%g", x.Name, x.Value))
		}
		parts = append(parts, it.Cluster+" "+strings.Join(sc, " "))
	}
	return contract.Truncate(s.Resource+": "+strings.Join(parts, ", "), maxText)
}

func writeResult(v *EventView, r *contract.WriteResult) {
	counts := map[contract.Outcome]int{}
	for _, it := range r.Items {
		counts[it.Outcome]++
		if it.Outcome != contract.OutcomeFailed {
			continue
		}
		if len(v.Items) < maxItemsShown {
			v.Items = append(v.Items, ItemWhy{Cluster: contract.Truncate(it.Cluster, 63), Reason: contract.Truncate(string(it.Reason), 64), Message: contract.Truncate(it.Message, maxText)})
		} else {
			v.More++
		}
	}
	var parts []string
	for _, o := range []contract.Outcome{contract.OutcomeWritten, contract.OutcomeSkipped, contract.OutcomeFailed} {
		if counts[o] > 0 {
			parts = append(parts, fmt.Sprintf("%d %s", counts[o], strings.ToLower(string(o))))
		}
	}
	if r.Duplicate {
		parts = append(parts, "duplicate")
	}
	v.Summary = contract.Truncate(r.Resource, 253)
	if len(parts) > 0 {
		v.Summary += ": " + strings.Join(parts, ", ")
	}
	if len(r.Counts) > 0 {
		v.Counts = map[string]int{}
		keys := make([]string, 0, len(r.Counts))
		for k := range r.Counts {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i == 20 {
				break
			}
			v.Counts[contract.Truncate(k, 100)] = r.Counts[k]
		}
	}
	v.Reason, v.Message = contract.Truncate(string(r.Reason), 64), contract.Truncate(r.Message, maxText)
	if v.Reason == "" && len(v.Items) > 0 {
		v.Reason, v.Message = v.Items[0].Reason, v.Items[0].Message
	}
	v.Refusal = r.Failed()
}
