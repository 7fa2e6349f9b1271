package writer

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

func TestWritesScoresValidUntilAndCondition(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{ttl: time.Minute})
	observed := time.Now().Add(-10 * time.Second).Truncate(time.Second)
	status, reply := s.send(t, scoreEvent(t, observed, contract.ScoreUpdated{Resource: "basic", Items: []contract.ClusterScores{
		item("c1", score("cpuAvailable", 40), score("memAvailable", -20)),
		item("c2", score("cpuAvailable", 100)),
	}}))
	r := result(t, reply)
	if status != http.StatusOK || reply.Type() != contract.TypeWriteDone || len(r.Items) != 2 {
		t.Fatalf("status %d reply %s %+v", status, reply.Type(), r)
	}
	for _, it := range r.Items {
		if it.Outcome != contract.OutcomeWritten || it.ResourceVersion == "" {
			t.Errorf("item %+v, want Written with a resourceVersion", it)
		}
	}
	obj := get(t, "c1", "basic")
	if got := scoresOf(obj); got["cpuAvailable"] != 40 || got["memAvailable"] != -20 || len(got) != 2 {
		t.Errorf("c1 scores = %v", got)
	}
	if obj.ResourceVersion != r.Items[0].ResourceVersion {
		t.Errorf("reply resourceVersion %s, object has %s", r.Items[0].ResourceVersion, obj.ResourceVersion)
	}
	// validUntil defaults to observation time + TTL.
	if obj.Status.ValidUntil == nil || !obj.Status.ValidUntil.Time.Equal(observed.Add(time.Minute)) {
		t.Errorf("validUntil = %v, want %v", obj.Status.ValidUntil, observed.Add(time.Minute))
	}
	if c := meta.FindStatusCondition(obj.Status.Conditions, scorewriter.ConditionUpdated); c == nil ||
		c.Status != metav1.ConditionTrue || !strings.Contains(c.Message, "test/TestWritesScores") {
		t.Errorf("conditions = %+v, want %s naming the source", obj.Status.Conditions, scorewriter.ConditionUpdated)
	}
	// The ledger of observation times is on the object, so order survives a writer restart. Its
	// times are all of one width (nanoseconds written out), so that its size does not depend on them.
	const ledgerTime = "2006-01-02T15:04:05.000000000Z07:00"
	if c := meta.FindStatusCondition(obj.Status.Conditions, scorewriter.ConditionObservations); c == nil ||
		!strings.Contains(c.Message, `"observed":"`+observed.UTC().Format(ledgerTime)+`","validUntil":"`+observed.Add(time.Minute).UTC().Format(ledgerTime)+`","names":["cpuAvailable","memAvailable"]`) {
		t.Errorf("ledger condition = %+v, want cpuAvailable and memAvailable observed at %s", c, observed.UTC().Format(ledgerTime))
	}
	if got := scoresOf(get(t, "c2", "basic")); got["cpuAvailable"] != 100 {
		t.Errorf("c2 scores = %v", got)
	}

	// An explicit validUntil wins over the TTL.
	vu := time.Now().Add(2 * time.Hour).Truncate(time.Second)
	_, reply = s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "basic", ValidUntil: &vu, Items: []contract.ClusterScores{item("c2", score("cpuAvailable", 90))}}))
	if r := result(t, reply); r.Failed() {
		t.Fatalf("%+v", r)
	}
	if obj := get(t, "c2", "basic"); !obj.Status.ValidUntil.Time.Equal(vu) {
		t.Errorf("validUntil = %v, want %v", obj.Status.ValidUntil, vu)
	}
}

func TestMergesWithScoresOfOtherProducers(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	ctx := context.Background()
	api := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores("c3")
	obj, err := api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "shared", Namespace: "c3"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	obj.Status.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "foreign", Value: 7}}
	if _, err := api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	_, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "shared", Items: []contract.ClusterScores{item("c3", score("mine", 55))}}))
	if r := result(t, reply); r.Failed() {
		t.Fatalf("%+v", r)
	}
	if got := scoresOf(get(t, "c3", "shared")); got["foreign"] != 7 || got["mine"] != 55 {
		t.Errorf("scores = %v, want foreign=7 (untouched) and mine=55", got)
	}
}

