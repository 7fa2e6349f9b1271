package localhub

import (
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
// server restarts signing with a new key and still accepting (and publishing in its JWKS) every
// earlier one, so tokens already issued stay valid. It returns when the server answers again.
func (h *Hub) RotateServiceAccountKey() error {
	api := h.Env.ControlPlane.GetAPIServer()
	dir := api.CertDir
	key, err := rsa.GenerateKey(rand.Reader, 2048)
	if err != nil {
		return err
	}
	pub, err := x509.MarshalPKIXPublicKey(&key.PublicKey)
	if err != nil {
		return err
	}
	n := time.Now().UnixNano()
	keyFile, pubFile := filepath.Join(dir, fmt.Sprintf("sa-%d.key", n)), filepath.Join(dir, fmt.Sprintf("sa-%d.pub", n))
	if err := os.WriteFile(keyFile, pem.EncodeToMemory(&pem.Block{Type: "RSA PRIVATE KEY", Bytes: x509.MarshalPKCS1PrivateKey(key)}), 0o600); err != nil {
		return err
	}
	if err := os.WriteFile(pubFile, pem.EncodeToMemory(&pem.Block{Type: "PUBLIC KEY", Bytes: pub}), 0o600); err != nil {
		return err
	}
	args := api.Configure()
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
