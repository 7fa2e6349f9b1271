package writer

import (
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Refreshes of a fleet arrive faster than the hub can write them (the writer's client is limited
// to 100 requests/s, a refresh is 200 objects, one arrives every 300ms). The newest value
// acknowledged for each object is what the hub holds (coalescing writes only the latest), nothing
// answered 2xx is missing, what waits to be written stays within its bound (the rest is answered
// 503, for the broker to redeliver), and once the refreshes stop the last one lands everywhere.
func TestOverloadedFleetKeepsTheLatestValueAndBoundedMemory(t *testing.T) {
	names := fleetClusters(t, 40)
	limited := rest.CopyConfig(hub.Config)
	limited.QPS, limited.Burst = 100, 100
	const pendingBytes = 400 << 10 // about three refreshes' updates
	s := startWriter(t, serverOpts{hub: limited, pending: pendingBytes})
	w := &fleetSender{url: s.url, http: &http.Client{Timeout: 5 * time.Minute, Transport: &http.Transport{MaxIdleConnsPerHost: 64}}}

	var peak atomic.Int64
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			if n := int64(s.writer.Pending()); n > peak.Load() {
				peak.Store(n)
			}
			select {
			case <-stop:
				return
			case <-time.After(5 * time.Millisecond):
			}
		}
	}()
	writes := s.apiRequests(t, "create", "update_status")
	start := time.Now()
	const rounds = 12
	answers := overloadRounds(t, w, names, 1, rounds, 300*time.Millisecond, time.Now().Add(-time.Minute))
	elapsed := time.Since(start)
	close(stop)
	wg.Wait()

	written, refused := 0, 0
	for _, as := range answers {
		for _, a := range as {
			switch {
			case a.status == http.StatusOK:
				for _, it := range a.res.Items {
					if it.Outcome == contract.OutcomeWritten {
						written++
					}
				}
			case a.status == http.StatusServiceUnavailable:
				refused++
			default:
				t.Errorf("answer %d %+v, want 200 or 503", a.status, a.res)
			}
		}
	}
	apiWrites := s.apiRequests(t, "create", "update_status") - writes
	// Every update weighs at least the fixed overhead the handler counts, 512 bytes.
	bound := int64(pendingBytes / 512)
	t.Logf("%d refreshes of %d objects every 300ms, answered in %s: %d events refused 503, %d items written in %.0f API writes; at most %d updates waited (bound %d)",
		rounds, len(names)*len(fleetResources), elapsed.Round(time.Millisecond), refused, written, apiWrites, peak.Load(), bound)
	if refused == 0 {
		t.Error("no event was refused: the refreshes did not outrun the hub, so this proves nothing")
	}
	if peak.Load() > bound || peak.Load() == 0 {
		t.Errorf("%d updates waited at once, bound %d", peak.Load(), bound)
	}
	if apiWrites >= float64(rounds*len(names)*len(fleetResources)) {
		t.Errorf("%.0f API writes for %d refreshes of %d objects: nothing was coalesced", apiWrites, rounds, len(names)*len(fleetResources))
	}

	// The last refresh, once nothing else is waiting, lands everywhere.
	last := w.refresh(t, names, rounds+1, time.Now())
	for _, a := range last {
		if a.status != http.StatusOK {
			t.Fatalf("final refresh: %d %+v", a.status, a.res)
		}
	}
	verifyFleet(t, names, rounds+1)
}
