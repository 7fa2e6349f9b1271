// Package dsfupstream finds the Dynamic Scoring Framework's own sample scorers and published specs
// (open-cluster-management-io/dynamic-scoring-framework, unmodified, kept outside the repository)
// and runs those scorers as DSF's README says: Debian's python3 with FastAPI and uvicorn, from the
// sample's app/ directory. Tests prove scoreflow's DSF support against DSF's code, not against
// scorers written to pass.
package dsfupstream

import (
	"fmt"
	"io"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/proc"
)

// Python is Debian's interpreter: only it sees Debian's python3-fastapi and friends
// (hack/install-dsf-deps.sh installs them; another python3 on PATH may not).
const Python = "/usr/bin/python3"

// Dir is the upstream checkout: $DSF_UPSTREAM, else ../shared/dsf-upstream beside the repository
// (for a git worktree, beside its main checkout too). It fails the test when none holds DSF's
// samples: the DSF tests never pass by skipping.
func Dir(t testing.TB) string {
	t.Helper()
	d, err := find()
	if err != nil {
		t.Fatal(err)
	}
	return d
}

var (
	once    sync.Once
	found   string
	findErr error
)

func find() (string, error) {
	once.Do(func() {
		var tried []string
		try := func(d string) bool {
			if d == "" {
				return false
			}
			tried = append(tried, d)
			if _, err := os.Stat(filepath.Join(d, "samples", "sample-scorer", "app", "main.py")); err == nil {
				found = d
				return true
			}
			return false
		}
		if env := os.Getenv("DSF_UPSTREAM"); env != "" {
			if !try(env) {
				findErr = fmt.Errorf("DSF_UPSTREAM=%s holds no samples/sample-scorer/app/main.py", env)
			}
			return
		}
		for _, root := range repoRoots() {
			if try(filepath.Join(root, "..", "shared", "dsf-upstream")) {
				return
			}
		}
		findErr = fmt.Errorf("DSF's upstream samples are not found (tried %s): put open-cluster-management-io/dynamic-scoring-framework's samples/ there unmodified, or set DSF_UPSTREAM", strings.Join(tried, ", "))
	})
	return found, findErr
}

// repoRoots are the repository's top directory and, for a worktree, its main checkout's.
func repoRoots() []string {
	var out []string
	if b, err := exec.Command("git", "rev-parse", "--show-toplevel").Output(); err == nil {
		out = append(out, strings.TrimSpace(string(b)))
	}
	if b, err := exec.Command("git", "rev-parse", "--path-format=absolute", "--git-common-dir").Output(); err == nil {
		out = append(out, filepath.Dir(strings.TrimSpace(string(b))))
	}
	return out
}

// Spec is the path of a published spec, samples/<name>.
func Spec(t testing.TB, name string) string {
	t.Helper()
	p := filepath.Join(Dir(t), "samples", name)
	if _, err := os.Stat(p); err != nil {
		t.Fatal(err)
	}
	return p
}

// Scorer runs DSF's sample scorer samples/<sample>/app (sample-scorer, static-scorer,
// llm-forecast-scorer) unmodified with env added, on a free loopback port, until the test ends,
// and returns its base URL once /healthz answers. Its output goes to the test's log when the test
// fails. A missing interpreter or package fails the test, naming the fix.
func Scorer(t testing.TB, sample string, env ...string) string {
	t.Helper()
	app := filepath.Join(Dir(t), "samples", sample, "app")
	if _, err := os.Stat(filepath.Join(app, "main.py")); err != nil {
		t.Fatal(err)
	}
	if out, err := exec.Command(Python, "-c", "import fastapi, uvicorn, pydantic, jinja2, requests").CombinedOutput(); err != nil {
		t.Fatalf("%s cannot run DSF's scorers (%v: %s): run hack/install-dsf-deps.sh (make test does)", Python, err, strings.TrimSpace(string(out)))
	}
	port, err := proc.FreePort()
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(Python, "-m", "uvicorn", "main:app", "--host", "127.0.0.1", "--port", fmt.Sprint(port), "--log-level", "warning")
	cmd.Dir = app // the samples read ./contexts, templates/ and static/ from there
	// The checkout is read-only and stays unmodified: no __pycache__.
	cmd.Env = append(os.Environ(), append([]string{"PYTHONDONTWRITEBYTECODE=1", "PYTHONUNBUFFERED=1"}, env...)...)
	out := &proc.Buffer{}
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = proc.DieWithParent()
	if err := cmd.Start(); err != nil {
		t.Fatalf("%s %s: %v", sample, Python, err)
	}
	done := make(chan struct{})
	go func() { _ = cmd.Wait(); close(done) }()
	t.Cleanup(func() {
		_ = cmd.Process.Kill()
		<-done
		if t.Failed() {
			t.Logf("DSF %s output:\n%s", sample, tail(out.String(), 6000))
		}
	})
	url := fmt.Sprintf("http://127.0.0.1:%d", port)
	deadline := time.Now().Add(60 * time.Second)
	for {
		select {
		case <-done:
			t.Fatalf("DSF %s exited before it served:\n%s", sample, tail(out.String(), 6000))
		default:
		}
		if resp, err := http.Get(url + "/healthz"); err == nil {
			_, _ = io.Copy(io.Discard, resp.Body)
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return url
			}
		}
		if time.Now().After(deadline) {
			t.Fatalf("DSF %s did not answer /healthz within 60s:\n%s", sample, tail(out.String(), 6000))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func tail(s string, n int) string {
	if len(s) > n {
		return s[len(s)-n:]
	}
	return s
}
