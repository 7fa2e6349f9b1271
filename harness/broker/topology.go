package broker

import (
	"context"
	"fmt"
	"log/slog"

	eventingduckv1 "knative.dev/eventing/pkg/apis/duck/v1"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	"knative.dev/eventing/pkg/apis/feature"
	sourcesv1 "knative.dev/eventing/pkg/apis/sources/v1"
	"knative.dev/eventing/pkg/eventfilter"
	"knative.dev/eventing/pkg/kncloudevents"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// brokerState is one Broker and the Triggers bound to it.
type brokerState struct {
	namespace, name, key string
	triggers             []*triggerState
}

// triggerState is one Trigger ready to deliver: its filter, resolved delivery settings and queue.
type triggerState struct {
	namespace, name, key string
	broker               *brokerState
	filter               eventfilter.Filter // nil: every event passes
	subscriber           duckv1.Destination
	retry                kncloudevents.RetryConfig
	deadLetter           *duckv1.Destination
	format               *eventingduckv1.FormatType
	queue                *queue
}

// defaultNamespace is where objects without a namespace live, as kubectl applies them.
const defaultNamespace = "default"

func namespaceOr(ns string) string {
	if ns == "" {
		return defaultNamespace
	}
	return ns
}

// validationContext enables the features a default Knative 1.23 install enables (delivery
// timeout among them), so validation accepts what the cluster's webhook accepts.
func validationContext() context.Context {
	flags, _ := feature.NewFlagsConfigFromMap(nil)
	return feature.ToContext(context.Background(), flags)
}

// buildBrokers indexes the Brokers by namespace/name, refusing duplicates and invalid delivery specs.
func buildBrokers(ctx context.Context, objs []*eventingv1.Broker) (map[string]*brokerState, map[string]*eventingduckv1.DeliverySpec, error) {
	brokers := make(map[string]*brokerState, len(objs))
	delivery := make(map[string]*eventingduckv1.DeliverySpec, len(objs))
	for _, b := range objs {
		ns := namespaceOr(b.Namespace)
		key := ns + "/" + b.Name
		if b.Name == "" {
			return nil, nil, fmt.Errorf("broker in %s has no name", ns)
		}
		if _, dup := brokers[key]; dup {
			return nil, nil, fmt.Errorf("broker %s is defined twice", key)
		}
		// Broker.Validate also wants the class annotation the cluster's defaulting webhook adds;
		// only the delivery spec matters here.
		if err := b.Spec.Delivery.Validate(ctx); err != nil {
			return nil, nil, fmt.Errorf("broker %s: %w", key, err.ViaField("spec", "delivery"))
		}
		brokers[key] = &brokerState{namespace: ns, name: b.Name, key: key}
		delivery[key] = b.Spec.Delivery
	}
	return brokers, delivery, nil
}

// buildTrigger validates t as Knative's webhook would and binds it to its broker. Delivery comes
// from the Trigger when it has a delivery spec, else from the Broker: replaced, never merged.
func buildTrigger(ctx context.Context, t *eventingv1.Trigger, brokers map[string]*brokerState, brokerDelivery map[string]*eventingduckv1.DeliverySpec, log *slog.Logger, queueSize int) (*triggerState, error) {
	ns := namespaceOr(t.Namespace)
	key := ns + "/" + t.Name
	if err := t.Validate(ctx); err != nil {
		return nil, fmt.Errorf("trigger %s: %w", key, err)
	}
	bns, bname := ns, t.Spec.Broker
	if ref := t.Spec.BrokerRef; ref != nil {
		bname = ref.Name
		if ref.Namespace != "" {
			bns = ref.Namespace
		}
	}
	b, ok := brokers[bns+"/"+bname]
	if !ok {
		return nil, fmt.Errorf("trigger %s: broker %s/%s is not defined", key, bns, bname)
	}
	spec := t.Spec.Delivery
	if spec == nil {
		spec = brokerDelivery[b.key]
	}
	var ds eventingduckv1.DeliverySpec
	if spec != nil {
		ds = *spec
	}
	retry, err := kncloudevents.RetryConfigFromDeliverySpec(ds)
	if err != nil {
		return nil, fmt.Errorf("trigger %s: %w", key, err)
	}
	ts := &triggerState{
		namespace:  ns,
		name:       t.Name,
		key:        key,
		broker:     b,
		subscriber: t.Spec.Subscriber,
		retry:      retry,
		deadLetter: ds.DeadLetterSink,
		format:     ds.Format,
		queue:      newQueue(queueSize),
	}
	ts.filter = newFilter(t, log)
	return ts, nil
}

// validatePingSource checks p as Knative's webhook would.
func validatePingSource(ctx context.Context, p *sourcesv1.PingSource) error {
	if err := p.Validate(ctx); err != nil {
		return fmt.Errorf("pingsource %s/%s: %w", namespaceOr(p.Namespace), p.Name, err)
	}
	return nil
}
