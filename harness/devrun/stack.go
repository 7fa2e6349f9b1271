// Package devrun runs scoreflow on one machine from the same YAML a cluster gets: a local hub
// (etcd, kube-apiserver, OCM CRDs) with demo ManagedClusters and a Placement, the real OCM
// placement controller, a real Prometheus fed with changing demo data, every function of deploy/
// as a process, ApiServerSources and PingSources, and the local broker with brokers/ and
// triggers/. `scoreflow run` and the end-to-end tests use it.
package devrun

import (
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	duckv1 "knative.dev/pkg/apis/duck/v1"

	"github.com/scoreflow/scoreflow/harness/broker"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/promlocal"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// The demo topology: clusters in a cluster set bound to the scoreflow namespace, and a Placement
// that picks the cluster with the most idle CPU, the score the metric-watcher -> promql-scorer path
// writes (deploy/promql-scorer.yaml, METRIC_CONFIG).
const (
	Namespace     = "scoreflow"
	ClusterSet    = "scoreflow-demo"
	Placement     = "most-idle-cpu"
	DemoResource  = "cpu-idle"
	DemoScoreName = "cpuIdle"
)

// DemoClusters are the demo ManagedClusters (the static-scorer's example table names them too).
var DemoClusters = []string{"cluster1", "cluster2", "cluster3"}

// Options configure a Stack. Zero values take the defaults shown.
type Options struct {
	// Root is the repository: brokers/, triggers/ and deploy/ are read from it (default ".").
	Root string
	// BinDir holds the function binaries, one per functions/<name> (`make build`: bin/).
	BinDir string
	// StateDir receives the kubeconfig, logs and mounted files (default: a new temporary dir).
	StateDir string
	// BrokerAddress is where the broker listens (default 127.0.0.1:0, any free port).
	BrokerAddress string
	// Demo feeds Prometheus with changing idle-CPU series for the demo clusters and points the
	// metric-watcher at them, polling every WatchInterval (default 2s).
	Demo          bool
	WatchInterval time.Duration
	// ExtraTriggers and ExtraServices are served beside the manifests' (tests add subscribers).
	ExtraTriggers []*eventingv1.Trigger
	ExtraServices broker.Services
	// OnEvent sees every step of every event through the broker.
	OnEvent func(broker.Record)
	// Log receives progress lines (default: discarded).
	Log *slog.Logger
}

// Stack is a running local scoreflow.
type Stack struct {
	Hub        *localhub.Hub
	Placement  *localhub.PlacementController
	Prometheus *promlocal.Server
	Broker     *broker.Server
	Functions  map[string]*Function // by Service name
	// BrokerURL is the ingress of the scoreflow broker; Kubeconfig is an admin kubeconfig of the hub.
	BrokerURL  string
	Kubeconfig string
	StateDir   string

	opts   Options
	cancel context.CancelFunc
	wg     sync.WaitGroup
}

// Start brings everything up; on error what was started is stopped again.
func Start(ctx context.Context, opts Options) (s *Stack, err error) {
	if opts.Root == "" {
		opts.Root = "."
	}
	if opts.BrokerAddress == "" {
		opts.BrokerAddress = "127.0.0.1:0"
	}
	if opts.WatchInterval == 0 {
		opts.WatchInterval = 2 * time.Second
	}
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	if opts.StateDir == "" {
		if opts.StateDir, err = os.MkdirTemp("", "scoreflow-run-"); err != nil {
			return nil, err
		}
	}
	logDir := filepath.Join(opts.StateDir, "logs")
	if err := os.MkdirAll(logDir, 0o755); err != nil {
		return nil, err
	}
	set, err := manifests.Load(filepath.Join(opts.Root, "brokers"), filepath.Join(opts.Root, "triggers"), filepath.Join(opts.Root, "deploy"))
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s = &Stack{opts: opts, cancel: cancel, Functions: map[string]*Function{}, StateDir: opts.StateDir,
		Kubeconfig: filepath.Join(opts.StateDir, "kubeconfig")}
	defer func() {
		if err != nil {
			s.Stop()
			s = nil
		}
	}()
	log := opts.Log

	log.Info("starting the local hub (etcd, kube-apiserver, OCM CRDs)")
	if s.Hub, err = localhub.Start(); err != nil {
		return s, err
	}
	if err = s.Hub.WriteKubeconfig(s.Kubeconfig); err != nil {
		return s, err
	}
	if err = s.topology(ctx); err != nil {
		return s, fmt.Errorf("demo topology: %w", err)
	}
	placementLog, err := os.Create(filepath.Join(logDir, "placement.log"))
	if err != nil {
		return s, err
	}
	log.Info("starting the OCM placement controller")
	if s.Placement, err = s.Hub.StartPlacementController(placementLog); err != nil {
		return s, err
	}
	log.Info("starting Prometheus")
	if s.Prometheus, err = promlocal.Run(); err != nil {
		return s, err
	}

	ln, err := net.Listen("tcp", opts.BrokerAddress)
	if err != nil {
		return s, fmt.Errorf("broker address %s: %w", opts.BrokerAddress, err)
	}
	base := "http://" + ln.Addr().String()
	brokerURL := func(namespace, name string) string { return base + "/" + namespace + "/" + name }
	s.BrokerURL = brokerURL(Namespace, "scoreflow")

	fns, err := functionsFrom(set, opts.BinDir, filepath.Join(opts.StateDir, "files"))
	if err != nil {
		_ = ln.Close()
		return s, err
	}
	extra, err := s.extraEnv(set, fns, brokerURL)
	if err != nil {
		_ = ln.Close()
		return s, err
	}
	log.Info("starting functions", "count", len(fns), "logs", logDir)
	for _, f := range fns {
		s.Functions[f.Name] = f // recorded first, so that Stop stops them if a start fails
	}
	if err = startAll(ctx, fns, extra, logDir); err != nil {
		_ = ln.Close()
		return s, err
	}
	services := broker.Services{}
	for k, v := range opts.ExtraServices {
		services[k] = v
	}
	for _, f := range fns {
		services[f.Key()] = f.URL
	}

	cfg := broker.Config{Resolver: services, OnEvent: opts.OnEvent, Log: log}
	for _, b := range set.Brokers {
		cfg.Brokers = append(cfg.Brokers, b.Object)
	}
	for _, t := range set.Triggers {
		if !localSubscriber(t.Object, services) {
			log.Info("trigger not run locally: its subscriber is not a local function", "trigger", t.Object.Name)
			continue
		}
		cfg.Triggers = append(cfg.Triggers, t.Object)
	}
	cfg.Triggers = append(cfg.Triggers, opts.ExtraTriggers...)
	for _, p := range set.PingSources {
		cfg.PingSources = append(cfg.PingSources, p.Object)
	}
	if s.Broker, err = broker.New(cfg); err != nil {
		_ = ln.Close()
		return s, err
	}
	if err = s.Broker.Start(ln); err != nil {
		return s, err
	}
	log.Info("broker ready", "url", s.BrokerURL)

	for _, src := range set.ApiServerSources {
		sender, err := sourceSender(src.Object.Spec.SourceSpec, src.Object.Namespace, brokerURL)
		if err != nil {
			return s, fmt.Errorf("ApiServerSource %s: %w", src.Object.Name, err)
		}
		if err := runAPIServerSource(runCtx, s.Hub.Config, src.Object, sender, log); err != nil {
			return s, err
		}
	}
	if opts.Demo {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.feedDemo(runCtx) }()
	}
	return s, nil
}

