package writer

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// BenchmarkScoreWriter measures score updates that landed on the hub per second, and the hub API
// writes per landed update, for the score-writer at its deployed settings and for a naive
// producer (Get then UpdateStatus per update, again on a conflict) with the same hub client
// (functions/score-writer's defaults: QPS 200, burst 400) and the same number of concurrent
// senders, in the same run. Every update changes its cluster's value; an update is "landed" when
// it is answered Written, so the updates the writer answers Skipped because a newer one of the
// same score overtook them (in the same write, or already on the hub) are reported apart and not
// counted. Afterwards the hub must hold, per cluster, the newest update sent. Objects exist
// before timing starts (steady state). One op is a fixed round of updates per case.
//
//	make bench   or   go test ./test/writer -run '^$' -bench 'ScoreWriter$' -benchtime 1x
func BenchmarkScoreWriter(b *testing.B) {
	for _, n := range []int{100, 1000} {
		names := benchClusters(b, n)
		for _, c := range []struct {
			name                  string
			perEvent, senders     int
			naiveRound, wrtrRound int
		}{
			{"one-cluster-per-event", 1, 256, 600, 3000},
			{"fleet-events", n, 8, 600, max(16, 3200/n) * n}, // each sender sends 2 events or more
		} {
			var naive float64
			b.Run(fmt.Sprintf("clusters=%d/%s/naive-get-update", n, c.name), func(b *testing.B) {
				naive = benchNaive(b, names, c.senders, c.naiveRound)
			})
			b.Run(fmt.Sprintf("clusters=%d/%s/scoreflow", n, c.name), func(b *testing.B) {
				benchWriter(b, names, c.perEvent, c.senders, c.wrtrRound, naive)
			})
		}
	}
}

// deployedHub is the hub through the client the deployed writer has: functions/score-writer's
// --kube-api-qps 200 and --kube-api-burst 400 (deploy/score-writer.yaml keeps them).
func deployedHub() *rest.Config {
	cfg := rest.CopyConfig(hub.Config)
	cfg.QPS, cfg.Burst = 200, 400
	return cfg
}

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
			if err := hub.AddCluster(context.Background(), name, nil); err != nil && !apierrors.IsAlreadyExists(err) {
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

// updates hands out updates in observation order: update i is observed after update i-1, its
// cluster is picked at random (one cluster per event) or is every cluster in turn (fleet events),
// and its value differs from the value of that cluster's previous update.
type updates struct {
	mu     sync.Mutex
	names  []string
	next   int
	total  int
	count  []int   // per cluster: updates handed out
	newest []int32 // per cluster: the value of its newest update
}

func newUpdates(names []string, total int) *updates {
	return &updates{names: names, total: total, count: make([]int, len(names)), newest: make([]int32, len(names))}
}

type update struct {
	seq     int
	cluster int
	value   int32
}

// take returns the next n updates (fewer at the end of the round; none after it), for n
// different clusters.
func (u *updates) take(n int) []update {
	u.mu.Lock()
	defer u.mu.Unlock()
	offset := rand.IntN(len(u.names))
	var out []update
	for j := 0; j < n && u.next < u.total; j++ {
		c := (offset + j) % len(u.names)
		v := int32(u.count[c]%200) - 99 // never 100, the warm-up value
		u.count[c]++
		u.newest[c] = v
		out = append(out, update{seq: u.next, cluster: c, value: v})
		u.next++
	}
	return out
}

// benchNaive runs senders goroutines, each doing Get and UpdateStatus per update (again from Get
// on a conflict), and returns the updates landed per second. A naive producer has no order: the
// hub's final value of a cluster may be an older update than the newest (reported, not failed).
func benchNaive(b *testing.B, names []string, senders, round int) float64 {
	ctx := context.Background()
	client, err := clusterclient.NewForConfig(deployedHub())
	if err != nil {
		b.Fatal(err)
	}
	resource := fmt.Sprintf("naive-%d-%d", len(names), senders)
	for _, c := range names { // steady state: every object exists
		_, _ = hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: c}}, metav1.CreateOptions{})
	}
	total := b.N * round
	us := newUpdates(names, total)
	var gets, writes, conflicts atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				batch := us.take(1)
				if len(batch) == 0 {
					return
				}
				u := batch[0]
				api := client.ClusterV1alpha1().AddOnPlacementScores(names[u.cluster])
				for {
					obj, err := api.Get(ctx, resource, metav1.GetOptions{})
					gets.Add(1)
					if err != nil {
						b.Error(err)
						return
					}
					obj.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "load", Value: u.value}}
					_, err = api.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
					writes.Add(1)
					if apierrors.IsConflict(err) {
						conflicts.Add(1)
						continue
					}
					if err != nil {
						b.Error(err)
						return
					}
					break
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	landed := float64(total)
	b.ReportMetric(landed/elapsed.Seconds(), "landed/s")
	b.ReportMetric(float64(writes.Load())/landed, "api-writes/landed")
	b.ReportMetric(float64(gets.Load()+writes.Load())/landed, "api-requests/landed")
	b.ReportMetric(float64(conflicts.Load()), "conflicts")
	stale := 0
	final := finalValues(b, resource)
	for c := range names {
		if us.count[c] > 0 && final[c] != us.newest[c] {
			stale++
		}
	}
	b.ReportMetric(float64(stale), "clusters-not-newest")
	return landed / elapsed.Seconds()
}

