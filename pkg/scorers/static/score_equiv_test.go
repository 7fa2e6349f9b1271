package static

import (
	"cmp"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scoring"
)

// scoreByMaps is Score as it was written before it sorted rows instead: values gathered in maps by
// name and cluster. Score is tested against it.
func (t *Table) scoreByMaps(resource string) (contract.ScoreUpdated, error) {
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
	perCluster := make(map[string][]contract.Score, len(t.Rows)/max(len(byName), 1))
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

// Score gives what the map-based version gave, items, order and errors, on random tables: names
// from formats with and without the cluster, with labels missing, names given twice, rows without
// the resource's column.
func TestScoreIsScoreByMaps(t *testing.T) {
	r := rand.New(rand.NewPCG(6, 1))
	val := func() *float64 {
		if r.IntN(5) == 0 {
			return nil
		}
		v := float64(r.IntN(40)) - 5
		return &v
	}
	formats := []scoring.NameFormat{DefaultNameFormat, "${app}", "${device}-x", "${cluster}.${device}", "${app};${gpu}", "fixed", "${app}${device}"}
	norms := []scoring.Normalization{{Method: scoring.MethodMinMax}, {Method: scoring.MethodMinMax, LowerIsBetter: true}, {Method: scoring.MethodNone}}
	for range 20000 {
		tab := &Table{Resources: []Resource{{Name: "r", Value: []string{ColumnPerformance, ColumnPower}[r.IntN(2)],
			Normalize: norms[r.IntN(len(norms))], NameFormat: formats[r.IntN(len(formats))]}}}
		for range r.IntN(10) {
			tab.Rows = append(tab.Rows, Row{Cluster: fmt.Sprintf("c%d", r.IntN(4)), App: []string{"a", "b", "my app"}[r.IntN(3)],
				Device: []string{"gpu0", "cpu"}[r.IntN(2)], Performance: val(), Power: val()})
		}
		got, err := tab.Score("r")
		want, wantErr := tab.scoreByMaps("r")
		if fmt.Sprint(err) != fmt.Sprint(wantErr) || (wantErr == nil && !reflect.DeepEqual(got, want)) {
			t.Fatalf("%+v %+v:\n got %+v, %v\nwant %+v, %v", tab.Resources[0], tab.Rows, got, err, want, wantErr)
		}
	}
}
