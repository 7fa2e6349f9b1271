package promtest

import (
	"errors"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/promlocal"
)

// MainEnv, when set, makes a function's test binary run the function's main instead of its tests.
// The function's TestMain does:
//
//	if os.Getenv(promtest.MainEnv) != "" { main(); return }
const MainEnv = "PROMTEST_RUN_MAIN"

// Exec runs the function (the test binary re-executed as main) with args to completion and returns
// its combined output and exit code.
func Exec(t testing.TB, args ...string) (string, int) {
	t.Helper()
	cmd := exec.Command(os.Args[0], args...)
	cmd.Env = append(os.Environ(), MainEnv+"=1")
	out, err := cmd.CombinedOutput()
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

// RunMain starts the function (the test binary re-executed as main) on a free local port with
// args, waits until /readyz answers 200 and returns its base URL. At cleanup it sends SIGTERM and
// fails the test unless the function drains and exits 0.
func RunMain(t testing.TB, args ...string) string {
	t.Helper()
	port, err := promlocal.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	out := &promlocal.LockedBuffer{}
	cmd := exec.Command(os.Args[0], append([]string{"--address=127.0.0.1", fmt.Sprintf("--port=%d", port)}, args...)...)
	cmd.Env = append(os.Environ(), MainEnv+"=1")
	cmd.Stdout, cmd.Stderr = out, out
	promlocal.DieWithParent(cmd)
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	url := "http://" + net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	t.Cleanup(func() {
		_ = cmd.Process.Signal(syscall.SIGTERM)
		select {
		case err := <-done:
			if err != nil {
				t.Errorf("function exited with %v after SIGTERM; output:\n%s", err, out.String())
			}
		case <-time.After(30 * time.Second):
			_ = cmd.Process.Kill()
			t.Errorf("function did not exit after SIGTERM; output:\n%s", out.String())
		}
	})
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-done:
			done <- err
			t.Fatalf("function exited before it was ready (%v); output:\n%s", err, out.String())
		default:
		}
		if resp, err := http.Get(url + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	t.Fatalf("function not ready at %s; output:\n%s", url, out.String())
	return ""
}
