package functest

import (
	"bufio"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/proc"
)

// Python runs a scorer written in Python (a script that prints "listening on <url>" once it
// serves, as the DSF test scorers and examples/python-scorer do) with extra environment and
// arguments, and returns its base URL. The test's cleanup stops it; it dies with the test binary.
func Python(t testing.TB, env []string, script string, args ...string) string {
	t.Helper()
	cmd := exec.Command("python3", append([]string{script}, args...)...)
	cmd.Env = append(os.Environ(), env...)
	cmd.Stderr = os.Stderr
	cmd.SysProcAttr = proc.DieWithParent()
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatalf("python3 %s: %v", script, err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	line := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(out)
		if sc.Scan() {
			line <- sc.Text()
		}
		close(line)
		_, _ = io.Copy(io.Discard, out) // keep its pipe drained
	}()
	select {
	case l, ok := <-line:
		if !ok || !strings.HasPrefix(l, "listening on ") {
			t.Fatalf("python scorer %s %v did not start: %q", script, args, l)
		}
		return strings.TrimPrefix(l, "listening on ")
	case <-time.After(20 * time.Second):
		t.Fatalf("python scorer %s %v did not start in 20s", script, args)
	}
	return ""
}
