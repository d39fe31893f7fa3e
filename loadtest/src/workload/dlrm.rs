//! The Alibaba GPU cluster trace v2025 of disaggregated DLRM inference
//! instances as a replayed [`Workload`]: initial pods, then arrivals and
//! deletions in trace time.
//!
//! The trace (USENIX NSDI '25, *GPU-Disaggregated Serving for Deep Learning
//! Recommendation Models at Scale*, Yang et al.) has one CSV file of 23,871
//! instances of 156 online services, over about 31 days. It is research /
//! study data without a license file: it is read at run time from
//! `shared/data/alibaba-gpu-v2025-dlrm/` (see [`default_dlrm_dir`]) and must
//! never be copied into the repository or a published artefact. Cite the
//! paper in any benchmark report.
//!
//! # Mapping (the trace folder's README, "Mapping rows to Kubernetes objects")
//!
//! Pod (one per row), `dlrm/<instance_sn>` with `_` written `-` (pod names
//! are DNS subdomains), deterministic uid, phase `Pending`:
//! - labels `app = <app_name>`, `role = <role>`, `flotilla.io/workload-class
//!   = online` and `alibabacloud.com/qos = LS` (upstream calls every
//!   instance latency-sensitive), `spec.priority` 1000;
//! - requests: cpu `<cpu_request × 1000>m` (whole vCPUs in the trace),
//!   memory `<memory_request × 1024>Mi` (GiB), `ephemeral-storage`
//!   `<disk_request × 1024>Mi` (GiB), `nvidia.com/gpu: <gpu_request>` when
//!   not 0, [`RESOURCE_RDMA`] `<rdma_request>` (percent of one NIC) when not
//!   0; limits equal the requests except `ephemeral-storage` =
//!   `<disk_limit × 1024>Mi`;
//! - `nodeSelector` [`LABEL_POOL`] `= cn` (role `CN`) or `hn` (role `HN`);
//! - `max_instance_per_node = k > 0` → annotation
//!   `scheduling.flotilla.dev/max-instances-per-node: "k"` (enforced by the
//!   `MaxInstancesPerNode` plugin); `-1` (no limit) → no annotation;
//! - `creation_time` → annotation `flotilla.io/trace-creation-time`.
//!
//! `cpu_limit`, `memory_limit`, `gpu_limit`, `rdma_limit` (equal to the
//! requests in the whole trace) and `scheduled_time` are not used.
//!
//! # Order and replay
//!
//! Rows are grouped by app in the file; [`load_dlrm`] sorts them by
//! `creation_time`, rows without one (NaN: alive when the trace began)
//! first, ties in file order. [`DlrmTrace::workload`] makes the rows without
//! a creation time the initial pods (a barrier: all resolved before the
//! replay starts), and a timeline creating every other row at
//! `creation_time / speedup` and deleting rows with a `deletion_time` at
//! `deletion_time / speedup` (initial pods included), both foreground.
//!
//! # Nodes (synthetic: the trace has none)
//!
//! Two pools of the shapes [`CN_NODE`] and [`HN_NODE`], labelled
//! [`LABEL_POOL`] `cn` / `hn`, each sized from the replayed peak of its
//! pods ([`pool_size`]): for every resource, `ceil(peak alive demand ×
//! headroom / per-node capacity)`, and for every capped app
//! `ceil(peak alive instances / k)`; the largest of those.
//!
//! # Validation
//!
//! The header must have exactly the trace's 17 columns (any order); fields
//! are trimmed. Errors name the file, the line (the header is line 1) and
//! the column: integers must be non-negative (`max_instance_per_node`:
//! `-1` or positive), GiB and seconds finite and non-negative, `role` `CN`
//! or `HN`, `rdma_request` at most 100, `disk_limit` at least
//! `disk_request`, `deletion_time` not before `creation_time`; names must
//! be non-empty, unique and valid once `_` is written `-`; apps valid label
//! values.

use std::collections::{BTreeMap, HashMap};
use std::path::{Path, PathBuf};
use std::time::Duration;

use k8s_openapi::api::core::v1::{Container, Node, Pod, ResourceRequirements};
use serde::Deserialize;

use super::openb::{RowCtx, for_each_row, is_label_value};
use super::{
    ANNOTATION_TRACE_CREATION_TIME, LABEL_QOS, LABEL_WORKLOAD_CLASS, LoadWarning, OnBadInput, Op,
    PAUSE_IMAGE, RESOURCE_GPU, Result, TimedOp, WORKLOAD_CLASS_ONLINE, Workload, file_label,
    pending_pod, ready_node, resource_list,
};

