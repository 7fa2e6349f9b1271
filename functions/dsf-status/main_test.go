package main

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/envtest"

	"github.com/scoreflow/scoreflow/harness/dsfupstream"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/dsf"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestHelp(t *testing.T) {
	functest.Help(t, "--kubeconfig  [env KUBECONFIG]", "--scorers-namespace  [env SCORERS_NAMESPACE]", "--endpoints  [env ENDPOINTS]",
		"--interval  [env INTERVAL]", "--request-timeout  [env REQUEST_TIMEOUT]", "--ca-file  [env CA_FILE]", "--leader-elect  [env LEADER_ELECT]")
}

func TestBadStart(t *testing.T) {
	for _, tt := range []struct {
		args  []string
		quote string
	}{
		{[]string{"--endpoints=http://a/path=http://b"}, "--endpoints:"},
		{[]string{"--kubeconfig=/nonexistent", "--leader-elect=false"}, "nonexistent"},
	} {
		out, code := functest.Exec(t, nil, tt.args...)
		if code != 1 || !strings.Contains(out, tt.quote) {
			t.Errorf("%v: exit %d, output %s; want 1 and %q", tt.args, code, out, tt.quote)
		}
	}
}

const hubNamespace = "open-cluster-management"

// TestWritesStatusAsDSF runs two replicas of the binary under leader election against a local hub
// holding DSF's published sample and static-performance DynamicScorers (configSyncMode Full),
// served by DSF's own sample and static scorers, unmodified, and a scorer of configSyncMode None.
// One replica leads and writes; the statuses are DSF's: Active, and with Full the scorer's /config
// as status.lastSyncedConfig, field for field; the None scorer's /healthz decides its health, and
// when it stops answering it turns Inactive within a few intervals.
func TestWritesStatusAsDSF(t *testing.T) {
	ctx, cancel := context.WithTimeout(t.Context(), 3*time.Minute)
	defer cancel()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if _, err := envtest.InstallCRDs(hub.Config, envtest.CRDInstallOptions{Paths: []string{"../../addon/dsf/crds"}, ErrorIfPathMissing: true}); err != nil {
		t.Fatal(err)
	}
	for _, ns := range []string{hubNamespace, "scoreflow"} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	applier, err := knlocal.NewApplier(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"mydynamicscorer-sample.yaml", "mydynamicscorer-example-performance.yaml"} {
		objs, err := knlocal.ReadFiles(dsfupstream.Spec(t, f))
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range objs {
			o.SetNamespace(hubNamespace)
		}
		if err := applier.Apply(ctx, objs...); err != nil {
			t.Fatal(err)
		}
	}
	health := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/healthz" {
			http.NotFound(w, r)
		}
	}))
	defer health.Close()
	dyn := dynamic.NewForConfigOrDie(hub.Config)
	none := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dsf.Group + "/" + dsf.Version, "kind": dsf.KindScorer,
		"metadata": map[string]any{"name": "healthz-only", "namespace": hubNamespace},
		"spec": map[string]any{"description": "d", "configURL": health.URL + "/config", "configSyncMode": "None", "location": "External",
			"scoreDestination": "AddOnPlacementScore", "source": map[string]any{"type": "None"},
			"scoring": map[string]any{"path": "/scoring", "params": map[string]any{"name": "h", "interval": 30}}},
	}}
	if _, err := dyn.Resource(dsf.ScorersResource).Namespace(hubNamespace).Create(ctx, none, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	sample := dsfupstream.Scorer(t, "sample-scorer")
	static := dsfupstream.Scorer(t, "static-scorer")
	kubeconfig := filepath.Join(t.TempDir(), "kubeconfig")
	if err := hub.WriteKubeconfig(kubeconfig); err != nil {
		t.Fatal(err)
	}
	env := []string{"KUBECONFIG=" + kubeconfig, "INTERVAL=1s", "REQUEST_TIMEOUT=2s", "LEADER_ELECT_NAMESPACE=scoreflow",
		"ENDPOINTS=http://<NodeIP>:30007=" + sample + ",http://static-scorer:8000=" + static}
	replicas := []*functest.Process{functest.Start(t, env), functest.Start(t, env)}

	status := func(name string) map[string]any {
		u, err := dyn.Resource(dsf.ScorersResource).Namespace(hubNamespace).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		st, _, _ := unstructured.NestedMap(u.Object, "status")
		return st
	}
	waitFor(ctx, t, "every scorer Active", func() bool {
		for _, n := range []string{"sample-scorer", "example-performance-scorer", "healthz-only"} {
			if status(n)["healthStatus"] != dsf.HealthActive {
				return false
			}
		}
		return true
	})
	// lastSyncedConfig is the scorer's /config, as DSF's controller writes it.
	for name, path := range map[string]string{"sample-scorer": sample + "/config", "example-performance-scorer": static + "/performance/config"} {
		resp, err := http.Get(path)
		if err != nil {
			t.Fatal(err)
		}
		raw, _ := io.ReadAll(resp.Body)
		_ = resp.Body.Close()
		var want dsf.RemoteConfig
		if err := json.Unmarshal(raw, &want); err != nil {
			t.Fatal(err)
		}
		b, _ := json.Marshal(status(name)["lastSyncedConfig"])
		var got dsf.RemoteConfig
		if err := json.Unmarshal(b, &got); err != nil || !reflect.DeepEqual(got, want) {
			t.Errorf("%s: lastSyncedConfig %s, want the scorer's /config %s (%v)", name, b, raw, err)
		}
	}
	if _, ok := status("healthz-only")["lastSyncedConfig"]; ok {
		t.Error("configSyncMode None: a lastSyncedConfig was written")
	}
	// One replica leads: only it probes and exports the scorers' health.
	leaders := 0
	for _, r := range replicas {
		if _, body := functest.Get(t, r.URL+"/metrics"); strings.Contains(body, `scoreflow_dsf_scorer_active{scorer="sample-scorer"} 1`) {
			leaders++
		}
	}
	if leaders != 1 {
		t.Errorf("%d replicas probe the scorers, want 1", leaders)
	}

	health.Close()
	waitFor(ctx, t, "healthz-only Inactive once /healthz stops answering", func() bool { return status("healthz-only")["healthStatus"] == dsf.HealthInactive })
	if st := status("sample-scorer"); st["healthStatus"] != dsf.HealthActive {
		t.Errorf("sample-scorer: %v", st)
	}
}

func waitFor(ctx context.Context, t *testing.T, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(200 * time.Millisecond):
		}
	}
}
