// Package deploy tests the deployment YAML (the variants of config/, built with kustomize from
// deploy/, brokers/, triggers/, eventtypes/ and oidc/; ko.yaml) without a cluster: every document
// decodes strictly into its Knative or Kubernetes type and passes Knative's
// own defaulting and validation, every reference between objects resolves, every ko:// image is a
// main package here, events route as intended through the Triggers' filters (evaluated by
// knative.dev/eventing's own filter code), no event can loop, each function accepts the
// configuration and environment it is given, and the examples in docs/quickstart.md are valid.
// rbac_test.go runs deploy/'s RBAC on a real kube-apiserver (harness/localhub), with the real writer.
package deploy

import (
	"os"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/manifests"
)

// repo is the repository root, relative to this package's directory (where go test runs).
var repo = filepath.Join("..", "..")

// Namespace is where scoreflow runs on the hub; BrokerName its broker.
const (
	Namespace  = "scoreflow"
	BrokerName = "scoreflow"
	// The function that receives dead-lettered events.
	deadLetter = "dead-letter"
	// Annotation on each Knative Service listing the event types it replies with or sends.
	emitsAnnotation = "scoreflow.io/emits"
	koPrefix        = "github.com/scoreflow/scoreflow/functions/"
)

// Sets of manifests applied together: each variant of config/ (`make deploy VARIANT=...`).
const (
	setHub          = "hub"          // what `make deploy` applies: config/default
	setHubKafka     = "hubKafka"     // config/kafka: the Kafka-backed broker
	setHubOIDC      = "hubOIDC"      // config/oidc: with sender identity
	setHubTLS       = "hubTLS"       // config/tls
	setHubOIDCTLS   = "hubOIDCTLS"   // config/oidc-tls
	setHubKafkaOIDC = "hubKafkaOIDC" // config/kafka-oidc
	setAgent        = "agent"        // deploy/managed-cluster/, applied on a managed cluster
)

var setPaths = map[string][]string{
	setHub:          {"config/default"},
	setHubKafka:     {"config/kafka"},
	setHubOIDC:      {"config/oidc"},
	setHubTLS:       {"config/tls"},
	setHubOIDCTLS:   {"config/oidc-tls"},
	setHubKafkaOIDC: {"config/kafka-oidc"},
	setAgent:        {"deploy/managed-cluster"},
}

// setFeatures are the config-features a variant runs with on a cluster (oidc/README.md):
// EventPolicies, for one, are refused without sender identity on.
var setFeatures = map[string]map[string]string{
	setHubOIDC:      knlocal.OIDCFeatures(),
	setHubTLS:       knlocal.StrictTLSFeatures(),
	setHubOIDCTLS:   merged(knlocal.OIDCFeatures(), knlocal.StrictTLSFeatures()),
	setHubKafkaOIDC: knlocal.OIDCFeatures(),
}

func merged(maps ...map[string]string) map[string]string {
	out := map[string]string{}
	for _, m := range maps {
		for k, v := range m {
			out[k] = v
		}
	}
	return out
}

// isHub reports whether a set is applied on the hub (in the scoreflow namespace).
func isHub(set string) bool { return set != setAgent }

var (
	setsOnce sync.Once
	sets     map[string]*manifests.Set
	setsErr  error
)

// load returns a named set of the repository's manifests, loaded once.
func load(t testing.TB, name string) *manifests.Set {
	t.Helper()
	setsOnce.Do(func() {
		sets = map[string]*manifests.Set{}
		for n, paths := range setPaths {
			var full []string
			for _, p := range paths {
				full = append(full, filepath.Join(repo, p))
			}
			s, err := manifests.Load(full...)
			if err != nil {
				setsErr = err
				return
			}
			sets[n] = s
		}
	})
	if setsErr != nil {
		t.Fatalf("loading manifests: %v", setsErr)
	}
	return sets[name]
}

func allSets(t testing.TB) map[string]*manifests.Set {
	load(t, setHub)
	return sets
}

