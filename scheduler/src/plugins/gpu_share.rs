//! `GpuShare` (Flotilla's; the FGD paper's simulator calls its equivalent
//! `Open-Gpu-Share`): per-device GPU placement. A pod's GPU request
//! ([`flotilla_shared::gpu::dialect`] reads the trace-replay annotations,
//! HAMi / Volcano vGPU resources and bare `nvidia.com/gpu`) fits a node
//! only when one device has its share free, or `count` devices are wholly
//! free, of an allowed model ([`flotilla_shared::gpu::fits`]); a node
//! whose eight GPUs each have 300 milli free does not take a 500 share,
//! though the sum would.
//!
//! - PreFilter: `Skip` for pods asking for no GPU (Filter does not run).
//! - Filter: no GPUs, or not of an allowed model, or fewer devices than
//!   asked: `UnschedulableAndUnresolvable`; devices too full:
//!   `Unschedulable` (preemption may free them).
//! - Reserve: the devices the pod takes on the chosen node
//!   ([`GpuShare::choose_devices`]); the cycle assumes the pod holding
//!   them, and the binding proposal carries them.
//! - Bind check: the arbiter re-checks the devices on its view (two
//!   workers never split one GPU beyond 1000 milli).
//! - PreScore / Score: the profile's GPU policy
//!   ([`GpuShareArgs::scoring_strategy`], default `FGD`): FGD
//!   (fragmentation gradient descent) or the FGD paper's baselines
//!   `BestFit`, `GpuPacking`, `GpuClustering`, `DotProd`, `Random`, or
//!   Flotilla's own `Flotilla` (FGD's gradient with memory in the fit
//!   test of the fragment measure, ties by least leftover)
//!   ([`flotilla_shared::gpu::policy`]); the policy also chooses the
//!   devices at Reserve (FGD and Flotilla the device their score found, `Random` a random
//!   fitting one, the others the tightest). PreScore is `Skip` for a pod
//!   without GPUs when no feasible node has GPUs (CPU clusters pay
//!   nothing); CPU-only pods are scored on GPU nodes, as in the paper (FGD
//!   keeps them off the CPU that GPU tasks need).
//!
//! # Args (`GpuShareArgs`)
//! ```yaml
//! - name: GpuShare
//!   args:
//!     scoringStrategy:
//!       type: FGD            # Flotilla | BestFit | GpuPacking | GpuClustering | DotProd | Random
//!     targetWorkload:        # FGD's target workload
//!       coverage: 0.95       # learned: the most common shapes covering 95 % of pods seen
//!       shapes:              # or given: then nothing is learned
//!       - {cpuMilli: 3152, gpuMilli: 810, gpuCount: 1, weight: 12.84}
//!       - {cpuMilli: 12500, weight: 4.49}          # CPU-only
//!       - {cpuMilli: 11300, gpuMilli: 1000, memory: 51539607552, weight: 10.5}  # memory (bytes): Flotilla's measure only
//!     randomSeed: 42         # Random's draws (default: from the OS)
//! ```
//! The target workload, learned: every pod the profile scores is counted
//! once (by uid) by its shape (CPU request, GPU count, share, models; for
//! `Flotilla` also the memory request), and
//! the most common shapes covering `coverage` of them, renormalised, are
//! FGD's target (the paper's rule, from the pods seen rather than a trace
//! read in advance); it is recomputed as pods are seen.
//!
//! Node GPU accounting ([`flotilla_shared::gpu::state::GpuState`]) lives
//! in `NodeInfo`, so the worker's cache, `simulate` and the arbiter count
//! the same way.

use std::borrow::Cow;
use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};

use serde::Deserialize;

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, ExtensionPoint, FilterPlugin,
    Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, SharedLister, Status,
};
use flotilla_shared::gpu::frag::{DEFAULT_COVERAGE, NodeFree, TargetWorkload, TaskShape};
use flotilla_shared::gpu::policy::{self, GpuTag, NodeTags, Policy};
use flotilla_shared::gpu::{self, DeviceSet, GpuRequest, MILLI_PER_GPU, NodeGpus};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;
use crate::cycle::CycleRng;
use crate::framework::decode_args;

/// `kind` of the args.
pub const ARGS_KIND: &str = "GpuShareArgs";

/// CycleState key of PreScore's result.
const PRE_SCORE_KEY: &str = "PreScoreGpuShare";

/// How many new pods the learned target workload may lag: it is
/// recomputed after this many (and while fewer than this many were seen,
/// whenever their number doubles).
const RELEARN_EVERY: u64 = 1000;

