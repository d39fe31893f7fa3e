//! `NodeResourcesBalancedAllocation`: favour nodes whose resource usage
//! becomes more balanced when the pod is placed there (upstream
//! `pkg/scheduler/framework/plugins/noderesources/balanced_allocation.go` and
//! `resource_allocation.go`, as changed by kubernetes/kubernetes#135573 for
//! v1.36).
//!
//! # Args (`NodeResourcesBalancedAllocationArgs`)
//! `resources: [{name, weight}]`, default cpu and memory. As upstream, a
//! weight unset or 0 means 1 and any other weight is an error
//! (`resources[i].weight: Invalid value: 2: must be 1`): weights do not
//! enter this score. A name listed twice is an error
//! (`resources[i].name: Duplicate value: "cpu"`).
//!
//! # Score
//! Upstream facts this follows:
//! - real requests (`useRequested: true`): the node side is the sum of the
//!   pods' requests, the pod side its request **without** the 100m / 200 MiB
//!   non-zero defaults; resources with allocatable 0, and extended resources
//!   the pod does not request, are left out (see
//!   [`super::resource_allocation`]);
//! - per resource, `fraction = requested / allocatable`, capped at 1;
//! - `std` is `|f1 - f2| / 2` for two fractions, the population standard
//!   deviation for more, 0 for fewer; a balance score is
//!   `int64((1 - std) * 100)` (truncation), in 50..=100;
//! - the node score compares the balance with the pod (`requested + pod`)
//!   to the balance without it (`requested`):
//!   `50 + (50 + with - without) / 2` (integer division). An unchanged
//!   balance scores 75, perfectly balanced → perfectly unbalanced 50, the
//!   reverse 100. Before v1.36 the score was the balance with the pod alone;
//!   upstream changed it to match the documented intent ("favors nodes that
//!   would obtain a **more** balanced resource usage").
//! - PreScore returns `Skip` for a pod requesting none of the configured
//!   resources (a best-effort pod, kubernetes/kubernetes#129138, fixed by
//!   #130260), so such pods get no score from this plugin.
//!
//! Scores are already in 0..=100: no NormalizeScore.

use std::collections::HashSet;
use std::sync::Arc;

use flotilla_shared::framework::{
    ClusterEvent, CycleState, MAX_NODE_SCORE, Plugin, PreScorePlugin, ScorePlugin, SharedLister,
    Status,
};
use flotilla_shared::{NodeHot, NodeInfo, PodInfo};
use serde::Deserialize;

use super::names;
use super::resource_allocation::{
    DEFAULT_RESOURCE_WEIGHT, NodeFigures, ResourceKind, ResourceSpec, default_resources, defaulted,
    hot_scorable, null_as_default,
};
use crate::framework::validation::{self, duplicate, invalid};

/// Registry name.
pub const NAME: &str = names::NODE_RESOURCES_BALANCED_ALLOCATION;

/// Args kind (`kind:` in `pluginConfig`).
pub const ARGS_KIND: &str = "NodeResourcesBalancedAllocationArgs";

/// Score-only plugins reject nothing, so nothing needs requeueing.
const EVENTS: &[ClusterEvent] = &[];

/// Fractions kept on the stack; more configured resources than this use the
/// heap (Score runs per node, so the common case must not allocate).
const STACK_RESOURCES: usize = 8;

/// `NodeResourcesBalancedAllocationArgs` as written in `pluginConfig`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeResourcesBalancedAllocationArgs {
    /// Resources balanced; empty means cpu and memory.
    #[serde(deserialize_with = "null_as_default")]
    pub resources: Vec<ResourceSpec>,
}

/// Score plugin favouring balanced resource usage (default score weight 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeResourcesBalancedAllocation {
    /// What each configured resource reads, in args order.
    resources: Vec<ResourceKind>,
}

impl Default for NodeResourcesBalancedAllocation {
    fn default() -> Self {
        Self::new()
    }
}

impl NodeResourcesBalancedAllocation {
    /// The plugin with upstream defaults (resources cpu and memory).
    #[must_use]
    pub fn new() -> Self {
        NodeResourcesBalancedAllocation {
            resources: default_resources()
                .iter()
                .map(|r| ResourceKind::of(&r.name))
                .collect(),
        }
    }

