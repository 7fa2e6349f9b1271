package function_test

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/cloudevents/sdk-go/v2/binding"
	"github.com/cloudevents/sdk-go/v2/event"
	cehttp "github.com/cloudevents/sdk-go/v2/protocol/http"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/auth"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
)

const (
	audience = "scoreflow/test-function"
	ns       = "scoreflow"
)

// guarded serves a function that requires tokens per opts and counts the events that reach its
// handler.
func guarded(t *testing.T, opts function.AuthOptions) (string, *atomic.Int64) {
	t.Helper()
	a, err := function.NewAuthenticator(opts)
	if err != nil {
		t.Fatal(err)
	}
	fn := function.New("guarded", "test")
	fn.RequireAuth(a)
	var handled atomic.Int64
	url := functest.Serve(t, fn, func(context.Context, event.Event) function.Response {
		handled.Add(1)
		return function.Response{Status: http.StatusAccepted}
	})
	return url, &handled
}

// post sends a ping with the given Authorization header (none when empty) and returns the status,
// the raw body and the failure reply, if any.
func postAuthorized(t *testing.T, url, authorization string) (int, string, *contract.Failure) {
	t.Helper()
	req := functest.Request(t, url, functest.Ping(`{}`))
	if authorization != "" {
		req.Header.Set("Authorization", authorization)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	resp.Body = io.NopCloser(strings.NewReader(string(body)))
	if resp.StatusCode >= 400 && len(body) >= 700 {
		t.Errorf("refusal body is %d bytes; Knative's dispatcher needs under 768", len(body))
	}
	msg := cehttp.NewMessageFromHttpResponse(resp)
	if msg.ReadEncoding() == binding.EncodingUnknown {
		return resp.StatusCode, string(body), nil
	}
	reply, err := binding.ToEvent(context.Background(), msg)
	if err != nil {
		t.Fatalf("reply is not a CloudEvent: %v", err)
	}
	f, err := contract.DecodeFailure(reply)
	if err != nil {
		t.Fatalf("reply %s: %v", reply.Type(), err)
	}
	return resp.StatusCode, string(body), f
}

// A function with authentication on admits exactly a token the API server issued, for the
// function's audience, to an allowed ServiceAccount; everything else is refused before the handler
// runs, with 401 or 403 and a score.failed naming the reason. Probes and /metrics stay open.
func TestAuthAdmitsOnlyTheClustersTokenForAnAllowedCaller(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	allowed := authtest.Subject(ns, "broker-trigger")
	opts := authtest.PodFiles(t, hub, audience, allowed, "system:serviceaccount:trusted:*")
	url, handled := guarded(t, opts)

	good := authtest.Token(t, hub.Kube, ns, "broker-trigger", audience)
	if status, body, _ := postAuthorized(t, url, "Bearer "+good); status != http.StatusAccepted {
		t.Fatalf("a valid token got %d %s", status, body)
	}
	if status, _, _ := postAuthorized(t, url, "Bearer "+authtest.Token(t, hub.Kube, "trusted", "anyone", audience)); status != http.StatusAccepted {
		t.Fatalf("a subject matching an allowed prefix got %d", status)
	}
	if handled.Load() != 2 {
		t.Fatalf("handler ran %d times for 2 admitted events", handled.Load())
	}

	cases := []struct {
		name, authorization string
		status              int
		reason              contract.Reason
		message             string
	}{
		{"no token", "", 401, function.ReasonUnauthenticated, "no bearer token"},
		{"not a bearer", "Basic " + good, 401, function.ReasonUnauthenticated, "no bearer token"},
		{"not a JWT", "Bearer not-a-jwt", 401, function.ReasonUnauthenticated, "malformed"},
		{"other audience", "Bearer " + authtest.Token(t, hub.Kube, ns, "broker-trigger", "scoreflow/other-function"), 401, function.ReasonUnauthenticated, "audience"},
		{"signed by another key under a known key id", "Bearer " + authtest.Forge(t, good, true), 401, function.ReasonUnauthenticated, "signature"},
		{"other subject", "Bearer " + authtest.Token(t, hub.Kube, ns, "someone-else", audience), 403, function.ReasonNotAllowed, authtest.Subject(ns, "someone-else")},
		{"prefix is not a namespace wildcard for others", "Bearer " + authtest.Token(t, hub.Kube, "trusted-not", "x", audience), 403, function.ReasonNotAllowed, "not allowed"},
	}
	for _, c := range cases {
		status, body, f := postAuthorized(t, url, c.authorization)
		if status != c.status || f == nil || f.Reason != c.reason || !strings.Contains(f.Message, c.message) {
			t.Errorf("%s: got %d %q, want %d %s mentioning %q", c.name, status, body, c.status, c.reason, c.message)
		}
		// What the function expects stays in its log.
		if status == http.StatusUnauthorized && strings.Contains(body, audience) {
			t.Errorf("%s: the refusal names the function's audience: %s", c.name, body)
		}
	}
	if handled.Load() != 2 {
		t.Fatalf("refused requests reached the handler: %d calls", handled.Load())
	}
	for _, path := range []string{"/healthz", "/readyz", "/metrics"} {
		if status, _ := functest.Get(t, url+path); status != http.StatusOK {
			t.Errorf("%s without a token: %d, want 200", path, status)
		}
	}
	_, metrics := functest.Get(t, url+"/metrics")
	if !strings.Contains(metrics, `scoreflow_requests_unauthorized_total{code="403",reason="NotAllowed"} 2`) {
		t.Errorf("/metrics does not count the refusals:\n%s", grep(metrics, "unauthorized"))
	}

	// Expiry: the same real token, checked by a verifier whose clock is past its expiry. (The
	// TokenRequest API grants no lifetime under ten minutes.)
	late := opts
	late.Now = func() time.Time { return time.Now().Add(authtest.MinTokenTTL + time.Minute) }
	lateURL, lateHandled := guarded(t, late)
	if status, body, f := postAuthorized(t, lateURL, "Bearer "+good); status != 401 || f == nil || f.Message != "token expired" {
		t.Errorf("expired token: got %d %s", status, body)
	}
	if lateHandled.Load() != 0 {
		t.Error("an expired token reached the handler")
	}
}

// While the API server's keys cannot be read the function answers 503, so that the broker retries,
// and it recovers without a restart once they can.
func TestAuthAnswers503UntilTheKeysCanBeRead(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	opts := authtest.PodFiles(t, hub, audience, authtest.Subject(ns, "caller"))
	good := authtest.Token(t, hub.Kube, ns, "caller", audience)
	if err := hub.CrashAPIServer(); err != nil {
		t.Fatal(err)
	}
	url, handled := guarded(t, opts)
	if status, body, f := postAuthorized(t, url, "Bearer "+good); status != http.StatusServiceUnavailable || f == nil || f.Reason != contract.ReasonUnavailable {
		t.Fatalf("with the API server down: got %d %s, want 503 Unavailable", status, body)
	}
	if err := hub.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		status, body, _ := postAuthorized(t, url, "Bearer "+good)
		if status == http.StatusAccepted {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("after the API server came back: %d %s", status, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	// With the keys read, an API server outage stops nothing signed by a known key; a token that
	// names another key cannot be judged and is retried.
	if err := hub.CrashAPIServer(); err != nil {
		t.Fatal(err)
	}
	if status, body, _ := postAuthorized(t, url, "Bearer "+good); status != http.StatusAccepted {
		t.Errorf("known key, API server down: %d %s", status, body)
	}
	if status, body, _ := postAuthorized(t, url, "Bearer "+authtest.Forge(t, good, false)); status != http.StatusServiceUnavailable {
		t.Errorf("unknown key id, API server down: %d %s, want 503", status, body)
	}
	if handled.Load() != 2 {
		t.Fatalf("handler ran %d times, want 2", handled.Load())
	}
	if err := hub.StartAPIServer(); err != nil {
		t.Fatal(err)
	}
}

// When the API server starts signing with a new key, a running function admits the new tokens
// (it fetches the keys again on an unknown key id, at most once per KeyRefetchInterval, answering
// 503 meanwhile so that the sender retries) and still the ones issued before.
func TestAuthFollowsSigningKeyRotation(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	opts := authtest.PodFiles(t, hub, audience, authtest.Subject(ns, "caller"))
	url, _ := guarded(t, opts)
	before := authtest.Token(t, hub.Kube, ns, "caller", audience)
	if status, body, _ := postAuthorized(t, url, "Bearer "+before); status != http.StatusAccepted {
		t.Fatalf("before rotation: %d %s", status, body)
	}
	if err := hub.RotateServiceAccountKey(); err != nil {
		t.Fatal(err)
	}
	if err := hub.WaitForAPI(context.Background(), 60*time.Second); err != nil {
		t.Fatal(err)
	}
	after := authtest.Token(t, hub.Kube, ns, "caller", audience)
	if authtest.KeyID(t, after) == authtest.KeyID(t, before) {
		t.Fatalf("the API server still signs with key %s", authtest.KeyID(t, before))
	}
	deadline := time.Now().Add(auth.DefaultKeyRefetchInterval + 5*time.Second)
	for {
		status, body, _ := postAuthorized(t, url, "Bearer "+after)
		if status == http.StatusAccepted {
			break
		}
		// A genuine token is never refused for good: at most retried until the keys are read.
		if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
			t.Fatalf("token signed with the new key: %d %s", status, body)
		}
		time.Sleep(200 * time.Millisecond)
	}
	if status, body, _ := postAuthorized(t, url, "Bearer "+before); status != http.StatusAccepted {
		t.Errorf("token signed before rotation: %d %s", status, body)
	}
}

// keysProxy serves the hub's signing keys (its real /openid/v1/jwks) and counts the reads.
func keysProxy(t *testing.T, hub *localhub.Hub) (string, *atomic.Int64) {
	t.Helper()
	var reads atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		reads.Add(1)
		b, err := hub.Kube.CoreV1().RESTClient().Get().AbsPath("/openid/v1/jwks").DoRaw(r.Context())
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		w.Header().Set("Content-Type", "application/jwk-set+json")
		_, _ = w.Write(b)
	}))
	t.Cleanup(srv.Close)
	return srv.URL, &reads
}

