package writer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"net/http"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/tools/cache"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	clusterinformers "open-cluster-management.io/api/client/cluster/informers/externalversions"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/manifests/lifetime"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// steadyChange is the share of a scorer's clusters whose value moves from one round to the next.
// Of the shipped scorers, a static table never moves; idle CPU over 5 minutes, resources left,
// a forecast updated every 5-minute step and health move for some clusters each minute: a fifth
// of them is a busy fleet's round, not a quiet one's.
const steadyChange = 0.2

// steadyWindow is the least time the measured rounds span.
const steadyWindow = 5 * time.Minute

// steadyReply is how long after its ping a scorer's score.updated reaches the writer (the
// scorer's query and the broker's two hops); the scores are dated at the ping. Half a second off
// the whole second, so that no time the writer acts on (a ping, owed validity falling due, all
// on whole seconds) ties with a reply's arrival.
const steadyReply = 1500 * time.Millisecond

// steadyBaselineClusters bounds the baseline round: five scorers' changed values of 1,000
// clusters are 5,000 writes, 25s at the deployed 200 a second, inside the event deadline.
const steadyBaselineClusters = 1000

// steadySetupQPS is the client rate of the writer that lays the fleet out before the
// measurement; that writer is not measured.
const steadySetupQPS = 2000

// steadySchedule is what sets a fleet's steady state apart from its size: the scorers'
// PingSources (one scorer each) and the TTL the writer gives their scores.
type steadySchedule struct {
	name  string
	pings []*sourcesv1.PingSource
	ttl   time.Duration
}

// BenchmarkFleetSteadyState measures the writer binary in a fleet's steady state: n accepted
// clusters, one scorer per PingSource (five), each ping answered by one score.updated covering
// every cluster (2 scores each) steadyReply after the ping and dated at it, the PingSources'
// schedules as their crons fire them, for at least steadyWindow. The writer runs at the deployed
// client rate and burst (the binary's defaults: deploy/score-writer.yaml sets none), RETRY_FOR,
// EVENT_DEADLINE, GOMEMLIMIT and MAX_SCORE_SERIES, with the schedule's TTL, and each event is
// sent as the broker's dispatcher sends it to the writer's Trigger (45s timeout; 5xx and
// timeouts redelivered).
//
// Schedules: "shipped" is deploy/schedules.yaml with the deployed TTL; "large-fleet" is the
// variant config/large-fleet (the same scorers every 2 minutes, 24s apart, TTL 15m).
//
// Before the measurement, unmeasured: a writer with a raised client rate creates every object and
// gives it the validity it would hold in a steady state (the objects' last writes spread evenly
// over the rounds write avoidance leaves between two writes of an unchanged value). Then, on the
// measured writer:
//   - baseline: a round that changes every value of up to steadyBaselineClusters clusters: its
//     hub requests and the writer's CPU per object written are the cost of one necessary write;
//   - steady: the schedule's rounds, each changing steadyChange of the values. The writes that
//     had to happen are counted object by object by the writer's rule (validityModel): a
//     changed value, an unchanged one whose stored validUntil keeps less than half of what the
//     reply gives, and validity owed from a skipped reply when it falls due; where owed validity
//     falls due on a ping, as the fewest and the most the rule makes.
//
// Reported: hub requests a minute against the writes that had to happen a minute (and per
// necessary write, the fewest), the writer's CPU against the baseline's for the same writes, and whether the
// writer kept up: every event answered before its scorer's next ping without a 503 or timeout,
// the pending updates' peak, and no object past its validUntil or without scores (an informer of
// this process, sampled every 2s). A configuration that docs/score-writer.md's arithmetic says
// fits the hub fails the benchmark when it does not keep up; one the arithmetic says does not fit
// is reported, with its figures, as not keeping up.
//
//	go test ./test/writer -run '^$' -bench 'FleetSteadyState/shipped/clusters=1000$' -benchtime 1x -timeout 30m
//	go test ./test/writer -run '^$' -bench 'FleetSteadyState/shipped/clusters=10000$' -benchtime 1x -timeout 1h
//	go test ./test/writer -run '^$' -bench 'FleetSteadyState/large-fleet/clusters=10000$' -benchtime 1x -timeout 1h
func BenchmarkFleetSteadyState(b *testing.B) {
	bin := writerBinary(b, b.TempDir())
	shipped := shippedSchedule(b, lifetime.Load(b))
	large := variantSchedule(b, "large-fleet")
	for _, c := range []struct {
		sched steadySchedule
		n     int
	}{{shipped, 1000}, {shipped, 10000}, {large, 10000}} {
		b.Run(fmt.Sprintf("%s/clusters=%d", c.sched.name, c.n), func(b *testing.B) { benchSteady(b, bin, c.sched, c.n) })
	}
}

