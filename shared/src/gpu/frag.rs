//! Fragmentation of a node against a target workload: the measure of the
//! FGD paper (Weng et al., "Beware of Fragmentation: Scheduling GPU-Sharing
//! Workloads with Fragmentation Gradient Descent", USENIX ATC '23), with the
//! exact rules of the authors' simulator (`hkust-adsl/kubernetes-scheduler-
//! simulator`, `pkg/utils/frag.go`).
//!
//! Units: CPU in millicores, GPU in milli-GPU (1000 = one whole device).
//! A fragment is an amount of **free milli-GPU** that a task cannot use.
//!
//! - [`TaskShape`]: what a task asks for (CPU and a [`GpuRequest`]; memory is
//!   not part of the measure, as in the paper).
//! - [`TargetWorkload`]: the popularity histogram of task shapes that the
//!   node is judged against, learned from a pod list ([`TargetWorkload::learn`]).
//! - [`NodeFree`]: what one node has free.
//! - [`task_fragment`] F_n(m), [`node_fragment`] F_n(M) = Σ p_i · F_n(m_i),
//!   and [`classify`] (the simulator's outcome buckets).
//!
//! The cluster's fragmentation is the sum of [`node_fragment`] over nodes.
//! [`super::policy::fgd`] turns the change of F_n(M) under a placement into
//! a score.

use std::cmp::Reverse;
use std::collections::HashMap;

use super::{GpuRequest, NodeGpus, fits};

/// Share of the pods the learned target workload covers (the simulator's
/// experiments run with a 95 % popularity threshold and step 1).
pub const DEFAULT_COVERAGE: f64 = 0.95;

/// What a task asks for, as far as fragmentation goes: CPU, GPU and,
/// optionally, memory.
///
/// The paper's measure has no memory (nor does the simulator's shape key,
/// `PodResource`): FGD's shapes leave [`TaskShape::memory`] at 0, which
/// means "not part of the measure". Flotilla's policy sets it, so that a
/// shape whose memory the node no longer has counts as not fitting.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct TaskShape {
    /// CPU request in millicores.
    pub cpu_milli: i64,
    /// GPU request; `None` for a CPU-only task.
    pub gpu: Option<GpuRequest>,
    /// Memory request in bytes; 0: memory is not part of the measure (the
    /// paper's shapes).
    pub memory: i64,
}

impl TaskShape {
    /// A CPU-only task of `cpu_milli` millicores.
    #[must_use]
    pub fn cpu_only(cpu_milli: i64) -> Self {
        TaskShape {
            cpu_milli,
            gpu: None,
            memory: 0,
        }
    }

    /// A task of `cpu_milli` millicores and `gpu`.
    #[must_use]
    pub fn with_gpu(cpu_milli: i64, gpu: GpuRequest) -> Self {
        TaskShape {
            cpu_milli,
            gpu: Some(gpu),
            memory: 0,
        }
    }

    /// The same task asking for `memory` bytes too (0: memory not part of
    /// the measure).
    #[must_use]
    pub fn with_memory(mut self, memory: i64) -> Self {
        self.memory = memory;
        self
    }

    /// The GPU request if it really asks for GPU (`count ≥ 1`, `milli ≥ 1`);
    /// `None` for a CPU-only task. A degenerate request of zero counts as
    /// CPU-only, as upstream (`MilliGpu == 0`).
    #[must_use]
    pub fn gpu_request(&self) -> Option<&GpuRequest> {
        self.gpu
            .as_ref()
            .filter(|r| r.count > 0 && (r.milli > 0 || r.memory_mib.is_some()))
    }

    /// The simulator's ordering key for equal counts: (CPU, per-GPU milli,
    /// GPU count, model string joined with `|`), CPU-only as (CPU, 0, 0, "").
    fn order_key(&self) -> (i64, u32, u32, String, i64) {
        match self.gpu_request() {
            None => (self.cpu_milli, 0, 0, String::new(), self.memory),
            Some(r) => {
                let models = r.models.as_ref().map_or_else(String::new, |m| {
                    m.iter().map(|s| &**s).collect::<Vec<_>>().join("|")
                });
                (self.cpu_milli, r.milli, r.count, models, self.memory)
            }
        }
    }
}

