package prom

import (
	"flag"
	"time"
)

// DefaultTimeout bounds one query: well under a Knative delivery's usual timeout, so a slow
// Prometheus yields our 503 rather than the broker's own give-up.
const DefaultTimeout = 10 * time.Second

// RegisterFlags adds the flags every Prometheus-backed function takes, the same way everywhere:
// --prometheus-url, --prometheus-token-file, --prometheus-ca-file and --prometheus-timeout (and,
// through function.ApplyEnv, PROMETHEUS_URL and so on). Read the returned Config after parsing.
func RegisterFlags(fs *flag.FlagSet) *Config {
	c := &Config{}
	fs.StringVar(&c.URL, "prometheus-url", "", "base URL of the Prometheus HTTP API (Prometheus, Thanos Query, VictoriaMetrics), e.g. http://prometheus.monitoring.svc:9090 (required)")
	fs.StringVar(&c.BearerTokenFile, "prometheus-token-file", "", "file holding a bearer token for Prometheus, re-read on every query so a rotated Secret is picked up (empty: no token)")
	fs.StringVar(&c.CAFile, "prometheus-ca-file", "", "PEM CA bundle to verify an https Prometheus URL (empty: system roots)")
	fs.DurationVar(&c.Timeout, "prometheus-timeout", DefaultTimeout, "timeout of one query, also passed to Prometheus; a timed-out query answers 503 so the broker retries")
	return c
}
