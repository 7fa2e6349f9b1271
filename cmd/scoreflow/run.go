package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/harness/devrun"
)

func run(args []string) error {
	fs := flag.NewFlagSet("run", flag.ContinueOnError)
	root := fs.String("root", ".", "repository root: the variant in config/ (default, oidc, tls, oidc-tls) is built from it as kubectl apply -k builds it")
	bin := fs.String("bin", "bin", "directory of the function binaries (make build)")
	state := fs.String("state", stateDir(), "where the kubeconfig, logs and mounted files go (emptied first)")
	lockWait := fs.Duration("lock-wait", 0, "how long to wait for another local Knative (a test, another run) to stop; one runs per machine")
	quiet := fs.Bool("quiet", false, "do not print events, only score and decision changes")
	oidc := fs.Bool("oidc", false, "with Knative's sender identity on and the oidc variant (config/oidc): every delivery carries a token its function verifies, the Broker admits only its EventPolicy's senders (scoreflow send gets an admitted identity of its own)")
	strictTLS := fs.Bool("tls", false, "with Knative's transport encryption strict (a local CA stands in for cert-manager): the broker, its channel, Triggers and every function serve only HTTPS; scoreflow send trusts the CA (ca.crt in the state directory)")
	traces := fs.Bool("tracing", false, "also run Jaeger (make tools builds it) and have Knative's data plane and every function export every trace's spans there: one event's trace shows each hop (the UI's address is printed)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "scoreflow run: the whole flow on this machine, from the same YAML a cluster gets. Ctrl-C stops everything.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	if err := resetState(*state); err != nil {
		return err
	}
	// SIGPIPE too: when stdout is a pipe whose reader has gone (`| tee` stopped by Ctrl-C), writes
	// then fail instead of killing us before the servers are stopped, and the run ends cleanly.
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM, syscall.SIGPIPE)
	defer stop()

	var mu sync.Mutex // one writer on stdout
	say := func(format string, a ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Printf(format+"\n", a...)
	}
	log := slog.New(slog.NewTextHandler(os.Stdout, &slog.HandlerOptions{Level: slog.LevelInfo, ReplaceAttr: dropTime}))
	start := time.Now()
	s, err := devrun.Start(ctx, devrun.Options{
		Root: *root, BinDir: *bin, StateDir: *state, Demo: true, Log: log, LockWait: *lockWait, OIDC: *oidc, TLS: *strictTLS, Tracing: *traces,
		// The Python example runs only where its replies are admitted: with --oidc no EventPolicy names it.
		PythonExample: !*oidc,
		OnEvent: func(e event.Event) {
			if !*quiet {
				say("%s", devrun.EventLine(e))
			}
		},
	})
	if err != nil {
		return err
	}
	if err := os.WriteFile(filepath.Join(*state, brokerFile), []byte(s.BrokerURL+"\n"), 0o644); err != nil {
		s.Stop()
		return err
	}
	transport := "plain HTTP"
	if *strictTLS {
		transport = fmt.Sprintf("strict TLS: https only, certificates of a local CA (%s; scoreflow send trusts it)", s.CAFile())
	}
	identity := "off (trusts the network)"
	if *oidc {
		tok, err := s.AdmitClient(ctx, cliIdentity, 24*time.Hour)
		if err == nil {
			err = os.WriteFile(filepath.Join(*state, tokenFile), []byte(tok+"\n"), 0o600)
		}
		if err != nil {
			s.Stop()
			return err
		}
		identity = fmt.Sprintf("on: tokens verified by the broker and every function; scoreflow send presents ServiceAccount %s/%s's token (%s)",
			devrun.Namespace, cliIdentity, filepath.Join(*state, tokenFile))
	}
	tracesAt := "off (scoreflow run --tracing, or make run RUN_ARGS=--tracing, runs Jaeger)"
	if s.Jaeger != nil {
		tracesAt = s.Jaeger.UIURL + " (Jaeger: search service broker.ingress or score-writer; every event is one trace)"
	}
	defer func() {
		say("stopping...")
		s.Stop()
		say("stopped: every process ended")
	}()
	say(`
scoreflow is running (started in %s)
  page       %s (open it: live clusters x scores, each decision and why, refusals)
  broker     %s (Knative Eventing's broker ingress; scoreflow send uses it)
  hub        kubectl --kubeconfig %s get addonplacementscores -A
  placement  %s/%s picks the cluster with the highest %s/%s
  logs       %s
  identity   %s
  transport  %s
  traces     %s
  send       go run ./cmd/scoreflow send --type io.scoreflow.score.updated --data '{"resource":"manual","items":[{"cluster":"cluster1","scores":[{"name":"x","value":42}]}]}'
Demo: each cluster's idle CPU rises and falls in turn (period %s); metric-watcher -> promql-scorer -> score-writer -> Placement.
The Python example scorer (examples/python-scorer) writes cost/cheap every minute from its PingSource (not with --oidc, where no EventPolicy admits it: oidc/README.md shows how to).
Ctrl-C stops everything.
`, time.Since(start).Round(100*time.Millisecond), pageURL(s), s.BrokerURL, s.Kubeconfig, devrun.Namespace, devrun.Placement,
		devrun.DemoResource, devrun.DemoScoreName, filepath.Join(s.StateDir, "logs"), identity, transport, tracesAt, devrun.DemoPeriod)

	var lastTable, lastDecision string
	tick := time.NewTicker(time.Second)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-tick.C:
		}
		sc, err := devrun.ReadScores(ctx, s.Hub.Cluster)
		if err != nil {
			continue
		}
		var b strings.Builder
		sc.Write(&b)
		if table := b.String(); table != lastTable {
			lastTable = table
			say("\n%s", table)
		}
		d, err := devrun.Decision(ctx, s.Hub.Cluster, devrun.Namespace, devrun.Placement)
		if err != nil {
			continue
		}
		if dec := strings.Join(d, ","); dec != lastDecision {
			lastDecision = dec
			say(">>> placement %s/%s decides: %s\n", devrun.Namespace, devrun.Placement, orNone(dec))
		}
	}
}

// cliIdentity is the ServiceAccount `scoreflow run --oidc` admits for scoreflow send.
const cliIdentity = "scoreflow-cli"

// stateMarker marks a directory scoreflow run made, so that it only ever empties its own.
const stateMarker = ".scoreflow-run"

// resetState empties dir for a new run, refusing a non-empty directory it did not make.
func resetState(dir string) error {
	entries, err := os.ReadDir(dir)
	switch {
	case os.IsNotExist(err):
	case err != nil:
		return err
	case len(entries) > 0:
		if _, err := os.Stat(filepath.Join(dir, stateMarker)); err != nil {
			return fmt.Errorf("--state %s is not empty and was not made by scoreflow run: choose another directory", dir)
		}
		if err := os.RemoveAll(dir); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(dir, stateMarker), nil, 0o644)
}

func pageURL(s *devrun.Stack) string {
	if u := s.PageURL(); u != "" {
		return u
	}
	return "(none: deploy/ has no " + devrun.PageName + ")"
}

func orNone(s string) string {
	if s == "" {
		return "(no cluster yet)"
	}
	return s
}

func dropTime(_ []string, a slog.Attr) slog.Attr {
	if a.Key == slog.TimeKey {
		return slog.Attr{}
	}
	return a
}
