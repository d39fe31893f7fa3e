//! The benchmark scenarios: upstream `scheduler_perf` workloads (shapes in
//! `../shared/reference/scheduler-perf-workloads.md`), the openb trace, and
//! a 30,000-node cluster offered pods at a fixed rate after Gödel's recipe.
//!
//! Every scenario is a [`Workload`] whose pods before the last barrier are
//! the *init* pods (they must all be resolved first, as upstream's
//! `initPods`) and whose pods after it, plus the timeline's foreground
//! `CreatePod`s, are the *measured* pods. Churn is background timeline ops.

use std::collections::BTreeMap;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{
    Affinity, Container, PersistentVolumeClaimVolumeSource, Pod, PodAffinityTerm, PodAntiAffinity,
    ResourceRequirements, TopologySpreadConstraint, Volume,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use flotilla_scheduler::config::SchedulerConfig;
use flotilla_scheduler::framework::PluginRef;
use flotilla_scheduler::plugins::names;
use flotilla_shared::testing::volumes::{PvBuilder, PvcBuilder, csi_node, storage_class};
use flotilla_shared::volumes::VolumeObject;

use crate::workload::{
    self, LABEL_HOSTNAME, LABEL_WORKLOAD_CLASS, OnBadInput, Op, PAUSE_IMAGE, TimedOp,
    WORKLOAD_CLASS_BATCH, WORKLOAD_CLASS_ONLINE, Workload, pending_pod, ready_node, resource_list,
};

/// Zone label of the topology-spreading nodes (`moon-1`, `moon-2`,
/// `moon-3`, round-robin, as upstream's `labelNodePrepareStrategy`).
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";

/// How a scenario's figures compare upstream: the `threshold` of the same
/// `scheduler_perf` workload (average pods/s on upstream's CI machine), a
/// regression floor rather than a portable target.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct UpstreamFloor {
    /// Pods per second.
    pub pods_per_second: f64,
    /// Which workload and config version it comes from.
    pub source: &'static str,
}

/// A named scenario.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ScenarioName {
    /// SchedulingBasic 5000Nodes_10000Pods: 5,000 default nodes, 1,000 init
    /// and 10,000 measured pods of 100m / 500 Mi, created up front.
    SchedulingBasic,
    /// SchedulingBasic 5000Nodes_50000Pods: 5,000 init, 50,000 measured.
    SchedulingBasic50k,
    /// SchedulingPodAntiAffinity: 5,000 nodes, 1,000 init + 2,000 measured
    /// pods with required anti-affinity to each other on the hostname (at
    /// most one per node).
    PodAntiAffinity,
    /// TopologySpreading: 5,000 nodes in zones moon-1/2/3, 5,000 init pods,
    /// 5,000 measured pods with a hard `maxSkew: 5` spread over zones.
    TopologySpreading,
    /// SchedulingWithMixedChurn: 5,000 nodes, 10,000 measured pods while,
    /// every second, a zero-capacity node and an unschedulable 9-CPU
    /// high-priority pod are recreated.
    MixedChurn,
    /// PreemptionBasic (the older 500-node case): 2,000 low-priority init
    /// pods fill 500 nodes; 500 high-priority pods each preempt three.
    PreemptionBasic,
    /// Unschedulable: 5,000 nodes, 100 init, 10,000 measured pods while one
    /// unschedulable 9-CPU high-priority pod is added every 200 ms.
    Unschedulable,
    /// The Alibaba GPU trace v2023 (openb): 1,523 nodes, 8,152 pods, all
    /// measured, in trace order.
    Openb,
    /// After Gödel's published recipe: 30,000 default nodes, 100,000 pods
    /// of 100m / 500 Mi offered at a fixed rate (`--rate`, default 5,000
    /// pods/s).
    Godel30k,
    /// The kube-lab README's upstream bench shape (100 nodes of 8 CPU /
    /// 16 Gi / 110 pods, 5,000 pods of 100m / 64 Mi, all at once, no init
    /// pods), so `flotilla bench --kubeconfig` figures compare with its
    /// kube-scheduler figures.
    KubeLab,
    /// The Alibaba GPU trace v2025 (disaggregated DLRM inference): 7,280
    /// initial pods, then 16,591 arrivals and 14,993 deletions replayed at
    /// trace time / `--speedup` (default 100,000: about 27 s), on synthetic
    /// CN and HN pools sized from the replayed peak, with the trace's
    /// `max_instance_per_node` enforced by `MaxInstancesPerNode`.
    Dlrm,
    /// SchedulingCSIPVs (upstream `volumes/`): 5,000 nodes each attaching
    /// at most 39 volumes of one CSI driver (CSINode), 5,000 init and 5,000
    /// measured pods of 100m / 500 Mi, each with its own claim bound to its
    /// own CSI PV (NodeVolumeLimits counts them).
    CsiPvs,
    /// Flotilla's `WaitForFirstConsumer` case: 5,000 nodes, 1,000 init
    /// pods without volumes, then 5,000 measured pods each with its own
    /// unbound claim of a `WaitForFirstConsumer` class with a provisioner:
    /// VolumeBinding's Reserve and PreBind run for every pod (the embedded
    /// cluster's stand-in provisioner binds the claim at once).
    WffcPvs,
}

