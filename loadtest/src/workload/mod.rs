//! Workloads: the input of a scheduling run, as real Kubernetes objects.
//!
//! A [`Workload`] is a set of [`Node`]s to register and a list of [`Pod`]s to
//! submit, in submission order. Three sources produce one:
//!
//! - [`synthetic`]: generated clusters shaped like upstream `scheduler_perf`
//!   test cases ([`synthetic::scheduling_basic`]);
//! - [`openb`]: the Alibaba GPU cluster trace v2023 ("openb") CSV files
//!   ([`openb::load_openb`]);
//! - [`dlrm`]: the Alibaba GPU cluster trace v2025 of disaggregated DLRM
//!   inference instances, replayed with arrivals and deletions
//!   ([`dlrm::load_dlrm`], [`dlrm::DlrmTrace::workload`]);
//! - [`k8s_list`]: a Kubernetes `List` or multi-document YAML/JSON dump, as
//!   written by `kubectl get nodes,pods -A -o yaml` ([`k8s_list::load_k8s_list`];
//!   [`k8s_list::load_cluster_objects`] also keeps Namespaces,
//!   PriorityClasses, PodDisruptionBudgets, [`pod_group::PodGroup`]s and
//!   `scheduling.k8s.io` PodGroups
//!   ([`flotilla_shared::gang::WorkloadPodGroup`]));
//! - [`live`]: the same [`ClusterObjects`] read from a live API server,
//!   read-only ([`live::read_cluster`]), for `simulate` / `explain`.
//!
//! Loaders that read files take an [`OnBadInput`] policy: either stop at the
//! first bad row/object ([`OnBadInput::Fail`]) or skip it and record a
//! [`LoadWarning`] ([`OnBadInput::Skip`]).

pub mod dlrm;
pub mod k8s_list;
pub mod live;
pub mod openb;
pub mod pod_group;
pub mod synthetic;

use std::collections::{BTreeMap, HashSet};
use std::path::{Path, PathBuf};
use std::sync::Arc;

