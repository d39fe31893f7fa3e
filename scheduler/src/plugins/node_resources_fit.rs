//! `NodeResourcesFit`: does the node have room for the pod's requests, and
//! how should nodes rank by how full they would be (upstream
//! `pkg/scheduler/framework/plugins/noderesources/{fit.go,least_allocated.go,
//! most_allocated.go,requested_to_capacity_ratio.go,resource_allocation.go}`).
//!
//! # Args (`NodeResourcesFitArgs`)
//! ```yaml
//! ignoredResources: [example.com/foo]      # extended resources Filter skips
//! ignoredResourceGroups: [example.com]     # ... by the part before the '/'
//! scoringStrategy:
//!   type: LeastAllocated                   # | MostAllocated | RequestedToCapacityRatio
//!   resources: [{name: cpu, weight: 1}, {name: memory, weight: 1}]
//!   requestedToCapacityRatio:              # only with RequestedToCapacityRatio
//!     shape: [{utilization: 0, score: 0}, {utilization: 100, score: 10}]
//! ```
//! Defaults as upstream v1: no `scoringStrategy` means `LeastAllocated` over
//! cpu and memory; an empty `resources` list means cpu and memory; a weight
//! unset or 0 means 1. Validation as upstream
//! (`ValidateNodeResourcesFitArgs`), every message starting with the JSON
//! path inside the args: names in `ignoredResources` and
//! `ignoredResourceGroups` must be qualified names, groups without `/`;
//! `scoringStrategy.type` one of the three; `resources[i].weight` in 1..=100;
//! shape points with `utilization` in 0..=100, strictly increasing, `score`
//! in 0..=10, at least one point. Two checks upstream lacks: a
//! `RequestedToCapacityRatio` strategy without a shape is an error (upstream
//! dereferences a nil pointer), and `requestedToCapacityRatio` with another
//! type is an error (upstream silently ignores it). Shape errors name the
//! real path `scoringStrategy.requestedToCapacityRatio.shape[i]`, where
//! upstream prints `scoringStrategy.shape[i]`.
//!
//! # Filter
//! [`flotilla_shared::fit::insufficient_reasons`] (the check shared with the
//! coordinator's bind arbiter) lists what the node lacks, in upstream order
//! (`Too many pods`, cpu, memory, ephemeral-storage, extended resources),
//! skipping the ignored extended resources. Every entry's reason is
//! reported. The code is `UnschedulableAndUnresolvable` when some request
//! exceeds the node's whole allocatable (v1.34+: preemption cannot help),
//! else `Unschedulable`.
//!
//! # Bind check
//! The same [`flotilla_shared::fit::insufficient_reasons`], with the same
//! ignored resources, on the coordinator's view of the node (and with the
//! pods nominated there added): the reasons joined by `", "`, as the
//! Filter's status message.
//!
//! # Score
//! Over the configured resources (see [`super::resource_allocation`]: cpu
//! and memory count non-zero requests, unrequested extended resources and
//! resources with allocatable 0 are left out, weight included), with
//! `requested` = node sum + pod request:
//! - `LeastAllocated`: per resource `(allocatable - requested) * 100 /
//!   allocatable` (0 when over), node score `Σ score·w / Σ w`, truncated;
//! - `MostAllocated`: per resource `min(requested, allocatable) * 100 /
//!   allocatable`, same weighted mean;
//! - `RequestedToCapacityRatio`: utilization `requested * 100 /
//!   allocatable` (100 when over), mapped through the broken-linear shape
//!   whose scores are scaled from 0..=10 to 0..=100; resources scoring 0
//!   drop out of the mean (weight included, upstream's rule); the mean is
//!   rounded half away from zero.
//!
//! Scores are already in 0..=100: no NormalizeScore. Score reads the pod's
//! requests straight from `PodInfo` (compiled once per pod), so unlike
//! upstream there is no PreScore state to look up per node.

use std::borrow::Cow;

use flotilla_shared::fit::{self, IgnoredResources};
use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, Code, CycleState, ExtensionPoint, FilterPlugin,
    MAX_NODE_SCORE, Plugin, ScorePlugin, Status,
};
use flotilla_shared::node_hot::{HotFilter, HotRequests, NodeHot};
use flotilla_shared::{NodeInfo, PodInfo};
use serde::Deserialize;

use super::names;
use super::resource_allocation::{
    NodeFigures, ResourceKind, ResourceSpec, WeightedResource, default_resources, defaulted,
    hot_scorable, null_as_default,
};
use crate::framework::validation::{
    self, forbidden, invalid, label_name_errors, not_supported, quote, required,
};

/// Registry name.
pub const NAME: &str = names::NODE_RESOURCES_FIT;

/// Upstream's PreFilter and PreScore points, accepted in a configuration
/// with nothing to run: upstream's compute the pod's requests for its
/// Filter and Score, and this plugin reads them from the pod's
/// `PodInfo` (computed once, when the pod is read).
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::PreFilter, ExtensionPoint::PreScore];

/// Args kind (`kind:` in `pluginConfig`).
pub const ARGS_KIND: &str = "NodeResourcesFitArgs";

/// Strategy type `LeastAllocated` (the default).
pub const LEAST_ALLOCATED: &str = "LeastAllocated";
/// Strategy type `MostAllocated`.
pub const MOST_ALLOCATED: &str = "MostAllocated";
/// Strategy type `RequestedToCapacityRatio`.
pub const REQUESTED_TO_CAPACITY_RATIO: &str = "RequestedToCapacityRatio";

