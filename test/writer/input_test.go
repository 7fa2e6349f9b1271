package writer

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// cloudevents-player's form sends no time. Such an event is dated when it arrived (the broker's
// knativearrivaltime, else the writer's clock), so the later of two wins, and an event that names
// an older time is Stale against it.
func TestEventsWithoutTimeAreOrderedByArrival(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	noTime := func(v float64) event.Event {
		e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "no-time", Items: []contract.ClusterScores{item("c2", score("player", v))}})
		e.SetTime(time.Time{})
		return e
	}
	for _, v := range []float64{10, 20} {
		status, reply := s.send(t, noTime(v))
		if r := result(t, reply); status != http.StatusOK || r.Failed() || r.Items[0].Outcome != contract.OutcomeWritten {
			t.Fatalf("event without time, value %v: %d %+v, want 200 Written", v, status, r)
		}
	}
	if got := scoresOf(get(t, "c2", "no-time")); got["player"] != 20 {
		t.Fatalf("player = %d, want 20 (the later event)", got["player"])
	}
	older := scoreEvent(t, time.Now().Add(-time.Minute), contract.ScoreUpdated{Resource: "no-time", Items: []contract.ClusterScores{item("c2", score("player", 30))}})
	status, reply := s.send(t, older)
	if r := result(t, reply); status != http.StatusOK || r.Items[0].Reason != contract.ReasonStale {
		t.Errorf("explicitly older event after one without time: %d %+v, want Stale", status, r.Items[0])
	}
	// The broker's arrival time dates an event without time.
	e := noTime(40)
	e.SetExtension(contract.ExtArrivalTime, time.Now().Add(-2*time.Minute).UTC().Format(time.RFC3339Nano))
	_, reply = s.send(t, e)
	if r := result(t, reply); r.Items[0].Reason != contract.ReasonStale {
		t.Errorf("arrived two minutes ago, before the others: %+v, want Stale", r.Items[0])
	}
	if got := scoresOf(get(t, "c2", "no-time")); got["player"] != 20 {
		t.Errorf("player = %d, want 20", got["player"])
	}
}

// Scores go only to ManagedClusters the hub has accepted and is not deleting, and never to a
// cluster named like one of the hub's own namespaces, even when such a ManagedCluster exists (a
// bootstrap token may create one, pending acceptance).
func TestOnlyAcceptedClustersReceiveScores(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	mcs := hub.Cluster.ClusterV1().ManagedClusters()
	mk := func(name string, accepts bool) {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		if _, err := mcs.Create(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: name}, Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: accepts}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	mk("pending1", false)  // registered with a bootstrap token, not accepted
	mk("accepting1", true) // hubAcceptsClient set, the registration controller has not yet accepted
	mk("scoreflow", false) // named like the hub's own namespaces, accepted even
	mk("knative-eventing", true)
	mk("monitoring", true)
	mk("kube-flannel", true)
	mk("deleting1", true)
	for _, c := range []string{"scoreflow", "knative-eventing", "monitoring", "kube-flannel", "deleting1"} {
		if err := hub.AcceptCluster(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	mc, err := mcs.Get(ctx, "deleting1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	mc.Finalizers = []string{"test.scoreflow.io/hold"}
	if _, err := mcs.Update(ctx, mc, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := mcs.Delete(ctx, "deleting1", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		mc, err := mcs.Get(ctx, "deleting1", metav1.GetOptions{})
		if err == nil {
			mc.Finalizers = nil
			_, _ = mcs.Update(ctx, mc, metav1.UpdateOptions{})
		}
	})

	s := startWriter(t, serverOpts{})
	refused := map[string]contract.Reason{
		"pending1": contract.ReasonClusterNotAccepted, "accepting1": contract.ReasonClusterNotAccepted,
		"scoreflow": contract.ReasonUnknownCluster, "knative-eventing": contract.ReasonUnknownCluster,
		"monitoring": contract.ReasonUnknownCluster, "kube-flannel": contract.ReasonUnknownCluster,
		"deleting1": contract.ReasonUnknownCluster,
	}
	items := []contract.ClusterScores{item("c1", score("a", 1))}
	for c := range refused {
		items = append(items, item(c, score("a", 1)))
	}
	status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "accepted-only", Items: items}))
	r := result(t, reply)
	if status != http.StatusOK || r.Items[0].Outcome != contract.OutcomeWritten {
		t.Fatalf("%d, the accepted cluster: %+v", status, r.Items[0])
	}
	for _, it := range r.Items[1:] {
		if it.Outcome != contract.OutcomeFailed || it.Reason != refused[it.Cluster] || it.Retriable || it.Message == "" {
			t.Errorf("%s: %+v, want Failed %s with a message, not retriable", it.Cluster, it, refused[it.Cluster])
		}
		if obj := get(t, it.Cluster, "accepted-only"); obj != nil {
			t.Errorf("an AddOnPlacementScore was written in namespace %s", it.Cluster)
		}
	}
}

