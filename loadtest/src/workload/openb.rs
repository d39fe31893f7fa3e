//! The Alibaba GPU cluster trace v2023 ("openb") as a [`Workload`].
//!
//! The trace (USENIX ATC '23, *Beware of Fragmentation: Scheduling
//! GPU-Sharing Workloads with Fragmentation Gradient Descent*, Weng et al.)
//! has one CSV list of nodes and one CSV list of pods. It is research/study
//! data without a license file: it is read at run time from
//! `shared/data/alibaba-gpu-v2023-openb/` (see [`default_openb_dir`]) and must
//! never be copied into the repository or a published artefact. Cite the
//! paper in any benchmark report.
//!
//! # Mapping
//!
//! Node (one per row of **one** node file; never join the two node files):
//! - name and label `kubernetes.io/hostname` = `sn`;
//! - capacity = allocatable: cpu `<cpu_milli>m`, memory `<memory_mib>Mi`,
//!   pods [`NODE_PODS`]; when `gpu > 0` also `nvidia.com/gpu: <gpu>` and
//!   `alibabacloud.com/gpu-milli: <gpu × 1000>`, and label
//!   `alibabacloud.com/gpu-card-model = <model>` (no label on CPU-only nodes);
//! - condition `Ready=True`, no taints.
//!
//! Pod (one per row, in file order, which is `creation_time` order):
//! - `openb/<name>`, deterministic uid, `schedulerName: default-scheduler`,
//!   phase `Pending`, no `nodeName`;
//! - one container [`CONTAINER_NAME`] with requests = limits: cpu
//!   `<cpu_milli>m`, memory `<memory_mib>Mi`, and for GPU pods:
//!   - whole GPUs (`num_gpu ≥ 1`, `gpu_milli = 1000`):
//!     `nvidia.com/gpu: <num_gpu>` and `alibabacloud.com/gpu-milli: <num_gpu × 1000>`;
//!   - a GPU share (`num_gpu = 1`, `gpu_milli < 1000`): only
//!     `alibabacloud.com/gpu-milli: <gpu_milli>`;
//! - GPU pods also get upstream's annotations `alibabacloud.com/gpu-milli`
//!   (per GPU), `alibabacloud.com/gpu-count` and, with a constraint,
//!   `alibabacloud.com/gpu-card-model`;
//! - `gpu_spec` (`|`-separated GPU models, duplicates removed, first-seen
//!   order): required node affinity `alibabacloud.com/gpu-card-model In [...]`.
//!   It is applied as written, also on a CPU-only pod (the trace has none);
//! - `qos` → label `flotilla.io/workload-class` and `spec.priority`:
//!   `LS`/`Guaranteed` → `online`, 1000; `Burstable` → `online`, 500;
//!   `BE` → `batch`, 0. The original class stays in label `alibabacloud.com/qos`.
//!   Kubernetes' own QoS class cannot carry this: it is `Guaranteed` for
//!   every pod, as requests = limits;
//! - `creation_time` → annotation `flotilla.io/trace-creation-time` (seconds).
//!
//! Pods whose last production phase was `Pending` (never scheduled) are kept:
//! they are real demand and part of the packing scenario. `pod_phase`,
//! `deletion_time` and `scheduled_time` are not used (no deletions are
//! replayed).
//!
//! # Approximation: GPU sharing
//!
//! Faithful placement of a fractional pod needs one physical GPU with at
//! least `gpu_milli` free (per-device accounting). Here a node offers one
//! scalar resource, the sum of milli-GPU over its GPUs, so a scheduler that
//! compares resources can over-admit. For example, on a 2-GPU node (2000
//! milli-GPU) three 600-milli pods fit the sum (1800 ≤ 2000), but only two fit
//! the devices (one per GPU). Likewise a whole-GPU pod can be admitted on a
//! node whose free milli-GPU is scattered over partly used GPUs. Whole-GPU
//! pods request both `nvidia.com/gpu` and milli-GPU, so whole and shared pods
//! draw from the same milli-GPU pool.
//!
//! # Validation
//!
//! The header must have exactly the expected columns (any order), or
//! exactly the five of the `multigpu*` variants' pod files (`name`,
//! `cpu_milli`, `memory_mib`, `num_gpu`, `gpu_milli`: their pods get no
//! model constraint, QoS `BE`, creation time 0). Fields are
//! trimmed of surrounding whitespace. Numbers
//! must be non-negative integers; `qos` one of `LS`, `Guaranteed`,
//! `Burstable`, `BE`; `gpu_milli` must be 0 when `num_gpu = 0`, 1..=1000 when
//! `num_gpu = 1` and 1000 when `num_gpu > 1`; names must be non-empty and
//! unique; GPU models must be valid label values. A model named in `gpu_spec`
//! that no node has is not an error (such pods stay unschedulable).

use std::collections::{BTreeMap, HashMap};
use std::fs::File;
use std::num::IntErrorKind;
use std::path::{Path, PathBuf};

use k8s_openapi::api::core::v1::{
    Affinity, Container, Node, NodeAffinity, NodeSelector, NodeSelectorRequirement,
    NodeSelectorTerm, Pod, ResourceRequirements,
};
use serde::Deserialize;

use super::{
    ANNOTATION_GPU_CARD_MODEL, ANNOTATION_GPU_COUNT, ANNOTATION_GPU_MILLI,
    ANNOTATION_TRACE_CREATION_TIME, LABEL_GPU_CARD_MODEL, LABEL_QOS, LABEL_WORKLOAD_CLASS,
    LoadError, LoadWarning, OnBadInput, PAUSE_IMAGE, RESOURCE_GPU, RESOURCE_GPU_MILLI, Result,
    WORKLOAD_CLASS_BATCH, WORKLOAD_CLASS_ONLINE, Workload, file_label, pending_pod, ready_node,
    resource_list,
};

