package functest

import (
	"bytes"
	"errors"
	"flag"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// mainEnv, when set, makes a function's test binary run the function's main instead of its tests.
const mainEnv = "FUNCTEST_RUN_MAIN"

// Main is a function's TestMain. When Exec or Start re-executed the test binary as the function,
// it runs main instead of the tests: the tests run the very code the image runs, with no go build.
//
//	func TestMain(m *testing.M) { functest.Main(m, main) }
func Main(m *testing.M, main func()) {
	if os.Getenv(mainEnv) != "" {
		main()
		return
	}
	os.Exit(m.Run())
}

// command is the test binary re-executed as the function with args; env (KEY=VALUE) is added to
// the test's own environment and wins over it.
func command(env, args []string) *exec.Cmd {
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(append(os.Environ(), mainEnv+"=1"), env...)
	return cmd
}

// Exec runs the function with env and args to completion and returns its combined output and
// exit code.
func Exec(t testing.TB, env []string, args ...string) (string, int) {
	t.Helper()
	out, err := command(env, args).CombinedOutput()
	var exit *exec.ExitError
	switch {
	case err == nil:
		return string(out), 0
	case errors.As(err, &exit):
		return string(out), exit.ExitCode()
	}
	t.Fatalf("running %v: %v", args, err)
	return "", -1
}

// Help runs the function with --help, fails the test unless it exits 0, and checks that the help
// mentions each of want.
func Help(t testing.TB, want ...string) {
	t.Helper()
	out, code := Exec(t, nil, "--help")
	if code != 0 {
		t.Fatalf("--help exited %d:\n%s", code, out)
	}
	for _, w := range want {
		if !strings.Contains(out, w) {
			t.Errorf("--help does not mention %q:\n%s", w, out)
		}
	}
}

// HelpExplainsEveryFlag checks fn's --help in process: every flag is listed, each with an
// explanation of its own (20 characters at least, no two alike), and the help mentions each of
// want.
func HelpExplainsEveryFlag(t testing.TB, fn *function.Function, want ...string) {
	t.Helper()
	var out bytes.Buffer
	fn.Flags.SetOutput(&out)
	if err := fn.Parse([]string{"--help"}); err != flag.ErrHelp {
		t.Fatalf("Parse(--help) = %v, want flag.ErrHelp", err)
	}
	seen := map[string]bool{}
	fn.Flags.VisitAll(func(f *flag.Flag) {
		if !strings.Contains(out.String(), "--"+f.Name+"  ") {
			t.Errorf("--help does not list --%s", f.Name)
		}
		if len(f.Usage) < 20 || seen[f.Usage] {
			t.Errorf("--%s has no explanation of its own: %q", f.Name, f.Usage)
		}
		seen[f.Usage] = true
	})
	for _, w := range want {
		if !strings.Contains(out.String(), w) {
			t.Errorf("--help does not mention %s", w)
		}
	}
}

// Imports reports whether the package under test depends on path (`go list -deps .` names it or
// a package below it): for functions that must stay free of a heavy dependency.
func Imports(t testing.TB, path string) bool {
	t.Helper()
	out, err := exec.Command("go", "list", "-deps", ".").Output()
	if err != nil {
		t.Fatal(err)
	}
	return bytes.Contains(out, []byte(path))
}

// Process is the function running in a process of its own, as its image runs on Knative.
type Process struct {
	URL string // http://127.0.0.1:PORT

	cmd     *exec.Cmd
	out     *proc.Buffer
	exited  chan struct{} // closed once the process has exited; err then says how
	err     error
	stopped bool
}

// Start runs the function with env and args on a free loopback port, configured as Knative does
// it (PORT in the environment), and waits until /readyz answers 200. At cleanup a function still
// running is stopped as Stop does, with 30s to exit; a failed test logs the function's output.
func Start(t testing.TB, env []string, args ...string) *Process {
	t.Helper()
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	p := &Process{URL: fmt.Sprintf("http://127.0.0.1:%d", port), out: &proc.Buffer{}, exited: make(chan struct{})}
	p.cmd = command(append([]string{"ADDRESS=127.0.0.1", fmt.Sprintf("PORT=%d", port)}, env...), args)
	p.cmd.Stdout, p.cmd.Stderr = p.out, p.out
	p.cmd.SysProcAttr = proc.DieWithParent()
	if err := p.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() { p.err = p.cmd.Wait(); close(p.exited) }()
	t.Cleanup(func() {
		if !p.stopped {
			p.Stop(t, 30*time.Second)
		}
		if t.Failed() {
			t.Logf("function output:\n%s", p.Output())
		}
	})
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		select {
		case <-p.exited:
			p.stopped = true
			t.Fatalf("function exited before it was ready (%v)", p.err)
		default:
		}
		if resp, err := http.Get(p.URL + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return p
			}
		}
	}
	t.Fatalf("function not ready at %s within 30s", p.URL)
	return nil
}

// Output is what the function has logged so far, stdout and stderr.
func (p *Process) Output() string { return p.out.String() }

// WaitOutput waits until the output contains want: it is copied from the child's pipe
// asynchronously, so a line the function logged before answering may not be there yet.
func (p *Process) WaitOutput(t testing.TB, want string, within time.Duration) {
	t.Helper()
	for deadline := time.Now().Add(within); !strings.Contains(p.out.String(), want); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Errorf("no %q in the function's output within %s:\n%s", want, within, p.out.String())
			return
		}
	}
}

// PID is the function's process id: for tests that watch its memory in /proc/PID/status.
func (p *Process) PID() int { return p.cmd.Process.Pid }

// Exited is closed once the process has exited, for tests that wait for something else meanwhile.
func (p *Process) Exited() <-chan struct{} { return p.exited }

// Stop sends SIGTERM and fails the test unless the function drains and exits 0 within the given
// time, as Knative expects of a pod it scales down; one that had already exited fails it too.
func (p *Process) Stop(t testing.TB, within time.Duration) {
	t.Helper()
	p.stopped = true
	select {
	case <-p.exited:
		t.Errorf("function exited before SIGTERM (%v)", p.err)
		return
	default:
	}
	_ = p.cmd.Process.Signal(syscall.SIGTERM)
	select {
	case <-p.exited:
		if p.err != nil {
			t.Errorf("exit after SIGTERM: %v", p.err)
		}
	case <-time.After(within):
		_ = p.cmd.Process.Kill()
		<-p.exited
		t.Errorf("still running %s after SIGTERM", within)
	}
}
