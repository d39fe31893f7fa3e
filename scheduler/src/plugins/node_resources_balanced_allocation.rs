//! `NodeResourcesBalancedAllocation`: prefer nodes whose cpu and memory
//! would be used in similar proportions after placing the pod (upstream
//! `pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go` and
//! `resource_allocation.go`).
//!
//! Upstream facts this follows (read from those files):
//! - the plugin is built with `useRequested: true`: the node side is
//!   `nodeInfo.Requested` (the **real** requests, not `NonZeroRequested`) and
//!   the pod side is `PodRequests` **without** the 100m / 200 MiB non-zero
//!   defaults (those are only applied when `useRequested` is false, i.e. for
//!   NodeResourcesFit);
//! - PreScore returns `Skip` for a best-effort pod (it requests none of the
//!   scored resources; kubernetes/kubernetes#129138, fixed by #130260), so
//!   such pods get no score from this plugin. There is no PreScore extension
//!   point here, so [`NodeResourcesBalancedAllocation::score`] returns 0 for
//!   them on every node: a constant adds nothing to the ranking, exactly like
//!   a skipped plugin;
//! - per resource, `fraction = requested / allocatable` capped at 1; a
//!   resource with allocatable 0 is left out;
//! - `std` is `|f1 - f2| / 2` for two fractions, the population standard
//!   deviation for more, 0 for fewer;
//! - `score = int64((1 - std) * 100)` (truncation), so raw scores lie in
//!   50..=100; there is no NormalizeScore.

use flotilla_shared::framework::{
    ClusterEvent, CycleState, MAX_NODE_SCORE, Plugin, ScorePlugin, Status,
};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;

/// Registry name.
pub const NAME: &str = names::NODE_RESOURCES_BALANCED_ALLOCATION;

/// Score-only plugins reject nothing, so nothing needs requeueing.
const EVENTS: &[ClusterEvent] = &[];

/// Score plugin favouring balanced cpu/memory usage (default score weight 1).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeResourcesBalancedAllocation;

impl NodeResourcesBalancedAllocation {
    /// The plugin with upstream defaults (resources cpu and memory).
    #[must_use]
    pub const fn new() -> Self {
        NodeResourcesBalancedAllocation
    }
}

