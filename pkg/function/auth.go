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
	"sync"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"
	"github.com/coreos/go-oidc/v3/oidc"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Reasons of refused callers, in the failure reply and the log line.
const (
	// ReasonUnauthenticated: no bearer token, or one that does not verify as issued by the
	// cluster for this function's audience (bad signature, unknown key, expired, other audience).
	ReasonUnauthenticated contract.Reason = "Unauthenticated"
	// ReasonNotAllowed: a valid token of an identity this function does not take events from.
	ReasonNotAllowed contract.Reason = "NotAllowed"
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
	// id not among those read (default DefaultKeyRefetchInterval): a rotated signing key is
	// accepted at most this long after its first token, and tokens forged with made-up key ids
	// cost the API server at most one request per interval.
	KeyRefetchInterval time.Duration
}

// Authenticator admits requests whose bearer token the cluster issued to an allowed identity for
// this function's audience. It verifies the JWT locally with go-oidc against the API server's
// published keys (OIDC discovery, then JWKS), so it needs no TokenReview permission; a token with a
// key id it has not seen makes it fetch the keys again (at most once per KeyRefetchInterval), so
// signing keys rotate without a restart.
type Authenticator struct {
	opts    AuthOptions
	client  *http.Client
	refused *prometheus.CounterVec

	mu       sync.Mutex
	verifier *oidc.IDTokenVerifier
	lastTry  time.Time
	lastErr  error
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
	if opts.JWKSURL == "" {
		opts.JWKSURL = strings.TrimSuffix(opts.DiscoveryURL, "/") + "/openid/v1/jwks"
	}
	if opts.Now == nil {
		opts.Now = time.Now
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
	a := &Authenticator{
		opts:   opts,
		client: &http.Client{Timeout: 10 * time.Second, Transport: BearerFromFile(opts.TokenFile, transport)},
		refused: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "scoreflow_requests_unauthorized_total",
			Help: "Requests refused for their caller's identity, by reason and HTTP status.",
		}, []string{"reason", "code"}),
	}
	return a, nil
}

// retryDiscovery spaces attempts to read discovery while the API server does not answer.
const retryDiscovery = time.Second

// verifierFor returns the token verifier, reading the discovery document the first time.
func (a *Authenticator) verifierFor(ctx context.Context) (*oidc.IDTokenVerifier, error) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.verifier != nil {
		return a.verifier, nil
	}
	if time.Since(a.lastTry) < retryDiscovery && a.lastErr != nil {
		return nil, a.lastErr
	}
	a.lastTry = time.Now()
	ctx = oidc.ClientContext(ctx, a.client)
	_, err := oidc.NewProvider(ctx, a.opts.DiscoveryURL)
	// The API server is reached at an in-cluster name while its issuer is usually another URL
	// (--service-account-issuer): take the issuer the server itself names, which is what its
	// tokens carry. The trust comes from the TLS connection to the API server, as in Knative's
	// own verifier.
	var mismatch *oidc.IssuerMismatchError
	issuer := a.opts.DiscoveryURL
	if errors.As(err, &mismatch) {
		issuer = mismatch.Discovered
		_, err = oidc.NewProvider(oidc.InsecureIssuerURLContext(ctx, issuer), a.opts.DiscoveryURL)
	}
	if err == nil && a.opts.Issuer != "" && a.opts.Issuer != issuer {
		err = fmt.Errorf("the API server's issuer is %q, not the configured %q", issuer, a.opts.Issuer)
	}
	if err != nil {
		a.lastErr = fmt.Errorf("OIDC discovery at %s: %w", a.opts.DiscoveryURL, err)
		return nil, a.lastErr
	}
	keys := newKeySet(a.opts.JWKSURL, a.client, a.opts.KeyRefetchInterval)
	a.verifier = oidc.NewVerifier(issuer, keys, &oidc.Config{ClientID: a.opts.Audience, Now: a.opts.Now, SupportedSigningAlgs: signingAlgs})
	a.lastErr = nil
	return a.verifier, nil
}

// signingAlgs are the asymmetric algorithms a cluster may sign with. Not only those the discovery
// document named at start: a rotation may bring a key of another type (RSA after ECDSA), and each
// key verifies only signatures of its own type, so allowing them all admits nothing unsigned
// ("none") or keyed by a shared secret (HMAC).
var signingAlgs = []string{oidc.RS256, oidc.RS384, oidc.RS512, oidc.ES256, oidc.ES384, oidc.ES512,
	oidc.PS256, oidc.PS384, oidc.PS512, oidc.EdDSA}

// refusal is why a request is not admitted.
type refusal struct {
	status  int
	reason  contract.Reason
	message string
	cause   error // logged, not answered: it may name internal addresses
}

