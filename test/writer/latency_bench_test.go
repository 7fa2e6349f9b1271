package writer

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// BenchmarkScoreWriterLatency measures the time from POSTing a score.updated (one cluster item) to
// the writer's HTTP handler to its score being visible on the hub (an informer sees it, or a newer
// value that superseded it), at a steady 100 events/s, with the writer at its deployed settings
// (functions/score-writer's defaults: 10ms window, 64 workers, client QPS 200, burst 400).
// Three take turns through one op, so that all see the same machine (it is shared and its load
// swings within seconds): two schedulings, each its own writer - wait-when-idle (every update
// waits the window first) and at-once (an idle object is written at once;
// updates arriving while it is written or within the window after that write started share the
// next write) - and hub-raw, the hub alone: no writer and no HTTP, a plain client writing each
// event's status itself (see hubRawRun). The writers' overhead is their p50 against hub-raw's.
// Hub-raw's time from its write's start to the informer (hub-raw-write-*) bounds what any writer
// of the same status reaches on this machine; on the hot object hub-raw's whole latency does not,
// as it writes every event in turn where the writers merge them. Two shapes: events spread over
// 100 objects (each object idle between its updates) and all on one hot object.
//
// Each run also logs a breakdown per stage (POST sent -> its write to the hub started -> the hub
// answered that write -> the informer saw it), from the writers' client traced in this test
// (traceWrites) and from hub-raw's own calls.
//
//	go test ./test/writer -run '^$' -bench ScoreWriterLatency -benchtime 1x
func BenchmarkScoreWriterLatency(b *testing.B) {
	names := benchClusters(b, 100)
	for _, objects := range []int{100, 1} {
		b.Run(fmt.Sprintf("objects=%d", objects), func(b *testing.B) {
			benchLatency(b, names[:objects])
		})
	}
}

const (
	latencyRate = 100 // events per second
	// latencyTurn is the events in a row to one turn-taker: 0.2s. The machine's load swings over
	// seconds: with 2s turns each of the three has five turns per op, so a stall of the hub can
	// fall on one of them alone; with fifty 0.2s turns each, it falls on all three alike. Long
	// turns also let hub-raw, which writes every event, build a backlog on the hot object whenever
	// the hub is slower than one write per 10ms, which would count the backlog, not the write, in
	// its p50. A turn starts while the previous turn-taker's slowest writes are still under way,
	// but each turn-taker follows another one in turn, so that overlap is the same for all three;
	// 0.2s is still twenty 10ms windows.
	latencyTurn = 20
	// latencyRound is the events of one op per turn-taker: 10s at 100 events/s each.
	latencyRound = 1000
	// latencyTTL is the validity the writer gives these events (startWriter's TTL from their
	// observation): hub-raw writes the same validUntil.
	latencyTTL = time.Hour
)

// latencyRun is one turn-taker and what was sent to it.
type latencyRun struct {
	name     string
	resource string
	v        *visibility
	sent     int
	// send hands event i (its object and value) to the turn-taker without waiting for it.
	send func(i, obj int, value int32)
	// finish waits for everything send started.
	finish func()
	// writes counts the turn-taker's API writes (create, update status) so far.
	writes func() float64
	before float64 // writes when timing started
}

