package scorewriter

import (
	"context"
	"strings"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"open-cluster-management.io/api/client/cluster/clientset/versioned/fake"
	clusterv1 "open-cluster-management.io/api/cluster/v1"

	"github.com/scoreflow/scoreflow/pkg/contract"
)

// The informer keeps of each ManagedCluster only what admission reads, and admits as before:
// accepted clusters, not pending or deleting ones. (The real hub's informer is exercised by
// test/writer; here the point is what the cache holds.)
func TestManagedClusterCacheIsSlim(t *testing.T) {
	accepted := []metav1.Condition{{Type: clusterv1.ManagedClusterConditionHubAccepted, Status: metav1.ConditionTrue, Reason: "Accepted", Message: strings.Repeat("m", 200)},
		{Type: clusterv1.ManagedClusterConditionAvailable, Status: metav1.ConditionTrue, Reason: "Available"}}
	fat := func(name string, accept bool, conds []metav1.Condition) *clusterv1.ManagedCluster {
		return &clusterv1.ManagedCluster{
			ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"env": "prod"},
				Annotations:   map[string]string{"big": strings.Repeat("a", 4096)},
				ManagedFields: []metav1.ManagedFieldsEntry{{Manager: "registration", Operation: metav1.ManagedFieldsOperationApply}}},
			Spec: clusterv1.ManagedClusterSpec{HubAcceptsClient: accept,
				ManagedClusterClientConfigs: []clusterv1.ClientConfig{{URL: "https://" + name, CABundle: make([]byte, 2048)}}},
			Status: clusterv1.ManagedClusterStatus{Conditions: conds,
				ClusterClaims: []clusterv1.ManagedClusterClaim{{Name: "id.k8s.io", Value: name}}},
		}
	}
	deleting := fat("deleting", true, accepted)
	now := metav1.Now()
	deleting.DeletionTimestamp = &now
	deleting.Finalizers = []string{"keep"}
	client := fake.NewSimpleClientset(fat("ok", true, accepted), fat("pending", false, nil), fat("denied", true, accepted[1:]), deleting)
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mc := WatchManagedClusters(ctx, client)
	for deadline := time.Now().Add(10 * time.Second); mc.Ready() != nil; time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatal("informer not synced")
		}
	}
	for name, want := range map[string]contract.Reason{"ok": "", "pending": contract.ReasonClusterNotAccepted, "denied": contract.ReasonClusterNotAccepted,
		"deleting": contract.ReasonUnknownCluster, "absent": contract.ReasonUnknownCluster} {
		var got contract.Reason
		if err := mc.Admit(name); err != nil {
			got = err.Reason
		}
		if got != want {
			t.Errorf("Admit(%s) = %q, want %q", name, got, want)
		}
	}
	c, err := mc.lister.Get("ok")
	if err != nil {
		t.Fatal(err)
	}
	if len(c.ManagedFields)+len(c.Annotations)+len(c.Labels)+len(c.Spec.ManagedClusterClientConfigs)+len(c.Status.ClusterClaims) != 0 || len(c.Status.Conditions) != 1 || c.Status.Conditions[0].Message != "" {
		t.Errorf("the cache holds more than admission reads: %+v", c)
	}
}
