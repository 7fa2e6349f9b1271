// Command metric-watcher polls PromQL queries and emits io.scoreflow.metric.changed to its sink
// (K_SINK, set by a SinkBinding) for the clusters whose value moved beyond a deadband.
//
// It is a source, not an event receiver: a Deployment bound to the broker by a SinkBinding. It
// serves /healthz, /readyz and /metrics, and answers 404 on every other path (a POSTed event
// included). It polls only while it holds its Lease (--leader-elect, package pkg/leader), so that
// a second replica, or a rollout's overlap, never emits a change twice.
package main

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/leader"
	"github.com/scoreflow/scoreflow/pkg/prom"
	"github.com/scoreflow/scoreflow/pkg/watcher"
)

type config struct {
	configFile string
	single     watcher.Query
	interval   time.Duration
	sender     func() (*function.Sender, error)
	opts       watcher.Options
	prom       *prom.Config
	kubeconfig string
	leader     *leader.Flags
}

func newFunction() (*function.Function, *config) {
	fn := function.New("metric-watcher",
		"polls PromQL queries and emits io.scoreflow.metric.changed for the clusters whose value moved beyond a deadband "+
			"since the value last emitted (first sight always emits; vanished clusters are not emitted)")
	c := &config{prom: prom.RegisterFlags(fn.Flags)}
	fs := fn.Flags
	fs.StringVar(&c.configFile, "config", "", "YAML or JSON file with the queries: {queries: [{metric, query, clusterLabel, deadband: {absolute, relative}}]}")
	fs.StringVar(&c.single.Metric, "metric", "", "metric name the samples of --query carry (one query without a file; added to --config's)")
	fs.StringVar(&c.single.Query, "query", "", "PromQL returning an instant vector with the cluster label on every series, e.g. sum by (cluster) (rate(container_cpu_usage_seconds_total[5m])); other labels become sample labels")
	fs.StringVar(&c.single.ClusterLabel, "cluster-label", watcher.DefaultClusterLabel, "label of --query's series that names the managed cluster")
	fs.Float64Var(&c.single.Deadband.Absolute, "deadband-absolute", 0, "absolute deadband of --query: a series is emitted again when |value - last emitted| > max(absolute, relative x |last emitted|)")
	fs.Float64Var(&c.single.Deadband.Relative, "deadband-relative", 0, "relative deadband of --query, a fraction of the value last emitted (0.05 = 5%); see --deadband-absolute. Both 0: any change is emitted")
	fs.DurationVar(&c.interval, "interval", 30*time.Second, "time between polls; the first poll is at start")
	c.sender = fn.SinkFlags()
	fs.DurationVar(&c.opts.SendTimeout, "send-timeout", 30*time.Second, "how long one event may take to reach the sink, retries included; undelivered changes are sent again next poll")
	fs.IntVar(&c.opts.Concurrency, "query-concurrency", 4, "queries evaluated at once")
	fs.Lookup("prometheus-timeout").Usage = "timeout of one query, also passed to Prometheus; a query that times out emits nothing that poll and keeps its state"
	fs.Lookup("port").Usage = "HTTP port for /healthz, /readyz and /metrics (no events are received)"
	fs.StringVar(&c.kubeconfig, "kubeconfig", "", "kubeconfig of the cluster holding the --leader-elect Lease (empty: in-cluster config); unused without --leader-elect")
	c.leader = leader.AddFlags(fs, "metric-watcher")
	return fn, c
}

func main() {
	fn, c := newFunction()
	fn.Main(func(ctx context.Context) error {
		if c.interval <= 0 {
			return fmt.Errorf("--interval must be positive, not %v", c.interval)
		}
		cfg, err := watcher.Load(c.configFile, c.single)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		sink, err := c.sender()
		if err != nil {
			return err
		}
		pc, err := prom.New(*c.prom, fn.Log, fn.Registry)
		if err != nil {
			return err
		}
		c.opts.Source = fn.Source()
		w, err := watcher.New(*cfg, pc, sink, c.opts, fn.Log, fn.Registry)
		if err != nil {
			return err
		}
		for _, q := range cfg.Queries {
			fn.Log.Info("watching", "metric", q.Metric, "query", q.Query, "clusterLabel", q.ClusterLabel,
				"deadbandAbsolute", q.Deadband.Absolute, "deadbandRelative", q.Deadband.Relative)
		}
		elector, err := c.elector(fn)
		if err != nil {
			return err
		}
		ln, err := net.Listen("tcp", net.JoinHostPort(flagValue(fn, "address"), flagValue(fn, "port")))
		if err != nil {
			return err
		}

		ctx, cancel := context.WithCancel(ctx)
		defer cancel()
		done := make(chan struct{})
		go func() {
			defer close(done)
			leader.RunOrAlways(ctx, elector, func(ctx context.Context) {
				ticker := time.NewTicker(c.interval)
				defer ticker.Stop()
				w.Run(ctx, ticker.C)
			})
		}()
		err = fn.ServeListener(ctx, ln, handler(fn))
		cancel() // the server stopped on its own: stop polling too
		<-done
		return err
	})
}

// elector is the Lease the polling runs under, nil with --leader-elect off.
func (c *config) elector(fn *function.Function) (*leader.Elector, error) {
	if !c.leader.Enabled() {
		return nil, nil
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", c.kubeconfig)
	if err != nil {
		return nil, fmt.Errorf("--leader-elect: cluster config (run outside a cluster with --kubeconfig, or alone with --leader-elect=false): %w", err)
	}
	cfg.UserAgent = "scoreflow-metric-watcher"
	kube, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return nil, err
	}
	return c.leader.Elector(kube, fn.Log)
}

// handler serves the runtime's /healthz, /readyz and /metrics, and 404 elsewhere: the runtime's
// own handler would put a CloudEvents receiver on /, and this function receives nothing.
func handler(fn *function.Function) http.Handler {
	rt := fn.Handler(func(context.Context, event.Event) function.Response {
		return function.Response{Status: http.StatusBadRequest} // unreachable: / is not routed here
	}, nil)
	mux := http.NewServeMux()
	for _, p := range []string{"/healthz", "/readyz", "/metrics"} {
		mux.Handle(p, rt)
	}
	mux.HandleFunc("/", func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "metric-watcher is an event source: it sends io.scoreflow.metric.changed to its sink and receives no events; "+
			"it serves /healthz, /readyz and /metrics", http.StatusNotFound)
	})
	return mux
}

func flagValue(fn *function.Function, name string) string {
	return fn.Flags.Lookup(name).Value.String()
}
