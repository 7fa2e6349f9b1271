//go:build !linux

package promlocal

import "os/exec"

// DieWithParent is a no-op where the kernel cannot kill a child with its parent.
func DieWithParent(*exec.Cmd) {}
