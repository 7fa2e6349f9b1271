package function

import (
	"net/http"
	"os"
	"strings"
)

// SinkTokenFile is where a SinkBinding with Knative's sender identity on mounts the OIDC token for
// its sink's audience; Knative refreshes it in place, so it is read on every send.
const SinkTokenFile = "/oidc/token"

// bearerFromFile presents the token in path, when there is one, as the sender's identity. Without
// the file (sender identity off) requests go out as before.
type bearerFromFile struct {
	path string
	next http.RoundTripper
}

func (b bearerFromFile) RoundTrip(r *http.Request) (*http.Response, error) {
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
	return bearerFromFile{path: tokenFile, next: t}, nil
}
