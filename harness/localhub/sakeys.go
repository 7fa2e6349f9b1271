package localhub

import (
	"crypto"
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/rsa"
	"crypto/x509"
	"encoding/pem"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"
)

// RotateServiceAccountKey rotates the API server's token signing key the way an operator does: the
// server restarts signing with a new key of the same type and still accepting (and publishing in
// its JWKS) every earlier one, so tokens already issued stay valid. It returns when the server
// answers again.
func (h *Hub) RotateServiceAccountKey() error {
	api := h.Env.ControlPlane.GetAPIServer()
	dir := api.CertDir
	args := api.Configure()
	current := args.Get("service-account-signing-key-file").Get([]string{filepath.Join(dir, "sa-signer.key")})
	keyPEM, pub, err := newKeyLike(current[len(current)-1])
	if err != nil {
		return err
	}
	n := time.Now().UnixNano()
	keyFile, pubFile := filepath.Join(dir, fmt.Sprintf("sa-%d.key", n)), filepath.Join(dir, fmt.Sprintf("sa-%d.pub", n))
	if err := os.WriteFile(keyFile, keyPEM, 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	// Append keeps envtest's default verification key (and any earlier rotation's) before the new one.
	args.Append("service-account-key-file", pubFile)
	args.Set("service-account-signing-key-file", keyFile)
	if err := h.CrashAPIServer(); err != nil {
		return err
	}
	return h.StartAPIServer()
}

// PublishKeysAtHost restarts the API server so that its OIDC discovery document names its keys at
// the address clients use (Config.Host), as --service-account-jwks-uri does on a cluster whose
// advertised address is not reachable by token verifiers. Idempotent.
func (h *Hub) PublishKeysAtHost() error {
	args := h.Env.ControlPlane.GetAPIServer().Configure()
	uri := strings.TrimSuffix(h.Config.Host, "/") + "/openid/v1/jwks"
	if got := args.Get("service-account-jwks-uri").Get(nil); len(got) == 1 && got[0] == uri {
		return nil
	}
	args.Set("service-account-jwks-uri", uri)
	if err := h.CrashAPIServer(); err != nil {
		return err
	}
	return h.StartAPIServer()
}

// newKeyLike returns a new private key (PKCS#8 PEM) of the type of the one in path, and its public
// key (PKIX DER).
func newKeyLike(path string) (keyPEM, pub []byte, err error) {
	raw, err := os.ReadFile(path)
	if err != nil {
		return nil, nil, err
	}
	block, _ := pem.Decode(raw)
	if block == nil {
		return nil, nil, fmt.Errorf("%s holds no PEM key", path)
	}
	var old any
	switch block.Type {
	case "EC PRIVATE KEY":
		old, err = x509.ParseECPrivateKey(block.Bytes)
	case "RSA PRIVATE KEY":
		old, err = x509.ParsePKCS1PrivateKey(block.Bytes)
	default:
		old, err = x509.ParsePKCS8PrivateKey(block.Bytes)
	}
	if err != nil {
		return nil, nil, fmt.Errorf("%s: %w", path, err)
	}
	var signer crypto.Signer
	switch old.(type) {
	case *ecdsa.PrivateKey:
		signer, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	case *rsa.PrivateKey:
		signer, err = rsa.GenerateKey(rand.Reader, 2048)
	default:
		return nil, nil, fmt.Errorf("%s: a %T, not an ECDSA or RSA key", path, old)
	}
	if err != nil {
		return nil, nil, err
	}
	der, err := x509.MarshalPKCS8PrivateKey(signer)
	if err != nil {
		return nil, nil, err
	}
	pub, err = x509.MarshalPKIXPublicKey(signer.Public())
	return pem.EncodeToMemory(&pem.Block{Type: "PRIVATE KEY", Bytes: der}), pub, err
}
