package function

import (
	"net/http"
	"os"
	"strings"
)

// SinkTokenFile is where a SinkBinding with Knative's sender identity on mounts the OIDC token for
// its sink's audience; Knative refreshes it in place, so it is read on every send.
const SinkTokenFile = "/oidc/token"

// BearerFromFile is next presenting the token in path, when there is one, as the caller's
// identity: read on every request, so a token the kubelet (a projected ServiceAccount token) or
// Knative (a SinkBinding's) renews in place is picked up without a restart. Without the file (or
// with an empty one) requests go out as before, and whoever needs a token refuses them.
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
	if b.path == "" {
		return b.next.RoundTrip(r)
	}
	if tok, err := os.ReadFile(b.path); err == nil && len(strings.TrimSpace(string(tok))) > 0 {
		r = r.Clone(r.Context())
		r.Header.Set("Authorization", "Bearer "+strings.TrimSpace(string(tok)))
	}
	return b.next.RoundTrip(r)
}

// sinkTransport is the transport of a Sender: trusting K_CA_CERTS besides the system roots, and
// presenting the SinkBinding's token.
func sinkTransport(tokenFile string) (http.RoundTripper, error) {
	t, err := sinkCATransport(os.Getenv("K_CA_CERTS"))
	if err != nil {
		return nil, err
	}
	return BearerFromFile(tokenFile, t), nil
}
