package deploy

import (
	"net/url"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	servingv1 "knative.dev/serving/pkg/apis/serving/v1"

	"github.com/scoreflow/scoreflow/harness/manifests"
)

// TestProjectedTokensReachTheirAudience: a Service that calls another function itself (the
// mcp-server calls the optimizer's JSON API) presents its account's projected token. Each such
// token is named by an env var of the container (the file the function reads), and is for the
// audience of the function a URL in the same container points at, scoreflow/<service>; where the
// oidc variant (config/oidc) makes that function verify callers, it expects exactly that audience
// and admits this Service's account. Otherwise the caller is refused with 401 or 403 only once it
// runs on a cluster with sender identity on.
func TestProjectedTokensReachTheirAudience(t *testing.T) {
	hub := load(t, setHub)
	oidc := load(t, setHubOIDC)
	found := 0
	for _, it := range hub.Services {
		spec := it.Object.Spec.Template.Spec
		c := spec.Containers[0]
		for _, m := range c.VolumeMounts {
			var v *corev1.Volume
			for i := range spec.Volumes {
				if spec.Volumes[i].Name == m.Name {
					v = &spec.Volumes[i]
				}
			}
			if v == nil || v.Projected == nil {
				continue
			}
			for _, src := range v.Projected.Sources {
				tok := src.ServiceAccountToken
				if tok == nil {
					continue
				}
				found++
				file := filepath.Join(m.MountPath, tok.Path)
				var tokenEnv string
				for _, e := range c.Env {
					if e.Value == file {
						tokenEnv = e.Name
					}
				}
				if tokenEnv == "" {
					t.Errorf("%s: the token for %q at %s is named by no env var: the function never presents it", it.Source, tok.Audience, file)
					continue
				}
				target := calledService(c.Env, hub)
				if target == nil {
					t.Errorf("%s: %s holds a token for %q, but no URL in its env names a Service of deploy/", it.Source, tokenEnv, tok.Audience)
					continue
				}
				if want := "scoreflow/" + target.Name; tok.Audience != want {
					t.Errorf("%s: %s holds a token for %q; the %s it calls expects %q", it.Source, tokenEnv, tok.Audience, target.Name, want)
				}
				verifier, ok := manifests.Find(oidc.Services, target.Namespace, target.Name)
				if !ok {
					t.Errorf("config/oidc has no Service %s", target.Name)
					continue
				}
				env := map[string]string{}
				for _, e := range verifier.Object.Spec.Template.Spec.Containers[0].Env {
					env[e.Name] = e.Value
				}
				if env["AUTH_OIDC"] != "true" {
					continue // the oidc variant does not make the target verify callers
				}
				account := serviceAccountUser(it.Object.Namespace, spec.ServiceAccountName)
				if env["AUTH_AUDIENCE"] != tok.Audience {
					t.Errorf("%s in config/oidc expects audience %q; %s presents %q", target.Name, env["AUTH_AUDIENCE"], it.Source, tok.Audience)
				}
				if !contains(splitList(env["AUTH_ALLOWED_SUBJECTS"]), account) {
					t.Errorf("%s in config/oidc admits %q, not %s, which %s runs as", target.Name, env["AUTH_ALLOWED_SUBJECTS"], account, it.Source)
				}
			}
		}
	}
	if found == 0 {
		t.Error("no Service of deploy/ presents a projected token: the mcp-server calls the optimizer with one")
	}
}

// calledService is the Service of s that a URL among env names (http://<name>.<ns>.svc...).
func calledService(env []corev1.EnvVar, s *manifests.Set) *servingv1.Service {
	for _, e := range env {
		u, err := url.Parse(e.Value)
		if err != nil || u.Scheme == "" {
			continue
		}
		parts := strings.Split(u.Hostname(), ".")
		if len(parts) < 3 || parts[2] != "svc" {
			continue
		}
		if svc, ok := manifests.Find(s.Services, parts[1], parts[0]); ok {
			return svc.Object
		}
	}
	return nil
}