// Stop stops everything Start started, in reverse order, and waits for it.
func (s *Stack) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.Broker != nil {
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		_ = s.Broker.Shutdown(ctx)
		cancel()
	}
	var wg sync.WaitGroup
	for _, f := range s.Functions {
		wg.Add(1)
		go func() { defer wg.Done(); f.Stop() }()
	}
	wg.Wait()
	if s.Prometheus != nil {
		s.Prometheus.Stop()
	}
	if s.Placement != nil {
		_ = s.Placement.Stop()
	}
	if s.Hub != nil {
		_ = s.Hub.Stop()
	}
}

// topology creates the demo clusters, their cluster set, the Placement, and the optimiser demo's
// policies and workload.
func (s *Stack) topology(ctx context.Context) error {
	if err := s.Hub.AddClusterSet(ctx, ClusterSet, Namespace); err != nil {
		return err
	}
	for _, c := range DemoClusters {
		if err := s.Hub.AddCluster(ctx, c, map[string]string{localhub.ClusterSetLabel: ClusterSet}); err != nil {
			return err
		}
		if err := s.Hub.MarkAvailable(ctx, c); err != nil {
			return err
		}
	}
	if err := s.optimizerDemo(ctx); err != nil {
		return err
	}
	p := localhub.ScorePlacement(Namespace, Placement, ClusterSet, DemoResource, DemoScoreName, 1)
	_, err := s.Hub.Cluster.ClusterV1beta1().Placements(Namespace).Create(ctx, p, metav1.CreateOptions{})
	return err
}

