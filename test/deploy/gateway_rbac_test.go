package deploy

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/google/uuid"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/dynamic"
	clientfeatures "k8s.io/client-go/features"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	clusterclient "open-cluster-management.io/api/client/cluster/clientset/versioned"
	"sigs.k8s.io/controller-runtime/pkg/envtest"
	"sigs.k8s.io/yaml"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/pkg/agentgateway"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

const (
	gatewayAddon = "scoreflow-latency-agent"
	dsfAgent     = "scoreflow-dsf-agent"
	// gatewayRole is the Role addon/dsf grants the gateway where the DynamicScorers are.
	gatewayRole = "scoreflow-agent-gateway"
)

var gatewaySeed sync.Once

// seedGateway installs on the shared hub, once: the addon and DSF CRDs; the AddOnTemplates of
// addon/ and addon/dsf as they ship, and addon/dsf's RBAC for the gateway; a DynamicScorer
// producing acme-cpu; and both addons enabled for the test cluster.
func seedGateway(t *testing.T, h *localhub.Hub) {
	t.Helper()
	var err error
	gatewaySeed.Do(func() { err = seedGatewayHub(h) })
	if err != nil {
		t.Fatal(err)
	}
}

func seedGatewayHub(h *localhub.Hub) error {
	ctx := context.Background()
	if err := h.InstallAddonCRDs(); err != nil {
		return err
	}
	if _, err := envtest.InstallCRDs(h.Config, envtest.CRDInstallOptions{Paths: []string{filepath.Join(repo, "addon", "dsf", "crds")}, ErrorIfPathMissing: true}); err != nil {
		return err
	}
	if err := createIgnoreExists(h.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: dsfStatusNS}}, metav1.CreateOptions{})); err != nil {
		return err
	}
	latency, err := knlocal.ReadFiles(filepath.Join(repo, "addon", "20-addon-template.yaml"))
	if err != nil {
		return err
	}
	built, err := manifests.Build(filepath.Join(repo, "addon", "dsf"))
	if err != nil {
		return err
	}
	objs := latency
	for _, it := range built {
		if o := it.Object; o.GetKind() == "AddOnTemplate" || o.GetName() == gatewayRole {
			objs = append(objs, o)
		}
	}
	dyn := dynamic.NewForConfigOrDie(h.Config)
	for _, o := range objs {
		gvr := map[string]string{"AddOnTemplate": "addontemplates", "Role": "roles", "RoleBinding": "rolebindings"}[o.GetKind()]
		r := dyn.Resource(o.GroupVersionKind().GroupVersion().WithResource(gvr))
		var ri dynamic.ResourceInterface = r
		if ns := o.GetNamespace(); ns != "" {
			ri = r.Namespace(ns)
		}
		if err := createIgnoreExists(ri.Create(ctx, o, metav1.CreateOptions{})); err != nil {
			return fmt.Errorf("%s %s: %w", o.GetKind(), o.GetName(), err)
		}
	}
	if err := createScorer(ctx, dyn, "acme", "acme_cpu"); err != nil {
		return err
	}
	for _, a := range []string{gatewayAddon, dsfAgent} {
		if err := createIgnoreExists(addonclient.NewForConfigOrDie(h.Config).AddonV1alpha1().ManagedClusterAddOns(cluster).Create(ctx,
			&addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: a, Namespace: cluster}}, metav1.CreateOptions{})); err != nil {
			return err
		}
	}
	return nil
}

// createScorer creates a DynamicScorer in the DSF namespace producing score's resource.
func createScorer(ctx context.Context, dyn dynamic.Interface, name, score string) error {
	return createIgnoreExists(dyn.Resource(dsf.ScorersResource).Namespace(dsfStatusNS).Create(ctx, &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": dsf.Group + "/" + dsf.Version, "kind": dsf.KindScorer, "metadata": map[string]any{"name": name},
		"spec": map[string]any{"description": "d", "configURL": "http://acme.example:8000/config", "configSyncMode": "None", "location": "External",
			"scoreDestination": "AddOnPlacementScore", "source": map[string]any{"type": "None"},
			"scoring": map[string]any{"path": "/scoring", "params": map[string]any{"name": score, "interval": int64(60)}}},
	}}, metav1.CreateOptions{}))
}

