package deploy

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	clusterv1beta2 "open-cluster-management.io/api/cluster/v1beta2"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
)

// markedBlock is the fenced block of docs/quickstart.md that follows `<!-- quickstart-test: name -->`:
// the commands a reader copies, which TestQuickstartPlacementMoves runs.
var markedBlock = regexp.MustCompile("(?s)<!-- quickstart-test: ([a-z-]+) -->\n```[a-z]*\n(.*?)```")

func quickstartBlocks(t *testing.T) map[string]string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join(repo, "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	blocks := map[string]string{}
	for _, m := range markedBlock.FindAllStringSubmatch(string(b), -1) {
		if _, dup := blocks[m[1]]; dup {
			t.Fatalf("docs/quickstart.md marks two blocks %q", m[1])
		}
		blocks[m[1]] = m[2]
	}
	for _, name := range []string{"clusters", "placement", "event"} {
		if blocks[name] == "" {
			t.Fatalf("docs/quickstart.md has no block marked <!-- quickstart-test: %s -->", name)
		}
	}
	return blocks
}

// heredocDocs are the YAML documents of a block's heredocs.
func heredocDocs(block string) []string {
	var docs []string
	for _, h := range heredoc.FindAllStringSubmatch(block, -1) {
		for _, d := range strings.Split(h[1], "\n---\n") {
			if strings.TrimSpace(d) != "" {
				docs = append(docs, d)
			}
		}
	}
	return docs
}

// TestQuickstartPlacementMoves runs the quickstart as a reader would, from the blocks of
// docs/quickstart.md itself, on a local hub with the real OCM placement controller and the real
// score-writer binary: the registration-only ManagedClusters (accepted, given their namespaces and
// tainted unreachable as OCM's hub does for clusters without an agent), the cluster set binding and
// the Placement of section 6, and the curl of section 4, run by bash against the writer. The
// decision must hold cluster1, then move to cluster2 when the same curl sends the values swapped.
// The Placement's prose is checked too: in Additive mode the same swap would not move it, by the
// totals the doc gives (Steady's 100 keeps the chosen cluster).
func TestQuickstartPlacementMoves(t *testing.T) {
	blocks := quickstartBlocks(t)
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	must := func(err error) {
		t.Helper()
		if err != nil {
			t.Fatal(err)
		}
	}

	// What `clusteradm init` leaves on the hub: the ManagedClusterSet "default" (OCM's registration
	// hub creates it, selecting clusters by the cluster-set label).
	_, err = hub.Cluster.ClusterV1beta2().ManagedClusterSets().Create(ctx, &clusterv1beta2.ManagedClusterSet{
		ObjectMeta: metav1.ObjectMeta{Name: "default"},
		Spec:       clusterv1beta2.ManagedClusterSetSpec{ClusterSelector: clusterv1beta2.ManagedClusterSelector{SelectorType: clusterv1beta2.ExclusiveClusterSetLabel}},
	}, metav1.CreateOptions{})
	must(err)
	// What `make deploy` leaves: the namespace scoreflow.
	_, err = hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: Namespace}}, metav1.CreateOptions{})
	must(err)

	// Section 2: the ManagedClusters, then what OCM's registration hub does for each accepted one
	// (ocm pkg/registration/hub/managedcluster: its namespace and HubAcceptedManagedCluster; hub/taint:
	// without an agent, condition Available is unknown, hence the unreachable taint).
	var clusters []string
	for _, d := range heredocDocs(blocks["clusters"]) {
		var mc clusterv1.ManagedCluster
		must(yaml.UnmarshalStrict([]byte(d), &mc))
		mc.Spec.Taints = []clusterv1.Taint{{Key: clusterv1.ManagedClusterTaintUnreachable, Effect: clusterv1.TaintEffectNoSelect}}
		_, err := hub.Cluster.ClusterV1().ManagedClusters().Create(ctx, &mc, metav1.CreateOptions{})
		must(err)
		if !mc.Spec.HubAcceptsClient {
			t.Fatalf("the quickstart's ManagedCluster %s does not set hubAcceptsClient: the writer would refuse its scores", mc.Name)
		}
		_, err = hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: mc.Name}}, metav1.CreateOptions{})
		must(err)
		must(hub.AcceptCluster(ctx, mc.Name))
		clusters = append(clusters, mc.Name)
	}
	if strings.Join(clusters, ",") != "cluster1,cluster2" {
		t.Fatalf("the quickstart registers %v, want cluster1 and cluster2", clusters)
	}

	// Section 6: `clusteradm clusterset bind <set> --namespace <ns>` creates a binding; then the Placement.
	bind := regexp.MustCompile(`clusteradm clusterset bind (\S+) --namespace (\S+)`).FindStringSubmatch(blocks["placement"])
	if bind == nil {
		t.Fatal("the Placement block does not bind a cluster set with clusteradm")
	}
	_, err = hub.Cluster.ClusterV1beta2().ManagedClusterSetBindings(bind[2]).Create(ctx, &clusterv1beta2.ManagedClusterSetBinding{
		ObjectMeta: metav1.ObjectMeta{Name: bind[1], Namespace: bind[2]}, Spec: clusterv1beta2.ManagedClusterSetBindingSpec{ClusterSet: bind[1]}}, metav1.CreateOptions{})
	must(err)
	docs := heredocDocs(blocks["placement"])
	if len(docs) != 1 {
		t.Fatalf("the Placement block holds %d documents, want 1", len(docs))
	}
	var pl clusterv1beta1.Placement
	must(yaml.UnmarshalStrict([]byte(docs[0]), &pl))

	logFile, err := os.Create(filepath.Join(t.TempDir(), "placement.log"))
	must(err)
	pc, err := hub.StartPlacementController(logFile)
	must(err)
	t.Cleanup(func() { _ = pc.Stop() })

	// The real score-writer, as deployed, reached by the doc's curl instead of the broker.
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	must(hub.WriteKubeconfig(kubeconfig))
	writer := startWriterBinary(t, dir, "KUBECONFIG="+kubeconfig, "POD_NAMESPACE=default") // its Lease: where a pod's token would say
	event := blocks["event"]
	swapped := strings.NewReplacer(`"value": 80`, `"value": 20`, `"value": 20`, `"value": 80`).Replace(event)
	if swapped == event {
		t.Fatal("the curl block has no values 80 and 20 to swap")
	}

	created, err := hub.Cluster.ClusterV1beta1().Placements(pl.Namespace).Create(ctx, &pl, metav1.CreateOptions{})
	must(err)
	runCurl(t, event, writer)
	waitDecision(ctx, t, hub, created, "cluster1")
	runCurl(t, swapped, writer) // a second later: a later Ce-Time
	waitDecision(ctx, t, hub, created, "cluster2")

	// The same Placement in Additive mode, alone on the hub (Balance counts other Placements'
	// decisions, so the first one and its decision go, as OCM's garbage collector would remove them):
	// the swap back does not move it, and the controller's totals are the doc's (mirrored).
	must(hub.Cluster.ClusterV1beta1().Placements(pl.Namespace).Delete(ctx, pl.Name, metav1.DeleteOptions{}))
	must(hub.Cluster.ClusterV1beta1().PlacementDecisions(pl.Namespace).DeleteCollection(ctx, metav1.DeleteOptions{},
		metav1.ListOptions{LabelSelector: clusterv1beta1.PlacementLabel + "=" + pl.Name}))
	additive := pl.DeepCopy()
	additive.Name += "-additive"
	additive.Spec.PrioritizerPolicy.Mode = clusterv1beta1.PrioritizerPolicyModeAdditive
	created, err = hub.Cluster.ClusterV1beta1().Placements(pl.Namespace).Create(ctx, additive, metav1.CreateOptions{})
	must(err)
	waitDecision(ctx, t, hub, created, "cluster2")
	runCurl(t, event, writer)
	want := map[string]int64{"cluster2": 20 + 100 + 100, "cluster1": 80 + 100}
	var got map[string]int64
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		results, err := pc.Prioritize(ctx, created.Namespace, created.Name)
		must(err)
		got = map[string]int64{}
		for _, r := range results {
			for c, v := range r.Scores {
				got[c] += int64(r.Weight) * v
			}
		}
		if fmt.Sprint(got) == fmt.Sprint(want) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("Additive totals after the swap back: %v, want %v (docs/quickstart.md section 6)", got, want)
		}
	}
	waitDecision(ctx, t, hub, created, "cluster2")
}

