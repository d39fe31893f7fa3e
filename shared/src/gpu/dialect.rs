//! How pods and nodes say what GPUs they want and have: the dialects
//! Flotilla reads into its one model ([`GpuRequest`], [`NodeGpuSpec`]).
//!
//! # Pods
//! Read in this order; the first dialect present is the pod's:
//!
//! 1. **Trace replay** (the FGD paper's simulator, annotations):
//!    `alibabacloud.com/gpu-milli` (share of each GPU, `1..=1000`),
//!    `alibabacloud.com/gpu-count` (GPUs, default 1; 0 means none) and
//!    `alibabacloud.com/gpu-card-model` (allowed models, `|`-separated).
//! 2. **HAMi** (extended resources in the containers' requests or limits,
//!    summed over the pod as requests are): `nvidia.com/gpu: k` with
//!    `nvidia.com/gpumem-percentage: p` (share `10·p` milli) or, without
//!    it, `nvidia.com/gpucores: c` (share `10·c` milli); annotation
//!    `nvidia.com/use-gputype` (allowed models, `,`-separated).
//!    Volcano's spellings are aliases: `volcano.sh/vgpu-number`,
//!    `volcano.sh/vgpu-memory-percentage`, `volcano.sh/vgpu-cores`.
//! 3. **Whole GPUs**: a bare `nvidia.com/gpu: k` means `k` whole,
//!    exclusive GPUs (the NVIDIA device plugin's meaning).
//!
//! A share (`< 1000` milli) is of **one** GPU: a share with more than one
//! GPU is refused with an error naming the field (HAMi spreads such vGPUs
//! over several cards; Flotilla does not place that yet).
//! `nvidia.com/gpumem` (MiB) and `nvidia.com/nouse-gputype` are not read.
//!
//! # Devices a pod holds
//! The annotation `alibabacloud.com/gpu-index` (`"3"`, or `"0-1-2-3"` for
//! several), written on the pod at bind, says which devices of its node it
//! holds. A bound pod without it holds the devices the default rule
//! ([`super::choose_best_fit`]) gives it when it is counted.
//!
//! # Nodes
//! Devices: capacity (else allocatable) `alibabacloud.com/gpu-count`, else
//! allocatable `nvidia.com/gpu`. Model: label
//! `alibabacloud.com/gpu-card-model`, else `nvidia.com/gpu.product` (GPU
//! feature discovery), else none (`""`: only pods without a model
//! constraint fit). Every device holds 1000 milli-GPU.
//!
//! Flotilla places; it does not isolate. A node agent (HAMi's device
//! plugin and HAMi-core, or the equivalent) must confine each pod to the
//! share and devices written on it.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::Node;

use super::{DeviceSet, GpuRequest, MAX_DEVICES, MILLI_PER_GPU};
use crate::resources::Resources;

/// Pod annotation: share of each GPU in milli-GPU (trace replay dialect).
pub const ANNOTATION_GPU_MILLI: &str = "alibabacloud.com/gpu-milli";
/// Pod annotation: number of GPUs (trace replay dialect).
pub const ANNOTATION_GPU_COUNT: &str = "alibabacloud.com/gpu-count";
/// Pod annotation and node label: allowed GPU models, `|`-separated, on a
/// pod; the node's GPU model on a node (trace replay dialect).
pub const GPU_CARD_MODEL: &str = "alibabacloud.com/gpu-card-model";
/// Pod annotation: the devices the pod holds on its node, `-`-separated
/// indexes (written at bind).
pub const ANNOTATION_GPU_INDEX: &str = "alibabacloud.com/gpu-index";
/// Node capacity: number of GPU devices (trace replay dialect).
pub const RESOURCE_GPU_COUNT: &str = "alibabacloud.com/gpu-count";
/// Extended resource: GPUs (whole GPUs, or HAMi vGPUs).
pub const NVIDIA_GPU: &str = crate::resources::NVIDIA_GPU;
/// HAMi: share of each GPU's memory, percent.
pub const HAMI_GPUMEM_PERCENTAGE: &str = "nvidia.com/gpumem-percentage";
/// HAMi: share of each GPU's cores, percent.
pub const HAMI_GPUCORES: &str = "nvidia.com/gpucores";
/// HAMi pod annotation: allowed GPU models, `,`-separated.
pub const HAMI_USE_GPUTYPE: &str = "nvidia.com/use-gputype";
/// HAMi: memory of each GPU, MiB.
pub const HAMI_GPUMEM: &str = "nvidia.com/gpumem";
/// Volcano's alias of `nvidia.com/gpumem`.
pub const VOLCANO_VGPU_MEMORY: &str = "volcano.sh/vgpu-memory";
/// Volcano's alias of `nvidia.com/gpu`.
pub const VOLCANO_VGPU_NUMBER: &str = "volcano.sh/vgpu-number";
/// Volcano's alias of `nvidia.com/gpumem-percentage`.
pub const VOLCANO_VGPU_MEMORY_PERCENTAGE: &str = "volcano.sh/vgpu-memory-percentage";
/// Volcano's alias of `nvidia.com/gpucores`.
pub const VOLCANO_VGPU_CORES: &str = "volcano.sh/vgpu-cores";
/// Node label set by NVIDIA GPU feature discovery: the GPU product.
pub const LABEL_GPU_PRODUCT: &str = "nvidia.com/gpu.product";
/// Node label set by NVIDIA GPU feature discovery: each GPU's memory, MiB.
pub const LABEL_GPU_MEMORY: &str = "nvidia.com/gpu.memory";

