// Command dsf-bridge runs scorers of the OCM Dynamic Scoring Framework (DSF), unchanged, from their
// DynamicScorer specs. With --cluster it is DSF's agent on that managed cluster (an OCM addon,
// addon/dsf): it runs the DynamicScorers the hub holds against that cluster's Prometheus and sends
// the cluster's scores to the hub's agent gateway. Without it, on the hub, a PingSource names one
// scorer of --scorers-file, run against a hub-side Prometheus whose series carry a cluster label.
// See pkg/dsf and docs/dsf.md.
package main

import (
	"context"
	"errors"
	"net/http"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

func main() {
	fn := function.New("dsf-bridge", "runs Dynamic Scoring Framework scorers from their DynamicScorer specs: with --cluster as DSF's agent on a managed cluster, "+
		"sending to K_SINK (the hub's agent gateway); else on the hub, a PingSource {\"scorer\": NAME} running a scorer of --scorers-file and replying io.scoreflow.score.updated")
	cluster := fn.Flags.String("cluster", "", "agent mode: the managed cluster this runs on; it runs the hub's DynamicScorers (--scorers-namespace) against this cluster and sends its scores to K_SINK (empty: hub mode)")
	namespace := fn.Flags.String("scorers-namespace", "open-cluster-management", "agent mode: the hub namespace of the DynamicScorers and the DynamicScoringConfig dynamic-scoring-config (DSF's: where DSF is installed)")
	file := fn.Flags.String("scorers-file", "", "hub mode: DynamicScorer (and DynamicScoringConfig) documents, as DSF users write them, a ping may name (a mounted ConfigMap; read again when it changes)")
	endpoints := fn.Flags.String("endpoints", "", "the hosts specs and scorers' /config may name, the only ones contacted, each NAME=URL (NAME as specs write it, scheme://host[:port], placeholders included) or URL; comma-separated")
	tokenDir := fn.Flags.String("token-dir", "/var/run/secrets/scoreflow/dsf", "where the Secrets of tokenSecretRef{name, key} are mounted: <token-dir>/<name>/<key>; no other Secret can be named")
	timeout := fn.Flags.Duration("request-timeout", dsf.DefaultTimeout, "timeout of each request to a scorer (/config, /healthz, scoring) or Prometheus (DSF's agent allows 30s)")
	caFile := fn.Flags.String("ca-file", "", "PEM bundle trusted, besides the system's roots, for https scorers and Prometheus")
	clusterLabel := fn.Flags.String("cluster-label", "cluster", "hub mode: the result label naming each score's managed cluster")
	maxRetries := fn.Flags.Int("max-retries", dsf.DefaultMaxRetries, "hub mode: retriable failures of one scorer in a row answered 503 (the broker redelivers); later ones answer 400 until it answers again")
	newSink := fn.OptionalSinkFlags() // hub mode: the broker, for results split over several events; agent mode: the gateway
	split := scorer.Flags(fn.Flags)
	hubToken := hubtoken.RegisterFlags(fn.Flags)

	fn.Main(func(ctx context.Context) error {
		eps, err := dsf.ParseEndpoints(*endpoints)
		if err != nil {
			return errors.New("--endpoints: " + err.Error())
		}
		run, err := dsf.NewRunner(dsf.Options{Settings: dsf.Settings{Endpoints: eps, TokenDir: *tokenDir}, Timeout: *timeout, CAFile: *caFile}, fn.Registry, fn.Log)
		if err != nil {
			return err
		}
		if *cluster != "" {
			return agent(ctx, fn, run, *cluster, *namespace, newSink, hubToken, split.CheckResource)
		}
		sink, err := newSink()
		if err != nil {
			return err
		}
		b, err := dsf.NewBridge(run, *file, *clusterLabel, *maxRetries, split.CheckResource, fn.Log)
		if err != nil {
			return err
		}
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), b.Routes(), sink, *split), nil)
	})
}

// agent runs agent mode: the hub's DynamicScorers, read and reported with the hub credentials OCM
// gives the addon agent (--hub-kubeconfig).
func agent(ctx context.Context, fn *function.Function, run *dsf.Runner, cluster, namespace string, newSink func() (*function.Sender, error), hubToken *hubtoken.Flags, owns func(string) error) error {
	if err := contract.ValidateClusterName(cluster); err != nil {
		return errors.New("--cluster: " + err.Error())
	}
	kubeconfig := fn.Flags.Lookup("hub-kubeconfig").Value.String()
	if kubeconfig == "" {
		return errors.New("agent mode (--cluster) needs --hub-kubeconfig: the hub holds the DynamicScorers")
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	hub, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := hubToken.Start(ctx, fn.Log, cluster, fn.Flags.Lookup("sink-token-file").Value.String()); err != nil {
		return err
	}
	sender, err := newSink()
	if err != nil {
		return err
	}
	if sender == nil {
		return errors.New("agent mode (--cluster) needs a sink: --sink or K_SINK, the hub's agent gateway")
	}
	a := &dsf.Agent{Runner: run, Cluster: cluster, Source: fn.Source() + "/" + cluster, Sender: sender, Log: fn.Log, Owns: owns}
	fn.SetReadiness(a.Ready)
	ctx, stop := context.WithCancel(ctx)
	defer stop()
	errc := make(chan error, 1)
	go func() {
		errc <- a.Run(ctx, hub, namespace)
		stop() // the agent stopped: so does serving
	}()
	serveErr := fn.ServeHTTP(ctx, fn.Mux(http.NotFoundHandler()))
	stop()
	return errors.Join(<-errc, serveErr)
}
