package function

import (
	"net/http"
	"os"
	"strings"

	"github.com/scoreflow/scoreflow/pkg/tracing"
)

// SinkTokenFile is where a SinkBinding with Knative's sender identity on mounts the OIDC token for
// its sink's audience; Knative refreshes it in place, so it is read on every send.
const SinkTokenFile = "/oidc/token"

// BearerFromFile is next presenting the token in path, when there is one, as the caller's
// identity: read on every request, so a token the kubelet (a projected ServiceAccount token) or
// Knative (a SinkBinding's) renews in place is picked up without a restart. Without the file (or
// with an empty one) requests go out as before, and whoever needs a token refuses them.
//
// The token is for the server the client was pointed at: a request that follows a redirect to
// another scheme, host or port goes out without it (the client cannot strip a header it never
// set, so the transport must not add it).
func BearerFromFile(path string, next http.RoundTripper) http.RoundTripper {
	if next == nil {
		next = http.DefaultTransport
	}
	return bearerFromFile{path: path, next: next}
}

type bearerFromFile struct {
	path string
	next http.RoundTripper
}

func (b bearerFromFile) RoundTrip(r *http.Request) (*http.Response, error) {
	if b.path == "" || redirectedAway(r) {
		return b.next.RoundTrip(r)
	}
	if tok, err := os.ReadFile(b.path); err == nil && len(strings.TrimSpace(string(tok))) > 0 {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	return b.next.RoundTrip(r)
}

// redirectedAway reports whether r follows a redirect away from the origin of the first request of
// its chain (an http.Client sets Response on the requests it makes to follow redirects).
func redirectedAway(r *http.Request) bool {
	first := r
	for first.Response != nil && first.Response.Request != nil {
		first = first.Response.Request
	}
	return first.URL.Scheme != r.URL.Scheme || first.URL.Host != r.URL.Host
}

// sinkTransport is the transport of a Sender: trusting K_CA_CERTS besides the system roots,
// presenting the SinkBinding's token, and passing on the sender's trace (traceparent).
func sinkTransport(tokenFile string) (http.RoundTripper, error) {
	t, err := sinkCATransport(os.Getenv("K_CA_CERTS"))
	if err != nil {
		return nil, err
	}
	return tracing.Transport(BearerFromFile(tokenFile, t)), nil
}