// postRaw sends e and returns the status, the raw body and the reply decoded from it.
func (s *server) postRaw(t *testing.T, e event.Event) (int, []byte, *event.Event) {
	t.Helper()
	req, err := http.NewRequest(http.MethodPost, s.url, nil)
	if err != nil {
		t.Fatal(err)
	}
	if err := cehttp.WriteRequest(context.Background(), binding.ToMessage(&e), req); err != nil {
		t.Fatal(err)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(bytes.NewReader(body))
	reply, err := binding.ToEvent(context.Background(), cehttp.NewMessageFromHttpResponse(resp))
	if err != nil {
		t.Fatalf("reply is not a CloudEvent: %v\n%s", err, body)
	}
	return resp.StatusCode, body, reply
}

// checkRefusal asserts a non-2xx answer Knative can dead-letter: under 700 bytes, a valid
// write.failed with its reason.
func checkRefusal(t *testing.T, status int, body []byte, reply *event.Event, wantStatus int, reason contract.Reason) *contract.WriteResult {
	t.Helper()
	r := result(t, reply)
	if status != wantStatus || reply.Type() != contract.TypeWriteFailed || r.Reason != reason || r.Message == "" {
		t.Errorf("status %d type %s reason %q message %q, want %d write.failed %s", status, reply.Type(), r.Reason, r.Message, wantStatus, reason)
	}
	if len(body) >= 700 {
		t.Errorf("refusal body is %d bytes, want under 700", len(body))
	}
	t.Logf("%d bytes: %s", len(body), body)
	return r
}

// The writer's refusals stay under Knative's limit in the worst cases: every one of 10,000 items
// refused, a long message, a 503 after retries with one Unavailable per cluster. The 200 answers
// keep the detail.
func TestRefusalsFitKnativeDispatcher(t *testing.T) {
	s := startWriter(t, serverOpts{writer: scorewriter.Options{RetryFor: 300 * time.Millisecond}})

	t.Run("10,000 unknown clusters", func(t *testing.T) {
		items := make([]contract.ClusterScores, contract.MaxItems)
		for i := range items {
			items[i] = item(fmt.Sprintf("%s%05d", strings.Repeat("n", 58), i), score("a", 1))
		}
		e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: strings.Repeat("r", 253), Items: items})
		e.SetSource(strings.Repeat("s", contract.MaxSourceLength))
		status, body, reply := s.postRaw(t, e)
		r := checkRefusal(t, status, body, reply, http.StatusUnprocessableEntity, contract.ReasonUnknownCluster)
		if r.Counts["Failed"] != contract.MaxItems || r.Input.ID != e.ID() {
			t.Errorf("counts %v input %+v, want %d failed and the input's id", r.Counts, r.Input, contract.MaxItems)
		}
	})
	t.Run("long message", func(t *testing.T) {
		e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "long", Items: []contract.ClusterScores{item("c1", score("a", 1))}})
		_ = e.SetData("application/json", []byte(`{"resource":"long","items":[{"cluster":"c1","scores":[{"name":"a","value":1}]}],"`+strings.Repeat("x", 100000)+`":1}`))
		status, body, reply := s.postRaw(t, e)
		checkRefusal(t, status, body, reply, http.StatusBadRequest, contract.ReasonInvalidData)
	})
	t.Run("a huge cluster name is cut in a 200 answer too", func(t *testing.T) {
		e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "huge-name", Items: []contract.ClusterScores{item("c1", score("a", 1)), item(strings.Repeat("x", 1<<20), score("a", 1))}})
		status, body, reply := s.postRaw(t, e)
		r := result(t, reply)
		if status != http.StatusOK || len(r.Items) != 2 || r.Items[1].Reason != contract.ReasonUnknownCluster || len(body) > 4096 {
			t.Errorf("status %d, %d bytes, items %+v: want 200 with the huge name cut", status, len(body), r.Items)
		}
	})
	t.Run("503 after retries, one Unavailable per cluster", func(t *testing.T) {
		var items []contract.ClusterScores
		for i := 0; i < 40; i++ {
			name := fmt.Sprintf("outage%02d", i)
			if err := hub.AddCluster(context.Background(), name, nil); err != nil {
				t.Fatal(err)
			}
			if err := hub.AcceptCluster(context.Background(), name); err != nil {
				t.Fatal(err)
			}
			items = append(items, item(name, score("a", 1)))
		}
		// Another writer, started after the clusters exist, so its informer has them all.
		s := startWriter(t, serverOpts{writer: scorewriter.Options{RetryFor: 300 * time.Millisecond}})
		if err := hub.CrashAPIServer(); err != nil {
			t.Fatal(err)
		}
		status, body, reply := s.postRaw(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "outage-refusal", Items: items}))
		if err := hub.StartAPIServer(); err != nil {
			t.Fatal(err)
		}
		if err := hub.WaitForAPI(context.Background(), 30*time.Second); err != nil {
			t.Fatal(err)
		}
		r := checkRefusal(t, status, body, reply, http.StatusServiceUnavailable, contract.ReasonUnavailable)
		if !r.AnyRetriable() || r.Counts["Failed"] != len(items) {
			t.Errorf("retriable %v counts %v, want retriable and %d failed", r.AnyRetriable(), r.Counts, len(items))
		}
	})
}

