package deploy

import (
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

// The score-writer answers every event within its EVENT_DEADLINE: 503 when the event's writes
// have not all landed by then (they go on, and the redelivery waits for them). The broker must
// hear that answer, so the delivery timeout of every Trigger calling the writer, and the writer
// Service's request timeout, are longer than the deadline; without a deadline, a fleet event
// that outlasts the timeout would get no answer at all.
func TestWriterAnswersWithinItsTriggersTimeout(t *testing.T) {
	for name, s := range allSets(t) {
		for _, svc := range s.Services {
			if svc.Object.Name != "score-writer" {
				continue
			}
			spec := svc.Object.Spec.Template.Spec
			deadline := scorewriter.DefaultEventDeadline
			if v := envValue(spec.Containers[0], "EVENT_DEADLINE"); v != "" {
				d, err := time.ParseDuration(v)
				if err != nil {
					t.Fatalf("%s: EVENT_DEADLINE=%q: %v", svc.Source, v, err)
				}
				deadline = d
			}
			if deadline <= 0 {
				t.Errorf("%s: EVENT_DEADLINE %s: the writer answers a slow event only when its writes land, after the broker may have given up", svc.Source, deadline)
				continue
			}
			if ts := spec.TimeoutSeconds; ts != nil && time.Duration(*ts)*time.Second <= deadline {
				t.Errorf("%s: timeoutSeconds %d is not above EVENT_DEADLINE %s", svc.Source, *ts, deadline)
			}
			triggers := 0
			for _, tr := range s.Triggers {
				if ref := tr.Object.Spec.Subscriber.Ref; ref == nil || ref.Name != "score-writer" {
					continue
				}
				triggers++
				d := tr.Object.Spec.Delivery
				if d == nil {
					for _, b := range s.Brokers {
						if b.Object.Name == tr.Object.Spec.Broker {
							d = b.Object.Spec.Delivery
						}
					}
				}
				if d == nil || d.Timeout == nil {
					t.Errorf("set %s: Trigger %s (%s) sets no delivery timeout: the broker's default may be below EVENT_DEADLINE %s", name, tr.Object.Name, tr.Source, deadline)
					continue
				}
				timeout := isoDuration(t, *d.Timeout)
				if timeout <= deadline {
					t.Errorf("set %s: Trigger %s (%s): delivery timeout %s is not above the writer's EVENT_DEADLINE %s: the broker gives up before the writer's 503",
						name, tr.Object.Name, tr.Source, *d.Timeout, deadline)
				}
			}
			if triggers == 0 {
				t.Errorf("set %s: no Trigger calls the score-writer", name)
			}
		}
	}
}

// isoDuration reads an ISO 8601 duration of hours, minutes and seconds (PT45S, PT1M30S), the form
// the manifests use for delivery timeouts.
func isoDuration(t *testing.T, s string) time.Duration {
	t.Helper()
	rest, ok := strings.CutPrefix(s, "PT")
	d, err := time.ParseDuration(strings.ToLower(rest))
	if !ok || err != nil {
		t.Fatalf("duration %q: want PT followed by hours, minutes and seconds (%v)", s, err)
	}
	return d
}
