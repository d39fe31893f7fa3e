//! Hostile and edge inputs across the GPU model (pods and nodes read,
//! counted on a node), from a review that tried to break it: every bound
//! GPU pod is counted, whatever its annotations say, and the same
//! whatever order the pods are seen in.

use std::sync::Arc;

use k8s_openapi::api::core::v1::{Container, ResourceRequirements};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;

use super::dialect::*;
use super::state::{GpuState, PodGpu};
use super::{DeviceSet, GpuRequest};
use crate::testing::{NodeBuilder, PodBuilder};
use crate::{NodeInfo, NodeSpec, PodInfo};

fn gpu_node(count: usize) -> NodeInfo {
    NodeInfo::new(Arc::new(
        NodeBuilder::new("n")
            .cpu("8")
            .gpus(u32::try_from(count).unwrap(), "T4")
            .build_spec(),
    ))
}

fn total_free(n: &NodeInfo) -> u64 {
    n.gpu.as_deref().unwrap().gpus().free_milli()
}

/// A bound pod whose request is readable but whose `gpu-index` is not
/// (empty, or edited by hand) still holds its GPU: counted as a pod bound
/// without naming its devices.
#[test]
fn a_bound_pod_with_an_unreadable_gpu_index_still_holds_its_gpu() {
    for bad in ["", "x", "0-64", "0,1"] {
        let mut node = gpu_node(1);
        let p = PodBuilder::new("a")
            .node_name("n")
            .annotation(ANNOTATION_GPU_MILLI, "1000")
            .annotation(ANNOTATION_GPU_INDEX, bad)
            .build_info();
        node.add_pod(Arc::new(p));
        assert_eq!(
            total_free(&node),
            0,
            "gpu-index {bad:?}: the whole GPU is still held"
        );
    }
}

/// A pod bound by another scheduler (HAMi's) with a share of several
/// GPUs, which Flotilla does not place, is counted: 300 on each of two
/// devices.
#[test]
fn a_bound_hami_multi_gpu_share_is_still_counted() {
    let mut node = gpu_node(2);
    let p = PodBuilder::new("hami")
        .node_name("n")
        .request("nvidia.com/gpu", "2")
        .request(HAMI_GPUCORES, "30")
        .build_info();
    assert!(p.gpu_error.is_none());
    node.add_pod(Arc::new(p));
    assert_eq!(
        total_free(&node),
        1400,
        "300 held on each of the two devices"
    );
}

/// `gpu-index` naming fewer devices than the pod asks (`"1-1"`, a
/// duplicate; `"1"` for a 2-GPU pod) is not trusted: the pod is counted
/// on as many devices as it asks for.
#[test]
fn a_gpu_index_naming_fewer_devices_than_the_count_is_not_trusted() {
    for index in ["1-1", "1"] {
        let mut node = gpu_node(2);
        let p = PodBuilder::new("a")
            .node_name("n")
            .annotation(ANNOTATION_GPU_MILLI, "1000")
            .annotation(ANNOTATION_GPU_COUNT, "2")
            .annotation(ANNOTATION_GPU_INDEX, index)
            .build_info();
        node.add_pod(Arc::new(p));
        assert_eq!(total_free(&node), 0, "gpu-index {index:?}: both GPUs held");
    }
}

/// Counting does not depend on the order pods are seen in: a pod bound
/// without `gpu-index`, counted first on device 0, moves when a pod naming
/// device 0 arrives and device 0 cannot hold both (a worker that listed
/// in another order and the arbiter agree).
#[test]
fn unnamed_and_named_pods_count_the_same_in_any_order() {
    let spec = NodeGpuSpec {
        model: Arc::from("T4"),
        count: 2,
        memory_mib: None,
    };
    let named = PodGpu {
        request: GpuRequest::share(600),
        devices: Some(DeviceSet::one(0)),
    };
    let unnamed = PodGpu {
        request: GpuRequest::share(600),
        devices: None,
    };
    let (a, b): (Arc<str>, Arc<str>) = (Arc::from("named"), Arc::from("unnamed"));
    let mut s1 = GpuState::new(&spec);
    s1.add(&a, &named);
    s1.add(&b, &unnamed);
    let mut s2 = GpuState::new(&spec);
    s2.add(&b, &unnamed);
    s2.add(&a, &named);
    assert_eq!(s1.gpus().free, [400, 400]);
    assert_eq!(s2.gpus().free, s1.gpus().free, "order-dependent accounting");
}

