package broker

import (
	"encoding/base64"
	"fmt"
	"net/url"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	"knative.dev/eventing/pkg/kncloudevents/attributes"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// maxErrorBytes is the longest response body whose base64 fits knativeerrordata's limit.
const maxErrorBytes = attributes.KnativeErrorDataExtensionMaxLength / 4 * 3

// errorTransformers add knativeerrordest, knativeerrorcode and knativeerrordata (the base64 of
// the failed answer's body, truncated) with Knative's own transformers. The truncation is done
// on the raw body, so the data always decodes; kncloudevents encodes into a 1024-byte buffer
// instead, which panics on bodies over 768 bytes.
func errorTransformers(dest url.URL, status int, body []byte) binding.Transformers {
	if len(body) > maxErrorBytes {
		body = body[:maxErrorBytes]
	}
	return attributes.KnativeErrorTransformers(dest, status, base64.StdEncoding.EncodeToString(body))
}

// stripErrorExtensions removes the error extensions of an earlier dead-lettering: Knative's
// transformers only add missing extensions, and stale ones would name the wrong failure.
func stripErrorExtensions(e *event.Event) {
	for _, k := range []string{attributes.KnativeErrorDestExtensionKey, attributes.KnativeErrorCodeExtensionKey, attributes.KnativeErrorDataExtensionKey} {
		e.SetExtension(k, nil)
	}
}

// errorDest is the URL named in knativeerrordest: where delivery failed, or, when the
// destination never resolved, the address it would have in a cluster.
func errorDest(target string, namespace string, dest duckv1.Destination) url.URL {
	if target != "" {
		if u, err := url.Parse(target); err == nil {
			return *u
		}
	}
	if dest.Ref != nil {
		return url.URL{Scheme: "http", Host: fmt.Sprintf("%s.%s.svc.cluster.local", dest.Ref.Name, namespaceOr(firstNonEmpty(dest.Ref.Namespace, namespace)))}
	}
	if dest.URI != nil {
		return *dest.URI.URL()
	}
	return url.URL{}
}