// Tokens naming key ids the cluster never published cost the API server at most one read of its
// keys per KeyRefetchInterval, however many arrive: within the interval they are answered 503
// (the keys are not read again yet), once it has passed one of them makes the function read the
// keys and is refused 401. None reaches the handler.
func TestAuthReadsKeysAtMostOncePerInterval(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	opts := authtest.PodFiles(t, hub, audience, authtest.Subject(ns, "caller"))
	var reads *atomic.Int64
	opts.JWKSURL, reads = keysProxy(t, hub)
	const interval = 2 * time.Second
	opts.KeyRefetchInterval = interval
	url, handled := guarded(t, opts)
	good := authtest.Token(t, hub.Kube, ns, "caller", audience)
	if status, body, _ := postAuthorized(t, url, "Bearer "+good); status != http.StatusAccepted {
		t.Fatalf("a valid token got %d %s", status, body)
	}
	if n := reads.Load(); n != 1 {
		t.Fatalf("%d reads of the keys for the first token, want 1", n)
	}
	start := time.Now()
	for i := 0; i < 50; i++ {
		status, body, f := postAuthorized(t, url, "Bearer "+authtest.Forge(t, good, false))
		if status != http.StatusServiceUnavailable || f == nil || f.Reason != contract.ReasonUnavailable {
			t.Fatalf("forged token %d within the interval: %d %s, want 503 Unavailable", i, status, body)
		}
	}
	if time.Since(start) > interval {
		t.Fatalf("50 forged tokens took %s, longer than the interval of %s: the test proves nothing", time.Since(start), interval)
	}
	if n := reads.Load(); n != 1 {
		t.Errorf("50 tokens naming unknown keys made %d reads of the keys within %s, want none beyond the first", n-1, interval)
	}
	time.Sleep(interval)
	if status, body, f := postAuthorized(t, url, "Bearer "+authtest.Forge(t, good, false)); status != http.StatusUnauthorized || f == nil || f.Message != "token not valid: signature not verified" {
		t.Errorf("forged token after the interval: %d %s, want 401 signature not verified", status, body)
	}
	if n := reads.Load(); n != 2 {
		t.Errorf("%d reads after the interval, want 2", n)
	}
	if status, body, _ := postAuthorized(t, url, "Bearer "+good); status != http.StatusAccepted {
		t.Errorf("a valid token after the forged ones: %d %s", status, body)
	}
	if handled.Load() != 2 {
		t.Errorf("handler ran %d times, want 2", handled.Load())
	}
}