/// Location of the trace folder relative to an ancestor of the project.
pub const DLRM_DATA_DIR: &str = "shared/data/alibaba-gpu-v2025-dlrm";
/// The trace file.
pub const TRACE_FILE: &str = "disaggregated_DLRM_trace.csv";
/// Namespace of the trace pods.
pub const NAMESPACE: &str = "dlrm";
/// Name of the single container of every trace pod.
pub const CONTAINER_NAME: &str = "main";
/// Extended resource: RDMA bandwidth, in percent of one NIC (a node offers
/// 100 per NIC).
pub const RESOURCE_RDMA: &str = "example.com/rdma-bw";
/// Node label of the pool, and the pods' `nodeSelector` key.
pub const LABEL_POOL: &str = "pool";
/// Pod label holding the app (the unit a Deployment would own).
pub const LABEL_APP: &str = "app";
/// Pod label holding the role (`CN` or `HN`).
pub const LABEL_ROLE: &str = "role";
/// `spec.priority` of every trace pod (upstream: all latency-sensitive).
pub const PRIORITY: i32 = 1000;
/// RDMA units per NIC.
pub const RDMA_PER_NIC: u64 = 100;
/// Default replay speed: trace seconds per wall second. The arrivals span
/// 2,676,636 s (31 days), so the replay takes about 27 s.
pub const DEFAULT_SPEEDUP: f64 = 100_000.0;
/// Default headroom over the replayed peak demand when sizing the pools.
pub const DEFAULT_HEADROOM: f64 = 1.5;

const COLUMNS: &[&str] = &[
    "instance_sn",
    "role",
    "app_name",
    "cpu_request",
    "cpu_limit",
    "gpu_request",
    "gpu_limit",
    "rdma_request",
    "rdma_limit",
    "memory_request",
    "memory_limit",
    "disk_request",
    "disk_limit",
    "max_instance_per_node",
    "creation_time",
    "scheduled_time",
    "deletion_time",
];

/// Where an instance runs.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Role {
    /// A CPU node (`pool=cn`).
    Cn,
    /// A heterogeneous GPU node (`pool=hn`).
    Hn,
}

impl Role {
    /// The trace's spelling (`CN`, `HN`).
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            Role::Cn => "CN",
            Role::Hn => "HN",
        }
    }

    /// The pool label value (`cn`, `hn`).
    #[must_use]
    pub fn pool(self) -> &'static str {
        match self {
            Role::Cn => "cn",
            Role::Hn => "hn",
        }
    }
}

/// One row of the trace, parsed (units converted).
#[derive(Debug, Clone, PartialEq)]
pub struct Instance {
    /// Pod name: `instance_sn` with `_` written `-`.
    pub name: String,
    /// `role`.
    pub role: Role,
    /// `app_name`.
    pub app: String,
    /// `cpu_request`, whole vCPUs.
    pub cpu_cores: u64,
    /// `gpu_request`, whole GPUs.
    pub gpus: u64,
    /// `rdma_request`, percent of one NIC.
    pub rdma_percent: u64,
    /// `memory_request`, MiB (GiB × 1024, rounded).
    pub memory_mib: u64,
    /// `disk_request`, MiB.
    pub disk_request_mib: u64,
    /// `disk_limit`, MiB.
    pub disk_limit_mib: u64,
    /// `max_instance_per_node` when positive (`None`: `-1`, no limit).
    pub max_instances_per_node: Option<u32>,
    /// `creation_time`, seconds (`None`: alive when the trace began).
    pub creation_time: Option<f64>,
    /// `deletion_time`, seconds (`None`: alive when the trace ended).
    pub deletion_time: Option<f64>,
    /// Line in the file.
    pub line: u64,
}

/// The trace, sorted for replay.
#[derive(Debug, Clone, Default)]
pub struct DlrmTrace {
    /// Instances by `creation_time`, the initial ones (no creation time)
    /// first, ties in file order.
    pub instances: Vec<Instance>,
    /// Rows skipped under [`OnBadInput::Skip`].
    pub warnings: Vec<LoadWarning>,
}

/// One row, unparsed (only the columns used).
#[derive(Deserialize)]
struct Row<'a> {
    instance_sn: &'a str,
    role: &'a str,
    app_name: &'a str,
    cpu_request: &'a str,
    gpu_request: &'a str,
    rdma_request: &'a str,
    memory_request: &'a str,
    disk_request: &'a str,
    disk_limit: &'a str,
    max_instance_per_node: &'a str,
    creation_time: &'a str,
    deletion_time: &'a str,
}

/// The trace folder, if found: the first `<ancestor>/shared/data/alibaba-gpu-v2025-dlrm`
/// holding [`TRACE_FILE`], searching the ancestors of the current
/// directory, then those of this crate's source directory.
#[must_use]
pub fn default_dlrm_dir() -> Option<PathBuf> {
    let starts = [
        std::env::current_dir().ok(),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
    ];
    starts.into_iter().flatten().find_map(|start| {
        start
            .ancestors()
            .map(|ancestor| ancestor.join(DLRM_DATA_DIR))
            .find(|dir| dir.join(TRACE_FILE).is_file())
    })
}

/// Loads the trace file at `path`, sorted for replay (see the [module
/// docs](self)). With [`OnBadInput::Skip`] bad rows are left out and
/// reported in [`DlrmTrace::warnings`]; with [`OnBadInput::Fail`] the first
/// is the error. A missing file or a wrong header is always an error.
///
/// # Errors
/// [`super::LoadError`], naming the file, line and column.
pub fn load_dlrm(path: &Path, on_bad: OnBadInput) -> Result<DlrmTrace> {
    let mut warnings = Vec::new();
    let mut instances = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for_each_row(
        path,
        COLUMNS,
        on_bad,
        &mut warnings,
        |ctx, record, headers| {
            let row: Row<'_> = ctx.deserialize(record, headers)?;
            let inst = instance_from_row(&ctx, &row)?;
            ctx.check_unique(&mut seen, "instance_sn", &inst.name)?;
            instances.push(inst);
            Ok(())
        },
    )?;
    sort_for_replay(&mut instances);
    tracing::debug!(
        file = %file_label(path),
        instances = instances.len(),
        skipped = warnings.len(),
        "loaded DLRM trace"
    );
    Ok(DlrmTrace {
        instances,
        warnings,
    })
}

