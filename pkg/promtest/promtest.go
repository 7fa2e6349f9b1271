// Package promtest runs a real Prometheus server for tests (pkg/promlocal) and drives functions
// over HTTP. It is imported only by tests.
package promtest

import (
	"testing"

	"github.com/scoreflow/scoreflow/pkg/promlocal"
)

// Aliases, so tests read promtest.Series, promtest.Gauge, ...
type (
	Server = promlocal.Server
	Series = promlocal.Series
	Sample = promlocal.Sample
)

var (
	Aligned = promlocal.Aligned
	Grid    = promlocal.Grid
	Gauge   = promlocal.Gauge
)

// Start runs Prometheus (see promlocal.Run); the test's cleanup stops it. A missing binary fails
// the test with the message that says how to build it.
func Start(t testing.TB) *Server {
	t.Helper()
	s, err := promlocal.Run()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(s.Stop)
	return s
}
