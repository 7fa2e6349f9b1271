package scorewriter

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	"open-cluster-management.io/api/client/cluster/clientset/versioned/fake"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// An object's freshness series: a write of new scores sets when it happened and the object's
// validUntil; the rewrite at expiry, which only drops scores, leaves the time of the last new
// scores alone (a silent scorer must look stale) and removes validUntil with the last score.
func TestFreshnessSeries(t *testing.T) {
	w := runWriter(t, fake.NewSimpleClientset(), DefaultOptions())
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
