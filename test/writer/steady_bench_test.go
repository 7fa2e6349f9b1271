package writer

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/manifests/lifetime"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// steadyChange is the share of a scorer's clusters whose value moves from one round to the next.
// Of the shipped scorers, a static table never moves; idle CPU over 5 minutes, resources left,
// a forecast updated every 5-minute step and health move for some clusters each minute: a fifth
// of them is a busy fleet's round, not a quiet one's.
const steadyChange = 0.2

// steadyRound is the time between two rounds of the benchmark: the shipped schedules' interval
// (every minute) scaled down so that a run takes under two minutes, with the TTL scaled alike
// (benchSteady). The writer decides what to write from observation times and validities, so what
// it writes per round depends on their ratio, not on the scale.
const steadyRound = 12 * time.Second

// steadyRounds is how many rounds are measured after the baseline: two cycles of write avoidance
// at the shipped ratio (an unchanged object is written every third round).
const steadyRounds = 6

// steadyQPS is the writer's client rate in the benchmark: above the deployed 200, so that a round
// of the scaled schedule is written within nine tenths of the round (benchSteady). Requests and CPU
// per round do not depend on it; whether a fleet keeps up on a hub of R writes a second is
// docs/score-writer.md's arithmetic from these counts.
const steadyQPS = 2000

// BenchmarkFleetSteadyState measures the writer binary in a fleet's steady state: n accepted
// clusters, one scorer per PingSource of deploy/schedules.yaml (five), each of whose rounds is one
// score.updated covering every cluster (2 scores each), the scorers firing together as the
// shipped schedules do, at the deployed writer's TTL, RETRY_FOR, EVENT_DEADLINE, GOMEMLIMIT and
// MAX_SCORE_SERIES; the schedule's interval and the TTL are scaled down together (steadyRound),
// and each event is sent as the broker's dispatcher sends it to the writer's Trigger (45s
// timeout; 5xx and timeouts redelivered).
//
// A first round creates every object, unmeasured. Then, measured:
//   - baseline: a round that changes every value: every object had to be written; its hub
//     requests and the writer's CPU per object written are the cost of one necessary write;
//   - steady: steadyRounds rounds that change steadyChange of the values each. The writes that
//     had to happen are counted object by object: a changed value, or an unchanged one whose
//     stored validity has fallen to half what the refresh gives (write avoidance,
//     docs/score-writer.md), every k-th round since its last write.
//
// Reported: hub requests (writes, and the reads that confirm unchanged values) per necessary
// write, and the writer's CPU per round against the baseline's CPU for the same number of
// necessary writes: 1.0 is a writer that spends nothing on what it did not have to write.
// Checked throughout: no event refused or left unanswered, and no object ever past its validUntil
// or without scores (an informer of this process, sampled every 2s).
//
//	go test ./test/writer -run '^$' -bench 'FleetSteadyState' -benchtime 1x -timeout 20m
func BenchmarkFleetSteadyState(b *testing.B) {
	bin := writerBinary(b, b.TempDir())
	dep := lifetime.Load(b)
	for _, n := range []int{1000} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) { benchSteady(b, bin, dep, n) })
	}
}

// steadyScorer is one PingSource as a scorer of the simulated fleet.
type steadyScorer struct {
	ps       *sourcesv1.PingSource
	resource string
	values   [][2]int32 // per cluster, its two scores now
	moved    []bool     // per cluster, whether the last move changed its values
	written  []int      // per cluster, the round the object was last written in (the model's)
	rng      *rand.Rand // which values move: the scorer's rounds follow one another
}

