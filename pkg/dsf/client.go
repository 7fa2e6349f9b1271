package dsf

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"

	"github.com/prometheus/common/model"

	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/scorer"
)

// Reasons of the score.failed events the bridge sends besides BadConfig, BadQuery and
// MetricsUnavailable.
const (
	// ReasonScorerUnavailable: the scorer did not answer in time, answered 5xx, 408 or 429, or its
	// /healthz did not answer 200. Retriable: the broker redelivers the ping.
	ReasonScorerUnavailable contract.Reason = "ScorerUnavailable"
	// ReasonScorerFailed: the scorer refused the request (another 4xx: a wrong token, a bad path)
	// or answered what the documented API does not allow. Retrying will not help.
	ReasonScorerFailed contract.Reason = "ScorerFailed"
)

// MaxResponseBytes bounds what is read from a scorer.
const MaxResponseBytes = 8 << 20

// RemoteConfig is a scorer's GET /config.
type RemoteConfig struct {
	Name        string  `json:"name"`
	Description string  `json:"description"`
	Source      Source  `json:"source"`
	Scoring     Scoring `json:"scoring"`
}

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

// client talks to scorers over HTTP. Each call is bounded by the http.Client's timeout.
type client struct {
	http *http.Client
}

// healthy asks the scorer's /healthz, as DSF's controller does: 200 is Active, anything else,
// or no answer, is Inactive.
func (c *client) healthy(ctx context.Context, url string) error {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return scorer.BadConfig("%v", err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return unavailable("%s: %v", url, err)
	}
	defer drain(resp)
	if resp.StatusCode != http.StatusOK {
		return unavailable("%s answered %d: the scorer is Inactive", url, resp.StatusCode)
	}
	return nil
}

// config reads the scorer's /config.
func (c *client) config(ctx context.Context, url string) (*RemoteConfig, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, scorer.BadConfig("configURL: %v", err)
	}
	req.Header.Set("Accept", "application/json")
	body, err := c.do(req, "")
	if err != nil {
		return nil, err
	}
	var rc RemoteConfig
	if err := json.Unmarshal(body, &rc); err != nil {
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("%s: not a DSF config: %v", url, err))
	}
	return &rc, nil
}

// score POSTs the data to the scoring endpoint and decodes its results.
func (c *client) score(ctx context.Context, url, tokenFile string, data model.Matrix) ([]Result, error) {
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
	body, err := c.do(req, tokenFile)
	if err != nil {
		return nil, err
	}
	var sr scoringResponse
	if err := json.Unmarshal(body, &sr); err != nil {
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("%s: the answer is not {\"results\": [...]}: %v", url, err))
	}
	if sr.Results == nil {
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("%s: the answer has no results", url))
	}
	return *sr.Results, nil
}

// do sends req with the token read from tokenFile (if any) and returns the 2xx body; any other
// answer is an error with a reason.
func (c *client) do(req *http.Request, tokenFile string) ([]byte, error) {
	if tokenFile != "" {
		token, err := readToken(tokenFile)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Authorization", "Bearer "+token)
	}
	url := req.URL.Redacted()
	resp, err := c.http.Do(req)
	if err != nil {
		// http.Client errors name the URL, never a header: the token stays out.
		return nil, unavailable("%s %s: %v", req.Method, url, errors.Unwrap(err))
	}
	defer drain(resp)
	body, err := io.ReadAll(io.LimitReader(resp.Body, MaxResponseBytes+1))
	switch {
	case err != nil:
		return nil, unavailable("%s %s: reading the answer: %v", req.Method, url, err)
	case len(body) > MaxResponseBytes:
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("%s %s: the answer is over %d bytes", req.Method, url, MaxResponseBytes))
	}
	switch s := resp.StatusCode; {
	case s >= 200 && s < 300:
		return body, nil
	case s >= 500 || s == http.StatusTooManyRequests || s == http.StatusRequestTimeout:
		return nil, unavailable("%s %s answered %d: %s", req.Method, url, s, brief(body))
	default:
		return nil, scorer.Fail(ReasonScorerFailed, false, fmt.Errorf("%s %s answered %d: %s", req.Method, url, s, brief(body)))
	}
}

// readToken reads a mounted Secret's file on every request, so a rotated Secret applies at once.
// Errors name the path, never the content.
func readToken(path string) (string, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return "", scorer.BadConfig("token file: %v (is the Secret mounted?)", err)
	}
	token := strings.TrimSpace(string(b))
	if token == "" {
		return "", scorer.BadConfig("token file %s is empty", path)
	}
	return token, nil
}

func unavailable(format string, args ...any) error {
	return scorer.Fail(ReasonScorerUnavailable, true, fmt.Errorf(format, args...))
}

func drain(resp *http.Response) {
	_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 64<<10))
	_ = resp.Body.Close()
}

// brief keeps an answer's body short and on one line: it ends up in a CloudEvent and a log line.
func brief(body []byte) string {
	s := strings.Join(strings.Fields(string(body)), " ")
	if len(s) > 200 {
		s = s[:200] + "..."
	}
	return s
}
