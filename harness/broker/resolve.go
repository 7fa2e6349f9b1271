package broker

import (
	"context"
	"fmt"

	eventingv1 "knative.dev/eventing/pkg/apis/eventing/v1"
	"knative.dev/pkg/apis"
	duckv1 "knative.dev/pkg/apis/duck/v1"
)

// Resolver turns a Destination the server does not serve itself into a URL. namespace is the
// namespace of the object that names the destination; a ref without a namespace is in it.
type Resolver interface {
	Resolve(ctx context.Context, namespace string, dest duckv1.Destination) (*apis.URL, error)
}

// ResolverFunc adapts a function to Resolver.
type ResolverFunc func(ctx context.Context, namespace string, dest duckv1.Destination) (*apis.URL, error)

// Resolve calls f.
func (f ResolverFunc) Resolve(ctx context.Context, namespace string, dest duckv1.Destination) (*apis.URL, error) {
	return f(ctx, namespace, dest)
}

// Services resolves refs to Services (a Knative Service, or any kind named Service) from a map
// of "namespace/name" to base URL, such as a local function's "http://127.0.0.1:8081". Like
// Knative's resolver, a uri alongside a ref is relative to the ref's URL, and a uri alone must
// be absolute.
type Services map[string]string

// Resolve implements Resolver.
func (s Services) Resolve(_ context.Context, namespace string, dest duckv1.Destination) (*apis.URL, error) {
	ref := dest.Ref
	if ref == nil {
		return absoluteURI(dest)
	}
	key := namespaceOr(firstNonEmpty(ref.Namespace, namespace)) + "/" + ref.Name
	if ref.Kind != "Service" {
		return nil, fmt.Errorf("cannot resolve %s %s locally: only Services, and the Brokers the server serves", ref.Kind, key)
	}
	raw, ok := s[key]
	if !ok {
		return nil, fmt.Errorf("service %s has no local address", key)
	}
	base, err := apis.ParseURL(raw)
	if err != nil {
		return nil, fmt.Errorf("service %s: %w", key, err)
	}
	return withURI(base, dest.URI)
}

// resolve serves refs to this server's own Brokers and hands the rest to the Resolver.
func (s *Server) resolve(ctx context.Context, namespace string, dest duckv1.Destination) (*apis.URL, error) {
	if ref := dest.Ref; ref != nil && ref.Kind == "Broker" && (ref.APIVersion == "" || ref.APIVersion == eventingv1.SchemeGroupVersion.String()) {
		key := namespaceOr(firstNonEmpty(ref.Namespace, namespace)) + "/" + ref.Name
		if b, ok := s.brokers[key]; ok {
			base, err := apis.ParseURL(s.URL(b.namespace, b.name))
			if err != nil {
				return nil, err
			}
			return withURI(base, dest.URI)
		}
	}
	if s.resolver == nil {
		return absoluteURI(dest)
	}
	return s.resolver.Resolve(ctx, namespace, dest)
}

func absoluteURI(dest duckv1.Destination) (*apis.URL, error) {
	if dest.Ref != nil {
		return nil, fmt.Errorf("no resolver for %s %q", dest.Ref.Kind, dest.Ref.Name)
	}
	if dest.URI == nil || !dest.URI.URL().IsAbs() {
		return nil, fmt.Errorf("destination has neither a ref nor an absolute uri")
	}
	return dest.URI, nil
}

// withURI applies a ref's relative uri to its base URL.
func withURI(base, uri *apis.URL) (*apis.URL, error) {
	if uri == nil {
		return base, nil
	}
	if uri.URL().IsAbs() {
		return nil, fmt.Errorf("uri %s must be relative when a ref is given", uri)
	}
	return base.ResolveReference(uri), nil
}

func firstNonEmpty(a, b string) string {
	if a != "" {
		return a
	}
	return b
}
