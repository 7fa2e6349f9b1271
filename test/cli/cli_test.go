package e2e

import (
	"bufio"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/google/uuid"
)

func scoreflow(t *testing.T, args ...string) (string, error) {
	t.Helper()
	out, err := exec.Command(filepath.Join(binDir, "scoreflow"), args...).CombinedOutput()
	return string(out), err
}

// `scoreflow send` posts like curl, and `scoreflow scores` shows what landed on the hub.
func TestCLISendAndScores(t *testing.T) {
	data := `{"resource":"manual","items":[{"cluster":"cluster1","scores":[{"name":"fromCli","value":42}]}]}`
	out, err := scoreflow(t, "send", "--broker", stack.BrokerURL, "--id", uuid.NewString(), "--data", data)
	if err != nil || !strings.Contains(out, "202 Accepted") {
		t.Fatalf("send: %v\n%s", err, out)
	}
	eventually(t, 30*time.Second, "the score sent with the CLI did not land", func() bool {
		out, err = scoreflow(t, "scores", "--kubeconfig", stack.Kubeconfig)
		return err == nil && strings.Contains(out, "manual/fromCli")
	})
	lines := strings.Split(out, "\n")
	if !strings.HasPrefix(lines[0], "CLUSTER") || !strings.Contains(out, "placement scoreflow/most-idle-cpu decides: ") {
		t.Errorf("scores output:\n%s", out)
	}
	for _, l := range lines {
		if f := strings.Fields(l); len(f) > 0 && f[0] == "cluster1" && !strings.Contains(l, "42") {
			t.Errorf("cluster1's row lacks 42: %q", l)
		}
	}
	if out, err := scoreflow(t, "send", "--broker", stack.BrokerURL, "--data", "{not json"); err == nil || !strings.Contains(out, "not valid JSON") {
		t.Errorf("send with bad JSON: %v\n%s", err, out)
	}
}

// `scoreflow run` (make run) shows the demo's decision, and Ctrl-C stops every process it started.
func TestRunShowsDecisionsAndCtrlCLeavesNothing(t *testing.T) {
	state := t.TempDir()
	root, _ := filepath.Abs("../..")
	cmd := exec.Command(filepath.Join(binDir, "scoreflow"), "run", "--root", root, "--bin", binDir, "--state", state, "--broker-address", "127.0.0.1:0", "--quiet")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 1000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	var seen []string
	decisions := map[string]bool{}
	deadline := time.After(2 * time.Minute)
	for len(decisions) < 2 { // the demo load moves round the clusters: wait for the decision to move
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("scoreflow run exited:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if _, c, ok := strings.Cut(l, "most-idle-cpu decides: "); ok && strings.HasPrefix(c, "cluster") {
				decisions[c] = true
			}
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("no moving decision within 2 minutes:\n%s", strings.Join(seen, "\n"))
		}
	}
	children := descendants(cmd.Process.Pid)
	if len(children) < 10 {
		t.Errorf("only %d processes under scoreflow run: %v", len(children), children)
	}
	if err := cmd.Process.Signal(os.Interrupt); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() {
		for range lines {
		}
		done <- cmd.Wait()
	}()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("scoreflow run exited with %v after Ctrl-C", err)
		}
	case <-time.After(time.Minute):
		cmd.Process.Kill()
		t.Fatal("scoreflow run did not stop within a minute of Ctrl-C")
	}
	for _, pid := range children {
		if alive(pid) {
			t.Errorf("process %d (%s) outlived scoreflow run", pid, comm(pid))
		}
	}
}

// descendants lists the pids below pid, from /proc.
func descendants(pid int) []int {
	parent := map[int]int{}
	entries, _ := os.ReadDir("/proc")
	for _, e := range entries {
		p, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", p))
		if err != nil {
			continue
		}
		// pid (comm) state ppid ...: comm may hold spaces, so read after the last ')'.
		f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
		if len(f) > 1 {
			parent[p], _ = strconv.Atoi(f[1])
		}
	}
	var out []int
	var walk func(int)
	walk = func(p int) {
		for c, pp := range parent {
			if pp == p {
				out = append(out, c)
				walk(c)
			}
		}
	}
	walk(pid)
	return out
}

func alive(pid int) bool {
	stat, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return false
	}
	f := strings.Fields(string(stat[strings.LastIndexByte(string(stat), ')')+1:]))
	return len(f) > 0 && f[0] != "Z" && syscall.Kill(pid, 0) == nil
}

func comm(pid int) string {
	b, _ := os.ReadFile(fmt.Sprintf("/proc/%d/comm", pid))
	return strings.TrimSpace(string(b))
}
