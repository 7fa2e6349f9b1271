package broker

import (
	"context"
	"encoding/base64"
	"fmt"
	"log/slog"
	"net/http"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"github.com/robfig/cron/v3"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	"knative.dev/eventing/pkg/kncloudevents"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// cronParser is the parser of Knative's mtping adapter: an optional seconds field, descriptors.
var cronParser = cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)

// pingRetry is what the mtping adapter gives each send: 5 retries, exponential from 50 ms.
var pingRetry = kncloudevents.RetryConfig{
	RetryMax:   5,
	CheckRetry: kncloudevents.SelectiveRetry,
	Backoff: func(attempt int, _ *http.Response) time.Duration {
		return 50 * time.Millisecond << attempt
	},
}

// pingState is one PingSource: its schedule and the event it sends.
type pingState struct {
	namespace, key string
	schedule       string
	sink           duckv1.Destination
	proto          event.Event
}

// newPing builds the event as the mtping adapter's makeEvent does (type, source, ceOverrides
// extensions, data or dataBase64 with contentType); id and time are set at each firing.
func newPing(p *sourcesv1.PingSource) (*pingState, error) {
	ns := namespaceOr(p.Namespace)
	key := ns + "/" + p.Name
	e := cloudevents.NewEvent()
	e.SetType(sourcesv1.PingSourceEventType)
	e.SetSource(sourcesv1.PingSourceSource(ns, p.Name))
	if o := p.Spec.CloudEventOverrides; o != nil {
		for k, v := range o.Extensions {
			e.SetExtension(k, v)
		}
	}
	var data []byte
	switch {
	case p.Spec.DataBase64 != "":
		d, err := base64.StdEncoding.DecodeString(p.Spec.DataBase64)
		if err != nil {
			return nil, fmt.Errorf("pingsource %s: dataBase64: %w", key, err)
		}
		data = d
	case p.Spec.Data != "":
		data = []byte(p.Spec.Data)
	}
	if data != nil {
		if err := e.SetData(p.Spec.ContentType, data); err != nil {
			return nil, fmt.Errorf("pingsource %s: data: %w", key, err)
		}
	}
	schedule := p.Spec.Schedule
	if p.Spec.Timezone != "" {
		schedule = "CRON_TZ=" + p.Spec.Timezone + " " + schedule
	}
	if _, err := cronParser.Parse(schedule); err != nil {
		return nil, fmt.Errorf("pingsource %s: schedule: %w", key, err)
	}
	return &pingState{namespace: ns, key: key, schedule: schedule, sink: p.Spec.Sink, proto: e}, nil
}

// startPings schedules every PingSource. A firing still sending when the next is due is skipped,
// so each source has at most one send in flight.
func (s *Server) startPings() error {
	if len(s.pings) == 0 {
		return nil
	}
	l := cronLogger{s.log}
	s.cron = cron.New(cron.WithParser(cronParser), cron.WithLogger(l), cron.WithChain(cron.SkipIfStillRunning(l)))
	for _, p := range s.pings {
		if _, err := s.cron.AddFunc(p.schedule, func() { s.firePing(s.pingCtx, p) }); err != nil {
			return fmt.Errorf("pingsource %s: %w", p.key, err)
		}
	}
	s.cron.Start()
	return nil
}

func (s *Server) stopPings() {
	s.cancelPings()
	if s.cron != nil {
		<-s.cron.Stop().Done()
	}
}

// firePing sends one ping event to the source's sink.
func (s *Server) firePing(ctx context.Context, p *pingState) {
	e := p.proto.Clone()
	e.SetID(uuid.NewString())
	e.SetTime(time.Now())
	o := s.send(ctx, &e, sendSpec{dest: p.sink, namespace: p.namespace, retry: &pingRetry})
	s.metrics.pinged(p.key, o.status)
	r := Record{Kind: KindPing, Target: o.target, Status: o.status, Attempts: o.attempts}
	if !o.ok() {
		r.Reason = describe(&o)
		s.log.Warn("pingsource send failed", "pingsource", p.key, "target", o.target, "reason", r.Reason)
	}
	s.emit(r, &e)
}

// cronLogger sends the cron library's chatter (one line per tick) to debug.
type cronLogger struct{ log *slog.Logger }

func (l cronLogger) Info(msg string, kv ...any) { l.log.Debug("cron: "+msg, kv...) }

func (l cronLogger) Error(err error, msg string, kv ...any) {
	l.log.Error("cron: "+msg, append(kv, "err", err)...)
}
