package writer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// BenchmarkScoreWriter measures score updates absorbed per second (one update = one cluster item
// of a score.updated event, acknowledged only once it is on the hub) and the API writes issued,
// against the envtest hub. The naive baseline is what a simple producer does: one Get and one
// UpdateStatus per update, in sequence. Objects exist before timing starts (steady state).
// One op is a fixed round (naiveRound or writerRound updates), so every run measures the same work.
//
//	make bench   or   go test ./test/writer -run '^$' -bench ScoreWriter -benchtime 1x
func BenchmarkScoreWriter(b *testing.B) {
	for _, n := range []int{100, 1000} {
		names := benchClusters(b, n)
		var naiveNsPerOp float64
		b.Run(fmt.Sprintf("clusters=%d/naive-get-update", n), func(b *testing.B) {
			naiveNsPerOp = benchNaive(b, names)
		})
		b.Run(fmt.Sprintf("clusters=%d/scoreflow-one-cluster-per-event", n), func(b *testing.B) {
			benchWriter(b, names, 1, 1024, naiveNsPerOp)
		})
		b.Run(fmt.Sprintf("clusters=%d/scoreflow-fleet-events", n), func(b *testing.B) {
			benchWriter(b, names, n, 128, naiveNsPerOp)
		})
	}
}

// Updates per op.
const (
	naiveRound  = 300
	writerRound = 20000
)

var benchSetup sync.Mutex

// benchClusters registers n ManagedClusters (with namespaces) once per process.
func benchClusters(b *testing.B, n int) []string {
	benchSetup.Lock()
	defer benchSetup.Unlock()
	names := make([]string, n)
	sem := make(chan struct{}, 16)
	var wg sync.WaitGroup
	for i := range names {
		names[i] = fmt.Sprintf("bench-%04d", i)
		wg.Add(1)
		sem <- struct{}{}
		go func(name string) {
			defer wg.Done()
			defer func() { <-sem }()
			if err := hub.AddCluster(context.Background(), name, nil); err != nil {
				b.Error(err)
			}
			if err := hub.AcceptCluster(context.Background(), name); err != nil {
				b.Error(err)
			}
		}(names[i])
	}
	wg.Wait()
	return names
}

func benchNaive(b *testing.B, names []string) float64 {
	ctx := context.Background()
	client := fastClient(b)
	resource := fmt.Sprintf("naive-%d", len(names))
	for _, c := range names { // steady state: every object exists
		_, _ = client.ClusterV1alpha1().AddOnPlacementScores(c).Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: c}}, metav1.CreateOptions{})
	}
	total := b.N * naiveRound
	b.ResetTimer()
	start := time.Now()
	for i := 0; i < total; i++ {
		api := client.ClusterV1alpha1().AddOnPlacementScores(names[rand.IntN(len(names))])
		obj, err := api.Get(ctx, resource, metav1.GetOptions{})
		if err != nil {
			b.Fatal(err)
		}
		obj.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "load", Value: int32(i % 100)}}
		if _, err := api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
			b.Fatal(err)
		}
	}
	elapsed := time.Since(start)
	b.ReportMetric(float64(total)/elapsed.Seconds(), "updates/s")
	b.ReportMetric(2, "api-requests/update")
	return float64(elapsed.Nanoseconds()) / float64(total)
}

// benchWriter sends b.N rounds of updates through a score-writer over HTTP, perEvent cluster items
// per event, from concurrent senders that each wait for their answer (as the broker's dispatcher
// does), then checks that for every cluster the newest acknowledged value is the one on the hub.
func benchWriter(b *testing.B, names []string, perEvent, senders int, naiveNsPerOp float64) {
	s := startWriter(b, serverOpts{})
	resource := fmt.Sprintf("load-%d-%d", len(names), perEvent)
	base := time.Now().Add(-time.Minute) // recent: older than the TTL would be skipped as expired

	// Warm up: create every object, so timing measures updates, not creates.
	for i := 0; i < len(names); i += 500 {
		var items []contract.ClusterScores
		for _, c := range names[i:min(i+500, len(names))] {
			items = append(items, item(c, score("load", 0)))
		}
		if st, reply := s.send(b, scoreEvent(b, base, contract.ScoreUpdated{Resource: resource, Items: items})); st != http.StatusOK {
			b.Fatalf("warm-up: %d %v", st, reply)
		}
	}

	type latest struct {
		seq   int64
		value int32
	}
	var (
		mu     sync.Mutex
		newest = map[string]latest{}
		next   atomic.Int64
		wg     sync.WaitGroup
	)
	writesBefore := s.apiRequests(b, "create", "update_status")
	total := int64(b.N) * writerRound
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				first := next.Add(int64(perEvent)) - int64(perEvent)
				if first >= total {
					return
				}
				last := min(first+int64(perEvent), total)
				// Every update has its own observation time, so the newest per cluster is well defined.
				observed := base.Add(time.Duration(last) * time.Microsecond)
				offset := rand.IntN(len(names))
				var items []contract.ClusterScores
				for i := first; i < last; i++ {
					items = append(items, item(names[(offset+int(i-first))%len(names)], score("load", float64(i%100))))
				}
				st, reply := s.send(b, scoreEvent(b, observed, contract.ScoreUpdated{Resource: resource, Items: items}))
				if st != http.StatusOK || reply == nil || reply.Type() != contract.TypeWriteDone {
					b.Errorf("status %d reply %v", st, reply)
					return
				}
				mu.Lock()
				for i := first; i < last; i++ {
					c := names[(offset+int(i-first))%len(names)]
					if newest[c].seq < last {
						newest[c] = latest{seq: last, value: int32(i % 100)}
					}
				}
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	writes := s.apiRequests(b, "create", "update_status") - writesBefore
	nsPerOp := float64(elapsed.Nanoseconds()) / float64(total)
	b.ReportMetric(float64(total)/elapsed.Seconds(), "updates/s")
	b.ReportMetric(writes, "api-writes")
	b.ReportMetric(writes/float64(total), "api-writes/update")
	if naiveNsPerOp > 0 {
		b.ReportMetric(naiveNsPerOp/nsPerOp, "x-naive")
	}

	list, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	onHub := map[string]int32{}
	for _, o := range list.Items {
		if o.Name == resource {
			onHub[o.Namespace] = scoresOf(&o)["load"]
		}
	}
	if len(onHub) != len(names) {
		b.Fatalf("%d of %d objects named %s on the hub", len(onHub), len(names), resource)
	}
	for c, want := range newest {
		if got, ok := onHub[c]; !ok || got != want.value {
			b.Errorf("cluster %s: load=%d on the hub, newest acknowledged %d: an update was lost", c, got, want.value)
		}
	}
}