use k8s_openapi::api::core::v1::{
    Container, Node, NodeCondition, NodeStatus, Pod, PodSpec, PodStatus,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

pub use flotilla_shared::objects::{ClusterObjects, LoadWarning};
pub use k8s_list::{load_cluster_objects, load_k8s_list};
pub use openb::{default_openb_dir, load_openb};
pub use synthetic::scheduling_basic;

/// Well-known node label holding the node name.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// Node label holding the GPU model of a GPU node (openb `model` column, e.g. `T4`).
/// Pods with a GPU-type constraint get a required node affinity `In` on this label.
pub const LABEL_GPU_CARD_MODEL: &str = "alibabacloud.com/gpu-card-model";
/// Pod label holding the original Alibaba QoS class (`LS`, `Guaranteed`, `Burstable`, `BE`).
pub const LABEL_QOS: &str = "alibabacloud.com/qos";
/// Pod label holding Flotilla's scheduling class: [`WORKLOAD_CLASS_ONLINE`] or
/// [`WORKLOAD_CLASS_BATCH`].
pub const LABEL_WORKLOAD_CLASS: &str = "flotilla.io/workload-class";
/// Value of [`LABEL_WORKLOAD_CLASS`] for latency-sensitive (online) pods.
pub const WORKLOAD_CLASS_ONLINE: &str = "online";
/// Value of [`LABEL_WORKLOAD_CLASS`] for best-effort (batch, preemptible) pods.
pub const WORKLOAD_CLASS_BATCH: &str = "batch";

/// Extended resource: whole GPUs (unit: GPUs).
pub const RESOURCE_GPU: &str = "nvidia.com/gpu";
/// Extended resource: GPU share in milli-GPU (unit: 1/1000 GPU; a node with
/// `n` GPUs offers `n × 1000`).
pub const RESOURCE_GPU_MILLI: &str = "alibabacloud.com/gpu-milli";

/// Pod annotation, as written by upstream's openb converter: GPU share per
/// requested GPU, in milli-GPU (`1000` = a whole GPU).
pub const ANNOTATION_GPU_MILLI: &str = "alibabacloud.com/gpu-milli";
/// Pod annotation, as written by upstream's openb converter: number of GPUs requested.
pub const ANNOTATION_GPU_COUNT: &str = "alibabacloud.com/gpu-count";
/// Pod annotation, as written by upstream's openb converter: allowed GPU
/// models, `|`-separated (duplicates removed).
pub const ANNOTATION_GPU_CARD_MODEL: &str = "alibabacloud.com/gpu-card-model";
/// Pod annotation: creation time of the pod in the trace, in seconds since the
/// start of the trace.
pub const ANNOTATION_TRACE_CREATION_TIME: &str = "flotilla.io/trace-creation-time";

/// `spec.schedulerName` given to generated pods.
pub const DEFAULT_SCHEDULER_NAME: &str = "default-scheduler";
/// Container image given to generated pods (never pulled by the scheduler).
pub const PAUSE_IMAGE: &str = "registry.k8s.io/pause:3.10";

impl Workload {
    /// Reads every node and pod the way the scheduler will
    /// (`NodeSpec::from_node`, `PodInfo::from_pod`), so input that parses as
    /// Kubernetes but cannot be scheduled (a quantity out of range or
    /// negative, an unknown selector operator, a bad workload-class label) is
    /// caught before the run: with [`OnBadInput::Fail`] it is the error, with
    /// [`OnBadInput::Skip`] the object is dropped with a warning.
    ///
    /// # Errors
    /// [`LoadError::Invalid`] for the first bad object under `Fail`.
    pub fn validate(mut self, on_bad: OnBadInput) -> Result<Self> {
        let mut warnings = std::mem::take(&mut self.warnings);
        let mut nodes = Vec::with_capacity(self.nodes.len());
        for n in self.nodes {
            match flotilla_shared::NodeSpec::from_node(Arc::new(n.clone())) {
                Ok(_) => nodes.push(n),
                Err(e) => on_bad.handle(
                    LoadError::Invalid {
                        object: format!("node {}", e.node),
                        message: e.message,
                    },
                    &mut warnings,
                )?,
            }
        }
        let mut pods = Vec::with_capacity(self.pods.len());
        // Barriers stay between the same pods when bad ones are dropped.
        let mut barriers = Vec::with_capacity(self.barriers.len());
        let mut next_barrier = self.barriers.iter().copied().peekable();
        for (i, p) in self.pods.into_iter().enumerate() {
            while next_barrier.next_if(|&b| b <= i).is_some() {
                if barriers.last() != Some(&pods.len()) {
                    barriers.push(pods.len());
                }
            }
            match flotilla_shared::PodInfo::from_pod(Arc::new(p.clone())) {
                Ok(_) => pods.push(p),
                Err(e) => on_bad.handle(
                    LoadError::Invalid {
                        object: format!("pod {}", e.pod),
                        message: e.message,
                    },
                    &mut warnings,
                )?,
            }
        }
        // Barriers at or past the end stay at the (new) end.
        if next_barrier.next().is_some() && barriers.last() != Some(&pods.len()) {
            barriers.push(pods.len());
        }
        let mut timeline = Vec::with_capacity(self.timeline.len());
        // A good template is checked once, whatever the number of its
        // copies (a bad one fails each copy, each named).
        let mut good_templates: HashSet<*const Pod> = HashSet::new();
        for op in std::mem::take(&mut self.timeline) {
            let bad = match &op.op {
                Op::CreatePodFrom { template, .. }
                    if good_templates.contains(&Arc::as_ptr(template)) =>
                {
                    None
                }
                Op::CreatePod(_) | Op::CreatePodFrom { .. } => {
                    let pod = op.op.created_pod().map(std::borrow::Cow::into_owned);
                    let bad = pod
                        .and_then(|p| flotilla_shared::PodInfo::from_pod(Arc::new(p)).err())
                        .map(|e| (format!("pod {}", e.pod), e.message));
                    if let (None, Op::CreatePodFrom { template, .. }) = (&bad, &op.op) {
                        good_templates.insert(Arc::as_ptr(template));
                    }
                    bad
                }
                Op::CreateNode(n) => flotilla_shared::NodeSpec::from_node(Arc::new((**n).clone()))
                    .err()
                    .map(|e| (format!("node {}", e.node), e.message)),
                Op::DeletePod { .. } | Op::DeleteNode(_) => None,
            };
            match bad {
                Some((object, message)) => {
                    on_bad.handle(LoadError::Invalid { object, message }, &mut warnings)?;
                }
                None => timeline.push(op),
            }
        }
        self.nodes = nodes;
        self.pods = pods;
        self.warnings = warnings;
        self.barriers = barriers;
        self.timeline = timeline;
        Ok(self)
    }
}

/// Result type of the workload loaders.
pub type Result<T, E = LoadError> = std::result::Result<T, E>;

/// Nodes and pods to load into a cluster, pods in submission order.
#[derive(Debug, Clone, Default)]
pub struct Workload {
    /// Human-readable name of the workload (source and size), for reports.
    pub name: String,
    /// Nodes to register before any pod is submitted.
    pub nodes: Vec<Node>,
    /// Pods to submit, in submission order.
    pub pods: Vec<Pod>,
    /// Bad rows or objects that were skipped ([`OnBadInput::Skip`]) and
    /// objects of unsupported kinds, in input order.
    pub warnings: Vec<LoadWarning>,
    /// Barriers (upstream `scheduler_perf`'s `barrier` op): indices into
    /// `pods`, ascending; the run submits the pods before a barrier, waits
    /// until every one of them is resolved (bound or unschedulable), then
    /// submits the next ones. Empty: everything at once. A barrier equal
    /// to `pods.len()` holds the [`Workload::timeline`] until every pod is
    /// resolved (a trace's initial pods, then its arrivals).
    pub barriers: Vec<usize>,
    /// PriorityClasses to create before the pods (resolve
    /// `priorityClassName`).
    pub priority_classes: Vec<k8s_openapi::api::scheduling::v1::PriorityClass>,
    /// PodDisruptionBudgets to create before the pods (preemption respects
    /// them).
    pub pod_disruption_budgets: Vec<k8s_openapi::api::policy::v1::PodDisruptionBudget>,
    /// PodGroups to create before the pods (gangs, with Coscheduling).
    pub pod_groups: Vec<pod_group::PodGroup>,
    /// `scheduling.k8s.io` PodGroups to create before the pods (gangs and
    /// basic groups their pods name in `spec.schedulingGroup`, with
    /// GangScheduling).
    pub workload_pod_groups: Vec<flotilla_shared::gang::WorkloadPodGroup>,
    /// Volume objects (claims, PVs, StorageClasses, CSINodes, CSIDrivers,
    /// VolumeAttachments) to create before the pods.
    pub volumes: Vec<flotilla_shared::volumes::VolumeObject>,
    /// Timed cluster changes: a trace's arrivals and deletions, upstream
    /// `scheduler_perf`'s `churn` op. Applied in `at` order, `at` counted
    /// from the moment the last wave of `pods` is submitted. Empty: none.
    pub timeline: Vec<TimedOp>,
}

/// A change to the cluster during a run.
#[derive(Debug, Clone)]
pub enum Op {
    /// Create this pod.
    CreatePod(Box<Pod>),
    /// Create a copy of `template` named `name` (as upstream
    /// `scheduler_perf`'s `createPods` stamps out a `podTemplatePath`): a
    /// long timeline holds one decoded `Pod` per template instead of one
    /// per pod (a `Pod` is several KB on the heap).
    CreatePodFrom {
        /// The pod to copy (its `metadata.name` is replaced).
        template: Arc<Pod>,
        /// `metadata.name` of the copy.
        name: String,
    },
    /// Delete the pod `namespace/name` (gracefully, as the API server would).
    DeletePod {
        /// Namespace.
        namespace: String,
        /// Name.
        name: String,
    },
    /// Create (or replace) this node.
    CreateNode(Box<Node>),
    /// Delete the node with this name.
    DeleteNode(String),
}

impl Op {
    /// The pod this op creates, if it creates one.
    #[must_use]
    pub fn created_pod(&self) -> Option<std::borrow::Cow<'_, Pod>> {
        match self {
            Op::CreatePod(p) => Some(std::borrow::Cow::Borrowed(&**p)),
            Op::CreatePodFrom { template, name } => Some(std::borrow::Cow::Owned(
                pod_from_template(template, name.clone()),
            )),
            Op::DeletePod { .. } | Op::CreateNode(_) | Op::DeleteNode(_) => None,
        }
    }

    /// The pod this op creates, taken out of the op (a template copied).
    #[must_use]
    pub fn into_created_pod(self) -> Option<Pod> {
        match self {
            Op::CreatePod(p) => Some(*p),
            Op::CreatePodFrom { template, name } => Some(pod_from_template(&template, name)),
            Op::DeletePod { .. } | Op::CreateNode(_) | Op::DeleteNode(_) => None,
        }
    }

    /// `(namespace, name)` of the pod this op creates (namespace `default`
    /// when unset), without building it.
    #[must_use]
    pub fn created_pod_key(&self) -> Option<(&str, &str)> {
        let (meta, name) = match self {
            Op::CreatePod(p) => (&p.metadata, p.metadata.name.as_deref().unwrap_or_default()),
            Op::CreatePodFrom { template, name } => (&template.metadata, name.as_str()),
            Op::DeletePod { .. } | Op::CreateNode(_) | Op::DeleteNode(_) => return None,
        };
        Some((meta.namespace.as_deref().unwrap_or("default"), name))
    }
}

