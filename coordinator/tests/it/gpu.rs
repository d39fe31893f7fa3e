//! GPU devices at the arbiter: two workers deciding at once on stale
//! snapshots never split one GPU beyond 1000 milli-GPU (the GpuShare bind
//! check on the arbiter's per-device view), and the devices granted are
//! written on the pod with its Binding: the worker's choice while it still
//! holds the share, else the tightest devices that do.

use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::{Batch, Online};
use flotilla_proto::v1::watch_event::Event;
use flotilla_scheduler::plugins::gpu_share::REASON_NO_SHARE;
use flotilla_shared::gpu::dialect::{ANNOTATION_GPU_INDEX, ANNOTATION_GPU_MILLI};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use flotilla_coordinator::cluster::EmbeddedCluster;

use crate::{FakeWorker, Harness, STEP, assigned_names, wait_until, within};

const CLASS_LABEL: &str = "flotilla.io/workload-class";

fn outcome(d: &pb::BindDecision) -> pb::BindOutcome {
    pb::BindOutcome::try_from(d.outcome).expect("a known outcome")
}

/// n1 with `gpus` T4 devices and room for everything else.
fn cluster(gpus: u32) -> EmbeddedCluster {
    let c = EmbeddedCluster::new();
    c.apply_node(
        NodeBuilder::new("n1")
            .cpu("8")
            .memory("32Gi")
            .pods(110)
            .gpus(gpus, "T4")
            .build(),
    )
    .expect("node");
    c
}

fn share_pod(name: &str, milli: u32, class: &str) -> k8s_openapi::api::core::v1::Pod {
    PodBuilder::new(name)
        .cpu("100m")
        .label(CLASS_LABEL, class)
        .annotation(ANNOTATION_GPU_MILLI, &milli.to_string())
        .build()
}

