//! `flotilla bench --scenario fgd`: the experiment protocol of the FGD paper
//! (Weng et al., *Beware of Fragmentation: Scheduling GPU-Sharing Workloads
//! with Fragmentation Gradient Descent*, USENIX ATC '23), independent of how
//! a pod is placed.
//!
//! The engine replays the authors' protocol (`shared/reference/gpu-share-fgd.md`
//! §2.1–2.4 and §5 P1–P6; behaviour read in their simulator,
//! `hkust-adsl/kubernetes-scheduler-simulator`):
//!
//! 1. [`stream`]: for one seed, the trace's pods sorted by name, shuffled,
//!    then *tuned* to `tune` × the cluster's GPU capacity (resamples appended,
//!    or random pods removed).
//! 2. [`run_seed`] / [`run`]: each pod of the stream handed once, in order, to
//!    a [`Placer`] (no retry, no deletion); after each pod the arrived and the
//!    used milli-GPU are logged ([`AllocEvent`]) and the time `place` took.
//! 3. [`bucket_alloc`]: the events folded into allocation % per arrived-%
//!    bucket 0..=130, as the authors' `merge_alloc_discrete.py` does.
//! 4. [`write_alloc_csv`] / [`read_alloc_csv`]: the authors' CSV layout
//!    (`workload,sc_policy,tune,seed,total_gpus,0,…,130`).
//! 5. [`render_alloc_svg`]: their Fig. 9(a): unallocated GPU % against arrived
//!    %, median over seeds and the interquartile band per policy.
//! 6. [`summarize`]: the report table (unallocated % at 100 and 130 % over
//!    seeds, decision latency p50/p99).
//!
//! Units: GPU amounts are **milli-GPU** (1000 = one whole GPU) unless named
//! `_gpus`; percentages are `0..=100` (arrived goes to ~130).
//!
//! What cannot be mirrored: the authors seed Go's `math/rand` (and draw one
//! `rand.Int()` for a log line before shuffling). Flotilla uses rand's
//! [`Xoshiro256PlusPlus`] seeded with [`SeedableRng::seed_from_u64`], rand's
//! `shuffle` and `random_range`, so a seed gives the same stream on every
//! platform and for a given `rand` 0.10.x, but not the authors' stream for
//! that seed. Compare distributions over seeds (median, interquartile range),
//! not per-seed values.
//!
//! Checked by hand against the authors' shipped
//! `experiments/analysis/expected_results/analysis_allo_discrete.csv` (not in
//! the repository): [`read_alloc_csv`] then [`summarize`] give their
//! headline numbers (`default` at 100 %: Random 13.70, DotProd 9.38,
//! Clustering 8.35, Packing 8.22, BestFit 7.14, FGD 4.77), and
//! [`write_alloc_csv`] writes their rows back byte for byte.
//!
//! Cite the paper in any report built on this, as the trace's README asks.

use std::collections::BTreeMap;
use std::io;
use std::ops::RangeInclusive;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use plotters::prelude::*;
use rand::rngs::Xoshiro256PlusPlus;
use rand::seq::SliceRandom as _;
use rand::{RngExt as _, SeedableRng};

use super::chart::{ChartError, err};
use super::measure;
use std::sync::Arc;

use flotilla_scheduler::Registry;
use flotilla_scheduler::plugins::gpu_share;
use flotilla_scheduler::plugins::names::GPU_SHARE;
use flotilla_scheduler::simulate::Replay;
use flotilla_shared::gpu::frag::{DEFAULT_COVERAGE, TargetWorkload};
use flotilla_shared::gpu::policy::Policy;
use flotilla_shared::gpu::{GpuRequest, dialect};
use flotilla_shared::{NodeSpec, PodInfo};

use crate::workload::pod_from_template;

/// The authors' workload inflation: requests up to 130 % of GPU capacity.
pub const DEFAULT_TUNE: f64 = 1.3;
/// The authors' seeds (`42..=51`, 10 runs per trace and policy).
pub const DEFAULT_SEEDS: RangeInclusive<u64> = 42..=51;
/// The last arrived-% bucket of the authors' CSV.
pub const MAX_ARRIVED_PCT: usize = 130;
/// Number of arrived-% buckets (`0..=130`).
pub const BUCKETS: usize = MAX_ARRIVED_PCT + 1;
/// Milli-GPU in one whole GPU.
pub const MILLI_PER_GPU: u64 = 1000;
/// The paper's policy names, as its CSV's `sc_policy` column spells them.
pub const PAPER_POLICIES: [&str; 6] = [
    "01-Random",
    "02-DotProd",
    "03-GpuClustering",
    "04-GpuPacking",
    "05-BestFit",
    "06-FGD",
];
/// Suffix of a resampled pod's name: `<name>-tuned-<i>`, `i` counting from 0
/// over the resamples of one stream (the authors' spelling).
pub const TUNED_SUFFIX: &str = "-tuned-";

/// Places pods one at a time, for the engine. Implemented by the scheduler
/// (the real plugins); the engine never looks inside.
pub trait Placer {
    /// Places `pod` (binds it in the placer's own model of the cluster).
    /// `true`: bound; `false`: unschedulable. A failed pod is dropped: the
    /// engine never retries it and never deletes a bound one.
    fn place(&mut self, pod: &Pod) -> bool;

    /// Milli-GPU allocated over the whole cluster now: Σ over nodes of
    /// (1000 × GPUs − free milli-GPU), as the authors' `ClusterGpuFragReport`
    /// logs it. Asked after each pod.
    fn used_gpu_milli(&self) -> u64;
}