/// A copy of `template` named `name` ([`Op::CreatePodFrom`]), with a uid of
/// its own (derived from its namespace and name, as the loaders' pods get;
/// none when the template has none, so the cluster assigns one).
#[must_use]
pub fn pod_from_template(template: &Pod, name: String) -> Pod {
    let mut pod = template.clone();
    if pod.metadata.uid.is_some() {
        let namespace = pod.metadata.namespace.as_deref().unwrap_or("default");
        pod.metadata.uid = Some(deterministic_uid(&format!("{namespace}/{name}")));
    }
    pod.metadata.name = Some(name);
    pod
}

/// An [`Op`] at a time offset.
#[derive(Debug, Clone)]
pub struct TimedOp {
    /// When, from the start of the timeline.
    pub at: std::time::Duration,
    /// What.
    pub op: Op,
    /// Background churn (upstream's `churn` op): applied only while some
    /// foreground work is left (a foreground op not yet applied, or a pod
    /// not yet resolved), then dropped. Foreground ops are always applied.
    pub background: bool,
}

/// What a loader does with a bad row (CSV) or bad object (Kubernetes list).
///
/// Errors that concern the whole file (unreadable file, wrong CSV header,
/// YAML/JSON syntax error) always fail, whatever the policy.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OnBadInput {
    /// Report a [`LoadWarning`] for the bad row/object and go on with the valid rest.
    Skip,
    /// Stop at the first bad row/object and return its [`LoadError`].
    #[default]
    Fail,
}