/// Initial instances (no creation time) first, then by creation time; a
/// stable sort, so ties keep file order.
fn sort_for_replay(instances: &mut [Instance]) {
    instances.sort_by(|a, b| match (a.creation_time, b.creation_time) {
        (None, None) => std::cmp::Ordering::Equal,
        (None, Some(_)) => std::cmp::Ordering::Less,
        (Some(_), None) => std::cmp::Ordering::Greater,
        (Some(x), Some(y)) => x.total_cmp(&y),
    });
}

fn instance_from_row(ctx: &RowCtx<'_>, row: &Row<'_>) -> Result<Instance> {
    let sn = ctx.name("instance_sn", row.instance_sn)?;
    let name = sn.replace('_', "-").to_ascii_lowercase();
    if !is_dns_subdomain(&name) {
        return Err(ctx.invalid(
            "instance_sn",
            format!("\"{sn}\" is not a valid pod name, even with '_' written '-'"),
        ));
    }
    let role = match row.role {
        "CN" => Role::Cn,
        "HN" => Role::Hn,
        other => {
            return Err(ctx.invalid(
                "role",
                format!("unknown role \"{other}\", expected CN or HN"),
            ));
        }
    };
    let app = ctx.name("app_name", row.app_name)?;
    if !is_label_value(app) {
        return Err(ctx.invalid("app_name", format!("not a valid label value \"{app}\"")));
    }
    let cpu_cores = ctx.uint("cpu_request", row.cpu_request)?;
    let gpus = ctx.uint("gpu_request", row.gpu_request)?;
    let rdma_percent = ctx.uint("rdma_request", row.rdma_request)?;
    if rdma_percent > RDMA_PER_NIC {
        return Err(ctx.invalid(
            "rdma_request",
            format!("{rdma_percent} is more than one NIC (100 %)"),
        ));
    }
    let memory_mib = gib_to_mib(ctx, "memory_request", row.memory_request)?;
    let disk_request_mib = gib_to_mib(ctx, "disk_request", row.disk_request)?;
    let disk_limit_mib = gib_to_mib(ctx, "disk_limit", row.disk_limit)?;
    if disk_limit_mib < disk_request_mib {
        return Err(ctx.invalid(
            "disk_limit",
            format!(
                "\"{}\" is less than disk_request \"{}\"",
                row.disk_limit, row.disk_request
            ),
        ));
    }
    let max_instances_per_node = match row.max_instance_per_node {
        "-1" => None,
        v => match v.parse::<u32>() {
            Ok(k) if k > 0 => Some(k),
            _ => {
                return Err(ctx.invalid(
                    "max_instance_per_node",
                    format!("\"{v}\", expected -1 (no limit) or a positive integer"),
                ));
            }
        },
    };
    let creation_time = seconds(ctx, "creation_time", row.creation_time)?;
    let deletion_time = seconds(ctx, "deletion_time", row.deletion_time)?;
    if let (Some(c), Some(d)) = (creation_time, deletion_time)
        && d < c
    {
        return Err(ctx.invalid(
            "deletion_time",
            format!(
                "\"{}\" is before creation_time \"{}\"",
                row.deletion_time, row.creation_time
            ),
        ));
    }
    Ok(Instance {
        name,
        role,
        app: app.to_owned(),
        cpu_cores,
        gpus,
        rdma_percent,
        memory_mib,
        disk_request_mib,
        disk_limit_mib,
        max_instances_per_node,
        creation_time,
        deletion_time,
        line: ctx.line,
    })
}

/// A finite, non-negative number, or what is wrong with it.
fn non_negative(ctx: &RowCtx<'_>, field: &'static str, value: &str) -> Result<f64> {
    match value.parse::<f64>() {
        Ok(v) if v.is_finite() && v >= 0.0 => Ok(v),
        Ok(_) => Err(ctx.invalid(
            field,
            format!("\"{value}\", expected a finite non-negative number"),
        )),
        Err(_) => Err(ctx.invalid(field, format!("not a number \"{value}\""))),
    }
}

/// GiB (a float) → MiB, rounded.
fn gib_to_mib(ctx: &RowCtx<'_>, field: &'static str, value: &str) -> Result<u64> {
    let gib = non_negative(ctx, field, value)?;
    let mib = (gib * 1024.0).round();
    if mib > 9.0e15 {
        return Err(ctx.invalid(field, format!("number too large \"{value}\"")));
    }
    #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
    Ok(mib as u64)
}

/// Seconds, or `None` for an empty field (the trace's NaN; `NaN` spelled
/// out is read the same way).
fn seconds(ctx: &RowCtx<'_>, field: &'static str, value: &str) -> Result<Option<f64>> {
    if value.is_empty() || value.eq_ignore_ascii_case("nan") {
        return Ok(None);
    }
    non_negative(ctx, field, value).map(Some)
}

