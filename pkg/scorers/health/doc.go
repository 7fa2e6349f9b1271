// Package health scores managed clusters' health for disaster-recovery placement from Knative
// ApiServerSource events about ManagedClusters (cluster.open-cluster-management.io/v1), mode
// Resource: types dev.knative.apiserver.resource.add, .update and .delete, data the object. Each
// event is answered with one score.updated for that cluster: resource cluster-health, score
// health (both set by flags).
//
// # Scoring table
//
// The first row that matches decides.
//
//	state            when                                                          score
//	Deleted          a delete event                                                 -100
//	Deleting         metadata.deletionTimestamp is set                              -100
//	NotAccepted      spec.hubAcceptsClient false, HubDeniedManagedCluster True,      -90
//	                 or HubAcceptedManagedCluster not True
//	NotJoined        ManagedClusterJoined not True                                   -80
//	Unavailable      ManagedClusterConditionAvailable False (the agent reports the   -60
//	                 cluster unhealthy)
//	Unreachable      ManagedClusterConditionAvailable Unknown or missing             -40 - n, at least -80
//	ClockNotSynced   Available True, ManagedClusterConditionClockSynced False          70
//	Healthy          Available True                                                  100
//
// Lease freshness: the lease a klusterlet renews is a separate object (a coordination.k8s.io Lease
// in the cluster's namespace), not part of the ManagedCluster. The hub's lease controller turns a
// lease not renewed for 5 x spec.leaseDurationSeconds into Available Unknown (reason
// ManagedClusterLeaseUpdateStopped), so Unreachable is that staleness. n is the number of whole
// lease periods (spec.leaseDurationSeconds, 60 when unset, as OCM defaults it) between the
// condition's lastTransitionTime and the event's time: a cluster silent for a moment may be a
// blip, one silent for 40 periods (40 minutes by default) ranks with the worst. ClockNotSynced
// is discounted because lease staleness is judged by the agent's clock.
//
// # Timing and validity
//
// The score is computed once, at the event's time (its CloudEvent time, which the ApiServerSource
// adapter stamps when it sends; the receipt time when absent), and the reply carries that time.
// ApiServerSource sends only on changes (and every object as an add when it starts), so a health
// score stays true until the next event: by default the reply says neverExpires (OCM's validUntil
// nil) rather than leaving it to the score-writer's short TTL, which would make every quiet,
// healthy cluster's score expire to 0. --valid-for bounds it instead.
//
// A deleted cluster's -100 reaches the writer after the ManagedCluster is gone; the writer may
// answer UnknownCluster for it, and the hub removes the cluster's namespace, scores included.
// Events in Reference mode (dev.knative.apiserver.ref.*) carry no status and are refused.
package health
