// Command optimizer answers io.scoreflow.optimize.requested (and POST /optimize, the Dynamic
// Scoring Framework's optimisation API) by choosing a policy per cluster and a cluster per workload
// from the hub's AddOnPlacementScores, and writing the plan as Placements and PlacementBindings.
// See package github.com/scoreflow/scoreflow/pkg/optimizer.
package main

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/leader"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

func main() {
	fn := function.New("optimizer", "chooses a policy per cluster and a cluster per workload from AddOnPlacementScores and writes the plan as Placements and PlacementBindings")
	kubeconfig := fn.Flags.String("kubeconfig", "", "kubeconfig of the hub (empty: in-cluster config)")
	namespaces := fn.Flags.String("namespaces", "", "comma-separated namespaces whose policies, workloads and Placements requests may name (required; grant it a Role in each): a request for another is refused 400 Forbidden, nothing read or written")
	lower := fn.Flags.String("lower-is-better", "", "comma-separated AddOnPlacementScore names whose lower values are better, minimised when a request sets no preference.goal (e.g. raw power readings)")
	limit := fn.Flags.Duration("time-limit", 10*time.Second, "how long one search may run; then the best plan found is applied and the reply says it is not proven optimal, with its bound")
	deadline := fn.Flags.Duration("request-deadline", 50*time.Second, "how long one request may take in all (waiting its turn, reading the hub, searching, writing): the search stops early enough to leave the writes a quarter of what is left and four times what reading the hub took, and a request that cannot answer with a plan in time answers 503; keep it below the optimizer Trigger's delivery timeout (60s) so the broker hears the answer (0: none)")
	claim := fn.Flags.String("compliance-claim", "policy-watcher-claim", "ClusterClaim a workload's cluster must carry before its Placement selects it (empty: no gate)")
	claimValue := fn.Flags.String("compliance-value", "compliant", "value of --compliance-claim that means the cluster's policies comply")
	mark := fn.Flags.Bool("mark-compliance", false, "gate workload Placements on a ManagedCluster label this process sets from the root policies' compliance (needs no agent; replaces --compliance-claim)")
	markEvery := fn.Flags.Duration("mark-interval", 5*time.Second, "how often --mark-compliance re-reads the policies' compliance")
	lease := leader.AddFlags(fn.Flags, "optimizer-compliance")
	qps := fn.Flags.Float64("kube-api-qps", 100, "client-side rate limit of hub requests per second (a request reads and writes a few objects per cluster and one or two per workload, within --request-deadline)")

	fn.Main(func(ctx context.Context) error {
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return fmt.Errorf("hub config: %w", err)
		}
		cfg.UserAgent = "scoreflow-optimizer"
		cfg.QPS, cfg.Burst = float32(*qps), 2*int(*qps)
		if *limit < 0 || *deadline < 0 {
			return fmt.Errorf("--time-limit and --request-deadline must not be negative")
		}
		o := &optimizer.Optimizer{Opts: optimizer.Options{TimeLimit: *limit, RequestDeadline: *deadline, ComplianceClaim: *claim, ComplianceValue: *claimValue, MarkCompliance: *mark}}
		for _, n := range strings.Split(*namespaces, ",") {
			if n = strings.TrimSpace(n); n == "" {
				continue
			}
			if msgs := validation.IsDNS1123Label(n); len(msgs) > 0 {
				return fmt.Errorf("--namespaces: %q: %s", n, strings.Join(msgs, "; "))
			}
			o.Opts.Namespaces = append(o.Opts.Namespaces, n)
		}
		if len(o.Opts.Namespaces) == 0 {
			return errors.New("--namespaces is required: the namespaces whose Placements this optimizer may write")
		}
		for _, n := range strings.Split(*lower, ",") {
			if n = strings.TrimSpace(n); n != "" {
				o.Opts.LowerIsBetter = append(o.Opts.LowerIsBetter, n)
			}
		}
		if o.Cluster, err = clusterclient.NewForConfig(cfg); err != nil {
			return err
		}
		if o.Work, err = workclient.NewForConfig(cfg); err != nil {
			return err
		}
		if o.Dynamic, err = dynamic.NewForConfig(cfg); err != nil {
			return err
		}
		if *mark {
			// Every replica serves requests; only the one holding the Lease marks, so two never
			// patch the same labels at once.
			kube, err := kubernetes.NewForConfig(cfg)
			if err != nil {
				return err
			}
			elector, err := lease.Elector(kube, fn.Log)
			if err != nil {
				return err
			}
			mk := &optimizer.Marker{Cluster: o.Cluster, Dynamic: o.Dynamic, Namespaces: o.Opts.Namespaces, Log: fn.Log}
			mctx, stop := context.WithCancel(ctx)
			done := make(chan struct{})
			go func() {
				defer close(done)
				leader.RunOrAlways(mctx, elector, func(ctx context.Context) { mk.Run(ctx, *markEvery) })
			}()
			// On the way out the Lease is released before the process ends, so that another
			// replica takes over at once rather than when the Lease expires.
			defer func() { stop(); <-done }()
		}
		h := &optimizer.Handler{Optimizer: o, Source: fn.Source(), Log: fn.Log}
		ce := fn.Handler(h.Handle, h.FailureReply)
		return fn.ServeHTTP(ctx, h.ProtectedMux(ce, fn.Protect))
	})
}