func TestFiftyEventsInFlightForOneObjectAllLand(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	const n = 50
	var wg sync.WaitGroup
	statuses := make([]int, n)
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			statuses[i], _ = s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "fifty", Items: []contract.ClusterScores{item("c1", score(fmt.Sprintf("s%02d", i), float64(i)))}}))
		}(i)
	}
	wg.Wait()
	for i, st := range statuses {
		if st != http.StatusOK {
			t.Errorf("event %d answered %d", i, st)
		}
	}
	got := scoresOf(get(t, "c1", "fifty"))
	for i := 0; i < n; i++ {
		if v, ok := got[fmt.Sprintf("s%02d", i)]; !ok || v != int32(i) {
			t.Errorf("score s%02d = %d, present %v", i, v, ok)
		}
	}
	// Coalescing: 50 concurrent updates of one object must not cost 50 status writes.
	if w := s.apiRequests(t, "update_status"); w >= n {
		t.Errorf("%v status writes for %d updates of one object: no coalescing", w, n)
	}
}

func TestTwoWriterReplicasNeverOverwriteEachOther(t *testing.T) {
	t.Parallel()
	a, b := startWriter(t, serverOpts{}), startWriter(t, serverOpts{})
	const n = 40
	var wg sync.WaitGroup
	for i := 0; i < n; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			s := a
			if i%2 == 1 {
				s = b
			}
			if st, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "replicas", Items: []contract.ClusterScores{item("c2", score(fmt.Sprintf("r%02d", i), 1))}})); st != http.StatusOK {
				t.Errorf("event %d: %d %v", i, st, reply)
			}
		}(i)
	}
	wg.Wait()
	if got := scoresOf(get(t, "c2", "replicas")); len(got) != n {
		t.Errorf("%d of %d scores present after two replicas wrote concurrently: %v", len(got), n, got)
	}
}

func TestDuplicateDeliveryDoesNotWriteAgain(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "dup", Items: []contract.ClusterScores{item("c4", score("a", 1))}})
	_, reply := s.send(t, e)
	first := result(t, reply)
	writes := s.apiRequests(t)
	rv := get(t, "c4", "dup").ResourceVersion

	status, reply := s.send(t, e)
	again := result(t, reply)
	if status != http.StatusOK || !again.Duplicate || again.Items[0].ResourceVersion != first.Items[0].ResourceVersion {
		t.Errorf("redelivery: status %d %+v, want 200, duplicate, same resourceVersion", status, again)
	}
	if w := s.apiRequests(t); w != writes {
		t.Errorf("redelivery issued %v API requests", w-writes)
	}
	if got := get(t, "c4", "dup").ResourceVersion; got != rv {
		t.Errorf("object changed on redelivery: %s -> %s", rv, got)
	}

	// A restarted writer has forgotten the event; the ledger on the object still recognises it.
	fresh := startWriter(t, serverOpts{})
	_, reply = fresh.send(t, e)
	r := result(t, reply)
	if r.Items[0].Outcome != contract.OutcomeSkipped || r.Items[0].Reason != contract.ReasonDuplicate {
		t.Errorf("redelivery to a restarted writer: %+v, want Skipped/Duplicate", r.Items[0])
	}
	if got := get(t, "c4", "dup").ResourceVersion; got != rv {
		t.Errorf("object changed on redelivery to a restarted writer: %s -> %s", rv, got)
	}
}

