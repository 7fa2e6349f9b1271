// Package function is the runtime every scoreflow function shares: flags with environment
// fallbacks, structured logs, a CloudEvents receiver, /healthz, /readyz, Prometheus /metrics and a
// graceful shutdown. A function's main defines its flags, builds its handler and calls Main.
package function

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"os"
	"os/signal"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"golang.org/x/net/netutil"
	"k8s.io/klog/v2"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/tracing"
)

// Version is the build's version, stamped by ko (ko.yaml: -X .../pkg/function.Version=...).
var Version = "dev"

// Function is one deployable service.
type Function struct {
	Name     string
	Flags    *flag.FlagSet
	Log      *slog.Logger
	Registry *prometheus.Registry

	about    string
	addr     *string
	port     *int
	logLevel *string
	drain    *time.Duration
	maxConns *int
	maxBody  int64
	ready    atomic.Pointer[func() error]
	stopping atomic.Bool

	auth        *authFlags
	tls         *tlsFlags
	tracing     *tracing.Config
	authn       *Authenticator // nil: every caller is admitted
	authFailure FailureReply
}

// New creates a function with the flags every function takes: --port (PORT, set by Knative),
// --address, --log-level and --drain-timeout.
func New(name, about string) *Function {
	f := &Function{
		Name:     name,
		about:    about,
		Flags:    flag.NewFlagSet(name, flag.ContinueOnError),
		Registry: prometheus.NewRegistry(),
		maxBody:  MaxBodyBytes,
	}
	f.port = f.Flags.Int("port", 8080, "HTTP port for CloudEvents, /healthz, /readyz and /metrics")
	f.addr = f.Flags.String("address", "", "address to listen on (empty: all interfaces)")
	f.logLevel = f.Flags.String("log-level", "info", "log level: debug, info, warn or error")
	f.drain = f.Flags.Duration("drain-timeout", 20*time.Second, "on SIGTERM, how long in-flight requests may finish")
	f.maxConns = f.Flags.Int("max-connections", DefaultMaxConnections, "connections served at once; more wait to be accepted (idle ones close after 30s)")
	f.auth = f.registerAuthFlags()
	f.tls = f.registerTLSFlags()
	f.tracing = tracing.RegisterFlags(f.Flags)
	f.Flags.Usage = usage(f.Flags, name, about)
	f.Registry.MustRegister(collectors.NewGoCollector(), collectors.NewProcessCollector(collectors.ProcessCollectorOpts{}),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{
			Name:        "scoreflow_build_info",
			Help:        "Always 1; the labels say which function and version run.",
			ConstLabels: prometheus.Labels{"function": name, "version": Version},
		}, func() float64 { return 1 }))
	f.Log = newLogger(name, "info")
	return f
}

// Parse parses args, then fills unset flags from the environment. flag.ErrHelp means --help was
// asked for and printed.
func (f *Function) Parse(args []string) error {
	if err := f.Flags.Parse(args); err != nil {
		return err
	}
	if err := ApplyEnv(f.Flags, osLookup); err != nil {
		return err
	}
	var lvl slog.Level
	if err := lvl.UnmarshalText([]byte(*f.logLevel)); err != nil {
		return fmt.Errorf("--log-level: %w", err)
	}
	f.Log = newLogger(f.Name, *f.logLevel)
	authn, err := f.auth.authenticator()
	if err != nil {
		return err
	}
	f.RequireAuth(authn)
	return nil
}

// SetReadiness makes /readyz answer 503 with check's error until check returns nil.
func (f *Function) SetReadiness(check func() error) { f.ready.Store(&check) }

// Source is the CloudEvents source of the events this function emits.
func (f *Function) Source() string { return "scoreflow/" + f.Name }

// FailureReply is the default answer to input that is not a usable CloudEvent: a score.failed
// event naming the reason.
func (f *Function) FailureReply(in contract.EventRef, reason contract.Reason, message string) *event.Event {
	e := contract.NewFailure(f.Source(), contract.Failure{Input: in, Reason: reason, Message: message, Retriable: reason == contract.ReasonUnavailable})
	return &e
}

// SetMaxBodyBytes lowers the largest request body the CloudEvents receiver takes (MaxBodyBytes):
// a larger one is refused 413, and one of unknown length is weighed as this much against the
// in-flight budget. Call it before Handler.
func (f *Function) SetMaxBodyBytes(n int64) { f.maxBody = min(n, MaxBodyBytes) }

// Handler is the function's whole HTTP surface: CloudEvents on /, plus health and metrics.
func (f *Function) Handler(h Handler, onFailure FailureReply) http.Handler {
	if onFailure == nil {
		onFailure = f.FailureReply
	}
	f.authFailure = onFailure
	return f.Mux(newReceiver(h, onFailure, f.maxBody, f.Log, f.Registry))
}

// Mux serves app on / beside /healthz, /readyz and /metrics: for functions whose input is not
// CloudEvents (an Alertmanager webhook) or that receive nothing (a source). Every non-2xx body is
// cut under contract.MaxRefusalBytes (the CloudEvents receiver makes its failure events fit; this
// catches plain-text errors).
func (f *Function) Mux(app http.Handler) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("/", tracing.Handler(f.protect(app)))
	mux.HandleFunc("/healthz", func(w http.ResponseWriter, _ *http.Request) { _, _ = w.Write([]byte("ok\n")) })
	mux.HandleFunc("/readyz", f.serveReady)
	mux.Handle("/metrics", promhttp.HandlerFor(f.Registry, promhttp.HandlerOpts{Registry: f.Registry}))
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mux.ServeHTTP(&refusalLimit{ResponseWriter: w}, r)
	})
}