/// Most pod uids remembered so that a retried pod is counted once; past
/// it the memory starts over (a pod retried across it counts twice).
const MAX_SEEN_UIDS: usize = 1 << 20;

/// Most shapes one node's FGD cache keeps before starting over.
const MAX_CACHED_SHAPES: usize = 128;

/// `GpuShareArgs`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct GpuShareArgs {
    /// The GPU policy.
    pub scoring_strategy: ScoringStrategy,
    /// FGD's target workload.
    pub target_workload: TargetWorkloadArgs,
    /// Seed of `Random`'s draws (`None`: from the OS).
    pub random_seed: Option<u64>,
}

impl Default for GpuShareArgs {
    fn default() -> Self {
        GpuShareArgs {
            scoring_strategy: ScoringStrategy {
                kind: "FGD".to_owned(),
            },
            target_workload: TargetWorkloadArgs::default(),
            random_seed: None,
        }
    }
}

/// `scoringStrategy`.
#[derive(Debug, Clone, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields)]
pub struct ScoringStrategy {
    /// `type`: a [`Policy`] name (`FGD`, `Flotilla`, `BestFit`, `GpuPacking`,
    /// `GpuClustering`, `DotProd`, `Random`; any case, or the paper's
    /// `06-FGD` spelling).
    #[serde(rename = "type")]
    pub kind: String,
}

/// `targetWorkload`.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct TargetWorkloadArgs {
    /// Share of pods (0 < coverage ≤ 1) the learned shapes cover.
    pub coverage: f64,
    /// The target, given: nothing is learned. Weights are relative.
    pub shapes: Vec<ShapeArgs>,
}

impl Default for TargetWorkloadArgs {
    fn default() -> Self {
        TargetWorkloadArgs {
            coverage: DEFAULT_COVERAGE,
            shapes: Vec::new(),
        }
    }
}

/// One shape of a given target workload.
#[derive(Debug, Clone, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase")]
pub struct ShapeArgs {
    /// CPU request, millicores.
    #[serde(default)]
    pub cpu_milli: i64,
    /// Share of each GPU, milli-GPU (0: a CPU-only shape).
    #[serde(default)]
    pub gpu_milli: u32,
    /// GPUs (default 1 when `gpuMilli` > 0).
    #[serde(default)]
    pub gpu_count: Option<u32>,
    /// Allowed GPU models (empty: any).
    #[serde(default)]
    pub models: Vec<String>,
    /// Memory request, bytes (0: memory is not part of the shape, the
    /// paper's measure; Flotilla's policy counts it when given).
    #[serde(default)]
    pub memory: i64,
    /// Relative weight (> 0).
    pub weight: f64,
}

impl ShapeArgs {
    /// The shape, or what is wrong with it (after `shapes[i].`).
    fn shape(&self) -> Result<TaskShape, String> {
        if !(self.weight.is_finite() && self.weight > 0.0) {
            return Err(format!("weight: {} must be a positive number", self.weight));
        }
        if self.cpu_milli < 0 {
            return Err(format!("cpuMilli: {} must not be negative", self.cpu_milli));
        }
        if self.memory < 0 {
            return Err(format!("memory: {} must not be negative", self.memory));
        }
        if self.gpu_milli == 0 {
            return Ok(TaskShape::cpu_only(self.cpu_milli).with_memory(self.memory));
        }
        if self.gpu_milli > MILLI_PER_GPU {
            return Err(format!(
                "gpuMilli: {} must be in the range 0-1000",
                self.gpu_milli
            ));
        }
        let count = self.gpu_count.unwrap_or(1);
        if count == 0 || count as usize > gpu::MAX_DEVICES {
            return Err(format!("gpuCount: {count} must be in the range 1-64"));
        }
        if count > 1 && self.gpu_milli < MILLI_PER_GPU {
            return Err(format!(
                "gpuMilli: a share of {} with gpuCount {count}: a share must be of one GPU",
                self.gpu_milli
            ));
        }
        let models: Vec<Arc<str>> = self.models.iter().map(|m| Arc::from(m.as_str())).collect();
        Ok(TaskShape::with_gpu(
            self.cpu_milli,
            GpuRequest {
                count,
                milli: self.gpu_milli,
                memory_mib: None,
                models: (!models.is_empty()).then(|| Arc::from(models)),
            },
        )
        .with_memory(self.memory))
    }
}

/// The target workload FGD scores against: given, or learned from the
/// pods seen.
#[derive(Debug)]
enum Target {
    Given(Arc<TargetWorkload>),
    Learned(Mutex<Learning>),
}

