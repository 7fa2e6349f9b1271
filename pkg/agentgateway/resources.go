package agentgateway

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"net/http"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/tools/cache"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"
	addoninformers "open-cluster-management.io/api/client/addon/informers/externalversions"

	"github.com/scoreflow/scoreflow/pkg/auth"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/dsf"
	"github.com/scoreflow/scoreflow/pkg/scorer/latency"
)

// informerResync is how often the gateway's informers replay their caches.
const informerResync = 10 * time.Minute

// resourceCheck decides which AddOnPlacementScore resources one addon's agents may score.
type resourceCheck interface {
	// check is nil when the addon's agents may score resource, else the refusal.
	check(addon, resource string) *auth.Refusal
	// start keeps the check current from the hub until stop is closed.
	start(stop <-chan struct{})
	// ready is nil once the check has read what it needs from the hub.
	ready() error
}

// newResourceCheck is the check of one row of the table.
func newResourceCheck(a Agent, addons addonclient.Interface, dyn dynamic.Interface, log *slog.Logger) resourceCheck {
	if a.ResourcesFrom == nil {
		return fixedResources(a.Resources)
	}
	return newTemplateResources(a.Addon, *a.ResourcesFrom, addons, dyn, log)
}

// notScored refuses resource for addon, saying why.
func notScored(addon, resource, why string) *auth.Refusal {
	msg := fmt.Sprintf("addon %s may not score resource %q", addon, contract.Truncate(resource, 64))
	if why != "" {
		msg += ": " + why
	}
	return refusal(http.StatusForbidden, contract.ReasonForbidden, msg, nil)
}

// fixedResources are resources the table lists.
type fixedResources []string

func (f fixedResources) check(addon, resource string) *auth.Refusal {
	if slices.Contains(f, resource) {
		return nil
	}
	return notScored(addon, resource, "")
}

func (fixedResources) start(<-chan struct{}) {}
func (fixedResources) ready() error          { return nil }

// templateResources are an addon's resources as its AddOnTemplate decides them (ResourcesFrom),
// kept current by an informer of that one template: a change applies to the next event, without
// a restart.
type templateResources struct {
	addon    string
	from     ResourcesFrom
	dyn      dynamic.Interface
	log      *slog.Logger
	informer cache.SharedIndexInformer
	handled  cache.ResourceEventHandlerRegistration

	mu   sync.Mutex
	stop <-chan struct{} // the gateway's; closed when it stops
	// What the template says now. problem, when set, is why it admits nothing.
	problem  string
	resource string       // LatencyConfig's
	scorers  *scorerWatch // DynamicScorers': those of the namespace the template names
}

func newTemplateResources(addon string, from ResourcesFrom, addons addonclient.Interface, dyn dynamic.Interface, log *slog.Logger) *templateResources {
	// One template, by name: the gateway's account may list and watch only the templates its
	// table names (RBAC resourceNames, which a field selector on the name satisfies).
	factory := addoninformers.NewSharedInformerFactoryWithOptions(addons, informerResync, addoninformers.WithTweakListOptions(func(o *metav1.ListOptions) {
		o.FieldSelector = fields.OneTermEqualSelector("metadata.name", from.AddOnTemplate).String()
	}))
	t := &templateResources{addon: addon, from: from, dyn: dyn, log: log, informer: factory.Addon().V1alpha1().AddOnTemplates().Informer(),
		problem: "no AddOnTemplate " + from.AddOnTemplate + " on the hub"}
	t.handled, _ = t.informer.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(obj any) { t.apply(obj) },
		UpdateFunc: func(_, obj any) { t.apply(obj) },
		DeleteFunc: func(any) { t.apply(nil) },
	})
	return t
}

func (t *templateResources) start(stop <-chan struct{}) {
	t.mu.Lock()
	t.stop = stop
	t.mu.Unlock()
	go t.informer.Run(stop)
}

func (t *templateResources) ready() error {
	if !t.handled.HasSynced() {
		return fmt.Errorf("AddOnTemplate %s (addon %s) not read yet", t.from.AddOnTemplate, t.addon)
	}
	t.mu.Lock()
	w := t.scorers
	t.mu.Unlock()
	if w != nil && !w.informer.HasSynced() && w.failure() == "" {
		return fmt.Errorf("the DynamicScorers of namespace %s (addon %s) not read yet", w.namespace, t.addon)
	}
	return nil
}

