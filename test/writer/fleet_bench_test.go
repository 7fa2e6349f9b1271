package writer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// The writer as deployed (deploy/score-writer.yaml sets TTL and RETRY_FOR; QPS, burst and
// workers are functions/score-writer's defaults, which the manifest does not override).
const (
	deployedQPS     = 200
	deployedBurst   = 400
	deployedWorkers = 64
)

// fleetTTL replaces the deployed 5m: at the deployed QPS a refresh of 10,000 x 5 objects takes
// longer than 5 minutes (250s at the full 200 writes/s), so its last updates would expire before
// they are written and measure nothing.
const fleetTTL = 30 * time.Minute

// fleetResources are the score resources of a fleet refresh: one scorer each, each replying with
// one score.updated that covers every cluster.
var fleetResources = []string{"fleet-cpu", "fleet-mem", "fleet-gpu", "fleet-latency", "fleet-health"}

// fleetScores are the score names in each resource's items.
var fleetScores = []string{"a", "b"}

// BenchmarkFleet measures a fleet: n accepted ManagedClusters, 5 score resources, a refresh being
// one score.updated per resource covering every cluster, sent to the real score-writer binary at
// its deployed settings, each sender waiting for its answer (as the broker's dispatcher does).
// Steps, each verified on the hub:
//   - hub-raw: the baseline, a plain client updating the status of existing objects at the
//     writer's QPS, burst and concurrency, with no writer logic (raw-writes/s; refresh-raw-s is
//     5n objects at that rate);
//   - first: the writer's first refresh of a fleet it has never written (creates every object);
//   - changed: a refresh changing every value (changed-s; x-raw is changed-s / refresh-raw-s,
//     the goal at most 1.2);
//   - unchanged: newer observation times, the same values (API writes and reads per object:
//     reads are gets and list pages);
//   - overload: three refreshes sent at once, faster than the hub can write them: every object
//     holds a refresh at least as new as the newest acknowledged for it;
//   - writer-peak-MiB: the binary's peak resident memory (VmHWM; goal at most 200 MiB).
//
// Run it as
//
//	go test ./test/writer -run '^$' -bench 'Fleet$/clusters=10000$' -benchtime 1x -timeout 3h
//
// FLEET_WRITER set to a writer binary (another revision's, built with
// `go build -o /tmp/base ./functions/score-writer` there) runs that one instead: before and after
// a change, on the same hub.
func BenchmarkFleet(b *testing.B) {
	bin := os.Getenv("FLEET_WRITER")
	if bin == "" {
		bin = writerBinary(b, b.TempDir())
	}
	for _, n := range []int{1000, 4000, 10000} {
		b.Run(fmt.Sprintf("clusters=%d", n), func(b *testing.B) { benchFleet(b, bin, n) })
	}
}

