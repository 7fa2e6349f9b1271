package manifests

import (
	"fmt"
	"os"
	"path/filepath"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/api/types"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// originAnnotation is where kustomize records the file an object was read from, when asked to
// (buildMetadata: [originAnnotations]).
const originAnnotation = "config.kubernetes.io/origin"

// IsKustomization reports whether dir holds a kustomization file: such a directory is built with
// kustomize (`kubectl apply -k`), not read file by file.
func IsKustomization(dir string) bool {
	for _, name := range []string{"kustomization.yaml", "kustomization.yml", "Kustomization"} {
		if st, err := os.Stat(filepath.Join(dir, name)); err == nil && st.Mode().IsRegular() {
			return true
		}
	}
	return false
}

// Build renders the kustomization in dir as `kubectl kustomize dir` (and so `kubectl apply -k`)
// does, with kubectl's defaults: the resources in kustomize's legacy order (namespaces first),
// loads restricted to each kustomization's own directory, no plugins. Each object's Source is the
// file and document it was first written in, before any patch.
func Build(dir string) ([]Item[*unstructured.Unstructured], error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	if !IsKustomization(abs) {
		return nil, fmt.Errorf("%s: no kustomization.yaml", dir)
	}
	// kustomize reports where each object came from only when the kustomization asks; a wrapper
	// around dir asks, so that dir's own files stay as users apply them.
	wrapper, err := os.MkdirTemp("", "scoreflow-kustomize-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(wrapper)
	wrapper, err = filepath.EvalSymlinks(wrapper)
	if err != nil {
		return nil, err
	}
	if abs, err = filepath.EvalSymlinks(abs); err != nil {
		return nil, err
	}
	rel, err := filepath.Rel(wrapper, abs)
	if err != nil {
		return nil, err
	}
	k := fmt.Sprintf("resources:\n  - %s\nbuildMetadata: [%s]\n", filepath.ToSlash(rel), types.OriginAnnotations)
	if err := os.WriteFile(filepath.Join(wrapper, "kustomization.yaml"), []byte(k), 0o644); err != nil {
		return nil, err
	}
	opts := krusty.MakeDefaultOptions()
	opts.Reorder = krusty.ReorderOptionLegacy
	m, err := krusty.MakeKustomizer(opts).Run(filesys.MakeFsOnDisk(), wrapper)
	if err != nil {
		return nil, fmt.Errorf("kustomize %s: %w", dir, err)
	}
	files := map[string][]document{}
	var out []Item[*unstructured.Unstructured]
	for i, res := range m.Resources() {
		// Through JSON, so that numbers are int64 or float64 as in any object client-go decodes
		// (kustomize's own maps hold int, which DeepCopy refuses).
		raw, err := res.MarshalJSON()
		if err != nil {
			return nil, err
		}
		u := &unstructured.Unstructured{}
		if err := u.UnmarshalJSON(raw); err != nil {
			return nil, err
		}
		src := Source{Path: dir + " (kustomize)", Doc: i + 1}
		if o, err := res.GetOrigin(); err == nil && o != nil && o.Path != "" {
			file := filepath.Join(wrapper, filepath.FromSlash(o.Path))
			if r, err := filepath.Rel(abs, file); err == nil {
				src = sourceIn(files, filepath.Join(dir, r), file, u)
			}
		}
		annotations := u.GetAnnotations()
		delete(annotations, originAnnotation)
		if len(annotations) == 0 {
			unstructured.RemoveNestedField(u.Object, "metadata", "annotations")
		} else {
			u.SetAnnotations(annotations)
		}
		out = append(out, Item[*unstructured.Unstructured]{Source: src, Object: u})
	}
	return out, nil
}

// sourceIn finds the document of file (named path in messages) that defines o's kind and name.
// docs caches each file's documents.
func sourceIn(docs map[string][]document, path, file string, o *unstructured.Unstructured) Source {
	src := Source{Path: path}
	if _, ok := docs[file]; !ok {
		data, err := os.ReadFile(file)
		if err == nil {
			docs[file], _ = splitDocuments(data)
		}
	}
	for _, d := range docs[file] {
		var head struct {
			Kind     string `json:"kind"`
			Metadata struct {
				Name string `json:"name"`
			} `json:"metadata"`
		}
		if yaml.Unmarshal(d.data, &head) == nil && head.Kind == o.GetKind() && head.Metadata.Name == o.GetName() {
			src.Doc, src.Line = d.n, d.line
			break
		}
	}
	return src
}
