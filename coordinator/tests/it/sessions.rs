//! Calls are bound to the session Register opened (issue 24, "sessions,
//! not ids"): a worker names itself by an unguessable credential, may act
//! only on the pods handed to it, cannot take over another's stream, and
//! cannot make the coordinator hold unbounded text.

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_proto::v1 as pb;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use pb::WorkloadClass::Online;
use tonic::Code;

use crate::{FakeWorker, Harness, STEP, pod_ref, within};

fn refusals(method: &str, reason: &str) -> u64 {
    flotilla_shared::metrics::metrics()
        .refused_calls
        .with_label_values(&[method, reason])
        .get()
}

async fn two_workers_one_pod() -> (Harness, FakeWorker, FakeWorker) {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    let h = Harness::start(cluster).await;
    // `a` is handed to the first worker that watches.
    let owner = FakeWorker::join(&h, "online-0", Online).await;
    let other = FakeWorker::join(&h, "online-1", Online).await;
    (h, owner, other)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_may_act_only_on_the_pods_handed_to_it() {
    let (h, owner, other) = two_workers_one_pod().await;
    let before = refusals("ProposeBind", "not_assigned");
    let d = other.propose("a", "n1").await;
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::PodGone), "{d:?}");
    assert!(d.reason.contains("not assigned to this worker"), "{d:?}");
    assert_eq!(refusals("ProposeBind", "not_assigned"), before + 1);
    // Nor may it report about the pod (its status would be written).
    let mut c = other.client.clone();
    let err = within(
        STEP,
        "a report on another worker's pod",
        c.report_unschedulable(pb::UnschedulableReport {
            worker_id: other.id.clone(),
            pod: Some(pod_ref("a")),
            message: "0/1 nodes are available: forged.".into(),
            ..Default::default()
        }),
    )
    .await
    .expect_err("refused");
    assert_eq!(err.code(), Code::PermissionDenied, "{err:?}");
    let rec = h.coordinator.record("default", "a").expect("record");
    assert_eq!(rec.unschedulable, None, "nothing recorded");
    assert_eq!(h.cluster.write_counts(), (0, 0), "nothing written");
    // The owner may.
    let d = owner.propose("a", "n1").await;
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Bound), "{d:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_second_watch_is_refused_and_the_first_stream_keeps_working() {
    let (h, mut owner, _other) = two_workers_one_pod().await;
    owner.until_synced().await;
    let mut thief = h.client().await;
    let before = refusals("Watch", "already_watching");
    let err = within(
        STEP,
        "a second Watch with the owner's credential",
        thief.watch(pb::WatchRequest {
            worker_id: owner.id.clone(),
        }),
    )
    .await
    .expect_err("refused");
    assert_eq!(err.code(), Code::AlreadyExists, "{err:?}");
    assert_eq!(refusals("Watch", "already_watching"), before + 1);
    // The owner is still attached and still holds its pod.
    assert_eq!(h.coordinator.live_workers(), 2);
    let d = owner.propose("a", "n1").await;
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Bound), "{d:?}");
    let events = owner
        .read_until(|evs| {
            evs.iter().any(|e| {
                matches!(
                    e,
                    pb::watch_event::Event::BoundPod(_) | pb::watch_event::Event::PodBound(_)
                )
            })
        })
        .await;
    assert!(!events.is_empty(), "the stream still delivers");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_huge_report_is_cut_to_a_bounded_message() {
    let (h, owner, _other) = two_workers_one_pod().await;
    let mut c = owner.client.clone();
    let huge = "x".repeat(1024 * 1024);
    within(
        STEP,
        "a 1 MiB report",
        c.report_unschedulable(pb::UnschedulableReport {
            worker_id: owner.id.clone(),
            pod: Some(pod_ref("a")),
            message: huge,
            node_statuses: vec![pb::NodeStatus {
                node_name: "n1".into(),
                reasons: vec!["y".repeat(100_000); 100],
                plugin: "NodeResourcesFit".into(),
            }],
            ..Default::default()
        }),
    )
    .await
    .expect("accepted");
    let rec = h.coordinator.record("default", "a").expect("record");
    let kept = rec.unschedulable.expect("recorded");
    assert!(
        kept.len() < flotilla_coordinator::grpc::MAX_MESSAGE_BYTES + 64,
        "{} bytes kept",
        kept.len()
    );
    assert!(
        kept.ends_with("(cut from 1048576 bytes)"),
        "{}",
        &kept[kept.len() - 40..]
    );
    let reasons: usize = rec.rejections.iter().map(|r| r.reasons.len()).sum();
    assert!(reasons <= 16, "{reasons} reasons kept");
    // A request over the decoding limit is refused outright.
    let err = within(
        STEP,
        "a 20 MiB report",
        c.report_unschedulable(pb::UnschedulableReport {
            worker_id: owner.id.clone(),
            pod: Some(pod_ref("a")),
            message: "z".repeat(20 * 1024 * 1024),
            ..Default::default()
        }),
    )
    .await
    .expect_err("too large");
    assert_eq!(err.code(), Code::OutOfRange, "{err:?}");
    h.shutdown().await;
}
