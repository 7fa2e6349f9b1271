package deploy

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	duckv1 "knative.dev/pkg/apis/duck/v1"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

const (
	modulePath  = "github.com/scoreflow/scoreflow"
	servingAPI  = "serving.knative.dev/v1"
	eventingAPI = "eventing.knative.dev/v1"
)

// checkRef reports whether a Destination's ref names an object defined in s (a Broker or a
// Knative Service in ns); a URI is accepted as it is (an address outside this set).
func checkRef(s *manifests.Set, ns string, d duckv1.Destination) error {
	if d.Ref == nil {
		if d.URI == nil {
			return fmt.Errorf("neither ref nor uri")
		}
		return nil
	}
	refNS := d.Ref.Namespace
	if refNS == "" {
		refNS = ns
	}
	switch {
	case d.Ref.APIVersion == servingAPI && d.Ref.Kind == "Service":
		if _, ok := manifests.Find(s.Services, refNS, d.Ref.Name); !ok {
			return fmt.Errorf("Knative Service %s/%s is not defined (services: %v)", refNS, d.Ref.Name, manifests.SortedNames(s.Services))
		}
	case d.Ref.APIVersion == eventingAPI && d.Ref.Kind == "Broker":
		if _, ok := manifests.Find(s.Brokers, refNS, d.Ref.Name); !ok {
			return fmt.Errorf("Broker %s/%s is not defined", refNS, d.Ref.Name)
		}
	default:
		return fmt.Errorf("ref to %s %s: only Knative Services and Brokers are expected", d.Ref.APIVersion, d.Ref.Kind)
	}
	return nil
}

// TestReferencesResolve: every Trigger's broker and subscriber, every dead-letter sink, every
// source's sink and SinkBinding's subject, every ServiceAccount, role and ConfigMap named anywhere
// is defined in the same set of manifests.
func TestReferencesResolve(t *testing.T) {
	for name, s := range allSets(t) {
		t.Run(name, func(t *testing.T) {
			fail := func(src manifests.Source, format string, args ...any) {
				t.Errorf("%s: %s", src, fmt.Sprintf(format, args...))
			}
			for _, it := range s.Triggers {
				tr := it.Object
				if _, ok := manifests.Find(s.Brokers, tr.Namespace, tr.Spec.Broker); !ok {
					fail(it.Source, "trigger %s: broker %q is not defined", tr.Name, tr.Spec.Broker)
				}
				// Subscribers must be scoreflow's own Knative Services, never a URI.
				if ref := tr.Spec.Subscriber.Ref; ref == nil || ref.APIVersion != servingAPI || ref.Kind != "Service" {
					fail(it.Source, "trigger %s: the subscriber must be a Knative Service defined in deploy/", tr.Name)
				} else if err := checkRef(s, tr.Namespace, tr.Spec.Subscriber); err != nil {
					fail(it.Source, "trigger %s subscriber: %v", tr.Name, err)
				}
				if d := tr.Spec.Delivery; d != nil && d.DeadLetterSink != nil {
					if err := checkRef(s, tr.Namespace, *d.DeadLetterSink); err != nil {
						fail(it.Source, "trigger %s deadLetterSink: %v", tr.Name, err)
					}
				}
			}
			for _, it := range s.Brokers {
				if d := it.Object.Spec.Delivery; d != nil && d.DeadLetterSink != nil {
					if err := checkRef(s, it.Object.Namespace, *d.DeadLetterSink); err != nil {
						fail(it.Source, "broker %s deadLetterSink: %v", it.Object.Name, err)
					}
				}
				if cfg := it.Object.Spec.Config; cfg != nil && cfg.Kind == "ConfigMap" {
					if _, ok := manifests.Find(s.ConfigMaps, cfg.Namespace, cfg.Name); !ok {
						fail(it.Source, "broker %s config: ConfigMap %s/%s is not defined", it.Object.Name, cfg.Namespace, cfg.Name)
					}
				}
			}
			for _, it := range s.PingSources {
				if err := checkRef(s, it.Object.Namespace, it.Object.Spec.Sink); err != nil {
					fail(it.Source, "pingsource %s sink: %v", it.Object.Name, err)
				}
			}
			for _, it := range s.ApiServerSources {
				if err := checkRef(s, it.Object.Namespace, it.Object.Spec.Sink); err != nil {
					fail(it.Source, "apiserversource %s sink: %v", it.Object.Name, err)
				}
				if _, ok := manifests.Find(s.ServiceAccounts, it.Object.Namespace, it.Object.Spec.ServiceAccountName); !ok {
					fail(it.Source, "apiserversource %s: ServiceAccount %q is not defined", it.Object.Name, it.Object.Spec.ServiceAccountName)
				}
			}
			for _, it := range s.SinkBindings {
				b := it.Object
				if err := checkRef(s, b.Namespace, b.Spec.Sink); err != nil {
					fail(it.Source, "sinkbinding %s sink: %v", b.Name, err)
				}
				subj := b.Spec.Subject
				if w, ok := manifests.FindWorkload(s.Workloads(), b.Namespace, subj.Name); subj.Name == "" || !ok ||
					subj.APIVersion != w.Kind.GroupVersion().String() || subj.Kind != w.Kind.Kind {
					fail(it.Source, "sinkbinding %s: the subject must name a Knative Service or Deployment of the set (%s %s %q)", b.Name, subj.APIVersion, subj.Kind, subj.Name)
				}
			}
			for _, w := range s.Workloads() {
				ps := w.Template.Spec
				what := strings.ToLower(w.Kind.Kind) + " " + w.ObjectMeta.Name
				if ps.ServiceAccountName == "" {
					fail(w.Source, "%s: no serviceAccountName (the namespace's default account would be used)", what)
				} else if _, ok := manifests.Find(s.ServiceAccounts, w.ObjectMeta.Namespace, ps.ServiceAccountName); !ok {
					fail(w.Source, "%s: ServiceAccount %q is not defined", what, ps.ServiceAccountName)
				}
				for _, cm := range configMapsUsed(ps) {
					if _, ok := manifests.Find(s.ConfigMaps, w.ObjectMeta.Namespace, cm); !ok {
						fail(w.Source, "%s: ConfigMap %q is not defined", what, cm)
					}
				}
			}
			checkBinding := func(src manifests.Source, binding string, ns string, roleRef rbacv1.RoleRef, subjects []rbacv1.Subject) {
				if isIssuerDiscovery(roleRef, subjects) {
					return
				}
				switch roleRef.Kind {
				case "ClusterRole":
					if _, ok := manifests.Find(s.ClusterRoles, "", roleRef.Name); !ok {
						fail(src, "%s: ClusterRole %q is not defined", binding, roleRef.Name)
					}
				case "Role":
					if _, ok := manifests.Find(s.Roles, ns, roleRef.Name); !ok {
						fail(src, "%s: Role %q is not defined", binding, roleRef.Name)
					}
				}
				for _, sub := range subjects {
					if sub.Kind != rbacv1.ServiceAccountKind {
						fail(src, "%s: subject %s %s: only ServiceAccounts are bound", binding, sub.Kind, sub.Name)
						continue
					}
					if _, ok := manifests.Find(s.ServiceAccounts, sub.Namespace, sub.Name); !ok {
						fail(src, "%s: ServiceAccount %s/%s is not defined", binding, sub.Namespace, sub.Name)
					}
				}
			}
			for _, it := range s.ClusterRoleBindings {
				checkBinding(it.Source, "clusterrolebinding "+it.Object.Name, "", it.Object.RoleRef, it.Object.Subjects)
			}
			for _, it := range s.RoleBindings {
				checkBinding(it.Source, "rolebinding "+it.Object.Name, it.Object.Namespace, it.Object.RoleRef, it.Object.Subjects)
			}
		})
	}
}

