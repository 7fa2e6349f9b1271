package static

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/event"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// File is a table file, parsed again whenever its content changes. Reading a small file per event
// costs little and, unlike watching, also sees a ConfigMap update (a symlink swap) reliably.
type File struct {
	Path string
	Log  *slog.Logger

	mu    sync.Mutex
	raw   []byte
	table *Table
	err   error
}

// Load returns the table as the file holds it now.
func (f *File) Load() (*Table, error) {
	b, err := os.ReadFile(f.Path)
	if err != nil {
		return nil, fmt.Errorf("table file: %w", err)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.raw != nil && bytes.Equal(b, f.raw) {
		return f.table, f.err
	}
	f.raw = b
	f.table, f.err = Parse(b)
	sum := sha256.Sum256(b)
	if f.err != nil {
		f.err = fmt.Errorf("table file %s: %w", f.Path, f.err)
		f.Log.Error("table rejected", "path", f.Path, "sha256", hex.EncodeToString(sum[:6]), "err", f.err)
	} else {
		f.Log.Info("table loaded", "path", f.Path, "sha256", hex.EncodeToString(sum[:6]), "rows", len(f.table.Rows), "resources", f.table.ResourceNames())
	}
	return f.table, f.err
}

// Config is the PingSource data: which resource to score.
type Config struct {
	Resource string `json:"resource,omitempty"`
}

// Validate accepts an empty resource: the table decides whether one is needed.
func (c *Config) Validate() error {
	if c.Resource != "" {
		return contract.ValidateResourceName(c.Resource)
	}
	return nil
}

// Scorer answers PingSource events from a table file.
type Scorer struct {
	File *File
}

// Ping scores the resource a PingSource event names.
func (s *Scorer) Ping(_ context.Context, e event.Event) (*scorer.Result, error) {
	var cfg Config
	if len(bytes.TrimSpace(e.Data())) > 0 {
		if err := scorer.DecodeConfig(e, &cfg); err != nil {
			return nil, err
		}
	}
	t, err := s.File.Load()
	if err != nil {
		return nil, scorer.BadConfig("%v", err)
	}
	observed := time.Now() // when the values were read: they are current as of now
	if cfg.Resource == "" {
		if len(t.Resources) != 1 {
			return nil, scorer.BadConfig("PingSource data: name the resource to score, one of %v (one PingSource per resource)", t.ResourceNames())
		}
		cfg.Resource = t.Resources[0].Name
	}
	su, err := t.Score(cfg.Resource)
	if err != nil {
		return nil, scorer.BadConfig("%v", err)
	}
	return &scorer.Result{Scores: su, Observed: observed}, nil
}
