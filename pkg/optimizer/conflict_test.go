package optimizer_test

import (
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

// TestPlanAppliedWhileTheControllerWritesStatus: the placement controller writes a Placement's
// status while it decides, which moves the Placement's resourceVersion between the optimizer's
// read and its update. The next plan is still applied, not refused 503 for the broker to retry.
func TestPlanAppliedWhileTheControllerWritesStatus(t *testing.T) {
	const ns = "race"
	demo(t, ns)
	// The optimizer's client: once armed, the Placement's status is written just before the
	// optimizer's first update of it goes out, as the controller would.
	var armed atomic.Bool
	cfg := rest.CopyConfig(hub.Config)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPut && strings.HasSuffix(r.URL.Path, "/placements/app01-placement") && armed.CompareAndSwap(true, false) {
				touchStatus(t, r.Context(), ns, "app01-placement")
			}
			return rt.RoundTrip(r)
		})
	})
	cluster, err := clusterclient.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := &optimizer.Optimizer{Cluster: cluster, Work: wk, Dynamic: dyn, Opts: optimizer.Options{TimeLimit: 10 * time.Second,
		ComplianceClaim: "policy-watcher-claim", ComplianceValue: "compliant", Namespaces: testNamespaces}}
	fn := function.New("optimizer", "test")
	fn.Log = slog.New(slog.NewJSONHandler(io.Discard, nil))
	h := &optimizer.Handler{Optimizer: o, Source: fn.Source(), Log: fn.Log}
	srv := httptest.NewServer(h.Mux(fn.Handler(h.Handle, h.FailureReply)))
	t.Cleanup(srv.Close)

	if status, reply := functest.Send(t, srv.URL, request(optimizer.TypeRequested, params(ns, perf))); status != http.StatusOK {
		t.Fatalf("first plan: %d %v", status, reply)
	}
	armed.Store(true)
	status, reply := functest.Send(t, srv.URL, request(optimizer.TypeRequested, params(ns, power)))
	if armed.Load() {
		t.Fatal("the second plan never updated app01-placement")
	}
	if status != http.StatusOK || reply.Type() != optimizer.TypeDone {
		t.Fatalf("second plan, the Placement's status written meanwhile: %d %v", status, reply)
	}
	var plan optimizer.Plan
	if err := json.Unmarshal(reply.Data(), &plan); err != nil {
		t.Fatal(err)
	}
	p, err := hub.Cluster.ClusterV1beta1().Placements(ns).Get(t.Context(), "app01-placement", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if got := p.Labels[optimizer.LabelPlan]; got != plan.ID {
		t.Errorf("app01-placement is of plan %q, want the second plan %q", got, plan.ID)
	}
}

// touchStatus writes name's status as the placement controller does, moving its resourceVersion.
func touchStatus(t *testing.T, ctx context.Context, ns, name string) {
	placements := hub.Cluster.ClusterV1beta1().Placements(ns)
	p, err := placements.Get(ctx, name, metav1.GetOptions{})
	if err == nil {
		p.Status.NumberOfSelectedClusters++
		_, err = placements.UpdateStatus(ctx, p, metav1.UpdateOptions{})
	}
	if err != nil {
		t.Errorf("writing %s's status: %v", name, err)
	}
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }
