package promlocal

import (
	"os/exec"
	"syscall"
)

// DieWithParent kills the child if the test binary dies first (a test timeout's panic, say), so no
// Prometheus outlives its test on a shared machine.
func DieWithParent(cmd *exec.Cmd) {
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}
