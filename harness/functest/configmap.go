package functest

import (
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// ConfigMapFile lays out a directory as the kubelet mounts a ConfigMap: the file is a symlink
// through ..data to a timestamped directory, and an update swaps ..data atomically (what a
// function that re-reads a mounted file must survive). It returns the file's path and a function
// that publishes new content.
func ConfigMapFile(t testing.TB, name, content string) (string, func(string)) {
	t.Helper()
	dir := t.TempDir()
	n := 0
	publish := func(content string) {
		n++
		ts := filepath.Join(dir, fmt.Sprintf("..2026_01_01_00_00_%02d", n))
		if err := os.Mkdir(ts, 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(ts, name), []byte(content), 0o644); err != nil {
			t.Fatal(err)
		}
		tmp := filepath.Join(dir, "..data_tmp")
		if err := os.Symlink(filepath.Base(ts), tmp); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, filepath.Join(dir, "..data")); err != nil {
			t.Fatal(err)
		}
	}
	publish(content)
	if err := os.Symlink(filepath.Join("..data", name), filepath.Join(dir, name)); err != nil {
		t.Fatal(err)
	}
	return filepath.Join(dir, name), publish
}
