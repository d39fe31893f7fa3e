//! The bind arbiter re-checks the volume Filters against its own view,
//! which counts every grant: two workers deciding at once on stale
//! snapshots never both place pods using one `ReadWriteOncePod` claim, nor
//! together push a node over its CSI attach limit. Each race is run over
//! several rounds, the pods deleted between rounds (freeing the claim and
//! the slot again); nor do they both take the one available static PV for
//! two claims (Reserve assumes the PV for the first grant). PreBind waits
//! for the claims to be bound, and a timeout frees the room.

use std::sync::Arc;

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::{Batch, Online};
use flotilla_proto::v1::watch_event::Event;
use flotilla_shared::testing::volumes::{PvBuilder, PvcBuilder, csi_node, storage_class};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use flotilla_shared::volumes::binding;
use flotilla_shared::volumes::limits::REASON_MAX_VOLUME_COUNT;
use flotilla_shared::volumes::restrictions::REASON_READ_WRITE_ONCE_POD_CONFLICT;
use flotilla_shared::volumes::{VolumeKey, VolumeKind, VolumeObject};

use crate::{FakeWorker, Harness, STEP, assigned_names, default_profiles, wait_until, within};

const CLASS_LABEL: &str = "flotilla.io/workload-class";
const DRIVER: &str = "ebs.csi.aws.com";
const ROUNDS: usize = 5;

fn outcome(d: &pb::BindDecision) -> pb::BindOutcome {
    pb::BindOutcome::try_from(d.outcome).expect("a known outcome")
}

/// n1 and n2 with room for everything, each attaching at most one volume
/// of [`DRIVER`]; `volumes` applied before the coordinator lists.
fn cluster(volumes: Vec<VolumeObject>) -> EmbeddedCluster {
    let c = EmbeddedCluster::new();
    for n in ["n1", "n2"] {
        c.apply_node(
            NodeBuilder::new(n)
                .cpu("8")
                .memory("32Gi")
                .pods(110)
                .build(),
        )
        .expect("node");
        c.apply_volume(VolumeObject::CsiNode(Arc::new(csi_node(
            n,
            &[(DRIVER, Some(1))],
        ))))
        .expect("csinode");
    }
    for v in volumes {
        c.apply_volume(v).expect("volume object");
    }
    c
}

/// Claim `name` bound to PV `pv-<name>` (a CSI volume of [`DRIVER`]),
/// with `mode`.
fn bound_claim(name: &str, mode: &str) -> [VolumeObject; 2] {
    let pv = format!("pv-{name}");
    [
        VolumeObject::Pv(Arc::new(
            PvBuilder::new(&pv)
                .csi(DRIVER, &format!("vol-{name}"))
                .build(),
        )),
        VolumeObject::Claim(Arc::new(
            PvcBuilder::new(name)
                .access_mode(mode)
                .bound_to(&pv)
                .build(),
        )),
    ]
}

/// An online and a batch worker, both synced; asserts the volume objects
/// reached them.
async fn two_workers(h: &Harness, objects: usize) -> (FakeWorker, FakeWorker) {
    let mut online = FakeWorker::join(h, "online-0", Online).await;
    let mut batch = FakeWorker::join(h, "batch-0", Batch).await;
    for w in [&mut online, &mut batch] {
        let replay = w.until_synced().await;
        let volumes = replay
            .iter()
            .filter(|e| matches!(e, Event::VolumeUpsert(_)))
            .count();
        assert_eq!(volumes, objects, "every volume object is replayed");
    }
    (online, batch)
}

