package broker

import (
	"context"
	"log/slog"

	"github.com/cloudevents/sdk-go/v2/event"
	"go.uber.org/zap"
	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	"knative.dev/eventing/pkg/eventfilter"
	"knative.dev/eventing/pkg/eventfilter/attributes"
	"knative.dev/eventing/pkg/eventfilter/subscriptionsapi"
	"knative.dev/pkg/logging"
)

// newFilter builds a Trigger's filter as Knative's broker filter handler does: spec.filters when
// non-empty (a list is an implicit all), else the legacy spec.filter attributes, else nil
// (everything passes).
//
// Exact, prefix, suffix, not and cesql are Knative's own filters. All and any are allOf and
// anyOf below, not subscriptionsapi.NewAllFilter/NewAnyFilter: those reorder their children from
// a goroutine that updates counters Filter reads without a lock (a data race under go test
// -race) and that starts further untracked goroutines. Nothing built here holds resources, so
// there is nothing to Cleanup.
func newFilter(t *eventingv1.Trigger, log *slog.Logger) eventfilter.Filter {
	switch {
	case len(t.Spec.Filters) > 0:
		return allOf(materializeList(t.Spec.Filters, func(i int) {
			// Knative accepts and silently skips these; the Trigger then matches more than it reads.
			log.Warn("trigger filter has no dialect and is ignored, as Knative ignores it",
				"trigger", namespaceOr(t.Namespace)+"/"+t.Name, "index", i)
		}))
	case t.Spec.Filter != nil:
		return attributes.NewAttributesFilter(t.Spec.Filter.Attributes)
	default:
		return nil
	}
}

// materialize mirrors subscriptionsapi.MaterializeSubscriptionsAPIFilter: nil when f sets no
// dialect (or an invalid one, which validation has already refused).
func materialize(f eventingv1.SubscriptionsAPIFilter) eventfilter.Filter {
	var m eventfilter.Filter
	var err error
	switch {
	case len(f.Exact) > 0:
		m, err = subscriptionsapi.NewExactFilter(f.Exact)
	case len(f.Prefix) > 0:
		m, err = subscriptionsapi.NewPrefixFilter(f.Prefix)
	case len(f.Suffix) > 0:
		m, err = subscriptionsapi.NewSuffixFilter(f.Suffix)
	case len(f.All) > 0:
		m = allOf(materializeList(f.All, nil))
	case len(f.Any) > 0:
		m = anyOf(materializeList(f.Any, nil))
	case f.Not != nil:
		m = subscriptionsapi.NewNotFilter(materialize(*f.Not))
	case f.CESQL != "":
		m, err = subscriptionsapi.NewCESQLFilter(f.CESQL)
	}
	if err != nil {
		return nil
	}
	return m
}

// materializeList mirrors subscriptionsapi.MaterializeFiltersList: entries without a dialect are
// skipped.
func materializeList(fs []eventingv1.SubscriptionsAPIFilter, skipped func(i int)) []eventfilter.Filter {
	out := make([]eventfilter.Filter, 0, len(fs))
	for i, f := range fs {
		m := materialize(f)
		if m == nil {
			if skipped != nil {
				skipped(i)
			}
			continue
		}
		out = append(out, m)
	}
	return out
}

// allFilter and anyFilter evaluate as Knative's all and any do: in order, short-circuiting on
// the first fail (all) or pass (any), else the last child's result (NoFilter when empty).
type (
	allFilter []eventfilter.Filter
	anyFilter []eventfilter.Filter
)

func allOf(fs []eventfilter.Filter) eventfilter.Filter {
	if len(fs) == 1 {
		return fs[0]
	}
	return allFilter(fs)
}

func anyOf(fs []eventfilter.Filter) eventfilter.Filter {
	if len(fs) == 1 {
		return fs[0]
	}
	return anyFilter(fs)
}

func (fs allFilter) Filter(ctx context.Context, e event.Event) eventfilter.FilterResult {
	res := eventfilter.NoFilter
	for _, f := range fs {
		if res = f.Filter(ctx, e); res == eventfilter.FailFilter {
			return res
		}
	}
	return res
}

func (fs anyFilter) Filter(ctx context.Context, e event.Event) eventfilter.FilterResult {
	res := eventfilter.NoFilter
	for _, f := range fs {
		if res = f.Filter(ctx, e); res == eventfilter.PassFilter {
			return res
		}
	}
	return res
}

func (allFilter) Cleanup() {}
func (anyFilter) Cleanup() {}

// filterContext carries a no-op logger: Knative's filters log each evaluation at debug level
// through the context's logger, and the fallback one would be built and consulted per event.
func filterContext() context.Context {
	return logging.WithLogger(context.Background(), zap.NewNop().Sugar())
}

// passes reports whether e should be delivered: only FailFilter stops it, as in Knative.
func passes(ctx context.Context, f eventfilter.Filter, e *event.Event) bool {
	return f == nil || f.Filter(ctx, *e) != eventfilter.FailFilter
}

// TriggerFilter is the filter the broker applies for t; nil means every event passes. Unlike
// Knative's all/any filters it starts no goroutines and needs no Cleanup (TestFiltersMatchKnative
// checks it decides as Knative's do).
func TriggerFilter(t *eventingv1.Trigger) eventfilter.Filter {
	return newFilter(t, slog.New(slog.DiscardHandler))
}
