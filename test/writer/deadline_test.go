package writer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net/http"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// dispatcher delivers an event as Knative's broker dispatcher does to a Trigger's subscriber:
// each attempt bounded by the delivery timeout, and retried after an exponential backoff when it
// timed out or was answered 5xx (or 429), up to retries times.
type dispatcher struct {
	timeout time.Duration // delivery.timeout
	retries int           // delivery.retry
	backoff time.Duration // delivery.backoffDelay, doubled at each retry
}

// delivery is one attempt's outcome.
type delivery struct {
	status   int // 0 when no answer came within the timeout
	timedOut bool
	reply    *event.Event
	took     time.Duration
}

// deliver sends e to url until an attempt is answered below 500 (except 429), or the retries run
// out, and returns every attempt.
func (d dispatcher) deliver(t *testing.T, url string, e event.Event) []delivery {
	t.Helper()
	client := &http.Client{Transport: &http.Transport{}}
	var out []delivery
	for attempt := 0; attempt <= d.retries; attempt++ {
		if attempt > 0 {
			time.Sleep(d.backoff << (attempt - 1))
		}
		ctx, cancel := context.WithTimeout(context.Background(), d.timeout)
		req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, nil)
		if err != nil {
			t.Fatal(err)
		}
		if err := cehttp.WriteRequest(ctx, binding.ToMessage(&e), req); err != nil {
			t.Fatal(err)
		}
		start := time.Now()
		resp, err := client.Do(req)
		var dl delivery
		switch {
		case errors.Is(err, context.DeadlineExceeded):
			dl = delivery{timedOut: true}
		case err != nil:
			cancel()
			t.Fatalf("delivery %d: %v", attempt+1, err)
		default:
			body, rerr := io.ReadAll(resp.Body)
			_ = resp.Body.Close()
			if errors.Is(rerr, context.DeadlineExceeded) {
				dl = delivery{timedOut: true}
				break
			}
			dl.status = resp.StatusCode
			resp.Body = io.NopCloser(bytes.NewReader(body))
			if reply, err := binding.ToEvent(context.Background(), cehttp.NewMessageFromHttpResponse(resp)); err == nil {
				dl.reply = reply
			}
		}
		cancel()
		dl.took = time.Since(start)
		out = append(out, dl)
		if !dl.timedOut && dl.status < 500 && dl.status != http.StatusTooManyRequests {
			return out
		}
	}
	return out
}

// At fleet size one event can take longer to land than the Trigger's delivery timeout. The writer
// then answers 503 at its event deadline, below that timeout, rather than leaving the broker to
// give up on a request that never answers; the writes go on, and the broker's redelivery waits for
// them instead of submitting them again: it is answered write.done once they have landed, and
// each object's status is written once.
func TestEventPastItsDeadlineIsAnswered503AndItsRedeliveryJoinsItsWrites(t *testing.T) {
	const (
		deadline = time.Second
		// Per hub request: a create and a status update take 2.4s, longer than the delivery timeout.
		slow = 1200 * time.Millisecond
	)
	proxy := newThrottlingHub(t)
	proxy.slowBy(slow)
	s := startWriter(t, serverOpts{hub: proxy.config(), deadline: deadline})
	resource := fmt.Sprintf("deadline-%d", ids.Add(1)) // new objects, however often the test runs
	want := map[string]int32{}
	var items []contract.ClusterScores
	for i, c := range clusters {
		want[c] = int32(10 + i)
		items = append(items, item(c, score("a", float64(10+i))))
	}
	e := scoreEvent(t, time.Now(), contract.ScoreUpdated{Resource: resource, Items: items})

	d := dispatcher{timeout: 2 * deadline, retries: 8, backoff: 200 * time.Millisecond}
	ds := d.deliver(t, s.url, e)
	for i, dl := range ds {
		t.Logf("delivery %d: status %d, timed out %v, after %s", i+1, dl.status, dl.timedOut, dl.took.Round(time.Millisecond))
	}
	for i, dl := range ds {
		if dl.timedOut {
			t.Fatalf("delivery %d: no answer within the delivery timeout (%s): the broker gave up on it", i+1, d.timeout)
		}
	}
	first := ds[0]
	if first.status != http.StatusServiceUnavailable {
		t.Fatalf("delivery 1: status %d, want 503 at the event deadline", first.status)
	}
	if r := result(t, first.reply); r.Reason != contract.ReasonUnavailable || !r.Retriable || r.Counts["Failed/Unavailable"] != len(clusters) {
		t.Errorf("delivery 1: answer %+v, want Unavailable, retriable, %d items still being written", r, len(clusters))
	}
	if len(ds) < 2 {
		t.Fatal("no redelivery after the 503")
	}
	last := ds[len(ds)-1]
	if last.status != http.StatusOK || last.reply == nil || last.reply.Type() != contract.TypeWriteDone {
		t.Fatalf("delivery %d: status %d reply %v, want 200 write.done", len(ds), last.status, last.reply)
	}
	r := result(t, last.reply)
	if len(r.Items) != len(clusters) {
		t.Fatalf("delivery %d: %d items, want %d", len(ds), len(r.Items), len(clusters))
	}
	for _, it := range r.Items {
		obj := get(t, it.Cluster, resource)
		// Written, not Duplicate: the redelivery answers the first delivery's writes, which it
		// joined, and did not write again.
		if it.Outcome != contract.OutcomeWritten || obj == nil || it.ResourceVersion != obj.ResourceVersion {
			t.Errorf("%s: %+v, want Written at the hub's resourceVersion (%v)", it.Cluster, it, obj)
		}
		if got := scoresOf(obj); got["a"] != want[it.Cluster] {
			t.Errorf("%s/%s on the hub: %v, want a=%d", it.Cluster, resource, got, want[it.Cluster])
		}
		path := fmt.Sprintf("/apis/cluster.open-cluster-management.io/v1alpha1/namespaces/%s/addonplacementscores/%s/status", it.Cluster, resource)
		if n := proxy.callsTo(http.MethodPut, path); n != 1 {
			t.Errorf("%s/%s: status written %d times, want once", it.Cluster, resource, n)
		}
	}
	// Nothing was submitted twice: a second submission would have cost a read at least.
	if gets, writes := s.apiRequests(t, "get"), s.apiRequests(t, "create", "update_status"); gets != 0 || writes != float64(2*len(clusters)) {
		t.Errorf("the writer made %.0f reads and %.0f writes (creates and status updates), want 0 and %d", gets, writes, 2*len(clusters))
	}
}
