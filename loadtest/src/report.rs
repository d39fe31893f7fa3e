//! The end-of-run report, printed as text or JSON (`--output json`).
//!
//! Everything is computed from the cluster's final state (the source of
//! truth) plus the coordinator's records for timing. The JSON schema is the
//! [`Report`] struct with camelCase keys; see the README for a sample.

use std::collections::HashMap;
use std::fmt::Write as _;
use std::io::Write as _;
use std::path::Path;
use std::sync::Arc;
use std::time::Instant;

use serde::Serialize;

use flotilla_coordinator::Coordinator;
use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_scheduler::worker::WorkerStats;
use flotilla_shared::extender::HttpExtender;
use flotilla_shared::fit::IgnoredResources;
use flotilla_shared::gpu;
use flotilla_shared::max_instances;
use flotilla_shared::node_info::{NodeInfo, NodeSpec};
use flotilla_shared::pod_info::PodInfo;
use flotilla_shared::resources::{NVIDIA_GPU, Resources};

use crate::bench::measure::percentile;
use crate::workload::RESOURCE_GPU_MILLI;

/// Scheduling latency percentiles, milliseconds, from the coordinator first
/// seeing a pending pod to its Binding being written.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
pub struct Latency {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
}

/// Bind arbitration outcome counts.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Conflicts {
    /// Proposals the arbiter rejected (room taken, node changed).
    pub count: u64,
    /// All bind proposals.
    pub proposals: u64,
    /// `count / proposals` (0 when no proposals).
    pub fraction: f64,
    /// Proposals bound to one of their alternatives, the first choice's
    /// room having been taken (not in `count`: no second cycle was run).
    pub alternatives: u64,
}

/// Preemption counts (DefaultPreemption PostFilter, arbitrated by the
/// coordinator).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Preemption {
    /// `ProposePreemption` calls received (upstream
    /// `scheduler_preemption_attempts_total`).
    pub attempts: u64,
    /// Victims deleted for granted preemptions (upstream
    /// `scheduler_preemption_victims`, summed).
    pub victims: u64,
}

/// Gang scheduling counts.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Gangs {
    /// Gang proposals granted whole (every waiting member bound at once).
    pub scheduled: u64,
    /// Gangs released after waiting past their `scheduleTimeoutSeconds`.
    pub timeouts: u64,
}

/// One FitError reason and how many unschedulable pods it applied to.
#[derive(Debug, Clone, Serialize, PartialEq)]
pub struct ReasonCount {
    /// Upstream reason text, e.g. `Insufficient nvidia.com/gpu`.
    pub reason: String,
    /// Unschedulable pods whose message carries it.
    pub pods: usize,
}

/// Per-worker figures.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WorkerReport {
    /// Worker name (`online-0`).
    pub worker: String,
    /// `online` or `batch`.
    pub class: String,
    /// Pods bound through it.
    pub pods: u64,
    /// Scheduling cycles it ran.
    pub attempts: u64,
    /// Its proposals the arbiter rejected.
    pub conflicts: u64,
    /// Its proposals bound to one of their alternatives.
    pub alternatives: u64,
    /// Placements outside its partition.
    pub fallbacks: u64,
    /// Seconds spent in scheduling cycles.
    pub busy_seconds: f64,
    /// Seconds spent on decisions the arbiter rejected.
    pub wasted_seconds: f64,
    /// Whether it ran in this process (otherwise only `pods` is known here).
    pub in_process: bool,
}

/// One HTTP extender's calls over the run (all workers, and the
/// coordinator for the bind verb).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct ExtenderReport {
    /// Its `urlPrefix`.
    pub extender: String,
    /// Calls made (every verb).
    pub calls: u64,
    /// Calls that failed (transport, timeout, non-200, bad reply, `Error`).
    pub failures: u64,
    /// Failures skipped because the extender is `ignorable`.
    pub ignored_failures: u64,
    /// Mean wait for a reply, milliseconds.
    pub mean_ms: f64,
}

/// One profile's placement webhook over the run (all workers).
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct WebhookReport {
    /// The profile's `schedulerName`.
    pub profile: String,
    /// The webhook's URL.
    pub url: String,
    /// Calls made (a batch is one call).
    pub calls: u64,
    /// Pods placed where the service chose.
    pub decided: u64,
    /// Pods the service declined to place.
    pub declined: u64,
    /// Pods whose decision failed (the fallback applied).
    pub failures: u64,
    /// The fallback on failure: `InProcess` or `Pending`.
    pub fallback: String,
    /// Mean wait for a reply, milliseconds.
    pub mean_ms: f64,
}

fn mean_ms(nanos: u64, calls: u64) -> f64 {
    if calls == 0 {
        0.0
    } else {
        #[allow(clippy::cast_precision_loss)]
        let ms = nanos as f64 / calls as f64 / 1e6;
        ms
    }
}