func benchLatency(b *testing.B, names []string) {
	base := time.Now().Add(-time.Minute)
	total := b.N * latencyRound
	runs := []*latencyRun{
		writerRun(b, "wait-when-idle", true, names, base, total),
		writerRun(b, "at-once", false, names, base, total),
		hubRawRun(b, names, base, total),
	}
	time.Sleep(100 * time.Millisecond) // the objects rested
	for _, r := range runs {
		r.before = r.writes()
	}
	load := loadAverage()
	b.ResetTimer()
	tick := time.NewTicker(time.Second / latencyRate)
	defer tick.Stop()
	for turn := 0; runs[len(runs)-1].sent < total; turn++ {
		r := runs[turn%len(runs)]
		for j := 0; j < latencyTurn && r.sent < total; j++ {
			<-tick.C
			i := r.sent
			r.sent++
			obj, value := r.v.sent(i)
			r.send(i, obj, value)
		}
	}
	for _, r := range runs {
		r.finish()
	}
	lats := make([][]time.Duration, len(runs))
	for k, r := range runs {
		lats[k] = r.v.wait(b, 30*time.Second)
	}
	b.StopTimer()
	load = (load + loadAverage()) / 2

	p50 := map[string]time.Duration{}
	for k, r := range runs {
		lat := append([]time.Duration(nil), lats[k]...)
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		p50[r.name] = lat[len(lat)/2]
		b.ReportMetric(ms(lat[len(lat)/2]), r.name+"-p50-ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), r.name+"-p99-ms")
		b.ReportMetric((r.writes()-r.before)/float64(total), r.name+"-api-writes/event")
		for o, c := range names {
			if got, want := scoresOf(get(b, c, r.resource))["load"], r.v.last[o]; got != want {
				b.Errorf("%s: %s: load=%d on the hub, last sent %d", r.name, c, got, want)
			}
		}
		if write := r.v.logStages(b, r.name); r.name == "hub-raw" && len(write) > 0 {
			// The hub's own time per write, without hub-raw's wait behind its object's earlier
			// writes (on the hot object): what no writer of the same status can go below.
			b.ReportMetric(ms(write[len(write)/2]), "hub-raw-write-p50-ms")
			b.ReportMetric(ms(write[len(write)*99/100]), "hub-raw-write-p99-ms")
		}
	}
	// The writer's overhead over the hub alone, at the median: what the writer adds (HTTP,
	// decoding, scheduling, its own CPU on a shared machine) to the hub's own write and watch.
	raw := p50["hub-raw"]
	for _, r := range runs[:2] {
		b.ReportMetric(ms(p50[r.name]-raw), r.name+"-p50-minus-hub-raw-ms")
		b.ReportMetric(float64(p50[r.name])/float64(max(raw, time.Microsecond)), r.name+"-p50-x-hub-raw")
	}
	b.ReportMetric(load, "load-avg")
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

// writerRun starts a score-writer with the given scheduling, its objects written once (so that
// updates are measured, not creates), its client traced (traceWrites).
func writerRun(b *testing.B, name string, waitWhenIdle bool, names []string, base time.Time, total int) *latencyRun {
	opts := scorewriter.DefaultOptions()
	opts.WaitWhenIdle = waitWhenIdle
	trace := &traceWrites{}
	cfg := deployedHub()
	cfg.WrapTransport = trace.wrap
	s := startWriter(b, serverOpts{hub: cfg, writer: opts})
	r := &latencyRun{name: name, resource: fmt.Sprintf("latency-%d-%s", len(names), name)}
	var items []contract.ClusterScores
	for _, c := range names {
		items = append(items, item(c, score("load", 100)))
	}
	if st, reply := s.send(b, scoreEvent(b, base, contract.ScoreUpdated{Resource: r.resource, Items: items})); st != http.StatusOK || result(b, reply).Failed() {
		b.Fatalf("%s warm-up: %d", name, st)
	}
	r.v = newVisibility(b, r.resource, names, total)
	trace.v.Store(r.v)
	var wg sync.WaitGroup
	r.send = func(i, obj int, value int32) {
		e := scoreEvent(b, base.Add(time.Duration(i+1)*time.Microsecond), contract.ScoreUpdated{Resource: r.resource, Items: []contract.ClusterScores{item(names[obj], score("load", float64(value)))}})
		wg.Add(1)
		go func() {
			defer wg.Done()
			if st, reply := s.send(b, e); st != http.StatusOK || result(b, reply).Failed() {
				b.Errorf("%s event %d: %d", name, i, st)
			}
		}()
	}
	r.finish = wg.Wait
	r.writes = func() float64 { return s.apiRequests(b, "create", "update_status") }
	return r
}

// traceWrites wraps a writer's client: each successful status write is reported to the
// visibility, with when its request left and when the hub's answer came back, so that each
// event's time splits into the writer's share and the hub's without any hook in the writer.
type traceWrites struct {
	v atomic.Pointer[visibility] // nil until timing starts: warm-up writes are not traced
}

func (t *traceWrites) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripFunc(func(req *http.Request) (*http.Response, error) {
		v := t.v.Load()
		if v == nil || req.Method != http.MethodPut || !strings.HasSuffix(req.URL.Path, "/status") || req.Body == nil {
			return rt.RoundTrip(req)
		}
		body, err := io.ReadAll(req.Body)
		_ = req.Body.Close()
		if err != nil {
			return nil, err
		}
		out := req.Clone(req.Context())
		out.Body = io.NopCloser(bytes.NewReader(body))
		out.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(body)), nil }
		var obj clusterv1alpha1.AddOnPlacementScore
		traced := json.Unmarshal(body, &obj) == nil
		started := time.Now()
		resp, err := rt.RoundTrip(out)
		if traced && err == nil && resp.StatusCode == http.StatusOK {
			v.wrote(obj.Namespace, scoresOf(&obj)["load"], started, time.Now())
		}
		return resp, err
	})
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// hubRawRun is the hub alone: for each event, the status update the writer would make of that
// object (rawStatus), sent by a plain client with the writer's QPS and burst, and timed by the
// same informer. No HTTP in front, no coalescing: one write per event.
//
// Each write carries the resourceVersion of the object's previous write (no Get), and an object's
// writes go one at a time, in order. Nobody else writes these objects, so none conflicts, and
// each event costs the hub one request, as in the writer's steady state. Get-then-Update with a
// retry on conflict would instead measure a naive client: on the hot object concurrent updates
// conflict with each other, every retry costs a read and a write, and values could land out of
// order - costs of the client, not of the hub, which is what this run is to bound. The one price
// of writing in order: on the hot object an event waits behind its object's earlier writes, as
// it would behind any writer that writes each event.
func hubRawRun(b *testing.B, names []string, base time.Time, total int) *latencyRun {
	ctx := context.Background()
	client, err := clusterclient.NewForConfig(deployedHub())
	if err != nil {
		b.Fatal(err)
	}
	r := &latencyRun{name: "hub-raw", resource: fmt.Sprintf("latency-%d-hub-raw", len(names))}
	source := "test/" + strings.ReplaceAll(b.Name(), "/", "-") // as scoreEvent's
	cur := make([]*clusterv1alpha1.AddOnPlacementScore, len(names))
	for k, c := range names {
		api := client.ClusterV1alpha1().AddOnPlacementScores(c)
		obj, err := api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: r.resource, Namespace: c}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			obj, err = api.Get(ctx, r.resource, metav1.GetOptions{})
		}
		if err != nil {
			b.Fatalf("hub-raw warm-up: %v", err)
		}
		obj.Status = rawStatus(obj.Status, 100, base, source)
		if obj, err = api.UpdateStatus(ctx, obj, metav1.UpdateOptions{}); err != nil {
			b.Fatalf("hub-raw warm-up: %v", err)
		}
		obj.ManagedFields = nil // as the writer's copies: the API server keeps them
		cur[k] = obj
	}
	r.v = newVisibility(b, r.resource, names, total)
	type rawEvent struct {
		i     int
		value int32
	}
	var writes atomic.Int64
	var wg sync.WaitGroup
	queues := make([]chan rawEvent, len(names))
	for k := range names {
		queues[k] = make(chan rawEvent, total/len(names)+1) // never full: send does not wait
		wg.Add(1)
		go func() {
			defer wg.Done()
			api := client.ClusterV1alpha1().AddOnPlacementScores(names[k])
			for e := range queues[k] {
				next := cur[k].DeepCopy()
				next.Status = rawStatus(next.Status, e.value, base.Add(time.Duration(e.i+1)*time.Microsecond), source)
				started := time.Now()
				written, err := api.UpdateStatus(ctx, next, metav1.UpdateOptions{})
				answered := time.Now()
				writes.Add(1)
				if err != nil {
					b.Errorf("hub-raw event %d: %v", e.i, err)
					if written, err = api.Get(ctx, r.resource, metav1.GetOptions{}); err != nil {
						b.Errorf("hub-raw: %v", err)
						continue
					}
				} else {
					r.v.wrote(names[k], e.value, started, answered)
				}
				written.ManagedFields = nil
				cur[k] = written
			}
		}()
	}
	r.send = func(i, obj int, value int32) { queues[obj] <- rawEvent{i: i, value: value} }
	r.finish = func() {
		for _, q := range queues {
			close(q)
		}
		wg.Wait()
	}
	r.writes = func() float64 { return float64(writes.Load()) }
	return r
}

