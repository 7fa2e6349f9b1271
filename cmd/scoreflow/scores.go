package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"k8s.io/client-go/tools/clientcmd"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/devrun"
)

func scores(args []string) error {
	fs := flag.NewFlagSet("scores", flag.ContinueOnError)
	kubeconfig := fs.String("kubeconfig", envOr("KUBECONFIG", filepath.Join(stateDir(), "kubeconfig")), "hub kubeconfig (default: $KUBECONFIG, else the one `scoreflow run` writes)")
	placement := fs.String("placement", devrun.Namespace+"/"+devrun.Placement, "namespace/name of a Placement whose decision to print (empty: none)")
	fs.Usage = func() {
		fmt.Fprintln(fs.Output(), "scoreflow scores: every AddOnPlacementScore on the hub as a table (* = validUntil passed), and a Placement's decision.\n\nFlags:")
		fs.PrintDefaults()
	}
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, flag.ErrHelp) {
			return nil
		}
		return err
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
	if err != nil {
		return fmt.Errorf("kubeconfig %s: %w (is `make run` running?)", *kubeconfig, err)
	}
	c, err := clusterclient.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	sc, err := devrun.ReadScores(ctx, c)
	if err != nil {
		return err
	}
	sc.Write(os.Stdout)
	if ns, name, ok := strings.Cut(*placement, "/"); ok {
		d, err := devrun.Decision(ctx, c, ns, name)
		if err != nil {
			return err
		}
		fmt.Printf("\nplacement %s decides: %s\n", *placement, orNone(strings.Join(d, ",")))
	}
	return nil
}