// shippedSchedule is deploy/'s: its PingSources and the score-writer's TTL.
func shippedSchedule(b *testing.B, dep lifetime.Deployment) steadySchedule {
	s := steadySchedule{name: "shipped"}
	for _, it := range dep.PingSources {
		s.pings = append(s.pings, it.Object)
	}
	ttl, err := time.ParseDuration(strings.TrimPrefix(deployedEnv(b, "TTL")[0], "TTL="))
	if err != nil {
		b.Fatal(err)
	}
	s.ttl = ttl
	return s
}

// variantSchedule is config/<variant>'s, as kustomize builds it: its PingSources and the
// score-writer's TTL.
func variantSchedule(b *testing.B, variant string) steadySchedule {
	items, err := manifests.Build(filepath.Join("..", "..", "config", variant))
	if err != nil {
		b.Fatal(err)
	}
	s := steadySchedule{name: variant}
	for _, it := range items {
		o := it.Object
		switch {
		case o.GetKind() == "PingSource":
			var ps sourcesv1.PingSource
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &ps); err != nil {
				b.Fatal(err)
			}
			s.pings = append(s.pings, &ps)
		case o.GetKind() == "Service" && o.GetName() == "score-writer":
			containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
			for _, c := range containers {
				env, _, _ := unstructured.NestedSlice(c.(map[string]any), "env")
				for _, e := range env {
					if e := e.(map[string]any); e["name"] == "TTL" {
						if s.ttl, err = time.ParseDuration(fmt.Sprint(e["value"])); err != nil {
							b.Fatal(err)
						}
					}
				}
			}
		}
	}
	if len(s.pings) == 0 || s.ttl == 0 {
		b.Fatalf("config/%s: %d PingSources, the writer's TTL %s", variant, len(s.pings), s.ttl)
	}
	return s
}

// interval is how often each of the schedule's PingSources fires (the same for all, or the
// benchmark fails), and the largest number of them that fire at the same instant.
func (s steadySchedule) interval(b *testing.B) (every time.Duration, together int) {
	from := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	at := map[time.Duration]int{}
	for _, ps := range s.pings {
		f := lifetime.Firings(b, ps, from, 3, 0)
		d := f[1].Sub(f[0])
		if f[2].Sub(f[1]) != d || every != 0 && d != every {
			b.Fatalf("PingSource %s (%q) does not fire every %s: the benchmark takes one interval", ps.Name, ps.Spec.Schedule, every)
		}
		every = d
		at[f[0].Sub(from)]++
		together = max(together, at[f[0].Sub(from)])
	}
	return every, together
}

// spread is k, the rounds between two writes of an unchanged value when each reply's validity is
// written when the stored one keeps less than half of it: ⌊TTL / (2 × interval)⌋ + 1. The setup
// spreads the objects' last writes over k rounds.
func (s steadySchedule) spread(every time.Duration) int {
	return int(math.Floor(s.ttl.Seconds()/(2*every.Seconds()))) + 1
}

