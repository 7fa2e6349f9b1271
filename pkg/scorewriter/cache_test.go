package scorewriter

import (
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"open-cluster-management.io/api/client/cluster/clientset/versioned/fake"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// hubObject is the JSON of an AddOnPlacementScore as the hub returns it after the writer's status
// update: two scores from one source, the writer's conditions, and the managedFields entry the
// API server keeps for the update.
func hubObject(t testing.TB, cluster, resource string, i int) []byte {
	t.Helper()
	now := time.Now()
	u := NewUpdate(Key{cluster, resource}, []contract.Score{{Name: "a", Value: float64(i % 100)}, {Name: "b", Value: float64(i % 50)}},
		now, now.Add(30*time.Minute), "test/fleet/"+resource)
	p := makePlan(nil, nil, []*Update{u}, now)
	fields := `{"f:status":{".":{},"f:conditions":{".":{},"k:{\"type\":\"ScoresUpdated\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}},` +
		`"k:{\"type\":\"scoreflow.io/Observations\"}":{".":{},"f:lastTransitionTime":{},"f:message":{},"f:reason":{},"f:status":{},"f:type":{}}},"f:scores":{},"f:validUntil":{}}}`
	obj := clusterv1alpha1.AddOnPlacementScore{
		TypeMeta: metav1.TypeMeta{APIVersion: "cluster.open-cluster-management.io/v1alpha1", Kind: "AddOnPlacementScore"},
		ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: cluster, UID: types.UID(fmt.Sprintf("0b6c1d4e-7a2f-4c59-9d1e-%012d", i)),
			ResourceVersion: fmt.Sprint(100000 + i), Generation: 1, CreationTimestamp: metav1.NewTime(now.Truncate(time.Second)),
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "scoreflow-score-writer", Operation: metav1.ManagedFieldsOperationUpdate,
				APIVersion: "cluster.open-cluster-management.io/v1alpha1", Time: &metav1.Time{Time: now.Truncate(time.Second)}, FieldsType: "FieldsV1",
				FieldsV1: &metav1.FieldsV1{Raw: []byte(fields)}, Subresource: "status"}}},
		Status: p.status,
	}
	b, err := json.Marshal(obj)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func heapInUse() uint64 {
	runtime.GC()
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// BenchmarkKnownObjectBytes measures what the writer holds per object it knows between writes (the
// informer's copy, slimmed, in its indexed store), for objects decoded from the hub's JSON as the
// client decodes them:
//
//	go test ./pkg/scorewriter -run '^$' -bench KnownObjectBytes -benchtime 1x
func BenchmarkKnownObjectBytes(b *testing.B) {
	const n = 20000
	resources := []string{"fleet-cpu", "fleet-mem", "fleet-gpu", "fleet-latency", "fleet-health"}
	keys := make([]Key, n)
	data := make([][]byte, n)
	for i := range data {
		keys[i] = Key{Cluster: fmt.Sprintf("fleet-%05d", i/len(resources)), Resource: resources[i%len(resources)]}
		data[i] = hubObject(b, keys[i].Cluster, keys[i].Resource, i)
	}
	opts := DefaultOptions()
	for range b.N {
		w, err := NewWriter(fake.NewSimpleClientset(), opts, NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), slog.New(slog.NewTextHandler(io.Discard, nil)))
		if err != nil {
			b.Fatal(err)
		}
		store := w.hub.informer.GetIndexer()
		before := heapInUse()
		for _, d := range data {
			var obj clusterv1alpha1.AddOnPlacementScore
			if err := json.Unmarshal(d, &obj); err != nil {
				b.Fatal(err)
			}
			s, _ := slimScore(&obj)
			if err := store.Add(s); err != nil {
				b.Fatal(err)
			}
		}
		after := heapInUse()
		if len(store.ListKeys()) != n || len(w.objects) != 0 {
			b.Fatalf("%d objects in the store, %d kept besides, want %d and 0", len(store.ListKeys()), len(w.objects), n)
		}
		b.ReportMetric(float64(after-before)/n, "B/object")
		runtime.KeepAlive(w)
	}
}

// BenchmarkSkippedObjectBytes measures what the writer holds per object beyond the informer's
// copy after an update answered Unchanged (a newer observation of the same values): the lines it
// skipped, kept until the object's next write. After an unchanged refresh a fleet keeps them for
// every object at once:
//
//	go test ./pkg/scorewriter -run '^$' -bench SkippedObjectBytes -benchtime 1x
func BenchmarkSkippedObjectBytes(b *testing.B) {
	for range b.N {
		b.ReportMetric(skippedBytesPerObject(b, 20000), "B/object")
	}
}

// TestSkippedLinesCostLessThanTheObject holds what an unchanged refresh leaves with each object
// well below the informer's copy of it (BenchmarkKnownObjectBytes, about 1 KB), which a fleet
// already holds once.
func TestSkippedLinesCostLessThanTheObject(t *testing.T) {
	if got := skippedBytesPerObject(t, 5000); got > 500 {
		t.Errorf("an object answered Unchanged keeps %.0f bytes besides the informer's copy, want at most 500", got)
	}
}

// skippedBytesPerObject is the heap n objects, each answered Unchanged once, keep in the writer.
func skippedBytesPerObject(tb testing.TB, n int) float64 {
	tb.Helper()
	resources := []string{"fleet-cpu", "fleet-mem", "fleet-gpu", "fleet-latency", "fleet-health"}
	objs := make([]*clusterv1alpha1.AddOnPlacementScore, n)
	for i := range objs {
		var obj clusterv1alpha1.AddOnPlacementScore
		if err := json.Unmarshal(hubObject(tb, fmt.Sprintf("fleet-%05d", i/len(resources)), resources[i%len(resources)], i), &obj); err != nil {
			tb.Fatal(err)
		}
		objs[i] = slim(&obj)
	}
	later := time.Now().Add(time.Minute)
	w, err := NewWriter(fake.NewSimpleClientset(), DefaultOptions(), NewMetrics(prometheus.NewRegistry(), func() float64 { return 0 }), slog.New(slog.NewTextHandler(io.Discard, nil)))
	if err != nil {
		tb.Fatal(err)
	}
	skipped := make([]skippedLines, n)
	before := heapInUse()
	for i, obj := range objs {
		key := Key{Cluster: obj.Namespace, Resource: obj.Name}
		u := NewUpdate(key, []contract.Score{{Name: "a", Value: float64(i % 100)}, {Name: "b", Value: float64(i % 50)}},
			later, later.Add(30*time.Minute), "test/fleet/"+obj.Name)
		p := w.plan(key, obj, nil, []*Update{u})
		if p.changed || p.outcomes[0].Reason != contract.ReasonUnchanged || len(p.skipped) != 2 {
			tb.Fatalf("%s: a newer observation of the same values is %+v with %d lines skipped, want Unchanged, 2 and no write", key, p.outcomes[0], len(p.skipped))
		}
		skipped[i] = p.skipped
	}
	for i, obj := range objs {
		w.remember(Key{Cluster: obj.Namespace, Resource: obj.Name}, obj, skipped[i])
		skipped[i] = nil
	}
	after := heapInUse()
	if len(w.objects) != n {
		tb.Fatalf("%d objects keep skipped lines, want %d", len(w.objects), n)
	}
	runtime.KeepAlive(w)
	runtime.KeepAlive(objs) // the informer's copies, which the writer's entries do not count
	return float64(int64(after)-int64(before)) / float64(n)
}
