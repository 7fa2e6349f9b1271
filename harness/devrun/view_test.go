package devrun

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// What `scoreflow run` prints for a failure says why, where the user looks: the reason and the
// clusters refused.
func TestEventLineSaysWhyAWriteFailed(t *testing.T) {
	data := func(v any) []byte { b, _ := json.Marshal(v); return b }
	items := []contract.ItemResult{{Cluster: "cluster1", Outcome: contract.OutcomeWritten}}
	for _, c := range []string{"nowhere", "gone", "pending", "later"} {
		items = append(items, contract.ItemResult{Cluster: c, Outcome: contract.OutcomeFailed, Reason: contract.ReasonUnknownCluster, Message: "no ManagedCluster named " + c})
	}
	tests := []struct {
		name string
		typ  string
		src  string
		data []byte
		want []string
	}{
		{"refused items", contract.TypeWriteFailed, "scoreflow/score-writer", data(contract.WriteResult{Resource: "cpu", Items: items}),
			[]string{"cluster nowhere UnknownCluster: no ManagedCluster named nowhere", "cluster pending UnknownCluster", "and 1 more clusters"}},
		{"refused event", contract.TypeWriteFailed, "scoreflow/score-writer", data(contract.WriteResult{Reason: contract.ReasonInvalidData, Message: `data: duplicate key "resource"`}),
			[]string{`InvalidData: data: duplicate key "resource"`}},
		{"counted refusal, dead-lettered", contract.TypeWriteFailed, "scoreflow/dead-letter", data(contract.WriteResult{Reason: contract.ReasonDeadLettered, Message: "refused: ClusterNotAccepted", Counts: map[string]int{"Failed": 3}}),
			[]string{"DeadLettered: refused: ClusterNotAccepted"}},
		{"scorer failure", contract.TypeScoreFailed, "scoreflow/promql-scorer", data(contract.Failure{Reason: contract.ReasonBadQuery, Message: strings.Repeat("q", 1000)}),
			[]string{"BadQuery: qqq"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			line := EventLine(newEvent(tt.typ, tt.src, tt.data))
			for _, w := range tt.want {
				if !strings.Contains(line, w) {
					t.Errorf("line %q lacks %q", line, w)
				}
			}
			if len(line) > 600 {
				t.Errorf("line is %d characters long", len(line))
			}
		})
	}
	if line := EventLine(newEvent(contract.TypeWriteDone, "w", []byte(`{}`))); strings.Contains(line, ": ") {
		t.Errorf("write.done line %q says why it failed", line)
	}
}

func newEvent(typ, source string, data []byte) event.Event {
	e := event.New()
	e.SetID("1")
	e.SetType(typ)
	e.SetSource(source)
	e.SetTime(time.Now())
	_ = e.SetData(event.ApplicationJSON, data)
	return e
}