/// What the learned target is computed from.
#[derive(Debug, Default)]
struct Learning {
    coverage: f64,
    counts: HashMap<TaskShape, u64>,
    seen: HashSet<Arc<str>>,
    total: u64,
    learned_at: u64,
    target: Arc<TargetWorkload>,
    /// Bumped whenever `target` changes (invalidates the FGD cache).
    version: u64,
}

impl Learning {
    /// Counts `pod` once; recomputes the target when it is due.
    fn observe(&mut self, pod: &PodInfo, shape: &TaskShape) {
        if self.seen.len() >= MAX_SEEN_UIDS {
            self.seen.clear();
        }
        if !self.seen.insert(pod.uid.clone()) {
            return;
        }
        *self.counts.entry(shape.clone()).or_insert(0) += 1;
        self.total += 1;
        let due = if self.learned_at < RELEARN_EVERY {
            self.total >= 2 * self.learned_at.max(1)
        } else {
            self.total >= self.learned_at + RELEARN_EVERY
        };
        if due || self.version == 0 {
            self.target = Arc::new(TargetWorkload::from_counts(
                self.counts.iter().map(|(s, c)| (s.clone(), *c)),
                self.coverage,
            ));
            self.learned_at = self.total;
            self.version += 1;
        }
    }
}

/// One node's cached FGD results, valid while the node's free CPU and
/// devices and the target stay as they were.
#[derive(Debug)]
struct FgdEntry {
    cpu_milli: i64,
    memory: i64,
    free: Vec<u32>,
    /// The node's GPU model (a model constraint in the target or the pod
    /// depends on it).
    model: Arc<str>,
    version: u64,
    /// F_n(M) of the node as it is.
    base: f64,
    results: Vec<(TaskShape, Option<(i64, DeviceSet)>)>,
}

/// What PreScore leaves for Score and Reserve.
#[derive(Debug)]
struct PreScoreState {
    shape: TaskShape,
    target: Arc<TargetWorkload>,
    version: u64,
    /// `Random`: the node drawn.
    random_pick: Option<Arc<str>>,
}

/// A node without GPU devices, as the policies read it.
static NO_GPUS: std::sync::LazyLock<NodeGpus> = std::sync::LazyLock::new(|| NodeGpus {
    memory_mib: None,
    model: Arc::from(""),
    free: Vec::new(),
});

/// Shards of the FGD cache (by node name), so parallel Score calls rarely
/// wait on each other.
const CACHE_SHARDS: usize = 16;

/// Registry name.
pub const NAME: &str = names::GPU_SHARE;

/// The node has no GPU devices.
pub const REASON_NO_GPU: &str = "node(s) had no GPU";
/// The node's GPU devices cannot be counted (`NodeSpec::gpu_error`: e.g.
/// more than 64 `nvidia.com/gpu`, HAMi's vGPU slots).
pub const REASON_GPUS_UNREADABLE: &str = "node(s) had GPUs Flotilla cannot count";
/// The node's GPU model is not one the pod allows.
pub const REASON_MODEL: &str = "node(s) didn't have the requested GPU model";
/// The node has fewer devices than the pod asks for.
pub const REASON_TOO_FEW: &str = "node(s) had fewer GPUs than requested";
/// The pod asks for GPU memory and the node's devices have less, or the
/// node does not report their memory (label `nvidia.com/gpu.memory`).
pub const REASON_MEMORY: &str = "node(s) didn't have GPUs with the requested memory";
/// No device has the pod's share free.
pub const REASON_NO_SHARE: &str = "node(s) had no GPU with enough free share";
/// Too few devices are wholly free.
pub const REASON_NO_WHOLE: &str = "node(s) didn't have enough free GPUs";

/// A pod leaving (its devices), or a node joining or changing, can help.
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeAllocatableGrew,
    ClusterEvent::AssignedPodDeleted,
];

/// Extension points served outside the cycle runner: Reserve (the device
/// choice, made by the cycle after the node is chosen).
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::Reserve];

/// The plugin.
#[derive(Debug)]
pub struct GpuShare {
    policy: Policy,
    target: Target,
    fgd_cache: [Mutex<HashMap<Arc<str>, FgdEntry>>; CACHE_SHARDS],
    /// `Random`'s stream: each draw takes the next number.
    draws: AtomicU64,
    /// `Flotilla`'s tuning.
    flotilla: policy::FlotillaParams,
}

impl Default for GpuShare {
    fn default() -> Self {
        Self::with_args(GpuShareArgs::default()).unwrap_or_else(|_| unreachable!())
    }
}

