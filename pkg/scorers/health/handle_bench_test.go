package health

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	sigsjson "sigs.k8s.io/json"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promcanned"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// cannedHub answers every request with one body: a ManagedClusterList of every cluster in one page.
type cannedHub []byte

func (h cannedHub) RoundTrip(req *http.Request) (*http.Response, error) {
	return &http.Response{StatusCode: http.StatusOK, Status: "200 OK", Proto: "HTTP/1.1", ProtoMajor: 1, ProtoMinor: 1,
		Header: http.Header{"Content-Type": {"application/json"}}, Body: io.NopCloser(bytes.NewReader(h)),
		ContentLength: int64(len(h)), Request: req}, nil
}

// BenchmarkHandle1000 and BenchmarkHandle10000 answer a ping scoring 1,000 and 10,000
// ManagedClusters: from the hub's JSON list (read and decoded by the scorer's client, in-process)
// to the score.updated encoded.
func BenchmarkHandle1000(b *testing.B)  { benchHandle(b, 1000) }
func BenchmarkHandle10000(b *testing.B) { benchHandle(b, 10000) }

func benchHandle(b *testing.B, n int) {
	client := clusterclient.NewForConfigOrDie(&rest.Config{Host: "http://hub.invalid", Transport: cannedHub(benchList(b, n)), QPS: -1})
	s := &Scorer{Resource: "cluster-health", ScoreName: "health", ValidFor: DefaultValidFor, Clusters: HubClusters{Client: client},
		Log: slog.New(slog.NewJSONHandler(io.Discard, nil)), Now: func() time.Time { return now }}
	h := scorer.Handler("/scorers/health", s.Routes())
	promcanned.BenchHandle(b, h, functest.Ping(`{}`), n)
}

// benchList is a ManagedClusterList of n clusters, one in ten of them Unreachable, as the API
// server writes it.
func benchList(b *testing.B, n int) []byte {
	list := clusterv1.ManagedClusterList{TypeMeta: metav1.TypeMeta{APIVersion: "cluster.open-cluster-management.io/v1", Kind: "ManagedClusterList"}}
	for i := range n {
		avail := metav1.ConditionTrue
		if i%10 == 0 {
			avail = metav1.ConditionUnknown
		}
		t := metav1.NewTime(now.Add(-time.Duration(i%600) * time.Second))
		mc := clusterv1.ManagedCluster{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cluster-%05d", i), UID: "0b8f1a9e-6c1d-4c55-9d0e-5b9e8f0c1a2b", ResourceVersion: "123456",
				Labels: map[string]string{"cluster.open-cluster-management.io/clusterset": "default", "name": fmt.Sprintf("cluster-%05d", i)}},
			Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true, LeaseDurationSeconds: 60},
		}
		for _, c := range []struct {
			typ string
			st  metav1.ConditionStatus
		}{{CondHubAccepted, metav1.ConditionTrue}, {CondJoined, metav1.ConditionTrue}, {CondAvailable, avail}} {
			mc.Status.Conditions = append(mc.Status.Conditions, metav1.Condition{Type: c.typ, Status: c.st, Reason: "Reason", Message: "the cluster says so", LastTransitionTime: t})
		}
		list.Items = append(list.Items, mc)
	}
	body, err := json.Marshal(&list)
	if err != nil {
		b.Fatal(err)
	}
	return body
}

// BenchmarkDecodeList10000 decodes the list of BenchmarkHandle10000 alone, in one pass
// (scanListPage) and as it was before, with sigs.k8s.io/json.
func BenchmarkDecodeList10000(b *testing.B) {
	raw := benchList(b, 10000)
	b.Run("scan", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		cpu := benchcpu.Start()
		for b.Loop() {
			if _, ok := scanListPage(raw); !ok {
				b.Fatal("not taken")
			}
		}
		cpu.Report(b)
	})
	b.Run("sigsjson", func(b *testing.B) {
		b.SetBytes(int64(len(raw)))
		b.ReportAllocs()
		cpu := benchcpu.Start()
		for b.Loop() {
			var page listPage
			if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &page); err != nil {
				b.Fatal(err)
			}
		}
		cpu.Report(b)
	})
}
