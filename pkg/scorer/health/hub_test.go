package health

import (
	"bytes"
	"context"
	"log/slog"
	"maps"
	"net/http"
	"strings"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

var managedClusters = schema.GroupVersionResource{Group: clusterv1.GroupName, Version: "v1", Resource: "managedclusters"}

// apiServerSourceEvent builds the CloudEvent a Knative ApiServerSource (mode Resource) sends for
// a watched object, as knative.dev/eventing v0.50.0 pkg/adapter/apiserver/events does: type by
// watch event, source the API server URL, subject a self link, kind/apiversion/name/namespace
// extensions, the object as JSON data; its client adds a UUID id and the send time.
func apiServerSourceEvent(t *testing.T, typ, apiServer string, obj *unstructured.Unstructured) event.Event {
	t.Helper()
	e := cloudevents.NewEvent(cloudevents.VersionV1)
	e.SetType(typ)
	e.SetSource(apiServer)
	e.SetSubject("/apis/" + obj.GetAPIVersion() + "/namespaces/" + obj.GetNamespace() + "/managedclusters/" + obj.GetName())
	e.SetExtension("kind", obj.GetKind())
	e.SetExtension("apiversion", obj.GetAPIVersion())
	e.SetExtension("name", obj.GetName())
	e.SetExtension("namespace", obj.GetNamespace())
	if err := e.SetData(cloudevents.ApplicationJSON, obj); err != nil {
		t.Fatal(err)
	}
	e.SetID(uuid.NewString())
	e.SetTime(time.Now())
	return e
}

var watchTypes = map[watch.EventType]string{watch.Added: TypeAdd, watch.Modified: TypeUpdate, watch.Deleted: TypeDelete}

// noScore marks a step whose event is answered with no score.
const noScore = 1000

// TestHealthFromHubEvents drives a ManagedCluster on a real hub (etcd and kube-apiserver with the
// OCM CRDs) through its life, turns each watch event into the event an ApiServerSource sends,
// and checks the health-scorer's reply over HTTP.
func TestHealthFromHubEvents(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()

	dyn := dynamic.NewForConfigOrDie(hub.Config)
	w, err := dyn.Resource(managedClusters).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()

	fn := function.New("health-scorer", "test")
	logs := &bytes.Buffer{}
	s := &Scorer{Resource: "cluster-health", ScoreName: "health", Log: slog.New(slog.NewJSONHandler(logs, nil))}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	url := functest.Serve(t, fn, scorer.Handler(fn.Source(), s.Routes()))

	mcs := hub.Cluster.ClusterV1().ManagedClusters()
	const name = "dr-east"
	get := func() *clusterv1.ManagedCluster {
		mc, err := mcs.Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return mc
	}
	conds := func(mc *clusterv1.ManagedCluster, cs ...metav1.Condition) {
		mc.Status.Conditions = cs
		if _, err := mcs.UpdateStatus(ctx, mc, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	cond := func(typ string, st metav1.ConditionStatus, reason string, ago time.Duration) metav1.Condition {
		return metav1.Condition{Type: typ, Status: st, Reason: reason, LastTransitionTime: metav1.NewTime(time.Now().Add(-ago))}
	}
	accepted := cond(clusterv1.ManagedClusterConditionHubAccepted, metav1.ConditionTrue, "HubClusterAdminAccepted", time.Hour)
	joined := cond(clusterv1.ManagedClusterConditionJoined, metav1.ConditionTrue, "ManagedClusterJoined", time.Hour)
	available := cond(clusterv1.ManagedClusterConditionAvailable, metav1.ConditionTrue, "ManagedClusterAvailable", time.Hour)

	steps := []struct {
		name  string
		do    func()
		watch watch.EventType
		state string
		score float64
	}{
		{"registered, not yet accepted", func() {
			if err := hub.AddCluster(ctx, name, nil); err != nil {
				t.Fatal(err)
			}
		}, watch.Added, StateNotAccepted, -90},
		{"accepted", func() { conds(get(), accepted) }, watch.Modified, StateNotJoined, -80},
		{"joined and available", func() { conds(get(), accepted, joined, available) }, watch.Modified, StateHealthy, 100},
		{"clock drift", func() {
			conds(get(), accepted, joined, available, cond(clusterv1.ManagedClusterConditionClockSynced, metav1.ConditionFalse, "ManagedClusterClockOutOfSync", 0))
		}, watch.Modified, StateClockNotSynced, 70},
		// The hub's lease controller marks a cluster Unknown once its lease is 5 periods stale.
		// Here the lease is 60 s and the transition 10.5 min ago: 10 periods, -40-10.
		{"lease stopped", func() {
			conds(get(), accepted, joined, cond(clusterv1.ManagedClusterConditionAvailable, metav1.ConditionUnknown, "ManagedClusterLeaseUpdateStopped", 10*time.Minute+30*time.Second))
		}, watch.Modified, StateUnreachable, -50},
		{"lease 30s: 21 periods", func() {
			mc := get()
			mc.Spec.LeaseDurationSeconds = 30
			if _, err := mcs.Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, watch.Modified, StateUnreachable, -61},
		{"agent reports unhealthy", func() {
			conds(get(), accepted, joined, cond(clusterv1.ManagedClusterConditionAvailable, metav1.ConditionFalse, "ManagedClusterKubeAPIServerUnavailable", 0))
		}, watch.Modified, StateUnavailable, -60},
		{"recovered", func() { conds(get(), accepted, joined, available) }, watch.Modified, StateHealthy, 100},
		{"hub revokes acceptance", func() {
			mc := get()
			mc.Spec.HubAcceptsClient = false
			if _, err := mcs.Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, watch.Modified, StateNotAccepted, -90},
		{"deletion starts (a finalizer holds it)", func() {
			mc := get()
			mc.Finalizers = []string{clusterv1.ManagedClusterFinalizer}
			if _, err := mcs.Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			waitFor(t, w, watch.Modified) // the finalizer's own update
			if err := mcs.Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				t.Fatal(err)
			}
		}, watch.Modified, StateDeleting, noScore},
		{"deleted", func() {
			mc := get()
			mc.Finalizers = nil
			if _, err := mcs.Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
		}, watch.Deleted, StateDeleted, noScore},
	}
	for _, st := range steps {
		st.do()
		obj := waitFor(t, w, st.watch)
		in := apiServerSourceEvent(t, watchTypes[st.watch], hub.Config.Host, obj)
		status, reply := functest.Send(t, url, in)
		if st.score == noScore {
			// Nothing to score: the writer would refuse it (the cluster is going or gone), and OCM
			// removes the cluster's namespace with its scores.
			if status != http.StatusAccepted || reply != nil {
				t.Errorf("%s: status %d reply %v, want 202 and no event", st.name, status, reply)
			}
			if !strings.Contains(logs.String(), `"state":"`+st.state+`"`) {
				t.Errorf("%s: state %s not logged:\n%s", st.name, st.state, logs)
			}
			logs.Reset()
			continue
		}
		if status != http.StatusOK || reply == nil || reply.Type() != contract.TypeScoreUpdated {
			t.Fatalf("%s: status %d reply %v", st.name, status, reply)
		}
		su, err := contract.DecodeScoreUpdated(reply)
		if err != nil {
			t.Fatal(err)
		}
		if len(su.Items) != 1 || su.Items[0].Cluster != name || su.Resource != "cluster-health" ||
			len(su.Items[0].Scores) != 1 || su.Items[0].Scores[0].Name != "health" || su.Items[0].Scores[0].Value != st.score {
			t.Errorf("%s: reply %+v, want %s health %v", st.name, su, name, st.score)
		}
		if !reply.Time().Equal(in.Time()) {
			t.Errorf("%s: reply time %s, want the event's %s", st.name, reply.Time(), in.Time())
		}
		if su.ValidUntil != nil || !su.NeverExpires {
			t.Errorf("%s: validUntil %v neverExpires %v, want a score that never expires", st.name, su.ValidUntil, su.NeverExpires)
		}
		if !strings.Contains(logs.String(), `"state":"`+st.state+`"`) {
			t.Errorf("%s: state %s not logged:\n%s", st.name, st.state, logs)
		}
		logs.Reset()
	}

	// An ApiServerSource that also watches namespaces: refused, with the reason.
	ns, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, "default", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	status, reply := functest.Send(t, url, apiServerSourceEvent(t, TypeUpdate, hub.Config.Host, ns))
	if f, err := contract.DecodeFailure(reply); status != http.StatusBadRequest || err != nil || f.Reason != contract.ReasonInvalidData || !strings.Contains(f.Message, "managedclusters only") {
		t.Errorf("a Namespace event: status %d, failure %+v %v", status, f, err)
	}
}

// waitFor returns the object of the next watch event, which must be of type want.
func waitFor(t *testing.T, w watch.Interface, want watch.EventType) *unstructured.Unstructured {
	t.Helper()
	select {
	case ev, ok := <-w.ResultChan():
		if !ok {
			t.Fatal("watch closed")
		}
		if ev.Type != want {
			t.Fatalf("watch event %s, want %s", ev.Type, want)
		}
		return ev.Object.(*unstructured.Unstructured)
	case <-time.After(30 * time.Second):
		t.Fatalf("no %s watch event within 30s", want)
	}
	return nil
}

// TestPingScoresEveryCluster: clusters that exist before the scorer starts, and whose objects then
// never change, are scored on every ping from the scorer's informer on the real hub (a Knative
// ApiServerSource sends nothing for them), and an Unreachable cluster's score falls with each
// lease period between pings although nothing about it changes. A cluster being deleted gets no
// score; a cluster that joins later is scored once the watch brings it; and a scorer whose account
// may not list ManagedClusters answers 400 Forbidden.
func TestPingScoresEveryCluster(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	mcs := hub.Cluster.ClusterV1().ManagedClusters()
	t0 := time.Now().Truncate(time.Second)

	for _, name := range []string{"east", "fresh", "gone", "west"} {
		if err := hub.AddCluster(ctx, name, nil); err != nil {
			t.Fatal(err)
		}
	}
	for _, name := range []string{"east", "gone"} {
		if err := hub.MarkAvailable(ctx, name); err != nil {
			t.Fatal(err)
		}
	}
	// west's agent stopped renewing its lease: the hub set Available Unknown 2.5 lease periods ago.
	west, err := mcs.Get(ctx, "west", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	west.Status.Conditions = []metav1.Condition{
		{Type: clusterv1.ManagedClusterConditionHubAccepted, Status: metav1.ConditionTrue, Reason: "HubClusterAdminAccepted", LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))},
		{Type: clusterv1.ManagedClusterConditionJoined, Status: metav1.ConditionTrue, Reason: "ManagedClusterJoined", LastTransitionTime: metav1.NewTime(t0.Add(-time.Hour))},
		{Type: clusterv1.ManagedClusterConditionAvailable, Status: metav1.ConditionUnknown, Reason: "ManagedClusterLeaseUpdateStopped", LastTransitionTime: metav1.NewTime(t0.Add(-150 * time.Second))},
	}
	if _, err := mcs.UpdateStatus(ctx, west, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	// gone is being deleted; a finalizer holds it, as OCM's registration controller's does.
	gone, err := mcs.Get(ctx, "gone", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	gone.Finalizers = []string{clusterv1.ManagedClusterFinalizer}
	if _, err := mcs.Update(ctx, gone, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mcs.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}

	// Only now does the scorer start: it has seen no event about any of them.
	var clock time.Time
	fn := function.New("health-scorer", "test")
	clusters := WatchClusters(ctx, hub.Cluster, fn.Log)
	s := &Scorer{Resource: "cluster-health", ScoreName: "health", ValidFor: DefaultValidFor, Log: fn.Log,
		Clusters: clusters, Now: func() time.Time { return clock }}
	if err := s.Validate(); err != nil {
		t.Fatal(err)
	}
	url := functest.Serve(t, fn, scorer.Handler(fn.Source(), s.Routes()))
	for _, err := clusters.List(ctx); err != nil; _, err = clusters.List(ctx) {
		if ctx.Err() != nil {
			t.Fatalf("the informer did not list the hub: %v", err)
		}
		time.Sleep(10 * time.Millisecond)
	}
	scores := func(reply *event.Event) map[string]float64 {
		t.Helper()
		su, fail := functest.Reply(t, reply)
		if fail != nil {
			t.Fatalf("failure %+v", fail)
		}
		got := map[string]float64{}
		for _, it := range su.Items {
			if len(it.Scores) != 1 || it.Scores[0].Name != "health" {
				t.Errorf("item %+v, want one score named health", it)
				continue
			}
			got[it.Cluster] = it.Scores[0].Value
		}
		return got
	}

	for _, tt := range []struct {
		name string
		at   time.Time
		want map[string]float64
	}{
		// west: -40 less 2 whole lease periods of 60s.
		{"first ping", t0, map[string]float64{"east": 100, "fresh": -90, "west": -42}},
		// Nothing changed on the hub; west has been silent 12.5 periods.
		{"ten minutes on", t0.Add(10 * time.Minute), map[string]float64{"east": 100, "fresh": -90, "west": -52}},
	} {
		clock = tt.at
		status, reply := functest.Send(t, url, functest.Ping(`{}`))
		if status != http.StatusOK {
			t.Fatalf("%s: status %d", tt.name, status)
		}
		got := scores(reply)
		su, _ := functest.Reply(t, reply)
		if su.Resource != "cluster-health" || !maps.Equal(got, tt.want) {
			t.Errorf("%s: %s %v, want cluster-health %v", tt.name, su.Resource, got, tt.want)
		}
		if !reply.Time().Equal(tt.at) || su.NeverExpires || su.ValidUntil == nil || !su.ValidUntil.Equal(tt.at.Add(DefaultValidFor)) {
			t.Errorf("%s: time %s validUntil %v neverExpires %v, want %s valid until %s",
				tt.name, reply.Time(), su.ValidUntil, su.NeverExpires, tt.at, tt.at.Add(DefaultValidFor))
		}
	}

	// A cluster that joins after the informer listed the hub: the watch brings it.
	if err := hub.AddCluster(ctx, "north", nil); err != nil {
		t.Fatal(err)
	}
	if err := hub.MarkAvailable(ctx, "north"); err != nil {
		t.Fatal(err)
	}
	for {
		status, reply := functest.Send(t, url, functest.Ping(`{}`))
		if status != http.StatusOK {
			t.Fatalf("after north joined: status %d", status)
		}
		got := scores(reply)
		if got["north"] == 100 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("north never scored 100: last ping %v", got)
		}
		time.Sleep(20 * time.Millisecond)
	}

	// An account without access to ManagedClusters: the deployment is wrong, retrying cannot help.
	// Until the informer's first list has been refused a ping is answered 503, as before any list.
	cfg := rest.CopyConfig(hub.Config)
	cfg.Impersonate = rest.ImpersonationConfig{UserName: "system:serviceaccount:scoreflow:nobody"}
	denied := &Scorer{Resource: "cluster-health", ScoreName: "health", Log: fn.Log,
		Clusters: WatchClusters(ctx, clusterclient.NewForConfigOrDie(cfg), fn.Log)}
	fn = function.New("health-scorer", "test")
	url = functest.Serve(t, fn, scorer.Handler(fn.Source(), denied.Routes()))
	for {
		status, reply := functest.Send(t, url, functest.Ping(`{}`))
		_, f := functest.Reply(t, reply)
		if status == http.StatusServiceUnavailable && f != nil && f.Reason == contract.ReasonUnavailable && ctx.Err() == nil {
			time.Sleep(20 * time.Millisecond)
			continue
		}
		if status != http.StatusBadRequest || f == nil || f.Reason != contract.ReasonForbidden || f.Retriable ||
			!strings.Contains(f.Message, "list and watch on managedclusters") {
			t.Errorf("no RBAC: status %d failure %+v, want 400 Forbidden naming the grant", status, f)
		}
		break
	}
}