impl GpuShare {
    /// The plugin with default args (FGD, learned target).
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Builds the plugin from its `pluginConfig` args.
    ///
    /// # Errors
    /// Undecodable args, an unknown policy, a coverage outside (0, 1], a
    /// bad shape; the message starts with the field's path.
    pub fn from_args(args: Option<&serde_json::Value>) -> Result<Self, String> {
        Self::with_args(decode_args(args, ARGS_KIND)?)
    }

    /// Builds the plugin from decoded args.
    ///
    /// # Errors
    /// As [`GpuShare::from_args`].
    pub fn with_args(args: GpuShareArgs) -> Result<Self, String> {
        let policy: Policy = args
            .scoring_strategy
            .kind
            .parse()
            .map_err(|e| format!("scoringStrategy.type: {e}"))?;
        let coverage = args.target_workload.coverage;
        if !(coverage > 0.0 && coverage <= 1.0) {
            return Err(format!(
                "targetWorkload.coverage: {coverage} must be in the range (0, 1]"
            ));
        }
        let target = if args.target_workload.shapes.is_empty() {
            Target::Learned(Mutex::new(Learning {
                coverage,
                ..Learning::default()
            }))
        } else {
            let mut shapes = Vec::new();
            for (i, sh) in args.target_workload.shapes.iter().enumerate() {
                let shape = sh
                    .shape()
                    .map_err(|e| format!("targetWorkload.shapes[{i}].{e}"))?;
                shapes.push((shape, sh.weight));
            }
            let sum: f64 = shapes.iter().map(|(_, w)| w).sum();
            for (_, w) in &mut shapes {
                *w /= sum;
            }
            Target::Given(Arc::new(TargetWorkload::from_weights(shapes)))
        };
        Ok(GpuShare {
            policy,
            target,
            fgd_cache: std::array::from_fn(|_| Mutex::new(HashMap::new())),
            draws: AtomicU64::new(args.random_seed.unwrap_or_else(rand::random)),
            flotilla: policy::FlotillaParams::default(),
        })
    }

    /// The policy the plugin scores with.
    #[must_use]
    pub fn policy(&self) -> Policy {
        self.policy
    }

    /// The target workload FGD scores against now, and its version.
    fn current_target(&self) -> (Arc<TargetWorkload>, u64) {
        match &self.target {
            Target::Given(t) => (t.clone(), 0),
            Target::Learned(l) => {
                let l = l.lock().unwrap_or_else(PoisonError::into_inner);
                (l.target.clone(), l.version)
            }
        }
    }

    /// The FGD target workload in use (given, or learned so far).
    #[must_use]
    pub fn target_workload(&self) -> Arc<TargetWorkload> {
        self.current_target().0
    }

    /// A uniform draw in `0..n` from the plugin's stream.
    fn draw(&self, n: usize) -> usize {
        let seed = self.draws.fetch_add(1, Ordering::Relaxed);
        CycleRng::from_seed(seed).below(n)
    }

    /// The devices `pod` takes on `node` (Reserve), as the policy chooses:
    /// `None` for a pod asking for no GPU, or when it does not fit.
    #[must_use]
    pub fn choose_devices(&self, pod: &PodInfo, node: &NodeInfo) -> Option<DeviceSet> {
        let req = &pod.gpu.as_deref()?.request;
        let gpus = node.gpu.as_deref()?.gpus();
        match self.policy {
            Policy::Fgd | Policy::Flotilla => {
                let (target, version) = self.current_target();
                self.fgd_cached(node, &shape_for(self.policy, pod), &target, version)
                    .map(|(_, d)| d)
                    .or_else(|| gpu::choose_best_fit(gpus, req))
            }
            Policy::Random => policy::choose_random(gpus, req, |n| self.draw(n)),
            _ => gpu::choose_best_fit(gpus, req),
        }
    }

    /// FGD's score and devices for `shape` on `node`, from the cache when
    /// the node and the target are as they were.
    fn fgd_cached(
        &self,
        node: &NodeInfo,
        shape: &TaskShape,
        target: &TargetWorkload,
        version: u64,
    ) -> Option<(i64, DeviceSet)> {
        let free = node_free(node);
        let name = &node.spec.name;
        let shard = flotilla_shared::stable_hash::fnv1a(name.as_bytes()) as usize % CACHE_SHARDS;
        let mut cache = self.fgd_cache[shard]
            .lock()
            .unwrap_or_else(PoisonError::into_inner);
        let entry = cache.entry(name.clone()).or_insert_with(|| FgdEntry {
            cpu_milli: i64::MIN,
            memory: i64::MIN,
            free: Vec::new(),
            model: Arc::from(""),
            version: u64::MAX,
            base: 0.0,
            results: Vec::new(),
        });
        if entry.cpu_milli != free.cpu_milli
            || entry.memory != free.memory
            || entry.free != free.gpus.free
            || entry.model != free.gpus.model
            || entry.version != version
            || entry.results.len() >= MAX_CACHED_SHAPES
        {
            entry.cpu_milli = free.cpu_milli;
            entry.memory = free.memory;
            entry.free.clone_from(&free.gpus.free);
            entry.model = free.gpus.model.clone();
            entry.version = version;
            entry.base = flotilla_shared::gpu::frag::node_fragment(&free, target);
            entry.results.clear();
        }
        if let Some((_, r)) = entry.results.iter().find(|(s, _)| s == shape) {
            return *r;
        }
        let r = if self.policy == Policy::Flotilla {
            policy::flotilla(&free, shape, target, entry.base, &self.flotilla)
        } else {
            policy::fgd_with_base(&free, shape, target, entry.base)
        };
        entry.results.push((shape.clone(), r));
        r
    }
}

