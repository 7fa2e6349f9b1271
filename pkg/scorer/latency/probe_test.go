package latency

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"
)

// server answers after delay and counts the TCP connections it accepts.
type server struct {
	*httptest.Server
	conns atomic.Int64
}

func newServer(t *testing.T, delay time.Duration, status int, tlsOn bool) *server {
	t.Helper()
	s := &server{}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		time.Sleep(delay)
		w.WriteHeader(status)
	}))
	s.Config.ConnState = func(_ net.Conn, st http.ConnState) {
		if st == http.StateNew {
			s.conns.Add(1)
		}
	}
	if tlsOn {
		s.StartTLS()
	} else {
		s.Start()
	}
	t.Cleanup(s.Close)
	return s
}

// trusting returns a prober that trusts s's certificate and nothing else.
func trusting(s *httptest.Server) Prober {
	pool := x509.NewCertPool()
	pool.AddCert(s.Certificate())
	return Prober{TLS: &tls.Config{RootCAs: pool}}
}

// Latencies here are loopback plus an injected delay. Lower bounds are exact (the server sleeps
// before answering). The upper bound is the test's own clock: runs one after the other cannot
// average more than the whole measurement took over their number (waits included), however
// loaded the machine is.
func mostPerRun(start time.Time, runs int) time.Duration {
	return time.Since(start) / time.Duration(runs)
}

func TestMeasureFreshConnectionPerRun(t *testing.T) {
	for _, tlsOn := range []bool{false, true} {
		name := map[bool]string{false: "http", true: "https"}[tlsOn]
		t.Run(name, func(t *testing.T) {
			const delay = 40 * time.Millisecond
			s := newServer(t, delay, http.StatusOK, tlsOn)
			p := Prober{}
			if tlsOn {
				p = trusting(s.Server)
			}
			start := time.Now()
			m := p.Measure(context.Background(), Target{Name: "a", URL: s.URL, Runs: 4, WaitBetweenRuns: Duration(5 * time.Millisecond), Timeout: Duration(5 * time.Second)})
			most := mostPerRun(start, 4)
			if !m.OK || len(m.Runs) != 4 || len(m.Errors) != 0 {
				t.Fatalf("measurement = %+v", m)
			}
			if got := s.conns.Load(); got != 4 {
				t.Errorf("server accepted %d connections for 4 runs, want 4 (one fresh connection per run)", got)
			}
			for i, r := range m.Runs {
				if r.Reused {
					t.Errorf("run %d reused a connection", i)
				}
				if r.Status != http.StatusOK {
					t.Errorf("run %d status %d", i, r.Status)
				}
				if r.Connect <= 0 {
					t.Errorf("run %d: connect phase %s, want > 0 on a fresh connection", i, r.Connect)
				}
				if tlsOn != (r.TLS > 0) {
					t.Errorf("run %d: TLS phase %s with TLS %v", i, r.TLS, tlsOn)
				}
				if r.Wait < delay || r.Total < r.Wait+r.Connect {
					t.Errorf("run %d: wait %s total %s connect %s; want wait >= %s and total >= wait+connect", i, r.Wait, r.Total, r.Connect, delay)
				}
			}
			if m.Mean < delay || m.Mean > most {
				t.Errorf("mean %s, want between %s and %s", m.Mean, delay, most)
			}
		})
	}
}

func TestMeasureOrdersByDelay(t *testing.T) {
	delays := []time.Duration{0, 60 * time.Millisecond, 150 * time.Millisecond}
	var means []time.Duration
	for _, d := range delays {
		s := newServer(t, d, http.StatusNoContent, false)
		start := time.Now()
		m := (&Prober{}).Measure(context.Background(), Target{URL: s.URL, Runs: 3, Timeout: Duration(5 * time.Second)})
		most := mostPerRun(start, 3)
		if !m.OK {
			t.Fatalf("delay %s: %v", d, m.Errors)
		}
		if m.Mean < d || m.Mean > most {
			t.Errorf("delay %s: mean %s, want between %s and %s", d, m.Mean, d, most)
		}
		means = append(means, m.Mean)
	}
	for i := 1; i < len(means); i++ {
		if means[i] <= means[i-1] {
			t.Errorf("mean for %s (%s) not above mean for %s (%s)", delays[i], means[i], delays[i-1], means[i-1])
		}
	}
}

func TestMeasureFailures(t *testing.T) {
	closed := httptest.NewServer(http.NotFoundHandler())
	closedURL := closed.URL
	closed.Close()
	slow := newServer(t, 500*time.Millisecond, http.StatusOK, false)
	broken := newServer(t, 0, http.StatusServiceUnavailable, false)
	untrusted := newServer(t, 0, http.StatusOK, true)
	notFound := newServer(t, 0, http.StatusNotFound, false)

	tests := []struct {
		name      string
		url       string
		timeout   time.Duration
		wantPhase string // "" = success
	}{
		{"connection refused", closedURL, time.Second, "connect"},
		{"timeout waiting for the answer", slow.URL, 100 * time.Millisecond, "wait"},
		{"HTTP 503", broken.URL, time.Second, "status"},
		{"untrusted certificate", untrusted.URL, time.Second, "tls"},
		{"name that does not resolve", "http://scoreflow-no-such-host.invalid/", 5 * time.Second, "dns"},
		{"HTTP 404 is still a measurement", notFound.URL, time.Second, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			m := (&Prober{}).Measure(context.Background(), Target{URL: tt.url, Runs: 2, Timeout: Duration(tt.timeout)})
			if tt.wantPhase == "" {
				if !m.OK || len(m.Errors) != 0 {
					t.Fatalf("measurement = %+v, want success", m)
				}
				return
			}
			if m.OK || len(m.Errors) != 2 {
				t.Fatalf("measurement = %+v, want both runs failed", m)
			}
			for _, err := range m.Errors {
				var re *RunError
				if !errors.As(err, &re) || re.Phase != tt.wantPhase {
					t.Errorf("error %v, want phase %s", err, tt.wantPhase)
				}
			}
		})
	}
}

func TestMeasureMeanOfSuccessfulRuns(t *testing.T) {
	var n atomic.Int64
	s := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if n.Add(1)%2 == 0 { // runs 2 and 4 fail
			w.WriteHeader(http.StatusBadGateway)
			return
		}
		time.Sleep(30 * time.Millisecond)
	}))
	defer s.Close()
	m := (&Prober{}).Measure(context.Background(), Target{URL: s.URL, Runs: 4, Timeout: Duration(time.Second)})
	if !m.OK || len(m.Runs) != 2 || len(m.Errors) != 2 {
		t.Fatalf("measurement = %+v, want 2 runs and 2 errors", m)
	}
	if m.Mean != (m.Runs[0].Total+m.Runs[1].Total)/2 || m.Mean < 30*time.Millisecond {
		t.Errorf("mean %s of runs %s and %s", m.Mean, m.Runs[0].Total, m.Runs[1].Total)
	}
}
