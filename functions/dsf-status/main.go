// Command dsf-status writes the status of the hub's DynamicScorers as the Dynamic Scoring
// Framework's controller does: every 30 seconds each scorer's health (status.healthStatus) and,
// with configSyncMode Full, its /config (status.lastSyncedConfig). It is the one component that
// writes them: replicas take turns under a Lease (pkg/leader), and the DSF agents on the managed
// clusters read what it writes. It receives no events; it serves /healthz, /readyz and /metrics.
// See pkg/dsf (StatusWriter) and docs/dsf.md.
package main

import (
	"context"
	"errors"
	"net/http"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/leader"
)

func main() {
	fn := function.New("dsf-status", "writes the hub's DynamicScorers' status.healthStatus and status.lastSyncedConfig, probing each scorer every --interval as DSF's controller does")
	kubeconfig := fn.Flags.String("kubeconfig", "", "kubeconfig of the hub (empty: in-cluster config)")
	namespace := fn.Flags.String("scorers-namespace", dsf.DefaultScorersNamespace, "the hub namespace of the DynamicScorers (DSF's: where DSF's guide installs it)")
	endpoints := fn.Flags.String("endpoints", "", "optional: where hosts the specs' configURLs name really are, as the hub reaches them, each NAME=URL (NAME as written, scheme://host[:port]); comma-separated; a host not listed is contacted as written")
	interval := fn.Flags.Duration("interval", dsf.DefaultStatusInterval, "time between two probes of one scorer (DSF's controller: 30s)")
	timeout := fn.Flags.Duration("request-timeout", dsf.DefaultTimeout, "timeout of one probe (/config or /healthz)")
	workers := fn.Flags.Int("workers", 4, "scorers probed at once")
	caFile := fn.Flags.String("ca-file", "", "PEM bundle trusted, besides the system's roots, for https scorers; read again when it changes, skipped while missing or empty")
	elect := leader.AddFlags(fn.Flags, "dsf-status")
	fn.Flags.Lookup("port").Usage = "HTTP port for /healthz, /readyz and /metrics (no events are received)"

	fn.Main(func(ctx context.Context) error {
		eps, err := dsf.ParseEndpoints(*endpoints)
		if err != nil {
			return errors.New("--endpoints: " + err.Error())
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return err
		}
		hub, err := dynamic.NewForConfig(cfg)
		if err != nil {
			return err
		}
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		w, err := dsf.NewStatusWriter(hub, *namespace, dsf.StatusOptions{Endpoints: eps, Timeout: *timeout, CAFile: *caFile, Interval: *interval, Workers: *workers}, fn.Registry, fn.Log)
		if err != nil {
			return err
		}
		el, err := elect.Elector(kube, fn.Log)
		if err != nil {
			return err
		}
		ctx, stop := context.WithCancel(ctx)
		defer stop()
		done := make(chan struct{})
		go func() {
			defer close(done)
			leader.RunOrAlways(ctx, el, func(ctx context.Context) {
				if err := w.Run(ctx); err != nil && ctx.Err() == nil {
					fn.Log.Error("writing the DynamicScorers' status stopped", "err", err)
				}
			})
		}()
		err = fn.ServeHTTP(ctx, fn.Mux(http.NotFoundHandler()))
		stop()
		<-done
		return err
	})
}
