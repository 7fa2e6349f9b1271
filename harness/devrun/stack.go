// Package devrun runs scoreflow on one machine from the same YAML a cluster gets: a local hub
// (etcd, kube-apiserver, OCM CRDs) with demo ManagedClusters and a Placement, the real OCM
// placement controller, a real Prometheus fed with changing demo data, every function of the
// variant as a process (with Options.PythonExample, also the Python scorer of
// examples/python-scorer), and the stock Knative Eventing (harness/knlocal) running the variant's
// objects unmodified: its broker, PingSource and ApiServerSource adapters, SinkBindings and
// webhook. The variant is the kustomization config/<Variant> built as `kubectl apply -k` builds
// it: config/default, with Options.OIDC (`scoreflow run --oidc`, test/oidc) config/oidc on
// Knative with sender identity on, with Options.TLS (`scoreflow run --tls`, test/tls) config/tls
// with Knative's transport encryption strict and every hop HTTPS, with both config/oidc-tls.
// `scoreflow run` and the end-to-end tests use it.
package devrun

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/scoreflow/scoreflow/harness/jaeger"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/scorespage"
	"github.com/scoreflow/scoreflow/tools"
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
	// Root is the repository: config/<variant> is built from it (default ".").
	Root string
	// BinDir holds the function binaries, one per functions/<name> (`make build`: bin/).
	BinDir string
	// StateDir receives the kubeconfig, logs and mounted files (default: a new temporary dir).
	StateDir string
	// Demo feeds Prometheus with changing idle-CPU series for the demo clusters and points the
	// metric-watcher at them, polling every WatchInterval (default 2s).
	Demo bool
	// WatcherConfig, when set, replaces the metric-watcher's configuration (its ConfigMap's
	// config.yaml, package pkg/watcher) and makes it poll every WatchInterval: for tests that
	// write their own series to the local Prometheus and watch them travel. Demo sets the demo's.
	WatcherConfig string
	WatchInterval time.Duration
	// DemoManual, with Demo, leaves the demo series to the caller (PushIdle) instead of feeding
	// them waves: a test decides when a metric changes.
	DemoManual bool
	// OIDC runs with Knative's sender identity on (authentication-oidc, default-authorization-mode
	// deny-all) and the variant with oidc/ (config/oidc, or config/oidc-tls with TLS): every
	// Trigger presents a token for its function's audience, every function verifies it, the
	// SinkBinding-bound functions send with the token Knative mounts for them, and the Broker
	// admits only what its EventPolicy names.
	OIDC bool
	// TLS runs with Knative's transport encryption strict (transport-encryption: strict, with a
	// local CA standing in for cert-manager's knative-eventing-ca-issuer): the Broker, its channel
	// and Triggers have only https addresses with the CA as CACerts, and every function serves
	// HTTPS with a certificate of that CA (as Serving's cluster-local-domain-tls) and trusts it
	// for what it sends (K_CA_CERTS). BrokerURL is then the ingress's https port and Client the
	// client that trusts the CA.
	TLS bool
	// OnEvent sees every event the broker delivers to cloudevents-player's Trigger (all of them:
	// what a user would watch in the player), decoded.
	OnEvent func(event.Event)
	// PythonExample also runs examples/python-scorer (its Service as a python3 process, its Trigger
	// and PingSource applied), as `scoreflow run` does; tests that start their own leave it off.
	PythonExample bool
	// FunctionEnv adds KEY=VALUE pairs to a function's environment, by Service name, after what
	// its manifest and the cluster give it: a test tunes a function's flags (their env names)
	// without another manifest.
	FunctionEnv map[string][]string
	// Tracing runs Jaeger (harness/jaeger) and has Knative's data plane (config-observability)
	// and every function (TRACING_PROTOCOL, TRACING_ENDPOINT, TRACING_SAMPLING_RATE) export every
	// trace's spans to it: one event's trace then shows each hop, Knative's and scoreflow's.
	Tracing bool
	// LockWait is how long to wait for another local Knative on this machine to stop (0: fail).
	LockWait time.Duration
	// Log receives progress lines (default: discarded).
	Log *slog.Logger
}

