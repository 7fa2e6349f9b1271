// Package agents measures agents on managed clusters reaching the hub the way they do in
// production: each with its own hub token, through the agent gateway, the Knative broker and the
// score-writer to AddOnPlacementScores.
package agents

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
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

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

const (
	addon    = "scoreflow-dsf-agent"
	resource = "sample-my-score"
	audience = "scoreflow/agent-gateway"
	// The writer's deployed client limits and concurrency (functions/score-writer's defaults).
	writerQPS, writerBurst, writerWorkers = 200, 400, 64
	// scoresPerAgent is one cluster's ${node};${namespace};${pod} scores in one score.updated.
	scoresPerAgent = 20
	// senders is how many agents post at once: every agent of a fleet sends on its own clock,
	// and the gateway answers each after its TokenReview and the broker's 202.
	senders = 64
)

// BenchmarkDSFAgentFleet: n DSF agents, one per managed cluster, each sending one score.updated
// (its cluster's 20 pod scores of sample-my-score) per refresh with its own one-hour hub token
// (system:serviceaccount:<cluster>:scoreflow-dsf-agent), to the real agent gateway, which
// TokenReviews it and forwards to the real Knative broker, whose Trigger delivers to the real
// score-writer, on a local hub. Reported, each verified on the hub:
//   - raw-writes/s, refresh-raw-s: the hub's raw rate, a plain client updating n existing objects'
//     status at the writer's QPS, burst and concurrency, in the same run (before and after);
//   - first-s: from the first agent's send to every cluster's object written (created);
//   - changed-s: a refresh changing every value; x-raw is changed-s / refresh-raw-s;
//   - gateway-peak-MiB, writer-peak-MiB: the processes' peak resident memory (VmHWM);
//   - retries/agent: retriable answers per agent (the gateway's TokenReviews are bounded).
//
// Run it as
//
//	go test ./test/agents -run '^$' -bench 'DSFAgentFleet/agents=10000$' -benchtime 1x -timeout 2h
func BenchmarkDSFAgentFleet(b *testing.B) {
	for _, n := range []int{500, 10000} {
		b.Run(fmt.Sprintf("agents=%d", n), func(b *testing.B) {
			for range b.N {
				benchFleet(b, n)
			}
		})
	}
}

