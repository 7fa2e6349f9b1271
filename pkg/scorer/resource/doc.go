// Package resource scores each managed cluster's free CPU, memory and GPU: allocatable minus
// requested, from kube-state-metrics series that carry a cluster label (as a hub Prometheus,
// Thanos or VictoriaMetrics fed by remote-write holds them).
//
// Per cluster and resource (summed over nodes and over Pending and Running pods):
//
//	allocatable = sum kube_node_status_allocatable{resource=R}
//	requested   = sum kube_pod_container_resource_requests{resource=R}   (0 when no pod requests R)
//	available   = allocatable - requested
//
// with R = cpu (cores), memory (bytes) or the GPU resource (nvidia_com_gpu by default, devices).
//
// Score names (choose with "scores"; all go into one AddOnPlacementScore, "resource"):
//
//	cpuAvailable, memAvailable, gpuAvailable
//	    available, linear between bounds.<cpu|memory|gpu>.min (-100) and .max (100), clamped.
//	    The names resource-usage-collect-addon uses. Default bounds: 0-64 cores, 0-256 GiB, 0-8 GPUs.
//	cpuAvailableRatio, memAvailableRatio, gpuAvailableRatio
//	    round(100 * available / allocatable): the percentage free, 100 = idle, 0 = fully requested,
//	    negative when requests exceed allocatable (clamped at -100).
//	free-capacity
//	    gpuAvailableRatio under the name of seed 000's GPU score (e.g. resource gpu-usage-score).
//	ResourceRatioCPU
//	    cpuAvailableRatio under seed 004's calculator name.
//	ResourceAllocatableMemory
//	    allocatable memory (not net of requests), linear between bounds.memory, as seed 004's
//	    calculator of that name.
//
// Default scores: the six cpu/mem/gpu Available and AvailableRatio names. Values are rounded half
// away from zero (normalize.Round).
//
// A resource with no allocatable series for a cluster gets no score (a cluster without GPUs has no
// GPU scores); a ratio needs allocatable > 0; a cluster left with no score is left out of the
// reply, never scored 0. Series whose cluster label is missing or not a valid cluster name are
// dropped and counted in a warning.
//
// Inputs: a PingSource event whose data is a Config (two instant queries, see Config.Queries), or
// a metric.changed event scored with the function's --metric-config and no query. A ping's
// requests query covers every cluster, so a cluster without a requests series has 0 requested.
// An event holds only what its producer sent (the metric-watcher sends only series that moved
// beyond its deadband): a resource of a cluster whose requests it does not carry gets only the
// scores of allocatable alone (ResourceAllocatableMemory) from it, and the next ping scores the
// rest; a cluster left with no score is left out of the reply.
package resource
