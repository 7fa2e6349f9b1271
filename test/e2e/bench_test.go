package e2e

import (
	"context"
	"fmt"
	"net/http"
	"sort"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/harness/devrun"
)

// BenchmarkEndToEnd measures, over 200 metric changes that each make the other of two clusters
// the most idle, the time from the broker accepting the metric.changed to (1) the new score on
// the hub and (2) the Placement's decision moving, through the whole local stack (Knative
// Eventing's broker and in-memory channel, promql-scorer, score-writer, envtest hub, the real
// placement controller). Changes are sent one after another, each once the previous decision has
// moved. Times are taken from watches.
//
//	go test ./test/e2e -run '^$' -bench EndToEnd -benchtime 1x
func BenchmarkEndToEnd(b *testing.B) {
	const changes = 200
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatches(b, ctx)
	var toScore, toDecision []time.Duration
	for n := 0; n < b.N; n++ {
		for i := 0; i < changes; i++ {
			best, other := "cluster1", "cluster2"
			if i%2 == 1 {
				best, other = other, best
			}
			// A fresh value each time, so each change is a new score (the deadband is the watcher's).
			hi := 0.9 - float64(i%50)/1000
			e := idle(b, map[string]float64{best: hi, other: 0.1, "cluster3": 0.05})
			want := int32((hi*200 - 100) + 0.5)
			w.expect(best, want)
			start := time.Now()
			if st := post(b, e); st != http.StatusAccepted {
				b.Fatalf("broker answered %d", st)
			}
			scoreAt, decisionAt, err := w.wait(best, 30*time.Second)
			if err != nil {
				b.Fatalf("change %d: %v", i, err)
			}
			toScore = append(toScore, scoreAt.Sub(start))
			toDecision = append(toDecision, decisionAt.Sub(start))
		}
	}
	b.StopTimer()
	report := func(name string, ds []time.Duration) {
		sort.Slice(ds, func(i, j int) bool { return ds[i] < ds[j] })
		b.ReportMetric(float64(ds[len(ds)/2].Microseconds())/1000, name+"-p50-ms")
		b.ReportMetric(float64(ds[len(ds)*99/100].Microseconds())/1000, name+"-p99-ms")
	}
	report("score", toScore)
	report("decision", toDecision)
	b.ReportMetric(float64(len(toScore)), "changes")
}

// watches timestamps score updates and decision changes as the hub announces them.
type watches struct {
	mu       sync.Mutex
	cluster  string
	value    int32
	scoreAt  time.Time
	decided  string
	decideAt time.Time
	changed  chan struct{}
}

func startWatches(b *testing.B, ctx context.Context) *watches {
	w := &watches{changed: make(chan struct{}, 1)}
	scores, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).Watch(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + devrun.DemoResource})
	if err != nil {
		b.Fatal(err)
	}
	decisions, err := stack.Hub.Cluster.ClusterV1beta1().PlacementDecisions(devrun.Namespace).Watch(ctx, metav1.ListOptions{LabelSelector: clusterv1beta1.PlacementLabel + "=" + devrun.Placement})
	if err != nil {
		b.Fatal(err)
	}
	go func() {
		for ev := range scores.ResultChan() {
			o, ok := ev.Object.(*clusterv1alpha1.AddOnPlacementScore)
			if !ok || ev.Type == watch.Deleted {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			for _, s := range o.Status.Scores {
				if o.Namespace == w.cluster && s.Name == devrun.DemoScoreName && s.Value == w.value && w.scoreAt.IsZero() {
					w.scoreAt = now
				}
			}
			w.mu.Unlock()
			w.poke()
		}
	}()
	go func() {
		for ev := range decisions.ResultChan() {
			d, ok := ev.Object.(*clusterv1beta1.PlacementDecision)
			if !ok || len(d.Status.Decisions) != 1 {
				continue
			}
			now := time.Now()
			w.mu.Lock()
			if c := d.Status.Decisions[0].ClusterName; c != w.decided {
				w.decided, w.decideAt = c, now
			}
			w.mu.Unlock()
			w.poke()
		}
	}()
	return w
}

func (w *watches) poke() {
	select {
	case w.changed <- struct{}{}:
	default:
	}
}

func (w *watches) expect(cluster string, value int32) {
	w.mu.Lock()
	w.cluster, w.value, w.scoreAt = cluster, value, time.Time{}
	w.mu.Unlock()
}

// wait returns when cluster's score has the expected value and the decision is cluster.
func (w *watches) wait(cluster string, timeout time.Duration) (scoreAt, decisionAt time.Time, err error) {
	deadline := time.After(timeout)
	for {
		w.mu.Lock()
		scoreAt, decided, decisionAt := w.scoreAt, w.decided, w.decideAt
		w.mu.Unlock()
		if !scoreAt.IsZero() && decided == cluster {
			if decisionAt.Before(scoreAt) {
				decisionAt = scoreAt // the decision was already there: it moved with this score
			}
			return scoreAt, decisionAt, nil
		}
		select {
		case <-w.changed:
		case <-deadline:
			return time.Time{}, time.Time{}, fmt.Errorf("score seen: %v, decision %q, want %s", !scoreAt.IsZero(), decided, cluster)
		}
	}
}