/// Highest score a shape point may give (upstream `MaxCustomPriorityScore`);
/// shape scores are scaled by `MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE`.
pub const MAX_CUSTOM_PRIORITY_SCORE: i64 = 10;
/// Highest shape utilization, percent (upstream `maxUtilization`).
pub const MAX_UTILIZATION: i64 = 100;
// `utilization` reuses `scale`, which multiplies by MAX_NODE_SCORE.
const _: () = assert!(MAX_UTILIZATION == MAX_NODE_SCORE);

/// Highest resource weight (upstream `validateResources`).
pub const MAX_RESOURCE_WEIGHT: i64 = 100;

/// A new node, grown allocatable, or a pod leaving a node can help.
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeAllocatableGrew,
    ClusterEvent::AssignedPodDeleted,
];

/// The extended resources `profile`'s NodeResourcesFit leaves unchecked
/// (its `ignoredResources` and `ignoredResourceGroups`), for checks over a
/// final cluster state (a run's over-commit count). Args that do not
/// decode (the configuration was validated, so only hand-built profiles)
/// ignore nothing.
#[must_use]
pub fn ignored_resources(profile: &crate::framework::Profile) -> IgnoredResources {
    let args: NodeResourcesFitArgs = profile
        .plugin_config
        .get(names::NODE_RESOURCES_FIT)
        .and_then(|v| serde_json::from_value(v.clone()).ok())
        .unwrap_or_default();
    args.ignored()
}

impl NodeResourcesFitArgs {
    /// `ignoredResources` and `ignoredResourceGroups` as the fit check
    /// takes them.
    fn ignored(&self) -> IgnoredResources {
        IgnoredResources {
            names: self
                .ignored_resources
                .iter()
                .map(|s| s.as_str().into())
                .collect(),
            groups: self
                .ignored_resource_groups
                .iter()
                .map(|s| s.as_str().into())
                .collect(),
        }
    }
}

/// `NodeResourcesFitArgs` as written in `pluginConfig` (v1, before
/// defaulting).
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeResourcesFitArgs {
    /// Extended resources Filter does not check, e.g. `example.com/foo`.
    #[serde(deserialize_with = "null_as_default")]
    pub ignored_resources: Vec<String>,
    /// Extended-resource groups (the part before `/`) Filter does not check.
    #[serde(deserialize_with = "null_as_default")]
    pub ignored_resource_groups: Vec<String>,
    /// How Score ranks nodes; `None` means `LeastAllocated` on cpu and
    /// memory.
    pub scoring_strategy: Option<ScoringStrategyArgs>,
}

/// `scoringStrategy`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct ScoringStrategyArgs {
    /// `LeastAllocated`, `MostAllocated` or `RequestedToCapacityRatio`
    /// (kept as text so a wrong value gets upstream's message).
    #[serde(rename = "type", deserialize_with = "null_as_default")]
    pub type_: String,
    /// Resources scored, with weights 1..=100; empty means cpu and memory.
    #[serde(deserialize_with = "null_as_default")]
    pub resources: Vec<ResourceSpec>,
    /// The shape, for `RequestedToCapacityRatio` only.
    pub requested_to_capacity_ratio: Option<RequestedToCapacityRatioArgs>,
}

/// `requestedToCapacityRatio`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct RequestedToCapacityRatioArgs {
    /// Points of the broken-linear function, utilization increasing.
    #[serde(deserialize_with = "null_as_default")]
    pub shape: Vec<UtilizationShapePoint>,
}

/// One shape point: at `utilization` percent the resource scores `score`
/// (0..=10).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct UtilizationShapePoint {
    /// Percent of allocatable requested, 0..=100.
    #[serde(deserialize_with = "null_as_default")]
    pub utilization: i32,
    /// Score at that utilization, 0..=10.
    #[serde(deserialize_with = "null_as_default")]
    pub score: i32,
}

/// A broken-linear function over utilization (upstream
/// `helper.BuildBrokenLinearFunction`), points already scaled to 0..=100.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shape {
    /// `(utilization, score)`, utilization strictly increasing; never empty.
    points: Vec<(i64, i64)>,
}

impl Shape {
    /// Builds the function from validated args points, scaling scores
    /// from 0..=10 to 0..=100.
    #[must_use]
    pub fn new(points: &[UtilizationShapePoint]) -> Self {
        Shape {
            points: points
                .iter()
                .map(|p| {
                    (
                        i64::from(p.utilization),
                        i64::from(p.score) * (MAX_NODE_SCORE / MAX_CUSTOM_PRIORITY_SCORE),
                    )
                })
                .collect(),
        }
    }

    /// The function at utilization `p`: the first point's score below it,
    /// the last point's above, linear in between (integer math truncating
    /// toward zero, as Go's).
    #[must_use]
    pub fn at(&self, p: i64) -> i64 {
        for (i, &(u, s)) in self.points.iter().enumerate() {
            if p <= u {
                if i == 0 {
                    return s;
                }
                let (u0, s0) = self.points[i - 1];
                return s0 + (s - s0) * (p - u0) / (u - u0);
            }
        }
        self.points.last().map_or(0, |&(_, s)| s)
    }
}

/// How Score ranks nodes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ScoringStrategy {
    /// Favour nodes with the most room left (upstream default: spreads).
    LeastAllocated,
    /// Favour the fullest nodes (bin packing).
    MostAllocated,
    /// A configurable function of utilization.
    RequestedToCapacityRatio(Shape),
}