impl ScenarioName {
    /// Every scenario, in the order of `docs/benchmarks.md`.
    pub const ALL: [ScenarioName; 13] = [
        Self::SchedulingBasic,
        Self::SchedulingBasic50k,
        Self::PodAntiAffinity,
        Self::TopologySpreading,
        Self::MixedChurn,
        Self::PreemptionBasic,
        Self::Unschedulable,
        Self::Openb,
        Self::Godel30k,
        Self::KubeLab,
        Self::Dlrm,
        Self::CsiPvs,
        Self::WffcPvs,
    ];

    /// The kebab-case name (`scheduling-basic`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Self::SchedulingBasic => "scheduling-basic",
            Self::SchedulingBasic50k => "scheduling-basic-50k",
            Self::PodAntiAffinity => "pod-anti-affinity",
            Self::TopologySpreading => "topology-spreading",
            Self::MixedChurn => "mixed-churn",
            Self::PreemptionBasic => "preemption-basic",
            Self::Unschedulable => "unschedulable",
            Self::Openb => "openb",
            Self::Godel30k => "godel-30k",
            Self::KubeLab => "kube-lab",
            Self::Dlrm => "dlrm",
            Self::CsiPvs => "csi-pvs",
            Self::WffcPvs => "wffc-pvs",
        }
    }

    /// Upstream's threshold for the same shape, if it has one.
    #[must_use]
    pub fn upstream_floor(self) -> Option<UpstreamFloor> {
        let (pods_per_second, source) = match self {
            Self::SchedulingBasic => (680.0, "SchedulingBasic 5000Nodes_10000Pods (misc, new)"),
            Self::SchedulingBasic50k => (810.0, "SchedulingBasic 5000Nodes_50000Pods (misc, new)"),
            Self::PodAntiAffinity => (60.0, "SchedulingPodAntiAffinity 5000Nodes (affinity)"),
            Self::TopologySpreading => (460.0, "TopologySpreading 5000Nodes (topology_spreading)"),
            Self::MixedChurn => (
                710.0,
                "SchedulingWithMixedChurn 5000Nodes_10000Pods (misc, new)",
            ),
            Self::PreemptionBasic => (18.0, "PreemptionBasic 500Nodes (misc, old)"),
            Self::Unschedulable => (590.0, "Unschedulable 5000Nodes_10000Pods (misc, new)"),
            Self::CsiPvs => (100.0, "SchedulingCSIPVs 5000Nodes (volumes)"),
            Self::Openb | Self::Godel30k | Self::KubeLab | Self::Dlrm | Self::WffcPvs => {
                return None;
            }
        };
        Some(UpstreamFloor {
            pods_per_second,
            source,
        })
    }
}

impl std::str::FromStr for ScenarioName {
    type Err = String;

    /// Parses a kebab-case name; the error lists the valid ones.
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        Self::ALL
            .into_iter()
            .find(|n| n.as_str() == s)
            .ok_or_else(|| {
                let names: Vec<&str> = Self::ALL.iter().map(|n| n.as_str()).collect();
                format!("unknown scenario {s:?}; one of: {}", names.join(", "))
            })
    }
}

