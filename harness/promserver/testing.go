package promserver

// What tests use: a server stopped by the test's cleanup, a scorer's client of it, series.

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/prom"
)

// Start runs Prometheus (see Run) with flags added to its command line; the test's
// cleanup stops it. A missing binary fails the test with the message that says how to build it.
func Start(t TB, flags ...string) *Server {
	t.Helper()
	s, err := Run(flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// StartConfig is Start with cfg as prometheus.yml (see RunConfig).
func StartConfig(t TB, cfg string, flags ...string) *Server {
	t.Helper()
	s, err := RunConfig(cfg, flags...)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}

// Client is a scorer's Prometheus client of url, as the functions make it: a 5s timeout, its
// metrics in a registry of its own.
func Client(t TB, url string) *prom.Client {
	t.Helper()
	c, err := prom.New(prom.Config{URL: url, Timeout: 5 * time.Second}, nil, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// Counter is a counter growing by perSecond, sampled every 15s from an hour and a minute before
// at until five minutes after it, starting from 0: rate(...[1m]) evaluated anywhere in the hour
// before at is perSecond (to a rounding error: pick rates like 2.5 that truncate the same either
// way), whatever minute a range query's grid falls on (no window is cut by the series' start or
// end).
func Counter(labels map[string]string, perSecond float64, at time.Time) Series {
	const step = 15 * time.Second
	from, to := at.Add(-time.Hour-time.Minute), at.Add(5*time.Minute)
	s := Series{Labels: labels}
	for t := from; !t.After(to); t = t.Add(step) {
		s.Samples = append(s.Samples, Sample{T: t, V: perSecond * t.Sub(from).Seconds()})
	}
	return s
}
