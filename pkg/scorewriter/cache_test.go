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