func benchFleet(b *testing.B, bin string, n int) {
	ctx := context.Background()
	start := time.Now()
	names := fleetClusters(b, n)
	progress(b, "%d clusters registered and accepted in %s", n, time.Since(start).Round(time.Second))

	// Baseline: objects of the same shape (5 resources, 2 scores) on up to 2,000 of the clusters,
	// created untimed by a fast client, then every status updated once at the deployed rate and
	// concurrency. Its rate stands for the fleet's: refresh-raw-s is 5n objects at that rate.
	raw := make([]string, len(fleetResources))
	for i, r := range fleetResources {
		raw[i] = "raw-" + r
	}
	fast := fastClient(b)
	sample := min(n, 2000)
	objs := make([]*clusterv1alpha1.AddOnPlacementScore, 0, sample*len(raw))
	var omu sync.Mutex
	start = time.Now()
	parallel(b, 64, sample*len(raw), func(i int) error {
		c, r := names[i/len(raw)], raw[i%len(raw)]
		api := fast.ClusterV1alpha1().AddOnPlacementScores(c)
		o, err := api.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: r, Namespace: c}}, metav1.CreateOptions{})
		if err != nil {
			if o, err = api.Get(ctx, r, metav1.GetOptions{}); err != nil {
				return err
			}
		}
		omu.Lock()
		objs = append(objs, o)
		omu.Unlock()
		return nil
	})
	progress(b, "baseline objects created in %s", time.Since(start).Round(time.Second))
	limited := deployedClient(b)
	self := &writerProcess{p: nil}
	gen := 0
	// rawPass updates every baseline object's status once and returns the rate.
	rawPass := func() float64 {
		gen++
		start := time.Now()
		parallel(b, deployedWorkers, len(objs), func(i int) error {
			o := objs[i].DeepCopy()
			o.Status.Scores = nil
			for j, s := range fleetScores {
				o.Status.Scores = append(o.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: s, Value: int32(i+j+gen) % 100})
			}
			vu := metav1.NewTime(time.Now().Add(fleetTTL))
			o.Status.ValidUntil = &vu
			o, err := limited.ClusterV1alpha1().AddOnPlacementScores(o.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{})
			objs[i] = o
			return err
		})
		return float64(len(objs)) / time.Since(start).Seconds()
	}
	rawCPU := self.cpu(b)
	rawRate := rawPass()
	rawCPU = self.cpu(b) - rawCPU
	rawTime := time.Duration(float64(n*len(fleetResources)) / rawRate * float64(time.Second))
	b.ReportMetric(rawCPU.Seconds()*1000/float64(len(objs)), "raw-cpu-ms/object")
	b.ReportMetric(rawTime.Seconds(), "refresh-raw-s")
	b.ReportMetric(rawRate, "raw-writes/s")
	progress(b, "hub-raw: %d status updates at %.0f/s, test process CPU %.1fs: %d objects would take %s",
		len(objs), rawRate, rawCPU.Seconds(), n*len(fleetResources), rawTime.Round(time.Millisecond))

	// The manifest's memory settings: writer-peak-MiB is the deployed writer's.
	w := startWriterBinary(b, bin, deployedEnv(b, "GOMEMLIMIT", "MAX_SCORE_SERIES")...)
	type step struct {
		name string
		gen  int // values of refresh gen
	}
	var changedTime time.Duration
	for _, st := range []step{{"first", 1}, {"changed", 2}, {"unchanged", 2}} {
		before, cpu := w.metrics(b), w.cpu(b)
		start := time.Now()
		outcomes := tally(w.refresh(b, names, st.gen, start))
		elapsed := time.Since(start)
		after, cpu := w.metrics(b), w.cpu(b)-cpu
		writes := after.sum("scoreflow_writer_api_requests_total", `verb="create"`) + after.sum("scoreflow_writer_api_requests_total", `verb="update_status"`) -
			before.sum("scoreflow_writer_api_requests_total", `verb="create"`) - before.sum("scoreflow_writer_api_requests_total", `verb="update_status"`)
		reads := after.sum("scoreflow_writer_api_requests_total", `verb="get"`) + after.sum("scoreflow_writer_api_requests_total", `verb="list"`) -
			before.sum("scoreflow_writer_api_requests_total", `verb="get"`) - before.sum("scoreflow_writer_api_requests_total", `verb="list"`)
		progress(b, "%s refresh: %d objects in %s; %.0f API writes, %.0f reads; writer CPU %.1fs; items %v", st.name, n*len(fleetResources), elapsed.Round(time.Millisecond), writes, reads, cpu.Seconds(), outcomes)
		b.ReportMetric(cpu.Seconds()*1000/float64(n*len(fleetResources)), st.name+"-cpu-ms/object")
		b.ReportMetric(elapsed.Seconds(), st.name+"-s")
		b.ReportMetric(writes/float64(n*len(fleetResources)), st.name+"-writes/object")
		b.ReportMetric(reads/float64(n*len(fleetResources)), st.name+"-reads/object")
		if st.name == "changed" {
			changedTime = elapsed
		}
		verifyFleet(b, names, st.gen)
	}
	b.ReportMetric(changedTime.Seconds()/rawTime.Seconds(), "x-raw")
	progress(b, "changed refresh / raw: %.2f; writer VmHWM so far %d MiB", changedTime.Seconds()/rawTime.Seconds(), w.vm(b, "VmHWM")>>20)
	// The machine's load drifts: the raw rate again, after the writer's refreshes, brackets it.
	rawAfter := rawPass()
	rawTimeAfter := time.Duration(float64(n*len(fleetResources)) / rawAfter * float64(time.Second))
	b.ReportMetric(rawAfter, "raw-after-writes/s")
	b.ReportMetric(changedTime.Seconds()/rawTimeAfter.Seconds(), "x-raw-after")
	progress(b, "hub-raw again: %.0f/s; changed refresh / raw: %.2f", rawAfter, changedTime.Seconds()/rawTimeAfter.Seconds())

	// Overload: three refreshes at once, each newer than the last, faster than the hub can
	// write them.
	overload(b, &w.fleetSender, names, 3, time.Now())

	hwm := w.vm(b, "VmHWM")
	b.ReportMetric(float64(hwm)/(1<<20), "writer-peak-MiB")
	progress(b, "writer VmHWM %d MiB, VmRSS %d MiB", hwm>>20, w.vm(b, "VmRSS")>>20)
}

