package devrun

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/manifests"
)

// TestEveryServiceRunsLocally: each Service of deploy/ becomes a local process description;
// mounted ConfigMaps become files, optional Secrets an empty directory, projected ServiceAccount
// tokens files the stack keeps current, and env paths into any of them point at the local copy.
func TestEveryServiceRunsLocally(t *testing.T) {
	set, err := manifests.Load(filepath.Join("..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	dir := t.TempDir()
	fns, err := functionsFrom(set, "bin", dir)
	if err != nil {
		t.Fatal(err)
	}
	byName := map[string]*Function{}
	for _, f := range fns {
		byName[f.Name] = f
	}
	if b := byName["dsf-bridge"]; b == nil || !strings.HasPrefix(b.Env["TOKEN_DIR"], dir) {
		t.Errorf("dsf-bridge: %+v; want TOKEN_DIR under %s", b, dir)
	}
	// A projected ServiceAccount token: the stack keeps it at the local path the env names.
	if m := byName["mcp-server"]; m == nil {
		t.Error("no mcp-server")
	} else if tok, ok := m.Tokens[m.Env["OPTIMIZER_TOKEN_FILE"]]; !ok || tok.Audience != "scoreflow/optimizer" || m.ServiceAccount != "mcp-server" {
		t.Errorf("mcp-server: OPTIMIZER_TOKEN_FILE %q, tokens %+v, account %q; want a token of mcp-server for scoreflow/optimizer there",
			m.Env["OPTIMIZER_TOKEN_FILE"], m.Tokens, m.ServiceAccount)
	}
	w := byName["score-writer"]
	if w == nil {
		t.Fatal("no score-writer")
	}
	if _, ok := w.Files[w.Env["MASKS_FILE"]]; !ok {
		t.Errorf("score-writer: MASKS_FILE %q is not one of its files %v", w.Env["MASKS_FILE"], w.Files)
	}
}

// TestOIDCLayoutPatchesTheServices: with sender identity on, a run reads oidc/'s Broker and
// Triggers, and every oidc/patches file applies to its Service in both forms a run uses (the typed
// one the local process is made from, the object sent to the hub), with the same result.
func TestOIDCLayoutPatchesTheServices(t *testing.T) {
	root := filepath.Join("..", "..")
	l, err := layoutOf(root, true)
	if err != nil {
		t.Fatal(err)
	}
	set, err := manifests.Load(l.broker, l.triggers, l.deploy)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.patchSet(set); err != nil {
		t.Fatal(err)
	}
	fns, err := functionsFrom(set, "bin", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	objs, err := knlocal.ReadFiles(l.deploy)
	if err != nil {
		t.Fatal(err)
	}
	if err := l.patchObjects(objs); err != nil {
		t.Fatal(err)
	}
	onHub := map[string]string{}
	for _, o := range objs {
		if o.GetKind() != "Service" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
		for _, e := range env {
			if m := e.(map[string]any); m["name"] == "AUTH_AUDIENCE" {
				onHub[o.GetName()] = m["value"].(string)
			}
		}
	}
	verifying := 0
	byName := map[string]*Function{}
	for _, f := range fns {
		byName[f.Name] = f
		if f.Env["AUTH_AUDIENCE"] != onHub[f.Name] {
			t.Errorf("%s: AUTH_AUDIENCE %q locally, %q on the hub", f.Name, f.Env["AUTH_AUDIENCE"], onHub[f.Name])
		}
		if f.Env["AUTH_OIDC"] == "true" {
			verifying++
		}
	}
	if want := len(l.patches) - 1; verifying != want { // every patch but cloudevents-player's
		t.Errorf("%d functions verify callers, want %d (one per oidc/patches file but cloudevents-player's)", verifying, want)
	}
	if w := byName["metric-watcher"]; w == nil || w.Env["AUTH_OIDC"] == "true" {
		t.Error("the metric-watcher, which no Trigger calls, verifies callers")
	}
}

// TestMountedFilesAreOwnerOnly: a function's mounted files are written readable by the user
// running scoreflow only, whether or not the function then starts.
func TestMountedFilesAreOwnerOnly(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "files", "fn", "config", "token")
	f := &Function{Name: "fn", Binary: "/bin/false", URL: "http://127.0.0.1:1", Files: map[string][]byte{file: []byte("s3cret")}}
	if err := f.start(context.Background(), nil, dir, 5*time.Second); err == nil {
		t.Fatal("a binary that exits at once started")
	}
	for path, want := range map[string]os.FileMode{file: 0o600, filepath.Dir(file): 0o700} {
		st, err := os.Stat(path)
		if err != nil {
			t.Fatal(err)
		}
		if got := st.Mode().Perm(); got != want {
			t.Errorf("%s: mode %v, want %v", path, got, want)
		}
	}
}