// check verifies r's bearer token and returns the caller's subject, or why it is refused: 401 for
// a missing or unverifiable token, 403 for an identity not allowed, 503 when the keys cannot be
// read (the sender retries).
func (a *Authenticator) check(r *http.Request) (string, *refusal) {
	raw, ok := bearer(r.Header.Get("Authorization"))
	if !ok {
		return "", &refusal{http.StatusUnauthorized, ReasonUnauthenticated, "no bearer token", nil}
	}
	sub, ref := a.subject(r.Context(), raw)
	if ref != nil {
		return "", ref
	}
	if !a.Allows(sub) {
		return sub, &refusal{http.StatusForbidden, ReasonNotAllowed, "caller " + clip(sub, 200) + " is not allowed", nil}
	}
	return sub, nil
}

// ErrKeysUnavailable: the cluster's token keys could not be read; the caller may retry.
var ErrKeysUnavailable = errors.New("cannot read the cluster's token keys")

// Subject verifies raw as a token the cluster issued for the audience (signature, issuer,
// audience, expiry) and returns its subject; it does not check the allowed subjects, so a server
// whose callers have different rights matches the subject itself (Allows, MatchSubject). The
// error wraps ErrKeysUnavailable when the failure is transient.
func (a *Authenticator) Subject(ctx context.Context, raw string) (string, error) {
	sub, ref := a.subject(ctx, raw)
	if ref == nil {
		return sub, nil
	}
	if ref.status == http.StatusServiceUnavailable {
		return "", fmt.Errorf("%w: %v", ErrKeysUnavailable, ref.cause)
	}
	return "", errors.New(ref.message)
}

func (a *Authenticator) subject(ctx context.Context, raw string) (string, *refusal) {
	v, err := a.verifierFor(ctx)
	if err != nil {
		return "", &refusal{http.StatusServiceUnavailable, contract.ReasonUnavailable, "cannot read the cluster's token keys", err}
	}
	tok, err := v.Verify(ctx, raw)
	if err != nil {
		var expired *oidc.TokenExpiredError
		switch {
		case errors.As(err, &expired):
			return "", &refusal{http.StatusUnauthorized, ReasonUnauthenticated, "token expired", nil}
		// The keys could not be read, or not yet again (keySet): transient.
		case strings.Contains(err.Error(), keysUnavailable):
			return "", &refusal{http.StatusServiceUnavailable, contract.ReasonUnavailable, "cannot read the cluster's token keys", err}
		default:
			return "", &refusal{http.StatusUnauthorized, ReasonUnauthenticated, invalidToken(err), err}
		}
	}
	return tok.Subject, nil
}

// invalidToken is what a caller is told about a token that does not verify: the kind of failure,
// never go-oidc's text, which names the issuer and audience expected (the log line has it).
func invalidToken(err error) string {
	msg := err.Error()
	for _, c := range []struct{ marker, say string }{
		{"malformed", "token not valid: malformed"},
		{"issued by a different provider", "token not valid: wrong issuer"},
		{"audience", "token not valid: wrong audience"},
		{noSuchKey, "token not valid: signature not verified"},
		{"signature", "token not valid: signature not verified"},
		{"nbf", "token not valid yet"},
	} {
		if strings.Contains(msg, c.marker) {
			return c.say
		}
	}
	return "token not valid"
}

// Allows reports whether sub is one of the allowed subjects.
func (a *Authenticator) Allows(sub string) bool { return MatchSubject(a.opts.Subjects, sub) }

// MatchSubject matches sub against patterns exactly or by a prefix ending in "*", as an
// EventPolicy's from[].sub does.
func MatchSubject(patterns []string, sub string) bool {
	for _, s := range patterns {
		if p, ok := strings.CutSuffix(s, "*"); ok && strings.HasPrefix(sub, p) || s == sub {
			return true
		}
	}
	return false
}

// bearer extracts the token of an "Authorization: Bearer <token>" header.
func bearer(h string) (string, bool) {
	scheme, tok, ok := strings.Cut(h, " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", false
	}
	return tok, true
}

func clip(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return s[:n] + "…"
}

// guard wraps app so that only admitted callers reach it. The refusal is the function's failure
// reply (a ...failed event with the reason, in a body well under Knative's 768-byte limit) and a
// log line; the request body is never read.
func (a *Authenticator) guard(app http.Handler, onFailure FailureReply, log *slog.Logger) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		sub, ref := a.check(r)
		if ref == nil {
			app.ServeHTTP(w, r)
			return
		}
		a.refused.WithLabelValues(string(ref.reason), fmt.Sprint(ref.status)).Inc()
		attrs := []any{"status", ref.status, "reason", ref.reason, "message", ref.message,
			"subject", sub, "remote", r.RemoteAddr, "ceId", r.Header.Get("Ce-Id"), "ceSource", r.Header.Get("Ce-Source")}
		if ref.cause != nil {
			attrs = append(attrs, "err", ref.cause.Error())
		}
		log.Warn("caller refused", attrs...)
		if ref.status == http.StatusUnauthorized {
			w.Header().Set("WWW-Authenticate", `Bearer error="invalid_token"`)
		}
		if onFailure == nil {
			http.Error(w, string(ref.reason)+": "+ref.message, ref.status)
			return
		}
		writeReply(r.Context(), w, Response{Status: ref.status, Event: onFailure(contract.EventRef{}, ref.reason, ref.message)}, log)
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