impl std::fmt::Display for ScenarioName {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Knobs of [`build`].
#[derive(Debug, Clone)]
pub struct ScenarioParams {
    /// Multiplies every node and pod count (at least one of each is kept):
    /// `0.01` for a quick look, `1.0` for upstream's sizes.
    pub scale: f64,
    /// Pods per second offered by [`ScenarioName::Godel30k`].
    pub rate: f64,
    /// Where the openb CSV files are (`None`: beside the project).
    pub openb_dir: Option<std::path::PathBuf>,
    /// Where the DLRM trace is (`None`: beside the project).
    pub dlrm_dir: Option<std::path::PathBuf>,
    /// Trace seconds per wall second of the [`ScenarioName::Dlrm`] replay
    /// (default [`workload::dlrm::DEFAULT_SPEEDUP`]).
    pub speedup: f64,
}

impl Default for ScenarioParams {
    fn default() -> Self {
        ScenarioParams {
            scale: 1.0,
            rate: 5000.0,
            openb_dir: None,
            dlrm_dir: None,
            speedup: workload::dlrm::DEFAULT_SPEEDUP,
        }
    }
}

/// Why a scenario could not be built.
#[derive(Debug, thiserror::Error)]
pub enum ScenarioError {
    /// `scale` or `rate` out of range.
    #[error("{0}")]
    Params(String),
    /// The openb trace is missing or malformed.
    #[error("openb trace: {0}")]
    Openb(#[from] workload::LoadError),
    /// The openb trace is not beside the project.
    #[error(
        "openb trace not found (looked for ../shared/data/alibaba-gpu-v2023-openb beside the \
         project); pass --openb-dir"
    )]
    OpenbMissing,
    /// The DLRM trace is missing or malformed.
    #[error("DLRM trace: {0}")]
    Dlrm(workload::LoadError),
    /// The DLRM trace is not beside the project.
    #[error(
        "DLRM trace not found (looked for ../shared/data/alibaba-gpu-v2025-dlrm beside the \
         project); pass --dlrm-dir"
    )]
    DlrmMissing,
}

/// A scenario, built.
#[derive(Debug, Clone)]
pub struct Scenario {
    /// Which.
    pub name: ScenarioName,
    /// One line on its shape, with the counts after scaling.
    pub description: String,
    /// The workload to run.
    pub workload: Workload,
    /// Pods resolved before the measured phase.
    pub init_pods: usize,
    /// Pods measured.
    pub measured_pods: usize,
    /// Plugins the scenario needs beyond the default profile (registry
    /// names), enabled at `multiPoint` in every profile of the bench's
    /// configuration that does not name them yet ([`Scenario::configure`]).
    pub plugins: Vec<&'static str>,
}

impl Scenario {
    /// `config` with [`Scenario::plugins`] enabled in every profile that
    /// does not enable or disable them already.
    #[must_use]
    pub fn configure(&self, mut config: SchedulerConfig) -> SchedulerConfig {
        for p in &mut config.profiles {
            for name in &self.plugins {
                let mut sets =
                    std::iter::once(&p.plugins.multi_point).chain(p.plugins.points.values());
                let named = sets.any(|set| {
                    set.enabled.iter().any(|r| r.name == *name)
                        || set.disabled.iter().any(|d| d == name)
                });
                if !named {
                    p.plugins.multi_point.enabled.push(PluginRef::new(name, 0));
                }
            }
        }
        config
    }
}

/// `n × scale`, rounded, at least 1 unless `n` is 0.
fn scaled(n: usize, scale: f64) -> usize {
    if n == 0 {
        return 0;
    }
    #[allow(
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss,
        clippy::cast_precision_loss
    )]
    let v = (n as f64 * scale).round() as usize;
    v.max(1)
}

