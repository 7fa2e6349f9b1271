package deploy

import (
	"strconv"
	"testing"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/tracing"
)

// TestEveryFunctionTakesTheTracingSettings: every function of every hub variant, Service or
// source, takes its environment from the ConfigMap scoreflow-observability, whose TRACING_*
// settings the functions accept (pkg/tracing), so that turning tracing on is one edit; and no
// function sets a TRACING_ variable of its own that would shadow it.
func TestEveryFunctionTakesTheTracingSettings(t *testing.T) {
	n := 0
	for name, s := range allSets(t) {
		if name == setAgent {
			continue // deploy/managed-cluster/: the agents on managed clusters
		}
		it, ok := manifests.Find(s.ConfigMaps, Namespace, "scoreflow-observability")
		if !ok {
			t.Errorf("set %s has no ConfigMap scoreflow-observability", name)
			continue
		}
		cm := it.Object.Data
		c := tracing.Config{Protocol: cm["TRACING_PROTOCOL"], Endpoint: cm["TRACING_ENDPOINT"]}
		var err error
		if c.SamplingRate, err = strconv.ParseFloat(cm["TRACING_SAMPLING_RATE"], 64); err != nil {
			t.Errorf("set %s: TRACING_SAMPLING_RATE %q: %v", name, cm["TRACING_SAMPLING_RATE"], err)
		}
		if err := c.Validate(); err != nil {
			t.Errorf("set %s: scoreflow-observability: %v", name, err)
		}
		for _, w := range s.Workloads() {
			c := w.Template.Spec.Containers
			if len(c) != 1 || functionName(c[0].Image) == "" {
				continue
			}
			n++
			takes := false
			for _, from := range c[0].EnvFrom {
				takes = takes || (from.ConfigMapRef != nil && from.ConfigMapRef.Name == "scoreflow-observability" && from.Prefix == "")
			}
			if !takes {
				t.Errorf("%s (set %s): %s %s does not take its environment from scoreflow-observability", w.Source, name, w.Kind.Kind, w.ObjectMeta.Name)
			}
			for _, e := range c[0].Env {
				if e.Name == "TRACING_PROTOCOL" || e.Name == "TRACING_ENDPOINT" || e.Name == "TRACING_SAMPLING_RATE" {
					t.Errorf("%s (set %s): %s sets %s itself, shadowing scoreflow-observability", w.Source, name, w.ObjectMeta.Name, e.Name)
				}
			}
		}
	}
	if n < 15 {
		t.Errorf("only %d functions checked", n)
	}
}
