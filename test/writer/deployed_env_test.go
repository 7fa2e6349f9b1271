package writer

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/manifests"
)

// deployedEnv is the env of deploy/score-writer.yaml's container for the names given, as
// NAME=value, so that a benchmark of "the writer as deployed" follows the manifest.
func deployedEnv(tb testing.TB, names ...string) []string {
	tb.Helper()
	s, err := manifests.Load(filepath.Join("..", "..", "deploy", "score-writer.yaml"))
	if err != nil {
		tb.Fatal(err)
	}
	svc, ok := manifests.Find(s.Services, "scoreflow", "score-writer")
	if !ok {
		tb.Fatal("deploy/score-writer.yaml has no Service scoreflow/score-writer")
	}
	var out []string
	for _, name := range names {
		found := false
		for _, c := range svc.Object.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == name {
					out, found = append(out, name+"="+e.Value), true
				}
			}
		}
		if !found {
			tb.Fatalf("deploy/score-writer.yaml sets no %s", name)
		}
	}
	return out
}

// TestDeployedEnv: the fleet benchmarks find the settings they run the writer with.
func TestDeployedEnv(t *testing.T) {
	if mib := deployedMemLimitMiB(t); mib <= 0 {
		t.Fatalf("GOMEMLIMIT %d MiB", mib)
	}
	if env := deployedEnv(t, "MAX_SCORE_SERIES"); env[0] == "MAX_SCORE_SERIES=" {
		t.Fatalf("deployed env %q", env)
	}
}

// deployedMemLimitMiB is the manifest's GOMEMLIMIT in MiB.
func deployedMemLimitMiB(tb testing.TB) int {
	tb.Helper()
	v := strings.TrimPrefix(deployedEnv(tb, "GOMEMLIMIT")[0], "GOMEMLIMIT=")
	mib, err := strconv.Atoi(strings.TrimSuffix(v, "MiB"))
	if err != nil || !strings.HasSuffix(v, "MiB") {
		tb.Fatalf("GOMEMLIMIT %q in deploy/score-writer.yaml: want a whole number of MiB", v)
	}
	return mib
}
