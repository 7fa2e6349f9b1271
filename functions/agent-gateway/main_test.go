package main

import (
	"fmt"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

func TestMain(m *testing.M) { functest.Main(m, main) }

func TestNoKnativeEventingImport(t *testing.T) {
	if functest.Imports(t, "knative.dev/eventing") || functest.Imports(t, "knative.dev/pkg") {
		t.Error("the agent gateway imports knative.dev/eventing or knative.dev/pkg")
	}
}

func TestHelp(t *testing.T) {
	functest.Help(t, "--agents-file  [env AGENTS_FILE]", "--audience  [env AUDIENCE]", "--kube-api-qps  [env KUBE_API_QPS]", "--sink  [env SINK]", "--kubeconfig  [env KUBECONFIG]")
}

// Without its table the gateway does not start: it would have no agent to admit, and nothing may
// widen that but its deployment.
func TestRefusesToStartWithoutATable(t *testing.T) {
	out, code := functest.Exec(t, []string{"K_SINK=http://127.0.0.1:1"})
	if code != 1 || !strings.Contains(out, "--agents-file is required") {
		t.Errorf("exit %d, output:\n%s", code, out)
	}
}

// A fleet's agents renew their tokens at about the same time, so many first events arrive at
// once, each costing a TokenReview: the gateway admits them all without asking any to come back
// (client-go's default rate of 5 requests per second made most of 100 wait past the gateway's
// bound and answer 503).
func TestAdmitsAFleetsFirstEventsAtOnce(t *testing.T) {
	const n = 100
	ctx := t.Context()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallAddonCRDs(); err != nil {
		t.Fatal(err)
	}
	addons := addonclient.NewForConfigOrDie(hub.Config)
	kube := hub.Kube
	tokens := make([]string, n)
	for i := range tokens {
		c := fmt.Sprintf("cluster%d", i)
		if _, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := addons.AddonV1alpha1().ManagedClusterAddOns(c).Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: fleetAddon, Namespace: c}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := kube.CoreV1().ServiceAccounts(c).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: fleetAddon}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		tr, err := kube.CoreV1().ServiceAccounts(c).CreateToken(ctx, fleetAddon, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
			Audiences: []string{hubtoken.Audience}, ExpirationSeconds: ptr.To(int64(3600))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		tokens[i] = tr.Status.Token
	}
	agents := filepath.Join(t.TempDir(), "agents.yaml")
	if err := os.WriteFile(agents, []byte("agents:\n  - addon: "+fleetAddon+"\n    types: ["+contract.TypeScoreUpdated+"]\n    resources: [latency]\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	broker := functest.NewSink(t, nil)
	gw := functest.Start(t, []string{"KUBECONFIG=" + hub.KubeconfigPath(), "AGENTS_FILE=" + agents, "K_SINK=" + broker.URL})

	codes := make([]int, n)
	var wg sync.WaitGroup
	for i := range tokens {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := fmt.Sprintf("cluster%d", i)
			e := cloudevents.NewEvent()
			e.SetID(fmt.Sprintf("fleet-%d", i))
			e.SetSource("agent/" + c)
			e.SetType(contract.TypeScoreUpdated)
			e.SetTime(time.Now())
			_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: "latency",
				Items: []contract.ClusterScores{{Cluster: c, Scores: []contract.Score{{Name: "registry", Value: 42}}}}})
			req := functest.Request(t, gw.URL, e)
			req.Header.Set("Authorization", "Bearer "+tokens[i])
			resp, err := http.DefaultClient.Do(req)
			if err != nil {
				t.Error(err)
				return
			}
			_ = resp.Body.Close()
			codes[i] = resp.StatusCode
		}()
	}
	wg.Wait()
	admitted := 0
	for i, code := range codes {
		if code/100 == 2 {
			admitted++
		} else if code != 0 {
			t.Errorf("cluster%d's first event answered %d", i, code)
		}
	}
	if admitted != n || len(broker.Take()) != n {
		t.Errorf("%d of %d first events admitted at once", admitted, n)
	}
}

const fleetAddon = "scoreflow-latency-agent"
