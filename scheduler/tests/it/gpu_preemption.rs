//! GPU sharing through the worker's own cycle (`simulate`):
//! preemption freeing devices.

use flotilla_scheduler::Profile;
use flotilla_scheduler::Registry;
use flotilla_scheduler::simulate::{Outcome, simulate};
use flotilla_shared::gpu::dialect::{ANNOTATION_GPU_INDEX, ANNOTATION_GPU_MILLI};
use flotilla_shared::objects::ClusterObjects;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

fn objects(gpus: u32, pods: Vec<k8s_openapi::api::core::v1::Pod>) -> ClusterObjects {
    ClusterObjects {
        name: "gpu-preemption".into(),
        nodes: vec![
            NodeBuilder::new("n1")
                .cpu("8")
                .memory("32Gi")
                .pods(110)
                .gpus(gpus, "T4")
                .build(),
        ],
        pods,
        ..ClusterObjects::default()
    }
}

fn bound(name: &str, milli: u32, index: &str, prio: i32) -> k8s_openapi::api::core::v1::Pod {
    PodBuilder::new(name)
        .cpu("100m")
        .priority(prio)
        .node_name("n1")
        .annotation(ANNOTATION_GPU_MILLI, &milli.to_string())
        .annotation(ANNOTATION_GPU_INDEX, index)
        .build()
}

fn pending(name: &str, milli: u32, prio: i32) -> k8s_openapi::api::core::v1::Pod {
    PodBuilder::new(name)
        .cpu("100m")
        .priority(prio)
        .annotation(ANNOTATION_GPU_MILLI, &milli.to_string())
        .build()
}

#[test]
fn a_gpu_preemptor_takes_the_device_its_victim_frees() {
    let o = objects(
        1,
        vec![bound("low", 1000, "0", 0), pending("high", 600, 100)],
    );
    let sim = simulate(&o, &[Profile::default()], &Registry::in_tree()).expect("simulate");
    let r = sim.results.iter().find(|r| &*r.pod.name == "high").unwrap();
    assert_eq!(r.victims, ["default/low"]);
    assert_eq!(r.outcome, Outcome::Scheduled { node: "n1".into() }, "{r:?}");
}

#[test]
fn gpu_preemption_evicts_only_the_pods_one_device_needs() {
    let o = objects(
        2,
        vec![
            bound("low-a", 400, "0", 0),
            bound("low-b", 400, "1", 0),
            pending("high", 700, 100),
        ],
    );
    let sim = simulate(&o, &[Profile::default()], &Registry::in_tree()).expect("simulate");
    let r = sim.results.iter().find(|r| &*r.pod.name == "high").unwrap();
    assert_eq!(r.victims.len(), 1, "{:?}", r.victims);
    assert_eq!(r.outcome, Outcome::Scheduled { node: "n1".into() }, "{r:?}");
}