/// One round: pod `a<i>` (online) using `claim_a` and `b<i>` (batch) using
/// `claim_b` are proposed at once on `na` and `nb`; exactly one is bound,
/// the other refused with `reason`. Both pods are deleted afterwards.
#[allow(clippy::too_many_arguments)]
async fn round(
    h: &Harness,
    online: &mut FakeWorker,
    batch: &mut FakeWorker,
    i: usize,
    (claim_a, claim_b): (&str, &str),
    (na, nb): (&str, &str),
    reason: &str,
) {
    let (a, b) = (format!("a{i}"), format!("b{i}"));
    for (name, claim, class) in [(&a, claim_a, "online"), (&b, claim_b, "batch")] {
        h.cluster
            .create_pod(
                PodBuilder::new(name)
                    .cpu("100m")
                    .label(CLASS_LABEL, class)
                    .pvc_volume("data", claim)
                    .build(),
            )
            .expect("pod");
    }
    online.read_until(|e| assigned_names(e).contains(&a)).await;
    batch.read_until(|e| assigned_names(e).contains(&b)).await;
    let (da, db) = within(STEP, "two concurrent proposals", async {
        tokio::join!(online.propose(&a, na), batch.propose(&b, nb))
    })
    .await;
    let outcomes = [outcome(&da), outcome(&db)];
    let bound = outcomes
        .iter()
        .filter(|o| **o == pb::BindOutcome::Bound)
        .count();
    assert_eq!(bound, 1, "round {i}: exactly one wins: {da:?} {db:?}");
    let (loser, node) = if outcomes[0] == pb::BindOutcome::Bound {
        (&db, nb)
    } else {
        (&da, na)
    };
    assert_eq!(outcome(loser), pb::BindOutcome::Conflict, "{loser:?}");
    assert_eq!(loser.reason, format!("node {node}: {reason}"));
    for p in [&a, &b] {
        h.cluster.delete_pod("default", p).expect("delete");
    }
    let c = h.coordinator.clone();
    wait_until(STEP, "the round's pods gone", || c.records().is_empty()).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_never_both_place_pods_using_one_read_write_once_pod_claim() {
    let objects = bound_claim("shared", "ReadWriteOncePod");
    let h = Harness::serving(cluster(objects.to_vec()), default_profiles()).await;
    let (mut online, mut batch) = two_workers(&h, 4).await;
    for i in 0..ROUNDS {
        // On different nodes: only the claim's users conflict.
        round(
            &h,
            &mut online,
            &mut batch,
            i,
            ("shared", "shared"),
            ("n1", "n2"),
            REASON_READ_WRITE_ONCE_POD_CONFLICT,
        )
        .await;
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_never_together_push_a_node_over_its_csi_attach_limit() {
    let objects: Vec<VolumeObject> = [
        bound_claim("c1", "ReadWriteOnce"),
        bound_claim("c2", "ReadWriteOnce"),
    ]
    .concat();
    let h = Harness::serving(cluster(objects), default_profiles()).await;
    let (mut online, mut batch) = two_workers(&h, 6).await;
    for i in 0..ROUNDS {
        // Two distinct volumes of the driver on n1, which attaches one.
        round(
            &h,
            &mut online,
            &mut batch,
            i,
            ("c1", "c2"),
            ("n1", "n1"),
            REASON_MAX_VOLUME_COUNT,
        )
        .await;
    }
    h.shutdown().await;
}

/// A `WaitForFirstConsumer` class of static PVs only (no provisioner).
const LOCAL: &str = "local";

fn local_class() -> VolumeObject {
    VolumeObject::StorageClass(Arc::new(storage_class(
        LOCAL,
        binding::NOT_SUPPORTED_PROVISIONER,
        Some("WaitForFirstConsumer"),
    )))
}

/// An available 10Gi PV of [`LOCAL`], reachable from every node.
fn free_pv(name: &str) -> VolumeObject {
    VolumeObject::Pv(Arc::new(
        PvBuilder::new(name)
            .class(LOCAL)
            .capacity("10Gi")
            .access_mode("ReadWriteOnce")
            .available()
            .build(),
    ))
}

/// An unbound 1Gi claim of [`LOCAL`].
fn local_claim(name: &str) -> VolumeObject {
    VolumeObject::Claim(Arc::new(
        PvcBuilder::new(name)
            .class(LOCAL)
            .storage("1Gi")
            .access_mode("ReadWriteOnce")
            .build(),
    ))
}

/// The PV's `spec.claimRef` name, as the cluster holds it.
fn claim_ref_of(c: &EmbeddedCluster, pv: &str) -> Option<String> {
    c.volume_object(&VolumeKey {
        kind: VolumeKind::Pv,
        namespace: String::new(),
        name: pv.into(),
    })
    .and_then(|o| match o {
        VolumeObject::Pv(pv) => pv.spec.as_ref()?.claim_ref.as_ref()?.name.clone(),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_never_both_take_the_one_available_static_pv() {
    let h = Harness::serving(cluster(vec![local_class()]), default_profiles()).await;
    let (mut online, mut batch) = two_workers(&h, 3).await;
    for i in 0..ROUNDS {
        // One free PV, two claims that both match it, proposed at once.
        let (pv, ca, cb) = (format!("pv-{i}"), format!("ca-{i}"), format!("cb-{i}"));
        for o in [free_pv(&pv), local_claim(&ca), local_claim(&cb)] {
            h.cluster.apply_volume(o).expect("volume object");
        }
        let objects = 3 + 3 * (i + 1);
        let c = h.coordinator.clone();
        wait_until(STEP, "the round's objects seen", || {
            c.volume_objects() == objects
        })
        .await;
        round(
            &h,
            &mut online,
            &mut batch,
            i,
            (&ca, &cb),
            ("n1", "n2"),
            binding::REASON_BIND_CONFLICT,
        )
        .await;
        let owner = claim_ref_of(&h.cluster, &pv).expect("the PV was bound");
        assert!(owner == ca || owner == cb, "{owner}");
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_claim_never_bound_times_out_at_prebind_frees_the_room_and_binds_once_the_controller_runs()
 {
    let (h, w) = waiting_prebind(1).await;
    let d = within(STEP, "PreBind times out", w.propose("p", "n1")).await;
    assert_eq!(outcome(&d), pb::BindOutcome::Error, "{d:?}");
    let want = "running PreBind plugin \"VolumeBinding\": binding volumes: timed out waiting for \
                the condition";
    assert_eq!(d.reason, want);
    assert_eq!(
        claim_ref_of(&h.cluster, "pv-0").as_deref(),
        Some("data"),
        "PreBind wrote it"
    );
    let pod = h.cluster.pod("default", "p").expect("pod");
    assert_eq!(crate::node_of(&pod), None, "no Binding");
    let cond = crate::pod_scheduled(&pod).expect("PodScheduled");
    assert_eq!(
        (
            cond.status.as_str(),
            cond.reason.as_deref(),
            cond.message.as_deref()
        ),
        ("False", Some("SchedulerError"), Some(want))
    );
    assert_eq!(h.coordinator.volume_reservations(), 0, "unreserved");
    let rec = h.coordinator.records().pop().expect("its record");
    assert!(
        matches!(rec.phase, flotilla_coordinator::state::PodPhase::Pending(_)),
        "the room is free: {:?}",
        rec.phase
    );

    // The controller runs again: the retry finds the PV pre-bound to the
    // claim and binds.
    h.cluster.set_volume_controllers(true);
    let d = within(STEP, "the retry", w.propose("p", "n1")).await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    assert_eq!(h.coordinator.volume_reservations(), 0, "bound: none held");
    h.shutdown().await;
}

/// `w`'s `ProposeBind` of `pod` on `node`, answered in the background.
fn propose_in_background(
    w: &FakeWorker,
    pod: &str,
    node: &str,
) -> tokio::task::JoinHandle<pb::BindDecision> {
    let mut client = w.client.clone();
    let proposal = pb::BindProposal {
        worker_id: w.id.clone(),
        pod: Some(crate::pod_ref(pod)),
        node_name: node.into(),
        alternatives: Vec::new(),
        gpu_devices: 0,
    };
    tokio::spawn(async move {
        client
            .propose_bind(proposal)
            .await
            .expect("ProposeBind answers")
            .into_inner()
    })
}

/// A coordinator whose PreBind waits up to `bind_timeout_seconds` (the
/// stand-in controllers off: nothing completes a binding), one online
/// worker, and pod `p` using claim `data` (an unbound claim of [`LOCAL`],
/// `pv-0` free for it) assigned to it.
async fn waiting_prebind(bind_timeout_seconds: u64) -> (Harness, FakeWorker) {
    let c = cluster(vec![local_class(), free_pv("pv-0"), local_claim("data")]);
    c.set_volume_controllers(false);
    let profiles = crate::profiles_of(&format!(
        "- schedulerName: default-scheduler\n  pluginConfig:\n  - name: VolumeBinding\n    args:\n      bindTimeoutSeconds: {bind_timeout_seconds}\n"
    ));
    let h = Harness::serving(c, profiles).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    h.cluster
        .create_pod(
            PodBuilder::new("p")
                .cpu("100m")
                .label(CLASS_LABEL, "online")
                .pvc_volume("data", "data")
                .build(),
        )
        .expect("pod");
    w.read_until(|e| assigned_names(e).contains(&"p".to_owned()))
        .await;
    (h, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_bound_by_another_binding_while_prebind_waits_drops_its_volume_reservation() {
    use flotilla_coordinator::cluster::Cluster as _;
    let (h, w) = waiting_prebind(60).await;
    let answer = propose_in_background(&w, "p", "n1");
    let c = h.cluster.clone();
    wait_until(STEP, "PreBind wrote the claimRef", || {
        claim_ref_of(&c, "pv-0").as_deref() == Some("data")
    })
    .await;
    assert_eq!(h.coordinator.volume_reservations(), 1, "Reserve's plan");
    // Another Binding of the pod to the granted node lands (a previous
    // leader's, say): the pod is seen bound where it was granted.
    h.cluster
        .bind(&crate::pod_ref_of("p"), "n1", &[])
        .await
        .expect("the other Binding");
    let d = within(STEP, "PreBind sees the pod bound", answer)
        .await
        .expect("the proposal task");
    assert_eq!(outcome(&d), pb::BindOutcome::PodGone, "{d:?}");
    let co = h.coordinator.clone();
    wait_until(STEP, "the reservation dropped", || {
        co.volume_reservations() == 0
    })
    .await;
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn prebind_ends_with_its_reservation_when_the_pod_the_node_the_pv_goes_or_at_shutdown() {
    let wrote = |h: &Harness| {
        let c = h.cluster.clone();
        async move {
            wait_until(STEP, "PreBind wrote the claimRef", || {
                claim_ref_of(&c, "pv-0").as_deref() == Some("data")
            })
            .await;
        }
    };
    let no_binding = |h: &Harness| {
        h.cluster
            .pod("default", "p")
            .is_none_or(|p| crate::node_of(&p).is_none())
    };

    // The pod deleted.
    let (h, w) = waiting_prebind(60).await;
    let answer = propose_in_background(&w, "p", "n1");
    wrote(&h).await;
    h.cluster.delete_pod("default", "p").expect("deleted");
    let d = within(STEP, "PreBind sees the pod gone", answer)
        .await
        .expect("the proposal task");
    assert_eq!(outcome(&d), pb::BindOutcome::PodGone, "{d:?}");
    assert_eq!(h.coordinator.volume_reservations(), 0);
    h.shutdown().await;

    // The node deleted.
    let (h, w) = waiting_prebind(60).await;
    let answer = propose_in_background(&w, "p", "n1");
    wrote(&h).await;
    h.cluster.delete_node("n1").expect("deleted");
    let d = within(STEP, "PreBind sees the node gone", answer)
        .await
        .expect("the proposal task");
    assert_eq!(outcome(&d), pb::BindOutcome::Conflict, "{d:?}");
    assert_eq!(h.coordinator.volume_reservations(), 0);
    assert!(no_binding(&h));
    h.shutdown().await;

    // The PV deleted: PreBind fails at once, naming it.
    let (h, w) = waiting_prebind(60).await;
    let answer = propose_in_background(&w, "p", "n1");
    wrote(&h).await;
    h.cluster
        .delete_volume(&VolumeKey {
            kind: VolumeKind::Pv,
            namespace: String::new(),
            name: "pv-0".into(),
        })
        .expect("deleted");
    let d = within(STEP, "PreBind sees the PV gone", answer)
        .await
        .expect("the proposal task");
    assert_eq!(outcome(&d), pb::BindOutcome::Error, "{d:?}");
    assert_eq!(
        d.reason,
        "running PreBind plugin \"VolumeBinding\": binding volumes: persistentvolume \"pv-0\" \
         not found"
    );
    assert_eq!(h.coordinator.volume_reservations(), 0);
    assert!(no_binding(&h));
    h.shutdown().await;

    // Shutdown.
    let (h, w) = waiting_prebind(60).await;
    let answer = propose_in_background(&w, "p", "n1");
    wrote(&h).await;
    h.coordinator.close_streams();
    let d = within(STEP, "PreBind gives up at shutdown", answer)
        .await
        .expect("the proposal task");
    assert_eq!(outcome(&d), pb::BindOutcome::Error, "{d:?}");
    assert_eq!(h.coordinator.volume_reservations(), 0);
    assert!(no_binding(&h));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proposal_repeated_while_prebind_waits_is_not_answered_bound() {
    let (h, w) = waiting_prebind(60).await;
    // The first proposal's answer is lost (its stream broke, say): the
    // worker proposes again while PreBind waits.
    let first = propose_in_background(&w, "p", "n1");
    let c = h.cluster.clone();
    wait_until(STEP, "PreBind wrote the claimRef", || {
        claim_ref_of(&c, "pv-0").as_deref() == Some("data")
    })
    .await;
    let again = within(STEP, "the repeated proposal", w.propose("p", "n1")).await;
    assert_eq!(outcome(&again), pb::BindOutcome::Error, "{again:?}");
    assert!(again.reason.contains("PreBind"), "{}", again.reason);
    // PreBind then fails: had the repeat been answered bound, the worker
    // would have dropped a pod that is pending again.
    h.cluster
        .delete_volume(&VolumeKey {
            kind: VolumeKind::Pv,
            namespace: String::new(),
            name: "pv-0".into(),
        })
        .expect("deleted");
    let d = within(STEP, "PreBind fails", first)
        .await
        .expect("the proposal task");
    assert_eq!(outcome(&d), pb::BindOutcome::Error, "{d:?}");
    let pod = h.cluster.pod("default", "p").expect("pod");
    assert_eq!(crate::node_of(&pod), None, "no Binding");
    h.shutdown().await;
}
