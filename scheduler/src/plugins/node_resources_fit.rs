//! `NodeResourcesFit`: does the node have room for the pod's requests, and
//! how much room is left (upstream
//! `pkg/scheduler/framework/plugins/noderesources/{fit.go,least_allocated.go,resource_allocation.go}`).
//!
//! # Filter
//! [`flotilla_shared::fit::insufficient_resources`] (shared with the
//! coordinator's bind arbiter) lists what the node lacks, in upstream order
//! (`Too many pods`, cpu, memory, ephemeral-storage, extended resources).
//! Every entry's reason is reported. The code is `UnschedulableAndUnresolvable`
//! when some request exceeds the node's whole allocatable (v1.34+: preemption
//! cannot help), else `Unschedulable`.
//!
//! # Score: `LeastAllocated` (the upstream default strategy)
//! Resources cpu and memory, weight 1 each. Per resource `r` with weight `w`:
//! - `requested = node non-zero sum + pod non-zero request` (upstream scores
//!   NodeResourcesFit with `NonZeroRequested`: a container without a cpu or
//!   memory request counts 100m / 200 MiB, so best-effort pods still spread);
//! - `score = (allocatable - requested) * 100 / allocatable` in integer
//!   math, 0 when `requested > allocatable`;
//! - a resource whose allocatable is 0 is left out, weight included
//!   (upstream `leastResourceScorer` `continue`s on it).
//!
//! Node score = `Σ score·w / Σ w` (0 when no resource is left). No
//! normalization: the raw score is already in 0..=100.
//!
//! ## Adding strategies
//! Upstream also offers `MostAllocated` and `RequestedToCapacityRatio`. They
//! differ only in the per-node formula applied to the same
//! `(requested, allocatable)` pairs, which [`NodeResourcesFit::score`]
//! gathers once. To add them, introduce
//! `pub enum ScoringStrategy { LeastAllocated, MostAllocated, RequestedToCapacityRatio { shape } }`
//! as a field of [`NodeResourcesFit`] and dispatch on it where
//! `least_allocated` is called; the gathering (non-zero sums, skipped
//! zero-allocatable resources, weights) stays shared.

use flotilla_shared::fit;
use flotilla_shared::framework::{
    ClusterEvent, Code, CycleState, FilterPlugin, MAX_NODE_SCORE, Plugin, ScorePlugin, Status,
};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;

/// Registry name.
pub const NAME: &str = names::NODE_RESOURCES_FIT;

/// Upstream default resource weight for cpu and memory.
pub const DEFAULT_RESOURCE_WEIGHT: i64 = 1;

/// A new node, grown allocatable, or a pod leaving a node can help.
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeAllocatableGrew,
    ClusterEvent::AssignedPodDeleted,
];

/// Filter and Score plugin for node capacity (default score weight 1).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeResourcesFit {
    /// Weight of cpu in the node score (upstream `ResourceSpec.Weight`).
    cpu_weight: i64,
    /// Weight of memory in the node score.
    memory_weight: i64,
}

impl Default for NodeResourcesFit {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeResourcesFit {
    /// The plugin with upstream defaults: `LeastAllocated`, cpu and memory
    /// weighted 1 each.
    #[must_use]
    pub const fn new() -> Self {
        NodeResourcesFit {
            cpu_weight: DEFAULT_RESOURCE_WEIGHT,
            memory_weight: DEFAULT_RESOURCE_WEIGHT,
        }
    }
}

/// One resource's `LeastAllocated` score (upstream `leastRequestedScore`):
/// the free share after placing the pod, 0..=100, integer math.
#[must_use]
fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    (capacity - requested) * MAX_NODE_SCORE / capacity
}

/// Weighted `LeastAllocated` node score over `(requested, allocatable,
/// weight)` triples; resources with allocatable 0 are skipped, and a node
/// with no scored resource gets 0.
#[must_use]
fn least_allocated(resources: &[(i64, i64, i64)]) -> i64 {
    let (mut sum, mut weights) = (0i64, 0i64);
    for &(requested, allocatable, weight) in resources {
        if allocatable == 0 {
            continue;
        }
        sum += least_requested_score(requested, allocatable) * weight;
        weights += weight;
    }
    if weights == 0 { 0 } else { sum / weights }
}

impl Plugin for NodeResourcesFit {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl FilterPlugin for NodeResourcesFit {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        // An empty Vec does not allocate, so the fitting case is free; the
        // reason texts are static or interned, so a rejection allocates once.
        let (reasons, unresolvable) = fit::insufficient_reasons(pod, node);
        if reasons.is_empty() {
            return Status::success();
        }
        let code = if unresolvable {
            Code::UnschedulableAndUnresolvable
        } else {
            Code::Unschedulable
        };
        Status {
            code,
            reasons,
            plugin: NAME,
        }
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let alloc = &node.spec.allocatable;
        Ok(least_allocated(&[
            (
                node.non_zero_milli_cpu + pod.non_zero_milli_cpu,
                alloc.milli_cpu,
                self.cpu_weight,
            ),
            (
                node.non_zero_memory + pod.non_zero_memory,
                alloc.memory,
                self.memory_weight,
            ),
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
            NodeBuilder::new("n1")
                .cpu(cpu)
                .memory(mem)
                .pods(110)
                .build_spec(),
        ))
    }

    fn score(pod: &PodInfo, node: &NodeInfo) -> i64 {
        NodeResourcesFit::new()
            .score(&CycleState::default(), pod, node)
            .unwrap()
    }

