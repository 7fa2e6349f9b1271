// Package localhub runs a real OCM hub API on this machine: etcd and kube-apiserver (built by
// `make tools`) through controller-runtime's envtest, with the OCM CRDs installed from the
// open-cluster-management.io/api module's own YAML. Tests and `scoreflow run` use it.
package localhub

import (
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime/debug"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	ctrllog "sigs.k8s.io/controller-runtime/pkg/log"

	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/tools"
)

// Hub is a running local hub.
type Hub struct {
	Env     *envtest.Environment
	Config  *rest.Config
	Kube    kubernetes.Interface
	Cluster clusterclient.Interface
	dir     string

	kubeconfigOnce sync.Once
	kubeconfigErr  error
}

// ocmAPIModule is the Go module whose CRD YAML files the hub installs.
const ocmAPIModule = "open-cluster-management.io/api"

// CRDDirs are the OCM API directories holding the CRDs scoreflow needs: ManagedCluster,
// AddOnPlacementScore, Placement and PlacementDecision, ManagedClusterSet(Binding).
var CRDDirs = []string{"cluster/v1", "cluster/v1alpha1", "cluster/v1beta1", "cluster/v1beta2"}

// ModuleDir returns the directory of a module this binary was built with, downloading it when
// needed. It asks the go command for the exact version in the build info, so it works from any
// directory (scoreflow run --root elsewhere), not only inside the repository.
func ModuleDir(module string) (string, error) {
	query := module
	if bi, ok := debug.ReadBuildInfo(); ok {
		for _, d := range bi.Deps {
			if d.Path == module {
				query = module + "@" + d.Version
				if d.Replace != nil {
					query = d.Replace.Path + "@" + d.Replace.Version
				}
			}
		}
	}
	out, err := exec.Command("go", "mod", "download", "-json", query).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("go mod download %s: %v: %s", module, err, ee.Stderr)
		}
		return "", fmt.Errorf("go mod download %s: %w", module, err)
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", err
	}
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download %s: %s", module, info.Error)
	}
	return info.Dir, nil
}

// Start starts etcd and kube-apiserver and installs the OCM CRDs. Stop it when done.
func Start() (*Hub, error) {
	if _, err := tools.Path(tools.KubeAPIServer); err != nil {
		return nil, err
	}
	if _, err := tools.Path(tools.Etcd); err != nil {
		return nil, err
	}
	mod, err := ModuleDir(ocmAPIModule)
	if err != nil {
		return nil, err
	}
	var crdDirs []string
	for _, d := range CRDDirs {
		crdDirs = append(crdDirs, filepath.Join(mod, d))
	}
	dir, err := os.MkdirTemp("", "scoreflow-hub-")
	if err != nil {
		return nil, err
	}
	// envtest starts etcd and kube-apiserver in their own process groups with nothing tying them to
	// us; wrappers that set the parent-death signal make them die with the test or `scoreflow run`
	// that started them, however it ends.
	wrappers := filepath.Join(dir, "bin")
	if err := os.MkdirAll(wrappers, 0o755); err != nil {
		return nil, err
	}
	for _, name := range []string{tools.Etcd, tools.KubeAPIServer} {
		bin, _ := tools.Path(name)
		if _, err := proc.Wrapper(wrappers, bin); err != nil {
			_ = os.RemoveAll(dir)
			return nil, err
		}
	}
	// envtest logs through controller-runtime's logger, which prints a warning with a stack trace
	// into every test's output unless one is set.
	ctrllog.SetLogger(logr.Discard())
	env := &envtest.Environment{
		BinaryAssetsDirectory: wrappers,
		CRDDirectoryPaths:     crdDirs,
		ErrorIfCRDPathMissing: true,
	}
	// envtest gives etcd and kube-apiserver 20 s to start, which a loaded CI machine overruns;
	// KUBEBUILDER_CONTROLPLANE_START_TIMEOUT still overrides this.
	if os.Getenv("KUBEBUILDER_CONTROLPLANE_START_TIMEOUT") == "" {
		env.ControlPlaneStartTimeout = 2 * time.Minute
	}
	// A fixed certificate directory keeps the serving certificate across an API server restart,
	// so clients keep working when a test stops and starts it.
	env.ControlPlane.GetAPIServer().CertDir = filepath.Join(dir, "apiserver")
	if err := os.MkdirAll(env.ControlPlane.GetAPIServer().CertDir, 0o700); err != nil {
		return nil, err
	}
	cfg, err := env.Start()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, fmt.Errorf("starting the local hub: %w", err)
	}
	h := &Hub{Env: env, Config: cfg, dir: dir}
	h.Kube = kubernetes.NewForConfigOrDie(cfg)
	h.Cluster = clusterclient.NewForConfigOrDie(cfg)
	return h, nil
}

// Stop stops the hub and removes its files.
func (h *Hub) Stop() error {
	err := h.Env.Stop()
	_ = os.RemoveAll(h.dir)
	return err
}