// overload sends refreshes gens first, first+1 and first+2 (observed a second apart) at once and
// checks what a broker relies on: every object holds the values of a refresh at least as new as
// the newest one acknowledged (2xx) for it (events refused 503 for the pending bound write
// nothing), and never a value neither this round nor the one before it sent.
func overload(tb testing.TB, w *fleetSender, names []string, first int, observed time.Time) {
	tb.Helper()
	overloadRounds(tb, w, names, first, 3, 0, observed)
}

// overloadRounds sends refreshes first..first+rounds-1, each every seconds after the one before
// (0: all at once) and observed a second after it, and checks the answers against the hub as
// overload describes.
func overloadRounds(tb testing.TB, w *fleetSender, names []string, first, rounds int, every time.Duration, observed time.Time) [][]fleetAnswer {
	tb.Helper()
	start := time.Now()
	answers := make([][]fleetAnswer, rounds)
	var wg sync.WaitGroup
	for k := range answers {
		wg.Add(1)
		go func(k int) {
			defer wg.Done()
			answers[k] = w.refresh(tb, names, first+k, observed.Add(time.Duration(k)*time.Second))
		}(k)
		time.Sleep(every)
	}
	wg.Wait()
	for k := range answers {
		progress(tb, "overload: refresh %d of %d: %v", k+1, rounds, tally(answers[k]))
	}
	progress(tb, "overload: answered in %s", time.Since(start).Round(time.Millisecond))

	// acked[r][cluster index]: the newest gen acknowledged for that object (0: none).
	acked := make([][]int, len(fleetResources))
	index := map[string]int{}
	for i, c := range names {
		index[c] = i
	}
	for r := range fleetResources {
		acked[r] = make([]int, len(names))
		for k := range answers {
			a := answers[k][r]
			if a.res == nil || a.status >= 300 {
				continue
			}
			for _, it := range a.res.Items {
				if it.Outcome != contract.OutcomeFailed {
					acked[r][index[it.Cluster]] = max(acked[r][index[it.Cluster]], first+k)
				}
			}
		}
	}
	res := map[string]int{}
	for r, name := range fleetResources {
		res[name] = r
	}
	bad, total := 0, 0
	eachFleetObject(tb, names, func(i, r int, got map[string]int32) {
		total++
		held := -1 // the refresh whose values it holds; first-1 is the one before this round
		for gen := first - 1; gen < first+rounds; gen++ {
			same := true
			for j, s := range fleetScores {
				same = same && got[s] == fleetValue(i, r, j, gen)
			}
			if same {
				held = gen
			}
		}
		if held < 0 || held < acked[r][i] {
			if bad++; bad <= 5 {
				tb.Errorf("%s/%s holds %v (refresh %d), but refresh %d was acknowledged", names[i], fleetResources[r], got, held, acked[r][i])
			}
		}
	})
	if bad > 0 || total != len(names)*len(fleetResources) {
		tb.Fatalf("overload: %d of %d objects hold an older value than acknowledged (%d objects expected)", bad, total, len(names)*len(fleetResources))
	}
	return answers
}

