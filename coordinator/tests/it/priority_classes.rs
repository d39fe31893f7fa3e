//! PriorityClass resolution in the coordinator: pods without
//! `spec.priority` get it from their class before workers see them; a pod
//! naming a missing class waits with a clear message until the class
//! appears.

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_proto::v1::WorkloadClass::Online;
use flotilla_proto::v1::watch_event::Event;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{
    FakeWorker, Harness, STEP, assigned_names, decode_pod, unschedulable_message, wait_until,
};

const MISSING: &str = "spec.priorityClassName: no PriorityClass with name gold was found";

fn class(name: &str, value: i32, preemption_policy: Option<&str>) -> PriorityClass {
    PriorityClass {
        metadata: ObjectMeta {
            name: Some(name.into()),
            ..ObjectMeta::default()
        },
        value: value.into(),
        preemption_policy: preemption_policy.map(str::to_owned),
        ..PriorityClass::default()
    }
}

fn with_class(name: &str, class: &str) -> Pod {
    let mut p = PodBuilder::new(name).cpu("1").build();
    p.spec.as_mut().expect("spec").priority_class_name = Some(class.into());
    p
}

fn assigned(events: &[Event], name: &str) -> Option<Pod> {
    events.iter().find_map(|e| match e {
        Event::AssignedPod(raw) => {
            Some(decode_pod(raw)).filter(|p| p.metadata.name.as_deref() == Some(name))
        }
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_get_their_class_priority_and_a_missing_class_waits_with_a_message() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    cluster
        .apply_priority_class(class("high", 1000, None))
        .expect("class");
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;

    h.cluster.create_pod(with_class("a", "high")).expect("pod");
    h.cluster.create_pod(with_class("b", "gold")).expect("pod");
    h.cluster
        .create_pod(PodBuilder::new("c").cpu("1").build())
        .expect("pod");
    let events = w.read_until(|e| assigned_names(e).len() == 2).await;
    assert_eq!(assigned_names(&events), ["a", "c"], "b waits for its class");
    let a = assigned(&events, "a").expect("a");
    assert_eq!(a.spec.as_ref().and_then(|s| s.priority), Some(1000));
    let c = assigned(&events, "c").expect("c");
    assert_eq!(
        c.spec.as_ref().and_then(|s| s.priority),
        Some(0),
        "no class, no default: 0"
    );

    // b: PodScheduled=False and a FailedScheduling Event with upstream's text.
    let cluster = h.cluster.clone();
    wait_until(STEP, "b marked unschedulable", || {
        cluster
            .pod("default", "b")
            .is_some_and(|p| unschedulable_message(&p) == Some(MISSING))
    })
    .await;
    let failed: Vec<_> = h
        .cluster
        .events()
        .into_iter()
        .filter(|e| e.pod.name == "b" && e.reason == "FailedScheduling")
        .collect();
    assert_eq!(failed.len(), 1, "{failed:?}");
    assert_eq!(failed[0].note, MISSING);
    let rec = h.coordinator.record("default", "b").expect("b known");
    assert_eq!(rec.unschedulable.as_deref(), Some(MISSING));
    assert_eq!(h.coordinator.summary().unschedulable, 1);

    // Another class appearing changes nothing for b; its own does.
    h.cluster
        .apply_priority_class(class("silver", 10, None))
        .expect("class");
    h.cluster
        .apply_priority_class(class("gold", 500, Some("Never")))
        .expect("class");
    let events = w.read_until(|e| !assigned_names(e).is_empty()).await;
    assert_eq!(assigned_names(&events), ["b"]);
    let b = assigned(&events, "b").expect("b");
    let spec = b.spec.as_ref().expect("spec");
    assert_eq!(spec.priority, Some(500));
    assert_eq!(spec.preemption_policy.as_deref(), Some("Never"));
    let rec = h.coordinator.record("default", "b").expect("b known");
    assert_eq!(rec.unschedulable, None);
    assert_eq!(rec.info.priority, 500);

    // A class deleted later does not move a priority already resolved.
    h.cluster.delete_priority_class("high").expect("class");
    let coord = h.coordinator.clone();
    wait_until(STEP, "a still resolved", || {
        coord
            .record("default", "a")
            .is_some_and(|r| r.info.priority == 1000 && r.unschedulable.is_none())
    })
    .await;
    drop(w);
    h.shutdown().await;
}