/// The target workload M = {(m_i, p_i)}: task shapes with their
/// popularity, Σ p_i = 1, most popular first.
#[derive(Debug, Clone, PartialEq, Default)]
pub struct TargetWorkload {
    shapes: Vec<(TaskShape, f64)>,
    covered_pods: u64,
    total_pods: u64,
    distinct_shapes: usize,
}

impl TargetWorkload {
    /// Learns the target workload from a pod list, as the simulator's
    /// `GetTypicalPods` does in the paper's experiments:
    ///
    /// 1. count pods per [`TaskShape`] (each pod weighs 1; CPU-only pods
    ///    included; the key is the whole shape, model list as given, in
    ///    order);
    /// 2. sort shapes by count, largest first; equal counts by the larger
    ///    (CPU, per-GPU milli, GPU count, `|`-joined model list) first,
    ///    CPU-only shapes as (CPU, 0, 0, "") — the simulator's order;
    /// 3. keep shapes one at a time until the kept pods reach
    ///    `coverage × pods` (`coverage` a fraction, e.g.
    ///    [`DEFAULT_COVERAGE`]); at least one shape is kept when there are
    ///    pods, all of them when `coverage ≥ 1`;
    /// 4. renormalise the kept counts so that Σ p_i = 1.
    ///
    /// The weights are computed as upstream does (count / total, then
    /// divided by the kept share), so that fragment sums match its floats.
    /// No pods gives an empty workload (F is then 0 everywhere).
    #[must_use]
    pub fn learn(pods: impl IntoIterator<Item = TaskShape>, coverage: f64) -> TargetWorkload {
        let mut counts: HashMap<TaskShape, u64> = HashMap::new();
        for shape in pods {
            *counts.entry(shape).or_insert(0) += 1;
        }
        Self::from_counts(counts.into_iter(), coverage)
    }

    /// [`TargetWorkload::learn`] from the number of pods of each shape
    /// (each shape once): what a scheduler counting the pods it sees keeps.
    #[must_use]
    pub fn from_counts(
        counts: impl Iterator<Item = (TaskShape, u64)>,
        coverage: f64,
    ) -> TargetWorkload {
        let mut sorted: Vec<(TaskShape, u64)> = counts.filter(|(_, c)| *c > 0).collect();
        let distinct_shapes = sorted.len();
        let total: u64 = sorted.iter().map(|(_, c)| c).sum();
        sorted.sort_by_cached_key(|(shape, count)| Reverse((*count, shape.order_key())));

        let total_f = total as f64;
        let expected = coverage * total_f;
        let mut kept = 0usize;
        let mut covered: u64 = 0;
        while kept < sorted.len() && (kept == 0 || (covered as f64) < expected) {
            covered += sorted[kept].1;
            kept += 1;
        }
        sorted.truncate(kept);
        let kept_share = covered as f64 / total_f;
        let shapes = sorted
            .into_iter()
            .map(|(shape, count)| (shape, count as f64 / total_f / kept_share))
            .collect();
        TargetWorkload {
            shapes,
            covered_pods: covered,
            total_pods: total,
            distinct_shapes,
        }
    }

    /// A target workload with the given weights, taken as they are (in this
    /// order, not renormalised): for tests and hand-made workloads.
    #[must_use]
    pub fn from_weights(shapes: Vec<(TaskShape, f64)>) -> TargetWorkload {
        let distinct_shapes = shapes.len();
        TargetWorkload {
            shapes,
            covered_pods: 0,
            total_pods: 0,
            distinct_shapes,
        }
    }

    /// The shapes and their weights p_i, most popular first.
    #[must_use]
    pub fn shapes(&self) -> &[(TaskShape, f64)] {
        &self.shapes
    }

    /// Number of shapes kept.
    #[must_use]
    pub fn len(&self) -> usize {
        self.shapes.len()
    }

