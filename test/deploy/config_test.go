package deploy

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/masks"
	"github.com/scoreflow/scoreflow/pkg/scorer/forecast"
	"github.com/scoreflow/scoreflow/pkg/scorer/health"
	"github.com/scoreflow/scoreflow/pkg/scorer/latency"
	"github.com/scoreflow/scoreflow/pkg/scorer/promql"
	"github.com/scoreflow/scoreflow/pkg/scorer/resource"
	"github.com/scoreflow/scoreflow/pkg/scorer/static"
	"github.com/scoreflow/scoreflow/pkg/watcher"
)

// pingConfigs decode a PingSource's data as each scorer does (scorer.DecodeConfig: strictly, over
// the scorer's defaults, then Validate), with the scorers' own configuration types.
var pingConfigs = map[string]func(data []byte) error{
	"promql-scorer": func(b []byte) error {
		c := promql.DefaultConfig()
		return decodeValidate(b, &c)
	},
	"resource-scorer": func(b []byte) error {
		c := resource.DefaultConfig()
		return decodeValidate(b, &c)
	},
	"forecast-scorer": func(b []byte) error {
		c := forecast.DefaultConfig()
		return decodeValidate(b, &c)
	},
	"latency-scorer": func(b []byte) error {
		var c latency.Config
		return decodeValidate(b, &c)
	},
	"static-scorer": func(b []byte) error {
		var c static.Config
		return decodeValidate(b, &c)
	},
	"health-scorer": func(b []byte) error {
		var c health.PingConfig
		return decodeValidate(b, &c)
	},
	"dsf-bridge": func(b []byte) error {
		var c dsf.PingConfig
		return decodeValidate(b, &c)
	},
}

func decodeValidate(b []byte, c interface{ Validate() error }) error {
	if err := contract.DecodeJSON(b, c); err != nil {
		return err
	}
	return c.Validate()
}

// TestPingSourceConfigs: each PingSource's data is a configuration its scorer accepts, the
// static-scorer's resources exist in the table it is deployed with, and a dsf-bridge ping names a
// DynamicScorer of the bridge's mounted scorers file.
func TestPingSourceConfigs(t *testing.T) {
	s := load(t, setHub)
	if len(s.PingSources) == 0 {
		t.Fatal("no PingSources")
	}
	for _, it := range s.PingSources {
		ps := it.Object
		t.Run(ps.Name, func(t *testing.T) {
			fn := ps.Spec.CloudEventOverrides.Extensions["scorer"]
			decode, ok := pingConfigs[fn]
			if !ok {
				t.Fatalf("%s: no configuration decoder for scorer %q: add it to pingConfigs", it.Source, fn)
			}
			if ps.Spec.ContentType != "application/json" {
				t.Errorf("%s: contentType %q, want application/json", it.Source, ps.Spec.ContentType)
			}
			if err := decode([]byte(ps.Spec.Data)); err != nil {
				t.Errorf("%s: %s refuses this configuration: %v", it.Source, fn, err)
			}
			if fn == "dsf-bridge" {
				checkDSFScorer(t, s, it.Source, []byte(ps.Spec.Data))
			}
			if fn == "static-scorer" {
				var c static.Config
				_ = contract.DecodeJSON([]byte(ps.Spec.Data), &c)
				table, err := mountedFile(s, "static-scorer", "TABLE")
				if err != nil {
					t.Fatal(err)
				}
				tbl, err := static.Parse(table)
				if err != nil {
					t.Fatalf("static-scorer table: %v", err)
				}
				if !contains(tbl.ResourceNames(), c.Resource) {
					t.Errorf("%s: resource %q is not in the static-scorer's table (%v)", it.Source, c.Resource, tbl.ResourceNames())
				}
			}
		})
	}
}