/// Filter and Score plugin for node capacity (default score weight 1).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeResourcesFit {
    /// Extended resources Filter skips.
    ignored: IgnoredResources,
    /// Score strategy.
    strategy: ScoringStrategy,
    /// Scored resources with weights, in args order.
    resources: Vec<WeightedResource>,
}

impl Default for NodeResourcesFit {
    fn default() -> Self {
        Self::new()
    }
}

/// One resource's `LeastAllocated` score (upstream `leastRequestedScore`):
/// the free share after placing the pod, 0..=100, integer math.
#[must_use]
fn least_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 || requested > capacity {
        return 0;
    }
    scale(capacity - requested, capacity)
}

/// One resource's `MostAllocated` score (upstream `mostRequestedScore`): the
/// used share, capped at 100 (non-zero defaults can push `requested` past
/// capacity).
#[must_use]
fn most_requested_score(requested: i64, capacity: i64) -> i64 {
    if capacity == 0 {
        return 0;
    }
    scale(requested.min(capacity), capacity)
}

/// Utilization percent for `RequestedToCapacityRatio` (upstream
/// `scaledUtilization` and its caller): 100 when over capacity, 0 when
/// nothing is requested. `MAX_UTILIZATION` equals `MAX_NODE_SCORE`, so the
/// same scaling applies.
#[must_use]
fn utilization(requested: i64, capacity: i64) -> i64 {
    if capacity <= 0 || requested >= capacity {
        return MAX_UTILIZATION;
    }
    if requested <= 0 {
        return 0;
    }
    scale(requested, capacity)
}

/// `part * 100 / whole` (whole > 0, 0 <= part <= whole), in i64 like
/// upstream, falling back to i128 only where `part * 100` would overflow
/// (i128 division is a slow library call; Score runs per node).
fn scale(part: i64, whole: i64) -> i64 {
    match part.checked_mul(MAX_NODE_SCORE) {
        Some(p) => p / whole,
        None => i64::try_from(i128::from(part) * i128::from(MAX_NODE_SCORE) / i128::from(whole))
            .unwrap_or(MAX_NODE_SCORE),
    }
}

impl NodeResourcesFit {
    /// The plugin with upstream defaults: no ignored resources,
    /// `LeastAllocated` over cpu and memory, weight 1 each.
    #[must_use]
    pub fn new() -> Self {
        NodeResourcesFit {
            ignored: IgnoredResources::NONE,
            strategy: ScoringStrategy::LeastAllocated,
            resources: default_resources()
                .iter()
                .map(WeightedResource::new)
                .collect(),
        }
    }

    /// Builds the plugin from its args, defaulting and validating them as
    /// upstream does (see the module docs).
    ///
    /// # Errors
    /// Every invalid field, each message starting with its JSON path inside
    /// the args (`scoringStrategy.resources[1].weight: Invalid value: ...`),
    /// joined by `"; "`.
    pub fn from_args(args: &NodeResourcesFitArgs) -> Result<Self, String> {
        let mut errs = Vec::new();
        for (i, r) in args.ignored_resources.iter().enumerate() {
            errs.extend(label_name_errors(&format!("ignoredResources[{i}]"), r));
        }
        for (i, g) in args.ignored_resource_groups.iter().enumerate() {
            let path = format!("ignoredResourceGroups[{i}]");
            if g.contains('/') {
                errs.push(invalid(
                    &path,
                    quote(g),
                    "resource group name can't contain '/'",
                ));
            }
            errs.extend(label_name_errors(&path, g));
        }

        let default_strategy = ScoringStrategyArgs {
            type_: LEAST_ALLOCATED.to_owned(),
            ..ScoringStrategyArgs::default()
        };
        let s = args.scoring_strategy.as_ref().unwrap_or(&default_strategy);
        const TYPES: [&str; 3] = [LEAST_ALLOCATED, MOST_ALLOCATED, REQUESTED_TO_CAPACITY_RATIO];
        if !TYPES.contains(&s.type_.as_str()) {
            errs.push(not_supported("scoringStrategy.type", &s.type_, &TYPES));
        }
        let resources = defaulted(&s.resources);
        for (i, r) in resources.iter().enumerate() {
            if r.weight <= 0 || r.weight > MAX_RESOURCE_WEIGHT {
                errs.push(invalid(
                    &format!("scoringStrategy.resources[{i}].weight"),
                    r.weight,
                    &format!(
                        "resource weight of {} not in valid range (0, {MAX_RESOURCE_WEIGHT}]",
                        r.name
                    ),
                ));
            }
        }
        let is_ratio = s.type_ == REQUESTED_TO_CAPACITY_RATIO;
        let shape_path = "scoringStrategy.requestedToCapacityRatio.shape";
        match (&s.requested_to_capacity_ratio, is_ratio) {
            (Some(param), _) => {
                if !is_ratio {
                    errs.push(forbidden(
                        "scoringStrategy.requestedToCapacityRatio",
                        &format!(
                            "only allowed with type {}",
                            quote(REQUESTED_TO_CAPACITY_RATIO)
                        ),
                    ));
                }
                errs.extend(shape_errors(&param.shape, shape_path));
            }
            (None, true) => errs.push(required(shape_path, "at least one point must be specified")),
            (None, false) => {}
        }
        validation::collect(errs)?;

        let strategy = match s.type_.as_str() {
            MOST_ALLOCATED => ScoringStrategy::MostAllocated,
            REQUESTED_TO_CAPACITY_RATIO => ScoringStrategy::RequestedToCapacityRatio(Shape::new(
                s.requested_to_capacity_ratio
                    .as_ref()
                    .map_or(&[][..], |p| &p.shape),
            )),
            _ => ScoringStrategy::LeastAllocated,
        };
        Ok(NodeResourcesFit {
            ignored: args.ignored(),
            strategy,
            resources: resources.iter().map(WeightedResource::new).collect(),
        })
    }