// rawStatus is prev with what the writer writes for one update of the score "load" to value,
// observed at observed by source (makePlan's status for these events): the score, validUntil,
// the observation ledger and the ScoresUpdated condition, so that hub-raw's writes are the
// writer's in content and size.
func rawStatus(prev clusterv1alpha1.AddOnPlacementScoreStatus, value int32, observed time.Time, source string) clusterv1alpha1.AddOnPlacementScoreStatus {
	validUntil := observed.Add(latencyTTL)
	st := *prev.DeepCopy()
	st.Scores = []clusterv1alpha1.AddOnPlacementScoreItem{{Name: "load", Value: value}}
	vu := metav1.NewTime(validUntil)
	st.ValidUntil = &vu
	ledger, _ := json.Marshal(map[string][2]string{"load": {observed.UTC().Format(time.RFC3339Nano), validUntil.UTC().Format(time.RFC3339Nano)}})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: scorewriter.ConditionObservations, Status: metav1.ConditionTrue,
		Reason: "ObservationTimes", Message: string(ledger)})
	meta.SetStatusCondition(&st.Conditions, metav1.Condition{Type: scorewriter.ConditionUpdated, Status: metav1.ConditionTrue,
		Reason: "ScoresWritten", Message: fmt.Sprintf("scores from %s observed up to %s", source, observed.UTC().Format(time.RFC3339))})
	return st
}

