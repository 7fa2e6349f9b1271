package deploy

import (
	"context"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	"knative.dev/pkg/apis"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	clusterv1beta1 "open-cluster-management.io/api/cluster/v1beta1"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

var (
	fence   = regexp.MustCompile("(?s)```(yaml|sh)\n(.*?)```")
	heredoc = regexp.MustCompile(`(?s)<<'EOF'\n(.*?)\nEOF`)
	curlArg = regexp.MustCompile(`(?s)-d '(\{.*?\})'`)
	kindOf  = regexp.MustCompile(`(?m)^kind: (\S+)`)
)

// quickstartYAML returns the YAML documents of docs/quickstart.md: ```yaml blocks and the
// heredocs of ```sh blocks, split into documents.
func quickstartYAML(t *testing.T) (docs []string, shell string) {
	b, err := os.ReadFile(filepath.Join(repo, "docs", "quickstart.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, m := range fence.FindAllStringSubmatch(string(b), -1) {
		var blocks []string
		if m[1] == "yaml" {
			blocks = []string{m[2]}
		} else {
			shell += m[2]
			for _, h := range heredoc.FindAllStringSubmatch(m[2], -1) {
				blocks = append(blocks, h[1])
			}
		}
		for _, block := range blocks {
			for _, d := range strings.Split(block, "\n---\n") {
				if strings.TrimSpace(d) != "" {
					docs = append(docs, d)
				}
			}
		}
	}
	return docs, shell
}

// TestQuickstartExamples: the YAML and the event in docs/quickstart.md are what the APIs accept:
// Knative objects pass Knative's validation and the custom-scorer example routes its PingSource's
// events to its scorer; OCM objects decode strictly and pass the CRDs' validation on a real API
// server; the curl event's data is a valid score.updated; the make targets exist.
func TestQuickstartExamples(t *testing.T) {
	docs, shell := quickstartYAML(t)
	knative := &manifests.Set{}
	var placements []*clusterv1beta1.Placement
	var clusters []*clusterv1.ManagedCluster
	for i, d := range docs {
		k := kindOf.FindStringSubmatch(d)
		if k == nil {
			t.Errorf("document %d has no kind:\n%s", i, d)
			continue
		}
		switch k[1] {
		case "Placement":
			var p clusterv1beta1.Placement
			if err := yaml.UnmarshalStrict([]byte(d), &p); err != nil {
				t.Errorf("Placement: %v", err)
			}
			placements = append(placements, &p)
		case "ManagedCluster":
			var mc clusterv1.ManagedCluster
			if err := yaml.UnmarshalStrict([]byte(d), &mc); err != nil {
				t.Errorf("ManagedCluster: %v", err)
			}
			clusters = append(clusters, &mc)
		default:
			if err := knative.Add("docs/quickstart.md", []byte(d)); err != nil {
				t.Error(err)
			}
		}
	}
	if len(placements) != 1 || len(clusters) != 2 || len(knative.Services) != 1 || len(knative.Triggers) != 1 || len(knative.PingSources) != 1 {
		t.Fatalf("found %d Placements, %d ManagedClusters, %d Services, %d Triggers, %d PingSources; want 1, 2, 1, 1, 1",
			len(placements), len(clusters), len(knative.Services), len(knative.Triggers), len(knative.PingSources))
	}

	t.Run("knative", func(t *testing.T) {
		for key, obj := range knativeObjects(knative) {
			if err := admit(admissionContext(t), obj).Filter(apis.ErrorLevel); err != nil {
				t.Errorf("%s rejected: %v", key, err)
			}
		}
		rs := routes(t, knative.Triggers)
		if got := subscribers(matching(rs, pingEvent(knative.PingSources[0].Object))); strings.Join(got, ",") != "my-scorer" {
			t.Errorf("the example PingSource's events reach %v, want my-scorer", got)
		}
		// The example scorer's reply must reach the deployed writer, and nothing of the example loop.
		hub := load(t, setHub)
		all := append(append([]manifests.Item[*eventingv1.Trigger](nil), hub.Triggers...), knative.Triggers...)
		if got := subscribers(matching(routes(t, all), newEvent(contract.TypeScoreUpdated, "my-scorer"))); strings.Join(got, ",") != "cloudevents-player,score-writer,scores-page" {
			t.Errorf("the example scorer's score.updated reaches %v", got)
		}
	})

	t.Run("OCM objects on a real API server", func(t *testing.T) {
		h := rbacHub(t)
		ctx := context.Background()
		dry := metav1.CreateOptions{DryRun: []string{metav1.DryRunAll}}
		for _, p := range placements {
			if _, err := h.Cluster.ClusterV1beta1().Placements(p.Namespace).Create(ctx, p, dry); err != nil {
				t.Errorf("Placement %s: %v", p.Name, err)
			}
			pc := p.Spec.PrioritizerPolicy.Configurations
			if p.Spec.PrioritizerPolicy.Mode != clusterv1beta1.PrioritizerPolicyModeAdditive || len(pc) != 1 || pc[0].ScoreCoordinate.AddOn == nil {
				t.Errorf("Placement %s does not prioritise by an AddOn score in Additive mode", p.Name)
			}
		}
		for _, mc := range clusters {
			mc = mc.DeepCopy()
			mc.Name = "doc-" + mc.Name // cluster1 exists on this hub already
			if _, err := h.Cluster.ClusterV1().ManagedClusters().Create(ctx, mc, dry); err != nil {
				t.Errorf("ManagedCluster %s: %v", mc.Name, err)
			}
		}
	})

	t.Run("curl event", func(t *testing.T) {
		m := curlArg.FindStringSubmatch(shell)
		if m == nil {
			t.Fatal("no curl -d '...' in the quickstart")
		}
		var su contract.ScoreUpdated
		if err := contract.DecodeJSON([]byte(m[1]), &su); err != nil {
			t.Fatal(err)
		}
		if err := su.Validate(); err != nil {
			t.Error(err)
		}
		for _, h := range []string{"Ce-Specversion: 1.0", "Ce-Type: " + contract.TypeScoreUpdated, "Ce-Time:", "Ce-Id:", "Ce-Source:"} {
			if !strings.Contains(shell, h) {
				t.Errorf("the curl example lacks header %q", h)
			}
		}
		doc, _ := os.ReadFile(filepath.Join(repo, "docs", "quickstart.md"))
		if !strings.Contains(string(doc), "http://broker-ingress.knative-eventing.svc.cluster.local/"+Namespace+"/"+BrokerName) {
			t.Error("the quickstart does not give the broker's in-cluster URL")
		}
	})

	t.Run("make targets", func(t *testing.T) {
		mk, err := os.ReadFile(filepath.Join(repo, "Makefile"))
		if err != nil {
			t.Fatal(err)
		}
		for _, target := range []string{"deploy", "undeploy", "publish/local"} {
			if !regexp.MustCompile(`(?m)^` + regexp.QuoteMeta(target) + `:.*## `).Match(mk) {
				t.Errorf("Makefile has no documented target %s", target)
			}
		}
		// make help and the quickstart name every variant `make deploy VARIANT=...` takes.
		help := regexp.MustCompile(`(?m)^deploy:.*## (.*)$`).FindSubmatch(mk)
		doc, _ := os.ReadFile(filepath.Join(repo, "docs", "quickstart.md"))
		variants, _ := filepath.Glob(filepath.Join(repo, "config", "*", "kustomization.yaml"))
		if len(variants) == 0 {
			t.Fatal("no variants in config/")
		}
		for _, k := range variants {
			v := filepath.Base(filepath.Dir(k))
			if help == nil || !regexp.MustCompile(`\b`+regexp.QuoteMeta(v)+`\b[,:)]`).Match(help[1]) {
				t.Errorf("make help for deploy does not name the variant %s", v)
			}
			if !strings.Contains(string(doc), "`"+v+"`") {
				t.Errorf("docs/quickstart.md does not name the variant `%s`", v)
			}
		}
	})
}

// The README names the same hub namespaces the code reserves: a cluster named like one never
// receives scores.
func TestReadmeNamesTheReservedClusterNames(t *testing.T) {
	b, err := os.ReadFile(filepath.Join(repo, "README.md"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range strings.Split(contract.ReservedClusterNames, ", ") {
		token := "`" + strings.TrimSuffix(name, "*") + "`"
		if !strings.Contains(string(b), token) {
			t.Errorf("README does not name the reserved %s (as %s)", name, token)
		}
		probe := strings.TrimSuffix(name, "*")
		if strings.HasSuffix(name, "*") {
			probe += "x"
		}
		if contract.ValidateClusterName(probe) == nil {
			t.Errorf("%s is in ReservedClusterNames but %q is a valid cluster name", name, probe)
		}
	}
}
