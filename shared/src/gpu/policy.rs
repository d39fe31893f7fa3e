//! GPU scoring policies: FGD and the paper's five baselines, as pure
//! per-node functions, and Flotilla's own ([`flotilla`], not in the paper).
//!
//! Each mirrors one Score plugin of the FGD paper's simulator
//! (`hkust-adsl/kubernetes-scheduler-simulator`,
//! `pkg/simulator/plugin/*_score.go`), including its integer arithmetic
//! and quirks, so that a Flotilla run can be compared with the paper's
//! curves. Scores are integers in `0..=100` like kube-scheduler's node
//! score; the highest wins (upstream breaks ties by the smallest node name).
//!
//! Every scoring function returns `None` when the pod does not fit the node
//! on CPU and GPU ([`task_fits`]: model, CPU, per-device fit); memory and the
//! other Kubernetes filters are the caller's. Upstream the Filter runs
//! first, so its scores are only ever taken on fitting nodes.
//!
//! | policy | node score | device choice |
//! | --- | --- | --- |
//! | [`Policy::Random`] | [`random_pick`]: one feasible node 100, others 0 | [`choose_random`] |
//! | [`Policy::DotProd`] | [`dot_prod`] | [`choose_best_fit`] |
//! | [`Policy::GpuClustering`] | [`gpu_clustering`] (needs [`NodeTags`]) | [`choose_best_fit`] |
//! | [`Policy::GpuPacking`] | [`gpu_packing`] | [`choose_best_fit`] |
//! | [`Policy::BestFit`] | [`best_fit_raw`], then [`normalize_min_max`] over the feasible nodes | [`choose_best_fit`] |
//! | [`Policy::Fgd`] | [`fgd`] (needs a [`TargetWorkload`]) | the device [`fgd`] returns |
//! | [`Policy::Flotilla`] | [`flotilla`] (needs a [`TargetWorkload`]), then [`normalize_flotilla`] over the feasible nodes | the device [`flotilla`] returns |
//!
//! Units: CPU in millicores, GPU in milli-GPU (1000 = one device).

use std::fmt;
use std::str::FromStr;

use super::frag::{NodeFree, TargetWorkload, TaskShape, fragment_of, node_fragment, task_fits};
use super::{DeviceSet, GpuRequest, MAX_DEVICES, MILLI_PER_GPU, NodeGpus, choose_best_fit, fits};

/// CPU of the largest node spec, in millicores: the normaliser of the
/// CPU dimension in [`best_fit_raw`] and [`dot_prod`] (upstream
/// `MaxSpecCpu`).
pub const MAX_SPEC_CPU_MILLI: i64 = 128_000;

/// GPU of the largest node spec (8 GPUs), in milli-GPU: the normaliser of
/// the GPU dimension (upstream `MaxSpecGpu`).
pub const MAX_SPEC_GPU_MILLI: i64 = 8_000;

/// Highest node score (kube-scheduler's `MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// Lowest node score (kube-scheduler's `MinNodeScore`).
pub const MIN_NODE_SCORE: i64 = 0;

// ---------------------------------------------------------------- FGD ----

/// FGD's score of `node` for `pod`, and the devices it takes: the
/// placement that least increases the node's fragmentation F_n(M) against
/// `target` (§1.4 of the reference; upstream `fgd_score.go`).
///
/// - A share (`count == 1`, `milli < 1000`): every device with at least
///   `milli` free is tried, n' = node with CPU − `cpu_milli` and that
///   device − `milli`; Δ = F(n') − F(n). The device with the **highest
///   integer score** wins, ties to the lowest index (upstream keeps the
///   first and replaces it only on a strictly higher score, so two devices
///   whose Δ differ by less than one score point, ≈ 40 milli near 0, tie
///   and the lower index wins even with the larger Δ; [`fgd_delta`] picks
///   by the float Δ instead).
/// - Whole GPUs: n' takes the `count` lowest-indexed idle devices (which
///   idle devices does not change F); CPU-only: only CPU changes and the
///   device set is empty.
/// - Score = ⌊100 · σ(−Δ / 1000)⌋ ([`fgd_score`]).
///
/// `None` if the pod does not fit (model, CPU, devices) or the node has more
/// than [`MAX_DEVICES`] devices. Allocation-free; costs
/// O(shapes × devices) per distinct free value tried.
#[must_use]
pub fn fgd(node: &NodeFree, pod: &TaskShape, target: &TargetWorkload) -> Option<(i64, DeviceSet)> {
    fgd_with_base(node, pod, target, node_fragment(node, target))
}

/// [`fgd`] with F_n(M) of the node already known (`base`, from
/// [`node_fragment`] on the same node and target; a caller may cache it
/// per node, as it changes only when the node does).
#[must_use]
pub fn fgd_with_base(
    node: &NodeFree,
    pod: &TaskShape,
    target: &TargetWorkload,
    base: f64,
) -> Option<(i64, DeviceSet)> {
    let mut best: Option<(i64, DeviceSet)> = None;
    for_each_placement(node, pod, target, base, |delta, devices| {
        let score = fgd_score(delta);
        if best.is_none_or(|(b, _)| score > b) {
            best = Some((score, devices));
        }
    })?;
    best
}

/// The raw fragmentation gradient: the lowest Δ = F(n') − F(n) in
/// milli-GPU over the placements [`fgd`] tries, and its devices (ties: the
/// lowest index). Unlike [`fgd`] the choice is by the float Δ, not the
/// truncated score. `None` as for [`fgd`].
#[must_use]
pub fn fgd_delta(
    node: &NodeFree,
    pod: &TaskShape,
    target: &TargetWorkload,
) -> Option<(f64, DeviceSet)> {
    fgd_delta_with_base(node, pod, target, node_fragment(node, target))
}

/// [`fgd_delta`] with F_n(M) already known (see [`fgd_with_base`]).
#[must_use]
pub fn fgd_delta_with_base(
    node: &NodeFree,
    pod: &TaskShape,
    target: &TargetWorkload,
    base: f64,
) -> Option<(f64, DeviceSet)> {
    let mut best: Option<(f64, DeviceSet)> = None;
    for_each_placement(node, pod, target, base, |delta, devices| {
        if best.is_none_or(|(b, _)| delta < b) {
            best = Some((delta, devices));
        }
    })?;
    best
}

/// FGD's score for a fragmentation change of `delta` milli-GPU:
/// ⌊100 · σ(−Δ / 1000)⌋ with σ the logistic function, truncated toward zero
/// like Go's `int64()`. Δ = 0 scores 50; lower Δ scores higher.
#[must_use]
pub fn fgd_score(delta: f64) -> i64 {
    let x = -delta / 1000.0;
    let sigmoid = 1.0 / (1.0 + (-x).exp());
    (sigmoid * MAX_NODE_SCORE as f64) as i64
}

/// Calls `visit(Δ, devices)` for each placement FGD considers, in device
/// order; `None` if the pod does not fit. For a share, devices with the same
/// free milli give the same F(n') (F depends on the multiset of free values
/// only), so only the lowest-indexed of each is visited: the tie rule would
/// keep it anyway.
fn for_each_placement(
    node: &NodeFree,
    pod: &TaskShape,
    target: &TargetWorkload,
    base: f64,
    mut visit: impl FnMut(f64, DeviceSet),
) -> Option<()> {
    let src = &node.gpus.free;
    if src.len() > MAX_DEVICES || !task_fits(node, pod) {
        return None;
    }
    let mut free = [0u32; MAX_DEVICES];
    free[..src.len()].copy_from_slice(src);
    let free = &mut free[..src.len()];
    let cpu = node.cpu_milli - pod.cpu_milli;
    let mem = node.memory.saturating_sub(pod.memory);
    let kind = node.gpus;
    match pod.gpu_request() {
        Some(req) if req.is_share() => {
            let milli = req.milli_on(kind)?;
            for (i, &f) in src.iter().enumerate() {
                if f < milli || src[..i].contains(&f) {
                    continue;
                }
                free[i] = f - milli;
                let delta = fragment_of(cpu, mem, kind, free, target) - base;
                free[i] = f;
                visit(delta, DeviceSet::one(i));
            }
        }
        Some(req) => {
            let mut devices = DeviceSet::default();
            for (i, f) in free.iter_mut().enumerate() {
                if devices.len() == req.count as usize {
                    break;
                }
                if *f >= MILLI_PER_GPU {
                    *f = 0;
                    devices.insert(i);
                }
            }
            visit(fragment_of(cpu, mem, kind, free, target) - base, devices);
        }
        None => visit(
            fragment_of(cpu, mem, kind, free, target) - base,
            DeviceSet::default(),
        ),
    }
    Some(())
}