/// The pod's shape as FGD counts it: CPU request (millicores) and GPU
/// request (memory is not part of it, as in the paper).
#[must_use]
pub fn shape_of(pod: &PodInfo) -> TaskShape {
    TaskShape {
        cpu_milli: pod.requests.milli_cpu,
        gpu: pod.gpu.as_deref().map(|g| g.request.clone()),
        memory: 0,
    }
}

/// The pod's shape as `policy` counts it: [`shape_of`], with the memory
/// request for [`Policy::Flotilla`] (whose fragment measure counts memory).
#[must_use]
pub fn shape_for(policy: Policy, pod: &PodInfo) -> TaskShape {
    let shape = shape_of(pod);
    if policy == Policy::Flotilla {
        shape.with_memory(pod.requests.memory.max(0))
    } else {
        shape
    }
}

/// What `node` has free: allocatable CPU minus requested, and its devices.
fn node_free(node: &NodeInfo) -> NodeFree<'_> {
    NodeFree {
        cpu_milli: node.spec.allocatable.milli_cpu - node.requested.milli_cpu,
        memory: node.spec.allocatable.memory - node.requested.memory,
        gpus: node.gpu.as_deref().map_or(&*NO_GPUS, |g| g.gpus()),
    }
}

/// The GPU tags of the pods on `node` (GpuClustering).
fn node_tags(node: &NodeInfo) -> NodeTags {
    node.pods
        .iter()
        .filter_map(|p| p.gpu.as_deref().map(|g| GpuTag::of(&g.request)))
        .collect()
}

impl Plugin for GpuShare {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for GpuShare {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        let status = if let Some(e) = &pod.gpu_error {
            // Nothing on any node can fix the pod's own request.
            Status::unresolvable(format!("pod {}: {e}", pod.key)).with_plugin(NAME)
        } else if let Some(r) = pod
            .gpu
            .as_deref()
            .map(|g| &g.request)
            .filter(|r| r.spans_devices())
        {
            Status::unresolvable(format!(
                "pod {}: a share of {} milli-GPU on each of {} GPUs (its GPU resources, summed \
                 over its containers): Flotilla places a share of one GPU, or whole GPUs",
                pod.key, r.milli, r.count
            ))
            .with_plugin(NAME)
        } else if pod.gpu.is_some() {
            Status::success()
        } else {
            Status::skip()
        };
        (PreFilterResult::default(), status)
    }
}

/// Why `req` does not fit `node`'s devices, with whether preemption could
/// help (`false`: unresolvable); `None` when it fits. When `devices` is
/// given, those exact devices must hold the share.
#[must_use]
pub fn misfit(
    req: &GpuRequest,
    devices: Option<DeviceSet>,
    node: &NodeInfo,
) -> Option<(&'static str, bool)> {
    let Some(state) = node.gpu.as_deref() else {
        if node.spec.gpu_error.is_some() {
            return Some((REASON_GPUS_UNREADABLE, false));
        }
        return Some((REASON_NO_GPU, false));
    };
    let gpus = state.gpus();
    if !req.allows_model(&gpus.model) {
        return Some((REASON_MODEL, false));
    }
    if gpus.free.len() < req.count as usize {
        return Some((REASON_TOO_FEW, false));
    }
    if req.milli_on(gpus).is_none() {
        return Some((REASON_MEMORY, false));
    }
    let fits = match devices {
        Some(d) => gpu::holds(gpus, req, d),
        None => gpu::fits(gpus, req),
    };
    if fits {
        None
    } else if req.is_share() {
        Some((REASON_NO_SHARE, true))
    } else {
        Some((REASON_NO_WHOLE, true))
    }
}

