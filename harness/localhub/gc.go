package localhub

import (
	"context"
	"crypto/tls"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/tools"
)

// GarbageCollector is Kubernetes' garbage collector: the real kube-controller-manager (built by
// `make tools` from kube-apiserver's module) running only that controller against the hub. The
// local hub has no controller manager otherwise, so without it an object whose owner is deleted
// stays, as the ManifestWork of a disabled OCM addon would.
type GarbageCollector struct {
	p *proc.Process
}

// StartGarbageCollector runs kube-controller-manager --controllers=garbagecollector with the hub's
// admin kubeconfig and returns once it collects: an object owned by a deleted one is gone. The
// garbage collector watches the resources the API serves when it starts and rediscovers them every
// 30 seconds, so install CRDs whose objects it should collect first. Its logs go to out (nil:
// discarded).
func (h *Hub) StartGarbageCollector(ctx context.Context, out io.Writer) (*GarbageCollector, error) {
	bin, err := tools.Path(tools.KubeControllerManager)
	if err != nil {
		return nil, err
	}
	dir := filepath.Join(h.dir, "kube-controller-manager")
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(dir, "kubeconfig")
	if err := h.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	// Only the hub: no in-cluster configuration (authentication delegation falls back to one when
	// it has no kubeconfig) may point it at a cluster this process happens to run in.
	var env []string
	for _, e := range os.Environ() {
		if !strings.HasPrefix(e, "KUBERNETES_SERVICE_") {
			env = append(env, e)
		}
	}
	p, err := proc.Start(proc.Spec{
		Name: "kube-controller-manager",
		Path: bin,
		Args: []string{
			"--kubeconfig=" + kubeconfig,
			"--controllers=garbagecollector",
			"--leader-elect=false",
			"--use-service-account-credentials=false",
			// Serving only for /healthz, which it allows without credentials; a self-signed
			// certificate in the hub's directory.
			"--bind-address=127.0.0.1",
			fmt.Sprintf("--secure-port=%d", port),
			"--cert-dir=" + dir,
		},
		Env: env,
		Out: out,
	})
	if err != nil {
		return nil, err
	}
	gc := &GarbageCollector{p: p}
	if err := gc.waitHealthy(ctx, fmt.Sprintf("https://127.0.0.1:%d/healthz", port), time.Minute); err != nil {
		gc.Stop()
		return nil, err
	}
	if err := h.probeGarbageCollection(ctx, gc, time.Minute); err != nil {
		gc.Stop()
		return nil, err
	}
	return gc, nil
}

func (gc *GarbageCollector) waitHealthy(ctx context.Context, url string, timeout time.Duration) error {
	// Its serving certificate is self-signed and only this probe reads it.
	client := &http.Client{Timeout: 2 * time.Second, Transport: &http.Transport{TLSClientConfig: &tls.Config{InsecureSkipVerify: true}}}
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		resp, err := client.Get(url)
		if err == nil {
			body, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
			last = fmt.Sprintf("%s: %s", resp.Status, body)
		} else {
			last = err.Error()
		}
		if exited, err := gc.p.Exited(); exited {
			return fmt.Errorf("kube-controller-manager exited before it was healthy: %v", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("kube-controller-manager not healthy after %s (last: %s)", timeout, last)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// probeGarbageCollection deletes a ConfigMap that owns another and waits for the other to go. The
// garbage collector starts collecting only once it has listed every resource it watches, so this
// also says it knows the CRDs installed before it started.
func (h *Hub) probeGarbageCollection(ctx context.Context, gc *GarbageCollector, timeout time.Duration) error {
	const ns = "default"
	cms := h.Kube.CoreV1().ConfigMaps(ns)
	owner, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{GenerateName: "gc-probe-owner-"}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("garbage collector probe: %w", err)
	}
	dep, err := cms.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
		GenerateName:    "gc-probe-dependent-",
		OwnerReferences: []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID}},
	}}, metav1.CreateOptions{})
	if err != nil {
		return fmt.Errorf("garbage collector probe: %w", err)
	}
	if err := cms.Delete(ctx, owner.Name, metav1.DeleteOptions{}); err != nil {
		return fmt.Errorf("garbage collector probe: %w", err)
	}
	deadline := time.Now().Add(timeout)
	for {
		_, err := cms.Get(ctx, dep.Name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			return nil
		}
		if exited, err := gc.p.Exited(); exited {
			return fmt.Errorf("kube-controller-manager exited: %v", err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("garbage collector: ConfigMap %s/%s still there %s after its owner was deleted (%v)", ns, dep.Name, timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// Exited reports whether the controller manager has ended, with its error.
func (gc *GarbageCollector) Exited() (bool, error) { return gc.p.Exited() }

// Pid is the controller manager's process id.
func (gc *GarbageCollector) Pid() int { return gc.p.Pid() }

// Stop terminates the controller manager and waits for it.
func (gc *GarbageCollector) Stop() { gc.p.Stop(10 * time.Second) }