impl OnBadInput {
    /// Applies the policy to a row-level error: returns it ([`OnBadInput::Fail`])
    /// or records it as a warning ([`OnBadInput::Skip`]).
    pub(crate) fn handle(self, err: LoadError, warnings: &mut Vec<LoadWarning>) -> Result<()> {
        match self {
            Self::Fail => Err(err),
            Self::Skip => {
                // Callers report warnings (the CLI prints them); no log here,
                // or each would show twice.
                warnings.push(err.to_warning());
                Ok(())
            }
        }
    }
}

/// Why a workload could not be loaded.
///
/// `file` fields hold the file name only (for readable messages); `path`
/// fields hold the full path. CSV `line` numbers are 1-based and count the
/// header as line 1. Kubernetes-list `item` fields describe the object, e.g.
/// `item 3 (Pod default/web-1)`, items being numbered from 1 in file order.
#[derive(Debug, thiserror::Error)]
pub enum LoadError {
    /// The file could not be opened or read.
    #[error("cannot read {}: {source}", path.display())]
    Io {
        /// Full path of the file.
        path: PathBuf,
        /// Underlying I/O error.
        source: std::io::Error,
    },

    /// A CSV file does not have the expected header line.
    #[error("{file} line 1: wrong header \"{found}\", expected the columns \"{expected}\"")]
    CsvHeader {
        /// File name.
        file: String,
        /// Header found, comma-separated.
        found: String,
        /// Expected columns (any order), comma-separated.
        expected: String,
    },

