package scorewriter

import (
	"context"
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	k8stesting "k8s.io/client-go/testing"
	"open-cluster-management.io/api/client/cluster/clientset/versioned/fake"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

type admitAll struct{}

func (admitAll) Admit(string) *contract.FieldError { return nil }

// heldHub is a fake hub whose status updates wait until released, then succeed or fail with err.
type heldHub struct {
	client  *fake.Clientset
	release chan struct{}
	updates atomic.Int32 // status updates seen
	err     atomic.Pointer[error]
}

func newHeldHub() *heldHub {
	h := &heldHub{client: newHub(), release: make(chan struct{})}
	h.client.PrependReactor("update", "addonplacementscores", func(a k8stesting.Action) (bool, runtime.Object, error) {
		if a.GetSubresource() != "status" {
			return false, nil, nil
		}
		h.updates.Add(1)
		<-h.release
		if err := h.err.Load(); err != nil {
			return true, nil, *err
		}
		return false, nil, nil // the fake's tracker writes it
	})
	return h
}

func deadlineEvent(t *testing.T, id string, clusters ...string) event.Event {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(id)
	e.SetSource("test")
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	su := contract.ScoreUpdated{Resource: "r"}
	for i, c := range clusters {
		su.Items = append(su.Items, contract.ClusterScores{Cluster: c, Scores: []contract.Score{{Name: "a", Value: float64(i)}}})
	}
	if err := e.SetData(cloudevents.ApplicationJSON, su); err != nil {
		t.Fatal(err)
	}
	return e
}

func decode(t *testing.T, resp function.Response) *contract.WriteResult {
	t.Helper()
	if resp.Event == nil {
		t.Fatalf("status %d without a reply", resp.Status)
	}
	r, err := contract.DecodeWriteResult(resp.Event)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func (h *Handler) state() (pending, remembered, bytes int) {
	h.mu.Lock()
	defer h.mu.Unlock()
	return h.pending, h.seen.Len(), h.bytes
}

// An event whose writes outlast its deadline is answered 503 and its writes go on; redeliveries
// wait for them (503 again while they last) instead of submitting them again, and the one after
// they have landed is answered with their outcome. The bytes they held are given back.
func TestRedeliveriesJoinWritesPastTheDeadline(t *testing.T) {
	hub := newHeldHub()
	w := runWriter(t, hub.client, DefaultOptions())
	const deadline = 100 * time.Millisecond
	h := NewHandler(w, admitAll{}, HandlerOptions{TTL: time.Hour, MaxClockSkew: time.Minute, EventDeadline: deadline, Source: "test"})
	e := deadlineEvent(t, "e1", "c1", "c2", "c3")

	start := time.Now()
	resp := h.Handle(context.Background(), e)
	if took := time.Since(start); resp.Status != http.StatusServiceUnavailable || took > 10*deadline {
		t.Fatalf("first delivery: status %d after %s, want 503 at the %s deadline", resp.Status, took, deadline)
	}
	r := decode(t, resp)
	if r.Reason != contract.ReasonUnavailable || !r.Retriable || r.Counts["Failed/Unavailable"] != 3 || r.Duplicate {
		t.Errorf("first delivery: %+v, want Unavailable, retriable, 3 items being written", r)
	}

	resp = h.Handle(context.Background(), e)
	if resp.Status != http.StatusServiceUnavailable || !decode(t, resp).Duplicate {
		t.Fatalf("redelivery while the writes last: status %d %+v, want 503 marked duplicate", resp.Status, decode(t, resp))
	}
	if n := w.Pending(); n != 3 {
		t.Errorf("%d updates in the writer, want the first delivery's 3 (a redelivery submitted its own)", n)
	}
	if pending, _, _ := h.state(); pending == 0 {
		t.Error("the updates being written hold no pending bytes")
	}

	close(hub.release)
	resp = h.Handle(context.Background(), e) // waits for the writes, within its own deadline
	if resp.Status != http.StatusOK || resp.Event.Type() != contract.TypeWriteDone {
		t.Fatalf("redelivery after the writes: status %d %+v, want 200 write.done", resp.Status, decode(t, resp))
	}
	r = decode(t, resp)
	for _, it := range r.Items {
		if it.Outcome != contract.OutcomeWritten {
			t.Errorf("%s: %+v, want Written", it.Cluster, it)
		}
	}
	if !r.Duplicate || len(r.Items) != 3 {
		t.Errorf("answer %+v, want 3 items, marked duplicate", r)
	}
	if n := hub.updates.Load(); n != 3 {
		t.Errorf("%d status updates, want 3 (one per object)", n)
	}
	// Remembered now: yet another redelivery gets the same answer at once, and writes nothing.
	resp = h.Handle(context.Background(), e)
	if resp.Status != http.StatusOK || hub.updates.Load() != 3 {
		t.Errorf("late redelivery: status %d, %d status updates", resp.Status, hub.updates.Load())
	}
	pending, remembered, bytes := h.state()
	if want := answerBytes("test\x00e1", r); pending != 0 || remembered != 1 || bytes != want {
		t.Errorf("after the writes: %d pending bytes, %d answers remembered weighing %d bytes; want 0, 1, %d", pending, remembered, bytes, want)
	}
}

// Writes that fail after the deadline are answered as usual to the redelivery waiting for them. A
// failure for good is remembered: the next redelivery gets it again and nothing is written. One
// that may pass is forgotten: the next redelivery writes afresh.
func TestRedeliveryAfterTheDeadlineGetsTheFailure(t *testing.T) {
	gr := schema.GroupResource{Group: "cluster.open-cluster-management.io", Resource: "addonplacementscores"}
	for name, tc := range map[string]struct {
		err     error
		status  int // the answer to the redelivery waiting for the writes
		reason  contract.Reason
		next    int   // status of the next redelivery, once the hub works
		updates int32 // status updates by then
	}{
		"forbidden":   {apierrors.NewForbidden(gr, "r", fmt.Errorf("no")), http.StatusUnprocessableEntity, contract.ReasonForbidden, http.StatusUnprocessableEntity, 1},
		"unavailable": {apierrors.NewServiceUnavailable("down"), http.StatusServiceUnavailable, contract.ReasonUnavailable, http.StatusOK, 2},
	} {
		t.Run(name, func(t *testing.T) {
			hub := newHeldHub()
			hub.err.Store(&tc.err)
			opts := DefaultOptions()
			opts.RetryFor = 0 // an unavailable hub fails the update at once
			w := runWriter(t, hub.client, opts)
			const deadline = time.Second
			h := NewHandler(w, admitAll{}, HandlerOptions{TTL: time.Hour, MaxClockSkew: time.Minute, EventDeadline: deadline, Source: "test"})
			e := deadlineEvent(t, "e1", "c1")
			if resp := h.Handle(context.Background(), e); resp.Status != http.StatusServiceUnavailable {
				t.Fatalf("first delivery: %d, want 503", resp.Status)
			}
			time.AfterFunc(deadline/10, func() { close(hub.release) })
			resp := h.Handle(context.Background(), e)
			if r := decode(t, resp); resp.Status != tc.status || len(r.Items) != 1 || r.Items[0].Outcome != contract.OutcomeFailed || r.Items[0].Reason != tc.reason {
				t.Fatalf("redelivery: %d %+v, want %d with the item Failed/%s", resp.Status, r, tc.status, tc.reason)
			}
			hub.err.Store(nil)
			if resp := h.Handle(context.Background(), e); resp.Status != tc.next {
				t.Errorf("next redelivery: %d %+v, want %d", resp.Status, decode(t, resp), tc.next)
			}
			if n := hub.updates.Load(); n != tc.updates {
				t.Errorf("%d status updates, want %d", n, tc.updates)
			}
		})
	}
}