// extraEnv is what a cluster would inject and the local run must replace: the hub kubeconfig for
// functions whose ServiceAccount mounts a token, K_SINK and K_CE_OVERRIDES for SinkBinding
// subjects, the local Prometheus, and the demo's metric-watcher configuration.
func (s *Stack) extraEnv(set *manifests.Set, fns []*Function, brokerURL func(ns, name string) string) (map[string]map[string]string, error) {
	extra := map[string]map[string]string{}
	for _, f := range fns {
		env := map[string]string{}
		if _, ok := f.Env["PROMETHEUS_URL"]; ok {
			env["PROMETHEUS_URL"] = s.Prometheus.URL
		}
		extra[f.Name] = env
	}
	for _, it := range set.Services {
		sa := it.Object.Spec.Template.Spec.ServiceAccountName
		if acct, ok := manifests.Find(set.ServiceAccounts, it.Object.Namespace, sa); ok &&
			acct.Object.AutomountServiceAccountToken != nil && *acct.Object.AutomountServiceAccountToken {
			if env, ok := extra[it.Object.Name]; ok {
				env["KUBECONFIG"] = s.Kubeconfig
			}
		}
	}
	for _, it := range set.SinkBindings {
		sb := it.Object
		env, ok := extra[sb.Spec.Subject.Name]
		if !ok {
			continue
		}
		sink, err := brokerSink(sb.Spec.Sink.Ref, sb.Namespace, brokerURL)
		if err != nil {
			return nil, fmt.Errorf("SinkBinding %s: %w", sb.Name, err)
		}
		env["K_SINK"] = sink
		if sb.Spec.CloudEventOverrides != nil {
			env["K_CE_OVERRIDES"] = ceOverridesJSON(sb.Spec.CloudEventOverrides.Extensions)
		}
	}
	if s.opts.Demo {
		if env, ok := extra["metric-watcher"]; ok {
			cfg := filepath.Join(s.StateDir, "files", "metric-watcher-demo.yaml")
			if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(cfg, []byte(demoWatcherConfig), 0o644); err != nil {
				return nil, err
			}
			env["CONFIG"] = cfg
			env["INTERVAL"] = s.opts.WatchInterval.String()
		}
	}
	return extra, nil
}

func brokerSink(ref *duckv1.KReference, namespace string, brokerURL func(ns, name string) string) (string, error) {
	if ref == nil || ref.Kind != "Broker" {
		return "", errors.New("only Broker sinks run locally")
	}
	ns := ref.Namespace
	if ns == "" {
		ns = namespace
	}
	return brokerURL(ns, ref.Name), nil
}

func sourceSender(spec duckv1.SourceSpec, namespace string, brokerURL func(ns, name string) string) (*function.Sender, error) {
	sink, err := brokerSink(spec.Sink.Ref, namespace, brokerURL)
	if err != nil {
		return nil, err
	}
	overrides := ""
	if spec.CloudEventOverrides != nil {
		overrides = ceOverridesJSON(spec.CloudEventOverrides.Extensions)
	}
	return function.NewSender(sink, overrides)
}

func localSubscriber(t *eventingv1.Trigger, services broker.Services) bool {
	ref := t.Spec.Subscriber.Ref
	if ref == nil {
		return true // a URI: reachable or not, the broker will tell
	}
	ns := ref.Namespace
	if ns == "" {
		ns = t.Namespace
	}
	_, ok := services[ns+"/"+ref.Name]
	return ok
}

// startAll starts the functions concurrently (each waits for its own /readyz).
func startAll(ctx context.Context, fns []*Function, extra map[string]map[string]string, logDir string) error {
	errs := make(chan error, len(fns))
	for _, f := range fns {
		go func() { errs <- f.start(ctx, extra[f.Name], logDir, 60*time.Second) }()
	}
	var all []error
	for range fns {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}