// startWriterBinary builds functions/score-writer and runs it on a free loopback port with env, as
// Knative runs its image (PORT), until the test ends.
func startWriterBinary(t *testing.T, dir string, env ...string) string {
	t.Helper()
	bin := filepath.Join(dir, "score-writer")
	if out, err := exec.Command("go", "build", "-o", bin, filepath.Join(repo, "functions", "score-writer")).CombinedOutput(); err != nil {
		t.Fatalf("building the score-writer: %v\n%s", err, out)
	}
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	out := &proc.Buffer{}
	cmd := exec.Command(bin)
	cmd.Env = append(os.Environ(), append([]string{"ADDRESS=127.0.0.1", fmt.Sprintf("PORT=%d", port)}, env...)...)
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = proc.DieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		_ = cmd.Wait()
		if t.Failed() {
			t.Logf("score-writer output:\n%s", out.String())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		if resp, err := http.Get(url + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("score-writer not ready within 30s:\n%s", out.String())
		}
	}
}

// runCurl runs a curl block of the quickstart with bash, BROKER pointing at url, and fails unless
// the event is answered 200 (the writer itself answers; the broker would answer 202). It first waits
// for the next second, so that the block's Ce-Time (whole seconds) is later than any sent before.
func runCurl(t *testing.T, block, url string) {
	t.Helper()
	time.Sleep(time.Until(time.Now().Truncate(time.Second).Add(time.Second + 50*time.Millisecond)))
	cmd := exec.Command("bash", "-euo", "pipefail", "-c", block)
	cmd.Env = append(os.Environ(), "BROKER="+url)
	out, err := cmd.CombinedOutput()
	if err != nil || !regexp.MustCompile(`(?m)^HTTP/1\.1 200`).Match(out) {
		t.Fatalf("the quickstart's curl: %v\n%s", err, out)
	}
}

