// Command dsf-bridge scores clusters with any OCM Dynamic Scoring Framework scorer, unchanged: its
// PingSource's data is the scorer's DynamicScorer spec. See pkg/dsf.
package main

import (
	"context"

	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

func main() {
	fn := function.New("dsf-bridge", "calls a Dynamic Scoring Framework scorer as its DynamicScorer spec in the PingSource's data says "+
		"(configURL/configSyncMode, source, scoring, scoreDimensionFormat, auth); replies with one io.scoreflow.score.updated")
	promCfg := prom.RegisterFlags(fn.Flags)
	timeout := fn.Flags.Duration("scorer-timeout", dsf.DefaultScorerTimeout, "timeout of each request to a scorer (/healthz, /config, scoring); a timed-out scorer answers 503 so the broker retries")
	tokenDir := fn.Flags.String("token-dir", "/var/run/secrets/scoreflow/dsf", "where the Secrets of auth.tokenSecretRef are mounted, one directory per Secret: <token-dir>/<name>/<key>")
	// A result too large for one event sends all but its reply here (pkg/scorer).
	newSink := fn.OptionalSinkFlags()
	split := scorer.Flags(fn.Flags)
	fn.Main(func(ctx context.Context) error {
		sink, err := newSink()
		if err != nil {
			return err
		}
		b, err := dsf.New(dsf.Options{TokenDir: *tokenDir}, *promCfg, *timeout, fn.Registry, fn.Log)
		if err != nil {
			return err
		}
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), b.Routes(), sink, *split), nil)
	})
}