// isIssuerDiscovery reports whether a binding is the one of oidc/discovery.yaml: Kubernetes' own
// role for reading the service account issuer's discovery document and public keys, granted to
// unauthenticated callers as Kubernetes documents for token verifiers. It is the only binding of a
// role scoreflow does not define, and the only one to a group.
func isIssuerDiscovery(roleRef rbacv1.RoleRef, subjects []rbacv1.Subject) bool {
	return roleRef.Kind == "ClusterRole" && roleRef.Name == "system:service-account-issuer-discovery" &&
		len(subjects) == 1 && subjects[0].Kind == rbacv1.GroupKind && subjects[0].Name == "system:unauthenticated"
}

func configMapsUsed(ps corev1.PodSpec) []string {
	var out []string
	for _, c := range ps.Containers {
		for _, e := range c.Env {
			if e.ValueFrom != nil && e.ValueFrom.ConfigMapKeyRef != nil {
				out = append(out, e.ValueFrom.ConfigMapKeyRef.Name)
			}
		}
		for _, e := range c.EnvFrom {
			if e.ConfigMapRef != nil {
				out = append(out, e.ConfigMapRef.Name)
			}
		}
	}
	for _, v := range ps.Volumes {
		if v.ConfigMap != nil {
			out = append(out, v.ConfigMap.Name)
		}
	}
	return out
}

// boundAccounts are the ServiceAccounts some binding in s grants rights to.
func boundAccounts(s *manifests.Set) map[string]bool {
	out := map[string]bool{}
	for _, it := range s.ClusterRoleBindings {
		for _, sub := range it.Object.Subjects {
			out[sub.Namespace+"/"+sub.Name] = true
		}
	}
	for _, it := range s.RoleBindings {
		for _, sub := range it.Object.Subjects {
			out[sub.Namespace+"/"+sub.Name] = true
		}
	}
	return out
}

