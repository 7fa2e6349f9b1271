package static

import (
	"fmt"
	"strings"
	"testing"

	"github.com/scoreflow/scoreflow/harness/benchcpu"
)

// flat turns scores into cluster/name -> value.
func flat(t *testing.T, tb *Table, resource string) map[string]float64 {
	t.Helper()
	su, err := tb.Score(resource)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, it := range su.Items {
		for _, s := range it.Scores {
			out[it.Cluster+"/"+s.Name] = s.Value
		}
	}
	return out
}

func equal(a, b map[string]float64) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

const rows3 = `rows:
- {cluster: w1, app: app01, device: gpu0, performance: 90, power: 300}
- {cluster: w2, app: app01, device: gpu0, performance: 60, power: 200}
- {cluster: w3, app: app01, device: gpu0, performance: 70, power: 450}
- {cluster: w2, app: app01, device: cpu, performance: 10}
`

func TestScore(t *testing.T) {
	tests := []struct {
		name     string
		table    string
		resource string
		want     map[string]float64
	}{
		{
			// minmax per name: gpu0 performance 60..90; w3 = (70-60)*200/30 - 100 = -33.3 -> -33.
			// app01;cpu: only w2 has it, nothing to compare: 0.
			name: "default performance: minmax", table: rows3, resource: "demo-performance-score",
			want: map[string]float64{"w1/app01;gpu0": 100, "w2/app01;gpu0": -100, "w3/app01;gpu0": -33, "w2/app01;cpu": 0},
		},
		{
			// lower is better, 200..450: w1 = -((300-200)*200/250 - 100) = 20. No power for cpu.
			name: "default power: minmax, lower is better", table: rows3, resource: "demo-powerconsumption-score",
			want: map[string]float64{"w1/app01;gpu0": 20, "w2/app01;gpu0": 100, "w3/app01;gpu0": -100},
		},
		{
			// linear 0..200: 90 -> -10, 60 -> -40, 70 -> -30, 10 -> -90.
			name: "linear", resource: "perf", table: `resources:
- {name: perf, value: performance, normalize: {method: linear, min: 0, max: 200}}
` + rows3,
			want: map[string]float64{"w1/app01;gpu0": -10, "w2/app01;gpu0": -40, "w3/app01;gpu0": -30, "w2/app01;cpu": -90},
		},
		{
			// linear 100..500 lower is better: 300 -> 0, 200 -> 50, 450 -> -75.
			name: "linear, lower is better", resource: "watts", table: `resources:
- {name: watts, value: power, normalize: {method: linear, min: 100, max: 500, lowerIsBetter: true}}
` + rows3,
			want: map[string]float64{"w1/app01;gpu0": 0, "w2/app01;gpu0": 50, "w3/app01;gpu0": -75},
		},
		{
			// none: values are scores already, rounded half away from zero and clamped.
			name: "none", resource: "raw", table: `resources:
- {name: raw, value: performance, normalize: {method: none}}
rows:
- {cluster: w1, app: a, device: d, performance: 42.5}
- {cluster: w2, app: a, device: d, performance: 250}
`,
			want: map[string]float64{"w1/a;d": 43, "w2/a;d": 100},
		},
		{
			name: "name format with cluster", resource: "raw", table: `resources:
- {name: raw, value: performance, normalize: {method: none}, nameFormat: "${cluster}.${app}"}
rows:
- {cluster: w1, app: a, device: d, performance: 5}
`,
			want: map[string]float64{"w1/w1.a": 5},
		},
		{
			name: "JSON table", resource: "raw",
			table: `{"resources":[{"name":"raw","value":"power","normalize":{"method":"none"}}],"rows":[{"cluster":"w1","app":"a","device":"d","power":-7}]}`,
			want:  map[string]float64{"w1/a;d": -7},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			tb, err := Parse([]byte(tt.table))
			if err != nil {
				t.Fatal(err)
			}
			if got := flat(t, tb, tt.resource); !equal(got, tt.want) {
				t.Errorf("scores = %v, want %v", got, tt.want)
			}
		})
	}
}

func TestScoreItemsSortedAndValid(t *testing.T) {
	tb, err := Parse([]byte(rows3))
	if err != nil {
		t.Fatal(err)
	}
	su, err := tb.Score("demo-performance-score")
	if err != nil {
		t.Fatal(err)
	}
	if err := su.Validate(); err != nil {
		t.Fatal(err)
	}
	if len(su.Items) != 3 || su.Items[0].Cluster != "w1" || su.Items[2].Cluster != "w3" ||
		su.Items[1].Scores[0].Name != "app01;cpu" || su.Items[1].Scores[1].Name != "app01;gpu0" {
		t.Errorf("items = %+v, want clusters and names sorted", su.Items)
	}
	if _, err := tb.Score("nope"); err == nil || !strings.Contains(err.Error(), "demo-performance-score") {
		t.Errorf("unknown resource: %v, want an error listing the table's resources", err)
	}
}