    /// A CSV record is malformed (wrong number of fields, invalid UTF-8).
    #[error("{file} line {line}: malformed CSV record: {message}")]
    CsvRecord {
        /// File name.
        file: String,
        /// Line where the record starts.
        line: u64,
        /// What is wrong.
        message: String,
    },

    /// A CSV field has an invalid value (not a non-negative integer, unknown
    /// QoS class, GPU columns inconsistent with each other, empty name).
    #[error("{file} line {line}, field {field}: {message}")]
    InvalidField {
        /// File name.
        file: String,
        /// Line of the row.
        line: u64,
        /// Column name.
        field: &'static str,
        /// What is wrong, quoting the value.
        message: String,
    },

    /// A CSV row repeats the name of an earlier row of the same file.
    #[error(
        "{file} line {line}, field {field}: duplicate name \"{name}\" (first on line {first_line})"
    )]
    DuplicateName {
        /// File name.
        file: String,
        /// Line of the duplicate row.
        line: u64,
        /// Column holding the name.
        field: &'static str,
        /// The repeated name.
        name: String,
        /// Line of the first row with that name.
        first_line: u64,
    },

    /// A file that looks like JSON is not valid JSON.
    #[error("{file}: invalid JSON: {source}")]
    Json {
        /// File name.
        file: String,
        /// Parser error, with line and column.
        source: serde_json::Error,
    },

    /// A file is not valid YAML.
    #[error("{file}: invalid YAML: {source}")]
    Yaml {
        /// File name.
        file: String,
        /// Parser error, with line and column (boxed: it is large).
        source: Box<serde_saphyr::Error>,
    },

    /// A document or list item is not a Kubernetes object (not a mapping, no `kind`).
    #[error("{file}: {item}: {message}")]
    InvalidObject {
        /// File name.
        file: String,
        /// Which item, e.g. `item 3`.
        item: String,
        /// What is wrong.
        message: String,
    },

    /// A Node or Pod has no `metadata.name`.
    #[error("{file}: {item}: metadata.name is missing")]
    MissingName {
        /// File name.
        file: String,
        /// Which item, e.g. `item 3 (Pod)`.
        item: String,
    },

    /// A Node or Pod does not match the Kubernetes schema.
    #[error("{file}: {item}: {path}: {message}")]
    Decode {
        /// File name.
        file: String,
        /// Which object, e.g. `item 3 (Pod default/web-1)`.
        item: String,
        /// Field path inside the object, e.g. `spec.containers[0].resources.requests.cpu`.
        path: String,
        /// Decoder message, e.g. `invalid type: sequence, expected Quantity`.
        message: String,
    },

    /// A resource quantity is not a valid Kubernetes quantity.
    #[error("{file}: {item}: {path}: invalid quantity \"{value}\"")]
    InvalidQuantity {
        /// File name.
        file: String,
        /// Which object, e.g. `item 3 (Pod default/web-1)`.
        item: String,
        /// Field path, e.g. `spec.containers[0].resources.requests.cpu`.
        path: String,
        /// The invalid quantity.
        value: String,
    },

    /// A Node or Pod is well-formed Kubernetes but not schedulable input
    /// (out-of-range or negative quantity, bad selector operator, bad
    /// workload-class label): the scheduler's own reading of it failed.
    #[error("{object}: {message}")]
    Invalid {
        /// `node <name>` or `pod <namespace>/<name>`.
        object: String,
        /// Field path and problem.
        message: String,
    },

    /// A Node or Pod has the same (namespace and) name as an earlier one.
    #[error("{file}: {item}: duplicate object (first as item {first_item})")]
    DuplicateObject {
        /// File name.
        file: String,
        /// Which object, e.g. `item 7 (Node node-a)`.
        item: String,
        /// Number of the first item with that name.
        first_item: usize,
    },
}

