package broker

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"sync"
	"sync/atomic"
	"time"

	"github.com/cloudevents/sdk-go/v2/client"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/robfig/cron/v3"
	"go.uber.org/zap"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	"knative.dev/eventing/pkg/broker"
)

// Config is what a local broker serves and how.
type Config struct {
	Brokers     []*eventingv1.Broker
	Triggers    []*eventingv1.Trigger // each bound to one of Brokers
	PingSources []*sourcesv1.PingSource

	// Resolver turns destinations other than this server's Brokers into URLs; nil accepts
	// absolute URIs only. Services is the usual choice.
	Resolver Resolver
	// Workers is the number of concurrent deliveries per Trigger (default 16).
	Workers int
	// QueueSize bounds the deliveries waiting per Trigger (default 1000). An event is refused
	// with 429 when one of the Triggers it matches has no room.
	QueueSize int
	// OnEvent, when set, is called for every step of every event (see Kind), concurrently from
	// the broker's goroutines: it must be safe for that, quick, and must not block.
	OnEvent func(Record)
	// Registerer, when set, gets the broker's Prometheus metrics.
	Registerer prometheus.Registerer
	// Log defaults to slog.Default().
	Log *slog.Logger
}

// Server is a running local broker. Create it with New, start it with Start and stop it with
// Shutdown; it cannot be restarted.
type Server struct {
	log          *slog.Logger
	brokers      map[string]*brokerState
	triggers     []*triggerState
	pings        []*pingState
	resolver     Resolver
	workers      int
	hook         func(Record)
	metrics      *metrics
	ttlDefaulter client.EventDefaulter
	filterCtx    context.Context
	transport    *http.Transport
	client       *http.Client
	gate         gate

	base        string // http://host:port, once started
	started     atomic.Bool
	httpSrv     *http.Server
	served      chan error
	cron        *cron.Cron
	pingCtx     context.Context
	cancelPings context.CancelFunc
	workCtx     context.Context
	cancelWork  context.CancelFunc
	stop        chan struct{}
	wg          sync.WaitGroup
	dropped     atomic.Int64 // at shutdown

	shutdownOnce sync.Once
	shutdownErr  error
}

// New validates the objects as Knative's webhooks would and builds their filters. It starts
// nothing.
func New(cfg Config) (*Server, error) {
	if cfg.Workers <= 0 {
		cfg.Workers = 16
	}
	if cfg.QueueSize <= 0 {
		cfg.QueueSize = 1000
	}
	if cfg.Log == nil {
		cfg.Log = slog.Default()
	}
	ctx := validationContext()
	brokers, brokerDelivery, err := buildBrokers(ctx, cfg.Brokers)
	if err != nil {
		return nil, err
	}
	tr := http.DefaultTransport.(*http.Transport).Clone()
	// Workers of several triggers share a few local hosts: keep their connections alive.
	tr.MaxIdleConns, tr.MaxIdleConnsPerHost = 1024, 256
	s := &Server{
		log:          cfg.Log.With("component", "broker"),
		brokers:      brokers,
		resolver:     cfg.Resolver,
		workers:      cfg.Workers,
		hook:         cfg.OnEvent,
		ttlDefaulter: broker.TTLDefaulter(zap.NewNop(), defaultTTL),
		filterCtx:    filterContext(),
		transport:    tr,
		client:       &http.Client{Transport: tr},
		stop:         make(chan struct{}),
	}
	seen := map[string]bool{}
	for _, t := range cfg.Triggers {
		ts, err := buildTrigger(ctx, t, brokers, brokerDelivery, s.log, cfg.QueueSize)
		if err == nil && seen[ts.key] {
			err = fmt.Errorf("trigger %s is defined twice", ts.key)
		}
		if err != nil {
			return nil, err
		}
		seen[ts.key] = true
		s.triggers = append(s.triggers, ts)
		ts.broker.triggers = append(ts.broker.triggers, ts)
	}
	for _, p := range cfg.PingSources {
		ps, err := buildPing(ctx, p)
		if err != nil {
			return nil, err
		}
		s.pings = append(s.pings, ps)
	}
	s.metrics = newMetrics(cfg.Registerer, s.triggers)
	s.pingCtx, s.cancelPings = context.WithCancel(context.Background())
	s.workCtx, s.cancelWork = context.WithCancel(context.Background())
	return s, nil
}

