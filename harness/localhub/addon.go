package localhub

import (
	"fmt"
	"io"
	"path/filepath"
	"time"

	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/tools"
)

// AddonCRDDirs hold what OCM's addon manager reads and writes: ClusterManagementAddOn,
// ManagedClusterAddOn, AddOnDeploymentConfig and AddOnTemplate (addon/v1alpha1, the version the
// manager of ocm v1.2.0 uses; the v1beta1 directory repeats the same CRDs with a second version
// that would need a conversion webhook) and ManifestWork (work/v1).
var AddonCRDDirs = []string{"addon/v1alpha1", "work/v1"}

// InstallAddonCRDs installs AddonCRDDirs from the open-cluster-management.io/api module's YAML.
func (h *Hub) InstallAddonCRDs() error {
	api, err := ModuleDir(ocmAPIModule)
	if err != nil {
		return err
	}
	var paths []string
	for _, d := range AddonCRDDirs {
		paths = append(paths, filepath.Join(api, d))
	}
	_, err = envtest.InstallCRDs(h.Config, envtest.CRDInstallOptions{Paths: paths, ErrorIfPathMissing: true})
	return err
}

// AddonManager is OCM's real addon manager (open-cluster-management.io/ocm cmd/addon, subcommand
// manager, built by `make tools`) running against the hub: for every ManagedClusterAddOn whose
// ClusterManagementAddOn names an AddOnTemplate it writes the agent's ManifestWork into the
// cluster's namespace and binds the template's hub permissions to the agent's identity; it creates
// ManagedClusterAddOns for the clusters an install-strategy Placement decides.
type AddonManager struct {
	p *proc.Process
}

// StartAddonManager runs the addon manager with the hub's admin kubeconfig, without leader
// election. Install the addon CRDs first (InstallAddonCRDs). Its logs go to out (nil: discarded).
func (h *Hub) StartAddonManager(out io.Writer) (*AddonManager, error) {
	bin, err := tools.Path(tools.AddonManager)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(h.dir, "addon-manager.kubeconfig")
	if err := h.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	port, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(proc.Spec{
		Name: "addon-manager",
		Path: bin,
		Args: []string{"manager", "--kubeconfig", kubeconfig, "--disable-leader-election",
			"--namespace", "open-cluster-management-hub", "--listen", fmt.Sprintf("127.0.0.1:%d", port)},
		Out: out,
	})
	if err != nil {
		return nil, err
	}
	return &AddonManager{p: p}, nil
}

// Exited reports whether the manager has ended, with its error.
func (m *AddonManager) Exited() (bool, error) { return m.p.Exited() }

// Stop terminates the manager and waits for it.
func (m *AddonManager) Stop() { m.p.Stop(10 * time.Second) }
