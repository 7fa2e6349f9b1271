package health

import (
	"fmt"
	"time"
)

// OCM condition types and the lease default, as open-cluster-management.io/api cluster/v1 names
// them (not imported: the function stays small).
const (
	CondAvailable   = "ManagedClusterConditionAvailable"
	CondJoined      = "ManagedClusterJoined"
	CondHubAccepted = "HubAcceptedManagedCluster"
	CondHubDenied   = "HubDeniedManagedCluster"
	CondClockSynced = "ManagedClusterConditionClockSynced"
	// DefaultLeaseDurationSeconds is what OCM uses when spec.leaseDurationSeconds is 0.
	DefaultLeaseDurationSeconds = 60
)

// States, one per row of the scoring table.
const (
	StateDeleted        = "Deleted"
	StateDeleting       = "Deleting"
	StateNotAccepted    = "NotAccepted"
	StateNotJoined      = "NotJoined"
	StateUnavailable    = "Unavailable"
	StateUnreachable    = "Unreachable"
	StateClockNotSynced = "ClockNotSynced"
	StateHealthy        = "Healthy"
)

// Scores of the table; Unreachable starts at UnreachableScore and loses a point per lease period.
// Deleted and Deleting have none.
const (
	NotAcceptedScore    = -90
	NotJoinedScore      = -80
	UnavailableScore    = -60
	UnreachableScore    = -40
	UnreachableFloor    = -80
	ClockNotSyncedScore = 70
	HealthyScore        = 100
)

// Condition statuses (metav1.ConditionTrue, ConditionFalse).
const (
	metaStatusTrue  = "True"
	metaStatusFalse = "False"
)

// ManagedCluster is the part of a ManagedCluster the score reads, decoded from the JSON the
// ApiServerSource sends.
type ManagedCluster struct {
	APIVersion string `json:"apiVersion"`
	Kind       string `json:"kind"`
	Metadata   struct {
		Name              string     `json:"name"`
		DeletionTimestamp *time.Time `json:"deletionTimestamp,omitempty"`
	} `json:"metadata"`
	Spec struct {
		HubAcceptsClient     bool  `json:"hubAcceptsClient"`
		LeaseDurationSeconds int32 `json:"leaseDurationSeconds,omitempty"`
	} `json:"spec"`
	Status struct {
		Conditions []Condition `json:"conditions,omitempty"`
	} `json:"status"`
}

// Condition is a metav1.Condition's fields the score reads.
type Condition struct {
	Type               string    `json:"type"`
	Status             string    `json:"status"`
	Reason             string    `json:"reason,omitempty"`
	LastTransitionTime time.Time `json:"lastTransitionTime"`
}

func (mc *ManagedCluster) condition(typ string) *Condition {
	for i := range mc.Status.Conditions {
		if mc.Status.Conditions[i].Type == typ {
			return &mc.Status.Conditions[i]
		}
	}
	return nil
}

func (mc *ManagedCluster) is(typ, status string) bool {
	c := mc.condition(typ)
	return c != nil && c.Status == status
}

// Assessment is a cluster's health state, its score and why.
type Assessment struct {
	State  string
	Score  int32
	Detail string
}

// Scored tells whether the state has a score. A deleted cluster has nothing left to score: OCM
// deletes its namespace and the AddOnPlacementScores in it, and the score-writer refuses to write
// for it. A cluster being deleted is no longer a Placement candidate (OCM's scheduler leaves out
// clusters with a deletionTimestamp), and the writer refuses it too.
func (a Assessment) Scored() bool { return a.State != StateDeleted && a.State != StateDeleting }

// Assess applies the scoring table (see the package doc) to a cluster as of at; deleted is true
// for a delete event.
func Assess(mc *ManagedCluster, deleted bool, at time.Time) Assessment {
	switch {
	case deleted:
		return Assessment{StateDeleted, 0, "the ManagedCluster was deleted: nothing to score"}
	case mc.Metadata.DeletionTimestamp != nil:
		return Assessment{StateDeleting, 0, "the ManagedCluster is being deleted: nothing to score"}
	case !mc.Spec.HubAcceptsClient:
		return Assessment{StateNotAccepted, NotAcceptedScore, "spec.hubAcceptsClient is false"}
	case mc.is(CondHubDenied, metaStatusTrue):
		return Assessment{StateNotAccepted, NotAcceptedScore, CondHubDenied + " is True"}
	case !mc.is(CondHubAccepted, metaStatusTrue):
		return Assessment{StateNotAccepted, NotAcceptedScore, CondHubAccepted + " is not True"}
	case !mc.is(CondJoined, metaStatusTrue):
		return Assessment{StateNotJoined, NotJoinedScore, CondJoined + " is not True"}
	}
	avail := mc.condition(CondAvailable)
	switch {
	case avail != nil && avail.Status == metaStatusFalse:
		return Assessment{StateUnavailable, UnavailableScore, detail(avail)}
	case avail != nil && avail.Status == metaStatusTrue:
		if mc.is(CondClockSynced, metaStatusFalse) {
			return Assessment{StateClockNotSynced, ClockNotSyncedScore, CondClockSynced + " is False"}
		}
		return Assessment{StateHealthy, HealthyScore, "available"}
	case avail == nil:
		return Assessment{StateUnreachable, UnreachableScore, CondAvailable + " is missing"}
	}
	lease := time.Duration(mc.Spec.LeaseDurationSeconds) * time.Second
	if lease <= 0 {
		lease = DefaultLeaseDurationSeconds * time.Second
	}
	periods := int64(0)
	if !avail.LastTransitionTime.IsZero() && at.After(avail.LastTransitionTime) {
		periods = int64(at.Sub(avail.LastTransitionTime) / lease)
	}
	score := int64(UnreachableScore) - periods
	if score < UnreachableFloor {
		score = UnreachableFloor
	}
	return Assessment{StateUnreachable, int32(score), fmt.Sprintf("%s for %d lease periods of %s", detail(avail), periods, lease)}
}

func detail(c *Condition) string {
	s := c.Type + " is " + c.Status
	if c.Reason != "" {
		s += " (" + c.Reason + ")"
	}
	return s
}