/// Whether `s` is a DNS subdomain (RFC 1123): at most 253 characters of
/// lowercase alphanumerics, `-` and `.`, alphanumeric at both ends.
fn is_dns_subdomain(s: &str) -> bool {
    let b = s.as_bytes();
    !b.is_empty()
        && b.len() <= 253
        && b.iter()
            .all(|c| c.is_ascii_lowercase() || c.is_ascii_digit() || matches!(c, b'-' | b'.'))
        && b[0].is_ascii_alphanumeric()
        && b[b.len() - 1].is_ascii_alphanumeric()
}

impl Instance {
    /// The pod (see the [module docs](self) for the mapping).
    #[must_use]
    pub fn pod(&self) -> Pod {
        let mut requests = vec![
            ("cpu", format!("{}m", self.cpu_cores * 1000)),
            ("memory", format!("{}Mi", self.memory_mib)),
            ("ephemeral-storage", format!("{}Mi", self.disk_request_mib)),
        ];
        if self.gpus > 0 {
            requests.push((RESOURCE_GPU, self.gpus.to_string()));
        }
        if self.rdma_percent > 0 {
            requests.push((RESOURCE_RDMA, self.rdma_percent.to_string()));
        }
        let requests = resource_list(requests);
        let mut limits = requests.clone();
        limits.insert(
            "ephemeral-storage".to_owned(),
            k8s_openapi::apimachinery::pkg::api::resource::Quantity(format!(
                "{}Mi",
                self.disk_limit_mib
            )),
        );
        let container = Container {
            name: CONTAINER_NAME.to_owned(),
            image: Some(PAUSE_IMAGE.to_owned()),
            resources: Some(ResourceRequirements {
                requests: Some(requests),
                limits: Some(limits),
                ..ResourceRequirements::default()
            }),
            ..Container::default()
        };
        let mut pod = pending_pod(NAMESPACE, &self.name, container);
        pod.metadata.labels = Some(BTreeMap::from([
            (LABEL_APP.to_owned(), self.app.clone()),
            (LABEL_ROLE.to_owned(), self.role.as_str().to_owned()),
            (
                LABEL_WORKLOAD_CLASS.to_owned(),
                WORKLOAD_CLASS_ONLINE.to_owned(),
            ),
            (LABEL_QOS.to_owned(), "LS".to_owned()),
        ]));
        let mut annotations = BTreeMap::new();
        if let Some(k) = self.max_instances_per_node {
            annotations.insert(
                flotilla_shared::max_instances::ANNOTATION_MAX_INSTANCES_PER_NODE.to_owned(),
                k.to_string(),
            );
        }
        if let Some(t) = self.creation_time {
            annotations.insert(ANNOTATION_TRACE_CREATION_TIME.to_owned(), t.to_string());
        }
        if !annotations.is_empty() {
            pod.metadata.annotations = Some(annotations);
        }
        if let Some(spec) = pod.spec.as_mut() {
            spec.priority = Some(PRIORITY);
            spec.node_selector = Some(BTreeMap::from([(
                LABEL_POOL.to_owned(),
                self.role.pool().to_owned(),
            )]));
        }
        pod
    }
}

/// A synthetic node shape (not from the trace).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct NodeShape {
    /// vCPUs.
    pub cpu_cores: u64,
    /// Memory, GiB.
    pub memory_gib: u64,
    /// Ephemeral storage, GiB.
    pub ephemeral_gib: u64,
    /// Whole GPUs (`nvidia.com/gpu`; 0: none).
    pub gpus: u64,
    /// RDMA NICs ([`RESOURCE_RDMA`] = 100 per NIC).
    pub rdma_nics: u64,
    /// Pod slots.
    pub pods: u64,
}

/// The CN pool's nodes: 256 vCPU, 1,536 GiB, 2,048 GiB ephemeral storage,
/// 2 RDMA NICs, 110 pods (the largest CN request is 192 vCPU / 1,000 GiB;
/// the peak's memory is about 5 GiB per vCPU).
pub const CN_NODE: NodeShape = NodeShape {
    cpu_cores: 256,
    memory_gib: 1536,
    ephemeral_gib: 2048,
    gpus: 0,
    rdma_nics: 2,
    pods: 110,
};

/// The HN pool's nodes: 8 GPUs, 128 vCPU, 1,024 GiB, 4,096 GiB ephemeral
/// storage, 4 RDMA NICs, 110 pods (every HN instance takes one GPU, up to
/// 24 vCPU, 400 GiB and 75 % of a NIC).
pub const HN_NODE: NodeShape = NodeShape {
    cpu_cores: 128,
    memory_gib: 1024,
    ephemeral_gib: 4096,
    gpus: 8,
    rdma_nics: 4,
    pods: 110,
};

impl NodeShape {
    /// A node `name` of this shape in pool `pool`.
    #[must_use]
    pub fn node(&self, name: &str, pool: &str) -> Node {
        let mut resources = vec![
            ("cpu", self.cpu_cores.to_string()),
            ("memory", format!("{}Gi", self.memory_gib)),
            ("ephemeral-storage", format!("{}Gi", self.ephemeral_gib)),
            ("pods", self.pods.to_string()),
            (RESOURCE_RDMA, (self.rdma_nics * RDMA_PER_NIC).to_string()),
        ];
        if self.gpus > 0 {
            resources.push((RESOURCE_GPU, self.gpus.to_string()));
        }
        ready_node(
            name,
            BTreeMap::from([(LABEL_POOL.to_owned(), pool.to_owned())]),
            resource_list(resources),
        )
    }
}

