package localhub

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"github.com/scoreflow/scoreflow/tools"
)

// PolicyPropagator is the real governance policy propagator
// (open-cluster-management.io/governance-policy-propagator, built by `make tools`) running against
// the hub: it replicates each Policy bound by a PlacementBinding to a Placement into the namespace
// of every cluster the Placement decides, and rolls the replicas' compliance up into the root
// Policy's status. Install its CRDs first (InstallWorkloadCRDs).
type PolicyPropagator struct {
	cmd      *exec.Cmd
	done     chan error
	stopOnce sync.Once
}

// StartPolicyPropagator runs the propagator cluster-wide with the hub's admin kubeconfig, without
// leader election, webhooks or PlacementRule watches. Its logs go to out (nil: discarded).
func (h *Hub) StartPolicyPropagator(out io.Writer) (*PolicyPropagator, error) {
	bin, err := tools.Path(tools.GovernancePolicyPropagator)
	if err != nil {
		return nil, err
	}
	kubeconfig := filepath.Join(h.dir, "propagator.kubeconfig")
	if err := h.WriteKubeconfig(kubeconfig); err != nil {
		return nil, err
	}
	metrics, err := freeAddress()
	if err != nil {
		return nil, err
	}
	probes, err := freeAddress()
	if err != nil {
		return nil, err
	}
	if out == nil {
		out = io.Discard
	}
	cmd := exec.Command(bin, "--kubeconfig", kubeconfig, "--leader-elect=false", "--enable-webhooks=false",
		"--disable-placementrule", "--metrics-bind-address", metrics, "--health-probe-bind-address", probes)
	// WATCH_NAMESPACE empty: every namespace (the propagator refuses to start without the variable).
	cmd.Env = append(os.Environ(), "WATCH_NAMESPACE=")
	cmd.Stdout, cmd.Stderr = out, out
	cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start governance policy propagator: %w", err)
	}
	pp := &PolicyPropagator{cmd: cmd, done: make(chan error, 1)}
	go func() { pp.done <- cmd.Wait() }()
	return pp, nil
}

// Exited reports whether the process has ended, with its error.
func (pp *PolicyPropagator) Exited() (bool, error) {
	select {
	case err := <-pp.done:
		pp.done <- err
		return true, err
	default:
		return false, nil
	}
}

// Stop terminates the propagator and waits for it. Safe to call twice.
func (pp *PolicyPropagator) Stop() error {
	pp.stopOnce.Do(func() {
		_ = syscall.Kill(-pp.cmd.Process.Pid, syscall.SIGTERM)
		select {
		case <-pp.done:
		case <-time.After(10 * time.Second):
			_ = syscall.Kill(-pp.cmd.Process.Pid, syscall.SIGKILL)
			<-pp.done
		}
	})
	return nil
}
