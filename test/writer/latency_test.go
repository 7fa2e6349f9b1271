package writer

import (
	"net/http"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// An update of an idle object is written at once: the coalescing window spaces the writes of a
// busy object and is never waited by a lone update. With a 5s window, the answer (given once the
// score is on the hub) comes well before the window would have passed.
func TestLoneUpdateLandsWithoutWaitingTheWindow(t *testing.T) {
	t.Parallel()
	const window = 5 * time.Second
	s := startWriter(t, serverOpts{writer: scorewriter.Options{Window: window}})
	start := time.Now()
	status, reply := s.send(t, scoreEvent(t, start, contract.ScoreUpdated{Resource: "lone", Items: []contract.ClusterScores{item("c2", score("a", 42))}}))
	took := time.Since(start)
	if r := result(t, reply); status != http.StatusOK || r.Items[0].Outcome != contract.OutcomeWritten {
		t.Fatalf("lone update: %d %+v, want 200 Written", status, r.Items[0])
	}
	if took >= window/2 {
		t.Errorf("lone update of an idle object answered after %s: it waited the %s window", took.Round(time.Millisecond), window)
	}
	if got := scoresOf(get(t, "c2", "lone")); got["a"] != 42 {
		t.Errorf("scores on the hub = %v, want a=42", got)
	}
}