// checkDSFScorer: the DynamicScorer a dsf-bridge ping names is in the bridge's mounted scorers
// file.
func checkDSFScorer(t *testing.T, s *manifests.Set, src manifests.Source, data []byte) {
	t.Helper()
	var c dsf.PingConfig
	if err := contract.DecodeJSON(data, &c); err != nil {
		t.Fatal(err)
	}
	objs := dsfScorers(t, s)
	for _, sc := range objs.Scorers {
		if sc.Name == c.Scorer {
			return
		}
	}
	t.Errorf("%s: DynamicScorer %q is not in the dsf-bridge's scorers file (deploy/dsf-bridge.yaml)", src, c.Scorer)
}

// dsfScorers decodes the dsf-bridge's mounted scorers file as the bridge does.
func dsfScorers(t *testing.T, s *manifests.Set) *dsf.Objects {
	t.Helper()
	raw, err := mountedFile(s, "dsf-bridge", "SCORERS_FILE")
	if err != nil {
		t.Fatal(err)
	}
	objs, err := dsf.DecodeObjects(bytes.NewReader(raw))
	if err != nil {
		t.Fatalf("the dsf-bridge's scorers file: %v", err)
	}
	return objs
}

// TestDSFBridgeConfig: the dsf-bridge's shipped ConfigMap is one the bridge starts with.
func TestDSFBridgeConfig(t *testing.T) {
	s := load(t, setHub)
	dsfScorers(t, s)
	cm, ok := manifests.Find(s.ConfigMaps, Namespace, "dsf-bridge")
	if !ok {
		t.Fatal("ConfigMap dsf-bridge not found")
	}
	if _, err := dsf.ParseEndpoints(cm.Object.Data["endpoints"]); err != nil {
		t.Errorf("deploy/dsf-bridge.yaml endpoints: %v", err)
	}
}

// mountedFile returns the content of the file a Service's or Deployment's env var names, from
// the ConfigMap mounted there: what the function reads at run time.
func mountedFile(s *manifests.Set, workload, env string) ([]byte, error) {
	ws := s.Workloads()
	w, ok := manifests.FindWorkload(ws, Namespace, workload)
	if !ok && len(ws) > 0 {
		w, ok = manifests.FindWorkload(ws, ws[0].ObjectMeta.Namespace, workload)
	}
	if !ok {
		return nil, fmt.Errorf("%s not found", workload)
	}
	return fileFromEnv(s, w.ObjectMeta.Namespace, workload, w.Template.Spec, env)
}

func fileFromEnv(s *manifests.Set, namespace, name string, pod corev1.PodSpec, env string) ([]byte, error) {
	c := pod.Containers[0]
	path := envValue(c, env)
	if path == "" {
		return nil, fmt.Errorf("%s: no env %s", name, env)
	}
	for _, m := range c.VolumeMounts {
		rel, err := filepath.Rel(m.MountPath, path)
		if err != nil || strings.HasPrefix(rel, "..") {
			continue
		}
		for _, v := range pod.Volumes {
			if v.Name != m.Name || v.ConfigMap == nil {
				continue
			}
			cm, ok := manifests.Find(s.ConfigMaps, namespace, v.ConfigMap.Name)
			if !ok {
				return nil, fmt.Errorf("%s: ConfigMap %s not defined", name, v.ConfigMap.Name)
			}
			data, ok := cm.Object.Data[rel]
			if !ok {
				return nil, fmt.Errorf("%s: %s=%s, but ConfigMap %s has no key %q", name, env, path, cm.Object.Name, rel)
			}
			return []byte(data), nil
		}
	}
	return nil, fmt.Errorf("%s: %s=%s is under no ConfigMap volume mount", name, env, path)
}

func envValue(c corev1.Container, name string) string {
	for _, e := range c.Env {
		if e.Name == name {
			return e.Value
		}
	}
	return ""
}