// Stack is a running local scoreflow.
type Stack struct {
	Hub        *localhub.Hub
	Placement  *localhub.PlacementController
	Prometheus *promserver.Server
	Knative    *knlocal.Knative
	// Jaeger holds the traces, with Options.Tracing (nil otherwise).
	Jaeger    *jaeger.Jaeger
	Functions map[string]*Function // by Service name
	// BrokerURL is the ingress of the scoreflow broker; Kubeconfig is an admin kubeconfig of the hub.
	BrokerURL string
	// Client reaches BrokerURL and the functions (with Options.TLS, trusting the local CA only).
	Client     *http.Client
	Kubeconfig string
	StateDir   string

	opts   Options
	runCtx context.Context // ends at Stop
	python *proc.Process   // examples/python-scorer, when python3 is there
	cancel context.CancelFunc
	wg     sync.WaitGroup
	player *http.Server
}

// Start brings everything up; on error what was started is stopped again.
func Start(ctx context.Context, opts Options) (s *Stack, err error) {
	if opts.Root == "" {
		opts.Root = "."
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
	// Every server is checked before any starts: a missing one is named with the command that
	// builds it, not found half-way through the start.
	if err := tools.Missing(tools.ForRun...); err != nil {
		return nil, err
	}
	variant := Variant(opts.OIDC, opts.TLS)
	built, err := manifests.Build(filepath.Join(opts.Root, "config", variant))
	if err != nil {
		return nil, err
	}
	set, err := manifests.Decode(built)
	if err != nil {
		return nil, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	s = &Stack{opts: opts, runCtx: runCtx, cancel: cancel, Functions: map[string]*Function{}, StateDir: opts.StateDir,
		Kubeconfig: filepath.Join(opts.StateDir, "kubeconfig"), Client: &http.Client{Timeout: 30 * time.Second}}
	defer func() {
		if err != nil {
			s.Stop()
			s = nil
		}
	}()
	log := opts.Log

	log.Info("starting the local hub (etcd, kube-apiserver, OCM CRDs, addon CRDs)")
	if s.Hub, err = localhub.Start(); err != nil {
		return s, err
	}
	if err = s.Hub.WriteKubeconfig(s.Kubeconfig); err != nil {
		return s, err
	}
	// The agent gateway admits agents by their ManagedClusterAddOns.
	if err = s.Hub.InstallAddonCRDs(); err != nil {
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
	if s.Prometheus, err = promserver.Run(); err != nil {
		return s, err
	}
	knOpts := knlocal.Options{StateDir: opts.StateDir, LockWait: opts.LockWait, Log: log, Features: map[string]string{}}
	if opts.Tracing {
		log.Info("starting Jaeger (traces)")
		if s.Jaeger, err = jaeger.Start(100_000); err != nil {
			return s, err
		}
		knOpts.Observability = knlocal.TracingTo(s.Jaeger.OTLPEndpoint)
	}
	log.Info("starting Knative Eventing (controllers, webhook, broker ingress and filter, in-memory channel)", "senderIdentity", opts.OIDC, "strictTLS", opts.TLS)
	if opts.OIDC {
		maps.Copy(knOpts.Features, knlocal.OIDCFeatures())
	}
	if opts.TLS {
		maps.Copy(knOpts.Features, knlocal.StrictTLSFeatures())
	}
	if s.Knative, err = knlocal.Start(ctx, s.Hub, knOpts); err != nil {
		return s, err
	}
	s.BrokerURL = s.Knative.IngressURL + "/" + Namespace + "/scoreflow"
	scheme := "http"
	if opts.TLS {
		s.BrokerURL = s.Knative.IngressTLSURL + "/" + Namespace + "/scoreflow"
		s.Client.Transport = &http.Transport{TLSClientConfig: &tls.Config{RootCAs: s.Knative.CA.Pool(), MinVersion: tls.VersionTLS12}}
		scheme = "https"
		if err = os.WriteFile(s.CAFile(), s.Knative.CA.PEM(), 0o644); err != nil {
			return s, err
		}
	}

	log.Info("applying config/"+variant+" as kubectl apply -k builds it (admitted by Knative's webhook)", "objects", len(built))
	objs := make([]*unstructured.Unstructured, len(built))
	for i, it := range built {
		objs[i] = it.Object
	}
	if err = s.Knative.Applier.Apply(ctx, objs...); err != nil {
		return s, err
	}

	fns, err := functionsFrom(set, opts.BinDir, filepath.Join(opts.StateDir, "files"))
	if err != nil {
		return s, err
	}
	for _, f := range fns {
		s.Functions[f.Name] = f // recorded first, so that Stop stops them if a start fails
		if !f.Addressable() {
			// A source's pods are reached by no one but their probes and Prometheus: plain
			// HTTP, as on a cluster, where no Serving certificate is issued for a Deployment.
			if err = f.listen("http", s.Client); err != nil {
				return s, err
			}
			continue
		}
		if err = f.listen(scheme, s.Client); err != nil {
			return s, err
		}
		if err = s.Knative.ServeService(ctx, f.Namespace, f.Name, f.URL); err != nil {
			return s, err
		}
	}
	if err = s.servePlayer(ctx, set); err != nil {
		return s, err
	}
	// A SinkBinding is Ready once it has put K_SINK into its subject's pod template.
	if err = s.Knative.WaitReady(ctx, Namespace, 60*time.Second, knlocal.SinkBindingKind); err != nil {
		return s, err
	}
	extra, err := s.extraEnv(ctx, set, fns)
	if err != nil {
		return s, err
	}
	log.Info("starting functions", "count", len(fns), "logs", logDir)
	if err = startAll(ctx, fns, extra, logDir); err != nil {
		return s, err
	}
	if opts.PythonExample {
		log.Info("starting the Python example scorer (examples/python-scorer) with its Trigger and PingSource")
		if err = s.startPythonScorer(ctx, logDir); err != nil {
			return s, err
		}
	}
	kinds := []schema.GroupVersionKind{knlocal.BrokerKind, knlocal.TriggerKind, knlocal.PingSourceKind, knlocal.ApiServerSourceKind}
	if opts.OIDC {
		kinds = append(kinds, knlocal.EventPolicyKind)
	}
	if err = s.Knative.WaitReady(ctx, Namespace, 90*time.Second, kinds...); err != nil {
		return s, err
	}
	log.Info("broker ready", "url", s.BrokerURL)
	if opts.Demo && !opts.DemoManual {
		s.wg.Add(1)
		go func() { defer s.wg.Done(); s.feedDemo(runCtx) }()
	}
	return s, nil
}

// Variant is the directory of config/ a run with sender identity (oidc) and strict transport
// encryption (tls) on or off applies.
func Variant(oidc, tls bool) string {
	switch {
	case oidc && tls:
		return "oidc-tls"
	case oidc:
		return "oidc"
	case tls:
		return "tls"
	}
	return "default"
}

// Stop stops everything Start started, in reverse order, and waits for it.
func (s *Stack) Stop() {
	if s.cancel != nil {
		s.cancel()
	}
	s.wg.Wait()
	if s.Knative != nil {
		s.Knative.Stop()
	}
	if s.player != nil {
		_ = s.player.Close()
	}
	var wg sync.WaitGroup
	for _, f := range s.Functions {
		wg.Add(1)
		go func() { defer wg.Done(); f.Stop() }()
	}
	wg.Wait()
	if s.python != nil {
		s.python.Stop(5 * time.Second)
	}
	if s.Prometheus != nil {
		s.Prometheus.Stop()
	}
	if s.Jaeger != nil {
		s.Jaeger.Stop() // after the functions, whose last spans it takes as they stop
	}
	if s.Placement != nil {
		_ = s.Placement.Stop()
	}
	if s.Hub != nil {
		_ = s.Hub.Stop()
	}
}

// PageName is the Service of deploy/ that serves the scores page.
const PageName = "scores-page"

// PageURL is the address of the scores page (functions/scores-page, run like every function of
// deploy/), empty when deploy/ has none.
func (s *Stack) PageURL() string {
	if f, ok := s.Functions[PageName]; ok {
		return f.URL + scorespage.Path
	}
	return ""
}

// servePlayer stands in for every Service that is not one of scoreflow's functions
// (cloudevents-player): an in-process receiver that hands each event it gets to OnEvent.
func (s *Stack) servePlayer(ctx context.Context, set *manifests.Set) error {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return err
	}
	s.player = &http.Server{ReadHeaderTimeout: 10 * time.Second, Handler: http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		e, err := binding.ToEvent(r.Context(), cehttp.NewMessageFromHttpRequest(r))
		if err != nil {
			w.WriteHeader(http.StatusBadRequest)
			return
		}
		if s.opts.OnEvent != nil {
			s.opts.OnEvent(*e)
		}
		w.WriteHeader(http.StatusAccepted)
	})}
	url := "http://" + ln.Addr().String()
	if s.opts.TLS {
		pair, err := s.serviceKeyPair("cloudevents-player")
		if err != nil {
			_ = ln.Close()
			return err
		}
		s.player.TLSConfig = &tls.Config{Certificates: []tls.Certificate{pair}}
		ln = tls.NewListener(ln, s.player.TLSConfig)
		url = "https://" + ln.Addr().String()
	}
	go func() { _ = s.player.Serve(ln) }()
	for _, it := range set.Services {
		if _, ours := s.Functions[it.Object.Name]; !ours {
			if err := s.Knative.ServeService(ctx, it.Object.Namespace, it.Object.Name, url); err != nil {
				return err
			}
		}
	}
	return nil
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

// extraEnv is what a cluster would give each function beyond its manifest: HTTP_PROXY to reach
// cluster services; K_SINK and K_CE_OVERRIDES as the SinkBinding injected them on the hub; its
// namespace (POD_NAMESPACE, where a pod reads its ServiceAccount's namespace file); its
// projected ServiceAccount tokens, kept current; for a ServiceAccount that mounts a token, a
// kubeconfig with a token of that ServiceAccount (so each function has exactly the RBAC deploy/
// grants it) and that token as a file; the local Prometheus; the demo's metric-watcher
// configuration.
func (s *Stack) extraEnv(ctx context.Context, set *manifests.Set, fns []*Function) (map[string][]string, error) {
	extra := map[string][]string{}
	ca := filepath.Join(s.StateDir, "hub-ca.crt")
	if err := os.WriteFile(ca, s.Hub.Config.CAData, 0o644); err != nil {
		return nil, err
	}
	for _, f := range fns {
		for path, tok := range f.Tokens {
			ttl := time.Hour // the API's default expirationSeconds
			if tok.ExpirationSeconds != nil {
				ttl = time.Duration(*tok.ExpirationSeconds) * time.Second
			}
			if err := s.Knative.ProjectToken(s.runCtx, f.Namespace, f.ServiceAccount, tok.Audience, ttl, path); err != nil {
				return nil, fmt.Errorf("%s: %w", f.Name, err)
			}
		}
		// The mcp-server verifies its callers' cluster-issued tokens with the API server's keys,
		// which a pod reads at kubernetes.default.svc with its mounted CA and token: locally, the
		// hub (its token below, where its account mounts one).
		env := []string{"TOKEN_DISCOVERY_URL=" + s.Hub.Config.Host, "TOKEN_CA_FILE=" + ca,
			"TOKEN_DISCOVERY_TOKEN_FILE=" + filepath.Join(s.StateDir, "files", f.Name, "no-serviceaccount-token")}
		if _, ok := f.Env["PROMETHEUS_URL"]; ok {
			env = append(env, "PROMETHEUS_URL="+s.Prometheus.URL)
		}
		onHub, err := s.Knative.WorkloadEnv(ctx, f.Kind, f.Namespace, f.Name)
		if err != nil {
			return nil, err
		}
		// A pod learns its namespace from its mounted ServiceAccount namespace file (or the
		// downward API): leader election puts its Lease there.
		env = append(env, "POD_NAMESPACE="+f.Namespace)
		if s.Jaeger != nil {
			// What an operator puts in scoreflow-observability (deploy/observability.yaml).
			env = append(env, "TRACING_PROTOCOL=http/protobuf", "TRACING_ENDPOINT="+s.Jaeger.OTLPEndpoint, "TRACING_SAMPLING_RATE=1")
		}
		for _, k := range []string{"K_SINK", "K_CE_OVERRIDES"} {
			if v, ok := onHub[k]; ok {
				env = append(env, k+"="+v)
			}
		}
		if s.opts.OIDC {
			id, err := s.identityEnv(ctx, f, boundBySink(set, f))
			if err != nil {
				return nil, err
			}
			env = append(env, id...)
		}
		if s.opts.TLS && !f.Addressable() {
			// A source serves no TLS of its own; it trusts what its SinkBinding injected.
			ca := onHub["K_CA_CERTS"]
			if ca == "" {
				ca = string(s.Knative.CA.PEM())
			}
			env = append(env, "K_CA_CERTS="+ca)
		} else if s.opts.TLS {
			tlsEnv, err := s.tlsEnv(f, onHub["K_CA_CERTS"])
			if err != nil {
				return nil, err
			}
			env = append(env, tlsEnv...)
		}
		extra[f.Name] = env
	}
	for _, w := range set.Workloads() {
		ns, name := w.ObjectMeta.Namespace, w.ObjectMeta.Name
		sa := w.Template.Spec.ServiceAccountName
		acct, ok := manifests.Find(set.ServiceAccounts, ns, sa)
		if _, run := extra[name]; !run || !ok || acct.Object.AutomountServiceAccountToken == nil || !*acct.Object.AutomountServiceAccountToken {
			continue
		}
		kubeconfig, err := s.Knative.ServiceAccountKubeconfig(ctx, ns, sa)
		if err != nil {
			return nil, err
		}
		token := filepath.Join(s.StateDir, "files", name, "serviceaccount", "token")
		if err := s.Knative.ProjectToken(s.runCtx, ns, sa, "", time.Hour, token); err != nil {
			return nil, err
		}
		extra[name] = append(extra[name], "KUBECONFIG="+kubeconfig, "TOKEN_DISCOVERY_TOKEN_FILE="+token)
	}
	watcherConfig := s.opts.WatcherConfig
	if watcherConfig == "" && s.opts.Demo {
		watcherConfig = demoWatcherConfig
	}
	if watcherConfig != "" {
		if _, ok := extra["metric-watcher"]; ok {
			cfg := filepath.Join(s.StateDir, "files", "metric-watcher-local.yaml")
			if err := os.MkdirAll(filepath.Dir(cfg), 0o755); err != nil {
				return nil, err
			}
			if err := os.WriteFile(cfg, []byte(watcherConfig), 0o644); err != nil {
				return nil, err
			}
			extra["metric-watcher"] = append(extra["metric-watcher"], "CONFIG="+cfg, "INTERVAL="+s.opts.WatchInterval.String())
		}
	}
	for name := range s.opts.FunctionEnv {
		if _, ok := extra[name]; !ok {
			return nil, fmt.Errorf("Options.FunctionEnv: deploy/ runs no function %q", name)
		}
	}
	for name, env := range extra {
		extra[name] = append(append(s.Knative.ProxyEnv(), env...), s.opts.FunctionEnv[name]...)
	}
	return extra, nil
}

// startAll starts the functions concurrently (each waits for its own /readyz).
func startAll(ctx context.Context, fns []*Function, env map[string][]string, logDir string) error {
	errs := make(chan error, len(fns))
	for _, f := range fns {
		go func() { errs <- f.start(ctx, env[f.Name], logDir, 60*time.Second) }()
	}
	var all []error
	for range fns {
		if err := <-errs; err != nil {
			all = append(all, err)
		}
	}
	return errors.Join(all...)
}

// boundBySink reports whether a SinkBinding of set has f's workload as its subject.
func boundBySink(set *manifests.Set, f *Function) bool {
	for _, b := range set.SinkBindings {
		subj := b.Object.Spec.Subject
		if b.Object.Namespace == f.Namespace && subj.APIVersion == f.Kind.GroupVersion().String() && subj.Kind == f.Kind.Kind && subj.Name == f.Name {
			return true
		}
	}
	return false
}

// tlsEnv is what a function's pod has with transport encryption on: the certificate of its
// Service (Serving's cluster-local-domain-tls on a cluster) to serve HTTPS with, and K_CA_CERTS to
// trust what it sends to: as its SinkBinding injected it on the hub when it has one, else the CA.
func (s *Stack) tlsEnv(f *Function, sinkCA string) ([]string, error) {
	cert, key, err := s.Knative.IssueServiceCert(f.Namespace, f.Name, filepath.Join(s.StateDir, "files", f.Name, "tls"))
	if err != nil {
		return nil, err
	}
	if sinkCA == "" {
		sinkCA = string(s.Knative.CA.PEM())
	}
	return []string{"TLS_CERT_FILE=" + cert, "TLS_KEY_FILE=" + key, "K_CA_CERTS=" + sinkCA}, nil
}

// serviceKeyPair issues the certificate of a Service served in process (cloudevents-player).
func (s *Stack) serviceKeyPair(name string) (tls.Certificate, error) {
	cert, key, err := s.Knative.IssueServiceCert(Namespace, name, filepath.Join(s.StateDir, "files", name, "tls"))
	if err != nil {
		return tls.Certificate{}, err
	}
	return tls.LoadX509KeyPair(cert, key)
}

// CAFile is where a run with Options.TLS writes the local CA's certificate, for clients to trust
// (scoreflow send --ca-file, curl --cacert).
func (s *Stack) CAFile() string { return filepath.Join(s.StateDir, "ca.crt") }
