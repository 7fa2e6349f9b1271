package manifests

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

const multiDoc = `# leading comment
---
apiVersion: v1
kind: Namespace
metadata:
  name: ns1
---
# a document with only comments is skipped
---

apiVersion: eventing.knative.dev/v1
kind: Broker
metadata:
  name: b
  namespace: ns1
spec:
  delivery:
    retry: 3
--- # separator with a comment
apiVersion: serving.knative.dev/v1
kind: Service
metadata:
  name: fn
  namespace: ns1
spec:
  template:
    spec:
      containers:
        - image: ko://example.com/fn
`

func TestAddMultiDocument(t *testing.T) {
	s := &Set{}
	if err := s.Add("m.yaml", []byte(multiDoc)); err != nil {
		t.Fatal(err)
	}
	if len(s.Namespaces) != 1 || len(s.Brokers) != 1 || len(s.Services) != 1 || len(s.All()) != 3 {
		t.Fatalf("got %d namespaces, %d brokers, %d services, %d in all; want 1, 1, 1, 3",
			len(s.Namespaces), len(s.Brokers), len(s.Services), len(s.All()))
	}
	tests := []struct {
		what      string
		got, want Source
	}{
		{"namespace", s.Namespaces[0].Source, Source{Path: "m.yaml", Doc: 1, Line: 3}},
		{"broker", s.Brokers[0].Source, Source{Path: "m.yaml", Doc: 2, Line: 11}},
		{"service", s.Services[0].Source, Source{Path: "m.yaml", Doc: 3, Line: 20}},
	}
	for _, tt := range tests {
		if tt.got != tt.want {
			t.Errorf("%s: source %+v, want %+v", tt.what, tt.got, tt.want)
		}
	}
	if r := s.Brokers[0].Object.Spec.Delivery.Retry; r == nil || *r != 3 {
		t.Errorf("broker delivery.retry = %v, want 3", r)
	}
	if got := s.All()[2].Object.GetObjectKind().GroupVersionKind().Kind; got != "Service" {
		t.Errorf("All()[2] kind = %q, want Service (the GVK must survive decoding)", got)
	}
	if p, ok := KoImportPath(s.Services[0].Object.Spec.Template.Spec.Containers[0].Image); !ok || p != "example.com/fn" {
		t.Errorf("KoImportPath = %q, %v", p, ok)
	}
}