// TestLeastPrivilegeTokens: an account that no binding grants anything to gets no API token in
// its pods (automountServiceAccountToken false on the account and, for Knative Services, in the
// pod spec), so a compromised scorer cannot even authenticate. Accounts that are bound must mount
// one, or their function cannot reach the hub.
func TestLeastPrivilegeTokens(t *testing.T) {
	for name, s := range allSets(t) {
		t.Run(name, func(t *testing.T) {
			bound := boundAccounts(s)
			for _, it := range s.ServiceAccounts {
				sa := it.Object
				mounts := sa.AutomountServiceAccountToken == nil || *sa.AutomountServiceAccountToken
				switch {
				case bound[sa.Namespace+"/"+sa.Name] && !mounts:
					t.Errorf("%s: %s is granted API access but mounts no token", it.Source, sa.Name)
				case !bound[sa.Namespace+"/"+sa.Name] && mounts:
					t.Errorf("%s: %s has no API access: set automountServiceAccountToken: false", it.Source, sa.Name)
				}
			}
			for _, w := range s.Workloads() {
				ps := w.Template.Spec
				key := w.ObjectMeta.Namespace + "/" + ps.ServiceAccountName
				off := ps.AutomountServiceAccountToken != nil && !*ps.AutomountServiceAccountToken
				if !bound[key] && !off {
					t.Errorf("%s: %s %s runs as %s, which has no API access: set automountServiceAccountToken: false in the pod spec too", w.Source, w.Kind.Kind, w.ObjectMeta.Name, ps.ServiceAccountName)
				}
			}
		})
	}
}