/// The extender and webhook figures of in-process workers (`stats`) and
/// the coordinator's binder, summed per extender / profile.
#[must_use]
pub fn extension_reports(
    stats: &[&WorkerStats],
    binder: Option<&HttpExtender>,
) -> (Vec<ExtenderReport>, Vec<WebhookReport>) {
    use std::sync::atomic::Ordering::Relaxed;
    let mut ext: Vec<ExtenderReport> = Vec::new();
    let mut nanos: Vec<u64> = Vec::new();
    let mut add = |e: &HttpExtender| {
        let st = e.stats();
        let i = match ext.iter().position(|r| r.extender == e.name()) {
            Some(i) => i,
            None => {
                ext.push(ExtenderReport {
                    extender: e.name().to_owned(),
                    ..ExtenderReport::default()
                });
                nanos.push(0);
                ext.len() - 1
            }
        };
        ext[i].calls += st.calls.load(Relaxed);
        ext[i].failures += st.failures.load(Relaxed);
        ext[i].ignored_failures += st.ignored.load(Relaxed);
        nanos[i] += st.nanos.load(Relaxed);
    };
    for w in stats {
        if let Some(list) = w.extenders.get() {
            for e in list.list() {
                add(e);
            }
        }
    }
    if let Some(b) = binder {
        add(b);
    }
    for (r, n) in ext.iter_mut().zip(&nanos) {
        r.mean_ms = mean_ms(*n, r.calls);
    }
    let mut hooks: Vec<(WebhookReport, u64)> = Vec::new();
    for w in stats {
        for (profile, hook) in w.webhooks.get().into_iter().flatten() {
            let st = hook.stats();
            let i = match hooks.iter().position(|(r, _)| r.profile == *profile) {
                Some(i) => i,
                None => {
                    hooks.push((
                        WebhookReport {
                            profile: profile.clone(),
                            url: hook.config().url.clone(),
                            fallback: format!("{:?}", hook.config().fallback),
                            ..WebhookReport::default()
                        },
                        0,
                    ));
                    hooks.len() - 1
                }
            };
            let (r, n) = &mut hooks[i];
            r.calls += st.calls.load(Relaxed);
            r.decided += st.decided.load(Relaxed);
            r.declined += st.declined.load(Relaxed);
            r.failures += st.failures.load(Relaxed);
            *n += st.nanos.load(Relaxed);
        }
    }
    let hooks = hooks
        .into_iter()
        .map(|(mut r, n)| {
            r.mean_ms = mean_ms(n, r.calls);
            r
        })
        .collect();
    (ext, hooks)
}

/// What the pods bound to one node take of it, in the cluster's final
/// state, tallied one pod at a time (the report does not keep a compiled
/// pod per bound pod).
struct NodeTally {
    /// The node, holding only the pods an instance cap concerns (those
    /// with the app label), for [`max_instances::overfull_nodes`].
    node: NodeInfo,
    /// Sum of the bound pods' requests.
    requested: Resources,
    /// Bound pods.
    pods: i64,
    /// Extended resources requested, each pod's counted only for the
    /// resources its profile checks (`ignoredResources` by `schedulerName`).
    checked_scalar: HashMap<Arc<str>, i64>,
    /// Milli-GPU the bound pods hold on each device, by the devices written
    /// on them (`gpu-index`): above 1000 is a GPU shared beyond it.
    gpu_used: Vec<u64>,
    /// GPU pods bound without devices written on them, or naming a device
    /// the node does not have.
    gpu_unrecorded: usize,
}

impl NodeTally {
    fn new(node: NodeInfo) -> Self {
        NodeTally {
            gpu_used: vec![0; node.spec.gpus.as_ref().map_or(0, |g| g.count)],
            node,
            requested: Resources::default(),
            pods: 0,
            checked_scalar: HashMap::new(),
            gpu_unrecorded: 0,
        }
    }

    fn add(&mut self, pod: PodInfo, ignored: &HashMap<String, IgnoredResources>) {
        if pod.terminal {
            return;
        }
        self.requested.add(&pod.requests);
        self.pods += 1;
        let skip = ignored.get(&*pod.scheduler_name);
        for (name, v) in &pod.requests.scalar {
            if !skip.is_some_and(|ig| ig.ignores(name)) {
                *self.checked_scalar.entry(name.clone()).or_default() += v;
            }
        }
        if let Some(g) = pod.gpu.as_deref() {
            // A share the node cannot size counts as whole devices, as the
            // scheduler's accounting does.
            let milli = g
                .request
                .milli_with(self.node.spec.gpus.as_ref().and_then(|s| s.memory_mib))
                .unwrap_or(gpu::MILLI_PER_GPU);
            match g.devices {
                Some(d) if d.iter().all(|i| i < self.gpu_used.len()) => {
                    for i in d.iter() {
                        self.gpu_used[i] += u64::from(milli);
                    }
                }
                _ => self.gpu_unrecorded += 1,
            }
        }
        if pod.labels.contains_key(max_instances::DEFAULT_APP_LABEL) {
            let mut pod = pod;
            pod.keep_json();
            self.node.add_pod(Arc::new(pod));
        }
    }

    /// More of some resource requested than the node has, or more pods.
    fn overcommitted(&self) -> bool {
        let (a, r) = (&self.node.spec.allocatable, &self.requested);
        r.milli_cpu > a.milli_cpu
            || r.memory > a.memory
            || r.ephemeral_storage > a.ephemeral_storage
            || self.pods > a.allowed_pod_number
            || self
                .checked_scalar
                .iter()
                .any(|(name, v)| *v > a.scalar(name))
            || self
                .gpu_used
                .iter()
                .any(|&u| u > u64::from(gpu::MILLI_PER_GPU))
    }

