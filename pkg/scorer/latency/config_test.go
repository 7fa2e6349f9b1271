package latency

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer/normalize"
)

func decode(t *testing.T, data string) (Config, error) {
	t.Helper()
	var c Config
	if err := contract.DecodeJSON([]byte(data), &c); err != nil {
		return c, err
	}
	return c, c.Validate()
}

func TestConfigDefaults(t *testing.T) {
	c, err := decode(t, `{"resource":"latency","latencies":[{"name":"a","url":"https://example.com","cluster":"c1"}]}`)
	if err != nil {
		t.Fatal(err)
	}
	got := c.Latencies[0]
	if got.Runs != 3 || time.Duration(got.WaitBetweenRuns) != time.Second || time.Duration(got.Timeout) != 10*time.Second {
		t.Errorf("defaults: runs %d wait %s timeout %s, want 3, 1s, 10s", got.Runs, time.Duration(got.WaitBetweenRuns), time.Duration(got.Timeout))
	}
	n := c.Normalize
	if n.Method != normalize.MethodLinear || *n.Min != 0 || *n.Max != 1000 || !n.LowerIsBetter {
		t.Errorf("default normalize = %+v, want linear 0..1000 lower is better", n)
	}
	// Seed 001's example, as written there.
	c, err = decode(t, `{"resource":"cluster1-generator","latencies":[{"name":"redhat-com-avgLatency","url":"https://redhat.com","runs":2,"waitBetweenRuns":"10s"}],
		"normalize":{"method":"minmax"}}`)
	if err != nil {
		t.Fatal(err)
	}
	if c.Latencies[0].Runs != 2 || time.Duration(c.Latencies[0].WaitBetweenRuns) != 10*time.Second || !c.Normalize.LowerIsBetter {
		t.Errorf("seed example decoded as %+v, normalize %+v", c.Latencies[0], c.Normalize)
	}
}

func TestConfigInvalid(t *testing.T) {
	const ok = `{"name":"a","url":"https://example.com","cluster":"c1"}`
	tests := []struct {
		name, data, want string
	}{
		{"no resource", `{"latencies":[` + ok + `]}`, "resource"},
		{"no entries", `{"resource":"r","latencies":[]}`, "at least one"},
		{"numeric duration", `{"resource":"r","latencies":[{"name":"a","url":"https://x","waitBetweenRuns":10}]}`, "not 10"},
		{"bad duration", `{"resource":"r","latencies":[{"name":"a","url":"https://x","timeout":"ten"}]}`, "ten"},
		{"misspelt field", `{"resource":"r","latencys":[]}`, "latencys"},
		{"bad score name", `{"resource":"r","latencies":[{"name":"a b","url":"https://x"}]}`, "latencies[0]: name"},
		{"relative url", `{"resource":"r","latencies":[{"name":"a","url":"/healthz"}]}`, "url"},
		{"ftp url", `{"resource":"r","latencies":[{"name":"a","url":"ftp://x"}]}`, "url"},
		{"hub namespace", `{"resource":"r","latencies":[{"name":"a","url":"https://x","cluster":"kube-system"}]}`, "cluster"},
		{"too many runs", `{"resource":"r","latencies":[{"name":"a","url":"https://x","runs":21}]}`, "runs"},
		{"negative runs", `{"resource":"r","latencies":[{"name":"a","url":"https://x","runs":-1}]}`, "runs"},
		{"long wait", `{"resource":"r","latencies":[{"name":"a","url":"https://x","waitBetweenRuns":"2m"}]}`, "waitBetweenRuns"},
		{"long timeout", `{"resource":"r","latencies":[{"name":"a","url":"https://x","timeout":"61s"}]}`, "timeout"},
		// 20 runs * 15s + 19 * 100ms = 5m1.9s.
		{"worst case too long", `{"resource":"r","latencies":[{"name":"a","url":"https://x","runs":20,"timeout":"15s","waitBetweenRuns":"100ms"}]}`, "5m"},
		{"runs back to back", `{"resource":"r","latencies":[{"name":"a","url":"https://x","runs":2,"waitBetweenRuns":"1ns"}]}`, "waitBetweenRuns: 1ns is not between 100ms and 1m0s"},
		{"negative wait", `{"resource":"r","latencies":[{"name":"a","url":"https://x","waitBetweenRuns":"-1s"}]}`, "waitBetweenRuns"},
		// Two entries of one host, each within its own bounds: 11 + 10 runs to x.example.
		{"one host asked too often", `{"resource":"r","latencies":[{"name":"a","url":"https://x.example/a","runs":11},{"name":"b","url":"https://X.example:8443/b","runs":10}]}`,
			"21 runs measure host x.example, more than 20"},
		{"too many runs in all", `{"resource":"r","latencies":[` + manyHosts(MaxEntries, 4) + `]}`, "400 runs in all, more than 300"},
		{"none normalization", `{"resource":"r","latencies":[` + ok + `],"normalize":{"method":"none"}}`, "none"},
		{"linear without max", `{"resource":"r","latencies":[` + ok + `],"normalize":{"method":"linear","min":0}}`, "min and max"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := decode(t, tt.data)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("error = %v, want one mentioning %q", err, tt.want)
			}
		})
	}
}