impl FilterPlugin for GpuShare {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(g) = pod.gpu.as_deref() else {
            return Status::success();
        };
        match misfit(&g.request, None, node) {
            None => Status::success(),
            Some((reason, true)) => Status::unschedulable(reason).with_plugin(NAME),
            Some((reason, false)) => Status::unresolvable(reason).with_plugin(NAME),
        }
    }
}

impl PreScorePlugin for GpuShare {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: &[Arc<NodeInfo>],
        cluster: &dyn SharedLister,
    ) -> Status {
        // A pod without GPUs is still scored where GPUs are (it takes CPU
        // a GPU pod may need); with no GPU node among the feasible there
        // is nothing to rank. The cluster-wide check first: O(1).
        if pod.gpu.is_none()
            && (!cluster.has_gpu_nodes() || !feasible.iter().any(|n| n.gpu.is_some()))
        {
            return Status::skip();
        }
        let shape = shape_for(self.policy, pod);
        if let Target::Learned(l) = &self.target {
            l.lock()
                .unwrap_or_else(PoisonError::into_inner)
                .observe(pod, &shape);
        }
        let (target, version) = self.current_target();
        let random_pick = (self.policy == Policy::Random && !feasible.is_empty())
            .then(|| feasible[self.draw(feasible.len())].spec.name.clone());
        state.write(
            PRE_SCORE_KEY,
            PreScoreState {
                shape,
                target,
                version,
                random_pick,
            },
        );
        Status::success()
    }
}

impl ScorePlugin for GpuShare {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let Some(pre) = state.read::<PreScoreState>(PRE_SCORE_KEY) else {
            return Err(Status::error(format!("{PRE_SCORE_KEY} not found")).with_plugin(NAME));
        };
        let free = node_free(node);
        let score = match self.policy {
            Policy::Fgd => self
                .fgd_cached(node, &pre.shape, &pre.target, pre.version)
                .map(|(s, _)| s),
            Policy::Flotilla => {
                return Ok(self
                    .fgd_cached(node, &pre.shape, &pre.target, pre.version)
                    .map_or(policy::FLOTILLA_NO_FIT, |(s, _)| s));
            }
            Policy::BestFit => policy::best_fit_raw(&free, &pre.shape),
            Policy::DotProd => policy::dot_prod(&free, &pre.shape),
            Policy::GpuPacking => policy::gpu_packing(&free, &pre.shape),
            Policy::GpuClustering => policy::gpu_clustering(&free, &pre.shape, &node_tags(node)),
            Policy::Random => Some(policy::random_score(
                pre.random_pick.as_deref() == Some(node.name()),
            )),
        };
        Ok(score.unwrap_or(policy::MIN_NODE_SCORE))
    }

    /// BestFit's raw scores are min-max normalised over the feasible nodes
    /// (upstream `NormalizeScore`); the other policies score in 0..=100.
    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        match self.policy {
            Policy::BestFit => policy::normalize_min_max(scores),
            Policy::Flotilla => policy::normalize_flotilla(scores),
            _ => {}
        }
    }
}