func (t *templateResources) check(addon, resource string) *auth.Refusal {
	if !t.handled.HasSynced() {
		return refusal(http.StatusServiceUnavailable, contract.ReasonUnavailable, fmt.Sprintf("AddOnTemplate %s is not read yet; retry", t.from.AddOnTemplate), nil)
	}
	t.mu.Lock()
	problem, admitted, w := t.problem, t.resource, t.scorers
	t.mu.Unlock()
	switch {
	case problem != "":
		return notScored(addon, resource, problem)
	case t.from.LatencyConfig != nil:
		if resource == admitted {
			return nil
		}
		return notScored(addon, resource, fmt.Sprintf("its AddOnTemplate %s configures resource %q", t.from.AddOnTemplate, admitted))
	}
	if !w.informer.HasSynced() {
		if why := w.failure(); why != "" {
			return notScored(addon, resource, fmt.Sprintf("no DynamicScorer of namespace %s can be read: %s", w.namespace, contract.Truncate(why, 200)))
		}
		return refusal(http.StatusServiceUnavailable, contract.ReasonUnavailable, fmt.Sprintf("the DynamicScorers of namespace %s are not read yet; retry", w.namespace), nil)
	}
	if producers, err := w.informer.GetIndexer().ByIndex(byResource, resource); err == nil && len(producers) > 0 {
		return nil
	}
	return notScored(addon, resource, fmt.Sprintf("no DynamicScorer in namespace %s produces it", w.namespace))
}

// apply makes what the template obj says (nil: deleted) what is admitted.
func (t *templateResources) apply(obj any) {
	tpl, _ := obj.(*addonv1alpha1.AddOnTemplate)
	t.mu.Lock()
	defer t.mu.Unlock()
	namespace, resource, problem := "", "", ""
	var err error
	switch {
	case tpl == nil:
		problem = "no AddOnTemplate " + t.from.AddOnTemplate + " on the hub"
	case t.from.LatencyConfig != nil:
		resource, err = latencyResource(tpl, *t.from.LatencyConfig)
	default:
		namespace, err = scorersNamespace(tpl)
	}
	if err != nil {
		problem = fmt.Sprintf("its AddOnTemplate %s: %v", t.from.AddOnTemplate, err)
	}
	if problem != t.problem || resource != t.resource {
		if problem != "" {
			t.log.Warn("an addon's agents may score nothing", "addon", t.addon, "why", problem)
		} else if t.from.LatencyConfig != nil {
			t.log.Info("an addon's agents may score the resource its AddOnTemplate configures", "addon", t.addon, "addOnTemplate", t.from.AddOnTemplate, "resource", resource)
		}
	}
	t.problem, t.resource = problem, resource
	t.watchScorers(namespace)
}

// watchScorers makes the DynamicScorers of namespace ("": none) what is admitted: a namespace the
// template names no more is no longer watched.
func (t *templateResources) watchScorers(namespace string) {
	if t.scorers != nil && t.scorers.namespace == namespace {
		return
	}
	if t.scorers != nil {
		close(t.scorers.cancel)
		t.scorers = nil
	}
	if namespace == "" {
		return
	}
	t.scorers = newScorerWatch(t.dyn, namespace, t.log)
	go t.scorers.run(t.stop)
	t.log.Info("an addon's agents may score the resources of the DynamicScorers its AddOnTemplate lets them read", "addon", t.addon,
		"addOnTemplate", t.from.AddOnTemplate, "namespace", namespace)
}