func TestConfigURLIsRedactedInErrors(t *testing.T) {
	_, err := decode(t, `{"resource":"r","latencies":[{"name":"a","url":"gopher://user:hunter2@x/?token=s3cret"}]}`)
	if err == nil || strings.Contains(err.Error(), "hunter2") || strings.Contains(err.Error(), "s3cret") {
		t.Fatalf("error = %v, want one without the password or query", err)
	}
}

func TestResolve(t *testing.T) {
	tests := []struct {
		name, data, agent string
		wantErr           string   // "" = ok
		wantClusters      []string // after Resolve
	}{
		{"hub: entries name clusters", `{"resource":"r","latencies":[{"name":"a","url":"https://x","cluster":"c1"},{"name":"a","url":"https://y","cluster":"c2"}]}`, "", "", []string{"c1", "c2"}},
		{"hub: entry without cluster", `{"resource":"r","latencies":[{"name":"a","url":"https://x"}]}`, "", "required on the hub", nil},
		{"agent: defaults to its cluster", `{"resource":"r","latencies":[{"name":"a","url":"https://x"},{"name":"b","url":"https://y","cluster":"c1"}]}`, "c1", "", []string{"c1", "c1"}},
		{"agent: another cluster", `{"resource":"r","latencies":[{"name":"a","url":"https://x","cluster":"c2"}]}`, "c1", "runs on cluster", nil},
		{"agent: minmax", `{"resource":"r","latencies":[{"name":"a","url":"https://x"}],"normalize":{"method":"minmax"}}`, "c1", "minmax", nil},
		{"duplicate score of a cluster", `{"resource":"r","latencies":[{"name":"a","url":"https://x"},{"name":"a","url":"https://y"}]}`, "c1", "also latencies[0]", nil},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			c, err := decode(t, tt.data)
			if err != nil {
				t.Fatal(err)
			}
			err = c.Resolve(tt.agent)
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("Resolve = %v, want an error mentioning %q", err, tt.wantErr)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			for i, want := range tt.wantClusters {
				if c.Latencies[i].Cluster != want {
					t.Errorf("latencies[%d].cluster = %q, want %q", i, c.Latencies[i].Cluster, want)
				}
			}
		})
	}
}

func TestLoadTargets(t *testing.T) {
	dir := t.TempDir()
	for _, tt := range []struct{ name, data, agent, want string }{
		{"hub: a target names its cluster", "targets:\n- url: https://a.example/healthz\n  cluster: c1\n", "", ""},
		{"hub: empty list", "targets: []\n", "", ""},
		{"hub: no cluster", "targets:\n- url: https://a.example/\n", "", "required on the hub"},
		{"agent: no cluster", "targets:\n- url: https://a.example/\n", "c1", ""},
		{"agent: another cluster", "targets:\n- {url: 'https://a.example/', cluster: c2}\n", "c1", "runs on cluster"},
		{"not http", "targets:\n- {url: 'file:///etc/passwd', cluster: c1}\n", "", "not an absolute http or https URL"},
		{"listed twice", "targets:\n- {url: 'https://a.example/', cluster: c1}\n- {url: 'https://a.example/', cluster: c2}\n", "", "listed twice"},
		{"misspelt field", "targets:\n- {url: 'https://a.example/', clustr: c1}\n", "", "clustr"},
		{"bad cluster name", "targets:\n- {url: 'https://a.example/', cluster: 'C_1'}\n", "", "cluster"},
	} {
		t.Run(tt.name, func(t *testing.T) {
			p := filepath.Join(dir, strings.ReplaceAll(tt.name, " ", "-")+".yaml")
			if err := os.WriteFile(p, []byte(tt.data), 0o600); err != nil {
				t.Fatal(err)
			}
			_, err := LoadTargets(p, tt.agent)
			switch {
			case tt.want == "" && err != nil:
				t.Errorf("LoadTargets = %v", err)
			case tt.want != "" && (err == nil || !strings.Contains(err.Error(), tt.want)):
				t.Errorf("LoadTargets = %v, want an error mentioning %q", err, tt.want)
			}
		})
	}
	if a, err := LoadTargets("", ""); err != nil || len(a) != 0 {
		t.Errorf("no file: %v, %v; want an empty list", a, err)
	}
	if _, err := LoadTargets(filepath.Join(dir, "missing.yaml"), ""); err == nil {
		t.Error("a missing file is not an error")
	}
}

// manyHosts is n entries, each measuring a host of its own with runs runs.
func manyHosts(n, runs int) string {
	var entries []string
	for i := range n {
		entries = append(entries, fmt.Sprintf(`{"name":"e%d","url":"https://h%d.example","runs":%d}`, i, i, runs))
	}
	return strings.Join(entries, ",")
}

// The bounds on one configuration's requests admit what they should: a host at MaxRunsPerHost
// over several entries, and MaxRunsPerPing runs over many hosts.
func TestConfigRequestBoundsAdmit(t *testing.T) {
	for name, data := range map[string]string{
		"one host at its bound": `{"resource":"r","latencies":[{"name":"a","url":"https://x.example/a","runs":10},{"name":"b","url":"https://x.example:8443/b","runs":10}]}`,
		"every entry at 3 runs": `{"resource":"r","latencies":[` + manyHosts(MaxEntries, 3) + `]}`,
	} {
		if _, err := decode(t, data); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}
