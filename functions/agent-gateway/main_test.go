package main

import (
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/functest"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") || functest.Imports(t, "knative.dev/pkg") {
		t.Error("the agent gateway imports knative.dev/eventing or knative.dev/pkg")
	}
}

func TestHelp(t *testing.T) {
	functest.Help(t, "--agents-file  [env AGENTS_FILE]", "--audience  [env AUDIENCE]", "--sink  [env SINK]", "--kubeconfig  [env KUBECONFIG]")
}

// Without its table the gateway does not start: it would have no agent to admit, and nothing may
// widen that but its deployment.
func TestRefusesToStartWithoutATable(t *testing.T) {
	out, code := functest.Exec(t, []string{"K_SINK=http://127.0.0.1:1"})
	if code != 1 || !strings.Contains(out, "--agents-file is required") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}
