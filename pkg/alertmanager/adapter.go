package alertmanager

import (
	"context"
	"crypto/subtle"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"slices"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Sender delivers an event to the sink (function.Sender in production).
type Sender interface {
	Send(ctx context.Context, e event.Event) error
}

// Defaults of the bounds on what callers may make the adapter hold.
const (
	// DefaultMaxBodyBytes bounds a notification: an alert as Alertmanager renders it takes a few
	// hundred bytes, so this fits over ten thousand (set the receiver's max_alerts below that).
	DefaultMaxBodyBytes = 4 << 20
	// DefaultMaxConcurrent bounds the notifications read and handled at once (each costs a few
	// times its size while decoded): Alertmanager sends one per group and retries a 503.
	DefaultMaxConcurrent = 4
)

// Options configure an Adapter.
type Options struct {
	Mapping
	// Source is the CloudEvents source of emitted events.
	Source string
	// SendTimeout bounds delivering one notification's events, retries included, so Alertmanager
	// gets an answer (and retries on 5xx) before its own timeout.
	SendTimeout time.Duration
	// Now is the clock that dates each notification's samples at receipt; nil means time.Now.
	Now func() time.Time
	// TokenFile holds the bearer token a caller must present (a mounted Secret, shared with
	// Alertmanager), re-read on every request so a rotated Secret applies at once. Empty: callers
	// are not checked here (the function's --auth-oidc checks them before).
	TokenFile string
	// MaxBodyBytes bounds a notification (0: DefaultMaxBodyBytes); a larger one is refused 413.
	MaxBodyBytes int64
	// MaxConcurrent bounds the notifications handled at once (0: DefaultMaxConcurrent); beyond it
	// a caller gets 503 at once, before its body is read.
	MaxConcurrent int
}

// Adapter is the webhook receiver.
type Adapter struct {
	opts    Options
	send    Sender
	log     *slog.Logger
	metrics metrics
	slots   chan struct{} // one per notification being handled
}

type metrics struct {
	payloads *prometheus.CounterVec
	alerts   *prometheus.CounterVec
	dropped  prometheus.Counter
	events   *prometheus.CounterVec
}

// New builds an adapter and registers its metrics on reg.
func New(opts Options, send Sender, log *slog.Logger, reg prometheus.Registerer) (*Adapter, error) {
	if err := opts.Mapping.Validate(); err != nil {
		return nil, err
	}
	if opts.Source == "" {
		return nil, errors.New("event source is required")
	}
	if opts.SendTimeout <= 0 {
		opts.SendTimeout = 10 * time.Second
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.MaxBodyBytes <= 0 {
		opts.MaxBodyBytes = DefaultMaxBodyBytes
	}
	if opts.MaxConcurrent <= 0 {
		opts.MaxConcurrent = DefaultMaxConcurrent
	}
	a := &Adapter{opts: opts, send: send, log: log, slots: make(chan struct{}, opts.MaxConcurrent), metrics: metrics{
		payloads: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_alertmanager_payloads_total",
			Help: "Alertmanager webhook requests, by HTTP status answered.",
		}, []string{"code"}),
		alerts: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_alertmanager_alerts_total",
			Help: "Alerts received, by outcome: firing or resolved (a sample was built) or the reason it was skipped.",
		}, []string{"outcome"}),
		dropped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "scoreflow_alertmanager_labels_dropped_total",
			Help: "Alert labels left out of samples because their names are not valid Prometheus label names.",
		}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_alertmanager_events_sent_total",
			Help: "metric.changed events sent to the sink, by result (ok or error).",
		}, []string{"result"}),
	}}
	reg.MustRegister(a.metrics.payloads, a.metrics.alerts, a.metrics.dropped, a.metrics.events)
	return a, nil
}

// Answer is the JSON body of every webhook response.
type Answer struct {
	Samples int    `json:"samples"`
	Events  int    `json:"events"`
	Skipped int    `json:"skipped"`
	Error   string `json:"error,omitempty"`
}