/// Peak demand of a set of instances replayed in trace time.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Peak {
    /// Pods alive.
    pub pods: u64,
    /// vCPUs.
    pub cpu_cores: u64,
    /// Memory, MiB.
    pub memory_mib: u64,
    /// Ephemeral storage requested, MiB.
    pub disk_mib: u64,
    /// GPUs.
    pub gpus: u64,
    /// RDMA, percent of a NIC.
    pub rdma_percent: u64,
    /// The most nodes one capped app needs at its own peak
    /// (`ceil(alive instances / k)`, `k` the app's smallest cap).
    pub nodes_for_caps: u64,
}

/// Per-resource peaks of `instances` (each resource's own peak; deletions
/// before creations at the same instant).
#[must_use]
pub fn peak(instances: &[&Instance]) -> Peak {
    // (time, delta) events; initial instances at -inf, survivors never leave.
    let mut events: Vec<(f64, i8, usize)> = Vec::with_capacity(instances.len() * 2);
    for (i, inst) in instances.iter().enumerate() {
        events.push((inst.creation_time.unwrap_or(f64::NEG_INFINITY), 1, i));
        if let Some(d) = inst.deletion_time {
            events.push((d, -1, i));
        }
    }
    events.sort_by(|a, b| a.0.total_cmp(&b.0).then(a.1.cmp(&b.1)));
    let mut cur = [0i64; 6];
    let mut top = [0i64; 6];
    let mut apps: HashMap<&str, (i64, i64, u32)> = HashMap::new();
    for &(_, delta, i) in &events {
        let inst = instances[i];
        let d = i64::from(delta);
        let v = [
            1,
            inst.cpu_cores,
            inst.memory_mib,
            inst.disk_request_mib,
            inst.gpus,
            inst.rdma_percent,
        ];
        for (k, x) in v.iter().enumerate() {
            cur[k] += d * i64::try_from(*x).unwrap_or(i64::MAX);
            top[k] = top[k].max(cur[k]);
        }
        let e = apps.entry(inst.app.as_str()).or_insert((0, 0, u32::MAX));
        e.0 += d;
        e.1 = e.1.max(e.0);
        if let Some(k) = inst.max_instances_per_node {
            e.2 = e.2.min(k);
        }
    }
    let u = |x: i64| u64::try_from(x).unwrap_or(0);
    let nodes_for_caps = apps
        .values()
        .filter(|a| a.2 != u32::MAX)
        .map(|a| u(a.1).div_ceil(u64::from(a.2)))
        .max()
        .unwrap_or(0);
    Peak {
        pods: u(top[0]),
        cpu_cores: u(top[1]),
        memory_mib: u(top[2]),
        disk_mib: u(top[3]),
        gpus: u(top[4]),
        rdma_percent: u(top[5]),
        nodes_for_caps,
    }
}

/// Nodes of `shape` for `peak` with `headroom` (≥ 1): the most any
/// resource needs, or a capped app; at least 1 when there is any demand.
#[must_use]
pub fn pool_size(peak: &Peak, shape: &NodeShape, headroom: f64) -> usize {
    if peak.pods == 0 {
        return 0;
    }
    #[allow(
        clippy::cast_precision_loss,
        clippy::cast_possible_truncation,
        clippy::cast_sign_loss
    )]
    let need = |demand: u64, per_node: u64| -> u64 {
        if demand == 0 {
            0
        } else if per_node == 0 {
            u64::MAX
        } else {
            (demand as f64 * headroom / per_node as f64).ceil() as u64
        }
    };
    let n = [
        need(peak.pods, shape.pods),
        need(peak.cpu_cores, shape.cpu_cores),
        need(peak.memory_mib, shape.memory_gib * 1024),
        need(peak.disk_mib, shape.ephemeral_gib * 1024),
        need(peak.gpus, shape.gpus),
        need(peak.rdma_percent, shape.rdma_nics * RDMA_PER_NIC),
        peak.nodes_for_caps,
        1,
    ]
    .into_iter()
    .max()
    .unwrap_or(1);
    usize::try_from(n).unwrap_or(usize::MAX)
}

/// How to replay the trace.
#[derive(Debug, Clone, Copy, PartialEq)]
pub struct Replay {
    /// Trace seconds per wall second (> 0). Default [`DEFAULT_SPEEDUP`].
    pub speedup: f64,
    /// Headroom over the peak when sizing the pools (≥ 1). Default
    /// [`DEFAULT_HEADROOM`].
    pub headroom: f64,
    /// Share of the instances kept, in (0, 1], spread evenly over the
    /// sorted trace (initial and created alike). Default 1.
    pub sample: f64,
}

impl Default for Replay {
    fn default() -> Self {
        Replay {
            speedup: DEFAULT_SPEEDUP,
            headroom: DEFAULT_HEADROOM,
            sample: 1.0,
        }
    }
}

