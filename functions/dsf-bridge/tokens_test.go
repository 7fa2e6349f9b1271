package main

import (
	"fmt"
	"net/http"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/promserver"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

// TestTokensGoOnlyWhereTheSpecSendsThem: a credential goes only to the host the administrator's
// DynamicScorer pairs it with. The bridge (hub mode) runs two scorers with configSyncMode Full,
// whose specs give a Prometheus token for a real Prometheus (behind a proxy that records what
// arrives) and a scorer token for the scorer:
//   - one scorer's /config moves source.host to the scorer's own address: the scorer receives the
//     range query, but not the Prometheus token;
//   - the other's /config moves scoring.host to Prometheus: Prometheus receives the scoring call,
//     but not the scorer's token, and the failure says why.
func TestTokensGoOnlyWhereTheSpecSendsThem(t *testing.T) {
	prom := promserver.Start(t)
	now := promserver.Aligned(time.Minute)
	prom.MustPush(t, promserver.Grid(map[string]string{"__name__": "load", "cluster": "cluster1"}, now, time.Minute, 1, 2, 3))
	target, _ := url.Parse(prom.URL)
	proxy := httputil.NewSingleHostReverseProxy(target)
	promSide := newListener(t, proxy.ServeHTTP)

	const query = `{"type": "Prometheus", "path": "/api/v1/query_range", "params": {"query": "load", "range": 120, "step": 60}`
	// A scorer whose /config names itself as the source.
	var selfSource *listener
	selfSource = newListener(t, func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/config":
			fmt.Fprintf(w, `{"name": "a", "description": "d", "source": %s, "host": %q},
				"scoring": {"path": "/scoring", "params": {"name": "a_score", "interval": 30}}}`, query, selfSource.URL)
		case "/api/v1/query_range":
			fmt.Fprintf(w, `{"status": "success", "data": {"resultType": "matrix", "result": [{"metric": {"cluster": "cluster1"}, "values": [[%d, "5"]]}]}}`, now.Unix())
		case "/scoring":
			_, _ = w.Write([]byte(`{"results": [{"metric": {"cluster": "cluster1"}, "score": 5}]}`))
		}
	})
	// A scorer whose /config names Prometheus as the scoring host.
	promScoring := newListener(t, func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprintf(w, `{"name": "b", "description": "d", "source": %s},
			"scoring": {"host": %q, "path": "/scoring", "params": {"name": "b_score", "interval": 30}}}`, query, promSide.URL)
	})

	tokens := t.TempDir()
	for name, v := range map[string]string{"prometheus-token-secret": "prom-s3cret", "api-auth-secret": "scorer-s3cret"} {
		if err := os.MkdirAll(filepath.Join(tokens, name), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(tokens, name, "token"), []byte(v), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	// Each spec names the score its /config names: the bridge writes only the resource a spec names.
	spec := func(name, scorer, score string) string {
		return fmt.Sprintf(`---
apiVersion: dynamic-scoring.open-cluster-management.io/v1alpha1
kind: DynamicScorer
metadata: {name: %s}
spec:
  description: d
  configURL: %s/config
  configSyncMode: Full
  location: External
  scoreDestination: AddOnPlacementScore
  source:
    type: Prometheus
    host: %s
    auth: {tokenSecretRef: {name: prometheus-token-secret, key: token}}
  scoring:
    params: {name: %s}
    auth: {tokenSecretRef: {name: api-auth-secret, key: token}}
`, name, scorer, promSide.URL, score)
	}
	scorers := filepath.Join(t.TempDir(), "scorers.yaml")
	if err := os.WriteFile(scorers, []byte(spec("self-source", selfSource.URL, "a_score")+spec("prom-scoring", promScoring.URL, "b_score")), 0o644); err != nil {
		t.Fatal(err)
	}
	fn := functest.Start(t, []string{"SCORERS_FILE=" + scorers, "TOKEN_DIR=" + tokens, "REQUEST_TIMEOUT=5s",
		"ENDPOINTS=" + strings.Join([]string{promSide.URL, selfSource.URL, promScoring.URL}, ",")})

	status, reply := functest.Send(t, fn.URL, functest.Ping(`{"scorer": "self-source"}`))
	if su, fail := functest.Reply(t, reply); status != http.StatusOK || su == nil || su.Resource != "a-score" {
		t.Errorf("self-source: status %d scores %+v failure %+v", status, su, fail)
	}
	status, reply = functest.Send(t, fn.URL, functest.Ping(`{"scorer": "prom-scoring"}`))
	_, fail := functest.Reply(t, reply)
	if status != http.StatusBadRequest || fail == nil || fail.Reason != "ScorerFailed" || !strings.Contains(fail.Message, "token") {
		t.Errorf("prom-scoring: status %d failure %+v, want 400 ScorerFailed saying the token was not sent", status, fail)
	}
	if fail != nil && len(fail.Message) > contract.MaxRefusalBytes {
		t.Errorf("failure message of %d bytes", len(fail.Message))
	}

	for _, r := range selfSource.requests() {
		if strings.Contains(r, "prom-s3cret") {
			t.Errorf("the scorer received the Prometheus token: %q", r)
		}
	}
	if rs := selfSource.requests(); !has(rs, "/api/v1/query_range ") || !has(rs, "/scoring Bearer scorer-s3cret") {
		t.Errorf("the scorer got %q: want the range query without a token and the scoring call with its own", rs)
	}
	for _, r := range promSide.requests() {
		if strings.Contains(r, "scorer-s3cret") {
			t.Errorf("Prometheus received the scorer's token: %q", r)
		}
	}
	if rs := promSide.requests(); !has(rs, "/api/v1/query_range Bearer prom-s3cret") || !has(rs, "/scoring ") {
		t.Errorf("Prometheus got %q: want the range query with its token and the scoring call without one", rs)
	}
}

// has reports whether a request "METHOD PATH AUTHORIZATION" was pathAuth ("PATH AUTHORIZATION"),
// by any method (Prometheus' client queries by POST).
func has(requests []string, pathAuth string) bool {
	for _, r := range requests {
		if _, rest, _ := strings.Cut(r, " "); rest == pathAuth {
			return true
		}
	}
	return false
}
