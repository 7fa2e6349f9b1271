package dsf

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sort"
	"strings"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// validityIntervals is how many of a scorer's intervals (at least a minute each) its scores stay
// valid: a missed round or two does not expire them, a scorer that stopped answering does.
const validityIntervals = 3

// DefaultMaxRetries is how many times in a row a scorer may fail retriably (no answer, 5xx)
// before the bridge stops asking the broker to redeliver its pings.
const DefaultMaxRetries = 3

// PingConfig is a PingSource's data in hub mode: which configured scorer to run, nothing else.
type PingConfig struct {
	// Scorer is a DynamicScorer's metadata.name in the bridge's scorers file.
	Scorer string `json:"scorer"`
}

// Validate implements scorer.Config.
func (p *PingConfig) Validate() error {
	if p.Scorer == "" {
		return errors.New(`scorer: is required: {"scorer": "<a DynamicScorer's name in the bridge's scorers file>"}`)
	}
	return nil
}

// Bridge is hub mode: a PingSource names one DynamicScorer of the bridge's scorers file (a
// mounted ConfigMap the administrator writes); the bridge runs it against a hub-side Prometheus
// whose series carry a cluster label, and answers with one score.updated for every cluster.
type Bridge struct {
	run          *Runner
	file         string
	clusterLabel string
	maxRetries   int
	log          *slog.Logger

	mu      sync.Mutex
	raw     []byte
	objects *Objects
	loadErr error
	streak  map[string]int // consecutive retriable failures, by scorer
}

// NewBridge serves the scorers of file (DynamicScorer and DynamicScoringConfig documents), read
// again whenever it changes. It is read once now: a file that does not decode stops the start.
// A ping writes only the resource its own spec names (SpecResource): the file, the deployment's
// configuration, decides what the bridge may score, and no list elsewhere repeats it.
func NewBridge(run *Runner, file, clusterLabel string, maxRetries int, log *slog.Logger) (*Bridge, error) {
	if file == "" {
		return nil, errors.New("--scorers-file is required in hub mode: the DynamicScorers pings may name")
	}
	if err := contract.ValidateLabelName(clusterLabel); err != nil {
		return nil, fmt.Errorf("--cluster-label: %v", err)
	}
	if maxRetries < 0 {
		return nil, fmt.Errorf("--max-retries must be 0 or more, not %d", maxRetries)
	}
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	b := &Bridge{run: run, file: file, clusterLabel: clusterLabel, maxRetries: maxRetries, log: log, streak: map[string]int{}}
	if _, err := b.load(); err != nil {
		return nil, err
	}
	return b, nil
}

// Routes is the bridge's inputs for scorer.Handler: PingSource events only.
func (b *Bridge) Routes() scorer.Route { return scorer.Route{contract.TypePing: b.Ping} }

// Ping runs the scorer the ping names and answers its scores.
func (b *Bridge) Ping(ctx context.Context, e event.Event) (*scorer.Result, error) {
	var pc PingConfig
	if err := scorer.DecodeConfig(e, &pc); err != nil {
		return nil, scorer.BadConfig("%v (the data names a configured scorer only: see docs/dsf.md)", err)
	}
	objs, err := b.load()
	if err != nil {
		return nil, scorer.BadConfig("%v", err)
	}
	var ds *DynamicScorer
	for i := range objs.Scorers {
		if objs.Scorers[i].Name == pc.Scorer {
			ds = &objs.Scorers[i]
		}
	}
	if ds == nil {
		return nil, scorer.BadConfig("no DynamicScorer %s in the bridge's scorers file (it has %s)", contract.Truncate(fmt.Sprintf("%q", pc.Scorer), 80), names(objs.Scorers))
	}
	ev, err := b.run.Evaluate(ctx, ds, scope{ClusterLabel: b.clusterLabel, Masks: objs.Masks, Owns: ownedBy(ds)})
	name := specScoreName(ds)
	if ev != nil && ev.Plan != nil {
		name = ev.Plan.ScoreName
	}
	if err != nil {
		if name != "" {
			b.run.dsf.round(name, err)
		}
		return nil, b.failed(ds.Name, err)
	}
	b.succeeded(ds.Name)
	if ev.Skipped != "" {
		b.log.Info("scorer not run", "scorer", ds.Name, "why", ev.Skipped)
		return nil, nil
	}
	b.run.dsf.round(name, nil)
	if !ev.Plan.Write {
		b.log.Info("scored: scoreDestination None, exported as dynamic_score only", "scorer", ds.Name, "results", len(ev.Results))
		return nil, nil
	}
	m := ev.Mapped
	if len(m.Items) == 0 {
		if n := m.Dropped[dropCluster]; n > 0 {
			return nil, b.failed(ds.Name, scorer.Fail(ReasonNoCluster, false, fmt.Errorf(
				"none of the scorer's results carries a cluster label %q (%d without one): hub mode needs series labelled by cluster and a query that keeps the label; DSF's published specs query one cluster's Prometheus: run them with the agent (docs/dsf.md)",
				b.clusterLabel, n)))
		}
		return nil, nil
	}
	su := contract.ScoreUpdated{Resource: ev.Plan.Resource, Items: m.Items}
	vu := ev.Observed.Add(validityIntervals * max(ev.Plan.Interval, time.Minute))
	su.ValidUntil = &vu
	return &scorer.Result{Scores: su, Observed: ev.Observed}, nil
}

