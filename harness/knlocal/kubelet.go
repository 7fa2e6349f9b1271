package knlocal

import (
	"context"
	"crypto/sha256"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"strings"
	"sync"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/proc"
)

// runnable are the Knative binaries the kubelet runs for Deployments that Knative's controllers
// create or scale at run time, by the last element of the container image.
var runnable = map[string]bool{"mtping": true, "apiserver_receive_adapter": true}

// kubelet runs a local process for each Deployment of a runnable image with replicas > 0, with the
// container's environment as the Deployment says it (the PingSource controller rewrites the
// adapter's environment; the ApiServerSource controller creates one Deployment per source), and
// writes the Deployment status a kubelet would. A user namespace's adapter runs as the pod's
// ServiceAccount (a TokenRequest token), so it has exactly the RBAC the manifests grant it.
type kubelet struct {
	k       *Knative
	mu      sync.Mutex
	running map[string]*pod // namespace/name
}

type pod struct {
	p    *proc.Process
	hash string
}

func startKubelet(ctx context.Context, k *Knative) (*kubelet, error) {
	kl := &kubelet{k: k, running: map[string]*pod{}}
	f := informers.NewSharedInformerFactory(k.kube, 10*time.Minute)
	inf := f.Apps().V1().Deployments().Informer()
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(o any) { kl.sync(ctx, o.(*appsv1.Deployment)) },
		UpdateFunc: func(_, o any) { kl.sync(ctx, o.(*appsv1.Deployment)) },
		DeleteFunc: func(o any) {
			if d, ok := o.(*appsv1.Deployment); ok {
				kl.stop(d.Namespace + "/" + d.Name)
			} else if t, ok := o.(cache.DeletedFinalStateUnknown); ok {
				kl.stop(t.Key)
			}
		},
	})
	if err != nil {
		return nil, err
	}
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	return kl, nil
}

func (kl *kubelet) sync(ctx context.Context, d *appsv1.Deployment) {
	key := d.Namespace + "/" + d.Name
	containers := d.Spec.Template.Spec.Containers
	if len(containers) == 0 || !runnable[path.Base(containers[0].Image)] {
		return
	}
	if d.Spec.Replicas != nil && *d.Spec.Replicas == 0 {
		kl.stop(key)
		return
	}
	env, err := kl.env(ctx, d)
	if err != nil {
		kl.k.log.Error("kubelet: cannot run deployment", "deployment", key, "error", err)
		return
	}
	hash := fmt.Sprintf("%x", sha256.Sum256([]byte(strings.Join(env, "\x00"))))
	kl.mu.Lock()
	cur := kl.running[key]
	kl.mu.Unlock()
	if cur != nil {
		if exited, _ := cur.p.Exited(); cur.hash == hash && !exited {
			kl.markAvailable(ctx, d)
			return
		}
		kl.stop(key)
	}
	// Every process needs its own pprof port; it is not part of what decides a restart.
	profiling, err := proc.FreePort()
	if err != nil {
		return
	}
	env = kl.k.Env(append(env, fmt.Sprintf("PROFILING_PORT=%d", profiling))...)
	binary := path.Base(containers[0].Image)
	name := strings.ReplaceAll(key, "/", "_")
	out, err := os.Create(filepath.Join(kl.k.LogDir, name+".log"))
	if err != nil {
		kl.k.log.Error("kubelet: log file", "error", err)
		return
	}
	p, err := proc.Start(proc.Spec{Name: key, Path: filepath.Join(kl.k.binDir, binary), Env: env, Out: out})
	if err != nil {
		kl.k.log.Error("kubelet: start", "deployment", key, "error", err)
		return
	}
	kl.mu.Lock()
	kl.running[key] = &pod{p: p, hash: hash}
	kl.mu.Unlock()
	kl.k.log.Info("kubelet: started", "deployment", key, "binary", binary, "pid", p.Pid())
	kl.markAvailable(ctx, d)
}

func (kl *kubelet) markAvailable(ctx context.Context, d *appsv1.Deployment) {
	if d.Status.AvailableReplicas == ptr.Deref(d.Spec.Replicas, 1) && d.Status.ObservedGeneration >= d.Generation {
		return
	}
	if err := kl.k.markAvailable(ctx, d.Namespace, d.Name, ptr.Deref(d.Spec.Replicas, 1)); err != nil {
		kl.k.log.Error("kubelet: deployment status", "deployment", d.Namespace+"/"+d.Name, "error", err)
	}
}

