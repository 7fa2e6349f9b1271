package devrun

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/cache"
	"knative.dev/eventing/pkg/apis/sources"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"

	"github.com/scoreflow/scoreflow/pkg/function"
)

// ApiServerSource event types (knative.dev/eventing sources/v1).
const (
	typeAdd    = sources.ApiServerSourceAddEventType
	typeUpdate = sources.ApiServerSourceUpdateEventType
	typeDelete = sources.ApiServerSourceDeleteEventType
)

// APIServerSourceEvent builds the CloudEvent a Knative ApiServerSource in Resource mode sends for
// a watched object, as knative.dev/eventing v0.50.0 pkg/adapter/apiserver/events does: type by
// watch event, source the API server URL, subject the object's path, kind/apiversion/name/
// namespace extensions, the object as JSON data, a UUID id and the send time.
func APIServerSourceEvent(typ, apiServer string, obj *unstructured.Unstructured) (event.Event, error) {
	e := cloudevents.NewEvent(cloudevents.VersionV1)
	e.SetID(uuid.NewString())
	e.SetType(typ)
	e.SetSource(apiServer)
	e.SetTime(time.Now())
	e.SetSubject(selfLink(obj))
	e.SetExtension("kind", obj.GetKind())
	e.SetExtension("apiversion", obj.GetAPIVersion())
	e.SetExtension("name", obj.GetName())
	e.SetExtension("namespace", obj.GetNamespace())
	return e, e.SetData(cloudevents.ApplicationJSON, obj)
}

func selfLink(obj *unstructured.Unstructured) string {
	var b strings.Builder
	b.WriteString("/apis/" + obj.GetAPIVersion())
	if ns := obj.GetNamespace(); ns != "" {
		b.WriteString("/namespaces/" + ns)
	}
	b.WriteString("/" + strings.ToLower(obj.GetKind()) + "s/" + obj.GetName())
	return b.String()
}

// runAPIServerSource does locally what the ApiServerSource adapter does in a cluster: it watches
// the source's resources on the hub and sends each add, update and delete to sender.
func runAPIServerSource(ctx context.Context, cfg *rest.Config, src *sourcesv1.ApiServerSource, sender *function.Sender, log *slog.Logger) error {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return err
	}
	mapper := restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	factory := dynamicinformer.NewDynamicSharedInformerFactory(dyn, 0)
	for _, r := range src.Spec.Resources {
		gv, err := schema.ParseGroupVersion(r.APIVersion)
		if err != nil {
			return err
		}
		m, err := mapper.RESTMapping(schema.GroupKind{Group: gv.Group, Kind: r.Kind}, gv.Version)
		if err != nil {
			return fmt.Errorf("ApiServerSource %s: %s %s: %w", src.Name, r.APIVersion, r.Kind, err)
		}
		send := func(typ string, obj any) {
			u, ok := obj.(*unstructured.Unstructured)
			if !ok {
				if d, isTomb := obj.(cache.DeletedFinalStateUnknown); isTomb {
					u, ok = d.Obj.(*unstructured.Unstructured)
				}
			}
			if !ok {
				return
			}
			e, err := APIServerSourceEvent(typ, cfg.Host, u)
			if err == nil {
				err = sender.Send(ctx, e)
			}
			if err != nil && ctx.Err() == nil {
				log.Warn("apiserversource: send failed", "source", src.Name, "object", u.GetName(), "err", err)
			}
		}
		_, err = factory.ForResource(m.Resource).Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(obj any) { send(typeAdd, obj) },
			UpdateFunc: func(_, obj any) { send(typeUpdate, obj) },
			DeleteFunc: func(obj any) { send(typeDelete, obj) },
		})
		if err != nil {
			return err
		}
	}
	factory.Start(ctx.Done())
	return nil
}