fn devices_written(c: &EmbeddedCluster, pod: &str) -> Option<String> {
    c.pod("default", pod)?
        .metadata
        .annotations
        .as_ref()?
        .get(ANNOTATION_GPU_INDEX)
        .cloned()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_never_split_one_gpu_beyond_1000_milli() {
    let h = Harness::start(cluster(1)).await;
    let mut online = FakeWorker::join(&h, "online-0", Online).await;
    let mut batch = FakeWorker::join(&h, "batch-0", Batch).await;
    for w in [&mut online, &mut batch] {
        w.until_synced().await;
    }
    for i in 0..5 {
        let (a, b) = (format!("a{i}"), format!("b{i}"));
        h.cluster
            .create_pod(share_pod(&a, 600, "online"))
            .expect("pod");
        h.cluster
            .create_pod(share_pod(&b, 600, "batch"))
            .expect("pod");
        online.read_until(|e| assigned_names(e).contains(&a)).await;
        batch.read_until(|e| assigned_names(e).contains(&b)).await;
        // Both saw device 0 idle and chose it.
        let (da, db) = within(STEP, "two concurrent proposals", async {
            tokio::join!(
                online.propose_gpus(&a, "n1", 1),
                batch.propose_gpus(&b, "n1", 1)
            )
        })
        .await;
        let outcomes = [outcome(&da), outcome(&db)];
        let bound = outcomes
            .iter()
            .filter(|o| **o == pb::BindOutcome::Bound)
            .count();
        assert_eq!(bound, 1, "round {i}: exactly one wins: {da:?} {db:?}");
        let (winner, loser) = if outcomes[0] == pb::BindOutcome::Bound {
            (&a, &db)
        } else {
            (&b, &da)
        };
        assert_eq!(outcome(loser), pb::BindOutcome::Conflict, "{loser:?}");
        assert_eq!(loser.reason, format!("node n1: {REASON_NO_SHARE}"));
        assert_eq!(devices_written(&h.cluster, winner).as_deref(), Some("0"));
        for p in [&a, &b] {
            h.cluster.delete_pod("default", p).expect("delete");
        }
        let c = h.coordinator.clone();
        wait_until(STEP, "the round's pods gone", || c.records().is_empty()).await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_workers_devices_are_kept_while_they_hold_the_share_else_the_tightest_are_written() {
    let h = Harness::start(cluster(3)).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    for (name, milli) in [("a", 300), ("b", 800), ("c", 500)] {
        h.cluster
            .create_pod(share_pod(name, milli, "online"))
            .expect("pod");
    }
    w.read_until(|e| {
        ["a", "b", "c"]
            .iter()
            .all(|p| assigned_names(e).contains(&(*p).to_owned()))
    })
    .await;
    // a on device 1, as the worker chose.
    assert_eq!(
        outcome(&w.propose_gpus("a", "n1", 0b010).await),
        pb::BindOutcome::Bound
    );
    assert_eq!(devices_written(&h.cluster, "a").as_deref(), Some("1"));
    // b's worker also chose device 1 (a stale view): 700 is left there, so
    // the arbiter takes the tightest device that holds 800: device 0.
    assert_eq!(
        outcome(&w.propose_gpus("b", "n1", 0b010).await),
        pb::BindOutcome::Bound
    );
    assert_eq!(devices_written(&h.cluster, "b").as_deref(), Some("0"));
    // The worker is sent b's bound copy (not a bare confirmation), so it
    // counts device 0 as the arbiter does, not the device it chose.
    w.read_until(|events| {
        events.iter().any(|e| match e {
            Event::BoundPod(raw) => {
                let pod: k8s_openapi::api::core::v1::Pod =
                    serde_json::from_slice(&raw.json).expect("a pod");
                pod.metadata.name.as_deref() == Some("b")
                    && pod
                        .metadata
                        .annotations
                        .as_ref()
                        .and_then(|a| a.get(ANNOTATION_GPU_INDEX))
                        .map(String::as_str)
                        == Some("0")
            }
            _ => false,
        })
    })
    .await;
    // c without a choice: the tightest that holds 500 is device 1 (700 free).
    assert_eq!(outcome(&w.propose("c", "n1").await), pb::BindOutcome::Bound);
    assert_eq!(devices_written(&h.cluster, "c").as_deref(), Some("1"));
}

/// A pending pod that already carries a `gpu-index` annotation (created
/// from a bound pod's manifest, or by a controller copying annotations)
/// names a device that is full. Only a bound pod's annotation is read: the
/// worker's choice is checked and written.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_stale_gpu_index_on_a_pending_pod_does_not_block_its_bind() {
    let h = Harness::start(cluster(2)).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    h.cluster
        .create_pod(share_pod("full", 1000, "online"))
        .expect("pod");
    w.read_until(|e| assigned_names(e).contains(&"full".to_owned()))
        .await;
    assert_eq!(
        outcome(&w.propose_gpus("full", "n1", 0b01).await),
        pb::BindOutcome::Bound
    );
    let copied = PodBuilder::new("copied")
        .cpu("100m")
        .label(CLASS_LABEL, "online")
        .annotation(ANNOTATION_GPU_MILLI, "500")
        .annotation(ANNOTATION_GPU_INDEX, "0")
        .build();
    h.cluster.create_pod(copied).expect("pod");
    w.read_until(|e| assigned_names(e).contains(&"copied".to_owned()))
        .await;
    // Device 1 is idle: the worker proposes it.
    let d = w.propose_gpus("copied", "n1", 0b10).await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    assert_eq!(devices_written(&h.cluster, "copied").as_deref(), Some("1"));
}

/// A nominated GPU pod's room at the arbiter: a lower priority share
/// granted on the node is given devices with the nominee counted, so it
/// does not take the one idle device the nominee needs.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lower_priority_share_leaves_the_nominated_gpu_pods_device() {
    let h = Harness::start(cluster(2)).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    h.cluster
        .create_pod(
            PodBuilder::new("half")
                .cpu("100m")
                .node_name("n1")
                .annotation(ANNOTATION_GPU_MILLI, "500")
                .annotation(ANNOTATION_GPU_INDEX, "1")
                .build(),
        )
        .expect("pod");
    let pod = |name: &str, milli: &str, prio: i32| {
        PodBuilder::new(name)
            .cpu("100m")
            .priority(prio)
            .label(CLASS_LABEL, "online")
            .annotation(ANNOTATION_GPU_MILLI, milli)
            .build()
    };
    h.cluster
        .create_pod(pod("nominee", "1000", 100))
        .expect("pod");
    h.cluster.create_pod(pod("low", "400", 10)).expect("pod");
    w.read_until(|e| {
        let a = assigned_names(e);
        a.contains(&"nominee".to_owned()) && a.contains(&"low".to_owned())
    })
    .await;
    let mut client = w.client.clone();
    let d = client
        .propose_preemption(pb::PreemptionProposal {
            worker_id: w.id.clone(),
            pod: Some(crate::pod_ref("nominee")),
            node_name: "n1".into(),
            victims: vec![],
        })
        .await
        .expect("ProposePreemption")
        .into_inner();
    assert_eq!(
        pb::PreemptionOutcome::try_from(d.outcome).unwrap(),
        pb::PreemptionOutcome::Granted,
        "{d:?}"
    );
    // low's worker (stale FGD choice) proposes device 0: the nominee's.
    let d = w.propose_gpus("low", "n1", 0b01).await;
    if outcome(&d) == pb::BindOutcome::Bound {
        assert_eq!(
            devices_written(&h.cluster, "low").as_deref(),
            Some("1"),
            "low took the nominee's only idle device"
        );
    }
    let d = w.propose("nominee", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
}
