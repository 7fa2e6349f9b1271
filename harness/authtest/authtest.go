// Package authtest gives tests Kubernetes-issued identities on a local hub: ServiceAccount tokens
// from the real TokenRequest API for a chosen audience, the files a function needs to read the API
// server's OIDC discovery the way a pod does, and tokens with the same claims signed by a key the
// cluster never issued (or by none).
package authtest

import (
	"context"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"encoding/base64"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	jose "github.com/go-jose/go-jose/v4"
	"github.com/go-jose/go-jose/v4/jwt"
	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/utils/ptr"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/function"
)

// MinTokenTTL is the shortest lifetime the TokenRequest API grants.
const MinTokenTTL = 10 * time.Minute

// Subject is the token subject of a ServiceAccount.
func Subject(namespace, name string) string {
	return "system:serviceaccount:" + namespace + ":" + name
}

// Token returns a token the API server issues to ServiceAccount namespace/name (created if
// missing) for audience (empty: the API server's own, as a pod's mounted token), valid for
// MinTokenTTL.
func Token(t testing.TB, kube kubernetes.Interface, namespace, name, audience string) string {
	t.Helper()
	ctx := context.Background()
	ensureServiceAccount(t, kube, namespace, name)
	spec := authenticationv1.TokenRequestSpec{ExpirationSeconds: ptr.To(int64(MinTokenTTL / time.Second))}
	if audience != "" {
		spec.Audiences = []string{audience}
	}
	tr, err := kube.CoreV1().ServiceAccounts(namespace).CreateToken(ctx, name, &authenticationv1.TokenRequest{Spec: spec}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("token for %s/%s: %v", namespace, name, err)
	}
	return tr.Status.Token
}

func ensureServiceAccount(t testing.TB, kube kubernetes.Interface, namespace, name string) {
	t.Helper()
	ctx := context.Background()
	_, err := kube.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
	_, err = kube.CoreV1().ServiceAccounts(namespace).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{})
	if err != nil && !apierrors.IsAlreadyExists(err) {
		t.Fatal(err)
	}
}

// DiscoveryIdentity is the ServiceAccount whose token a test function reads discovery with, as a
// pod reads it with its own mounted token.
const DiscoveryIdentity = "scoreflow-function"

// PodFiles writes what a pod has mounted (its ServiceAccount token and the cluster CA) for a
// function that verifies callers, and returns the options pointing at them and at the hub's API
// server. The hub's RBAC lets any ServiceAccount read discovery and keys
// (system:service-account-issuer-discovery), and nothing lets an anonymous caller.
func PodFiles(t testing.TB, hub *localhub.Hub, audience string, subjects ...string) function.AuthOptions {
	t.Helper()
	dir := t.TempDir()
	tok := Token(t, hub.Kube, "default", DiscoveryIdentity, "")
	tokenFile, caFile := filepath.Join(dir, "token"), filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(tokenFile, []byte(tok), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(caFile, hub.Config.CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	return function.AuthOptions{Audience: audience, Subjects: subjects, DiscoveryURL: hub.Config.Host, TokenFile: tokenFile, CAFile: caFile}
}

// Forge returns a token with the claims of token, signed by a fresh key of the same algorithm that
// the cluster never had. keepKeyID keeps token's key id (the verifier finds that key, and the signature fails);
// otherwise the key id is one the cluster does not publish.
func Forge(t testing.TB, token string, keepKeyID bool) string {
	t.Helper()
	kid := "not-issued-by-the-cluster"
	if keepKeyID {
		kid = KeyID(t, token)
	}
	return ForgeWithKeyID(t, token, kid)
}

// ForgeWithKeyID returns a token with the claims of token, signed by a fresh key of the same
// algorithm that the cluster never had, naming key id kid.
func ForgeWithKeyID(t testing.TB, token, kid string) string {
	t.Helper()
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	var claims map[string]any
	if err := parsed.UnsafeClaimsWithoutVerification(&claims); err != nil {
		t.Fatal(err)
	}
	alg := jose.SignatureAlgorithm(parsed.Headers[0].Algorithm)
	var key any
	switch alg {
	case jose.ES256:
		key, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case jose.RS256:
		key, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		t.Fatalf("token signed with %s", alg)
	}
	if err != nil {
		t.Fatal(err)
	}
	signer, err := jose.NewSigner(jose.SigningKey{Algorithm: alg, Key: key},
		(&jose.SignerOptions{}).WithType("JWT").WithHeader("kid", kid))
	if err != nil {
		t.Fatal(err)
	}
	forged, err := jwt.Signed(signer).Claims(claims).Serialize()
	if err != nil {
		t.Fatal(err)
	}
	return forged
}

// KeyID is the key id in token's header.
func KeyID(t testing.TB, token string) string {
	t.Helper()
	parsed, err := jwt.ParseSigned(token, []jose.SignatureAlgorithm{jose.RS256, jose.ES256})
	if err != nil {
		t.Fatal(err)
	}
	return parsed.Headers[0].KeyID
}

// CopyClaims returns token's header and claims with its jti replaced by jti, under a signature of
// the same length that no key made: what a flood of forged tokens looks like when it copies a
// real token's claims and makes each one new. It costs no signing, so a benchmark can make one
// per request.
func CopyClaims(token, jti string) (string, error) {
	parts := strings.Split(token, ".")
	if len(parts) != 3 {
		return "", errors.New("not a compact JWT")
	}
	payload, err := base64.RawURLEncoding.DecodeString(parts[1])
	if err != nil {
		return "", err
	}
	var claims map[string]any
	if err := json.Unmarshal(payload, &claims); err != nil {
		return "", err
	}
	claims["jti"] = jti
	if payload, err = json.Marshal(claims); err != nil {
		return "", err
	}
	sig := make([]byte, base64.RawURLEncoding.DecodedLen(len(parts[2])))
	if _, err := rand.Read(sig); err != nil {
		return "", err
	}
	return parts[0] + "." + base64.RawURLEncoding.EncodeToString(payload) + "." + base64.RawURLEncoding.EncodeToString(sig), nil
}
