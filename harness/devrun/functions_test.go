package devrun

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/manifests"
)

// TestEveryServiceRunsLocally: each Service of deploy/ becomes a local process description;
// mounted ConfigMaps become files, optional Secrets an empty directory, and env paths into either
// point at the local copy.
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
	w := byName["score-writer"]
	if w == nil {
		t.Fatal("no score-writer")
	}
	if _, ok := w.Files[w.Env["MASKS_FILE"]]; !ok {
		t.Errorf("score-writer: MASKS_FILE %q is not one of its files %v", w.Env["MASKS_FILE"], w.Files)
	}
}