// CrashAPIServer kills kube-apiserver with SIGKILL, as a crash or a lost node would; etcd keeps
// the data. (A graceful SIGTERM stop waits for in-flight requests and can take a minute under load.)
// StartAPIServer brings it back on the same address with the same certificates.
func (h *Hub) CrashAPIServer() error {
	certDir := h.Env.ControlPlane.GetAPIServer().CertDir
	pid, err := findProcess(tools.KubeAPIServer, "--cert-dir="+certDir)
	if err != nil {
		return err
	}
	if err := syscall.Kill(pid, syscall.SIGKILL); err != nil {
		return fmt.Errorf("kill kube-apiserver %d: %w", pid, err)
	}
	// envtest's own goroutine reaps the process; wait until it is gone.
	for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		if _, err := os.Stat(fmt.Sprintf("/proc/%d", pid)); os.IsNotExist(err) {
			return nil
		}
	}
	return fmt.Errorf("kube-apiserver %d still present 10s after SIGKILL", pid)
}

// StartAPIServer restarts a kube-apiserver stopped by CrashAPIServer.
func (h *Hub) StartAPIServer() error { return h.Env.ControlPlane.GetAPIServer().Start() }

// findProcess returns the pid of the process running binary name with arg among its arguments.
func findProcess(name, arg string) (int, error) {
	entries, err := os.ReadDir("/proc")
	if err != nil {
		return 0, err
	}
	for _, e := range entries {
		pid, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		raw, err := os.ReadFile(filepath.Join("/proc", e.Name(), "cmdline"))
		if err != nil || len(raw) == 0 {
			continue
		}
		args := strings.Split(strings.TrimRight(string(raw), "\x00"), "\x00")
		if filepath.Base(args[0]) != name {
			continue
		}
		for _, a := range args[1:] {
			if a == arg {
				return pid, nil
			}
		}
	}
	return 0, fmt.Errorf("no %s process with %s", name, arg)
}

// AddCluster registers a managed cluster as the hub sees one: a ManagedCluster (with labels, e.g.
// the cluster-set label) and the namespace of the same name.
func (h *Hub) AddCluster(ctx context.Context, name string, labels map[string]string) error {
	_, err := h.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	mc := &clusterv1.ManagedCluster{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: labels},
		Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: true},
	}
	_, err = h.Cluster.ClusterV1().ManagedClusters().Create(ctx, mc, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	return nil
}

// KubeconfigPath is an admin kubeconfig of the hub, written once, for child processes.
func (h *Hub) KubeconfigPath() string {
	path := filepath.Join(h.dir, "admin.kubeconfig")
	h.kubeconfigOnce.Do(func() { h.kubeconfigErr = h.WriteKubeconfig(path) })
	if h.kubeconfigErr != nil {
		panic(fmt.Sprintf("writing %s: %v", path, h.kubeconfigErr))
	}
	return path
}

// AcceptCluster marks a ManagedCluster accepted as the hub's registration controller does once an
// administrator accepts it (spec.hubAcceptsClient, which AddCluster sets, and the condition
// HubAcceptedManagedCluster True): the score-writer writes only for accepted clusters.
func (h *Hub) AcceptCluster(ctx context.Context, name string) error {
	mc, err := h.Cluster.ClusterV1().ManagedClusters().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{Type: clusterv1.ManagedClusterConditionHubAccepted, Status: metav1.ConditionTrue,
		Reason: "HubClusterAdminAccepted", Message: "set by scoreflow's local hub"})
	_, err = h.Cluster.ClusterV1().ManagedClusters().UpdateStatus(ctx, mc, metav1.UpdateOptions{})
	return err
}

// WriteKubeconfig writes an admin kubeconfig for the hub to path (kubectl --kubeconfig path ...).
func (h *Hub) WriteKubeconfig(path string) error {
	return WriteKubeconfig(h.Config, path)
}

// WriteKubeconfig writes cfg as a kubeconfig file.
func WriteKubeconfig(cfg *rest.Config, path string) error {
	kc := clientcmdapi.NewConfig()
	kc.Clusters["scoreflow-hub"] = &clientcmdapi.Cluster{Server: cfg.Host, CertificateAuthorityData: cfg.CAData}
	kc.AuthInfos["scoreflow-admin"] = &clientcmdapi.AuthInfo{ClientCertificateData: cfg.CertData, ClientKeyData: cfg.KeyData, Token: cfg.BearerToken}
	kc.Contexts["scoreflow"] = &clientcmdapi.Context{Cluster: "scoreflow-hub", AuthInfo: "scoreflow-admin", Namespace: "default"}
	kc.CurrentContext = "scoreflow"
	return clientcmd.WriteToFile(*kc, path)
}

// WaitForAPI polls the hub until it answers or timeout passes.
func (h *Hub) WaitForAPI(ctx context.Context, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		_, err := h.Kube.Discovery().ServerVersion()
		if err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("hub not answering after %s: %w", timeout, err)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// MarkAvailable sets the status conditions the hub's registration controller sets for a cluster
// whose agent has joined and keeps its lease: accepted, joined, available. (A local hub has no
// agents, so without this every cluster looks unreachable.)
func (h *Hub) MarkAvailable(ctx context.Context, name string) error {
	mc, err := h.Cluster.ClusterV1().ManagedClusters().Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		return err
	}
	for _, t := range []string{clusterv1.ManagedClusterConditionHubAccepted, clusterv1.ManagedClusterConditionJoined, clusterv1.ManagedClusterConditionAvailable} {
		meta.SetStatusCondition(&mc.Status.Conditions, metav1.Condition{Type: t, Status: metav1.ConditionTrue, Reason: "LocalHub", Message: "set by scoreflow's local hub"})
	}
	_, err = h.Cluster.ClusterV1().ManagedClusters().UpdateStatus(ctx, mc, metav1.UpdateOptions{})
	return err
}
