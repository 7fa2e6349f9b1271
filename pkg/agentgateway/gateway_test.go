package agentgateway

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	cloudevents "github.com/cloudevents/sdk-go/v2"
	"github.com/cloudevents/sdk-go/v2/event"
	"github.com/google/uuid"
	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	addonclient "open-cluster-management.io/api/client/addon/clientset/versioned"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/functest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/contract"
	"github.com/scoreflow/scoreflow/pkg/function"
	"github.com/scoreflow/scoreflow/pkg/hubtoken"
)

const addon = "scoreflow-latency-agent"

var table = &Table{Agents: []Agent{{Addon: addon, Types: []string{contract.TypeScoreUpdated}, Resources: []string{"latency"}}}}

// gatewayHub is a hub with the addon enabled on cluster1 and cluster2 (their ManagedClusterAddOns)
// and not on cluster3, and a gateway in front of a stand-in broker.
type gatewayHub struct {
	hub    *localhub.Hub
	addons addonclient.Interface
	url    string
	broker *functest.Sink
	// reviews counts the TokenReviews the gateway sent the hub.
	reviews *atomic.Int64
	// accepted counts the posts the gateway answered 202.
	accepted atomic.Int64
}

// countReviews makes cfg's requests count the TokenReviews they create.
func countReviews(cfg *rest.Config) (*rest.Config, *atomic.Int64) {
	var n atomic.Int64
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripper(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodPost && strings.HasSuffix(r.URL.Path, "/tokenreviews") {
				n.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	return cfg, &n
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

func startGateway(t *testing.T, opts Options) *gatewayHub {
	t.Helper()
	ctx := t.Context()
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = hub.Stop() })
	if err := hub.InstallAddonCRDs(); err != nil {
		t.Fatal(err)
	}
	addons := addonclient.NewForConfigOrDie(hub.Config)
	for _, c := range []string{"cluster1", "cluster2", "cluster3"} {
		if _, err := hub.Kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: c}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if c == "cluster3" {
			continue
		}
		if _, err := addons.AddonV1alpha1().ManagedClusterAddOns(c).Create(ctx, &addonv1alpha1.ManagedClusterAddOn{ObjectMeta: metav1.ObjectMeta{Name: addon, Namespace: c}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	broker := functest.NewSink(t, nil)
	sender, err := function.NewSenderWithToken(broker.URL, "", "")
	if err != nil {
		t.Fatal(err)
	}
	fn := function.New("agent-gateway", "test")
	cfg, reviews := countReviews(hub.Config)
	// 401s answered at once, so that tests of refusals take no longer than they must; one test
	// sets the delay.
	if opts.UnauthenticatedDelay == 0 {
		opts.UnauthenticatedDelay = -1
	}
	if opts.Table == nil {
		opts.Table = table
	}
	opts.Source = fn.Source()
	g, err := New(cfg, sender, opts, fn.Log, fn.Registry)
	if err != nil {
		t.Fatal(err)
	}
	gctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	g.Start(gctx)
	for g.Ready() != nil {
		time.Sleep(10 * time.Millisecond)
	}
	srv := httptest.NewServer(g.Handler(fn))
	t.Cleanup(srv.Close)
	return &gatewayHub{hub: hub, addons: addons, url: srv.URL, broker: broker, reviews: reviews}
}

// token mints a token of ServiceAccount ns/name (created if missing) for audience, living ttl.
func (h *gatewayHub) token(t *testing.T, ns, name, audience string, ttl time.Duration) string {
	t.Helper()
	_, err := h.hub.Kube.CoreV1().ServiceAccounts(ns).Create(t.Context(), &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	tr, err := h.hub.Kube.CoreV1().ServiceAccounts(ns).CreateToken(t.Context(), name, &authnv1.TokenRequest{Spec: authnv1.TokenRequestSpec{
		Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(ttl / time.Second))}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return tr.Status.Token
}

// post sends e with token and returns the status and the reply's body size and reason.
func (h *gatewayHub) post(t *testing.T, token string, e event.Event) (int, string) {
	t.Helper()
	req := functest.Request(t, h.url, e)
	if token != "" {
		req.Header.Set("Authorization", "Bearer "+token)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	body, _ := io.ReadAll(resp.Body)
	if resp.StatusCode == http.StatusAccepted {
		h.accepted.Add(1)
	}
	if resp.StatusCode >= 300 && len(body) >= contract.MaxRefusalBytes {
		t.Errorf("a %d answer of %d bytes, more than %d", resp.StatusCode, len(body), contract.MaxRefusalBytes)
	}
	return resp.StatusCode, string(body)
}

// scores is an agent's event of resource for clusters, valid for a minute.
func scores(resource string, clusters ...string) event.Event {
	e := cloudevents.NewEvent()
	e.SetID(uuid.NewString())
	e.SetSource("scoreflow/latency-scorer/" + clusters[0])
	e.SetType(contract.TypeScoreUpdated)
	e.SetTime(time.Now())
	e.SetExtension("scoreflowagent", "latency")
	e.SetExtension("scorer", "promql-scorer")
	valid := time.Now().Add(time.Minute).UTC().Truncate(time.Second)
	s := contract.ScoreUpdated{Resource: resource, ValidUntil: &valid}
	for _, c := range clusters {
		s.Items = append(s.Items, contract.ClusterScores{Cluster: c, Scores: []contract.Score{{Name: "registry", Value: 42}}})
	}
	_ = e.SetData(cloudevents.ApplicationJSON, s)
	return e
}

// The gateway forwards cluster1's agent's scores of cluster1, and only them: rewritten source,
// scoreflowresource set, the agent's other extensions dropped, same id, time and data. Everything
// else is refused with a small answer and nothing reaches the broker: scores of another cluster,
// of a resource or a type its addon may not send, tokens that are missing, forged, for another
// audience, living over an hour, of a ServiceAccount that is no agent or of a cluster whose addon
// is not enabled, and a body over the gateway's bound. A broker that does not take the event
// makes the answer 503.
func TestGatewayAdmitsAnAgentForItsOwnClusterOnly(t *testing.T) {
	h := startGateway(t, Options{})
	agent1 := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)

	e := scores("latency", "cluster1")
	if st, body := h.post(t, agent1, e); st != http.StatusAccepted {
		t.Fatalf("cluster1's agent scoring cluster1: %d %s, want 202", st, body)
	}
	got := h.broker.Take()
	if len(got) != 1 {
		t.Fatalf("the broker got %d events, want 1", len(got))
	}
	f := got[0]
	if f.Source() != "/scoreflow/agents/"+addon+"/cluster1" || f.ID() != e.ID() || !f.Time().Equal(e.Time()) || string(f.Data()) != string(e.Data()) {
		t.Errorf("forwarded %s %s %v %s; want source /scoreflow/agents/%s/cluster1 and the agent's id %s, time and data", f.Source(), f.ID(), f.Time(), f.Data(), addon, e.ID())
	}
	if ext := f.Extensions(); ext[contract.ExtResource] != "latency" || len(ext) != 1 {
		t.Errorf("forwarded extensions %v, want only %s=latency", ext, contract.ExtResource)
	}
	// Without a validUntil the scores are forwarded valid for DefaultMaxScoreValidity: the data
	// is the agent's with that added.
	e = scores("latency", "cluster1")
	_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"resource":"latency","items":[{"cluster":"cluster1","scores":[{"name":"registry","value":42}]}]}`))
	if st, body := h.post(t, agent1, e); st != http.StatusAccepted {
		t.Fatalf("without validUntil: %d %s, want 202", st, body)
	}
	if got = h.broker.Take(); len(got) != 1 {
		t.Fatalf("the broker got %d events, want 1", len(got))
	}
	s, err := contract.DecodeScoreUpdated(&got[0])
	if err != nil {
		t.Fatal(err)
	}
	if s.ValidUntil == nil || s.ValidUntil.After(time.Now().Add(DefaultMaxScoreValidity)) || s.ValidUntil.Before(time.Now().Add(DefaultMaxScoreValidity-time.Minute)) ||
		len(s.Items) != 1 || s.Items[0].Scores[0] != (contract.Score{Name: "registry", Value: 42}) {
		t.Errorf("forwarded %s; want the agent's scores valid for %s", got[0].Data(), DefaultMaxScoreValidity)
	}

	for _, c := range []struct {
		name, token string
		e           event.Event
		status      int
		reason      string
	}{
		{"scores of cluster2", agent1, scores("latency", "cluster2"), http.StatusForbidden, "Forbidden"},
		{"scores of cluster1 and cluster2", agent1, scores("latency", "cluster1", "cluster2"), http.StatusForbidden, "Forbidden"},
		{"another resource", agent1, scores("cpu-idle", "cluster1"), http.StatusForbidden, "Forbidden"},
		{"another type", agent1, func() event.Event {
			e := scores("latency", "cluster1")
			e.SetType("io.scoreflow.optimize.requested")
			return e
		}(), http.StatusForbidden, "Forbidden"},
		{"invalid scores", agent1, func() event.Event {
			e := scores("latency", "cluster1")
			_ = e.SetData(cloudevents.ApplicationJSON, []byte(`{"resource":"latency","items":[{"cluster":"cluster1","scores":[{"name":"r","value":500}]}]}`))
			return e
		}(), http.StatusBadRequest, "OutOfRange"},
		{"no token", "", scores("latency", "cluster1"), http.StatusUnauthorized, "Unauthenticated"},
		{"not a JWT", "abc", scores("latency", "cluster1"), http.StatusUnauthorized, "Unauthenticated"},
		{"forged with the agent's claims", authtest.Forge(t, agent1, true), scores("latency", "cluster1"), http.StatusUnauthorized, "Unauthenticated"},
		{"for another audience", h.token(t, "cluster1", addon, "eventing.knative.dev/broker/scoreflow/scoreflow", time.Hour), scores("latency", "cluster1"), http.StatusUnauthorized, "Unauthenticated"},
		{"living two hours", h.token(t, "cluster1", addon, hubtoken.Audience, 2*time.Hour), scores("latency", "cluster1"), http.StatusUnauthorized, "Unauthenticated"},
		{"another ServiceAccount of cluster1", h.token(t, "cluster1", "score-writer", hubtoken.Audience, time.Hour), scores("latency", "cluster1"), http.StatusForbidden, "NotAllowed"},
		{"the addon not enabled for cluster3", h.token(t, "cluster3", addon, hubtoken.Audience, time.Hour), scores("latency", "cluster3"), http.StatusForbidden, "NotAllowed"},
	} {
		if st, body := h.post(t, c.token, c.e); st != c.status || !strings.Contains(body, `"reason":"`+c.reason+`"`) {
			t.Errorf("%s: %d %s; want %d and reason %s", c.name, st, body, c.status, c.reason)
		}
	}
	big := scores("latency", "cluster1")
	_ = big.SetData(cloudevents.ApplicationJSON, []byte(`{"resource":"latency","items":[],"pad":"`+strings.Repeat("x", MaxEventBytes)+`"}`))
	if st, _ := h.post(t, agent1, big); st != http.StatusRequestEntityTooLarge {
		t.Errorf("a body over %d bytes: %d, want 413", MaxEventBytes, st)
	}
	if n := len(h.broker.Take()); n != 0 {
		t.Errorf("%d refused events reached the broker", n)
	}

	h.broker.Answer(http.StatusServiceUnavailable)
	if st, _ := h.post(t, agent1, scores("latency", "cluster1")); st != http.StatusServiceUnavailable {
		t.Errorf("the broker down: %d, want 503 so the agent sends again", st)
	}
}

// Disabling the addon for cluster1 (deleting its ManagedClusterAddOn) refuses its agent's
// already-minted token at once; deleting the agent's ServiceAccount alone (what the garbage
// collector does after) refuses it within the TokenReview cache's lifetime. Both measured.
func TestGatewayCutsOffARevokedAgent(t *testing.T) {
	h := startGateway(t, Options{})
	ctx := t.Context()
	agent1 := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)
	agent2 := h.token(t, "cluster2", addon, hubtoken.Audience, time.Hour)
	for _, tok := range []string{agent1, agent2} {
		if st, body := h.post(t, tok, scores("latency", map[string]string{agent1: "cluster1", agent2: "cluster2"}[tok])); st != http.StatusAccepted {
			t.Fatalf("before revocation: %d %s", st, body)
		}
	}

	start := time.Now()
	if err := h.addons.AddonV1alpha1().ManagedClusterAddOns("cluster1").Delete(ctx, addon, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cut := waitRefused(t, h, agent1, "cluster1", 60*time.Second)
	t.Logf("cluster1's agent refused %s after its addon was disabled", cut.Sub(start).Round(time.Millisecond))
	if d := cut.Sub(start); d > 5*time.Second {
		t.Errorf("cluster1's agent was refused only %s after its addon was disabled", d)
	}

	start = time.Now()
	if err := h.hub.Kube.CoreV1().ServiceAccounts("cluster2").Delete(ctx, addon, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	cut = waitRefused(t, h, agent2, "cluster2", 60*time.Second)
	t.Logf("cluster2's agent refused %s after its ServiceAccount was deleted", cut.Sub(start).Round(time.Millisecond))
	if d := cut.Sub(start); d > ReviewCacheTTL+5*time.Second {
		t.Errorf("cluster2's agent was refused only %s after its ServiceAccount was deleted, more than the cache's %s", d, ReviewCacheTTL)
	}
	// The API server's no is remembered as its yes is: the refused token, sent again, costs it
	// nothing more.
	before := h.reviews.Load()
	for range 20 {
		if st, body := h.post(t, agent2, scores("latency", "cluster2")); st != http.StatusUnauthorized {
			t.Fatalf("cluster2's revoked agent: %d %s", st, body)
		}
	}
	if n := h.reviews.Load() - before; n > 0 {
		t.Errorf("20 requests with a token the API server refused made %d more TokenReviews", n)
	}
}

// Tokens the hub never signed cost it nothing: a flood of tokens copying a real agent's claims,
// each with a fresh jti and a signature no key made, is refused 401 by the gateway itself, with no
// TokenReview; the agent's own token is reviewed once and then reused.
func TestForgedTokensCostTheHubNothing(t *testing.T) {
	h := startGateway(t, Options{})
	agent1 := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)
	if st, body := h.post(t, agent1, scores("latency", "cluster1")); st != http.StatusAccepted {
		t.Fatalf("the agent: %d %s", st, body)
	}
	if n := h.reviews.Load(); n != 1 {
		t.Fatalf("%d TokenReviews for the agent's first event, want 1", n)
	}
	for i := range 50 {
		forged, err := authtest.CopyClaims(agent1, uuid.NewString())
		if err != nil {
			t.Fatal(err)
		}
		if st, body := h.post(t, forged, scores("latency", "cluster1")); st != http.StatusUnauthorized || !strings.Contains(body, "signature not verified") {
			t.Fatalf("forged token %d: %d %s, want 401 signature not verified", i, st, body)
		}
	}
	if st, body := h.post(t, agent1, scores("latency", "cluster1")); st != http.StatusAccepted {
		t.Fatalf("the agent after the forged tokens: %d %s", st, body)
	}
	if n := h.reviews.Load(); n != 1 {
		t.Errorf("%d TokenReviews after 50 forged tokens, want the agent's 1 only", n)
	}
	if n := len(h.broker.Take()); n != 2 {
		t.Errorf("%d events forwarded, want the agent's 2", n)
	}
}

// An agent that mints new tokens as fast as it can gets only its own budget of TokenReviews
// (429 beyond it, which it may retry), and another agent's first event is admitted meanwhile.
func TestAnAgentsTokenReviewsAreBudgeted(t *testing.T) {
	h := startGateway(t, Options{})
	const n = 20
	tokens := make([]string, n)
	for i := range tokens {
		tokens[i] = h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)
	}
	agent2 := h.token(t, "cluster2", addon, hubtoken.Audience, time.Hour)
	start := time.Now()
	codes := make(chan int, n)
	for _, tok := range tokens {
		go func() {
			st, _ := h.post(t, tok, scores("latency", "cluster1"))
			codes <- st
		}()
	}
	other := time.Now()
	if st, body := h.post(t, agent2, scores("latency", "cluster2")); st != http.StatusAccepted {
		t.Errorf("cluster2's agent while cluster1's mints tokens: %d %s", st, body)
	}
	if d := time.Since(other); d > time.Second {
		t.Errorf("cluster2's agent waited %s while cluster1's minted tokens", d)
	}
	admitted, limited := 0, 0
	for range n {
		switch st := <-codes; st {
		case http.StatusAccepted:
			admitted++
		case http.StatusTooManyRequests:
			limited++
		default:
			t.Errorf("a token of cluster1's agent: %d, want 202 or 429", st)
		}
	}
	elapsed := time.Since(start)
	// cluster2's one review, and cluster1's burst and rate over the time it took.
	bound := 1 + SubjectReviewBurst + int64(SubjectReviewRate*elapsed.Seconds()) + 1
	t.Logf("%d of cluster1's %d new tokens admitted, %d answered 429, %d TokenReviews in %s", admitted, n, limited, h.reviews.Load(), elapsed.Round(time.Millisecond))
	if got := h.reviews.Load(); got > bound {
		t.Errorf("%d TokenReviews in %s, more than cluster1's budget allows (%d)", got, elapsed.Round(time.Millisecond), bound)
	}
	if limited == 0 {
		t.Error("no token of cluster1's was answered 429")
	}
}

// One agent that opens two requests and never finishes their bodies holds only its own share of
// the gateway's admission budget: another agent's events are admitted at once, not answered 503.
func TestAStallingAgentDoesNotHoldUpOthers(t *testing.T) {
	h := startGateway(t, Options{})
	agent1 := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)
	agent2 := h.token(t, "cluster2", addon, hubtoken.Audience, time.Hour)
	for i := range 2 {
		c, err := net.Dial("tcp", strings.TrimPrefix(h.url, "http://"))
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		fmt.Fprintf(c, "POST / HTTP/1.1\r\nHost: x\r\nAuthorization: Bearer %s\r\nCe-Specversion: 1.0\r\nCe-Id: stall-%d\r\nCe-Source: s\r\n"+
			"Ce-Type: %s\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n1\r\n{\r\n", agent1, i, contract.TypeScoreUpdated)
	}
	time.Sleep(500 * time.Millisecond) // both admitted and waiting for their bodies
	for range 3 {
		start := time.Now()
		if st, body := h.post(t, agent2, scores("latency", "cluster2")); st != http.StatusAccepted || time.Since(start) > 2*time.Second {
			t.Errorf("cluster2's agent while cluster1's stalls two requests: %d after %s %s, want 202 at once", st, time.Since(start).Round(time.Millisecond), body)
		}
	}
	if n := len(h.broker.Take()); n != 3 {
		t.Errorf("%d events forwarded, want cluster2's 3", n)
	}
}

// A flood of forged tokens is answered one per second per connection: 50 connections sending
// as fast as they are answered get about 50 answers a second, all 401, while an agent's events are
// admitted at once.
func TestForgedTokensAreAnsweredSlowly(t *testing.T) {
	h := startGateway(t, Options{UnauthenticatedDelay: time.Second})
	agent1 := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)
	if st, body := h.post(t, agent1, scores("latency", "cluster1")); st != http.StatusAccepted {
		t.Fatalf("the agent: %d %s", st, body)
	}
	const conns, lasting = 50, 3 * time.Second
	var answered, unauthorized atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for time.Since(start) < lasting {
				forged, err := authtest.CopyClaims(agent1, uuid.NewString())
				if err != nil {
					t.Error(err)
					return
				}
				req := functest.Request(t, h.url, scores("latency", "cluster1"))
				req.Header.Set("Authorization", "Bearer "+forged)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				answered.Add(1)
				if resp.StatusCode == http.StatusUnauthorized {
					unauthorized.Add(1)
				}
			}
		}()
	}
	for range 10 {
		sent := time.Now()
		if st, body := h.post(t, agent1, scores("latency", "cluster1")); st != http.StatusAccepted || time.Since(sent) > 500*time.Millisecond {
			t.Errorf("the agent during the flood: %d after %s %s, want 202 at once", st, time.Since(sent).Round(time.Millisecond), body)
		}
		time.Sleep(100 * time.Millisecond)
	}
	wg.Wait()
	took := time.Since(start)
	t.Logf("%d connections sending forged tokens for %s: %d answers", conns, took.Round(time.Millisecond), answered.Load())
	if max := int64(conns * (took/time.Second + 1)); answered.Load() > max || unauthorized.Load() != answered.Load() {
		t.Errorf("%d answers (%d of them 401) in %s; want only 401s, at most one a second per connection (%d)", answered.Load(), unauthorized.Load(), took.Round(time.Millisecond), max)
	}
}

// Tokens the gateway has not seen before are verified at most VerifyRate a second, however many
// arrive at once: with 401s answered without delay, 50 connections sending forged tokens as fast
// as they are answered get about VerifyRate answers a second, and an agent whose token was
// admitted is served at once meanwhile.
func TestNewTokensAreVerifiedAtABoundedRate(t *testing.T) {
	h := startGateway(t, Options{})
	agent1 := h.token(t, "cluster1", addon, hubtoken.Audience, time.Hour)
	if st, body := h.post(t, agent1, scores("latency", "cluster1")); st != http.StatusAccepted {
		t.Fatalf("the agent: %d %s", st, body)
	}
	const conns, lasting = 50, 2 * time.Second
	var answered atomic.Int64
	var wg sync.WaitGroup
	start := time.Now()
	for range conns {
		wg.Add(1)
		go func() {
			defer wg.Done()
			client := &http.Client{Transport: &http.Transport{MaxIdleConnsPerHost: 1}}
			for time.Since(start) < lasting {
				forged, err := authtest.CopyClaims(agent1, uuid.NewString())
				if err != nil {
					t.Error(err)
					return
				}
				req := functest.Request(t, h.url, scores("latency", "cluster1"))
				req.Header.Set("Authorization", "Bearer "+forged)
				resp, err := client.Do(req)
				if err != nil {
					t.Error(err)
					return
				}
				_ = resp.Body.Close()
				if resp.StatusCode != http.StatusUnauthorized {
					t.Errorf("a forged token: %d, want 401", resp.StatusCode)
					return
				}
				answered.Add(1)
			}
		}()
	}
	time.Sleep(lasting / 2)
	sent := time.Now()
	if st, body := h.post(t, agent1, scores("latency", "cluster1")); st != http.StatusAccepted || time.Since(sent) > 500*time.Millisecond {
		t.Errorf("the agent during the flood: %d after %s %s, want 202 at once", st, time.Since(sent).Round(time.Millisecond), body)
	}
	wg.Wait()
	took := time.Since(start)
	bound := VerifyBurst + int64(VerifyRate*took.Seconds()) + conns
	t.Logf("%d connections sending forged tokens for %s: %d answers (bound %d)", conns, took.Round(time.Millisecond), answered.Load(), bound)
	if answered.Load() > bound {
		t.Errorf("%d forged tokens verified in %s, more than VerifyRate allows (%d)", answered.Load(), took.Round(time.Millisecond), bound)
	}
}

func waitRefused(t *testing.T, h *gatewayHub, token, cluster string, within time.Duration) time.Time {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		st, body := h.post(t, token, scores("latency", cluster))
		switch {
		case st == http.StatusForbidden || st == http.StatusUnauthorized:
			return time.Now()
		case st != http.StatusAccepted:
			t.Fatalf("%s: %d %s", cluster, st, body)
		case time.Now().After(deadline):
			t.Fatalf("%s's agent still admitted after %s", cluster, within)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// A table is loaded strictly and refused when the gateway could not enforce it.
func TestLoadTable(t *testing.T) {
	dir := t.TempDir()
	for name, c := range map[string]struct {
		yaml string
		ok   bool
	}{
		"good":                      {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n  resources: [latency]\n", true},
		"misspelt field":            {"agents:\n- addon: a\n  type: [io.scoreflow.score.updated]\n  resources: [latency]\n", false},
		"no resources":              {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n", false},
		"a type it can't check":     {"agents:\n- addon: a\n  types: [io.scoreflow.optimize.requested]\n  resources: [x]\n", false},
		"bad resource name":         {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n  resources: [Not_A_Name]\n", false},
		"addon twice":               {"agents:\n- {addon: a, types: [io.scoreflow.score.updated], resources: [x]}\n- {addon: a, types: [io.scoreflow.score.updated], resources: [y]}\n", false},
		"empty":                     {"agents: []\n", false},
		"resources from a template": {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n  resourcesFrom: {addOnTemplate: a, dynamicScorers: true}\n", true},
		"resources and from":        {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n  resources: [x]\n  resourcesFrom: {addOnTemplate: a, dynamicScorers: true}\n", false},
		"from two ways":             {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n  resourcesFrom: {addOnTemplate: a, dynamicScorers: true, latencyConfig: {configMap: c, key: k}}\n", false},
		"from no way":               {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n  resourcesFrom: {addOnTemplate: a}\n", false},
		"from no template":          {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n  resourcesFrom: {latencyConfig: {configMap: c, key: k}}\n", false},
		"from a bad key":            {"agents:\n- addon: a\n  types: [io.scoreflow.score.updated]\n  resourcesFrom: {addOnTemplate: a, latencyConfig: {configMap: c, key: 'a/b'}}\n", false},
	} {
		p := filepath.Join(dir, strings.ReplaceAll(name, " ", "-")+".yaml")
		if err := os.WriteFile(p, []byte(c.yaml), 0o644); err != nil {
			t.Fatal(err)
		}
		if _, err := LoadTable(p); (err == nil) != c.ok {
			t.Errorf("%s: error %v, want ok=%v", name, err, c.ok)
		}
	}
}

// Claims that could not be an agent's token are refused without a TokenReview.
func TestIdentityOf(t *testing.T) {
	for sub, want := range map[string]string{
		"system:serviceaccount:cluster1:" + addon: "cluster1/" + addon,
		"system:serviceaccount:Cluster1:" + addon: "",
		"system:serviceaccount:cluster1":          "",
		"user:cluster1:" + addon:                  "",
	} {
		id, ok := identityOf(sub)
		got := ""
		if ok {
			got = fmt.Sprintf("%s/%s", id.Cluster, id.Addon)
		}
		if got != want {
			t.Errorf("%s: %q, want %q", sub, got, want)
		}
	}
}
