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
		"--mark-interval  [env MARK_INTERVAL]", "--kube-api-qps", "--port  [env PORT]")
}

func TestBadKubeconfigIsFatal(t *testing.T) {
	out, code := functest.Exec(t, nil, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--port", "0")
	if code != 1 || !strings.Contains(out, "hub config") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// The binary as deployed, configured by env against a real hub: a request naming a cluster the
// hub does not have is answered 422 UnknownObject on POST /optimize, and SIGTERM drains it.
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
	fn := functest.Start(t, []string{"KUBECONFIG=" + kubeconfig, "TIME_LIMIT=2s"})
	body := `{"namespace":"default","clusters":[{"name":"nowhere","availablePolicies":[{"name":"p"}]}],` +
		`"targetWorkloads":[{"name":"w"}],"preference":{"addonPlacementScore":"example-performance-score"}}`
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, fn.URL+"/optimize", strings.NewReader(body))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	var f optimizer.Failure
	err = json.NewDecoder(resp.Body).Decode(&f)
	resp.Body.Close()
	if err != nil || resp.StatusCode != 422 || f.Reason != optimizer.ReasonUnknownObject {
		t.Errorf("status %d, failure %+v (%v)", resp.StatusCode, f, err)
	}
	fn.Stop(t, 30*time.Second)
}