/// Upstream `balancedResourceScorer` over `(requested, allocatable)` pairs,
/// without allocating: `(1 - std) * 100` truncated.
#[must_use]
fn balanced_resource_score(resources: &[(i64, i64)]) -> i64 {
    #[allow(clippy::cast_precision_loss)] // quantities far below 2^53
    let fraction =
        |(requested, allocatable): (i64, i64)| (requested as f64 / allocatable as f64).min(1.0);
    let scored = || {
        resources
            .iter()
            .copied()
            .filter(|&(_, a)| a != 0)
            .map(fraction)
    };
    let n = scored().count();
    let std = match n {
        0 | 1 => 0.0,
        2 => {
            let mut it = scored();
            let (f1, f2) = (it.next().unwrap_or(0.0), it.next().unwrap_or(0.0));
            ((f1 - f2) / 2.0).abs()
        }
        _ => {
            #[allow(clippy::cast_precision_loss)]
            let len = n as f64;
            let mean = scored().sum::<f64>() / len;
            (scored().map(|f| (f - mean) * (f - mean)).sum::<f64>() / len).sqrt()
        }
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let score = ((1.0 - std) * MAX_NODE_SCORE as f64) as i64;
    score
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let want = &pod.requests;
        if want.milli_cpu == 0 && want.memory == 0 {
            // Upstream PreScore: Skip best-effort pods.
            return Ok(0);
        }
        let alloc = &node.spec.allocatable;
        let used = &node.requested;
        Ok(balanced_resource_score(&[
            (used.milli_cpu + want.milli_cpu, alloc.milli_cpu),
            (used.memory + want.memory, alloc.memory),
        ]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use std::sync::Arc;

    fn node(cpu: &str, mem: &str) -> NodeInfo {
        NodeInfo::new(Arc::new(
            NodeBuilder::new("n")
                .cpu(cpu)
                .memory(mem)
                .pods(110)
                .build_spec(),
        ))
    }

    /// Upstream test pods: `cpuAndMemory` asks 3000m / 5000 bytes, `cpuOnly`
    /// asks 3000m and an explicit memory request of 0.
    fn cpu_and_memory(name: &str) -> PodInfo {
        PodBuilder::new(name)
            .cpu("3000m")
            .memory("5000")
            .build_info()
    }

    fn cpu_only(name: &str) -> PodInfo {
        PodBuilder::new(name).cpu("3000m").memory("0").build_info()
    }

    fn score(pod: &PodInfo, node: &NodeInfo) -> i64 {
        NodeResourcesBalancedAllocation::new()
            .score(&CycleState::default(), pod, node)
            .unwrap()
    }

    #[test]
    fn nothing_scheduled_differently_sized_nodes() {
        // Upstream balanced_allocation_test: node1 4000m/10000: cpu 0.75,
        // memory 0.5, std 0.125 -> 87; node2 6000m/10000: 0.5 and 0.5 -> 100.
        let pod = cpu_and_memory("p");
        assert_eq!(score(&pod, &node("4000m", "10000")), 87);
        assert_eq!(score(&pod, &node("6000m", "10000")), 100);
    }

    #[test]
    fn scheduled_pods_count_with_their_real_requests() {
        // Upstream "resources requested, pods scheduled with resources": both
        // nodes 10000m/20000. node1 holds cpuOnly: cpu 6000/10000 = 0.6,
        // memory 5000/20000 = 0.25, std 0.175 -> 82. node2 holds cpuAndMemory:
        // 0.6 and 10000/20000 = 0.5, std 0.05 -> 95.
        let pod = cpu_and_memory("p");
        let mut n1 = node("10000m", "20000");
        n1.add_pod(Arc::new(cpu_only("a")));
        let mut n2 = node("10000m", "20000");
        n2.add_pod(Arc::new(cpu_and_memory("b")));
        assert_eq!(score(&pod, &n1), 82);
        assert_eq!(score(&pod, &n2), 95);
        // Second upstream case: node2 50000 memory: 0.6 and 0.2 -> std 0.2 -> 80.
        let mut n3 = node("10000m", "50000");
        n3.add_pod(Arc::new(cpu_and_memory("b")));
        assert_eq!(score(&pod, &n3), 80);
    }

    #[test]
    fn requested_at_capacity() {
        // Upstream "requested resources at node capacity": nodes 6000m/10000,
        // pod cpuOnly. node1 holds cpuOnly: cpu 1, memory 0, std 0.5 -> 50.
        // node2 holds cpuAndMemory: cpu 1, memory 0.5, std 0.25 -> 75.
        let pod = cpu_only("p");
        let mut n1 = node("6000m", "10000");
        n1.add_pod(Arc::new(cpu_only("a")));
        let mut n2 = node("6000m", "10000");
        n2.add_pod(Arc::new(cpu_and_memory("b")));
        assert_eq!(score(&pod, &n1), 50);
        assert_eq!(score(&pod, &n2), 75);
    }

    #[test]
    fn best_effort_pod_is_skipped_and_best_effort_neighbours_add_nothing() {
        // Best-effort incoming pod: upstream PreScore returns Skip -> 0 here
        // on every node, whatever the node holds.
        let be = PodBuilder::new("be").build_info();
        assert_eq!(score(&be, &node("4000m", "10000")), 0);
        // A best-effort pod already on the node adds 0 (real requests), so
        // the first upstream case still scores 87 (non-zero sums would add
        // 100m and 200MiB and change it).
        let mut n = node("4000m", "10000");
        n.add_pod(Arc::new(PodBuilder::new("x").build_info()));
        assert_eq!(score(&cpu_and_memory("p"), &n), 87);
    }

    #[test]
    fn fractions_cap_at_one_and_zero_allocatable_is_skipped() {
        // cpu 8000/4000 caps at 1, memory 0.5 -> std 0.25 -> 75.
        let pod = PodBuilder::new("p").cpu("8").memory("5000").build_info();
        assert_eq!(score(&pod, &node("4", "10000")), 75);
        // No memory allocatable: one fraction left, std 0 -> 100.
        let no_mem = NodeInfo::new(Arc::new(NodeBuilder::new("n").cpu("4").build_spec()));
        assert_eq!(score(&cpu_and_memory("q"), &no_mem), 100);
    }

    #[test]
    fn more_than_two_resources_use_population_std() {
        // Fractions 0.5, 0.5, 1.0: mean 2/3, variance ((1/6)^2*2 + (1/3)^2)/3
        // = 1/18, std 0.2357 -> (1 - 0.2357) * 100 = 76.
        assert_eq!(balanced_resource_score(&[(1, 2), (2, 4), (3, 3)]), 76);
        assert_eq!(balanced_resource_score(&[]), 100);
        assert!(
            NodeResourcesBalancedAllocation
                .events_to_register()
                .is_empty()
        );
        assert_eq!(
            NodeResourcesBalancedAllocation.name(),
            "NodeResourcesBalancedAllocation"
        );
    }
}
