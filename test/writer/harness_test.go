// Package writer tests the score-writer end to end: real CloudEvents over HTTP into the function's
// own handler, written to a real kube-apiserver (envtest, built by `make tools`) with the OCM CRDs.
package writer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	dto "github.com/prometheus/client_model/go"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/leader"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

var hub *localhub.Hub

// clusters are the ManagedClusters every test may write to.
var clusters = []string{"c1", "c2", "c3", "c4", "c5"}

func TestMain(m *testing.M) {
	h, err := localhub.Start()
	if err != nil {
		fmt.Fprintln(os.Stderr, "local hub:", err)
		os.Exit(1)
	}
	hub = h
	for _, c := range clusters {
		if err := hub.AddCluster(context.Background(), c, nil); err != nil {
			fmt.Fprintln(os.Stderr, "add cluster:", err)
			os.Exit(1)
		}
		if err := hub.AcceptCluster(context.Background(), c); err != nil {
			fmt.Fprintln(os.Stderr, "accept cluster:", err)
			os.Exit(1)
		}
	}
	code := m.Run()
	_ = hub.Stop()
	if binDir != "" {
		_ = os.RemoveAll(binDir)
	}
	os.Exit(code)
}

var (
	binOnce sync.Once
	binDir  string
	binErr  error
)

// sharedWriterBinary is functions/score-writer built once for the tests of this process.
func sharedWriterBinary(tb testing.TB) string {
	tb.Helper()
	binOnce.Do(func() {
		if binDir, binErr = os.MkdirTemp("", "score-writer-bin-"); binErr != nil {
			return
		}
		cmd := exec.Command("go", "build", "-o", filepath.Join(binDir, "score-writer"), "./functions/score-writer")
		cmd.Dir = "../.."
		if out, err := cmd.CombinedOutput(); err != nil {
			binErr = fmt.Errorf("building the writer: %v\n%s", err, out)
		}
	})
	if binErr != nil {
		tb.Fatal(binErr)
	}
	return filepath.Join(binDir, "score-writer")
}

// server is a score-writer as deployed: the function runtime's HTTP handler in front of a Writer.
type server struct {
	url    string
	fn     *function.Function
	writer *scorewriter.Writer
	stop   func() // stops the server and its writer (a pod going away); done at the test's end too
}

type serverOpts struct {
	writer   scorewriter.Options // non-zero fields replace the defaults
	ttl      time.Duration
	remember int          // bytes of answers recalled (default scorewriter.DefaultRememberBytes)
	pending  int          // bytes of updates waiting to be written (default scorewriter.DefaultMaxPendingBytes)
	hub      *rest.Config // where the writer writes (default: the hub itself); the informer always reads the hub
	auth     *function.Authenticator
	deadline time.Duration // the handler's EventDeadline (default: none)
	// requireResource refuses events without the scoreflowresource attribute (the oidc variant's
	// REQUIRE_RESOURCE_ATTRIBUTE).
	requireResource bool
	// lease, when set, runs the writer's work of its own accord under leader election for the
	// Lease of that name (in namespace default), as deployed; unset, the writer always does it.
	lease string
}

func fastClient(t testing.TB) clusterclient.Interface {
	cfg := rest.CopyConfig(hub.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	c, err := clusterclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func startWriter(t testing.TB, o serverOpts) *server {
	t.Helper()
	if o.ttl == 0 {
		o.ttl = time.Hour
	}
	ctx, cancel := context.WithCancel(context.Background())
	client := fastClient(t)
	writeClient := client
	if o.hub != nil {
		c, err := clusterclient.NewForConfig(o.hub)
		if err != nil {
			t.Fatal(err)
		}
		writeClient = c
	}
	fn := function.New("score-writer", "test")
	mcs := scorewriter.WatchManagedClusters(ctx, client)
	deadline := time.Now().Add(30 * time.Second)
	for mcs.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatal("ManagedCluster informer did not sync")
		}
		time.Sleep(20 * time.Millisecond)
	}
	var w *scorewriter.Writer
	metrics := scorewriter.NewMetrics(fn.Registry, func() float64 { return float64(w.Pending()) })
	opts := scorewriter.DefaultOptions()
	if o.writer.RetryFor != 0 {
		opts.RetryFor = o.writer.RetryFor
	}
	if o.writer.Window != 0 {
		opts.Window = o.writer.Window
	}
	opts.WaitWhenIdle = o.writer.WaitWhenIdle
	if o.writer.MaxResourcesPerCluster != 0 {
		opts.MaxResourcesPerCluster = o.writer.MaxResourcesPerCluster
	}
	opts.Clusters = mcs
	if o.writer.DeleteEmptyAfter != 0 {
		opts.DeleteEmptyAfter = o.writer.DeleteEmptyAfter
	}
	if o.writer.Clock != nil {
		opts.Clock = o.writer.Clock
	}
	if o.lease != "" {
		e, err := leader.New(hub.Kube, leader.Options{Namespace: "default", Name: o.lease, LeaseDuration: 3 * time.Second, RenewDeadline: 2 * time.Second,
			RetryPeriod: 200 * time.Millisecond, Log: fn.Log})
		if err != nil {
			t.Fatal(err)
		}
		opts.Elector = e
	}
	w, err := scorewriter.NewWriter(writeClient, opts, metrics, fn.Log)
	if err != nil {
		t.Fatal(err)
	}
	mcs.Notify(w)
	done := make(chan struct{})
	go func() { w.Run(ctx); close(done) }()
	for w.Ready() != nil {
		if time.Now().After(deadline) {
			t.Fatal("AddOnPlacementScore informer did not sync")
		}
		time.Sleep(20 * time.Millisecond)
	}
	h := scorewriter.NewHandler(w, mcs, scorewriter.HandlerOptions{TTL: o.ttl, MaxClockSkew: 2 * time.Minute, RememberBytes: o.remember, MaxPendingBytes: o.pending,
		EventDeadline: o.deadline, Source: fn.Source(), RequireResourceAttribute: o.requireResource})
	fn.SetReadiness(mcs.Ready)
	fn.RequireAuth(o.auth)
	srv := httptest.NewServer(fn.Handler(h.Handle, h.FailureReply))
	stop := sync.OnceFunc(func() {
		srv.Close()
		cancel()
		<-done
	})
	t.Cleanup(stop)
	return &server{url: srv.URL, fn: fn, writer: w, stop: stop}
}