    /// Whether no shape is kept.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.shapes.is_empty()
    }

    /// For a learned workload: (pods of the kept shapes, all pods).
    /// `(0, 0)` for [`TargetWorkload::from_weights`].
    #[must_use]
    pub fn coverage_pods(&self) -> (u64, u64) {
        (self.covered_pods, self.total_pods)
    }

    /// Number of distinct shapes seen before the cut (for
    /// [`TargetWorkload::from_weights`], the number given).
    #[must_use]
    pub fn distinct_shapes(&self) -> usize {
        self.distinct_shapes
    }
}

/// What a node has free: CPU, memory and its GPU devices.
#[derive(Debug, Clone, Copy)]
pub struct NodeFree<'a> {
    /// Free CPU in millicores (allocatable − requested; may be negative on
    /// an over-committed node, which then fits no task that asks for CPU).
    pub cpu_milli: i64,
    /// Free memory in bytes (allocatable − requested); only tasks with a
    /// [`TaskShape::memory`] look at it ([`NodeFree::ANY_MEMORY`] when
    /// unknown).
    pub memory: i64,
    /// The node's devices and their free milli-GPU.
    pub gpus: &'a NodeGpus,
}

impl NodeFree<'_> {
    /// Free memory of a node whose memory is not known or not counted.
    pub const ANY_MEMORY: i64 = i64::MAX;
}

/// Whether a task asking for `need` bytes (0: memory not counted) fits in
/// `free` bytes.
#[inline]
fn memory_ok(need: i64, free: i64) -> bool {
    need == 0 || need <= free
}

/// Whether `task` fits `node` on CPU and GPU: `cpu_milli ≤` the node's free
/// CPU, its [`TaskShape::memory`] (when set) `≤` the node's free memory and,
/// for a GPU task, [`fits`] (model, one device for a share, `count` idle
/// devices for whole GPUs). Every other Kubernetes filter is the caller's.
#[must_use]
pub fn task_fits(node: &NodeFree, task: &TaskShape) -> bool {
    task.cpu_milli <= node.cpu_milli
        && memory_ok(task.memory, node.memory)
        && task.gpu_request().is_none_or(|r| fits(node.gpus, r))
}

/// How a node stands against one task shape: the simulator's buckets
/// (`GetNodePodFrag`). Only [`FragClass::Satisfied`] leaves part of the free
/// GPU usable; every other class makes all of it a fragment.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum FragClass {
    /// GPU task; neither enough CPU nor enough devices (`q1_lack_both`).
    LackBoth,
    /// GPU task; enough CPU, not enough devices (`q2_lack_gpu`).
    LackGpu,
    /// GPU task that fits (`q3_satisfied`): the devices with less free than
    /// its per-GPU share are the fragment.
    Satisfied,
    /// GPU task; enough devices, not enough CPU (`q4_lack_cpu`).
    LackCpu,
    /// CPU-only task that fits on CPU (`xl_satisfied`).
    CpuOnlyFits,
    /// CPU-only task short of CPU (`xr_lack_cpu`).
    CpuOnlyLacksCpu,
    /// GPU task restricted to other models (`no_access`).
    NoAccess,
}

impl FragClass {
    /// Position of the class in the simulator's bucket array (used to sum
    /// in its order).
    fn bucket(self) -> usize {
        match self {
            FragClass::LackBoth => 0,
            FragClass::LackGpu => 1,
            FragClass::Satisfied => 2,
            FragClass::LackCpu => 3,
            FragClass::CpuOnlyFits => 4,
            FragClass::CpuOnlyLacksCpu => 5,
            FragClass::NoAccess => 6,
        }
    }
}

/// The class of `node` for task `m` (see [`FragClass`]).
#[must_use]
pub fn classify(node: &NodeFree, m: &TaskShape) -> FragClass {
    classify_parts(node.cpu_milli, node.memory, node.gpus, &node.gpus.free, m).0
}

