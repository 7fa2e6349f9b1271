package devrun

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"sort"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/scoreflow/scoreflow/harness/knlocal"
	"github.com/scoreflow/scoreflow/harness/manifests"
	"github.com/scoreflow/scoreflow/harness/proc"
)

// Function is a Knative Service or a Deployment (a source) from deploy/ as a local process: the
// binary its ko:// image names, its container env with ConfigMap and downward-API references
// resolved, and its ConfigMap volumes as files.
type Function struct {
	Namespace, Name string
	// Kind is its workload's: a Knative Service, which Knative resolves as an address, or a
	// Deployment, which only sends.
	Kind   schema.GroupVersionKind
	Binary string
	Env    map[string]string
	// Files are mounted ConfigMap contents: local path -> content.
	Files map[string][]byte
	// ServiceAccount is the identity its pod runs as; Tokens the projected ServiceAccount tokens
	// it mounts, by local path (the stack keeps them current, as a kubelet does).
	ServiceAccount string
	Tokens         map[string]corev1.ServiceAccountTokenProjection

	Port int
	URL  string
	// client reaches URL (with transport encryption on, trusting the local CA).
	client *http.Client
	cmd    *exec.Cmd
	done   chan error
	log    *os.File
}

// listen chooses the function's local address before it starts, so that its Service can point
// there while SinkBindings resolve: https when client trusts the CA of its certificate.
func (f *Function) listen(scheme string, client *http.Client) error {
	port, err := proc.FreePort()
	if err != nil {
		return err
	}
	f.Port, f.URL, f.client = port, fmt.Sprintf("%s://127.0.0.1:%d", scheme, port), client
	return nil
}

// Key is namespace/name, as a broker.Services key.
func (f *Function) Key() string { return f.Namespace + "/" + f.Name }

// Addressable reports whether Knative resolves f as an address (a Knative Service), which the
// stack then points at its local process; a Deployment's pods are reached by nothing.
func (f *Function) Addressable() bool { return f.Kind == knlocal.ServiceKind }

// functionsFrom builds a Function for every Knative Service and Deployment whose image is a
// ko:// path of this repository. Files of mounted ConfigMaps go under dir; env values that point
// into a mount point there instead.
func functionsFrom(set *manifests.Set, binDir, dir string) ([]*Function, error) {
	var out []*Function
	for _, w := range set.Workloads() {
		f, err := functionFrom(set, w, binDir, filepath.Join(dir, w.ObjectMeta.Name))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", w.Source, err)
		}
		if f != nil {
			out = append(out, f)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Name < out[j].Name })
	return out, nil
}

func functionFrom(set *manifests.Set, w manifests.Workload, binDir, dir string) (*Function, error) {
	spec := w.Template.Spec
	name, namespace := w.ObjectMeta.Name, w.ObjectMeta.Namespace
	if len(spec.Containers) != 1 {
		return nil, fmt.Errorf("%s %s has %d containers, want 1", w.Kind.Kind, name, len(spec.Containers))
	}
	c := spec.Containers[0]
	importPath, ok := manifests.KoImportPath(c.Image)
	if !ok {
		return nil, nil // not one of ours (cloudevents-player): not run locally
	}
	f := &Function{Namespace: namespace, Name: name, Kind: w.Kind, Binary: filepath.Join(binDir, path.Base(importPath)),
		Env: map[string]string{}, Files: map[string][]byte{}, ServiceAccount: spec.ServiceAccountName,
		Tokens: map[string]corev1.ServiceAccountTokenProjection{}}
	if f.ServiceAccount == "" {
		f.ServiceAccount = "default"
	}

	mounts := map[string]string{} // mount path -> local dir
	for _, m := range c.VolumeMounts {
		vol := findVolume(spec.Volumes, m.Name)
		if vol != nil && optionalSecrets(vol) {
			// Secrets are not part of deploy/: locally they are absent, as an optional Secret
			// nobody created is in a cluster. The mount point is an empty local directory.
			mounts[m.MountPath] = filepath.Join(dir, m.Name)
			continue
		}
		if vol != nil && serviceAccountTokens(vol) {
			local := filepath.Join(dir, m.Name)
			mounts[m.MountPath] = local
			for _, src := range vol.Projected.Sources {
				f.Tokens[filepath.Join(local, src.ServiceAccountToken.Path)] = *src.ServiceAccountToken
			}
			continue
		}
		if vol == nil || vol.ConfigMap == nil {
			return nil, fmt.Errorf("volume %q: only ConfigMap volumes, optional Secrets and projected ServiceAccount tokens run locally", m.Name)
		}
		cm, ok := manifests.Find(set.ConfigMaps, namespace, vol.ConfigMap.Name)
		if !ok {
			return nil, fmt.Errorf("volume %q: no ConfigMap %s", m.Name, vol.ConfigMap.Name)
		}
		local := filepath.Join(dir, m.Name)
		mounts[m.MountPath] = local
		for k, v := range cm.Object.Data {
			f.Files[filepath.Join(local, k)] = []byte(v)
		}
	}
	for _, from := range c.EnvFrom {
		if from.ConfigMapRef == nil {
			return nil, fmt.Errorf("envFrom: only ConfigMaps run locally")
		}
		cm, ok := manifests.Find(set.ConfigMaps, namespace, from.ConfigMapRef.Name)
		if !ok {
			return nil, fmt.Errorf("envFrom: no ConfigMap %s", from.ConfigMapRef.Name)
		}
		for k, v := range cm.Object.Data {
			f.Env[from.Prefix+k] = v
		}
	}
	for _, e := range c.Env {
		v, err := envValue(set, namespace, name, e)
		if err != nil {
			return nil, fmt.Errorf("env %s: %w", e.Name, err)
		}
		for mount, local := range mounts {
			if v == mount || strings.HasPrefix(v, mount+"/") {
				v = local + strings.TrimPrefix(v, mount)
			}
		}
		f.Env[e.Name] = v
	}
	return f, nil
}

