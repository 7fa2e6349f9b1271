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
	"fmt"
	"net/http"
	"strings"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
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
	namespace := fn.Flags.String("scorers-namespace", dsf.DefaultScorersNamespace, "agent mode: the hub namespace of the DynamicScorers and the DynamicScoringConfig dynamic-scoring-config (DSF's: where DSF's guide installs it)")
	file := fn.Flags.String("scorers-file", "", "hub mode: DynamicScorer (and DynamicScoringConfig) documents, as DSF users write them, a ping may name (a mounted ConfigMap; read again when it changes)")
	endpoints := fn.Flags.String("endpoints", "", "optional: where hosts the specs and scorers' /config name really are, each NAME=URL (NAME as written, scheme://host[:port], placeholders included); comma-separated; a host not listed is contacted as written")
	tokenDir := fn.Flags.String("token-dir", "/var/run/secrets/scoreflow/dsf", "hub mode: where the Secrets of tokenSecretRef{name, key} are mounted: <token-dir>/<name>/<key>")
	secretsNamespace := fn.Flags.String("secrets-namespace", "dynamic-scoring", "agent mode: the managed cluster's namespace whose Secrets tokenSecretRef{name, key} names, read through its API (the agent's own; DSF's agent namespace)")
	managedKubeconfig := fn.Flags.String("managed-kubeconfig", "", "agent mode: kubeconfig of the managed cluster's API, where the token Secrets are (empty: the pod's own ServiceAccount)")
	timeout := fn.Flags.Duration("request-timeout", dsf.DefaultTimeout, "timeout of each request to a scorer (/config, /healthz, scoring) or Prometheus (DSF's agent allows 30s)")
	caFile := fn.Flags.String("ca-file", "", "PEM bundle trusted, besides the system's roots, for https scorers and Prometheus; read again when it changes, skipped while missing or empty (an OpenShift service CA)")
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
		var tokens dsf.Tokens = dsf.TokenDir(*tokenDir)
		if *cluster != "" {
			if tokens, err = secretTokens(fn, *secretsNamespace, *managedKubeconfig); err != nil {
				return err
			}
		}
		run, err := dsf.NewRunner(dsf.Options{Settings: dsf.Settings{Endpoints: eps, Tokens: tokens}, Timeout: *timeout, CAFile: *caFile}, fn.Registry, fn.Log)
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
		b, err := dsf.NewBridge(run, *file, *clusterLabel, *maxRetries, fn.Log)
		if err != nil {
			return err
		}
		return fn.Serve(ctx, scorer.HandlerWith(fn.Source(), b.Routes(), sink, *split), nil)
	})
}

// secretTokens reads, in agent mode, the token Secrets of namespace on the managed cluster with
// the pod's own ServiceAccount (or kubeconfig): get only. The addon's hub credentials, kept in the
// same namespace, are never read for a spec.
func secretTokens(fn *function.Function, namespace, kubeconfig string) (*dsf.SecretTokens, error) {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return nil, fmt.Errorf("--secrets-namespace %q: %s (agent mode reads the token Secrets there)", namespace, strings.Join(errs, "; "))
	}
	t := &dsf.SecretTokens{Namespace: namespace, Refused: map[string]string{}}
	if addon := fn.Flags.Lookup("hub-token-addon").Value.String(); addon != "" {
		t.Refused[addon+"-hub-kubeconfig"] = "the agent's own hub credentials"
	}
	var cfg *rest.Config
	var err error
	if kubeconfig != "" {
		if cfg, err = clientcmd.BuildConfigFromFlags("", kubeconfig); err != nil {
			return nil, fmt.Errorf("--managed-kubeconfig: %w", err)
		}
	} else if cfg, err = rest.InClusterConfig(); err != nil {
		// Outside a pod and without --managed-kubeconfig: specs naming a Secret fail, saying so.
		fn.Log.Warn("no access to the managed cluster's API: a spec naming a token Secret fails", "err", err.Error())
		return t, nil
	}
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	t.Secrets = kube.CoreV1()
	return t, nil
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
