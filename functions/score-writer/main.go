// Command score-writer receives io.scoreflow.score.updated CloudEvents and writes them to
// AddOnPlacementScore status on the OCM hub, replying with write.done or write.failed.
package main

import (
	"context"
	"errors"
	"fmt"
	"time"

	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/leader"
	"github.com/scoreflow/scoreflow/pkg/masks"
	"github.com/scoreflow/scoreflow/pkg/scorewriter"
)

func main() {
	fn := function.New("score-writer", "writes io.scoreflow.score.updated events to AddOnPlacementScores on the OCM hub")
	kubeconfig := fn.Flags.String("kubeconfig", "", "kubeconfig of the hub (empty: in-cluster config)")
	qps := fn.Flags.Float64("kube-api-qps", 200, "client-side rate limit of hub requests per second")
	burst := fn.Flags.Int("kube-api-burst", 400, "client-side burst of hub requests")
	ttl := fn.Flags.Duration("ttl", scorewriter.DefaultTTL, "validUntil for events that set none, counted from when their metrics were observed (a few scoring intervals)")
	remember := fn.Flags.Int("remember-bytes", scorewriter.DefaultRememberBytes, "bytes of answers to recall (by source and id), so redeliveries are answered without writing again")
	pendingBytes := fn.Flags.Int("max-pending-bytes", scorewriter.DefaultMaxPendingBytes, "bytes that accepted, unwritten updates may hold; beyond it events get 503")
	deadline := fn.Flags.Duration("event-deadline", scorewriter.DefaultEventDeadline, "how long a request waits for its event's writes before answering 503 (the writes go on, and a redelivery waits for them instead of writing again); keep it below the delivery timeout of the writer's Trigger (45s) so the broker hears an answer (0: no deadline)")
	skew := fn.Flags.Duration("max-clock-skew", 2*time.Minute, "how far ahead of this clock an event's time may be; events from further in the future are refused")
	opts := scorewriter.DefaultOptions()
	fn.Flags.DurationVar(&opts.Window, "coalesce-window", opts.Window, "least time between the starts of two writes of one object: updates arriving meanwhile share its next write; an idle object is written at once (0: back to back)")
	fn.Flags.IntVar(&opts.Workers, "workers", opts.Workers, "objects written concurrently")
	fn.Flags.IntVar(&opts.MaxConflicts, "max-conflicts", opts.MaxConflicts, "re-reads after write conflicts before an update fails as retriable")
	fn.Flags.DurationVar(&opts.RetryFor, "retry-for", opts.RetryFor, "how long to retry an unavailable hub before answering 503 so the broker redelivers")
	fn.Flags.DurationVar(&opts.RequestTimeout, "hub-request-timeout", opts.RequestTimeout, "how long one hub request may take before it is abandoned and retried (a frozen hub): events are then answered 503 after --retry-for, not at --event-deadline")
	fn.Flags.DurationVar(&opts.DeleteEmptyAfter, "delete-empty-after", opts.DeleteEmptyAfter, "how long an AddOnPlacementScore the writer left without scores (every one expired, retired or masked) stays before the writer deletes it, freeing its place in --max-resources-per-cluster")
	fn.Flags.IntVar(&opts.MaxPending, "max-pending", opts.MaxPending, "updates accepted but not yet written; beyond it events get 503")
	fn.Flags.IntVar(&opts.MaxResourcesPerCluster, "max-resources-per-cluster", opts.MaxResourcesPerCluster, "AddOnPlacementScores the writer keeps per cluster namespace; creating one more is refused (TooManyResources)")
	fn.Flags.IntVar(&opts.MaxScoreSeries, "max-score-series", opts.MaxScoreSeries, "per-cluster series of scoreflow_score and its freshness gauges exported (about half a KiB of memory each); objects beyond get none, counted in scoreflow_writer_score_series_dropped_total, and only the per-resource freshness aggregates cover them")
	maskFile := fn.Flags.String("masks-file", "", "YAML list of score masks, [{cluster, resource, score}], usually a mounted ConfigMap: a masked score is not written and is removed from its object (empty: none)")
	maskEvery := fn.Flags.Duration("masks-interval", 2*time.Second, "how often the masks file is checked for a new content")
	lead := leader.AddFlags(fn.Flags, "score-writer")
	requireResource := fn.Flags.Bool("require-resource-attribute", false, "refuse (400, Forbidden) score.updated events without the scoreflowresource attribute naming their resource; events whose attribute names another resource than their data are refused always (set where the broker's EventPolicies filter senders on it)")

	fn.Main(func(ctx context.Context) error {
		if *deadline < 0 {
			return fmt.Errorf("--event-deadline must not be negative, not %v", *deadline)
		}
		cfg, err := clientcmd.BuildConfigFromFlags("", *kubeconfig)
		if err != nil {
			return fmt.Errorf("hub config: %w", err)
		}
		cfg.QPS, cfg.Burst = float32(*qps), *burst
		cfg.UserAgent = "scoreflow-score-writer"
		var mf *masks.File
		if *maskFile != "" {
			if *maskEvery <= 0 {
				return fmt.Errorf("--masks-interval must be positive, not %v", *maskEvery)
			}
			if mf, err = masks.Open(*maskFile, fn.Log, fn.Registry); err != nil {
				return err
			}
			opts.Masks = mf
		}
		client, err := clusterclient.NewForConfig(cfg)
		if err != nil {
			return err
		}
		kube, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		// Expiry, masks and the rest of the writer's work of its own accord: one replica at a time.
		if opts.Elector, err = lead.Elector(kube, fn.Log); err != nil {
			return err
		}
		clusters := scorewriter.WatchManagedClusters(ctx, client)
		opts.Clusters = clusters

		var w *scorewriter.Writer
		metrics := scorewriter.NewMetrics(fn.Registry, func() float64 { return float64(w.Pending()) })
		if w, err = scorewriter.NewWriter(client, opts, metrics, fn.Log); err != nil {
			return err
		}
		clusters.Notify(w)
		// Ready once both informers have synced: before, every cluster would look unknown and no
		// object's expiry would be known.
		fn.SetReadiness(func() error { return errors.Join(clusters.Ready(), w.Ready()) })
		h := scorewriter.NewHandler(w, clusters, scorewriter.HandlerOptions{TTL: *ttl, MaxClockSkew: *skew, RememberBytes: *remember, MaxPendingBytes: *pendingBytes,
			EventDeadline: *deadline, Source: fn.Source(), RequireResourceAttribute: *requireResource})

		done := make(chan struct{})
		wctx, stopWriter := context.WithCancel(context.Background())
		go func() { w.Run(wctx); close(done) }()
		if mf != nil {
			// Every replica follows the masks for what it writes; scores masked while the writer
			// runs leave their objects now (the replica that leads writes them; one that starts
			// leading looks at every object).
			go mf.Watch(ctx, *maskEvery, func(es []masks.Entry) {
				keys := make([]scorewriter.Key, len(es))
				for i, e := range es {
					keys[i] = scorewriter.Key{Cluster: e.Cluster, Resource: e.Resource}
				}
				w.EnforceMasks(keys...)
			})
		}
		err = fn.Serve(ctx, h.Handle, h.FailureReply)
		// Every request has been answered (after its write, or 503), so what the writer still
		// holds belongs to no waiting request (events answered 503 at their deadline, or whose
		// sender left): stop it. It fails those as retriable, and their redeliveries, to another
		// instance, write them afresh.
		stopWriter()
		<-done
		return err
	})
}