var httpClient = &http.Client{Timeout: 2 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 512}}

// send posts e in binary mode and decodes the reply event, if any.
func (s *server) send(t testing.TB, e event.Event) (int, *event.Event) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
		t.Fatal(err)
	}
	return do(t, req)
}

func do(t testing.TB, req *http.Request) (int, *event.Event) {
	t.Helper()
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("POST: %v", err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	msg := cehttp.NewMessageFromHttpResponse(resp)
	reply, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		return resp.StatusCode, nil
	}
	return resp.StatusCode, reply
}

// result decodes a write.done / write.failed reply.
func result(t testing.TB, e *event.Event) *contract.WriteResult {
	t.Helper()
	if e == nil {
		t.Fatal("no reply event")
	}
	r, err := contract.DecodeWriteResult(e)
	if err != nil {
		t.Fatalf("reply %s: %v", e, err)
	}
	return r
}

var ids atomic.Int64

// scoreEvent builds a score.updated observed at t with a fresh id.
func scoreEvent(t testing.TB, observed time.Time, data contract.ScoreUpdated) event.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(fmt.Sprintf("ev-%d", ids.Add(1)))
	e.SetSource("test/" + strings.ReplaceAll(t.Name(), "/", "-"))
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(observed)
	if err := e.SetData(cloudevents.ApplicationJSON, data); err != nil {
		t.Fatal(err)
	}
	return e
}

func item(cluster string, scores ...contract.Score) contract.ClusterScores {
	return contract.ClusterScores{Cluster: cluster, Scores: scores}
}

func score(name string, v float64) contract.Score { return contract.Score{Name: name, Value: v} }

func get(t testing.TB, cluster, resource string) *clusterv1alpha1.AddOnPlacementScore {
	t.Helper()
	obj, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster).Get(context.Background(), resource, metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		return nil
	}
	if err != nil {
		t.Fatal(err)
	}
	return obj
}

func scoresOf(obj *clusterv1alpha1.AddOnPlacementScore) map[string]int32 {
	out := map[string]int32{}
	if obj == nil {
		return out
	}
	for _, s := range obj.Status.Scores {
		out[s.Name] = s.Value
	}
	return out
}

// snapshot is every AddOnPlacementScore on the hub by namespace/name -> resourceVersion.
func snapshot(t testing.TB) map[string]string {
	t.Helper()
	list, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range list.Items {
		out[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	return out
}

// apiRequests sums scoreflow_writer_api_requests_total for the given verbs (all when none).
func (s *server) apiRequests(t testing.TB, verbs ...string) float64 {
	t.Helper()
	want := map[string]bool{}
	for _, v := range verbs {
		want[v] = true
	}
	return s.sum(t, "scoreflow_writer_api_requests_total", func(labels map[string]string) bool {
		return len(want) == 0 || want[labels["verb"]]
	})
}

func (s *server) sum(t testing.TB, family string, match func(map[string]string) bool) float64 {
	t.Helper()
	mfs, err := s.fn.Registry.Gather()
	if err != nil {
		t.Fatal(err)
	}
	total := 0.0
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			if match == nil || match(labelMap(m)) {
				total += m.GetCounter().GetValue() + m.GetGauge().GetValue()
			}
		}
	}
	return total
}

func labelMap(m *dto.Metric) map[string]string {
	out := map[string]string{}
	for _, l := range m.GetLabel() {
		out[l.GetName()] = l.GetValue()
	}
	return out
}
