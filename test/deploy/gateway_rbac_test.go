package deploy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"reflect"
	"sync"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/agentgateway"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

const gatewayAddon = "scoreflow-latency-agent"

var gatewaySeed sync.Once

// seedGateway installs the addon CRDs on the shared hub and enables the addon for the test
// cluster, once.
func seedGateway(t *testing.T, h *localhub.Hub) {
	t.Helper()
	var err error
	gatewaySeed.Do(func() {
		if err = h.InstallAddonCRDs(); err != nil {
			return
		}
		_, err = addonclient.NewForConfigOrDie(h.Config).AddonV1alpha1().ManagedClusterAddOns(cluster).Create(context.Background(),
			&addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: gatewayAddon, Namespace: cluster}}, metav1.CreateOptions{})
		if apierrors.IsAlreadyExists(err) {
			err = nil
		}
	})
	if err != nil {
		t.Fatal(err)
	}
}

// runGateway runs the real gateway (pkg/agentgateway) with cfg's identity in front of a stand-in
// broker and returns its URL, or "" when its ManagedClusterAddOn informer does not sync in 10s.
func runGateway(t *testing.T, cfg *rest.Config) (string, *functest.Sink) {
	t.Helper()
	broker := functest.NewSink(t, nil)
	sender, err := function.NewSenderWithToken(broker.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	table := &agentgateway.Table{Agents: []agentgateway.Agent{{Addon: gatewayAddon, Types: []string{contract.TypeScoreUpdated}, Resources: []string{"latency"}}}}
	fn := function.New("agent-gateway", "test")
	g, err := agentgateway.New(cfg, sender, agentgateway.Options{Table: table}, fn.Log, nil)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g.Start(ctx)
	for deadline := time.Now().Add(10 * time.Second); g.Ready() != nil; time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			return "", broker
		}
	}
	srv := httptest.NewServer(g.Handler(fn))
	t.Cleanup(srv.Close)
	return srv.URL, broker
}

// agentToken mints a token of the test cluster's agent, as the agent does.
func agentToken(t *testing.T, h *localhub.Hub) string {
	t.Helper()
	ctx := context.Background()
	if err := createIgnoreExists(h.Kube.CoreV1().ServiceAccounts(cluster).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: gatewayAddon}}, metav1.CreateOptions{})); err != nil {
		t.Fatal(err)
	}
	secs := int64(3600)
	tr, err := h.Kube.CoreV1().ServiceAccounts(cluster).CreateToken(ctx, gatewayAddon, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{hubtoken.Audience}, ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// postAgentScore posts a score.updated of the test cluster with token.
func postAgentScore(t *testing.T, url, token string) int {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("agent")
	e.SetType(contract.TypeScoreUpdated)
	_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: "latency",
		Items: []contract.ClusterScores{{Cluster: cluster, Scores: []contract.Score{{Name: "r", Value: 1}}}}})
	req := functest.Request(t, url, e)
	req.Header.Set("Authorization", "Bearer "+token)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	_ = resp.Body.Close()
	return resp.StatusCode
}

// gatewayWorks runs the gateway as cfg's identity and reports whether it admits the test cluster's agent while its addon
// is enabled and refuses it, within liveWithin, once the addon is disabled (its ManagedClusterAddOn
// deleted); the addon is enabled again after.
func gatewayWorks(t *testing.T, h *localhub.Hub, cfg *rest.Config) (bool, string) {
	t.Helper()
	url, broker := runGateway(t, cfg)
	if url == "" {
		return false, "its ManagedClusterAddOn informer did not sync"
	}
	token := agentToken(t, h)
	if st := postAgentScore(t, url, token); st != http.StatusAccepted || len(broker.Take()) != 1 {
		return false, fmt.Sprintf("the enabled agent's score got %d", st)
	}
	ctx := context.Background()
	mcas := addonclient.NewForConfigOrDie(h.Config).AddonV1alpha1().ManagedClusterAddOns(cluster)
	if err := mcas.Delete(ctx, gatewayAddon, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := mcas.Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: gatewayAddon, Namespace: cluster}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}()
	// A live informer sees the deletion in milliseconds; one that cannot watch relists only after
	// a backoff of 0.8s or more.
	disabled := time.Now()
	for time.Since(disabled) < liveWithin {
		if st := postAgentScore(t, url, token); st == http.StatusForbidden && time.Since(disabled) < liveWithin {
			return true, ""
		}
		time.Sleep(10 * time.Millisecond)
	}
	broker.Take()
	return false, fmt.Sprintf("the agent was still admitted %s after its addon was disabled", liveWithin)
}

