package latency

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/url"
	"sync"
	"time"
)

// Run is one measured request. Total is the latency scored: from starting the request to the
// first response byte, so it includes DNS, connect and TLS on the fresh connection.
type Run struct {
	DNS, Connect, TLS time.Duration
	// Wait is from the request being written to the first response byte: the server's share.
	Wait   time.Duration
	Total  time.Duration
	Reused bool // whether the connection was reused: never, with keep-alives off
	Status int
}

// Prober measures runs. The zero value verifies TLS against the system roots.
type Prober struct {
	// TLS, when set, is the TLS configuration of every run (a private CA, say).
	TLS *tls.Config
}

// RunError is a failed run and the phase it failed in: dns, connect, tls, wait (request sent, no
// answer) or status (an HTTP 5xx answer).
type RunError struct {
	Phase string
	Err   error
}

func (e *RunError) Error() string { return e.Phase + ": " + e.Err.Error() }
func (e *RunError) Unwrap() error { return e.Err }

// Probe makes one request on a connection of its own: a new Transport with keep-alives off, so
// nothing is pooled, and no TLS session cache, so every handshake is a full one.
func (p *Prober) Probe(ctx context.Context, rawURL string, timeout time.Duration) (Run, error) {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var tlsConf *tls.Config
	if p.TLS != nil {
		tlsConf = p.TLS.Clone()
	}
	tr := &http.Transport{
		Proxy:             http.ProxyFromEnvironment,
		DialContext:       (&net.Dialer{Timeout: timeout}).DialContext,
		TLSClientConfig:   tlsConf,
		DisableKeepAlives: true,
	}
	defer tr.CloseIdleConnections()
	client := &http.Client{
		Transport: tr,
		// A redirect is an answer; following it would measure a second connection.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}

	var (
		mu                                      sync.Mutex
		phase                                   = "dns"
		dnsStart, connStart, tlsStart, wroteReq time.Time
		run                                     Run
	)
	set := func(f func()) { mu.Lock(); f(); mu.Unlock() }
	trace := &httptrace.ClientTrace{
		DNSStart: func(httptrace.DNSStartInfo) { set(func() { dnsStart = time.Now() }) },
		DNSDone:  func(httptrace.DNSDoneInfo) { set(func() { run.DNS = time.Since(dnsStart) }) },
		ConnectStart: func(string, string) {
			set(func() { phase, connStart = "connect", time.Now() })
		},
		ConnectDone: func(_, _ string, err error) {
			set(func() {
				if err == nil {
					run.Connect = time.Since(connStart)
				}
			})
		},
		TLSHandshakeStart: func() { set(func() { phase, tlsStart = "tls", time.Now() }) },
		TLSHandshakeDone: func(tls.ConnectionState, error) {
			set(func() { run.TLS = time.Since(tlsStart) })
		},
		GotConn:      func(info httptrace.GotConnInfo) { set(func() { run.Reused = info.Reused }) },
		WroteRequest: func(httptrace.WroteRequestInfo) { set(func() { phase, wroteReq = "wait", time.Now() }) },
		GotFirstResponseByte: func() {
			set(func() { run.Wait = time.Since(wroteReq) })
		},
	}
	req, err := http.NewRequestWithContext(httptrace.WithClientTrace(ctx, trace), http.MethodGet, rawURL, nil)
	if err != nil {
		return Run{}, &RunError{Phase: "request", Err: errors.New("cannot build a request for " + redact(rawURL))}
	}
	req.Header.Set("User-Agent", "scoreflow-latency-scorer")
	start := time.Now()
	resp, err := client.Do(req)
	total := time.Since(start)
	mu.Lock()
	defer mu.Unlock()
	if err != nil {
		var uerr *url.Error
		if errors.As(err, &uerr) {
			err = uerr.Err // its message repeats the URL, query and all
		}
		if ctx.Err() != nil {
			err = fmt.Errorf("no answer within %s: %w", timeout, err)
		}
		return Run{}, &RunError{Phase: phase, Err: err}
	}
	_ = resp.Body.Close()
	run.Total, run.Status = total, resp.StatusCode
	if resp.StatusCode >= 500 {
		return run, &RunError{Phase: "status", Err: fmt.Errorf("HTTP %d", resp.StatusCode)}
	}
	return run, nil
}

// Measurement is the outcome of one entry: its runs and the mean latency of those that succeeded.
type Measurement struct {
	Target Target
	Runs   []Run
	Errors []error
	// Mean is the mean Total of the successful runs; OK is false when every run failed.
	Mean time.Duration
	OK   bool
}

// Measure makes t.Runs probes, waiting t.WaitBetweenRuns between them.
func (p *Prober) Measure(ctx context.Context, t Target) Measurement {
	m := Measurement{Target: t}
	var sum time.Duration
	for i := 0; i < t.Runs; i++ {
		if i > 0 && t.WaitBetweenRuns > 0 {
			select {
			case <-ctx.Done():
				m.Errors = append(m.Errors, ctx.Err())
				return m.finish(sum)
			case <-time.After(time.Duration(t.WaitBetweenRuns)):
			}
		}
		run, err := p.Probe(ctx, t.URL, time.Duration(t.Timeout))
		if err != nil {
			m.Errors = append(m.Errors, fmt.Errorf("run %d: %w", i+1, err))
			continue
		}
		m.Runs = append(m.Runs, run)
		sum += run.Total
	}
	return m.finish(sum)
}

func (m Measurement) finish(sum time.Duration) Measurement {
	if len(m.Runs) > 0 {
		m.OK = true
		m.Mean = sum / time.Duration(len(m.Runs))
	}
	return m
}
