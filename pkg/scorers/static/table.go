package static

import (
	"errors"
	"fmt"
	"math"
	"slices"
	"strings"

	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scoring"
)

// Columns a resource can score.
const (
	ColumnPerformance = "performance"
	ColumnPower       = "power"
)

// DefaultNameFormat is the Dynamic Scoring Framework's scoreDimensionFormat for these scores.
const DefaultNameFormat = "${app};${device}"

// MaxRows bounds a table.
const MaxRows = 100000

// Table is a parsed, validated table file.
type Table struct {
	Resources []Resource `json:"resources,omitempty"`
	Rows      []Row      `json:"rows"`
}

// Resource is one AddOnPlacementScore the table feeds.
type Resource struct {
	Name       string                `json:"name"`
	Value      string                `json:"value"`
	Normalize  scoring.Normalization `json:"normalize"`
	NameFormat scoring.NameFormat    `json:"nameFormat,omitempty"`
}

// Row holds one cluster's values for one app on one device.
type Row struct {
	Cluster     string   `json:"cluster"`
	App         string   `json:"app"`
	Device      string   `json:"device"`
	Performance *float64 `json:"performance,omitempty"`
	Power       *float64 `json:"power,omitempty"`
}

// label is the row's value for a NameFormat placeholder: app, device or cluster.
func (r *Row) label(k string) (string, bool) {
	switch k {
	case "app":
		return r.App, true
	case "device":
		return r.Device, true
	case "cluster":
		return r.Cluster, true
	}
	return "", false
}

// DefaultResources are the two resources of the Dynamic Scoring Framework's static scorer.
func DefaultResources() []Resource {
	return []Resource{
		{Name: "example-performance-score", Value: ColumnPerformance, Normalize: scoring.Normalization{Method: scoring.MethodMinMax}},
		{Name: "example-powerconsumption-score", Value: ColumnPower, Normalize: scoring.Normalization{Method: scoring.MethodMinMax, LowerIsBetter: true}},
	}
}

// Parse decodes a table (YAML or JSON, strictly) and validates it, naming the first bad field.
func Parse(b []byte) (*Table, error) {
	var t Table
	if err := yaml.UnmarshalStrict(b, &t); err != nil {
		return nil, err
	}
	if len(t.Resources) == 0 {
		t.Resources = DefaultResources()
	}
	if err := t.validate(); err != nil {
		return nil, err
	}
	return &t, nil
}

func (t *Table) validate() error {
	seen := map[string]int{}
	for i := range t.Resources {
		r := &t.Resources[i]
		f := fmt.Sprintf("resources[%d]", i)
		if err := contract.ValidateResourceName(r.Name); err != nil {
			return fmt.Errorf("%s.name: %v", f, err)
		}
		if j, dup := seen[r.Name]; dup {
			return fmt.Errorf("%s.name: %q is also resources[%d]", f, r.Name, j)
		}
		seen[r.Name] = i
		if r.Value != ColumnPerformance && r.Value != ColumnPower {
			return fmt.Errorf("%s.value: %q is not %s or %s", f, r.Value, ColumnPerformance, ColumnPower)
		}
		if err := r.Normalize.Validate(); err != nil {
			return fmt.Errorf("%s.%v", f, err)
		}
		if r.NameFormat == "" {
			r.NameFormat = DefaultNameFormat
		}
		if err := r.NameFormat.Validate(); err != nil {
			return fmt.Errorf("%s.nameFormat: %v", f, err)
		}
	}
	if len(t.Rows) == 0 {
		return errors.New("rows: the table is empty")
	}
	if len(t.Rows) > MaxRows {
		return fmt.Errorf("rows: %d rows, more than %d", len(t.Rows), MaxRows)
	}
	rows := map[[3]string]int{}
	for i, row := range t.Rows {
		f := fmt.Sprintf("rows[%d]", i)
		if err := contract.ValidateClusterName(row.Cluster); err != nil {
			return fmt.Errorf("%s.cluster: %v", f, err)
		}
		if row.App == "" || row.Device == "" {
			return fmt.Errorf("%s: app and device are required", f)
		}
		key := [3]string{row.Cluster, row.App, row.Device}
		if j, dup := rows[key]; dup {
			return fmt.Errorf("%s: cluster %s, app %s, device %s is also rows[%d]", f, row.Cluster, row.App, row.Device, j)
		}
		rows[key] = i
		if row.Performance == nil && row.Power == nil {
			return fmt.Errorf("%s: neither performance nor power is set", f)
		}
		for col, v := range map[string]*float64{ColumnPerformance: row.Performance, ColumnPower: row.Power} {
			if v != nil && (math.IsNaN(*v) || math.IsInf(*v, 0)) {
				return fmt.Errorf("%s.%s: not a finite number", f, col)
			}
		}
	}
	// Fill every name now, so that a format that makes a bad or repeated name is refused with
	// the table rather than when its resource is scored.
	for i, r := range t.Resources {
		if _, err := t.Score(r.Name); err != nil {
			return fmt.Errorf("resources[%d]: %w", i, err)
		}
	}
	return nil
}

