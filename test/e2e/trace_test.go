package e2e

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/jaeger"
)

// Services and spans of one metric change's trace: Knative's broker ingress and trigger filter
// (their service names in knative.dev/eventing's cmd/broker), and scoreflow's functions' own.
const (
	ingressService = "broker.ingress"
	filterService  = "broker.filter"
	scorerSpan     = "receive io.scoreflow.metric.changed"
	writerSpan     = "receive io.scoreflow.score.updated"
	hubWriteSpan   = "hub write AddOnPlacementScore"
)

// hops are the moments of one metric change's way through the stack, read from its trace.
type hops struct {
	ingress, scorerIn, scorerOut, replyIngress, writerIn, writeStart, writeEnd time.Time
}

// readHops finds the moments in a trace's spans, or says what the trace lacks.
func readHops(spans []jaeger.Span) (hops, error) {
	var h hops
	find := func(service, name string, after time.Time) (jaeger.Span, bool) {
		for _, s := range spans { // by start time
			if s.Service == service && (name == "" || s.Name == name) && !s.Start.Before(after) {
				return s, true
			}
		}
		return jaeger.Span{}, false
	}
	in, ok := find(ingressService, "", time.Time{})
	if !ok {
		return h, fmt.Errorf("no span of %s", ingressService)
	}
	scorer, ok := find("promql-scorer", scorerSpan, in.Start)
	if !ok {
		return h, fmt.Errorf("no %q span of promql-scorer", scorerSpan)
	}
	reply, ok := find(ingressService, "", scorer.Start)
	if !ok {
		return h, fmt.Errorf("no span of %s for the scorer's reply", ingressService)
	}
	writer, ok := find("score-writer", writerSpan, reply.Start)
	if !ok {
		return h, fmt.Errorf("no %q span of score-writer", writerSpan)
	}
	write, ok := find("score-writer", hubWriteSpan, writer.Start)
	if !ok {
		return h, fmt.Errorf("no %q span of score-writer", hubWriteSpan)
	}
	return hops{ingress: in.Start, scorerIn: scorer.Start, scorerOut: scorer.End(), replyIngress: reply.Start,
		writerIn: writer.Start, writeStart: write.Start, writeEnd: write.End()}, nil
}

// traceOf waits until Jaeger holds every hop of traceID and whatever else complete asks for (each
// process exports its spans in batches, seconds apart).
func traceOf(t testing.TB, traceID string, within time.Duration, complete func([]jaeger.Span) error) ([]jaeger.Span, hops) {
	t.Helper()
	var spans []jaeger.Span
	var err error
	for deadline := time.Now().Add(within); ; time.Sleep(250 * time.Millisecond) {
		if spans, err = stack.Jaeger.Trace(context.Background(), traceID); err != nil {
			t.Fatal(err)
		}
		h, herr := readHops(spans)
		if herr == nil && complete != nil {
			herr = complete(spans)
		}
		if herr == nil {
			return spans, h
		}
		if time.Now().After(deadline) {
			t.Fatalf("trace %s after %s: %v; its spans:\n%s", traceID, within, herr, describe(spans))
		}
	}
}

func describe(spans []jaeger.Span) string {
	var b strings.Builder
	for _, s := range spans {
		fmt.Fprintf(&b, "  %s %-20s %-45s %s parent %s\n", s.Start.Format("15:04:05.000000"), s.Service, s.Name, s.Duration, s.ParentID)
	}
	return b.String()
}

// One metric change, posted in a trace of its own, is one trace in Jaeger that holds every hop:
// the broker ingress, the channel's dispatcher, the trigger filter, the promql-scorer, the
// ingress again for its reply, the filter, the score-writer and its write to the hub, each hop
// after the one before, and the hub write a child of the writer's span for the event.
func TestOneEventsTraceCrossesEveryHop(t *testing.T) {
	st, id := postTraced(t, idle(t, map[string]float64{"cluster1": 0.3, "cluster2": 0.35, "cluster3": 0.55}), true)
	if st != http.StatusAccepted {
		t.Fatalf("broker answered %d", st)
	}
	spans, h := traceOf(t, id, time.Minute, func(spans []jaeger.Span) error {
		count := map[string]int{}
		dispatcher := false
		for _, s := range spans {
			count[s.Service]++
			dispatcher = dispatcher || strings.Contains(s.Service, "dispatcher")
		}
		if count[ingressService] < 2 || count[filterService] < 2 || !dispatcher {
			return fmt.Errorf("services %v: want the ingress and the filter twice each (metric.changed, score.updated) and the channel's dispatcher", count)
		}
		// Every ancestor of the writer's span, up to the post's own, has arrived.
		byID := map[string]jaeger.Span{}
		for _, s := range spans {
			byID[s.SpanID] = s
		}
		for _, s := range spans {
			if s.Service != "score-writer" || s.Name != writerSpan {
				continue
			}
			for p := s.ParentID; p != id[:16]; p = byID[p].ParentID {
				if _, ok := byID[p]; !ok {
					return fmt.Errorf("span %s, an ancestor of the writer's, has not arrived", p)
				}
			}
		}
		return nil
	})
	byID := map[string]jaeger.Span{}
	for _, s := range spans {
		byID[s.SpanID] = s
	}
	order := []time.Time{h.ingress, h.scorerIn, h.scorerOut, h.replyIngress, h.writerIn, h.writeStart, h.writeEnd}
	for i := 1; i < len(order); i++ {
		if order[i].Before(order[i-1]) {
			t.Errorf("hop %d at %s is before hop %d at %s:\n%s", i, order[i].Format(time.StampMicro), i-1, order[i-1].Format(time.StampMicro), describe(spans))
		}
	}
	// The write's parent is the writer's span of this event, whose ancestors lead to the ingress.
	var write, writer jaeger.Span
	for _, s := range spans {
		switch {
		case s.Service == "score-writer" && s.Name == hubWriteSpan:
			write = s
		case s.Service == "score-writer" && s.Name == writerSpan:
			writer = s
		}
	}
	if write.ParentID != writer.SpanID {
		t.Errorf("the hub write's parent is %s, not the writer's span %s", write.ParentID, writer.SpanID)
	}
	// Its ancestors go back through the filter, the dispatcher and the ingress (twice) to the
	// ingress's span of the post (whose parent is the post's own, id[:16], postTraced's).
	var chain []string
	root := writer
	for {
		p, ok := byID[root.ParentID]
		if !ok {
			break
		}
		root = p
		chain = append(chain, root.Service)
	}
	seen := map[string]int{}
	for _, svc := range chain {
		if strings.Contains(svc, "dispatcher") {
			svc = "dispatcher"
		}
		seen[svc]++
	}
	// (The channel's dispatcher takes the scorer's reply from the filter's answer and posts it to
	// the ingress itself: the filter is on the writer's way once, the ingress and dispatcher twice.)
	if root.Service != ingressService || root.ParentID != id[:16] || seen[filterService] < 1 || seen[ingressService] < 2 || seen["dispatcher"] < 2 {
		t.Errorf("the writer's span descends from %v, the first %s %q (parent %s); want the filter, the ingress and dispatcher twice, back to the ingress's span of the post (parent %s):\n%s",
			chain, root.Service, root.Name, root.ParentID, id[:16], describe(spans))
	}
	t.Logf("trace %s (%s):\n%s", id, stack.Jaeger.TraceURL(id), describe(spans))
}