// load returns the scorers file's objects, decoded again when its content changed; scorers no
// longer in it are forgotten (their clients and metric series).
func (b *Bridge) load() (*Objects, error) {
	raw, err := os.ReadFile(b.file)
	if err != nil {
		return nil, fmt.Errorf("--scorers-file: %w", err)
	}
	b.mu.Lock()
	defer b.mu.Unlock()
	if b.objects != nil && bytes.Equal(raw, b.raw) {
		return b.objects, b.loadErr
	}
	objs, err := DecodeObjects(bytes.NewReader(raw))
	if err != nil {
		// Every ping fails, naming this, until the file is fixed.
		err = fmt.Errorf("--scorers-file %s: %w", b.file, err)
		b.raw, b.loadErr = raw, err
		if b.objects == nil {
			b.objects = &Objects{}
		}
		return nil, err
	}
	kept := map[string]bool{}
	for _, s := range objs.Scorers {
		kept[s.Name] = true
	}
	for _, s := range b.objects.orNone().Scorers {
		if !kept[s.Name] {
			b.run.Forget(s.Name, specScoreName(&s))
			delete(b.streak, s.Name)
		}
	}
	b.raw, b.objects, b.loadErr = raw, objs, nil
	b.log.Info("scorers file read", "file", b.file, "scorers", names(objs.Scorers), "masks", len(objs.Masks))
	return objs, nil
}

func (o *Objects) orNone() *Objects {
	if o == nil {
		return &Objects{}
	}
	return o
}

// failed logs a failure (the reply says the same) and bounds retries: after maxRetries
// retriable failures of one scorer in a row, its failures are no longer retriable, so the broker
// stops redelivering pings a scorer keeps failing (a deterministic 500); each new ping still asks
// it once, and one success resets the count.
func (b *Bridge) failed(name string, err error) error {
	se, ok := err.(*scorer.Error)
	if !ok {
		se = &scorer.Error{Reason: ReasonScorerUnavailable, Retriable: true, Err: err}
	}
	if se.Retriable {
		b.mu.Lock()
		b.streak[name]++
		n := b.streak[name]
		b.mu.Unlock()
		if n > b.maxRetries {
			se = &scorer.Error{Reason: ReasonScorerFailed, Err: fmt.Errorf("%w; %d retriable failures in a row: not retried until the scorer answers again", se.Err, n)}
		}
	}
	msg := se.Err.Error()
	b.log.Warn("scoring failed", "scorer", name, "reason", se.Reason, "retriable", se.Retriable, "err", msg)
	if len(msg) > maxMessage {
		se = &scorer.Error{Reason: se.Reason, Retriable: se.Retriable, Err: errors.New(contract.Truncate(msg, maxMessage))}
	}
	return se
}

func (b *Bridge) succeeded(name string) {
	b.mu.Lock()
	delete(b.streak, name)
	b.mu.Unlock()
}

// maxMessage keeps a failure's message short: the score.failed reply that carries it must stay
// well under the 768 bytes Knative's dispatcher accepts in a non-2xx body.
const maxMessage = 400

func names(ss []DynamicScorer) string {
	var out []string
	for _, s := range ss {
		out = append(out, s.Name)
	}
	sort.Strings(out)
	if len(out) == 0 {
		return "none"
	}
	return contract.Truncate(strings.Join(out, ", "), 200)
}

// ownedBy refuses, before anything is queried, a resource other than the one ds's spec names: with
// configSyncMode Full the scorer's /config decides the score's name, and a scorer must not write
// a resource its spec does not give it (another scorer's, say). Every name the bridge writes is
// thus one its scorers file, which the administrator writes, holds.
func ownedBy(ds *DynamicScorer) func(resource string) error {
	own := SpecResource(ds)
	return func(resource string) error {
		switch {
		case resource == own:
			return nil
		case own == "":
			return scorer.BadConfig("DynamicScorer %s: its spec names no valid scoring.params.name and the scorer's /config makes it resource %q: "+
				"the bridge writes only the resource a spec names; write the score's name in the spec", ds.Name, contract.Truncate(resource, 64))
		}
		return scorer.BadConfig("DynamicScorer %s: the scorer's /config makes its score resource %q, not the spec's %q: the bridge writes only the resource the spec names",
			ds.Name, contract.Truncate(resource, 64), own)
	}
}

// specScoreName is the spec's own scoring.params.name, "" when only the scorer's /config names it.
func specScoreName(ds *DynamicScorer) string {
	if p := ds.Spec.Scoring.Params; p != nil {
		return p.Name
	}
	return ""
}