    /// The score strategy in use.
    #[must_use]
    pub fn strategy(&self) -> &ScoringStrategy {
        &self.strategy
    }
}

/// Upstream `validateFunctionShape` at `path`: at least one point,
/// utilization strictly increasing (first offender only) and in 0..=100,
/// score in 0..=10.
fn shape_errors(shape: &[UtilizationShapePoint], path: &str) -> Vec<String> {
    if shape.is_empty() {
        return vec![required(path, "at least one point must be specified")];
    }
    let mut errs = Vec::new();
    if let Some(i) = (1..shape.len()).find(|&i| shape[i - 1].utilization >= shape[i].utilization) {
        errs.push(invalid(
            &format!("{path}[{i}].utilization"),
            shape[i].utilization,
            "values must be sorted in increasing order",
        ));
    }
    for (i, p) in shape.iter().enumerate() {
        if !(0..=MAX_UTILIZATION).contains(&i64::from(p.utilization)) {
            errs.push(invalid(
                &format!("{path}[{i}].utilization"),
                p.utilization,
                &format!("not in valid range [0, {MAX_UTILIZATION}]"),
            ));
        }
        if !(0..=MAX_CUSTOM_PRIORITY_SCORE).contains(&i64::from(p.score)) {
            errs.push(invalid(
                &format!("{path}[{i}].score"),
                p.score,
                &format!("not in valid range [0, {MAX_CUSTOM_PRIORITY_SCORE}]"),
            ));
        }
    }
    errs
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
        let (reasons, unresolvable) = fit::insufficient_reasons(pod, node, &self.ignored);
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

    /// The same check, stopping at the first shortfall, with no reasons
    /// built (most nodes a GPU pod visits are full).
    fn fits(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Option<bool> {
        Some(fit::fits_resources(pod, node, &self.ignored))
    }

    /// Passes a node where cpu, memory and ephemeral storage fit with a
    /// pod slot to spare; a pod requesting extended resources has no hot
    /// condition (the record holds none).
    fn hot_filter(&self, _state: &CycleState, pod: &PodInfo) -> Option<HotFilter> {
        pod.requests.scalar.is_empty().then_some(HotFilter {
            fit: Some(HotRequests {
                milli_cpu: pod.requests.milli_cpu,
                memory: pod.requests.memory,
                ephemeral_storage: pod.requests.ephemeral_storage,
            }),
            ..HotFilter::ANY
        })
    }
}

/// The Filter's check, with the plugin's ignored resources, on the
/// arbiter's copy of the node.
impl BindCheck for NodeResourcesFit {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        let (mut reasons, _) = fit::insufficient_reasons(pod, node, &self.ignored);
        match reasons.len() {
            0 => Ok(()),
            1 => Err(reasons.swap_remove(0)),
            _ => Err(Cow::Owned(reasons.join(", "))),
        }
    }
}

impl NodeResourcesFit {
    /// The score of `node` (its `NodeInfo` or its hot record) for `pod`.
    fn score_figures(&self, pod: &PodInfo, node: &impl NodeFigures) -> i64 {
        let (mut sum, mut weights) = (0i64, 0i64);
        for r in &self.resources {
            let Some(a) = r
                .kind
                .allocation(node, r.kind.pod_request(pod, false), false)
            else {
                continue;
            };
            let s = match &self.strategy {
                ScoringStrategy::LeastAllocated => {
                    least_requested_score(a.requested, a.allocatable)
                }
                ScoringStrategy::MostAllocated => most_requested_score(a.requested, a.allocatable),
                ScoringStrategy::RequestedToCapacityRatio(shape) => {
                    let s = shape.at(utilization(a.requested, a.allocatable));
                    if s <= 0 {
                        continue;
                    }
                    s
                }
            };
            sum += s * r.weight;
            weights += r.weight;
        }
        if weights == 0 {
            return 0;
        }
        match self.strategy {
            #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
            ScoringStrategy::RequestedToCapacityRatio(_) => {
                (sum as f64 / weights as f64).round() as i64
            }
            _ => sum / weights,
        }
    }
}