// visibility follows, per object, the values sent and the values the hub shows (through an
// informer), and times each event from its POST to its value, or a newer one, being on the hub.
// Where the writes are traced (wrote), it also times when the write that carried the event
// started and when the hub answered it.
type visibility struct {
	mu     sync.Mutex
	n      int            // objects
	index  map[string]int // cluster -> object
	sentAt []time.Time    // per event
	value  []int32        // per event
	last   []int32        // per object: the last value sent
	// The milestones of each event: its write started, the hub answered it, the informer saw it.
	started, answered, seen milestone
	done                    chan struct{} // closed when every event has been seen
	total                   int
	stop                    func()
}

// milestone times each event at one point on its way to the hub: when its value, or a newer value
// of its object, got there. An older update superseded by a newer one has been overtaken, not
// lost: the newer one's arrival counts for both.
type milestone struct {
	waiting [][]int     // per object: events sent, not yet there, in order
	at      []time.Time // per event; zero while not there
	reached int         // events there
}

func newMilestone(objects, total int) milestone {
	return milestone{waiting: make([][]int, objects), at: make([]time.Time, total)}
}

// reach takes the newest waiting event of object k with this value, and every one sent before
// it, as there at t.
func (m *milestone) reach(values []int32, k int, value int32, t time.Time) {
	q := m.waiting[k]
	at := -1
	for j := len(q) - 1; j >= 0; j-- {
		if values[q[j]] == value {
			at = j
			break
		}
	}
	for _, i := range q[:at+1] {
		m.at[i] = t
	}
	m.reached += at + 1
	m.waiting[k] = q[at+1:]
}

func newVisibility(b *testing.B, resource string, names []string, total int) *visibility {
	v := &visibility{n: len(names), index: map[string]int{}, sentAt: make([]time.Time, total), value: make([]int32, total),
		last: make([]int32, len(names)), done: make(chan struct{}), total: total,
		started: newMilestone(len(names), total), answered: newMilestone(len(names), total), seen: newMilestone(len(names), total)}
	for k, c := range names {
		v.index[c] = k
		v.last[k] = 100
	}
	// An informer, not a bare watch: it re-lists and watches again when the hub ends a watch.
	ctx, cancel := context.WithCancel(context.Background())
	v.stop = cancel
	b.Cleanup(cancel)
	factory := clusterinformers.NewSharedInformerFactoryWithOptions(hub.Cluster, 0, clusterinformers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", resource).String()
	}))
	inf := factory.Cluster().V1alpha1().AddOnPlacementScores().Informer()
	on := func(o any) {
		if obj, ok := o.(*clusterv1alpha1.AddOnPlacementScore); ok {
			if k, ok := v.index[obj.Namespace]; ok {
				v.saw(k, scoresOf(obj)["load"], time.Now())
			}
		}
	}
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: on, UpdateFunc: func(_, o any) { on(o) }}); err != nil {
		b.Fatal(err)
	}
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("informer did not sync")
	}
	return v
}

