package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/manifests"
)

// TestKustomizationsListEveryFile: kustomize takes only the files a kustomization names, so a
// manifest added next to the others but not listed would silently never be deployed. Every
// manifest file of a kustomization's directory is a resource or a patch of it, and so is every
// file of a subdirectory it takes any file from (oidc/triggers/, oidc/patches/); a subdirectory
// it takes nothing from is applied on its own (deploy/managed-cluster/).
func TestKustomizationsListEveryFile(t *testing.T) {
	var roots []string
	for _, top := range []string{"deploy", "brokers", "triggers", "eventtypes", "oidc", "large-fleet", "config"} {
		err := filepath.WalkDir(filepath.Join(repo, top), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && manifests.IsKustomization(p) {
				roots = append(roots, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	if len(roots) < 10 {
		t.Fatalf("found only %d kustomizations: %v", len(roots), roots)
	}
	for _, root := range roots {
		rel, _ := filepath.Rel(repo, root)
		t.Run(rel, func(t *testing.T) {
			raw, err := os.ReadFile(filepath.Join(root, "kustomization.yaml"))
			if err != nil {
				t.Fatal(err)
			}
			var k types.Kustomization
			if err := yaml.UnmarshalStrict(raw, &k); err != nil {
				t.Fatal(err)
			}
			listed := map[string]bool{}
			for _, r := range k.Resources {
				listed[filepath.Clean(r)] = true
			}
			for _, p := range k.Patches {
				if p.Path != "" {
					listed[filepath.Clean(p.Path)] = true
				}
			}
			dirs := map[string]bool{".": true}
			for f := range listed {
				if d := filepath.Dir(f); !strings.HasPrefix(d, "..") {
					dirs[d] = true
				}
			}
			for d := range dirs {
				entries, err := os.ReadDir(filepath.Join(root, d))
				if err != nil {
					t.Fatal(err)
				}
				for _, e := range entries {
					f := filepath.Join(d, e.Name())
					if e.IsDir() || e.Name() == "kustomization.yaml" || !isManifestFile(e.Name()) {
						continue
					}
					if !listed[f] {
						t.Errorf("%s/kustomization.yaml does not list %s: it would never be applied", rel, f)
					}
				}
			}
		})
	}
}

func isManifestFile(name string) bool {
	switch filepath.Ext(name) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}
