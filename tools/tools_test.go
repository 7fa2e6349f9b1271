package tools

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
)

// `make run` builds exactly the tools scoreflow run starts: RUN_TOOLS in the Makefile is ForRun,
// and tools/build.sh knows every tool named here.
func TestMakeRunBuildsWhatRunNeeds(t *testing.T) {
	mk, err := os.ReadFile("../Makefile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RUN_TOOLS :?= (.*)$`).FindSubmatch(mk)
	if m == nil {
		t.Fatal("the Makefile has no RUN_TOOLS")
	}
	if got, want := strings.Fields(string(m[1])), ForRun; strings.Join(got, " ") != strings.Join(want, " ") {
		t.Errorf("Makefile RUN_TOOLS = %v, want tools.ForRun %v", got, want)
	}
	if !regexp.MustCompile(`(?m)^run: .*\$\(RUN_TOOLS\)|tools/build.sh \$\(RUN_TOOLS\)`).Match(mk) {
		t.Error("no Makefile rule builds $(RUN_TOOLS)")
	}
	script, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	order := regexp.MustCompile(`(?m)^order=\((.*)\)$`).FindSubmatch(script)
	if order == nil {
		t.Fatal("tools/build.sh has no order=(...)")
	}
	known := map[string]bool{}
	for _, n := range strings.Fields(string(order[1])) {
		known[n] = true
	}
	for _, n := range []string{Etcd, KubeAPIServer, KubeControllerManager, Prometheus, PrometheusKubernetesSD, Placement, AddonManager, Knative, GovernancePolicyPropagator, Jaeger} {
		if !known[n] {
			t.Errorf("tools/build.sh does not build %s", n)
		}
	}
}

func TestMissingNamesEachTool(t *testing.T) {
	dir := t.TempDir()
	t.Setenv("SCOREFLOW_CACHE", dir)
	bin := filepath.Join(dir, "bin")
	if err := os.MkdirAll(filepath.Join(bin, Knative), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{Etcd, filepath.Join(Knative, "controller")} {
		if err := os.WriteFile(filepath.Join(bin, f), []byte("#!/bin/sh\n"), 0o755); err != nil {
			t.Fatal(err)
		}
	}
	if err := Missing(Etcd, Knative); err != nil {
		t.Errorf("Missing(etcd, knative) with both built = %v", err)
	}
	err := Missing(Etcd, KubeAPIServer, Knative, Prometheus)
	if err == nil || !strings.Contains(err.Error(), "kube-apiserver, prometheus:") || !strings.Contains(err.Error(), "tools/build.sh kube-apiserver prometheus") {
		t.Errorf("Missing = %v, want kube-apiserver and prometheus named with the command", err)
	}
}

// The Knative Eventing build and scoreflow's own (functions, CLI, tests) compile the same
// Kubernetes client, apimachinery and API packages, and Go's build cache gives the second build
// the first one's packages only when every module they are built from is at the same version:
// tools/knative requires the main module's version of every module both compile.
func TestKnativeBuildSharesTheMainModulesVersions(t *testing.T) {
	script, err := os.ReadFile("build.sh")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`printf 'knative.dev/eventing/cmd/%s ' ([^)]*)\)`).FindSubmatch(script)
	if m == nil {
		t.Fatal("tools/build.sh: no list of Knative mains")
	}
	var knative []string
	for _, cmd := range strings.Fields(strings.ReplaceAll(string(m[1]), "\\", " ")) {
		knative = append(knative, "knative.dev/eventing/cmd/"+cmd)
	}
	modules := func(dir string, pkgs ...string) map[string]string {
		cmd := exec.Command("go", append([]string{"list", "-deps", "-f", "{{with .Module}}{{.Path}} {{.Version}}{{end}}"}, pkgs...)...)
		cmd.Dir = dir
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go list in %s: %v", dir, err)
		}
		mods := map[string]string{}
		for _, line := range strings.Split(string(out), "\n") {
			if path, version, ok := strings.Cut(line, " "); ok {
				mods[path] = version
			}
		}
		return mods
	}
	kn := modules("knative", knative...)
	main := modules("..", "./...")
	shared := 0
	for path, v := range kn {
		if mv, ok := main[path]; ok {
			shared++
			if mv != v {
				t.Errorf("tools/knative builds %s %s, the main module %s: require %s in tools/knative/go.mod", path, v, mv, mv)
			}
		}
	}
	if shared < 30 {
		t.Errorf("only %d modules in common: the check may have stopped seeing them", shared)
	}
}
