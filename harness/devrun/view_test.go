package devrun

import (
	"encoding/json"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/broker"
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
		rec  broker.Record
		want []string
	}{
		{"refused items", broker.Record{Kind: broker.KindAccepted, Type: contract.TypeWriteFailed, Source: "scoreflow/score-writer",
			Data: data(contract.WriteResult{Resource: "cpu", Items: items})},
			[]string{"cluster nowhere UnknownCluster: no ManagedCluster named nowhere", "cluster pending UnknownCluster", "and 1 more clusters"}},
		{"refused event", broker.Record{Kind: broker.KindAccepted, Type: contract.TypeWriteFailed, Source: "scoreflow/score-writer",
			Data: data(contract.WriteResult{Reason: contract.ReasonInvalidData, Message: `data: duplicate key "resource"`})},
			[]string{`InvalidData: data: duplicate key "resource"`}},
		{"counted refusal, dead-lettered", broker.Record{Kind: broker.KindAccepted, Type: contract.TypeWriteFailed, Source: "scoreflow/dead-letter",
			Data: data(contract.WriteResult{Reason: contract.ReasonDeadLettered, Message: "refused: ClusterNotAccepted", Counts: map[string]int{"Failed": 3}})},
			[]string{"DeadLettered: refused: ClusterNotAccepted"}},
		{"scorer failure", broker.Record{Kind: broker.KindAccepted, Type: contract.TypeScoreFailed, Source: "scoreflow/promql-scorer",
			Data: data(contract.Failure{Reason: contract.ReasonBadQuery, Message: strings.Repeat("q", 1000)})},
			[]string{"BadQuery: qqq"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tt.rec.Time = time.Now()
			line, ok := EventLine(tt.rec)
			if !ok {
				t.Fatal("no line")
			}
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
	if line, _ := EventLine(broker.Record{Kind: broker.KindAccepted, Type: contract.TypeWriteDone, Source: "w", Data: []byte(`{}`)}); strings.Contains(line, ": ") {
		t.Errorf("write.done line %q says why it failed", line)
	}
}