func benchFleet(b *testing.B, n int) {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Hour)
	defer cancel()
	bins := buildBinaries(b, "score-writer", "agent-gateway")
	hub, err := localhub.Start()
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallAddonCRDs(); err != nil {
		b.Fatal(err)
	}
	kn, err := knlocal.Start(ctx, hub, knlocal.Options{StateDir: b.TempDir(), LockWait: 30 * time.Minute})
	if err != nil {
		b.Fatal(err)
	}
	b.Cleanup(kn.Stop)

	cfg := rest.CopyConfig(hub.Config)
	cfg.QPS, cfg.Burst = 1000, 2000
	kube := kubernetes.NewForConfigOrDie(cfg)
	addons := addonclient.NewForConfigOrDie(cfg)
	clusters := clusterclient.NewForConfigOrDie(cfg)

	// The fleet: accepted ManagedClusters, the addon enabled for each (what the gateway admits
	// by), each agent's hub ServiceAccount owned by it, and a one-hour token of each, as
	// pkg/hubtoken mints it.
	start := time.Now()
	names := make([]string, n)
	tokens := make([]string, n)
	for i := range names {
		names[i] = fmt.Sprintf("dsf-%05d", i)
	}
	secs := int64(time.Hour / time.Second)
	parallel(b, 32, n, func(i int) error {
		c := names[i]
		if err := hub.AddCluster(ctx, c, nil); err != nil {
			return err
		}
		if err := hub.AcceptCluster(ctx, c); err != nil {
			return err
		}
		mca, err := addons.AddonV1alpha1().ManagedClusterAddOns(c).Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: addon, Namespace: c}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		if _, err := kube.CoreV1().ServiceAccounts(c).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: addon, Namespace: c,
			OwnerReferences: []metav1.OwnerReference{{APIVersion: "addon.open-cluster-management.io/v1alpha1", Kind: "ManagedClusterAddOn", Name: addon, UID: mca.UID}}}}, metav1.CreateOptions{}); err != nil {
			return err
		}
		tr, err := kube.CoreV1().ServiceAccounts(c).CreateToken(ctx, addon, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &secs}}, metav1.CreateOptions{})
		if err != nil {
			return err
		}
		tokens[i] = tr.Status.Token
		return nil
	})
	progress(b, "%d clusters, addons, ServiceAccounts and tokens in %s", n, time.Since(start).Round(time.Second))

	// The broker and the writer's Trigger, then the writer and the gateway as deployed.
	writerPort, gatewayPort := freePort(b), freePort(b)
	objs, err := knlocal.Decode(strings.NewReader(fmt.Sprintf(`
apiVersion: v1
kind: Namespace
metadata: {name: scoreflow}
---
apiVersion: eventing.knative.dev/v1
kind: Broker
metadata: {name: scoreflow, namespace: scoreflow}
---
apiVersion: eventing.knative.dev/v1
kind: Trigger
metadata: {name: score-writer, namespace: scoreflow}
spec:
  broker: scoreflow
  filters: [{exact: {type: %s}}]
  subscriber: {uri: "http://127.0.0.1:%d"}
  delivery: {retry: 8, backoffPolicy: exponential, backoffDelay: PT1S, timeout: PT45S}
`, contract.TypeScoreUpdated, writerPort)))
	if err != nil {
		b.Fatal(err)
	}
	if err := kn.Applier.Apply(ctx, objs...); err != nil {
		b.Fatal(err)
	}
	if err := kn.WaitReady(ctx, "scoreflow", 90*time.Second, knlocal.BrokerKind, knlocal.TriggerKind); err != nil {
		b.Fatal(err)
	}
	// The writer's deployed memory settings; TTL 30m, as a refresh of the fleet outlasts the deployed 5m.
	deployed, err := manifests.ServiceEnv(filepath.Join("..", "..", "deploy", "score-writer.yaml"), "scoreflow", "score-writer",
		"RETRY_FOR", "EVENT_DEADLINE", "GOMEMLIMIT", "MAX_SCORE_SERIES")
	if err != nil {
		b.Fatal(err)
	}
	writer := start1(b, bins["score-writer"], writerPort, kn.Env(append([]string{"KUBECONFIG=" + hub.KubeconfigPath(), "POD_NAMESPACE=default", "TTL=30m", "LOG_LEVEL=warn"}, deployed...)...))
	agents := filepath.Join(b.TempDir(), "agents.yaml")
	if err := os.WriteFile(agents, []byte("agents:\n  - addon: "+addon+"\n    types: [io.scoreflow.score.updated]\n    resources: ["+resource+"]\n"), 0o644); err != nil {
		b.Fatal(err)
	}
	gateway := start1(b, bins["agent-gateway"], gatewayPort, kn.Env("KUBECONFIG="+hub.KubeconfigPath(), "AGENTS_FILE="+agents,
		"K_SINK="+kn.IngressURL+"/scoreflow/scoreflow", "LOG_LEVEL=warn"))

	// The hub's raw rate: n existing objects' status updated at the writer's limits.
	raw := rawObjects(b, ctx, clusters, names)
	rawRate := rawPass(b, ctx, hub.Config, raw, 1)
	rawTime := time.Duration(float64(n) / rawRate * float64(time.Second))
	b.ReportMetric(rawRate, "raw-writes/s")
	b.ReportMetric(rawTime.Seconds(), "refresh-raw-s")
	progress(b, "hub raw: %.0f status updates/s: %d objects take %s", rawRate, n, rawTime.Round(time.Millisecond))

	client := &http.Client{Timeout: time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: senders}}
	var changed time.Duration
	for _, step := range []struct {
		name string
		gen  int
	}{{"first", 1}, {"changed", 2}} {
		began := time.Now()
		var retries atomic.Int64
		parallel(b, senders, n, func(i int) error {
			r, err := sendRetrying(ctx, client, gateway.url, tokens[i], names[i], step.gen, began)
			retries.Add(int64(r))
			return err
		})
		sent := time.Since(began)
		waitWritten(b, ctx, clusters, names, step.gen)
		elapsed := time.Since(began)
		b.ReportMetric(elapsed.Seconds(), step.name+"-s")
		b.ReportMetric(float64(retries.Load())/float64(n), step.name+"-retries/agent")
		progress(b, "%s refresh: %d agents sent in %s (%d retries), all written in %s; gateway VmHWM %d MiB, writer %d MiB; gateway refusals %.0f",
			step.name, n, sent.Round(time.Millisecond), retries.Load(), elapsed.Round(time.Millisecond), gateway.vm(b, "VmHWM")>>20, writer.vm(b, "VmHWM")>>20,
			gateway.metric(b, "scoreflow_agent_gateway_refused_total"))
		if step.name == "changed" {
			changed = elapsed
		}
	}
	rawAfter := rawPass(b, ctx, hub.Config, raw, 2)
	b.ReportMetric(rawAfter, "raw-after-writes/s")
	b.ReportMetric(changed.Seconds()/rawTime.Seconds(), "x-raw")
	b.ReportMetric(changed.Seconds()/(float64(n)/rawAfter), "x-raw-after")
	b.ReportMetric(float64(gateway.vm(b, "VmHWM"))/(1<<20), "gateway-peak-MiB")
	b.ReportMetric(float64(writer.vm(b, "VmHWM"))/(1<<20), "writer-peak-MiB")
	progress(b, "changed refresh / raw: %.2f (raw again %.0f/s: %.2f)", changed.Seconds()/rawTime.Seconds(), rawAfter, changed.Seconds()/(float64(n)/rawAfter))
}