    /// What is free on the node (CPU, each device) as FGD reads it.
    fn gpus_free(&self) -> gpu::NodeGpus {
        gpu::NodeGpus {
            memory_mib: self.node.spec.gpus.as_ref().and_then(|s| s.memory_mib),
            model: self
                .node
                .spec
                .gpus
                .as_ref()
                .map_or_else(|| Arc::from(""), |g| g.model.clone()),
            free: self
                .gpu_used
                .iter()
                .map(|&u| {
                    u32::try_from(u64::from(gpu::MILLI_PER_GPU).saturating_sub(u)).unwrap_or(0)
                })
                .collect(),
        }
    }
}

/// The report lines of the extenders and webhooks.
pub fn extensions_text(s: &mut String, extenders: &[ExtenderReport], webhooks: &[WebhookReport]) {
    for e in extenders {
        let _ = writeln!(
            s,
            "  extender       {}: {} calls, {} failed ({} ignorable, skipped), {:.2} ms mean",
            e.extender, e.calls, e.failures, e.ignored_failures, e.mean_ms
        );
    }
    for w in webhooks {
        let _ = writeln!(
            s,
            "  webhook        {} ({}): {} calls, {} pods decided, {} declined, {} failed \
             (fallback: {}), {:.2} ms mean",
            w.url, w.profile, w.calls, w.decided, w.declined, w.failures, w.fallback, w.mean_ms
        );
    }
}

/// Cluster allocation after the run: requests of bound pods over allocatable.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Allocation {
    /// cpu, percent.
    pub cpu_percent: f64,
    /// memory, percent.
    pub memory_percent: f64,
    /// GPU (milli-GPU when the nodes offer it, else whole GPUs), percent;
    /// `null` without GPUs.
    pub gpu_percent: Option<f64>,
    /// Fragmented GPU, percent of all GPU devices: the FGD paper's
    /// Frag/Total, Σ over nodes of the free milli-GPU no common task shape
    /// can use (`shared::gpu::frag::node_fragment`, against the shapes of
    /// this run's pods covering 95 %), over 1000 × devices; `null` without
    /// GPU devices.
    pub gpu_fragmented_percent: Option<f64>,
    /// GPU pods bound without the devices they hold written on them
    /// (bound by another scheduler, or before Flotilla wrote them).
    pub gpu_pods_without_devices: usize,
}

/// Safety checks over the final cluster state.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Checks {
    /// Nodes whose bound pods request more than allocatable on any resource
    /// (pods count included). Must be 0.
    pub overcommitted_nodes: usize,
    /// Bindings the cluster accepted. Equals `podsBoundByFlotilla` when no
    /// pod was bound twice.
    pub bindings_written: u64,
    /// Pods the coordinator bound (those evicted or deleted since
    /// included).
    pub pods_bound_by_flotilla: usize,
    /// Nodes running more pods of an app than one of those pods'
    /// `scheduling.flotilla.dev/max-instances-per-node` allows (apps named
    /// by the label `app`). Must be 0.
    pub over_instance_cap_nodes: usize,
    /// Pods Flotilla bound to a node their own per-node rules forbid:
    /// `spec.nodeName` naming another node, an untolerated `NoSchedule` /
    /// `NoExecute` taint, or `nodeSelector` / required node affinity not
    /// matching (the node as it is at the end of the run). Must be 0.
    pub placements_against_pod_rules: usize,
    /// `PodScheduled=False` status writes.
    pub status_writes: u64,
    /// Events recorded (`Scheduled`, `FailedScheduling`).
    pub events_recorded: u64,
}

impl Checks {
    /// What failed, if a safety invariant does not hold: a node
    /// over-committed or over an app's instance cap, a pod placed against
    /// its own rules, or Bindings written not one per pod bound (a pod
    /// bound twice).
    #[must_use]
    pub fn violation(&self) -> Option<String> {
        (self.overcommitted_nodes > 0
            || self.over_instance_cap_nodes > 0
            || self.placements_against_pod_rules > 0
            || self.bindings_written != self.pods_bound_by_flotilla as u64)
            .then(|| {
                format!(
                    "{} over-committed node(s); {} node(s) over an app's max instances per node; \
                     {} pod(s) placed against their own rules; \
                     {} Binding(s) written for {} pod(s) bound (they must be equal)",
                    self.overcommitted_nodes,
                    self.over_instance_cap_nodes,
                    self.placements_against_pod_rules,
                    self.bindings_written,
                    self.pods_bound_by_flotilla
                )
            })
    }
}

/// Whether `pod`'s own per-node rules forbid `node`: `spec.nodeName`
/// naming another node, an untolerated `NoSchedule` / `NoExecute` taint,
/// or its `nodeSelector` / required node affinity not matching (the same
/// pure functions NodeName, TaintToleration and NodeAffinity filter with).
fn placement_forbidden(pod: &PodInfo, node: &NodeSpec) -> bool {
    pod.node_name.as_deref().is_some_and(|n| n != &*node.name)
        || flotilla_shared::taints::has_untolerated_hard_taint(&pod.tolerations, &node.taints)
        || !flotilla_shared::selector::matches_required_node_affinity(pod, node)
}