func waitDecision(ctx context.Context, t *testing.T, hub *localhub.Hub, p *clusterv1beta1.Placement, want string) {
	t.Helper()
	var got []string
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
		ds, err := hub.Cluster.ClusterV1beta1().PlacementDecisions(p.Namespace).List(ctx, metav1.ListOptions{LabelSelector: clusterv1beta1.PlacementLabel + "=" + p.Name})
		if err != nil {
			t.Fatal(err)
		}
		got = nil
		for _, d := range ds.Items {
			for _, c := range d.Status.Decisions {
				got = append(got, c.ClusterName)
			}
		}
		if strings.Join(got, ",") == want {
			return
		}
	}
	t.Fatalf("Placement %s/%s decides %v, want %s", p.Namespace, p.Name, got, want)
}

// TestQuickstartSampleDataNamesItsClusters: the sample data the quickstart has a reader apply (the
// default variant's ConfigMaps and PingSources, the Python example, DSF's examples) names only the
// clusters the quickstart registers; any other cluster is refused UnknownCluster every minute.
func TestQuickstartSampleDataNamesItsClusters(t *testing.T) {
	var registered []string
	for _, d := range heredocDocs(quickstartBlocks(t)["clusters"]) {
		var mc clusterv1.ManagedCluster
		if err := yaml.UnmarshalStrict([]byte(d), &mc); err != nil {
			t.Fatal(err)
		}
		registered = append(registered, mc.Name)
	}
	known := map[string]bool{}
	for _, c := range registered {
		known[c] = true
	}
	clusterName := regexp.MustCompile(`\b(cluster\d+|worker\d+)\b`)
	check := func(where, data string) {
		for _, c := range clusterName.FindAllString(data, -1) {
			if !known[c] {
				t.Errorf("%s names cluster %s, which the quickstart does not register (%v)", where, c, registered)
			}
		}
	}
	n := 0
	s := load(t, setHub)
	for _, it := range s.ConfigMaps {
		for k, v := range it.Object.Data {
			check(fmt.Sprintf("%s: ConfigMap %s %s", it.Source, it.Object.Name, k), v)
			n++
		}
	}
	for _, it := range s.PingSources {
		check(fmt.Sprintf("%s: PingSource %s", it.Source, it.Object.Name), it.Object.Spec.Data)
		n++
	}
	// The examples a reader applies on top.
	examples, err := filepath.Glob(filepath.Join(repo, "deploy", "dsf", "*.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range append(examples, filepath.Join(repo, "examples", "python-scorer", "scorer.yaml")) {
		b, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		check(strings.TrimPrefix(f, repo+"/"), string(b))
	}
	if n < 10 {
		t.Errorf("checked %d ConfigMap entries and PingSources, want at least 10 (the check may have stopped seeing them)", n)
	}
}

// TestQuickstartKafkaSteps: the quickstart's Kafka-backed Broker steps fit the manifests: the
// channel-based Broker is deleted before the Kafka variant is deployed (the broker class is
// immutable: eventing's broker_validation), and the topic settings the doc states are those of
// brokers/kafka/ (a replication factor above the number of Kafka brokers fails the topic).
func TestQuickstartKafkaSteps(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	doc := string(b)
	if !regexp.MustCompile("(?s)```sh\nkubectl delete broker " + BrokerName + " -n " + Namespace + "\nmake deploy VARIANT=kafka\n```").MatchString(doc) {
		t.Error("the quickstart does not delete the channel-based Broker right before make deploy VARIANT=kafka")
	}
	s := load(t, setHubKafka)
	cm, ok := manifests.Find(s.ConfigMaps, Namespace, "scoreflow-kafka-broker-config")
	if !ok {
		t.Fatal("config/kafka has no ConfigMap scoreflow-kafka-broker-config")
	}
	rf := cm.Object.Data["default.topic.replication.factor"]
	if !strings.Contains(doc, "replication factor of "+rf) {
		t.Errorf("brokers/kafka/ asks for replication factor %s; the quickstart does not say so", rf)
	}
	host := strings.Split(cm.Object.Data["bootstrap.servers"], ".")
	if len(host) < 2 || !strings.Contains(doc, "cluster `"+strings.TrimSuffix(host[0], "-kafka-bootstrap")+"` in namespace `"+host[1]+"`") {
		t.Errorf("the quickstart does not name the Kafka cluster of bootstrap.servers %s", cm.Object.Data["bootstrap.servers"])
	}
	if !strings.Contains(doc, "http://kafka-broker-ingress.knative-eventing.svc.cluster.local/"+Namespace+"/"+BrokerName) {
		t.Error("the quickstart does not give the Kafka-backed Broker's address")
	}
}
