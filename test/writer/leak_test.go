package writer

import (
	"context"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// A Writer that has written leaves no goroutine behind once Run returns: not its workers, nor the
// delaying queue's timer loop (which runs from NewWriter and holds AddAfter's timers).
func TestRunLeavesNoGoroutines(t *testing.T) {
	// Not parallel: goroutines of other tests would count. Only the HTTP client's idle connections
	// may stay; they belong to client-go's shared transport, not to the writer.
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent(),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*persistConn).writeLoop"))

	client := fastClient(t)
	metrics := scorewriter.NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 })
	w, err := scorewriter.NewWriter(client, scorewriter.DefaultOptions(), metrics, slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()

	soon := time.Now().Add(time.Hour)
	u := scorewriter.NewUpdate(scorewriter.Key{Cluster: "c5", Resource: "leak"}, []contract.Score{{Name: "a", Value: 1}}, time.Now(), soon, "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	if r, err := u.Result(context.Background()); err != nil || r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v %v", r, err)
	}
	cancel()
	<-done
	late := scorewriter.NewUpdate(scorewriter.Key{Cluster: "c5", Resource: "leak"}, []contract.Score{{Name: "a", Value: 2}}, time.Now(), soon, "test")
	if err := w.Submit(late); err == nil {
		t.Error("Submit after Run returned was accepted")
	}
}
