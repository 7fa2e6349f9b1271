package e2e

import (
	"context"
	"fmt"
	"math/rand/v2"
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
	"github.com/scoreflow/scoreflow/harness/promserver"
)

// BenchmarkEndToEnd measures two latencies in one run, through the whole local stack (Knative
// Eventing's broker and in-memory channel, promql-scorer, score-writer, envtest hub, the real
// placement controller), to (1) the new score on the hub and (2) the Placement's decision moving.
// Each change makes the other of two clusters the most idle; changes go one after another, each
// once the previous decision has moved. Times are taken from watches.
//
// From the event accepted (score-*, decision-*; 200 changes): the clock starts as a metric.changed
// is posted to the broker, as a producer would send it. Each is posted in a trace of its own, every
// other one sampled: the unsampled ones (score-*, decision-*) cost no span at any hop (Knative
// and the functions sample as the caller did), the sampled ones (traced-score-*,
// traced-decision-*) are recorded, and each one's trace in the stack's Jaeger says where the time
// went, hop by hop (p50 and p99 of each):
//
//   - knative-in: from the post to the promql-scorer's span: the broker ingress, the in-memory
//     channel's dispatcher and the trigger filter (Knative's);
//   - scorer: the promql-scorer's span (scoreflow's);
//   - knative-reply: from the scorer's answer to the reply's ingress span: the filter taking the
//     reply and posting it to the ingress (Knative's);
//   - knative-to-writer: from there to the score-writer's span: ingress, channel, filter again;
//   - writer: from the writer's span to its hub write (decoding, admission, its write queue);
//   - hub-write: the write's span (the API server's and etcd's time, and the client's; the test's
//     watch sees the new score as the write returns);
//   - placement: from the score to the decision moving (the OCM placement controller's).
//
// From the metric's change in Prometheus (prom-score-*, prom-decision-*; 50 changes): the clock
// starts as the sample is written to the stack's real Prometheus; the metric-watcher, polling every
// watchInterval (2s; the shipped deploy polls every 30s), finds it and sends the metric.changed.
// So this figure includes the wait for the next poll: changes land at random points of the poll
// cycle, so on average half the interval.
//
//	go test ./test/e2e -run '^$' -bench EndToEnd -benchtime 1x
func BenchmarkEndToEnd(b *testing.B) {
	const changes, promChanges = 200, 50
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := startWatches(b, ctx)
	var toScore, toDecision, tracedScore, tracedDecision, promToScore, promToDecision []time.Duration
	type traced struct {
		id                       string
		start, scoreAt, decideAt time.Time
	}
	var posted []traced
	for n := 0; n < b.N; n++ {
		for i := 0; i < changes; i++ {
			best, other, hi, want := alternate(i)
			e := idle(b, map[string]float64{best: hi, other: 0.1, "cluster3": 0.05})
			w.expect(best, want)
			start := time.Now()
			sampled := i%2 == 1
			st, id := postTraced(b, e, sampled)
			if st != http.StatusAccepted {
				b.Fatalf("broker answered %d", st)
			}
			scoreAt, decisionAt, err := w.wait(best, 30*time.Second)
			if err != nil {
				b.Fatalf("change %d: %v", i, err)
			}
			if !sampled {
				toScore = append(toScore, scoreAt.Sub(start))
				toDecision = append(toDecision, decisionAt.Sub(start))
				continue
			}
			tracedScore = append(tracedScore, scoreAt.Sub(start))
			tracedDecision = append(tracedDecision, decisionAt.Sub(start))
			posted = append(posted, traced{id, start, scoreAt, decisionAt})
		}
		// Second, so that the watcher's later observation times are never Stale against the
		// events posted above.
		for i := 0; i < promChanges; i++ {
			// Each change would otherwise follow the previous one's decision by a few ms, so just
			// after a poll, and wait almost a whole interval every time: a random pause puts the
			// change anywhere in the poll cycle, as a real metric's is.
			time.Sleep(rand.N(watchInterval))
			best, other, hi, want := alternate(i)
			w.expect(best, want)
			start := time.Now()
			series := make([]promserver.Series, 0, 3)
			for c, v := range map[string]float64{best: hi, other: 0.1, "cluster3": 0.05} {
				series = append(series, promserver.Gauge(map[string]string{"__name__": watchedSeries, "cluster": c}, start, v))
			}
			if err := stack.Prometheus.Push(ctx, series...); err != nil {
				b.Fatal(err)
			}
			scoreAt, decisionAt, err := w.wait(best, 3*watchInterval+30*time.Second)
			if err != nil {
				b.Fatalf("change %d through Prometheus: %v", i, err)
			}
			promToScore = append(promToScore, scoreAt.Sub(start))
			promToDecision = append(promToDecision, decisionAt.Sub(start))
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
	report("traced-score", tracedScore)
	report("traced-decision", tracedDecision)
	report("prom-score", promToScore)
	report("prom-decision", promToDecision)
	byHop := map[string][]time.Duration{}
	for _, p := range posted {
		_, h := traceOf(b, p.id, time.Minute, nil)
		for name, d := range map[string]time.Duration{
			"knative-in": h.scorerIn.Sub(p.start), "scorer": h.scorerOut.Sub(h.scorerIn),
			"knative-reply": h.replyIngress.Sub(h.scorerOut), "knative-to-writer": h.writerIn.Sub(h.replyIngress),
			"writer": h.writeStart.Sub(h.writerIn), "hub-write": h.writeEnd.Sub(h.writeStart),
			"placement": p.decideAt.Sub(p.scoreAt),
		} {
			byHop[name] = append(byHop[name], d)
		}
	}
	for name, ds := range byHop {
		report("hop-"+name, ds)
	}
	b.ReportMetric(float64(len(toScore)), "changes")
	b.ReportMetric(float64(len(promToScore)), "prom-changes")
}

// alternate is change i: the cluster made the most idle (cluster1, then cluster2, in turn), the
// other, the idle share given to the best and the cpuIdle score the promql-scorer makes of it. The
// share differs between consecutive changes of one cluster, so each is a new score, and moves by
// far more than the watcher's deadband.
func alternate(i int) (best, other string, hi float64, want int32) {
	best, other = "cluster1", "cluster2"
	if i%2 == 1 {
		best, other = other, best
	}
	hi = 0.9 - float64(i%50)/1000
	return best, other, hi, int32((hi*200 - 100) + 0.5)
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
