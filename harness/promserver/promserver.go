// Package promserver runs a real Prometheus server on this machine and feeds it exact series: for
// tests (Start, stopped by the test's cleanup, and a scorer's Client of it) and for `scoreflow
// run`'s demo data (Run).
//
// The server is the binary `make tools` builds (tools.Path(tools.Prometheus)); a missing binary
// fails the test with the message that says how to build it. Samples are pushed through the
// remote-write receiver (POST /api/v1/write: a snappy-compressed protobuf WriteRequest, protocol
// 1.0). The protobuf is written with google.golang.org/protobuf's protowire and compressed with
// klauspost/compress/snappy, both already in the module graph: importing prompb would pull the
// whole prometheus/prometheus module into the project's go.mod for four small messages.
package promserver

import (
	"bytes"
	"context"
	"fmt"
	"math"
	"net"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/klauspost/compress/snappy"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/tools"
)

// Server is a running Prometheus.
type Server struct {
	// URL is the base URL of its HTTP API.
	URL string

	dir  string
	cmd  *exec.Cmd
	out  *proc.Buffer
	done chan struct{}
	once sync.Once
}

// config is the smallest configuration: no scrape targets, so the only data is what tests push.
const config = "global:\n  scrape_interval: 1h\n"

// Run runs Prometheus (built by `make tools`) on a free port with an empty TSDB in a temporary
// directory and waits until it is ready. Stop it when done. flags are added to its command line
// (say, "--query.max-samples=10" to make it refuse large queries as a loaded server would).
func Run(flags ...string) (*Server, error) { return RunConfig(config, flags...) }

// RunConfig is Run with cfg as prometheus.yml instead of the empty configuration: for tests that
// make it scrape running functions (scrape_configs) or evaluate rule files (rule_files, by
// absolute path).
func RunConfig(cfg string, flags ...string) (*Server, error) {
	return RunTool(tools.Prometheus, cfg, flags...)
}

// RunTool is RunConfig with another Prometheus build of `make tools` (tools.PrometheusKubernetesSD).
func RunTool(tool, cfg string, flags ...string) (*Server, error) {
	bin, err := tools.Path(tool)
	if err != nil {
		return nil, err
	}
	var lastErr error
	// A port found free can be taken before Prometheus binds it: try a few.
	for range 3 {
		s, err := start(bin, cfg, flags)
		if err == nil {
			return s, nil
		}
		lastErr = err
	}
	return nil, fmt.Errorf("starting prometheus: %w", lastErr)
}

func start(bin, config string, flags []string) (*Server, error) {
	dir, err := os.MkdirTemp("", "promserver-")
	if err != nil {
		return nil, err
	}
	cfg := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(cfg, []byte(config), 0o600); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	port, err := proc.FreePort()
	if err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	addr := net.JoinHostPort("127.0.0.1", fmt.Sprint(port))
	s := &Server{URL: "http://" + addr, dir: dir, out: &proc.Buffer{}, done: make(chan struct{})}
	s.cmd = exec.Command(bin, append([]string{
		"--config.file=" + cfg,
		"--storage.tsdb.path=" + filepath.Join(dir, "data"),
		"--web.listen-address=" + addr,
		"--web.enable-remote-write-receiver",
		"--log.level=warn",
	}, flags...)...)
	s.cmd.Stdout, s.cmd.Stderr = s.out, s.out
	s.cmd.SysProcAttr = proc.DieWithParent()
	if err := s.cmd.Start(); err != nil {
		_ = os.RemoveAll(dir)
		return nil, err
	}
	go func() { _ = s.cmd.Wait(); close(s.done) }()
	if err := s.waitReady(30 * time.Second); err != nil {
		s.Stop()
		return nil, fmt.Errorf("%w\nprometheus output:\n%s", err, s.out.String())
	}
	return s, nil
}