/// A node's GPU devices as its object describes them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeGpuSpec {
    /// The model of every device (`""` when the node does not say).
    pub model: Arc<str>,
    /// How many devices (`1..=64`).
    pub count: usize,
    /// Memory of each device, MiB (`None` when the node does not say).
    pub memory_mib: Option<u32>,
}

/// The GPU request of a pod from its annotations and summed requests
/// (`requests`, as [`crate::resources::pod_requests`] computes them);
/// `None` for a pod that asks for no GPU.
///
/// # Errors
/// The field and the problem: a value that is not a number in range, or
/// a share of more than one GPU.
pub fn pod_request(
    annotations: Option<&BTreeMap<String, String>>,
    requests: &Resources,
) -> Result<Option<GpuRequest>, String> {
    let annotation = |k: &str| annotations.and_then(|a| a.get(k)).map(String::as_str);
    if let Some(milli) = annotation(ANNOTATION_GPU_MILLI) {
        let field = format!("metadata.annotations[{ANNOTATION_GPU_MILLI}]");
        let milli = parse_in(milli, &field, 0, u64::from(MILLI_PER_GPU))?;
        let count = match annotation(ANNOTATION_GPU_COUNT) {
            Some(c) => parse_in(
                c,
                &format!("metadata.annotations[{ANNOTATION_GPU_COUNT}]"),
                0,
                MAX_DEVICES as u64,
            )?,
            None => 1,
        };
        if milli == 0 || count == 0 {
            return Ok(None);
        }
        let models = models_of(annotation(GPU_CARD_MODEL), '|');
        return Ok(Some(request(count, milli, models)));
    }
    if requests.scalar(NVIDIA_GPU) > 0 && requests.scalar(VOLCANO_VGPU_NUMBER) > 0 {
        return Err(format!(
            "resources {NVIDIA_GPU} and {VOLCANO_VGPU_NUMBER}: GPUs asked for in two dialects \
             at once; ask in one"
        ));
    }
    for (number, percentage, cores, memory) in [
        (
            NVIDIA_GPU,
            HAMI_GPUMEM_PERCENTAGE,
            HAMI_GPUCORES,
            HAMI_GPUMEM,
        ),
        (
            VOLCANO_VGPU_NUMBER,
            VOLCANO_VGPU_MEMORY_PERCENTAGE,
            VOLCANO_VGPU_CORES,
            VOLCANO_VGPU_MEMORY,
        ),
    ] {
        let count = requests.scalar(number);
        if count <= 0 {
            continue;
        }
        let count = u64::try_from(count).unwrap_or(u64::MAX);
        if count > MAX_DEVICES as u64 {
            return Err(format!(
                "resources {number}: {count} is more GPUs than a node can have ({MAX_DEVICES})"
            ));
        }
        let memory_mib = match requests.scalar(memory) {
            m if m <= 0 => None,
            m => Some(u32::try_from(m).map_err(|_| {
                format!("resources {memory}: {m} MiB is more memory than a GPU can have")
            })?),
        };
        let (share_of, percent) = match (requests.scalar(percentage), requests.scalar(cores)) {
            (p, _) if p > 0 => (percentage, p),
            (_, c) if c > 0 => (cores, c),
            // Memory alone sizes the share (on each node, by its devices'
            // memory).
            _ if memory_mib.is_some() => (memory, 0),
            _ => (number, 100),
        };
        if percent > 100 {
            return Err(format!(
                "resources {share_of}: {percent} must be in the range 1-100 (percent of one GPU)"
            ));
        }
        let milli = u64::try_from(percent).unwrap_or(0) * 10;
        let models = models_of(annotation(HAMI_USE_GPUTYPE), ',');
        return Ok(Some(GpuRequest {
            memory_mib,
            ..request(count, milli, models)
        }));
    }
    Ok(None)
}