// sendRetrying sends as an agent's function.Sender does: a retriable answer (5xx, 404, 408, 409,
// 429: the gateway answers 503 while its TokenReviews are all busy) is tried again after 50ms,
// doubling; an agent whose tries all fail sends again a second later, as at its next round. It
// returns how many retries it took; any other answer fails the benchmark.
func sendRetrying(ctx context.Context, c *http.Client, url, token, cluster string, gen int, at time.Time) (int, error) {
	retries := 0
	backoff := 50 * time.Millisecond
	for {
		status, err := send(ctx, c, url, token, cluster, gen, at)
		switch {
		case err == nil && (status == http.StatusAccepted || status == http.StatusOK):
			return retries, nil
		case err == nil && !function.Retriable(status):
			return retries, fmt.Errorf("%s: the gateway answered %d", cluster, status)
		case ctx.Err() != nil:
			return retries, ctx.Err()
		}
		retries++
		if retries%6 == 0 {
			backoff = time.Second
		}
		time.Sleep(backoff)
		backoff = min(2*backoff, time.Second)
	}
}

// send posts cluster's refresh gen as its agent does: one score.updated in binary mode with its
// hub token.
func send(ctx context.Context, c *http.Client, url, token, cluster string, gen int, at time.Time) (int, error) {
	su := contract.ScoreUpdated{Resource: resource, Items: []contract.ClusterScores{{Cluster: cluster}}}
	for j := range scoresPerAgent {
		su.Items[0].Scores = append(su.Items[0].Scores, contract.Score{Name: fmt.Sprintf("worker-%d;shop;web-%02d", j%3, j), Value: float64(value(j, gen))})
	}
	vu := at.Add(30 * time.Minute)
	su.ValidUntil = &vu
	e, err := contract.NewScoreUpdated("scoreflow/dsf-bridge/"+cluster, at, su)
	if err != nil {
		return 0, err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
	if err != nil {
		return 0, err
	}
	if err := cehttp.WriteRequest(ctx, binding.ToMessage(&e), req); err != nil {
		return 0, err
	}
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := c.Do(req)
	if err != nil {
		return 0, err
	}
	_ = resp.Body.Close()
	return resp.StatusCode, nil
}

func value(j, gen int) int32 { return int32((j*7+gen*13)%201) - 100 }

// waitWritten waits until every cluster's object holds refresh gen's values.
func waitWritten(b *testing.B, ctx context.Context, c clusterclient.Interface, names []string, gen int) {
	b.Helper()
	want := map[string]int32{}
	for j := range scoresPerAgent {
		want[fmt.Sprintf("worker-%d;shop;web-%02d", j%3, j)] = value(j, gen)
	}
	for {
		done := 0
		opts := metav1.ListOptions{Limit: 1000}
		for {
			l, err := c.ClusterV1alpha1().AddOnPlacementScores("").List(ctx, opts)
			if err != nil {
				b.Fatal(err)
			}
			for _, o := range l.Items {
				if o.Name == resource && holds(o.Status.Scores, want) {
					done++
				}
			}
			if l.Continue == "" {
				break
			}
			opts.Continue = l.Continue
		}
		if done == len(names) {
			return
		}
		select {
		case <-ctx.Done():
			b.Fatalf("refresh %d: %d of %d clusters written", gen, done, len(names))
		case <-time.After(500 * time.Millisecond):
		}
	}
}

func holds(got []clusterv1alpha1.AddOnPlacementScoreItem, want map[string]int32) bool {
	if len(got) != len(want) {
		return false
	}
	for _, s := range got {
		if v, ok := want[s.Name]; !ok || v != s.Value {
			return false
		}
	}
	return true
}

// rawObjects creates one object per cluster for the raw baseline (another resource, so that the
// fleet's own objects are created by the writer).
func rawObjects(b *testing.B, ctx context.Context, c clusterclient.Interface, names []string) []*clusterv1alpha1.AddOnPlacementScore {
	objs := make([]*clusterv1alpha1.AddOnPlacementScore, len(names))
	parallel(b, 64, len(names), func(i int) error {
		o, err := c.ClusterV1alpha1().AddOnPlacementScores(names[i]).Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: "raw-baseline", Namespace: names[i]}}, metav1.CreateOptions{})
		objs[i] = o
		return err
	})
	return objs
}