/// The report.
#[derive(Debug, Clone, Default, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct Report {
    /// Workload name.
    pub workload: String,
    /// Scheduler workers.
    pub workers: usize,
    /// Nodes in the cluster.
    pub nodes: usize,
    /// Pods in the workload.
    pub pods: usize,
    /// Pods Flotilla bound to a node.
    pub scheduled: usize,
    /// Pods that came already bound (`spec.nodeName` set in the input).
    pub already_bound: usize,
    /// Pending pods that name another `schedulerName` (left alone).
    pub other_scheduler: usize,
    /// Pods left `PodScheduled=False` (fit nowhere).
    pub unschedulable: usize,
    /// Pods neither bound nor marked unschedulable (only after a timeout).
    pub pending: usize,
    /// Pods evicted by preemption (deleted to make room for pods of higher
    /// priority; no controller re-creates them here).
    pub preempted: usize,
    /// Pods held by `spec.schedulingGates` (never tried until the gates
    /// are removed).
    pub gated: usize,
    /// Preemption: proposals the coordinator received and granted victims.
    pub preemption: Preemption,
    /// Gang scheduling (PodGroups with Coscheduling).
    pub gangs: Gangs,
    /// Nodes the coordinator could not read, with the reason (they take no
    /// pods).
    pub invalid_nodes: Vec<String>,
    /// Pods rejected as invalid input (by the cluster or the coordinator),
    /// with the reason.
    pub invalid: Vec<String>,
    /// Rows/objects skipped while loading the workload.
    pub load_warnings: Vec<String>,
    /// Seconds from the first pod submitted to the last pod resolved (its
    /// Binding, or the last attempt that found it unschedulable).
    pub scheduling_seconds: f64,
    /// Seconds for the whole run, setup included.
    pub wall_seconds: f64,
    /// Pods bound per second of `schedulingSeconds`.
    pub pods_per_second: f64,
    /// Queue-add to bind latency.
    pub latency_ms: Latency,
    /// Bind arbitration.
    pub conflicts: Conflicts,
    /// Scheduling cycles per pod Flotilla had to place; `null` when the
    /// workers ran as separate processes (each prints its own counters).
    pub attempts_per_pod: Option<f64>,
    /// Most common FitError reasons among unschedulable pods.
    pub top_unschedulable_reasons: Vec<ReasonCount>,
    /// Per-worker figures.
    pub pods_per_worker: Vec<WorkerReport>,
    /// Allocation after the run.
    pub allocation: Allocation,
    /// Safety checks.
    pub checks: Checks,
    /// Whether the run hit its timeout.
    pub timed_out: bool,
    /// Whether a signal (SIGINT, SIGTERM) stopped the run before every pod
    /// was resolved: the rest are counted pending.
    #[serde(skip_serializing_if = "std::ops::Not::not")]
    pub stopped_by_signal: bool,
    /// The most frequent errors of pending pods' last attempts (an extender
    /// or webhook failing, a Binding rejected): `PodScheduled=False` with
    /// reason `SchedulerError`.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub top_errors: Vec<ReasonCount>,
    /// HTTP extenders' calls (empty without `extenders`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extenders: Vec<ExtenderReport>,
    /// Placement webhooks' calls (empty without `placementWebhook`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<WebhookReport>,
}

/// What [`build`] needs.
pub struct Inputs<'a> {
    /// Workload name.
    pub workload_name: String,
    /// Worker count.
    pub workers: usize,
    /// The cluster after the run.
    pub cluster: &'a Arc<EmbeddedCluster>,
    /// The coordinator after the run.
    pub coordinator: &'a Arc<Coordinator>,
    /// Pods the cluster refused.
    pub rejected: Vec<String>,
    /// Loader warnings.
    pub warnings: Vec<String>,
    /// When pods started being submitted.
    pub submitted: Instant,
    /// When the run settled.
    pub scheduling_done: Instant,
    /// When the run started.
    pub started: Instant,
    /// Whether it timed out.
    pub timed_out: bool,
    /// Whether a signal stopped it.
    pub stopped_by_signal: bool,
    /// Per-worker figures (pods filled in by [`build`]).
    pub worker_reports: Vec<WorkerReport>,
    /// Extender and webhook figures ([`extension_reports`]).
    pub extensions: (Vec<ExtenderReport>, Vec<WebhookReport>),
    /// Per profile (`schedulerName`), the extended resources its
    /// NodeResourcesFit leaves unchecked (something else accounts for them,
    /// e.g. an extender with `ignoredByScheduler`): the over-commit check
    /// leaves them out for that profile's pods too.
    pub ignored_resources: HashMap<String, IgnoredResources>,
}

/// Each pod bound by the coordinator: milliseconds from when it first saw
/// the pod to its Binding, sorted ascending (for [`percentile`]).
#[must_use]
pub fn bind_latencies_ms(records: &[flotilla_coordinator::PodRecord]) -> Vec<f64> {
    let mut lat: Vec<f64> = records
        .iter()
        .filter_map(|r| {
            r.bound_at
                .map(|b| b.duration_since(r.first_seen).as_secs_f64() * 1000.0)
        })
        .collect();
    lat.sort_by(f64::total_cmp);
    lat
}

/// The reasons of a FitError message (`0/N nodes are available: 3 A, 2 B.`).
#[must_use]
pub fn fit_error_reasons(message: &str) -> Vec<String> {
    let Some((_, rest)) = message.split_once("nodes are available:") else {
        return vec![message.to_owned()];
    };
    let hist = rest
        .split(". ")
        .next()
        .unwrap_or(rest)
        .trim()
        .trim_end_matches('.');
    hist.split(", ")
        .filter_map(|e| e.split_once(' ').map(|(_, r)| r.to_owned()))
        .collect()
}