// ----------------------------------------------------------- Flotilla ----

/// Tuning of [`flotilla`] (the defaults are the best measured).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct FlotillaParams {
    /// Width of the Δ buckets, milli-GPU: placements whose Δ falls in the
    /// same bucket are equal on the first criterion.
    pub bucket: f64,
    /// Weight of the BestFit leftover (0..=1, see [`leftover`]) added to
    /// Δ / `bucket` before bucketing is compared: 0 orders by Δ only, then
    /// by leftover; > 0 blends.
    pub leftover_weight: f64,
    /// Divide Δ by the node's free milli-GPU + this (0: absolute Δ).
    pub relative: f64,
    /// Rank by ⌊100 · σ(−Δ / `sigmoid_scale`)⌋ (FGD's score when 1000)
    /// instead of linear Δ buckets; 0: linear buckets.
    pub sigmoid_scale: f64,
    /// Secondary criterion among equal primaries: 0 least leftover, 1 none
    /// (node name), 2 least GPU leftover, 3 least CPU leftover.
    pub secondary: u8,
    /// Device ties (equal Δ) to the lowest index rather than the least free.
    pub device_lowest_index: bool,
    /// Model pressure: for a GPU pod that allows any model, Δ is raised by
    /// this × [`model_pressure`] of the node × 1000 milli, so that such pods
    /// keep off the GPU models that model-restricted pods need (0: off;
    /// nothing changes when the target has no restricted shape).
    pub model_pressure: f64,
}

impl Default for FlotillaParams {
    fn default() -> Self {
        FlotillaParams {
            bucket: 1.0,
            leftover_weight: 0.0,
            relative: 0.0,
            sigmoid_scale: 500.0,
            secondary: 0,
            device_lowest_index: false,
            model_pressure: 40.0,
        }
    }
}

/// The share of `target` (Σ p_i) held by shapes restricted to GPU models
/// that include `model`: how much the target's model-restricted pods need
/// nodes of that model. 0 when no shape is restricted.
#[must_use]
pub fn model_pressure(target: &TargetWorkload, model: &str) -> f64 {
    target
        .shapes()
        .iter()
        .filter_map(|(m, p)| {
            let r = m.gpu_request()?;
            (r.models.is_some() && r.allows_model(model)).then_some(*p)
        })
        .sum()
}

/// Resolution of the secondary criterion in [`flotilla`]'s raw score.
const LEFTOVER_STEPS: i64 = 100_000;

/// Score of a node [`flotilla`] could not place the pod on, below every
/// raw score; [`normalize_flotilla`] maps it to 0.
pub const FLOTILLA_NO_FIT: i64 = i64::MIN;

/// BestFit's leftover after `pod` on `node`, in `0..=1` within the max
/// spec: 0.5 · cpuLeft / 128000 + 0.5 · gpuLeft / 8000 (the complement of
/// [`best_fit_raw`], in floating point).
#[must_use]
pub fn leftover(node: &NodeFree, pod: &TaskShape) -> f64 {
    let (cpu_req, gpu_req) = request_vec(pod);
    let cpu_left = node.cpu_milli as f64 - cpu_req;
    let gpu_left = node.gpus.free_milli() as f64 - gpu_req;
    0.5 * cpu_left / MAX_SPEC_CPU_MILLI as f64 + 0.5 * gpu_left / MAX_SPEC_GPU_MILLI as f64
}

/// Flotilla's raw node score for `pod` and the devices it takes (`base` is
/// F_n(M) of the node, see [`fgd_with_base`]).
///
/// FGD's gradient with memory and a better tie rule. The target's shapes
/// and `pod` may carry a memory request ([`TaskShape::memory`]; the bench
/// and the plugin give Flotilla's shapes their memory): then a shape whose
/// memory the node no longer has counts as not fitting in F, like one short
/// of CPU, and the pod's own memory is taken from n'. On the openb nodes
/// GPU is stranded mostly by memory and CPU, not by device shares
/// (`docs/benchmarks.md` item 27). A GPU pod that allows any model also
/// pays, in Δ, for taking a model the target's model-restricted shapes
/// need ([`FlotillaParams::model_pressure`]). On a node, the placement with
/// the lowest float Δ = F(n') − F(n) wins (ties to the device with the
/// least free, then the lowest index; FGD compares truncated scores).
/// Nodes are ranked by ⌊100 · σ(−Δ / 500)⌋ (with the defaults: FGD's
/// integer score at half its scale, so that large gains and losses of F
/// saturate sooner and more placements tie; `params.sigmoid_scale` 0 ranks
/// by linear Δ buckets of
/// `params.bucket` milli-GPU instead), then, among equal scores, by the
/// least BestFit [`leftover`] (FGD leaves those ties to the node name).
/// The raw score is a fine-grained integer (higher is better) that
/// [`normalize_flotilla`] maps onto `0..=100`, the single best raw score
/// alone reaching 100. `None` if the pod does not fit. Why the buckets are
/// kept coarse: `docs/benchmarks.md`, item 27.
#[must_use]
pub fn flotilla(
    node: &NodeFree,
    pod: &TaskShape,
    target: &TargetWorkload,
    base: f64,
    params: &FlotillaParams,
) -> Option<(i64, DeviceSet)> {
    let src = &node.gpus.free;
    let mut best: Option<(f64, u32, DeviceSet)> = None;
    for_each_placement(node, pod, target, base, |delta, devices| {
        let free = devices.iter().next().map_or(0, |i| src[i]);
        let better = match best {
            None => true,
            Some((b, bf, _)) => {
                delta < b - 1e-9 || (!params.device_lowest_index && delta <= b + 1e-9 && free < bf)
            }
        };
        if better {
            best = Some((delta, free, devices));
        }
    })?;
    let (mut delta, _, devices) = best?;
    if params.model_pressure > 0.0 && pod.gpu_request().is_some_and(|r| r.models.is_none()) {
        delta += params.model_pressure
            * model_pressure(target, &node.gpus.model)
            * f64::from(MILLI_PER_GPU);
    }
    if params.relative > 0.0 {
        delta /= node.gpus.free_milli() as f64 + params.relative;
        delta *= MILLI_PER_GPU as f64;
    }
    let left = leftover(node, pod).clamp(-10.0, 10.0);
    let bucket = params.bucket.max(1e-6);
    let primary = if params.sigmoid_scale > 0.0 {
        let sig = 1.0 / (1.0 + (delta / params.sigmoid_scale).exp());
        -((sig * MAX_NODE_SCORE as f64) as i64 as f64)
    } else {
        (delta / bucket + params.leftover_weight * left).floor()
    };
    let primary = primary.clamp(-1e12, 1e12) as i64;
    let second = match params.secondary {
        1 => 0.0,
        2 => {
            let gpu_req = pod.gpu_request().map_or(0, GpuRequest::total_milli);
            (node.gpus.free_milli() as f64 - gpu_req as f64) / MAX_SPEC_GPU_MILLI as f64
        }
        3 => (node.cpu_milli - pod.cpu_milli) as f64 / MAX_SPEC_CPU_MILLI as f64,
        _ => left,
    };
    let secondary = ((second.clamp(0.0, 1.0)) * LEFTOVER_STEPS as f64) as i64;
    Some((-(primary * (LEFTOVER_STEPS + 1) + secondary), devices))
}