// sent records event i as sent now and says its object and value: objects in turn, each value
// different from the object's previous one.
func (v *visibility) sent(i int) (obj int, value int32) {
	obj = i % v.n
	value = int32((i/v.n)%200) - 99 // -99..100, never the warm-up's 100 first
	v.mu.Lock()
	v.sentAt[i], v.value[i] = time.Now(), value
	for _, m := range []*milestone{&v.started, &v.answered, &v.seen} {
		m.waiting[obj] = append(m.waiting[obj], i)
	}
	v.last[obj] = value
	v.mu.Unlock()
	return obj, value
}

// wrote records a write of value to cluster's object: it left at started, the hub answered at
// answered. An object's writes are one at a time, so they come here in the hub's order.
func (v *visibility) wrote(cluster string, value int32, started, answered time.Time) {
	k, ok := v.index[cluster]
	if !ok {
		return
	}
	v.mu.Lock()
	defer v.mu.Unlock()
	v.started.reach(v.value, k, value, started)
	v.answered.reach(v.value, k, value, answered)
}

// saw records that the informer saw value on object k at t.
func (v *visibility) saw(k int, value int32, t time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	before := v.seen.reached
	v.seen.reach(v.value, k, value, t)
	if before < v.total && v.seen.reached == v.total {
		close(v.done)
	}
}

// wait returns each event's latency (POST to seen) once every event has been seen on the hub.
func (v *visibility) wait(b *testing.B, timeout time.Duration) []time.Duration {
	select {
	case <-v.done:
	case <-time.After(timeout):
		v.mu.Lock()
		b.Fatalf("%d of %d events never visible on the hub", v.total-v.seen.reached, v.total)
	}
	v.stop()
	v.mu.Lock()
	defer v.mu.Unlock()
	lat := make([]time.Duration, v.total)
	for i := range lat {
		lat[i] = v.seen.at[i].Sub(v.sentAt[i])
	}
	return lat
}

// logStages logs p50 and p99 of each stage of the events whose write was traced: sent -> write
// started (for a writer: HTTP, decoding, its queue and window), started -> the hub answered,
// answered -> the informer saw it (negative when the watch event came before the answer), and
// started -> saw, which it returns sorted. Percentiles of stages do not add up to the whole's.
func (v *visibility) logStages(b *testing.B, name string) []time.Duration {
	v.mu.Lock()
	defer v.mu.Unlock()
	var took, hubAnswer, watch, write []time.Duration
	for i := range v.sentAt {
		if v.answered.at[i].IsZero() || v.seen.at[i].IsZero() {
			continue
		}
		took = append(took, v.started.at[i].Sub(v.sentAt[i]))
		hubAnswer = append(hubAnswer, v.answered.at[i].Sub(v.started.at[i]))
		watch = append(watch, v.seen.at[i].Sub(v.answered.at[i]))
		write = append(write, v.seen.at[i].Sub(v.started.at[i]))
	}
	if len(took) == 0 {
		b.Logf("%s: no write traced", name)
		return nil
	}
	pct := func(d []time.Duration) string {
		sort.Slice(d, func(i, j int) bool { return d[i] < d[j] })
		return fmt.Sprintf("p50 %.1f p99 %.1f ms", ms(d[len(d)/2]), ms(d[len(d)*99/100]))
	}
	b.Logf("%-14s %d/%d events traced: sent->write started %s; ->hub answered %s; ->informer saw %s (write started->saw %s)",
		name, len(took), v.total, pct(took), pct(hubAnswer), pct(watch), pct(write))
	return write
}

// loadAverage is the machine's 1-minute load average (0 where /proc/loadavg is missing): the
// figures depend on it on a shared machine.
func loadAverage() float64 {
	data, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f, _ := strconv.ParseFloat(strings.Fields(string(data))[0], 64)
	return f
}
