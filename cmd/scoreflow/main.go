// Command scoreflow is the developer CLI: run the whole flow locally, send events to a broker,
// and print the scores on a hub.
//
//	scoreflow run      local hub, placement controller, Prometheus, broker and every function
//	scoreflow send     POST a CloudEvent to the broker, like curl
//	scoreflow scores   the AddOnPlacementScores of a hub as a table, and a Placement's decision
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/scoreflow/scoreflow/tools"
)

const usage = `scoreflow: event-driven cluster scoring for Open Cluster Management

Usage:
  scoreflow run [flags]      run the whole flow locally (make run)
  scoreflow send [flags]     send a CloudEvent to the broker
  scoreflow scores [flags]   print the AddOnPlacementScores and the demo Placement's decision

Run "scoreflow <command> --help" for a command's flags.
`

func main() {
	if len(os.Args) < 2 {
		fmt.Fprint(os.Stderr, usage)
		os.Exit(2)
	}
	var err error
	switch os.Args[1] {
	case "run":
		err = run(os.Args[2:])
	case "send":
		err = send(os.Args[2:])
	case "scores":
		err = scores(os.Args[2:])
	case "-h", "--help", "help":
		fmt.Print(usage)
		return
	default:
		fmt.Fprintf(os.Stderr, "scoreflow: unknown command %q\n\n%s", os.Args[1], usage)
		os.Exit(2)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "scoreflow:", err)
		os.Exit(1)
	}
}

// stateDir is where `scoreflow run` keeps its kubeconfig and logs, beside the tools cache, so the
// other commands and kubectl find them.
func stateDir() string { return filepath.Join(filepath.Dir(tools.BinDir()), "run") }

// brokerFile, in the state directory, holds the ingress URL of the broker `scoreflow run` started
// (Knative's ingress listens on a port chosen at start).
const brokerFile = "broker-url"

// runningBroker is the URL `scoreflow run` wrote, or "" when none is running.
func runningBroker() string {
	b, err := os.ReadFile(filepath.Join(stateDir(), brokerFile))
	if err != nil {
		return ""
	}
	return strings.TrimSpace(string(b))
}

// tokenFile, in the state directory, holds the token `scoreflow run --oidc` issued to the CLI: a
// ServiceAccount the Broker's EventPolicy admits, as oidc/README.md admits a person's client.
const tokenFile = "token"

// runningToken is the path of the token `scoreflow run --oidc` wrote, or "" when there is none.
func runningToken() string {
	p := filepath.Join(stateDir(), tokenFile)
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// runningCA is the CA certificate `scoreflow run --tls` wrote, or "" when there is none.
func runningCA() string {
	p := filepath.Join(stateDir(), "ca.crt")
	if _, err := os.Stat(p); err != nil {
		return ""
	}
	return p
}

// envOr returns the environment variable's value, or def.
func envOr(name, def string) string {
	if v := os.Getenv(name); v != "" {
		return v
	}
	return def
}
