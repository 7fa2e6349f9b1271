package broker

import (
	"fmt"
	"net/http"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
)

// BenchmarkLocalBroker measures events per second from ingress to delivered: b.N events POSTed
// by 8 concurrent clients to one broker with one trigger, timed until the subscriber has them
// all. Clients retry 429s, as a SinkBinding's sender does.
func BenchmarkLocalBroker(b *testing.B) {
	var delivered atomic.Int64
	done := make(chan struct{})
	target := int64(b.N)
	sub := newSink(b, func(int, received) answer {
		if delivered.Add(1) == target {
			close(done)
		}
		return answer{}
	})
	objs := decode(b, oneTrigger("", ""))
	s := start(b, Config{Brokers: objs.brokers, Triggers: objs.triggers, Resolver: Services{"scoreflow/subscriber": sub.URL}})
	url := s.URL("scoreflow", "default")
	client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 16}}
	defer client.CloseIdleConnections()

	const senders = 8
	var next, refused atomic.Int64
	var wg sync.WaitGroup
	b.ResetTimer()
	began := time.Now()
	for range senders {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for {
				i := next.Add(1)
				if i > target {
					return
				}
				e := newEvent(fmt.Sprint(i), "io.scoreflow.test", nil)
				for {
					req, _ := http.NewRequest(http.MethodPost, url, nil)
					_ = cehttp.WriteRequest(b.Context(), binding.ToMessage(&e), req)
					resp, err := client.Do(req)
					if err != nil {
						b.Error(err)
						return
					}
					_ = resp.Body.Close()
					if resp.StatusCode == http.StatusAccepted {
						break
					}
					refused.Add(1)
					time.Sleep(time.Millisecond)
				}
			}
		}()
	}
	wg.Wait()
	select {
	case <-done:
	case <-time.After(time.Minute):
		b.Fatalf("%d of %d delivered", delivered.Load(), target)
	}
	elapsed := time.Since(began)
	b.StopTimer()
	b.ReportMetric(float64(b.N)/elapsed.Seconds(), "events/s")
	b.ReportMetric(float64(refused.Load()), "429s")
}
