package deploy

import (
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// TestLayering holds the import graph's layers: a client sits below the runtimes that use it
// (the Prometheus client returns typed errors; the scorer runtime gives them statuses and
// reasons), scorers share code through packages below them rather than through each other, and
// no function links Knative's own libraries (a function speaks CloudEvents over HTTP; knative.dev
// would bring its controllers' dependencies and init-time flags into every binary).
func TestLayering(t *testing.T) {
	deps := goDeps(t, "./pkg/...", "./functions/...")
	scorers := scorerPackages(t)
	if len(scorers) < 2 {
		t.Fatalf("found scorers %v: the rule below needs the functions/*-scorer directories", scorers)
	}
	for pkg, ds := range deps {
		var bad []string
		for _, d := range ds {
			switch {
			case pkg == modulePath+"/pkg/prom" && under(d, modulePath+"/pkg/scorer"):
				bad = append(bad, d+" (the Prometheus client sits below the scorer runtime)")
			case slices.Contains(scorers, pkg) && slices.Contains(scorers, d):
				bad = append(bad, d+" (a scorer shares code with another only through a package below both)")
			case under(pkg, modulePath+"/functions") && (under(d, "knative.dev/eventing") || under(d, "knative.dev/pkg")):
				bad = append(bad, d+" (functions link no knative.dev library)")
			}
		}
		if len(bad) > 0 {
			t.Errorf("%s depends on:\n  %s", pkg, strings.Join(bad, "\n  "))
		}
	}
	for _, p := range append([]string{modulePath + "/pkg/prom"}, scorers...) {
		if _, ok := deps[p]; !ok {
			t.Errorf("go list did not list %s: the rules above checked nothing for it", p)
		}
	}
}

// scorerPackages are the packages of the scorers shipped as functions: pkg/scorer/<name> for each
// functions/<name>-scorer.
func scorerPackages(t *testing.T) []string {
	t.Helper()
	dirs, err := filepath.Glob(filepath.Join(repo, "functions", "*-scorer"))
	if err != nil {
		t.Fatal(err)
	}
	var out []string
	for _, d := range dirs {
		name := strings.TrimSuffix(filepath.Base(d), "-scorer")
		if _, err := os.Stat(filepath.Join(repo, "pkg", "scorer", name)); err == nil {
			out = append(out, modulePath+"/pkg/scorer/"+name)
		}
	}
	return out
}

// goDeps maps each package matching patterns to every package it depends on, directly or not.
func goDeps(t *testing.T, patterns ...string) map[string][]string {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-f", "{{.ImportPath}}{{range .Deps}} {{.}}{{end}}{{with .Error}} ERROR: {{.Err}}{{end}}"}, patterns...)...)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	deps := map[string][]string{}
	for _, line := range strings.Split(strings.TrimSpace(string(out)), "\n") {
		if pkg, msg, ok := strings.Cut(line, " ERROR: "); ok {
			t.Errorf("%s: %s", strings.Fields(pkg)[0], msg)
			line = pkg
		}
		f := strings.Fields(line)
		deps[f[0]] = f[1:]
	}
	return deps
}

func under(pkg, prefix string) bool { return pkg == prefix || strings.HasPrefix(pkg, prefix+"/") }
