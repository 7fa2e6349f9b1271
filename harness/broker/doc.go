// Package broker is a local stand-in for a Knative MT channel-based Broker: it takes the same
// Broker, Trigger and PingSource objects a cluster would, and needs no cluster.
//
// Events POSTed to /<namespace>/<broker> are matched against that broker's Triggers with
// Knative's own filter code, queued per Trigger (bounded: ingress answers 429 when full) and
// delivered by a fixed pool of workers per Trigger with the Trigger's (else the Broker's)
// delivery spec: retries, backoff, timeout, dead-letter sink with the knativeerror* extensions.
// A subscriber's reply re-enters the broker with knativebrokerttl decremented, so reply loops
// die. PingSources fire on their cron schedules.
//
// Wiring:
//
//	srv, err := broker.New(broker.Config{Brokers: bs, Triggers: ts, PingSources: ps,
//		Resolver: broker.Services{"scoreflow/score-writer": "http://127.0.0.1:8081"}})
//	ln, _ := net.Listen("tcp", "127.0.0.1:8080")
//	err = srv.Start(ln)        // ingress at srv.URL("scoreflow", "default")
//	defer srv.Shutdown(ctx)    // stops cron and ingress, drains until ctx ends, then drops
package broker
