package main

import (
	"context"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/chromedp/chromedp"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1alpha1 "open-cluster-management.io/api/cluster/v1alpha1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeImport(t *testing.T) {
	for _, p := range []string{"knative.dev/eventing", "knative.dev/pkg"} {
		if functest.Imports(t, p) {
			t.Errorf("the scores page imports %s", p)
		}
	}
}

func TestHelp(t *testing.T) {
	functest.Help(t, "--kubeconfig  [env KUBECONFIG]", "--events  [env EVENTS]", "--history  [env HISTORY]", "--port  [env PORT]")
}

// The README's screenshot, relative to this package. The test rewrites it only when asked
// (go test ./functions/scores-page -run Browser -update-screenshot), so make test leaves the tree clean.
const screenshot = "../../docs/img/scores-page.png"

var updateScreenshot = flag.Bool("update-screenshot", false, "write the README's screenshot to "+screenshot)

// chromium is Debian's Chromium, which hack/install-chromium.sh installs (make test runs it).
func chromium(t *testing.T) string {
	t.Helper()
	for _, name := range []string{"chromium", "chromium-browser"} {
		if p, err := exec.LookPath(name); err == nil {
			return p
		}
	}
	t.Fatal("no chromium on PATH: run hack/install-chromium.sh (make test runs it), or apt-get install chromium")
	return ""
}

const (
	ns  = "scoreflow"
	set = "demo"
)

var clusters = []string{"cluster1", "cluster2", "cluster3"}

// TestPageInABrowser runs the binary as deployed against a real hub with the real placement
// controller, opens its page in headless Chromium and checks what a person would see: the heat
// map, a score changed on the hub shown within a second, the Placement's decision moving with it
// and explained, and a refused write with its reason. It saves the README's screenshot.
func TestPageInABrowser(t *testing.T) {
	chrome := chromium(t)
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()

	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}
	must(hub.AddClusterSet(ctx, set, ns))
	for _, c := range clusters {
		must(hub.AddCluster(ctx, c, map[string]string{localhub.ClusterSetLabel: set}))
		must(hub.MarkAvailable(ctx, c))
	}
	pcLog, err := os.Create(filepath.Join(t.TempDir(), "placement.log"))
	must(err)
	pc, err := hub.StartPlacementController(pcLog)
	must(err)
	t.Cleanup(func() { _ = pc.Stop() })
	_, err = hub.Cluster.ClusterV1beta1().Placements(ns).Create(ctx, localhub.ScorePlacement(ns, "most-idle-cpu", set, "cpu-idle", "cpuIdle", 1), metav1.CreateOptions{})
	must(err)
	two := int32(2)
	balanced := &clusterv1beta1.Placement{
		ObjectMeta: metav1.ObjectMeta{Name: "fast-and-idle", Namespace: ns},
		Spec: clusterv1beta1.PlacementSpec{ClusterSets: []string{set}, NumberOfClusters: &two,
			PrioritizerPolicy: clusterv1beta1.PrioritizerPolicy{Mode: clusterv1beta1.PrioritizerPolicyModeExact, Configurations: []clusterv1beta1.PrioritizerConfig{
				{ScoreCoordinate: &clusterv1beta1.ScoreCoordinate{Type: clusterv1beta1.ScoreCoordinateTypeAddOn, AddOn: &clusterv1beta1.AddOnScore{ResourceName: "cpu-idle", ScoreName: "cpuIdle"}}, Weight: 2},
				{ScoreCoordinate: &clusterv1beta1.ScoreCoordinate{Type: clusterv1beta1.ScoreCoordinateTypeAddOn, AddOn: &clusterv1beta1.AddOnScore{ResourceName: "latency", ScoreName: "p99Inverse"}}, Weight: 1},
			}}}}
	_, err = hub.Cluster.ClusterV1beta1().Placements(ns).Create(ctx, balanced, metav1.CreateOptions{})
	must(err)
	// Additive mode (the default): the controller adds Balance and Steady, and so does the page.
	sticky := localhub.ScorePlacement(ns, "sticky", set, "cpu-idle", "cpuIdle", 1)
	sticky.Spec.PrioritizerPolicy.Mode = ""
	_, err = hub.Cluster.ClusterV1beta1().Placements(ns).Create(ctx, sticky, metav1.CreateOptions{})
	must(err)

	fresh := time.Now().Add(3 * time.Minute)
	setScores := func(cluster, resource string, validUntil time.Time, kv ...any) {
		t.Helper()
		c := hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(cluster)
		obj, err := c.Get(ctx, resource, metav1.GetOptions{})
		if err != nil {
			obj, err = c.Create(ctx, &clusterv1alpha1.AddOnPlacementScore{ObjectMeta: metav1.ObjectMeta{Name: resource, Namespace: cluster}}, metav1.CreateOptions{})
			must(err)
		}
		obj.Status.Scores = nil
		for i := 0; i < len(kv); i += 2 {
			obj.Status.Scores = append(obj.Status.Scores, clusterv1alpha1.AddOnPlacementScoreItem{Name: kv[i].(string), Value: int32(kv[i+1].(int))})
		}
		vu := metav1.NewTime(validUntil)
		obj.Status.ValidUntil = &vu
		_, err = c.UpdateStatus(ctx, obj, metav1.UpdateOptions{})
		must(err)
	}
	setScores("cluster1", "cpu-idle", fresh, "cpuIdle", 20)
	setScores("cluster2", "cpu-idle", fresh, "cpuIdle", 65)
	setScores("cluster3", "cpu-idle", fresh, "cpuIdle", 35)
	setScores("cluster1", "latency", fresh, "p99Inverse", 80)
	setScores("cluster2", "latency", fresh, "p99Inverse", -40)
	setScores("cluster3", "latency", time.Now().Add(-30*time.Second), "p99Inverse", 55) // expired: counts 0

	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	must(hub.WriteKubeconfig(kubeconfig))
	fn := functest.Start(t, []string{"KUBECONFIG=" + kubeconfig})

	// The browser: chromedp kills it when the test's context ends, and SIGKILLs it (Pdeathsig,
	// set by chromedp's Linux allocator) if the test process dies first.
	opts := append(chromedp.DefaultExecAllocatorOptions[:], chromedp.ExecPath(chrome), chromedp.NoSandbox,
		chromedp.WindowSize(1440, 1000), chromedp.Flag("disable-gpu", true), chromedp.Flag("disable-dev-shm-usage", true))
	actx, acancel := chromedp.NewExecAllocator(ctx, opts...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()

	started := time.Now()
	must(chromedp.Run(bctx, chromedp.Navigate(fn.URL+"/ui/"), chromedp.WaitVisible(`td.cell[data-cluster="cluster3"]`, chromedp.ByQuery)))
	t.Logf("page loaded with the heat map in %s", time.Since(started).Round(time.Millisecond))

	// eval returns a string the page computes; waitFor polls it until ok or within passes.
	eval := func(js string) string {
		var s string
		if err := chromedp.Run(bctx, chromedp.Evaluate(js, &s)); err != nil {
			t.Fatalf("evaluating %s: %v", js, err)
		}
		return s
	}
	waitFor := func(what, js string, ok func(string) bool, within time.Duration) time.Duration {
		t.Helper()
		start := time.Now()
		var got string
		for time.Since(start) < within {
			if got = eval(js); ok(got) {
				return time.Since(start)
			}
			time.Sleep(10 * time.Millisecond)
		}
		t.Fatalf("%s: not shown within %s; the page shows %q", what, within, got)
		return 0
	}
	cellJS := func(cluster, column string) string {
		return fmt.Sprintf(`(() => { const c = document.querySelector('td.cell[data-cluster=%q][data-column=%q]'); return c ? c.querySelector('.value').textContent + (c.classList.contains('expired') ? ' expired' : '') : 'missing'; })()`, cluster, column)
	}
	if got := eval(cellJS("cluster2", "cpu-idle/cpuIdle")); got != "65" {
		t.Errorf("cluster2 cpu-idle/cpuIdle shows %q, want 65", got)
	}
	if got := eval(cellJS("cluster3", "latency/p99Inverse")); got != "55 expired" {
		t.Errorf("cluster3's expired latency shows %q, want 55 marked expired", got)
	}
	decisionJS := func(placement string) string {
		return fmt.Sprintf(`(() => { const p = document.querySelector('.placement[data-placement=%q]'); return p ? [...p.querySelectorAll('.decision .chip.chosen')].map(c => c.textContent).join(',') : 'missing'; })()`, ns+"/"+placement)
	}
	equals := func(want string) func(string) bool { return func(s string) bool { return s == want } }
	waitFor("the first decision", decisionJS("most-idle-cpu"), equals("cluster2"), 30*time.Second)

	// Events as the broker would deliver them: a scorer's update and the writer's answer.
	up, err := contract.NewScoreUpdated("scoreflow/promql-scorer", time.Now(), contract.ScoreUpdated{Resource: "cpu-idle",
		Items: []contract.ClusterScores{functest.ClusterScores("cluster1", "cpuIdle", 90)}})
	must(err)
	up.SetID("demo-1")
	if status, _ := functest.Send(t, fn.URL, up); status != http.StatusAccepted {
		t.Fatalf("score.updated answered %d, want 202", status)
	}
	done := contract.NewWriteResult("scoreflow/score-writer", contract.WriteResult{Input: contract.EventRef{Source: up.Source(), ID: up.ID(), Type: up.Type()},
		Resource: "cpu-idle", Items: []contract.ItemResult{{Cluster: "cluster1", Outcome: contract.OutcomeWritten, ResourceVersion: "42"}}})
	if status, _ := functest.Send(t, fn.URL, done); status != http.StatusAccepted {
		t.Fatalf("write.done answered %d, want 202", status)
	}

	// A score changed on the hub appears within a second.
	setScores("cluster1", "cpu-idle", time.Now().Add(3*time.Minute), "cpuIdle", 90)
	took := waitFor("cluster1's new score", cellJS("cluster1", "cpu-idle/cpuIdle"), equals("90"), time.Second)
	t.Logf("score change on the hub shown in the browser after %s", took.Round(time.Millisecond))

	// The Placement follows it, and the page says why: 90 x 1 beats 65 x 1.
	waitFor("the new decision", decisionJS("most-idle-cpu"), equals("cluster1"), 30*time.Second)
	whyJS := fmt.Sprintf(`(() => { const p = document.querySelector('.placement[data-placement=%q]'); return [...p.querySelectorAll('table.why tr.chosen')].map(r => r.textContent).join('|'); })()`, ns+"/most-idle-cpu")
	waitFor("why cluster1 was chosen", whyJS, equals("cluster190 × 1 = 9090"), 5*time.Second)
	historyJS := fmt.Sprintf(`document.querySelectorAll('.placement[data-placement=%q] .timeline span').length + ''`, ns+"/most-idle-cpu")
	if got := eval(historyJS); got != "2" {
		t.Errorf("the decision timeline has %s segments, want 2 (cluster2, then cluster1)", got)
	}
	// Weights: 2 x cpuIdle + 1 x latency; cluster3's expired latency counts 0.
	waitFor("the two-score Placement's totals", fmt.Sprintf(`(() => { const p = document.querySelector('.placement[data-placement=%q]'); return [...p.querySelectorAll('table.why tr')].slice(1).map(r => r.dataset.cluster + '=' + r.querySelector('.total').textContent).join(','); })()`, ns+"/fast-and-idle"),
		equals("cluster1=260,cluster2=90,cluster3=70"), 5*time.Second)

	// The Additive Placement's why has a column per prioritizer the controller weighs, and Steady
	// gives its chosen cluster 100.
	headJS := fmt.Sprintf(`(() => { const p = document.querySelector('.placement[data-placement=%q]'); return p ? [...p.querySelectorAll('table.why th')].map(h => h.textContent).join('|') : 'missing'; })()`, ns+"/sticky")
	waitFor("the Additive Placement's prioritizers", headJS, equals("cluster|Balance × 1|Steady × 1|cpu-idle/cpuIdle × 1|total"), 5*time.Second)
	steadyJS := fmt.Sprintf(`(() => { const p = document.querySelector('.placement[data-placement=%q]'); const r = p && p.querySelector('table.why tr.chosen'); return r ? r.children[2].textContent : 'none'; })()`, ns+"/sticky")
	waitFor("Steady's part for the chosen cluster", steadyJS, equals("100 × 1 = 100"), 30*time.Second)

	// A refusal shows its reason and message within a second.
	failed := contract.NewWriteResult("scoreflow/score-writer", contract.WriteResult{Input: contract.EventRef{Source: "manual", ID: "too-big", Type: contract.TypeScoreUpdated},
		Resource: "manual", Items: []contract.ItemResult{{Cluster: "cluster2", Outcome: contract.OutcomeFailed, Reason: contract.ReasonOutOfRange, Message: "score x: 150 is outside [-100, 100]"}}})
	sent := time.Now()
	if status, _ := functest.Send(t, fn.URL, failed); status != http.StatusAccepted {
		t.Fatalf("write.failed answered %d, want 202", status)
	}
	refusalJS := `(() => { const r = document.querySelector('#event-list li.refusal'); return r ? r.querySelector('.reason').textContent + ': ' + r.querySelector('.ev-items').textContent : 'none'; })()`
	waitFor("the refusal's reason", refusalJS, equals("OutOfRange: cluster2: OutOfRange (score x: 150 is outside [-100, 100])"), time.Second)
	t.Logf("refusal shown after %s", time.Since(sent).Round(time.Millisecond))

	// The screenshot for the README, once the change highlights have faded.
	time.Sleep(1500 * time.Millisecond)
	// The rewritten score is young again; the others kept their age.
	ageJS := func(cluster, column string) string {
		return fmt.Sprintf(`document.querySelector('td.cell[data-cluster=%q][data-column=%q] .age').textContent`, cluster, column)
	}
	if got := eval(ageJS("cluster1", "cpu-idle/cpuIdle")); !regexp.MustCompile(`^[0-4]s ago`).MatchString(got) {
		t.Errorf("cluster1's rewritten score is %q, want a few seconds old", got)
	}
	if got := eval(ageJS("cluster3", "latency/p99Inverse")); !strings.HasPrefix(got, "expired ") {
		t.Errorf("cluster3's expired score says %q", got)
	}
	var png []byte
	must(chromedp.Run(bctx, chromedp.FullScreenshot(&png, 100)))
	if len(png) < 8 || string(png[1:4]) != "PNG" {
		t.Fatalf("screenshot is not a PNG (%d bytes)", len(png))
	}
	out := filepath.Join(t.TempDir(), "scores-page.png")
	if *updateScreenshot {
		out = screenshot
	}
	must(os.MkdirAll(filepath.Dir(out), 0o755))
	must(os.WriteFile(out, png, 0o644))
	if strings.Contains(fn.Output(), `"level":"ERROR"`) {
		t.Errorf("the page logged errors:\n%s", fn.Output())
	}
}