impl LoadError {
    /// Splits the error into a location and a message, for a [`LoadWarning`].
    pub(crate) fn to_warning(&self) -> LoadWarning {
        let (location, message) = match self {
            Self::Invalid { object, message } => (object.clone(), message.clone()),
            Self::Io { path, source } => (path.display().to_string(), source.to_string()),
            Self::CsvHeader { file, .. } => (format!("{file} line 1"), self.to_string()),
            Self::CsvRecord {
                file,
                line,
                message,
            } => (
                format!("{file} line {line}"),
                format!("malformed CSV record: {message}"),
            ),
            Self::InvalidField {
                file,
                line,
                field,
                message,
            } => (
                format!("{file} line {line}"),
                format!("field {field}: {message}"),
            ),
            Self::DuplicateName {
                file,
                line,
                field,
                name,
                first_line,
            } => (
                format!("{file} line {line}"),
                format!("field {field}: duplicate name \"{name}\" (first on line {first_line})"),
            ),
            Self::Json { file, source } => (file.clone(), format!("invalid JSON: {source}")),
            Self::Yaml { file, source } => (file.clone(), format!("invalid YAML: {source}")),
            Self::InvalidObject {
                file,
                item,
                message,
            } => (format!("{file}: {item}"), message.clone()),
            Self::MissingName { file, item } => (
                format!("{file}: {item}"),
                "metadata.name is missing".to_owned(),
            ),
            Self::Decode {
                file,
                item,
                path,
                message,
            } => (format!("{file}: {item}"), format!("{path}: {message}")),
            Self::InvalidQuantity {
                file,
                item,
                path,
                value,
            } => (
                format!("{file}: {item}"),
                format!("{path}: invalid quantity \"{value}\""),
            ),
            Self::DuplicateObject {
                file,
                item,
                first_item,
            } => (
                format!("{file}: {item}"),
                format!("duplicate object (first as item {first_item})"),
            ),
        };
        LoadWarning { location, message }
    }
}

/// File name of `path` for messages, or the whole path if it has none.
pub(crate) fn file_label(path: &Path) -> String {
    path.file_name().map_or_else(
        || path.display().to_string(),
        |name| name.to_string_lossy().into_owned(),
    )
}

/// A deterministic UUID-shaped string (version 8, "custom") derived from `seed`
/// with 128-bit FNV-1a. The same seed always gives the same uid.
pub(crate) fn deterministic_uid(seed: &str) -> String {
    const OFFSET: u128 = 0x6c62_272e_07bb_0142_62b8_2175_6295_c58d;
    const PRIME: u128 = 0x0000_0000_0100_0000_0000_0000_0000_013b;
    let mut hash = OFFSET;
    for byte in seed.bytes() {
        hash ^= u128::from(byte);
        hash = hash.wrapping_mul(PRIME);
    }
    // Version 8 in bits 76..80, RFC 4122 variant (0b10) in bits 62..64.
    hash = (hash & !(0xf << 76)) | (0x8 << 76);
    hash = (hash & !(0x3 << 62)) | (0x2 << 62);
    format!(
        "{:08x}-{:04x}-{:04x}-{:04x}-{:012x}",
        hash >> 96,
        (hash >> 80) & 0xffff,
        (hash >> 64) & 0xffff,
        (hash >> 48) & 0xffff,
        hash & 0xffff_ffff_ffff
    )
}

/// A resource map from `(name, quantity)` pairs.
pub(crate) fn resource_list<'a>(
    pairs: impl IntoIterator<Item = (&'a str, String)>,
) -> BTreeMap<String, Quantity> {
    pairs
        .into_iter()
        .map(|(name, value)| (name.to_owned(), Quantity(value)))
        .collect()
}

