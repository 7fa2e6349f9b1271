package deploy

import (
	"encoding/json"
	"strings"
	"testing"

	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/scorer/resource"
)

// TestScorersOwnTheirResources: every scorer deployed names the resources it may score
// (RESOURCES, pkg/scorer), and each resource its PingSources and its METRIC_CONFIG make it score
// is among them: a scorer refuses a ping for a resource it does not own, so a schedule outside
// its list would never write. The dsf-bridge's are the ones its scorers file's specs name
// (dsf.SpecResource) and no list: one would refuse a scorer added to the file alone.
func TestScorersOwnTheirResources(t *testing.T) {
	s := load(t, setHub)
	owned := map[string][]string{} // Service name -> RESOURCES
	for _, it := range s.Services {
		if !emitsScores(it.Object) || it.Object.Name == "agent-gateway" {
			continue
		}
		env := containerEnv(it.Object)
		if it.Object.Name == "dsf-bridge" {
			if v, ok := env["RESOURCES"]; ok {
				t.Errorf("%s: RESOURCES=%s: the bridge scores what its scorers file's specs name; a list would refuse a scorer added there", it.Source, v)
			}
			for _, sc := range dsfScorers(t, s).Scorers {
				if r := dsf.SpecResource(&sc); r != "" {
					owned["dsf-bridge"] = append(owned["dsf-bridge"], r)
				}
			}
			continue
		}
		v, ok := env["RESOURCES"]
		if !ok || strings.TrimSpace(v) == "" {
			t.Errorf("%s: a scorer without RESOURCES may score any resource an event names", it.Source)
			continue
		}
		for _, r := range strings.Split(v, ",") {
			if err := contract.ValidateResourceName(r); err != nil {
				t.Errorf("%s: RESOURCES: %v", it.Source, err)
			}
			owned[it.Object.Name] = append(owned[it.Object.Name], r)
		}
		if mc := env["METRIC_CONFIG"]; mc != "" {
			var c struct {
				Resource string `json:"resource"`
			}
			if err := json.Unmarshal([]byte(mc), &c); err != nil {
				t.Fatalf("%s: METRIC_CONFIG: %v", it.Source, err)
			}
			if c.Resource == "" && it.Object.Name == "resource-scorer" {
				c.Resource = resource.DefaultConfig().Resource
			}
			if c.Resource != "" && !contains(owned[it.Object.Name], c.Resource) {
				t.Errorf("%s: METRIC_CONFIG scores %q, not among RESOURCES %v", it.Source, c.Resource, owned[it.Object.Name])
			}
		}
	}
	if len(owned) < 5 {
		t.Fatalf("only %d scorers found (%v)", len(owned), sortedKeys(owned))
	}
	for _, it := range s.PingSources {
		fn := it.Object.Spec.CloudEventOverrides.Extensions["scorer"]
		r := pingResource(t, s, fn, []byte(it.Object.Spec.Data))
		if r == "" {
			continue // a DSF spec naming no score: the bridge refuses it, saying so
		}
		if !contains(owned[fn], r) {
			t.Errorf("%s: %s scores %q, which its RESOURCES %v do not name: every ping would be refused", it.Source, fn, r, owned[fn])
		}
	}
}

// pingResource is the resource a PingSource's data makes fn score: its "resource", or fn's
// default for it ("" when the scorer learns it only from a remote /config).
func pingResource(t *testing.T, s *manifests.Set, fn string, data []byte) string {
	t.Helper()
	var c struct {
		Resource string `json:"resource"`
	}
	_ = json.Unmarshal(data, &c)
	if c.Resource != "" {
		return c.Resource
	}
	switch fn {
	case "resource-scorer":
		return resource.DefaultConfig().Resource
	case "health-scorer":
		it, ok := manifests.Find(s.Services, Namespace, fn)
		if !ok {
			t.Fatalf("no Service %s", fn)
		}
		return containerEnv(it.Object)["RESOURCE"]
	case "dsf-bridge":
		// The ping names a DynamicScorer of the bridge's scorers file; its resource is the one
		// its spec names (a scorer's /config naming another is refused).
		var d dsf.PingConfig
		if err := contract.DecodeJSON(data, &d); err != nil {
			t.Fatal(err)
		}
		for _, sc := range dsfScorers(t, s).Scorers {
			if sc.Name == d.Scorer {
				return dsf.SpecResource(&sc)
			}
		}
		return ""
	}
	t.Errorf("%s: a ping without a resource, and no default known for it", fn)
	return ""
}

func emitsScores(svc *servingv1.Service) bool {
	for _, typ := range strings.Split(svc.Annotations[emitsAnnotation], ",") {
		if strings.TrimSpace(typ) == contract.TypeScoreUpdated {
			return true
		}
	}
	return false
}

// containerEnv is the literal env of a Service's one container.
func containerEnv(svc *servingv1.Service) map[string]string {
	env := map[string]string{}
	for _, c := range svc.Spec.Template.Spec.Containers {
		for _, e := range c.Env {
			env[e.Name] = e.Value
		}
	}
	return env
}