// latencyResource is the resource of the latency configuration in key's ConfigMap among tpl's
// manifests, read as the agent reads it (latency.Parse).
func latencyResource(tpl *addonv1alpha1.AddOnTemplate, key ConfigMapKey) (string, error) {
	for _, m := range tpl.Spec.AgentSpec.Workload.Manifests {
		var cm corev1.ConfigMap
		if err := json.Unmarshal(m.Raw, &cm); err != nil || cm.Kind != "ConfigMap" || cm.Name != key.ConfigMap {
			continue
		}
		data, ok := cm.Data[key.Key]
		if !ok {
			return "", fmt.Errorf("ConfigMap %s has no key %s", key.ConfigMap, key.Key)
		}
		cfg, err := latency.Parse([]byte(data))
		if err != nil {
			return "", fmt.Errorf("ConfigMap %s, key %s: %v", key.ConfigMap, key.Key, err)
		}
		return cfg.Resource, nil
	}
	return "", fmt.Errorf("no ConfigMap %s among its manifests", key.ConfigMap)
}

// scorersNamespace is the one namespace where tpl's registration lets its agents read the hub's
// DynamicScorers: its one hub permission of type SingleNamespace.
func scorersNamespace(tpl *addonv1alpha1.AddOnTemplate) (string, error) {
	var namespaces []string
	for _, r := range tpl.Spec.Registration {
		if r.Type != addonv1alpha1.RegistrationTypeKubeClient || r.KubeClient == nil {
			continue
		}
		for _, p := range r.KubeClient.HubPermissions {
			if p.Type == addonv1alpha1.HubPermissionsBindingSingleNamespace && p.SingleNamespace != nil {
				namespaces = append(namespaces, p.SingleNamespace.Namespace)
			}
		}
	}
	if len(namespaces) != 1 {
		return "", fmt.Errorf("its registration grants %d namespaces (hub permissions of type SingleNamespace) %v, want the one where its agents read the DynamicScorers", len(namespaces), namespaces)
	}
	if errs := validation.IsDNS1123Label(namespaces[0]); len(errs) > 0 {
		return "", fmt.Errorf("namespace %q: %v", namespaces[0], errs)
	}
	return namespaces[0], nil
}

// byResource indexes DynamicScorers by the resource they produce.
const byResource = "resource"

// scorerWatch is an informer of the DynamicScorers of one namespace, indexed by the resource each
// produces (dsf.AgentResource, what the agents write).
type scorerWatch struct {
	namespace string
	informer  cache.SharedIndexInformer
	cancel    chan struct{}
	// failing is why listing fails while it fails for a reason retrying soon will not fix: the
	// hub does not serve DynamicScorers (DSF's CRDs are not installed) or the gateway may not read
	// them (addon/dsf grants it).
	failing atomic.Pointer[string]
}

func newScorerWatch(dyn dynamic.Interface, namespace string, log *slog.Logger) *scorerWatch {
	w := &scorerWatch{namespace: namespace, cancel: make(chan struct{}),
		informer: dynamicinformer.NewFilteredDynamicInformer(dyn, dsf.ScorersResource, namespace, informerResync,
			cache.Indexers{byResource: scorerResource}, nil).Informer()}
	_ = w.informer.SetWatchErrorHandler(func(_ *cache.Reflector, err error) {
		if !apierrors.IsNotFound(err) && !apierrors.IsForbidden(err) {
			log.Debug("watching DynamicScorers", "namespace", namespace, "err", err.Error())
			return
		}
		why := err.Error()
		if last := w.failing.Swap(&why); last == nil || *last != why {
			log.Error("cannot read the DynamicScorers: the DSF agents may score nothing", "namespace", namespace, "err", why)
		}
	})
	return w
}

// run runs the informer until stop or the watch's cancel is closed.
func (w *scorerWatch) run(stop <-chan struct{}) {
	done := make(chan struct{})
	go func() {
		select {
		case <-stop:
		case <-w.cancel:
		}
		close(done)
	}()
	w.informer.Run(done)
}

// failure is why the DynamicScorers cannot be read, "" when no such reason is known.
func (w *scorerWatch) failure() string {
	if p := w.failing.Load(); p != nil {
		return *p
	}
	return ""
}

// scorerResource is the resource a DynamicScorer produces, if any; one that does not decode
// produces none.
func scorerResource(obj any) ([]string, error) {
	u, ok := obj.(*unstructured.Unstructured)
	if !ok {
		return nil, nil
	}
	var ds dsf.DynamicScorer
	if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, &ds); err != nil {
		return nil, nil
	}
	if r := dsf.AgentResource(&ds); r != "" {
		return []string{r}, nil
	}
	return nil, nil
}