// refusalLimit passes a non-2xx answer's body through only up to contract.MaxRefusalBytes.
type refusalLimit struct {
	http.ResponseWriter
	refusal bool
	left    int
}

func (l *refusalLimit) WriteHeader(code int) {
	if code >= 300 {
		l.refusal, l.left = true, contract.MaxRefusalBytes-1
		l.Header().Del("Content-Length") // the body may be cut
	}
	l.ResponseWriter.WriteHeader(code)
}

func (l *refusalLimit) Write(p []byte) (int, error) {
	if !l.refusal {
		return l.ResponseWriter.Write(p)
	}
	n := min(len(p), l.left)
	l.left -= n
	if _, err := l.ResponseWriter.Write(p[:n]); err != nil {
		return 0, err
	}
	return len(p), nil // the rest is dropped, not failed
}

// Unwrap lets http.ResponseController reach the connection (flushes, deadlines).
func (l *refusalLimit) Unwrap() http.ResponseWriter { return l.ResponseWriter }

func (f *Function) serveReady(w http.ResponseWriter, _ *http.Request) {
	if f.stopping.Load() {
		http.Error(w, "shutting down", http.StatusServiceUnavailable)
		return
	}
	if check := f.ready.Load(); check != nil {
		if err := (*check)(); err != nil {
			http.Error(w, "not ready: "+err.Error(), http.StatusServiceUnavailable)
			return
		}
	}
	_, _ = w.Write([]byte("ok\n"))
}

// Serve listens until ctx ends, then stops taking requests, lets in-flight ones finish (bounded by
// --drain-timeout) and returns.
func (f *Function) Serve(ctx context.Context, h Handler, onFailure FailureReply) error {
	return f.ServeHTTP(ctx, f.Handler(h, onFailure))
}

// ServeHTTP is Serve for a handler built with Mux.
func (f *Function) ServeHTTP(ctx context.Context, handler http.Handler) error {
	ln, err := net.Listen("tcp", net.JoinHostPort(*f.addr, fmt.Sprint(*f.port)))
	if err != nil {
		return err
	}
	return f.ServeListener(ctx, ln, handler)
}

// MaxHeaderBytes bounds a request's headers (Go's default is 1 MiB): a binary-mode CloudEvent's
// attributes travel in them, and the contract bounds those to a few hundred bytes.
const MaxHeaderBytes = 64 << 10

// What a connection may hold of a function, whoever opens it: its headers must arrive within
// ReadHeaderTimeout and the whole request within ReadTimeout (the CloudEvents receiver gives a
// body bodyReadTimeout once it is admitted); a keep-alive connection idle for IdleTimeout is
// closed; at most --max-connections are served at once, more wait to be accepted. Nothing bounds
// how long a handler answers (event streams last).
const (
	ReadHeaderTimeout     = 10 * time.Second
	ReadTimeout           = 45 * time.Second
	IdleTimeout           = 30 * time.Second
	DefaultMaxConnections = 2048
)

// ServeListener serves handler on ln with the same shutdown behaviour as Serve.
func (f *Function) ServeListener(ctx context.Context, ln net.Listener, handler http.Handler) error {
	if *f.maxConns <= 0 {
		return fmt.Errorf("--max-connections must be positive, not %d", *f.maxConns)
	}
	ln, err := f.tls.listener(netutil.LimitListener(ln, *f.maxConns))
	if err != nil {
		return err
	}
	srv := &http.Server{Handler: handler, ReadHeaderTimeout: ReadHeaderTimeout, ReadTimeout: ReadTimeout, IdleTimeout: IdleTimeout,
		MaxHeaderBytes: MaxHeaderBytes}
	errc := make(chan error, 1)
	go func() { errc <- srv.Serve(ln) }()
	f.Log.Info("serving", "address", ln.Addr().String(), "version", Version)
	select {
	case err := <-errc:
		return err
	case <-ctx.Done():
	}
	f.stopping.Store(true)
	f.Log.Info("shutting down", "drainTimeout", f.drain.String())
	sctx, cancel := context.WithTimeout(context.Background(), *f.drain)
	defer cancel()
	if err := srv.Shutdown(sctx); err != nil {
		return fmt.Errorf("drain: %w", err)
	}
	if err := <-errc; !errors.Is(err, http.ErrServerClosed) {
		return err
	}
	return nil
}

// Main parses flags, runs run with a context that ends on SIGINT or SIGTERM, and exits: 0 on
// success or --help, 2 on bad flags, 1 when run fails.
func (f *Function) Main(run func(ctx context.Context) error) {
	if err := f.Parse(os.Args[1:]); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			os.Exit(0)
		}
		fmt.Fprintf(os.Stderr, "%s: %v\n", f.Name, err)
		os.Exit(2)
	}
	f.routeLibraryLogs()
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	shutdown, err := tracing.Start(ctx, *f.tracing, f.Name, Version)
	if err != nil {
		fmt.Fprintf(os.Stderr, "%s: %v\n", f.Name, err)
		os.Exit(2)
	}
	err = run(ctx)
	// The spans of the last requests go out before the process ends.
	sctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	if serr := shutdown(sctx); serr != nil {
		f.Log.Warn("exporting the last spans", "err", serr)
	}
	cancel()
	if err != nil {
		f.Log.Error("exiting", "err", err)
		os.Exit(1)
	}
}

// routeLibraryLogs sends what client-go logs (leader election, informers' watch errors) through
// the function's logger, so that every line of a function is one structured record; klog would
// otherwise write its own text format to stderr.
func (f *Function) routeLibraryLogs() {
	klog.SetSlogLogger(f.Log.With("logger", "client-go"))
}

func newLogger(name, level string) *slog.Logger {
	var lvl slog.Level
	_ = lvl.UnmarshalText([]byte(level))
	return slog.New(slog.NewJSONHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("function", name)
}