func benchSteady(b *testing.B, bin string, dep lifetime.Deployment, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	names := fleetClusters(b, n)
	progress(b, "%d clusters registered and accepted in %s", n, time.Since(start).Round(time.Second))

	// The shipped schedules and TTL, scaled to steadyRound.
	every := time.Duration(0)
	var scorers []*steadyScorer
	for k, it := range dep.PingSources {
		ps := it.Object
		at := lifetime.Firings(b, ps, time.Now(), 2, 0)
		if d := at[1].Sub(at[0]); every == 0 {
			every = d
		} else if d != every {
			b.Fatalf("PingSource %s fires every %s, the others every %s: the benchmark scales one interval", ps.Name, d, every)
		}
		var data struct{ Resource string }
		_ = json.Unmarshal([]byte(ps.Spec.Data), &data)
		if data.Resource == "" {
			data.Resource = ps.Name // the health-scorer's resource is its name
		}
		s := &steadyScorer{ps: ps, resource: data.Resource, values: make([][2]int32, n), moved: make([]bool, n), written: make([]int, n),
			rng: rand.New(rand.NewPCG(uint64(n), uint64(k)))}
		for i := range s.values {
			s.values[i] = [2]int32{int32(s.rng.IntN(201) - 100), int32(s.rng.IntN(201) - 100)}
		}
		scorers = append(scorers, s)
	}
	shippedTTL, err := time.ParseDuration(strings.TrimPrefix(deployedEnv(b, "TTL")[0], "TTL="))
	if err != nil {
		b.Fatal(err)
	}
	// k is the rounds between two writes of an unchanged object at the shipped ratio. The scaled
	// TTL keeps k, a tenth of a round short of the ratio that gives k+1: at the shipped ratio an
	// unchanged object's validity falls due (the writer's own write of it, plan.go) on the
	// instant of its k-th round, and whether the round or the timetable writes it (a changed
	// value then twice) is jitter's choice; here the k-th round writes it, with nine tenths of a
	// round to spare.
	ratio := shippedTTL.Seconds() / every.Seconds()
	k := int(math.Floor(ratio/2)) + 1
	ttl := time.Duration((float64(2*k) - 0.1) * float64(steadyRound))
	if got := int(math.Floor(ttl.Seconds()/(2*steadyRound.Seconds()))) + 1; got != k {
		b.Fatalf("scaled TTL %s gives k=%d, the shipped %s every %s k=%d", ttl, got, shippedTTL, every, k)
	}
	progress(b, "%d scorers every %s with TTL %s (an unchanged object written every %d rounds), scaled to every %s with TTL %s",
		len(scorers), every, shippedTTL, k, steadyRound, ttl)

	env := append(deployedEnv(b, "GOMEMLIMIT", "MAX_SCORE_SERIES", "RETRY_FOR", "EVENT_DEADLINE"), "TTL="+ttl.String(),
		fmt.Sprintf("KUBE_API_QPS=%d", steadyQPS), fmt.Sprintf("KUBE_API_BURST=%d", steadyQPS))
	w := startWriterBinary(b, bin, env...)
	watch := watchFleet(ctx, b, scorers, names)

	var (
		refused, timedOut, unanswered atomic.Int64
		maxPending                    atomic.Int64
	)
	// round sends every scorer's event for round r, observed at at, and waits until the writer
	// has answered them and holds nothing pending.
	round := func(r int, at time.Time) {
		time.Sleep(time.Until(at))
		var wg sync.WaitGroup
		for _, s := range scorers {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := w.deliver(ctx, s.event(names, fmt.Sprintf("%s-%d-%d", s.resource, r, at.UnixNano()), at), 8)
				if err != nil {
					b.Errorf("%s round %d: %v", s.resource, r, err)
				}
				refused.Add(int64(res.refused))
				timedOut.Add(int64(res.timedOut))
				if !res.answered {
					unanswered.Add(1)
				}
			}()
		}
		wg.Wait()
		for {
			p := int64(w.metrics(b).sum("scoreflow_writer_pending_updates"))
			maxInt(&maxPending, p)
			if p == 0 {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
	}
	requests := func(m promText, verbs ...string) float64 {
		total := 0.0
		for _, verb := range verbs {
			total += m.sum("scoreflow_writer_api_requests_total", `verb="`+verb+`"`)
		}
		return total
	}

	start = time.Now()
	round(-1, start)
	progress(b, "first round (%d objects created) in %s", len(scorers)*n, time.Since(start).Round(time.Millisecond))
	if b.Failed() {
		return
	}

	// Baseline: every value changes, every object is written.
	t0 := time.Now().Add(time.Second).Truncate(time.Second)
	for _, s := range scorers {
		s.move(1)
	}
	before, cpu := w.metrics(b), w.cpu(b)
	round(0, t0)
	took := time.Since(t0)
	after := w.metrics(b)
	baseCPU := w.cpu(b) - cpu
	baseWrites := requests(after, "update_status") - requests(before, "update_status")
	baseRequests := requests(after, "create", "update_status", "get", "list") - requests(before, "create", "update_status", "get", "list")
	objects := float64(len(scorers) * n)
	progress(b, "baseline round: %d objects changed, %.0f hub writes, %.0f requests, writer CPU %s (%.0f µs per write), answered in %s",
		int(objects), baseWrites, baseRequests, baseCPU, baseCPU.Seconds()/baseWrites*1e6, took.Round(time.Millisecond))
	if baseWrites < objects {
		b.Fatalf("baseline round: %.0f hub writes for %.0f changed objects", baseWrites, objects)
	}

	// The steady rounds, sampled for objects past their validUntil throughout.
	stop := make(chan struct{})
	sampled := make(chan struct{})
	var expiredSamples, samples, maxExpired atomic.Int64
	go func() {
		defer close(sampled)
		t := time.NewTicker(2 * time.Second)
		defer t.Stop()
		for {
			select {
			case <-stop:
				return
			case <-t.C:
			}
			samples.Add(1)
			if e := watch.expired(time.Now()); e > 0 {
				expiredSamples.Add(1)
				maxInt(&maxExpired, int64(e))
			}
		}
	}()
	before, cpu = after, w.cpu(b)
	changed, necessary := 0, 0
	var slowest time.Duration
	for r := 1; r <= steadyRounds; r++ {
		at := t0.Add(time.Duration(r) * steadyRound)
		for _, s := range scorers {
			changed += s.move(steadyChange)
			necessary += s.due(r, k)
		}
		round(r, at)
		slowest = max(slowest, time.Since(at))
	}
	// The writer's own writes of owed validity fall between rounds: wait out the last round's.
	time.Sleep(time.Until(t0.Add(time.Duration(steadyRounds+1) * steadyRound)))
	close(stop)
	<-sampled
	after = w.metrics(b)
	steadyCPU := w.cpu(b) - cpu
	writes := requests(after, "create", "update_status", "delete") - requests(before, "create", "update_status", "delete")
	reads := requests(after, "get", "list") - requests(before, "get", "list")
	perWriteCPU := baseCPU.Seconds() / baseWrites
	cpuRatio := steadyCPU.Seconds() / (float64(necessary) * perWriteCPU)
	progress(b, "%d steady rounds: %d values changed, %d writes had to happen (%.0f%% of objects per round); hub %.0f writes, %.0f reads: "+
		"%.3f requests per necessary write; writer CPU %s (%.0f ms per round), %.2fx the baseline's for the same writes; slowest round written in %s, most pending %d; "+
		"%d attempts refused, %d timed out, %d events unanswered; objects past their validUntil in %d of %d samples (at most %d); writer VmHWM %d MiB",
		steadyRounds, changed, necessary, 100*float64(necessary)/steadyRounds/objects, writes, reads,
		(writes+reads)/float64(necessary), steadyCPU, steadyCPU.Seconds()*1000/steadyRounds, cpuRatio, slowest.Round(time.Millisecond), maxPending.Load(),
		refused.Load(), timedOut.Load(), unanswered.Load(), expiredSamples.Load(), samples.Load(), maxExpired.Load(), w.vm(b, "VmHWM")>>20)

	if refused.Load()+timedOut.Load()+unanswered.Load() > 0 {
		b.Errorf("%d attempts refused, %d timed out, %d events unanswered: the writer did not keep up", refused.Load(), timedOut.Load(), unanswered.Load())
	}
	if expiredSamples.Load() > 0 {
		b.Errorf("objects past their validUntil in %d of %d samples (at most %d at once)", expiredSamples.Load(), samples.Load(), maxExpired.Load())
	}
	if spare := steadyRound * 9 / 10; slowest > spare {
		b.Errorf("a round took %s to write, past the %s that keeps the counts exact", slowest.Round(time.Millisecond), spare)
	}
	b.ReportMetric(objects, "objects")
	b.ReportMetric(float64(necessary)/steadyRounds, "necessary-writes/round")
	b.ReportMetric(writes/steadyRounds, "hub-writes/round")
	b.ReportMetric(reads/steadyRounds, "hub-reads/round")
	b.ReportMetric((writes+reads)/float64(necessary), "requests/necessary-write")
	b.ReportMetric(baseRequests/objects, "baseline-requests/write")
	b.ReportMetric(steadyCPU.Seconds()*1000/steadyRounds, "writer-cpu-ms/round")
	b.ReportMetric(perWriteCPU*1e6, "baseline-cpu-µs/write")
	b.ReportMetric(cpuRatio, "cpu-x-necessary")
	b.ReportMetric(float64(maxPending.Load()), "max-pending")
	b.ReportMetric(float64(expiredSamples.Load()), "expired-samples")
}

// move changes the values of share of the scorer's clusters and returns how many changed.
func (s *steadyScorer) move(share float64) int {
	n := 0
	for i := range s.values {
		s.moved[i] = share >= 1 || s.rng.Float64() < share
		if s.moved[i] {
			if s.values[i][0]++; s.values[i][0] > 100 {
				s.values[i][0] = -100
			}
			s.values[i][1] = -s.values[i][0]
			n++
		}
	}
	return n
}

// due counts the objects round r has to write after the last move, by write avoidance: those
// whose values moved, and those last written k or more rounds ago (their stored validity then
// keeps less than half of what the refresh gives). It records them as written in r.
func (s *steadyScorer) due(r, k int) int {
	n := 0
	for i := range s.written {
		if s.moved[i] || r-s.written[i] >= k {
			s.written[i] = r
			n++
		}
	}
	return n
}

// steadyEvent is one scorer's reply: a score.updated with its id and time.
type steadyEvent struct {
	id       string
	source   string
	observed time.Time
	body     []byte
}

// event is the scorer's score.updated of its values now, for every cluster, observed at observed
// (valid for the writer's TTL from then).
func (s *steadyScorer) event(names []string, id string, observed time.Time) steadyEvent {
	su := contract.ScoreUpdated{Resource: s.resource, Items: make([]contract.ClusterScores, len(names))}
	for i, c := range names {
		su.Items[i] = contract.ClusterScores{Cluster: c, Scores: []contract.Score{{Name: "a", Value: float64(s.values[i][0])}, {Name: "b", Value: float64(s.values[i][1])}}}
	}
	body, _ := json.Marshal(su)
	return steadyEvent{id: id, source: "test/steady/" + s.ps.Name, observed: observed, body: body}
}

// sent is what became of one event sent as the broker's dispatcher sends it.
type sent struct {
	answered          bool // a 2xx came, within the attempts
	refused, timedOut int  // attempts answered 5xx (or 429), attempts with no answer in 45s
}

// deliver sends e as Knative's dispatcher does for the writer's Trigger (triggers/score-writer.yaml):
// each attempt bounded by 45s, redelivered after 5xx, 429 or no answer, backing off from 1s,
// doubling, up to retries times (the backoff capped at 30s).
func (w *fleetSender) deliver(ctx context.Context, e steadyEvent, retries int) (sent, error) {
	var d sent
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(min(time.Second<<min(attempt-1, 5), 30*time.Second)):
			case <-ctx.Done():
				return d, ctx.Err()
			}
		}
		actx, cancel := context.WithTimeout(ctx, 45*time.Second)
		req, err := http.NewRequestWithContext(actx, http.MethodPost, w.url, bytes.NewReader(e.body))
		if err != nil {
			cancel()
			return d, err
		}
		req.Header.Set("Ce-Specversion", "1.0")
		req.Header.Set("Ce-Id", e.id)
		req.Header.Set("Ce-Source", e.source)
		req.Header.Set("Ce-Type", contract.TypeScoreUpdated)
		req.Header.Set("Ce-Time", e.observed.UTC().Format(time.RFC3339Nano))
		req.Header.Set("Content-Type", "application/json")
		resp, err := w.http.Do(req)
		if err == nil {
			_, err = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
		}
		cancel()
		switch {
		case errors.Is(err, context.DeadlineExceeded) && ctx.Err() == nil:
			d.timedOut++
			continue
		case err != nil:
			return d, err
		case resp.StatusCode >= 500 || resp.StatusCode == http.StatusTooManyRequests:
			d.refused++
			continue
		case resp.StatusCode >= 300:
			return d, fmt.Errorf("answered %d", resp.StatusCode)
		}
		d.answered = true
		return d, nil
	}
	return d, nil
}

