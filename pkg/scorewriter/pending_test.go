package scorewriter

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/prometheus/client_golang/prometheus"
	"open-cluster-management.io/api/client/cluster/clientset/versioned/fake"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// BenchmarkPendingUpdateBytes measures what the handler and the writer hold per update accepted
// and not yet written: one event of a fleet refresh (contract.MaxItems clusters, two scores each) handed to
// a writer that does not write, measured once all of its updates wait. A fleet's refresh keeps
// every item of every resource waiting at once while the hub writes them at its rate:
//
//	go test ./pkg/scorewriter -run '^$' -bench PendingUpdateBytes -benchtime 1x
func BenchmarkPendingUpdateBytes(b *testing.B) {
	const n = contract.MaxItems
	su := contract.ScoreUpdated{Resource: "fleet-cpu"}
	for i := range n {
		su.Items = append(su.Items, contract.ClusterScores{Cluster: fmt.Sprintf("fleet-%05d", i),
			Scores: []contract.Score{{Name: "a", Value: float64(i % 100)}, {Name: "b", Value: float64(i % 50)}}})
	}
	e := cloudevents.NewEvent()
	e.SetID("refresh-1")
	e.SetSource("test/fleet")
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	if err := e.SetData(cloudevents.ApplicationJSON, su); err != nil {
		b.Fatal(err)
	}
	su.Items = nil
	for range b.N {
		w, err := NewWriter(fake.NewSimpleClientset(), DefaultOptions(), NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			b.Fatal(err)
		}
		h := NewHandler(w, admitAll{}, HandlerOptions{Source: "test", TTL: DefaultTTL})
		before := heapInUse()
		ctx, cancel := context.WithCancel(context.Background())
		answered := make(chan struct{})
		go func() {
			defer close(answered)
			h.Handle(ctx, e)
		}()
		for w.Pending() < n {
			select {
			case <-answered:
				b.Fatalf("answered with %d of %d updates waiting", w.Pending(), n)
			case <-time.After(time.Millisecond):
			}
		}
		after := heapInUse()
		b.ReportMetric(float64(after-before)/n, "B/update")
		cancel()
		<-answered
		runtime.KeepAlive(h)
	}
}
