package scorer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"sync"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// boundary is what the score-writer takes before it writes: pkg/function's receiver (its body
// limit answers 413) and contract.DecodeScoreUpdated with full validation. It records the clusters
// of every event it accepts.
type boundary struct {
	mu       sync.Mutex
	events   int
	clusters map[string]int
}

func (b *boundary) handle(_ context.Context, e event.Event) function.Response {
	s, err := contract.DecodeScoreUpdated(&e)
	if err == nil {
		err = s.Validate()
	}
	if err != nil {
		return function.Response{Status: http.StatusBadRequest}
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	b.events++
	for _, it := range s.Items {
		b.clusters[it.Cluster]++
	}
	return function.Response{Status: http.StatusOK}
}

// TestFleetResultReachesTheWriterBoundaryInParts: 10,000 clusters with 40 scores each (about 17 MB
// as one event) leave a scorer as several score.updated, all but one through its sink and one as
// its reply, each accepted at the writer's boundary, together carrying every cluster exactly once.
func TestFleetResultReachesTheWriterBoundaryInParts(t *testing.T) {
	const clusters, scores = 10000, 40
	result := contract.ScoreUpdated{Resource: "fleet"}
	for i := range clusters {
		it := contract.ClusterScores{Cluster: fmt.Sprintf("cluster-%05d", i)}
		for j := range scores {
			it.Scores = append(it.Scores, contract.Score{Name: fmt.Sprintf("score-name-%09d", j), Value: float64(i%201 - 100)})
		}
		result.Items = append(result.Items, it)
	}
	observed := time.Now()
	routes := Route{contract.TypePing: func(context.Context, event.Event) (*Result, error) {
		return &Result{Observed: observed, Scores: result}, nil
	}}

	b := &boundary{clusters: map[string]int{}}
	writer := functest.Serve(t, function.New("writer-boundary", "test"), b.handle)

	// Before splitting, the scorer replied with the whole result in one event: refused.
	whole, err := contract.NewScoreUpdated("scoreflow/test", observed, result)
	if err != nil {
		t.Fatal(err)
	}
	if st, _ := functest.Send(t, writer, whole); st != http.StatusRequestEntityTooLarge {
		t.Fatalf("the whole result in one event (%d bytes) was answered %d, want 413", len(whole.Data()), st)
	}

	// Without a sink the scorer refuses rather than leave clusters out.
	noSink := functest.Serve(t, function.New("scorer", "test"), Handler("scoreflow/test", routes))
	st, reply := functest.Send(t, noSink, functest.Ping(`{}`))
	if _, f := functest.Reply(t, reply); st != http.StatusInternalServerError || f == nil || f.Reason != contract.ReasonInvalidData {
		t.Fatalf("without a sink: %d %+v, want 500 InvalidData", st, f)
	}

	// The sink stands in for the broker: it delivers straight to the writer's boundary, and so does
	// the reply.
	sink, err := function.NewSender(writer, "")
	if err != nil {
		t.Fatal(err)
	}
	scorer := functest.Serve(t, function.New("scorer", "test"), HandlerTo("scoreflow/test", routes, sink))
	st, reply = functest.Send(t, scorer, functest.Ping(`{}`))
	if st != http.StatusOK || reply == nil {
		t.Fatalf("scorer answered %d, %v", st, reply)
	}
	if st, _ := functest.Send(t, writer, *reply); st != http.StatusOK {
		t.Fatalf("the reply was answered %d at the writer's boundary", st)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.events < 3 {
		t.Errorf("%d events, want 3 or more (17 MB in events of at most %d bytes)", b.events, contract.MaxEventBytes)
	}
	if len(b.clusters) != clusters {
		t.Errorf("%d clusters arrived, want %d", len(b.clusters), clusters)
	}
	for c, n := range b.clusters {
		if n != 1 {
			t.Errorf("cluster %s arrived %d times", c, n)
		}
	}
	t.Logf("%d clusters in %d events", clusters, b.events)
}

// --max-items-per-event splits a result the contract would carry in one event: 250 clusters at 40
// per event leave as 7 parts (6 to the sink, one reply), each with an id of the input's parts
// ("part-<hash>-k-of-7"), together every cluster once. A negative cap is refused.
func TestMaxItemsPerEventSplitsSmaller(t *testing.T) {
	result := contract.ScoreUpdated{Resource: "fleet"}
	for i := range 250 {
		result.Items = append(result.Items, contract.ClusterScores{Cluster: fmt.Sprintf("cluster-%03d", i), Scores: []contract.Score{{Name: "s", Value: 1}}})
	}
	routes := Route{contract.TypePing: func(context.Context, event.Event) (*Result, error) {
		return &Result{Observed: time.Now(), Scores: result}, nil
	}}
	b := &boundary{clusters: map[string]int{}}
	writer := functest.Serve(t, function.New("writer-boundary", "test"), b.handle)
	sink, err := function.NewSender(writer, "")
	if err != nil {
		t.Fatal(err)
	}
	fn := function.New("scorer", "test")
	opts := Flags(fn.Flags)
	if err := fn.Parse([]string{"--max-items-per-event", "40"}); err != nil {
		t.Fatal(err)
	}
	scorer := functest.Serve(t, fn, HandlerWith("scoreflow/test", routes, sink, *opts))
	in := functest.Ping(`{}`)
	st, reply := functest.Send(t, scorer, in)
	if st != http.StatusOK || reply == nil {
		t.Fatalf("scorer answered %d, %v", st, reply)
	}
	if want := partID(function.Ref(&in), 0, 7); reply.ID() != want {
		t.Errorf("the reply's id is %q, want %q", reply.ID(), want)
	}
	if st, _ := functest.Send(t, writer, *reply); st != http.StatusOK {
		t.Fatalf("the reply was answered %d at the writer's boundary", st)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.events != 7 || len(b.clusters) != 250 {
		t.Errorf("%d events with %d clusters, want 7 with 250", b.events, len(b.clusters))
	}
	neg := function.New("scorer", "test")
	Flags(neg.Flags)
	neg.Flags.SetOutput(io.Discard)
	if err := neg.Parse([]string{"--max-items-per-event", "-1"}); err == nil {
		t.Error("a negative --max-items-per-event was accepted")
	}
}
