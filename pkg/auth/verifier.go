// Package auth verifies callers: a bearer token the cluster issued (a Kubernetes ServiceAccount
// token) is checked locally against the API server's published signing keys (OIDC discovery, then
// JWKS) for its audience, issuer, validity and, where asked, its lifetime. Every function with
// --auth-oidc (package function) and the agent gateway verify with it and refuse with its
// Refusal; failures are told apart by this package's sentinel errors, never by message text.
//
// It needs no TokenReview permission: only the keys, which the API server publishes to every
// ServiceAccount (the system:service-account-issuer-discovery ClusterRole).
package auth

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
)

// MaxTokenBytes bounds a bearer token before it is parsed (Kubernetes tokens are about a
// kilobyte).
const MaxTokenBytes = 8 << 10

// notBeforeLeeway is how far in the future a token's nbf may be: clocks differ (the leeway OIDC
// providers commonly allow).
const notBeforeLeeway = 5 * time.Minute

// retryDiscovery spaces attempts to read discovery or the keys while the API server does not
// answer.
const retryDiscovery = time.Second

// maxDiscoveryBytes bounds the discovery document.
const maxDiscoveryBytes = 1 << 20

// Options configure a Verifier.
type Options struct {
	// Audience is the audience a token must carry: the verifier's own.
	Audience string
	// DiscoveryURL is the API server, whose /.well-known/openid-configuration names the issuer.
	DiscoveryURL string
	// Issuer, when set, must be the issuer the discovery document names; empty takes that one.
	Issuer string
	// JWKSURL is where the signing keys are read (default: DiscoveryURL + /openid/v1/jwks, where
	// every API server serves them; the discovery document's jwks_uri names the server's
	// advertised address, which a pod may not reach).
	JWKSURL string
	// Client reads discovery and the keys: it authenticates to the API server and trusts its CA.
	Client *http.Client
	// Now is the clock validity is checked against (default time.Now).
	Now func() time.Time
	// KeyRefetchInterval is how often at most the keys are read again for a token naming a key
	// id not among those read (default DefaultKeyRefetchInterval): a rotated signing key is
	// accepted at most this long after its first token, and tokens forged with made-up key ids
	// cost the API server at most one request per interval.
	KeyRefetchInterval time.Duration
	// MaxLifetime, when set, refuses a token living longer (exp - iat), or saying nothing of when
	// it was issued: a stolen token is good for at most this long.
	MaxLifetime time.Duration
}

// Verifier verifies tokens the cluster issued. It reads discovery and the keys when the first
// token comes, so its user starts while the API server is away and answers 503 until they can be
// read.
type Verifier struct {
	opts Options

	mu      sync.Mutex
	issuer  string // "" until discovery has been read
	keys    *keySet
	lastTry time.Time
	lastErr error
}

// NewVerifier checks opts; it reaches the API server only when the first token comes.
func NewVerifier(opts Options) (*Verifier, error) {
	if opts.Audience == "" {
		return nil, errors.New("verifying tokens needs an audience")
	}
	if opts.DiscoveryURL == "" {
		return nil, errors.New("verifying tokens needs the API server's discovery URL")
	}
	if opts.Client == nil {
		return nil, errors.New("verifying tokens needs a client of the API server")
	}
	if opts.JWKSURL == "" {
		opts.JWKSURL = strings.TrimSuffix(opts.DiscoveryURL, "/") + "/openid/v1/jwks"
	}
	if opts.Now == nil {
		opts.Now = time.Now
	}
	if opts.KeyRefetchInterval <= 0 {
		opts.KeyRefetchInterval = DefaultKeyRefetchInterval
	}
	return &Verifier{opts: opts, keys: &keySet{url: opts.JWKSURL, client: opts.Client, interval: opts.KeyRefetchInterval, retry: retryDiscovery}}, nil
}

// Token is what a verified token says.
type Token struct {
	Subject  string
	Audience []string
	IssuedAt time.Time // zero when the token does not say
	Expiry   time.Time
	// ID is the token's jti, when it has one.
	ID string
}