/// [`normalize_min_max`] over the raw [`flotilla`] scores, leaving out
/// [`FLOTILLA_NO_FIT`] (scored 0): only the highest raw score reaches 100.
pub fn normalize_flotilla(scores: &mut [i64]) {
    let fit = || scores.iter().copied().filter(|&s| s != FLOTILLA_NO_FIT);
    let (Some(lowest), Some(highest)) = (fit().min(), fit().max()) else {
        scores.fill(MIN_NODE_SCORE);
        return;
    };
    let range = i128::from(highest) - i128::from(lowest);
    for s in scores.iter_mut() {
        *s = if *s == FLOTILLA_NO_FIT || range == 0 {
            MIN_NODE_SCORE
        } else {
            let v = (i128::from(*s) - i128::from(lowest)) * i128::from(MAX_NODE_SCORE) / range;
            v as i64 + MIN_NODE_SCORE
        };
    }
}

// ------------------------------------------------------------ BestFit ----

/// BestFit's raw score (upstream `best_fit_score.go`): the less the node
/// has left after the pod, the higher,
///
/// raw = ⌊100 · (1 − [0.5 · (cpuFree − cpuReq) / 128000
///                   + 0.5 · (gpuFree − gpuReq) / 8000])⌋
///
/// with gpuFree the node's total free milli-GPU and gpuReq = count × milli,
/// in floating point, truncated toward zero. Within the max spec (128
/// cores, 8 GPUs) raw is in `0..=100`; larger nodes can go below 0 (not
/// clamped, as upstream). The raw scores are then min–max normalised over
/// the feasible nodes with [`normalize_min_max`]. `None` if the pod does
/// not fit.
#[must_use]
pub fn best_fit_raw(node: &NodeFree, pod: &TaskShape) -> Option<i64> {
    if !task_fits(node, pod) {
        return None;
    }
    let (cpu_req, gpu_req) = request_vec(pod);
    let cpu_left = node.cpu_milli as f64 - cpu_req;
    let gpu_left = node.gpus.free_milli() as f64 - gpu_req;
    let mut leftover = 0.0;
    leftover += cpu_left / MAX_SPEC_CPU_MILLI as f64 * 0.5;
    leftover += gpu_left / MAX_SPEC_GPU_MILLI as f64 * 0.5;
    Some(((1.0 - leftover) * MAX_NODE_SCORE as f64) as i64)
}

/// Min–max normalisation of scores to `0..=100` (upstream
/// `plugin_utils.go` `NormalizeScore`, BestFit's NormalizeScore):
/// s ↦ (s − min) · 100 / (max − min) in integer arithmetic (truncated);
/// when all scores are equal (or there is one) every score becomes 0.
pub fn normalize_min_max(scores: &mut [i64]) {
    let (Some(&lowest), Some(&highest)) = (scores.iter().min(), scores.iter().max()) else {
        return;
    };
    let range = highest - lowest;
    for s in scores.iter_mut() {
        *s = if range == 0 {
            MIN_NODE_SCORE
        } else {
            (*s - lowest) * (MAX_NODE_SCORE - MIN_NODE_SCORE) / range + MIN_NODE_SCORE
        };
    }
}

// ------------------------------------------------------------ DotProd ----

/// DotProd's score, Tetris-like, as run in the paper (`dimExt=merge`,
/// `norm=max`; upstream `dot_product_score.go`):
///
/// node = (cpuFree / 128000, gpuFree / 8000), pod = (cpuReq / 128000,
/// count·milli / 8000), score = ⌊100 · (1 − node·pod / 2)⌋
///
/// with gpuFree the node's total free milli-GPU (devices merged into one
/// dimension). A smaller dot product, i.e. a fuller node, scores higher.
/// Within the max spec the score is in `0..=100` (0 also when 1 − node·pod/2
/// ≤ −1, as upstream). `None` if the pod does not fit (upstream: 0 when CPU
/// is short; the Filter rejects the rest).
#[must_use]
pub fn dot_prod(node: &NodeFree, pod: &TaskShape) -> Option<i64> {
    if !task_fits(node, pod) {
        return None;
    }
    let (cpu_req, gpu_req) = request_vec(pod);
    let (cpu_max, gpu_max) = (MAX_SPEC_CPU_MILLI as f64, MAX_SPEC_GPU_MILLI as f64);
    let node_vec = [
        node.cpu_milli as f64 / cpu_max,
        node.gpus.free_milli() as f64 / gpu_max,
    ];
    let pod_vec = [cpu_req / cpu_max, gpu_req / gpu_max];
    let mut dot = 0.0;
    for (a, b) in node_vec.iter().zip(pod_vec) {
        dot += a * b;
    }
    let score = 1.0 - dot / pod_vec.len() as f64;
    if score <= -1.0 {
        return Some(MIN_NODE_SCORE);
    }
    Some((MAX_NODE_SCORE as f64 * score) as i64)
}

/// The pod's (CPU, total GPU) request as floats.
fn request_vec(pod: &TaskShape) -> (f64, f64) {
    let gpu = pod.gpu_request().map_or(0, GpuRequest::total_milli);
    (pod.cpu_milli as f64, gpu as f64)
}

// --------------------------------------------------------- GpuPacking ----

/// GpuPacking's score (upstream `gpu_packing_score.go`): prefer shared
/// devices, then idle devices of used nodes, then idle nodes.
///
/// - CPU-only pod: 0 everywhere (the node-name tie decides).
/// - Node with every device idle (case 3): 33 − devices, floored at
///   **the number of devices** — upstream's quirk: `max(score, idleGpus)`,
///   not `max(score, 0)`. A 1-GPU idle node scores 32 and an 8-GPU one 25
///   (small idle nodes first); the floor only bites past 16 devices (a
///   20-GPU idle node scores 20, not 13).
/// - Otherwise the pod's devices are the ones with the least free that
///   hold its share (ascending free):
///   - if any of them is idle (case 2): 50 − idle devices used, floored
///     at 33;
///   - else (case 1, shared devices only): 100 − ⌊Σ free% / 10⌋ with
///     free% = ⌊free · 100 / 1000⌋ of each device used, before placement,
///     in integer arithmetic, floored at 50.
///
/// `None` if the pod does not fit.
#[must_use]
pub fn gpu_packing(node: &NodeFree, pod: &TaskShape) -> Option<i64> {
    if !task_fits(node, pod) {
        return None;
    }
    let Some(req) = pod.gpu_request() else {
        return Some(MIN_NODE_SCORE);
    };
    let gpus = &node.gpus.free;
    let idle = gpus.iter().filter(|&&f| f >= MILLI_PER_GPU).count() as i64;
    if idle == gpus.len() as i64 {
        return Some((MAX_NODE_SCORE / 3 - idle).max(idle));
    }
    // The devices that hold the share, least free first (a stack copy).
    if gpus.len() > MAX_DEVICES {
        return None;
    }
    let milli = req.milli_on(node.gpus)?;
    let mut buf = [0u32; MAX_DEVICES];
    let mut n = 0;
    for &f in gpus.iter().filter(|&&f| f >= milli) {
        buf[n] = f;
        n += 1;
    }
    let used = &mut buf[..n];
    used.sort_unstable();
    let used = &used[..req.count as usize];
    let idle_used = used.iter().filter(|&&f| f >= MILLI_PER_GPU).count() as i64;
    if idle_used > 0 {
        return Some((MAX_NODE_SCORE / 2 - idle_used).max(MAX_NODE_SCORE / 3));
    }
    let free_pct: i64 = used
        .iter()
        .map(|&f| i64::from(f) * 100 / i64::from(MILLI_PER_GPU))
        .sum();
    Some((MAX_NODE_SCORE - free_pct / 10).max(MAX_NODE_SCORE / 2))
}

