package agentgateway

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"time"

	"golang.org/x/sync/semaphore"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// Bounds of token verification.
const (
	// MaxTokenLifetime is the longest a token may live (exp - iat): a stolen one is good for at
	// most this long.
	MaxTokenLifetime = time.Hour
	// ReviewCacheTTL is how long a TokenReview's verdict is reused for the same token. A deleted
	// ServiceAccount's tokens stop verifying at the API server at once; here they stop after at
	// most this long. A disabled addon stops at once regardless: its ManagedClusterAddOn is checked
	// on every request.
	ReviewCacheTTL = 10 * time.Second
	// reviewCacheSize bounds the verdicts kept (one per live agent token).
	reviewCacheSize = 4096
	// maxTokenBytes bounds a bearer token before it is parsed or sent for review (Kubernetes
	// tokens are about a kilobyte).
	maxTokenBytes = 8 << 10
	// concurrentReviews bounds the TokenReviews in flight; a request waits reviewWait for one,
	// then gets 503. Tokens that could not be an agent's never reach the API server.
	concurrentReviews = 8
	reviewWait        = 5 * time.Second
)

// Identity is an agent the gateway has verified: the hub ServiceAccount <Cluster>/<Addon>.
type Identity struct {
	Cluster, Addon string
}

// refusal is why a request is not admitted.
type refusal struct {
	status  int
	reason  contract.Reason
	message string
	cause   error // logged, not answered
}

// reviewer verifies bearer tokens with the API server's TokenReview.
type reviewer struct {
	kube     kubernetes.Interface
	audience string
	now      func() time.Time
	cache    *cache.LRUExpireCache // sha256(token) -> Identity, for tokens the API server authenticated
	inFlight *semaphore.Weighted
}

func newReviewer(kube kubernetes.Interface, audience string) *reviewer {
	return &reviewer{kube: kube, audience: audience, now: time.Now, cache: cache.NewLRUExpireCache(reviewCacheSize),
		inFlight: semaphore.NewWeighted(concurrentReviews)}
}

// claims are what the gateway reads of a token before and after the API server verifies it.
type claims struct {
	Subject  string   `json:"sub"`
	Audience audience `json:"aud"`
	Issued   *int64   `json:"iat"`
	Expiry   *int64   `json:"exp"`
}

// audience is a JWT aud: one string or a list.
type audience []string

func (a *audience) UnmarshalJSON(b []byte) error {
	var one string
	if json.Unmarshal(b, &one) == nil {
		*a = []string{one}
		return nil
	}
	var many []string
	if err := json.Unmarshal(b, &many); err != nil {
		return err
	}
	*a = many
	return nil
}

// parseClaims reads a JWT's payload without verifying it: what it says is trusted only once the
// API server has authenticated the very same token.
func parseClaims(token string) (*claims, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return nil, errors.New("not a JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return nil, errors.New("not a JWT: payload is not base64url")
	}
	var c claims
	if err := json.Unmarshal(payload, &c); err != nil {
		return nil, errors.New("not a JWT: payload is not JSON")
	}
	return &c, nil
}

// identityOf maps system:serviceaccount:<cluster>:<addon> to an Identity.
func identityOf(sub string) (Identity, bool) {
	rest, ok := strings.CutPrefix(sub, "system:serviceaccount:")
	if !ok {
		return Identity{}, false
	}
	ns, name, ok := strings.Cut(rest, ":")
	if !ok || len(validation.IsDNS1123Label(ns)) > 0 || len(validation.IsDNS1123Subdomain(name)) > 0 {
		return Identity{}, false
	}
	return Identity{Cluster: ns, Addon: name}, true
}

// check verifies token: its claims first (shape, audience, lifetime at most MaxTokenLifetime, not
// expired, the subject one of allowed's ServiceAccounts), so that what could not be an agent's
// token costs the API server nothing; then the API server's TokenReview for the gateway's audience,
// whose verdict is reused for ReviewCacheTTL at most.
func (r *reviewer) check(ctx context.Context, token string, allowed func(addon string) bool) (Identity, *refusal) {
	unauthenticated := func(msg string, cause error) (Identity, *refusal) {
		return Identity{}, &refusal{http.StatusUnauthorized, function.ReasonUnauthenticated, msg, cause}
	}
	if len(token) > maxTokenBytes {
		return unauthenticated(fmt.Sprintf("token of %d bytes, more than %d", len(token), maxTokenBytes), nil)
	}
	c, err := parseClaims(token)
	if err != nil {
		return unauthenticated(err.Error(), nil)
	}
	now := r.now()
	if !slices.Contains(c.Audience, r.audience) {
		return unauthenticated("token not for audience "+r.audience, nil)
	}
	if c.Issued == nil || c.Expiry == nil {
		return unauthenticated("token without iat or exp", nil)
	}
	// Seconds; a difference that overflows comes out negative.
	switch life := *c.Expiry - *c.Issued; {
	case life < 0 || life > int64(MaxTokenLifetime/time.Second):
		return unauthenticated(fmt.Sprintf("token lives %ds, more than %s: mint it for an hour at most", life, MaxTokenLifetime), nil)
	case now.Unix() >= *c.Expiry:
		return unauthenticated("token expired", nil)
	}
	id, ok := identityOf(c.Subject)
	if !ok || !allowed(id.Addon) {
		return Identity{}, &refusal{http.StatusForbidden, function.ReasonNotAllowed, "caller " + contract.Truncate(c.Subject, 200) + " is no agent of this gateway", nil}
	}

	key := sha256.Sum256([]byte(token))
	if v, ok := r.cache.Get(key); ok {
		return v.(Identity), nil
	}
	wait, cancel := context.WithTimeout(ctx, reviewWait)
	err = r.inFlight.Acquire(wait, 1)
	cancel()
	if err != nil {
		return Identity{}, &refusal{http.StatusServiceUnavailable, contract.ReasonUnavailable, "busy verifying tokens; retry", err}
	}
	review, err := r.kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{r.audience}}}, metav1.CreateOptions{})
	r.inFlight.Release(1)
	if err != nil {
		return Identity{}, &refusal{http.StatusServiceUnavailable, contract.ReasonUnavailable, "cannot verify the token now; retry", err}
	}
	st := review.Status
	if !st.Authenticated || st.User.Username != c.Subject || !slices.Contains(st.Audiences, r.audience) {
		return unauthenticated("token not valid", fmt.Errorf("TokenReview: authenticated %v as %q for %v: %s", st.Authenticated, st.User.Username, st.Audiences, st.Error))
	}
	ttl := min(ReviewCacheTTL, time.Unix(*c.Expiry, 0).Sub(now))
	r.cache.Add(key, id, ttl)
	return id, nil
}