/// F_n(m): the free milli-GPU of `node` that task `m` cannot use (§1.1 of
/// the reference, `NodeGpuShareFragAmount` per shape):
///
/// - CPU-only task: all free GPU;
/// - wrong model, CPU short, or fewer than `count` devices with at least
///   `milli` free: all free GPU;
/// - fits: the free milli of the devices with less free than `milli`.
#[must_use]
pub fn task_fragment(node: &NodeFree, m: &TaskShape) -> f64 {
    let free = &node.gpus.free;
    let (class, frag) = classify_parts(node.cpu_milli, node.memory, node.gpus, free, m);
    match class {
        FragClass::Satisfied => frag as f64,
        _ => total_free(free) as f64,
    }
}

/// F_n(M) = Σ_i p_i · F_n(m_i): the expected fragment of `node`, in
/// milli-GPU, over the target workload. O(shapes × devices), no allocation.
///
/// The sum is formed as the simulator forms it (per outcome bucket, then
/// the buckets in order), so equal states give bit-equal values and score
/// ties fall as upstream.
#[must_use]
pub fn node_fragment(node: &NodeFree, target: &TargetWorkload) -> f64 {
    fragment_of(
        node.cpu_milli,
        node.memory,
        node.gpus,
        &node.gpus.free,
        target,
    )
}

/// F_n(M) of a node given as parts (free CPU, free memory, its devices'
/// model and memory from `kind`, free milli per device from `free`, which
/// may be a hypothetical state of `kind`'s devices); the hot path of
/// [`node_fragment`] and of FGD's hypothetical nodes.
pub(crate) fn fragment_of(
    cpu: i64,
    mem: i64,
    kind: &NodeGpus,
    free: &[u32],
    target: &TargetWorkload,
) -> f64 {
    let total = total_free(free) as f64;
    let mut buckets = [0.0f64; 7];
    for (m, p) in &target.shapes {
        let (class, frag) = classify_parts(cpu, mem, kind, free, m);
        match class {
            // The usable part goes to q3, which is not a fragment; only the
            // too-small devices count, in the q2 bucket as upstream.
            FragClass::Satisfied => buckets[FragClass::LackGpu.bucket()] += p * frag as f64,
            other => buckets[other.bucket()] += p * total,
        }
    }
    let mut sum = 0.0;
    for (i, b) in buckets.iter().enumerate() {
        if i != FragClass::Satisfied.bucket() {
            sum += b;
        }
    }
    sum
}

/// The class of a node (as parts) for `m`, and for a fitting GPU task the
/// free milli of its devices with less than `m`'s per-GPU share (0
/// otherwise).
fn classify_parts(
    cpu: i64,
    mem: i64,
    kind: &NodeGpus,
    free: &[u32],
    m: &TaskShape,
) -> (FragClass, u64) {
    // A shape's memory, when it has one, is a resource like its CPU: short
    // of it, the shape is "lacking CPU" (the simulator has no memory class).
    let cpu_ok = m.cpu_milli <= cpu && memory_ok(m.memory, mem);
    let Some(req) = m.gpu_request() else {
        let class = if cpu_ok {
            FragClass::CpuOnlyFits
        } else {
            FragClass::CpuOnlyLacksCpu
        };
        return (class, 0);
    };
    if !req.allows_model(&kind.model) {
        return (FragClass::NoAccess, 0);
    }
    // A share the node cannot size (memory): no device can take it.
    let Some(milli) = req.milli_on(kind) else {
        return (FragClass::NoAccess, 0);
    };
    let mut enough = 0u32;
    let mut too_small = 0u64;
    for &f in free {
        if f >= milli {
            enough += 1;
        } else {
            too_small += u64::from(f);
        }
    }
    match (enough >= req.count, cpu_ok) {
        (true, true) => (FragClass::Satisfied, too_small),
        (true, false) => (FragClass::LackCpu, 0),
        (false, true) => (FragClass::LackGpu, 0),
        (false, false) => (FragClass::LackBoth, 0),
    }
}