// TestEveryManifestDecodes loads each manifest directory on its own (a kustomization as kubectl
// apply -k builds it), so that a file that is in no set (a new subdirectory) is still decoded, and
// checks each holds what it is for.
func TestEveryManifestDecodes(t *testing.T) {
	var dirs []string
	for _, top := range []string{"brokers", "triggers", "deploy", "eventtypes", "config"} {
		err := filepath.WalkDir(filepath.Join(repo, top), func(p string, d os.DirEntry, err error) error {
			if err == nil && d.IsDir() && p != filepath.Join(repo, "config") {
				dirs = append(dirs, p)
			}
			return err
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	want := map[string]func(*manifests.Set) int{
		"brokers":                func(s *manifests.Set) int { return len(s.Brokers) },
		"brokers/kafka":          func(s *manifests.Set) int { return len(s.Brokers) },
		"triggers":               func(s *manifests.Set) int { return len(s.Triggers) },
		"deploy":                 func(s *manifests.Set) int { return len(s.Services) },
		"deploy/managed-cluster": func(s *manifests.Set) int { return len(s.Services) },
		"eventtypes":             func(s *manifests.Set) int { return len(s.EventTypes) },
	}
	for _, v := range []string{"default", "kafka", "tls", "large-fleet"} {
		want["config/"+v] = func(s *manifests.Set) int { return min(len(s.Brokers), len(s.Triggers), len(s.Services)) }
	}
	for _, v := range []string{"oidc", "oidc-tls", "kafka-oidc"} {
		want["config/"+v] = func(s *manifests.Set) int {
			return min(len(s.Brokers), len(s.Triggers), len(s.Services), len(s.EventPolicies))
		}
	}
	for _, d := range dirs {
		rel, _ := filepath.Rel(repo, d)
		t.Run(rel, func(t *testing.T) {
			s, err := manifests.Load(d)
			if err != nil {
				t.Fatal(err)
			}
			count, ok := want[filepath.ToSlash(rel)]
			if !ok {
				t.Fatalf("%s is not a known manifest directory: add it to setPaths and this table", rel)
			}
			if count(s) == 0 {
				t.Errorf("%s holds none of the objects it is for", rel)
			}
		})
	}
}

// TestTriggersOnlyHoldTriggers: triggers/ is applied with every broker variant.
func TestTriggersOnlyHoldTriggers(t *testing.T) {
	s, err := manifests.Load(filepath.Join(repo, "triggers"))
	if err != nil {
		t.Fatal(err)
	}
	for _, it := range s.All() {
		if it.Object.GetObjectKind().GroupVersionKind().Kind != "Trigger" {
			t.Errorf("%s: %s in triggers/", it.Source, it.Object.GetObjectKind().GroupVersionKind().Kind)
		}
	}
	if len(s.Triggers) == 0 {
		t.Fatal("no triggers")
	}
}

// TestNamespaces: every namespaced object names its namespace (otherwise it lands in whatever
// namespace the kubectl context has), and the hub's objects are all in the scoreflow namespace,
// which the hub set itself creates.
func TestNamespaces(t *testing.T) {
	for name, s := range allSets(t) {
		t.Run(name, func(t *testing.T) {
			var created []string
			for _, ns := range s.Namespaces {
				created = append(created, ns.Object.Name)
			}
			for _, it := range s.All() {
				kind := it.Object.GetObjectKind().GroupVersionKind().Kind
				clusterScoped := kind == "Namespace" || kind == "ClusterRole" || kind == "ClusterRoleBinding"
				ns := it.Object.GetNamespace()
				switch {
				case clusterScoped && ns != "":
					t.Errorf("%s: cluster-scoped %s %s has namespace %q", it.Source, kind, it.Object.GetName(), ns)
				case !clusterScoped && ns == "":
					t.Errorf("%s: %s %s has no metadata.namespace", it.Source, kind, it.Object.GetName())
				case !clusterScoped && !contains(created, ns):
					t.Errorf("%s: %s %s is in namespace %q, which this set does not create (%v)", it.Source, kind, it.Object.GetName(), ns, created)
				case !clusterScoped && isHub(name) && ns != Namespace:
					t.Errorf("%s: %s %s is in namespace %q, not %q", it.Source, kind, it.Object.GetName(), ns, Namespace)
				}
			}
		})
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

func sortedKeys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

// functionName returns the function a ko:// image builds, or "".
func functionName(image string) string {
	p, ok := manifests.KoImportPath(image)
	if !ok || !strings.HasPrefix(p, koPrefix) {
		return ""
	}
	return strings.TrimPrefix(p, koPrefix)
}