// A 401 tells the caller what kind of token failure it is, never what the function expects: not
// the issuer it trusts (nor the audience it wants), which only the log line names.
func TestAuthRefusalsDoNotNameTheExpectedIssuer(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	opts := authtest.PodFiles(t, hub, audience, authtest.Subject(ns, "caller"))
	// A discovery document naming another issuer: the cluster's own tokens are then validly
	// signed (the keys are the cluster's) but from the wrong issuer.
	// The path holds words of other failures: the refusal comes from what failed, not from
	// what an error's text contains.
	const issuer = "https://issuer.internal.example:6443/malformed-audience-secret-path"
	var jwks string
	jwks, _ = keysProxy(t, hub)
	disco := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		fmt.Fprintf(w, `{"issuer":%q,"jwks_uri":%q,"response_types_supported":["id_token"],"subject_types_supported":["public"],"id_token_signing_alg_values_supported":["RS256","ES256"]}`, issuer, jwks)
	}))
	defer disco.Close()
	opts.DiscoveryURL, opts.JWKSURL = disco.URL, jwks
	url, handled := guarded(t, opts)
	status, body, f := postAuthorized(t, url, "Bearer "+authtest.Token(t, hub.Kube, ns, "caller", audience))
	if status != http.StatusUnauthorized || f == nil || f.Message != "token not valid: wrong issuer" {
		t.Errorf("%d %s, want 401 token not valid: wrong issuer", status, body)
	}
	for _, secret := range []string{"issuer.internal.example", "secret-path"} {
		if strings.Contains(body, secret) {
			t.Errorf("the refusal names %q: %s", secret, body)
		}
	}
	if handled.Load() != 0 {
		t.Errorf("handler ran %d times", handled.Load())
	}
}