/// The five most frequent entries, most frequent first (ties by text).
fn top_counts(counts: HashMap<String, usize>) -> Vec<ReasonCount> {
    let mut top: Vec<ReasonCount> = counts
        .into_iter()
        .map(|(reason, pods)| ReasonCount { reason, pods })
        .collect();
    top.sort_by(|a, b| b.pods.cmp(&a.pods).then_with(|| a.reason.cmp(&b.reason)));
    top.truncate(5);
    top
}

#[allow(clippy::cast_precision_loss)]
fn pct(used: i64, total: i64) -> f64 {
    if total <= 0 {
        0.0
    } else {
        (used as f64) * 100.0 / (total as f64)
    }
}

/// Builds the report.
#[must_use]
#[allow(clippy::cast_precision_loss, clippy::too_many_lines)]
pub fn build(i: &Inputs<'_>) -> Report {
    let summary = i.coordinator.summary();
    let mut invalid = i.rejected.clone();
    invalid.extend(summary.invalid.iter().cloned());

    // Final cluster state.
    let mut nodes: HashMap<String, NodeTally> = HashMap::new();
    for n in i.cluster.nodes() {
        if let Ok(spec) = NodeSpec::from_node(n) {
            nodes.insert(
                spec.name.to_string(),
                NodeTally::new(NodeInfo::new(Arc::new(spec))),
            );
        }
    }
    let (mut scheduled, mut unschedulable, mut pending) = (0usize, 0usize, 0usize);
    let mut pod_count = 0;
    let mut reasons: HashMap<String, usize> = HashMap::new();
    let mut errors: HashMap<String, usize> = HashMap::new();
    // Every pod's shape, for the fragmentation's target workload.
    let mut shapes: HashMap<gpu::frag::TaskShape, u64> = HashMap::new();
    // One pod decoded at a time: the report of a 100,000-pod run must not
    // hold 100,000 `Pod`s at once (each bound pod is kept as JSON).
    i.cluster.for_each_pod(|p| {
        pod_count += 1;
        let node = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let info = PodInfo::from_pod(p.clone());
        if let Ok(info) = &info {
            *shapes
                .entry(flotilla_scheduler::plugins::gpu_share::shape_of(info))
                .or_default() += 1;
        }
        if let Some(node) = node {
            scheduled += 1;
            if let (Some(n), Ok(info)) = (nodes.get_mut(&node), info) {
                n.add(info, &i.ignored_resources);
            }
            return;
        }
        let cond = p
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| {
                c.iter()
                    .find(|c| c.type_ == "PodScheduled" && c.status == "False")
            });
        match cond {
            // The last attempt failed with an error: still pending (retried
            // after its backoff), and the error is why.
            Some(c) if c.reason.as_deref() == Some("SchedulerError") => {
                pending += 1;
                *errors
                    .entry(c.message.clone().unwrap_or_default())
                    .or_default() += 1;
            }
            Some(c) => {
                unschedulable += 1;
                for r in fit_error_reasons(c.message.as_deref().unwrap_or_default()) {
                    *reasons.entry(r).or_default() += 1;
                }
            }
            None => pending += 1,
        }
    });
    let pending =
        pending.saturating_sub(summary.invalid.len() + summary.other_scheduler + summary.gated);
    let top = top_counts(reasons);
    let top_errors = top_counts(errors);

    // Over-commit check and allocation, with the shared resource model.
    let mut over = 0;
    let (mut cpu, mut cpu_alloc, mut mem, mut mem_alloc) = (0i64, 0i64, 0i64, 0i64);
    let gpu_res = if nodes
        .values()
        .any(|n| n.node.spec.allocatable.scalar(RESOURCE_GPU_MILLI) > 0)
    {
        Some(RESOURCE_GPU_MILLI)
    } else if nodes
        .values()
        .any(|n| n.node.spec.allocatable.scalar(NVIDIA_GPU) > 0)
    {
        Some(NVIDIA_GPU)
    } else {
        None
    };
    let (mut gpu, mut gpu_alloc) = (0i64, 0i64);
    let target =
        gpu::frag::TargetWorkload::from_counts(shapes.into_iter(), gpu::frag::DEFAULT_COVERAGE);
    let (mut frag, mut devices, mut unrecorded) = (0.0f64, 0usize, 0usize);
    for n in nodes.values() {
        if n.gpu_used.is_empty() {
            continue;
        }
        devices += n.gpu_used.len();
        unrecorded += n.gpu_unrecorded;
        let gpus = n.gpus_free();
        let free = gpu::frag::NodeFree {
            cpu_milli: n.node.spec.allocatable.milli_cpu - n.requested.milli_cpu,
            memory: gpu::frag::NodeFree::ANY_MEMORY,
            gpus: &gpus,
        };
        frag += gpu::frag::node_fragment(&free, &target);
    }
    for n in nodes.values() {
        let (a, r) = (&n.node.spec.allocatable, &n.requested);
        if n.overcommitted() {
            over += 1;
        }
        cpu += r.milli_cpu;
        cpu_alloc += a.milli_cpu;
        mem += r.memory;
        mem_alloc += a.memory;
        if let Some(g) = gpu_res {
            gpu += r.scalar(g);
            gpu_alloc += a.scalar(g);
        }
    }

    // Timing from the coordinator's records.
    let records = i.coordinator.records();
    let against_rules = records
        .iter()
        .filter(|r| r.bound_at.is_some())
        .filter_map(|r| match &r.phase {
            flotilla_coordinator::PodPhase::Bound(n) => Some((r, nodes.get(&**n)?)),
            _ => None,
        })
        .filter(|(r, t)| placement_forbidden(&r.info, &t.node.spec))
        .count();
    let lat = bind_latencies_ms(&records);
    let bound_by_us = lat.len();
    let already_bound = scheduled.saturating_sub(bound_by_us);
    // Until the last pod was resolved: its Binding, or the last attempt that
    // found a pod unschedulable (so unschedulable work is not left out).
    let last_bind = records.iter().filter_map(|r| r.bound_at).max();
    let resolved_at = match (last_bind, summary.last_activity) {
        (Some(b), Some(a)) => Some(b.max(a)),
        (b, a) => b.or(a),
    };
    let sched_secs = resolved_at
        .unwrap_or(i.scheduling_done)
        .saturating_duration_since(i.submitted)
        .as_secs_f64();
    let mut per_worker = i.worker_reports.clone();
    for (name, class, bound) in &summary.workers {
        match per_worker.iter_mut().find(|w| w.worker == **name) {
            Some(w) => w.pods += *bound,
            None => per_worker.push(WorkerReport {
                worker: name.to_string(),
                class: class.to_string(),
                pods: *bound,
                ..WorkerReport::default()
            }),
        }
    }
    let attempts: u64 = per_worker.iter().map(|w| w.attempts).sum();
    let c = summary.counters;
    let (bindings, status_writes) = i.cluster.write_counts();
    let (evicted, evicted_bound_by_us) = i.cluster.evicted_counts();
    Report {
        workload: i.workload_name.clone(),
        workers: i.workers,
        nodes: nodes.len(),
        pods: pod_count + i.rejected.len() + evicted,
        scheduled: bound_by_us,
        already_bound,
        other_scheduler: summary.other_scheduler,
        unschedulable,
        pending,
        preempted: evicted,
        gated: summary.gated,
        preemption: Preemption {
            attempts: c.preemption_attempts,
            victims: c.preemption_victims,
        },
        gangs: Gangs {
            scheduled: c.gangs_scheduled,
            timeouts: c.gang_timeouts,
        },
        invalid_nodes: summary.invalid_nodes.clone(),
        invalid,
        load_warnings: i.warnings.clone(),
        scheduling_seconds: sched_secs,
        wall_seconds: i.started.elapsed().as_secs_f64(),
        pods_per_second: if sched_secs > 0.0 {
            bound_by_us as f64 / sched_secs
        } else {
            0.0
        },
        latency_ms: Latency {
            p50: percentile(&lat, 50.0),
            p90: percentile(&lat, 90.0),
            p99: percentile(&lat, 99.0),
            max: lat.last().copied().unwrap_or(0.0),
        },
        conflicts: Conflicts {
            count: c.conflicts,
            proposals: c.proposals,
            fraction: if c.proposals == 0 {
                0.0
            } else {
                c.conflicts as f64 / c.proposals as f64
            },
            alternatives: c.alternatives_granted,
        },
        attempts_per_pod: {
            // Pods Flotilla had to place (not pre-bound, not another scheduler's).
            let ours = bound_by_us + evicted_bound_by_us + unschedulable + pending;
            (!i.worker_reports.is_empty() && ours > 0).then(|| attempts as f64 / ours as f64)
        },
        top_unschedulable_reasons: top,
        top_errors,
        pods_per_worker: per_worker,
        allocation: Allocation {
            cpu_percent: pct(cpu, cpu_alloc),
            memory_percent: pct(mem, mem_alloc),
            gpu_percent: gpu_res.map(|_| pct(gpu, gpu_alloc)),
            gpu_fragmented_percent: (devices > 0)
                .then(|| frag * 100.0 / (devices as f64 * f64::from(gpu::MILLI_PER_GPU))),
            gpu_pods_without_devices: unrecorded,
        },
        checks: Checks {
            overcommitted_nodes: over,
            bindings_written: bindings,
            pods_bound_by_flotilla: bound_by_us
                + evicted_bound_by_us
                + i.cluster.deleted_bound_count(),
            over_instance_cap_nodes: max_instances::overfull_nodes(
                nodes.values().map(|n| &n.node),
                max_instances::DEFAULT_APP_LABEL,
            ),
            placements_against_pod_rules: against_rules,
            status_writes,
            events_recorded: i.cluster.events_recorded(),
        },
        timed_out: i.timed_out,
        stopped_by_signal: i.stopped_by_signal,
        extenders: i.extensions.0.clone(),
        webhooks: i.extensions.1.clone(),
    }
}

