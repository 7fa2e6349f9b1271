// Package knlocal runs the stock Knative Eventing (the binaries `make tools` builds from
// knative.dev/eventing, unmodified) as local processes against a hub's API server, with no
// containers: the controllers, the webhook, the multi-tenant channel-based broker's ingress and
// filter, and the in-memory channel dispatcher. It supplies what a cluster would: Knative's CRDs,
// ConfigMaps and system objects from the eventing module itself; cluster DNS and kube-proxy (an
// informer-backed HTTP proxy for *.svc.cluster.local); EndpointSlices and Deployment statuses that a
// kubelet would publish; a stand-in for Knative Serving's Service whose status.address points at a
// local process; and a kubelet for what Knative creates at run time (the PingSource adapter, one
// ApiServerSource adapter per source with that source's ServiceAccount identity).
//
// The in-memory channel dispatcher listens on the fixed ports 8080 and 8443, so one stack runs per
// machine at a time; Start takes a machine-wide lock and says who holds the ports otherwise.
package knlocal

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"sync"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/scoreflow/scoreflow/harness/localca"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/proc"
	"github.com/scoreflow/scoreflow/tools"
)

// EventingModule is the module whose binaries and YAML this package runs.
const EventingModule = "knative.dev/eventing"

// SystemNamespace is where Knative's own objects live.
const SystemNamespace = "knative-eventing"

// ClusterDomain is the cluster DNS suffix the proxy serves.
const ClusterDomain = "cluster.local"

// The dispatcher's ports are constants in knative.dev/eventing
// (pkg/reconciler/inmemorychannel/dispatcher/controller.go); everything else is chosen free.
const (
	DispatcherHTTPPort  = 8080
	DispatcherHTTPSPort = 8443
)

// lockPath serialises stacks on one machine (go test runs packages in parallel).
var lockPath = filepath.Join(os.TempDir(), "scoreflow-knlocal.lock")

// Options configure Start.
type Options struct {
	// StateDir receives logs and kubeconfigs (default: a new temporary directory).
	StateDir string
	// LockWait is how long Start waits for another stack on this machine to stop (0: fail at once).
	LockWait time.Duration
	// Log receives progress lines (default: discarded).
	Log *slog.Logger
	// Features are set in config-features before Knative starts (default: Knative's own
	// defaults, sender identity and transport encryption off); OIDCFeatures turns sender identity
	// on, StrictTLSFeatures transport encryption (with a local CA standing in for cert-manager).
	Features map[string]string
	// Observability is set in config-observability before Knative starts, in its keys
	// (tracing-protocol, tracing-endpoint, tracing-sampling-rate, ...): Knative's data plane
	// reads it once, at start (default: its own, nothing exported).
	Observability map[string]string
}

// Knative is a running Knative Eventing.
type Knative struct {
	// IngressURL is the broker ingress: IngressURL + "/<namespace>/<broker>" accepts CloudEvents.
	IngressURL string
	// ProxyURL is the cluster-DNS stand-in; processes that send to *.svc.cluster.local use it as
	// HTTP_PROXY (Env adds it).
	ProxyURL string
	// Applier applies YAML to the hub (the webhook admits it, as on a cluster).
	Applier *Applier
	// LogDir holds one log per process.
	LogDir string
	// With transport encryption on: CA issued the data plane's server certificates (Knative's
	// addresses carry it as CACerts), and IngressTLSURL is the broker ingress's https port (in
	// strict mode IngressURL answers 404).
	CA            *localca.CA
	IngressTLSURL string
	caFile        string

	hub      *localhub.Hub
	kube     kubernetes.Interface
	binDir   string
	state    string
	log      *slog.Logger
	lock     *os.File
	cancel   context.CancelFunc
	wg       sync.WaitGroup
	mu       sync.Mutex
	procs    []*proc.Process // in start order
	kubelet  *kubelet
	proxySrv *http.Server
	ports    ports
}

// ports of the processes that are not fixed by Knative.
type ports struct {
	webhook, imcWebhook, ingress, ingressTLS, filter, filterTLS, proxy int
}

