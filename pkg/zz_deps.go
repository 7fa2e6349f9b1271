// Package pkg only pins modules in go.mod while the packages that import them are written.
// TEMPORARY: delete once pkg/broker and pkg/manifests import these.
package pkg

import (
	_ "knative.dev/eventing/pkg/apis/eventing/v1"
	_ "knative.dev/eventing/pkg/apis/sources/v1"
	_ "knative.dev/eventing/pkg/broker"
	_ "knative.dev/eventing/pkg/eventfilter/subscriptionsapi"
	_ "knative.dev/eventing/pkg/kncloudevents"
	_ "knative.dev/pkg/apis/duck/v1"
	_ "knative.dev/serving/pkg/apis/serving/v1"
)