impl Report {
    /// The human-readable form.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Flotilla run: {}", self.workload);
        let _ = writeln!(
            s,
            "  cluster        {} nodes, {} pods, {} workers",
            self.nodes, self.pods, self.workers
        );
        let mut extra = String::new();
        if self.preempted > 0 {
            let _ = write!(extra, ", {} preempted", self.preempted);
        }
        if self.gated > 0 {
            let _ = write!(extra, ", {} gated", self.gated);
        }
        let _ = writeln!(
            s,
            "  pods           {} scheduled, {} unschedulable{extra}, {} pending, {} invalid",
            self.scheduled,
            self.unschedulable,
            self.pending,
            self.invalid.len()
        );
        if self.preemption.attempts > 0 {
            let _ = writeln!(
                s,
                "  preemption     {} attempts, {} victims evicted",
                self.preemption.attempts, self.preemption.victims
            );
        }
        if self.gangs.scheduled + self.gangs.timeouts > 0 {
            let _ = writeln!(
                s,
                "  gangs          {} scheduled whole, {} timed out",
                self.gangs.scheduled, self.gangs.timeouts
            );
        }
        if self.already_bound + self.other_scheduler > 0 {
            let _ = writeln!(
                s,
                "                 {} already bound in the input, {} left to other schedulers",
                self.already_bound, self.other_scheduler
            );
        }
        let _ = writeln!(
            s,
            "  throughput     {:.0} pods/s ({:.2} s scheduling, {:.2} s wall)",
            self.pods_per_second, self.scheduling_seconds, self.wall_seconds
        );
        if self.scheduled > 0 {
            let _ = writeln!(
                s,
                "  latency        p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms (queue add to bind)",
                self.latency_ms.p50, self.latency_ms.p90, self.latency_ms.p99, self.latency_ms.max
            );
        } else {
            let _ = writeln!(s, "  latency        n/a (no pod bound)");
        }
        let attempts = self
            .attempts_per_pod
            .map_or_else(|| "n/a".to_owned(), |a| format!("{a:.2}"));
        let _ = writeln!(
            s,
            "  conflicts      {} of {} proposals ({:.2} %; {} more bound to an alternative), {attempts} attempts per pod",
            self.conflicts.count,
            self.conflicts.proposals,
            self.conflicts.fraction * 100.0,
            self.conflicts.alternatives,
        );
        let gpu = self
            .allocation
            .gpu_percent
            .map_or_else(|| "n/a".to_owned(), |g| format!("{g:.1} %"));
        let frag = self
            .allocation
            .gpu_fragmented_percent
            .map_or_else(String::new, |f| format!(" allocated, {f:.1} % fragmented"));
        let _ = writeln!(
            s,
            "  allocation     cpu {:.1} %, memory {:.1} %, gpu {gpu}{frag}",
            self.allocation.cpu_percent, self.allocation.memory_percent
        );
        let _ = writeln!(s, "  workers");
        for w in &self.pods_per_worker {
            if w.in_process {
                let _ = writeln!(
                    s,
                    "    {:<12} {:<7} {:>6} pods  {:>6} attempts  {:>5} conflicts  {:>5} alternatives  {:>5} fallbacks  busy {:.2} s",
                    w.worker,
                    w.class,
                    w.pods,
                    w.attempts,
                    w.conflicts,
                    w.alternatives,
                    w.fallbacks,
                    w.busy_seconds
                );
            } else {
                let _ = writeln!(
                    s,
                    "    {:<12} {:<7} {:>6} pods  (separate process: see its own output)",
                    w.worker, w.class, w.pods
                );
            }
        }
        if !self.top_errors.is_empty() {
            let _ = writeln!(s, "  errors of pending pods' last attempts (pods: error)");
            for r in &self.top_errors {
                let _ = writeln!(s, "    {:>6}: {}", r.pods, r.reason);
            }
        }
        extensions_text(&mut s, &self.extenders, &self.webhooks);
        if !self.top_unschedulable_reasons.is_empty() {
            let _ = writeln!(s, "  top reasons for unschedulable pods (pods: reason)");
            for r in &self.top_unschedulable_reasons {
                let _ = writeln!(s, "    {:>6}: {}", r.pods, r.reason);
            }
        }
        let _ = writeln!(
            s,
            "  checks         {} over-committed nodes, {} over an instance cap, {} against their pods' rules, {} bindings for {} pods bound, {} status writes, {} events",
            self.checks.overcommitted_nodes,
            self.checks.over_instance_cap_nodes,
            self.checks.placements_against_pod_rules,
            self.checks.bindings_written,
            self.checks.pods_bound_by_flotilla,
            self.checks.status_writes,
            self.checks.events_recorded
        );
        for inv in self.invalid.iter().take(10) {
            let _ = writeln!(s, "  invalid: {inv}");
        }
        if self.invalid.len() > 10 {
            let _ = writeln!(s, "  ... and {} more invalid pods", self.invalid.len() - 10);
        }
        if !self.load_warnings.is_empty() {
            let _ = writeln!(
                s,
                "  {} input rows/objects skipped, e.g. {}",
                self.load_warnings.len(),
                self.load_warnings[0]
            );
        }
        for n in &self.invalid_nodes {
            let _ = writeln!(s, "  invalid node: {n}");
        }
        if self.stopped_by_signal {
            let _ = writeln!(
                s,
                "  STOPPED by a signal with {} pod(s) pending",
                self.pending
            );
        }
        if self.timed_out {
            let _ = writeln!(
                s,
                "  TIMED OUT (or every worker stopped) with {} pod(s) pending",
                self.pending
            );
        }
        s
    }
}