// eachFleetObject calls f with every fleet object's scores on the hub: cluster index i, resource
// index r.
func eachFleetObject(tb testing.TB, names []string, f func(i, r int, scores map[string]int32)) {
	tb.Helper()
	index := map[string]int{}
	for i, c := range names {
		index[c] = i
	}
	res := map[string]int{}
	for r, name := range fleetResources {
		res[name] = r
	}
	opts := metav1.ListOptions{Limit: 5000}
	for {
		list, err := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(metav1.NamespaceAll).List(context.Background(), opts)
		if err != nil {
			tb.Fatal(err)
		}
		for _, o := range list.Items {
			i, ok := index[o.Namespace]
			r, isFleet := res[o.Name]
			if ok && isFleet {
				f(i, r, scoresOf(&o))
			}
		}
		if list.Continue == "" {
			return
		}
		opts.Continue = list.Continue
	}
}

// progress logs a step's figures as they come (also to stderr: a run of minutes that is stopped
// keeps what it measured).
func progress(tb testing.TB, format string, args ...any) {
	tb.Helper()
	tb.Logf(format, args...)
	fmt.Fprintf(os.Stderr, "%s %s: %s\n", time.Now().Format(time.TimeOnly), tb.Name(), fmt.Sprintf(format, args...))
}

// deployedClient is a hub client limited as the deployed writer's.
func deployedClient(tb testing.TB) clusterclient.Interface {
	cfg := rest.CopyConfig(hub.Config)
	cfg.QPS, cfg.Burst = deployedQPS, deployedBurst
	c, err := clusterclient.NewForConfig(cfg)
	if err != nil {
		tb.Fatal(err)
	}
	return c
}

// parallel runs f(0..n-1) on workers goroutines and fails tb on the first error.
func parallel(tb testing.TB, workers, n int, f func(int) error) {
	tb.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for g := 0; g < workers; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := int(next.Add(1) - 1)
				if i >= n {
					return
				}
				if err := f(i); err != nil {
					once.Do(func() { first = err })
					next.Store(int64(n))
					return
				}
			}
		}()
	}
	wg.Wait()
	if first != nil {
		tb.Fatal(first)
	}
}

// fleetClusters registers and accepts n ManagedClusters (fleet-00000...), with namespaces.
func fleetClusters(tb testing.TB, n int) []string {
	names := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("fleet-%05d", i)
	}
	parallel(tb, 32, n, func(i int) error {
		if err := hub.AddCluster(context.Background(), names[i], nil); err != nil {
			return err
		}
		return hub.AcceptCluster(context.Background(), names[i])
	})
	return names
}

// fleetValue is score j of resource r for cluster i in refresh gen: every refresh moves it.
func fleetValue(i, r, j, gen int) int32 { return int32((i+3*r+j+7*gen)%201) - 100 }

// verifyFleet checks that every object of the fleet holds refresh gen's values.
func verifyFleet(tb testing.TB, names []string, gen int) {
	tb.Helper()
	seen, wrong := 0, 0
	eachFleetObject(tb, names, func(i, r int, got map[string]int32) {
		seen++
		for j, s := range fleetScores {
			if got[s] != fleetValue(i, r, j, gen) {
				if wrong++; wrong <= 5 {
					tb.Errorf("%s/%s: %s=%d on the hub, refresh %d sent %d", names[i], fleetResources[r], s, got[s], gen, fleetValue(i, r, j, gen))
				}
			}
		}
	})
	if seen != len(names)*len(fleetResources) || wrong > 0 {
		tb.Fatalf("refresh %d: %d of %d objects on the hub, %d scores wrong", gen, seen, len(names)*len(fleetResources), wrong)
	}
}

