package agentgateway

import (
	"context"
	"crypto/sha256"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/semaphore"
	"golang.org/x/sync/singleflight"
	"golang.org/x/time/rate"
	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/cache"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/lru"

	"github.com/scoreflow/scoreflow/pkg/auth"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Bounds of token verification.
const (
	// MaxTokenLifetime is the longest a token may live (exp - iat): a stolen one is good for at
	// most this long.
	MaxTokenLifetime = time.Hour
	// ReviewCacheTTL is how long a TokenReview's verdict is reused for the same token, the
	// API server's yes as its no. A deleted ServiceAccount's tokens stop verifying at the API
	// server at once; here they stop after at most this long. A disabled addon stops at once
	// regardless: its ManagedClusterAddOn is checked on every request.
	ReviewCacheTTL = 10 * time.Second
	// reviewCacheSize bounds the verdicts kept of each kind (one per live agent token). The
	// refused are kept apart from the admitted, so that no number of refused tokens evicts an
	// agent's verdict.
	reviewCacheSize = 4096
	// concurrentReviews bounds the TokenReviews in flight, of all agents; a request waits
	// reviewWait at most for its turn, then gets 503.
	concurrentReviews = 8
	reviewWait        = 5 * time.Second
	// Tokens not seen before are verified at most VerifyRate a second (VerifyBurst at once),
	// in the order they come, half the processors at a time; one waits at most verifyWait for
	// its turn, then gets 503. A signature check is the costliest thing anyone may make the
	// gateway do: however many such tokens arrive, they cost a bounded share of the processors,
	// and agents whose token was admitted skip the line. The rate is twice what the hub client
	// reviews (--kube-api-qps 200), so it does not slow a fleet's renewals; beside a flood, a
	// new token waits at most its share of the connections the gateway serves (2,048 / 400 s).
	VerifyRate  = 400
	VerifyBurst = 100
	verifyWait  = 10 * time.Second
	// An agent's own budget of TokenReviews: one at a time, SubjectReviewBurst at once and then
	// SubjectReviewRate per second. An agent needs one per token per ReviewCacheTTL while it
	// sends (two around a renewal); minting tokens faster buys it nothing but its own 429s.
	SubjectReviewRate  = 1.0
	SubjectReviewBurst = 5
	// subjectBudgets bounds the agents whose budgets are remembered (an agent forgotten starts
	// again with a full burst).
	subjectBudgets = 16384
)

// Identity is an agent the gateway has verified: the hub ServiceAccount <Cluster>/<Addon>.
type Identity struct {
	Cluster, Addon string
}

// String is the identity as a hub ServiceAccount, <cluster>/<addon>.
func (id Identity) String() string { return id.Cluster + "/" + id.Addon }

// reviewer admits agents' tokens in two steps. First the gateway verifies the token itself
// (package auth: signed by one of the hub's published keys, its issuer, the gateway's audience,
// not expired, living at most MaxTokenLifetime), which costs the API server nothing, so that a
// token nobody issued (a forged one, whatever claims it copies) never reaches it. Then, for a
// token the hub did sign, the API server's TokenReview, which alone knows whether its
// ServiceAccount still exists; its verdict is reused for ReviewCacheTTL. Reviews are budgeted per
// agent (the token's subject, which the hub signed), so that one agent cannot take the others'.
type reviewer struct {
	kube     kubernetes.Interface
	verifier *auth.Verifier
	audience string
	now      func() time.Time

	// admitted are tokens verified and reviewed, until they expire; one reviewed longer than
	// ReviewCacheTTL ago is reviewed again, without being verified again.
	admitted *cache.LRUExpireCache // sha256(token) -> *admission
	refused  *cache.LRUExpireCache // sha256(token) -> *auth.Refusal the API server gave
	// verifyRate and verifying bound the verification of tokens not seen before (VerifyRate).
	verifyRate *rate.Limiter
	verifying  *semaphore.Weighted
	inFlight   *semaphore.Weighted // TokenReviews of all agents
	once       singleflight.Group  // one review per token at a time

	mu      sync.Mutex
	budgets *lru.Cache // subject -> *budget
	reviews func()     // counts a TokenReview sent (metrics)
}

// admission is a token the gateway verified and the API server authenticated.
type admission struct {
	id       Identity
	token    *auth.Token
	reviewed time.Time
}

// budget is one agent's share of TokenReviews.
type budget struct {
	turn    *semaphore.Weighted // one review at a time
	limiter *rate.Limiter
}

func newReviewer(kube kubernetes.Interface, verifier *auth.Verifier, audience string, reviews func()) *reviewer {
	return &reviewer{kube: kube, verifier: verifier, audience: audience, now: time.Now, reviews: reviews,
		admitted: cache.NewLRUExpireCache(reviewCacheSize), refused: cache.NewLRUExpireCache(reviewCacheSize),
		verifyRate: rate.NewLimiter(VerifyRate, VerifyBurst),
		verifying:  semaphore.NewWeighted(int64(max(1, runtime.GOMAXPROCS(0)/2))),
		inFlight:   semaphore.NewWeighted(concurrentReviews), budgets: lru.New(subjectBudgets)}
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

// check admits token as an agent whose addon allowed accepts, or says why not: 401 for a token
// that does not verify, 403 for one of a ServiceAccount that is no agent of the table, 429 for an
// agent over its review budget, 503 when the hub cannot answer now.
func (r *reviewer) check(ctx context.Context, token string, allowed func(addon string) bool) (Identity, *auth.Refusal) {
	key := sha256.Sum256([]byte(token))
	if v, ok := r.admitted.Get(key); ok {
		a := v.(*admission)
		if r.now().Sub(a.reviewed) < ReviewCacheTTL {
			return a.id, nil
		}
		// Verified already: only the review is due again, and it does not wait behind tokens
		// not seen before.
		return a.id, r.reviewOnce(ctx, key, token, a.token)
	}
	if v, ok := r.refused.Get(key); ok {
		return Identity{}, v.(*auth.Refusal)
	}
	wait, cancel := context.WithTimeout(ctx, verifyWait)
	err := r.verifyRate.Wait(wait)
	if err == nil {
		err = r.verifying.Acquire(wait, 1)
	}
	cancel()
	if err != nil {
		return Identity{}, &auth.Refusal{Status: http.StatusServiceUnavailable, Reason: contract.ReasonUnavailable, Message: "busy verifying tokens; retry", Err: err}
	}
	tok, err := r.verifier.Verify(ctx, token)
	r.verifying.Release(1)
	if err != nil {
		return Identity{}, auth.Refuse(err)
	}
	id, ok := identityOf(tok.Subject)
	if !ok || !allowed(id.Addon) {
		return Identity{}, auth.NotAllowed(tok.Subject, "is no agent of this gateway")
	}
	return id, r.reviewOnce(ctx, key, token, tok)
}

// reviewOnce is review, shared by the requests with the same token: it is not cut short by the
// one that asked first going away, only by reviewWait.
func (r *reviewer) reviewOnce(ctx context.Context, key [sha256.Size]byte, token string, tok *auth.Token) *auth.Refusal {
	v, _, _ := r.once.Do(string(key[:]), func() (any, error) { return r.review(context.WithoutCancel(ctx), key, token, tok), nil })
	ref, _ := v.(*auth.Refusal)
	return ref
}

// review asks the API server about a token the hub signed, within its subject's budget, and
// remembers the verdict. A nil *auth.Refusal admits it.
func (r *reviewer) review(ctx context.Context, key [sha256.Size]byte, token string, tok *auth.Token) *auth.Refusal {
	if v, ok := r.admitted.Get(key); ok && r.now().Sub(v.(*admission).reviewed) < ReviewCacheTTL { // reviewed meanwhile
		return nil
	}
	b := r.budgetOf(tok.Subject)
	wait, cancel := context.WithTimeout(ctx, reviewWait)
	defer cancel()
	// The rate first: a request it would keep waiting past reviewWait is answered at once.
	if err := b.limiter.Wait(wait); err != nil {
		return &auth.Refusal{Status: http.StatusTooManyRequests, Reason: contract.ReasonUnavailable,
			Message: fmt.Sprintf("more new tokens than the gateway reviews for one agent (%g a second); retry", SubjectReviewRate), Err: err}
	}
	if err := b.turn.Acquire(wait, 1); err != nil {
		return busy(tok.Subject, err)
	}
	defer b.turn.Release(1)
	if err := r.inFlight.Acquire(wait, 1); err != nil {
		return busy(tok.Subject, err)
	}
	r.reviews()
	review, err := r.kube.AuthenticationV1().TokenReviews().Create(ctx, &authnv1.TokenReview{
		Spec: authnv1.TokenReviewSpec{Token: token, Audiences: []string{r.audience}}}, metav1.CreateOptions{})
	r.inFlight.Release(1)
	if err != nil {
		return &auth.Refusal{Status: http.StatusServiceUnavailable, Reason: contract.ReasonUnavailable, Message: "cannot verify the token now; retry", Err: err}
	}
	now := r.now()
	st := review.Status
	if !st.Authenticated || st.User.Username != tok.Subject || !slices.Contains(st.Audiences, r.audience) {
		ref := &auth.Refusal{Status: http.StatusUnauthorized, Reason: auth.ReasonUnauthenticated, Message: "token not valid",
			Err: fmt.Errorf("TokenReview: authenticated %v as %q for %v: %s", st.Authenticated, st.User.Username, st.Audiences, st.Error)}
		r.admitted.Remove(key)
		r.refused.Add(key, ref, min(ReviewCacheTTL, tok.Expiry.Sub(now)))
		return ref
	}
	id, _ := identityOf(tok.Subject)
	r.admitted.Add(key, &admission{id: id, token: tok, reviewed: now}, tok.Expiry.Sub(now))
	return nil
}

func busy(subject string, err error) *auth.Refusal {
	return &auth.Refusal{Status: http.StatusServiceUnavailable, Reason: contract.ReasonUnavailable, Message: "busy verifying tokens; retry",
		Err: fmt.Errorf("waiting %s for a TokenReview of %s: %w", reviewWait, subject, err)}
}

// budgetOf is subject's review budget.
func (r *reviewer) budgetOf(subject string) *budget {
	r.mu.Lock()
	defer r.mu.Unlock()
	if v, ok := r.budgets.Get(subject); ok {
		return v.(*budget)
	}
	b := &budget{turn: semaphore.NewWeighted(1), limiter: rate.NewLimiter(rate.Limit(SubjectReviewRate), SubjectReviewBurst)}
	r.budgets.Add(subject, b)
	return b
}