// TestFunctionServices: every scoreflow function's Knative Service, and every source's Deployment,
// probes /readyz and /healthz (served by pkg/function), declares the event types it emits
// (scoreflow.io/emits, used by the loop check) with types of the event contract, and is named
// after its function.
func TestFunctionServices(t *testing.T) {
	known := map[string]bool{
		contract.TypeMetricChanged: true, contract.TypeScoreUpdated: true, contract.TypeWriteDone: true,
		contract.TypeWriteFailed: true, contract.TypeScoreFailed: true,
		optimizer.TypeDone: true, optimizer.TypeFailed: true, optimizer.TypeResetDone: true,
	}
	n := 0
	for name, s := range allSets(t) {
		for _, w := range s.Workloads() {
			wname := w.ObjectMeta.Name
			c := w.Template.Spec.Containers
			if len(c) != 1 {
				t.Errorf("%s: %s %s has %d containers, want 1", w.Source, w.Kind.Kind, wname, len(c))
				continue
			}
			emits, declared := w.ObjectMeta.Annotations[emitsAnnotation]
			if !declared {
				t.Errorf("%s: %s %s does not declare %s (empty if it never replies or sends)", w.Source, w.Kind.Kind, wname, emitsAnnotation)
			}
			for _, typ := range splitList(emits) {
				if !known[typ] {
					t.Errorf("%s: %s %s emits %q, not a type of the event contract", w.Source, w.Kind.Kind, wname, typ)
				}
			}
			fn := functionName(c[0].Image)
			if fn == "" {
				continue
			}
			n++
			if name != setAgent && wname != fn {
				t.Errorf("%s: %s %s runs function %s: name them alike", w.Source, w.Kind.Kind, wname, fn)
			}
			probes := []struct {
				what  string
				probe *corev1.Probe
				path  string
			}{
				{"readinessProbe", c[0].ReadinessProbe, "/readyz"},
				{"livenessProbe", c[0].LivenessProbe, "/healthz"},
			}
			for _, p := range probes {
				if p.probe == nil || p.probe.HTTPGet == nil || p.probe.HTTPGet.Path != p.path {
					t.Errorf("%s: %s %s: %s must be an httpGet of %s", w.Source, w.Kind.Kind, wname, p.what, p.path)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no function services found")
	}
}

func splitList(s string) []string {
	var out []string
	for _, f := range strings.Split(s, ",") {
		if f = strings.TrimSpace(f); f != "" {
			out = append(out, f)
		}
	}
	return out
}

// koPaths returns every ko:// import path used by the given sets, with where it is used.
func koPaths(t *testing.T) map[string]string {
	out := map[string]string{}
	for _, s := range allSets(t) {
		for _, w := range s.Workloads() {
			for _, c := range w.Template.Spec.Containers {
				if p, ok := manifests.KoImportPath(c.Image); ok {
					out[p] = w.Source.String()
				}
			}
		}
	}
	return out
}

type goPackage struct {
	ImportPath string
	Name       string
	Dir        string
	Error      *struct{ Err string }
}

// goList runs `go list -e -json` on patterns from the repository root.
func goList(t *testing.T, patterns ...string) map[string]goPackage {
	t.Helper()
	cmd := exec.Command("go", append([]string{"list", "-e", "-json"}, patterns...)...)
	cmd.Dir = repo
	out, err := cmd.Output()
	if err != nil {
		t.Fatalf("go list: %v", err)
	}
	pkgs := map[string]goPackage{}
	dec := json.NewDecoder(strings.NewReader(string(out)))
	for dec.More() {
		var p goPackage
		if err := dec.Decode(&p); err != nil {
			t.Fatal(err)
		}
		pkgs[p.ImportPath] = p
	}
	return pkgs
}

// TestKoImagesAreMainPackages: every ko:// image is a main package of this repository, so
// `ko apply` can build it.
func TestKoImagesAreMainPackages(t *testing.T) {
	paths := koPaths(t)
	if len(paths) == 0 {
		t.Fatal("no ko:// images")
	}
	pkgs := goList(t, sortedKeys(paths)...)
	for _, p := range sortedKeys(paths) {
		pkg, ok := pkgs[p]
		switch {
		case !ok || pkg.Error != nil:
			msg := "not found"
			if ok {
				msg = pkg.Error.Err
			}
			t.Errorf("%s: ko://%s: %s", paths[p], p, msg)
		case pkg.Name != "main":
			t.Errorf("%s: ko://%s is package %s, not a main package", paths[p], p, pkg.Name)
		}
	}
}

// koConfig is the part of ko.yaml that matters here (ko's own config types live in ko's module).
type koConfig struct {
	DefaultBaseImage string   `json:"defaultBaseImage"`
	DefaultFlags     []string `json:"defaultFlags"`
	DefaultLdflags   []string `json:"defaultLdflags"`
	Builds           []struct {
		ID      string   `json:"id"`
		Dir     string   `json:"dir"`
		Main    string   `json:"main"`
		Env     []string `json:"env"`
		Flags   []string `json:"flags"`
		Ldflags []string `json:"ldflags"`
	} `json:"builds"`
}

// TestKoConfig: ko.yaml builds exactly the functions deploy/ uses (ko refuses to run when an
// entry's directory is missing, and an unlisted function would get no per-build flags), each
// static (CGO off), stripped (-s -w) and stamped with the version, on a static distroless base.
func TestKoConfig(t *testing.T) {
	data, err := os.ReadFile(filepath.Join(repo, "ko.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	var cfg koConfig
	if err := yaml.UnmarshalStrict(data, &cfg); err != nil {
		t.Fatalf("ko.yaml: %v", err)
	}
	if !strings.HasPrefix(cfg.DefaultBaseImage, "cgr.dev/chainguard/static") && !strings.HasPrefix(cfg.DefaultBaseImage, "gcr.io/distroless/static") {
		t.Errorf("defaultBaseImage %q is not a static distroless image", cfg.DefaultBaseImage)
	}
	checkLdflags := func(what string, ld []string) {
		joined := " " + strings.Join(ld, " ") + " "
		for _, want := range []string{" -s ", " -w ", "{{.Env.VERSION}}"} {
			if !strings.Contains(joined, want) {
				t.Errorf("%s: ldflags %q lack %q", what, ld, strings.TrimSpace(want))
			}
		}
	}
	checkLdflags("defaultLdflags", cfg.DefaultLdflags)

	// Entries by the import path ko matches them to: the module path joined with dir and main.
	entries := map[string]string{}
	for _, b := range cfg.Builds {
		imp := path.Join(modulePath, b.Dir, b.Main)
		entries[imp] = b.ID
		checkLdflags("build "+b.ID, b.Ldflags)
		if !contains(b.Env, "CGO_ENABLED=0") {
			t.Errorf("build %s: env %v lacks CGO_ENABLED=0 (the base image has no libc)", b.ID, b.Env)
		}
	}
	pkgs := goList(t, sortedKeys(entries)...)
	for _, imp := range sortedKeys(entries) {
		if p, ok := pkgs[imp]; !ok || p.Error != nil || p.Name != "main" {
			t.Errorf("build %s: %s is not a main package of this repository", entries[imp], imp)
		}
	}
	used := koPaths(t)
	for _, p := range sortedKeys(used) {
		if _, ok := entries[p]; !ok {
			t.Errorf("%s: ko://%s has no entry in ko.yaml builds", used[p], p)
		}
	}
	for _, p := range sortedKeys(entries) {
		if _, ok := used[p]; !ok {
			t.Errorf("ko.yaml builds %s, which no manifest deploys", p)
		}
	}
}
