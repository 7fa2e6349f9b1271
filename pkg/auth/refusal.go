package auth

import (
	"errors"
	"net/http"
	"strings"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// Reasons of refused callers, in the failure reply and the log line.
const (
	// ReasonUnauthenticated: no bearer token, or one that does not verify as issued by the
	// cluster for the audience (bad signature, unknown key, expired, other audience).
	ReasonUnauthenticated contract.Reason = "Unauthenticated"
	// ReasonNotAllowed: a valid token of an identity that may not call.
	ReasonNotAllowed contract.Reason = "NotAllowed"
)

// Why a token is refused. Verify wraps exactly one of them; their text is what a caller is told
// (Refuse), so it never names the issuer or audience expected, which the wrapping error does, for
// the log.
var (
	ErrNoToken       = errors.New("no bearer token")
	ErrMalformed     = errors.New("token not valid: malformed")
	ErrWrongIssuer   = errors.New("token not valid: wrong issuer")
	ErrWrongAudience = errors.New("token not valid: wrong audience")
	ErrBadSignature  = errors.New("token not valid: signature not verified")
	ErrExpired       = errors.New("token expired")
	ErrNotYetValid   = errors.New("token not valid yet")
	ErrTooLongLived  = errors.New("token not valid: lives longer than allowed")
	// ErrKeysUnavailable: the cluster's keys could not be read, or not yet again (a token naming
	// a key not among those read, within the refetch interval). Transient: the caller may retry.
	ErrKeysUnavailable = errors.New("cannot read the cluster's token keys")
)

// Refusal is why a caller is not admitted: the status and reason it is answered, the message it
// is told, and the cause, which only the log line carries (it may name issuers, audiences or
// internal addresses).
type Refusal struct {
	Status  int
	Reason  contract.Reason
	Message string
	Err     error
}

func (r *Refusal) Error() string {
	if r.Err == nil {
		return r.Message
	}
	return r.Message + ": " + r.Err.Error()
}

func (r *Refusal) Unwrap() error { return r.Err }

// SetHeaders sets what the refusal's status calls for: a 401 names the bearer scheme, a 429 or 503
// when to retry.
func (r *Refusal) SetHeaders(h http.Header) {
	switch r.Status {
	case http.StatusUnauthorized:
		h.Set("WWW-Authenticate", `Bearer error="invalid_token"`)
	case http.StatusTooManyRequests, http.StatusServiceUnavailable:
		h.Set("Retry-After", "1")
	}
}

// tokenErrors are the sentinels a caller is refused for, by what they say of the token.
var tokenErrors = []error{ErrNoToken, ErrMalformed, ErrWrongIssuer, ErrWrongAudience, ErrBadSignature,
	ErrExpired, ErrNotYetValid, ErrTooLongLived}

// Refuse classifies an error of Bearer or Verify: a Refusal as is; a token's failure 401 with the
// sentinel's text; keys that cannot be read 503 (the sender retries); anything else 401 "token
// not valid".
func Refuse(err error) *Refusal {
	var r *Refusal
	if errors.As(err, &r) {
		return r
	}
	if errors.Is(err, ErrKeysUnavailable) {
		return &Refusal{http.StatusServiceUnavailable, contract.ReasonUnavailable, ErrKeysUnavailable.Error(), err}
	}
	for _, s := range tokenErrors {
		if errors.Is(err, s) {
			return &Refusal{http.StatusUnauthorized, ReasonUnauthenticated, s.Error(), err}
		}
	}
	return &Refusal{http.StatusUnauthorized, ReasonUnauthenticated, "token not valid", err}
}

// NotAllowed refuses a verified caller that may not call (403), naming its subject: the caller
// knows it, and it says which identity to admit.
func NotAllowed(subject, why string) *Refusal {
	return &Refusal{http.StatusForbidden, ReasonNotAllowed, "caller " + contract.Truncate(subject, 200) + " " + why, nil}
}

// Bearer is the token of an "Authorization: Bearer <token>" header, or ErrNoToken.
func Bearer(h http.Header) (string, error) {
	scheme, tok, ok := strings.Cut(h.Get("Authorization"), " ")
	tok = strings.TrimSpace(tok)
	if !ok || !strings.EqualFold(scheme, "Bearer") || tok == "" {
		return "", ErrNoToken
	}
	return tok, nil
}

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