const liveWithin = 500 * time.Millisecond

// TestAgentGatewayRBAC: the gateway's account is bound to exactly one ClusterRole granting create
// on tokenreviews and list and watch on managedclusteraddons; with it the real gateway admits an
// enabled agent's score and refuses it once the addon is disabled; without any one of those grants
// it does not (list is what an informer needs where the API server has no streaming list; this
// one has, so that variant runs with client-go's streaming list off); and the account can do
// nothing else (it reads no Secrets and mints no tokens).
func TestAgentGatewayRBAC(t *testing.T) {
	h := rbacHub(t)
	seedGateway(t, h)
	s := load(t, setHub)
	const sa = "agent-gateway"
	if roles := bindingsOf(s, sa); !reflect.DeepEqual(roles, []string{"ClusterRole/scoreflow-agent-gateway"}) {
		t.Fatalf("%s is bound to %v, want ClusterRole/scoreflow-agent-gateway only", sa, roles)
	}
	deployed, ok := manifests.Find(s.ClusterRoles, "", "scoreflow-agent-gateway")
	if !ok {
		t.Fatal("ClusterRole scoreflow-agent-gateway not found")
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{addonv1alpha1.GroupName}, Resources: []string{"managedclusteraddons"}, Verbs: []string{"list", "watch"}},
	}
	if got := deployed.Object.Rules; !reflect.DeepEqual(got, want) {
		t.Errorf("%s: rules %+v, want exactly %+v", deployed.Source, got, want)
	}

	t.Run("as deployed", func(t *testing.T) {
		cfg, _, _ := as(t, h, Namespace, sa)
		if ok, why := gatewayWorks(t, h, cfg); !ok {
			t.Error(why)
		}
	})
	t.Run("as deployed, without streaming list", func(t *testing.T) {
		defer clientfeatures.ReplaceFeatureGates(clientfeatures.FeatureGates())
		clientfeatures.ReplaceFeatureGates(noWatchList{clientfeatures.FeatureGates()})
		cfg, _, _ := as(t, h, Namespace, sa)
		if ok, why := gatewayWorks(t, h, cfg); !ok {
			t.Error(why)
		}
	})
	for ri, rule := range deployed.Object.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				name := fmt.Sprintf("test-gateway-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					if verb == "list" {
						defer clientfeatures.ReplaceFeatureGates(clientfeatures.FeatureGates())
						clientfeatures.ReplaceFeatureGates(noWatchList{clientfeatures.FeatureGates()})
					}
					bindToNewAccount(context.Background(), t, h, withoutGrant(deployed.Object, name, ri, res, verb))
					cfg, _, _ := as(t, h, Namespace, name)
					if ok, _ := gatewayWorks(t, h, cfg); ok {
						t.Errorf("without %s on %s the gateway still works: the grant is not needed", verb, res)
					}
				})
			}
		}
	}

	_, kube, cc := as(t, h, Namespace, sa)
	checkAccess(t, kube, cc, append([]access{
		with(false, getManagedCluster), with(false, getScore),
		{"mint an agent's token", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := kube.CoreV1().ServiceAccounts(cluster).CreateToken(ctx, gatewayAddon, &authnv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}, false},
		{"get a ManagedClusterAddOn", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			cfg, _, _ := as(t, h, Namespace, sa)
			_, err := addonclient.NewForConfigOrDie(cfg).AddonV1alpha1().ManagedClusterAddOns(cluster).Get(ctx, gatewayAddon, metav1.GetOptions{})
			return err
		}, false},
	}, neverAllowed...))
}
