package function

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/auth"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Reasons of refused callers, in the failure reply and the log line (package auth's).
const (
	ReasonUnauthenticated = auth.ReasonUnauthenticated
	ReasonNotAllowed      = auth.ReasonNotAllowed
)

// In-cluster defaults: the API server as every pod reaches it, and the pod's own projected
// ServiceAccount token and the cluster CA, which the API server's discovery endpoints need (by
// default only ServiceAccounts may read them, through the system:service-account-issuer-discovery
// ClusterRole).
const (
	DefaultDiscoveryURL = "https://kubernetes.default.svc"
	DefaultTokenFile    = "/var/run/secrets/kubernetes.io/serviceaccount/token"
	DefaultCAFile       = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
)

// AuthOptions configure an Authenticator.
type AuthOptions struct {
	// Audience is this function's own audience: a token for anything else is refused. In Knative
	// it is the Trigger's spec.subscriber.audience.
	Audience string
	// Subjects may call: "system:serviceaccount:<ns>:<name>", or a prefix ending in "*" as in an
	// EventPolicy's from[].sub. For a function behind a Trigger it is the Trigger's OIDC
	// ServiceAccount (status.auth.serviceAccountName).
	Subjects []string
	// DiscoveryURL is where the OIDC discovery document is read (default DefaultDiscoveryURL).
	DiscoveryURL string
	// Issuer, when set, must be the issuer the discovery document names; empty takes that one.
	Issuer string
	// JWKSURL is where the signing keys are read (default: DiscoveryURL + /openid/v1/jwks, where
	// every API server serves them; the discovery document's jwks_uri names the server's
	// advertised address, which a pod may not reach).
	JWKSURL string
	// TokenFile and CAFile authenticate the discovery and key requests to the API server; a
	// missing file means none (anonymous, system roots). The token is re-read on every request,
	// as a projected token is rotated in place.
	TokenFile, CAFile string
	// Now is the clock token expiry is checked against (default time.Now).
	Now func() time.Time
	// KeyRefetchInterval is how often at most the keys are read again for a token naming a key
	// id not among those read (default auth.DefaultKeyRefetchInterval): a rotated signing key is
	// accepted at most this long after its first token, and tokens forged with made-up key ids
	// cost the API server at most one request per interval.
	KeyRefetchInterval time.Duration
}

// Authenticator admits requests whose bearer token the cluster issued to an allowed identity for
// this function's audience. It verifies the JWT locally (package auth) against the API server's
// published keys (OIDC discovery, then JWKS), so it needs no TokenReview permission; a token with a
// key id it has not seen makes it fetch the keys again (at most once per KeyRefetchInterval), so
// signing keys rotate without a restart.
type Authenticator struct {
	verifier *auth.Verifier
	subjects []string
	refused  *prometheus.CounterVec
}

// NewAuthenticator checks opts; it reaches the API server only when the first request comes, so a
// function starts while the API server is away and answers 503 until the keys can be read.
func NewAuthenticator(opts AuthOptions) (*Authenticator, error) {
	if opts.Audience == "" {
		return nil, errors.New("authentication needs the function's audience")
	}
	if len(opts.Subjects) == 0 {
		return nil, errors.New("authentication needs at least one allowed subject")
	}
	for _, s := range opts.Subjects {
		if s == "" || s == "*" {
			return nil, fmt.Errorf("allowed subject %q would admit every identity", s)
		}
	}
	if opts.DiscoveryURL == "" {
		opts.DiscoveryURL = DefaultDiscoveryURL
	}
	transport := http.DefaultTransport.(*http.Transport).Clone()
	if opts.CAFile != "" {
		pem, err := os.ReadFile(opts.CAFile)
		switch {
		case err == nil:
			pool := x509.NewCertPool()
			if !pool.AppendCertsFromPEM(pem) {
				return nil, fmt.Errorf("%s holds no PEM certificate", opts.CAFile)
			}
			transport.TLSClientConfig = &tls.Config{RootCAs: pool, MinVersion: tls.VersionTLS12}
		case !os.IsNotExist(err):
			return nil, err
		}
	}
	v, err := auth.NewVerifier(auth.Options{Audience: opts.Audience, DiscoveryURL: opts.DiscoveryURL, Issuer: opts.Issuer,
		JWKSURL: opts.JWKSURL, Now: opts.Now, KeyRefetchInterval: opts.KeyRefetchInterval,
		Client: &http.Client{Timeout: 10 * time.Second, Transport: BearerFromFile(opts.TokenFile, transport)}})
	if err != nil {
		return nil, err
	}
	return &Authenticator{verifier: v, subjects: opts.Subjects,
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_requests_unauthorized_total",
			Help: "Requests refused for their caller's identity, by reason and HTTP status.",
		}, []string{"reason", "code"}),
	}, nil
}

// check verifies r's bearer token and returns the caller's subject, or why it is refused: 401 for
// a missing or unverifiable token, 403 for an identity not allowed, 503 when the keys cannot be
// read (the sender retries).
func (a *Authenticator) check(r *http.Request) (string, *auth.Refusal) {
	raw, err := auth.Bearer(r.Header)
	if err != nil {
		return "", auth.Refuse(err)
	}
	tok, err := a.verifier.Verify(r.Context(), raw)
	if err != nil {
		return "", auth.Refuse(err)
	}
	if !a.Allows(tok.Subject) {
		return tok.Subject, auth.NotAllowed(tok.Subject, "is not allowed")
	}
	return tok.Subject, nil
}

// ErrKeysUnavailable: the cluster's token keys could not be read; the caller may retry.
var ErrKeysUnavailable = auth.ErrKeysUnavailable