/// Location of the trace folder relative to an ancestor of the project.
pub const OPENB_DATA_DIR: &str = "shared/data/alibaba-gpu-v2023-openb";
/// Node file: the whole cluster (1,523 nodes, 310 of them CPU-only).
pub const NODES_ALL_FILE: &str = "openb_node_list_all_node.csv";
/// Node file: GPU nodes only (1,213 nodes, renamed: never mix with [`NODES_ALL_FILE`]).
pub const NODES_GPU_FILE: &str = "openb_node_list_gpu_node.csv";
/// Pod file: the production task list (8,152 pods, no GPU-type constraint).
pub const PODS_DEFAULT_FILE: &str = "openb_pod_list_default.csv";
/// Pod file: the default pods with GPU-type constraints on about 33 % of GPU pods.
pub const PODS_GPUSPEC33_FILE: &str = "openb_pod_list_gpuspec33.csv";

/// Namespace of the trace pods.
pub const NAMESPACE: &str = "openb";
/// Name of the single container of every trace pod.
pub const CONTAINER_NAME: &str = "main";
/// Pod capacity of every trace node, in pods (the Kubernetes default; not in the trace).
pub const NODE_PODS: &str = "110";
/// `spec.priority` of `LS` and `Guaranteed` pods.
pub const PRIORITY_ONLINE: i32 = 1000;
/// `spec.priority` of `Burstable` pods.
pub const PRIORITY_BURSTABLE: i32 = 500;
/// `spec.priority` of `BE` pods.
pub const PRIORITY_BATCH: i32 = 0;

/// Milli-GPU in one whole GPU.
const MILLI_PER_GPU: u64 = 1000;

const NODE_COLUMNS: &[&str] = &["sn", "cpu_milli", "memory_mib", "gpu", "model"];
/// The columns of the `multigpu20/30/40/50` variants' pod files: no
/// `gpu_spec`, QoS, phase or times. Their pods get no model constraint,
/// class `batch` with priority 0 and creation time 0.
const POD_COLUMNS_MULTIGPU: &[&str] = &["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli"];
const POD_COLUMNS: &[&str] = &[
    "name",
    "cpu_milli",
    "memory_mib",
    "num_gpu",
    "gpu_milli",
    "gpu_spec",
    "qos",
    "pod_phase",
    "creation_time",
    "deletion_time",
    "scheduled_time",
];

/// One row of a node file, unparsed.
#[derive(Deserialize)]
struct NodeRow<'a> {
    sn: &'a str,
    cpu_milli: &'a str,
    memory_mib: &'a str,
    gpu: &'a str,
    model: &'a str,
}

/// One row of a pod file, unparsed (only the columns used).
#[derive(Deserialize)]
struct PodRow<'a> {
    name: &'a str,
    cpu_milli: &'a str,
    memory_mib: &'a str,
    num_gpu: &'a str,
    gpu_milli: &'a str,
    /// Absent from the multi-GPU variants' files ([`POD_COLUMNS_MULTIGPU`]).
    #[serde(default)]
    gpu_spec: &'a str,
    #[serde(default)]
    qos: &'a str,
    #[serde(default)]
    creation_time: &'a str,
}

/// Loads one openb node file and one openb pod file.
///
/// Nodes come in file order, pods in file order (= creation order); see the
/// [module docs](self) for the mapping. With [`OnBadInput::Skip`] bad rows
/// (and later rows repeating a name) are left out and reported in
/// [`Workload::warnings`]; with [`OnBadInput::Fail`] the first one is the
/// error. A missing file or a wrong header is always an error.
///
/// The workload is named `openb:<node file stem>+<pod file stem>`.
pub fn load_openb(nodes_csv: &Path, pods_csv: &Path, on_bad: OnBadInput) -> Result<Workload> {
    let mut warnings = Vec::new();
    let nodes = load_nodes(nodes_csv, on_bad, &mut warnings)?;
    let pods = load_pods(pods_csv, on_bad, &mut warnings)?;
    let stem = |p: &Path| {
        p.file_stem()
            .map_or_else(String::new, |s| s.to_string_lossy().into_owned())
    };
    let name = format!("openb:{}+{}", stem(nodes_csv), stem(pods_csv));
    tracing::debug!(
        workload = %name,
        nodes = nodes.len(),
        pods = pods.len(),
        skipped = warnings.len(),
        "loaded openb trace"
    );
    Ok(Workload {
        name,
        nodes,
        pods,
        warnings,
        barriers: Vec::new(),
        ..Default::default()
    })
}

/// The trace folder, if found: the first `<ancestor>/shared/data/alibaba-gpu-v2023-openb`
/// holding [`NODES_ALL_FILE`], searching the ancestors of the current
/// directory, then those of this crate's source directory.
pub fn default_openb_dir() -> Option<PathBuf> {
    let starts = [
        std::env::current_dir().ok(),
        Some(PathBuf::from(env!("CARGO_MANIFEST_DIR"))),
    ];
    starts.into_iter().flatten().find_map(|start| {
        start
            .ancestors()
            .map(|ancestor| ancestor.join(OPENB_DATA_DIR))
            .find(|dir| dir.join(NODES_ALL_FILE).is_file())
    })
}

