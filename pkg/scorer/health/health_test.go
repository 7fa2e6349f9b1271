package health

import (
	"testing"
	"time"

	"knative.dev/eventing/pkg/apis/sources"
	clusterv1 "open-cluster-management.io/api/cluster/v1"
)

// The names this package copies must match their sources (imported here, in a test only).
func TestNamesMatchUpstream(t *testing.T) {
	for got, want := range map[string]string{
		CondAvailable: clusterv1.ManagedClusterConditionAvailable, CondJoined: clusterv1.ManagedClusterConditionJoined,
		CondHubAccepted: clusterv1.ManagedClusterConditionHubAccepted, CondHubDenied: clusterv1.ManagedClusterConditionHubDenied,
		CondClockSynced: clusterv1.ManagedClusterConditionClockSynced, Group: clusterv1.GroupName,
		TypeAdd: sources.ApiServerSourceAddEventType, TypeUpdate: sources.ApiServerSourceUpdateEventType, TypeDelete: sources.ApiServerSourceDeleteEventType,
		TypeRefAdd: sources.ApiServerSourceAddRefEventType, TypeRefUpdate: sources.ApiServerSourceUpdateRefEventType, TypeRefDelete: sources.ApiServerSourceDeleteRefEventType,
	} {
		if got != want {
			t.Errorf("%q, upstream %q", got, want)
		}
	}
}

var now = time.Date(2026, 3, 1, 12, 0, 0, 0, time.UTC)

// cluster builds a ManagedCluster accepted by the hub with the given condition statuses; an
// Available condition transitioned availableFor ago.
func cluster(lease int32, availableFor time.Duration, conds map[string]string) *ManagedCluster {
	mc := &ManagedCluster{APIVersion: "cluster.open-cluster-management.io/v1", Kind: "ManagedCluster"}
	mc.Metadata.Name = "c1"
	mc.Spec.HubAcceptsClient = true
	mc.Spec.LeaseDurationSeconds = lease
	for _, typ := range []string{CondHubAccepted, CondHubDenied, CondJoined, CondAvailable, CondClockSynced} {
		st, ok := conds[typ]
		if !ok {
			continue
		}
		c := Condition{Type: typ, Status: st, LastTransitionTime: now.Add(-time.Hour)}
		if typ == CondAvailable {
			c.LastTransitionTime = now.Add(-availableFor)
			if st == "Unknown" {
				c.Reason = "ManagedClusterLeaseUpdateStopped"
			}
		}
		mc.Status.Conditions = append(mc.Status.Conditions, c)
	}
	return mc
}

func TestAssess(t *testing.T) {
	ok := map[string]string{CondHubAccepted: "True", CondJoined: "True", CondAvailable: "True"}
	with := func(k, v string) map[string]string {
		m := map[string]string{}
		for a, b := range ok {
			m[a] = b
		}
		if v == "" {
			delete(m, k)
		} else {
			m[k] = v
		}
		return m
	}
	deleting := cluster(60, 0, ok)
	deleting.Metadata.DeletionTimestamp = &now
	notAccepting := cluster(60, 0, ok)
	notAccepting.Spec.HubAcceptsClient = false

	tests := []struct {
		name    string
		mc      *ManagedCluster
		deleted bool
		state   string
		score   int32
	}{
		{"healthy", cluster(60, time.Hour, ok), false, StateHealthy, 100},
		{"healthy, just recovered", cluster(60, time.Second, ok), false, StateHealthy, 100},
		{"deleted, even if healthy before", cluster(60, time.Hour, ok), true, StateDeleted, 0},
		{"being deleted", deleting, false, StateDeleting, 0},
		{"hub stopped accepting", notAccepting, false, StateNotAccepted, -90},
		{"denied", cluster(60, 0, with(CondHubDenied, "True")), false, StateNotAccepted, -90},
		{"not yet accepted", cluster(60, 0, with(CondHubAccepted, "")), false, StateNotAccepted, -90},
		{"accepted, not joined", cluster(60, 0, with(CondJoined, "False")), false, StateNotJoined, -80},
		{"joined condition missing", cluster(60, 0, with(CondJoined, "")), false, StateNotJoined, -80},
		{"unavailable", cluster(60, time.Hour, with(CondAvailable, "False")), false, StateUnavailable, -60},
		{"clock not synced", cluster(60, time.Hour, with(CondClockSynced, "False")), false, StateClockNotSynced, 70},
		{"clock synced", cluster(60, time.Hour, with(CondClockSynced, "True")), false, StateHealthy, 100},
		{"available missing", cluster(60, 0, with(CondAvailable, "")), false, StateUnreachable, -40},
		// Unreachable: -40 minus whole lease periods since the transition, down to -80.
		{"lease just expired", cluster(60, 59*time.Second, with(CondAvailable, "Unknown")), false, StateUnreachable, -40},
		{"lease stale 10.5 periods of 60s", cluster(60, 10*time.Minute+30*time.Second, with(CondAvailable, "Unknown")), false, StateUnreachable, -50},
		{"lease unset counts as 60s", cluster(0, 10*time.Minute+30*time.Second, with(CondAvailable, "Unknown")), false, StateUnreachable, -50},
		{"lease 30s: 10.5 minutes is 21 periods", cluster(30, 10*time.Minute+30*time.Second, with(CondAvailable, "Unknown")), false, StateUnreachable, -61},
		{"silent for a day: floor", cluster(60, 24*time.Hour, with(CondAvailable, "Unknown")), false, StateUnreachable, -80},
		{"transition after the event (clock skew)", cluster(60, -time.Hour, with(CondAvailable, "Unknown")), false, StateUnreachable, -40},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			a := Assess(tt.mc, tt.deleted, now)
			if a.State != tt.state || a.Score != tt.score || a.Detail == "" {
				t.Errorf("Assess = %+v, want %s %d", a, tt.state, tt.score)
			}
			// A deleted or deleting cluster has nothing to score; every other state has a score.
			if gone := tt.state == StateDeleted || tt.state == StateDeleting; a.Scored() == gone {
				t.Errorf("Assess = %+v: Scored() = %v", a, a.Scored())
			}
		})
	}
}

func TestAssessUnknownWithoutTransitionTime(t *testing.T) {
	mc := cluster(60, 0, map[string]string{CondHubAccepted: "True", CondJoined: "True", CondAvailable: "Unknown"})
	mc.Status.Conditions[2].LastTransitionTime = time.Time{}
	if a := Assess(mc, false, now); a.Score != UnreachableScore {
		t.Errorf("Assess = %+v, want %d", a, UnreachableScore)
	}
}