// rawPass updates every baseline object's status once to refresh gen's values, at the writer's
// limits and concurrency, and returns the rate.
func rawPass(b *testing.B, ctx context.Context, hub *rest.Config, objs []*clusterv1alpha1.AddOnPlacementScore, gen int) float64 {
	cfg := rest.CopyConfig(hub)
	cfg.QPS, cfg.Burst = writerQPS, writerBurst
	c := clusterclient.NewForConfigOrDie(cfg)
	start := time.Now()
	parallel(b, writerWorkers, len(objs), func(i int) error {
		o := objs[i].DeepCopy()
		o.Status.Scores = nil
		for j := range scoresPerAgent {
			o.Status.Scores = append(o.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: fmt.Sprintf("worker-%d;shop;web-%02d", j%3, j), Value: value(j, gen)})
		}
		got, err := c.ClusterV1alpha1().AddOnPlacementScores(o.Namespace).UpdateStatus(ctx, o, metav1.UpdateOptions{})
		if err == nil {
			objs[i] = got
		}
		return err
	})
	return float64(len(objs)) / time.Since(start).Seconds()
}

// process is a function binary running on a loopback port.
type process struct {
	url string
	p   *proc.Process
	log string
}

func start1(b *testing.B, bin string, port int, env []string) *process {
	b.Helper()
	log := filepath.Join(b.TempDir(), filepath.Base(bin)+".log")
	out, err := os.Create(log)
	if err != nil {
		b.Fatal(err)
	}
	p, err := proc.Start(proc.Spec{Name: filepath.Base(bin), Path: bin, Out: out, Env: append(env, "ADDRESS=127.0.0.1", fmt.Sprintf("PORT=%d", port))})
	if err != nil {
		b.Fatal(err)
	}
	pr := &process{url: fmt.Sprintf("http://127.0.0.1:%d", port), p: p, log: log}
	b.Cleanup(func() {
		p.Stop(30 * time.Second)
		_ = out.Close()
		if b.Failed() {
			b.Logf("%s log:\n%s", filepath.Base(bin), proc.LogTail(log, 40))
		}
	})
	for deadline := time.Now().Add(2 * time.Minute); ; time.Sleep(100 * time.Millisecond) {
		if resp, err := http.Get(pr.url + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return pr
			}
		}
		if time.Now().After(deadline) {
			b.Fatalf("%s not ready within 2m:\n%s", bin, proc.LogTail(log, 40))
		}
	}
}

// vm is a /proc/<pid>/status memory figure in bytes (VmHWM, VmRSS).
func (p *process) vm(b *testing.B, field string) int64 {
	raw, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", p.p.Pid()))
	if err != nil {
		b.Fatal(err)
	}
	sc := bufio.NewScanner(bytes.NewReader(raw))
	for sc.Scan() {
		if v, ok := strings.CutPrefix(sc.Text(), field+":"); ok {
			kb, err := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			if err != nil {
				b.Fatal(err)
			}
			return kb << 10
		}
	}
	b.Fatalf("no %s in /proc/%d/status", field, p.p.Pid())
	return 0
}

// metric sums a counter's series on the process's /metrics.
func (p *process) metric(b *testing.B, name string) float64 {
	resp, err := http.Get(p.url + "/metrics")
	if err != nil {
		b.Fatal(err)
	}
	defer resp.Body.Close()
	sum := 0.0
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		l := sc.Text()
		if strings.HasPrefix(l, name+"{") || strings.HasPrefix(l, name+" ") {
			if v, err := strconv.ParseFloat(l[strings.LastIndexByte(l, ' ')+1:], 64); err == nil {
				sum += v
			}
		}
	}
	return sum
}

func buildBinaries(b *testing.B, names ...string) map[string]string {
	b.Helper()
	dir := b.TempDir()
	out := map[string]string{}
	for _, n := range names {
		cmd := exec.Command("go", "build", "-o", filepath.Join(dir, n), "./functions/"+n)
		cmd.Dir = "../.."
		if o, err := cmd.CombinedOutput(); err != nil {
			b.Fatalf("building %s: %v\n%s", n, err, o)
		}
		out[n] = filepath.Join(dir, n)
	}
	return out
}

func freePort(b *testing.B) int {
	p, err := proc.FreePort()
	if err != nil {
		b.Fatal(err)
	}
	return p
}

// parallel runs f(0..n-1) on workers goroutines and fails b on the first error.
func parallel(b *testing.B, workers, n int, f func(int) error) {
	b.Helper()
	var next atomic.Int64
	var wg sync.WaitGroup
	var once sync.Once
	var first error
	for range workers {
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
		b.Fatal(first)
	}
}

// progress logs a step's figures as they come (also to stderr: a long run that is stopped keeps
// what it measured).
func progress(b *testing.B, format string, args ...any) {
	b.Helper()
	b.Logf(format, args...)
	fmt.Fprintf(os.Stderr, "%s %s: %s\n", time.Now().Format(time.TimeOnly), b.Name(), fmt.Sprintf(format, args...))
}
