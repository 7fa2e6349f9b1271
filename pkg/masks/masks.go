// Package masks turns single scores off for single clusters: the Dynamic Scoring Framework's
// DynamicScoringConfig.spec.masks[]{clusterName, scoreName}, with the AddOnPlacementScore
// resource named too. A mask file is a YAML (or JSON) list, mounted from a ConfigMap:
//
//   - cluster: cluster2       # a ManagedCluster
//     resource: cpu-idle      # an AddOnPlacementScore
//     score: cpuIdle          # one score of it
//
// Names are exact (no wildcards). The score-writer applies masks: a masked score is not written
// and is removed from the object if present; removing the entry lets the next update through.
// File re-reads the file whenever its content changes, as a ConfigMap update (an atomic symlink
// swap) changes it, and keeps the last good set when a new content is refused.
package masks

import (
	"bytes"
	"cmp"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// MaxEntries bounds a mask file.
const MaxEntries = 100000

// Entry turns one score of one AddOnPlacementScore off for one cluster.
type Entry struct {
	Cluster  string `json:"cluster"`
	Resource string `json:"resource"`
	Score    string `json:"score"`
}

type object struct{ cluster, resource string }

// Set is a parsed mask list. It is never changed once made; the zero value and nil mask nothing.
type Set struct {
	scores map[object][]string // sorted score names per object
	n      int
}

// Parse decodes a mask list strictly (a misspelt field is an error) and validates each entry,
// naming it. Empty content is an empty set. A repeated entry counts once.
func Parse(b []byte) (*Set, error) {
	var entries []Entry
	if err := yaml.UnmarshalStrict(b, &entries); err != nil {
		return nil, err
	}
	if len(entries) > MaxEntries {
		return nil, fmt.Errorf("%d entries, more than %d", len(entries), MaxEntries)
	}
	s := &Set{scores: map[object][]string{}}
	var errs []error
	for i, e := range entries {
		if err := contract.ValidateClusterName(e.Cluster); err != nil {
			errs = append(errs, fmt.Errorf("[%d].cluster: %v", i, err))
		}
		if err := contract.ValidateResourceName(e.Resource); err != nil {
			errs = append(errs, fmt.Errorf("[%d].resource: %v", i, err))
		}
		if err := contract.ValidateScoreName(e.Score); err != nil {
			errs = append(errs, fmt.Errorf("[%d].score: %v", i, err))
		}
		o := object{e.Cluster, e.Resource}
		if !slices.Contains(s.scores[o], e.Score) {
			s.scores[o] = append(s.scores[o], e.Score)
			s.n++
		}
	}
	if err := errors.Join(errs...); err != nil {
		return nil, err
	}
	for _, names := range s.scores {
		slices.Sort(names)
	}
	return s, nil
}

// Scores lists the masked score names of one AddOnPlacementScore of one cluster, sorted; nil
// when none is.
func (s *Set) Scores(cluster, resource string) []string {
	if s == nil {
		return nil
	}
	return s.scores[object{cluster, resource}]
}

// Len is the number of entries.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	return s.n
}

// Entries lists the entries, sorted by cluster, resource and score.
func (s *Set) Entries() []Entry {
	if s == nil {
		return nil
	}
	out := make([]Entry, 0, s.n)
	for o, names := range s.scores {
		for _, n := range names {
			out = append(out, Entry{Cluster: o.cluster, Resource: o.resource, Score: n})
		}
	}
	slices.SortFunc(out, func(a, b Entry) int {
		return cmp.Or(cmp.Compare(a.Cluster, b.Cluster), cmp.Compare(a.Resource, b.Resource), cmp.Compare(a.Score, b.Score))
	})
	return out
}

// Added lists the entries of next that prev lacks.
func Added(prev, next *Set) []Entry {
	var out []Entry
	for _, e := range next.Entries() {
		if !slices.Contains(prev.Scores(e.Cluster, e.Resource), e.Score) {
			out = append(out, e)
		}
	}
	return out
}

