package function

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"
)

// DefaultKeyRefetchInterval is how often at most the cluster's signing keys are read again for a
// token whose key id is not among those already read.
const DefaultKeyRefetchInterval = 10 * time.Second

// maxJWKSBytes bounds the key set document: a cluster publishes a handful of keys.
const maxJWKSBytes = 1 << 20

// Markers in the errors a keySet returns. go-oidc flattens the key set's error into its own text,
// so the Authenticator tells them apart by these phrases.
const (
	keysUnavailable = "signing keys unavailable"
	noSuchKey       = "signature not verified"
)

// keySet is the cluster's token signing keys, read from its JWKS endpoint (an oidc.KeySet). A
// token naming a key id it does not hold makes it read the keys again, so a rotated signing key
// is picked up without a restart; but at most once per interval, since anyone who reaches a
// function can send tokens naming new key ids, and each read costs the API server a request.
// Until the next read is due, such a token is answered as if the keys could not be read (503, so
// a genuine sender retries and gets through once they are read again).
type keySet struct {
	url      string
	client   *http.Client
	interval time.Duration

	fetching sync.Mutex // one read at a time; tokens waiting for it use its keys
	mu       sync.Mutex
	keys     []jose.JSONWebKey
	read     time.Time // the last read's start (zero: none yet)
	readErr  error     // the last read's error
}

func newKeySet(url string, client *http.Client, interval time.Duration) *keySet {
	if interval <= 0 {
		interval = DefaultKeyRefetchInterval
	}
	return &keySet{url: url, client: client, interval: interval}
}

// VerifySignature returns the payload of jwt if a key of the cluster signed it. Algorithms and the
// single signature are checked by the oidc.IDTokenVerifier before it calls this.
func (k *keySet) VerifySignature(ctx context.Context, jwt string) ([]byte, error) {
	jws, err := jose.ParseSigned(jwt, joseAlgs)
	if err != nil || len(jws.Signatures) != 1 {
		return nil, fmt.Errorf("malformed jwt: %v", err)
	}
	kid := jws.Signatures[0].Header.KeyID
	k.mu.Lock()
	keys, seen := k.keys, k.read
	k.mu.Unlock()
	if payload, known := verifyWith(jws, kid, keys); payload != nil {
		return payload, nil
	} else if known {
		// The key named is one the cluster publishes: reading the keys again cannot help.
		return nil, errors.New(noSuchKey + ": not by the key it names")
	}
	keys, err = k.refresh(ctx, seen)
	if err != nil {
		return nil, err
	}
	if payload, _ := verifyWith(jws, kid, keys); payload != nil {
		return payload, nil
	}
	return nil, fmt.Errorf("%s: no key the cluster publishes (key id %q)", noSuchKey, clip(kid, 64))
}

// refresh reads the keys unless they were read since seen (then it returns that read's keys) or
// less than the interval ago (then it fails as unavailable; a second after a failed read).
func (k *keySet) refresh(ctx context.Context, seen time.Time) ([]jose.JSONWebKey, error) {
	k.fetching.Lock()
	defer k.fetching.Unlock()
	k.mu.Lock()
	keys, last, lastErr := k.keys, k.read, k.readErr
	k.mu.Unlock()
	// After a failed read the next may come sooner, as discovery is retried: until the keys are
	// read no token verifies.
	wait := k.interval
	if lastErr != nil {
		wait = min(wait, retryDiscovery)
	}
	switch {
	case last.After(seen):
		if lastErr != nil {
			return nil, lastErr
		}
		return keys, nil
	case !last.IsZero() && time.Since(last) < wait:
		if lastErr != nil {
			return nil, lastErr
		}
		return nil, fmt.Errorf("%s: the token names a key not among those read %s ago; they are read again at most every %s",
			keysUnavailable, time.Since(last).Round(time.Millisecond), wait)
	}
	start := time.Now()
	keys, err := k.fetch(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.read, k.readErr = start, nil
	if err != nil {
		k.readErr = fmt.Errorf("%s: %w", keysUnavailable, err)
		return nil, k.readErr
	}
	k.keys = keys
	return keys, nil
}

func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	// Not cut short by the caller that asked: other tokens wait for this read, and a failed one
	// holds the next back.
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, k.url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := k.client.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, maxJWKSBytes+1))
	if err != nil {
		return nil, err
	}
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: %s", k.url, resp.Status)
	}
	if len(body) > maxJWKSBytes {
		return nil, fmt.Errorf("GET %s: key set larger than %d bytes", k.url, maxJWKSBytes)
	}
	var set jose.JSONWebKeySet
	if err := json.Unmarshal(body, &set); err != nil {
		return nil, fmt.Errorf("GET %s: %w", k.url, err)
	}
	return set.Keys, nil
}

// verifyWith verifies jws with the key of id kid among keys (every key when kid is empty). known
// says whether keys hold a key of that id.
func verifyWith(jws *jose.JSONWebSignature, kid string, keys []jose.JSONWebKey) (payload []byte, known bool) {
	for i := range keys {
		if kid != "" && keys[i].KeyID != kid {
			continue
		}
		known = kid != ""
		if keys[i].Use != "" && keys[i].Use != "sig" {
			continue
		}
		if p, err := jws.Verify(&keys[i]); err == nil {
			return p, true
		}
	}
	return nil, known
}

// joseAlgs are signingAlgs as go-jose names them.
var joseAlgs = func() []jose.SignatureAlgorithm {
	out := make([]jose.SignatureAlgorithm, len(signingAlgs))
	for i, a := range signingAlgs {
		out[i] = jose.SignatureAlgorithm(a)
	}
	return out
}()