// shippedTable is the gateway's table as deploy/agent-gateway.yaml ships it.
func shippedTable(t *testing.T) *agentgateway.Table {
	t.Helper()
	raw, err := mountedFile(load(t, setHub), "agent-gateway", "AGENTS_FILE")
	if err != nil {
		t.Fatal(err)
	}
	var table agentgateway.Table
	if err := yaml.UnmarshalStrict(raw, &table); err != nil {
		t.Fatal(err)
	}
	if err := table.Validate(); err != nil {
		t.Fatal(err)
	}
	return &table
}

// runGateway runs the real gateway (pkg/agentgateway) with deploy/'s table and cfg's identity in
// front of a stand-in broker and returns its URL, or "" when it is not ready within 10s.
func runGateway(t *testing.T, cfg *rest.Config) (string, *functest.Sink) {
	t.Helper()
	broker := functest.NewSink(t, nil)
	sender, err := function.NewSenderWithToken(broker.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	fn := function.New("agent-gateway", "test")
	g, err := agentgateway.New(cfg, sender, agentgateway.Options{Table: shippedTable(t)}, fn.Log, nil)
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

// agentToken mints a token of the test cluster's agent of addon, as the agent does.
func agentToken(t *testing.T, h *localhub.Hub, addon string) string {
	t.Helper()
	ctx := context.Background()
	if err := createIgnoreExists(h.Kube.CoreV1().ServiceAccounts(cluster).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: addon}}, metav1.CreateOptions{})); err != nil {
		t.Fatal(err)
	}
	secs := int64(3600)
	tr, err := h.Kube.CoreV1().ServiceAccounts(cluster).CreateToken(ctx, addon, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{hubtoken.Audience}, ExpirationSeconds: &secs}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// postAgentScore posts a score.updated of resource for the test cluster with token.
