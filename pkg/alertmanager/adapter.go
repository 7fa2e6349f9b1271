package alertmanager

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"slices"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Sender delivers an event to the sink (function.Sender in production).
type Sender interface {
	Send(ctx context.Context, e event.Event) error
}

// MaxBodyBytes bounds a webhook body. Alertmanager's max_alerts is unbounded by default, but even
// thousands of alerts with many labels stay far below this.
const MaxBodyBytes = 8 << 20

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
}

// Adapter is the webhook receiver.
type Adapter struct {
	opts    Options
	send    Sender
	log     *slog.Logger
	metrics metrics
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
	a := &Adapter{opts: opts, send: send, log: log, metrics: metrics{
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
// the payload is malformed and resending it cannot help; 503: the sink failed, so Alertmanager
// retries the notification (Alertmanager retries 5xx only, and so does a Knative broker).
func (a *Adapter) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	code, ans := a.serve(w, r)
	a.metrics.payloads.WithLabelValues(fmt.Sprint(code)).Inc()
	w.Header().Set("Content-Type", "application/json")
	if code == http.StatusMethodNotAllowed {
		w.Header().Set("Allow", http.MethodPost)
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
	body, err := io.ReadAll(http.MaxBytesReader(w, r.Body, MaxBodyBytes))
	if err != nil {
		var tooBig *http.MaxBytesError
		if errors.As(err, &tooBig) {
			return http.StatusRequestEntityTooLarge, Answer{Error: fmt.Sprintf("payload larger than %d bytes", MaxBodyBytes)}
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