func TestScoreColumnWithoutValues(t *testing.T) {
	tb, err := Parse([]byte("rows:\n- {cluster: w1, app: a, device: d, performance: 1}\n"))
	if err != nil {
		t.Fatal(err)
	}
	su, err := tb.Score("demo-powerconsumption-score")
	if err != nil || len(su.Items) != 0 {
		t.Errorf("power of a table without power = %+v, %v; want no items, no error", su, err)
	}
}

func TestParseInvalid(t *testing.T) {
	row := "rows:\n- {cluster: w1, app: a, device: d, performance: 1}\n"
	tests := []struct{ name, table, want string }{
		{"not YAML", "rows: [\n", "yaml"},
		{"misspelt field", "rows:\n- {cluster: w1, app: a, device: d, perfomance: 1}\n", "perfomance"},
		{"empty", "rows: []\n", "empty"},
		{"bad cluster", "rows:\n- {cluster: W_1, app: a, device: d, power: 1}\n", "rows[0].cluster"},
		{"hub namespace", "rows:\n- {cluster: kube-system, app: a, device: d, power: 1}\n", "rows[0].cluster"},
		{"no device", "rows:\n- {cluster: w1, app: a, power: 1}\n", "app and device"},
		{"no values", "rows:\n- {cluster: w1, app: a, device: d}\n", "neither"},
		{"text value", "rows:\n- {cluster: w1, app: a, device: d, power: high}\n", "power"},
		{"duplicate row", row + "- {cluster: w1, app: a, device: d, power: 2}\n", "also rows[0]"},
		{"illegal score name", "rows:\n- {cluster: w1, app: my app, device: d, power: 1}\n", "not a valid score name"},
		{"bad column", "resources:\n- {name: r, value: speed, normalize: {method: none}}\n" + row, "resources[0].value"},
		{"no normalize", "resources:\n- {name: r, value: power}\n" + row, "resources[0].normalize.method"},
		{"bad resource name", "resources:\n- {name: R_1, value: power, normalize: {method: none}}\n" + row, "resources[0].name"},
		{"duplicate resource", "resources:\n- {name: r, value: power, normalize: {method: none}}\n- {name: r, value: performance, normalize: {method: none}}\n" + row, "also resources[0]"},
		{"format repeats a name", "resources:\n- {name: r, value: power, normalize: {method: none}, nameFormat: '${app}'}\nrows:\n- {cluster: w1, app: a, device: d1, power: 1}\n- {cluster: w1, app: a, device: d2, power: 2}\n", "twice"},
		{"format with unknown label", "resources:\n- {name: r, value: power, normalize: {method: none}, nameFormat: '${gpu}'}\n" + "rows:\n- {cluster: w1, app: a, device: d, power: 1}\n", "gpu"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse([]byte(tt.table))
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Parse = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
}

// BenchmarkScore1000 and BenchmarkScore10000 score 1,000 and 10,000 clusters, two devices each,
// from a parsed table: the work a ping does once the table file is loaded (it is parsed again only
// when its bytes change).
func BenchmarkScore1000(b *testing.B)  { benchScore(b, 1000) }
func BenchmarkScore10000(b *testing.B) { benchScore(b, 10000) }

func benchScore(b *testing.B, n int) {
	var doc strings.Builder
	doc.WriteString(`{"rows":[`)
	for i := range n {
		if i > 0 {
			doc.WriteString(",")
		}
		fmt.Fprintf(&doc, `{"cluster":"cluster-%05d","app":"app01","device":"gpu0","performance":%d,"power":%d},`, i, i%97, 100+i%89)
		fmt.Fprintf(&doc, `{"cluster":"cluster-%05d","app":"app01","device":"cpu","performance":%d}`, i, i%13)
	}
	doc.WriteString(`]}`)
	tab, err := Parse([]byte(doc.String()))
	if err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	cpu := benchcpu.Start()
	for b.Loop() {
		out, err := tab.Score("demo-performance-score")
		if err != nil || len(out.Items) != n {
			b.Fatal(err, len(out.Items))
		}
	}
	cpu.Report(b)
}