func TestOlderObservationDoesNotOverwriteNewer(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	t0 := time.Now().Add(-time.Minute)
	newer := scoreEvent(t, t0.Add(30*time.Second), contract.ScoreUpdated{Resource: "order", Items: []contract.ClusterScores{item("c5", score("cpu", 20), score("mem", 5))}})
	older := scoreEvent(t, t0, contract.ScoreUpdated{Resource: "order", Items: []contract.ClusterScores{item("c5", score("cpu", 10))}})
	if _, reply := s.send(t, newer); result(t, reply).Failed() {
		t.Fatal("newer failed")
	}
	status, reply := s.send(t, older)
	r := result(t, reply)
	if status != http.StatusOK || r.Items[0].Outcome != contract.OutcomeSkipped || r.Items[0].Reason != contract.ReasonStale {
		t.Errorf("older after newer: %d %+v, want Skipped/Stale", status, r.Items[0])
	}
	if got := scoresOf(get(t, "c5", "order")); got["cpu"] != 20 {
		t.Errorf("cpu = %d, want 20 (the newer observation)", got["cpu"])
	}
	// Merge by score name: an older event may still set a score the newer one did not carry.
	_, reply = s.send(t, scoreEvent(t, t0, contract.ScoreUpdated{Resource: "order", Items: []contract.ClusterScores{item("c5", score("gpu", 3), score("cpu", 1))}}))
	if r := result(t, reply); r.Items[0].Outcome != contract.OutcomeWritten {
		t.Errorf("older event with a new score name: %+v", r.Items[0])
	}
	if got := scoresOf(get(t, "c5", "order")); got["cpu"] != 20 || got["gpu"] != 3 {
		t.Errorf("scores = %v, want cpu=20 gpu=3", got)
	}
}

func TestUnknownAndHostileClustersChangeNothing(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	bad := []string{"kube-system", "default", "../x", "nope", "open-cluster-management-hub", "C1"}
	items := []contract.ClusterScores{item("c1", score("a", 1))}
	for _, c := range bad {
		items = append(items, item(c, score("a", 1)))
	}
	status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "hostile", Items: items}))
	r := result(t, reply)
	if status != http.StatusOK || reply.Type() != contract.TypeWriteFailed {
		t.Fatalf("status %d type %s, want 200 write.failed", status, reply.Type())
	}
	if r.Items[0].Outcome != contract.OutcomeWritten {
		t.Errorf("the good item: %+v", r.Items[0])
	}
	for i, c := range bad {
		it := r.Items[i+1]
		if it.Cluster != c || it.Outcome != contract.OutcomeFailed || it.Reason != contract.ReasonUnknownCluster || it.Retriable {
			t.Errorf("cluster %q: %+v, want Failed/UnknownCluster, not retriable", c, it)
		}
	}
	for _, ns := range []string{"kube-system", "default"} {
		if obj := get(t, ns, "hostile"); obj != nil {
			t.Errorf("an AddOnPlacementScore was written in %s", ns)
		}
	}
	if _, err := hub.Kube.CoreV1().Namespaces().Get(context.Background(), "nope", metav1.GetOptions{}); err == nil {
		t.Error("namespace nope was created")
	}

	// When every item is refused, the event as a whole is bad input: 422, nothing written.
	status, reply = s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "hostile2", Items: []contract.ClusterScores{item("nope", score("a", 1))}}))
	if status != http.StatusUnprocessableEntity || reply.Type() != contract.TypeWriteFailed {
		t.Errorf("all items unknown: %d %s, want 422 write.failed", status, reply.Type())
	}
}

func TestOutOfRangeValuesAreRefusedPerItem(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "range", Items: []contract.ClusterScores{
		item("c1", score("a", 101)),
		item("c2", score("a", 0.5)),
		item("c3", score("a", -101)),
		item("c4", score("a", 50), score("b", -100)),
		item("c5", score("a", 100), score("b", 1000)), // one bad score spoils its item, not the others
	}}))
	r := result(t, reply)
	if status != http.StatusOK || reply.Type() != contract.TypeWriteFailed {
		t.Fatalf("status %d type %s", status, reply.Type())
	}
	for _, i := range []int{0, 1, 2, 4} {
		if it := r.Items[i]; it.Outcome != contract.OutcomeFailed || it.Reason != contract.ReasonOutOfRange {
			t.Errorf("item %d: %+v, want Failed/OutOfRange", i, it)
		}
		if obj := get(t, r.Items[i].Cluster, "range"); obj != nil {
			t.Errorf("item %d (%s) was written: %v", i, r.Items[i].Cluster, scoresOf(obj))
		}
	}
	if got := scoresOf(get(t, "c4", "range")); got["a"] != 50 || got["b"] != -100 {
		t.Errorf("c4 = %v", got)
	}
}