func postAgentScore(t *testing.T, url, token, resource string) int {
	t.Helper()
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("agent")
	e.SetType(contract.TypeScoreUpdated)
	_ = e.SetData(cloudevents.ApplicationJSON, contract.ScoreUpdated{Resource: resource,
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

// seen reports whether the gateway answers want for resource within liveWithin of now: a live
// informer sees a change in milliseconds; one that cannot watch relists only after a backoff of
// 0.8s or more.
func seen(t *testing.T, url, token, resource string, want int) bool {
	t.Helper()
	for since := time.Now(); time.Since(since) < liveWithin; time.Sleep(10 * time.Millisecond) {
		if postAgentScore(t, url, token, resource) == want && time.Since(since) < liveWithin {
			return true
		}
	}
	return false
}

var changes atomic.Int64

// gatewayWorks runs the gateway as cfg's identity and reports whether, within liveWithin of each
// change: it admits the test cluster's latency agent for the resource the latency AddOnTemplate
// configures, and follows an edit of it; admits the DSF agent for an existing DynamicScorer's
// resource and for a new one's; and refuses the latency agent once its addon is disabled (its
// ManagedClusterAddOn deleted). Every change is undone after.
func gatewayWorks(t *testing.T, h *localhub.Hub, cfg *rest.Config) (bool, string) {
	t.Helper()
	url, broker := runGateway(t, cfg)
	if url == "" {
		return false, "it was not ready within 10s"
	}
	defer broker.Take()
	ctx := context.Background()
	latency, dsfToken := agentToken(t, h, gatewayAddon), agentToken(t, h, dsfAgent)
	if st := postAgentScore(t, url, latency, "latency"); st != http.StatusAccepted {
		return false, fmt.Sprintf("the enabled latency agent's score got %d", st)
	}
	if st := postAgentScore(t, url, dsfToken, "acme-cpu"); st != http.StatusAccepted {
		return false, fmt.Sprintf("the DSF agent's score of an existing DynamicScorer's resource got %d", st)
	}

	n := changes.Add(1)
	dyn := dynamic.NewForConfigOrDie(h.Config)
	name := fmt.Sprintf("acme-%d", n)
	if err := createScorer(ctx, dyn, name, name); err != nil {
		t.Fatal(err)
	}
	defer func() {
		_ = dyn.Resource(dsf.ScorersResource).Namespace(dsfStatusNS).Delete(ctx, name, metav1.DeleteOptions{})
	}()
	if !seen(t, url, dsfToken, name, http.StatusAccepted) {
		return false, "a new DynamicScorer's resource was not admitted within " + liveWithin.String()
	}

	templates := addonclient.NewForConfigOrDie(h.Config).AddonV1alpha1().AddOnTemplates()
	edit := func(from, to string) {
		tpl, err := templates.Get(ctx, gatewayAddon, metav1.GetOptions{})
		if err != nil {
			t.Fatal(err)
		}
		for i, m := range tpl.Spec.AgentSpec.Workload.Manifests {
			tpl.Spec.AgentSpec.Workload.Manifests[i].Raw = []byte(strings.Replace(string(m.Raw), `resource: `+from+`\n`, `resource: `+to+`\n`, 1))
		}
		if _, err := templates.Update(ctx, tpl, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	edited := fmt.Sprintf("latency-%d", n)
	edit("latency", edited)
	ok := seen(t, url, latency, edited, http.StatusAccepted)
	edit(edited, "latency")
	if !ok {
		return false, "an edit of the latency AddOnTemplate's resource did not apply within " + liveWithin.String()
	}

	mcas := addonclient.NewForConfigOrDie(h.Config).AddonV1alpha1().ManagedClusterAddOns(cluster)
	if err := mcas.Delete(ctx, gatewayAddon, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if _, err := mcas.Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: gatewayAddon, Namespace: cluster}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}()
	if !seen(t, url, latency, "latency", http.StatusForbidden) {
		return false, fmt.Sprintf("the agent was still admitted %s after its addon was disabled", liveWithin)
	}
	return true, ""
}

const liveWithin = 500 * time.Millisecond

// dsfGatewayRole is addon/dsf's Role for the gateway and what binds it.
func dsfGatewayRole(t *testing.T) (*rbacv1.Role, []string) {
	t.Helper()
	built, err := manifests.Build(filepath.Join(repo, "addon", "dsf"))
	if err != nil {
		t.Fatal(err)
	}
	var role *rbacv1.Role
	var bound []string
	for _, it := range built {
		o := it.Object
		switch o.GetKind() {
		case "Role":
			if o.GetName() == gatewayRole {
				role = &rbacv1.Role{}
				if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, role); err != nil {
					t.Fatal(err)
				}
			}
		case "RoleBinding", "ClusterRoleBinding":
			var b rbacv1.RoleBinding
			if err := runtime.DefaultUnstructuredConverter.FromUnstructured(o.Object, &b); err != nil {
				t.Fatal(err)
			}
			for _, s := range b.Subjects {
				if s.Kind == rbacv1.ServiceAccountKind && s.Namespace == Namespace && s.Name == "agent-gateway" {
					bound = append(bound, o.GetKind()+" "+b.Namespace+"/"+b.Name+" -> "+b.RoleRef.Kind+"/"+b.RoleRef.Name)
				}
			}
		}
	}
	if role == nil {
		t.Fatalf("addon/dsf has no Role %s", gatewayRole)
	}
	return role, bound
}

// TestAgentGatewayRBAC: the gateway's account is bound to exactly deploy/'s ClusterRole (create
// on tokenreviews; list and watch on managedclusteraddons; list and watch on the two
// addontemplates its table names, by name) and addon/dsf's Role where the DynamicScorers are
// (list and watch on dynamicscorers). With them the real gateway, with deploy/'s table, admits the
// agents for the resources the hub's objects give them and follows their changes; without any one
// of those grants it does not (list is what an informer needs where the API server has no
// streaming list; this one has, so those variants run with client-go's streaming list off); and
// the account can do nothing else: no other AddOnTemplate, no DynamicScorer elsewhere, no write.
func TestAgentGatewayRBAC(t *testing.T) {
	h := rbacHub(t)
	seedGateway(t, h)
	s := load(t, setHub)
	const sa = "agent-gateway"
	if roles := bindingsOf(s, sa); !reflect.DeepEqual(roles, []string{"ClusterRole/scoreflow-agent-gateway"}) {
		t.Fatalf("%s is bound in deploy/ to %v, want ClusterRole/scoreflow-agent-gateway only", sa, roles)
	}
	deployed, ok := manifests.Find(s.ClusterRoles, "", "scoreflow-agent-gateway")
	if !ok {
		t.Fatal("ClusterRole scoreflow-agent-gateway not found")
	}
	var templates []string
	for _, a := range shippedTable(t).Agents {
		if a.ResourcesFrom != nil {
			templates = append(templates, a.ResourcesFrom.AddOnTemplate)
		}
	}
	want := []rbacv1.PolicyRule{
		{APIGroups: []string{"authentication.k8s.io"}, Resources: []string{"tokenreviews"}, Verbs: []string{"create"}},
		{APIGroups: []string{addonv1alpha1.GroupName}, Resources: []string{"managedclusteraddons"}, Verbs: []string{"list", "watch"}},
		{APIGroups: []string{addonv1alpha1.GroupName}, Resources: []string{"addontemplates"}, ResourceNames: templates, Verbs: []string{"list", "watch"}},
	}
	if got := deployed.Object.Rules; !reflect.DeepEqual(got, want) {
		t.Errorf("%s: rules %+v, want exactly %+v (the templates are the table's)", deployed.Source, got, want)
	}
	role, bound := dsfGatewayRole(t)
	if want := []string{"RoleBinding " + dsfStatusNS + "/" + gatewayRole + " -> Role/" + gatewayRole}; !reflect.DeepEqual(bound, want) {
		t.Errorf("addon/dsf binds %s by %v, want %v", sa, bound, want)
	}
	if want := []rbacv1.PolicyRule{{APIGroups: []string{dsf.Group}, Resources: []string{"dynamicscorers"}, Verbs: []string{"list", "watch"}}}; role.Namespace != dsfStatusNS || !reflect.DeepEqual(role.Rules, want) {
		t.Errorf("addon/dsf's Role %s/%s: %+v, want exactly %+v in %s", role.Namespace, role.Name, role.Rules, want, dsfStatusNS)
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
	ctx := context.Background()
	for ri, rule := range deployed.Object.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				name := fmt.Sprintf("test-gateway-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					if verb == "list" {
						defer clientfeatures.ReplaceFeatureGates(clientfeatures.FeatureGates())
						clientfeatures.ReplaceFeatureGates(noWatchList{clientfeatures.FeatureGates()})
					}
					bindToNewAccount(ctx, t, h, withoutGrant(deployed.Object, name, ri, res, verb))
					bindRoleCopy(ctx, t, h, name, role)
					cfg, _, _ := as(t, h, Namespace, name)
					if ok, _ := gatewayWorks(t, h, cfg); ok {
						t.Errorf("without %s on %s the gateway still works: the grant is not needed", verb, res)
					}
				})
			}
		}
	}
	for ri, rule := range role.Rules {
		for _, res := range rule.Resources {
			for _, verb := range rule.Verbs {
				name := fmt.Sprintf("test-gateway-without-%s-%s", verb, res)
				t.Run(name, func(t *testing.T) {
					if verb == "list" {
						defer clientfeatures.ReplaceFeatureGates(clientfeatures.FeatureGates())
						clientfeatures.ReplaceFeatureGates(noWatchList{clientfeatures.FeatureGates()})
					}
					cr := deployed.Object.DeepCopy()
					cr.Name, cr.ResourceVersion = name, ""
					bindToNewAccount(ctx, t, h, cr)
					without := withoutGrant(&rbacv1.ClusterRole{Rules: role.Rules}, name, ri, res, verb)
					bindRoleCopy(ctx, t, h, name, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: role.Namespace}, Rules: without.Rules})
					cfg, _, _ := as(t, h, Namespace, name)
					if ok, _ := gatewayWorks(t, h, cfg); ok {
						t.Errorf("without %s on %s the gateway still works: the grant is not needed", verb, res)
					}
				})
			}
		}
	}

	cfg, kube, cc := as(t, h, Namespace, sa)
	addons := addonclient.NewForConfigOrDie(cfg).AddonV1alpha1()
	scorers := dynamic.NewForConfigOrDie(cfg).Resource(dsf.ScorersResource)
	checkAccess(t, kube, cc, append([]access{
		with(false, getManagedCluster), with(false, getScore),
		{"mint an agent's token", func(ctx context.Context, kube kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := kube.CoreV1().ServiceAccounts(cluster).CreateToken(ctx, gatewayAddon, &authnv1.TokenRequest{}, metav1.CreateOptions{})
			return err
		}, false},
		{"get a ManagedClusterAddOn", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := addons.ManagedClusterAddOns(cluster).Get(ctx, gatewayAddon, metav1.GetOptions{})
			return err
		}, false},
		{"list the table's AddOnTemplate by name", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := addons.AddOnTemplates().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=" + dsfAgent})
			return err
		}, true},
		{"list every AddOnTemplate", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := addons.AddOnTemplates().List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"list another AddOnTemplate", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := addons.AddOnTemplates().List(ctx, metav1.ListOptions{FieldSelector: "metadata.name=someone-elses"})
			return err
		}, false},
		{"get an AddOnTemplate", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := addons.AddOnTemplates().Get(ctx, dsfAgent, metav1.GetOptions{})
			return err
		}, false},
		{"update an AddOnTemplate", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := addons.AddOnTemplates().Update(ctx, &addonv1alpha1.AddOnTemplate{ObjectMeta: metav1.ObjectMeta{Name: dsfAgent}}, metav1.UpdateOptions{})
			return err
		}, false},
		{"list DynamicScorers elsewhere", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := scorers.Namespace(cluster).List(ctx, metav1.ListOptions{})
			return err
		}, false},
		{"get a DynamicScorer", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := scorers.Namespace(dsfStatusNS).Get(ctx, "acme", metav1.GetOptions{})
			return err
		}, false},
		{"delete a DynamicScorer", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			return scorers.Namespace(dsfStatusNS).Delete(ctx, "acme", metav1.DeleteOptions{})
		}, false},
		{"list DynamicScoringConfigs", func(ctx context.Context, _ kubernetes.Interface, _ clusterclient.Interface) error {
			_, err := dynamic.NewForConfigOrDie(cfg).Resource(dsf.ConfigsResource).Namespace(dsfStatusNS).List(ctx, metav1.ListOptions{})
			return err
		}, false},
	}, neverAllowed...))
}

// bindRoleCopy creates a copy of role named name in its namespace, bound to the account name alone.
func bindRoleCopy(ctx context.Context, t *testing.T, h *localhub.Hub, name string, role *rbacv1.Role) {
	t.Helper()
	c := role.DeepCopy()
	c.Name, c.ResourceVersion, c.UID = name, "", ""
	c.Rules = slices.Clone(c.Rules)
	for _, err := range []error{
		createIgnoreExists(h.Kube.RbacV1().Roles(c.Namespace).Create(ctx, c, metav1.CreateOptions{})),
		createIgnoreExists(h.Kube.RbacV1().RoleBindings(c.Namespace).Create(ctx, &rbacv1.RoleBinding{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.Namespace},
			RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name},
			Subjects:   []rbacv1.Subject{{Kind: rbacv1.ServiceAccountKind, Name: name, Namespace: Namespace}},
		}, metav1.CreateOptions{})),
	} {
		if err != nil {
			t.Fatal(err)
		}
	}
}