// writerBinary builds functions/score-writer into dir.
func writerBinary(tb testing.TB, dir string) string {
	tb.Helper()
	bin := filepath.Join(dir, "score-writer")
	cmd := exec.Command("go", "build", "-o", bin, "./functions/score-writer")
	cmd.Dir = "../.."
	if out, err := cmd.CombinedOutput(); err != nil {
		tb.Fatalf("building the writer: %v\n%s", err, out)
	}
	return bin
}

// fleetSender sends a fleet's refreshes to a writer at url.
type fleetSender struct {
	url  string
	http *http.Client
}

// writerProcess is the score-writer binary running against the hub as deployed.
type writerProcess struct {
	fleetSender
	p   *proc.Process
	log string
}

func startWriterBinary(tb testing.TB, bin string, env ...string) *writerProcess {
	tb.Helper()
	port, err := proc.FreePort()
	if err != nil {
		tb.Fatal(err)
	}
	logPath := filepath.Join(tb.TempDir(), "score-writer.log")
	out, err := os.Create(logPath)
	if err != nil {
		tb.Fatal(err)
	}
	p, err := proc.Start(proc.Spec{Name: "score-writer", Path: bin, Out: out, Env: append(append(os.Environ(),
		"KUBECONFIG="+hub.KubeconfigPath(), "ADDRESS=127.0.0.1", fmt.Sprintf("PORT=%d", port),
		"TTL="+fleetTTL.String(), "RETRY_FOR=15s", "LOG_LEVEL=info",
		// Leader election as deployed, its Lease in a namespace every hub has.
		"POD_NAMESPACE=default",
		// The senders here wait for each event's whole answer, however long its writes take:
		// the writer measured, not the broker's redeliveries (deadline_test.go tests those).
		"EVENT_DEADLINE=0"), env...)})
	if err != nil {
		tb.Fatal(err)
	}
	w := &writerProcess{fleetSender: fleetSender{url: fmt.Sprintf("http://127.0.0.1:%d", port),
		http: &http.Client{Timeout: time.Hour, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}, p: p, log: logPath}
	tb.Cleanup(func() {
		p.Stop(30 * time.Second)
		_ = out.Close()
		if tb.Failed() {
			tb.Logf("score-writer log:\n%s", proc.LogTail(logPath, 40))
		}
	})
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := w.http.Get(w.url + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return w
			}
		}
		if time.Now().After(deadline) {
			tb.Fatalf("score-writer not ready within 2m:\n%s", proc.LogTail(logPath, 40))
		}
	}
}

// fleetAnswer is the writer's answer to one resource's score.updated of a refresh.
type fleetAnswer struct {
	status int
	res    *contract.WriteResult
}

// refresh sends one score.updated per fleet resource (all clusters, refresh gen's values,
// observed at observed) at once and waits for the answers, indexed like fleetResources.
func (w *fleetSender) refresh(tb testing.TB, names []string, gen int, observed time.Time) []fleetAnswer {
	tb.Helper()
	out := make([]fleetAnswer, len(fleetResources))
	var wg sync.WaitGroup
	for r, resource := range fleetResources {
		wg.Add(1)
		go func(r int, resource string) {
			defer wg.Done()
			su := contract.ScoreUpdated{Resource: resource, Items: make([]contract.ClusterScores, len(names))}
			for i, c := range names {
				it := contract.ClusterScores{Cluster: c}
				for j, s := range fleetScores {
					it.Scores = append(it.Scores, contract.Score{Name: s, Value: float64(fleetValue(i, r, j, gen))})
				}
				su.Items[i] = it
			}
			status, res, err := w.post(fmt.Sprintf("fleet-%d-%d-%s", gen, observed.UnixNano(), resource), observed, su)
			if err != nil {
				tb.Errorf("%s refresh %d: %v", resource, gen, err)
			}
			out[r] = fleetAnswer{status: status, res: res}
		}(r, resource)
	}
	wg.Wait()
	return out
}