func TestExpiredScoresAreDroppedAndPastValidUntilIsStale(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	soon := time.Now().Add(1500 * time.Millisecond)
	_, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "expiry", ValidUntil: &soon, Items: []contract.ClusterScores{item("c3", score("short", 9))}}))
	if result(t, reply).Failed() {
		t.Fatal("first write failed")
	}
	time.Sleep(time.Until(soon) + 100*time.Millisecond)
	later := time.Now().Add(time.Hour).Truncate(time.Second)
	_, reply = s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "expiry", ValidUntil: &later, Items: []contract.ClusterScores{item("c3", score("long", 8))}}))
	if result(t, reply).Failed() {
		t.Fatal("second write failed")
	}
	obj := get(t, "c3", "expiry")
	if got := scoresOf(obj); len(got) != 1 || got["long"] != 8 {
		t.Errorf("scores = %v, want only long=8 (short expired)", got)
	}
	if !obj.Status.ValidUntil.Time.Equal(later) {
		t.Errorf("validUntil = %v, want %v", obj.Status.ValidUntil, later)
	}

	// Nothing of an event whose validUntil has passed is written, and its sender hears so: a
	// write.failed (422: every item failed for good), not a write.done.
	past := time.Now().Add(-time.Minute)
	status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "expiry-past", ValidUntil: &past, Items: []contract.ClusterScores{item("c3", score("x", 1))}}))
	if r := result(t, reply); status != http.StatusUnprocessableEntity || reply.Type() != contract.TypeWriteFailed || r.Items[0].Outcome != contract.OutcomeFailed || r.Items[0].Reason != contract.ReasonStale {
		t.Errorf("validUntil in the past: %d %s %+v, want 422 write.failed, the item Failed/Stale", status, reply.Type(), r.Items[0])
	}
	if get(t, "c3", "expiry-past") != nil {
		t.Error("an already-expired score was written")
	}
}

func TestHealthReadinessAndMetrics(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{})
	if _, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "metrics", Items: []contract.ClusterScores{item("c1", score("gauge", 42))}})); result(t, reply).Failed() {
		t.Fatal("write failed")
	}
	for path, want := range map[string]string{
		"/healthz": "ok",
		"/readyz":  "ok",
		"/metrics": `scoreflow_score{cluster="c1",resource="metrics",score="gauge"} 42`,
	} {
		resp, err := http.Get(s.url + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusOK || !strings.Contains(string(body), want) {
			t.Errorf("GET %s: %d, body lacks %q", path, resp.StatusCode, want)
		}
	}
	for _, family := range []string{"scoreflow_writer_api_requests_total", "scoreflow_writer_write_latency_seconds", "scoreflow_events_received_total", "scoreflow_writer_events_total"} {
		resp, _ := http.Get(s.url + "/metrics")
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), family) {
			t.Errorf("/metrics lacks %s", family)
		}
	}
}