func (s *Server) waitReady(timeout time.Duration) error {
	deadline := time.Now().Add(timeout)
	client := &http.Client{Timeout: time.Second}
	for time.Now().Before(deadline) {
		select {
		case <-s.done:
			return fmt.Errorf("prometheus exited before it was ready")
		default:
		}
		resp, err := client.Get(s.URL + "/-/ready")
		if err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	return fmt.Errorf("prometheus not ready at %s after %v", s.URL, timeout)
}

// Stop kills Prometheus, waits for it to exit and removes its directory. Safe to call twice.
func (s *Server) Stop() {
	s.once.Do(func() {
		_ = s.cmd.Process.Kill()
		<-s.done
		_ = os.RemoveAll(s.dir)
	})
}

// Output is what Prometheus logged, for failure messages.
func (s *Server) Output() string { return s.out.String() }

// Sample is one value at one time.
type Sample struct {
	T time.Time
	V float64
}

// Series is one time series: its labels, including __name__, and its samples in time order.
type Series struct {
	Labels  map[string]string
	Samples []Sample
}

// Push writes series through the remote-write receiver. Samples must be recent (the TSDB head
// takes samples no older than about an hour before its newest) and in time order per series; the
// server refuses anything else with 400, which Push returns.
func (s *Server) Push(ctx context.Context, series ...Series) error {
	body, err := encode(series)
	if err != nil {
		return err
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, s.URL+"/api/v1/write", bytes.NewReader(snappy.Encode(nil, body)))
	if err != nil {
		return err
	}
	req.Header.Set("Content-Type", "application/x-protobuf")
	req.Header.Set("Content-Encoding", "snappy")
	req.Header.Set("X-Prometheus-Remote-Write-Version", "0.1.0")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return err
	}
	defer func() { _ = resp.Body.Close() }()
	if resp.StatusCode/100 != 2 {
		var b bytes.Buffer
		_, _ = b.ReadFrom(resp.Body)
		return fmt.Errorf("remote write: HTTP %d: %s", resp.StatusCode, strings.TrimSpace(b.String()))
	}
	return nil
}

// TB is the part of testing.TB the helpers for tests use: this package is also `scoreflow
// run`'s, which is no test.
type TB interface {
	Helper()
	Fatal(args ...any)
	Fatalf(format string, args ...any)
	Cleanup(func())
}

// MustPush is Push for tests: a failure fails the test.
func (s *Server) MustPush(t TB, series ...Series) {
	t.Helper()
	if err := s.Push(context.Background(), series...); err != nil {
		t.Fatalf("pushing to prometheus: %v", err)
	}
}

// encode writes a prometheus.WriteRequest (prompb/remote.proto, types.proto):
//
//	WriteRequest { repeated TimeSeries timeseries = 1; }
//	TimeSeries   { repeated Label labels = 1; repeated Sample samples = 2; }
//	Label        { string name = 1; string value = 2; }
//	Sample       { double value = 1; int64 timestamp = 2; }  // milliseconds
//
// The receiver silently drops series with invalid labels, so they are refused here instead.
func encode(series []Series) ([]byte, error) {
	var out []byte
	for i, s := range series {
		if s.Labels["__name__"] == "" {
			return nil, fmt.Errorf("series %d has no __name__ label", i)
		}
		names := make([]string, 0, len(s.Labels))
		for k := range s.Labels {
			names = append(names, k)
		}
		sort.Strings(names) // remote write wants labels sorted by name
		var ts []byte
		for _, k := range names {
			var l []byte
			l = protowire.AppendTag(l, 1, protowire.BytesType)
			l = protowire.AppendString(l, k)
			l = protowire.AppendTag(l, 2, protowire.BytesType)
			l = protowire.AppendString(l, s.Labels[k])
			ts = protowire.AppendTag(ts, 1, protowire.BytesType)
			ts = protowire.AppendBytes(ts, l)
		}
		for j, smp := range s.Samples {
			if j > 0 && !smp.T.After(s.Samples[j-1].T) {
				return nil, fmt.Errorf("series %d: samples are not in time order at %d", i, j)
			}
			var b []byte
			b = protowire.AppendTag(b, 1, protowire.Fixed64Type)
			b = protowire.AppendFixed64(b, math.Float64bits(smp.V))
			b = protowire.AppendTag(b, 2, protowire.VarintType)
			b = protowire.AppendVarint(b, uint64(smp.T.UnixMilli()))
			ts = protowire.AppendTag(ts, 2, protowire.BytesType)
			ts = protowire.AppendBytes(ts, b)
		}
		out = protowire.AppendTag(out, 1, protowire.BytesType)
		out = protowire.AppendBytes(out, ts)
	}
	return out, nil
}

// Aligned is now rounded down to a multiple of step since the Unix epoch: a recent, fixed time for
// tests to write samples at and evaluate at (see prom.AlignedRange).
func Aligned(step time.Duration) time.Time {
	ms := time.Now().UnixMilli()
	return time.UnixMilli(ms - ms%step.Milliseconds())
}

// Grid is a series with values at end-(n-1)*step, ..., end-step, end: values[len-1] is at end.
func Grid(labels map[string]string, end time.Time, step time.Duration, values ...float64) Series {
	s := Series{Labels: labels, Samples: make([]Sample, len(values))}
	for i, v := range values {
		s.Samples[i] = Sample{T: end.Add(-time.Duration(len(values)-1-i) * step), V: v}
	}
	return s
}

// Gauge is a series with one sample.
func Gauge(labels map[string]string, at time.Time, v float64) Series {
	return Series{Labels: labels, Samples: []Sample{{T: at, V: v}}}
}