func TestAddRejects(t *testing.T) {
	tests := []struct {
		name string
		doc  string
		want []string // substrings of the error
	}{
		{"unknown field", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: a\nautomountToken: false\n",
			[]string{"f.yaml:1", `unknown field "automountToken"`}},
		{"unknown nested field in a Knative type", "apiVersion: eventing.knative.dev/v1\nkind: Trigger\nmetadata:\n  name: t\nspec:\n  broker: b\n  filters:\n    - exakt:\n        type: x\n",
			[]string{`unknown field "spec.filters[0].exakt"`}},
		{"field in the wrong case", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\nData:\n  a: b\n",
			[]string{`unknown field "Data"`}},
		{"duplicate key", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\ndata:\n  a: b\n  a: c\n",
			[]string{`line 7: key "a" already set`}},
		{"kind scoreflow does not use", "apiVersion: apps/v1\nkind: StatefulSet\nmetadata:\n  name: d\n",
			[]string{"apps/v1 StatefulSet is not a kind scoreflow manifests use"}},
		{"known kind at a version not used", "apiVersion: sources.knative.dev/v1beta2\nkind: PingSource\nmetadata:\n  name: p\n",
			[]string{"not a kind scoreflow manifests use"}},
		{"no kind", "apiVersion: v1\nmetadata:\n  name: x\n",
			[]string{"apiVersion and kind are required"}},
		{"no name", "apiVersion: v1\nkind: Namespace\nmetadata:\n  labels:\n    a: b\n",
			[]string{"no metadata.name"}},
		{"not YAML", "apiVersion: v1\nkind: [unclosed\n",
			[]string{"f.yaml:1"}},
		{"error in the second document names its line", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: ok\n---\napiVersion: v1\nkind: Namespace\nmetadata:\n  name: bad\nspec:\n  finalizerz: []\n",
			[]string{"f.yaml:6 (document 2)", "finalizerz"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			err := (&Set{}).Add("f.yaml", []byte(tt.doc))
			if err == nil {
				t.Fatal("accepted")
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
		})
	}
}

func write(t *testing.T, dir, name, content string) {
	t.Helper()
	p := filepath.Join(dir, name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestLoadDirectories(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "a/1.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: one\n")
	write(t, dir, "a/2.yml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: two\n")
	write(t, dir, "a/3.json", `{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "three"}}`)
	write(t, dir, "a/README.md", "not a manifest")
	// Like kubectl apply -f DIR: subdirectories are not read.
	write(t, dir, "a/sub/4.yaml", "apiVersion: v1\nkind: Namespace\nmetadata:\n  name: four\n")
	write(t, dir, "b/x.yaml", "apiVersion: v1\nkind: ServiceAccount\nmetadata:\n  name: sa\n  namespace: one\n")

	s, err := Load(filepath.Join(dir, "a"), filepath.Join(dir, "b", "x.yaml"))
	if err != nil {
		t.Fatal(err)
	}
	got := SortedNames(s.Namespaces)
	if strings.Join(got, ",") != "one,three,two" {
		t.Errorf("namespaces %v, want one, three, two (sub/ not read)", got)
	}
	if _, ok := Find(s.ServiceAccounts, "one", "sa"); !ok {
		t.Error("service account one/sa not found")
	}
	if _, ok := Find(s.ServiceAccounts, "two", "sa"); ok {
		t.Error("Find matched the wrong namespace")
	}
	if s.Namespaces[0].Source.Path != filepath.Join(dir, "a", "1.yaml") {
		t.Errorf("source path %q", s.Namespaces[0].Source.Path)
	}
}

func TestLoadErrors(t *testing.T) {
	dir := t.TempDir()
	write(t, dir, "dup/1.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: ns\n")
	write(t, dir, "dup/2.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: ns\n")
	// Same name, other namespace or other kind: not duplicates.
	write(t, dir, "dup/3.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\n  namespace: m\n---\napiVersion: v1\nkind: Secret\nmetadata:\n  name: c\n  namespace: ns\n")
	write(t, dir, "bad/1.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: c\nnope: 1\n")
	write(t, dir, "bad/2.yaml", "apiVersion: v1\nkind: ConfigMap\nmetadata:\n  name: d\nnope: 2\n")
	if err := os.MkdirAll(filepath.Join(dir, "empty"), 0o755); err != nil {
		t.Fatal(err)
	}

	tests := []struct {
		name  string
		paths []string
		want  []string
		not   []string
	}{
		{"duplicate object", []string{filepath.Join(dir, "dup")},
			[]string{"2.yaml:1 (document 1): ConfigMap ns/c is also defined at " + filepath.Join(dir, "dup", "1.yaml")},
			[]string{"m/c", "Secret"}},
		{"every bad file is reported", []string{filepath.Join(dir, "bad")},
			[]string{filepath.Join(dir, "bad", "1.yaml"), filepath.Join(dir, "bad", "2.yaml")}, nil},
		{"directory without manifests", []string{filepath.Join(dir, "empty")}, []string{"no manifest files"}, nil},
		{"missing path", []string{filepath.Join(dir, "nope")}, []string{"no such file"}, nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			s, err := Load(tt.paths...)
			if err == nil {
				t.Fatalf("loaded %d objects without error", len(s.All()))
			}
			for _, w := range tt.want {
				if !strings.Contains(err.Error(), w) {
					t.Errorf("error %q does not contain %q", err, w)
				}
			}
			for _, n := range tt.not {
				if strings.Contains(err.Error(), n) {
					t.Errorf("error %q mentions %q", err, n)
				}
			}
		})
	}
}

func TestKoImportPath(t *testing.T) {
	tests := []struct {
		image, want string
		ok          bool
	}{
		{"ko://github.com/scoreflow/scoreflow/functions/score-writer", "github.com/scoreflow/scoreflow/functions/score-writer", true},
		{"quay.io/ruben/cloudevents-player:latest", "", false},
		{"kind.local/score-writer", "", false},
	}
	for _, tt := range tests {
		got, ok := KoImportPath(tt.image)
		if got != tt.want || ok != tt.ok {
			t.Errorf("KoImportPath(%q) = %q, %v; want %q, %v", tt.image, got, ok, tt.want, tt.ok)
		}
	}
}

func TestServiceEnv(t *testing.T) {
	path := filepath.Join("..", "..", "deploy", "score-writer.yaml")
	env, err := ServiceEnv(path, "scoreflow", "score-writer", "GOMEMLIMIT", "MAX_SCORE_SERIES")
	if err != nil {
		t.Fatal(err)
	}
	if len(env) != 2 || !strings.HasPrefix(env[0], "GOMEMLIMIT=") || env[0] == "GOMEMLIMIT=" || !strings.HasPrefix(env[1], "MAX_SCORE_SERIES=") {
		t.Errorf("env %q, want GOMEMLIMIT and MAX_SCORE_SERIES with values", env)
	}
	if _, err := ServiceEnv(path, "scoreflow", "score-writer", "NOT_SET_ANYWHERE"); err == nil || !strings.Contains(err.Error(), "NOT_SET_ANYWHERE") {
		t.Errorf("a variable the manifest does not set: err %v, want one naming it", err)
	}
	if _, err := ServiceEnv(path, "scoreflow", "no-such-service", "GOMEMLIMIT"); err == nil {
		t.Error("a Service the manifest does not hold: no error")
	}
}
