package knlocal

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// fieldManager owns what the harness applies (server-side apply), as kubectl would for a user.
const fieldManager = "scoreflow-knlocal"

// Applier applies YAML documents to the hub the way `kubectl apply --server-side` does, for any kind
// the API server knows (CRDs included, once established).
type Applier struct {
	dyn    dynamic.Interface
	mapper *restmapper.DeferredDiscoveryRESTMapper
}

// NewApplier returns an Applier for the hub at cfg.
func NewApplier(cfg *rest.Config) (*Applier, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return &Applier{dyn: dyn, mapper: restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))}, nil
}

// Decode splits YAML (documents separated by ---) into objects, skipping empty documents.
func Decode(r io.Reader) ([]*unstructured.Unstructured, error) {
	dec := utilyaml.NewYAMLOrJSONDecoder(r, 4096)
	var out []*unstructured.Unstructured
	for {
		var m map[string]any
		if err := dec.Decode(&m); err != nil {
			if errors.Is(err, io.EOF) {
				return out, nil
			}
			return nil, err
		}
		if len(m) == 0 {
			continue
		}
		out = append(out, &unstructured.Unstructured{Object: m})
	}
}

// ReadFiles decodes every .yaml file named, or found directly inside a named directory (sorted by
// name, as kubectl apply -f DIR does).
func ReadFiles(paths ...string) ([]*unstructured.Unstructured, error) {
	var out []*unstructured.Unstructured
	for _, p := range paths {
		files := []string{p}
		if st, err := os.Stat(p); err != nil {
			return nil, err
		} else if st.IsDir() {
			files = nil
			entries, err := os.ReadDir(p)
			if err != nil {
				return nil, err
			}
			for _, e := range entries {
				if !e.IsDir() && (strings.HasSuffix(e.Name(), ".yaml") || strings.HasSuffix(e.Name(), ".yml")) {
					files = append(files, filepath.Join(p, e.Name()))
				}
			}
			sort.Strings(files)
		}
		for _, f := range files {
			raw, err := os.ReadFile(f)
			if err != nil {
				return nil, err
			}
			objs, err := Decode(bytes.NewReader(raw))
			if err != nil {
				return nil, fmt.Errorf("%s: %w", f, err)
			}
			out = append(out, objs...)
		}
	}
	return out, nil
}

// Apply applies each object in order. Objects whose kind is not served yet (a CRD just created)
// are retried once after the discovery cache is refreshed.
func (a *Applier) Apply(ctx context.Context, objs ...*unstructured.Unstructured) error {
	for _, o := range objs {
		if err := a.apply(ctx, o); err != nil {
			return fmt.Errorf("apply %s %s/%s: %w", o.GetKind(), o.GetNamespace(), o.GetName(), err)
		}
	}
	return nil
}

// Resource returns the dynamic client of a kind, namespaced or not.
func (a *Applier) Resource(gvk schema.GroupVersionKind, namespace string) (dynamic.ResourceInterface, error) {
	m, err := a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	if meta.IsNoMatchError(err) {
		a.mapper.Reset()
		m, err = a.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	}
	if err != nil {
		return nil, err
	}
	if m.Scope.Name() == meta.RESTScopeNameNamespace {
		return a.dyn.Resource(m.Resource).Namespace(namespace), nil
	}
	return a.dyn.Resource(m.Resource), nil
}

func (a *Applier) apply(ctx context.Context, o *unstructured.Unstructured) error {
	ri, err := a.Resource(o.GroupVersionKind(), o.GetNamespace())
	if err != nil {
		return err
	}
	_, err = ri.Apply(ctx, o.GetName(), o, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
	return err
}