fn load_nodes(
    path: &Path,
    on_bad: OnBadInput,
    warnings: &mut Vec<LoadWarning>,
) -> Result<Vec<Node>> {
    let mut nodes = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    for_each_row(
        path,
        NODE_COLUMNS,
        on_bad,
        warnings,
        |ctx, record, headers| {
            let row: NodeRow<'_> = ctx.deserialize(record, headers)?;
            let node = node_from_row(&ctx, &row)?;
            ctx.check_unique(&mut seen, "sn", row.sn)?;
            nodes.push(node);
            Ok(())
        },
    )?;
    Ok(nodes)
}

fn load_pods(path: &Path, on_bad: OnBadInput, warnings: &mut Vec<LoadWarning>) -> Result<Vec<Pod>> {
    let mut pods = Vec::new();
    let mut seen: HashMap<String, u64> = HashMap::new();
    let short = header_is(path, POD_COLUMNS_MULTIGPU);
    for_each_row(
        path,
        if short {
            POD_COLUMNS_MULTIGPU
        } else {
            POD_COLUMNS
        },
        on_bad,
        warnings,
        |ctx, record, headers| {
            let mut row: PodRow<'_> = ctx.deserialize(record, headers)?;
            if short {
                row.qos = "BE";
                row.creation_time = "0";
            }
            let pod = pod_from_row(&ctx, &row)?;
            ctx.check_unique(&mut seen, "name", row.name)?;
            pods.push(pod);
            Ok(())
        },
    )?;
    Ok(pods)
}

/// Whether the file's header has exactly `columns` (any order); `false`
/// when it cannot be read (the load then reports why).
fn header_is(path: &Path, columns: &[&str]) -> bool {
    let Ok(file) = File::open(path) else {
        return false;
    };
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(file);
    let Ok(headers) = reader.headers() else {
        return false;
    };
    let mut found: Vec<&str> = headers.iter().collect();
    let mut expected = columns.to_vec();
    found.sort_unstable();
    expected.sort_unstable();
    found == expected
}

fn node_from_row(ctx: &RowCtx<'_>, row: &NodeRow<'_>) -> Result<Node> {
    let name = ctx.name("sn", row.sn)?;
    let cpu_milli = ctx.uint("cpu_milli", row.cpu_milli)?;
    let memory_mib = ctx.uint("memory_mib", row.memory_mib)?;
    let gpu = ctx.uint("gpu", row.gpu)?;

    let mut resources = vec![
        ("cpu", format!("{cpu_milli}m")),
        ("memory", format!("{memory_mib}Mi")),
        ("pods", NODE_PODS.to_owned()),
    ];
    let mut labels = BTreeMap::new();
    if gpu > 0 {
        let milli = gpu
            .checked_mul(MILLI_PER_GPU)
            .ok_or_else(|| ctx.invalid("gpu", format!("number too large \"{}\"", row.gpu)))?;
        resources.push((RESOURCE_GPU, gpu.to_string()));
        resources.push((RESOURCE_GPU_MILLI, milli.to_string()));
        if !row.model.is_empty() {
            if !is_label_value(row.model) {
                return Err(ctx.invalid(
                    "model",
                    format!("not a valid label value \"{}\"", row.model),
                ));
            }
            labels.insert(LABEL_GPU_CARD_MODEL.to_owned(), row.model.to_owned());
        }
    }
    Ok(ready_node(name, labels, resource_list(resources)))
}

fn pod_from_row(ctx: &RowCtx<'_>, row: &PodRow<'_>) -> Result<Pod> {
    let name = ctx.name("name", row.name)?;
    let cpu_milli = ctx.uint("cpu_milli", row.cpu_milli)?;
    let memory_mib = ctx.uint("memory_mib", row.memory_mib)?;
    let num_gpu = ctx.uint("num_gpu", row.num_gpu)?;
    let gpu_milli = ctx.uint("gpu_milli", row.gpu_milli)?;
    let consistent = match num_gpu {
        0 => gpu_milli == 0,
        1 => (1..=MILLI_PER_GPU).contains(&gpu_milli),
        _ => gpu_milli == MILLI_PER_GPU,
    };
    if !consistent {
        let rule = match num_gpu {
            0 => "0 when num_gpu is 0",
            1 => "1..=1000 when num_gpu is 1",
            _ => "1000 when num_gpu is greater than 1",
        };
        return Err(ctx.invalid(
            "gpu_milli",
            format!("{gpu_milli} with num_gpu {num_gpu}; gpu_milli must be {rule}"),
        ));
    }
    let models = ctx.gpu_models(row.gpu_spec)?;
    let (class, priority) = match row.qos {
        "LS" | "Guaranteed" => (WORKLOAD_CLASS_ONLINE, PRIORITY_ONLINE),
        "Burstable" => (WORKLOAD_CLASS_ONLINE, PRIORITY_BURSTABLE),
        "BE" => (WORKLOAD_CLASS_BATCH, PRIORITY_BATCH),
        other => {
            return Err(ctx.invalid(
                "qos",
                format!("unknown QoS class \"{other}\", expected LS, Guaranteed, Burstable or BE"),
            ));
        }
    };
    let creation_time = ctx.uint("creation_time", row.creation_time)?;

    let mut resources = vec![
        ("cpu", format!("{cpu_milli}m")),
        ("memory", format!("{memory_mib}Mi")),
    ];
    let mut annotations = BTreeMap::from([(
        ANNOTATION_TRACE_CREATION_TIME.to_owned(),
        creation_time.to_string(),
    )]);
    if num_gpu > 0 {
        if gpu_milli == MILLI_PER_GPU {
            let total = num_gpu.checked_mul(MILLI_PER_GPU).ok_or_else(|| {
                ctx.invalid("num_gpu", format!("number too large \"{}\"", row.num_gpu))
            })?;
            resources.push((RESOURCE_GPU, num_gpu.to_string()));
            resources.push((RESOURCE_GPU_MILLI, total.to_string()));
        } else {
            resources.push((RESOURCE_GPU_MILLI, gpu_milli.to_string()));
        }
        annotations.insert(ANNOTATION_GPU_MILLI.to_owned(), gpu_milli.to_string());
        annotations.insert(ANNOTATION_GPU_COUNT.to_owned(), num_gpu.to_string());
        if !models.is_empty() {
            annotations.insert(ANNOTATION_GPU_CARD_MODEL.to_owned(), models.join("|"));
        }
    }
    let labels = BTreeMap::from([
        (LABEL_QOS.to_owned(), row.qos.to_owned()),
        (LABEL_WORKLOAD_CLASS.to_owned(), class.to_owned()),
    ]);

    let resources = resource_list(resources);
    let container = Container {
        name: CONTAINER_NAME.to_owned(),
        image: Some(PAUSE_IMAGE.to_owned()),
        resources: Some(ResourceRequirements {
            requests: Some(resources.clone()),
            limits: Some(resources),
            ..ResourceRequirements::default()
        }),
        ..Container::default()
    };
    let mut pod = pending_pod(NAMESPACE, name, container);
    pod.metadata.labels = Some(labels);
    pod.metadata.annotations = Some(annotations);
    if let Some(spec) = pod.spec.as_mut() {
        spec.priority = Some(priority);
        if !models.is_empty() {
            spec.affinity = Some(gpu_model_affinity(models));
        }
    }
    Ok(pod)
}