// optionalSecrets reports whether a volume holds nothing but optional Secrets.
func optionalSecrets(v *corev1.Volume) bool {
	optional := func(b *bool) bool { return b != nil && *b }
	switch {
	case v.Secret != nil:
		return optional(v.Secret.Optional)
	case v.Projected != nil && len(v.Projected.Sources) > 0:
		for _, src := range v.Projected.Sources {
			if src.Secret == nil || !optional(src.Secret.Optional) {
				return false
			}
		}
		return true
	}
	return false
}

// serviceAccountTokens reports whether a volume holds nothing but projected ServiceAccount tokens.
func serviceAccountTokens(v *corev1.Volume) bool {
	if v.Projected == nil || len(v.Projected.Sources) == 0 {
		return false
	}
	for _, src := range v.Projected.Sources {
		if src.ServiceAccountToken == nil {
			return false
		}
	}
	return true
}

func findVolume(vols []corev1.Volume, name string) *corev1.Volume {
	for i := range vols {
		if vols[i].Name == name {
			return &vols[i]
		}
	}
	return nil
}

// envValue resolves a container's env var as a kubelet would for a pod of workload namespace/name
// (the downward API's metadata.name is the pod's, here the workload's name with -local).
func envValue(set *manifests.Set, namespace, name string, e corev1.EnvVar) (string, error) {
	switch {
	case e.ValueFrom == nil:
		return e.Value, nil
	case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.namespace":
		return namespace, nil
	case e.ValueFrom.FieldRef != nil && e.ValueFrom.FieldRef.FieldPath == "metadata.name":
		return name + "-local", nil
	case e.ValueFrom.ConfigMapKeyRef != nil:
		ref := e.ValueFrom.ConfigMapKeyRef
		cm, ok := manifests.Find(set.ConfigMaps, namespace, ref.Name)
		if !ok {
			return "", fmt.Errorf("no ConfigMap %s", ref.Name)
		}
		v, ok := cm.Object.Data[ref.Key]
		if !ok {
			return "", fmt.Errorf("ConfigMap %s has no key %s", ref.Name, ref.Key)
		}
		return v, nil
	}
	return "", fmt.Errorf("only values, ConfigMap keys and the pod's name and namespace run locally")
}

// start runs f on its port with this process's environment, its manifest's variables, then what
// the cluster injects (which wins, as on a cluster), logging to logDir/<name>.log, and waits until
// /readyz answers 200.
func (f *Function) start(ctx context.Context, injected []string, logDir string, ready time.Duration) error {
	// Owner-only, as the run's tokens are: a mounted file may hold what only the function is
	// meant to read, and the machine may have other users.
	for p, content := range f.Files {
		if err := os.MkdirAll(filepath.Dir(p), 0o700); err != nil {
			return err
		}
		if err := os.WriteFile(p, content, 0o600); err != nil {
			return err
		}
	}
	env := os.Environ()
	for k, v := range f.Env {
		env = append(env, k+"="+v)
	}
	env = append(env, injected...) // later entries win
	env = append(env, fmt.Sprintf("PORT=%d", f.Port), "ADDRESS=127.0.0.1")
	var err error
	if f.log, err = os.Create(filepath.Join(logDir, f.Name+".log")); err != nil {
		return err
	}
	f.cmd = exec.Command(f.Binary)
	f.cmd.Env = env
	f.cmd.Stdout, f.cmd.Stderr = f.log, f.log
	// Own process group, and SIGKILLed if scoreflow dies first: nothing outlives a run.
	f.cmd.SysProcAttr = &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
	if err := f.cmd.Start(); err != nil {
		return fmt.Errorf("start %s: %w (run `make build`?)", f.Binary, err)
	}
	f.done = make(chan error, 1)
	go func() { f.done <- f.cmd.Wait() }()
	return f.waitReady(ctx, ready)
}

func (f *Function) waitReady(ctx context.Context, timeout time.Duration) error {
	client := &http.Client{Timeout: time.Second}
	if f.client != nil {
		client.Transport = f.client.Transport
	}
	deadline := time.Now().Add(timeout)
	for {
		select {
		case err := <-f.done:
			f.done <- err
			return fmt.Errorf("%s exited before it was ready (%v); see %s", f.Name, err, f.log.Name())
		case <-ctx.Done():
			return ctx.Err()
		default:
		}
		if resp, err := client.Get(f.URL + "/readyz"); err == nil {
			_ = resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("%s not ready after %s; see %s", f.Name, timeout, f.log.Name())
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Stop sends SIGTERM to the function's process group and waits, then SIGKILL. Safe to call twice.
func (f *Function) Stop() {
	if f.cmd == nil || f.cmd.Process == nil {
		return
	}
	_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case err := <-f.done:
		f.done <- err
	case <-time.After(10 * time.Second):
		_ = syscall.Kill(-f.cmd.Process.Pid, syscall.SIGKILL)
		f.done <- <-f.done
	}
	if f.log != nil {
		_ = f.log.Close()
	}
}