/// A schedulable node: `capacity = allocatable = resources`, condition
/// `Ready=True`, no taints, and the hostname label added to `labels`.
pub(crate) fn ready_node(
    name: &str,
    mut labels: BTreeMap<String, String>,
    resources: BTreeMap<String, Quantity>,
) -> Node {
    labels.insert(LABEL_HOSTNAME.to_owned(), name.to_owned());
    Node {
        metadata: ObjectMeta {
            name: Some(name.to_owned()),
            labels: Some(labels),
            ..ObjectMeta::default()
        },
        spec: None,
        status: Some(NodeStatus {
            capacity: Some(resources.clone()),
            allocatable: Some(resources),
            conditions: Some(vec![NodeCondition {
                type_: "Ready".to_owned(),
                status: "True".to_owned(),
                ..NodeCondition::default()
            }]),
            ..NodeStatus::default()
        }),
    }
}

/// An unbound pod ready for submission: one container, a deterministic uid
/// from `namespace/name`, `schedulerName` [`DEFAULT_SCHEDULER_NAME`], phase
/// `Pending`, no `nodeName`.
pub(crate) fn pending_pod(namespace: &str, name: &str, container: Container) -> Pod {
    Pod {
        metadata: ObjectMeta {
            namespace: Some(namespace.to_owned()),
            name: Some(name.to_owned()),
            uid: Some(deterministic_uid(&format!("{namespace}/{name}"))),
            ..ObjectMeta::default()
        },
        spec: Some(PodSpec {
            containers: vec![container],
            scheduler_name: Some(DEFAULT_SCHEDULER_NAME.to_owned()),
            ..PodSpec::default()
        }),
        status: Some(PodStatus {
            phase: Some("Pending".to_owned()),
            ..PodStatus::default()
        }),
    }
}

#[cfg(test)]
pub(crate) mod testutil {
    //! Temporary files for loader tests.

    use std::path::{Path, PathBuf};
    use std::sync::atomic::{AtomicUsize, Ordering};

    /// A file in `std::env::temp_dir()` with a unique name, removed on drop.
    pub(crate) struct TempFile {
        path: PathBuf,
    }

    impl TempFile {
        /// Writes `contents` to a fresh file whose name ends with `name`.
        pub(crate) fn new(name: &str, contents: &str) -> Self {
            static COUNTER: AtomicUsize = AtomicUsize::new(0);
            let n = COUNTER.fetch_add(1, Ordering::Relaxed);
            let dir =
                std::env::temp_dir().join(format!("flotilla-loadtest-{}-{n}", std::process::id()));
            std::fs::create_dir_all(&dir).expect("create temp dir");
            let path = dir.join(name);
            std::fs::write(&path, contents).expect("write temp file");
            Self { path }
        }

        /// Path of the file.
        pub(crate) fn path(&self) -> &Path {
            &self.path
        }
    }