/// Required node affinity: `alibabacloud.com/gpu-card-model In models`.
fn gpu_model_affinity(models: Vec<String>) -> Affinity {
    Affinity {
        node_affinity: Some(NodeAffinity {
            required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: LABEL_GPU_CARD_MODEL.to_owned(),
                        operator: "In".to_owned(),
                        values: Some(models),
                    }]),
                    ..NodeSelectorTerm::default()
                }],
            }),
            ..NodeAffinity::default()
        }),
        ..Affinity::default()
    }
}

/// Where a row is, to build errors.
pub(super) struct RowCtx<'a> {
    pub(super) file: &'a str,
    pub(super) line: u64,
}

impl RowCtx<'_> {
    pub(super) fn invalid(&self, field: &'static str, message: String) -> LoadError {
        LoadError::InvalidField {
            file: self.file.to_owned(),
            line: self.line,
            field,
            message,
        }
    }

    pub(super) fn deserialize<'r, T: Deserialize<'r>>(
        &self,
        record: &'r csv::StringRecord,
        headers: &'r csv::StringRecord,
    ) -> Result<T> {
        // Cannot fail once the header is checked (all fields are strings), but
        // report it as a malformed record rather than panic.
        record
            .deserialize(Some(headers))
            .map_err(|err| LoadError::CsvRecord {
                file: self.file.to_owned(),
                line: self.line,
                message: err.to_string(),
            })
    }

    /// A non-empty name.
    pub(super) fn name<'v>(&self, field: &'static str, value: &'v str) -> Result<&'v str> {
        if value.is_empty() {
            Err(self.invalid(field, "empty name".to_owned()))
        } else {
            Ok(value)
        }
    }

    /// A non-negative integer.
    pub(super) fn uint(&self, field: &'static str, value: &str) -> Result<u64> {
        parse_uint(value).map_err(|message| self.invalid(field, message))
    }

    /// The `|`-separated GPU models of `gpu_spec`, without empty tokens and
    /// duplicates, in first-seen order.
    fn gpu_models(&self, spec: &str) -> Result<Vec<String>> {
        let mut models: Vec<String> = Vec::new();
        for token in spec.split('|').map(str::trim).filter(|t| !t.is_empty()) {
            if !is_label_value(token) {
                return Err(self.invalid(
                    "gpu_spec",
                    format!("GPU model \"{token}\" is not a valid label value"),
                ));
            }
            if !models.iter().any(|m| m == token) {
                models.push(token.to_owned());
            }
        }
        Ok(models)
    }

    /// Records `name` as seen on this line, or fails if an earlier line has it.
    pub(super) fn check_unique(
        &self,
        seen: &mut HashMap<String, u64>,
        field: &'static str,
        name: &str,
    ) -> Result<()> {
        if let Some(&first_line) = seen.get(name) {
            return Err(LoadError::DuplicateName {
                file: self.file.to_owned(),
                line: self.line,
                field,
                name: name.to_owned(),
                first_line,
            });
        }
        seen.insert(name.to_owned(), self.line);
        Ok(())
    }
}