fn total_free(free: &[u32]) -> u64 {
    free.iter().map(|&f| u64::from(f)).sum()
}

#[cfg(test)]
mod tests {
    use std::path::{Path, PathBuf};
    use std::sync::Arc;

    use super::*;
    use crate::gpu::fixtures::{approx, example_target, gpus, share, whole};

    #[test]
    fn task_fragment_follows_the_three_cases() {
        let g = gpus(&[1000, 300, 1000, 0]);
        let n = NodeFree {
            cpu_milli: 16000,
            memory: NodeFree::ANY_MEMORY,
            gpus: &g,
        };
        // CPU-only: all 2300 free milli are a fragment.
        assert_eq!(task_fragment(&n, &TaskShape::cpu_only(1000)), 2300.0);
        assert_eq!(
            classify(&n, &TaskShape::cpu_only(1000)),
            FragClass::CpuOnlyFits
        );
        assert_eq!(
            classify(&n, &TaskShape::cpu_only(17000)),
            FragClass::CpuOnlyLacksCpu
        );
        // A 500 share fits (devices 0 and 2): the 300 and the 0 are too small.
        assert_eq!(task_fragment(&n, &share(4000, 500)), 300.0);
        // Two whole GPUs fit (devices 0, 2): fragment 300 again.
        assert_eq!(task_fragment(&n, &whole(1000, 2)), 300.0);
        // Three whole GPUs do not: everything.
        assert_eq!(task_fragment(&n, &whole(1000, 3)), 2300.0);
        assert_eq!(classify(&n, &whole(1000, 3)), FragClass::LackGpu);
        // CPU short: everything, whether the GPUs fit or not.
        assert_eq!(task_fragment(&n, &share(16001, 500)), 2300.0);
        assert_eq!(classify(&n, &share(16001, 500)), FragClass::LackCpu);
        assert_eq!(classify(&n, &whole(16001, 3)), FragClass::LackBoth);
        // Wrong model: everything.
        let mut t4 = GpuRequest::share(100);
        t4.models = Some(Arc::from(vec![Arc::from("T4")]));
        let t4 = TaskShape::with_gpu(1000, t4);
        assert_eq!(classify(&n, &t4), FragClass::NoAccess);
        assert_eq!(task_fragment(&n, &t4), 2300.0);
    }

    #[test]
    fn memory_counts_only_for_shapes_that_carry_it() {
        let g = gpus(&[1000, 300]);
        let gib = 1i64 << 30;
        let n = NodeFree {
            cpu_milli: 16000,
            memory: 8 * gib,
            gpus: &g,
        };
        // No memory in the shape (the paper's measure): memory is ignored.
        assert_eq!(classify(&n, &share(4000, 500)), FragClass::Satisfied);
        assert_eq!(task_fragment(&n, &share(4000, 500)), 300.0);
        assert!(task_fits(&n, &share(4000, 500)));
        // 8 GiB fits, 16 GiB does not: the shape lacks "CPU" and all free
        // GPU is a fragment, as when CPU is short.
        let fits8 = share(4000, 500).with_memory(8 * gib);
        let short = share(4000, 500).with_memory(16 * gib);
        assert_eq!(classify(&n, &fits8), FragClass::Satisfied);
        assert_eq!(classify(&n, &short), FragClass::LackCpu);
        assert_eq!(task_fragment(&n, &short), 1300.0);
        assert!(task_fits(&n, &fits8));
        assert!(!task_fits(&n, &short));
        let cpu_only = TaskShape::cpu_only(1000).with_memory(16 * gib);
        assert_eq!(classify(&n, &cpu_only), FragClass::CpuOnlyLacksCpu);
        assert_eq!(
            classify(&n, &whole(20000, 2).with_memory(16 * gib)),
            FragClass::LackBoth
        );
        // A node whose memory is not known fits any memory.
        let any = NodeFree {
            memory: NodeFree::ANY_MEMORY,
            ..n
        };
        assert_eq!(classify(&any, &short), FragClass::Satisfied);
        // The memory is part of the shape's identity.
        assert_ne!(short, share(4000, 500));
    }

