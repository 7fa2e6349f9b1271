// Package hubtoken keeps a hub-issued ServiceAccount token in a file, for a sender on a managed
// cluster whose own cluster's tokens the hub's broker does not trust. With the hub credentials OCM
// gives an addon agent (a kubeconfig whose identity may only create tokens of one hub
// ServiceAccount), it mints a token for the broker's audience with the TokenRequest API and writes
// it where the sender reads its bearer token on every event (--sink-token-file), renewing it at
// half its lifetime.
package hubtoken

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"strings"
	"time"

	authnv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"
)

// Minter mints tokens of hub ServiceAccount Namespace/Name for Audience into File.
type Minter struct {
	Client          kubernetes.Interface
	Namespace, Name string
	Audience        string
	File            string
	// Lifetime is the expiry asked for (the API server may shorten it; at least 10 minutes).
	Lifetime time.Duration
	Log      *slog.Logger
}

// Refresh mints one token and replaces File with it (a rename, so a reader never sees half a
// token). It returns when the next refresh is due: half way to the token's expiry.
func (m *Minter) Refresh(ctx context.Context) (time.Time, error) {
	secs := int64(m.Lifetime / time.Second)
	issued := time.Now()
	tr, err := m.Client.CoreV1().ServiceAccounts(m.Namespace).CreateToken(ctx, m.Name, &authnv1.TokenRequest{
		Spec: authnv1.TokenRequestSpec{Audiences: []string{m.Audience}, ExpirationSeconds: &secs},
	}, metav1.CreateOptions{})
	if err != nil {
		return time.Time{}, fmt.Errorf("token of hub ServiceAccount %s/%s: %w", m.Namespace, m.Name, err)
	}
	tmp, err := os.CreateTemp(filepath.Dir(m.File), ".token-")
	if err != nil {
		return time.Time{}, err
	}
	defer os.Remove(tmp.Name())
	if _, err := tmp.WriteString(tr.Status.Token); err != nil {
		_ = tmp.Close()
		return time.Time{}, err
	}
	if err := tmp.Close(); err != nil {
		return time.Time{}, err
	}
	if err := os.Rename(tmp.Name(), m.File); err != nil {
		return time.Time{}, err
	}
	exp := tr.Status.ExpirationTimestamp.Time
	return issued.Add(exp.Sub(issued) / 2), nil
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
			m.Log.Error("renewing the hub token failed; retrying", "err", err, "retryIn", backoff)
			next = time.Now().Add(backoff)
			backoff = min(2*backoff, time.Minute)
			continue
		}
		m.Log.Info("hub token renewed", "serviceAccount", m.Namespace+"/"+m.Name, "nextRefresh", n)
		backoff, next = time.Second, n
	}
}

// Flags are the settings of an agent that mints its sink token on the hub.
type Flags struct {
	kubeconfig, serviceAccount, audience *string
	lifetime                             *time.Duration
}

// RegisterFlags registers --hub-kubeconfig, --hub-token-service-account, --hub-token-audience and
// --hub-token-lifetime on fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		kubeconfig:     fs.String("hub-kubeconfig", "", "agent mode: the hub credentials (an OCM addon agent's hub kubeconfig) with which to mint the sink token into --sink-token-file (empty: the token file is provided otherwise)"),
		serviceAccount: fs.String("hub-token-service-account", "", "agent mode: NAMESPACE/NAME of the hub ServiceAccount whose token is minted (the broker's view of this sender)"),
		audience:       fs.String("hub-token-audience", "", "agent mode: the minted token's audience (the hub Broker's, eventing.knative.dev/broker/<ns>/<name>)"),
		lifetime:       fs.Duration("hub-token-lifetime", time.Hour, "agent mode: the minted token's requested lifetime (renewed at half)"),
	}
}

// Start mints the first token into tokenFile and keeps renewing it in the background until ctx
// ends. Without --hub-kubeconfig it does nothing. A hub that cannot be reached at start is retried
// in the background (the sender presents no token until then); bad settings are an error.
func (f *Flags) Start(ctx context.Context, log *slog.Logger, tokenFile string) error {
	if *f.kubeconfig == "" {
		return nil
	}
	ns, name, ok := strings.Cut(*f.serviceAccount, "/")
	if !ok || ns == "" || name == "" {
		return fmt.Errorf("--hub-token-service-account %q: want NAMESPACE/NAME", *f.serviceAccount)
	}
	if *f.audience == "" {
		return errors.New("--hub-kubeconfig needs --hub-token-audience")
	}
	if *f.lifetime < 10*time.Minute {
		return fmt.Errorf("--hub-token-lifetime %s: the API server issues at least 10m", *f.lifetime)
	}
	cfg, err := clientcmd.BuildConfigFromFlags("", *f.kubeconfig)
	if err != nil {
		return fmt.Errorf("--hub-kubeconfig: %w", err)
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	m := &Minter{Client: client, Namespace: ns, Name: name, Audience: *f.audience, File: tokenFile, Lifetime: *f.lifetime, Log: log}
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
