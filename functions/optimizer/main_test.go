package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeImport(t *testing.T) {
	for _, p := range []string{"knative.dev/eventing", "knative.dev/pkg"} {
		if functest.Imports(t, p) {
			t.Errorf("the optimizer imports %s", p)
		}
	}
}

func TestHelp(t *testing.T) {
	functest.Help(t, "--kubeconfig  [env KUBECONFIG]", "--lower-is-better  [env LOWER_IS_BETTER]", "--time-limit  [env TIME_LIMIT]", "--request-deadline  [env REQUEST_DEADLINE]",
		"--compliance-claim  [env COMPLIANCE_CLAIM]", "--compliance-value  [env COMPLIANCE_VALUE]", "--mark-compliance  [env MARK_COMPLIANCE]",
		"--mark-interval  [env MARK_INTERVAL]", "--namespaces  [env NAMESPACES]", "--kube-api-qps", "--port  [env PORT]")
}

func TestBadKubeconfigIsFatal(t *testing.T) {
	out, code := functest.Exec(t, nil, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--port", "0")
	if code != 1 || !strings.Contains(out, "hub config") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// Without the namespaces it may act in, the optimizer does not start.
func TestNamespacesAreRequired(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	for _, env := range [][]string{{"KUBECONFIG=" + kubeconfig}, {"KUBECONFIG=" + kubeconfig, "NAMESPACES=Bad_Name"}} {
		out, code := functest.Exec(t, env, "--port", "0")
		if code != 1 || !strings.Contains(out, "--namespaces") {
			t.Errorf("%v: exit %d, output:\n%s", env, code, out)
		}
	}
}

// The binary as deployed, configured by env against a real hub: a request naming a cluster the
// hub does not have is answered 422 UnknownObject on POST /optimize; one naming a namespace not
// in NAMESPACES is refused 400 Forbidden, and one that is not application/json 415 (a web page
// can post text/plain to another origin); SIGTERM drains it.
func TestBinaryAgainstARealHub(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"KUBECONFIG=" + kubeconfig, "TIME_LIMIT=2s", "NAMESPACES=default,team-a"})
	request := func(ns string) string {
		return `{"namespace":"` + ns + `","clusters":[{"name":"nowhere","availablePolicies":[{"name":"p"}]}],` +
			`"targetWorkloads":[{"name":"w"}],"preference":{"addonPlacementScore":"demo-performance-score"}}`
	}
	for _, c := range []struct {
		path, contentType, body string
		status                  int
		reason                  string
	}{
		{"/optimize", "application/json", request("default"), 422, string(optimizer.ReasonUnknownObject)},
		{"/optimize", "application/json; charset=utf-8", request("kube-system"), 400, "Forbidden"},
		{"/reset", "application/json", `{"namespace":"kube-system"}`, 400, "Forbidden"},
		{"/optimize", "text/plain", request("default"), 415, "InvalidData"},
		{"/reset", "application/x-www-form-urlencoded", `{"namespace":"default"}`, 415, "InvalidData"},
		{"/reset", "", `{"namespace":"default"}`, 415, "InvalidData"},
	} {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fn.URL+c.path, strings.NewReader(c.body))
		if c.contentType != "" {
			req.Header.Set("Content-Type", c.contentType)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		var f optimizer.Failure
		err = json.NewDecoder(resp.Body).Decode(&f)
		resp.Body.Close()
		cancel()
		if err != nil || resp.StatusCode != c.status || string(f.Reason) != c.reason {
			t.Errorf("POST %s (%s) %s: status %d, failure %+v (%v); want %d %s", c.path, c.contentType, c.body, resp.StatusCode, f, err, c.status, c.reason)
		}
	}
	fn.Stop(t, 30*time.Second)
}

// Two replicas of the optimizer, as Knative scales it out, both marking compliance against a
// real hub: only the one holding the Lease marks (it alone removes a compliance label that no
// binding justifies, and says so); when it stops, the other takes over and marks.
func TestTwoReplicasOneMarks(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallWorkloadCRDs(); err != nil {
		t.Fatal(err)
	}
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	if err := hub.AddCluster(ctx, "c1", nil); err != nil {
		t.Fatal(err)
	}
	label := optimizer.ComplianceLabelPrefix + "default"
	stale := func() {
		t.Helper()
		patch := []byte(`{"metadata":{"labels":{"` + label + `":"stale"}}}`)
		if _, err := hub.Cluster.ClusterV1().ManagedClusters().Patch(ctx, "c1", types.MergePatchType, patch, metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	removed := func(what string) {
		t.Helper()
		for deadline := time.Now().Add(20 * time.Second); ; time.Sleep(50 * time.Millisecond) {
			mc, err := hub.Cluster.ClusterV1().ManagedClusters().Get(ctx, "c1", metav1.GetOptions{})
			if err == nil && mc.Labels[label] == "" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("the stale label is still there %s", what)
			}
		}
	}
	env := []string{"KUBECONFIG=" + kubeconfig, "POD_NAMESPACE=default", "NAMESPACES=default", "MARK_COMPLIANCE=true", "MARK_INTERVAL=100ms"}
	args := []string{"--leader-elect-lease-duration", "10s", "--leader-elect-renew-deadline", "8s", "--leader-elect-retry-period", "250ms"}
	stale()
	replicas := []*functest.Process{functest.Start(t, env, args...), functest.Start(t, env, args...)}
	removed("with two replicas running")
	marked := func(r *functest.Process) bool { return strings.Contains(r.Output(), `"msg":"compliance labels"`) }
	var lead, follower *functest.Process
	for deadline := time.Now().Add(5 * time.Second); lead == nil; time.Sleep(10 * time.Millisecond) {
		switch {
		case marked(replicas[0]):
			lead, follower = replicas[0], replicas[1]
		case marked(replicas[1]):
			lead, follower = replicas[1], replicas[0]
		case time.Now().After(deadline):
			t.Fatal("neither replica logged the label it removed")
		}
	}
	if !strings.Contains(lead.Output(), `"msg":"leading"`) {
		t.Fatalf("the replica that marked holds no Lease:\n%s", lead.Output())
	}
	// Label after label, many syncs of both, only the leader marks; the other never leads.
	for range 5 {
		stale()
		removed("with the leader running")
	}
	time.Sleep(500 * time.Millisecond)
	if marked(follower) || strings.Contains(follower.Output(), `"msg":"leading"`) {
		t.Fatalf("the follower marked or led while the other led:\n%s", follower.Output())
	}

	stopped := time.Now()
	lead.Stop(t, 10*time.Second)
	stale()
	removed("after the leader stopped")
	if took := time.Since(stopped); took > 5*time.Second {
		t.Errorf("the other replica marked %s after the leader stopped: it waited for the Lease to expire instead of its release", took)
	}
	follower.WaitOutput(t, `"msg":"compliance labels"`, 5*time.Second)
}