// Start brings Knative Eventing up against hub and waits until its webhook admits objects.
func Start(ctx context.Context, hub *localhub.Hub, opts Options) (k *Knative, err error) {
	if opts.Log == nil {
		opts.Log = slog.New(slog.NewTextHandler(io.Discard, nil))
	}
	binDir := filepath.Join(tools.BinDir(), tools.Knative)
	if _, err := os.Stat(filepath.Join(binDir, "controller")); err != nil {
		return nil, fmt.Errorf("the Knative Eventing binaries are not built in %s: run `make tools` first", binDir)
	}
	if opts.StateDir == "" {
		if opts.StateDir, err = os.MkdirTemp("", "scoreflow-knative-"); err != nil {
			return nil, err
		}
	}
	k = &Knative{hub: hub, kube: hub.Kube, binDir: binDir, state: opts.StateDir, log: opts.Log,
		LogDir: filepath.Join(opts.StateDir, "knative-logs")}
	if err := os.MkdirAll(k.LogDir, 0o755); err != nil {
		return nil, err
	}
	if k.lock, err = takeLock(opts.LockWait, opts.Log); err != nil {
		return nil, err
	}
	defer func() {
		if err != nil {
			k.Stop()
			k = nil
		}
	}()
	for _, p := range []int{DispatcherHTTPPort, DispatcherHTTPSPort} {
		if err := proc.PortFree(p); err != nil {
			return k, fmt.Errorf("Knative's in-memory channel dispatcher needs ports %d and %d, and %w: stop what holds it (`ss -ltnp 'sport = :%d'`)",
				DispatcherHTTPPort, DispatcherHTTPSPort, err, p)
		}
	}
	if err := k.choosePorts(); err != nil {
		return k, err
	}
	if k.Applier, err = NewApplier(hub.Config); err != nil {
		return k, err
	}
	runCtx, cancel := context.WithCancel(context.Background())
	k.cancel = cancel

	start := time.Now()
	mod, err := localhub.ModuleDir(EventingModule)
	if err != nil {
		return k, err
	}
	if err := k.install(ctx, filepath.Join(mod, "config")); err != nil {
		return k, fmt.Errorf("installing Knative Eventing objects: %w", err)
	}
	if tlsOn(opts.Features) {
		if err := k.setupTLS(ctx, mod); err != nil {
			return k, fmt.Errorf("transport encryption: %w", err)
		}
	}
	if err := k.configureFeatures(ctx, opts.Features); err != nil {
		return k, fmt.Errorf("Knative features: %w", err)
	}
	if err := k.configureObservability(ctx, opts.Observability); err != nil {
		return k, fmt.Errorf("Knative observability: %w", err)
	}
	k.log.Info("Knative Eventing objects installed", "took", time.Since(start).Round(time.Millisecond))
	if err := k.startProxy(runCtx); err != nil {
		return k, err
	}
	if err := k.startSystem(ctx); err != nil {
		return k, err
	}
	if err := k.registerWebhooks(ctx, filepath.Join(mod, "config", "core", "webhooks")); err != nil {
		return k, err
	}
	if err := k.reloadDiscovery(ctx, opts.Features); err != nil {
		return k, err
	}
	if k.kubelet, err = startKubelet(runCtx, k); err != nil {
		return k, err
	}
	k.log.Info("Knative Eventing running", "took", time.Since(start).Round(time.Millisecond), "logs", k.LogDir)
	return k, nil
}

// takeLock holds a machine-wide lock for the life of a stack, waiting up to wait for another one.
// Waiting is logged when it starts and ends, so that a run's start-up time can be told from the wait.
func takeLock(wait time.Duration, log *slog.Logger) (*os.File, error) {
	f, err := os.OpenFile(lockPath, os.O_CREATE|os.O_RDWR, 0o666)
	if err != nil {
		return nil, err
	}
	start := time.Now()
	deadline := start.Add(wait)
	for waited := false; ; waited = true {
		if err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB); err == nil {
			if waited {
				log.Info("took the machine-wide lock of the local Knative", "waited", time.Since(start).Round(time.Second).String())
			}
			return f, nil
		}
		if !waited && wait > 0 {
			log.Info("waiting for another local Knative (scoreflow run or a test) to stop", "lock", lockPath, "upTo", wait.String())
		}
		if time.Now().After(deadline) {
			_ = f.Close()
			return nil, fmt.Errorf("another local Knative (scoreflow run or a test) is running on this machine (lock %s); one runs at a time because the in-memory channel dispatcher's ports are fixed", lockPath)
		}
		time.Sleep(250 * time.Millisecond)
	}
}