    /// §1.7: node n1 (16000 m, [1000, 300, 1000, 0]):
    /// A fits, too small 300 + 0 → 0.5·300 = 150;
    /// B fits (devices 0, 2), too small 300 → 0.3·300 = 90;
    /// C CPU-only → 0.2·2300 = 460. F = 700.
    /// Node n2 (16000 m, [500, 1000]): A fits, nothing too small → 0;
    /// B fits, 500 too small → 150; C → 0.2·1500 = 300. F = 450.
    #[test]
    fn worked_example_node_fragments() {
        let t = example_target();
        let g1 = gpus(&[1000, 300, 1000, 0]);
        let n1 = NodeFree {
            cpu_milli: 16000,
            memory: NodeFree::ANY_MEMORY,
            gpus: &g1,
        };
        assert!(approx(node_fragment(&n1, &t), 700.0));
        let g2 = gpus(&[500, 1000]);
        let n2 = NodeFree {
            cpu_milli: 16000,
            memory: NodeFree::ANY_MEMORY,
            gpus: &g2,
        };
        assert!(approx(node_fragment(&n2, &t), 450.0));
        // n1 after X (4000 m + 500) on device 0: 12000 m, [500, 300, 1000, 0]:
        // A: 300 → 150; B: 800 → 240; C: 0.2·1800 = 360. F' = 750.
        let g1x = gpus(&[500, 300, 1000, 0]);
        let n1x = NodeFree {
            cpu_milli: 12000,
            memory: NodeFree::ANY_MEMORY,
            gpus: &g1x,
        };
        assert!(approx(node_fragment(&n1x, &t), 750.0));
    }

    #[test]
    fn an_empty_target_has_no_fragment_and_cpu_shortage_frags_everything() {
        let g = gpus(&[1000, 1000]);
        let n = NodeFree {
            cpu_milli: 0,
            memory: NodeFree::ANY_MEMORY,
            gpus: &g,
        };
        assert_eq!(node_fragment(&n, &TargetWorkload::default()), 0.0);
        // No CPU left: every shape (all need CPU) sees all 2000 milli.
        assert!(approx(node_fragment(&n, &example_target()), 2000.0));
    }

    #[test]
    fn learn_sorts_cuts_and_renormalises() {
        // 10 pods: a ×4, b ×3, c ×2, d ×1.
        let a = share(1000, 500);
        let b = whole(2000, 1);
        let c = TaskShape::cpu_only(500);
        let d = whole(3000, 2);
        let pods = [
            vec![a.clone(); 4],
            vec![b.clone(); 3],
            vec![c.clone(); 2],
            vec![d.clone(); 1],
        ]
        .concat();
        // 0.7 → a + b cover 7 of 10: stop there. p = 4/7, 3/7.
        let t = TargetWorkload::learn(pods.clone(), 0.7);
        assert_eq!(t.len(), 2);
        assert_eq!(t.shapes()[0].0, a);
        assert_eq!(t.shapes()[1].0, b);
        assert!(approx(t.shapes()[0].1, 4.0 / 7.0));
        assert!(approx(t.shapes()[1].1, 3.0 / 7.0));
        assert_eq!(t.coverage_pods(), (7, 10));
        assert_eq!(t.distinct_shapes(), 4);
        // 0.71 needs c as well (9 of 10).
        let t = TargetWorkload::learn(pods.clone(), 0.71);
        assert_eq!(t.len(), 3);
        assert_eq!(t.shapes()[2].0, c);
        // ≥ 1 keeps everything; the weights sum to 1.
        let t = TargetWorkload::learn(pods.clone(), 1.0);
        assert_eq!(t.len(), 4);
        let sum: f64 = t.shapes().iter().map(|(_, p)| p).sum();
        assert!(approx(sum, 1.0));
        // Coverage 0 still keeps the most popular shape.
        let t = TargetWorkload::learn(pods, 0.0);
        assert_eq!(t.len(), 1);
        assert!(approx(t.shapes()[0].1, 1.0));
        assert!(TargetWorkload::learn(Vec::new(), 0.95).is_empty());
    }