/// A pod of `cpu` / `memory` requests (requests only), alternating
/// between the online (even `i`) and batch pools.
fn template_pod(namespace: &str, name: &str, cpu: &str, memory: &str, i: usize) -> Pod {
    let container = Container {
        name: "pause".to_owned(),
        image: Some(PAUSE_IMAGE.to_owned()),
        resources: Some(ResourceRequirements {
            requests: Some(resource_list([
                ("cpu", cpu.to_owned()),
                ("memory", memory.to_owned()),
            ])),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    let mut pod = pending_pod(namespace, name, container);
    let class = if i.is_multiple_of(2) {
        WORKLOAD_CLASS_ONLINE
    } else {
        WORKLOAD_CLASS_BATCH
    };
    labels(&mut pod).insert(LABEL_WORKLOAD_CLASS.to_owned(), class.to_owned());
    pod
}

fn labels(pod: &mut Pod) -> &mut BTreeMap<String, String> {
    pod.metadata.labels.get_or_insert_with(BTreeMap::new)
}

/// Upstream `pod-default`: 100m / 500 Mi.
fn default_pod(namespace: &str, name: &str, i: usize) -> Pod {
    template_pod(namespace, name, "100m", "500Mi", i)
}

/// Upstream `node-default`: 4 CPU / 32 Gi / 110 pods, Ready, `extra`
/// labels.
fn default_node(name: &str, extra: &[(&str, &str)]) -> k8s_openapi::api::core::v1::Node {
    ready_node(
        name,
        extra
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect(),
        resource_list([
            ("cpu", "4".to_owned()),
            ("memory", "32Gi".to_owned()),
            ("pods", "110".to_owned()),
        ]),
    )
}

fn default_nodes(n: usize) -> Vec<k8s_openapi::api::core::v1::Node> {
    (0..n)
        .map(|i| default_node(&format!("node-{i:05}"), &[]))
        .collect()
}

fn selector(key: &str, value: &str) -> LabelSelector {
    LabelSelector {
        match_labels: Some([(key.to_owned(), value.to_owned())].into()),
        ..LabelSelector::default()
    }
}

/// Upstream `pod-with-pod-anti-affinity`: label `color=green`, required
/// anti-affinity to `color=green` on the hostname in namespaces sched-0
/// and sched-1.
fn anti_affinity_pod(namespace: &str, name: &str, i: usize) -> Pod {
    let mut pod = default_pod(namespace, name, i);
    labels(&mut pod).insert("color".to_owned(), "green".to_owned());
    if let Some(spec) = pod.spec.as_mut() {
        spec.affinity = Some(Affinity {
            pod_anti_affinity: Some(PodAntiAffinity {
                required_during_scheduling_ignored_during_execution: Some(vec![PodAffinityTerm {
                    label_selector: Some(selector("color", "green")),
                    namespaces: Some(vec!["sched-0".to_owned(), "sched-1".to_owned()]),
                    topology_key: LABEL_HOSTNAME.to_owned(),
                    ..PodAffinityTerm::default()
                }]),
                ..PodAntiAffinity::default()
            }),
            ..Affinity::default()
        });
    }
    pod
}

/// Upstream `pod-with-topology-spreading`: label `color=blue`, `maxSkew: 5`
/// over zones, `DoNotSchedule`, selecting `color=blue`.
fn spreading_pod(namespace: &str, name: &str, i: usize) -> Pod {
    let mut pod = default_pod(namespace, name, i);
    labels(&mut pod).insert("color".to_owned(), "blue".to_owned());
    if let Some(spec) = pod.spec.as_mut() {
        spec.topology_spread_constraints = Some(vec![TopologySpreadConstraint {
            max_skew: 5,
            topology_key: LABEL_ZONE.to_owned(),
            when_unsatisfiable: "DoNotSchedule".to_owned(),
            label_selector: Some(selector("color", "blue")),
            ..TopologySpreadConstraint::default()
        }]);
    }
    pod
}

/// Upstream `pod-high-priority-large-cpu`: priority 10, 9 CPU; fits no
/// 4-CPU node, but is tried (and preemption with it) on every event.
fn large_cpu_pod(name: &str, i: usize) -> Pod {
    let mut pod = template_pod("churn", name, "9", "500Mi", i);
    if let Some(spec) = pod.spec.as_mut() {
        spec.priority = Some(10);
        spec.termination_grace_period_seconds = Some(0);
    }
    pod
}

/// Churn ticks are generated for this long; the run drops what is left
/// once the measured pods are resolved.
const CHURN_HORIZON: Duration = Duration::from_secs(600);

/// Upstream's `churn` op in `recreate` mode: every `interval`, the objects
/// of the previous tick are deleted and new ones created.
fn recreate_churn(interval: Duration) -> Vec<TimedOp> {
    let mut ops = Vec::new();
    let ticks = CHURN_HORIZON.as_millis() / interval.as_millis().max(1);
    for t in 0..u32::try_from(ticks).unwrap_or(u32::MAX) {
        let at = interval * t;
        if t > 0 {
            ops.push(TimedOp {
                at,
                op: Op::DeleteNode(format!("churn-node-{}", t - 1)),
                background: true,
            });
            ops.push(TimedOp {
                at,
                op: Op::DeletePod {
                    namespace: "churn".to_owned(),
                    name: format!("churn-pod-{}", t - 1),
                },
                background: true,
            });
        }
        let mut node = default_node(&format!("churn-node-{t}"), &[]);
        if let Some(status) = node.status.as_mut() {
            for list in [status.capacity.as_mut(), status.allocatable.as_mut()]
                .into_iter()
                .flatten()
            {
                list.insert(
                    "pods".to_owned(),
                    k8s_openapi::apimachinery::pkg::api::resource::Quantity("0".to_owned()),
                );
            }
        }
        ops.push(TimedOp {
            at,
            op: Op::CreateNode(Box::new(node)),
            background: true,
        });
        ops.push(TimedOp {
            at,
            op: Op::CreatePod(Box::new(large_cpu_pod(
                &format!("churn-pod-{t}"),
                t as usize,
            ))),
            background: true,
        });
    }
    ops
}

/// Upstream's `churn` op in `create` mode: one unschedulable pod every
/// `interval`, never deleted.
fn create_churn(interval: Duration) -> Vec<TimedOp> {
    let ticks = CHURN_HORIZON.as_millis() / interval.as_millis().max(1);
    (0..u32::try_from(ticks).unwrap_or(u32::MAX))
        .map(|t| TimedOp {
            at: interval * t,
            op: Op::CreatePod(Box::new(large_cpu_pod(
                &format!("churn-pod-{t}"),
                t as usize,
            ))),
            background: true,
        })
        .collect()
}

/// `init` pods then `measured` pods from `pod`, a barrier between them.
fn phases(
    init: usize,
    measured: usize,
    pod: impl Fn(&str, &str, usize) -> Pod,
) -> (Vec<Pod>, Vec<usize>) {
    let mut pods: Vec<Pod> = (0..init)
        .map(|i| pod("sched-0", &format!("init-{i:05}"), i))
        .collect();
    pods.extend((0..measured).map(|i| pod("sched-1", &format!("pod-{i:05}"), i)));
    let barriers = if init > 0 { vec![init] } else { Vec::new() };
    (pods, barriers)
}

/// Builds scenario `name` with `params`.
///
/// # Errors
/// [`ScenarioError`]: bad `scale` / `rate`, or the openb trace missing or
/// malformed.
#[allow(clippy::too_many_lines)]
pub fn build(name: ScenarioName, params: &ScenarioParams) -> Result<Scenario, ScenarioError> {
    if !(params.scale.is_finite() && params.scale > 0.0 && params.scale <= 10.0) {
        return Err(ScenarioError::Params(format!(
            "--scale {}: must be in (0, 10]",
            params.scale
        )));
    }
    if !(params.rate.is_finite() && params.rate >= 1.0) {
        return Err(ScenarioError::Params(format!(
            "--rate {}: must be at least 1 pod/s",
            params.rate
        )));
    }
    let s = params.scale;
    // Default nodes, `init` then `measured` pods from `pod`, a barrier
    // between them.
    let phased = |nodes: usize,
                  init: usize,
                  measured: usize,
                  pod: fn(&str, &str, usize) -> Pod,
                  what: &str| {
        let (nodes, init, measured) = (scaled(nodes, s), scaled(init, s), scaled(measured, s));
        let (pods, barriers) = phases(init, measured, pod);
        (
            format!("{nodes} default nodes, {init} init + {measured} measured pods {what}"),
            Workload {
                nodes: default_nodes(nodes),
                pods,
                barriers,
                ..Workload::default()
            },
            init,
            measured,
        )
    };
    let basic =
        |nodes, init, measured| phased(nodes, init, measured, default_pod, "of 100m / 500 Mi");
    let (description, mut workload, init_pods, measured_pods) = match name {
        ScenarioName::SchedulingBasic => basic(5000, 1000, 10_000),
        ScenarioName::SchedulingBasic50k => basic(5000, 5000, 50_000),
        ScenarioName::PodAntiAffinity => phased(
            5000,
            1000,
            2000,
            anti_affinity_pod,
            "with required anti-affinity on the hostname",
        ),
        ScenarioName::TopologySpreading => {
            let (nodes, init, measured) = (scaled(5000, s), scaled(5000, s), scaled(5000, s));
            let zones = ["moon-1", "moon-2", "moon-3"];
            let mut pods: Vec<Pod> = (0..init)
                .map(|i| default_pod("sched-0", &format!("init-{i:05}"), i))
                .collect();
            pods.extend((0..measured).map(|i| spreading_pod("sched-1", &format!("pod-{i:05}"), i)));
            (
                format!(
                    "{nodes} default nodes in zones moon-1/2/3, {init} init + {measured} measured \
                     pods spread over zones (maxSkew 5, DoNotSchedule)"
                ),
                Workload {
                    nodes: (0..nodes)
                        .map(|i| {
                            default_node(&format!("node-{i:05}"), &[(LABEL_ZONE, zones[i % 3])])
                        })
                        .collect(),
                    pods,
                    barriers: vec![init],
                    ..Workload::default()
                },
                init,
                measured,
            )
        }
        ScenarioName::MixedChurn => {
            let (d, mut w, init, measured) = basic(5000, 0, 10_000);
            w.timeline = recreate_churn(Duration::from_secs(1));
            (
                format!(
                    "{d}; every 1 s a zero-capacity node and an unschedulable 9-CPU priority-10 \
                     pod are recreated"
                ),
                w,
                init,
                measured,
            )
        }
        ScenarioName::PreemptionBasic => {
            let nodes = scaled(500, s);
            let mut w = workload::synthetic::preemption_basic(nodes);
            w.name = String::new();
            (
                format!(
                    "{nodes} default nodes, {} low-priority init pods (900m) filling them, {nodes} \
                     measured priority-10 pods (3 CPU) each preempting three",
                    4 * nodes
                ),
                w,
                4 * nodes,
                nodes,
            )
        }
        ScenarioName::Unschedulable => {
            let (d, mut w, init, measured) = basic(5000, 100, 10_000);
            w.timeline = create_churn(Duration::from_millis(200));
            (
                format!("{d}; one unschedulable 9-CPU priority-10 pod added every 200 ms"),
                w,
                init,
                measured,
            )
        }
        ScenarioName::Openb => {
            #[allow(clippy::float_cmp)]
            if params.scale != 1.0 {
                return Err(ScenarioError::Params(format!(
                    "--scale {}: openb replays the whole trace (1,523 nodes, 8,152 pods); it \
                     cannot be scaled",
                    params.scale
                )));
            }
            let dir = match &params.openb_dir {
                Some(d) => d.clone(),
                None => workload::default_openb_dir().ok_or(ScenarioError::OpenbMissing)?,
            };
            let w = workload::load_openb(
                &dir.join(workload::openb::NODES_ALL_FILE),
                &dir.join(workload::openb::PODS_DEFAULT_FILE),
                OnBadInput::Fail,
            )?
            .validate(OnBadInput::Fail)?;
            let (nodes, pods) = (w.nodes.len(), w.pods.len());
            (
                format!(
                    "Alibaba GPU trace v2023: {nodes} nodes, {pods} pods in trace order, all at \
                     once"
                ),
                w,
                0,
                pods,
            )
        }
        ScenarioName::Dlrm => dlrm(params)?,
        ScenarioName::CsiPvs => csi_pvs(s),
        ScenarioName::WffcPvs => wffc_pvs(s),
        ScenarioName::Godel30k => {
            let (nodes, pods) = (scaled(30_000, s), scaled(100_000, s));
            let rate = params.rate;
            // Two templates (online and batch, alternating), copied as
            // the pods are offered: 100,000 pods held as decoded `Pod`s
            // up front would be ~600 MB of the harness's own.
            let templates = [0, 1].map(|i| Arc::new(default_pod("sched-1", "pod", i)));
            let timeline = (0..pods)
                .map(|i| {
                    #[allow(clippy::cast_precision_loss)]
                    let at = Duration::from_secs_f64(i as f64 / rate);
                    TimedOp {
                        at,
                        op: Op::CreatePodFrom {
                            template: templates[i % 2].clone(),
                            name: format!("pod-{i:06}"),
                        },
                        background: false,
                    }
                })
                .collect();
            (
                format!(
                    "{nodes} default nodes, {pods} pods of 100m / 500 Mi offered at {rate} pods/s"
                ),
                Workload {
                    nodes: default_nodes(nodes),
                    timeline,
                    ..Workload::default()
                },
                0,
                pods,
            )
        }
        ScenarioName::KubeLab => {
            let (nodes, pods) = (scaled(100, s), scaled(5000, s));
            let node = |i: usize| {
                ready_node(
                    &format!("node-{i:05}"),
                    BTreeMap::new(),
                    resource_list([
                        ("cpu", "8".to_owned()),
                        ("memory", "16Gi".to_owned()),
                        ("pods", "110".to_owned()),
                    ]),
                )
            };
            (
                format!(
                    "{nodes} nodes of 8 CPU / 16 Gi / 110 pods, {pods} pods of 100m / 64 Mi, all \
                     at once (the kube-lab bench shape)"
                ),
                Workload {
                    nodes: (0..nodes).map(node).collect(),
                    pods: (0..pods)
                        .map(|i| template_pod("sched-1", &format!("pod-{i:05}"), "100m", "64Mi", i))
                        .collect(),
                    ..Workload::default()
                },
                0,
                pods,
            )
        }
    };
    workload.name = name.as_str().to_owned();
    Ok(Scenario {
        name,
        description,
        workload,
        init_pods,
        measured_pods,
        plugins: if name == ScenarioName::Dlrm {
            vec![names::MAX_INSTANCES_PER_NODE]
        } else {
            Vec::new()
        },
    })
}

/// The CSI driver of [`ScenarioName::CsiPvs`] (upstream's EBS driver).
const CSI_DRIVER: &str = "ebs.csi.aws.com";

/// `pod-default` in `default` using claim `claim` (volume `data`).
fn pod_with_claim(name: &str, claim: &str, i: usize) -> Pod {
    let mut pod = default_pod("default", name, i);
    pod.spec.get_or_insert_with(Default::default).volumes = Some(vec![Volume {
        name: "data".to_owned(),
        persistent_volume_claim: Some(PersistentVolumeClaimVolumeSource {
            claim_name: claim.to_owned(),
            read_only: None,
        }),
        ..Volume::default()
    }]);
    pod
}

/// SchedulingCSIPVs: description, workload, init and measured pods.
fn csi_pvs(s: f64) -> (String, Workload, usize, usize) {
    let (nodes, init, measured) = (scaled(5000, s), scaled(5000, s), scaled(5000, s));
    let mut volumes: Vec<VolumeObject> = (0..nodes)
        .map(|i| {
            VolumeObject::CsiNode(Arc::new(csi_node(
                &format!("node-{i:05}"),
                &[(CSI_DRIVER, Some(39))],
            )))
        })
        .collect();
    let mut pods = Vec::with_capacity(init + measured);
    for i in 0..init + measured {
        let (claim, pv, name) = (
            format!("pvc-{i:05}"),
            format!("pv-{i:05}"),
            if i < init {
                format!("init-{i:05}")
            } else {
                format!("pod-{:05}", i - init)
            },
        );
        volumes.push(VolumeObject::Pv(Arc::new(
            PvBuilder::new(&pv)
                .csi(CSI_DRIVER, &format!("vol-{i:05}"))
                .capacity("1Gi")
                .access_mode("ReadWriteOnce")
                .claim_ref(&claim, Some(&format!("uid-{claim}")))
                .phase("Bound")
                .build(),
        )));
        volumes.push(VolumeObject::Claim(Arc::new(
            PvcBuilder::new(&claim)
                .storage("1Gi")
                .access_mode("ReadWriteOnce")
                .bound_to(&pv)
                .build(),
        )));
        pods.push(pod_with_claim(&name, &claim, i));
    }
    (
        format!(
            "{nodes} default nodes attaching at most 39 {CSI_DRIVER} volumes each, {init} init + \
             {measured} measured pods of 100m / 500 Mi, each with its own claim bound to a CSI PV"
        ),
        Workload {
            nodes: default_nodes(nodes),
            pods,
            barriers: vec![init],
            volumes,
            ..Workload::default()
        },
        init,
        measured,
    )
}

/// Flotilla's `WaitForFirstConsumer` case: description, workload, init and
/// measured pods.
fn wffc_pvs(s: f64) -> (String, Workload, usize, usize) {
    let (nodes, init, measured) = (scaled(5000, s), scaled(1000, s), scaled(5000, s));
    let mut volumes = vec![VolumeObject::StorageClass(Arc::new(storage_class(
        "wffc",
        "csi.example.com",
        Some("WaitForFirstConsumer"),
    )))];
    let mut pods: Vec<Pod> = (0..init)
        .map(|i| default_pod("default", &format!("init-{i:05}"), i))
        .collect();
    for i in 0..measured {
        let claim = format!("pvc-{i:05}");
        volumes.push(VolumeObject::Claim(Arc::new(
            PvcBuilder::new(&claim)
                .class("wffc")
                .storage("1Gi")
                .access_mode("ReadWriteOnce")
                .build(),
        )));
        pods.push(pod_with_claim(&format!("pod-{i:05}"), &claim, i));
    }
    (
        format!(
            "{nodes} default nodes, {init} init pods of 100m / 500 Mi, {measured} measured pods \
             each with its own unbound claim of a WaitForFirstConsumer class (provisioned at \
             PreBind)"
        ),
        Workload {
            nodes: default_nodes(nodes),
            pods,
            barriers: vec![init],
            volumes,
            ..Workload::default()
        },
        init,
        measured,
    )
}

/// The DLRM replay: description, workload, init and measured pods.
fn dlrm(params: &ScenarioParams) -> Result<(String, Workload, usize, usize), ScenarioError> {
    use workload::dlrm::{self, CN_NODE, HN_NODE, Replay};
    if params.scale > 1.0 {
        return Err(ScenarioError::Params(format!(
            "--scale {}: dlrm replays the trace once; at most 1 (a sample)",
            params.scale
        )));
    }
    if !(params.speedup.is_finite() && params.speedup > 0.0) {
        return Err(ScenarioError::Params(format!(
            "--speedup {}: must be positive",
            params.speedup
        )));
    }
    let dir = match &params.dlrm_dir {
        Some(d) => d.clone(),
        None => dlrm::default_dlrm_dir().ok_or(ScenarioError::DlrmMissing)?,
    };
    let trace = dlrm::load_dlrm(&dir.join(dlrm::TRACE_FILE), OnBadInput::Fail)
        .map_err(ScenarioError::Dlrm)?;
    let r = trace.workload(&Replay {
        speedup: params.speedup,
        sample: params.scale,
        ..Replay::default()
    });
    let w = r
        .workload
        .validate(OnBadInput::Fail)
        .map_err(ScenarioError::Dlrm)?;
    let shape = |n: &dlrm::NodeShape| {
        let gpus = if n.gpus > 0 {
            format!(" / {} GPU", n.gpus)
        } else {
            String::new()
        };
        format!(
            "{} vCPU / {} GiB{gpus} / {} GiB disk / {} RDMA NIC",
            n.cpu_cores, n.memory_gib, n.ephemeral_gib, n.rdma_nics
        )
    };
    Ok((
        format!(
            "Alibaba GPU trace v2025 (DLRM): {} CN nodes ({}) + {} HN nodes ({}), peak x{} \
             headroom; {} init pods, then {} arrivals and {} deletions over {:.1} s (speedup \
             {}); max instances per node enforced",
            r.cn_nodes,
            shape(&CN_NODE),
            r.hn_nodes,
            shape(&HN_NODE),
            dlrm::DEFAULT_HEADROOM,
            r.init_pods,
            r.created_pods,
            r.deleted_pods,
            r.replay_duration.as_secs_f64(),
            params.speedup,
        ),
        w,
        r.init_pods,
        r.created_pods,
    ))
}