// writeShare is w, the share of a scorer's objects a round writes in a steady state with
// steadyChange of the values changing, by the writer's rule as refresh counts it: the mean of
// rounds 40 to 79 of a model scorer of 2,000 objects, counting the most writes the rule makes
// (validityModel).
func (s steadySchedule) writeShare(every time.Duration) float64 {
	const n, warm, rounds = 2000, 40, 80
	m := &steadyScorer{values: make([][2]int32, n), moved: make([]bool, n), most: newValidityModel(n, false), rng: rand.New(rand.NewPCG(1, 2))}
	t0 := time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)
	k := s.spread(every)
	for i := range n {
		m.most.set(i, t0.Add(-time.Duration(k-i%k)*every).Add(s.ttl))
	}
	writes := 0
	for r := range rounds {
		m.move(steadyChange)
		if w := m.most.refresh(m.moved, t0.Add(time.Duration(r)*every), s.ttl); r >= warm {
			writes += w
		}
	}
	return float64(writes) / (rounds - warm) / n
}

// sustains is the fleet docs/score-writer.md's arithmetic says the schedule keeps up with on a
// hub landing rate writes a second: the smaller of throughput (a round's writes land within the
// interval) and answers (the writes of the events that fire together land within the deadline).
func (s steadySchedule) sustains(every time.Duration, together int, deadline time.Duration, rate float64) int {
	w := s.writeShare(every)
	throughput := every.Seconds() * rate / (float64(len(s.pings)) * w)
	answers := deadline.Seconds() * rate / (float64(together) * w)
	return int(math.Min(throughput, answers))
}

// steadyScorer is one PingSource as a scorer of the simulated fleet, with the model of what the
// writer holds of its objects.
type steadyScorer struct {
	ps       *sourcesv1.PingSource
	resource string
	at       []time.Time    // the measured pings
	values   [][2]int32     // per cluster, its two scores now
	moved    []bool         // per cluster, whether the last move changed its values
	most     *validityModel // the hub by the writer's rule, owed validity written apart
	fewest   *validityModel // the same, owed validity due with a ping written with its reply
	rng      *rand.Rand     // which values move: the scorer's rounds follow one another
}

// steadyClusterNames are the fleets registered in this process, by size: the schedules share them.
var steadyClusterNames = map[int][]string{}