func (k *Knative) choosePorts() error {
	for _, p := range []*int{&k.ports.webhook, &k.ports.imcWebhook, &k.ports.ingress, &k.ports.ingressTLS,
		&k.ports.filter, &k.ports.filterTLS, &k.ports.proxy} {
		port, err := proc.FreePort()
		if err != nil {
			return err
		}
		*p = port
	}
	k.IngressURL = fmt.Sprintf("http://127.0.0.1:%d", k.ports.ingress)
	k.ProxyURL = fmt.Sprintf("http://127.0.0.1:%d", k.ports.proxy)
	return nil
}

func (k *Knative) startProxy(ctx context.Context) error {
	p, err := newServiceProxy(ctx, k.kube, ClusterDomain)
	if err != nil {
		return err
	}
	ln, err := net.Listen("tcp", fmt.Sprintf("127.0.0.1:%d", k.ports.proxy))
	if err != nil {
		return fmt.Errorf("service proxy: %w", err)
	}
	k.proxySrv = &http.Server{Handler: p, ReadHeaderTimeout: 10 * time.Second}
	k.wg.Add(1)
	go func() { defer k.wg.Done(); _ = k.proxySrv.Serve(ln) }()
	return nil
}

// ProxyEnv is what a local process needs to reach cluster services: the service proxy as
// HTTP_PROXY, and with transport encryption on as HTTPS_PROXY too (loopback addresses still go
// direct).
func (k *Knative) ProxyEnv() []string {
	env := []string{"HTTP_PROXY=" + k.ProxyURL, "http_proxy=" + k.ProxyURL,
		"NO_PROXY=127.0.0.1,localhost", "no_proxy=127.0.0.1,localhost"}
	if k.CA != nil {
		env = append(env, "HTTPS_PROXY="+k.ProxyURL, "https_proxy="+k.ProxyURL)
	}
	return env
}

// Env is the environment of Knative's own processes: the parent's, ProxyEnv, with transport
// encryption on the local CA among the system roots (setupTLS says why), and extra KEY=VALUE
// pairs (later entries win).
func (k *Knative) Env(extra ...string) []string {
	env := append(os.Environ(), k.ProxyEnv()...)
	if k.caFile != "" {
		env = append(env, "SSL_CERT_FILE="+k.caFile)
	}
	return append(env, extra...)
}

// run starts a Knative binary with the common environment of Knative's system processes.
func (k *Knative) run(name, binary string, extra ...string) (*proc.Process, error) {
	profiling, err := proc.FreePort()
	if err != nil {
		return nil, err
	}
	env := k.Env(append([]string{
		"KUBECONFIG=" + k.hub.KubeconfigPath(),
		"SYSTEM_NAMESPACE=" + SystemNamespace,
		"CONFIG_LOGGING_NAME=config-logging",
		"CONFIG_OBSERVABILITY_NAME=config-observability",
		"METRICS_DOMAIN=knative.dev/eventing",
		// Without it the domain is read from /etc/resolv.conf, which a CI runner may set otherwise.
		"CLUSTER_DOMAIN=" + ClusterDomain,
		fmt.Sprintf("PROFILING_PORT=%d", profiling),
		"POD_NAME=" + name + "-local-0",
	}, extra...)...)
	out, err := os.Create(filepath.Join(k.LogDir, name+".log"))
	if err != nil {
		return nil, err
	}
	p, err := proc.Start(proc.Spec{Name: name, Path: filepath.Join(k.binDir, binary), Env: env, Out: out})
	if err != nil {
		_ = out.Close()
		return nil, err
	}
	k.mu.Lock()
	k.procs = append(k.procs, p)
	k.mu.Unlock()
	return p, nil
}

