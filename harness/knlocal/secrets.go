package knlocal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
)

// WorkloadSecretMounts are the Secrets the hub's copy of a workload (kind ServiceKind or
// DeploymentKind) mounts into its first container, by mount path: what Knative added to it (a
// SinkBinding with sender identity on mounts its token Secret at /oidc), which a local process of
// that workload needs as files.
func (k *Knative) WorkloadSecretMounts(ctx context.Context, kind schema.GroupVersionKind, namespace, name string) (map[string]string, error) {
	svc, err := k.workload(ctx, kind, namespace, name)
	if err != nil {
		return nil, err
	}
	vols, _, _ := unstructured.NestedSlice(svc.Object, "spec", "template", "spec", "volumes")
	secrets := map[string]string{} // volume -> Secret
	for _, v := range vols {
		m, _ := v.(map[string]any)
		vol, _ := m["name"].(string)
		if s, ok, _ := unstructured.NestedString(m, "secret", "secretName"); ok {
			secrets[vol] = s
		}
		sources, _, _ := unstructured.NestedSlice(m, "projected", "sources")
		for _, src := range sources {
			if s, ok, _ := unstructured.NestedString(src.(map[string]any), "secret", "name"); ok {
				secrets[vol] = s
			}
		}
	}
	out := map[string]string{}
	containers, _, _ := unstructured.NestedSlice(svc.Object, "spec", "template", "spec", "containers")
	if len(containers) == 0 {
		return out, nil
	}
	mounts, _, _ := unstructured.NestedSlice(containers[0].(map[string]any), "volumeMounts")
	for _, mt := range mounts {
		m, _ := mt.(map[string]any)
		vol, _ := m["name"].(string)
		path, _ := m["mountPath"].(string)
		if s, ok := secrets[vol]; ok {
			out[path] = s
		}
	}
	return out, nil
}

// MountSecret keeps dir holding one file per key of the Secret namespace/name, as a kubelet keeps
// a secret volume: it returns once the Secret exists and is written (or after timeout), and
// rewrites the files whenever the Secret changes (Knative renews a SinkBinding's token in place)
// until ctx ends. Each file is replaced by a rename, so a reader never sees half a token.
func (k *Knative) MountSecret(ctx context.Context, namespace, name, dir string, timeout time.Duration) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	written := make(chan struct{})
	var once sync.Once
	write := func(o any) {
		s, ok := o.(*corev1.Secret)
		if !ok {
			return
		}
		for key, v := range s.Data {
			if err := writeAtomic(filepath.Join(dir, key), v); err != nil {
				k.log.Error("secret mount", "secret", namespace+"/"+name, "err", err)
				return
			}
		}
		once.Do(func() { close(written) })
	}
	f := informers.NewSharedInformerFactoryWithOptions(k.kube, 10*time.Minute, informers.WithNamespace(namespace),
		informers.WithTweakListOptions(func(o *metav1.ListOptions) {
			o.FieldSelector = fields.OneTermEqualSelector("metadata.name", name).String()
		}))
	inf := f.Core().V1().Secrets().Informer()
	if _, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: write, UpdateFunc: func(_, o any) { write(o) },
	}); err != nil {
		return err
	}
	f.Start(ctx.Done())
	select {
	case <-written:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(timeout):
		return fmt.Errorf("Secret %s/%s did not appear within %s", namespace, name, timeout)
	}
}

func writeAtomic(path string, data []byte) error {
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, data, 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

// ProjectToken keeps path holding a token of ServiceAccount namespace/name for audience (empty:
// the API server's own), as a kubelet keeps a projected serviceAccountToken volume: it returns once
// the first token is written, and writes a new one when 80% of the last one's lifetime has passed
// (the kubelet's rule) until ctx ends. Each write is a rename, so a reader never sees half a
// token.
func (k *Knative) ProjectToken(ctx context.Context, namespace, name, audience string, ttl time.Duration, path string) error {
	if err := os.MkdirAll(filepath.Dir(path), 0o700); err != nil {
		return err
	}
	mint := func() (time.Duration, error) {
		spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(ttl / time.Second))}
		if audience != "" {
			spec.Audiences = []string{audience}
		}
		tr, err := k.kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
		if err != nil {
			return 0, fmt.Errorf("token of ServiceAccount %s/%s for %q: %w", namespace, name, audience, err)
		}
		if err := writeAtomic(path, []byte(tr.Status.Token)); err != nil {
			return 0, err
		}
		return time.Until(tr.Status.ExpirationTimestamp.Time) * 8 / 10, nil
	}
	next, err := mint()
	if err != nil {
		return err
	}
	go func() {
		for {
			select {
			case <-ctx.Done():
				return
			case <-time.After(next):
			}
			var err error
			if next, err = mint(); err != nil {
				k.log.Error("projected token", "serviceAccount", namespace+"/"+name, "audience", audience, "err", err)
				next = 10 * time.Second
			}
		}
	}()
	return nil
}
