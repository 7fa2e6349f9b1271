package localhub

import (
	"encoding/json"
	"fmt"
	"os/exec"
	"path/filepath"

	"sigs.k8s.io/controller-runtime/pkg/envtest"
)

// GovernancePolicyModule is the governance policy framework's hub module, pinned: its CRDs
// (Policy, PlacementBinding, PolicySet) are installed from its own YAML, as a hub with the
// framework has them, and tools/governance-policy-propagator builds its propagator.
const (
	GovernancePolicyModule  = "open-cluster-management.io/governance-policy-propagator"
	GovernancePolicyVersion = "v0.16.0"
)

// downloadModule returns the directory of module@version, downloading it when needed.
func downloadModule(module, version string) (string, error) {
	out, err := exec.Command("go", "mod", "download", "-json", module+"@"+version).Output()
	if err != nil {
		if ee, ok := err.(*exec.ExitError); ok {
			return "", fmt.Errorf("go mod download %s@%s: %v: %s", module, version, err, ee.Stderr)
		}
		return "", err
	}
	var info struct{ Dir, Error string }
	if err := json.Unmarshal(out, &info); err != nil {
		return "", err
	}
	if info.Dir == "" {
		return "", fmt.Errorf("go mod download %s@%s: %s", module, version, info.Error)
	}
	return info.Dir, nil
}

// InstallWorkloadCRDs installs what the optimizer reads and writes beyond the cluster API: OCM's
// ManifestWorkReplicaSet (work/v1alpha1) and the governance policy framework's Policy,
// PlacementBinding, PolicySet and PolicyAutomation (the propagator watches all four).
func (h *Hub) InstallWorkloadCRDs() error {
	api, err := ModuleDir(ocmAPIModule)
	if err != nil {
		return err
	}
	gov, err := downloadModule(GovernancePolicyModule, GovernancePolicyVersion)
	if err != nil {
		return err
	}
	crds := filepath.Join(gov, "deploy", "crds")
	_, err = envtest.InstallCRDs(h.Config, envtest.CRDInstallOptions{
		Paths: []string{
			filepath.Join(api, "work", "v1alpha1"),
			filepath.Join(crds, "policy.open-cluster-management.io_policies.yaml"),
			filepath.Join(crds, "policy.open-cluster-management.io_placementbindings.yaml"),
			filepath.Join(crds, "policy.open-cluster-management.io_policysets.yaml"),
			filepath.Join(crds, "policy.open-cluster-management.io_policyautomations.yaml"),
		},
		ErrorIfPathMissing: true,
	})
	return err
}