/// Why the protocol could not run or a CSV could not be read.
#[derive(Debug, thiserror::Error)]
pub enum FgdError {
    /// A pod's GPU request cannot be read.
    #[error("pod {pod}: {message}")]
    BadPod {
        /// The pod's name.
        pod: String,
        /// The field and the problem.
        message: String,
    },
    /// A node cannot be read (names the node and the field).
    #[error("{0}")]
    BadNode(String),
    /// The bench's scheduler profile did not load (a bug).
    #[error("the FGD bench profile: {0}")]
    Profile(String),
    /// The nodes have no GPU: capacity 0, nothing to measure against.
    #[error("the nodes have no GPU")]
    NoGpus,
    /// Tuning up needs pods that request GPU (the authors panic here too:
    /// resampling CPU-only pods would never reach the target).
    #[error("the pods request no GPU: the stream cannot be tuned up to {0} x capacity")]
    NoGpuDemand(f64),
    /// `tune` is NaN or infinite.
    #[error("tune must be a finite number, got {0}")]
    BadTune(f64),
    /// The CSV could not be read or written.
    #[error("allocation CSV: {0}")]
    Csv(#[from] csv::Error),
    /// The CSV does not have the authors' layout.
    #[error("allocation CSV, line {line}: {message}")]
    CsvLayout {
        /// 1-based line (the header is line 1).
        line: u64,
        /// What is wrong.
        message: String,
    },
}

// ---------------------------------------------------------------------------
// Requests and capacity
// ---------------------------------------------------------------------------

/// Milli-GPU `request` asks for in all, `count × milli` (0 for a pod
/// without GPUs): what the pod adds to the arrived demand (the authors'
/// `TotalMilliGpu`).
fn total_milli(request: Option<&GpuRequest>) -> u64 {
    request.map_or(0, GpuRequest::total_milli)
}

/// The GPU request of `pod`, read as the scheduler reads it
/// ([`flotilla_shared::gpu::dialect::pod_request`]: the trace's
/// annotations, or HAMi / Volcano resources, or bare `nvidia.com/gpu`);
/// `None` for a CPU-only pod.
///
/// # Errors
/// [`FgdError::BadPod`] naming the field, as the scheduler would refuse it.
pub fn gpu_request(pod: &Pod) -> Result<Option<GpuRequest>, FgdError> {
    let bad = |message: String| FgdError::BadPod {
        pod: pod_name(pod).to_owned(),
        message,
    };
    let requests = match pod.spec.as_ref() {
        Some(spec) => {
            flotilla_shared::resources::pod_requests(spec)
                .map_err(|e| bad(e.to_string()))?
                .requests
        }
        None => flotilla_shared::resources::Resources::default(),
    };
    dialect::pod_request(pod.metadata.annotations.as_ref(), &requests).map_err(bad)
}

/// GPU devices over `nodes`, as the scheduler counts them
/// ([`flotilla_shared::gpu::dialect::node_gpus`]): the authors'
/// `total_gpus` (6,212 for the 1,213 GPU nodes of openb).
///
/// # Errors
/// [`FgdError::BadNode`] naming the node and field.
pub fn total_gpus(nodes: &[Node]) -> Result<u64, FgdError> {
    let mut total = 0u64;
    for node in nodes {
        let spec = NodeSpec::from_node(std::sync::Arc::new(node.clone()))
            .map_err(|e| FgdError::BadNode(e.to_string()))?;
        total += spec.gpus.map_or(0, |g| g.count as u64);
    }
    Ok(total)
}

fn pod_name(pod: &Pod) -> &str {
    pod.metadata.name.as_deref().unwrap_or("")
}

// ---------------------------------------------------------------------------
// The stream
// ---------------------------------------------------------------------------

/// The pod stream of one seed (§2.2, P2), as the authors' `SortClusterPods`
/// then `TunePodsByNodeTotalResource` build it:
///
/// 1. all `pods` (whatever their phase) sorted by `metadata.name`, then
///    shuffled with `seed`;
/// 2. tuned against `target = tune × total_gpus × 1000` milli-GPU, with the
///    same generator, continuing after the shuffle:
///    - Σ k·d below the target: draw uniformly, with replacement, from the
///      name-sorted trace; a draw is appended **at the end**, renamed
///      `<name>-tuned-<i>` (`i` = 0, 1, …; [`pod_from_template`]: a fresh
///      uid when the pod has one), while `Σ + d ≤ target`; the first draw
///      that fails the test stops the loop and is dropped.
///      **Quirk, mirrored:** the stop test adds the draw's *per-GPU* share
///      `d`, not its `k·d` that is then added to Σ; so a multi-GPU draw can
///      take the stream past the target (by up to `(k−1)·1000`).
///      CPU-only draws (`d` = 0) always pass and are appended too;
///    - Σ above the target: remove pods at uniformly random positions (the
///      others keep their order) until `Σ ≤ target`;
///    - equal, or `tune ≤ 0` (the authors' "no tuning"): unchanged.
///
/// Returns clones of the pods; resamples carry the template's namespace,
/// labels and annotations under their new name.
///
/// # Errors
/// [`FgdError::BadTune`] for a NaN or infinite `tune`; [`FgdError::NoGpus`]
/// when `total_gpus` is 0 and `tune > 0`; [`FgdError::NoGpuDemand`] when no
/// pod requests GPU and the stream must be tuned up; [`FgdError::BadAnnotation`].
pub fn stream(pods: &[Pod], total_gpus: u64, seed: u64, tune: f64) -> Result<Vec<Pod>, FgdError> {
    if !tune.is_finite() {
        return Err(FgdError::BadTune(tune));
    }
    let mut sorted = pods
        .iter()
        .map(|p| Ok((p, gpu_request(p)?)))
        .collect::<Result<Vec<_>, FgdError>>()?;
    sorted.sort_by(|a, b| pod_name(a.0).cmp(pod_name(b.0)));

    let mut rng = Xoshiro256PlusPlus::seed_from_u64(seed);
    let mut order = sorted.clone();
    order.shuffle(&mut rng);
    let mut out: Vec<Pod> = Vec::new();
    if tune <= 0.0 {
        out.extend(order.iter().map(|(p, _)| (*p).clone()));
        return Ok(out);
    }
    if total_gpus == 0 {
        return Err(FgdError::NoGpus);
    }

    #[allow(clippy::cast_precision_loss)] // capacities far below 2^52 milli-GPU
    let target = tune * (total_gpus.saturating_mul(MILLI_PER_GPU)) as f64;
    let mut total: u64 = order.iter().map(|(_, r)| total_milli(r.as_ref())).sum();
    #[allow(clippy::cast_precision_loss)]
    let above = |total: u64| total as f64 > target;

    if above(total) {
        while above(total) {
            // Σ > target > 0, so some pod with GPU is left.
            let idx = rng.random_range(0..order.len());
            let (_, removed) = order.remove(idx);
            total -= total_milli(removed.as_ref());
        }
        out.extend(order.iter().map(|(p, _)| (*p).clone()));
        return Ok(out);
    }

    out.extend(order.iter().map(|(p, _)| (*p).clone()));
    #[allow(clippy::float_cmp, clippy::cast_precision_loss)] // the authors' exact test
    if total as f64 == target {
        return Ok(out);
    }
    if sorted.iter().all(|(_, r)| total_milli(r.as_ref()) == 0) {
        return Err(FgdError::NoGpuDemand(tune));
    }
    let mut i = 0u64;
    loop {
        let (template, request) = &sorted[rng.random_range(0..sorted.len())];
        let per_gpu = request.as_ref().map_or(0, |r| u64::from(r.milli));
        if above(total.saturating_add(per_gpu)) {
            break;
        }
        total = total.saturating_add(total_milli(request.as_ref()));
        let name = format!("{}{TUNED_SUFFIX}{i}", pod_name(template));
        out.push(pod_from_template(template, name));
        i += 1;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// Running
// ---------------------------------------------------------------------------

/// The cluster's GPU state after one pod of the stream (the authors' `[Alloc]`
/// log line).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct AllocEvent {
    /// Σ k·d over every pod arrived so far, this one included, bound or
    /// failed; milli-GPU.
    pub arrived_milli: u64,
    /// [`Placer::used_gpu_milli`] after this pod; milli-GPU.
    pub used_milli: u64,
}

/// One seed's run of one policy.
#[derive(Debug, Clone, PartialEq)]
pub struct SeedCurve {
    /// The seed of the stream.
    pub seed: u64,
    /// The tune ratio of the stream (1.3 = 130 %).
    pub tune: f64,
    /// Whole GPUs in the cluster (capacity = 1000 × this).
    pub total_gpus: u64,
    /// Allocation % (used / capacity × 100, as the authors round it) for
    /// arrived-% bucket `b` at index `b`, `b` = 0..=130 ([`BUCKETS`] long);
    /// `None` where the authors' CSV has an empty cell ([`bucket_alloc`]).
    pub alloc_pct: Vec<Option<f64>>,
    /// One event per pod of the stream, in order; empty for a curve read
    /// back from a CSV.
    pub events: Vec<AllocEvent>,
    /// Time each `place` call took, one per pod, in order; empty for a curve
    /// read back from a CSV.
    pub latencies: Vec<Duration>,
    /// Pods bound.
    pub placed: usize,
    /// Pods the placer failed (dropped).
    pub failed: usize,
}

impl SeedCurve {
    /// Unallocated GPU % at arrived bucket `arrived_pct` (`100 −` allocation
    /// %), `None` past 130 or for an empty bucket.
    #[must_use]
    pub fn unallocated_pct(&self, arrived_pct: usize) -> Option<f64> {
        self.alloc_pct
            .get(arrived_pct)
            .copied()
            .flatten()
            .map(|a| 100.0 - a)
    }
}

/// Replays one `stream` (from [`stream`]) through `placer`, one pod at a
/// time, each once: the events, the per-pod latency of `place` and the
/// bucketed curve. `seed` and `tune` are only recorded.
///
/// # Errors
/// [`FgdError::BadAnnotation`] (checked for every pod before the first is
/// placed).
pub fn run_seed(
    stream: &[Pod],
    total_gpus: u64,
    seed: u64,
    tune: f64,
    placer: &mut dyn Placer,
) -> Result<SeedCurve, FgdError> {
    let requests = stream
        .iter()
        .map(gpu_request)
        .collect::<Result<Vec<_>, _>>()?;
    let mut events = Vec::with_capacity(stream.len());
    let mut latencies = Vec::with_capacity(stream.len());
    let (mut arrived, mut placed, mut failed) = (0u64, 0usize, 0usize);
    for (pod, request) in stream.iter().zip(requests) {
        arrived = arrived.saturating_add(total_milli(request.as_ref()));
        let start = Instant::now();
        let bound = placer.place(pod);
        latencies.push(start.elapsed());
        if bound {
            placed += 1;
        } else {
            failed += 1;
        }
        events.push(AllocEvent {
            arrived_milli: arrived,
            used_milli: placer.used_gpu_milli(),
        });
    }
    Ok(SeedCurve {
        seed,
        tune,
        total_gpus,
        alloc_pct: bucket_alloc(&events, total_gpus),
        events,
        latencies,
        placed,
        failed,
    })
}

/// The protocol over `seeds`: for each, [`stream`] of `pods` against the GPU
/// capacity of `nodes`, a fresh placer from `make_placer(seed)` (it must
/// start from the empty cluster of `nodes`), then [`run_seed`]. Curves in
/// `seeds` order.
///
/// # Errors
/// Those of [`total_gpus`], [`stream`] and [`run_seed`]; [`FgdError::NoGpus`]
/// when the nodes have no GPU.
pub fn run(
    nodes: &[Node],
    pods: &[Pod],
    seeds: &[u64],
    tune: f64,
    mut make_placer: impl FnMut(u64) -> Box<dyn Placer>,
) -> Result<Vec<SeedCurve>, FgdError> {
    let gpus = total_gpus(nodes)?;
    if gpus == 0 {
        return Err(FgdError::NoGpus);
    }
    seeds
        .iter()
        .map(|&seed| {
            let pods = stream(pods, gpus, seed, tune)?;
            let mut placer = make_placer(seed);
            run_seed(&pods, gpus, seed, tune, placer.as_mut())
        })
        .collect()
}

// ---------------------------------------------------------------------------
// Bucketing (merge_alloc_discrete.py)
// ---------------------------------------------------------------------------

/// Python's `round(x, 2)` as the authors' pandas code applies it (NumPy's:
/// scale by 100, round half to even, scale back).
fn round2(x: f64) -> f64 {
    (x * 100.0).round_ties_even() / 100.0
}

/// Allocation % per arrived-% bucket, `BUCKETS` long, as the authors'
/// `experiments/analysis/merge_alloc_discrete.py` computes it from the
/// events of one run:
///
/// - each event's bucket = `round(arrived / total_gpus / 10)` (half to even,
///   as Python), its allocation = `round(used / total_gpus / 10, 2)`;
/// - bucket `b` (0..=130) = `round(mean, 2)` of the allocations of its
///   events; when it has none, of the events in buckets `b−1..=b+1`; `None`
///   when those are empty too (the authors leave the cell empty).
///
/// Events past 130.5 % only feed bucket 130 through the fallback. All `None`
/// when `total_gpus` is 0.
#[must_use]
pub fn bucket_alloc(events: &[AllocEvent], total_gpus: u64) -> Vec<Option<f64>> {
    if total_gpus == 0 {
        return vec![None; BUCKETS];
    }
    #[allow(clippy::cast_precision_loss)]
    let gpus = total_gpus as f64;
    // bucket → (Σ allocation, events)
    let mut sums: BTreeMap<i64, (f64, u32)> = BTreeMap::new();
    for e in events {
        #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
        let bucket = (e.arrived_milli as f64 / gpus / 10.0).round_ties_even() as i64;
        #[allow(clippy::cast_precision_loss)]
        let alloc = round2(e.used_milli as f64 / gpus / 10.0);
        let s = sums.entry(bucket).or_insert((0.0, 0));
        s.0 += alloc;
        s.1 += 1;
    }
    (0..BUCKETS)
        .map(|b| {
            #[allow(clippy::cast_possible_wrap)]
            let b = b as i64;
            let (sum, n) = match sums.get(&b) {
                Some(&s) => s,
                None => sums
                    .range(b - 1..=b + 1)
                    .fold((0.0, 0), |acc, (_, s)| (acc.0 + s.0, acc.1 + s.1)),
            };
            (n > 0).then(|| round2(sum / f64::from(n)))
        })
        .collect()
}

// ---------------------------------------------------------------------------
// CSV (analysis_allo_discrete.csv)
// ---------------------------------------------------------------------------

/// The header of the authors' `analysis_allo_discrete.csv`:
/// `workload,sc_policy,tune,seed,total_gpus,0,1,…,130`.
#[must_use]
pub fn alloc_csv_header() -> Vec<String> {
    ["workload", "sc_policy", "tune", "seed", "total_gpus"]
        .into_iter()
        .map(str::to_owned)
        .chain((0..BUCKETS).map(|b| b.to_string()))
        .collect()
}

/// A float as Python's `str(float)` writes it for the values of this CSV
/// (shortest round trip, always a fraction: `2.0`, `0.25`, `1.3`).
/// Exponent forms (|x| < 1e-4 or ≥ 1e16) differ from Python's and never
/// occur here.
fn py_float(x: f64) -> String {
    format!("{x:?}")
}

/// Writes the authors' allocation CSV: [`alloc_csv_header`], then one row
/// per policy and seed, in the order given: `workload` (the authors use the
/// pod file's stem, e.g. `openb_pod_list_default`), the policy name (e.g.
/// `06-FGD`), tune (`1.3`), seed, total GPUs, then [`SeedCurve::alloc_pct`]
/// (allocation %, so unallocated = 100 − value), numbers formatted as the
/// authors' pandas output (`91.3`, `2.0`), empty cells for `None`.
///
/// # Errors
/// [`FgdError::Csv`] if writing fails.
pub fn write_alloc_csv<W: io::Write, S: AsRef<str>>(
    out: W,
    workload: &str,
    runs: &[(S, Vec<SeedCurve>)],
) -> Result<(), FgdError> {
    let mut w = csv::WriterBuilder::new().from_writer(out);
    w.write_record(alloc_csv_header())?;
    for (policy, curves) in runs {
        for c in curves {
            let mut record = vec![
                workload.to_owned(),
                policy.as_ref().to_owned(),
                py_float(c.tune),
                c.seed.to_string(),
                c.total_gpus.to_string(),
            ];
            record.extend((0..BUCKETS).map(|b| {
                c.alloc_pct
                    .get(b)
                    .copied()
                    .flatten()
                    .map_or_else(String::new, py_float)
            }));
            w.write_record(&record)?;
        }
    }
    w.flush().map_err(csv::Error::from)?;
    Ok(())
}

/// One row of an allocation CSV read back.
#[derive(Debug, Clone, PartialEq)]
pub struct AllocRow {
    /// The `workload` column.
    pub workload: String,
    /// The `sc_policy` column.
    pub policy: String,
    /// The rest; `events` and `latencies` empty, `placed` and `failed` 0.
    pub curve: SeedCurve,
}

/// Reads a CSV in the layout of [`write_alloc_csv`]: ours, or the authors'
/// shipped `analysis_allo_discrete.csv` (to plot both with the same
/// estimators). Bucket columns may be in any order; a missing one or an
/// empty cell is `None`.
///
/// # Errors
/// [`FgdError::Csv`] for malformed CSV; [`FgdError::CsvLayout`] for a
/// missing meta column or a value that is not a number.
pub fn read_alloc_csv<R: io::Read>(input: R) -> Result<Vec<AllocRow>, FgdError> {
    let mut r = csv::ReaderBuilder::new().from_reader(input);
    let header = r.headers()?.clone();
    let layout = |line: u64, message: String| FgdError::CsvLayout { line, message };
    let column = |name: &str| {
        header
            .iter()
            .position(|h| h == name)
            .ok_or_else(|| layout(1, format!("no column {name:?}")))
    };
    let (c_workload, c_policy, c_tune, c_seed, c_gpus) = (
        column("workload")?,
        column("sc_policy")?,
        column("tune")?,
        column("seed")?,
        column("total_gpus")?,
    );
    let buckets: Vec<(usize, usize)> = header
        .iter()
        .enumerate()
        .filter_map(|(i, h)| Some((i, h.parse::<usize>().ok().filter(|&b| b < BUCKETS)?)))
        .collect();
    let mut rows = Vec::new();
    for record in r.records() {
        let record = record?;
        let line = record.position().map_or(0, csv::Position::line);
        let field = |i: usize| record.get(i).unwrap_or("").trim();
        let number = |i: usize| -> Result<f64, FgdError> {
            field(i).parse::<f64>().map_err(|_| {
                layout(
                    line,
                    format!("column {:?}: not a number {:?}", &header[i], field(i)),
                )
            })
        };
        let whole = |i: usize| -> Result<u64, FgdError> {
            let v = number(i)?;
            if v >= 0.0 && v.fract() == 0.0 {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                Ok(v as u64)
            } else {
                Err(layout(
                    line,
                    format!("column {:?}: not a whole number {v}", &header[i]),
                ))
            }
        };
        let mut alloc_pct = vec![None; BUCKETS];
        for &(i, b) in &buckets {
            if !field(i).is_empty() {
                alloc_pct[b] = Some(number(i)?);
            }
        }
        rows.push(AllocRow {
            workload: field(c_workload).to_owned(),
            policy: field(c_policy).to_owned(),
            curve: SeedCurve {
                seed: whole(c_seed)?,
                tune: number(c_tune)?,
                total_gpus: whole(c_gpus)?,
                alloc_pct,
                events: Vec::new(),
                latencies: Vec::new(),
                placed: 0,
                failed: 0,
            },
        });
    }
    Ok(rows)
}

// ---------------------------------------------------------------------------
// Estimators and summary
// ---------------------------------------------------------------------------

/// The `q`-quantile (0..=1) of ascending `sorted`, linear interpolation
/// between closest ranks (NumPy's default, which seaborn's `("pi", 50)`
/// band and `median` use). `None` when empty.
#[must_use]
pub fn quantile(sorted: &[f64], q: f64) -> Option<f64> {
    let last = sorted.len().checked_sub(1)?;
    #[allow(clippy::cast_precision_loss)]
    let pos = q.clamp(0.0, 1.0) * last as f64;
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let (lo, hi) = (pos.floor() as usize, pos.ceil() as usize);
    #[allow(clippy::cast_precision_loss)]
    let frac = pos - lo as f64;
    Some(sorted[lo] + (sorted[hi] - sorted[lo]) * frac)
}

/// Mean, median, sample standard deviation (n − 1, as pandas and seaborn's
/// `"sd"` error bars), min and max of some values (one per seed).
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Stats {
    /// How many values (seeds).
    pub n: usize,
    /// Arithmetic mean.
    pub mean: f64,
    /// Median (mean of the middle two for an even count).
    pub median: f64,
    /// Sample standard deviation (0 for one value).
    pub sd: f64,
    /// Smallest.
    pub min: f64,
    /// Largest.
    pub max: f64,
}

impl Stats {
    /// The statistics of `values` (any order); `None` when empty.
    #[must_use]
    pub fn of(values: &[f64]) -> Option<Stats> {
        let mut v = values.to_vec();
        v.sort_by(f64::total_cmp);
        let median = quantile(&v, 0.5)?;
        #[allow(clippy::cast_precision_loss)]
        let n = v.len() as f64;
        let mean = v.iter().sum::<f64>() / n;
        let sd = if v.len() > 1 {
            (v.iter().map(|x| (x - mean).powi(2)).sum::<f64>() / (n - 1.0)).sqrt()
        } else {
            0.0
        };
        Some(Stats {
            n: v.len(),
            mean,
            median,
            sd,
            min: v[0],
            max: v[v.len() - 1],
        })
    }
}

/// [`Stats`] over `curves` (one per seed) of unallocated GPU % at arrived
/// bucket `arrived_pct`; seeds with an empty bucket are left out.
#[must_use]
pub fn unallocated_stats(curves: &[SeedCurve], arrived_pct: usize) -> Option<Stats> {
    let values: Vec<f64> = curves
        .iter()
        .filter_map(|c| c.unallocated_pct(arrived_pct))
        .collect();
    Stats::of(&values)
}

/// One policy's line of the report table.
#[derive(Debug, Clone, PartialEq)]
pub struct PolicySummary {
    /// The policy name as passed in.
    pub policy: String,
    /// Unallocated GPU % at arrived = 100 %, over seeds.
    pub unallocated_at_100: Option<Stats>,
    /// Unallocated GPU % at arrived = 130 %, over seeds.
    pub unallocated_at_130: Option<Stats>,
    /// Nearest-rank median of `place` time over every pod of every seed.
    pub latency_p50: Duration,
    /// Nearest-rank 99th percentile of the same.
    pub latency_p99: Duration,
    /// Pods offered over all seeds.
    pub pods: usize,
    /// Pods failed over all seeds.
    pub failed: usize,
}

/// The report line of `policy` from its seeds' curves.
#[must_use]
pub fn summarize(policy: &str, curves: &[SeedCurve]) -> PolicySummary {
    let mut nanos: Vec<f64> = curves
        .iter()
        .flat_map(|c| &c.latencies)
        .map(|d| d.as_secs_f64() * 1e9)
        .collect();
    nanos.sort_by(f64::total_cmp);
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    let at = |p: f64| Duration::from_nanos(measure::percentile(&nanos, p).round() as u64);
    PolicySummary {
        policy: policy.to_owned(),
        unallocated_at_100: unallocated_stats(curves, 100),
        unallocated_at_130: unallocated_stats(curves, 130),
        latency_p50: at(50.0),
        latency_p99: at(99.0),
        pods: curves.iter().map(|c| c.placed + c.failed).sum(),
        failed: curves.iter().map(|c| c.failed).sum(),
    }
}

/// A Markdown table of `rows`: per policy, seeds, mean ± SD, median and
/// min–max of unallocated GPU % at 100 % and 130 % arrived, and the
/// decision latency p50 / p99 in microseconds.
#[must_use]
pub fn summary_table(rows: &[PolicySummary]) -> String {
    use std::fmt::Write as _;
    let mut out = String::from(
        "| policy | seeds | unalloc. @100 % mean ± SD | median | min–max | unalloc. @130 % mean ± SD | median | min–max | p50 µs | p99 µs |\n\
         |---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let cells = |s: Option<Stats>| {
        s.map_or_else(
            || ["–".to_owned(), "–".to_owned(), "–".to_owned()],
            |s| {
                [
                    format!("{:.2} ± {:.2}", s.mean, s.sd),
                    format!("{:.2}", s.median),
                    format!("{:.2}–{:.2}", s.min, s.max),
                ]
            },
        )
    };
    for r in rows {
        let [m100, med100, r100] = cells(r.unallocated_at_100);
        let [m130, med130, r130] = cells(r.unallocated_at_130);
        let seeds = r
            .unallocated_at_100
            .or(r.unallocated_at_130)
            .map_or(0, |s| s.n);
        let _ = writeln!(
            out,
            "| {} | {seeds} | {m100} | {med100} | {r100} | {m130} | {med130} | {r130} | {:.1} | {:.1} |",
            r.policy,
            r.latency_p50.as_secs_f64() * 1e6,
            r.latency_p99.as_secs_f64() * 1e6,
        );
    }
    out
}

// ---------------------------------------------------------------------------
// The figure (plot_openb_alloc.py)
// ---------------------------------------------------------------------------

/// Width and height of the allocation SVG, pixels.
pub const ALLOC_SVG_SIZE: (u32, u32) = (960, 440);
/// The x window of the paper's figure (arrived %).
pub const PLOT_X: (f64, f64) = (75.0, 120.0);
/// The y window of the paper's figure (unallocated %).
pub const PLOT_Y: (f64, f64) = (0.0, 25.0);

/// The authors' colours: seaborn's default palette reversed, its last six in
/// policy order Random … FGD; further policies take the remaining ones.
const COLORS: [RGBColor; 10] = [
    RGBColor(0x93, 0x78, 0x60),
    RGBColor(0x81, 0x72, 0xB3),
    RGBColor(0xC4, 0x4E, 0x52),
    RGBColor(0x55, 0xA8, 0x68),
    RGBColor(0xDD, 0x84, 0x52),
    RGBColor(0x4C, 0x72, 0xB0),
    RGBColor(0xDA, 0x8B, 0xC3),
    RGBColor(0x64, 0xB5, 0xCD),
    RGBColor(0xCC, 0xB9, 0x74),
    RGBColor(0x8C, 0x8C, 0x8C),
];

/// Per arrived bucket with at least one seed: `(x, median, q25, q75)` of
/// unallocated % over the seeds that have a value there (seaborn drops
/// missing values the same way).
fn band(curves: &[SeedCurve]) -> Vec<(f64, f64, f64, f64)> {
    (0..BUCKETS)
        .filter_map(|b| {
            let mut v: Vec<f64> = curves.iter().filter_map(|c| c.unallocated_pct(b)).collect();
            v.sort_by(f64::total_cmp);
            #[allow(clippy::cast_precision_loss)]
            Some((
                b as f64,
                quantile(&v, 0.5)?,
                quantile(&v, 0.25)?,
                quantile(&v, 0.75)?,
            ))
        })
        .collect()
}

type Pt = (f64, f64);

/// `poly` (a polyline) clipped to the rectangle: the pieces inside
/// (Liang–Barsky per segment). Plotters does not clip to the plot area.
fn clip_polyline(poly: &[Pt], (x0, x1): (f64, f64), (y0, y1): (f64, f64)) -> Vec<Vec<Pt>> {
    let mut pieces: Vec<Vec<Pt>> = Vec::new();
    let mut current: Vec<Pt> = Vec::new();
    for seg in poly.windows(2) {
        let (a, b) = (seg[0], seg[1]);
        let (dx, dy) = (b.0 - a.0, b.1 - a.1);
        let (mut t0, mut t1) = (0.0f64, 1.0f64);
        let mut inside = true;
        for (p, q) in [
            (-dx, a.0 - x0),
            (dx, x1 - a.0),
            (-dy, a.1 - y0),
            (dy, y1 - a.1),
        ] {
            if p == 0.0 {
                if q < 0.0 {
                    inside = false;
                }
            } else {
                let t = q / p;
                if p < 0.0 {
                    t0 = t0.max(t);
                } else {
                    t1 = t1.min(t);
                }
            }
        }
        if !inside || t0 > t1 {
            if current.len() > 1 {
                pieces.push(std::mem::take(&mut current));
            }
            current.clear();
            continue;
        }
        let start = (a.0 + t0 * dx, a.1 + t0 * dy);
        let end = (a.0 + t1 * dx, a.1 + t1 * dy);
        if current.last() != Some(&start) {
            if current.len() > 1 {
                pieces.push(std::mem::take(&mut current));
            }
            current = vec![start];
        }
        current.push(end);
        if t1 < 1.0 {
            pieces.push(std::mem::take(&mut current));
        }
    }
    if current.len() > 1 {
        pieces.push(current);
    }
    pieces
}

/// `poly` (a closed polygon) clipped to the rectangle (Sutherland–Hodgman).
fn clip_polygon(poly: &[Pt], (x0, x1): (f64, f64), (y0, y1): (f64, f64)) -> Vec<Pt> {
    type Edge = (fn(Pt, f64) -> bool, fn(Pt, Pt, f64) -> Pt, f64);
    fn cross_x(a: Pt, b: Pt, x: f64) -> Pt {
        (x, a.1 + (b.1 - a.1) * (x - a.0) / (b.0 - a.0))
    }
    fn cross_y(a: Pt, b: Pt, y: f64) -> Pt {
        (a.0 + (b.0 - a.0) * (y - a.1) / (b.1 - a.1), y)
    }
    let edges: [Edge; 4] = [
        (|p, v| p.0 >= v, cross_x, x0),
        (|p, v| p.0 <= v, cross_x, x1),
        (|p, v| p.1 >= v, cross_y, y0),
        (|p, v| p.1 <= v, cross_y, y1),
    ];
    let mut out = poly.to_vec();
    for (inside, cross, v) in edges {
        let input = std::mem::take(&mut out);
        let Some(&last) = input.last() else { break };
        let mut prev = last;
        for &p in &input {
            match (inside(p, v), inside(prev, v)) {
                (true, true) => out.push(p),
                (true, false) => {
                    out.push(cross(prev, p, v));
                    out.push(p);
                }
                (false, true) => out.push(cross(prev, p, v)),
                (false, false) => {}
            }
            prev = p;
        }
    }
    out
}

/// The SVG of the paper's Fig. 9(a) (`experiments/plot/plot_openb_alloc.py`):
/// unallocated GPU % (100 − allocation %) against arrived workload (% of
/// GPU capacity), for each `(policy name, its seeds' curves)` in order: the
/// median over seeds as a line and the 25–75 % interval as a shaded band,
/// plus the dotted "Ideal" line `100 − x`; cropped to x 75–120 and y 0–25;
/// a legend with the names as passed (`01-Random`, …).
///
/// # Errors
/// [`ChartError`] if plotters fails to lay the chart out.
pub fn render_alloc_svg<S: AsRef<str>>(
    title: &str,
    runs: &[(S, Vec<SeedCurve>)],
) -> Result<String, ChartError> {
    let mut out = String::new();
    {
        let root = SVGBackend::with_string(&mut out, ALLOC_SVG_SIZE).into_drawing_area();
        root.fill(&WHITE).map_err(err)?;
        let mut c = ChartBuilder::on(&root)
            .caption(title, ("sans-serif", 18))
            .margin(14)
            .x_label_area_size(44)
            .y_label_area_size(56)
            .build_cartesian_2d(PLOT_X.0..PLOT_X.1, PLOT_Y.0..PLOT_Y.1)
            .map_err(err)?;
        c.configure_mesh()
            .x_desc("Arrived workload (% of cluster GPU capacity)")
            .y_desc("Unallocated GPU (%)")
            .y_labels(6)
            .draw()
            .map_err(err)?;

        let bands: Vec<_> = runs.iter().map(|(_, curves)| band(curves)).collect();
        for (i, b) in bands.iter().enumerate() {
            if b.is_empty() {
                continue;
            }
            let color = COLORS[i % COLORS.len()];
            let outline: Vec<Pt> = b
                .iter()
                .map(|p| (p.0, p.2))
                .chain(b.iter().rev().map(|p| (p.0, p.3)))
                .collect();
            let clipped = clip_polygon(&outline, PLOT_X, PLOT_Y);
            if clipped.len() >= 3 {
                c.draw_series(std::iter::once(Polygon::new(
                    clipped,
                    color.mix(0.2).filled(),
                )))
                .map_err(err)?;
            }
        }
        for (i, ((name, _), b)) in runs.iter().zip(&bands).enumerate() {
            let color = COLORS[i % COLORS.len()];
            let median: Vec<Pt> = b.iter().map(|p| (p.0, p.1)).collect();
            let style = color.stroke_width(2);
            c.draw_series(
                clip_polyline(&median, PLOT_X, PLOT_Y)
                    .into_iter()
                    .map(move |piece| PathElement::new(piece, style)),
            )
            .map_err(err)?
            .label(name.as_ref())
            .legend(move |(x, y)| PathElement::new(vec![(x, y), (x + 20, y)], style));
        }
        let grey = RGBColor(0x80, 0x80, 0x80);
        for piece in clip_polyline(&[(0.0, 100.0), (100.0, 0.0)], PLOT_X, PLOT_Y) {
            c.draw_series(DashedLineSeries::new(piece, 2, 4, grey.stroke_width(2)))
                .map_err(err)?
                .label("Ideal")
                .legend(move |(x, y)| {
                    PathElement::new(vec![(x, y), (x + 20, y)], grey.stroke_width(2))
                });
        }
        c.configure_series_labels()
            .position(SeriesLabelPosition::UpperRight)
            .background_style(WHITE.mix(0.85))
            .border_style(BLACK.mix(0.3))
            .draw()
            .map_err(err)?;
        root.present().map_err(err)?;
    }
    Ok(out)
}

// ---------------------------------------------------------------------------
// CLI helpers
// ---------------------------------------------------------------------------

/// Parses a `--seeds` value: comma-separated seeds or inclusive ranges,
/// `42-51`, `42,45`, `42-44,50`; in the order written, duplicates kept out.
///
/// # Errors
/// A message naming the bad part (empty, not a number, a range backwards).
pub fn parse_seeds(s: &str) -> Result<Vec<u64>, String> {
    let mut seeds = Vec::new();
    for part in s.split(',').map(str::trim) {
        let num = |v: &str| {
            v.trim()
                .parse::<u64>()
                .map_err(|_| format!("seed {v:?} in {s:?} is not a non-negative integer"))
        };
        let range = match part.split_once('-') {
            Some((a, b)) => {
                let (a, b) = (num(a)?, num(b)?);
                if a > b {
                    return Err(format!("seed range {part:?} runs backwards"));
                }
                a..=b
            }
            None => {
                let v = num(part)?;
                v..=v
            }
        };
        for seed in range {
            if !seeds.contains(&seed) {
                seeds.push(seed);
            }
        }
    }
    Ok(seeds)
}

/// The paper's `sc_policy` name for a `--policy` value: the full name
/// (`06-FGD`) or the short one of the authors' plots (`FGD`, `BestFit`,
/// `Packing`, `Clustering`, `DotProd`, `Random`; also `GpuPacking`,
/// `GpuClustering`), any case. `None` for anything else (e.g. Flotilla's
/// own policies, which keep their own names).
#[must_use]
pub fn paper_policy_name(s: &str) -> Option<&'static str> {
    let s = s.trim();
    PAPER_POLICIES.into_iter().find(|full| {
        let short = full.split_once('-').map_or(*full, |(_, n)| n);
        let shorter = short.strip_prefix("Gpu").unwrap_or(short);
        [*full, short, shorter]
            .iter()
            .any(|n| n.eq_ignore_ascii_case(s))
    })
}

// ---------------------------------------------------------------------------
// The scheduler as the placer
// ---------------------------------------------------------------------------

/// The paper's scheduler setup as a Flotilla profile (§2.3): the default
/// Filters plus GpuShare; every Score plugin off but GpuShare with
/// `policy`; no preemption; every node scored
/// (`percentageOfNodesToScore: 100`); equally scored nodes to the smallest
/// name (`tieBreak: NodeName`, the authors' patched `selectHost`);
/// FGD's target workload given (`target`, learned from the trace as the
/// authors do); `Random`'s draws seeded with `seed`.
///
/// # Errors
/// [`FgdError::Profile`] if the configuration does not load (a bug).
pub fn paper_profile(
    policy: Policy,
    target: &TargetWorkload,
    seed: u64,
) -> Result<flotilla_scheduler::Profile, FgdError> {
    let shapes: Vec<serde_json::Value> = target
        .shapes()
        .iter()
        .map(|(shape, weight)| {
            let gpu = shape.gpu_request();
            serde_json::json!({
                "cpuMilli": shape.cpu_milli,
                "gpuMilli": gpu.map_or(0, |g| g.milli),
                "gpuCount": gpu.map_or(1, |g| g.count),
                "models": gpu
                    .and_then(|g| g.models.as_ref())
                    .map(|m| m.iter().map(|x| x.to_string()).collect::<Vec<_>>())
                    .unwrap_or_default(),
                "memory": shape.memory,
                "weight": weight,
            })
        })
        .collect();
    let config = serde_json::json!({
        "apiVersion": "kubescheduler.config.k8s.io/v1",
        "kind": "KubeSchedulerConfiguration",
        "profiles": [{
            "schedulerName": flotilla_shared::pod_info::DEFAULT_SCHEDULER_NAME,
            "percentageOfNodesToScore": 100,
            "tieBreak": "NodeName",
            "plugins": {
                "multiPoint": {"enabled": [{"name": GPU_SHARE}]},
                "score": {
                    "disabled": [{"name": "*"}],
                    "enabled": [{"name": GPU_SHARE, "weight": 1}],
                },
                "postFilter": {"disabled": [{"name": "*"}]},
            },
            "pluginConfig": [{
                "name": GPU_SHARE,
                "args": {
                    "scoringStrategy": {"type": policy.short_name()},
                    "targetWorkload": {"shapes": shapes},
                    "randomSeed": seed,
                },
            }],
        }],
    });
    let cfg = flotilla_scheduler::config::parse(&config.to_string(), "the FGD bench profile")
        .map_err(|e| FgdError::Profile(e.to_string()))?;
    cfg.profiles
        .into_iter()
        .next()
        .ok_or_else(|| FgdError::Profile("no profile".into()))
}

/// The trace's target workload as the authors compute it (§1.5): the shapes
/// of every pod of the original list (before the stream is tuned), as
/// `policy` counts them ([`gpu_share::shape_for`]: `Flotilla`'s carry the
/// memory request), the most common covering 95 %, CPU-only pods included.
///
/// # Errors
/// [`FgdError::BadPod`] for a pod the scheduler cannot read.
pub fn trace_target_for(policy: Policy, pods: &[Pod]) -> Result<TargetWorkload, FgdError> {
    let shapes = pods
        .iter()
        .map(|p| compile(p).map(|info| gpu_share::shape_for(policy, &info)))
        .collect::<Result<Vec<_>, _>>()?;
    Ok(TargetWorkload::learn(shapes, DEFAULT_COVERAGE))
}

/// The pod as the scheduler reads it.
fn compile(pod: &Pod) -> Result<PodInfo, FgdError> {
    PodInfo::from_pod(Arc::new(pod.clone())).map_err(|e| FgdError::BadPod {
        pod: pod_name(pod).to_owned(),
        message: e.message,
    })
}

/// The scheduler's own cycle as the [`Placer`]: a [`Replay`] of the nodes
/// with one profile; a placed pod's GPU share (`count × milli`) is what it
/// adds to the allocated milli-GPU.
pub struct SchedulerPlacer {
    replay: Replay,
    used_milli: u64,
}

impl SchedulerPlacer {
    /// An empty cluster of `nodes` scheduled by `profile`.
    ///
    /// # Errors
    /// [`FgdError::BadNode`] for a node the scheduler cannot read;
    /// [`FgdError::Profile`] for a profile that does not build.
    pub fn new(
        nodes: &[Node],
        profile: flotilla_scheduler::Profile,
        seed: u64,
    ) -> Result<Self, FgdError> {
        let specs = nodes
            .iter()
            .map(|n| {
                NodeSpec::from_node(Arc::new(n.clone()))
                    .map_err(|e| FgdError::BadNode(e.to_string()))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let replay = Replay::new(specs, &[profile], &Registry::in_tree(), Some(seed))
            .map_err(|e| FgdError::Profile(e.to_string()))?;
        Ok(SchedulerPlacer {
            replay,
            used_milli: 0,
        })
    }
}

impl Placer for SchedulerPlacer {
    fn place(&mut self, pod: &Pod) -> bool {
        // The stream's pods were all read by `gpu_request` first; one the
        // scheduler still refuses fails, as it would in a cluster.
        let Ok(info) = compile(pod) else {
            return false;
        };
        match self.replay.place(&Arc::new(info)) {
            Ok(Some(bound)) => {
                self.used_milli += bound.gpu.as_deref().map_or(0, |g| g.request.total_milli());
                true
            }
            Ok(None) | Err(_) => false,
        }
    }

    fn used_gpu_milli(&self) -> u64 {
        self.used_milli
    }
}

/// Pod slots of every node in the protocol: the authors' node files say
/// 1001 (so slots never bind); the openb loader's default is 110.
pub const PAPER_NODE_PODS: &str = "1001";

/// `nodes` with [`PAPER_NODE_PODS`] pod slots.
#[must_use]
pub fn with_paper_pod_slots(mut nodes: Vec<Node>) -> Vec<Node> {
    for n in &mut nodes {
        let status = n.status.get_or_insert_with(Default::default);
        for list in [status.capacity.as_mut(), status.allocatable.as_mut()]
            .into_iter()
            .flatten()
        {
            list.insert(
                "pods".to_owned(),
                k8s_openapi::apimachinery::pkg::api::resource::Quantity(PAPER_NODE_PODS.to_owned()),
            );
        }
    }
    nodes
}

/// The protocol for each of `policies` through the scheduler's plugins:
/// per policy, the curves of `seeds` (seeds run in parallel, each on its
/// own empty cluster). `pods` is the original trace list.
///
/// # Errors
/// As [`run`], [`trace_target_for`], [`paper_profile`], [`SchedulerPlacer::new`].
pub fn run_policies(
    nodes: &[Node],
    pods: &[Pod],
    policies: &[Policy],
    seeds: &[u64],
    tune: f64,
) -> Result<Vec<(Policy, Vec<SeedCurve>)>, FgdError> {
    use rayon::prelude::*;
    let gpus = total_gpus(nodes)?;
    if gpus == 0 {
        return Err(FgdError::NoGpus);
    }
    let mut out = Vec::new();
    for &policy in policies {
        let target = trace_target_for(policy, pods)?;
        let curves = seeds
            .par_iter()
            .map(|&seed| {
                let stream = stream(pods, gpus, seed, tune)?;
                let mut placer =
                    SchedulerPlacer::new(nodes, paper_profile(policy, &target, seed)?, seed)?;
                run_seed(&stream, gpus, seed, tune, &mut placer)
            })
            .collect::<Result<Vec<_>, _>>()?;
        out.push((policy, curves));
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashSet};

    use k8s_openapi::api::core::v1::Container;

    use super::*;
    use crate::workload::{ANNOTATION_GPU_COUNT, ANNOTATION_GPU_MILLI, RESOURCE_GPU};
    use crate::workload::{pending_pod, ready_node, resource_list};

    /// A trace-dialect pod: `k` GPUs of `d` milli (none for `k` = 0).
    fn pod(name: &str, k: u64, d: u64) -> Pod {
        let mut p = pending_pod("openb", name, Container::default());
        if k > 0 {
            p.metadata.annotations = Some(BTreeMap::from([
                (ANNOTATION_GPU_COUNT.to_owned(), k.to_string()),
                (ANNOTATION_GPU_MILLI.to_owned(), d.to_string()),
            ]));
        }
        p
    }

    fn node(name: &str, gpus: u64) -> Node {
        ready_node(
            name,
            BTreeMap::new(),
            resource_list([(RESOURCE_GPU, gpus.to_string())]),
        )
    }

    fn names(pods: &[Pod]) -> Vec<String> {
        pods.iter().map(|p| pod_name(p).to_owned()).collect()
    }

    fn demand(pods: &[Pod]) -> u64 {
        pods.iter()
            .map(|p| total_milli(gpu_request(p).unwrap().as_ref()))
            .sum()
    }

    /// Test fixture only: first node (in order) whose *summed* free milli
    /// fits `k·d`. Not a scheduler: the real placer is the scheduler's.
    struct FirstFit {
        free: Vec<u64>,
        capacity: u64,
    }

    impl Placer for FirstFit {
        fn place(&mut self, pod: &Pod) -> bool {
            let need = total_milli(gpu_request(pod).unwrap().as_ref());
            match self.free.iter_mut().find(|f| **f >= need) {
                Some(f) => {
                    *f -= need;
                    true
                }
                None => false,
            }
        }
        fn used_gpu_milli(&self) -> u64 {
            self.capacity - self.free.iter().sum::<u64>()
        }
    }

    fn first_fit(gpus: &[u64]) -> Box<dyn Placer> {
        let free: Vec<u64> = gpus.iter().map(|g| g * 1000).collect();
        Box::new(FirstFit {
            capacity: free.iter().sum(),
            free,
        })
    }

    fn trace(n: usize) -> Vec<Pod> {
        // Mixed shapes, names deliberately out of order.
        (0..n)
            .rev()
            .map(|i| match i % 4 {
                0 => pod(&format!("pod-{i:03}"), 1, 500),
                1 => pod(&format!("pod-{i:03}"), 1, 1000),
                2 => pod(&format!("pod-{i:03}"), 2, 1000),
                _ => pod(&format!("pod-{i:03}"), 0, 0),
            })
            .collect()
    }

    #[test]
    fn gpu_request_reads_the_two_annotations() {
        assert_eq!(
            gpu_request(&pod("a", 2, 1000)).unwrap(),
            Some(GpuRequest::whole(2))
        );
        assert_eq!(
            gpu_request(&pod("s", 1, 300)).unwrap(),
            Some(GpuRequest::share(300))
        );
        assert_eq!(gpu_request(&pod("c", 0, 0)).unwrap(), None);
        let mut bad = pod("b", 1, 500);
        bad.metadata
            .annotations
            .as_mut()
            .unwrap()
            .insert(ANNOTATION_GPU_MILLI.to_owned(), "0.5".to_owned());
        let e = gpu_request(&bad).unwrap_err().to_string();
        assert!(e.contains(ANNOTATION_GPU_MILLI), "{e}");
        assert_eq!(total_gpus(&[node("n1", 8), node("n2", 2)]).unwrap(), 10);
    }

    #[test]
    fn the_stream_is_deterministic_per_seed_and_differs_across_seeds() {
        let pods = trace(40);
        let a = stream(&pods, 10, 42, 1.3).unwrap();
        let b = stream(&pods, 10, 42, 1.3).unwrap();
        let c = stream(&pods, 10, 43, 1.3).unwrap();
        assert_eq!(names(&a), names(&b));
        assert_ne!(names(&a), names(&c));
        // The input order does not matter: the trace is sorted by name first.
        let mut reversed = pods.clone();
        reversed.reverse();
        assert_eq!(names(&stream(&reversed, 10, 42, 1.3).unwrap()), names(&a));
    }

    #[test]
    fn every_trace_pod_comes_once_before_the_resamples() {
        let pods = trace(40);
        // 40 pods: 10 × 500 + 10 × 1000 + 10 × 2000 = 35,000 milli; 30 GPUs
        // × 1.3 = 39,000: tuned up.
        let s = stream(&pods, 30, 7, 1.3).unwrap();
        assert!(s.len() > pods.len());
        let originals: HashSet<String> = names(&pods).into_iter().collect();
        let head: HashSet<String> = names(&s[..pods.len()]).into_iter().collect();
        assert_eq!(head, originals);
        assert_ne!(
            names(&s[..pods.len()]),
            {
                let mut sorted = names(&pods);
                sorted.sort();
                sorted
            },
            "shuffled"
        );
        let mut uids = HashSet::new();
        for (i, p) in s[pods.len()..].iter().enumerate() {
            let name = pod_name(p);
            let (base, n) = name.rsplit_once(TUNED_SUFFIX).expect("a resample");
            assert_eq!(n, i.to_string());
            assert!(originals.contains(base), "{name}");
            assert_eq!(p.metadata.namespace.as_deref(), Some("openb"));
            let template = pods.iter().find(|t| pod_name(t) == base).unwrap();
            assert_eq!(gpu_request(p).unwrap(), gpu_request(template).unwrap());
            assert_ne!(p.metadata.uid, template.metadata.uid);
            assert!(uids.insert(p.metadata.uid.clone()));
        }
        // Stopped where the next draw would pass the target: Σ ≤ target
        // (no multi-GPU draw can overshoot by more than 1000 here).
        assert!(demand(&s) <= 39_000 + 1000);
    }

    #[test]
    fn tune_up_stops_before_the_draw_that_would_pass() {
        // 2 × 500 on 2 GPUs: target 2,600; 1,000 + 3 × 500 = 2,500, the
        // next 500 would make 3,000.
        let pods = vec![pod("a", 1, 500), pod("b", 1, 500)];
        for seed in 0..5 {
            let s = stream(&pods, 2, seed, 1.3).unwrap();
            assert_eq!(s.len(), 5, "seed {seed}");
            assert_eq!(demand(&s), 2500);
        }
        // Exactly on the target: still taken (the test is `>`).
        // 500 → 1,000 → 1,500 = 1.5 × 1,000, then 2,000 stops.
        let s = stream(&[pod("a", 1, 500)], 1, 1, 1.5).unwrap();
        assert_eq!(demand(&s), 1500);
    }

    #[test]
    fn tune_up_mirrors_the_per_gpu_stop_test_quirk() {
        // One 4-GPU pod on 10 GPUs: target 13,000. Draws test Σ + 1000 (the
        // per-GPU share), not Σ + 4000: 4,000 → 8,000 → 12,000 → 16,000
        // (12,000 + 1,000 ≤ 13,000 passes), then 16,000 + 1,000 stops.
        let s = stream(&[pod("multi", 4, 1000)], 10, 42, 1.3).unwrap();
        assert_eq!(
            names(&s),
            ["multi", "multi-tuned-0", "multi-tuned-1", "multi-tuned-2"]
        );
        assert_eq!(demand(&s), 16_000, "past the 13,000 target");
    }

    #[test]
    fn tune_down_removes_random_pods_keeping_the_order() {
        let pods: Vec<Pod> = (0..10).map(|i| pod(&format!("p{i}"), 1, 1000)).collect();
        for seed in [1, 2, 3] {
            let shuffled = names(&stream(&pods, 5, seed, 0.0).unwrap());
            assert_eq!(shuffled.len(), 10, "tune 0: untuned");
            let s = stream(&pods, 5, seed, 1.3).unwrap();
            // 10,000 > 6,500: remove until ≤ 6,500 → 6 pods.
            assert_eq!(s.len(), 6);
            let kept = names(&s);
            let mut it = shuffled.iter();
            assert!(kept.iter().all(|k| it.any(|x| x == k)), "a subsequence");
        }
    }

    #[test]
    fn stream_errors() {
        assert!(matches!(
            stream(&[pod("c", 0, 0)], 2, 1, 1.3),
            Err(FgdError::NoGpuDemand(_))
        ));
        assert!(matches!(
            stream(&[pod("a", 1, 5)], 0, 1, 1.3),
            Err(FgdError::NoGpus)
        ));
        assert!(matches!(
            stream(&[pod("a", 1, 5)], 1, 1, f64::NAN),
            Err(FgdError::BadTune(_))
        ));
    }

    #[test]
    fn bucketing_mirrors_merge_alloc_discrete() {
        let e = |arrived_milli, used_milli| AllocEvent {
            arrived_milli,
            used_milli,
        };
        // One GPU: bucket = round(arrived / 10), allocation = used / 10.
        let events = [e(10, 10), e(12, 10), e(30, 20), e(50, 40)];
        let a = bucket_alloc(&events, 1);
        assert_eq!(a.len(), BUCKETS);
        assert_eq!(a[0], Some(1.0), "empty: buckets -1..=1");
        assert_eq!(a[1], Some(1.0));
        assert_eq!(a[2], Some(1.33), "empty: mean of 1, 1, 2, rounded");
        assert_eq!(a[3], Some(2.0));
        assert_eq!(a[4], Some(3.0), "empty: mean of 2 and 4");
        assert_eq!(a[5], Some(4.0));
        assert_eq!(a[6], Some(4.0), "empty: bucket 5 only");
        assert_eq!(a[7], None, "nothing within ±1");
        assert_eq!(a[130], None);
        // Half to even on the bucket; each event's allocation rounded first.
        let a = bucket_alloc(&[e(25, 1), e(35, 2), e(1, 1)], 3);
        // 25/3/10 = 0.83 → 1; 35/3/10 = 1.17 → 1; allocations 0.03, 0.07, 0.03.
        assert_eq!(a[1], Some(0.05));
        let a = bucket_alloc(&[e(25, 0), e(35, 10)], 1);
        assert_eq!(a[2], Some(0.0), "2.5 → 2");
        assert_eq!(a[4], Some(1.0), "3.5 → 4");
        assert_eq!(a[3], Some(0.5), "empty: 2 and 4");
        assert!(bucket_alloc(&events, 0).iter().all(Option::is_none));
    }

    #[test]
    fn run_logs_one_event_and_latency_per_pod() {
        // 40 × 8 GPUs; 400 pods = 350,000 milli < 1.3 × 320,000: tuned up.
        let nodes: Vec<Node> = (0..40).map(|i| node(&format!("n{i:02}"), 8)).collect();
        let pods = trace(400);
        let mut made = Vec::new();
        let curves = run(&nodes, &pods, &[42, 43], DEFAULT_TUNE, |seed| {
            made.push(seed);
            first_fit(&[8; 40])
        })
        .unwrap();
        assert_eq!(made, [42, 43]);
        for (c, seed) in curves.iter().zip([42, 43]) {
            let s = stream(&pods, 320, seed, DEFAULT_TUNE).unwrap();
            assert_eq!((c.seed, c.total_gpus, c.tune), (seed, 320, 1.3));
            assert_eq!(c.events.len(), s.len());
            assert_eq!(c.latencies.len(), s.len());
            assert_eq!(c.placed + c.failed, s.len());
            assert_eq!(c.events.last().unwrap().arrived_milli, demand(&s));
            assert!(
                c.events
                    .windows(2)
                    .all(|w| w[0].used_milli <= w[1].used_milli)
            );
            assert!(c.events.last().unwrap().used_milli <= 320_000);
            assert_eq!(c.alloc_pct, bucket_alloc(&c.events, 320));
            assert!(
                c.alloc_pct.iter().all(Option::is_some),
                "fine-grained: every bucket"
            );
        }
        let sum = summarize("fixture", &curves);
        assert_eq!(sum.unallocated_at_100.unwrap().n, 2);
        assert!(sum.latency_p50 <= sum.latency_p99);
        assert_eq!(
            sum.pods,
            curves.iter().map(|c| c.events.len()).sum::<usize>()
        );
        assert!(summary_table(&[sum]).contains("| fixture | 2 |"));
    }

    fn curve(seed: u64, alloc: impl Fn(usize) -> Option<f64>) -> SeedCurve {
        SeedCurve {
            seed,
            tune: 1.3,
            total_gpus: 6212,
            alloc_pct: (0..BUCKETS).map(alloc).collect(),
            events: Vec::new(),
            latencies: Vec::new(),
            placed: 0,
            failed: 0,
        }
    }

    #[test]
    fn the_csv_has_the_authors_layout_and_reads_back() {
        #[allow(clippy::cast_precision_loss)]
        let rising = |b: usize| (b != 7).then(|| (b.min(95) as f64) * 0.99);
        let runs = vec![
            (
                "01-Random",
                vec![curve(42, rising), curve(43, |b| (b < 120).then_some(2.0))],
            ),
            ("06-FGD", vec![curve(42, |_| Some(91.3))]),
        ];
        let mut buf = Vec::new();
        write_alloc_csv(&mut buf, "openb_pod_list_default", &runs).unwrap();
        let text = String::from_utf8(buf).unwrap();
        let mut lines = text.lines();
        let header = lines.next().unwrap();
        assert!(header.starts_with("workload,sc_policy,tune,seed,total_gpus,0,1,2,"));
        assert!(header.ends_with(",129,130"));
        assert_eq!(header.split(',').count(), 5 + 131);
        let row: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(
            &row[..7],
            [
                "openb_pod_list_default",
                "01-Random",
                "1.3",
                "42",
                "6212",
                "0.0",
                "0.99"
            ]
        );
        assert_eq!(row[5 + 7], "", "empty bucket");
        assert_eq!(row[5 + 2], "1.98");
        let row: Vec<&str> = lines.next().unwrap().split(',').collect();
        assert_eq!(row[5 + 50], "2.0");
        assert_eq!(row[5 + 125], "");
        assert!(lines.next().unwrap().ends_with(",91.3,91.3"));
        assert!(lines.next().is_none());

        let back = read_alloc_csv(text.as_bytes()).unwrap();
        assert_eq!(back.len(), 3);
        assert_eq!(back[0].workload, "openb_pod_list_default");
        assert_eq!(back[0].policy, "01-Random");
        assert_eq!(back[0].curve, runs[0].1[0]);
        assert_eq!(back[1].curve, runs[0].1[1]);
        assert_eq!(back[2].policy, "06-FGD");
        assert_eq!(back[2].curve.unallocated_pct(100), Some(100.0 - 91.3));

        let bad = "workload,sc_policy,tune,seed,total_gpus,0\nw,p,1.3,x,6212,1.0\n";
        assert!(matches!(
            read_alloc_csv(bad.as_bytes()),
            Err(FgdError::CsvLayout { line: 2, .. })
        ));
    }

    #[test]
    fn stats_and_quantiles() {
        let s = Stats::of(&[4.0, 1.0, 3.0, 2.0]).unwrap();
        assert_eq!(
            (s.n, s.mean, s.median, s.min, s.max),
            (4, 2.5, 2.5, 1.0, 4.0)
        );
        assert!((s.sd - 1.290_994).abs() < 1e-6);
        assert_eq!(Stats::of(&[5.0]).unwrap().sd, 0.0);
        assert!(Stats::of(&[]).is_none());
        let v = [1.0, 2.0, 3.0, 4.0, 5.0];
        assert_eq!(quantile(&v, 0.25), Some(2.0));
        assert_eq!(quantile(&[1.0, 2.0], 0.25), Some(1.25));
    }

    #[test]
    fn clipping_keeps_what_is_inside() {
        let rect = ((0.0, 10.0), (0.0, 10.0));
        let pieces = clip_polyline(
            &[(-5.0, 5.0), (5.0, 5.0), (5.0, 15.0), (8.0, 5.0), (9.0, 5.0)],
            rect.0,
            rect.1,
        );
        assert_eq!(pieces.len(), 2, "{pieces:?}");
        assert_eq!(pieces[0], vec![(0.0, 5.0), (5.0, 5.0), (5.0, 10.0)]);
        assert_eq!(pieces[1].last(), Some(&(9.0, 5.0)));
        let square = clip_polygon(
            &[(-5.0, -5.0), (5.0, -5.0), (5.0, 5.0), (-5.0, 5.0)],
            rect.0,
            rect.1,
        );
        let mut sq = square.clone();
        sq.sort_by(|a, b| a.partial_cmp(b).unwrap());
        sq.dedup();
        assert_eq!(sq, [(0.0, 0.0), (0.0, 5.0), (5.0, 0.0), (5.0, 5.0)]);
    }

    #[test]
    fn the_svg_has_a_line_and_band_per_policy_and_the_ideal() {
        #[allow(clippy::cast_precision_loss)]
        let shaped = |off: f64| move |b: usize| Some((b as f64).min(100.0 - off));
        let runs: Vec<(String, Vec<SeedCurve>)> = PAPER_POLICIES
            .iter()
            .enumerate()
            .map(|(i, p)| {
                #[allow(clippy::cast_precision_loss)]
                let off = 2.0 + 2.0 * i as f64;
                (
                    (*p).to_owned(),
                    (42..47)
                        .map(|s| {
                            #[allow(clippy::cast_precision_loss)]
                            curve(s, shaped(off + 0.2 * (s - 42) as f64))
                        })
                        .collect(),
                )
            })
            .collect();
        let svg = render_alloc_svg("openb default, 5 seeds", &runs).unwrap();
        assert!(svg.starts_with("<svg"));
        assert!(svg.trim_end().ends_with("</svg>"));
        for p in PAPER_POLICIES {
            assert!(svg.contains(p), "{p}");
        }
        assert!(svg.contains("Ideal"));
        assert!(svg.contains("openb default, 5 seeds"));
        assert!(svg.contains("Unallocated GPU (%)"));
        assert_eq!(svg.matches("<polygon").count(), 6, "one band each");
        // Empty input still draws the frame.
        let empty: [(&str, Vec<SeedCurve>); 0] = [];
        assert!(render_alloc_svg("none", &empty).unwrap().contains("Ideal"));
    }

    #[test]
    fn policy_names_resolve_to_the_papers() {
        assert_eq!(paper_policy_name("06-FGD"), Some("06-FGD"));
        assert_eq!(paper_policy_name("fgd"), Some("06-FGD"));
        assert_eq!(paper_policy_name("Packing"), Some("04-GpuPacking"));
        assert_eq!(paper_policy_name("gpuclustering"), Some("03-GpuClustering"));
        assert_eq!(paper_policy_name(" random "), Some("01-Random"));
        assert_eq!(paper_policy_name("Flotilla"), None);
        assert_eq!(paper_policy_name("Gpu"), None);
    }

    #[test]
    fn seeds_parse() {
        assert_eq!(parse_seeds("42-51").unwrap(), (42..=51).collect::<Vec<_>>());
        assert_eq!(parse_seeds("42").unwrap(), [42]);
        assert_eq!(parse_seeds("1, 3-4,3").unwrap(), [1, 3, 4]);
        assert!(parse_seeds("").is_err());
        assert!(parse_seeds("5-4").is_err());
        assert!(parse_seeds("a-4").is_err());
        assert!(parse_seeds("-4").is_err());
    }
}
