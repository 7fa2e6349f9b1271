// Package cli runs `scoreflow run` as a user does and checks that it shows a moving decision and
// that nothing it starts outlives it, however it ends: Ctrl-C, kill -9, or its output pipe closing.
package cli

import (
	"bufio"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/scorespage"
)

var binDir string // the functions and the CLI, built once

func TestMain(m *testing.M) {
	bin, err := os.MkdirTemp("", "scoreflow-cli-bin-")
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	binDir = bin
	build := exec.Command("go", "build", "-o", bin+string(filepath.Separator), "./functions/...", "./cmd/scoreflow")
	build.Dir = "../.."
	if out, err := build.CombinedOutput(); err != nil {
		fmt.Fprintf(os.Stderr, "building functions: %v\n%s", err, out)
		os.Exit(1)
	}
	code := m.Run()
	_ = os.RemoveAll(bin)
	os.Exit(code)
}

// startRun starts `scoreflow run` with its output on a pipe and returns the command, the pipe and
// a channel of its lines (closed when the output ends).
func startRun(t *testing.T) (*exec.Cmd, io.ReadCloser, <-chan string) {
	t.Helper()
	root, _ := filepath.Abs("../..")
	// --lock-wait: the e2e package runs its own local Knative, and one runs per machine.
	cmd := exec.Command(filepath.Join(binDir, "scoreflow"), "run", "--root", root, "--bin", binDir, "--state", t.TempDir(), "--quiet", "--lock-wait", "15m")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = cmd.Stdout
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan string, 10000)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
		close(lines)
	}()
	return cmd, stdout, lines
}

// waitFor reads lines until one contains want.
func waitFor(t *testing.T, cmd *exec.Cmd, lines <-chan string, want string, timeout time.Duration) []string {
	t.Helper()
	var seen []string
	deadline := time.After(timeout)
	for {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("scoreflow run exited:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if strings.Contains(l, want) {
				return seen
			}
		case <-deadline:
			_ = cmd.Process.Kill()
			t.Fatalf("no %q within %s:\n%s", want, timeout, strings.Join(seen, "\n"))
		}
	}
}

// expectAllGone checks that none of pids is alive within a few seconds (the kernel delivers the
// parent-death signal at once; reaping by init takes a moment).
func expectAllGone(t *testing.T, pids []int) {
	t.Helper()
	deadline := time.Now().Add(15 * time.Second)
	for _, pid := range pids {
		for alive(pid) && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if alive(pid) {
			t.Errorf("process %d (%s) outlived scoreflow run", pid, comm(pid))
		}
	}
}

// scoreflow run killed with SIGKILL (no chance to clean up) takes every process it started with it.
func TestRunKilledLeavesNothing(t *testing.T) {
	cmd, _, lines := startRun(t)
	waitFor(t, cmd, lines, "scoreflow is running", 5*time.Minute)
	children := descendants(cmd.Process.Pid)
	if len(children) < 15 {
		t.Errorf("only %d processes under scoreflow run: %v", len(children), children)
	}
	_ = cmd.Process.Signal(syscall.SIGKILL)
	_ = cmd.Wait()
	expectAllGone(t, children)
}

// scoreflow run whose output pipe closes (`scoreflow run | tee log` with tee stopped) stops and
// takes every process it started with it.
func TestRunWithClosedPipeLeavesNothing(t *testing.T) {
	cmd, stdout, lines := startRun(t)
	waitFor(t, cmd, lines, "scoreflow is running", 5*time.Minute)
	children := descendants(cmd.Process.Pid)
	_ = stdout.Close()
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	select {
	case <-done:
	case <-time.After(2 * time.Minute):
		_ = cmd.Process.Kill()
		t.Fatal("scoreflow run went on after its output pipe closed")
	}
	expectAllGone(t, children)
}

// `scoreflow run` (make run) shows the demo's decision, and Ctrl-C stops every process it started.
func TestRunShowsDecisionsAndCtrlCLeavesNothing(t *testing.T) {
	cmd, _, lines := startRun(t)
	var seen []string
	decisions := map[string]bool{}
	// The Python example scorer's score (examples/python-scorer: its PingSource fires every minute,
	// cluster1 costs 20) in the run's score table: a column cost/cheap, 80 in cluster1's row.
	pythonScores := false
	column := -1
	deadline := time.After(5 * time.Minute)
	// The demo load moves round the clusters: wait for the decision to move.
	for len(decisions) < 2 || !pythonScores {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("scoreflow run exited:\n%s", strings.Join(seen, "\n"))
			}
			seen = append(seen, l)
			if _, c, ok := strings.Cut(l, "most-idle-cpu decides: "); ok && strings.HasPrefix(c, "cluster") {
				decisions[c] = true
			}
			if f := strings.Fields(l); len(f) > 0 && f[0] == "CLUSTER" {
				column = slices.Index(f, "cost/cheap")
			} else if len(f) > column && column > 0 && f[0] == "cluster1" && f[column] == "80" {
				pythonScores = true
			}
		case <-deadline:
			cmd.Process.Kill()
			t.Fatalf("within 5 minutes, decisions %v, Python example's scores seen: %v:\n%s", decisions, pythonScores, strings.Join(seen, "\n"))
		}
	}
	checkPage(t, seen)
	children := descendants(cmd.Process.Pid)
	if len(children) < 10 {
		t.Errorf("only %d processes under scoreflow run: %v", len(children), children)
	}
	python := false
	for _, pid := range children {
		python = python || strings.HasPrefix(comm(pid), "python3")
	}
	if !python {
		t.Errorf("no python3 process under scoreflow run (the example scorer)")
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

// checkPage reads the scores page's address from the lines `scoreflow run` printed and checks what
// the page holds: the demo's scores, the Placement's decision explained by its score, and events
// the broker delivered to it through its Trigger (triggers/scores-page.yaml).
func checkPage(t *testing.T, lines []string) {
	t.Helper()
	var url string
	for _, l := range lines {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "page" && strings.HasPrefix(f[1], "http://") {
			url = f[1]
		}
	}
	if url == "" {
		t.Errorf("scoreflow run printed no page address:\n%s", strings.Join(lines, "\n"))
		return
	}
	var snap scorespage.Snapshot
	for deadline := time.Now().Add(time.Minute); ; time.Sleep(time.Second) {
		resp, err := http.Get(url + "state")
		if err != nil {
			t.Fatalf("the page at %s: %v", url, err)
		}
		err = json.NewDecoder(resp.Body).Decode(&snap)
		resp.Body.Close()
		if err != nil {
			t.Fatalf("%sstate: %v", url, err)
		}
		types := map[string]bool{}
		for _, e := range snap.Events {
			types[e.Type] = true
		}
		placed := false
		for _, p := range snap.Placements {
			placed = placed || (p.Name == "most-idle-cpu" && len(p.Current.Clusters) == 1 && len(p.Current.Why) > 0 && len(p.Current.Why[0].Terms) == 1)
		}
		if placed && len(snap.Scores.Clusters) >= 3 && types["io.scoreflow.score.updated"] && types["io.scoreflow.score.write.done"] {
			return
		}
		if time.Now().After(deadline) {
			t.Errorf("the page at %s does not show the demo within a minute: clusters %v, placements %+v, event types %v", url, snap.Scores.Clusters, snap.Placements, types)
			return
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