// writeTemp writes data to a file and returns its path, for loaders that take a path.
func writeTemp(t *testing.T, name string, data []byte) string {
	p := filepath.Join(t.TempDir(), name)
	if err := os.WriteFile(p, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return p
}

// TestFunctionConfigs: configuration given to functions by env or mounted file is accepted by the
// function's own loader, and the metric names the promql-scorer scores are ones the
// metric-watcher emits (otherwise its metric.changed path would never score anything).
func TestFunctionConfigs(t *testing.T) {
	hub := load(t, setHub)
	agent := load(t, setAgent)

	watched := map[string]bool{}
	t.Run("metric-watcher CONFIG", func(t *testing.T) {
		data, err := mountedFile(hub, "metric-watcher", "CONFIG")
		if err != nil {
			t.Fatal(err)
		}
		cfg, err := watcher.Load(writeTemp(t, "config.yaml", data), watcher.Query{})
		if err != nil {
			t.Fatalf("metric-watcher refuses its configuration: %v", err)
		}
		for _, q := range cfg.Queries {
			watched[q.Metric] = true
		}
	})
	t.Run("promql-scorer METRIC_CONFIG", func(t *testing.T) {
		it, ok := manifests.Find(hub.Services, Namespace, "promql-scorer")
		if !ok {
			t.Fatal("promql-scorer not found")
		}
		raw := envValue(it.Object.Spec.Template.Spec.Containers[0], "METRIC_CONFIG")
		if raw == "" {
			t.Fatal("promql-scorer takes metric.changed (triggers/promql-scorer.yaml) but has no METRIC_CONFIG: it would refuse them all with 400, and each would be dead-lettered")
		}
		cfg := promql.DefaultMetricConfig()
		if err := decodeValidate([]byte(raw), &cfg); err != nil {
			t.Fatalf("METRIC_CONFIG: %v", err)
		}
		if !watched[cfg.Metric] {
			t.Errorf("METRIC_CONFIG scores metric %q, which the metric-watcher does not emit (%v)", cfg.Metric, sortedKeys(watched))
		}
	})
	t.Run("static-scorer TABLE", func(t *testing.T) {
		data, err := mountedFile(hub, "static-scorer", "TABLE")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := static.Parse(data); err != nil {
			t.Errorf("table: %v", err)
		}
	})
	t.Run("score-writer MASKS_FILE", func(t *testing.T) {
		data, err := mountedFile(hub, "score-writer", "MASKS_FILE")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := masks.Parse(data); err != nil {
			t.Errorf("masks: %v", err)
		}
	})
	t.Run("latency-scorer TARGETS_FILE", func(t *testing.T) {
		data, err := mountedFile(hub, "latency-scorer", "TARGETS_FILE")
		if err != nil {
			t.Fatal(err)
		}
		if _, err := latency.LoadTargets(writeTemp(t, "targets.yaml", data), ""); err != nil {
			t.Errorf("latency-scorer refuses its targets: %v", err)
		}
	})
	t.Run("latency agent CONFIG_FILE", func(t *testing.T) {
		if len(agent.Services) != 1 {
			t.Fatalf("want one agent Service, got %d", len(agent.Services))
		}
		svc := agent.Services[0].Object
		data, err := fileFromEnv(agent, svc.Namespace, svc.Name, svc.Spec.Template.Spec.PodSpec, "CONFIG_FILE")
		if err != nil {
			t.Fatal(err)
		}
		cluster := envValue(svc.Spec.Template.Spec.Containers[0], "CLUSTER")
		if _, err := latency.LoadFile(writeTemp(t, "config.yaml", data), cluster); err != nil {
			t.Errorf("latency agent refuses its configuration: %v", err)
		}
	})
}

// envLine matches a flag line of a function's --help: `  --name  [env NAME] ...`.
var envLine = regexp.MustCompile(`(?m)^\s+--[a-z0-9-]+\s+\[env ([A-Z0-9_]+)\]`)

// TestEnvNamesAreFlags builds every function deployed and checks, against its --help, that each
// environment variable a manifest sets is one the function reads: a misspelt variable is ignored
// silently at run time and the function runs on its default.
func TestEnvNamesAreFlags(t *testing.T) {
	type use struct {
		where string
		c     corev1.Container
	}
	uses := map[string][]use{}
	seen := map[string]bool{} // deploy/ is in two sets: check each file once
	for _, s := range allSets(t) {
		for _, it := range s.Services {
			if seen[it.Source.String()] {
				continue
			}
			seen[it.Source.String()] = true
			for _, c := range it.Object.Spec.Template.Spec.Containers {
				if fn := functionName(c.Image); fn != "" {
					uses[fn] = append(uses[fn], use{it.Source.String(), c})
				}
			}
		}
	}
	present := goList(t, prefixed(sortedKeys(uses))...)
	var build []string
	for _, fn := range sortedKeys(uses) {
		if p, ok := present[koPrefix+fn]; ok && p.Error == nil && p.Name == "main" {
			build = append(build, koPrefix+fn)
		} else {
			t.Errorf("%s is not built yet: its env is unchecked (TestKoImagesAreMainPackages says why)", fn)
		}
	}
	if len(build) == 0 {
		t.Fatal("no function to build")
	}
	bin := t.TempDir()
	cmd := exec.Command("go", append([]string{"build", "-o", bin + string(filepath.Separator)}, build...)...)
	cmd.Dir = repo
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	for _, p := range build {
		fn := strings.TrimPrefix(p, koPrefix)
		t.Run(fn, func(t *testing.T) {
			out, err := exec.Command(filepath.Join(bin, fn), "--help").CombinedOutput()
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatal(err)
			}
			known := map[string]bool{}
			for _, m := range envLine.FindAllStringSubmatch(string(out), -1) {
				known[m[1]] = true
			}
			if !known["PORT"] {
				t.Fatalf("--help lists no [env PORT]; output:\n%s", out)
			}
			for _, u := range uses[fn] {
				for _, e := range u.c.Env {
					if !known[e.Name] && !goRuntimeEnv[e.Name] {
						t.Errorf("%s: env %s is not a flag of %s (it reads %v)", u.where, e.Name, fn, sortedKeys(known))
					}
				}
			}
		})
	}
}