func benchSteady(b *testing.B, bin string, sched steadySchedule, n int) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	start := time.Now()
	names, ok := steadyClusterNames[n]
	if !ok {
		names = fleetClusters(b, n)
		steadyClusterNames[n] = names
		progress(b, "%d clusters registered and accepted in %s", n, time.Since(start).Round(time.Second))
	}

	deadlineEnv := deployedEnv(b, "EVENT_DEADLINE")[0]
	deadline, err := time.ParseDuration(strings.TrimPrefix(deadlineEnv, "EVENT_DEADLINE="))
	if err != nil {
		b.Fatal(err)
	}
	every, together := sched.interval(b)
	k, w := sched.spread(every), sched.writeShare(every)
	sustains := sched.sustains(every, together, deadline, deployedQPS)
	rounds := int(math.Ceil(float64(steadyWindow) / float64(every)))
	var scorers []*steadyScorer
	for j, ps := range sched.pings {
		var data struct{ Resource string }
		_ = json.Unmarshal([]byte(ps.Spec.Data), &data)
		if data.Resource == "" {
			data.Resource = ps.Name // the health-scorer's resource is its name
		}
		s := &steadyScorer{ps: ps, resource: data.Resource, values: make([][2]int32, n), moved: make([]bool, n),
			most: newValidityModel(n, false), fewest: newValidityModel(n, true), rng: rand.New(rand.NewPCG(uint64(n), uint64(j)))}
		for i := range s.values {
			s.values[i] = [2]int32{int32(s.rng.IntN(201) - 100), int32(s.rng.IntN(201) - 100)}
		}
		scorers = append(scorers, s)
	}
	objects := float64(len(scorers) * n)
	progress(b, "%s: %d scorers every %s (at most %d at once), TTL %s: at most %.1f%% of the objects written a round at %.0f%% change (setup spreads the last writes over %d rounds); "+
		"docs/score-writer.md's arithmetic: %d clusters on a hub landing %d writes/s", sched.name, len(scorers), every, together, sched.ttl, 100*w, 100*steadyChange, k, sustains, deployedQPS)

	// Setup, unmeasured. Every object is created by a writer with a raised client rate, valid for
	// an hour and dated well before anything measured; then each gets the validity a steady state
	// would leave it: cluster i of a scorer as last written k-(i mod k) intervals before its
	// first measured ping. (Explicit validUntils, each shorter than the hour: a change.)
	setup := startWriterBinary(b, bin, "TTL="+sched.ttl.String(),
		fmt.Sprintf("KUBE_API_QPS=%d", steadySetupQPS), fmt.Sprintf("KUBE_API_BURST=%d", steadySetupQPS))
	dated := time.Now().Add(-10 * time.Minute).Truncate(time.Second)
	hour := time.Now().Add(time.Hour).Truncate(time.Second)
	t := time.Now()
	for _, s := range scorers {
		steadySetup(ctx, b, setup, s.event(names, nil, "setup-create", dated, &hour))
	}
	created := time.Since(t)
	progress(b, "setup: %d objects created in %s", int(objects), created.Round(time.Second))

	// The first measured pings: after the spread's writes (half the creation's requests), the
	// measured writer's start and the baseline round.
	from := time.Now().Add(created/2*3/2 + 100*time.Second)
	first := time.Time{}
	for _, s := range scorers {
		s.at = lifetime.Firings(b, s.ps, from, rounds, 0)
		if first.IsZero() || s.at[0].Before(first) {
			first = s.at[0]
		}
	}
	t = time.Now()
	var spread sync.WaitGroup
	for _, s := range scorers {
		for g := range k {
			var idx []int
			for i := g; i < n; i += k {
				idx = append(idx, i)
			}
			until := s.at[0].Add(-time.Duration(k-g) * every).Add(sched.ttl)
			for _, i := range idx {
				s.most.set(i, until)
				s.fewest.set(i, until)
			}
			spread.Add(1)
			go func() {
				defer spread.Done()
				steadySetup(ctx, b, setup, s.event(names, idx, fmt.Sprintf("setup-spread-%d", g), dated.Add(time.Second), &until))
			}()
		}
	}
	spread.Wait()
	setup.p.Stop(30 * time.Second)
	progress(b, "setup: validity spread over %d rounds in %s; first measured ping at %s", k, time.Since(t).Round(time.Second), first.Format(time.TimeOnly))
	if b.Failed() {
		return
	}

	// The writer measured: the deployed settings, the schedule's TTL.
	env := append(deployedEnv(b, "GOMEMLIMIT", "MAX_SCORE_SERIES", "RETRY_FOR", "EVENT_DEADLINE"), deployedClientEnv(b)...)
	w1 := startWriterBinary(b, bin, append(env, "TTL="+sched.ttl.String())...)
	watch := watchFleet(ctx, b, scorers, names)
	requests := func(m promText, verbs ...string) float64 {
		total := 0.0
		for _, verb := range verbs {
			total += m.sum("scoreflow_writer_api_requests_total", `verb="`+verb+`"`)
		}
		return total
	}
	drain := func(limit time.Duration) (pending int64) {
		for end := time.Now().Add(limit); ; time.Sleep(200 * time.Millisecond) {
			if pending = int64(w1.metrics(b).sum("scoreflow_writer_pending_updates")); pending == 0 || time.Now().After(end) {
				return pending
			}
		}
	}

	// Baseline: every value of the first clusters changes, dated two rounds before each scorer's
	// first measured ping (a time on the schedule, as a ping's), so every one of those objects
	// is written.
	slice := min(n, steadyBaselineClusters)
	idx := make([]int, slice)
	for i := range idx {
		idx[i] = i
	}
	var last time.Time
	for _, s := range scorers {
		last = maxTime(last, s.at[0].Add(-2*every))
	}
	time.Sleep(time.Until(last.Add(time.Second)))
	before, cpu := w1.metrics(b), w1.cpu(b)
	t = time.Now()
	var base sync.WaitGroup
	for _, s := range scorers {
		dated := s.at[0].Add(-2 * every)
		for _, i := range idx {
			s.values[i][0] = s.values[i][0]%100 + 1
			s.values[i][1] = -s.values[i][0]
			s.most.set(i, dated.Add(sched.ttl))
			s.fewest.set(i, dated.Add(sched.ttl))
		}
		e := s.event(names, idx, fmt.Sprintf("%s-baseline", s.resource), dated, nil)
		base.Add(1)
		go func() {
			defer base.Done()
			res, err := w1.deliver(ctx, e, 8)
			if err != nil || !res.answered || res.refused+res.timedOut+res.failed > 0 {
				b.Errorf("baseline %s: %v, answered %v, %d refused, %d timed out, %d items failed", s.resource, err, res.answered, res.refused, res.timedOut, res.failed)
			}
		}()
	}
	base.Wait()
	drain(time.Minute)
	took := time.Since(t)
	after := w1.metrics(b)
	baseCPU := w1.cpu(b) - cpu
	baseObjects := float64(slice * len(scorers))
	baseWrites := requests(after, "update_status") - requests(before, "update_status")
	baseRequests := requests(after, "create", "update_status", "delete", "get", "list") - requests(before, "create", "update_status", "delete", "get", "list")
	perWriteCPU := baseCPU.Seconds() / baseWrites
	progress(b, "baseline round: %d objects changed, %.0f hub writes, %.0f requests, writer CPU %s (%.0f µs per write), answered in %s",
		int(baseObjects), baseWrites, baseRequests, baseCPU, perWriteCPU*1e6, took.Round(time.Millisecond))
	if baseWrites < baseObjects {
		b.Fatalf("baseline round: %.0f hub writes for %.0f changed objects", baseWrites, baseObjects)
	}
	if late := time.Since(first.Add(-time.Second)); late > 0 {
		b.Fatalf("setup and baseline ended %s after the first measured ping should have come", late.Round(time.Millisecond))
	}

	// The steady rounds, each scorer on its own pings, the writer's pending updates and the
	// objects past their validUntil sampled throughout.
	stop := make(chan struct{})
	sampled := make(chan struct{})
	var expiredSamples, samples, maxExpired, maxPending atomic.Int64
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
			if p, err := w1.pending(); err == nil {
				maxInt(&maxPending, p)
			}
			if e := watch.expired(time.Now()); e > 0 {
				expiredSamples.Add(1)
				maxInt(&maxExpired, int64(e))
			}
		}
	}()
	end := first
	for _, s := range scorers {
		end = maxTime(end, s.at[len(s.at)-1].Add(every))
	}
	time.Sleep(time.Until(first.Add(-time.Second)))
	before, cpu = w1.metrics(b), w1.cpu(b)
	var (
		changed, necessary, mostNecessary          atomic.Int64
		refused, timedOut, unanswered, lateAnswers atomic.Int64
		failedItems                                atomic.Int64
		slowest                                    atomic.Int64
		scoring, deliveries                        sync.WaitGroup
	)
	for _, s := range scorers {
		scoring.Add(1)
		go func() {
			defer scoring.Done()
			for r, at := range s.at {
				select {
				case <-time.After(time.Until(at.Add(steadyReply))):
				case <-ctx.Done():
					return
				}
				changed.Add(int64(s.move(steadyChange)))
				necessary.Add(int64(s.fewest.refresh(s.moved, at, sched.ttl)))
				mostNecessary.Add(int64(s.most.refresh(s.moved, at, sched.ttl)))
				e := s.event(names, nil, fmt.Sprintf("%s-%d-%d", s.resource, r, at.Unix()), at, nil)
				deliveries.Add(1)
				go func() {
					defer deliveries.Done()
					res, err := w1.deliver(ctx, e, 8)
					if err != nil {
						b.Errorf("%s round %d: %v", s.resource, r, err)
					}
					refused.Add(int64(res.refused))
					timedOut.Add(int64(res.timedOut))
					failedItems.Add(int64(res.failed))
					if !res.answered {
						unanswered.Add(1)
						return
					}
					took := time.Since(at)
					maxInt(&slowest, int64(took))
					if took > every {
						lateAnswers.Add(1)
					}
				}()
			}
		}()
	}
	scoring.Wait()
	deliveries.Wait()
	// The window ends half a second before the next ping would come: validity owed then falls
	// due on the whole second, and the writer's timetable writes it at once.
	closed := end.Add(-500 * time.Millisecond)
	time.Sleep(time.Until(closed))
	for _, s := range scorers {
		necessary.Add(int64(s.fewest.owedBy(closed)))
		mostNecessary.Add(int64(s.most.owedBy(closed)))
	}
	leftPending := int64(w1.metrics(b).sum("scoreflow_writer_pending_updates"))
	if leftPending > 0 {
		progress(b, "%d updates still pending at the end of the window: waiting for them", leftPending)
		leftPending = drain(10 * time.Minute)
	}
	close(stop)
	<-sampled
	after = w1.metrics(b)
	steadyCPU := w1.cpu(b) - cpu
	measured := time.Since(first.Add(-time.Second))
	window := closed.Sub(first)
	writes := requests(after, "create", "update_status", "delete") - requests(before, "create", "update_status", "delete")
	reads := requests(after, "get", "list") - requests(before, "get", "list")
	need, most := float64(necessary.Load()), float64(mostNecessary.Load())
	perMin := func(x float64, d time.Duration) float64 { return x / d.Minutes() }
	cpuRatio := steadyCPU.Seconds() / (need * perWriteCPU)
	progress(b, "steady: %d rounds per scorer over %s: %d values changed (%.0f/min), %.0f to %.0f writes had to happen (%.0f to %.0f/min); "+
		"hub %.0f writes and %.0f reads in %s: %.0f requests/min, %.3f per necessary write (%.3f against the most); writer CPU %s (%.0f ms/min), %.2fx the baseline's for the same writes; "+
		"slowest answer %s after its ping, %d answered after the scorer's next ping, most pending %d; %d attempts answered 503, %d timed out, %d events unanswered; "+
		"objects past their validUntil in %d of %d samples (at most %d); writer VmHWM %d MiB",
		rounds, window.Round(time.Second), changed.Load(), perMin(float64(changed.Load()), window), need, most, perMin(need, window), perMin(most, window),
		writes, reads, measured.Round(time.Second), perMin(writes+reads, measured), (writes+reads)/need, (writes+reads)/most, steadyCPU, perMin(steadyCPU.Seconds()*1000, window), cpuRatio,
		time.Duration(slowest.Load()).Round(time.Millisecond), lateAnswers.Load(), maxPending.Load(), refused.Load(), timedOut.Load(), unanswered.Load(),
		expiredSamples.Load(), samples.Load(), maxExpired.Load(), w1.vm(b, "VmHWM")>>20)

	keptUp := refused.Load()+timedOut.Load()+unanswered.Load()+lateAnswers.Load()+failedItems.Load()+expiredSamples.Load()+leftPending == 0
	verdict := fmt.Sprintf("%s at %d clusters: %d attempts answered 503, %d timed out, %d events unanswered, %d answered after the next ping (slowest %s), "+
		"%d items answered not written, pending peak %d, objects past their validUntil in %d of %d samples (at most %d at once); the arithmetic gives %d clusters",
		sched.name, n, refused.Load(), timedOut.Load(), unanswered.Load(), lateAnswers.Load(), time.Duration(slowest.Load()).Round(time.Second), failedItems.Load(),
		maxPending.Load(), expiredSamples.Load(), samples.Load(), maxExpired.Load(), sustains)
	switch {
	case keptUp:
		progress(b, "KEEPS UP: %s", verdict)
	case n <= sustains:
		b.Errorf("DOES NOT KEEP UP, where docs/score-writer.md's arithmetic says it fits: %s", verdict)
	default:
		progress(b, "DOES NOT KEEP UP (as docs/score-writer.md's arithmetic says): %s", verdict)
	}
	kept := 0.0
	if keptUp {
		kept = 1
	}
	b.ReportMetric(objects, "objects")
	b.ReportMetric(perMin(need, window), "necessary-writes/min")
	b.ReportMetric(perMin(most, window), "most-writes/min")
	b.ReportMetric(perMin(float64(changed.Load()), window), "changed-values/min")
	b.ReportMetric(perMin(writes+reads, measured), "hub-requests/min")
	b.ReportMetric((writes+reads)/need, "requests/necessary-write")
	b.ReportMetric(baseRequests/baseObjects, "baseline-requests/write")
	b.ReportMetric(perMin(steadyCPU.Seconds()*1000, window), "writer-cpu-ms/min")
	b.ReportMetric(perWriteCPU*1e6, "baseline-cpu-µs/write")
	b.ReportMetric(cpuRatio, "cpu-x-necessary")
	b.ReportMetric(float64(maxPending.Load()), "max-pending")
	b.ReportMetric(float64(refused.Load()), "refused-503")
	b.ReportMetric(float64(timedOut.Load()), "timed-out")
	b.ReportMetric(float64(failedItems.Load()), "items-not-written")
	b.ReportMetric(float64(maxExpired.Load()), "max-expired")
	b.ReportMetric(kept, "kept-up")
}