/// `count` GPUs of `milli` each. A share of several GPUs
/// ([`GpuRequest::spans_devices`]) is read (a pod HAMi placed so is counted
/// on its devices) but not placed: GpuShare's PreFilter refuses it.
fn request(count: u64, milli: u64, models: Option<Arc<[Arc<str>]>>) -> GpuRequest {
    GpuRequest {
        count: u32::try_from(count).unwrap_or(u32::MAX),
        milli: u32::try_from(milli).unwrap_or(MILLI_PER_GPU),
        memory_mib: None,
        models,
    }
}

/// The models of a `sep`-separated list, trimmed, empty entries and
/// repeats dropped, first-seen order; `None` when none is left.
fn models_of(list: Option<&str>, sep: char) -> Option<Arc<[Arc<str>]>> {
    let mut models: Vec<Arc<str>> = Vec::new();
    for m in list?.split(sep).map(str::trim).filter(|m| !m.is_empty()) {
        if !models.iter().any(|x| &**x == m) {
            models.push(Arc::from(m));
        }
    }
    (!models.is_empty()).then(|| Arc::from(models))
}

/// An integer in `lo..=hi`.
fn parse_in(value: &str, field: &str, lo: u64, hi: u64) -> Result<u64, String> {
    match value.trim().parse::<u64>() {
        Ok(v) if (lo..=hi).contains(&v) => Ok(v),
        Ok(v) => Err(format!("{field}: {v} must be in the range {lo}-{hi}")),
        Err(_) => Err(format!("{field}: {value:?} is not a whole number")),
    }
}

/// The devices a pod holds, from its `alibabacloud.com/gpu-index`
/// annotation; `None` without it.
///
/// # Errors
/// The annotation, when it is not `-`-separated device indexes below 64.
pub fn pod_devices(
    annotations: Option<&BTreeMap<String, String>>,
) -> Result<Option<DeviceSet>, String> {
    let Some(value) = annotations.and_then(|a| a.get(ANNOTATION_GPU_INDEX)) else {
        return Ok(None);
    };
    let field = format!("metadata.annotations[{ANNOTATION_GPU_INDEX}]");
    let mut set = DeviceSet::default();
    for part in value.split('-') {
        let i = parse_in(part, &field, 0, MAX_DEVICES as u64 - 1)?;
        set.insert(usize::try_from(i).unwrap_or(0));
    }
    Ok(Some(set))
}

/// The annotation value naming `devices` (`"0-3"`).
#[must_use]
pub fn devices_annotation(devices: DeviceSet) -> String {
    let mut s = String::new();
    for i in devices.iter() {
        if !s.is_empty() {
            s.push('-');
        }
        s.push_str(&i.to_string());
    }
    s
}

/// Records on `pod` the devices it holds (the `gpu-index` annotation):
/// what is written at bind, so that every scheduler counting the bound
/// pod counts the same devices, and what a node agent reads to confine it.
pub fn record_devices(pod: &mut k8s_openapi::api::core::v1::Pod, devices: DeviceSet) {
    pod.metadata
        .annotations
        .get_or_insert_with(BTreeMap::new)
        .insert(ANNOTATION_GPU_INDEX.to_owned(), devices_annotation(devices));
}

/// A node's GPU devices; `None` for a node without GPUs.
///
/// # Errors
/// The field, when it says more than [`MAX_DEVICES`] devices.
pub fn node_gpus(node: &Node, allocatable: &Resources) -> Result<Option<NodeGpuSpec>, String> {
    let capacity_count = node
        .status
        .as_ref()
        .and_then(|s| s.capacity.as_ref().or(s.allocatable.as_ref()))
        .and_then(|c| c.get(RESOURCE_GPU_COUNT))
        .map(|q| (RESOURCE_GPU_COUNT, q.0.trim().parse::<i64>()));
    let (field, count) = match capacity_count {
        Some((f, Ok(n))) => (f, n),
        Some((f, Err(_))) => {
            return Err(format!(
                "status.capacity[{f}]: not a whole number of devices"
            ));
        }
        None => (NVIDIA_GPU, allocatable.scalar(NVIDIA_GPU)),
    };
    let list = if field == NVIDIA_GPU {
        "allocatable"
    } else {
        "capacity"
    };
    if count <= 0 {
        return Ok(None);
    }
    if count > MAX_DEVICES as i64 {
        return Err(format!(
            "status.{list}[{field}]: {count} GPUs; Flotilla's per-device accounting takes at \
             most {MAX_DEVICES} per node (under HAMi, whose slots these may be, give the node \
             {RESOURCE_GPU_COUNT} with its number of cards)"
        ));
    }
    let labels = node.metadata.labels.as_ref();
    let model = labels
        .and_then(|l| l.get(GPU_CARD_MODEL).or_else(|| l.get(LABEL_GPU_PRODUCT)))
        .map_or("", String::as_str);
    Ok(Some(NodeGpuSpec {
        model: Arc::from(model),
        count: usize::try_from(count).unwrap_or(0),
        memory_mib: node_gpu_memory(labels)?,
    }))
}

