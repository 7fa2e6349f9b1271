package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/functest"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestHelp(t *testing.T) {
	functest.Help(t, "--kubeconfig  [env KUBECONFIG]", "--optimizer-url  [env OPTIMIZER_URL]",
		"--read-token-file  [env READ_TOKEN_FILE]", "--optimize-token-file  [env OPTIMIZE_TOKEN_FILE]",
		"--read-subjects  [env READ_SUBJECTS]", "--optimize-subjects  [env OPTIMIZE_SUBJECTS]", "--token-audience  [env TOKEN_AUDIENCE]",
		"--namespaces  [env NAMESPACES]", "--session-idle-timeout  [env SESSION_IDLE_TIMEOUT]", "--max-sessions  [env MAX_SESSIONS]",
		"--max-sessions-per-caller  [env MAX_SESSIONS_PER_CALLER]")
}

// Without namespaces explain_placement could read none: the server refuses to start.
func TestNoNamespacesIsFatal(t *testing.T) {
	out, code := functest.Exec(t, nil, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--port", "0", "--read-token-file", "/dev/null")
	if code != 1 || !strings.Contains(out, "--namespaces") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// Without a token file or an allowed subject the server refuses to start: /mcp is never open to anyone.
func TestNoTokenIsFatal(t *testing.T) {
	out, code := functest.Exec(t, nil, "--kubeconfig", filepath.Join(t.TempDir(), "missing"), "--port", "0")
	if code != 1 || !strings.Contains(out, "no caller can be admitted") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}