/// A built replay: the workload and what it is made of.
#[derive(Debug, Clone)]
pub struct ReplayWorkload {
    /// Nodes, initial pods (then a barrier at the end) and the timeline.
    pub workload: Workload,
    /// Initial pods.
    pub init_pods: usize,
    /// Pods the timeline creates.
    pub created_pods: usize,
    /// Pods the timeline deletes.
    pub deleted_pods: usize,
    /// CN nodes.
    pub cn_nodes: usize,
    /// HN nodes.
    pub hn_nodes: usize,
    /// Wall time of the timeline (its last op).
    pub replay_duration: Duration,
}

impl DlrmTrace {
    /// The instances `replay.sample` keeps, in replay order.
    fn sampled(&self, sample: f64) -> Vec<&Instance> {
        if sample >= 1.0 {
            return self.instances.iter().collect();
        }
        #[allow(clippy::cast_precision_loss)]
        self.instances
            .iter()
            .enumerate()
            .filter(|(i, _)| {
                let (a, b) = (*i as f64 * sample, (*i + 1) as f64 * sample);
                b.floor() > a.floor()
            })
            .map(|(_, inst)| inst)
            .collect()
    }

    /// The replay: both pools sized from the (sampled) instances' peak,
    /// initial pods with a barrier after them, and the timeline of
    /// arrivals and deletions at trace time / `replay.speedup`.
    #[must_use]
    pub fn workload(&self, replay: &Replay) -> ReplayWorkload {
        let kept = self.sampled(replay.sample);
        let mut nodes = Vec::new();
        let mut sizes = [0usize; 2];
        for (slot, (role, shape)) in [(Role::Cn, CN_NODE), (Role::Hn, HN_NODE)]
            .into_iter()
            .enumerate()
        {
            let of_role: Vec<&Instance> = kept.iter().copied().filter(|i| i.role == role).collect();
            let n = pool_size(&peak(&of_role), &shape, replay.headroom);
            sizes[slot] = n;
            nodes.extend(
                (0..n).map(|i| shape.node(&format!("{}-{i:05}", role.pool()), role.pool())),
            );
        }
        let at = |t: f64| Duration::from_secs_f64((t / replay.speedup).max(0.0));
        let mut pods = Vec::new();
        let mut timeline = Vec::new();
        let (mut created, mut deleted) = (0, 0);
        // Order among ops at the same instant (see below), one per op.
        let mut ranks: Vec<u8> = Vec::new();
        for inst in &kept {
            match inst.creation_time {
                None => pods.push(inst.pod()),
                Some(t) => {
                    created += 1;
                    ranks.push(1);
                    timeline.push(TimedOp {
                        at: at(t),
                        op: Op::CreatePod(Box::new(inst.pod())),
                        background: false,
                    });
                }
            }
            if let Some(t) = inst.deletion_time {
                deleted += 1;
                // A pod deleted at the instant it is created goes after its
                // creation (rank 2); other deletions before creations.
                let created_at = inst.creation_time.map(at);
                ranks.push(if created_at == Some(at(t)) { 2 } else { 0 });
                timeline.push(TimedOp {
                    at: at(t),
                    op: Op::DeletePod {
                        namespace: NAMESPACE.to_owned(),
                        name: inst.name.clone(),
                    },
                    background: false,
                });
            }
        }
        // Deletions before creations at the same instant (room first), but
        // a pod's own deletion after its creation; the run's stable sort by
        // `at` keeps this order.
        let mut ranked: Vec<(u8, TimedOp)> = ranks.into_iter().zip(timeline).collect();
        ranked.sort_by_key(|(rank, o)| (o.at, *rank));
        let timeline: Vec<TimedOp> = ranked.into_iter().map(|(_, o)| o).collect();
        let replay_duration = timeline.last().map_or(Duration::ZERO, |o| o.at);
        let init_pods = pods.len();
        ReplayWorkload {
            workload: Workload {
                name: "dlrm".to_owned(),
                nodes,
                barriers: vec![init_pods],
                pods,
                timeline,
                warnings: self.warnings.clone(),
                ..Workload::default()
            },
            init_pods,
            created_pods: created,
            deleted_pods: deleted,
            cn_nodes: sizes[0],
            hn_nodes: sizes[1],
            replay_duration,
        }
    }
}

#[cfg(test)]
mod tests {
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::workload::LoadError;
    use crate::workload::testutil::TempFile;

    const HEADER: &str = "instance_sn,role,app_name,cpu_request,cpu_limit,gpu_request,gpu_limit,rdma_request,rdma_limit,memory_request,memory_limit,disk_request,disk_limit,max_instance_per_node,creation_time,scheduled_time,deletion_time\n";

    fn load(rows: &str) -> Result<DlrmTrace> {
        let f = TempFile::new(TRACE_FILE, &format!("{HEADER}{rows}"));
        load_dlrm(f.path(), OnBadInput::Fail)
    }