    fn filter(pod: &PodInfo, node: &NodeInfo) -> Status {
        NodeResourcesFit::new().filter(&CycleState::default(), pod, node)
    }

    #[test]
    fn fitting_pod_passes() {
        let n = node("4", "8Gi");
        let pod = PodBuilder::new("p").cpu("4").memory("8Gi").build_info();
        assert_eq!(filter(&pod, &n), Status::success());
    }

    #[test]
    fn short_resources_are_all_reported_in_order_as_unschedulable() {
        let mut n = node("2", "4Gi");
        n.add_pod(Arc::new(
            PodBuilder::new("a").cpu("1500m").memory("3Gi").build_info(),
        ));
        let pod = PodBuilder::new("p").cpu("1").memory("2Gi").build_info();
        let st = filter(&pod, &n);
        assert_eq!(
            st.code,
            Code::Unschedulable,
            "both fit an empty node: preemption helps"
        );
        assert_eq!(st.reasons, ["Insufficient cpu", "Insufficient memory"]);
        assert_eq!(st.plugin, "NodeResourcesFit");
    }

    #[test]
    fn request_above_allocatable_is_unresolvable() {
        let n = node("2", "4Gi");
        let pod = PodBuilder::new("p").cpu("1").memory("5Gi").build_info();
        let st = filter(&pod, &n);
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(st.reasons, ["Insufficient memory"]);
    }

    #[test]
    fn full_pod_slots_report_too_many_pods() {
        let mut n = NodeInfo::new(Arc::new(
            NodeBuilder::new("n1")
                .cpu("4")
                .memory("8Gi")
                .pods(1)
                .build_spec(),
        ));
        n.add_pod(Arc::new(PodBuilder::new("a").build_info()));
        let st = filter(&PodBuilder::new("p").build_info(), &n);
        assert_eq!(st.code, Code::Unschedulable);
        assert_eq!(st.reasons, ["Too many pods"]);
    }

    #[test]
    fn least_allocated_matches_upstream_example() {
        // Upstream least_allocated_test "nothing scheduled, resources
        // requested, differently sized nodes": pod 3000m / 5000 bytes.
        // node 4000m/10000: cpu (4000-3000)*100/4000 = 25, memory
        // (10000-5000)*100/10000 = 50 -> (25+50)/2 = 37.
        // node 6000m/10000: cpu 50, memory 50 -> 50.
        let pod = PodBuilder::new("p")
            .cpu("3000m")
            .memory("5000")
            .build_info();
        assert_eq!(score(&pod, &node("4000m", "10000")), 37);
        assert_eq!(score(&pod, &node("6000m", "10000")), 50);
    }

    #[test]
    fn pod_without_requests_counts_the_non_zero_defaults() {
        // Node 1 cpu / 1Gi, best-effort pod counts 100m and 200MiB:
        // cpu (1000-100)*100/1000 = 90, memory (1024-200)*100/1024 = 80
        // (80.47 truncated) -> (90+80)/2 = 85. Real requests (0) would give 100.
        let pod = PodBuilder::new("p").build_info();
        assert_eq!(score(&pod, &node("1", "1Gi")), 85);
    }

    #[test]
    fn existing_pods_count_with_their_non_zero_requests() {
        // Node 1 cpu / 1Gi holds one best-effort pod (100m, 200MiB); the new
        // pod asks 500m / 512Mi. cpu (1000-600)*100/1000 = 40, memory
        // (1024-712)*100/1024 = 30 (30.47) -> 35.
        let mut n = node("1", "1Gi");
        n.add_pod(Arc::new(PodBuilder::new("be").build_info()));
        let pod = PodBuilder::new("p")
            .cpu("500m")
            .memory("512Mi")
            .build_info();
        assert_eq!(score(&pod, &n), 35);
    }

    #[test]
    fn over_capacity_scores_zero_and_zero_allocatable_is_skipped() {
        // cpu requested 5000 > 4000 -> 0; memory (10000-5000)*100/10000 = 50 -> 25.
        let pod = PodBuilder::new("p").cpu("5").memory("5000").build_info();
        assert_eq!(score(&pod, &node("4", "10000")), 25);
        // Node without memory allocatable: upstream skips memory (and its
        // weight), so only cpu counts: (4000-3000)*100/4000 = 25.
        let no_mem = NodeInfo::new(Arc::new(NodeBuilder::new("n").cpu("4").build_spec()));
        let pod = PodBuilder::new("p").cpu("3").memory("1Gi").build_info();
        assert_eq!(score(&pod, &no_mem), 25);
        // Nothing allocatable at all -> 0.
        let empty = NodeInfo::new(Arc::new(NodeBuilder::new("e").build_spec()));
        assert_eq!(score(&pod, &empty), 0);
    }

    #[test]
    fn least_allocated_weights_are_applied() {
        // cpu score 25 weight 3, memory score 50 weight 1 -> (75+50)/4 = 31.
        assert_eq!(least_allocated(&[(3000, 4000, 3), (5000, 10000, 1)]), 31);
        assert_eq!(least_requested_score(0, 4000), 100);
        assert_eq!(least_requested_score(4000, 4000), 0);
        assert_eq!(
            NodeResourcesFit::default().events_to_register(),
            [
                ClusterEvent::NodeAdded,
                ClusterEvent::NodeAllocatableGrew,
                ClusterEvent::AssignedPodDeleted
            ]
        );
    }
}