    /// Builds the plugin from its args, defaulting and validating them as
    /// upstream (`ValidateNodeResourcesBalancedAllocationArgs`).
    ///
    /// # Errors
    /// Every invalid field, each message starting with its JSON path inside
    /// the args, joined by `"; "`.
    pub fn from_args(args: &NodeResourcesBalancedAllocationArgs) -> Result<Self, String> {
        let resources = defaulted(&args.resources);
        let mut errs = Vec::new();
        let mut seen = HashSet::new();
        for (i, r) in resources.iter().enumerate() {
            if !seen.insert(r.name.as_str()) {
                errs.push(duplicate(&format!("resources[{i}].name"), &r.name));
            }
            if r.weight != DEFAULT_RESOURCE_WEIGHT {
                errs.push(invalid(
                    &format!("resources[{i}].weight"),
                    r.weight,
                    "must be 1",
                ));
            }
        }
        validation::collect(errs)?;
        Ok(NodeResourcesBalancedAllocation {
            resources: resources
                .iter()
                .map(|r| ResourceKind::of(&r.name))
                .collect(),
        })
    }

    /// Whether the pod requests none of the configured resources (upstream
    /// `isBestEffortPod` over real requests).
    fn requests_none(&self, pod: &PodInfo) -> bool {
        self.resources.iter().all(|r| r.pod_request(pod, true) == 0)
    }
}

/// Upstream `balancedResourceScore` over fractions already capped at 1:
/// `int64((1 - std) * 100)`.
#[must_use]
fn balance_score(fractions: &[f64]) -> i64 {
    let std = match fractions {
        [] | [_] => 0.0,
        [f1, f2] => ((f1 - f2) / 2.0).abs(),
        _ => {
            #[allow(clippy::cast_precision_loss)] // a handful of resources
            let len = fractions.len() as f64;
            let mean = fractions.iter().sum::<f64>() / len;
            (fractions
                .iter()
                .map(|f| (f - mean) * (f - mean))
                .sum::<f64>()
                / len)
                .sqrt()
        }
    };
    #[allow(clippy::cast_possible_truncation, clippy::cast_precision_loss)]
    let score = ((1.0 - std) * MAX_NODE_SCORE as f64) as i64;
    score
}

/// The node score from the balance with and without the pod (upstream
/// `balancedResourceScorer`, v1.36): 50..=100, 75 when unchanged.
#[must_use]
fn balanced_resource_score(with_pod: i64, without_pod: i64) -> i64 {
    MAX_NODE_SCORE / 2 + (MAX_NODE_SCORE / 2 + with_pod - without_pod) / 2
}

/// `requested / allocatable`, capped at 1.
#[allow(clippy::cast_precision_loss)] // quantities far below 2^53
fn fraction(requested: i64, allocatable: i64) -> f64 {
    (requested as f64 / allocatable as f64).min(1.0)
}

impl Plugin for NodeResourcesBalancedAllocation {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreScorePlugin for NodeResourcesBalancedAllocation {
    /// `Skip` for a pod requesting none of the configured resources. Nothing
    /// is stored: Score reads the pod's requests from `PodInfo` directly.
    fn pre_score(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[Arc<NodeInfo>],
        _cluster: &dyn SharedLister,
    ) -> Status {
        if self.requests_none(pod) {
            Status::skip()
        } else {
            Status::success()
        }
    }
}

impl ScorePlugin for NodeResourcesBalancedAllocation {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(self.score_figures(pod, node))
    }

    fn score_hot(&self, _state: &CycleState, pod: &PodInfo, node: &NodeHot) -> Option<i64> {
        hot_scorable(&self.resources, pod).then(|| self.score_figures(pod, node))
    }

    /// Whether the hot records can score the pod is decided once.
    fn score_hot_batch(
        &self,
        _state: &CycleState,
        pod: &PodInfo,
        hot: &[NodeHot],
        nodes: &[usize],
        out: &mut [Option<i64>],
    ) {
        if !hot_scorable(&self.resources, pod) {
            out.fill(None);
            return;
        }
        // The default cpu and memory: `score_figures`' two-resource
        // arithmetic with the resource choice made once.
        if let [ResourceKind::Cpu, ResourceKind::Memory] = self.resources.as_slice() {
            let (cpu, mem) = (pod.requests.milli_cpu, pod.requests.memory);
            for (o, &i) in out.iter_mut().zip(nodes) {
                let h = &hot[i];
                let (ca, ma) = (h.allocatable_milli_cpu, h.allocatable_memory);
                *o = Some(if ca == 0 || ma == 0 {
                    balanced_resource_score(MAX_NODE_SCORE, MAX_NODE_SCORE)
                } else {
                    let (cr, mr) = (h.requested_milli_cpu, h.requested_memory);
                    balanced_resource_score(
                        balance_score(&[fraction(cr + cpu, ca), fraction(mr + mem, ma)]),
                        balance_score(&[fraction(cr, ca), fraction(mr, ma)]),
                    )
                });
            }
            return;
        }
        for (o, &i) in out.iter_mut().zip(nodes) {
            *o = Some(self.score_figures(pod, &hot[i]));
        }
    }
}

