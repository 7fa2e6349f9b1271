package agentgateway

import (
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// An agent's scores lapse once it is cut off: the gateway refuses neverExpires and forwards a
// validUntil an hour ahead as at most MaxScoreValidity ahead, so after the addon is disabled the
// real score-writer removes the agent's last score within that bound of its post.
func TestARevokedAgentsScoresLapse(t *testing.T) {
	const bound = 20 * time.Second
	ctx := t.Context()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallAddonCRDs(); err != nil {
		t.Fatal(err)
	}
	if err := hub.AddCluster(ctx, "cluster1", nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.AcceptCluster(ctx, "cluster1"); err != nil {
		t.Fatal(err)
	}
	addons := addonclient.NewForConfigOrDie(hub.Config)
	if _, err := addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: addon, Namespace: "cluster1"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	scores := clusterclient.NewForConfigOrDie(hub.Config)

	// The score-writer as deployed, the gateway's sink.
	wfn := function.New("score-writer", "test")
	clusters := scorewriter.WatchManagedClusters(ctx, scores)
	var w *scorewriter.Writer
	opts := scorewriter.DefaultOptions()
	opts.Clusters = clusters
	w, err = scorewriter.NewWriter(scores, opts, scorewriter.NewMetrics(wfn.Registry, func() float64 { return float64(w.Pending()) }), wfn.Log)
	if err != nil {
		t.Fatal(err)
	}
	go w.Run(ctx)
	for deadline := time.Now().Add(30 * time.Second); clusters.Ready() != nil || w.Ready() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("the writer's informers did not sync")
		}
	}
	handler := scorewriter.NewHandler(w, clusters, scorewriter.HandlerOptions{TTL: time.Hour, MaxClockSkew: 2 * time.Minute, Source: wfn.Source()})
	writer := httptest.NewServer(wfn.Handler(handler.Handle, handler.FailureReply))
	t.Cleanup(writer.Close)
	sink, err := function.NewSenderWithToken(writer.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}

	fn := function.New("agent-gateway", "test")
	g, err := New(hub.Config, sink, Options{Table: table, Source: fn.Source(), MaxScoreValidity: bound, UnauthenticatedDelay: -1}, fn.Log, fn.Registry)
	if err != nil {
		t.Fatal(err)
	}
	g.Start(ctx)
	for g.Ready() != nil {
		time.Sleep(10 * time.Millisecond)
	}
	srv := httptest.NewServer(g.Handler(fn))
	t.Cleanup(srv.Close)
	h := &gatewayHub{hub: hub, addons: addons, url: srv.URL}
	token := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)

	agentScores := func(s contract.ScoreUpdated) event.Event {
		e := cloudevents.NewEvent()
		e.SetID(uuid.NewString())
		e.SetSource("agent")
		e.SetType(contract.TypeScoreUpdated)
		e.SetTime(time.Now())
		s.Resource = "latency"
		s.Items = []contract.ClusterScores{{Cluster: "cluster1", Scores: []contract.Score{{Name: "registry", Value: 42}}}}
		_ = e.SetData(cloudevents.ApplicationJSON, s)
		return e
	}
	if st, body := h.post(t, token, agentScores(contract.ScoreUpdated{NeverExpires: true})); st != http.StatusForbidden || !strings.Contains(body, "neverExpires") {
		t.Errorf("neverExpires: %d %s, want 403 naming it", st, body)
	}
	far := time.Now().Add(time.Hour)
	posted := time.Now()
	if st, body := h.post(t, token, agentScores(contract.ScoreUpdated{ValidUntil: &far})); st != http.StatusAccepted {
		t.Fatalf("validUntil an hour ahead: %d %s, want 202", st, body)
	}
	aps, err := scores.ClusterV1alpha1().AddOnPlacementScores("cluster1").Get(ctx, "latency", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(aps.Status.Scores) != 1 || aps.Status.ValidUntil == nil || aps.Status.ValidUntil.After(posted.Add(bound+time.Second)) {
		t.Fatalf("written %+v valid until %v; want the score valid at most %s after it was posted (%s)", aps.Status.Scores, aps.Status.ValidUntil, bound, posted.Format(time.RFC3339))
	}

	if err := addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Delete(ctx, addon, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	waitRefused(t, h, token, "cluster1", 10*time.Second)
	for {
		aps, err := scores.ClusterV1alpha1().AddOnPlacementScores("cluster1").Get(ctx, "latency", metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if len(aps.Status.Scores) == 0 {
			t.Logf("the disabled agent's score was removed %s after it was posted (bound %s)", time.Since(posted).Round(time.Millisecond), bound)
			break
		}
		if time.Since(posted) > bound+15*time.Second {
			t.Fatalf("the disabled agent's score is still there %s after it was posted: %+v", time.Since(posted).Round(time.Second), aps.Status.Scores)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
