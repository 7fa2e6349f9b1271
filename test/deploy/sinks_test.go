package deploy

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// sendsOnlyWith names the functions that send to a sink only in a mode their Service turns on with
// an environment variable: the latency-scorer sends as an agent (CLUSTER set, deploy/managed-cluster/)
// and only replies on the hub.
var sendsOnlyWith = map[string]string{"latency-scorer": "CLUSTER"}

// TestSendersHaveASinkBinding: every Service running a function that sends besides replying (its
// main registers pkg/function's SinkFlags or OptionalSinkFlags: sources, the dead-letter function,
// the scorers whose large results are split across several events) is the subject of a SinkBinding
// in the same set, since nothing else gives it K_SINK on a cluster. Without one, a scorer answers a
// result over one event's bounds with 500.
func TestSendersHaveASinkBinding(t *testing.T) {
	n := 0
	for name, s := range allSets(t) {
		bound := map[string]bool{}
		for _, it := range s.SinkBindings {
			if subj := it.Object.Spec.Subject; subj.Kind == "Service" {
				bound[it.Object.Namespace+"/"+subj.Name] = true
			}
		}
		for _, it := range s.Services {
			svc := it.Object
			c := svc.Spec.Template.Spec.Containers
			if len(c) != 1 {
				continue // TestFunctionServices reports it
			}
			fn := functionName(c[0].Image)
			if fn == "" {
				continue
			}
			src, err := os.ReadFile(filepath.Join(repo, "functions", fn, "main.go"))
			if err != nil {
				t.Fatal(err)
			}
			if !strings.Contains(string(src), "SinkFlags()") {
				continue
			}
			if env, ok := sendsOnlyWith[fn]; ok && envValue(c[0], env) == "" {
				continue
			}
			n++
			if !bound[svc.Namespace+"/"+svc.Name] {
				t.Errorf("%s (set %s): service %s runs %s, which sends to K_SINK, but no SinkBinding has it as subject", it.Source, name, svc.Name, fn)
			}
		}
	}
	if n < 9 {
		t.Errorf("found %d sending Services, want at least 9 (the check may have stopped seeing them)", n)
	}
}
