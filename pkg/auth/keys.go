package auth

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"sync"
	"time"

	jose "github.com/go-jose/go-jose/v4"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// DefaultKeyRefetchInterval is how often at most the cluster's signing keys are read again for a
// token whose key id is not among those already read.
const DefaultKeyRefetchInterval = 10 * time.Second

// maxJWKSBytes bounds the key set document: a cluster publishes a handful of keys.
const maxJWKSBytes = 1 << 20

// keySet is the cluster's token signing keys, read from its JWKS endpoint. A token naming a key
// id it does not hold makes it read the keys again, so a rotated signing key is picked up without
// a restart; but at most once per interval, since anyone who reaches a verifier can send tokens
// naming new key ids, and each read costs the API server a request. Until the next read is due,
// such a token fails with ErrKeysUnavailable (503, so a genuine sender retries and gets through
// once they are read again).
type keySet struct {
	url      string
	client   *http.Client
	interval time.Duration
	retry    time.Duration // after a failed read, the next may come this soon

	fetching sync.Mutex // one read at a time; tokens waiting for it use its keys
	mu       sync.Mutex
	keys     []jose.JSONWebKey
	read     time.Time // the last read's start (zero: none yet)
	readErr  error     // the last read's error
}

// verify returns the payload of jws if a key of the cluster signed it: ErrBadSignature when none
// did, ErrKeysUnavailable when the keys cannot be read (again) now.
func (k *keySet) verify(ctx context.Context, jws *jose.JSONWebSignature) ([]byte, error) {
	kid := jws.Signatures[0].Header.KeyID
	k.mu.Lock()
	keys, seen := k.keys, k.read
	k.mu.Unlock()
	if payload, known := verifyWith(jws, kid, keys); payload != nil {
		return payload, nil
	} else if known {
		// The key named is one the cluster publishes: reading the keys again cannot help.
		return nil, fmt.Errorf("%w: not by the key it names", ErrBadSignature)
	}
	keys, err := k.refresh(ctx, seen)
	if err != nil {
		return nil, err
	}
	if payload, _ := verifyWith(jws, kid, keys); payload != nil {
		return payload, nil
	}
	return nil, fmt.Errorf("%w: no key the cluster publishes (key id %q)", ErrBadSignature, contract.Truncate(kid, 64))
}

// refresh reads the keys unless they were read since seen (then it returns that read's keys) or
// less than the interval ago (then it fails as unavailable; sooner after a failed read).
func (k *keySet) refresh(ctx context.Context, seen time.Time) ([]jose.JSONWebKey, error) {
	k.fetching.Lock()
	defer k.fetching.Unlock()
	k.mu.Lock()
	keys, last, lastErr := k.keys, k.read, k.readErr
	k.mu.Unlock()
	// After a failed read the next may come sooner: until the keys are read no token verifies.
	wait := k.interval
	if lastErr != nil {
		wait = min(wait, k.retry)
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
		return nil, fmt.Errorf("%w: the token names a key not among those read %s ago; they are read again at most every %s",
			ErrKeysUnavailable, time.Since(last).Round(time.Millisecond), wait)
	}
	start := time.Now()
	keys, err := k.fetch(ctx)
	k.mu.Lock()
	defer k.mu.Unlock()
	k.read, k.readErr = start, nil
	if err != nil {
		k.readErr = fmt.Errorf("%w: %w", ErrKeysUnavailable, err)
		return nil, k.readErr
	}
	k.keys = keys
	return keys, nil
}

func (k *keySet) fetch(ctx context.Context) ([]jose.JSONWebKey, error) {
	var set jose.JSONWebKeySet
	if err := getJSON(ctx, k.client, k.url, maxJWKSBytes, &set); err != nil {
		return nil, err
	}
	return set.Keys, nil
}

// getJSON reads a JSON document of at most limit bytes from url into v. It is not cut short by
// the caller that asked: other tokens wait for this read, and a failed one holds the next back.
func getJSON(ctx context.Context, client *http.Client, url string, limit int64, v any) error {
	ctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), 10*time.Second)
	defer cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return err
	}
	resp, err := client.Do(req)
	if err != nil {
		return err
	}
	defer resp.Body.Close()
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	if err != nil {
		return err
	}
	if resp.StatusCode != http.StatusOK {
		return fmt.Errorf("GET %s: %s", url, resp.Status)
	}
	if int64(len(body)) > limit {
		return fmt.Errorf("GET %s: larger than %d bytes", url, limit)
	}
	if err := json.Unmarshal(body, v); err != nil {
		return fmt.Errorf("GET %s: %w", url, err)
	}
	return nil
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