// Updates waiting to be written are bounded by the bytes they hold, not their number: while the
// hub is down and one event's large updates wait, the next event is answered 503 at once,
// overloaded, instead of piling up behind it.
func TestPendingUpdatesAreBoundedByBytes(t *testing.T) {
	// Each event's one update holds about 14 KB: 100 scores with 100-character names.
	s := startWriter(t, serverOpts{writer: scorewriter.Options{RetryFor: 3 * time.Second}, pending: 20 << 10})
	big := func(resource string) event.Event {
		var scores []contract.Score
		for i := 0; i < 100; i++ {
			scores = append(scores, score(fmt.Sprintf("%s%03d", strings.Repeat("s", 97), i), 1))
		}
		return scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{item("c3", scores...)}})
	}
	if err := hub.CrashAPIServer(); err != nil {
		t.Fatal(err)
	}
	first := make(chan int, 1)
	go func() {
		status, _, _ := s.postRaw(t, big("pending-a"))
		first <- status
	}()
	time.Sleep(300 * time.Millisecond) // the first event's update is now waiting for the hub
	start := time.Now()
	status, body, reply := s.postRaw(t, big("pending-b"))
	took := time.Since(start)
	if err := hub.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	if err := hub.WaitForAPI(context.Background(), 30*time.Second); err != nil {
		t.Fatal(err)
	}
	<-first
	r := result(t, reply)
	if status != http.StatusServiceUnavailable || !r.AnyRetriable() || len(r.Items) != 1 || !strings.Contains(r.Items[0].Message, "overloaded") || took > time.Second {
		t.Errorf("second event after %s: %d %s, want 503 overloaded at once", took, status, body)
	}
}
