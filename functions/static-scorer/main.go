// Command static-scorer scores clusters from a table file of per-cluster, per-app, per-device
// performance and power values (a mounted ConfigMap), answering each PingSource event with one
// score.updated for the resource its data names. See package
// github.com/scoreflow/scoreflow/pkg/scorer/static for the table format.
package main

import (
	"context"
	"errors"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/static"
)

func main() {
	fn := function.New("static-scorer", `scores clusters from a table of per-cluster, per-app, per-device performance and power values; PingSource data {"resource": NAME} picks the resource`)
	table := fn.Flags.String("table", "", "table file, YAML or JSON (a mounted ConfigMap); re-read on every event, parsed again when it changes")

	// A result too large for one event sends all but its reply here (pkg/scorer).
	newSink := fn.OptionalSinkFlags()
	split := scorer.Flags(fn.Flags)
	fn.Main(func(ctx context.Context) error {
		sink, err := newSink()
		if err != nil {
			return err
		}
		if *table == "" {
			return errors.New("--table is required")
		}
		f := &static.File{Path: *table, Log: fn.Log}
		if _, err := f.Load(); err != nil {
			return err // a table that is bad from the start is a deployment mistake: fail fast
		}
		// A table that goes bad later is answered 400 BadConfig per event, not with readiness:
		// an unready pod would leave events to time out instead of saying why.
		s := &static.Scorer{File: f}
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), scorer.Route{contract.TypePing: s.Ping}, sink, *split), nil)
	})
}
