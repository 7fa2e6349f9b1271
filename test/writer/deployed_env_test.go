package writer

import (
	"path/filepath"
	"strconv"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/manifests"
)

// deployedEnv is the env of deploy/score-writer.yaml's container for the names given, as
// NAME=value.
func deployedEnv(tb testing.TB, names ...string) []string {
	tb.Helper()
	env, err := manifests.ServiceEnv(filepath.Join("..", "..", "deploy", "score-writer.yaml"), "scoreflow", "score-writer", names...)
	if err != nil {
		tb.Fatal(err)
	}
	return env
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