// ResourceNames lists the resources the table defines.
func (t *Table) ResourceNames() []string {
	names := make([]string, len(t.Resources))
	for i, r := range t.Resources {
		names[i] = r.Name
	}
	return names
}

// Score computes one resource's scores: one item per cluster with a value in its column, one
// score per app and device, normalised per score name across clusters. No items means no row has
// a value in the resource's column.
func (t *Table) Score(resource string) (contract.ScoreUpdated, error) {
	var res *Resource
	for i := range t.Resources {
		if t.Resources[i].Name == resource {
			res = &t.Resources[i]
		}
	}
	if res == nil {
		return contract.ScoreUpdated{}, fmt.Errorf("resource %q is not in the table (it has %v)", resource, t.ResourceNames())
	}
	// One entry per row with a value, named; sorted by cluster and name below, so that items and
	// their scores come out in order and a name given twice to a cluster sits next to itself,
	// with no map keyed by cluster.
	type entry struct {
		name, cluster string
		value         float64
		row           int
		group         int // the name's index in names
	}
	entries := make([]entry, 0, len(t.Rows))
	var names []string
	group := map[string]int{}
	// A name depends only on the row's app and device, and its cluster if the format uses it:
	// made once per distinct tuple, not per row.
	type nameKey [3]string
	type named struct {
		name string
		err  error
	}
	usesCluster := strings.Contains(string(res.NameFormat), "${cluster}")
	cache := map[nameKey]named{}
	var nameErr error
	for i := range t.Rows {
		row := &t.Rows[i]
		v := row.Performance
		if res.Value == ColumnPower {
			v = row.Power
		}
		if v == nil {
			continue
		}
		k := nameKey{row.App, row.Device}
		if usesCluster {
			k[2] = row.Cluster
		}
		n, ok := cache[k]
		if !ok {
			n.name, n.err = res.NameFormat.NameFrom(row.label)
			cache[k] = n
		}
		if n.err != nil {
			// Reported unless a row before it gives a cluster a name twice, as a single pass
			// over the rows would find first.
			nameErr = fmt.Errorf("rows[%d]: %v", i, n.err)
			break
		}
		g, ok := group[n.name]
		if !ok {
			g = len(names)
			names = append(names, n.name)
			group[n.name] = g
		}
		entries = append(entries, entry{name: n.name, cluster: row.Cluster, value: *v, row: i, group: g})
	}
	slices.SortStableFunc(entries, func(a, b entry) int {
		if c := strings.Compare(a.cluster, b.cluster); c != 0 {
			return c
		}
		return strings.Compare(a.name, b.name)
	})
	dup := -1
	for k := 1; k < len(entries); k++ {
		if entries[k].cluster == entries[k-1].cluster && entries[k].name == entries[k-1].name && (dup < 0 || entries[k].row < entries[dup].row) {
			dup = k
		}
	}
	if dup >= 0 {
		e := entries[dup]
		return contract.ScoreUpdated{}, fmt.Errorf("rows[%d]: nameFormat %q gives cluster %s the score %q twice", e.row, res.NameFormat, e.cluster, e.name)
	}
	if nameErr != nil {
		return contract.ScoreUpdated{}, nameErr
	}
	// Normalise per name, across the clusters that have it.
	at := make([][]int, len(names)) // entry indexes by name
	for k := range entries {
		at[entries[k].group] = append(at[entries[k].group], k)
	}
	scores := make([]int32, len(entries))
	ok := make([]bool, len(entries))
	for _, idx := range at {
		vals := make([]float64, len(idx))
		for n, k := range idx {
			vals[n] = entries[k].value
		}
		sc, good := make([]int32, len(idx)), make([]bool, len(idx))
		res.Normalize.ApplyTo(vals, sc, good)
		for n, k := range idx {
			scores[k], ok[k] = sc[n], good[n]
		}
	}
	out := contract.ScoreUpdated{Resource: res.Name, Items: make([]contract.ClusterScores, 0, len(entries)/max(len(names), 1))}
	all := make([]contract.Score, 0, len(entries)) // every item's scores, in one allocation
	for k := 0; k < len(entries); {
		first := len(all)
		end := k
		for ; end < len(entries) && entries[end].cluster == entries[k].cluster; end++ {
			if ok[end] {
				all = append(all, contract.Score{Name: entries[end].name, Value: float64(scores[end])})
			}
		}
		if len(all) > first {
			out.Items = append(out.Items, contract.ClusterScores{Cluster: entries[k].cluster, Scores: all[first:len(all):len(all)]})
		}
		k = end
	}
	if len(out.Items) == 0 {
		return out, nil // no row has a value in this column: nothing to score, not zeros
	}
	if err := out.Validate(); err != nil {
		return out, err
	}
	return out, nil
}