// ServeHTTP takes one notification. 200: every sample was sent (or there was none to send); 400:
// the payload is malformed and resending it cannot help; 401: the caller did not present the
// token; 413: the payload is over MaxBodyBytes; 503: the sink failed, or MaxConcurrent
// notifications are being handled, so Alertmanager retries the notification (Alertmanager
// retries 5xx only, and so does a Knative broker).
func (a *Adapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code, ans := a.serve(w, r)
	a.metrics.payloads.WithLabelValues(fmt.Sprint(code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	switch code {
	case http.StatusMethodNotAllowed:
		w.Header().Set("Allow", http.MethodPost)
	case http.StatusUnauthorized:
		w.Header().Set("WWW-Authenticate", `Bearer realm="alertmanager-adapter"`)
	}
	w.WriteHeader(code)
	_ = json.NewEncoder(w).Encode(ans)
}

func (a *Adapter) serve(w http.ResponseWriter, r *http.Request) (int, Answer) {
	if r.URL.Path != "/" {
		return http.StatusNotFound, Answer{Error: "Alertmanager webhooks are POSTed to /"}
	}
	if r.Method != http.MethodPost {
		return http.StatusMethodNotAllowed, Answer{Error: "Alertmanager webhooks are POSTed"}
	}
	// Who is calling, then whether there is room, then the body: a caller without the token or
	// beyond the bound costs nothing but its headers.
	if code, ans, ok := a.authorize(r); !ok {
		return code, ans
	}
	select {
	case a.slots <- struct{}{}:
		defer func() { <-a.slots }()
	default:
		a.log.Warn("notification refused: busy", "maxConcurrent", a.opts.MaxConcurrent)
		return http.StatusServiceUnavailable, Answer{Error: fmt.Sprintf("busy: %d notifications being handled; retry", a.opts.MaxConcurrent)}
	}
	tooBig := Answer{Error: fmt.Sprintf("payload larger than %d bytes: set the receiver's max_alerts", a.opts.MaxBodyBytes)}
	if r.ContentLength > a.opts.MaxBodyBytes {
		return http.StatusRequestEntityTooLarge, tooBig
	}
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, a.opts.MaxBodyBytes))
	if err != nil {
		var mbe *http.MaxBytesError
		if errors.As(err, &mbe) {
			return http.StatusRequestEntityTooLarge, tooBig
		}
		return http.StatusBadRequest, Answer{Error: "reading payload: " + err.Error()}
	}
	p, err := ParsePayload(body)
	if err != nil {
		a.log.Info("payload refused", "err", err)
		return http.StatusBadRequest, Answer{Error: err.Error()}
	}

	res := a.opts.Map(p, a.opts.Now())
	a.count(res)
	ans := Answer{Samples: len(res.Samples), Skipped: len(res.Skipped)}
	if len(res.Skipped) > 0 {
		a.log.Info("alerts skipped", "groupKey", p.GroupKey, "receiver", p.Receiver, "skipped", len(res.Skipped),
			"clusterLabel", a.opts.ClusterLabel, "alerts", describe(res.Skipped, 10))
	}
	if len(res.Samples) == 0 {
		return http.StatusOK, ans
	}

	ctx, cancel := context.WithTimeout(r.Context(), a.opts.SendTimeout)
	defer cancel()
	for batch := range slices.Chunk(res.Samples, contract.MaxSamples) {
		e, err := contract.NewMetricChanged(a.opts.Source, latest(batch), contract.MetricChanged{Samples: batch})
		if err != nil {
			// Map only builds valid samples: this is a bug, and a resend would fail the same way.
			a.log.Error("building metric.changed", "err", err, "groupKey", p.GroupKey)
			return http.StatusInternalServerError, Answer{Error: err.Error()}
		}
		if err := a.send.Send(ctx, e); err != nil {
			// Earlier batches of this payload were delivered and will be sent again on retry:
			// at-least-once; a repeated sample carries the same value, dated at its new receipt.
			a.metrics.events.WithLabelValues("error").Inc()
			a.log.Warn("sink failed: answering 503 so Alertmanager retries", "err", err, "groupKey", p.GroupKey, "samples", len(batch))
			ans.Error = "sink unavailable: " + err.Error()
			return http.StatusServiceUnavailable, ans
		}
		a.metrics.events.WithLabelValues("ok").Inc()
		ans.Events++
		a.log.Debug("sent", "id", e.ID(), "samples", len(batch), "groupKey", p.GroupKey)
	}
	return http.StatusOK, ans
}

// authorize checks the caller's bearer token against TokenFile, in constant time. With no token
// to compare (the Secret not mounted yet) every caller is refused 503, so Alertmanager retries
// until it is.
func (a *Adapter) authorize(r *http.Request) (int, Answer, bool) {
	if a.opts.TokenFile == "" {
		return 0, Answer{}, true
	}
	b, err := os.ReadFile(a.opts.TokenFile)
	want := strings.TrimSpace(string(b))
	if err != nil || want == "" {
		a.log.Error("no caller token to check against: every notification is refused until it is mounted", "file", a.opts.TokenFile, "err", err)
		return http.StatusServiceUnavailable, Answer{Error: "the adapter has no caller token configured yet"}, false
	}
	scheme, got, _ := strings.Cut(r.Header.Get("Authorization"), " ")
	if !strings.EqualFold(scheme, "Bearer") || subtle.ConstantTimeCompare([]byte(strings.TrimSpace(got)), []byte(want)) != 1 {
		a.log.Warn("caller refused: not the adapter's token", "remote", r.RemoteAddr)
		return http.StatusUnauthorized, Answer{Error: "Unauthenticated: present the adapter's token as a bearer token (http_config.authorization)"}, false
	}
	return 0, Answer{}, true
}

func (a *Adapter) count(res Result) {
	for _, s := range res.Samples {
		outcome := StatusFiring
		if s.Value == 0 {
			outcome = StatusResolved
		}
		a.metrics.alerts.WithLabelValues(outcome).Inc()
	}
	for _, s := range res.Skipped {
		a.metrics.alerts.WithLabelValues(s.Reason).Inc()
	}
	a.metrics.dropped.Add(float64(res.DroppedLabels))
}

// describe names at most n skipped alerts for a log line.
func describe(skipped []Skipped, n int) []string {
	out := make([]string, 0, min(n, len(skipped)))
	for _, s := range skipped[:min(n, len(skipped))] {
		out = append(out, fmt.Sprintf("%s/%s: %s", s.AlertName, s.Fingerprint, s.Reason))
	}
	return out
}
