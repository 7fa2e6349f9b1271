package health

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"runtime"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterlisters "open-cluster-management.io/api/client/cluster/listers/cluster/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
	"github.com/scoreflow/scoreflow/harness/benchrss"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/promserver/canned"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// BenchmarkHandle1000 and BenchmarkHandle10000 answer a ping scoring 1,000 and 10,000
// ManagedClusters from a synced informer's cache (slimmed as WatchClusters slims them) to the
// score.updated encoded. cache-MiB is the heap the cache holds.
func BenchmarkHandle1000(b *testing.B)  { benchHandle(b, 1000) }
func BenchmarkHandle10000(b *testing.B) { benchHandle(b, 10000) }

func benchHandle(b *testing.B, n int) {
	var before, after runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&before)
	indexer := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{})
	for i := range n {
		obj, err := slimCluster(benchCluster(i))
		if err != nil {
			b.Fatal(err)
		}
		if err := indexer.Add(obj); err != nil {
			b.Fatal(err)
		}
	}
	runtime.GC()
	runtime.ReadMemStats(&after)
	clusters := &HubClusters{lister: clusterlisters.NewManagedClusterLister(indexer), synced: func() bool { return true }}
	s := &Scorer{Resource: "cluster-health", ScoreName: "health", ValidFor: DefaultValidFor, Clusters: clusters,
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), Now: func() time.Time { return now }}
	h := scorer.Handler("/scorers/health", s.Routes())
	canned.BenchHandle(b, h, functest.Ping(`{}`), n)
	b.ReportMetric(float64(after.HeapAlloc-before.HeapAlloc)/(1<<20), "cache-MiB")
	runtime.KeepAlive(indexer)
}

// benchCluster is the i-th ManagedCluster of a fleet, one in ten of them Unreachable, with the
// fields a hub's ManagedCluster carries besides those the score reads: labels, claims, a client
// config with a CA bundle, capacity, a version, managed fields.
func benchCluster(i int) *clusterv1.ManagedCluster {
	name := fmt.Sprintf("cluster-%05d", i)
	avail := metav1.ConditionTrue
	if i%10 == 0 {
		avail = metav1.ConditionUnknown
	}
	t := metav1.NewTime(now.Add(-time.Duration(i%600) * time.Second))
	mc := &clusterv1.ManagedCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, UID: "0b8f1a9e-6c1d-4c55-9d0e-5b9e8f0c1a2b", ResourceVersion: "123456",
			Labels:        map[string]string{"cluster.open-cluster-management.io/clusterset": "default", "name": name, "vendor": "OpenShift"},
			ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "registration", Operation: metav1.ManagedFieldsOperationUpdate, Subresource: "status"}}},
		Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true, LeaseDurationSeconds: 60,
			ManagedClusterClientConfigs: []clusterv1.ClientConfig{{URL: "https://api." + name + ".example.com:6443", CABundle: make([]byte, 1500)}}},
		Status: clusterv1.ManagedClusterStatus{
			Version:       clusterv1.ManagedClusterVersion{Kubernetes: "v1.35.0"},
			ClusterClaims: []clusterv1.ManagedClusterClaim{{Name: "id.k8s.io", Value: name}, {Name: "platform.open-cluster-management.io", Value: "AWS"}},
		},
	}
	for _, c := range []struct {
		typ string
		st  metav1.ConditionStatus
	}{{CondHubAccepted, metav1.ConditionTrue}, {CondJoined, metav1.ConditionTrue}, {CondAvailable, avail}} {
		mc.Status.Conditions = append(mc.Status.Conditions, metav1.Condition{Type: c.typ, Status: c.st, Reason: "Reason", Message: "the cluster says so", LastTransitionTime: t})
	}
	return mc
}

// BenchmarkWatchClusters10000 starts WatchClusters on a real hub (etcd and kube-apiserver) holding
// 10,000 ManagedClusters of benchCluster's size, until its cache is synced: what the scorer pays
// once, at start, for pings that read memory. peak-rss-MiB is the growth of the process's
// resident memory over it, the hub's clusters created before.
func BenchmarkWatchClusters10000(b *testing.B) {
	hub, err := localhub.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = hub.Stop() })
	cfg := rest.CopyConfig(hub.Config)
	cfg.QPS, cfg.Burst = -1, 0 // creating the fleet is not what is measured
	client := clusterclient.NewForConfigOrDie(cfg)
	const n = 10000
	var wg sync.WaitGroup
	errs := make(chan error, n)
	for w := range 16 {
		wg.Go(func() {
			for i := w; i < n; i += 16 {
				mc := benchCluster(i)
				mc.ResourceVersion, mc.UID = "", ""
				if _, err := client.ClusterV1().ManagedClusters().Create(b.Context(), mc, metav1.CreateOptions{}); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		b.Fatal(err)
	}
	log := slog.New(slog.DiscardHandler)
	rss := benchrss.Start(b)
	cpu := benchcpu.Start()
	for b.Loop() {
		ctx, cancel := context.WithCancel(b.Context())
		clusters := WatchClusters(ctx, clusterclient.NewForConfigOrDie(hub.Config), log)
		got, err := clusters.List(ctx)
		for errors.Is(err, errNotSynced) {
			time.Sleep(time.Millisecond)
			got, err = clusters.List(ctx)
		}
		cancel()
		if err != nil || len(got) != n {
			b.Fatalf("listed %d clusters, %v; want %d", len(got), err, n)
		}
	}
	cpu.Report(b)
	rss.Report(b)
}
