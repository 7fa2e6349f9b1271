package latency

import (
	"context"
	"fmt"
	"os"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Sender delivers an event; function.Sender (K_SINK, K_CE_OVERRIDES) is the one used.
type Sender interface {
	Send(ctx context.Context, e event.Event) error
}

// Agent is agent mode: it measures from the managed cluster it runs on and sends the scores.
type Agent struct {
	Scorer     *Scorer // its Cluster is the cluster scored
	ConfigFile string
	Interval   time.Duration
	Sender     Sender
	Source     string
}

// Run measures at once, then every Interval, until ctx ends. A round that cannot read its
// configuration, measures nothing or cannot send is logged and the next round tries again.
func (a *Agent) Run(ctx context.Context) {
	t := time.NewTicker(a.Interval)
	defer t.Stop()
	for {
		if err := a.Round(ctx); err != nil && ctx.Err() == nil {
			a.Scorer.Log.Error("latency round failed", "cluster", a.Scorer.Cluster, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// Round reads the configuration, measures and sends one score.updated.
func (a *Agent) Round(ctx context.Context) error {
	cfg, err := LoadFile(a.ConfigFile, a.Scorer.Cluster)
	if err != nil {
		return err
	}
	res, err := a.Scorer.Evaluate(ctx, cfg)
	if err != nil {
		return err
	}
	e, err := contract.NewScoreUpdated(a.Source, res.Observed, res.Scores)
	if err != nil {
		return err
	}
	if err := a.Sender.Send(ctx, e); err != nil {
		return err
	}
	a.Scorer.Log.Info("scores sent", "cluster", a.Scorer.Cluster, "resource", res.Scores.Resource, "id", e.ID())
	return nil
}

// LoadFile reads a configuration file (JSON or YAML, decoded strictly), validates it and resolves
// it for agentCluster.
func LoadFile(path, agentCluster string) (Config, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Config{}, fmt.Errorf("config file: %w", err)
	}
	cfg, err := Parse(b)
	if err != nil {
		return cfg, fmt.Errorf("config file %s: %w", path, err)
	}
	if err := cfg.Resolve(agentCluster); err != nil {
		return cfg, fmt.Errorf("config file %s: %w", path, err)
	}
	return cfg, nil
}

// Parse decodes an agent's configuration file (JSON or YAML, strictly) and validates it: what
// LoadFile reads before resolving it for a cluster. The agent gateway reads the resource the
// latency agents may score this way, from the configuration their AddOnTemplate ships.
func Parse(b []byte) (Config, error) {
	var cfg Config
	j, err := yaml.YAMLToJSON(b)
	if err != nil {
		return cfg, err
	}
	if err := contract.DecodeJSON(j, &cfg); err != nil {
		return cfg, err
	}
	if err := cfg.Validate(); err != nil {
		return cfg, err
	}
	return cfg, nil
}
