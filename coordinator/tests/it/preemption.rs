//! Preemption through ProposePreemption, nominations in the bind arbiter,
//! and PodDisruptionBudgets reaching workers.

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use flotilla_coordinator::cluster::{EmbeddedCluster, EventType};
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::{Batch, Online};
use flotilla_proto::v1::watch_event::Event;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{FakeWorker, Harness, STEP, assigned_names, pod_ref, raw_name, wait_until, within};

const CLASS_LABEL: &str = "flotilla.io/workload-class";

fn outcome(d: &pb::PreemptionDecision) -> pb::PreemptionOutcome {
    pb::PreemptionOutcome::try_from(d.outcome).expect("a known outcome")
}

fn bind_outcome(d: &pb::BindDecision) -> pb::BindOutcome {
    pb::BindOutcome::try_from(d.outcome).expect("a known outcome")
}

async fn preempt(
    w: &FakeWorker,
    pod: &str,
    node: &str,
    victims: &[&str],
) -> pb::PreemptionDecision {
    let mut client = w.client.clone();
    within(
        STEP,
        "ProposePreemption",
        client.propose_preemption(pb::PreemptionProposal {
            worker_id: w.id.clone(),
            pod: Some(pod_ref(pod)),
            node_name: node.into(),
            victims: victims.iter().map(|v| pod_ref(v)).collect(),
        }),
    )
    .await
    .expect("ProposePreemption answers")
    .into_inner()
}

/// A pod bound to `node` with `cpu` and `priority`.
fn bound(name: &str, node: &str, cpu: &str, priority: i32) -> k8s_openapi::api::core::v1::Pod {
    PodBuilder::new(name)
        .cpu(cpu)
        .priority(priority)
        .node_name(node)
        .build()
}

fn terminating(h: &Harness, name: &str) -> bool {
    h.cluster
        .pod("default", name)
        .is_some_and(|p| p.metadata.deletion_timestamp.is_some())
}

