// Package addontest holds what the tests of scoreflow's OCM addons (addon/, addon/dsf/) share: the
// hub identity OCM's addon registration gives an agent, the ManifestWork the addon manager renders
// for a cluster, waiting on the hub, and the controllers' log. It is imported only by tests.
package addontest

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	addonv1alpha1 "open-cluster-management.io/api/addon/v1alpha1"
	workclient "open-cluster-management.io/api/client/work/clientset/versioned"
	workv1 "open-cluster-management.io/api/work/v1"
)

// AgentUser is the user OCM's addon registration gives addon's agent on cluster (the subject of
// its client certificate).
func AgentUser(addon, cluster string) string {
	return fmt.Sprintf("system:open-cluster-management:cluster:%s:addon:%s:agent:%s", cluster, addon, addon)
}

// AgentGroups are the groups of AgentUser's certificate.
func AgentGroups(addon, cluster string) []string {
	return []string{
		fmt.Sprintf("system:open-cluster-management:cluster:%s:addon:%s", cluster, addon),
		"system:open-cluster-management:addon:" + addon,
		"system:authenticated",
	}
}

// Impersonating is cfg acting as addon's agent on cluster.
func Impersonating(cfg *rest.Config, addon, cluster string) *rest.Config {
	c := rest.CopyConfig(cfg)
	c.Impersonate = rest.ImpersonationConfig{UserName: AgentUser(addon, cluster), Groups: AgentGroups(addon, cluster)}
	return c
}

// Works are the ManifestWorks the addon manager rendered for addon in cluster's namespace.
func Works(ctx context.Context, works workclient.Interface, addon, cluster string) ([]workv1.ManifestWork, error) {
	l, err := works.WorkV1().ManifestWorks(cluster).List(ctx, metav1.ListOptions{LabelSelector: addonv1alpha1.AddonLabelKey + "=" + addon})
	if err != nil {
		return nil, err
	}
	return l.Items, nil
}

// WaitWork waits for addon's one ManifestWork in cluster's namespace and returns it.
func WaitWork(ctx context.Context, t *testing.T, works workclient.Interface, addon, cluster string) *workv1.ManifestWork {
	t.Helper()
	var got []workv1.ManifestWork
	WaitFor(ctx, t, "the agent's ManifestWork in "+cluster, func() (bool, string) {
		var err error
		got, err = Works(ctx, works, addon, cluster)
		return err == nil && len(got) == 1, fmt.Sprintf("%d works, %v", len(got), err)
	})
	return &got[0]
}

// WaitFor polls cond every 200ms until it holds; when ctx ends first the test fails with what it
// waited for and cond's last state.
func WaitFor(ctx context.Context, t *testing.T, what string, cond func() (bool, string)) {
	t.Helper()
	last := ""
	for {
		ok, state := cond()
		if ok {
			return
		}
		last = state
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s (last: %s)", what, last)
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// ControllerLog is a file for the hub's controllers' output; if the test fails, its last n bytes
// are logged, without the lines that contain any of noise.
func ControllerLog(t *testing.T, n int, noise ...string) *os.File {
	t.Helper()
	path := filepath.Join(t.TempDir(), "controllers.log")
	f, err := os.Create(path)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if !t.Failed() {
			return
		}
		raw, _ := os.ReadFile(path)
		var keep []string
		for _, l := range strings.Split(string(raw), "\n") {
			if !containsAny(l, noise) {
				keep = append(keep, l)
			}
		}
		s := strings.Join(keep, "\n")
		if len(s) > n {
			s = s[len(s)-n:]
		}
		t.Logf("controller logs (end):\n%s", s)
	})
	return f
}

func containsAny(s string, subs []string) bool {
	for _, sub := range subs {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// Log is an io.Writer into the test's log, a line per write: for a child process's output.
type Log struct{ T *testing.T }

func (w Log) Write(b []byte) (int, error) {
	w.T.Log(strings.TrimRight(string(b), "\n"))
	return len(b), nil
}