// ------------------------------------------------------ GpuClustering ----

/// The GPU tag of a pod, as GpuClustering groups pods: `share-gpu` for a
/// share of one device, `<k>-gpu` for k whole devices (CPU-only pods have
/// none: upstream's `no-gpu`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GpuTag {
    /// A share of one device (`count == 1`, `milli < 1000`): `share-gpu`.
    Share,
    /// `k` whole devices: `<k>-gpu`.
    Whole(u32),
}

impl GpuTag {
    /// The tag of a GPU request.
    #[must_use]
    pub fn of(req: &GpuRequest) -> GpuTag {
        if req.is_share() {
            GpuTag::Share
        } else {
            GpuTag::Whole(req.count)
        }
    }

    /// The tag of a task; `None` for a CPU-only task.
    #[must_use]
    pub fn of_task(task: &TaskShape) -> Option<GpuTag> {
        task.gpu_request().map(GpuTag::of)
    }

    /// Slot in [`NodeTags`]: 0 for a share, k for k whole devices.
    fn slot(self) -> Option<usize> {
        match self {
            GpuTag::Share => Some(0),
            GpuTag::Whole(k) => Some(k as usize).filter(|k| (1..=MAX_DEVICES).contains(k)),
        }
    }
}

impl fmt::Display for GpuTag {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            GpuTag::Share => f.write_str("share-gpu"),
            GpuTag::Whole(k) => write!(f, "{k}-gpu"),
        }
    }
}

/// The GPU tags of the pods on one node, with counts (upstream
/// `NodeResource.GpuAffinity`): what [`gpu_clustering`] needs. Build it from
/// the pods bound or assumed on the node ([`NodeTags::add`] each one's
/// [`GpuTag`]; CPU-only pods add nothing) and keep it with
/// [`NodeTags::remove`] when a pod leaves. Fixed size, no allocation.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeTags {
    /// Pods per slot: 0 = share, k = k whole devices.
    counts: [u32; MAX_DEVICES + 1],
    /// Bit `slot` set iff `counts[slot] > 0`.
    present: u128,
}

impl Default for NodeTags {
    fn default() -> Self {
        NodeTags {
            counts: [0; MAX_DEVICES + 1],
            present: 0,
        }
    }
}

impl NodeTags {
    /// No GPU pods.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Counts one more pod with `tag`. A tag of more than [`MAX_DEVICES`]
    /// whole devices is ignored (no node can hold such a pod).
    pub fn add(&mut self, tag: GpuTag) {
        if let Some(s) = tag.slot() {
            self.counts[s] += 1;
            self.present |= 1 << s;
        }
    }

    /// Counts one pod with `tag` less; `false` (and no change) if there
    /// was none.
    pub fn remove(&mut self, tag: GpuTag) -> bool {
        let Some(s) = tag.slot() else { return false };
        if self.counts[s] == 0 {
            return false;
        }
        self.counts[s] -= 1;
        if self.counts[s] == 0 {
            self.present &= !(1 << s);
        }
        true
    }

    /// Pods with `tag`.
    #[must_use]
    pub fn count(&self, tag: GpuTag) -> u32 {
        tag.slot().map_or(0, |s| self.counts[s])
    }

    /// Number of distinct tags present.
    #[must_use]
    pub fn distinct(&self) -> usize {
        self.present.count_ones() as usize
    }

    /// Whether the node holds no GPU pod.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.present == 0
    }
}

impl FromIterator<GpuTag> for NodeTags {
    fn from_iter<I: IntoIterator<Item = GpuTag>>(iter: I) -> Self {
        let mut tags = NodeTags::new();
        for t in iter {
            tags.add(t);
        }
        tags
    }
}

/// GpuClustering's score (upstream `gpu_clustering_score.go`): put pods
/// with the same GPU tag ([`GpuTag`]) together, fuller nodes first.
///
/// With base = ⌊25 · (8000 − gpuFree) / 8000⌋ (integer arithmetic,
/// truncated toward zero; gpuFree = the node's total free milli-GPU before
/// placement):
///
/// | node's GPU pods (`tags`) | score |
/// | --- | --- |
/// | only the pod's tag | 75 + base |
/// | the pod's tag and others | 50 + base |
/// | none | 25 + base |
/// | only other tags | base |
///
/// CPU-only pods score 0 everywhere (the node-name tie decides). `None` if
/// the pod does not fit.
#[must_use]
pub fn gpu_clustering(node: &NodeFree, pod: &TaskShape, tags: &NodeTags) -> Option<i64> {
    if !task_fits(node, pod) {
        return None;
    }
    let Some(tag) = GpuTag::of_task(pod) else {
        return Some(MIN_NODE_SCORE);
    };
    let free = node.gpus.free_milli() as i64;
    let base = MAX_NODE_SCORE / 4 * (MAX_SPEC_GPU_MILLI - free) / MAX_SPEC_GPU_MILLI;
    let tier = if tags.count(tag) > 0 {
        if tags.distinct() == 1 {
            MAX_NODE_SCORE * 3 / 4
        } else {
            MAX_NODE_SCORE * 2 / 4
        }
    } else if tags.is_empty() {
        MAX_NODE_SCORE / 4
    } else {
        0
    };
    Some(base + tier)
}

// ------------------------------------------------------------- Random ----

/// Random's node choice (upstream `random_score.go`): PreScore draws one
/// of the `feasible` nodes uniformly; that node scores
/// [`random_score`]`(true)` = 100 and every other 0, so it wins. Returns
/// the index `draw(feasible)` into the caller's list of feasible nodes,
/// `None` when there is none. `draw(n)` must return a uniform index in
/// `0..n`.
///
/// # Panics
/// If `draw` returns an index `≥ feasible`.
pub fn random_pick(feasible: usize, draw: impl FnOnce(usize) -> usize) -> Option<usize> {
    if feasible == 0 {
        return None;
    }
    let i = draw(feasible);
    assert!(i < feasible, "draw({feasible}) returned {i}");
    Some(i)
}

/// Random's node score: 100 for the node [`random_pick`] chose, 0 for the
/// others.
#[must_use]
pub const fn random_score(picked: bool) -> i64 {
    if picked {
        MAX_NODE_SCORE
    } else {
        MIN_NODE_SCORE
    }
}

/// Random's device choice (upstream `allocateGpuIdBasedOnRandomFit`): a
/// share goes to a device drawn uniformly among those with at least its
/// `milli` free (`draw(n)` must return a uniform index in `0..n`; the
/// `i`-th fitting device by index is taken); whole GPUs take the
/// lowest-indexed idle devices, as [`choose_best_fit`], without drawing.
/// Upstream draws by reservoir sampling (one draw per fitting device); the
/// distribution is the same, the random stream is not. `None` if `req`
/// does not [`fits`].
///
/// # Panics
/// If `draw` returns an index `≥ n`.
pub fn choose_random(
    gpus: &NodeGpus,
    req: &GpuRequest,
    draw: impl FnOnce(usize) -> usize,
) -> Option<DeviceSet> {
    if !req.is_share() {
        return choose_best_fit(gpus, req);
    }
    if !fits(gpus, req) {
        return None;
    }
    let milli = req.milli_on(gpus)?;
    let fitting = || {
        gpus.free
            .iter()
            .enumerate()
            .filter(move |(_, f)| **f >= milli)
    };
    let n = fitting().count();
    let pick = draw(n);
    assert!(pick < n, "draw({n}) returned {pick}");
    fitting().nth(pick).map(|(i, _)| DeviceSet::one(i))
}

// ------------------------------------------------------------- Policy ----