// Subject verifies raw as a token the cluster issued for the audience (signature, issuer,
// audience, expiry) and returns its subject; it does not check the allowed subjects, so a server
// whose callers have different rights matches the subject itself (Allows, MatchSubject). The
// error wraps ErrKeysUnavailable when the failure is transient; its text is what the caller may
// be told.
func (a *Authenticator) Subject(ctx context.Context, raw string) (string, error) {
	tok, err := a.verifier.Verify(ctx, raw)
	if err != nil {
		ref := auth.Refuse(err)
		if ref.Status == http.StatusServiceUnavailable {
			return "", err
		}
		return "", errors.New(ref.Message)
	}
	return tok.Subject, nil
}

// Allows reports whether sub is one of the allowed subjects.
func (a *Authenticator) Allows(sub string) bool { return auth.MatchSubject(a.subjects, sub) }

// MatchSubject matches sub against patterns exactly or by a prefix ending in "*", as an
// EventPolicy's from[].sub does.
func MatchSubject(patterns []string, sub string) bool { return auth.MatchSubject(patterns, sub) }

// guard wraps app so that only admitted callers reach it. The refusal is the function's failure
// reply (a ...failed event with the reason, in a body well under Knative's 768-byte limit) and a
// log line; the request body is never read.
func (a *Authenticator) guard(app http.Handler, onFailure FailureReply, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub, ref := a.check(r)
		if ref == nil {
			app.ServeHTTP(w, r.WithContext(WithCaller(r.Context(), sub)))
			return
		}
		a.refused.WithLabelValues(string(ref.Reason), fmt.Sprint(ref.Status)).Inc()
		attrs := []any{"status", ref.Status, "reason", ref.Reason, "message", ref.Message,
			"subject", sub, "remote", r.RemoteAddr, "ceId", r.Header.Get("Ce-Id"), "ceSource", r.Header.Get("Ce-Source")}
		if ref.Err != nil {
			attrs = append(attrs, "err", ref.Err.Error())
		}
		log.Warn("caller refused", attrs...)
		ref.SetHeaders(w.Header())
		if onFailure == nil {
			http.Error(w, string(ref.Reason)+": "+ref.Message, ref.Status)
			return
		}
		writeReply(r.Context(), w, Response{Status: ref.Status, Event: onFailure(contract.EventRef{}, ref.Reason, ref.Message)}, log)
	})
}

// writeReply answers with resp's status and event in binary mode, as the receiver does.
func writeReply(ctx context.Context, w http.ResponseWriter, resp Response, log *slog.Logger) {
	if err := cehttp.WriteResponseWriter(ctx, binding.ToMessage(resp.Event), resp.Status, w); err != nil {
		log.Error("writing reply", "err", err)
	}
}

// authFlags are the command-line side of AuthOptions.
type authFlags struct {
	enabled                                        *bool
	audience, subjects, discovery, issuer, tok, ca *string
}

func (f *Function) registerAuthFlags() *authFlags {
	fs := f.Flags
	return &authFlags{
		enabled:   fs.Bool("auth-oidc", false, "require a bearer token the cluster issued (Knative's sender identity) on /; probes and /metrics stay open"),
		audience:  fs.String("auth-audience", "", "the audience a caller's token must carry: this function's (its Trigger's subscriber.audience)"),
		subjects:  fs.String("auth-allowed-subjects", "", "comma-separated identities that may call, system:serviceaccount:<ns>:<name> or a prefix ending in *"),
		discovery: fs.String("auth-discovery-url", DefaultDiscoveryURL, "the API server, whose /.well-known/openid-configuration and keys verify tokens"),
		issuer:    fs.String("auth-issuer", "", "the token issuer to expect (empty: the one the API server names)"),
		tok:       fs.String("auth-token-file", DefaultTokenFile, "token sent to the API server for discovery (missing file: none)"),
		ca:        fs.String("auth-ca-file", DefaultCAFile, "CA bundle of the API server (missing file: system roots)"),
	}
}

// authenticator builds the Authenticator the flags ask for, or nil when authentication is off.
func (af *authFlags) authenticator() (*Authenticator, error) {
	if !*af.enabled {
		return nil, nil
	}
	var subs []string
	for _, s := range strings.Split(*af.subjects, ",") {
		if s = strings.TrimSpace(s); s != "" {
			subs = append(subs, s)
		}
	}
	a, err := NewAuthenticator(AuthOptions{Audience: *af.audience, Subjects: subs, DiscoveryURL: *af.discovery,
		Issuer: *af.issuer, TokenFile: *af.tok, CAFile: *af.ca})
	if err != nil {
		return nil, fmt.Errorf("--auth-oidc: %w", err)
	}
	return a, nil
}

// RequireAuth makes the function admit on / only the callers a admits (nil: everyone). Flags do
// this from Parse; tests call it directly. Call it before Handler or Mux.
func (f *Function) RequireAuth(a *Authenticator) {
	if a != nil {
		f.Registry.MustRegister(a.refused)
	}
	f.authn = a
}

// Protect puts the authenticator, if any, in front of an extra route a function serves beside /
// (a JSON API that changes what / changes must not be open where / is not). Call it after Handler,
// so refusals are the function's failure replies.
func (f *Function) Protect(app http.Handler) http.Handler { return f.protect(app) }

// protect puts the authenticator, if any, in front of app.
func (f *Function) protect(app http.Handler) http.Handler {
	if f.authn == nil {
		return app
	}
	return f.authn.guard(app, f.authFailure, f.Log)
}