/// The Filter's rule on the arbiter's view: the devices the proposal
/// names (the pod's [`flotilla_shared::gpu::state::PodGpu::devices`]) must
/// still hold the share there; without them, any fit will do (the arbiter
/// counts the pod on the default rule's devices).
impl BindCheck for GpuShare {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        let Some(g) = pod.gpu.as_deref() else {
            return Ok(());
        };
        match misfit(&g.request, g.devices, node) {
            None => Ok(()),
            Some((reason, _)) => Err(Cow::Borrowed(reason)),
        }
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::gpu::dialect::{
        ANNOTATION_GPU_COUNT, ANNOTATION_GPU_MILLI, GPU_CARD_MODEL,
    };
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};

    fn gpu_node(name: &str, model: &str, count: usize) -> NodeInfo {
        NodeInfo::new(Arc::new(
            NodeBuilder::new(name)
                .gpus(u32::try_from(count).unwrap(), model)
                .build_spec(),
        ))
    }

    fn gpu_pod(name: &str, milli: u32, count: u32) -> PodInfo {
        PodBuilder::new(name)
            .annotation(ANNOTATION_GPU_MILLI, &milli.to_string())
            .annotation(ANNOTATION_GPU_COUNT, &count.to_string())
            .build_info()
    }

    #[test]
    fn a_share_needs_one_device_with_room() {
        let mut node = gpu_node("n", "T4", 2);
        for (i, milli) in [(0, 700), (1, 700)] {
            let p = gpu_pod(&format!("p{i}"), milli, 1);
            let d = GpuShare::new().choose_devices(&p, &node).unwrap();
            assert!(node.add_pod(Arc::new(p.with_gpu_devices(d))));
        }
        // 600 free in total, 300 on each device: a 500 share fits nowhere.
        let st = GpuShare::new().filter(&CycleState::default(), &gpu_pod("x", 500, 1), &node);
        assert_eq!(st.code, Code::Unschedulable);
        assert_eq!(st.reasons, [REASON_NO_SHARE]);
        assert!(
            GpuShare::new()
                .filter(&CycleState::default(), &gpu_pod("y", 300, 1), &node)
                .is_success()
        );
    }

    /// HAMi's `nvidia.com/gpumem` (MiB): placed by the devices' memory
    /// (label `nvidia.com/gpu.memory`); refused, unresolvably, on nodes
    /// whose devices have too little or do not say.
    #[test]
    fn gpu_memory_requests_need_devices_with_the_memory() {
        use flotilla_shared::gpu::dialect::{HAMI_GPUMEM, LABEL_GPU_MEMORY};
        let pl = GpuShare::new();
        let s = CycleState::default();
        let p = PodBuilder::new("m")
            .request("nvidia.com/gpu", "1")
            .request(HAMI_GPUMEM, "6000")
            .build_info();
        let with_memory = |mib: &str| {
            NodeInfo::new(Arc::new(
                NodeBuilder::new("g")
                    .resource("nvidia.com/gpu", "2")
                    .label(LABEL_GPU_MEMORY, mib)
                    .build_spec(),
            ))
        };
        for node in [gpu_node("g", "T4", 2), with_memory("4096")] {
            let st = pl.filter(&s, &p, &node);
            assert_eq!(
                (st.code, st.reasons[0].as_ref()),
                (Code::UnschedulableAndUnresolvable, REASON_MEMORY)
            );
        }
        // 6000 of 16000 MiB: a 375 milli share; two fit one device, not
        // three.
        let mut node = with_memory("16000");
        for i in 0..2 {
            assert!(pl.filter(&s, &p, &node).is_success());
            let d = pl.choose_devices(&p, &node).unwrap();
            let placed = PodBuilder::new(&format!("p{i}"))
                .request("nvidia.com/gpu", "1")
                .request(HAMI_GPUMEM, "6000")
                .build_info()
                .with_gpu_devices(d);
            assert!(node.add_pod(Arc::new(placed)));
        }
        let free = node.gpu.as_deref().unwrap().gpus().free.clone();
        assert_eq!(free.iter().map(|&f| 1000 - f).sum::<u32>(), 750, "{free:?}");
    }

    #[test]
    fn only_flotilla_counts_the_memory_of_a_shape() {
        let p = PodBuilder::new("m")
            .memory("2Gi")
            .annotation(ANNOTATION_GPU_MILLI, "500")
            .build_info();
        assert_eq!(shape_of(&p).memory, 0);
        assert_eq!(shape_for(Policy::Fgd, &p), shape_of(&p));
        assert_eq!(shape_for(Policy::Flotilla, &p).memory, 2 << 30);
        let args = GpuShareArgs {
            scoring_strategy: ScoringStrategy {
                kind: "Flotilla".into(),
            },
            target_workload: TargetWorkloadArgs {
                coverage: 0.95,
                shapes: vec![ShapeArgs {
                    cpu_milli: 1000,
                    gpu_milli: 500,
                    gpu_count: None,
                    models: Vec::new(),
                    memory: 1 << 30,
                    weight: 1.0,
                }],
            },
            random_seed: None,
        };
        let pl = GpuShare::with_args(args.clone()).unwrap();
        assert_eq!(pl.target_workload().shapes()[0].0.memory, 1 << 30);
        let mut bad = args;
        bad.target_workload.shapes[0].memory = -1;
        let e = GpuShare::with_args(bad).unwrap_err();
        assert!(e.starts_with("targetWorkload.shapes[0].memory"), "{e}");
    }

    #[test]
    fn unresolvable_reasons() {
        let pl = GpuShare::new();
        let s = CycleState::default();
        let cpu_node = NodeInfo::new(Arc::new(NodeBuilder::new("c").build_spec()));
        let st = pl.filter(&s, &gpu_pod("p", 1000, 1), &cpu_node);
        assert_eq!(
            (st.code, st.reasons[0].as_ref()),
            (Code::UnschedulableAndUnresolvable, REASON_NO_GPU)
        );
        let st = pl.filter(&s, &gpu_pod("p", 1000, 4), &gpu_node("g", "T4", 2));
        assert_eq!(st.reasons, [REASON_TOO_FEW]);
        let p = PodBuilder::new("m")
            .annotation(ANNOTATION_GPU_MILLI, "1000")
            .annotation(GPU_CARD_MODEL, "A100|V100")
            .build_info();
        let st = pl.filter(&s, &p, &gpu_node("g", "T4", 2));
        assert_eq!(
            (st.code, st.reasons[0].as_ref()),
            (Code::UnschedulableAndUnresolvable, REASON_MODEL)
        );
        assert!(pl.filter(&s, &p, &gpu_node("g", "V100", 2)).is_success());
    }

    #[test]
    fn an_unreadable_gpu_request_is_unresolvable_and_names_the_field() {
        let p = PodBuilder::new("bad")
            .annotation(ANNOTATION_GPU_MILLI, "half")
            .build_info();
        assert!(p.gpu.is_none(), "the pod itself still compiles");
        assert!(p.gpu_error.is_some());
        let (_, st) = GpuShare::new().pre_filter(
            &mut CycleState::default(),
            &p,
            &flotilla_shared::testing::FakeLister::default(),
        );
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        let m = st.message();
        assert!(
            m.starts_with("pod default/bad: metadata.annotations[alibabacloud.com/gpu-milli]"),
            "{m}"
        );
    }

    /// A share of several GPUs is read (and counted when another scheduler
    /// bound it) but not placed; a node whose GPUs cannot be counted takes
    /// no GPU pod, saying why.
    #[test]
    fn shares_of_several_gpus_and_uncountable_nodes_are_refused() {
        let p = PodBuilder::new("multi")
            .request("nvidia.com/gpu", "2")
            .request(flotilla_shared::gpu::dialect::HAMI_GPUCORES, "30")
            .build_info();
        let (_, st) = GpuShare::new().pre_filter(
            &mut CycleState::default(),
            &p,
            &flotilla_shared::testing::FakeLister::default(),
        );
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert!(
            st.message()
                .starts_with("pod default/multi: a share of 300 milli-GPU on each of 2 GPUs"),
            "{}",
            st.message()
        );
        let slots = NodeInfo::new(Arc::new(
            NodeBuilder::new("hami")
                .cpu("8")
                .resource("nvidia.com/gpu", "80")
                .build_spec(),
        ));
        let st = GpuShare::new().filter(&CycleState::default(), &gpu_pod("g", 500, 1), &slots);
        assert_eq!(
            (st.code, st.reasons[0].as_ref()),
            (Code::UnschedulableAndUnresolvable, REASON_GPUS_UNREADABLE)
        );
    }

    #[test]
    fn pods_without_gpus_skip() {
        let (_, st) = GpuShare::new().pre_filter(
            &mut CycleState::default(),
            &PodBuilder::new("p").cpu("1").build_info(),
            &flotilla_shared::testing::FakeLister::default(),
        );
        assert_eq!(st.code, Code::Skip);
    }

    /// The FGD cache is keyed on the node's model too: a node relabelled
    /// with the model a pod asks for scores as a fit, not as the misfit
    /// cached under its old model.
    #[test]
    fn a_relabelled_node_is_rescored() {
        let pl = GpuShare::new();
        let p = PodBuilder::new("m")
            .annotation(ANNOTATION_GPU_MILLI, "500")
            .annotation(GPU_CARD_MODEL, "A100")
            .build_info();
        let score_on = |node: NodeInfo| {
            let node = Arc::new(node);
            let mut state = CycleState::default();
            let st = pl.pre_score(
                &mut state,
                &p,
                std::slice::from_ref(&node),
                &flotilla_shared::testing::FakeLister::default(),
            );
            assert!(st.is_success(), "{st:?}");
            pl.score(&state, &p, &node).unwrap()
        };
        assert_eq!(score_on(gpu_node("g", "T4", 2)), policy::MIN_NODE_SCORE);
        assert!(score_on(gpu_node("g", "A100", 2)) > policy::MIN_NODE_SCORE);
    }

    #[test]
    fn the_bind_check_refuses_devices_another_grant_took() {
        let mut node = gpu_node("n", "T4", 2);
        let first = gpu_pod("a", 600, 1).with_gpu_devices(DeviceSet::one(0));
        node.add_pod(Arc::new(first));
        let second = gpu_pod("b", 600, 1);
        assert_eq!(
            misfit(
                &second.gpu.as_ref().unwrap().request,
                Some(DeviceSet::one(0)),
                &node
            ),
            Some((REASON_NO_SHARE, true))
        );
        assert_eq!(
            misfit(
                &second.gpu.as_ref().unwrap().request,
                Some(DeviceSet::one(1)),
                &node
            ),
            None
        );
        // Without named devices any fit passes.
        assert_eq!(
            misfit(&second.gpu.as_ref().unwrap().request, None, &node),
            None
        );
    }
}
