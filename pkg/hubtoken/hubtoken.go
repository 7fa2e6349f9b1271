// Package hubtoken keeps, for an OCM addon agent on a managed cluster, the token it presents to
// scoreflow's agent gateway on the hub: a hub ServiceAccount token of
// system:serviceaccount:<cluster>:<addon>, the ServiceAccount named after the addon in the
// cluster's own namespace on the hub, for the gateway's audience, living one hour.
//
// The agent mints it with the hub credentials OCM's addon registration gives it (a kubeconfig
// whose identity may, in its cluster's namespace only, get its ManagedClusterAddOn, create that
// ServiceAccount and create its tokens; addon/ grants exactly that). Each refresh first makes sure
// the ServiceAccount exists, creating it owned by the cluster's ManagedClusterAddOn, so disabling
// the addon deletes it (Kubernetes' garbage collector) and every token minted for it stops
// verifying. The token is written to a file that the agent's sender re-reads on every event
// (function.NewSenderWithToken) and renewed at half its lifetime.
//
// An agent uses it in three lines:
//
//	f := hubtoken.RegisterFlags(fs)   // --hub-kubeconfig, --hub-token-addon, ...
//	...
//	err := f.Start(ctx, log, cluster, tokenFile)
package hubtoken

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/tools/clientcmd"
)

// Audience is the agent gateway's: the only audience it accepts.
const Audience = "scoreflow/agent-gateway"

// MaxLifetime is the longest a token may live for the gateway to accept it (it refuses longer
// ones: a stolen token is good for at most this long).
const MaxLifetime = time.Hour

// minLifetime is the shortest token the API server issues.
const minLifetime = 10 * time.Minute

// ManagedClusterAddOns is the resource the agent's ServiceAccount is owned by.
var ManagedClusterAddOns = schema.GroupVersionResource{Group: "addon.open-cluster-management.io", Version: "v1alpha1", Resource: "managedclusteraddons"}

// Minter mints tokens of the hub ServiceAccount Cluster/Addon for Audience into File.
type Minter struct {
	Client kubernetes.Interface
	// Metadata reads the ManagedClusterAddOn the ServiceAccount is created owned by.
	Metadata       metadata.Interface
	Cluster, Addon string
	// Audience is the token's audience (default: the gateway's, Audience).
	Audience string
	File     string
	// Lifetime is the expiry asked for: at least 10 minutes (the API server's minimum), at most
	// MaxLifetime (default MaxLifetime).
	Lifetime time.Duration
	Log      *slog.Logger
}

// Refresh makes sure the ServiceAccount exists, mints one token and replaces File with it (a
// rename, so a reader never sees half a token). It returns when the next refresh is due: half way
// to the token's expiry.
func (m *Minter) Refresh(ctx context.Context) (time.Time, error) {
	if err := m.ensureServiceAccount(ctx); err != nil {
		return time.Time{}, err
	}
	lifetime := m.Lifetime
	if lifetime == 0 {
		lifetime = MaxLifetime
	}
	audience := m.Audience
	if audience == "" {
		audience = Audience
	}
	secs := int64(lifetime / time.Second)
	issued := time.Now()
	tr, err := m.Client.CoreV1().ServiceAccounts(m.Cluster).CreateToken(ctx, m.Addon, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{audience}, ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("token of hub ServiceAccount %s/%s: %w", m.Cluster, m.Addon, err)
	}
	if err := writeFile(m.File, tr.Status.Token); err != nil {
		return time.Time{}, err
	}
	exp := tr.Status.ExpirationTimestamp.Time
	return issued.Add(exp.Sub(issued) / 2), nil
}

// ensureServiceAccount creates the agent's hub ServiceAccount when it is missing, owned by the
// cluster's ManagedClusterAddOn (no blockOwnerDeletion: that would need rights on the addon's
// finalizers, and nothing waits for the ServiceAccount).
func (m *Minter) ensureServiceAccount(ctx context.Context) error {
	sas := m.Client.CoreV1().ServiceAccounts(m.Cluster)
	_, err := sas.Get(ctx, m.Addon, metav1.GetOptions{})
	if err == nil || !apierrors.IsNotFound(err) {
		if err != nil {
			return fmt.Errorf("hub ServiceAccount %s/%s: %w", m.Cluster, m.Addon, err)
		}
		return nil
	}
	owner, err := m.Metadata.Resource(ManagedClusterAddOns).Namespace(m.Cluster).Get(ctx, m.Addon, metav1.GetOptions{})
	if err != nil {
		return fmt.Errorf("ManagedClusterAddOn %s/%s (the owner of the agent's hub ServiceAccount): %w", m.Cluster, m.Addon, err)
	}
	no := false
	sa := &corev1.ServiceAccount{
		ObjectMeta: metav1.ObjectMeta{Name: m.Addon, Namespace: m.Cluster,
			Labels: map[string]string{"app.kubernetes.io/part-of": "scoreflow"},
			OwnerReferences: []metav1.OwnerReference{{APIVersion: ManagedClusterAddOns.GroupVersion().String(),
				Kind: "ManagedClusterAddOn", Name: owner.Name, UID: owner.UID}}},
		// Only the agent's own TokenRequests use it; no pod runs as it.
		AutomountServiceAccountToken: &no,
	}
	if _, err := sas.Create(ctx, sa, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("creating hub ServiceAccount %s/%s: %w", m.Cluster, m.Addon, err)
	}
	m.log().Info("hub ServiceAccount created", "serviceAccount", m.Cluster+"/"+m.Addon, "owner", "ManagedClusterAddOn/"+owner.Name)
	return nil
}

