// Package manifests loads scoreflow's deployment YAML (the variants of config/, built with
// kustomize from deploy/, brokers/, triggers/, eventtypes/ and oidc/) into typed Kubernetes and
// Knative objects, strictly: a misspelt field, a duplicate key, a kind scoreflow does not use or
// the same object defined twice is an error naming the file and line. The CLI, the local broker
// and the tests read what `kubectl kustomize config/<variant> | ko apply -f -` sends to a
// cluster, so what runs locally is what is deployed.
package manifests

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strings"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	eventingv1alpha1 "knative.dev/eventing/pkg/apis/eventing/v1alpha1"
	eventingv1beta2 "knative.dev/eventing/pkg/apis/eventing/v1beta2"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"
	"sigs.k8s.io/yaml"
)

// Object is any decoded manifest object.
type Object interface {
	metav1.Object
	runtime.Object
}

// Source says where a decoded object was written.
type Source struct {
	Path string // the file, as found from the path given to Load
	Doc  int    // 1-based document number within the file
	Line int    // 1-based line on which the document starts (YAML errors count lines within it)
}

func (s Source) String() string { return fmt.Sprintf("%s:%d (document %d)", s.Path, s.Line, s.Doc) }

// Item is one decoded object and where it came from.
type Item[T Object] struct {
	Source Source
	Object T
}

// Set is every object decoded from a load, grouped by kind, each group in load order (files in
// lexical order, documents in file order).
type Set struct {
	Namespaces          []Item[*corev1.Namespace]
	ServiceAccounts     []Item[*corev1.ServiceAccount]
	ConfigMaps          []Item[*corev1.ConfigMap]
	Secrets             []Item[*corev1.Secret]
	Roles               []Item[*rbacv1.Role]
	ClusterRoles        []Item[*rbacv1.ClusterRole]
	RoleBindings        []Item[*rbacv1.RoleBinding]
	ClusterRoleBindings []Item[*rbacv1.ClusterRoleBinding]
	Brokers             []Item[*eventingv1.Broker]
	Triggers            []Item[*eventingv1.Trigger]
	PingSources         []Item[*sourcesv1.PingSource]
	ApiServerSources    []Item[*sourcesv1.ApiServerSource]
	SinkBindings        []Item[*sourcesv1.SinkBinding]
	Services            []Item[*servingv1.Service]
	Deployments         []Item[*appsv1.Deployment]
	EventPolicies       []Item[*eventingv1alpha1.EventPolicy]
	EventTypes          []Item[*eventingv1beta2.EventType]

	all []Item[Object]
}

// All returns every object in load order.
func (s *Set) All() []Item[Object] { return append([]Item[Object](nil), s.all...) }

// Kinds are the kinds a manifest may hold. Anything else is an error: each kind here has a typed
// group in Set, and tests validate each one.
var Kinds = []schema.GroupVersionKind{
	corev1.SchemeGroupVersion.WithKind("Namespace"),
	corev1.SchemeGroupVersion.WithKind("ServiceAccount"),
	corev1.SchemeGroupVersion.WithKind("ConfigMap"),
	corev1.SchemeGroupVersion.WithKind("Secret"),
	rbacv1.SchemeGroupVersion.WithKind("Role"),
	rbacv1.SchemeGroupVersion.WithKind("ClusterRole"),
	rbacv1.SchemeGroupVersion.WithKind("RoleBinding"),
	rbacv1.SchemeGroupVersion.WithKind("ClusterRoleBinding"),
	eventingv1.SchemeGroupVersion.WithKind("Broker"),
	eventingv1.SchemeGroupVersion.WithKind("Trigger"),
	sourcesv1.SchemeGroupVersion.WithKind("PingSource"),
	sourcesv1.SchemeGroupVersion.WithKind("ApiServerSource"),
	sourcesv1.SchemeGroupVersion.WithKind("SinkBinding"),
	servingv1.SchemeGroupVersion.WithKind("Service"),
	appsv1.SchemeGroupVersion.WithKind("Deployment"),
	eventingv1alpha1.SchemeGroupVersion.WithKind("EventPolicy"),
	eventingv1beta2.SchemeGroupVersion.WithKind("EventType"),
}

var (
	scheme  = runtime.NewScheme()
	decoder *kjson.Serializer
)

