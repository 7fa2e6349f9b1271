// Command agent-gateway is the hub's door for agents on managed clusters: it verifies each
// agent's hub token (against the hub's published keys, then TokenReview), checks that its addon
// is enabled for its cluster and that its event scores only that cluster with its addon's types
// and resources (as its table lists them, or as the hub's AddOnTemplates and DynamicScorers decide
// them), and forwards it to the Broker (K_SINK) under its own identity. See package github.com/scoreflow/scoreflow/pkg/agentgateway.
package main

import (
	"context"
	"errors"

	"k8s.io/client-go/tools/clientcmd"

	"github.com/scoreflow/scoreflow/pkg/agentgateway"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

func main() {
	fn := function.New("agent-gateway", "admits score.updated from agents on managed clusters (a hub token of system:serviceaccount:<cluster>:<addon>, verified against the hub's keys and by TokenReview) for their own cluster only, and forwards them to the Broker")
	kubeconfig := fn.Flags.String("kubeconfig", "", "kubeconfig of the hub (empty: in-cluster config): its signing keys, TokenReviews, and watches of ManagedClusterAddOns and of what the table's resources come from (AddOnTemplates, DynamicScorers)")
	agents := fn.Flags.String("agents-file", "", "YAML table of the agents admitted, {agents: [{addon, types, resources or resourcesFrom}]} (a mounted ConfigMap)")
	audience := fn.Flags.String("audience", hubtoken.Audience, "the audience agents' tokens must carry")
	delay := fn.Flags.Duration("unauthenticated-delay", agentgateway.DefaultUnauthenticatedDelay, "how long a 401 is held back, at random between half and one and a half times this (0: the default; negative: not held)")
	validity := fn.Flags.Duration("max-score-validity", agentgateway.DefaultMaxScoreValidity, "an agent's scores are forwarded valid for at most this long (a later or missing validUntil is set to it; neverExpires is refused): a cut-off agent's scores lapse within it")
	// Every agent's first event after a token renewal costs a TokenReview: a fleet refreshing at
	// once needs far more than client-go's default of 5 requests per second.
	qps := fn.Flags.Float64("kube-api-qps", 200, "client-side rate limit of hub requests per second (TokenReviews)")
	burst := fn.Flags.Int("kube-api-burst", 400, "client-side burst of hub requests")
	newSender := fn.SinkFlags()

	fn.Main(func(ctx context.Context) error {
		if *agents == "" {
			return errors.New("--agents-file is required: the gateway admits only the agents its table names")
		}
		table, err := agentgateway.LoadTable(*agents)
		if err != nil {
			return err
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return err
		}
		cfg.UserAgent = "scoreflow-agent-gateway"
		cfg.QPS, cfg.Burst = float32(*qps), *burst
		sink, err := newSender()
		if err != nil {
			return err
		}
		g, err := agentgateway.New(cfg, sink, agentgateway.Options{Table: table, Audience: *audience, Source: fn.Source(), MaxScoreValidity: *validity, UnauthenticatedDelay: *delay}, fn.Log, fn.Registry)
		if err != nil {
			return err
		}
		g.Start(ctx)
		fn.SetReadiness(g.Ready)
		// Tokens are checked before the CloudEvents receiver reads a body.
		return fn.ServeHTTP(ctx, g.Handler(fn))
	})
}