/// Reads the CSV file at `path`, checks that its header has exactly `columns`
/// (any order), and calls `row` for each record. Row errors (malformed
/// records and errors returned by `row`) go through `on_bad`; I/O errors and
/// a wrong header always fail. `row` must not keep partial results when it fails.
pub(super) fn for_each_row<F>(
    path: &Path,
    columns: &[&str],
    on_bad: OnBadInput,
    warnings: &mut Vec<LoadWarning>,
    mut row: F,
) -> Result<()>
where
    F: FnMut(RowCtx<'_>, &csv::StringRecord, &csv::StringRecord) -> Result<()>,
{
    let file = file_label(path);
    let reader = File::open(path).map_err(|source| LoadError::Io {
        path: path.to_owned(),
        source,
    })?;
    let mut reader = csv::ReaderBuilder::new()
        .trim(csv::Trim::All)
        .from_reader(reader);

    let headers = reader
        .headers()
        .map_err(|err| record_error(path, &file, err, 1))?
        .clone();
    let mut found: Vec<&str> = headers.iter().collect();
    let mut expected = columns.to_vec();
    found.sort_unstable();
    expected.sort_unstable();
    if found != expected {
        return Err(LoadError::CsvHeader {
            file,
            found: headers.iter().collect::<Vec<_>>().join(","),
            expected: columns.join(","),
        });
    }

    let mut record = csv::StringRecord::new();
    let mut line = 1;
    loop {
        let err = match reader.read_record(&mut record) {
            Ok(false) => break,
            Ok(true) => {
                line = record.position().map_or(line + 1, csv::Position::line);
                match row(RowCtx { file: &file, line }, &record, &headers) {
                    Ok(()) => continue,
                    Err(err) => err,
                }
            }
            Err(err) => {
                let err = record_error(path, &file, err, line + 1);
                if let LoadError::CsvRecord { line: at, .. } = &err {
                    line = *at;
                }
                err
            }
        };
        if matches!(err, LoadError::Io { .. }) {
            return Err(err);
        }
        on_bad.handle(err, warnings)?;
    }
    Ok(())
}

/// Converts a CSV reader error: I/O errors to [`LoadError::Io`], the rest to
/// [`LoadError::CsvRecord`] (at `fallback_line` when the error has no position).
fn record_error(path: &Path, file: &str, err: csv::Error, fallback_line: u64) -> LoadError {
    let line = err.position().map_or(fallback_line, csv::Position::line);
    let display = err.to_string();
    let message = match err.into_kind() {
        csv::ErrorKind::Io(source) => {
            return LoadError::Io {
                path: path.to_owned(),
                source,
            };
        }
        csv::ErrorKind::UnequalLengths {
            expected_len, len, ..
        } => {
            format!("{len} fields, expected {expected_len}")
        }
        csv::ErrorKind::Utf8 { err, .. } => format!("field {} is not valid UTF-8", err.field() + 1),
        _ => display,
    };
    LoadError::CsvRecord {
        file: file.to_owned(),
        line,
        message,
    }
}

/// Parses a non-negative integer, or says what is wrong with it.
fn parse_uint(value: &str) -> std::result::Result<u64, String> {
    if value.is_empty() {
        return Err("empty value, expected a non-negative integer".to_owned());
    }
    value.parse::<u64>().map_err(|err| {
        if *err.kind() == IntErrorKind::PosOverflow {
            format!("number too large \"{value}\"")
        } else if value
            .strip_prefix('-')
            .is_some_and(|rest| rest.parse::<u64>().is_ok())
        {
            format!("negative number \"{value}\"")
        } else if value.parse::<f64>().is_ok_and(f64::is_finite) {
            format!("not an integer \"{value}\"")
        } else {
            format!("invalid digit \"{value}\"")
        }
    })
}

/// Whether `s` is a valid Kubernetes label value: at most 63 characters,
/// alphanumerics, `-`, `_` and `.`, starting and ending with an alphanumeric.
pub(super) fn is_label_value(s: &str) -> bool {
    let bytes = s.as_bytes();
    match (bytes.first(), bytes.last()) {
        (None, _) | (_, None) => true,
        (Some(first), Some(last)) => {
            bytes.len() <= 63
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && bytes
                    .iter()
                    .all(|b| b.is_ascii_alphanumeric() || matches!(b, b'-' | b'_' | b'.'))
        }
    }
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

    use super::*;
    use crate::workload::LABEL_HOSTNAME;
    use crate::workload::testutil::TempFile;

    const NODES_CSV: &str = "\
sn,cpu_milli,memory_mib,gpu,model
n-0,32000,262144,0,
n-1,96000,393216,8,G2
";
    const POD_HEADER: &str = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,creation_time,deletion_time,scheduled_time\n";

    fn data_dir() -> Option<PathBuf> {
        let dir = default_openb_dir();
        if dir.is_none() {
            eprintln!(
                "note: skipping: {OPENB_DATA_DIR}/{NODES_ALL_FILE} not found above the working directory"
            );
        }
        dir
    }

    fn by_name<'a>(pods: &'a [Pod], name: &str) -> &'a Pod {
        pods.iter()
            .find(|p| p.metadata.name.as_deref() == Some(name))
            .unwrap_or_else(|| panic!("pod {name} missing"))
    }

    fn requests(pod: &Pod) -> &BTreeMap<String, Quantity> {
        pod.spec.as_ref().expect("spec").containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.requests.as_ref())
            .expect("requests")
    }

    fn label<'a>(meta_labels: Option<&'a BTreeMap<String, String>>, key: &str) -> Option<&'a str> {
        meta_labels.and_then(|l| l.get(key)).map(String::as_str)
    }

    fn affinity_values(pod: &Pod) -> Option<&Vec<String>> {
        let required = pod
            .spec
            .as_ref()?
            .affinity
            .as_ref()?
            .node_affinity
            .as_ref()?
            .required_during_scheduling_ignored_during_execution
            .as_ref()?;
        let expr = &required
            .node_selector_terms
            .first()?
            .match_expressions
            .as_ref()?[0];
        assert_eq!(expr.key, LABEL_GPU_CARD_MODEL);
        assert_eq!(expr.operator, "In");
        expr.values.as_ref()
    }

    fn q(s: &str) -> Quantity {
        Quantity(s.to_owned())
    }

    #[test]
    fn real_default_trace() {
        let Some(dir) = data_dir() else { return };
        let w = load_openb(
            &dir.join(NODES_ALL_FILE),
            &dir.join(PODS_DEFAULT_FILE),
            OnBadInput::Fail,
        )
        .expect("load default trace");
        assert_eq!(
            w.name,
            "openb:openb_node_list_all_node+openb_pod_list_default"
        );
        assert_eq!(w.nodes.len(), 1523);
        assert_eq!(w.pods.len(), 8152);
        assert!(w.warnings.is_empty(), "{:?}", w.warnings);

        let cpu_only: Vec<&Node> = w
            .nodes
            .iter()
            .filter(|n| label(n.metadata.labels.as_ref(), LABEL_GPU_CARD_MODEL).is_none())
            .collect();
        assert_eq!(cpu_only.len(), 310);
        for node in &cpu_only {
            let alloc = node
                .status
                .as_ref()
                .and_then(|s| s.allocatable.as_ref())
                .expect("alloc");
            assert!(!alloc.contains_key(RESOURCE_GPU) && !alloc.contains_key(RESOURCE_GPU_MILLI));
        }
        let total_gpus: u64 = w
            .nodes
            .iter()
            .filter_map(|n| n.status.as_ref()?.allocatable.as_ref()?.get(RESOURCE_GPU))
            .map(|q| q.0.parse::<u64>().expect("integer GPU count"))
            .sum();
        assert_eq!(total_gpus, 6212);
        let first = &w.nodes[0];
        assert_eq!(first.metadata.name.as_deref(), Some("openb-node-0000"));
        assert_eq!(
            label(first.metadata.labels.as_ref(), LABEL_HOSTNAME),
            Some("openb-node-0000")
        );
        let alloc = first
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .expect("alloc");
        assert_eq!(alloc.get("cpu"), Some(&q("32000m")));
        assert_eq!(alloc.get("memory"), Some(&q("262144Mi")));
        assert_eq!(alloc.get("pods"), Some(&q("110")));

        let batch = w
            .pods
            .iter()
            .filter(|p| {
                label(p.metadata.labels.as_ref(), LABEL_WORKLOAD_CLASS)
                    == Some(WORKLOAD_CLASS_BATCH)
            })
            .count();
        assert_eq!(batch, 3398);
        assert!(
            w.pods.iter().all(|p| affinity_values(p).is_none()),
            "default has no gpu_spec"
        );

        // File order = creation order.
        assert_eq!(w.pods[0].metadata.name.as_deref(), Some("openb-pod-0000"));
        let times: Vec<u64> = w
            .pods
            .iter()
            .map(|p| {
                p.metadata.annotations.as_ref().expect("annotations")
                    [ANNOTATION_TRACE_CREATION_TIME]
                    .parse()
                    .expect("seconds")
            })
            .collect();
        assert!(times.is_sorted());
        let uids: HashSet<_> = w.pods.iter().map(|p| p.metadata.uid.clone()).collect();
        assert_eq!(uids.len(), 8152);

        // A fractional GPU pod.
        let frac = by_name(&w.pods, "openb-pod-0001");
        let req = requests(frac);
        assert_eq!(req.get(RESOURCE_GPU_MILLI), Some(&q("460")));
        assert!(!req.contains_key(RESOURCE_GPU));
        assert_eq!(req.get("cpu"), Some(&q("6000m")));
        assert_eq!(req.get("memory"), Some(&q("12288Mi")));
        let limits = frac.spec.as_ref().expect("spec").containers[0]
            .resources
            .as_ref()
            .and_then(|r| r.limits.as_ref());
        assert_eq!(limits, Some(req));
        let ann = frac.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(
            ann.get(ANNOTATION_GPU_MILLI).map(String::as_str),
            Some("460")
        );
        assert_eq!(ann.get(ANNOTATION_GPU_COUNT).map(String::as_str), Some("1"));
        assert_eq!(frac.metadata.namespace.as_deref(), Some(NAMESPACE));
        let spec = frac.spec.as_ref().expect("spec");
        assert_eq!(spec.priority, Some(PRIORITY_ONLINE));
        assert_eq!(spec.scheduler_name.as_deref(), Some("default-scheduler"));
        assert!(spec.node_name.is_none());
        assert_eq!(label(frac.metadata.labels.as_ref(), LABEL_QOS), Some("LS"));

        // A whole-GPU pod.
        let whole = requests(by_name(&w.pods, "openb-pod-0000"));
        assert_eq!(whole.get(RESOURCE_GPU), Some(&q("1")));
        assert_eq!(whole.get(RESOURCE_GPU_MILLI), Some(&q("1000")));
    }

    #[test]
    fn real_gpuspec33_trace() {
        let Some(dir) = data_dir() else { return };
        let w = load_openb(
            &dir.join(NODES_ALL_FILE),
            &dir.join(PODS_GPUSPEC33_FILE),
            OnBadInput::Fail,
        )
        .expect("load gpuspec33 trace");
        assert_eq!(w.pods.len(), 8152);
        let constrained = w
            .pods
            .iter()
            .filter(|p| affinity_values(p).is_some())
            .count();
        assert_eq!(constrained, 2388);
        // Raw value: V100M16|V100M32|V100M32.
        let pod = by_name(&w.pods, "openb-pod-0527");
        assert_eq!(
            affinity_values(pod).map(Vec::as_slice),
            Some(&["V100M16".to_owned(), "V100M32".to_owned()][..])
        );
        assert_eq!(
            pod.metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_GPU_CARD_MODEL))
                .map(String::as_str),
            Some("V100M16|V100M32")
        );
    }

    #[test]
    fn real_gpu_node_file() {
        let Some(dir) = data_dir() else { return };
        let w = load_openb(
            &dir.join(NODES_GPU_FILE),
            &dir.join(PODS_DEFAULT_FILE),
            OnBadInput::Fail,
        )
        .expect("load gpu node file");
        assert_eq!(w.nodes.len(), 1213);
        assert!(
            w.nodes
                .iter()
                .all(|n| label(n.metadata.labels.as_ref(), LABEL_GPU_CARD_MODEL).is_some())
        );
    }

    #[test]
    fn mapping_of_small_file() {
        let nodes = TempFile::new("nodes.csv", NODES_CSV);
        let pods = TempFile::new(
            "pods.csv",
            &format!(
                "{POD_HEADER}\
p-0,1000,0,0,0,,BE,Pending,5,9,\n\
p-1,2000,1024,8,1000,G2|T4|G2,Burstable,Running,6,9,7\n\
p-2,3000,2048,0,0,,Guaranteed,Failed,7,9,8\n"
            ),
        );
        let w = load_openb(nodes.path(), pods.path(), OnBadInput::Fail).expect("load");
        assert_eq!(w.nodes.len(), 2);

        let gpu_node = &w.nodes[1];
        let alloc = gpu_node
            .status
            .as_ref()
            .and_then(|s| s.allocatable.as_ref())
            .expect("alloc");
        assert_eq!(alloc.get(RESOURCE_GPU), Some(&q("8")));
        assert_eq!(alloc.get(RESOURCE_GPU_MILLI), Some(&q("8000")));
        assert_eq!(
            label(gpu_node.metadata.labels.as_ref(), LABEL_GPU_CARD_MODEL),
            Some("G2")
        );
        assert!(label(w.nodes[0].metadata.labels.as_ref(), LABEL_GPU_CARD_MODEL).is_none());

        let names: Vec<_> = w
            .pods
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(names, ["p-0", "p-1", "p-2"]);
        let be = &w.pods[0];
        assert_eq!(
            label(be.metadata.labels.as_ref(), LABEL_WORKLOAD_CLASS),
            Some("batch")
        );
        assert_eq!(
            be.spec.as_ref().and_then(|s| s.priority),
            Some(PRIORITY_BATCH)
        );
        assert_eq!(requests(be).get("memory"), Some(&q("0Mi")));
        assert!(
            !be.metadata
                .annotations
                .as_ref()
                .expect("ann")
                .contains_key(ANNOTATION_GPU_COUNT)
        );

        let multi = &w.pods[1];
        assert_eq!(requests(multi).get(RESOURCE_GPU), Some(&q("8")));
        assert_eq!(requests(multi).get(RESOURCE_GPU_MILLI), Some(&q("8000")));
        assert_eq!(
            multi.spec.as_ref().and_then(|s| s.priority),
            Some(PRIORITY_BURSTABLE)
        );
        assert_eq!(
            label(multi.metadata.labels.as_ref(), LABEL_WORKLOAD_CLASS),
            Some("online")
        );
        assert_eq!(
            affinity_values(multi).map(Vec::as_slice),
            Some(&["G2".to_owned(), "T4".to_owned()][..])
        );

        let guaranteed = &w.pods[2];
        assert_eq!(
            guaranteed.spec.as_ref().and_then(|s| s.priority),
            Some(PRIORITY_ONLINE)
        );
        assert_eq!(
            guaranteed
                .metadata
                .annotations
                .as_ref()
                .and_then(|a| a.get(ANNOTATION_TRACE_CREATION_TIME))
                .map(String::as_str),
            Some("7")
        );
    }

    #[test]
    fn bad_number_names_file_line_and_field() {
        let nodes = TempFile::new("nodes.csv", NODES_CSV);
        let pods = TempFile::new(
            "openb_pod_list_bad.csv",
            &format!(
                "{POD_HEADER}p-0,1000,0,0,0,,BE,Pending,5,9,\np-1,12x00,1,0,0,,LS,Running,6,9,7\n"
            ),
        );
        let err = load_openb(nodes.path(), pods.path(), OnBadInput::Fail).expect_err("bad number");
        assert_eq!(
            err.to_string(),
            "openb_pod_list_bad.csv line 3, field cpu_milli: invalid digit \"12x00\""
        );
        assert!(matches!(
            err,
            LoadError::InvalidField {
                line: 3,
                field: "cpu_milli",
                ..
            }
        ));
    }

    #[test]
    fn skip_keeps_valid_rows_and_warns() {
        let nodes = TempFile::new(
            "nodes.csv",
            &format!("{NODES_CSV}n-2,-4000,1,0,\nn-1,1000,1,0,\n"),
        );
        let pods = TempFile::new(
            "pods.csv",
            &format!(
                "{POD_HEADER}\
p-0,1000,0,0,0,,BE,Pending,5,9,\n\
p-1,1000,0,0,0,,XX,Pending,5,9,\n\
p-2,1000,0,2,500,,LS,Pending,5,9,\n\
p-3,1000,0,1,0,,LS,Pending,5,9,\n\
p-4,1000,0,0,0,,LS\n\
p-0,1000,0,0,0,,LS,Pending,5,9,\n\
p-5,1000,1.5,0,0,,LS,Pending,5,9,\n\
p-6,1000,0,1,1000,,LS,Pending,5,9,\n"
            ),
        );
        let w = load_openb(nodes.path(), pods.path(), OnBadInput::Skip).expect("skip mode");
        let node_names: Vec<_> = w
            .nodes
            .iter()
            .map(|n| n.metadata.name.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(node_names, ["n-0", "n-1"]);
        let pod_names: Vec<_> = w
            .pods
            .iter()
            .map(|p| p.metadata.name.as_deref().unwrap_or(""))
            .collect();
        assert_eq!(pod_names, ["p-0", "p-6"]);

        let got: Vec<String> = w.warnings.iter().map(ToString::to_string).collect();
        assert_eq!(
            got,
            [
                "nodes.csv line 4: field cpu_milli: negative number \"-4000\"",
                "nodes.csv line 5: field sn: duplicate name \"n-1\" (first on line 3)",
                "pods.csv line 3: field qos: unknown QoS class \"XX\", expected LS, Guaranteed, Burstable or BE",
                "pods.csv line 4: field gpu_milli: 500 with num_gpu 2; gpu_milli must be 1000 when num_gpu is greater than 1",
                "pods.csv line 5: field gpu_milli: 0 with num_gpu 1; gpu_milli must be 1..=1000 when num_gpu is 1",
                "pods.csv line 6: malformed CSV record: 7 fields, expected 11",
                "pods.csv line 7: field name: duplicate name \"p-0\" (first on line 2)",
                "pods.csv line 8: field memory_mib: not an integer \"1.5\"",
            ]
        );
        assert_eq!(w.warnings[0].location, "nodes.csv line 4");

        // The same files fail at the first bad row without Skip.
        let err = load_openb(nodes.path(), pods.path(), OnBadInput::Fail).expect_err("fail mode");
        assert!(
            matches!(
                err,
                LoadError::InvalidField {
                    line: 4,
                    field: "cpu_milli",
                    ..
                }
            ),
            "{err}"
        );
    }

    #[test]
    fn wrong_header_is_an_error_even_when_skipping() {
        let nodes = TempFile::new("nodes.csv", NODES_CSV);
        // A node file given as the pod file.
        let err =
            load_openb(nodes.path(), nodes.path(), OnBadInput::Skip).expect_err("wrong header");
        assert!(matches!(err, LoadError::CsvHeader { .. }), "{err}");
        assert!(
            err.to_string()
                .starts_with("nodes.csv line 1: wrong header \"sn,cpu_milli"),
            "{err}"
        );

        let renamed = TempFile::new("nodes.csv", "sn,cpu,memory_mib,gpu,model\nn-0,1,1,0,\n");
        let err =
            load_openb(renamed.path(), nodes.path(), OnBadInput::Skip).expect_err("renamed column");
        assert!(matches!(err, LoadError::CsvHeader { .. }), "{err}");

        let empty = TempFile::new("empty.csv", "");
        let err = load_openb(empty.path(), nodes.path(), OnBadInput::Fail).expect_err("empty file");
        assert!(matches!(err, LoadError::CsvHeader { .. }), "{err}");
    }

    #[test]
    fn the_multi_gpu_variants_five_columns_load_as_batch_pods_without_models() {
        let nodes = TempFile::new(
            "nodes.csv",
            "sn,cpu_milli,memory_mib,gpu,model\nn-0,8000,1024,8,V100\n",
        );
        let pods = TempFile::new(
            "pods.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli\np-0,4000,512,4,1000\np-1,1000,128,0,0\n",
        );
        let w = load_openb(nodes.path(), pods.path(), OnBadInput::Fail).expect("loads");
        assert_eq!(w.pods.len(), 2);
        let p0 = by_name(&w.pods, "p-0");
        let ann = p0.metadata.annotations.as_ref().expect("annotations");
        assert_eq!(ann.get(ANNOTATION_GPU_COUNT).map(String::as_str), Some("4"));
        assert!(!ann.contains_key(ANNOTATION_GPU_CARD_MODEL));
        assert_eq!(
            p0.spec.as_ref().and_then(|s| s.priority),
            Some(PRIORITY_BATCH)
        );
        // A header with some of the long layout's columns is still refused.
        let partial = TempFile::new(
            "bad.csv",
            "name,cpu_milli,memory_mib,num_gpu,gpu_milli,qos\n",
        );
        assert!(load_openb(nodes.path(), partial.path(), OnBadInput::Fail).is_err());
    }

    #[test]
    fn missing_file_is_an_io_error() {
        let nodes = TempFile::new("nodes.csv", NODES_CSV);
        let missing = nodes.path().with_file_name("does-not-exist.csv");
        let err = load_openb(nodes.path(), &missing, OnBadInput::Skip).expect_err("missing file");
        assert!(matches!(err, LoadError::Io { .. }), "{err}");
        assert!(err.to_string().contains("does-not-exist.csv"), "{err}");
    }

    #[test]
    fn parse_uint_messages() {
        assert_eq!(parse_uint("42"), Ok(42));
        assert_eq!(
            parse_uint(""),
            Err("empty value, expected a non-negative integer".to_owned())
        );
        assert_eq!(parse_uint("-1"), Err("negative number \"-1\"".to_owned()));
        assert_eq!(parse_uint("1e3"), Err("not an integer \"1e3\"".to_owned()));
        assert_eq!(
            parse_uint("99999999999999999999"),
            Err("number too large \"99999999999999999999\"".to_owned())
        );
        assert_eq!(parse_uint("abc"), Err("invalid digit \"abc\"".to_owned()));
    }

    #[test]
    fn label_values() {
        assert!(is_label_value("V100M16"));
        assert!(is_label_value("a.b-c_d"));
        assert!(!is_label_value("-a"));
        assert!(!is_label_value("a b"));
        assert!(!is_label_value(&"a".repeat(64)));
    }
}
