package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/functest"
)

// A mask file the writer cannot use stops its start: writing what should be masked is worse than
// not starting.
func TestBadMasksFileIsFatal(t *testing.T) {
	dir := t.TempDir()
	kubeconfig := filepath.Join(dir, "kubeconfig")
	// A hub that is never contacted: the masks are read before.
	if err := os.WriteFile(kubeconfig, []byte(`apiVersion: v1
kind: Config
clusters: [{name: hub, cluster: {server: "https://127.0.0.1:1"}}]
users: [{name: u, user: {token: x}}]
contexts: [{name: c, context: {cluster: hub, user: u}}]
current-context: c
`), 0o600); err != nil {
		t.Fatal(err)
	}
	bad := filepath.Join(dir, "masks.yaml")
	if err := os.WriteFile(bad, []byte("- {clusterName: c1, scoreName: s}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		args  []string
		quote string
	}{
		{[]string{"--masks-file", bad}, `unknown field \"clusterName\"`},
		{[]string{"--masks-file", filepath.Join(dir, "missing.yaml")}, "no such file"},
		{[]string{"--masks-file", bad, "--masks-interval", "0s"}, "--masks-interval must be positive"},
	} {
		out, code := functest.Exec(t, []string{"KUBECONFIG=" + kubeconfig}, append(tt.args, "--port", "0")...)
		if code != 1 || !strings.Contains(out, tt.quote) {
			t.Errorf("%v: exit %d, output:\n%s\nwant 1 and %q", tt.args, code, out, tt.quote)
		}
	}
}
