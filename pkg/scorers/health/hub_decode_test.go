package health

import (
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"reflect"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
	sigsjson "sigs.k8s.io/json"
)

// A list page decoded into listPage gives, item by item, what FromAPI gives from the whole
// ManagedCluster objects client-go decodes: random clusters with every field the score reads set
// or not, and fields it does not read (labels, claims, capacity, taints) around them.
func TestListPageIsFromAPI(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 3))
	at := func() metav1.Time {
		return metav1.NewTime(time.Unix(1772366400-r.Int64N(1e6), 0).In(time.FixedZone("", 3600*(r.IntN(5)-2))))
	}
	for range 300 {
		list := clusterv1.ManagedClusterList{TypeMeta: metav1.TypeMeta{APIVersion: "cluster.open-cluster-management.io/v1", Kind: "ManagedClusterList"}}
		if r.IntN(2) == 0 {
			list.Continue = fmt.Sprintf("token-%d", r.IntN(100))
		}
		for i := range r.IntN(6) {
			mc := clusterv1.ManagedCluster{
				TypeMeta:   metav1.TypeMeta{APIVersion: "cluster.open-cluster-management.io/v1", Kind: "ManagedCluster"},
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cluster-%d", i), Labels: map[string]string{"name": "x"}, ResourceVersion: "7"},
				Spec:       clusterv1.ManagedClusterSpec{HubAcceptsClient: r.IntN(3) > 0, LeaseDurationSeconds: int32(r.IntN(3) * 30)},
			}
			if r.IntN(4) == 0 {
				d := at()
				mc.DeletionTimestamp = &d
			}
			if r.IntN(3) == 0 {
				mc.Spec.Taints = []clusterv1.Taint{{Key: "k", Effect: clusterv1.TaintEffectNoSelect, TimeAdded: at()}}
				mc.Status.ClusterClaims = []clusterv1.ManagedClusterClaim{{Name: "id.k8s.io", Value: "abc"}}
			}
			for range r.IntN(5) {
				mc.Status.Conditions = append(mc.Status.Conditions, metav1.Condition{
					Type:   []string{CondAvailable, CondJoined, CondHubAccepted, CondHubDenied, CondClockSynced}[r.IntN(5)],
					Status: []metav1.ConditionStatus{metav1.ConditionTrue, metav1.ConditionFalse, metav1.ConditionUnknown}[r.IntN(3)],
					Reason: []string{"", "ManagedClusterLeaseUpdateStopped", "R"}[r.IntN(3)], Message: "m", LastTransitionTime: at(),
				})
			}
			list.Items = append(list.Items, mc)
		}
		raw, err := json.Marshal(&list)
		if err != nil {
			t.Fatal(err)
		}
		var typed clusterv1.ManagedClusterList
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &typed); err != nil {
			t.Fatal(err)
		}
		var page listPage
		if err := sigsjson.UnmarshalCaseSensitivePreserveInts(raw, &page); err != nil {
			t.Fatal(err)
		}
		if page.Metadata.Continue != typed.Continue || len(page.Items) != len(typed.Items) {
			t.Fatalf("continue %q, %d items; want %q, %d", page.Metadata.Continue, len(page.Items), typed.Continue, len(typed.Items))
		}
		for i := range page.Items {
			if got, want := page.Items[i].managedCluster(), FromAPI(&typed.Items[i]); !reflect.DeepEqual(got, want) {
				t.Fatalf("item %d:\n got %+v\nwant %+v", i, got, want)
			}
		}
	}
}
