package promserver

import (
	"fmt"
	"runtime"
	"strings"
	"testing"
)

type fatalTB struct {
	testing.TB
	msg string
}

func (f *fatalTB) Fatal(args ...any) { f.msg = fmt.Sprint(args...); runtime.Goexit() }
func (f *fatalTB) Helper()           {}

// Without the binary, Start fails (never skips) with the message that says how to build it.
func TestStartWithoutBinary(t *testing.T) {
	t.Setenv("SCOREFLOW_CACHE", t.TempDir())
	f := &fatalTB{TB: t}
	done := make(chan struct{})
	go func() { defer close(done); Start(f) }()
	<-done
	if !strings.Contains(f.msg, "make tools") {
		t.Errorf("Start failed with %q, want the tools message", f.msg)
	}
}