// Scores sent with neverExpires leave validUntil nil (OCM: never expires), as event-driven producers
// such as the health-scorer need; an expiring score added later bounds the object again.
func TestNeverExpiringScores(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{ttl: time.Minute})
	_, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "forever", NeverExpires: true, Items: []contract.ClusterScores{item("c4", score("health", 100))}}))
	if r := result(t, reply); r.Failed() {
		t.Fatalf("%+v", r)
	}
	if obj := get(t, "c4", "forever"); obj.Status.ValidUntil != nil || scoresOf(obj)["health"] != 100 {
		t.Errorf("validUntil = %v, scores %v: want nil (never) and health=100", obj.Status.ValidUntil, scoresOf(obj))
	}
	observed := time.Now().Truncate(time.Second)
	_, reply = s.send(t, scoreEvent(t, observed, contract.ScoreUpdated{Resource: "forever", Items: []contract.ClusterScores{item("c4", score("load", 5))}}))
	if r := result(t, reply); r.Failed() {
		t.Fatalf("%+v", r)
	}
	if obj := get(t, "c4", "forever"); obj.Status.ValidUntil == nil || !obj.Status.ValidUntil.Time.Equal(observed.Add(time.Minute)) {
		t.Errorf("validUntil = %v, want %v from the expiring score", obj.Status.ValidUntil, observed.Add(time.Minute))
	}
	vu := time.Now().Add(time.Hour)
	status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "forever", NeverExpires: true, ValidUntil: &vu, Items: []contract.ClusterScores{item("c4", score("x", 1))}}))
	if status != http.StatusBadRequest || result(t, reply).Reason != contract.ReasonInvalidData {
		t.Errorf("neverExpires with validUntil: %d, want 400 InvalidData", status)
	}
}

// A ManagedCluster whose namespace does not exist yet (registration in progress): the item fails
// at once as retriable (503, the broker redelivers later) instead of holding a worker, and no
// namespace is created.
func TestClusterWithoutNamespaceFailsFastAsRetriable(t *testing.T) {
	t.Parallel()
	ctx := context.Background()
	if _, err := hub.Cluster.ClusterV1().ManagedClusters().Create(ctx, &clusterv1.ManagedCluster{ObjectMeta: metav1.ObjectMeta{Name: "registering"}, Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: true}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := hub.AcceptCluster(ctx, "registering"); err != nil {
		t.Fatal(err)
	}
	s := startWriter(t, serverOpts{})
	start := time.Now()
	status, reply := s.send(t, scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: "early", Items: []contract.ClusterScores{item("registering", score("a", 1))}}))
	r := result(t, reply)
	if status != http.StatusServiceUnavailable || r.Items[0].Reason != contract.ReasonUnknownCluster || !r.Items[0].Retriable {
		t.Errorf("%d %+v, want 503 retriable UnknownCluster", status, r.Items[0])
	}
	if took := time.Since(start); took > 5*time.Second {
		t.Errorf("took %s: the writer waited on a namespace that is not there", took)
	}
	if _, err := hub.Kube.CoreV1().Namespaces().Get(ctx, "registering", metav1.GetOptions{}); err == nil {
		t.Error("the writer created the namespace")
	}
}

// The memory of answered events is bounded by the bytes the answers hold: older answers are
// forgotten (the ledger on the object still recognises their redeliveries), recent ones are
// recalled. Each answer here holds about 900 bytes.
func TestRedeliveryMemoryIsBoundedByBytes(t *testing.T) {
	t.Parallel()
	s := startWriter(t, serverOpts{remember: 2000})
	var events []cloudevents.Event
	for i := 0; i < 3; i++ {
		e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: fmt.Sprintf("memory-%d", i), Items: []contract.ClusterScores{item("c1", score("a", 1)), item("c2", score("a", 1))}})
		events = append(events, e)
		if _, reply := s.send(t, e); result(t, reply).Failed() {
			t.Fatal("write failed")
		}
	}
	_, reply := s.send(t, events[2])
	if r := result(t, reply); !r.Duplicate {
		t.Errorf("the latest event's redelivery: %+v, want recalled as a duplicate", r)
	}
	_, reply = s.send(t, events[0])
	if r := result(t, reply); r.Duplicate || r.Items[0].Reason != contract.ReasonDuplicate {
		t.Errorf("the oldest event's redelivery (forgotten: three answers hold more than 2,000 bytes): %+v, want recognised by the ledger", r)
	}
}