/// The six policies of the paper's evaluation, in its order.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum Policy {
    /// A uniformly random feasible node; random fitting device.
    Random,
    /// Tetris dot product, merged GPU dimension, max-spec norm ([`dot_prod`]).
    DotProd,
    /// Same GPU tag together ([`gpu_clustering`]).
    GpuClustering,
    /// Shared devices first ([`gpu_packing`]).
    GpuPacking,
    /// Least leftover ([`best_fit_raw`] + [`normalize_min_max`]).
    BestFit,
    /// Fragmentation gradient descent ([`fgd`]).
    Fgd,
    /// Flotilla's own: FGD's float gradient, ties by least leftover
    /// ([`flotilla`] + [`normalize_flotilla`]). Not in the paper.
    Flotilla,
}

impl Policy {
    /// All policies, in the paper's order, then Flotilla's.
    pub const ALL: [Policy; 7] = [
        Policy::Random,
        Policy::DotProd,
        Policy::GpuClustering,
        Policy::GpuPacking,
        Policy::BestFit,
        Policy::Fgd,
        Policy::Flotilla,
    ];

    /// The name in the paper's result files (`sc_policy`), e.g. `06-FGD`.
    #[must_use]
    pub const fn paper_name(self) -> &'static str {
        match self {
            Policy::Random => "01-Random",
            Policy::DotProd => "02-DotProd",
            Policy::GpuClustering => "03-GpuClustering",
            Policy::GpuPacking => "04-GpuPacking",
            Policy::BestFit => "05-BestFit",
            Policy::Fgd => "06-FGD",
            Policy::Flotilla => "07-Flotilla",
        }
    }

    /// The short name (`random`, `dotprod`, `clustering`, `packing`,
    /// `bestfit`, `fgd`, `flotilla`).
    #[must_use]
    pub const fn short_name(self) -> &'static str {
        match self {
            Policy::Random => "random",
            Policy::DotProd => "dotprod",
            Policy::GpuClustering => "clustering",
            Policy::GpuPacking => "packing",
            Policy::BestFit => "bestfit",
            Policy::Fgd => "fgd",
            Policy::Flotilla => "flotilla",
        }
    }
}

impl fmt::Display for Policy {
    /// The paper name.
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.paper_name())
    }
}

/// An unknown policy name.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error(
    "unknown GPU policy {0:?}: expected one of random, dotprod, clustering, packing, bestfit, fgd, \
     flotilla (or 01-Random, 02-DotProd, 03-GpuClustering, 04-GpuPacking, 05-BestFit, 06-FGD, \
     07-Flotilla; any case)"
)]
pub struct ParsePolicyError(pub String);

impl FromStr for Policy {
    type Err = ParsePolicyError;

    /// Accepts the short name, the paper name with or without its number
    /// (`06-FGD`, `FGD`, `GpuPacking`), ASCII case-insensitive.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        let t = s.trim();
        Policy::ALL
            .into_iter()
            .find(|p| {
                let paper = p.paper_name();
                let bare = &paper[3..];
                [p.short_name(), paper, bare]
                    .iter()
                    .any(|n| n.eq_ignore_ascii_case(t))
            })
            .ok_or_else(|| ParsePolicyError(s.to_owned()))
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::gpu::fixtures::{approx, example_target, gpus, share, whole};

