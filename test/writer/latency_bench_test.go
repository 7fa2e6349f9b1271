package writer

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/tools/cache"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// BenchmarkScoreWriterLatency measures the time from POSTing a score.updated (one cluster item) to
// the writer's HTTP handler to its score being visible on the hub (an informer sees it, or a newer
// value that superseded it), at a steady 100 events/s, with the writer at its deployed settings
// (functions/score-writer's defaults: 10ms window, 64 workers, client QPS 200, burst 400).
// Two schedulings, each its own writer: wait-when-idle (every update waits the window first: the
// baseline) and at-once (an idle object is written at once; updates arriving while it is written
// or within the window after that write started share the next write). They take turns, 2s each,
// through one op, so that both see the same machine: it is shared and its load swings within
// seconds. Two shapes: events spread over 100 objects (each object idle between its updates, one
// a second) and all on one hot object.
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
	latencyTurn = 200 // events in a row to one writer: 2s
	// latencyRound is the events of one op per scheduling: 10s at 100 events/s each.
	latencyRound = 1000
)

// latencyRun is one scheduling's writer and what was sent to it.
type latencyRun struct {
	name     string
	s        *server
	resource string
	v        *visibility
	sent     int
	writes   float64
}

func benchLatency(b *testing.B, names []string) {
	base := time.Now().Add(-time.Minute)
	total := b.N * latencyRound
	var runs []*latencyRun
	for _, sched := range []struct {
		name string
		idle bool
	}{{"wait-when-idle", true}, {"at-once", false}} {
		opts := scorewriter.DefaultOptions()
		opts.WaitWhenIdle = sched.idle
		r := &latencyRun{name: sched.name, s: startWriter(b, serverOpts{hub: deployedHub(), writer: opts}),
			resource: fmt.Sprintf("latency-%d-%s", len(names), sched.name)}
		// Every object exists before timing starts: updates are measured, not creates.
		var items []contract.ClusterScores
		for _, c := range names {
			items = append(items, item(c, score("load", 100)))
		}
		if st, reply := r.s.send(b, scoreEvent(b, base, contract.ScoreUpdated{Resource: r.resource, Items: items})); st != http.StatusOK || result(b, reply).Failed() {
			b.Fatalf("%s warm-up: %d", r.name, st)
		}
		r.v = newVisibility(b, r.resource, names, total)
		runs = append(runs, r)
	}
	time.Sleep(100 * time.Millisecond) // the objects rested
	for _, r := range runs {
		r.writes = -r.s.apiRequests(b, "create", "update_status")
	}
	load := loadAverage()
	b.ResetTimer()
	tick := time.NewTicker(time.Second / latencyRate)
	defer tick.Stop()
	var wg sync.WaitGroup
	for turn := 0; runs[len(runs)-1].sent < total; turn++ {
		r := runs[turn%len(runs)]
		for j := 0; j < latencyTurn && r.sent < total; j++ {
			<-tick.C
			i := r.sent
			r.sent++
			obj, value := r.v.sent(i)
			e := scoreEvent(b, base.Add(time.Duration(i+1)*time.Microsecond), contract.ScoreUpdated{Resource: r.resource, Items: []contract.ClusterScores{item(names[obj], score("load", float64(value)))}})
			wg.Add(1)
			go func() {
				defer wg.Done()
				if st, reply := r.s.send(b, e); st != http.StatusOK || result(b, reply).Failed() {
					b.Errorf("%s event %d: %d", r.name, i, st)
				}
			}()
		}
	}
	wg.Wait()
	lats := make([][]time.Duration, len(runs))
	for k, r := range runs {
		lats[k] = r.v.wait(b, 30*time.Second)
	}
	b.StopTimer()
	load = (load + loadAverage()) / 2

	ms := func(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
	for k, r := range runs {
		lat := lats[k]
		sort.Slice(lat, func(i, j int) bool { return lat[i] < lat[j] })
		b.ReportMetric(ms(lat[len(lat)/2]), r.name+"-p50-ms")
		b.ReportMetric(ms(lat[len(lat)*99/100]), r.name+"-p99-ms")
		b.ReportMetric((r.writes+r.s.apiRequests(b, "create", "update_status"))/float64(total), r.name+"-api-writes/event")
		for o, c := range names {
			if got, want := scoresOf(get(b, c, r.resource))["load"], r.v.last[o]; got != want {
				b.Errorf("%s: %s: load=%d on the hub, last sent %d", r.name, c, got, want)
			}
		}
	}
	b.ReportMetric(load, "load-avg")
}

// visibility follows, per object, the values sent and the values the hub shows (through a watch),
// and times each event from its POST to its value, or a newer one, being on the hub.
type visibility struct {
	mu      sync.Mutex
	n       int         // objects
	sentAt  []time.Time // per event
	value   []int32     // per event
	waiting [][]int     // per object: events sent, not yet seen, in order
	last    []int32     // per object: the last value sent
	lat     []time.Duration
	done    chan struct{} // closed when every event has been seen
	total   int
	stop    func()
}

func newVisibility(b *testing.B, resource string, names []string, total int) *visibility {
	v := &visibility{n: len(names), sentAt: make([]time.Time, total), value: make([]int32, total),
		waiting: make([][]int, len(names)), last: make([]int32, len(names)), done: make(chan struct{}), total: total}
	index := map[string]int{}
	for k, c := range names {
		index[c] = k
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
			if k, ok := index[obj.Namespace]; ok {
				v.seen(k, scoresOf(obj)["load"], time.Now())
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
	v.waiting[obj] = append(v.waiting[obj], i)
	v.last[obj] = value
	v.mu.Unlock()
	return obj, value
}

// seen takes the newest waiting event of object k with this value, and every one sent before it,
// as visible at t: an older update superseded by a newer one has been overtaken, not lost.
func (v *visibility) seen(k int, value int32, t time.Time) {
	v.mu.Lock()
	defer v.mu.Unlock()
	q := v.waiting[k]
	at := -1
	for j := len(q) - 1; j >= 0; j-- {
		if v.value[q[j]] == value {
			at = j
			break
		}
	}
	for _, i := range q[:at+1] {
		v.lat = append(v.lat, t.Sub(v.sentAt[i]))
	}
	v.waiting[k] = q[at+1:]
	if len(v.lat) == v.total {
		close(v.done)
	}
}

// wait returns the latencies once every event has been seen on the hub.
func (v *visibility) wait(b *testing.B, timeout time.Duration) []time.Duration {
	select {
	case <-v.done:
	case <-time.After(timeout):
		v.mu.Lock()
		b.Fatalf("%d of %d events never visible on the hub", v.total-len(v.lat), v.total)
	}
	v.stop()
	v.mu.Lock()
	defer v.mu.Unlock()
	return v.lat
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
