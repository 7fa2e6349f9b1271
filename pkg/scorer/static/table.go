package static

import (
	"cmp"
	"errors"
	"fmt"
	"math"
	"slices"

	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
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
	Name       string                  `json:"name"`
	Value      string                  `json:"value"`
	Normalize  normalize.Normalization `json:"normalize"`
	NameFormat normalize.NameFormat    `json:"nameFormat,omitempty"`
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

// DefaultResources are the two resources of the demo, modelled on the Dynamic Scoring Framework's
// static scorer under names of their own: DSF's quickstart writes example-performance-score and
// example-powerconsumption-score for the same clusters, and two writers of one score would mix.
func DefaultResources() []Resource {
	return []Resource{
		{Name: "demo-performance-score", Value: ColumnPerformance, Normalize: normalize.Normalization{Method: normalize.MethodMinMax}},
		{Name: "demo-powerconsumption-score", Value: ColumnPower, Normalize: normalize.Normalization{Method: normalize.MethodMinMax, LowerIsBetter: true}},
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
// score per app and device, normalised per score name across clusters. Items are sorted by
// cluster, a cluster's scores by name. No items means no row has a value in the resource's column.
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
	byName := map[string]map[string]float64{} // score name -> cluster -> value
	for i, row := range t.Rows {
		v := row.Performance
		if res.Value == ColumnPower {
			v = row.Power
		}
		if v == nil {
			continue
		}
		name, err := res.NameFormat.NameFrom(row.label)
		if err != nil {
			return contract.ScoreUpdated{}, fmt.Errorf("rows[%d]: %v", i, err)
		}
		if byName[name] == nil {
			byName[name] = map[string]float64{}
		}
		if _, dup := byName[name][row.Cluster]; dup {
			return contract.ScoreUpdated{}, fmt.Errorf("rows[%d]: nameFormat %q gives cluster %s the score %q twice", i, res.NameFormat, row.Cluster, name)
		}
		byName[name][row.Cluster] = *v
	}
	perCluster := map[string][]contract.Score{}
	for name, values := range byName {
		for cluster, s := range res.Normalize.Apply(values) {
			perCluster[cluster] = append(perCluster[cluster], contract.Score{Name: name, Value: float64(s)})
		}
	}
	out := contract.ScoreUpdated{Resource: res.Name, Items: make([]contract.ClusterScores, 0, len(perCluster))}
	for cluster, scores := range perCluster {
		slices.SortFunc(scores, func(a, b contract.Score) int { return cmp.Compare(a.Name, b.Name) })
		out.Items = append(out.Items, contract.ClusterScores{Cluster: cluster, Scores: scores})
	}
	slices.SortFunc(out.Items, func(a, b contract.ClusterScores) int { return cmp.Compare(a.Cluster, b.Cluster) })
	if len(out.Items) == 0 {
		return out, nil // no row has a value in this column: nothing to score, not zeros
	}
	if err := out.Validate(); err != nil {
		return out, err
	}
	return out, nil
}
