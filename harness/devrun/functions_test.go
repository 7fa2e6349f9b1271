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

// TestEveryServiceRunsLocally: each Service and Deployment of deploy/ becomes a local process description;
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
	// A source is a Deployment: run like the Services, but nothing resolves it as an address.
	if mw := byName["metric-watcher"]; mw == nil {
		t.Error("no metric-watcher")
	} else if _, ok := mw.Files[mw.Env["CONFIG"]]; !ok || mw.Kind != knlocal.DeploymentKind || mw.Addressable() || !boundBySink(set, mw) {
		t.Errorf("metric-watcher: kind %v, addressable %v, bound by a SinkBinding %v, CONFIG %q among %v; want a Deployment, not addressable, bound, its ConfigMap's file",
			mw.Kind, mw.Addressable(), boundBySink(set, mw), mw.Env["CONFIG"], mw.Files)
	}
	if o := byName["optimizer"]; o == nil || o.Kind != knlocal.ServiceKind || !o.Addressable() || boundBySink(set, o) {
		t.Errorf("optimizer: %+v; want a Knative Service, addressable, bound by no SinkBinding", o)
	}
	w := byName["score-writer"]
	if w == nil {
		t.Fatal("no score-writer")
	}
	if _, ok := w.Files[w.Env["MASKS_FILE"]]; !ok {
		t.Errorf("score-writer: MASKS_FILE %q is not one of its files %v", w.Env["MASKS_FILE"], w.Files)
	}
}

// TestOIDCVariantServices: a run with sender identity builds config/oidc, and the local processes
// are made from the same objects the hub gets: each function carries the AUTH_ settings of its
// Service on the hub, every function of an oidc/patches file verifies its callers, and the
// metric-watcher, which no Trigger calls, does not.
func TestOIDCVariantServices(t *testing.T) {
	root := filepath.Join("..", "..")
	if v := Variant(true, false); v != "oidc" {
		t.Fatalf("Variant(oidc) = %q", v)
	}
	built, err := manifests.Build(filepath.Join(root, "config", Variant(true, false)))
	if err != nil {
		t.Fatal(err)
	}
	set, err := manifests.Decode(built)
	if err != nil {
		t.Fatal(err)
	}
	fns, err := functionsFrom(set, "bin", t.TempDir())
	if err != nil {
		t.Fatal(err)
	}
	onHub := map[string]map[string]string{}
	for _, it := range built {
		o := it.Object
		if o.GetKind() != "Service" {
			continue
		}
		containers, _, _ := unstructured.NestedSlice(o.Object, "spec", "template", "spec", "containers")
		env, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "env")
		onHub[o.GetName()] = map[string]string{}
		for _, e := range env {
			m := e.(map[string]any)
			if name := m["name"].(string); strings.HasPrefix(name, "AUTH_") {
				onHub[o.GetName()][name], _ = m["value"].(string)
			}
		}
	}
	patches, err := filepath.Glob(filepath.Join(root, "oidc", "patches", "*.json"))
	if err != nil || len(patches) == 0 {
		t.Fatalf("no oidc/patches (%v)", err)
	}
	verifying := 0
	byName := map[string]*Function{}
	for _, f := range fns {
		byName[f.Name] = f
		for _, k := range []string{"AUTH_OIDC", "AUTH_AUDIENCE", "AUTH_ALLOWED_SUBJECTS"} {
			if f.Env[k] != onHub[f.Name][k] {
				t.Errorf("%s: %s %q locally, %q on the hub", f.Name, k, f.Env[k], onHub[f.Name][k])
			}
		}
		if f.Env["AUTH_OIDC"] == "true" {
			verifying++
		}
	}
	if want := len(patches); verifying != want {
		t.Errorf("%d functions verify callers, want %d (one per oidc/patches file)", verifying, want)
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
