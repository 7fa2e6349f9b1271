package dsf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// Reasons of DSF scorer failures, besides BadConfig, BadQuery and MetricsUnavailable.
const (
	// ReasonScorerUnavailable: the scorer did not answer in time, answered 5xx, 408 or 429, or is
	// Inactive (/healthz not 200, or /config not answered). Retriable.
	ReasonScorerUnavailable contract.Reason = "ScorerUnavailable"
	// ReasonScorerFailed: the scorer refused the request (another 4xx: a wrong token, a bad path),
	// redirected it, or answered what DSF's API does not allow. Retrying will not help; so does a
	// retriable failure that repeats past the bridge's bound.
	ReasonScorerFailed contract.Reason = "ScorerFailed"
	// ReasonNoCluster: hub mode, and no result carries a cluster label: the spec's query was
	// written for DSF's agent on one managed cluster (or the scorer drops labels).
	ReasonNoCluster contract.Reason = "NoClusterLabel"
)

// MaxResponseBytes bounds what is read from a scorer's scoring endpoint.
const MaxResponseBytes = 8 << 20

// MaxConfigBytes bounds a /config answer: a few hundred bytes in DSF's samples, and written whole
// into the DynamicScorer's status.lastSyncedConfig, whose object must stay small.
const MaxConfigBytes = 64 << 10

// Result is one entry of a scorer's answer. Score is a pointer so that a missing score is told
// from a zero one: a missing score is never written as 0.
type Result struct {
	Metric map[string]string `json:"metric"`
	Score  *float64          `json:"score"`
}

// scoringRequest is the body DSF's agent POSTs: the Prometheus matrix, every query's series
// concatenated; an empty list for source type None.
type scoringRequest struct {
	Data model.Matrix `json:"data"`
}

type scoringResponse struct {
	Results *[]Result `json:"results"`
}

// client talks to scorers over HTTP. Each request is bounded by the http.Client's timeout;
// redirects are not followed, so a token never goes to a host the spec did not name.
type client struct {
	http *http.Client
}

func newClient(rt http.RoundTripper, timeout time.Duration) client {
	return client{http: &http.Client{
		Transport:     rt,
		Timeout:       timeout,
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}}
}

// healthy asks the scorer's /healthz, as DSF's controller does with configSyncMode None: 200 is
// Active, anything else, or no answer, is Inactive.
func (c *client) healthy(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return scorer.BadConfig("/healthz: %v", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return unavailable("GET %s: %s: the scorer is Inactive", url, netError(err))
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return unavailable("GET %s answered %d: the scorer is Inactive", url, resp.StatusCode)
	}
	return nil
}

// config reads the scorer's /config, as DSF's controller does with configSyncMode Full: an
// answer that does not decode makes the scorer Inactive.
func (c *client) config(ctx context.Context, url string) (*RemoteConfig, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, scorer.BadConfig("configURL: %v", err)
	}
	req.Header.Set("Accept", "application/json")
	body, err := c.do(req, "", MaxConfigBytes)
	if err != nil {
		return nil, err
	}
	var rc RemoteConfig
	if err := json.Unmarshal(body, &rc); err != nil {
		return nil, unavailable("GET %s: not a DSF /config answer (%s): the scorer is Inactive", url, jsonError(err))
	}
	return &rc, nil
}

// score POSTs the data to the scoring endpoint, with token when not empty, and decodes its results.
func (c *client) score(ctx context.Context, url, token string, data model.Matrix) ([]Result, error) {
	if data == nil {
		data = model.Matrix{}
	}
	b, err := json.Marshal(scoringRequest{Data: data})
	if err != nil {
		return nil, scorer.Fail(contract.ReasonInvalidData, false, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return nil, scorer.BadConfig("scoring: %v", err)
	}
	req.Header.Set("Content-Type", "application/json")
	body, err := c.do(req, token, MaxResponseBytes)
	if err != nil {
		return nil, err
	}
	var sr scoringResponse
	if err := json.Unmarshal(body, &sr); err != nil {
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("POST %s: the answer is not {\"results\": [...]} (%s)", url, jsonError(err)))
	}
	if sr.Results == nil {
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("POST %s: the answer has no results", url))
	}
	return *sr.Results, nil
}

// do sends req with the bearer token (if any) and returns the 2xx body, at most limit bytes; any
// other answer is an error with a reason that names the status and never the body: a scorer's
// error answer (a traceback, an echo of the request) is for its own logs.
func (c *client) do(req *http.Request, token string, limit int64) ([]byte, error) {
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	what := req.Method + " " + req.URL.Redacted()
	resp, err := c.http.Do(req)
	if err != nil {
		return nil, unavailable("%s: %s", what, netError(err))
	}
	defer drain(resp)
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
	case s >= 500 || s == http.StatusTooManyRequests || s == http.StatusRequestTimeout:
		return nil, unavailable("%s answered %d", what, s)
	case s >= 300 && s < 400:
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("%s answered %d, a redirect: not followed (name the target in the spec)", what, s))
	default:
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("%s answered %d", what, s))
	}
	body, err := io.ReadAll(io.LimitReader(resp.Body, limit+1))
	switch {
	case err != nil:
		return nil, unavailable("%s: reading the answer: %s", what, netError(err))
	case int64(len(body)) > limit:
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("%s: the answer is over %d bytes", what, limit))
	}
	return body, nil
}

// netError words a transport error without its URL (the caller names it once) and without
// anything the peer sent.
func netError(err error) string {
	var ne net.Error
	if errors.As(err, &ne) && ne.Timeout() {
		return "timed out (Timeout)"
	}
	var oe *net.OpError
	if errors.As(err, &oe) {
		return oe.Op + ": " + oe.Err.Error()
	}
	if errors.Is(err, context.Canceled) {
		return "canceled"
	}
	return "no answer"
}

// jsonError keeps a decoding error's kind and offset, not the text it quotes.
func jsonError(err error) string {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Sprintf("invalid JSON at byte %d", se.Offset)
	case errors.As(err, &te):
		return fmt.Sprintf("%s is a JSON %s, not a %s", te.Field, te.Value, te.Type)
	}
	return "invalid JSON"
}

func unavailable(format string, args ...any) error {
	return scorer.Fail(ReasonScorerUnavailable, true, fmt.Errorf(format, args...))
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}
