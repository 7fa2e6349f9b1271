package e2e

import (
	"bufio"
	"context"
	"fmt"
	"net/http"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"syscall"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/scoreflow/scoreflow/harness/devrun"
	"github.com/scoreflow/scoreflow/harness/promlocal"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// TestDSFScorerThroughOnePingSource: a Dynamic Scoring Framework scorer written from DSF's
// documented API alone (pkg/dsf/testdata/dsf_scorer.py, Python's standard library, no scoreflow
// code) scores the demo clusters through one PingSource event into the broker: Trigger, dsf-bridge,
// Prometheus, the scorer, the score-writer, AddOnPlacementScores on the hub.
func TestDSFScorerThroughOnePingSource(t *testing.T) {
	cmd := exec.Command("python3", filepath.Join("..", "..", "pkg", "dsf", "testdata", "dsf_scorer.py"), "sample")
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	out, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = cmd.Process.Kill(); _ = cmd.Wait() })
	sc := bufio.NewScanner(out)
	if !sc.Scan() {
		t.Fatal("the python scorer did not start")
	}
	scorerURL := strings.TrimPrefix(sc.Text(), "listening on ")

	// Constant per cluster over the last minutes, so the scorer's mean is the value whatever grid
	// the bridge's range falls on: 70, 20, and -250 (clamped to -100).
	want := map[string]float64{"cluster1": 70, "cluster2": 20, "cluster3": -250}
	now := promlocal.Aligned(time.Minute)
	var series []promlocal.Series
	for c, v := range want {
		series = append(series, promlocal.Grid(map[string]string{"__name__": "dsf_e2e_load", "cluster": c}, now, time.Minute, v, v, v, v, v, v))
	}
	stack.Prometheus.MustPush(t, series...)

	ping := cloudevents.NewEvent()
	ping.SetID(uuid.NewString())
	ping.SetType(contract.TypePing)
	ping.SetSource("/apis/v1/namespaces/" + devrun.Namespace + "/pingsources/dsf-e2e")
	ping.SetTime(time.Now())
	ping.SetExtension("scorer", "dsf-bridge")
	data := fmt.Sprintf(`{"configURL": "%s/config", "configSyncMode": "None",
		"source": {"type": "Prometheus", "path": "/api/v1/query_range", "params": {"query": "dsf_e2e_load", "range": 120, "step": 60}},
		"scoring": {"path": "/scoring", "params": {"name": "dsf_e2e_score", "interval": 60}}}`, scorerURL)
	if err := ping.SetData(cloudevents.ApplicationJSON, []byte(data)); err != nil {
		t.Fatal(err)
	}
	if status := post(t, ping); status != http.StatusAccepted {
		t.Fatalf("broker answered %d", status)
	}

	expect := map[string]int32{"cluster1": 70, "cluster2": 20, "cluster3": -100}
	got := map[string]int32{}
	eventually(t, 30*time.Second, "the DSF scorer's scores did not reach the hub", func() bool {
		for c := range expect {
			obj, err := stack.Hub.Cluster.ClusterV1alpha1().AddOnPlacementScores(c).Get(context.Background(), "dsf-e2e-score", metav1.GetOptions{})
			if apierrors.IsNotFound(err) {
				return false
			}
			if err != nil {
				t.Fatal(err)
			}
			for _, s := range obj.Status.Scores {
				if s.Name == "dsf_e2e_score" {
					got[c] = s.Value
				}
			}
		}
		return reflect.DeepEqual(got, expect)
	})
}
