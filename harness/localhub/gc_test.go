package localhub_test

import (
	"bufio"
	"context"
	"fmt"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/localhub"
)

// A process that starts a hub and its garbage collector for TestGarbageCollectorDiesWithParent,
// prints the collector's pid and the hub's directory, and waits to be killed.
func init() {
	if os.Getenv("LOCALHUB_GC_CHILD") != "1" {
		return
	}
	hub, err := localhub.Start()
	if err != nil {
		fmt.Println("error:", err)
		os.Exit(1)
	}
	gc, err := hub.StartGarbageCollector(context.Background(), nil)
	if err != nil {
		fmt.Println("error:", err)
		_ = hub.Stop()
		os.Exit(1)
	}
	fmt.Println("pid:", gc.Pid(), hub.Dir())
	select {}
}

// TestGarbageCollectorDiesWithParent starts the garbage collector in a child process, which
// returns only once the collector has deleted an object whose owner was deleted, then kills that
// process with SIGKILL (no cleanup runs) and checks kube-controller-manager goes with it.
func TestGarbageCollectorDiesWithParent(t *testing.T) {
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), "LOCALHUB_GC_CHILD=1")
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() { _ = cmd.Process.Kill(); _ = cmd.Wait() }()
	lines := make(chan string, 10)
	go func() {
		s := bufio.NewScanner(out)
		for s.Scan() {
			lines <- s.Text()
		}
		close(lines)
	}()
	pid := 0
	select {
	case l, ok := <-lines:
		f := strings.Fields(l)
		if !ok || len(f) != 3 || f[0] != "pid:" {
			t.Fatalf("child: %q", l)
		}
		if pid, err = strconv.Atoi(f[1]); err != nil {
			t.Fatal(err)
		}
		// The killed child cannot remove its hub's files.
		t.Cleanup(func() { _ = os.RemoveAll(f[2]) })
	case <-time.After(3 * time.Minute):
		t.Fatal("the child did not start the garbage collector within 3 minutes")
	}
	if err := syscall.Kill(pid, 0); err != nil {
		t.Fatalf("kube-controller-manager %d not running: %v", pid, err)
	}
	if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	_ = cmd.Wait()
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		// Gone, or a zombie its new parent has yet to reap.
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
		if err != nil || strings.Contains(string(stat), ") Z ") {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("kube-controller-manager %d still running 10s after its parent was killed", pid)
		}
	}
}