// goRuntimeEnv are variables the Go runtime itself reads in every binary (runtime package docs):
// a manifest may set them without the function having a flag.
var goRuntimeEnv = map[string]bool{"GOMEMLIMIT": true, "GOGC": true, "GOMAXPROCS": true}

func prefixed(names []string) []string {
	var out []string
	for _, n := range names {
		out = append(out, koPrefix+n)
	}
	return out
}

// TestOptimizerSenseMatchesScorers: the optimizer maximises every score not in its
// LOWER_IS_BETTER. scoreflow's static-scorer already turns power around (minmax with
// lowerIsBetter: a high demo-powerconsumption-score is low power), so minimising such a score
// would choose the most power-hungry plan; and a raw score the scorers write unturned must be
// listed. Every resource the deployed static-scorer writes is checked.
func TestOptimizerSenseMatchesScorers(t *testing.T) {
	hub := load(t, setHub)
	it, ok := manifests.Find(hub.Services, Namespace, "optimizer")
	if !ok {
		t.Fatal("optimizer not found")
	}
	lower := map[string]bool{}
	for _, n := range splitList(envValue(it.Object.Spec.Template.Spec.Containers[0], "LOWER_IS_BETTER")) {
		lower[n] = true
	}
	data, err := mountedFile(hub, "static-scorer", "TABLE")
	if err != nil {
		t.Fatal(err)
	}
	table, err := static.Parse(data)
	if err != nil {
		t.Fatal(err)
	}
	power := false
	for _, r := range table.Resources {
		power = power || r.Value == static.ColumnPower
		// Written higher-is-better (turned around, or a higher-is-better column): maximise.
		turned := r.Normalize.LowerIsBetter
		rawLower := r.Value == static.ColumnPower && !turned
		switch {
		case turned && lower[r.Name]:
			t.Errorf("%s is written turned around (lowerIsBetter) but the optimizer minimises it (LOWER_IS_BETTER)", r.Name)
		case rawLower && !lower[r.Name]:
			t.Errorf("%s holds raw power (lower is better) but is not in the optimizer's LOWER_IS_BETTER", r.Name)
		}
	}
	if !power {
		t.Error("the static-scorer writes no power score: nothing checked")
	}
}
