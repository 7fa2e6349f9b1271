// Package health scores managed clusters' health for disaster-recovery placement: resource
// cluster-health, score health (both set by flags), one score per ManagedCluster
// (cluster.open-cluster-management.io/v1). It takes two inputs:
//
//   - PingSource events (extension scorer=health-scorer, data {}): it scores every ManagedCluster
//     on the hub, from the cache of an informer that watches them (HubClusters), and answers with
//     one score.updated for all of them. This is what keeps the scores right: see Timing and
//     validity.
//   - Knative ApiServerSource events about ManagedClusters, mode Resource (types
//     dev.knative.apiserver.resource.add, .update and .delete, data the object): each is answered
//     with one score.updated for that cluster, so a change counts at once rather than at the next
//     ping.
//
// # Scoring table
//
// The first row that matches decides.
//
//	state            when                                                          score
//	Deleted          a delete event                                                 none
//	Deleting         metadata.deletionTimestamp is set                              none
//	NotAccepted      spec.hubAcceptsClient false, HubDeniedManagedCluster True,      -90
//	                 or HubAcceptedManagedCluster not True
//	NotJoined        ManagedClusterJoined not True                                   -80
//	Unavailable      ManagedClusterConditionAvailable False (the agent reports the   -60
//	                 cluster unhealthy)
//	Unreachable      ManagedClusterConditionAvailable Unknown or missing             -40 - n, at least -80
//	ClockNotSynced   Available True, ManagedClusterConditionClockSynced False          70
//	Healthy          Available True                                                  100
//
// Deleted and Deleting clusters get no score (an event about one is answered 202 with no event; a
// ping leaves them out): there is nothing left to place on. When a ManagedCluster is deleted OCM
// deletes its namespace, and the AddOnPlacementScores in it with it; while it is being deleted,
// OCM's Placement scheduler already leaves it out of every decision; and the score-writer refuses
// to write for either (UnknownCluster), so a score sent for them would only be dead-lettered.
//
// Lease freshness: the lease a klusterlet renews is a separate object (a coordination.k8s.io Lease
// in the cluster's namespace), not part of the ManagedCluster. The hub's lease controller turns a
// lease not renewed for 5 x spec.leaseDurationSeconds into Available Unknown (reason
// ManagedClusterLeaseUpdateStopped), so Unreachable is that staleness. n is the number of whole
// lease periods (spec.leaseDurationSeconds, 60 when unset, as OCM defaults it) between the
// condition's lastTransitionTime and the evaluation: a cluster silent for a moment may be a blip,
// one silent for 40 periods (40 minutes by default) ranks with the worst. ClockNotSynced is
// discounted because lease staleness is judged by the agent's clock.
//
// # Timing and validity
//
// Events alone cannot keep health scores right. Knative's ApiServerSource sends only the changes
// its watch delivers: nothing for the ManagedClusters that exist when it starts (its adapter
// ignores the initial list) and nothing for changes that happened while it relisted. And an
// Unreachable cluster's agent has stopped, so its ManagedCluster no longer changes: no event
// would ever lower its score as the periods pass. So each ping scores every cluster as it is
// then, and the shipped PingSource (deploy/schedules.yaml) pings every minute. The informer needs
// list and watch on managedclusters (deploy/health-scorer.yaml) and nothing else; until it has
// listed the hub once, a ping is answered 503 (400 Forbidden if the list was refused).
//
// A ping's scores are dated at its evaluation (the scorer's clock); an event's at the event's
// time (its CloudEvent time, which the ApiServerSource adapter stamps when it sends; the receipt
// time when absent). The writer keeps the newer per cluster, so two clocks a little apart can
// at worst keep an older state until the next ping.
//
// Each score is valid for --valid-for (default 5m, five pings) from its evaluation. Pings renew
// it, so a few lost pings change nothing; a score nobody renews any more (the scorer, its
// PingSource or its access to the hub gone) lapses, and a Placement stops trusting a health that
// nobody has looked at, rather than keeping it for ever. --valid-for 0 sends neverExpires (OCM's
// validUntil nil), for a setup that has no PingSource.
//
// Events in Reference mode (dev.knative.apiserver.ref.*) carry no status and are refused.
package health
