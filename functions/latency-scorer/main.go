// Command latency-scorer scores clusters by HTTP latency measured on fresh connections. On the hub
// it answers PingSource events (data: its configuration, naming only URLs its --targets-file
// lists) with one score.updated; with --cluster it runs on that managed cluster, measures every
// --interval and sends the scores to K_SINK. See package
// github.com/scoreflow/scoreflow/pkg/scorer/latency for the configuration.
package main

import (
	"context"
	"errors"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
	"github.com/scoreflow/scoreflow/pkg/scorer"
	"github.com/scoreflow/scoreflow/pkg/scorer/latency"
)

func main() {
	fn := function.New("latency-scorer", "scores clusters by mean HTTP latency (fresh connection per run; lower is better), from PingSource data on the hub or, with --cluster, on a managed cluster sending to K_SINK")
	cluster := fn.Flags.String("cluster", "", "agent mode: the managed cluster this runs on; it measures from there every --interval and sends score.updated to K_SINK (empty: hub mode, PingSource events only)")
	configFile := fn.Flags.String("config-file", "", "agent mode: configuration file, JSON or YAML like the PingSource data (a mounted ConfigMap; re-read every round)")
	interval := fn.Flags.Duration("interval", time.Minute, "agent mode: time between measurement rounds (the first runs at start)")
	targetsFile := fn.Flags.String("targets-file", "", "the URLs a PingSource's configuration may name, each with the cluster it scores (JSON or YAML, a mounted ConfigMap; re-read on every ping); "+
		"in agent mode the --config-file's URLs too. Empty: pings measure nothing (in agent mode, only the --config-file's URLs)")
	newSender := fn.SinkFlags() // agent mode: the hub's agent gateway (K_SINK, set by addon/'s template)
	hubToken := hubtoken.RegisterFlags(fn.Flags)
	opts := scorer.Flags(fn.Flags)

	fn.Main(func(ctx context.Context) error {
		s := latency.New(*cluster, fn.Log, fn.Registry)
		s.Allowed = latency.DeploymentTargets(*targetsFile, *configFile, *cluster)
		if _, err := latency.LoadTargets(*targetsFile, *cluster); err != nil {
			return err
		}
		if *cluster != "" {
			if err := contract.ValidateClusterName(*cluster); err != nil {
				return err
			}
			if *configFile == "" {
				return errors.New("agent mode (--cluster) needs --config-file")
			}
			if *interval <= 0 {
				return errors.New("--interval must be positive")
			}
			if _, err := latency.LoadFile(*configFile, *cluster); err != nil {
				return err
			}
			// As an OCM addon agent: the token for the agent gateway is minted with the agent's
			// hub credentials.
			if err := hubToken.Start(ctx, fn.Log, *cluster, fn.Flags.Lookup("sink-token-file").Value.String()); err != nil {
				return err
			}
			sender, err := newSender()
			if err != nil {
				return err
			}
			a := &latency.Agent{Scorer: s, ConfigFile: *configFile, Interval: *interval, Sender: sender, Source: fn.Source() + "/" + *cluster}
			go a.Run(ctx)
		}
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), scorer.Route{contract.TypePing: s.Ping}, nil, *opts), nil)
	})
}