    impl Drop for TempFile {
        fn drop(&mut self) {
            let _ = std::fs::remove_file(&self.path);
            if let Some(dir) = self.path.parent() {
                let _ = std::fs::remove_dir(dir);
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// Sets the first container's cpu request of `pod` to `q`.
    fn set_cpu_request(pod: &mut Pod, q: &str) {
        pod.spec.as_mut().expect("spec").containers[0]
            .resources
            .as_mut()
            .expect("resources")
            .requests
            .as_mut()
            .expect("requests")
            .insert("cpu".into(), Quantity(q.into()));
    }

    fn with_bad_pod_and_node() -> Workload {
        let mut w = synthetic::scheduling_basic(3, 4);
        // Parses as Kubernetes, but 2^70 millicores is beyond any scheduler.
        set_cpu_request(&mut w.pods[1], "99999999999999999999999");
        w.nodes[2]
            .status
            .as_mut()
            .expect("status")
            .allocatable
            .as_mut()
            .expect("allocatable")
            .insert("cpu".into(), Quantity("-4".into()));
        w
    }

    #[test]
    fn pods_from_a_template_get_their_own_name_and_uid_and_a_bad_template_is_caught() {
        let good = Arc::new(synthetic::scheduling_basic(1, 1).pods.remove(0));
        let mut bad = (*good).clone();
        set_cpu_request(&mut bad, "lots");
        let bad = Arc::new(bad);
        let op = |template: &Arc<Pod>, name: &str| TimedOp {
            at: std::time::Duration::ZERO,
            op: Op::CreatePodFrom {
                template: template.clone(),
                name: name.to_owned(),
            },
            background: false,
        };
        let timeline = vec![op(&good, "a"), op(&bad, "b"), op(&good, "c"), op(&bad, "d")];
        let w = Workload {
            timeline,
            ..Workload::default()
        }
        .validate(OnBadInput::Skip)
        .expect("skip mode");
        let made: Vec<Pod> = w
            .timeline
            .iter()
            .map(|o| o.op.created_pod().expect("creates a pod").into_owned())
            .collect();
        let names: Vec<_> = made
            .iter()
            .map(|p| p.metadata.name.clone().unwrap())
            .collect();
        assert_eq!(names, ["a", "c"], "both copies of the bad template dropped");
        assert_ne!(made[0].metadata.uid, made[1].metadata.uid);
        assert_ne!(made[0].metadata.uid, good.metadata.uid);
        assert_eq!(made[0].spec, good.spec);
        assert_eq!(
            w.timeline[1].op.created_pod_key(),
            Some((good.metadata.namespace.as_deref().unwrap_or("default"), "c"))
        );
        assert_eq!(w.warnings.len(), 2, "{:?}", w.warnings);
    }

    #[test]
    fn validate_fails_on_the_first_unschedulable_object_in_fail_mode() {
        let e = with_bad_pod_and_node()
            .validate(OnBadInput::Fail)
            .expect_err("negative node cpu");
        assert_eq!(
            e.to_string(),
            "node node-00002: status.allocatable.cpu: quantity \"-4\" must not be negative"
        );
    }

    #[test]
    fn validate_skips_and_warns_in_skip_mode() {
        let w = with_bad_pod_and_node()
            .validate(OnBadInput::Skip)
            .expect("skip mode");
        assert_eq!((w.nodes.len(), w.pods.len()), (2, 3));
        let msgs: Vec<String> = w.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(msgs.len(), 2, "{msgs:?}");
        assert!(
            msgs[0].starts_with("node node-00002: status.allocatable.cpu"),
            "{msgs:?}"
        );
        assert!(
            msgs[1].starts_with("pod default/pod-00001: spec.containers[0].resources.requests.cpu"),
            "{msgs:?}"
        );
    }

    #[test]
    fn deterministic_uid_is_stable_and_uuid_shaped() {
        let a = deterministic_uid("default/pod-00000");
        assert_eq!(a, deterministic_uid("default/pod-00000"));
        assert_ne!(a, deterministic_uid("default/pod-00001"));
        let groups: Vec<usize> = a.split('-').map(str::len).collect();
        assert_eq!(groups, [8, 4, 4, 4, 12]);
        assert!(a.chars().all(|c| c == '-' || c.is_ascii_hexdigit()));
        assert_eq!(a.as_bytes()[14], b'8', "version nibble in {a}");
        assert!(
            matches!(a.as_bytes()[19], b'8' | b'9' | b'a' | b'b'),
            "variant in {a}"
        );
    }

    #[test]
    fn skip_turns_errors_into_warnings() {
        let err = LoadError::InvalidField {
            file: "f.csv".into(),
            line: 17,
            field: "cpu_milli",
            message: "invalid digit \"12x00\"".into(),
        };
        assert_eq!(
            err.to_string(),
            "f.csv line 17, field cpu_milli: invalid digit \"12x00\""
        );
        let mut warnings = Vec::new();
        OnBadInput::Skip.handle(err, &mut warnings).expect("skip");
        assert_eq!(warnings.len(), 1);
        assert_eq!(warnings[0].location, "f.csv line 17");
        assert_eq!(
            warnings[0].to_string(),
            "f.csv line 17: field cpu_milli: invalid digit \"12x00\""
        );

        let err = LoadError::MissingName {
            file: "c.yaml".into(),
            item: "item 2 (Pod)".into(),
        };
        assert!(OnBadInput::Fail.handle(err, &mut warnings).is_err());
        assert_eq!(warnings.len(), 1);
    }
}
