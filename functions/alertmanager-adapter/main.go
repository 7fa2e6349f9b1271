// Command alertmanager-adapter is an Alertmanager webhook receiver: for every firing or resolved
// alert that carries a cluster label it emits a sample (1 firing, 0 resolved) in one
// io.scoreflow.metric.changed event to its sink (K_SINK, set by a SinkBinding).
//
// HTTP: POST / takes webhook payloads from callers presenting the --token-file token (or, with
// --auth-oidc, a cluster-issued token): 200 sent or nothing to send, 400 malformed, 401 not the
// token, 413 too large, 503 sink unavailable or busy so Alertmanager retries; /healthz, /readyz
// and /metrics are the function runtime's.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"github.com/scoreflow/scoreflow/pkg/alertmanager"
	"github.com/scoreflow/scoreflow/pkg/function"
)

type config struct {
	sender  func() (*function.Sender, error)
	adapter alertmanager.Options
}

func newFunction() (*function.Function, *config) {
	fn := function.New("alertmanager-adapter",
		"receives Alertmanager webhook notifications (payload version 4) on POST / and emits io.scoreflow.metric.changed: "+
			"one sample per firing (value 1) or resolved (value 0) alert that carries the cluster label, dated when the notification arrives")
	c := &config{}
	c.sender = fn.SinkFlags()
	fn.Flags.StringVar(&c.adapter.ClusterLabel, "cluster-label", "cluster", "alert label that holds the managed cluster's name; alerts without it are skipped and counted")
	fn.Flags.StringVar(&c.adapter.MetricName, "metric-name", "", "fixed metric name for every sample, e.g. scoreflow_alert_firing (the alertname stays a label); empty: --metric-prefix followed by the alertname")
	fn.Flags.StringVar(&c.adapter.MetricPrefix, "metric-prefix", "alert_", "with no --metric-name, a sample's metric is this prefix plus the alertname, invalid characters replaced by _")
	fn.Flags.DurationVar(&c.adapter.SendTimeout, "send-timeout", 10*time.Second, "how long one notification may take to reach the sink, retries included, before answering 503 (keep it under Alertmanager's webhook timeout)")
	fn.Flags.StringVar(&c.adapter.TokenFile, "token-file", "", "file holding the bearer token callers must present (a mounted Secret Alertmanager's http_config.authorization reads too; re-read on every request). "+
		"Required unless --auth-oidc, which checks a cluster-issued token instead")
	fn.Flags.Int64Var(&c.adapter.MaxBodyBytes, "max-body-bytes", alertmanager.DefaultMaxBodyBytes, "largest notification taken (413 beyond: keep the receiver's max_alerts under it)")
	fn.Flags.IntVar(&c.adapter.MaxConcurrent, "max-concurrent", alertmanager.DefaultMaxConcurrent, "notifications handled at once; more are answered 503 before their body is read, and Alertmanager retries them")
	fn.Flags.Lookup("port").Usage = "HTTP port for Alertmanager webhooks (POST /), /healthz, /readyz and /metrics"
	return fn, c
}

func main() {
	fn, c := newFunction()
	fn.Main(func(ctx context.Context) error {
		// Whoever reaches the adapter sends under its identity: every caller authenticates.
		if fn.Flags.Lookup("auth-oidc").Value.String() == "true" {
			if c.adapter.TokenFile != "" {
				fn.Log.Info("--auth-oidc checks callers: --token-file is not used", "tokenFile", c.adapter.TokenFile)
			}
			c.adapter.TokenFile = ""
		} else if c.adapter.TokenFile == "" {
			return errors.New("callers must authenticate: give --token-file (the Secret whose token Alertmanager presents) or --auth-oidc")
		}
		if c.adapter.MaxBodyBytes <= 0 || c.adapter.MaxConcurrent <= 0 {
			return errors.New("--max-body-bytes and --max-concurrent must be positive")
		}
		sender, err := c.sender()
		if err != nil {
			return err
		}
		c.adapter.Source = fn.Source()
		a, err := alertmanager.New(c.adapter, sender, fn.Log, fn.Registry)
		if err != nil {
			return fmt.Errorf("configuration: %w", err)
		}
		return fn.ServeHTTP(ctx, fn.Mux(a))
	})
}