func buildPing(ctx context.Context, p *sourcesv1.PingSource) (*pingState, error) {
	if err := validatePingSource(ctx, p); err != nil {
		return nil, err
	}
	return newPing(p)
}

// Start serves ingress on ln and starts the delivery workers and the PingSource schedules.
func (s *Server) Start(ln net.Listener) error {
	if !s.started.CompareAndSwap(false, true) {
		return errors.New("broker: already started")
	}
	s.base = "http://" + dialable(ln.Addr())
	for _, t := range s.triggers {
		for range s.workers {
			s.wg.Add(1)
			go s.work(t)
		}
	}
	s.httpSrv = &http.Server{Handler: ingress{s}, ReadHeaderTimeout: 10 * time.Second}
	s.served = make(chan error, 1)
	go func() { s.served <- s.httpSrv.Serve(ln) }()
	if err := s.startPings(); err != nil {
		_ = s.Shutdown(context.Background())
		return err
	}
	s.log.Info("local broker started", "address", s.base, "brokers", len(s.brokers), "triggers", len(s.triggers), "pingsources", len(s.pings))
	return nil
}

// URL is the ingress address of a broker: POST CloudEvents there.
func (s *Server) URL(namespace, name string) string {
	return s.base + "/" + namespace + "/" + name
}

// Shutdown stops the PingSource schedules and refuses new events (503), then lets queued and
// in-flight deliveries finish, replies included, until ctx ends. What is left then is dropped,
// each with a "dropped" record saying why, and Shutdown returns an error counting them. When it
// returns, no goroutine of the server is left.
func (s *Server) Shutdown(ctx context.Context) error {
	s.shutdownOnce.Do(func() { s.shutdownErr = s.shutdown(ctx) })
	return s.shutdownErr
}

func (s *Server) shutdown(ctx context.Context) error {
	if !s.started.Load() {
		s.cancelPings()
		s.cancelWork()
		return nil
	}
	idle := s.gate.drain()
	s.stopPings()
	if err := s.httpSrv.Shutdown(ctx); err != nil {
		_ = s.httpSrv.Close()
	}
	<-s.served
	select {
	case <-idle:
	case <-ctx.Done():
	}
	// Stop first, then cancel: a worker that has not started a delivery by then drops it as
	// never attempted instead of starting it on a cancelled context.
	s.gate.stop()
	close(s.stop)
	s.cancelWork()
	s.wg.Wait()
	for _, t := range s.triggers {
		s.dropQueued(t)
	}
	s.transport.CloseIdleConnections()
	if n := s.dropped.Load(); n > 0 {
		s.log.Warn("local broker stopped, dropping deliveries", "dropped", n)
		return fmt.Errorf("broker: %d deliveries dropped at shutdown: %w", n, ctx.Err())
	}
	s.log.Info("local broker stopped, all deliveries finished")
	return nil
}

// dropQueued empties a trigger's queue after its workers have stopped.
func (s *Server) dropQueued(t *triggerState) {
	for {
		select {
		case tk := <-t.queue.ch:
			t.queue.release()
			s.dropAtShutdown(t, tk, 0, 0, "shutdown: never attempted")
			s.gate.leave(1)
		default:
			return
		}
	}
}

// dialable names a listener's address so that it can be dialled: an unspecified host becomes loopback.
func dialable(a net.Addr) string {
	tcp, ok := a.(*net.TCPAddr)
	if !ok || !tcp.IP.IsUnspecified() {
		return a.String()
	}
	return net.JoinHostPort("127.0.0.1", fmt.Sprint(tcp.Port))
}