/// Each GPU's memory in MiB from a node's labels
/// ([`LABEL_GPU_MEMORY`]); `None` without the label.
///
/// # Errors
/// The label, when it is not a whole number of MiB from 1.
pub fn node_gpu_memory(labels: Option<&BTreeMap<String, String>>) -> Result<Option<u32>, String> {
    let Some(v) = labels.and_then(|l| l.get(LABEL_GPU_MEMORY)) else {
        return Ok(None);
    };
    let field = format!("metadata.labels[{LABEL_GPU_MEMORY}]");
    let mib = parse_in(v, &field, 1, u64::from(u32::MAX))?;
    Ok(Some(u32::try_from(mib).unwrap_or(u32::MAX)))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn ann(pairs: &[(&str, &str)]) -> BTreeMap<String, String> {
        pairs
            .iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn res(pairs: &[(&str, i64)]) -> Resources {
        let mut r = Resources::default();
        for (k, v) in pairs {
            r.set_scalar(k, *v);
        }
        r
    }

    #[test]
    fn trace_replay_annotations() {
        let a = ann(&[(ANNOTATION_GPU_MILLI, "470"), (ANNOTATION_GPU_COUNT, "1")]);
        assert_eq!(
            pod_request(Some(&a), &Resources::default()),
            Ok(Some(GpuRequest::share(470)))
        );
        let a = ann(&[
            (ANNOTATION_GPU_MILLI, "1000"),
            (ANNOTATION_GPU_COUNT, "4"),
            (GPU_CARD_MODEL, "V100M16|V100M32||V100M16"),
        ]);
        let r = pod_request(Some(&a), &Resources::default())
            .unwrap()
            .unwrap();
        assert_eq!((r.count, r.milli), (4, 1000));
        assert!(r.allows_model("V100M32") && !r.allows_model("T4"));
        assert_eq!(r.models.as_ref().map(|m| m.len()), Some(2));
    }

    /// A share of several GPUs is read (another scheduler may have placed
    /// it: it is counted on its devices); GpuShare refuses to place it.
    #[test]
    fn a_share_of_several_gpus_is_read() {
        let a = ann(&[(ANNOTATION_GPU_MILLI, "500"), (ANNOTATION_GPU_COUNT, "2")]);
        let r = pod_request(Some(&a), &Resources::default())
            .unwrap()
            .unwrap();
        assert_eq!((r.count, r.milli, r.spans_devices()), (2, 500, true));
        let r = pod_request(None, &res(&[(NVIDIA_GPU, 2), (HAMI_GPUCORES, 30)]))
            .unwrap()
            .unwrap();
        assert_eq!((r.count, r.milli, r.spans_devices()), (2, 300, true));
    }

    #[test]
    fn two_dialects_at_once_are_refused() {
        let e = pod_request(None, &res(&[(NVIDIA_GPU, 1), (VOLCANO_VGPU_NUMBER, 1)])).unwrap_err();
        assert!(
            e.starts_with("resources nvidia.com/gpu and volcano.sh/vgpu-number"),
            "{e}"
        );
    }

    #[test]
    fn bad_numbers_name_the_annotation() {
        let a = ann(&[(ANNOTATION_GPU_MILLI, "half")]);
        assert_eq!(
            pod_request(Some(&a), &Resources::default()),
            Err(
                "metadata.annotations[alibabacloud.com/gpu-milli]: \"half\" is not a whole number"
                    .into()
            )
        );
        let a = ann(&[(ANNOTATION_GPU_MILLI, "1500")]);
        assert!(pod_request(Some(&a), &Resources::default()).is_err());
        let e = pod_request(
            None,
            &res(&[(NVIDIA_GPU, 1), (HAMI_GPUMEM_PERCENTAGE, 150)]),
        );
        assert!(e.unwrap_err().contains("1-100"));
    }

    #[test]
    fn hami_volcano_and_bare_gpus() {
        assert_eq!(
            pod_request(None, &res(&[(NVIDIA_GPU, 1), (HAMI_GPUMEM_PERCENTAGE, 25)])),
            Ok(Some(GpuRequest::share(250)))
        );
        // Memory percentage wins over cores when both are given.
        assert_eq!(
            pod_request(
                None,
                &res(&[
                    (NVIDIA_GPU, 1),
                    (HAMI_GPUMEM_PERCENTAGE, 40),
                    (HAMI_GPUCORES, 30)
                ])
            ),
            Ok(Some(GpuRequest::share(400)))
        );
        assert_eq!(
            pod_request(
                None,
                &res(&[(VOLCANO_VGPU_NUMBER, 1), (VOLCANO_VGPU_CORES, 50)])
            ),
            Ok(Some(GpuRequest::share(500)))
        );
        assert_eq!(
            pod_request(None, &res(&[(NVIDIA_GPU, 2)])),
            Ok(Some(GpuRequest::whole(2)))
        );
        let a = ann(&[(HAMI_USE_GPUTYPE, "A100, T4")]);
        let r = pod_request(Some(&a), &res(&[(NVIDIA_GPU, 1)]))
            .unwrap()
            .unwrap();
        assert!(r.allows_model("T4") && r.allows_model("A100") && !r.allows_model("V100"));
        assert_eq!(pod_request(None, &res(&[("cpu", 1000)])), Ok(None));
    }

    #[test]
    fn hami_memory_in_mib() {
        let mem = |m: Option<u32>, milli: u32| GpuRequest {
            memory_mib: m,
            ..GpuRequest::share(milli)
        };
        // Memory alone: the share is sized on each node by its memory.
        assert_eq!(
            pod_request(None, &res(&[(NVIDIA_GPU, 1), (HAMI_GPUMEM, 4096)])),
            Ok(Some(mem(Some(4096), 0)))
        );
        // With cores: both (the larger share wins on a node).
        assert_eq!(
            pod_request(
                None,
                &res(&[(NVIDIA_GPU, 1), (HAMI_GPUMEM, 8000), (HAMI_GPUCORES, 30)])
            ),
            Ok(Some(mem(Some(8000), 300)))
        );
        assert_eq!(
            pod_request(
                None,
                &res(&[(VOLCANO_VGPU_NUMBER, 1), (VOLCANO_VGPU_MEMORY, 2048)])
            ),
            Ok(Some(mem(Some(2048), 0)))
        );
        // Whole GPUs with memory: whole devices that have it.
        let r = pod_request(
            None,
            &res(&[(NVIDIA_GPU, 2), (HAMI_GPUMEM, 30000), (HAMI_GPUCORES, 100)]),
        )
        .unwrap()
        .unwrap();
        assert_eq!((r.count, r.milli, r.memory_mib), (2, 1000, Some(30000)));
        // Memory alone on several GPUs is a share of several.
        let r = pod_request(None, &res(&[(NVIDIA_GPU, 2), (HAMI_GPUMEM, 4096)]))
            .unwrap()
            .unwrap();
        assert!(r.spans_devices());
    }

    #[test]
    fn node_gpu_memory_label() {
        let l = ann(&[(LABEL_GPU_MEMORY, "15360")]);
        assert_eq!(node_gpu_memory(Some(&l)), Ok(Some(15360)));
        assert_eq!(node_gpu_memory(None), Ok(None));
        let l = ann(&[(LABEL_GPU_MEMORY, "16GB")]);
        assert_eq!(
            node_gpu_memory(Some(&l)),
            Err("metadata.labels[nvidia.com/gpu.memory]: \"16GB\" is not a whole number".into())
        );
        assert!(node_gpu_memory(Some(&ann(&[(LABEL_GPU_MEMORY, "0")]))).is_err());
    }

    #[test]
    fn device_annotation_round_trips() {
        let a = ann(&[(ANNOTATION_GPU_INDEX, "0-3")]);
        let set = pod_devices(Some(&a)).unwrap().unwrap();
        assert_eq!(set, DeviceSet(0b1001));
        assert_eq!(devices_annotation(set), "0-3");
        let a = ann(&[(ANNOTATION_GPU_INDEX, "0-64")]);
        assert!(pod_devices(Some(&a)).unwrap_err().contains("0-63"));
        assert_eq!(pod_devices(None), Ok(None));
    }
}