// tally counts a refresh's answers: events by status ("status/200") and items by outcome and by
// outcome/reason.
func tally(as []fleetAnswer) map[string]int {
	out := map[string]int{}
	for _, a := range as {
		out[fmt.Sprintf("status/%d", a.status)]++
		if a.res == nil {
			continue
		}
		for _, it := range a.res.Items {
			out[string(it.Outcome)]++
			if it.Reason != "" {
				out[string(it.Outcome)+"/"+string(it.Reason)]++
			}
		}
	}
	return out
}

// post sends one score.updated in binary mode, as a scorer's reply reaches the writer through
// the broker, and decodes the answer.
func (w *fleetSender) post(id string, observed time.Time, su contract.ScoreUpdated) (int, *contract.WriteResult, error) {
	body, err := json.Marshal(su)
	if err != nil {
		return 0, nil, err
	}
	req, err := http.NewRequest(http.MethodPost, w.url, bytes.NewReader(body))
	if err != nil {
		return 0, nil, err
	}
	req.Header.Set("Ce-Specversion", "1.0")
	req.Header.Set("Ce-Id", id)
	req.Header.Set("Ce-Source", "test/fleet/"+su.Resource)
	req.Header.Set("Ce-Type", contract.TypeScoreUpdated)
	req.Header.Set("Ce-Time", observed.UTC().Format(time.RFC3339Nano))
	req.Header.Set("Content-Type", "application/json")
	resp, err := w.http.Do(req)
	if err != nil {
		return 0, nil, err
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(resp.Body)
	if err != nil {
		return resp.StatusCode, nil, err
	}
	var res contract.WriteResult
	if err := json.Unmarshal(data, &res); err != nil {
		return resp.StatusCode, nil, fmt.Errorf("status %d, answer %.200q: %v", resp.StatusCode, data, err)
	}
	return resp.StatusCode, &res, nil
}

// promText is a /metrics page.
type promText []string

func (w *writerProcess) metrics(tb testing.TB) promText {
	tb.Helper()
	resp, err := w.http.Get(w.url + "/metrics")
	if err != nil {
		tb.Fatal(err)
	}
	defer resp.Body.Close()
	var lines promText
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		if l := sc.Text(); !strings.HasPrefix(l, "#") {
			lines = append(lines, l)
		}
	}
	return lines
}

// sum adds the samples of family whose labels contain each of labels (`verb="get"`).
func (m promText) sum(family string, labels ...string) float64 {
	total := 0.0
	for _, l := range m {
		if !strings.HasPrefix(l, family+"{") && !strings.HasPrefix(l, family+" ") {
			continue
		}
		match := true
		for _, want := range labels {
			match = match && strings.Contains(l, want)
		}
		if !match {
			continue
		}
		if v, err := strconv.ParseFloat(l[strings.LastIndex(l, " ")+1:], 64); err == nil {
			total += v
		}
	}
	return total
}

// cpu is the CPU time the writer process has used (user and system).
func (w *writerProcess) cpu(tb testing.TB) time.Duration {
	tb.Helper()
	pid := os.Getpid() // a writerProcess without a process: this one, the baseline's client
	if w.p != nil {
		pid = w.p.Pid()
	}
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		tb.Fatal(err)
	}
	// Fields after the command (which may hold spaces), from field 3: utime and stime are 14, 15.
	f := strings.Fields(string(data[bytes.LastIndexByte(data, ')')+2:]))
	utime, _ := strconv.ParseInt(f[11], 10, 64)
	stime, _ := strconv.ParseInt(f[12], 10, 64)
	return time.Duration(utime+stime) * time.Second / 100 // USER_HZ
}

// vm reads a field of /proc/PID/status (VmHWM, VmRSS) in bytes.
func (w *writerProcess) vm(tb testing.TB, field string) int64 {
	tb.Helper()
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", w.p.Pid()))
	if err != nil {
		tb.Fatal(err)
	}
	for _, l := range strings.Split(string(data), "\n") {
		if strings.HasPrefix(l, field+":") {
			kb, _ := strconv.ParseInt(strings.Fields(l)[1], 10, 64)
			return kb << 10
		}
	}
	tb.Fatalf("no %s in /proc/%d/status", field, w.p.Pid())
	return 0
}
