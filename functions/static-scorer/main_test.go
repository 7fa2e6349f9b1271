package main

import (
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"

	cloudevents "github.com/cloudevents/sdk-go/v2"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") {
		t.Error("this function imports knative.dev/eventing")
	}
}

func TestBinary(t *testing.T) {
	dir := t.TempDir()
	table := filepath.Join(dir, "table.yaml")
	if err := os.WriteFile(table, []byte("rows:\n- {cluster: w1, app: a, device: d, power: 1}\n- {cluster: w2, app: a, device: d, power: 3}\n"), 0o644); err != nil {
		t.Fatal(err)
	}

	t.Run("help names every flag", func(t *testing.T) {
		functest.Help(t, "--table  [env TABLE]")
	})

	t.Run("a bad table at start is fatal", func(t *testing.T) {
		bad := filepath.Join(dir, "bad.yaml")
		if err := os.WriteFile(bad, []byte("rows: []\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		out, code := functest.Exec(t, nil, "--table", bad, "--port", "0")
		if code != 1 || !strings.Contains(out, "empty") {
			t.Errorf("exit %d, output:\n%s", code, out)
		}
	})

	t.Run("answers a ping from the table given by env", func(t *testing.T) {
		fn := functest.Start(t, []string{"TABLE=" + table})
		e := cloudevents.NewEvent()
		e.SetID("p1")
		e.SetSource("/apis/v1/namespaces/scoreflow/pingsources/power")
		e.SetType(contract.TypePing)
		_ = e.SetData(cloudevents.ApplicationJSON, map[string]string{"resource": "demo-powerconsumption-score"})
		status, reply := functest.Send(t, fn.URL, e)
		if reply == nil {
			t.Fatalf("no reply: status %d", status)
		}
		su, err := contract.DecodeScoreUpdated(reply)
		if err != nil {
			t.Fatal(err)
		}
		// Power, minmax, lower is better: w1 (1 W) 100, w2 (3 W) -100.
		got := map[string]float64{}
		for _, it := range su.Items {
			got[it.Cluster] = it.Scores[0].Value
		}
		if su.Resource != "demo-powerconsumption-score" || got["w1"] != 100 || got["w2"] != -100 || su.Items[0].Scores[0].Name != "a;d" {
			t.Errorf("reply %+v", su)
		}
		if code, _ := functest.Get(t, fn.URL+"/readyz"); code != http.StatusOK {
			t.Errorf("/readyz: %d", code)
		}
	})
}