impl NodeResourcesBalancedAllocation {
    /// The score of `node` (its `NodeInfo` or its hot record) for `pod`.
    fn score_figures(&self, pod: &PodInfo, node: &impl NodeFigures) -> i64 {
        let figures = |r: &ResourceKind| r.allocation(node, r.pod_request(pod, true), true);
        // The default two resources: the same arithmetic without buffers
        // (Score runs per node).
        if let [a, b] = self.resources.as_slice() {
            return match (figures(a), figures(b)) {
                (Some(a), Some(b)) => balanced_resource_score(
                    balance_score(&[
                        fraction(a.requested, a.allocatable),
                        fraction(b.requested, b.allocatable),
                    ]),
                    balance_score(&[
                        fraction(a.node_requested, a.allocatable),
                        fraction(b.node_requested, b.allocatable),
                    ]),
                ),
                // One or no fraction: std 0 with and without the pod.
                _ => balanced_resource_score(MAX_NODE_SCORE, MAX_NODE_SCORE),
            };
        }
        let n = self.resources.len();
        let (mut stack_with, mut stack_without) =
            ([0.0f64; STACK_RESOURCES], [0.0f64; STACK_RESOURCES]);
        let (mut heap_with, mut heap_without);
        let (with, without): (&mut [f64], &mut [f64]) = if n <= STACK_RESOURCES {
            (&mut stack_with[..n], &mut stack_without[..n])
        } else {
            heap_with = vec![0.0; n];
            heap_without = vec![0.0; n];
            (&mut heap_with, &mut heap_without)
        };
        let mut len = 0;
        for r in &self.resources {
            if let Some(a) = figures(r) {
                with[len] = fraction(a.requested, a.allocatable);
                without[len] = fraction(a.node_requested, a.allocatable);
                len += 1;
            }
        }
        balanced_resource_score(balance_score(&with[..len]), balance_score(&without[..len]))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::{FakeLister, NodeBuilder, PodBuilder};
    use serde_json::json;

    /// A node of `cpu` / `mem` (and `extra` extended resources) holding `pods`.
    fn node(cpu: &str, mem: &str, extra: &[(&str, &str)], pods: &[PodBuilder]) -> NodeInfo {
        let b = extra.iter().fold(
            NodeBuilder::new("n").cpu(cpu).memory(mem).pods(110),
            |b, (r, q)| b.resource(r, q),
        );
        let mut n = NodeInfo::new(Arc::new(b.build_spec()));
        for p in pods {
            n.add_pod(Arc::new(p.clone().build_info()));
        }
        n
    }

    /// Upstream test pods: `cpuAndMemory` asks 3000m / 5000 bytes,
    /// `cpuOnly` 3000m and an explicit memory request of 0, `memoryOnly`
    /// 5000 bytes and an explicit cpu request of 0.
    fn cpu_and_memory() -> PodBuilder {
        PodBuilder::new("cm").cpu("3000m").memory("5000")
    }

    fn cpu_only() -> PodBuilder {
        PodBuilder::new("c").cpu("3000m").memory("0")
    }

    fn memory_only() -> PodBuilder {
        PodBuilder::new("m").cpu("0").memory("5000")
    }

    fn score_with(p: &NodeResourcesBalancedAllocation, pod: &PodBuilder, node: &NodeInfo) -> i64 {
        p.score(&CycleState::default(), &pod.clone().build_info(), node)
            .unwrap()
    }

    fn score(pod: &PodBuilder, node: &NodeInfo) -> i64 {
        score_with(&NodeResourcesBalancedAllocation::new(), pod, node)
    }

    fn plugin(args: serde_json::Value) -> Result<NodeResourcesBalancedAllocation, String> {
        let a: NodeResourcesBalancedAllocationArgs =
            crate::framework::decode_args(Some(&args), ARGS_KIND)?;
        NodeResourcesBalancedAllocation::from_args(&a)
    }

    #[test]
    fn two_resources_score_the_change_in_balance() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            node: NodeInfo,
            want: i64,
        }
        let cases = [
            Case {
                // Empty 4000m/10000 node: without 0, 0 -> 100; with 0.75,
                // 0.5 -> std 0.125 -> 87: 50 + (50 + 87 - 100) / 2 = 68.
                name: "nothing scheduled, resources requested, differently sized nodes (4000)",
                pod: cpu_and_memory(),
                node: node("4000m", "10000", &[], &[]),
                want: 68,
            },
            Case {
                // 0.5 and 0.5 -> 100 with and without: unchanged -> 75.
                name: "nothing scheduled, resources requested, differently sized nodes (6000)",
                pod: cpu_and_memory(),
                node: node("6000m", "10000", &[], &[]),
                want: 75,
            },
            Case {
                // Upstream PR #135573 "requested resources at node
                // capacity": 6000m/10000 holding cpuOnly, pod cpuOnly.
                // without 0.5, 0 -> 75; with 1, 0 -> 50: 50 + 25/2 = 62.
                name: "requested resources at node capacity (cpu only there)",
                pod: cpu_only(),
                node: node("6000m", "10000", &[], &[cpu_only()]),
                want: 62,
            },
            Case {
                // Same, node holding cpuAndMemory: without 0.5, 0.5 -> 100;
                // with 1, 0.5 -> 75: 50 + 25/2 = 62.
                name: "requested resources at node capacity (cpu and memory there)",
                pod: cpu_only(),
                node: node("6000m", "10000", &[], &[cpu_and_memory()]),
                want: 62,
            },
            Case {
                // Upstream PR #135573 "nodes to reach min/max score":
                // 3000m/5000 holding cpuOnly (1, 0 -> 50), memoryOnly pod
                // brings it to 1, 1 -> 100: 50 + 100/2 = 100.
                name: "unbalanced to balanced scores the maximum",
                pod: memory_only(),
                node: node("3000m", "5000", &[], &[cpu_only()]),
                want: 100,
            },
            Case {
                // Empty 3000m/5000 (100), memoryOnly pod: 0, 1 -> 50:
                // 50 + 0/2 = 50.
                name: "balanced to unbalanced scores the minimum",
                pod: memory_only(),
                node: node("3000m", "5000", &[], &[]),
                want: 50,
            },
            Case {
                // Fractions cap at 1: cpu 8000/4000 -> 1 (with), memory 0.5
                // -> 75; without 100: 50 + 25/2 = 62.
                name: "fractions cap at 1",
                pod: PodBuilder::new("p").cpu("8").memory("5000"),
                node: node("4", "10000", &[], &[]),
                want: 62,
            },
            Case {
                // A best-effort pod on the node adds nothing (real requests):
                // the first case again.
                name: "best-effort neighbours count zero",
                pod: cpu_and_memory(),
                node: node("4000m", "10000", &[], &[PodBuilder::new("be")]),
                want: 68,
            },
            Case {
                // No memory allocatable: one fraction, std 0 on both sides.
                name: "zero allocatable is left out",
                pod: cpu_and_memory(),
                node: NodeInfo::new(Arc::new(NodeBuilder::new("n").cpu("4").build_spec())),
                want: 75,
            },
        ];
        for c in &cases {
            assert_eq!(score(&c.pod, &c.node), c.want, "{}", c.name);
        }
    }

    #[test]
    fn three_resources_use_the_population_std() {
        // Shaped after upstream PR #135573's extended-resource case: 3500m /
        // 40000 bytes / 8 GPUs holding 3000m / 5000; the pod asks one GPU
        // only. The pod requests the GPU, so it is scored on both sides
        // (0/8 without the pod, 1/8 with it).
        let args = json!({"resources": [{"name": "cpu"}, {"name": "memory"},
                                        {"name": "nvidia.com/gpu", "weight": 1}]});
        let p = plugin(args).unwrap();
        let gpu_pod = PodBuilder::new("g")
            .cpu("0")
            .memory("0")
            .request("nvidia.com/gpu", "1");
        let n = node(
            "3500m",
            "40000",
            &[("nvidia.com/gpu", "8")],
            &[PodBuilder::new("x").cpu("3000m").memory("5000")],
        );
        // with: 6/7, 1/8, 1/8: mean 0.3690, std 0.3452 -> 65.
        // without: 6/7, 1/8, 0: mean 0.3274, std 0.3784 -> 62.
        // 50 + (50 + 65 - 62) / 2 = 76.
        assert_eq!(balance_score(&[6.0 / 7.0, 0.125, 0.125]), 65);
        assert_eq!(balance_score(&[6.0 / 7.0, 0.125, 0.0]), 62);
        assert_eq!(score_with(&p, &gpu_pod, &n), 76);
        // The GPU is left out for a pod that does not request it: two
        // fractions, 0.857 -> 0.857 and 0.125 -> 0.25: without 63, with 69:
        // 50 + (50 + 69 - 63) / 2 = 78.
        let cpu_mem = PodBuilder::new("q").cpu("0").memory("5000");
        assert_eq!(score_with(&p, &cpu_mem, &n), 78);
        // More resources than the stack buffer holds: the heap path gives
        // the same answer (unrequested extended resources drop out).
        let many: Vec<serde_json::Value> = ["cpu", "memory"]
            .into_iter()
            .map(String::from)
            .chain((0..8).map(|i| format!("example.com/r{i}")))
            .map(|name| json!({"name": name}))
            .collect();
        let wide = plugin(json!({ "resources": many })).unwrap();
        assert_eq!(wide.resources.len(), 10);
        assert_eq!(score_with(&wide, &cpu_mem, &n), 78);
        // Hand-checked population std: 0.5, 0.5, 1 -> mean 2/3,
        // variance 1/18, std 0.2357 -> 76.
        assert_eq!(balance_score(&[0.5, 0.5, 1.0]), 76);
        assert_eq!(balance_score(&[]), 100);
        assert_eq!(balance_score(&[0.3]), 100);
    }

    #[test]
    fn pre_score_skips_pods_requesting_none_of_the_resources() {
        let p = NodeResourcesBalancedAllocation::new();
        let lister = FakeLister::new(vec![node("4", "8Gi", &[], &[])]);
        let run = |pod: PodBuilder| {
            p.pre_score(
                &mut CycleState::default(),
                &pod.build_info(),
                &lister.nodes,
                &lister,
            )
            .code
        };
        assert_eq!(run(PodBuilder::new("be")), Code::Skip);
        assert_eq!(run(cpu_only()), Code::Success);
        assert_eq!(
            run(PodBuilder::new("gpu").request("nvidia.com/gpu", "1")),
            Code::Skip
        );
        let with_gpu = plugin(json!({"resources": [{"name": "nvidia.com/gpu"}]})).unwrap();
        let gpu = PodBuilder::new("gpu")
            .request("nvidia.com/gpu", "1")
            .build_info();
        assert_eq!(
            with_gpu
                .pre_score(&mut CycleState::default(), &gpu, &lister.nodes, &lister)
                .code,
            Code::Success
        );
    }

    #[test]
    fn args_default_and_errors_name_the_json_path() {
        assert_eq!(
            plugin(json!({})).unwrap(),
            NodeResourcesBalancedAllocation::new()
        );
        assert_eq!(
            plugin(json!({"resources": [{"name": "cpu", "weight": 0}, {"name": "memory"}]}))
                .unwrap(),
            NodeResourcesBalancedAllocation::new()
        );
        assert_eq!(
            plugin(json!({"resources": [{"name": "cpu", "weight": 2}]})).unwrap_err(),
            "resources[0].weight: Invalid value: 2: must be 1"
        );
        assert_eq!(
            plugin(json!({"resources": [{"name": "cpu"}, {"name": "memory"}, {"name": "cpu", "weight": -1}]}))
                .unwrap_err(),
            "resources[2].name: Duplicate value: \"cpu\"; resources[2].weight: Invalid value: -1: must be 1"
        );
        let e = plugin(json!({"resources": [{"name": "cpu", "wieght": 1}]})).unwrap_err();
        assert!(e.starts_with("resources[0]"), "{e}");
        assert!(e.contains("unknown field `wieght`"), "{e}");
    }

    #[test]
    fn registry_facts() {
        assert!(
            NodeResourcesBalancedAllocation::new()
                .events_to_register()
                .is_empty()
        );
        assert_eq!(
            NodeResourcesBalancedAllocation::new().name(),
            "NodeResourcesBalancedAllocation"
        );
        assert_eq!(balanced_resource_score(100, 100), 75);
        assert_eq!(balanced_resource_score(50, 100), 50);
        assert_eq!(balanced_resource_score(100, 50), 100);
    }
}