impl ScorePlugin for NodeResourcesFit {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        Ok(self.score_figures(pod, node))
    }

    fn score_hot(&self, _state: &CycleState, pod: &PodInfo, node: &NodeHot) -> Option<i64> {
        hot_scorable(self.resources.iter().map(|r| &r.kind), pod)
            .then(|| self.score_figures(pod, node))
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
        if !hot_scorable(self.resources.iter().map(|r| &r.kind), pod) {
            out.fill(None);
            return;
        }
        // The default shape, LeastAllocated over cpu and memory: the same
        // arithmetic as `score_figures` with the resource choice made once.
        if let (
            ScoringStrategy::LeastAllocated,
            [
                WeightedResource {
                    kind: ResourceKind::Cpu,
                    weight: w_cpu,
                },
                WeightedResource {
                    kind: ResourceKind::Memory,
                    weight: w_mem,
                },
            ],
        ) = (&self.strategy, self.resources.as_slice())
        {
            let (cpu, mem) = (pod.non_zero_milli_cpu, pod.non_zero_memory);
            for (o, &i) in out.iter_mut().zip(nodes) {
                let h = &hot[i];
                let (mut sum, mut weights) = (0, 0);
                for (allocatable, requested, w) in [
                    (h.allocatable_milli_cpu, h.non_zero_milli_cpu + cpu, *w_cpu),
                    (h.allocatable_memory, h.non_zero_memory + mem, *w_mem),
                ] {
                    if allocatable != 0 {
                        sum += least_requested_score(requested, allocatable) * w;
                        weights += w;
                    }
                }
                *o = Some(if weights == 0 { 0 } else { sum / weights });
            }
            return;
        }
        for (o, &i) in out.iter_mut().zip(nodes) {
            *o = Some(self.score_figures(pod, &hot[i]));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use serde_json::json;
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

    /// A node with `extra` extended resources and `pods` placed on it.
    fn node_with(cpu: &str, mem: &str, extra: &[(&str, &str)], pods: Vec<PodBuilder>) -> NodeInfo {
        let b = extra.iter().fold(
            NodeBuilder::new("n").cpu(cpu).memory(mem).pods(110),
            |b, (r, q)| b.resource(r, q),
        );
        let mut n = NodeInfo::new(Arc::new(b.build_spec()));
        for p in pods {
            n.add_pod(Arc::new(p.build_info()));
        }
        n
    }

    fn pod(cpu: &str, mem: &str) -> PodBuilder {
        PodBuilder::new("p").cpu(cpu).memory(mem)
    }

    fn plugin(args: serde_json::Value) -> NodeResourcesFit {
        let a: NodeResourcesFitArgs =
            crate::framework::decode_args(Some(&args), ARGS_KIND).expect("decodes");
        NodeResourcesFit::from_args(&a).expect("valid args")
    }

    fn args_error(args: serde_json::Value) -> String {
        match crate::framework::decode_args::<NodeResourcesFitArgs>(Some(&args), ARGS_KIND) {
            Err(e) => e,
            Ok(a) => NodeResourcesFit::from_args(&a).expect_err("args must be rejected"),
        }
    }

    fn score(p: &NodeResourcesFit, pod: &PodInfo, node: &NodeInfo) -> i64 {
        p.score(&CycleState::default(), pod, node).unwrap()
    }

    fn filter(p: &NodeResourcesFit, pod: &PodInfo, node: &NodeInfo) -> Status {
        p.filter(&CycleState::default(), pod, node)
    }

    #[test]
    fn fitting_pod_passes() {
        let n = node("4", "8Gi");
        let pod = pod("4", "8Gi").build_info();
        assert_eq!(
            filter(&NodeResourcesFit::new(), &pod, &n),
            Status::success()
        );
    }

    #[test]
    fn short_resources_are_all_reported_in_order_as_unschedulable() {
        let mut n = node("2", "4Gi");
        n.add_pod(Arc::new(
            PodBuilder::new("a").cpu("1500m").memory("3Gi").build_info(),
        ));
        let pod = pod("1", "2Gi").build_info();
        let st = filter(&NodeResourcesFit::new(), &pod, &n);
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
        let pod = pod("1", "5Gi").build_info();
        let st = filter(&NodeResourcesFit::new(), &pod, &n);
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
        let st = filter(
            &NodeResourcesFit::new(),
            &PodBuilder::new("p").build_info(),
            &n,
        );
        assert_eq!(st.code, Code::Unschedulable);
        assert_eq!(st.reasons, ["Too many pods"]);
    }

    #[test]
    fn ignored_extended_resources_pass_filter() {
        // Upstream fit_test "skip checking ignored extended resource" and
        // "skip checking ignored extended resource via resource groups":
        // the node has none of the resource, the pod asks for some.
        let n = node_with("4", "8Gi", &[], vec![]);
        let p = pod("1", "1Gi").request("example.com/aaa", "1").build_info();
        let st = filter(&NodeResourcesFit::new(), &p, &n);
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(st.reasons, ["Insufficient example.com/aaa"]);
        let by_name = plugin(json!({"ignoredResources": ["example.com/aaa"]}));
        assert_eq!(filter(&by_name, &p, &n), Status::success());
        let by_group = plugin(json!({"ignoredResourceGroups": ["example.com"]}));
        assert_eq!(filter(&by_group, &p, &n), Status::success());
        // Native resources are never ignored.
        let cpu = plugin(json!({"ignoredResources": ["cpu"]}));
        let big = pod("5", "1Gi").build_info();
        assert_eq!(filter(&cpu, &big, &n).reasons, ["Insufficient cpu"]);
    }

    /// Upstream `TestLeastAllocatedScoringStrategy` / `TestMostAllocatedScoringStrategy`
    /// cases (cpu in millicores here where upstream writes whole cpus: the
    /// ratios are the same).
    #[test]
    fn least_and_most_allocated_match_upstream_cases() {
        let least = NodeResourcesFit::new();
        let most = plugin(json!({"scoringStrategy": {"type": "MostAllocated"}}));
        let cpu_and_memory = || pod("3000m", "5000");
        struct Case {
            name: &'static str,
            pod: PodInfo,
            node: NodeInfo,
            least: i64,
            most: i64,
        }
        let cases = [
            Case {
                // Nothing requested: the non-zero defaults (100m, 200MiB)
                // count. least: cpu (4000-100)*100/4000 = 97, memory over
                // capacity = 0 -> 48. most: cpu 2, memory capped 100 -> 51.
                name: "nothing scheduled, nothing requested",
                pod: PodBuilder::new("p").build_info(),
                node: node_with("4000m", "10000", &[], vec![]),
                least: 48,
                most: 51,
            },
            Case {
                name: "nothing scheduled, resources requested, differently sized nodes (4000)",
                pod: cpu_and_memory().build_info(),
                node: node_with("4000m", "10000", &[], vec![]),
                least: 37,
                most: 62,
            },
            Case {
                name: "nothing scheduled, resources requested, differently sized nodes (6000)",
                pod: cpu_and_memory().build_info(),
                node: node_with("6000m", "10000", &[], vec![]),
                least: 50,
                most: 50,
            },
            Case {
                // most: cpu 6000/10000 = 60, memory 5000/20000 = 25 -> 42.
                name: "resources requested, pods scheduled with resources (cpu only)",
                pod: cpu_and_memory().build_info(),
                node: node_with("10000m", "20000", &[], vec![pod("3000m", "0")]),
                least: 57,
                most: 42,
            },
            Case {
                // most: 60, 10000/20000 = 50 -> 55.
                name: "resources requested, pods scheduled with resources (cpu and memory)",
                pod: cpu_and_memory().build_info(),
                node: node_with("10000m", "20000", &[], vec![pod("3000m", "5000")]),
                least: 45,
                most: 55,
            },
            Case {
                // most: cpu 5000/5000 = 100, memory 9000/10000 = 90 -> 95.
                name: "resources requested equal node capacity",
                pod: pod("5000m", "9000").build_info(),
                node: node_with("5000m", "10000", &[], vec![]),
                least: 5,
                most: 95,
            },
            Case {
                // Upstream most_allocated "no resources requested, pods
                // scheduled, nonzero request for resource": 3 x 100m on
                // 250m caps at 100, 600Mi/1000Mi = 60 -> 80; least: 0, 40 -> 20.
                name: "nonzero requests exceed capacity",
                pod: PodBuilder::new("p").build_info(),
                node: node_with(
                    "250m",
                    "1000Mi",
                    &[],
                    vec![PodBuilder::new("a"), PodBuilder::new("b")],
                ),
                least: 20,
                most: 80,
            },
        ];
        for c in &cases {
            assert_eq!(score(&least, &c.pod, &c.node), c.least, "least: {}", c.name);
            assert_eq!(score(&most, &c.pod, &c.node), c.most, "most: {}", c.name);
        }
    }

    #[test]
    fn resource_weights_and_extended_resources_follow_upstream() {
        // Upstream most_allocated "nothing scheduled, resources requested,
        // differently sized nodes" with memory weight 2, cpu weight 1:
        // (75*1 + 50*2) / 3 = 58 and (50 + 100) / 3 = 50.
        let weighted = plugin(json!({"scoringStrategy": {"type": "MostAllocated",
            "resources": [{"name": "memory", "weight": 2}, {"name": "cpu", "weight": 1}]}}));
        let p = pod("3000m", "5000").build_info();
        assert_eq!(
            score(&weighted, &p, &node_with("4000m", "10000", &[], vec![])),
            58
        );
        assert_eq!(
            score(&weighted, &p, &node_with("6000m", "10000", &[], vec![])),
            50
        );

        // "bypass extended resource if the pod does not request" and
        // "honor extended resource if the pod request" (cpu 50, memory 50;
        // extended 2/4 = 50 or 2/10 = 20).
        let ext = plugin(json!({"scoringStrategy": {"type": "MostAllocated",
            "resources": [{"name": "cpu", "weight": 1}, {"name": "memory", "weight": 1},
                          {"name": "intel.com/foo", "weight": 1}]}}));
        let plain = pod("3000m", "5000").build_info();
        let with_foo = pod("3000m", "5000")
            .request("intel.com/foo", "2")
            .build_info();
        let n0 = node_with("6000m", "10000", &[], vec![]);
        let n4 = node_with("6000m", "10000", &[("intel.com/foo", "4")], vec![]);
        let n10 = node_with("6000m", "10000", &[("intel.com/foo", "10")], vec![]);
        assert_eq!(score(&ext, &plain, &n0), 50);
        assert_eq!(score(&ext, &plain, &n4), 50);
        assert_eq!(score(&ext, &with_foo, &n4), 50);
        assert_eq!(score(&ext, &with_foo, &n10), 40);

        // "if the node doesn't have a resource": extended weight 2 is left
        // out: (50 + 40) / 2 = 45 on both nodes.
        let heavy = plugin(json!({"scoringStrategy": {"type": "MostAllocated",
            "resources": [{"name": "intel.com/foo", "weight": 2}, {"name": "cpu"},
                          {"name": "memory", "weight": 1}]}}));
        let p = pod("3000m", "4000").build_info();
        assert_eq!(score(&heavy, &p, &n0), 45);
        assert_eq!(score(&heavy, &p, &n4), 45);

        // Least allocated with weights: cpu 3 x 25, memory 1 x 50 -> 31.
        let lw = plugin(
            json!({"scoringStrategy": {"type": "LeastAllocated", "resources":
            [{"name": "cpu", "weight": 3}, {"name": "memory", "weight": 1}]}}),
        );
        assert_eq!(lw.strategy(), &ScoringStrategy::LeastAllocated);
        assert_eq!(
            score(
                &lw,
                &pod("3000m", "5000").build_info(),
                &node_with("4000m", "10000", &[], vec![])
            ),
            31
        );
        // A node with nothing allocatable scores 0.
        let empty = NodeInfo::new(Arc::new(NodeBuilder::new("e").build_spec()));
        assert_eq!(score(&lw, &p, &empty), 0);
    }

    #[test]
    fn broken_linear_shape_matches_upstream() {
        // Upstream TestBrokenLinearFunction (points given unscaled there; we
        // pass scores /10 and check x10).
        let points = |pts: &[(i32, i32)]| {
            Shape::new(
                &pts.iter()
                    .map(|&(u, s)| UtilizationShapePoint {
                        utilization: u,
                        score: s,
                    })
                    .collect::<Vec<_>>(),
            )
        };
        let f = Shape {
            points: vec![(10, 1), (90, 9)],
        };
        for (p, want) in [
            (-10, 1),
            (0, 1),
            (9, 1),
            (10, 1),
            (15, 1),
            (19, 1),
            (20, 2),
            (89, 8),
            (90, 9),
            (99, 9),
            (100, 9),
            (110, 9),
        ] {
            assert_eq!(f.at(p), want, "p={p}");
        }
        let f = Shape {
            points: vec![(0, 2), (40, 10), (100, 0)],
        };
        for (p, want) in [
            (-10, 2),
            (0, 2),
            (20, 6),
            (30, 8),
            (40, 10),
            (70, 5),
            (100, 0),
            (110, 0),
        ] {
            assert_eq!(f.at(p), want, "p={p}");
        }
        let flat = points(&[(0, 2), (40, 2), (100, 2)]);
        assert!([-10, 0, 20, 70, 110].iter().all(|&p| flat.at(p) == 20));
        // Decreasing segments truncate toward zero like Go: 100 -> 0 over
        // 0..100 at 75 is 100 - 75 = 25.
        assert_eq!(points(&[(0, 10), (100, 0)]).at(75), 25);
    }

    #[test]
    fn requested_to_capacity_ratio_matches_upstream_cases() {
        // Upstream TestRequestedToCapacityRatioScoringStrategy: shape
        // (0, 10), (100, 0) over cpu and memory.
        let rtcr = plugin(
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 10},
                                                   {"utilization": 100, "score": 0}]}}}),
        );
        // "nothing scheduled, nothing requested": memory is over capacity
        // with the non-zero defaults, scores 0 and drops out (weight too);
        // cpu 300m of 4000 cpus is 0 % -> 100.
        let n = node_with(
            "4000",
            "10000",
            &[],
            vec![PodBuilder::new("a"), PodBuilder::new("b")],
        );
        assert_eq!(score(&rtcr, &PodBuilder::new("p").build_info(), &n), 100);
        // "nothing scheduled, resources requested, differently sized nodes":
        // cpu 75 % -> 25, memory 50 % -> 50: 37.5 rounds to 38; 50 and 50.
        let p = pod("3000", "5000").build_info();
        assert_eq!(
            score(&rtcr, &p, &node_with("4000", "10000", &[], vec![])),
            38
        );
        assert_eq!(
            score(&rtcr, &p, &node_with("6000", "10000", &[], vec![])),
            50
        );
        // "no resources requested, pods scheduled with resources": the
        // same ratios from existing pods.
        let busy = node_with("4000", "10000", &[], vec![pod("3000", "5000")]);
        let idle = PodBuilder::new("q").cpu("0").memory("0").build_info();
        assert_eq!(score(&rtcr, &idle, &busy), 38);

        // Upstream TestResourceBinPackingSingleExtended: shape (0,0),
        // (100,1) over intel.com/foo only.
        let single = plugin(
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "resources": [{"name": "intel.com/foo", "weight": 1}],
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0},
                                                   {"utilization": 100, "score": 1}]}}}),
        );
        let n8 = node_with("4", "10000Mi", &[("intel.com/foo", "8")], vec![]);
        let n4 = node_with("4", "10000Mi", &[("intel.com/foo", "4")], vec![]);
        let foo2 = PodBuilder::new("p")
            .request("intel.com/foo", "2")
            .build_info();
        let foo4 = PodBuilder::new("p")
            .request("intel.com/foo", "4")
            .build_info();
        assert_eq!(score(&single, &PodBuilder::new("p").build_info(), &n8), 0);
        assert_eq!(score(&single, &foo2, &n8), 2, "25 % -> 2.5 truncated");
        assert_eq!(score(&single, &foo2, &n4), 5);
        assert_eq!(score(&single, &foo4, &n8), 5);
        assert_eq!(score(&single, &foo4, &n4), 10);
        let n4_used = node_with(
            "4",
            "10000Mi",
            &[("intel.com/foo", "4")],
            vec![PodBuilder::new("x").request("intel.com/foo", "2")],
        );
        assert_eq!(score(&single, &foo2, &n4_used), 10);

        // Upstream TestResourceBinPackingMultipleExtended: foo weight 3,
        // bar weight 5. node1 foo 8 / bar 4, pod 2+2: (2*3 + 5*5)/8 = 3.875
        // -> 4; node2 foo 4 / bar 8: (5*3 + 2*5)/8 = 3.125 -> 3.
        let multi = plugin(
            json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
            "resources": [{"name": "intel.com/foo", "weight": 3},
                          {"name": "intel.com/bar", "weight": 5}],
            "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0},
                                                   {"utilization": 100, "score": 1}]}}}),
        );
        let n1 = node_with(
            "4",
            "10000Mi",
            &[("intel.com/foo", "8"), ("intel.com/bar", "4")],
            vec![],
        );
        let n2 = node_with(
            "4",
            "10000Mi",
            &[("intel.com/foo", "4"), ("intel.com/bar", "8")],
            vec![],
        );
        let both = PodBuilder::new("p")
            .request("intel.com/foo", "2")
            .request("intel.com/bar", "2")
            .build_info();
        assert_eq!(score(&multi, &both, &n1), 4);
        assert_eq!(score(&multi, &both, &n2), 3);
    }

    #[test]
    fn args_default_as_upstream_v1() {
        assert_eq!(plugin(json!({})), NodeResourcesFit::new());
        assert_eq!(plugin(serde_json::Value::Null), NodeResourcesFit::new());
        let explicit = plugin(json!({"scoringStrategy": {"type": "LeastAllocated",
            "resources": [{"name": "cpu"}, {"name": "memory", "weight": null}]}}));
        assert_eq!(explicit, NodeResourcesFit::new(), "unset weights are 1");
        let empty_resources = plugin(json!({"scoringStrategy": {"type": "LeastAllocated",
            "resources": []}}));
        assert_eq!(empty_resources, NodeResourcesFit::new());
    }

    #[test]
    fn args_errors_name_the_json_path() {
        let cases: &[(serde_json::Value, &str)] = &[
            (
                json!({"scoringStrategy": {"type": "Bogus"}}),
                "scoringStrategy.type: Unsupported value: \"Bogus\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
            ),
            (
                json!({"scoringStrategy": {"resources": [{"name": "cpu", "weight": 1}]}}),
                "scoringStrategy.type: Unsupported value: \"\": supported values: \"LeastAllocated\", \"MostAllocated\", \"RequestedToCapacityRatio\"",
            ),
            (
                json!({"scoringStrategy": {"type": "MostAllocated",
                    "resources": [{"name": "memory", "weight": 1}, {"name": "cpu", "weight": -1}]}}),
                "scoringStrategy.resources[1].weight: Invalid value: -1: resource weight of cpu not in valid range (0, 100]",
            ),
            (
                json!({"scoringStrategy": {"type": "MostAllocated",
                    "resources": [{"name": "memory", "weight": 101}]}}),
                "scoringStrategy.resources[0].weight: Invalid value: 101: resource weight of memory not in valid range (0, 100]",
            ),
            (
                json!({"ignoredResourceGroups": ["example.com/aaa"]}),
                "ignoredResourceGroups[0]: Invalid value: \"example.com/aaa\": resource group name can't contain '/'",
            ),
            (
                json!({"ignoredResources": ["example.com/aaa", "-bad"]}),
                "ignoredResources[1]: Invalid value: \"-bad\": name part must consist of alphanumeric characters",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio"}}),
                "scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point must be specified",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": []}}}),
                "scoringStrategy.requestedToCapacityRatio.shape: Required value: at least one point must be specified",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 10, "score": 1},
                        {"utilization": 10, "score": 2}]}}}),
                "scoringStrategy.requestedToCapacityRatio.shape[1].utilization: Invalid value: 10: values must be sorted in increasing order",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": -10, "score": 1},
                        {"utilization": 10, "score": 11}]}}}),
                "scoringStrategy.requestedToCapacityRatio.shape[0].utilization: Invalid value: -10: not in valid range [0, 100]; scoringStrategy.requestedToCapacityRatio.shape[1].score: Invalid value: 11: not in valid range [0, 10]",
            ),
            (
                json!({"scoringStrategy": {"type": "RequestedToCapacityRatio",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 101, "score": -1}]}}}),
                "scoringStrategy.requestedToCapacityRatio.shape[0].utilization: Invalid value: 101: not in valid range [0, 100]; scoringStrategy.requestedToCapacityRatio.shape[0].score: Invalid value: -1: not in valid range [0, 10]",
            ),
            (
                json!({"scoringStrategy": {"type": "MostAllocated",
                    "requestedToCapacityRatio": {"shape": [{"utilization": 0, "score": 0}]}}}),
                "scoringStrategy.requestedToCapacityRatio: Forbidden: only allowed with type \"RequestedToCapacityRatio\"",
            ),
            (
                json!({"scoringStrategy": {"type": "MostAllocated", "resources": [{"name": "cpu", "weight": "heavy"}]}}),
                "scoringStrategy.resources[0].weight: invalid type: string \"heavy\"",
            ),
            (
                json!({"scoringStrategy": {"typo": "MostAllocated"}}),
                "scoringStrategy.typo: unknown field `typo`",
            ),
            (
                json!({"kind": "OtherArgs"}),
                "kind: expected \"NodeResourcesFitArgs\"",
            ),
        ];
        for (args, want) in cases {
            let got = args_error(args.clone());
            assert!(got.starts_with(want), "{args}\n got: {got}\nwant: {want}");
        }
    }

    #[test]
    fn events_are_the_capacity_events() {
        assert_eq!(
            NodeResourcesFit::default().events_to_register(),
            [
                ClusterEvent::NodeAdded,
                ClusterEvent::NodeAllocatableGrew,
                ClusterEvent::AssignedPodDeleted
            ]
        );
        assert_eq!(least_requested_score(0, 4000), 100);
        assert_eq!(least_requested_score(4000, 4000), 0);
        assert_eq!(most_requested_score(5000, 4000), 100);
        assert_eq!(utilization(1, 0), 100);
        assert_eq!(utilization(i64::MAX / 2, i64::MAX), 49, "no overflow");
    }
}