    fn requests(pod: &Pod) -> BTreeMap<String, Quantity> {
        pod.spec.as_ref().expect("spec").containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.clone())
            .expect("requests")
    }

    #[test]
    fn units_are_converted_and_nan_rows_come_first() {
        let t = load(
            "instance_2,CN,app_1,64,64,0,0,1,1,320.0,320.0,255.0,300.0,-1,900.5,901,2000\n\
             instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,\n\
             instance_1,CN,app_1,48,48,0,0,100,100,937.5,937.5,255.0,300.0,2,475.0,475,\n\
             instance_3,HN,app_0,8,8,1,1,25,25,40.0,40.0,85.0,100.0,8,,,5000\n",
        )
        .expect("loads");
        let names: Vec<&str> = t.instances.iter().map(|i| i.name.as_str()).collect();
        assert_eq!(
            names,
            ["instance-0", "instance-3", "instance-1", "instance-2"],
            "NaN creation first in file order, then by creation time"
        );
        let i0 = &t.instances[0];
        assert_eq!(
            (i0.role, i0.cpu_cores, i0.gpus, i0.rdma_percent),
            (Role::Hn, 12, 1, 25)
        );
        assert_eq!(
            (i0.memory_mib, i0.disk_request_mib, i0.disk_limit_mib),
            (122_880, 655_360, 819_200)
        );
        assert_eq!(
            (
                i0.max_instances_per_node,
                i0.creation_time,
                i0.deletion_time
            ),
            (Some(8), None, None)
        );
        assert_eq!(t.instances[1].deletion_time, Some(5000.0));
        assert_eq!(t.instances[2].memory_mib, 960_000, "937.5 GiB");
        assert_eq!(
            t.instances[3].max_instances_per_node, None,
            "-1 is no limit"
        );
        assert_eq!(t.instances[3].creation_time, Some(900.5));

        let pod = t.instances[0].pod();
        let r = requests(&pod);
        let q = |s: &str| Quantity(s.to_owned());
        assert_eq!(r["cpu"], q("12000m"));
        assert_eq!(r["memory"], q("122880Mi"));
        assert_eq!(r["ephemeral-storage"], q("655360Mi"));
        assert_eq!(r["nvidia.com/gpu"], q("1"));
        assert_eq!(r["example.com/rdma-bw"], q("25"));
        let limits = pod.spec.as_ref().expect("spec").containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.clone())
            .expect("limits");
        assert_eq!(limits["ephemeral-storage"], q("819200Mi"));
        assert_eq!(limits["cpu"], q("12000m"));
        let labels = pod.metadata.labels.as_ref().expect("labels");
        assert_eq!(labels["app"], "app_0");
        assert_eq!(labels["role"], "HN");
        assert_eq!(
            pod.metadata.annotations.as_ref().expect("annotations")["scheduling.flotilla.dev/max-instances-per-node"],
            "8"
        );
        let spec = pod.spec.as_ref().expect("spec");
        assert_eq!(spec.node_selector.as_ref().expect("selector")["pool"], "hn");
        assert_eq!(spec.priority, Some(PRIORITY));
        assert_eq!(pod.metadata.namespace.as_deref(), Some("dlrm"));
        let cn = t.instances[3].pod();
        assert!(!requests(&cn).contains_key("nvidia.com/gpu"));
        assert!(
            cn.metadata
                .annotations
                .as_ref()
                .is_none_or(|a| !a.contains_key("scheduling.flotilla.dev/max-instances-per-node"))
        );
        assert!(flotilla_shared::PodInfo::from_pod(std::sync::Arc::new(pod)).is_ok());
    }

    #[test]
    fn a_bad_field_names_the_file_line_and_column() {
        let e = load(
            "instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,8,,,\n\
             instance_1,HN,app_0,12,12,1,1,25,25,lots,120.0,640.0,800.0,8,,,\n",
        )
        .expect_err("bad memory");
        assert_eq!(
            e.to_string(),
            "disaggregated_DLRM_trace.csv line 3, field memory_request: not a number \"lots\""
        );
        for (row, field) in [
            ("instance_0,XN,app_0,12,12,1,1,25,25,1,1,1,1,8,,,", "role"),
            (
                "instance_0,HN,app_0,12,12,1,1,125,125,1,1,1,1,8,,,",
                "rdma_request",
            ),
            (
                "instance_0,HN,app_0,12,12,1,1,25,25,1,1,1,1,0,,,",
                "max_instance_per_node",
            ),
            (
                "instance_0,HN,app_0,12,12,1,1,25,25,1,1,2,1,8,,,",
                "disk_limit",
            ),
            (
                "instance_0,HN,app_0,12,12,1,1,25,25,1,1,1,1,8,10,10,5",
                "deletion_time",
            ),
            (
                "instance_0,HN,app_0,-2,12,1,1,25,25,1,1,1,1,8,,,",
                "cpu_request",
            ),
            (
                "instance_0,HN,app_0,12,12,1,1,25,25,1,1,1,1,8,-5,,",
                "creation_time",
            ),
        ] {
            match load(&format!("{row}\n")) {
                Err(LoadError::InvalidField { line, field: f, .. }) => {
                    assert_eq!((line, f), (2, field), "{row}");
                }
                other => panic!("{row}: {other:?}"),
            }
        }
        let dup = load(
            "instance_0,HN,app_0,12,12,1,1,25,25,1,1,1,1,8,,,\n\
             instance_0,HN,app_0,12,12,1,1,25,25,1,1,1,1,8,,,\n",
        )
        .expect_err("duplicate");
        assert!(
            matches!(
                dup,
                LoadError::DuplicateName {
                    line: 3,
                    first_line: 2,
                    ..
                }
            ),
            "{dup}"
        );
        let f = TempFile::new(TRACE_FILE, "instance_sn,role\ninstance_0,HN\n");
        assert!(matches!(
            load_dlrm(f.path(), OnBadInput::Skip),
            Err(LoadError::CsvHeader { .. })
        ));
    }

    #[test]
    fn skip_mode_keeps_the_good_rows() {
        let f = TempFile::new(
            TRACE_FILE,
            &format!(
                "{HEADER}instance_0,HN,app_0,12,12,1,1,25,25,1,1,1,1,8,,,\n\
                 instance_1,HN,app_0,12,12,1,1,25,25,x,1,1,1,8,,,\n"
            ),
        );
        let t = load_dlrm(f.path(), OnBadInput::Skip).expect("skips");
        assert_eq!(t.instances.len(), 1);
        assert_eq!(t.warnings.len(), 1);
        assert_eq!(
            t.warnings[0].location,
            "disaggregated_DLRM_trace.csv line 3"
        );
    }

    #[test]
    fn the_replay_has_init_pods_a_barrier_and_a_timeline_in_trace_time() {
        let t = load(
            "instance_0,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,2,,,300\n\
             instance_1,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,2,100,100,200\n\
             instance_2,HN,app_0,12,12,1,1,25,25,120.0,120.0,640.0,800.0,2,200,200,\n\
             instance_3,CN,app_1,192,192,0,0,100,100,1000,1000,255.0,300.0,-1,50,50,\n\
             instance_4,CN,app_1,2,2,0,0,1,1,1,1,1,1,-1,200,200,200\n",
        )
        .expect("loads");
        let r = t.workload(&Replay {
            speedup: 100.0,
            ..Replay::default()
        });
        assert_eq!((r.init_pods, r.created_pods, r.deleted_pods), (1, 4, 3));
        assert_eq!(
            r.workload.barriers,
            [1],
            "the timeline waits for the init pods"
        );
        let ops: Vec<(u128, String)> = r
            .workload
            .timeline
            .iter()
            .map(|o| {
                let what = match &o.op {
                    Op::CreatePod(_) | Op::CreatePodFrom { .. } => {
                        format!("+{}", o.op.created_pod_key().unwrap_or_default().1)
                    }
                    Op::DeletePod { name, .. } => format!("-{name}"),
                    _ => "?".to_owned(),
                };
                (o.at.as_millis(), what)
            })
            .collect();
        assert_eq!(
            ops,
            [
                (500, "+instance-3".to_owned()),
                (1000, "+instance-1".to_owned()),
                (2000, "-instance-1".to_owned()),
                (2000, "+instance-2".to_owned()),
                (2000, "+instance-4".to_owned()),
                (2000, "-instance-4".to_owned()),
                (3000, "-instance-0".to_owned()),
            ],
            "deletions before creations at the same instant, but a pod's own after it"
        );
        assert_eq!(r.replay_duration, Duration::from_secs(3));
        // HN peak: 2 alive (the deletion of 1 comes before the creation of
        // 2): 3 GPUs with headroom, one 8-GPU node; app_0 capped at 2 needs
        // 1 node. CN: a 192-vCPU pod, 294 vCPU with headroom: 2 nodes.
        assert_eq!((r.cn_nodes, r.hn_nodes), (2, 1));
        let pools: Vec<&str> = r
            .workload
            .nodes
            .iter()
            .map(|n| n.metadata.labels.as_ref().expect("labels")["pool"].as_str())
            .collect();
        assert_eq!(pools, ["cn", "cn", "hn"]);
        let w = r.workload.validate(OnBadInput::Fail).expect("valid");
        assert_eq!(w.barriers, [1], "validate keeps a barrier at the end");
    }

    #[test]
    fn pools_cover_the_peak_with_headroom_and_the_caps() {
        let inst = |name: &str, cpu: u64, k: Option<u32>| Instance {
            name: name.to_owned(),
            role: Role::Cn,
            app: "a".to_owned(),
            cpu_cores: cpu,
            gpus: 0,
            rdma_percent: 0,
            memory_mib: 1024,
            disk_request_mib: 0,
            disk_limit_mib: 0,
            max_instances_per_node: k,
            creation_time: None,
            deletion_time: None,
            line: 0,
        };
        let four: Vec<Instance> = (0..4).map(|i| inst(&format!("i{i}"), 128, None)).collect();
        let refs: Vec<&Instance> = four.iter().collect();
        let p = peak(&refs);
        assert_eq!((p.pods, p.cpu_cores, p.nodes_for_caps), (4, 512, 0));
        assert_eq!(pool_size(&p, &CN_NODE, 1.0), 2);
        assert_eq!(pool_size(&p, &CN_NODE, 1.5), 3);
        let capped: Vec<Instance> = (0..4).map(|i| inst(&format!("i{i}"), 2, Some(1))).collect();
        let refs: Vec<&Instance> = capped.iter().collect();
        assert_eq!(pool_size(&peak(&refs), &CN_NODE, 1.5), 4, "one per node");
        assert_eq!(pool_size(&Peak::default(), &CN_NODE, 1.5), 0);
    }

    #[test]
    fn sampling_keeps_an_even_share() {
        let rows: String = (0..10)
            .map(|i| format!("instance_{i},CN,app_1,2,2,0,0,1,1,1,1,1,1,-1,{i},{i},\n"))
            .collect();
        let t = load(&rows).expect("loads");
        let r = t.workload(&Replay {
            sample: 0.3,
            ..Replay::default()
        });
        assert_eq!(r.created_pods, 3);
    }
}