/// Creates pending `pods` and waits until `w` was handed all of them.
async fn assign(h: &Harness, w: &mut FakeWorker, pods: Vec<k8s_openapi::api::core::v1::Pod>) {
    let n = pods.len();
    for p in pods {
        h.cluster.create_pod(p).expect("pod");
    }
    w.read_until(|e| assigned_names(e).len() == n).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_granted_preemption_nominates_the_pod_and_deletes_the_victims_gracefully() {
    let cluster = EmbeddedCluster::new();
    cluster.set_grace_period(Some(3600));
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("2").pods(110).build())
        .expect("node");
    cluster.create_pod(bound("v1", "n1", "1", 0)).expect("pod");
    cluster.create_pod(bound("v2", "n1", "1", 0)).expect("pod");
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    assign(
        &h,
        &mut w,
        vec![PodBuilder::new("hi").cpu("2").priority(100).build()],
    )
    .await;

    let d = preempt(&w, "hi", "n1", &["v1", "v2"]).await;
    assert_eq!(outcome(&d), pb::PreemptionOutcome::Granted, "{d:?}");

    // The workers hear of the nomination.
    let events = w
        .read_until(|e| e.iter().any(|e| matches!(e, Event::NominatedPod(_))))
        .await;
    let nominated = events
        .iter()
        .find_map(|e| match e {
            Event::NominatedPod(n) => Some(n),
            _ => None,
        })
        .expect("nominated");
    assert_eq!(nominated.node_name, "n1");
    assert_eq!(raw_name(nominated.pod.as_ref().expect("pod")), "hi");
    // status.nominatedNodeName is written.
    let hi = h.cluster.pod("default", "hi").expect("hi");
    assert_eq!(
        hi.status
            .as_ref()
            .and_then(|s| s.nominated_node_name.as_deref()),
        Some("n1")
    );
    assert_eq!(
        h.coordinator.nominated_node("default", "hi").as_deref(),
        Some("n1")
    );
    // The victims are terminating, marked as preemption's targets (the
    // condition upstream writes before deleting), each with upstream's
    // Preempted Event.
    assert!(terminating(&h, "v1") && terminating(&h, "v2"));
    for v in ["v1", "v2"] {
        let pod = h.cluster.pod("default", v).expect("still terminating");
        let cond = pod
            .status
            .as_ref()
            .and_then(|s| s.conditions.as_ref())
            .and_then(|c| c.iter().find(|c| c.type_ == "DisruptionTarget"))
            .unwrap_or_else(|| panic!("{v} has no DisruptionTarget condition"));
        assert_eq!(
            (cond.status.as_str(), cond.reason.as_deref()),
            ("True", Some("PreemptionByScheduler"))
        );
        assert_eq!(
            cond.message.as_deref(),
            Some("default-scheduler: preempting to accommodate a higher priority pod")
        );
    }
    let preempted: Vec<_> = h
        .cluster
        .events()
        .into_iter()
        .filter(|e| e.reason == "Preempted")
        .collect();
    assert_eq!(preempted.len(), 2, "{preempted:?}");
    for e in &preempted {
        assert_eq!(e.type_, EventType::Normal);
        assert_eq!(e.action, "Preempting");
        assert_eq!(e.note, "Preempted by pod uid-hi on node n1");
    }
    let c = h.coordinator.summary().counters;
    assert_eq!((c.preemption_attempts, c.preemption_victims), (1, 2));

    // Terminating victims still hold their room.
    let d = w.propose("hi", "n1").await;
    assert_eq!(bind_outcome(&d), pb::BindOutcome::Conflict, "{d:?}");
    // Once they are gone, the preemptor binds and its nomination ends.
    h.cluster.delete_pod("default", "v1").expect("v1");
    h.cluster.delete_pod("default", "v2").expect("v2");
    let coord = h.coordinator.clone();
    wait_until(STEP, "the victims gone from the coordinator", || {
        coord.node_pods("n1").is_some_and(|p| p.is_empty())
    })
    .await;
    let d = w.propose("hi", "n1").await;
    assert_eq!(bind_outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    let events = w
        .read_until(|e| e.iter().any(|e| matches!(e, Event::NominationCleared(_))))
        .await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::NominationCleared(r) if r.uid == "uid-hi"))
    );
    assert_eq!(h.coordinator.nominated_node("default", "hi"), None);
    drop(w);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn preemption_proposals_are_checked_against_the_coordinators_view() {
    let cluster = EmbeddedCluster::new();
    cluster.set_grace_period(Some(3600));
    for n in ["n1", "n2"] {
        cluster
            .apply_node(NodeBuilder::new(n).cpu("2").pods(110).build())
            .expect("node");
    }
    cluster.create_pod(bound("low", "n1", "1", 0)).expect("pod");
    cluster
        .create_pod(bound("peer", "n1", "1", 100))
        .expect("pod");
    cluster
        .create_pod(bound("elsewhere", "n2", "1", 0))
        .expect("pod");
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    let mut never = PodBuilder::new("never").cpu("1").priority(100).build();
    never.spec.as_mut().expect("spec").preemption_policy = Some("Never".into());
    assign(
        &h,
        &mut w,
        vec![
            PodBuilder::new("hi").cpu("2").priority(100).build(),
            PodBuilder::new("huge").cpu("3").priority(100).build(),
            never,
        ],
    )
    .await;

    // (preemptor, node, victims, expected outcome, expected reason part)
    let cases: [(&str, &str, &[&str], pb::PreemptionOutcome, &str); 8] = [
        (
            "hi",
            "n1",
            &["gone"],
            pb::PreemptionOutcome::Conflict,
            "victim default/gone is gone",
        ),
        (
            "hi",
            "n1",
            &["low", "peer"],
            pb::PreemptionOutcome::Conflict,
            "has priority 100, not lower than 100",
        ),
        (
            "hi",
            "n1",
            &["elsewhere"],
            pb::PreemptionOutcome::Conflict,
            "is not bound to node n1",
        ),
        (
            "hi",
            "n1",
            &["low"],
            pb::PreemptionOutcome::Conflict,
            "Insufficient cpu even without the victims",
        ),
        (
            "huge",
            "n1",
            &["low"],
            pb::PreemptionOutcome::Conflict,
            "Insufficient cpu even without the victims",
        ),
        (
            "never",
            "n1",
            &["low"],
            pb::PreemptionOutcome::Conflict,
            "spec.preemptionPolicy is Never",
        ),
        (
            "hi",
            "n9",
            &["low"],
            pb::PreemptionOutcome::Conflict,
            "node n9 not found",
        ),
        (
            "low",
            "n1",
            &[],
            pb::PreemptionOutcome::PodGone,
            "pod default/low is not pending",
        ),
    ];
    for (pod, node, victims, want, reason) in cases {
        let d = preempt(&w, pod, node, victims).await;
        assert_eq!(
            outcome(&d),
            want,
            "{pod} on {node} evicting {victims:?}: {d:?}"
        );
        assert!(
            d.reason.contains(reason),
            "{pod}: {:?} lacks {reason:?}",
            d.reason
        );
    }
    // Nothing happened.
    assert!(!terminating(&h, "low") && !terminating(&h, "elsewhere"));
    assert_eq!(h.coordinator.nominated_node("default", "hi"), None);
    // A worker may only preempt for its own pods.
    let mut other = FakeWorker::join(&h, "online-1", Online).await;
    other.until_synced().await;
    let d = preempt(&other, "hi", "n2", &["elsewhere"]).await;
    assert_eq!(outcome(&d), pb::PreemptionOutcome::PodGone, "{d:?}");
    assert!(d.reason.contains("is not assigned to worker"), "{d:?}");
    // Malformed victims are refused with the field named.
    let mut client = w.client.clone();
    let err = client
        .propose_preemption(pb::PreemptionProposal {
            worker_id: w.id.clone(),
            pod: Some(pod_ref("hi")),
            node_name: "n1".into(),
            victims: vec![pb::PodRef::default()],
        })
        .await
        .expect_err("invalid");
    assert_eq!(err.code(), tonic::Code::InvalidArgument);
    assert!(
        err.message().starts_with("victims[0].pod"),
        "{}",
        err.message()
    );
    assert_eq!(h.coordinator.summary().counters.preemption_victims, 0);
    drop((w, other));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_competing_for_victims_or_room_exactly_one_wins() {
    // (victims of the online worker's pod, victims of the batch worker's pod)
    let scenarios: [(&[&str], &[&str]); 2] = [(&["v1", "v2"], &["v1", "v2"]), (&["v1"], &["v2"])];
    for (a_victims, b_victims) in scenarios {
        let cluster = EmbeddedCluster::new();
        cluster.set_grace_period(Some(3600));
        // 3 cpu: v1 and v2 take 2; each preemptor needs 2.
        cluster
            .apply_node(NodeBuilder::new("n1").cpu("3").pods(110).build())
            .expect("node");
        cluster.create_pod(bound("v1", "n1", "1", 0)).expect("pod");
        cluster.create_pod(bound("v2", "n1", "1", 0)).expect("pod");
        let h = Harness::start(cluster).await;
        let mut online = FakeWorker::join(&h, "online-0", Online).await;
        let mut batch = FakeWorker::join(&h, "batch-0", Batch).await;
        online.until_synced().await;
        batch.until_synced().await;
        let pod = |name: &str, class: &str| {
            PodBuilder::new(name)
                .cpu("2")
                .priority(100)
                .label(CLASS_LABEL, class)
                .build()
        };
        assign(&h, &mut online, vec![pod("a", "online")]).await;
        assign(&h, &mut batch, vec![pod("b", "batch")]).await;

        let (da, db) = within(STEP, "two concurrent proposals", async {
            tokio::join!(
                preempt(&online, "a", "n1", a_victims),
                preempt(&batch, "b", "n1", b_victims)
            )
        })
        .await;
        let granted = [&da, &db]
            .iter()
            .filter(|d| outcome(d) == pb::PreemptionOutcome::Granted)
            .count();
        assert_eq!(granted, 1, "{a_victims:?} vs {b_victims:?}: {da:?} {db:?}");
        let loser = if outcome(&da) == pb::PreemptionOutcome::Granted {
            &db
        } else {
            &da
        };
        assert_eq!(outcome(loser), pb::PreemptionOutcome::Conflict, "{loser:?}");
        let nominated: Vec<_> = ["a", "b"]
            .into_iter()
            .filter(|p| h.coordinator.nominated_node("default", p).is_some())
            .collect();
        assert_eq!(nominated.len(), 1, "{nominated:?}");
        drop((online, batch));
        h.shutdown().await;
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_nominated_pods_room_is_kept_from_lower_priority_pods_only() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("2").pods(110).build())
        .expect("node");
    cluster
        .apply_node(NodeBuilder::new("n2").cpu("1").pods(110).build())
        .expect("node");
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    assign(
        &h,
        &mut w,
        vec![
            PodBuilder::new("nominee").cpu("1").priority(100).build(),
            PodBuilder::new("low").cpu("2").priority(10).build(),
            PodBuilder::new("equal").cpu("2").priority(100).build(),
            PodBuilder::new("top").cpu("1").priority(200).build(),
            PodBuilder::new("low2").cpu("1").priority(10).build(),
        ],
    )
    .await;
    // Nominate without victims (the room is free already).
    let d = preempt(&w, "nominee", "n1", &[]).await;
    assert_eq!(outcome(&d), pb::PreemptionOutcome::Granted, "{d:?}");

    // (pod, expected outcome): lower and equal priority must leave the
    // nominee's 1 cpu; a higher priority pod ignores the nomination.
    let cases = [
        ("low", pb::BindOutcome::Conflict),
        ("equal", pb::BindOutcome::Conflict),
        ("top", pb::BindOutcome::Bound),
    ];
    for (pod, want) in cases {
        let d = w.propose(pod, "n1").await;
        assert_eq!(bind_outcome(&d), want, "{pod}: {d:?}");
        if want == pb::BindOutcome::Conflict {
            assert!(
                d.reason
                    .contains("room reserved for nominated pods default/nominee"),
                "{d:?}"
            );
        }
    }
    // The nominee binding elsewhere ends its nomination: n1's last cpu is free.
    let d = w.propose("nominee", "n2").await;
    assert_eq!(bind_outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    assert_eq!(h.coordinator.nominated_node("default", "nominee"), None);
    let d = w.propose("low2", "n1").await;
    assert_eq!(bind_outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    drop(w);
    h.shutdown().await;
}

/// Node `n1` (2 cpu), an online worker, and pod `x` (1 cpu, priority 5)
/// nominated to `n1` by a granted preemption with no victims.
async fn x_nominated_to_n1() -> (Harness, FakeWorker) {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("2").pods(110).build())
        .expect("node");
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    assign(
        &h,
        &mut w,
        vec![PodBuilder::new("x").cpu("1").priority(5).build()],
    )
    .await;
    let d = preempt(&w, "x", "n1", &[]).await;
    assert_eq!(outcome(&d), pb::PreemptionOutcome::Granted, "{d:?}");
    (h, w)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn deleting_a_nominated_pod_clears_its_nomination_for_every_worker() {
    let (h, mut w) = x_nominated_to_n1().await;
    // A worker joining later gets the nomination in its replay.
    let mut late = FakeWorker::join(&h, "batch-0", Batch).await;
    let replay = late.until_synced().await;
    assert!(
        replay
            .iter()
            .any(|e| matches!(e, Event::NominatedPod(n) if n.node_name == "n1")),
        "{replay:?}"
    );
    h.cluster.delete_pod("default", "x").expect("x");
    for worker in [&mut w, &mut late] {
        let events = worker
            .read_until(|e| e.iter().any(|e| matches!(e, Event::NominationCleared(_))))
            .await;
        assert!(
            events
                .iter()
                .any(|e| matches!(e, Event::NominationCleared(r) if r.uid == "uid-x"))
        );
    }
    assert_eq!(h.coordinator.nominated_node("default", "x"), None);
    drop((w, late));
    h.shutdown().await;
}

fn pdb(name: &str) -> PodDisruptionBudget {
    PodDisruptionBudget {
        metadata: ObjectMeta {
            name: Some(name.into()),
            namespace: Some("team-a".into()),
            ..ObjectMeta::default()
        },
        ..PodDisruptionBudget::default()
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pod_disruption_budgets_reach_workers() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_pdb(pdb("web")).expect("pdb");
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    let replay = w.until_synced().await;
    assert!(
        replay
            .iter()
            .any(|e| matches!(e, Event::PdbUpsert(r) if raw_name(r) == "web")),
        "{replay:?}"
    );
    h.cluster.apply_pdb(pdb("db")).expect("pdb");
    let events = w
        .read_until(|e| e.iter().any(|e| matches!(e, Event::PdbUpsert(_))))
        .await;
    let Some(Event::PdbUpsert(raw)) = events.last() else {
        panic!("{events:?}");
    };
    let got: PodDisruptionBudget = serde_json::from_slice(&raw.json).expect("a PDB");
    assert_eq!(got.metadata.name.as_deref(), Some("db"));
    assert_eq!(got.metadata.namespace.as_deref(), Some("team-a"));
    h.cluster.delete_pdb("team-a", "web").expect("pdb");
    let events = w
        .read_until(|e| e.iter().any(|e| matches!(e, Event::PdbDeleted(_))))
        .await;
    assert!(events.iter().any(|e| matches!(e, Event::PdbDeleted(r)
        if r.namespace == "team-a" && r.name == "web")));
    drop(w);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_report_that_preemption_found_no_candidate_ends_the_nomination() {
    let (h, mut w) = x_nominated_to_n1().await;
    let status_nominated = |h: &Harness| {
        h.cluster
            .pod("default", "x")
            .and_then(|p| p.status.as_ref()?.nominated_node_name.clone())
    };
    wait_until(STEP, "status.nominatedNodeName written", || {
        status_nominated(&h).as_deref() == Some("n1")
    })
    .await;
    let report = |clear_nomination: bool| pb::UnschedulableReport {
        worker_id: w.id.clone(),
        pod: Some(pod_ref("x")),
        message: "0/1 nodes are available: 1 Insufficient cpu.".into(),
        clear_nomination,
        ..Default::default()
    };
    // An ordinary report leaves it nominated.
    let mut client = w.client.clone();
    within(STEP, "report", client.report_unschedulable(report(false)))
        .await
        .expect("ack");
    assert_eq!(
        h.coordinator.nominated_node("default", "x").as_deref(),
        Some("n1")
    );
    within(STEP, "report", client.report_unschedulable(report(true)))
        .await
        .expect("ack");
    assert_eq!(h.coordinator.nominated_node("default", "x"), None);
    let events = w
        .read_until(|e| e.iter().any(|e| matches!(e, Event::NominationCleared(_))))
        .await;
    assert!(
        events
            .iter()
            .any(|e| matches!(e, Event::NominationCleared(r) if r.uid == "uid-x"))
    );
    wait_until(STEP, "status.nominatedNodeName cleared", || {
        status_nominated(&h).is_none()
    })
    .await;
    drop(w);
    h.shutdown().await;
}
