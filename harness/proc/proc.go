// Package proc runs the harness's child processes (servers, Knative components, functions) so that
// none outlives the process that started it: each child is in its own process group, is stopped
// with SIGTERM and then SIGKILL after a grace period, and is SIGKILLed by the kernel if its parent
// dies first, even by SIGKILL (Linux's parent-death signal).
package proc

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"
)

// Process is a running child.
type Process struct {
	Name string
	cmd  *exec.Cmd
	done chan struct{}
	err  error
	once sync.Once
}

// Spec says what to run.
type Spec struct {
	Name string   // for messages and the log file name
	Path string   // the binary
	Args []string // arguments after the binary
	Env  []string // the whole environment (nil: the parent's)
	// Out receives stdout and stderr (nil: discarded).
	Out io.Writer
}

// Start starts the child.
func Start(s Spec) (*Process, error) {
	cmd := exec.Command(s.Path, s.Args...)
	cmd.Env = s.Env
	if s.Out != nil {
		cmd.Stdout, cmd.Stderr = s.Out, s.Out
	}
	cmd.SysProcAttr = DieWithParent()
	if err := cmd.Start(); err != nil {
		return nil, fmt.Errorf("start %s (%s): %w", s.Name, s.Path, err)
	}
	p := &Process{Name: s.Name, cmd: cmd, done: make(chan struct{})}
	go func() { p.err = cmd.Wait(); close(p.done) }()
	return p, nil
}

// DieWithParent is the SysProcAttr every child gets: its own process group (a terminal's Ctrl-C
// reaches the parent, which stops children in order) and SIGKILL when the parent dies.
func DieWithParent() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// Pid is the child's process id.
func (p *Process) Pid() int { return p.cmd.Process.Pid }

// Done is closed when the child has exited.
func (p *Process) Done() <-chan struct{} { return p.done }

// Exited reports whether the child has exited, and how.
func (p *Process) Exited() (bool, error) {
	select {
	case <-p.done:
		return true, p.err
	default:
		return false, nil
	}
}

// Stop sends SIGTERM to the child's process group, waits up to grace, then SIGKILLs it, and waits
// for it to be reaped. Safe to call more than once.
func (p *Process) Stop(grace time.Duration) {
	p.once.Do(func() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGTERM)
		select {
		case <-p.done:
			return
		case <-time.After(grace):
		}
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
	})
}

// Kill SIGKILLs the child's process group and waits for it, as a crash would.
func (p *Process) Kill() {
	p.once.Do(func() {
		_ = syscall.Kill(-p.Pid(), syscall.SIGKILL)
		<-p.done
	})
}

// WaitPort waits until something accepts TCP connections on addr, failing early if the child exits.
func (p *Process) WaitPort(addr string, timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	for {
		if c, err := net.DialTimeout("tcp", addr, 200*time.Millisecond); err == nil {
			_ = c.Close()
			return nil
		}
		if exited, err := p.Exited(); exited {
			return fmt.Errorf("%s exited before listening on %s: %v", p.Name, addr, err)
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not listening on %s after %s", p.Name, addr, timeout)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// FreePort returns a TCP port that was free a moment ago, for a child to listen on. It is chosen
// below the kernel's ephemeral range: a port the kernel hands out (to another listener asking for
// port 0, or as the source port of an outgoing connection, which a busy test machine makes by the
// thousand) could be taken again between this check and the child's bind.
//
// A port is handed out at most once per process: a stack chooses the ports of all its children
// before any of them binds, so a port free at each check could otherwise go to two of them.
func FreePort() (int, error) {
	low := ephemeralLow()
	handedOut.Lock()
	defer handedOut.Unlock()
	for i := 0; i < 100; i++ {
		port := 10000 + rand.IntN(low-10000)
		if handedOut.ports[port] {
			continue
		}
		l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
		if err != nil {
			continue
		}
		_ = l.Close()
		handedOut.ports[port] = true
		return port, nil
	}
	return 0, errors.New("no free TCP port below the ephemeral range after 100 tries")
}

// HostIP is a non-loopback, non-link-local IPv4 address of this machine: where a child listens
// when a Kubernetes object must name its address (an Endpoints address may not be a loopback one).
func HostIP() (string, error) {
	addrs, err := net.InterfaceAddrs()
	if err != nil {
		return "", err
	}
	for _, a := range addrs {
		if n, ok := a.(*net.IPNet); ok && n.IP.To4() != nil && !n.IP.IsLoopback() && !n.IP.IsLinkLocalUnicast() {
			return n.IP.String(), nil
		}
	}
	return "", fmt.Errorf("no non-loopback IPv4 address among %v", addrs)
}

// handedOut is every port FreePort returned in this process.
var handedOut = struct {
	sync.Mutex
	ports map[int]bool
}{ports: map[int]bool{}}

// ephemeralLow is the first port of the kernel's ephemeral range (Linux default 32768).
func ephemeralLow() int {
	low := 32768
	if b, err := os.ReadFile("/proc/sys/net/ipv4/ip_local_port_range"); err == nil {
		if f := strings.Fields(string(b)); len(f) == 2 {
			if n, err := strconv.Atoi(f[0]); err == nil && n > 11000 {
				low = n
			}
		}
	}
	return low
}

// LogTail returns the last n lines of a log file, for an error message.
func LogTail(path string, n int) string {
	b, err := os.ReadFile(path)
	if err != nil {
		return ""
	}
	lines := strings.Split(strings.TrimRight(string(b), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

// PortFree reports an error naming the port when something already listens on it.
func PortFree(port int) error {
	l, err := net.Listen("tcp", fmt.Sprintf(":%d", port))
	if err != nil {
		return fmt.Errorf("port %d is taken (%v)", port, err)
	}
	return l.Close()
}

// Wrapper writes, into dir, an executable named like bin that runs bin with the parent-death
// signal set (util-linux setpriv). It is for children whose start we do not control, such as the
// etcd and kube-apiserver that envtest starts: the signal survives the exec, so the server dies
// with the process that started the wrapper.
func Wrapper(dir, bin string) (string, error) {
	setpriv, err := exec.LookPath("setpriv")
	if err != nil {
		return "", errors.New("setpriv (util-linux) is needed to tie servers to their parent's life: apt-get install util-linux")
	}
	path := filepath.Join(dir, filepath.Base(bin))
	script := fmt.Sprintf("#!/bin/sh\nexec %s --pdeathsig KILL -- %s \"$@\"\n", setpriv, bin)
	if err := os.WriteFile(path, []byte(script), 0o755); err != nil {
		return "", err
	}
	return path, nil
}

// Buffer collects a child process's output; safe to read while the child writes.
type Buffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *Buffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *Buffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}
