// Package lifetime reads what deploy/ ships that decides how long a score lives (the PingSources'
// schedules and the score-writer's TTL), so that scorer tests can check their scores stay valid
// from one ping to the next under exactly that. It is imported only by tests.
package lifetime

import (
	"path/filepath"
	"runtime"
	"testing"
	"time"

	"github.com/robfig/cron/v3"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"

	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// Deployment is the deployment in deploy/ as far as a score's lifetime goes: the PingSources and the
// TTL the score-writer gives scores that carry no validUntil.
type Deployment struct {
	PingSources []manifests.Item[*sourcesv1.PingSource]
	// WriterTTLs are the TTL deploy/score-writer.yaml sets and the writer's default (what README
	// shows): a schedule must keep its scores valid under both.
	WriterTTLs []time.Duration
}

// Load reads deploy/ from the repository this file is in.
func Load(t testing.TB) Deployment {
	t.Helper()
	_, self, _, _ := runtime.Caller(0)
	s, err := manifests.Load(filepath.Join(filepath.Dir(self), "..", "..", "..", "deploy"))
	if err != nil {
		t.Fatal(err)
	}
	out := Deployment{PingSources: s.PingSources, WriterTTLs: []time.Duration{scorewriter.DefaultTTL}}
	w, ok := manifests.Find(s.Services, "scoreflow", "score-writer")
	if !ok {
		t.Fatal("deploy/ has no score-writer Service")
	}
	for _, e := range w.Object.Spec.Template.Spec.Containers[0].Env {
		if e.Name == "TTL" {
			d, err := time.ParseDuration(e.Value)
			if err != nil {
				t.Fatalf("%s: TTL %q: %v", w.Source, e.Value, err)
			}
			out.WriterTTLs = append(out.WriterTTLs, d)
		}
	}
	return out
}

// PingSource returns the shipped PingSource named name.
func (s Deployment) PingSource(t testing.TB, name string) *sourcesv1.PingSource {
	t.Helper()
	it, ok := manifests.Find(s.PingSources, "scoreflow", name)
	if !ok {
		t.Fatalf("deploy/ has no PingSource %s", name)
	}
	return it.Object
}

// Firings are the next n times a PingSource's schedule fires after from, each late by jitter (the
// mtping adapter sends up to about half a second after the minute, and the scorer runs after
// that). The schedule is parsed as Knative's mtping adapter parses it.
func Firings(t testing.TB, ps *sourcesv1.PingSource, from time.Time, n int, jitter time.Duration) []time.Time {
	t.Helper()
	spec := ps.Spec.Schedule
	if ps.Spec.Timezone != "" {
		spec = "CRON_TZ=" + ps.Spec.Timezone + " " + spec
	}
	p := cron.NewParser(cron.SecondOptional | cron.Minute | cron.Hour | cron.Dom | cron.Month | cron.Dow | cron.Descriptor)
	sched, err := p.Parse(spec)
	if err != nil {
		t.Fatalf("PingSource %s: schedule %q: %v", ps.Name, spec, err)
	}
	out := make([]time.Time, n)
	at := from
	for i := range out {
		at = sched.Next(at)
		out[i] = at.Add(jitter)
	}
	return out
}

// WriterValidUntil is when the score-writer lets the scores of a score.updated expire, by the rule
// it documents (pkg/scorewriter Handler): the event's validUntil when set, never (zero) for
// neverExpires, else the event's time, at most the writer's clock, plus the TTL.
func WriterValidUntil(su *contract.ScoreUpdated, eventTime, now time.Time, ttl time.Duration) time.Time {
	switch {
	case su.ValidUntil != nil:
		return *su.ValidUntil
	case su.NeverExpires:
		return time.Time{}
	}
	if eventTime.After(now) {
		eventTime = now
	}
	return eventTime.Add(ttl)
}
