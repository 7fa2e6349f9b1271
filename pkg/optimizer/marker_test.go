package optimizer_test

import (
	"bytes"
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/scoreflow/scoreflow/harness/localhub"
	"github.com/scoreflow/scoreflow/pkg/optimizer"
)

type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// On a hub without the governance policy framework (what `clusteradm init` installs), the
// compliance marker says once what is missing and how to install it, instead of logging the same
// error on every tick.
func TestMarkerWithoutThePolicyFramework(t *testing.T) {
	bare, err := localhub.Start()
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = bare.Stop() })
	var logs syncBuffer
	// Forty syncs in two seconds outrun client-go's default 5 requests a second, and its limiter
	// refuses a wait that would end past the deadline with an error of its own.
	cfg := rest.CopyConfig(bare.Config)
	cfg.QPS, cfg.Burst = 1000, 1000
	mk := &optimizer.Marker{Cluster: bare.Cluster, Dynamic: dynamic.NewForConfigOrDie(cfg), Namespaces: []string{"scoreflow"},
		Log: slog.New(slog.NewTextHandler(&logs, nil))}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	mk.Run(ctx, 50*time.Millisecond) // some 40 syncs
	errs := strings.Count(logs.String(), "level=ERROR")
	if errs != 1 || !strings.Contains(logs.String(), "clusteradm install hub-addon --names governance-policy-framework") {
		t.Errorf("%d errors logged, want 1 naming the policy framework's install:\n%s", errs, logs.String())
	}
}