/// Volcano and HAMi resources both on one pod: an error, not one of the
/// two silently ignored.
#[test]
fn volcano_and_hami_both_present_is_an_error() {
    let p = PodBuilder::new("both")
        .request("nvidia.com/gpu", "1")
        .request(HAMI_GPUMEM_PERCENTAGE, "50")
        .request(VOLCANO_VGPU_NUMBER, "1")
        .request(VOLCANO_VGPU_MEMORY_PERCENTAGE, "50")
        .build_info();
    assert!(
        p.gpu_error.is_some(),
        "silently read as {:?}",
        p.gpu.as_deref().map(|g| &g.request)
    );
}

/// A node advertising more than 64 `nvidia.com/gpu` (HAMi's vGPU slots,
/// 10 per card by default; the device plugin's time-slicing replicas) is
/// still a node: only its GPUs are not counted (GpuShare refuses GPU pods
/// there, saying why), so CPU-only pods still run there.
#[test]
fn a_node_with_80_gpu_slots_is_still_a_node() {
    let node = NodeBuilder::new("hami-8-cards")
        .cpu("64")
        .resource("nvidia.com/gpu", "80")
        .build();
    let spec = NodeSpec::from_node(Arc::new(node)).expect("still a node");
    assert!(spec.gpus.is_none());
    let e = spec.gpu_error.as_deref().unwrap();
    assert!(
        e.starts_with("status.allocatable[nvidia.com/gpu]: 80 GPUs"),
        "{e}"
    );
}

/// HAMi: two containers each with one vGPU of 30 % memory. The pod's
/// requests are summed (`nvidia.com/gpu: 2`, 60 %): read as a share of
/// several GPUs, each counted at the summed 600 when bound (more than the
/// 300 each holds: never less), and refused by GpuShare, which says the
/// figures are summed over the containers.
#[test]
fn two_hami_containers_are_read_summed_and_never_under_counted() {
    let container = |name: &str| Container {
        name: name.into(),
        resources: Some(ResourceRequirements {
            requests: Some(
                [
                    ("nvidia.com/gpu".to_owned(), Quantity("1".into())),
                    (HAMI_GPUMEM_PERCENTAGE.to_owned(), Quantity("30".into())),
                ]
                .into(),
            ),
            ..Default::default()
        }),
        ..Default::default()
    };
    let mut pod = PodBuilder::new("two").build();
    pod.spec.as_mut().unwrap().containers = vec![container("a"), container("b")];
    pod.spec.as_mut().unwrap().node_name = Some("n".into());
    let p = PodInfo::from_pod(Arc::new(pod)).unwrap();
    let r = &p.gpu.as_deref().unwrap().request;
    assert_eq!((r.count, r.milli, r.spans_devices()), (2, 600, true));
    let mut node = gpu_node(2);
    node.add_pod(Arc::new(p));
    assert_eq!(total_free(&node), 800);
}

/// A node whose GPU count shrinks below what its pods hold (the device
/// plugin reports fewer healthy GPUs) keeps counting every pod, at 0 free;
/// growing back spreads them again.
#[test]
fn a_shrinking_node_keeps_counting_its_pods() {
    let spec = |n: &str| {
        Arc::new(
            NodeBuilder::new("n")
                .cpu("8")
                .resource("nvidia.com/gpu", n)
                .label(GPU_CARD_MODEL, "T4")
                .build_spec(),
        )
    };
    let mut node = NodeInfo::new(spec("4"));
    for (name, idx) in [("a", "2"), ("b", "3")] {
        node.add_pod(Arc::new(
            PodBuilder::new(name)
                .node_name("n")
                .annotation(ANNOTATION_GPU_MILLI, "1000")
                .annotation(ANNOTATION_GPU_INDEX, idx)
                .build_info(),
        ));
    }
    node.set_spec(spec("1"));
    assert_eq!(node.gpu.as_deref().unwrap().gpus().free, [0]);
    node.set_spec(spec("0"));
    assert!(node.gpu.is_none());
    node.set_spec(spec("4"));
    assert_eq!(total_free(&node), 2000);
    node.remove_pod("uid-a");
    node.remove_pod("uid-b");
    assert_eq!(total_free(&node), 4000);
}
