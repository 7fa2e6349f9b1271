package scorewriter

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// An object's freshness series: a write of new scores sets when it happened and the object's
// validUntil; the rewrite at expiry, which only drops scores, leaves the time of the last new
// scores alone (a silent scorer must look stale) and removes validUntil with the last score.
func TestFreshnessSeries(t *testing.T) {
	w := runWriter(t, newHub(), DefaultOptions())
	key := Key{"c1", "r"}
	before := time.Now()
	validUntil := before.Add(300 * time.Millisecond)
	u := NewUpdate(key, []contract.Score{{Name: "a", Value: 1}}, before, validUntil, "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	if r, err := u.Result(context.Background()); err != nil || r.Outcome != contract.OutcomeWritten {
		t.Fatalf("write: %+v %v", r, err)
	}
	written := gaugeValue(t, w.metrics.updatedAt.WithLabelValues("c1", "r"))
	if got := time.UnixMilli(int64(written * 1000)); got.Before(before.Add(-time.Millisecond)) || got.After(time.Now()) {
		t.Errorf("updated at %v, want the time of the write (after %v)", got, before)
	}
	// The hub keeps whole seconds; the fake clientset keeps what it was given.
	if got := gaugeValue(t, w.metrics.validUntil.WithLabelValues("c1", "r")); got < float64(validUntil.Unix()-1) || got > float64(validUntil.UnixMilli())/1000 {
		t.Errorf("valid until %v, want the object's validUntil %v", got, float64(validUntil.UnixMilli())/1000)
	}
	// The score expires and the writer rewrites the object without it.
	deadline := time.Now().Add(5 * time.Second)
	for seriesCount(w.metrics.score) != 0 {
		if time.Now().After(deadline) {
			t.Fatal("the expired score's series is still there")
		}
		time.Sleep(20 * time.Millisecond)
	}
	if got := gaugeValue(t, w.metrics.updatedAt.WithLabelValues("c1", "r")); got != written {
		t.Errorf("updated at %v after the expiry rewrite, want %v still", got, written)
	}
	if n := seriesCount(w.metrics.validUntil); n != 0 {
		t.Errorf("%d validUntil series after the last score expired, want none", n)
	}
}

func gaugeValue(t *testing.T, g prometheus.Gauge) float64 {
	t.Helper()
	var m dto.Metric
	if err := g.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetGauge().GetValue()
}

func seriesCount(c prometheus.Collector) int {
	ch := make(chan prometheus.Metric, 100)
	go func() { c.Collect(ch); close(ch) }()
	n := 0
	for range ch {
		n++
	}
	return n
}

// Beyond MaxScoreSeries an object gets no per-cluster series, whole objects only, and each series
// not set is counted; the per-resource aggregates still see every object, and a forgotten object
// gives its series back.
func TestScoreSeriesBound(t *testing.T) {
	opts := DefaultOptions()
	opts.MaxScoreSeries = 9 // two objects of 2 scores + updated + validUntil, not a third
	w := runWriter(t, newHub(), opts)
	now := time.Now()
	for _, c := range []string{"c1", "c2", "c3"} {
		u := NewUpdate(Key{c, "r"}, []contract.Score{{Name: "a", Value: 1}, {Name: "b", Value: 2}}, now, now.Add(time.Hour), "test")
		if err := w.Submit(u); err != nil {
			t.Fatal(err)
		}
		if r, err := u.Result(context.Background()); err != nil || r.Outcome != contract.OutcomeWritten {
			t.Fatalf("write %s: %+v %v", c, r, err)
		}
	}
	if n := seriesCount(w.metrics.score); n != 4 {
		t.Errorf("%d score series, want 4 (two objects)", n)
	}
	if n := seriesCount(w.metrics.updatedAt) + seriesCount(w.metrics.validUntil); n != 4 {
		t.Errorf("%d freshness series, want 4 (two objects)", n)
	}
	if got := counterValue(t, w.metrics.dropped); got != 4 {
		t.Errorf("%v series dropped, want 4 (the third object's)", got)
	}
	agg := collect(t, byResource{w.metrics})
	if got := agg["scoreflow_score_updated_objects"]; got != 3 {
		t.Errorf("%v objects in the aggregate, want all 3", got)
	}
	if got := agg["scoreflow_score_oldest_updated_timestamp_seconds"]; got < float64(now.Unix()-1) || got > float64(time.Now().Unix()+1) {
		t.Errorf("oldest update %v, want about %v", got, now.Unix())
	}
	w.forget(Key{"c1", "r"})
	u := NewUpdate(Key{"c3", "r"}, []contract.Score{{Name: "a", Value: 3}, {Name: "b", Value: 4}}, now.Add(time.Second), now.Add(time.Hour), "test")
	if err := w.Submit(u); err != nil {
		t.Fatal(err)
	}
	if r, err := u.Result(context.Background()); err != nil || r.Outcome != contract.OutcomeWritten {
		t.Fatalf("second write of c3: %+v %v", r, err)
	}
	if got := gaugeValue(t, w.metrics.score.WithLabelValues("c3", "r", "b")); got != 4 {
		t.Errorf("c3's score b is %v once c1 left room, want 4", got)
	}
	if n := seriesCount(w.metrics.score); n != 4 {
		t.Errorf("%d score series after c1 left and c3 came in, want 4", n)
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// collect gathers c's metrics by name (one series per name: tests use one resource).
func collect(t *testing.T, c prometheus.Collector) map[string]float64 {
	t.Helper()
	reg := prometheus.NewRegistry()
	reg.MustRegister(c)
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out[mf.GetName()] = m.GetGauge().GetValue()
		}
	}
	return out
}

// A scrape never waits for the writer: gathering thousands of series while writes change them
// (the metrics' lock held while a series is added or removed) finishes. The series count is read
// without the metrics' lock: Prometheus' registry computes a gauge func's value while other
// collectors hold their vectors' locks and wait for it to read what they send, and a writer
// holding the metrics' lock waits for a vector's lock.
func TestScrapeDuringWritesDoesNotDeadlock(t *testing.T) {
	reg := prometheus.NewRegistry()
	m := NewMetrics(reg, func() float64 { return 0 })
	m.maxSeries = 100000
	vu := metav1.NewTime(t0.Add(time.Hour))
	scores := func(i int) []clusterv1alpha1.AddOnPlacementScoreItem {
		return []clusterv1alpha1.AddOnPlacementScoreItem{{Name: fmt.Sprintf("a%d", i%2), Value: 1}, {Name: "b", Value: int32(i)}}
	}
	for i := range 3000 {
		m.observe(Key{fmt.Sprintf("c%04d", i), "r"}, true, t0, &vu, scores(0))
	}
	done := make(chan struct{})
	stop := make(chan struct{})
	go func() {
		defer close(done)
		for i := 1; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			// Scores come and go: series are added and deleted under the metrics' lock.
			m.observe(Key{fmt.Sprintf("c%04d", i%3000), "r"}, true, t0, &vu, scores(i/3000))
		}
	}()
	for i := range 20 {
		gathered := make(chan error, 1)
		start := time.Now()
		go func() { _, err := reg.Gather(); gathered <- err }()
		select {
		case err := <-gathered:
			if err != nil {
				t.Fatal(err)
			}
		case <-time.After(20 * time.Second):
			t.Fatalf("scrape %d did not finish within 20s while writes went on: deadlocked", i)
		}
		if i == 0 {
			t.Logf("a scrape of %d series took %s", 4*3000, time.Since(start).Round(time.Millisecond))
		}
	}
	close(stop)
	<-done
}