/// The devices a bound GPU pod holds (as written on it) and its share of
/// each, milli-GPU, on devices of `device_memory_mib` (a share sized by
/// memory the node cannot size: 1000); `None` for a pod asking for no GPU
/// or without devices written.
fn gpu_placement(
    p: &k8s_openapi::api::core::v1::Pod,
    device_memory_mib: Option<u32>,
) -> Option<(gpu::DeviceSet, u32)> {
    let requests = flotilla_shared::resources::pod_requests(p.spec.as_ref()?).ok()?;
    let annotations = p.metadata.annotations.as_ref();
    let req = gpu::dialect::pod_request(annotations, &requests.requests).ok()??;
    let devices = gpu::dialect::pod_devices(annotations).ok()??;
    let milli = req
        .milli_with(device_memory_mib)
        .unwrap_or(gpu::MILLI_PER_GPU);
    Some((devices, milli))
}

/// Writes every pod's outcome as JSON Lines, in submission order:
/// `{"pod": "namespace/name", "node": "node-name"}` or `"node": null`; a
/// bound GPU pod adds the devices it holds and its share of each,
/// `"gpus": [0, 3], "gpuMilli": 1000`, so that anyone can check that no
/// device is shared beyond 1000 milli-GPU.
///
/// # Errors
/// I/O errors creating or writing `path`.
pub fn write_placements(cluster: &EmbeddedCluster, path: &Path) -> std::io::Result<()> {
    let mut out = std::io::BufWriter::new(std::fs::File::create(path)?);
    let mut written = Ok(());
    // Each GPU node's device memory (label `nvidia.com/gpu.memory`).
    let device_memory: std::collections::HashMap<String, u32> = cluster
        .nodes()
        .iter()
        .filter_map(|n| {
            let m = gpu::dialect::node_gpu_memory(n.metadata.labels.as_ref()).ok()??;
            Some((n.metadata.name.clone()?, m))
        })
        .collect();
    cluster.for_each_pod(|p| {
        if written.is_err() {
            return;
        }
        // Written by hand to keep the documented key order (pod, node).
        let pod = serde_json::Value::String(format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap_or_default()
        ));
        let node_name = p.spec.as_ref().and_then(|s| s.node_name.clone());
        let gpus = node_name
            .as_ref()
            .and_then(|n| gpu_placement(&p, device_memory.get(n).copied()));
        let node = serde_json::Value::from(node_name);
        written = match gpus {
            Some((devices, milli)) => writeln!(
                out,
                "{{\"pod\":{pod},\"node\":{node},\"gpus\":{},\"gpuMilli\":{milli}}}",
                serde_json::Value::from(devices.iter().collect::<Vec<_>>())
            ),
            None => writeln!(out, "{{\"pod\":{pod},\"node\":{node}}}"),
        };
    });
    written?;
    // Pods preemption evicted: no node any more.
    for p in cluster.evicted_pods() {
        let pod = serde_json::Value::String(format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap_or_default()
        ));
        writeln!(out, "{{\"pod\":{pod},\"node\":null,\"preempted\":true}}")?;
    }
    out.flush()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_safety_violation_names_what_failed() {
        let ok = Checks {
            bindings_written: 3,
            pods_bound_by_flotilla: 3,
            ..Checks::default()
        };
        assert_eq!(ok.violation(), None);
        let twice = Checks {
            bindings_written: 4,
            ..ok.clone()
        };
        let v = twice.violation().expect("a pod bound twice");
        assert!(v.contains("4 Binding(s) written for 3 pod(s)"), "{v}");
        let forbidden = Checks {
            placements_against_pod_rules: 1,
            ..ok.clone()
        };
        let v = forbidden.violation().expect("a pod against its rules");
        assert!(v.contains("1 pod(s) placed against their own rules"), "{v}");
        let over = Checks {
            overcommitted_nodes: 1,
            ..ok
        };
        assert!(
            over.violation()
                .expect("over-commit")
                .starts_with("1 over-committed")
        );
    }

    #[test]
    fn a_placement_is_forbidden_by_the_pods_own_node_rules() {
        use flotilla_shared::testing::{NodeBuilder, PodBuilder};
        let spec = |n: NodeBuilder| NodeSpec::from_node(Arc::new(n.build())).expect("valid node");
        let pod = |p: PodBuilder| PodInfo::from_pod(Arc::new(p.build())).expect("valid pod");
        let zone_a = spec(NodeBuilder::new("a").label("zone", "a"));
        let tainted = spec(NodeBuilder::new("t").taint("gpu", "yes", "NoSchedule"));
        let plain = pod(PodBuilder::new("p"));
        assert!(!placement_forbidden(&plain, &zone_a));
        assert!(placement_forbidden(&plain, &tainted));
        let tolerating = pod(PodBuilder::new("p").toleration("gpu", "Equal", "yes", "NoSchedule"));
        assert!(!placement_forbidden(&tolerating, &tainted));
        let wants_b = pod(PodBuilder::new("p").node_selector("zone", "b"));
        assert!(placement_forbidden(&wants_b, &zone_a));
        let pinned = pod(PodBuilder::new("p").node_name("t"));
        assert!(placement_forbidden(&pinned, &zone_a));
    }

    #[test]
    fn fit_error_reasons_are_split_out_of_the_message() {
        assert_eq!(
            fit_error_reasons(
                "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 Insufficient cpu."
            ),
            ["node(s) had untolerated taint(s)", "Insufficient cpu"]
        );
        assert_eq!(
            fit_error_reasons(
                "0/3 nodes are available: 1 Insufficient cpu. preemption: 0/3 nodes are available: 3 x."
            ),
            ["Insufficient cpu"]
        );
    }

    #[test]
    fn percentiles_use_nearest_rank() {
        let v: Vec<f64> = (1..=100).map(f64::from).collect();
        assert!((percentile(&v, 50.0) - 50.0).abs() < f64::EPSILON);
        assert!((percentile(&v, 99.0) - 99.0).abs() < f64::EPSILON);
        assert!((percentile(&[7.0], 99.0) - 7.0).abs() < f64::EPSILON);
        assert!(percentile(&[], 50.0).abs() < f64::EPSILON);
    }
}