func writeFile(path, content string) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), ".token-")
	if err != nil {
		return err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(content); err != nil {
		_ = tmp.Close()
		return err
	}
	if err := tmp.Close(); err != nil {
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func (m *Minter) log() *slog.Logger {
	if m.Log == nil {
		return slog.New(slog.DiscardHandler)
	}
	return m.Log
}

// Run refreshes until ctx ends: at half the token's lifetime, and after a failure again after a
// backoff (1s doubling to 1m) while the token written before stays in place.
func (m *Minter) Run(ctx context.Context, next time.Time) {
	backoff := time.Second
	for {
		select {
		case <-ctx.Done():
			return
		case <-time.After(time.Until(next)):
		}
		n, err := m.Refresh(ctx)
		if err != nil {
			if ctx.Err() != nil {
				return
			}
			m.log().Error("renewing the hub token failed; retrying", "err", err, "retryIn", backoff)
			next = time.Now().Add(backoff)
			backoff = min(2*backoff, time.Minute)
			continue
		}
		m.log().Info("hub token renewed", "serviceAccount", m.Cluster+"/"+m.Addon, "nextRefresh", n)
		backoff, next = time.Second, n
	}
}

// Flags are the settings of an agent that mints its token on the hub.
type Flags struct {
	kubeconfig, addon, audience *string
	lifetime                    *time.Duration
}

// RegisterFlags registers --hub-kubeconfig, --hub-token-addon, --hub-token-audience and
// --hub-token-lifetime on fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		kubeconfig: fs.String("hub-kubeconfig", "", "agent mode: the hub credentials (an OCM addon agent's hub kubeconfig) with which to mint the sink token into --sink-token-file (empty: the token file is provided otherwise)"),
		addon:      fs.String("hub-token-addon", "", "agent mode: the OCM addon this agent belongs to: its hub ServiceAccount is <cluster>/<addon>, created if missing, owned by the cluster's ManagedClusterAddOn"),
		audience:   fs.String("hub-token-audience", Audience, "agent mode: the minted token's audience (the agent gateway's)"),
		lifetime:   fs.Duration("hub-token-lifetime", MaxLifetime, "agent mode: the minted token's lifetime, renewed at half (10m to 1h: the gateway refuses longer ones)"),
	}
}

// Start mints the first token into tokenFile, as the hub ServiceAccount of cluster and the addon,
// and keeps renewing it in the background until ctx ends. Without --hub-kubeconfig it does
// nothing. A hub that cannot be reached at start is retried in the background (the sender
// presents no token until then); bad settings are an error.
func (f *Flags) Start(ctx context.Context, log *slog.Logger, cluster, tokenFile string) error {
	if *f.kubeconfig == "" {
		return nil
	}
	if errs := validation.IsDNS1123Label(cluster); len(errs) > 0 {
		return fmt.Errorf("cluster %q: %v", cluster, errs)
	}
	if errs := validation.IsDNS1123Subdomain(*f.addon); len(errs) > 0 {
		return fmt.Errorf("--hub-token-addon %q: %v", *f.addon, errs)
	}
	if *f.audience == "" {
		return errors.New("--hub-token-audience is empty")
	}
	if *f.lifetime < minLifetime || *f.lifetime > MaxLifetime {
		return fmt.Errorf("--hub-token-lifetime %s: want 10m to 1h (the API server issues at least 10m, the gateway takes at most 1h)", *f.lifetime)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *f.kubeconfig)
	if err != nil {
		return fmt.Errorf("--hub-kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	meta, err := metadata.NewForConfig(cfg)
	if err != nil {
		return err
	}
	m := &Minter{Client: client, Metadata: meta, Cluster: cluster, Addon: *f.addon, Audience: *f.audience,
		File: tokenFile, Lifetime: *f.lifetime, Log: log}
	first, cancel := context.WithTimeout(ctx, 10*time.Second)
	next, err := m.Refresh(first)
	cancel()
	if err != nil {
		log.Error("minting the hub token failed; retrying", "err", err)
		next = time.Now().Add(time.Second)
	}
	go m.Run(ctx, next)
	return nil
}