// env is the process environment: Knative's common settings, then the container's own variables,
// resolved the way a kubelet resolves them.
func (kl *kubelet) env(ctx context.Context, d *appsv1.Deployment) ([]string, error) {
	podName := d.Name + "-local-0"
	kubeconfig, err := kl.identity(ctx, d)
	if err != nil {
		return nil, err
	}
	env := []string{
		"KUBECONFIG=" + kubeconfig, "SYSTEM_NAMESPACE=" + SystemNamespace, "CLUSTER_DOMAIN=" + ClusterDomain,
		"CONFIG_LOGGING_NAME=config-logging", "CONFIG_OBSERVABILITY_NAME=config-observability",
		"METRICS_DOMAIN=knative.dev/eventing", "POD_NAME=" + podName,
	}
	for _, e := range d.Spec.Template.Spec.Containers[0].Env {
		v := e.Value
		if e.ValueFrom != nil {
			switch {
			case e.ValueFrom.FieldRef != nil:
				v = map[string]string{"metadata.name": podName, "metadata.namespace": d.Namespace}[e.ValueFrom.FieldRef.FieldPath]
			case e.ValueFrom.ConfigMapKeyRef != nil:
				cm, err := kl.k.kube.CoreV1().ConfigMaps(d.Namespace).Get(ctx, e.ValueFrom.ConfigMapKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				v = cm.Data[e.ValueFrom.ConfigMapKeyRef.Key]
			case e.ValueFrom.SecretKeyRef != nil:
				s, err := kl.k.kube.CoreV1().Secrets(d.Namespace).Get(ctx, e.ValueFrom.SecretKeyRef.Name, metav1.GetOptions{})
				if err != nil {
					return nil, err
				}
				v = string(s.Data[e.ValueFrom.SecretKeyRef.Key])
			}
		}
		env = append(env, e.Name+"="+v)
	}
	return env, nil
}

// identity returns a kubeconfig for the pod: Knative's own adapter runs as the hub admin (the
// harness does not install Knative's RBAC); a source in a user namespace runs as its
// ServiceAccount.
func (kl *kubelet) identity(ctx context.Context, d *appsv1.Deployment) (string, error) {
	sa := d.Spec.Template.Spec.ServiceAccountName
	if d.Namespace == SystemNamespace || sa == "" {
		return kl.k.hub.KubeconfigPath(), nil
	}
	return kl.k.ServiceAccountKubeconfig(ctx, d.Namespace, sa)
}

// ServiceAccountKubeconfig writes (once) a kubeconfig that authenticates as the ServiceAccount
// namespace/name with a TokenRequest token, as a pod of that account would.
func (k *Knative) ServiceAccountKubeconfig(ctx context.Context, namespace, name string) (string, error) {
	path := filepath.Join(k.state, "kubeconfig-"+namespace+"-"+name)
	if _, err := os.Stat(path); err == nil {
		return path, nil
	}
	tr, err := k.kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{
		Spec: authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(24 * 3600))},
	}, metav1.CreateOptions{})
	if err != nil {
		return "", fmt.Errorf("token for ServiceAccount %s/%s: %w", namespace, name, err)
	}
	cfg := rest.AnonymousClientConfig(k.restConfig())
	cfg.BearerToken = tr.Status.Token
	if err := localhub.WriteKubeconfig(cfg, path); err != nil {
		return "", err
	}
	return path, nil
}

func (kl *kubelet) stop(key string) {
	kl.mu.Lock()
	cur := kl.running[key]
	delete(kl.running, key)
	kl.mu.Unlock()
	if cur != nil {
		cur.p.Stop(2 * time.Second)
	}
}

func (kl *kubelet) stopAll() {
	kl.mu.Lock()
	keys := make([]string, 0, len(kl.running))
	for k := range kl.running {
		keys = append(keys, k)
	}
	kl.mu.Unlock()
	var wg sync.WaitGroup
	for _, k := range keys {
		wg.Add(1)
		go func() { defer wg.Done(); kl.stop(k) }()
	}
	wg.Wait()
}

func (kl *kubelet) pids() []int {
	kl.mu.Lock()
	defer kl.mu.Unlock()
	var out []int
	for _, p := range kl.running {
		out = append(out, p.p.Pid())
	}
	return out
}