// File is a mask file, parsed again whenever its content changes.
type File struct {
	path string
	log  *slog.Logger
	set  atomic.Pointer[Set]

	mu         sync.Mutex // serialises reloads
	raw        []byte
	unreadable bool // the last read failed (logged once, not every interval)

	entries prometheus.Gauge
	lastOK  prometheus.Gauge
	reloads *prometheus.CounterVec
}

// Open reads and parses the file; a file that cannot be read or parsed is an error (a
// misconfigured writer must not start and write what should be masked). reg, when not nil,
// receives the masks' metrics.
func Open(path string, log *slog.Logger, reg prometheus.Registerer) (*File, error) {
	if log == nil {
		log = slog.New(slog.DiscardHandler)
	}
	f := &File{path: path, log: log,
		entries: prometheus.NewGauge(prometheus.GaugeOpts{Name: "scoreflow_masks", Help: "Score masks in force."}),
		lastOK:  prometheus.NewGauge(prometheus.GaugeOpts{Name: "scoreflow_masks_last_reload_successful", Help: "1 when the mask file's last content was taken, 0 when it was refused (the previous masks stay in force)."}),
		reloads: prometheus.NewCounterVec(prometheus.CounterOpts{Name: "scoreflow_masks_reloads_total", Help: "Changes of the mask file's content, by result (ok, refused)."}, []string{"result"}),
	}
	if reg != nil {
		for _, c := range []prometheus.Collector{f.entries, f.lastOK, f.reloads} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	if _, err := f.Reload(); err != nil {
		return nil, err
	}
	return f, nil
}

// Set is the masks in force.
func (f *File) Set() *Set { return f.set.Load() }

// Scores lists the masked score names of one object (see Set.Scores).
func (f *File) Scores(cluster, resource string) []string { return f.Set().Scores(cluster, resource) }

// Reload reads the file and, when its content changed, parses it. It returns the entries the new
// content adds. A content that cannot be read or parsed is refused with an error and the masks
// in force stay.
func (f *File) Reload() ([]Entry, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	b, err := os.ReadFile(f.path)
	if err != nil {
		f.lastOK.Set(0)
		err = fmt.Errorf("mask file: %w", err)
		if !f.unreadable {
			f.log.Error("masks unreadable; the previous masks stay in force", "path", f.path, "err", err)
		}
		f.unreadable = true
		return nil, err
	}
	f.unreadable = false
	if f.raw != nil && bytes.Equal(b, f.raw) {
		return nil, nil
	}
	f.raw = b
	sum := sha256.Sum256(b)
	next, err := Parse(b)
	if err != nil {
		f.lastOK.Set(0)
		f.reloads.WithLabelValues("refused").Inc()
		err = fmt.Errorf("mask file %s: %w", f.path, err)
		f.log.Error("masks refused", "path", f.path, "inForce", f.set.Load().Len(), "sha256", hex.EncodeToString(sum[:6]), "err", err)
		return nil, err
	}
	prev := f.set.Swap(next)
	f.lastOK.Set(1)
	f.reloads.WithLabelValues("ok").Inc()
	f.entries.Set(float64(next.Len()))
	f.log.Info("masks loaded", "path", f.path, "sha256", hex.EncodeToString(sum[:6]), "entries", next.Len())
	return Added(prev, next), nil
}

// Watch re-reads the file every interval until ctx ends, and calls onAdded with the entries each
// change adds (the entries in force at the start count as added by the first load, so call it
// once with f.Set().Entries() first if objects written before the start must be cleaned).
func (f *File) Watch(ctx context.Context, interval time.Duration, onAdded func([]Entry)) {
	t := time.NewTicker(interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		added, err := f.Reload()
		if err == nil && len(added) > 0 {
			onAdded(added)
		}
	}
}
