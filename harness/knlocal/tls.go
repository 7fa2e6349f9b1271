package knlocal

import (
	"context"
	"fmt"
	"os"
	"path/filepath"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/scoreflow/scoreflow/harness/localca"
)

// FeatureTransportEncryption is Knative's transport encryption flag (disabled, permissive, strict).
const FeatureTransportEncryption = "transport-encryption"

// StrictTLSFeatures turn transport encryption on in strict mode: Brokers, channels and Triggers
// publish only https addresses, and the broker ingress, filter and channel dispatcher refuse
// plain HTTP.
func StrictTLSFeatures() map[string]string {
	return map[string]string{FeatureTransportEncryption: "strict"}
}

func tlsOn(features map[string]string) bool {
	v := features[FeatureTransportEncryption]
	return v == "strict" || v == "permissive"
}

// localCATrustBundle is the trust-bundle ConfigMap (what trust-manager would write on a cluster)
// through which Knative's data plane trusts the local CA besides the CACerts of each address.
const localCATrustBundle = "scoreflow-local-ca"

// certificateDirs hold the cert-manager Certificates Knative's data plane reads its server
// Secrets from (ingress, filter, in-memory channel dispatcher), relative to the module's config/.
var certificateDirs = []string{
	filepath.Join("brokers", "mt-channel-broker-tls"),
	filepath.Join("channels", "in-memory-channel-tls"),
}

// serverSecrets stands in for cert-manager: for each Certificate among certs it issues, from ca, a
// kubernetes.io/tls Secret of the Certificate's secretName with its dnsNames (plus 127.0.0.1 and
// localhost, so a local client can post to the local port) and labels, holding tls.crt, tls.key
// and ca.crt as cert-manager's CA issuer writes them. Knative serves with tls.crt and tls.key and
// publishes ca.crt as the CACerts of the addresses it serves.
func serverSecrets(ca *localca.CA, certs []*unstructured.Unstructured) ([]*corev1.Secret, error) {
	var out []*corev1.Secret
	for _, c := range certs {
		if c.GetKind() != "Certificate" {
			continue
		}
		name, _, _ := unstructured.NestedString(c.Object, "spec", "secretName")
		dns, _, _ := unstructured.NestedStringSlice(c.Object, "spec", "dnsNames")
		labels, _, _ := unstructured.NestedStringMap(c.Object, "spec", "secretTemplate", "labels")
		if name == "" || len(dns) == 0 {
			return nil, fmt.Errorf("Certificate %s names no secretName or dnsNames", c.GetName())
		}
		crt, key, err := ca.Issue(append(dns, "127.0.0.1", "localhost")...)
		if err != nil {
			return nil, err
		}
		out = append(out, &corev1.Secret{
			ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: c.GetNamespace(), Labels: labels},
			Type:       corev1.SecretTypeTLS,
			Data:       map[string][]byte{corev1.TLSCertKey: crt, corev1.TLSPrivateKeyKey: key, "ca.crt": ca.PEM()},
		})
	}
	return out, nil
}

// certificateCRD is cert-manager's Certificate CRD, from the copy of cert-manager the eventing
// module carries (relative to the module root). With transport encryption on, the eventing
// controller's IntegrationSink and EventTransform reconcilers watch Certificates (a dynamic
// informer started from the config-features watcher, knative.dev/eventing
// pkg/certificates/certificate.go): without the CRD that informer never syncs, the watcher never
// starts, and the controller exits ("Failed to start configmap watcher"). The CRD alone is enough:
// nothing here asks cert-manager for a Certificate.
var certificateCRD = filepath.Join("third_party", "cert-manager", "01-cert-manager.yaml")

// setupTLS does, before Knative starts, what cert-manager with the knative-eventing-ca-issuer
// ClusterIssuer and trust-manager do on a cluster: a CA, the data plane's server Secrets, and a
// trust bundle of the CA. It also writes the CA where Knative's processes trust it as a system
// root (Env's SSL_CERT_FILE): behind an HTTP proxy Go's transport makes the TLS connection itself
// with the transport's TLS config, so the CACerts Knative puts into its own TLS dialer
// (knative.dev/eventing pkg/kncloudevents/http_client.go, DialTLSContext) are not used on hops
// through the service proxy; on a cluster there is no proxy and they are.
func (k *Knative) setupTLS(ctx context.Context, module string) error {
	config := filepath.Join(module, "config")
	cm, err := ReadFiles(filepath.Join(module, certificateCRD))
	if err != nil {
		return err
	}
	for _, o := range cm {
		if o.GetKind() == "CustomResourceDefinition" && o.GetName() == "certificates.cert-manager.io" {
			if err := k.Applier.Apply(ctx, o); err != nil {
				return err
			}
			if err := k.waitEstablished(ctx, []*unstructured.Unstructured{o}); err != nil {
				return err
			}
		}
	}
	ca, err := localca.New("scoreflow local knative-eventing-ca-issuer")
	if err != nil {
		return err
	}
	var certs []*unstructured.Unstructured
	for _, d := range certificateDirs {
		objs, err := ReadFiles(filepath.Join(config, d))
		if err != nil {
			return err
		}
		certs = append(certs, objs...)
	}
	secrets, err := serverSecrets(ca, certs)
	if err != nil {
		return err
	}
	for _, s := range secrets {
		if _, err := k.kube.CoreV1().Secrets(s.Namespace).Create(ctx, s, metav1.CreateOptions{}); err != nil {
			return fmt.Errorf("TLS Secret %s: %w", s.Name, err)
		}
	}
	bundle := &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: localCATrustBundle, Namespace: SystemNamespace,
			Labels: map[string]string{"networking.knative.dev/trust-bundle": "true"}},
		Data: map[string]string{"ca.crt": string(ca.PEM())},
	}
	if _, err := k.kube.CoreV1().ConfigMaps(SystemNamespace).Create(ctx, bundle, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	k.caFile = filepath.Join(k.state, "local-ca.crt")
	if err := os.WriteFile(k.caFile, ca.PEM(), 0o644); err != nil {
		return err
	}
	k.CA = ca
	k.IngressTLSURL = fmt.Sprintf("https://127.0.0.1:%d", k.ports.ingressTLS)
	return nil
}

// IssueServiceCert stands in for Serving's cluster-local-domain-tls: a server certificate for the
// Service namespace/name (its cluster-local names, and 127.0.0.1, where its local process
// listens), written as cert.pem and key.pem into dir. It needs transport encryption on.
func (k *Knative) IssueServiceCert(namespace, name, dir string) (certFile, keyFile string, err error) {
	if k.CA == nil {
		return "", "", fmt.Errorf("transport encryption is off: no CA issues certificates")
	}
	crt, key, err := k.CA.Issue(name+"."+namespace+".svc."+ClusterDomain, name+"."+namespace+".svc", name+"."+namespace, "127.0.0.1", "localhost")
	if err != nil {
		return "", "", err
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return "", "", err
	}
	certFile, keyFile = filepath.Join(dir, "cert.pem"), filepath.Join(dir, "key.pem")
	if err := os.WriteFile(keyFile, key, 0o600); err != nil {
		return "", "", err
	}
	return certFile, keyFile, os.WriteFile(certFile, crt, 0o644)
}