// pending is the writer's pending updates now.
func (w *writerProcess) pending() (int64, error) {
	resp, err := w.http.Get(w.url + "/metrics")
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	var lines promText
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		lines = append(lines, sc.Text())
	}
	return int64(lines.sum("scoreflow_writer_pending_updates")), sc.Err()
}

// steadySetup sends e to the setup writer and fails b unless every item is written.
func steadySetup(ctx context.Context, b *testing.B, w *writerProcess, e steadyEvent) {
	res, err := w.deliverWithin(ctx, e, 0, time.Hour)
	if err != nil || !res.answered || res.failed > 0 {
		b.Errorf("setup event %s: %v (answered %v, %d items failed)", e.id, err, res.answered, res.failed)
	}
}

// deployedClientEnv is the writer's client rate and burst as deploy/score-writer.yaml sets them;
// none when it leaves them to the binary's defaults (deployedQPS, deployedBurst).
func deployedClientEnv(b *testing.B) []string {
	var out []string
	for _, name := range []string{"KUBE_API_QPS", "KUBE_API_BURST"} {
		if env, err := manifests.ServiceEnv(filepath.Join("..", "..", "deploy", "score-writer.yaml"), "scoreflow", "score-writer", name); err == nil {
			out = append(out, env...)
		}
	}
	if len(out) > 0 {
		b.Fatalf("deploy/score-writer.yaml sets %v: the arithmetic here takes the binary's defaults (%d, %d)", out, deployedQPS, deployedBurst)
	}
	return out
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

// validityModel is what the hub holds of a scorer's objects, by the writer's rule
// (pkg/scorewriter plan.go): per cluster the stored validUntil and the validity owed from skipped
// replies.
//
// Where the TTL is an odd number of intervals, owed validity falls due on the instant of a ping,
// before that ping's reply comes. A writer with nothing queued writes it at once, and the reply
// then finds a validity one interval shorter than its own: unchanged values are written one round
// sooner, and a changed value twice. A writer still busy with the owed writes when the reply
// comes writes the reply's value and validity in their place. merge chooses the second: the
// model without it counts the most writes the rule makes, with it the fewest.
type validityModel struct {
	stored, owed []time.Time
	merge        bool
}

func newValidityModel(n int, merge bool) *validityModel {
	return &validityModel{stored: make([]time.Time, n), owed: make([]time.Time, n), merge: merge}
}

// set has the hub hold validUntil for cluster i, nothing owed.
func (m *validityModel) set(i int, validUntil time.Time) {
	m.stored[i], m.owed[i] = validUntil, time.Time{}
}

// refresh counts the writes for one ping dated observed, its reply arriving steadyReply later
// with the values moved changed: owed validity that falls due first, then a changed value, or an
// unchanged one whose stored validUntil keeps less than half of what the reply gives; an
// unchanged value skipped owes the reply's validity.
func (m *validityModel) refresh(moved []bool, observed time.Time, ttl time.Duration) int {
	arrives, given := observed.Add(steadyReply), observed.Add(ttl)
	n := 0
	for i := range m.stored {
		if o := m.owed[i]; !o.IsZero() {
			if due := halfValidity(m.stored[i], o); due.Before(arrives) {
				n++
				if m.merge && !due.Before(observed) {
					m.set(i, given)
					continue
				}
				m.set(i, o)
			}
		}
		if moved[i] || arrives.After(halfValidity(m.stored[i], given)) {
			m.set(i, given)
			n++
		} else {
			m.owed[i] = given
		}
	}
	return n
}

// owedBy counts the owed validity that falls due before t, as written.
func (m *validityModel) owedBy(t time.Time) int {
	n := 0
	for i, o := range m.owed {
		if !o.IsZero() && halfValidity(m.stored[i], o).Before(t) {
			m.set(i, o)
			n++
		}
	}
	return n
}

// halfValidity is when a stored validUntil keeps only half of what given gives (plan.go halfway).
func halfValidity(stored, given time.Time) time.Time { return stored.Add(-given.Sub(stored)) }

func maxTime(a, b time.Time) time.Time {
	if b.After(a) {
		return b
	}
	return a
}

// steadyEvent is one scorer's reply: a score.updated with its id and time.
type steadyEvent struct {
	id       string
	source   string
	observed time.Time
	body     []byte
}

// event is the scorer's score.updated of its values now, for the clusters idx (every cluster when
// nil), observed at observed, valid until validUntil (the writer's TTL from observed when nil).
func (s *steadyScorer) event(names []string, idx []int, id string, observed time.Time, validUntil *time.Time) steadyEvent {
	if idx == nil {
		idx = make([]int, len(names))
		for i := range idx {
			idx[i] = i
		}
	}
	su := contract.ScoreUpdated{Resource: s.resource, Items: make([]contract.ClusterScores, len(idx)), ValidUntil: validUntil}
	for j, i := range idx {
		su.Items[j] = contract.ClusterScores{Cluster: names[i], Scores: []contract.Score{{Name: "a", Value: float64(s.values[i][0])}, {Name: "b", Value: float64(s.values[i][1])}}}
	}
	body, _ := json.Marshal(su)
	return steadyEvent{id: id, source: "test/steady/" + s.ps.Name, observed: observed, body: body}
}

// sent is what became of one event sent as the broker's dispatcher sends it.
type sent struct {
	answered          bool // a 2xx came, within the attempts
	refused, timedOut int  // attempts answered 5xx (or 429), attempts with no answer in time
	failed            int  // items of the 2xx answer that were not written
}

// deliver sends e as Knative's dispatcher does for the writer's Trigger (triggers/score-writer.yaml):
// each attempt bounded by 45s, redelivered after 5xx, 429 or no answer, backing off from 1s,
// doubling, up to retries times (the backoff capped at 30s).
func (w *fleetSender) deliver(ctx context.Context, e steadyEvent, retries int) (sent, error) {
	return w.deliverWithin(ctx, e, retries, 45*time.Second)
}

// deliverWithin is deliver with each attempt bounded by timeout.
func (w *fleetSender) deliverWithin(ctx context.Context, e steadyEvent, retries int, timeout time.Duration) (sent, error) {
	var d sent
	for attempt := 0; attempt <= retries; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(min(time.Second<<min(attempt-1, 5), 30*time.Second)):
			case <-ctx.Done():
				return d, ctx.Err()
			}
		}
		actx, cancel := context.WithTimeout(ctx, timeout)
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
		var body []byte
		if err == nil {
			body, err = io.ReadAll(resp.Body)
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
		var res contract.WriteResult
		if err := json.Unmarshal(body, &res); err != nil {
			return d, fmt.Errorf("answer: %w", err)
		}
		for _, it := range res.Items {
			if it.Outcome == contract.OutcomeFailed {
				d.failed++
			}
		}
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