// Verify checks raw and returns what it says, or an error wrapping one of this package's
// sentinels (Refuse turns it into the answer). The checks that need no key come first (shape,
// audience, validity, lifetime), so a token that fails them costs no signature check and no
// request to the API server; then the issuer the API server names, then the signature against
// its published keys.
func (v *Verifier) Verify(ctx context.Context, raw string) (*Token, error) {
	if len(raw) > MaxTokenBytes {
		return nil, fmt.Errorf("%w: %d bytes, more than %d", ErrMalformed, len(raw), MaxTokenBytes)
	}
	jws, err := jose.ParseSignedCompact(raw, joseAlgs)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrMalformed, err)
	}
	if len(jws.Signatures) != 1 {
		return nil, fmt.Errorf("%w: %d signatures", ErrMalformed, len(jws.Signatures))
	}
	// The claims are read before the signature is checked, and trusted only once it is: the
	// signature covers exactly these payload bytes.
	var c jwt.Claims
	if err := json.Unmarshal(jws.UnsafePayloadWithoutVerification(), &c); err != nil {
		return nil, fmt.Errorf("%w: claims: %w", ErrMalformed, err)
	}
	if err := v.checkClaims(&c); err != nil {
		return nil, err
	}
	issuer, err := v.discover(ctx)
	if err != nil {
		return nil, err
	}
	if c.Issuer != issuer {
		return nil, fmt.Errorf("%w: issued by %q, not the cluster's %q", ErrWrongIssuer, c.Issuer, issuer)
	}
	if _, err := v.keys.verify(ctx, jws); err != nil {
		return nil, err
	}
	return &Token{Subject: c.Subject, Audience: c.Audience, IssuedAt: c.IssuedAt.Time(), Expiry: c.Expiry.Time(), ID: c.ID}, nil
}

// checkClaims checks what a token says of its audience and validity.
func (v *Verifier) checkClaims(c *jwt.Claims) error {
	if !slices.Contains(c.Audience, v.opts.Audience) {
		return fmt.Errorf("%w: for %q, not %q", ErrWrongAudience, []string(c.Audience), v.opts.Audience)
	}
	now := v.opts.Now()
	if c.Expiry == nil {
		return fmt.Errorf("%w: no exp", ErrMalformed)
	}
	if exp := c.Expiry.Time(); !now.Before(exp) {
		return fmt.Errorf("%w: at %s", ErrExpired, exp.UTC().Format(time.RFC3339))
	}
	if c.NotBefore != nil && now.Add(notBeforeLeeway).Before(c.NotBefore.Time()) {
		return fmt.Errorf("%w: not before %s", ErrNotYetValid, c.NotBefore.Time().UTC().Format(time.RFC3339))
	}
	if max := v.opts.MaxLifetime; max > 0 {
		if c.IssuedAt == nil {
			return fmt.Errorf("%w: no iat", ErrTooLongLived)
		}
		if life := c.Expiry.Time().Sub(c.IssuedAt.Time()); life < 0 || life > max {
			return fmt.Errorf("%w: lives %s, more than %s", ErrTooLongLived, life, max)
		}
	}
	return nil
}

// discover returns the issuer the API server names, reading its discovery document the first
// time. The API server is reached at an in-cluster name while its issuer is usually another URL
// (--service-account-issuer): the issuer is the one the server itself names, which is what its
// tokens carry. The trust comes from the TLS connection to the API server, as in Knative's own
// verifier.
func (v *Verifier) discover(ctx context.Context) (string, error) {
	v.mu.Lock()
	defer v.mu.Unlock()
	if v.issuer != "" {
		return v.issuer, nil
	}
	if v.lastErr != nil && time.Since(v.lastTry) < retryDiscovery {
		return "", v.lastErr
	}
	v.lastTry = time.Now()
	url := strings.TrimSuffix(v.opts.DiscoveryURL, "/") + "/.well-known/openid-configuration"
	var doc struct {
		Issuer string `json:"issuer"`
	}
	err := getJSON(ctx, v.opts.Client, url, maxDiscoveryBytes, &doc)
	switch {
	case err != nil:
	case doc.Issuer == "":
		err = errors.New("the discovery document names no issuer")
	case v.opts.Issuer != "" && v.opts.Issuer != doc.Issuer:
		err = fmt.Errorf("the API server's issuer is %q, not the configured %q", doc.Issuer, v.opts.Issuer)
	}
	if err != nil {
		v.lastErr = fmt.Errorf("%w: OIDC discovery at %s: %w", ErrKeysUnavailable, v.opts.DiscoveryURL, err)
		return "", v.lastErr
	}
	v.issuer, v.lastErr = doc.Issuer, nil
	return v.issuer, nil
}

// joseAlgs are the asymmetric algorithms a cluster may sign with. Not only those the discovery
// document names: a rotation may bring a key of another type (RSA after ECDSA), and each key
// verifies only signatures of its own type, so allowing them all admits nothing unsigned ("none")
// or keyed by a shared secret (HMAC).
var joseAlgs = []jose.SignatureAlgorithm{jose.RS256, jose.RS384, jose.RS512, jose.ES256, jose.ES384, jose.ES512,
	jose.PS256, jose.PS384, jose.PS512, jose.EdDSA}
