package main

import (
	"context"
	"encoding/json"
	"net/http"
	"path/filepath"
	"strings"
	"testing"
	"time"

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