// fleetWatch follows the fleet's objects on the hub, keeping of each what the check needs.
type fleetWatch struct {
	store     cache.Store
	resources map[string]bool
	clusters  map[string]bool
}

// watchFleet starts an informer on AddOnPlacementScores that keeps the scorers' objects in names'
// namespaces.
func watchFleet(ctx context.Context, b *testing.B, scorers []*steadyScorer, names []string) *fleetWatch {
	f := &fleetWatch{resources: map[string]bool{}, clusters: map[string]bool{}}
	for _, s := range scorers {
		f.resources[s.resource] = true
	}
	for _, c := range names {
		f.clusters[c] = true
	}
	factory := clusterinformers.NewSharedInformerFactoryWithOptions(fastClient(b), 0, clusterinformers.WithTransform(func(obj any) (any, error) {
		o, ok := obj.(*clusterv1alpha1.AddOnPlacementScore)
		if !ok {
			return obj, nil
		}
		out := &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: o.Name, Namespace: o.Namespace, ResourceVersion: o.ResourceVersion}}
		out.Status.ValidUntil = o.Status.ValidUntil
		if len(o.Status.Scores) > 0 {
			out.Status.Scores = o.Status.Scores[:1:1]
		}
		return out, nil
	}))
	inf := factory.Cluster().V1alpha1().AddOnPlacementScores().Informer()
	factory.Start(ctx.Done())
	if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
		b.Fatal("the fleet's informer did not sync")
	}
	f.store = inf.GetStore()
	return f
}

// expired counts the fleet's objects whose validUntil has passed at now, or that hold no score.
func (f *fleetWatch) expired(now time.Time) int {
	n := 0
	for _, obj := range f.store.List() {
		o := obj.(*clusterv1alpha1.AddOnPlacementScore)
		if !f.resources[o.Name] || !f.clusters[o.Namespace] {
			continue
		}
		if len(o.Status.Scores) == 0 || o.Status.ValidUntil != nil && !o.Status.ValidUntil.Time.After(now) {
			n++
		}
	}
	return n
}

// maxInt raises m to v if v is larger.
func maxInt(m *atomic.Int64, v int64) {
	for {
		cur := m.Load()
		if v <= cur || m.CompareAndSwap(cur, v) {
			return
		}
	}
}