    #[test]
    fn learn_breaks_count_ties_by_the_larger_shape_first() {
        // Equal counts: larger CPU first, then larger milli, then larger
        // count, then the model string; CPU-only ranks as milli 0.
        let pods = vec![
            TaskShape::cpu_only(8000),
            share(8000, 300),
            share(4000, 900),
            whole(8000, 2),
            whole(8000, 1),
        ];
        let t = TargetWorkload::learn(pods, 1.0);
        let order: Vec<TaskShape> = t.shapes().iter().map(|(s, _)| s.clone()).collect();
        assert_eq!(
            order,
            vec![
                whole(8000, 2),
                whole(8000, 1),
                share(8000, 300),
                TaskShape::cpu_only(8000),
                share(4000, 900),
            ]
        );
    }

    /// The trace folder `<ancestor>/shared/data/alibaba-gpu-v2023-openb`.
    fn openb_dir() -> Option<PathBuf> {
        Path::new(env!("CARGO_MANIFEST_DIR"))
            .ancestors()
            .map(|a| a.join("shared/data/alibaba-gpu-v2023-openb"))
            .find(|p| p.is_dir())
    }

    /// The task shapes of an openb pod CSV (name, cpu_milli, memory_mib,
    /// num_gpu, gpu_milli, gpu_spec, …), models as written.
    fn openb_shapes(path: &Path) -> Vec<TaskShape> {
        let text = std::fs::read_to_string(path).unwrap();
        let mut lines = text.lines();
        let header: Vec<&str> = lines.next().unwrap().split(',').collect();
        let col = |name: &str| header.iter().position(|h| *h == name).unwrap();
        let (cpu, num, milli, spec) = (
            col("cpu_milli"),
            col("num_gpu"),
            col("gpu_milli"),
            col("gpu_spec"),
        );
        lines
            .filter(|l| !l.is_empty())
            .map(|l| {
                let f: Vec<&str> = l.split(',').collect();
                let cpu_milli: i64 = f[cpu].parse().unwrap();
                let count: u32 = f[num].parse().unwrap();
                if count == 0 {
                    return TaskShape::cpu_only(cpu_milli);
                }
                let models = (!f[spec].is_empty())
                    .then(|| f[spec].split('|').map(Arc::from).collect::<Vec<_>>().into());
                TaskShape::with_gpu(
                    cpu_milli,
                    GpuRequest {
                        count,
                        milli: f[milli].parse().unwrap(),
                        memory_mib: None,
                        models,
                    },
                )
            })
            .collect()
    }

    /// The reference (§1.5): on `default`, 91 distinct shapes; the top 35
    /// cover 7,766 of 8,152 pods (95.26 %); the most popular is
    /// 3152 m + 1 × 810 at 12.84 % of all pods.
    #[test]
    fn learn_on_the_default_trace_keeps_35_shapes() {
        let Some(dir) = openb_dir() else {
            eprintln!(
                "note: openb trace not found (shared/data/alibaba-gpu-v2023-openb); skipping"
            );
            return;
        };
        let path = dir.join("openb_pod_list_default.csv");
        if !path.is_file() {
            eprintln!("note: {} not found; skipping", path.display());
            return;
        }
        let t = TargetWorkload::learn(openb_shapes(&path), DEFAULT_COVERAGE);
        assert_eq!(t.distinct_shapes(), 91);
        assert_eq!(t.len(), 35);
        assert_eq!(t.coverage_pods(), (7766, 8152));
        let (top, p) = &t.shapes()[0];
        assert_eq!(*top, share(3152, 810));
        // 12.84 % of all pods, renormalised by 7766/8152.
        let of_all = p * 7766.0 / 8152.0;
        assert!((of_all - 0.1284).abs() < 5e-5, "{of_all}");
        let sum: f64 = t.shapes().iter().map(|(_, p)| p).sum();
        assert!(approx(sum, 1.0));
    }
}