func init() {
	for _, add := range []func(*runtime.Scheme) error{
		corev1.AddToScheme, appsv1.AddToScheme, rbacv1.AddToScheme, eventingv1.AddToScheme, sourcesv1.AddToScheme, servingv1.AddToScheme,
		eventingv1alpha1.AddToScheme, eventingv1beta2.AddToScheme,
	} {
		if err := add(scheme); err != nil {
			panic(err)
		}
	}
	// Strict: unknown and duplicate fields are errors, field names are case-sensitive (as the API
	// server's strict field validation).
	decoder = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, scheme, scheme, kjson.SerializerOptions{Yaml: true, Strict: true})
}

// Load decodes every manifest under paths. A path is a file; a directory with a kustomization,
// built as `kubectl apply -k DIR` does (Build); or another directory, whose *.yaml, *.yml and
// *.json files are read in lexical order, without descending into subdirectories: the same files
// `kubectl apply -f DIR` and `ko apply -f DIR` take. Errors from every file are returned together.
func Load(paths ...string) (*Set, error) {
	var files []string
	var errs []error
	s := &Set{}
	for _, p := range paths {
		st, err := os.Stat(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if !st.IsDir() {
			files = append(files, p)
			continue
		}
		if IsKustomization(p) {
			errs = append(errs, s.addBuilt(p)...)
			continue
		}
		entries, err := os.ReadDir(p)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		n := 0
		for _, e := range entries {
			if e.Type().IsRegular() && isManifest(e.Name()) {
				files = append(files, filepath.Join(p, e.Name()))
				n++
			}
		}
		if n == 0 {
			errs = append(errs, fmt.Errorf("%s: no manifest files (*.yaml, *.yml, *.json)", p))
		}
	}
	for _, f := range files {
		data, err := os.ReadFile(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := s.Add(f, data); err != nil {
			errs = append(errs, err)
		}
	}
	errs = append(errs, s.duplicates()...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func isManifest(name string) bool {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".yaml", ".yml", ".json":
		return true
	}
	return false
}

// Add decodes the documents of one file's content into s. path is only used in errors and
// Sources. Documents holding nothing but comments are skipped. Duplicates are checked by Load.
func (s *Set) Add(path string, data []byte) error {
	docs, err := splitDocuments(data)
	if err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	var errs []error
	for _, d := range docs {
		src := Source{Path: path, Doc: d.n, Line: d.line}
		obj, err := decode(d.data)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", src, err))
			continue
		}
		s.add(src, obj)
	}
	return errors.Join(errs...)
}

// addBuilt decodes the objects of the kustomization in dir into s.
func (s *Set) addBuilt(dir string) []error {
	items, err := Build(dir)
	if err != nil {
		return []error{err}
	}
	return s.addItems(items)
}

// Decode decodes built objects (Build) as strictly as Load does: a run builds a variant once and
// both applies its objects and reads them typed.
func Decode(items []Item[*unstructured.Unstructured]) (*Set, error) {
	s := &Set{}
	errs := append(s.addItems(items), s.duplicates()...)
	if len(errs) > 0 {
		return nil, errors.Join(errs...)
	}
	return s, nil
}

func (s *Set) addItems(items []Item[*unstructured.Unstructured]) []error {
	var errs []error
	for _, it := range items {
		doc, err := json.Marshal(it.Object.Object)
		if err != nil {
			return []error{err}
		}
		obj, err := decode(doc)
		if err != nil {
			errs = append(errs, fmt.Errorf("%s: %w", it.Source, err))
			continue
		}
		s.add(it.Source, obj)
	}
	return errs
}

func decode(doc []byte) (Object, error) {
	// Read apiVersion/kind first so that an unsupported kind is reported as such, not as a
	// decoding failure of whatever Go type the scheme happens to have for it.
	if j, err := yaml.YAMLToJSON(doc); err == nil {
		gvk, err := kjson.DefaultMetaFactory.Interpret(j)
		if err != nil {
			return nil, err
		}
		if gvk.Kind == "" || gvk.Version == "" {
			return nil, errors.New("apiVersion and kind are required")
		}
		if !allowed(*gvk) {
			return nil, fmt.Errorf("%s %s is not a kind scoreflow manifests use (allowed: %s)", gvk.GroupVersion(), gvk.Kind, kindList())
		}
	}
	obj, gvk, err := decoder.Decode(doc, nil, nil)
	if err != nil {
		if runtime.IsStrictDecodingError(err) {
			return nil, fmt.Errorf("%s %s: %w", gvk.Kind, nameOf(obj), err)
		}
		return nil, err
	}
	o, ok := obj.(Object)
	if !ok {
		return nil, fmt.Errorf("%s is not an object with metadata", gvk)
	}
	if o.GetName() == "" {
		return nil, fmt.Errorf("%s has no metadata.name", gvk.Kind)
	}
	// The typed object forgets its GVK on decode; keep it so that users of All can tell kinds apart.
	obj.GetObjectKind().SetGroupVersionKind(*gvk)
	return o, nil
}

func nameOf(obj runtime.Object) string {
	if o, ok := obj.(Object); ok {
		return name(o)
	}
	return ""
}

func allowed(gvk schema.GroupVersionKind) bool {
	for _, k := range Kinds {
		if k == gvk {
			return true
		}
	}
	return false
}

func kindList() string {
	var names []string
	for _, k := range Kinds {
		names = append(names, k.Kind)
	}
	return strings.Join(names, ", ")
}

func (s *Set) add(src Source, obj Object) {
	s.all = append(s.all, Item[Object]{Source: src, Object: obj})
	switch o := obj.(type) {
	case *corev1.Namespace:
		s.Namespaces = append(s.Namespaces, Item[*corev1.Namespace]{src, o})
	case *corev1.ServiceAccount:
		s.ServiceAccounts = append(s.ServiceAccounts, Item[*corev1.ServiceAccount]{src, o})
	case *corev1.ConfigMap:
		s.ConfigMaps = append(s.ConfigMaps, Item[*corev1.ConfigMap]{src, o})
	case *corev1.Secret:
		s.Secrets = append(s.Secrets, Item[*corev1.Secret]{src, o})
	case *rbacv1.Role:
		s.Roles = append(s.Roles, Item[*rbacv1.Role]{src, o})
	case *rbacv1.ClusterRole:
		s.ClusterRoles = append(s.ClusterRoles, Item[*rbacv1.ClusterRole]{src, o})
	case *rbacv1.RoleBinding:
		s.RoleBindings = append(s.RoleBindings, Item[*rbacv1.RoleBinding]{src, o})
	case *rbacv1.ClusterRoleBinding:
		s.ClusterRoleBindings = append(s.ClusterRoleBindings, Item[*rbacv1.ClusterRoleBinding]{src, o})
	case *eventingv1.Broker:
		s.Brokers = append(s.Brokers, Item[*eventingv1.Broker]{src, o})
	case *eventingv1.Trigger:
		s.Triggers = append(s.Triggers, Item[*eventingv1.Trigger]{src, o})
	case *sourcesv1.PingSource:
		s.PingSources = append(s.PingSources, Item[*sourcesv1.PingSource]{src, o})
	case *sourcesv1.ApiServerSource:
		s.ApiServerSources = append(s.ApiServerSources, Item[*sourcesv1.ApiServerSource]{src, o})
	case *sourcesv1.SinkBinding:
		s.SinkBindings = append(s.SinkBindings, Item[*sourcesv1.SinkBinding]{src, o})
	case *servingv1.Service:
		s.Services = append(s.Services, Item[*servingv1.Service]{src, o})
	case *appsv1.Deployment:
		s.Deployments = append(s.Deployments, Item[*appsv1.Deployment]{src, o})
	case *eventingv1alpha1.EventPolicy:
		s.EventPolicies = append(s.EventPolicies, Item[*eventingv1alpha1.EventPolicy]{src, o})
	case *eventingv1beta2.EventType:
		s.EventTypes = append(s.EventTypes, Item[*eventingv1beta2.EventType]{src, o})
	}
}

// duplicates reports objects defined more than once: kubectl would silently apply the last one.
func (s *Set) duplicates() []error {
	seen := map[string]Source{}
	var errs []error
	for _, it := range s.all {
		gvk := it.Object.GetObjectKind().GroupVersionKind()
		key := gvk.GroupKind().String() + " " + it.Object.GetNamespace() + "/" + it.Object.GetName()
		if first, ok := seen[key]; ok {
			errs = append(errs, fmt.Errorf("%s: %s %s is also defined at %s", it.Source, gvk.Kind, name(it.Object), first))
			continue
		}
		seen[key] = it.Source
	}
	return errs
}

func name(o Object) string {
	if o.GetNamespace() == "" {
		return o.GetName()
	}
	return o.GetNamespace() + "/" + o.GetName()
}

// Find returns the item of items with that namespace and name.
func Find[T Object](items []Item[T], namespace, name string) (Item[T], bool) {
	for _, it := range items {
		if it.Object.GetNamespace() == namespace && it.Object.GetName() == name {
			return it, true
		}
	}
	return Item[T]{}, false
}

// Workload is an object that runs a function's pods: a Knative Service (a function that receives
// events or requests) or a Deployment (a source, which only sends: bound to its sink by a
// SinkBinding).
type Workload struct {
	Source Source
	// Kind is the object's kind, as a SinkBinding's subject names it.
	Kind       schema.GroupVersionKind
	ObjectMeta *metav1.ObjectMeta
	// Template is the pod template's metadata and spec (a Knative Service's, without Serving's
	// additions; a Deployment's as written).
	Template *corev1.PodTemplateSpec
}

// Workloads are the set's Knative Services, then its Deployments, each in load order.
func (s *Set) Workloads() []Workload {
	var out []Workload
	for _, it := range s.Services {
		svc := it.Object
		out = append(out, Workload{Source: it.Source, Kind: servingv1.SchemeGroupVersion.WithKind("Service"), ObjectMeta: &svc.ObjectMeta,
			Template: &corev1.PodTemplateSpec{ObjectMeta: svc.Spec.Template.ObjectMeta, Spec: svc.Spec.Template.Spec.PodSpec}})
	}
	for _, it := range s.Deployments {
		d := it.Object
		out = append(out, Workload{Source: it.Source, Kind: appsv1.SchemeGroupVersion.WithKind("Deployment"), ObjectMeta: &d.ObjectMeta, Template: &d.Spec.Template})
	}
	return out
}

// FindWorkload is the workload namespace/name of ws.
func FindWorkload(ws []Workload, namespace, name string) (Workload, bool) {
	for _, w := range ws {
		if w.ObjectMeta.Namespace == namespace && w.ObjectMeta.Name == name {
			return w, true
		}
	}
	return Workload{}, false
}

// ServiceEnv reads the Knative Service namespace/name from the manifest at path and returns the
// env its containers set for each of names, as NAME=value: a test or benchmark of a function "as
// deployed" follows its manifest instead of a copy of its values.
func ServiceEnv(path, namespace, name string, names ...string) ([]string, error) {
	s, err := Load(path)
	if err != nil {
		return nil, err
	}
	svc, ok := Find(s.Services, namespace, name)
	if !ok {
		return nil, fmt.Errorf("%s has no Service %s/%s", path, namespace, name)
	}
	var out []string
	for _, n := range names {
		found := false
		for _, c := range svc.Object.Spec.Template.Spec.Containers {
			for _, e := range c.Env {
				if e.Name == n {
					out, found = append(out, n+"="+e.Value), true
				}
			}
		}
		if !found {
			return nil, fmt.Errorf("%s: Service %s/%s sets no %s", path, namespace, name, n)
		}
	}
	return out, nil
}

// KoPrefix marks an image that ko builds from a Go main package: ko://<import path>.
const KoPrefix = "ko://"

// KoImportPath returns the import path of a ko:// image reference.
func KoImportPath(image string) (string, bool) {
	if !strings.HasPrefix(image, KoPrefix) {
		return "", false
	}
	return strings.TrimPrefix(image, KoPrefix), true
}

type document struct {
	n, line int
	data    []byte
}

// separator is a YAML document separator line: "---", optionally followed by a comment.
var separator = regexp.MustCompile(`^---\s*(#.*)?$`)

// splitDocuments splits a multi-document YAML stream on "---" lines, remembering where each
// document starts. Documents holding only comments and blank lines are dropped and not counted.
func splitDocuments(data []byte) ([]document, error) {
	var docs []document
	var cur bytes.Buffer
	start, line := 1, 0
	flush := func() {
		if hasContent(cur.Bytes()) {
			docs = append(docs, document{n: len(docs) + 1, line: start, data: append([]byte(nil), cur.Bytes()...)})
		}
		cur.Reset()
	}
	sc := bufio.NewScanner(bytes.NewReader(data))
	sc.Buffer(make([]byte, 0, 64*1024), 16*1024*1024)
	for sc.Scan() {
		line++
		text := strings.TrimRight(sc.Text(), "\r")
		if separator.MatchString(text) {
			flush()
			start = line + 1
			continue
		}
		// A document starts at its first line that is neither blank nor a comment.
		if !hasContent(cur.Bytes()) && !hasContent([]byte(text)) {
			start = line + 1
		}
		cur.WriteString(text)
		cur.WriteByte('\n')
	}
	if err := sc.Err(); err != nil {
		return nil, err
	}
	flush()
	return docs, nil
}

func hasContent(doc []byte) bool {
	for _, l := range strings.Split(string(doc), "\n") {
		t := strings.TrimSpace(l)
		if t != "" && !strings.HasPrefix(t, "#") {
			return true
		}
	}
	return false
}

// SortedNames returns the namespace/name of items, sorted: for messages.
func SortedNames[T Object](items []Item[T]) []string {
	var out []string
	for _, it := range items {
		out = append(out, name(it.Object))
	}
	sort.Strings(out)
	return out
}