    fn node(cpu_milli: i64, g: &NodeGpus) -> NodeFree<'_> {
        NodeFree {
            cpu_milli,
            memory: NodeFree::ANY_MEMORY,
            gpus: g,
        }
    }

    // ---- FGD ----

    #[test]
    fn fgd_score_is_a_truncated_sigmoid() {
        assert_eq!(fgd_score(0.0), 50);
        // σ(−0.05) = 0.48750 → 48; σ(0.25) = 0.56218 → 56.
        assert_eq!(fgd_score(50.0), 48);
        assert_eq!(fgd_score(-250.0), 56);
        // Tiny changes round into the same point.
        assert_eq!(fgd_score(1.0), 49);
        assert_eq!(fgd_score(-1.0), 50);
        assert_eq!(fgd_score(-1e9), 100);
        assert_eq!(fgd_score(1e9), 0);
    }

    /// §1.7: pod X = 4000 m + 1 × 500.
    /// n1 (16000 m, [1000, 300, 1000, 0]), F = 700: X on device 0 →
    /// [500, 300, 1000, 0], F' = 750, Δ = +50, score 48; device 2 is the
    /// same, device 1 cannot hold it; device 0 (lowest index) wins.
    /// n2 (16000 m, [500, 1000]), F = 450: device 0 → [0, 1000], F' = 200,
    /// Δ = −250, score 56; device 1 → [500, 500], F' = 500, Δ = +50, 48.
    /// FGD picks n2 / device 0.
    #[test]
    fn fgd_worked_example() {
        let t = example_target();
        let x = share(4000, 500);
        let g1 = gpus(&[1000, 300, 1000, 0]);
        let n1 = node(16000, &g1);
        assert!(approx(node_fragment(&n1, &t), 700.0));
        assert_eq!(fgd(&n1, &x, &t), Some((48, DeviceSet::one(0))));
        let (d1, s1) = fgd_delta(&n1, &x, &t).unwrap();
        assert!(approx(d1, 50.0));
        assert_eq!(s1, DeviceSet::one(0));

        let g2 = gpus(&[500, 1000]);
        let n2 = node(16000, &g2);
        assert!(approx(node_fragment(&n2, &t), 450.0));
        assert_eq!(fgd(&n2, &x, &t), Some((56, DeviceSet::one(0))));
        let (d2, s2) = fgd_delta(&n2, &x, &t).unwrap();
        assert!(approx(d2, -250.0));
        assert_eq!(s2, DeviceSet::one(0));
        // Device 1 of n2 alone: [1000 → 500]: the other device is 500.
        let g2b = gpus(&[300, 1000]);
        let n2b = node(16000, &g2b);
        // Only device 1 holds 500 now: F = A 150 + B 90 + C 260 = 500;
        // after [300, 500]: A 300·0.5 = 150, B lacks GPU 0.3·800 = 240,
        // C 0.2·800 = 160 → 550, Δ = +50 → 48 on device 1.
        assert_eq!(fgd(&n2b, &x, &t), Some((48, DeviceSet::one(1))));

        // The cluster-level choice: the highest score, n2.
        let best = [("n1", &n1), ("n2", &n2)]
            .into_iter()
            .filter_map(|(name, n)| fgd(n, &x, &t).map(|(s, d)| (s, name, d)))
            .max_by_key(|(s, _, _)| *s)
            .unwrap();
        assert_eq!(best, (56, "n2", DeviceSet::one(0)));
    }

    /// Whole GPU on n1 (16000 m, [1000, 300, 1000, 0]): B' = 8000 m +
    /// 1 × 1000 takes device 0 → 8000 m, [0, 300, 1000, 0]:
    /// A fits on device 2, too small 300 → 150; B (8000 ≤ 8000) fits, 300 →
    /// 90; C 0.2 · 1300 = 260. F' = 500, Δ = −200 → σ(0.2) = 0.5498 → 54.
    #[test]
    fn fgd_whole_gpu_takes_the_lowest_idle_devices() {
        let t = example_target();
        let g = gpus(&[1000, 300, 1000, 0]);
        let n = node(16000, &g);
        assert_eq!(fgd(&n, &whole(8000, 1), &t), Some((54, DeviceSet::one(0))));
        let (d, _) = fgd_delta(&n, &whole(8000, 1), &t).unwrap();
        assert!(approx(d, -200.0));
        assert_eq!(
            fgd(&n, &whole(1000, 2), &t).map(|(_, d)| d),
            Some(DeviceSet(0b101))
        );
        assert_eq!(fgd(&n, &whole(1000, 3), &t), None);
    }

    /// CPU-only 10000 m on n2 (16000 m, [500, 1000]), F = 450: left 6000 m;
    /// A still fits → 0; B now lacks CPU → 0.3 · 1500 = 450; C → 300.
    /// F' = 750, Δ = +300 → σ(−0.3) = 0.4256 → 42; no device.
    #[test]
    fn fgd_cpu_only_changes_only_cpu() {
        let t = example_target();
        let g = gpus(&[500, 1000]);
        let n = node(16000, &g);
        assert_eq!(
            fgd(&n, &TaskShape::cpu_only(10000), &t),
            Some((42, DeviceSet::default()))
        );
        // 1000 m changes no class: Δ = 0 exactly, score 50.
        assert_eq!(
            fgd_delta(&n, &TaskShape::cpu_only(1000), &t),
            Some((0.0, DeviceSet::default()))
        );
        assert_eq!(fgd(&n, &TaskShape::cpu_only(1000), &t).unwrap().0, 50);
    }

    #[test]
    fn fgd_refuses_what_does_not_fit() {
        let t = example_target();
        let g = gpus(&[500, 300]);
        let n = node(16000, &g);
        assert_eq!(fgd(&n, &share(1000, 600), &t), None);
        assert_eq!(fgd(&n, &share(16001, 100), &t), None);
        assert_eq!(fgd(&n, &TaskShape::cpu_only(16001), &t), None);
        let mut t4 = GpuRequest::share(100);
        t4.models = Some(Arc::from(vec![Arc::from("T4")]));
        assert_eq!(fgd(&n, &TaskShape::with_gpu(1000, t4), &t), None);
        assert_eq!(fgd_delta(&n, &share(1000, 600), &t), None);
    }

    /// Target: A = share 600 (0.02), C = CPU-only 1 m (0.98).
    /// Node [650, 700], pod 1 × 100: F = 0.98 · 1350 = 1323 (A fits,
    /// nothing too small).
    /// - device 0 → [550, 700]: C 0.98 · 1250 = 1225, A too small 550 ·
    ///   0.02 = 11 → 1236, Δ = −87, σ(0.087) = 0.5217 → 52;
    /// - device 1 → [650, 600]: 1225 + 0, Δ = −98, σ(0.098) = 0.5245 → 52.
    ///
    /// Equal integer scores: `fgd` keeps device 0 (upstream); `fgd_delta`
    /// takes device 1 (lower float Δ).
    #[test]
    fn fgd_device_ties_by_integer_score_delta_by_float() {
        let t = TargetWorkload::from_weights(vec![
            (share(1000, 600), 0.02),
            (TaskShape::cpu_only(1), 0.98),
        ]);
        let g = gpus(&[650, 700]);
        let n = node(16000, &g);
        assert!(approx(node_fragment(&n, &t), 1323.0));
        assert_eq!(fgd(&n, &share(0, 100), &t), Some((52, DeviceSet::one(0))));
        let (d, s) = fgd_delta(&n, &share(0, 100), &t).unwrap();
        assert!(approx(d, -98.0), "{d}");
        assert_eq!(s, DeviceSet::one(1));
    }

    #[test]
    fn fgd_with_base_matches_and_equal_devices_take_the_lowest_index() {
        let t = example_target();
        let g = gpus(&[0, 1000, 1000, 1000]);
        let n = node(16000, &g);
        let base = node_fragment(&n, &t);
        let x = share(4000, 500);
        assert_eq!(fgd_with_base(&n, &x, &t, base), fgd(&n, &x, &t));
        assert_eq!(fgd(&n, &x, &t).unwrap().1, DeviceSet::one(1));
        assert_eq!(fgd_delta_with_base(&n, &x, &t, base), fgd_delta(&n, &x, &t));
    }

    // ---- Flotilla ----

    fn flo(n: &NodeFree, pod: &TaskShape, t: &TargetWorkload) -> Option<(i64, DeviceSet)> {
        flotilla(n, pod, t, node_fragment(n, t), &FlotillaParams::default())
    }

    /// The [`fgd_device_ties_by_integer_score_delta_by_float`] node: FGD's
    /// integer score ties devices 0 and 1 (both 52) and keeps 0; Flotilla
    /// takes device 1 (Δ −98 < −87).
    #[test]
    fn flotilla_chooses_devices_by_float_delta() {
        let t = TargetWorkload::from_weights(vec![
            (share(1000, 600), 0.02),
            (TaskShape::cpu_only(1), 0.98),
        ]);
        let g = gpus(&[650, 700]);
        let n = node(16000, &g);
        assert_eq!(flo(&n, &share(0, 100), &t).unwrap().1, DeviceSet::one(1));
        // Equal Δ (two idle devices, whole-GPU-like F): the least free wins
        // among equal Δ; here [1000, 1000] are equal, so the lowest index.
        let g = gpus(&[1000, 1000]);
        assert_eq!(
            flo(&node(16000, &g), &share(0, 100), &t).unwrap().1,
            DeviceSet::one(0)
        );
        assert_eq!(flo(&n, &share(0, 800), &t), None);
        assert_eq!(flo(&node(10, &g), &share(1000, 100), &t), None);
    }

    /// §1.7: X on n2 (Δ −250) beats n1 (Δ +50), as FGD; nodes with equal Δ
    /// rank by the least leftover (the fuller node first).
    #[test]
    fn flotilla_ranks_by_delta_then_leftover() {
        let t = example_target();
        let x = share(4000, 500);
        let g1 = gpus(&[1000, 300, 1000, 0]);
        let g2 = gpus(&[500, 1000]);
        let (s1, _) = flo(&node(16000, &g1), &x, &t).unwrap();
        let (s2, d2) = flo(&node(16000, &g2), &x, &t).unwrap();
        assert!(s2 > s1, "{s2} vs {s1}");
        assert_eq!(d2, DeviceSet::one(0));
        // A CPU-only 1000 m pod changes no class on either node (Δ = 0):
        // the node with less left (16000 m, 1500 milli) beats the one
        // with more (32000 m, same devices).
        let c = TaskShape::cpu_only(1000);
        let (small, _) = flo(&node(16000, &g2), &c, &t).unwrap();
        let (big, _) = flo(&node(32000, &g2), &c, &t).unwrap();
        assert!(small > big, "{small} vs {big}");
        assert!(approx(
            leftover(&node(16000, &g2), &c),
            0.5 * 15000.0 / 128_000.0 + 0.5 * 1500.0 / 8000.0
        ));
    }

    /// Two nodes alike on CPU and devices ([1000, 1000], 16 cores), one
    /// with 64 GiB free, one with 40 GiB. The target is one shape, 4 cores +
    /// 1 GPU + 24 GiB. A pod of 4 cores + 1 GPU + 24 GiB leaves 40 GiB on the
    /// first (another shape still fits: Δ = 0) and 16 GiB on the second (the
    /// last GPU is stranded on memory: Δ = +1000). With memory in the
    /// shapes Flotilla tells them apart; FGD's measure (no memory) cannot.
    #[test]
    fn flotilla_counts_memory_in_the_fragment() {
        let gib = 1i64 << 30;
        let g = gpus(&[1000, 1000]);
        let roomy = NodeFree {
            cpu_milli: 16000,
            memory: 64 * gib,
            gpus: &g,
        };
        let tight = NodeFree {
            memory: 40 * gib,
            ..roomy
        };
        let shape = whole(4000, 1).with_memory(24 * gib);
        let target = TargetWorkload::from_weights(vec![(shape.clone(), 1.0)]);
        let p = FlotillaParams::default();
        let (a, _) = flotilla(&roomy, &shape, &target, node_fragment(&roomy, &target), &p).unwrap();
        let (b, _) = flotilla(&tight, &shape, &target, node_fragment(&tight, &target), &p).unwrap();
        assert!(a > b, "{a} {b}");
        let (da, _) = fgd_delta(&roomy, &shape, &target).unwrap();
        let (db, _) = fgd_delta(&tight, &shape, &target).unwrap();
        assert!(approx(da, 0.0) && approx(db, 1000.0), "{da} {db}");
        // Without memory in the shapes both nodes are the same to FGD.
        let plain = TargetWorkload::from_weights(vec![(whole(4000, 1), 1.0)]);
        assert_eq!(
            fgd(&roomy, &whole(4000, 1), &plain),
            fgd(&tight, &whole(4000, 1), &plain)
        );
        // A pod whose memory the node does not have does not fit.
        let big = whole(4000, 1).with_memory(48 * gib);
        assert!(flotilla(&tight, &big, &target, 0.0, &p).is_none());
    }

    /// A T4 node and a G2 node, alike otherwise; the target has a share
    /// restricted to T4 (weight 0.2) and an unrestricted one. An
    /// unrestricted pod goes to the G2 node (the T4 one costs
    /// 40 × 0.2 × 1000 in Δ); the T4-restricted pod is not affected; with
    /// the pressure off the two nodes are equal.
    #[test]
    fn flotilla_keeps_unrestricted_pods_off_the_models_restricted_ones_need() {
        let t4 = NodeGpus {
            model: Arc::from("T4"),
            memory_mib: None,
            free: vec![1000, 1000],
        };
        let g2 = NodeGpus {
            model: Arc::from("G2"),
            memory_mib: None,
            free: vec![1000, 1000],
        };
        let mut pinned = GpuRequest::share(500);
        pinned.models = Some(Arc::from(vec![Arc::from("T4")]));
        let pinned = TaskShape::with_gpu(4000, pinned);
        let target =
            TargetWorkload::from_weights(vec![(share(4000, 500), 0.8), (pinned.clone(), 0.2)]);
        assert!(approx(model_pressure(&target, "T4"), 0.2));
        assert!(approx(model_pressure(&target, "G2"), 0.0));
        let p = FlotillaParams::default();
        let score = |g: &NodeGpus, pod: &TaskShape, p: &FlotillaParams| {
            let n = node(16000, g);
            flotilla(&n, pod, &target, node_fragment(&n, &target), p)
                .unwrap()
                .0
        };
        let any = share(4000, 500);
        assert!(score(&g2, &any, &p) > score(&t4, &any, &p));
        let off = FlotillaParams {
            model_pressure: 0.0,
            ..p
        };
        // The pressure costs only on the model the restricted shape needs.
        assert!(score(&t4, &any, &off) > score(&t4, &any, &p));
        assert_eq!(score(&g2, &any, &off), score(&g2, &any, &p));
        // The restricted pod fits only T4 and is not charged there.
        let n = node(16000, &t4);
        let base = node_fragment(&n, &target);
        assert_eq!(
            flotilla(&n, &pinned, &target, base, &p),
            flotilla(&n, &pinned, &target, base, &off)
        );
    }

    #[test]
    fn normalize_flotilla_keeps_the_single_best_at_100() {
        let mut s = [1_000_000_007, 1_000_000_006, FLOTILLA_NO_FIT, -5];
        normalize_flotilla(&mut s);
        assert_eq!(s[0], 100);
        assert_eq!(s[1], 99);
        assert_eq!(s[2], 0);
        assert_eq!(s[3], 0);
        let mut eq = [3, 3];
        normalize_flotilla(&mut eq);
        assert_eq!(eq, [0, 0]);
        let mut none = [FLOTILLA_NO_FIT];
        normalize_flotilla(&mut none);
        assert_eq!(none, [0]);
    }

    // ---- BestFit ----

    /// 32000 m free, [1000, 500] (1500 milli), pod 4000 m + 1 × 300:
    /// 100 · (1 − [0.5 · 28000/128000 + 0.5 · 1200/8000])
    /// = 100 · (1 − [0.109375 + 0.075]) = 81.5625 → 81.
    #[test]
    fn best_fit_raw_is_the_leftover_complement() {
        let g = gpus(&[1000, 500]);
        assert_eq!(best_fit_raw(&node(32000, &g), &share(4000, 300)), Some(81));
        // Max-spec node, half of each taken: 100 · (1 − [0.25 + 0.25]) = 50.
        let g8 = gpus(&[1000; 8]);
        assert_eq!(
            best_fit_raw(&node(128_000, &g8), &whole(64000, 4)),
            Some(50)
        );
        // Nothing taken from a max-spec node: 0. Everything: 100.
        assert_eq!(
            best_fit_raw(&node(128_000, &g8), &TaskShape::cpu_only(0)),
            Some(0)
        );
        assert_eq!(
            best_fit_raw(&node(128_000, &g8), &whole(128_000, 8)),
            Some(100)
        );
        assert_eq!(best_fit_raw(&node(3000, &g), &share(4000, 300)), None);
    }

    #[test]
    fn normalize_min_max_spreads_to_0_100_and_zeroes_ties() {
        // (s − 0) · 100 / 81: 81 → 100, 50 → 61 (61.7 truncated), 0 → 0.
        let mut s = [81, 50, 0];
        normalize_min_max(&mut s);
        assert_eq!(s, [100, 61, 0]);
        let mut s = [60, 70, 65];
        normalize_min_max(&mut s);
        assert_eq!(s, [0, 100, 50]);
        let mut eq = [7, 7, 7];
        normalize_min_max(&mut eq);
        assert_eq!(eq, [0, 0, 0]);
        let mut one = [42];
        normalize_min_max(&mut one);
        assert_eq!(one, [0]);
        let mut none: [i64; 0] = [];
        normalize_min_max(&mut none);
    }

    // ---- DotProd ----

    /// Node 64000 m, [1000, 1000, 500, 0] = 2500 milli; pod 16000 m + 1 × 500:
    /// node = (0.5, 0.3125), pod = (0.125, 0.0625); dot = 0.0625 +
    /// 0.01953125 = 0.08203125; 1 − dot/2 = 0.958984375 → 95.
    /// Idle max-spec node: node = (1, 1), dot = 0.1875, 1 − 0.09375 → 90:
    /// the fuller node wins.
    #[test]
    fn dot_prod_prefers_fuller_nodes() {
        let g = gpus(&[1000, 1000, 500, 0]);
        assert_eq!(dot_prod(&node(64000, &g), &share(16000, 500)), Some(95));
        let g8 = gpus(&[1000; 8]);
        assert_eq!(dot_prod(&node(128_000, &g8), &share(16000, 500)), Some(90));
        // CPU-only 64000 m on the idle node: dot = 0.5, 1 − 0.25 → 75.
        assert_eq!(
            dot_prod(&node(128_000, &g8), &TaskShape::cpu_only(64000)),
            Some(75)
        );
        assert_eq!(dot_prod(&node(8000, &g), &share(16000, 500)), None);
        // pod (1000/128000, 600/8000) = (0.0078125, 0.075): dot 0.02734375 → 98.63 → 98.
        assert_eq!(dot_prod(&node(64000, &g), &share(1000, 600)), Some(98));
    }

    // ---- GpuPacking ----

    #[test]
    fn gpu_packing_idle_nodes_and_the_floor_quirk() {
        let share5 = share(1000, 500);
        // Case 3: 33 − devices; small idle nodes first.
        assert_eq!(gpu_packing(&node(64000, &gpus(&[1000])), &share5), Some(32));
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000; 2])), &share5),
            Some(31)
        );
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000; 8])), &share5),
            Some(25)
        );
        // The floor is the device count, not 0: 33 − 20 = 13 → max(13, 20) = 20;
        // 40 devices: max(−7, 40) = 40, above an 8-GPU idle node's 25.
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000; 20])), &share5),
            Some(20)
        );
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000; 40])), &share5),
            Some(40)
        );
    }

    #[test]
    fn gpu_packing_prefers_shared_devices_then_idle_ones_on_used_nodes() {
        // Case 1: [1000, 400, 0], 1 × 300 → device with 400: 40 % → 100 − 40/10 = 96.
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000, 400, 0])), &share(1000, 300)),
            Some(96)
        );
        // 459 → ⌊45.9⌋ = 45 → ⌊45/10⌋ = 4 → 96 (integer truncation twice).
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000, 459])), &share(1000, 300)),
            Some(96)
        );
        // The least free that holds it: [990, 700, 1000] → 700: 100 − 7 = 93.
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[990, 700, 1000])), &share(1000, 300)),
            Some(93)
        );
        // Case 2: only an idle device holds it: 50 − 1 = 49.
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000, 200])), &share(1000, 300)),
            Some(49)
        );
        // Two whole GPUs on a used node: 50 − 2 = 48.
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000, 1000, 200])), &whole(1000, 2)),
            Some(48)
        );
        // 20 whole GPUs on a used 21-GPU node: 50 − 20 = 30, floored at 33.
        let mut big = vec![1000; 20];
        big.push(0);
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&big)), &whole(1000, 20)),
            Some(33)
        );
        // CPU-only: 0; not fitting: None.
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[1000])), &TaskShape::cpu_only(1)),
            Some(0)
        );
        assert_eq!(
            gpu_packing(&node(64000, &gpus(&[200])), &share(1000, 300)),
            None
        );
    }

    // ---- GpuClustering ----

    #[test]
    fn gpu_tags_and_node_tags() {
        assert_eq!(GpuTag::of(&GpuRequest::share(500)), GpuTag::Share);
        assert_eq!(GpuTag::of(&GpuRequest::whole(1)), GpuTag::Whole(1));
        assert_eq!(GpuTag::of_task(&TaskShape::cpu_only(1)), None);
        assert_eq!(GpuTag::Share.to_string(), "share-gpu");
        assert_eq!(GpuTag::Whole(8).to_string(), "8-gpu");
        let mut t: NodeTags = [GpuTag::Share, GpuTag::Share, GpuTag::Whole(2)]
            .into_iter()
            .collect();
        assert_eq!(t.count(GpuTag::Share), 2);
        assert_eq!(t.distinct(), 2);
        assert!(t.remove(GpuTag::Whole(2)));
        assert!(!t.remove(GpuTag::Whole(2)));
        assert_eq!(t.distinct(), 1);
        assert!(t.remove(GpuTag::Share) && t.remove(GpuTag::Share));
        assert!(t.is_empty());
        t.add(GpuTag::Whole(65)); // cannot be on a node: ignored
        assert!(t.is_empty());
    }

    /// Node with [1000, 1000, 1000, 0, 0, 0, 0, 0] (3000 free):
    /// base = ⌊25 · 5000 / 8000⌋ = ⌊15.625⌋ = 15.
    #[test]
    fn gpu_clustering_tiers() {
        let g = gpus(&[1000, 1000, 1000, 0, 0, 0, 0, 0]);
        let n = node(64000, &g);
        let pod = share(1000, 500);
        let only_share: NodeTags = [GpuTag::Share].into_iter().collect();
        let mixed: NodeTags = [GpuTag::Share, GpuTag::Whole(1)].into_iter().collect();
        let other: NodeTags = [GpuTag::Whole(2)].into_iter().collect();
        assert_eq!(gpu_clustering(&n, &pod, &only_share), Some(90));
        assert_eq!(gpu_clustering(&n, &pod, &mixed), Some(65));
        assert_eq!(gpu_clustering(&n, &pod, &NodeTags::new()), Some(40));
        assert_eq!(gpu_clustering(&n, &pod, &other), Some(15));
        // A 2-GPU pod matches the 2-gpu tag only.
        assert_eq!(gpu_clustering(&n, &whole(1000, 2), &other), Some(90));
        assert_eq!(gpu_clustering(&n, &whole(1000, 2), &only_share), Some(15));
        // Idle nodes: 8 GPUs → base 0 → 25; 4 GPUs → ⌊12.5⌋ = 12 → 37.
        let g8 = gpus(&[1000; 8]);
        assert_eq!(
            gpu_clustering(&node(1000, &g8), &pod, &NodeTags::new()),
            Some(25)
        );
        let g4 = gpus(&[1000; 4]);
        assert_eq!(
            gpu_clustering(&node(1000, &g4), &pod, &NodeTags::new()),
            Some(37)
        );
        // CPU-only: 0; not fitting: None.
        assert_eq!(gpu_clustering(&n, &TaskShape::cpu_only(1), &mixed), Some(0));
        assert_eq!(gpu_clustering(&node(0, &g), &pod, &mixed), None);
    }

    // ---- Random ----

    #[test]
    fn random_picks_one_feasible_node_and_a_fitting_device() {
        assert_eq!(random_pick(0, |_| unreachable!()), None);
        assert_eq!(random_pick(5, |n| n - 1), Some(4));
        assert_eq!(random_score(true), 100);
        assert_eq!(random_score(false), 0);
        // Devices holding 250: 0 (300), 1 (1000), 3 (600).
        let g = gpus(&[300, 1000, 100, 600]);
        let req = GpuRequest::share(250);
        let pick = |k: usize| {
            choose_random(&g, &req, |n| {
                assert_eq!(n, 3);
                k
            })
        };
        assert_eq!(pick(0), Some(DeviceSet::one(0)));
        assert_eq!(pick(1), Some(DeviceSet::one(1)));
        assert_eq!(pick(2), Some(DeviceSet::one(3)));
        // Whole GPUs: the lowest idle ones, no draw.
        let g = gpus(&[1000, 500, 1000]);
        assert_eq!(
            choose_random(&g, &GpuRequest::whole(2), |_| unreachable!()),
            Some(DeviceSet(0b101))
        );
        assert_eq!(
            choose_random(&g, &GpuRequest::share(600), |_| 0),
            Some(DeviceSet::one(0))
        );
        assert_eq!(choose_random(&g, &GpuRequest::whole(3), |_| 0), None);
        assert_eq!(choose_random(&gpus(&[100]), &req, |_| 0), None);
    }

    #[test]
    #[should_panic(expected = "draw(3) returned 3")]
    fn random_device_draw_out_of_range_panics() {
        let g = gpus(&[300, 1000, 600]);
        let _ = choose_random(&g, &GpuRequest::share(250), |n| n);
    }

    // ---- Policy ----

    #[test]
    fn policy_names_round_trip() {
        let paper: Vec<&str> = Policy::ALL.iter().map(|p| p.paper_name()).collect();
        assert_eq!(
            paper,
            [
                "01-Random",
                "02-DotProd",
                "03-GpuClustering",
                "04-GpuPacking",
                "05-BestFit",
                "06-FGD",
                "07-Flotilla"
            ]
        );
        for p in Policy::ALL {
            assert_eq!(p.paper_name().parse::<Policy>(), Ok(p));
            assert_eq!(p.short_name().parse::<Policy>(), Ok(p));
            assert_eq!(p.short_name().to_uppercase().parse::<Policy>(), Ok(p));
            assert_eq!(p.to_string(), p.paper_name());
        }
        assert_eq!("06-fgd".parse::<Policy>(), Ok(Policy::Fgd));
        assert_eq!("GpuPacking".parse::<Policy>(), Ok(Policy::GpuPacking));
        assert_eq!(" BestFit ".parse::<Policy>(), Ok(Policy::BestFit));
        let err = "tetris".parse::<Policy>().unwrap_err();
        assert_eq!(err, ParsePolicyError("tetris".into()));
        let msg = err.to_string();
        assert!(msg.contains("\"tetris\""), "{msg}");
        for p in Policy::ALL {
            assert!(
                msg.contains(p.short_name()) && msg.contains(p.paper_name()),
                "{msg}"
            );
        }
    }
}