// A token is refused for what is wrong with it, whatever its key id says: one naming a key the
// cluster does not publish is 401 once the keys have been read again, even when its key id reads
// like a transient failure.
func TestAuthRefusalDoesNotDependOnTheTokensText(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	opts := authtest.PodFiles(t, hub, audience, authtest.Subject(ns, "caller"))
	opts.KeyRefetchInterval = time.Second
	url, handled := guarded(t, opts)
	good := authtest.Token(t, hub.Kube, ns, "caller", audience)
	if status, body, _ := postAuthorized(t, url, "Bearer "+good); status != http.StatusAccepted {
		t.Fatalf("a valid token got %d %s", status, body)
	}
	time.Sleep(opts.KeyRefetchInterval)
	for _, kid := range []string{"signing keys unavailable", "cannot read the cluster's token keys"} {
		forged := authtest.ForgeWithKeyID(t, good, kid)
		var status int
		var f *contract.Failure
		// The first after the interval reads the keys again; any later one is within it.
		for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(200 * time.Millisecond) {
			status, _, f = postAuthorized(t, url, "Bearer "+forged)
			if status != http.StatusServiceUnavailable || time.Now().After(deadline) {
				break
			}
		}
		if status != http.StatusUnauthorized || f == nil || f.Message != "token not valid: signature not verified" {
			t.Errorf("key id %q: %d %+v, want 401 signature not verified", kid, status, f)
		}
	}
	if handled.Load() != 1 {
		t.Errorf("handler ran %d times, want 1", handled.Load())
	}
}

func grep(s, sub string) string {
	var out []string
	for _, l := range strings.Split(s, "\n") {
		if strings.Contains(l, sub) {
			out = append(out, l)
		}
	}
	return fmt.Sprint(out)
}

// Authentication is off unless asked for, and asked for without an audience or an allowed
// subject the function refuses to start rather than run open or closed to everyone.
func TestAuthFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--auth-oidc"}, "audience"},
		{[]string{"--auth-oidc", "--auth-audience", "a"}, "subject"},
		{[]string{"--auth-oidc", "--auth-audience", "a", "--auth-allowed-subjects", " , *"}, "every identity"},
	} {
		fn := function.New("test", "test")
		if err := fn.Parse(c.args); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("Parse(%q) = %v, want an error about %s", c.args, err, c.want)
		}
	}
	fn := function.New("test", "test")
	if err := fn.Parse(nil); err != nil {
		t.Fatal(err)
	}
	var handled bool
	url := functest.Serve(t, fn, func(context.Context, event.Event) function.Response { handled = true; return function.Response{} })
	if status, _ := functest.Send(t, url, functest.Ping(`{}`)); status != http.StatusAccepted || !handled {
		t.Fatalf("with authentication off (the default) an event without a token got %d", status)
	}
	t.Setenv("AUTH_OIDC", "true")
	t.Setenv("AUTH_AUDIENCE", "a")
	t.Setenv("AUTH_ALLOWED_SUBJECTS", "system:serviceaccount:x:y")
	fn = function.New("test", "test")
	if err := fn.Parse(nil); err != nil {
		t.Fatal(err)
	}
	url = functest.Serve(t, fn, func(context.Context, event.Event) function.Response { return function.Response{} })
	if status, _ := functest.Send(t, url, functest.Ping(`{}`)); status != http.StatusUnauthorized {
		t.Fatalf("with AUTH_OIDC=true an event without a token got %d, want 401", status)
	}
}
