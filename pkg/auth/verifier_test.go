package auth_test

import (
	"context"
	"errors"
	"net/http"
	"strings"
	"testing"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"

	"github.com/scoreflow/scoreflow/harness/authtest"
	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/auth"
	"github.com/scoreflow/scoreflow/pkg/contract"
)

const audience = "scoreflow/test"

// Every way a token fails is told by its sentinel and answered by it: 401 with the sentinel's
// text, which names neither the issuer nor the audience expected; a real token verifies and says
// who it is.
func TestVerifyClassifiesEveryFailureByItsSentinel(t *testing.T) {
	hub, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	defer func() { _ = hub.Stop() }()
	client, err := rest.HTTPClientFor(hub.Config)
	if err != nil {
		t.Fatal(err)
	}
	opts := auth.Options{Audience: audience, DiscoveryURL: hub.Config.Host, Client: client, MaxLifetime: 20 * time.Minute}
	v, err := auth.NewVerifier(opts)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	good := authtest.Token(t, hub.Kube, "ns1", "caller", audience)
	tok, err := v.Verify(ctx, good)
	if err != nil {
		t.Fatalf("a real token: %v", err)
	}
	if tok.Subject != authtest.Subject("ns1", "caller") || tok.ID == "" || tok.Expiry.Sub(tok.IssuedAt) != authtest.MinTokenTTL {
		t.Errorf("verified %+v", tok)
	}

	mint := func(ttl time.Duration) string {
		tr, err := hub.Kube.CoreV1().ServiceAccounts("ns1").CreateToken(ctx, "caller", &authenticationv1.TokenRequest{Spec: authenticationv1.TokenRequestSpec{
			Audiences: []string{audience}, ExpirationSeconds: ptr.To(int64(ttl / time.Second))}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		return tr.Status.Token
	}
	at := func(d time.Duration) *auth.Verifier {
		o := opts
		o.Now = func() time.Time { return time.Now().Add(d) }
		v, err := auth.NewVerifier(o)
		if err != nil {
			t.Fatal(err)
		}
		return v
	}
	for _, c := range []struct {
		name  string
		v     *auth.Verifier
		token string
		want  error
	}{
		{"not a JWT", v, "not-a-jwt", auth.ErrMalformed},
		{"too long", v, strings.Repeat("a", auth.MaxTokenBytes+1), auth.ErrMalformed},
		{"other audience", v, authtest.Token(t, hub.Kube, "ns1", "caller", "scoreflow/other"), auth.ErrWrongAudience},
		{"signed by another key under its key id", v, authtest.Forge(t, good, true), auth.ErrBadSignature},
		{"living longer than allowed", v, mint(time.Hour), auth.ErrTooLongLived},
		{"expired", at(authtest.MinTokenTTL + time.Minute), good, auth.ErrExpired},
		{"not valid yet", at(-time.Hour), good, auth.ErrNotYetValid},
	} {
		_, err := c.v.Verify(ctx, c.token)
		if !errors.Is(err, c.want) {
			t.Errorf("%s: %v, want %v", c.name, err, c.want)
			continue
		}
		ref := auth.Refuse(err)
		if ref.Status != http.StatusUnauthorized || ref.Reason != auth.ReasonUnauthenticated || ref.Message != c.want.Error() {
			t.Errorf("%s: refused %d %s %q", c.name, ref.Status, ref.Reason, ref.Message)
		}
		if strings.Contains(ref.Message, audience) || strings.Contains(ref.Message, hub.Config.Host) {
			t.Errorf("%s: the refusal names what is expected: %q", c.name, ref.Message)
		}
	}

	// A configured issuer the API server does not name: nothing verifies, and it is transient
	// (503), as the API server's keys being away is.
	wrong := opts
	wrong.Issuer = "https://elsewhere.example"
	wv, err := auth.NewVerifier(wrong)
	if err != nil {
		t.Fatal(err)
	}
	_, err = wv.Verify(ctx, good)
	if !errors.Is(err, auth.ErrKeysUnavailable) || auth.Refuse(err).Status != http.StatusServiceUnavailable || auth.Refuse(err).Reason != contract.ReasonUnavailable {
		t.Errorf("another issuer configured: %v", err)
	}
}

func TestBearer(t *testing.T) {
	for h, want := range map[string]string{
		"Bearer abc":   "abc",
		"bearer  abc ": "abc",
		"Basic abc":    "",
		"Bearer":       "",
		"Bearer ":      "",
		"":             "",
	} {
		hdr := http.Header{}
		if h != "" {
			hdr.Set("Authorization", h)
		}
		got, err := auth.Bearer(hdr)
		if got != want || (want == "") != errors.Is(err, auth.ErrNoToken) {
			t.Errorf("%q: %q %v, want %q", h, got, err, want)
		}
	}
}

func TestMatchSubject(t *testing.T) {
	patterns := []string{"system:serviceaccount:a:b", "system:serviceaccount:trusted:*"}
	for sub, want := range map[string]bool{
		"system:serviceaccount:a:b":         true,
		"system:serviceaccount:a:bc":        false,
		"system:serviceaccount:trusted:x":   true,
		"system:serviceaccount:trusted-x:y": false,
	} {
		if got := auth.MatchSubject(patterns, sub); got != want {
			t.Errorf("%s: %v, want %v", sub, got, want)
		}
	}
}
