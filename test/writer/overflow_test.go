package writer

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// sendTogether sends events at once and returns their answers in order. Sent right after a write
// of their object to a writer with a long coalescing window, they arrive while the object rests
// and share its next write (mergedWrites tells).
func sendTogether(t *testing.T, s *server, events ...cloudevents.Event) ([]int, []*contract.WriteResult) {
	t.Helper()
	statuses := make([]int, len(events))
	results := make([]*contract.WriteResult, len(events))
	var wg sync.WaitGroup
	for i, e := range events {
		wg.Add(1)
		go func() {
			defer wg.Done()
			status, reply := s.send(t, e)
			statuses[i] = status
			if reply != nil {
				r, err := contract.DecodeWriteResult(reply)
				if err == nil {
					results[i] = r
				}
			}
		}()
	}
	wg.Wait()
	for i, r := range results {
		if r == nil {
			t.Fatalf("event %d: %d without a write result", i, statuses[i])
		}
	}
	return statuses, results
}

// mergedWrites counts the writes that carried more than one update
// (scoreflow_writer_updates_per_write above its first bucket, 1).
func (s *server) mergedWrites(t *testing.T) uint64 {
	t.Helper()
	mfs, err := s.fn.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == "scoreflow_writer_updates_per_write" {
			h := mf.GetMetric()[0].GetHistogram()
			return h.GetSampleCount() - h.GetBucket()[0].GetCumulativeCount()
		}
	}
	return 0
}

// A sender chooses its CloudEvents source; the writer names the sources of a write in a condition
// message, which the hub caps at 32 KiB. An honest update written together with an event whose
// source is 33 KB must still be written.
func TestHostileSourceDoesNotFailCoalescedUpdates(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{writer: scorewriter.Options{Window: 300 * time.Millisecond}})
	now := time.Now()
	honest := scoreEvent(t, now, contract.ScoreUpdated{Resource: "long-source", Items: []contract.ClusterScores{item("c4", score("honest", 5))}})
	hostile := scoreEvent(t, now, contract.ScoreUpdated{Resource: "long-source", Items: []contract.ClusterScores{item("c4", score("hostile", 6))}})
	hostile.SetSource("hostile/" + strings.Repeat("x", 33*1024))

	statuses, results := sendTogether(t, s, honest, hostile)
	if statuses[0] != http.StatusOK || results[0].Items[0].Outcome != contract.OutcomeWritten {
		t.Errorf("honest update: %d %+v, want 200 Written", statuses[0], results[0].Items[0])
	}
	obj := get(t, "c4", "long-source")
	if got := scoresOf(obj); got["honest"] != 5 {
		t.Errorf("scores on the hub = %v, want honest=5", got)
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, scorewriter.ConditionUpdated); c == nil || len(c.Message) > 1024 {
		t.Errorf("%s condition: %v, want a message under 1 KiB", scorewriter.ConditionUpdated, c)
	}
}

// The observation ledger grows when an entry is rewritten with a longer time, not only with new
// score names: RFC 3339 with nanoseconds is 10 characters longer per time than a whole second. A
// ledger near its 32 KiB limit rewritten with nanosecond times must refuse that update alone, and
// an update written with it must land.
func TestLedgerRewriteThatWouldOverflowIsRefusedAlone(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{writer: scorewriter.Options{Window: time.Second}})
	// 200 names of 108 characters: about 31,800 bytes of ledger with whole-second times.
	var names []string
	for i := range 200 {
		names = append(names, fmt.Sprintf("s%03d-%s", i, strings.Repeat("n", 103)))
	}
	scores := func(v float64) []contract.Score {
		out := make([]contract.Score, len(names))
		for i, n := range names {
			out[i] = score(n, v)
		}
		return out
	}
	base := time.Now().Add(-time.Minute).Truncate(time.Second)
	status, reply := s.send(t, scoreEvent(t, base, contract.ScoreUpdated{Resource: "ledger-full", Items: []contract.ClusterScores{item("c4", scores(1)...)}}))
	if r := result(t, reply); status != http.StatusOK || r.Items[0].Outcome != contract.OutcomeWritten {
		t.Fatalf("filling the ledger: %d %+v", status, r.Items[0])
	}
	if n := len(ledgerMessage(t, "c4", "ledger-full")); n < 31000 || n > 32768 {
		t.Fatalf("ledger is %d bytes, want just under 32 KiB", n)
	}

	rewrite := scoreEvent(t, base.Add(time.Second+123456789*time.Nanosecond), contract.ScoreUpdated{Resource: "ledger-full", Items: []contract.ClusterScores{item("c4", scores(2)...)}})
	honest := scoreEvent(t, base.Add(2*time.Second), contract.ScoreUpdated{Resource: "ledger-full", Items: []contract.ClusterScores{item("c4", score(names[0], 3))}})
	merged := s.mergedWrites(t)
	statuses, results := sendTogether(t, s, rewrite, honest)
	if s.mergedWrites(t) == merged {
		t.Fatal("the rewrite and the honest update did not share a write")
	}
	if statuses[1] != http.StatusOK || results[1].Items[0].Outcome != contract.OutcomeWritten {
		t.Errorf("honest update coalesced with the overflowing one: %d %+v, want 200 Written", statuses[1], results[1].Items[0])
	}
	if r := results[0].Items[0]; r.Outcome != contract.OutcomeFailed || r.Reason != contract.ReasonRejected || r.Retriable {
		t.Errorf("overflowing rewrite: %d %+v, want Failed Rejected, not retriable", statuses[0], r)
	}
	got := scoresOf(get(t, "c4", "ledger-full"))
	if got[names[0]] != 3 || got[names[1]] != 1 {
		t.Errorf("%s = %d, %s = %d; want 3 (honest) and 1 (the rewrite refused)", names[0][:4], got[names[0]], names[1][:4], got[names[1]])
	}
	if n := len(ledgerMessage(t, "c4", "ledger-full")); n > 32768 {
		t.Errorf("ledger is %d bytes", n)
	}
}

func ledgerMessage(t *testing.T, cluster, resource string) string {
	t.Helper()
	obj := get(t, cluster, resource)
	if obj == nil {
		t.Fatalf("%s/%s not on the hub", cluster, resource)
	}
	c := meta.FindStatusCondition(obj.Status.Conditions, scorewriter.ConditionObservations)
	if c == nil {
		t.Fatalf("%s/%s has no ledger", cluster, resource)
	}
	return c.Message
}