// benchWriter sends a round of updates through a score-writer over HTTP, perEvent cluster items
// per event, from concurrent senders that each wait for their answer (as the broker's dispatcher
// does), counts the answers by outcome, and checks that every cluster's newest update is the one
// on the hub.
func benchWriter(b *testing.B, names []string, perEvent, senders, round int, naive float64) {
	s := startWriter(b, serverOpts{hub: deployedHub()})
	resource := fmt.Sprintf("load-%d-%d", len(names), perEvent)
	base := time.Now().Add(-time.Minute) // recent: older than the TTL would be skipped as expired

	// Warm up: create every object, so timing measures updates, not creates.
	for i := 0; i < len(names); i += 500 {
		var items []contract.ClusterScores
		for _, c := range names[i:min(i+500, len(names))] {
			items = append(items, item(c, score("load", 100)))
		}
		if st, reply := s.send(b, scoreEvent(b, base, contract.ScoreUpdated{Resource: resource, Items: items})); st != http.StatusOK {
			b.Fatalf("warm-up: %d %v", st, reply)
		}
	}
	time.Sleep(50 * time.Millisecond) // the objects rested

	var landed, superseded, overtaken atomic.Int64
	var wg sync.WaitGroup
	writesBefore := s.apiRequests(b, "create", "update_status")
	requestsBefore := s.apiRequests(b)
	total := b.N * round
	us := newUpdates(names, total)
	b.ResetTimer()
	start := time.Now()
	for g := 0; g < senders; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				batch := us.take(perEvent)
				if len(batch) == 0 {
					return
				}
				var items []contract.ClusterScores
				for _, u := range batch {
					items = append(items, item(names[u.cluster], score("load", float64(u.value))))
				}
				// The event's time orders it: its newest update's place in the sequence.
				observed := base.Add(time.Duration(batch[len(batch)-1].seq+1) * time.Microsecond)
				st, reply := s.send(b, scoreEvent(b, observed, contract.ScoreUpdated{Resource: resource, Items: items}))
				if st != http.StatusOK || reply == nil || reply.Type() != contract.TypeWriteDone {
					b.Errorf("status %d reply %v", st, reply)
					return
				}
				for _, r := range result(b, reply).Items {
					switch {
					case r.Outcome == contract.OutcomeWritten:
						landed.Add(1)
					case r.Outcome == contract.OutcomeSkipped && r.Reason == contract.ReasonStale && strings.Contains(r.Message, "superseded"):
						superseded.Add(1)
					case r.Outcome == contract.OutcomeSkipped && r.Reason == contract.ReasonStale:
						overtaken.Add(1)
					default:
						b.Errorf("%s: %s %s %s", r.Cluster, r.Outcome, r.Reason, r.Message)
					}
				}
			}
		}()
	}
	wg.Wait()
	elapsed := time.Since(start)
	b.StopTimer()
	writes := s.apiRequests(b, "create", "update_status") - writesBefore
	requests := s.apiRequests(b) - requestsBefore
	n := float64(landed.Load())
	answered := n + float64(superseded.Load()+overtaken.Load())
	b.ReportMetric(n/elapsed.Seconds(), "landed/s")
	b.ReportMetric(float64(superseded.Load())/elapsed.Seconds(), "superseded-in-write/s")
	b.ReportMetric(float64(overtaken.Load())/elapsed.Seconds(), "overtaken/s")
	b.ReportMetric(answered/elapsed.Seconds(), "answered/s")
	b.ReportMetric(writes/n, "api-writes/landed")
	b.ReportMetric(requests/n, "api-requests/landed")
	if naive > 0 {
		// The naive producer lands every update it answers; the writer lands only the newest of
		// those that meet, and answers the others once a newer one is on the hub.
		b.ReportMetric(n/elapsed.Seconds()/naive, "x-naive-landed")
		b.ReportMetric(answered/elapsed.Seconds()/naive, "x-naive-answered")
	}
	final := finalValues(b, resource)
	for c := range names {
		if v, ok := final[c]; us.count[c] > 0 && (!ok || v != us.newest[c]) {
			b.Errorf("cluster %s: load=%d on the hub (present %t), newest sent %d: an update was lost", names[c], v, ok, us.newest[c])
		}
	}
}

// finalValues reads the "load" score of every object named resource, by cluster index.
func finalValues(b *testing.B, resource string) map[int]int32 {
	list, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		b.Fatal(err)
	}
	out := map[int]int32{}
	for _, o := range list.Items {
		var i int
		if _, err := fmt.Sscanf(o.Namespace, "bench-%d", &i); o.Name == resource && err == nil {
			out[i] = scoresOf(&o)["load"]
		}
	}
	return out
}