// startSystem starts Knative's processes, the dispatcher first: it must win the fixed ports, which
// the other processes' health probes also try to bind (they lose harmlessly).
func (k *Knative) startSystem(ctx context.Context) error {
	d, err := k.run("imc-dispatcher", "channel_dispatcher", "CONTAINER_NAME=dispatcher",
		"MAX_IDLE_CONNS=1000", "MAX_IDLE_CONNS_PER_HOST=1000")
	if err != nil {
		return err
	}
	for _, port := range []int{DispatcherHTTPPort, DispatcherHTTPSPort} {
		if err := d.WaitPort(fmt.Sprintf("127.0.0.1:%d", port), 60*time.Second); err != nil {
			return k.withLog(err, d)
		}
	}
	webhook, err := k.run("eventing-webhook", "webhook", "WEBHOOK_NAME=eventing-webhook",
		fmt.Sprintf("WEBHOOK_PORT=%d", k.ports.webhook), "SINK_BINDING_SELECTION_MODE=exclusion")
	if err != nil {
		return err
	}
	// Any image names do: the controllers put them into Deployments that our kubelet runs by name.
	if _, err := k.run("eventing-controller", "controller",
		"APISERVER_RA_IMAGE="+adapterImage, "AUTH_PROXY_IMAGE=ko://knative.dev/eventing/cmd/auth_proxy"); err != nil {
		return err
	}
	if _, err := k.run("mt-broker-controller", "mtchannel_broker"); err != nil {
		return err
	}
	if _, err := k.run("imc-controller", "channel_controller", "WEBHOOK_NAME=inmemorychannel-webhook",
		fmt.Sprintf("WEBHOOK_PORT=%d", k.ports.imcWebhook), "DISPATCHER_IMAGE=ko://knative.dev/eventing/cmd/in_memory/channel_dispatcher"); err != nil {
		return err
	}
	ingress, err := k.run("mt-broker-ingress", "ingress", "CONTAINER_NAME=ingress", "NAMESPACE="+SystemNamespace,
		fmt.Sprintf("INGRESS_PORT=%d", k.ports.ingress), fmt.Sprintf("INGRESS_PORT_HTTPS=%d", k.ports.ingressTLS))
	if err != nil {
		return err
	}
	filter, err := k.run("mt-broker-filter", "filter", "CONTAINER_NAME=filter", "NAMESPACE="+SystemNamespace,
		fmt.Sprintf("FILTER_PORT=%d", k.ports.filter), fmt.Sprintf("FILTER_PORT_HTTPS=%d", k.ports.filterTLS))
	if err != nil {
		return err
	}
	for p, port := range map[*proc.Process]int{webhook: k.ports.webhook, ingress: k.ports.ingress, filter: k.ports.filter} {
		if err := p.WaitPort(fmt.Sprintf("127.0.0.1:%d", port), 90*time.Second); err != nil {
			return k.withLog(err, p)
		}
	}
	return nil
}

// withLog adds the end of a process's log to err: a test log is often all there is to go on.
func (k *Knative) withLog(err error, p *proc.Process) error {
	log := filepath.Join(k.LogDir, p.Name+".log")
	return fmt.Errorf("%w; the end of %s:\n%s", err, log, proc.LogTail(log, 15))
}

// Stop stops every process Knative runs (adapters, then system processes, in reverse start order),
// then releases the machine-wide lock. The hub is the caller's. Safe to call twice.
func (k *Knative) Stop() {
	if k.cancel != nil {
		k.cancel()
	}
	if k.kubelet != nil {
		k.kubelet.stopAll()
	}
	k.mu.Lock()
	procs := k.procs
	k.procs = nil
	k.mu.Unlock()
	// The webhook-serving processes drain for 45 s on SIGTERM; nothing here needs a drain.
	var wg sync.WaitGroup
	for i := len(procs) - 1; i >= 0; i-- {
		wg.Add(1)
		go func(p *proc.Process) { defer wg.Done(); p.Stop(2 * time.Second) }(procs[i])
	}
	wg.Wait()
	if k.proxySrv != nil {
		_ = k.proxySrv.Close()
	}
	k.wg.Wait()
	if k.lock != nil {
		_ = k.lock.Close()
		k.lock = nil
	}
}

// Processes returns the pids of every process running now, for leak checks.
func (k *Knative) Processes() []int {
	k.mu.Lock()
	defer k.mu.Unlock()
	var pids []int
	for _, p := range k.procs {
		if exited, _ := p.Exited(); !exited {
			pids = append(pids, p.Pid())
		}
	}
	if k.kubelet != nil {
		pids = append(pids, k.kubelet.pids()...)
	}
	return pids
}

// Crashed names the Knative processes that have exited while the stack runs, with how (a panic
// in the dispatcher, say): on a cluster their pods would be restarting, and events lost.
func (k *Knative) Crashed() []string {
	k.mu.Lock()
	defer k.mu.Unlock()
	var out []string
	for _, p := range k.procs {
		if exited, err := p.Exited(); exited {
			out = append(out, fmt.Sprintf("%s (%v; log %s)", p.Name, err, filepath.Join(k.LogDir, p.Name+".log")))
		}
	}
	return out
}

// restConfig is the hub's admin config.
func (k *Knative) restConfig() *rest.Config { return k.hub.Config }
