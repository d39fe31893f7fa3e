//! Bind arbitration through ProposeBind.

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::{Batch, Online};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use tonic::Code;

use crate::{FakeWorker, Harness, STEP, assigned_names, node_of, pod_ref, wait_until, within};

const CLASS_LABEL: &str = "flotilla.io/workload-class";

fn outcome(d: &pb::BindDecision) -> pb::BindOutcome {
    pb::BindOutcome::try_from(d.outcome).expect("a known outcome")
}

fn bound_pods(h: &Harness) -> Vec<(String, String)> {
    h.cluster
        .pods()
        .iter()
        .filter_map(|p| {
            node_of(p).map(|n| (p.metadata.name.clone().unwrap_or_default(), n.to_owned()))
        })
        .collect()
}

/// The nodes (name, cpu; 110 pods each), an online and a batch worker,
/// synced.
async fn nodes_and_two_pools(nodes: &[(&str, &str)]) -> (Harness, FakeWorker, FakeWorker) {
    let cluster = EmbeddedCluster::new();
    for (n, cpu) in nodes {
        cluster
            .apply_node(NodeBuilder::new(n).cpu(cpu).pods(110).build())
            .expect("node");
    }
    let h = Harness::start(cluster).await;
    let mut online = FakeWorker::join(&h, "online-0", Online).await;
    let mut batch = FakeWorker::join(&h, "batch-0", Batch).await;
    online.until_synced().await;
    batch.until_synced().await;
    (h, online, batch)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_claiming_the_last_room_on_one_node_exactly_one_wins() {
    let (h, mut online, mut batch) = nodes_and_two_pools(&[("n1", "1")]).await;

    for (name, class) in [("a", "online"), ("b", "batch")] {
        h.cluster
            .create_pod(
                PodBuilder::new(name)
                    .cpu("1")
                    .label(CLASS_LABEL, class)
                    .build(),
            )
            .expect("pod");
    }
    // Each pod goes to the pool of its class.
    let got = online.read_until(|e| !assigned_names(e).is_empty()).await;
    assert_eq!(assigned_names(&got), ["a"]);
    let got = batch.read_until(|e| !assigned_names(e).is_empty()).await;
    assert_eq!(assigned_names(&got), ["b"]);

    let (da, db) = within(STEP, "two concurrent proposals", async {
        tokio::join!(online.propose("a", "n1"), batch.propose("b", "n1"))
    })
    .await;
    let outcomes = [outcome(&da), outcome(&db)];
    let winners = outcomes
        .iter()
        .filter(|o| **o == pb::BindOutcome::Bound)
        .count();
    assert_eq!(winners, 1, "exactly one proposal is bound: {da:?} {db:?}");
    let loser = if outcome(&da) == pb::BindOutcome::Bound {
        &db
    } else {
        &da
    };
    assert_eq!(outcome(loser), pb::BindOutcome::Conflict, "{loser:?}");
    assert!(
        loser.reason.contains("Insufficient cpu"),
        "reason: {:?}",
        loser.reason
    );

    let bound = bound_pods(&h);
    assert_eq!(
        bound.len(),
        1,
        "exactly one pod bound in the cluster: {bound:?}"
    );
    assert_eq!(bound[0].1, "n1");
    assert_eq!(h.cluster.write_counts().0, 1, "one Binding written");
    let s = h.coordinator.summary();
    assert_eq!(
        (
            s.counters.proposals,
            s.counters.grants,
            s.counters.conflicts
        ),
        (2, 1, 1)
    );
    drop((online, batch));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proposal_whose_room_was_taken_is_bound_to_its_first_alternative_that_fits() {
    let (h, mut online, mut batch) =
        nodes_and_two_pools(&[("n1", "1"), ("n2", "1"), ("n3", "2")]).await;
    for (name, class, cpu) in [
        ("a", "online", "1"),
        ("b", "batch", "1"),
        ("c", "batch", "2"),
    ] {
        h.cluster
            .create_pod(
                PodBuilder::new(name)
                    .cpu(cpu)
                    .label(CLASS_LABEL, class)
                    .build(),
            )
            .expect("pod");
    }
    online.read_until(|e| !assigned_names(e).is_empty()).await;
    batch.read_until(|e| assigned_names(e).len() >= 2).await;

    let a = online.propose("a", "n1").await;
    assert_eq!(outcome(&a), pb::BindOutcome::Bound);
    assert_eq!(a.node_name, "", "the proposed node itself");
    // b's first choice is full now; an unknown node and the first choice
    // again are skipped; n2 fits.
    let b = batch
        .propose_with_alternatives("b", "n1", &["n1", "no-such-node", "n2", "n3"])
        .await;
    assert_eq!(outcome(&b), pb::BindOutcome::Bound, "{b:?}");
    assert_eq!(b.node_name, "n2", "the first alternative that fits");
    // c fits on none of its choices (n3 has 2 cpu, but c is offered only
    // the full ones): a conflict naming the proposed node.
    let c = batch.propose_with_alternatives("c", "n1", &["n2"]).await;
    assert_eq!(outcome(&c), pb::BindOutcome::Conflict, "{c:?}");
    assert!(c.reason.contains("node n1: Insufficient cpu"), "{c:?}");
    assert_eq!(c.node_name, "");

    let mut bound = bound_pods(&h);
    bound.sort();
    assert_eq!(
        bound,
        [
            ("a".to_owned(), "n1".to_owned()),
            ("b".to_owned(), "n2".to_owned())
        ]
    );
    assert_eq!(h.cluster.write_counts().0, 2, "one Binding per pod bound");
    let s = h.coordinator.summary();
    assert_eq!(
        (
            s.counters.proposals,
            s.counters.grants,
            s.counters.conflicts,
            s.counters.alternatives_granted
        ),
        (3, 2, 1, 1)
    );
    // Proposed again after its grant (a retried call): bound where it is.
    let again = batch.propose_with_alternatives("b", "n2", &["n1"]).await;
    assert_eq!(outcome(&again), pb::BindOutcome::Bound);
    assert_eq!(h.cluster.write_counts().0, 2, "never bound twice");
    drop((online, batch));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn proposal_for_an_already_bound_pod_is_pod_gone_and_never_double_binds() {
    let cluster = EmbeddedCluster::new();
    for n in ["n1", "n2"] {
        cluster
            .apply_node(NodeBuilder::new(n).cpu("4").pods(110).build())
            .expect("node");
    }
    // Bound by someone else before the coordinator started.
    cluster
        .create_pod(
            PodBuilder::new("elsewhere")
                .cpu("1")
                .node_name("n2")
                .build(),
        )
        .expect("pod");
    cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    cluster
        .create_pod(PodBuilder::new("b").cpu("1").build())
        .expect("pod");
    let h = Harness::start(cluster).await;
    // w1 watches, so the pods are handed to it; w2 only registered.
    let w1 = FakeWorker::join(&h, "online-0", Online).await;
    let w2 = FakeWorker::register(&h, "online-1", Online).await;

    let d = w1.propose("a", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    let d = w2.propose("a", "n2").await;
    assert_eq!(outcome(&d), pb::BindOutcome::PodGone, "{d:?}");
    assert!(
        d.reason.contains("already bound to n1"),
        "reason: {:?}",
        d.reason
    );
    // Re-proposing the bound placement is idempotent and writes nothing.
    let d = w2.propose("a", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");

    // A pod bound outside Flotilla is never moved.
    let d = w1.propose("elsewhere", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::PodGone, "{d:?}");
    assert!(
        d.reason.contains("already bound to n2"),
        "reason: {:?}",
        d.reason
    );

    // Two workers racing for the same pod on different nodes.
    let (d1, d2) = within(STEP, "two concurrent proposals", async {
        tokio::join!(w1.propose("b", "n1"), w2.propose("b", "n2"))
    })
    .await;
    let mut outcomes = [outcome(&d1), outcome(&d2)];
    outcomes.sort_by_key(|o| *o as i32);
    assert_eq!(
        outcomes,
        [pb::BindOutcome::Bound, pb::BindOutcome::PodGone],
        "{d1:?} {d2:?}"
    );

    let pod = |n: &str| h.cluster.pod("default", n).expect("pod exists");
    assert_eq!(node_of(&pod("a")), Some("n1"));
    assert_eq!(node_of(&pod("elsewhere")), Some("n2"));
    assert!(matches!(node_of(&pod("b")), Some("n1" | "n2")));
    assert_eq!(
        h.cluster.write_counts().0,
        2,
        "one Binding per pod we bound"
    );
    // The authoritative view counts each pod once, on its node.
    let on = |n: &str| {
        let mut v: Vec<String> = h
            .coordinator
            .node_pods(n)
            .expect("node known")
            .into_iter()
            .map(|k| k.name.to_string())
            .collect();
        v.sort();
        v
    };
    let total = on("n1").len() + on("n2").len();
    assert_eq!(total, 3, "n1 {:?} n2 {:?}", on("n1"), on("n2"));
    assert!(on("n1").contains(&"a".to_owned()));
    assert!(on("n2").contains(&"elsewhere".to_owned()));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn proposal_for_an_unknown_node_is_a_conflict() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    let h = Harness::start(cluster).await;
    let w = FakeWorker::join(&h, "online-0", Online).await;

    let d = w.propose("a", "nx").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Conflict, "{d:?}");
    assert!(
        d.reason.contains("nx") && d.reason.contains("not found"),
        "reason: {:?}",
        d.reason
    );
    assert_eq!(h.cluster.write_counts().0, 0);
    assert_eq!(node_of(&h.cluster.pod("default", "a").expect("pod")), None);

    // The pod is still pending and can be placed on a real node.
    let d = w.propose("a", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");
    assert_eq!(
        node_of(&h.cluster.pod("default", "a").expect("pod")),
        Some("n1")
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_proposal_for_an_unknown_pod_is_pod_gone() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    let h = Harness::start(cluster).await;
    let w = FakeWorker::register(&h, "online-0", Online).await;
    let d = w.propose("ghost", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::PodGone, "{d:?}");
    assert_eq!(h.cluster.write_counts().0, 0);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn malformed_requests_are_invalid_argument_and_strangers_are_unauthenticated() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    let h = Harness::start(cluster).await;
    let w = FakeWorker::register(&h, "online-0", Online).await;
    let mut c = h.client().await;

    let propose = |worker_id: &str, pod: Option<pb::PodRef>, node: &str| pb::BindProposal {
        worker_id: worker_id.into(),
        pod,
        node_name: node.into(),
        alternatives: Vec::new(),
        gpu_devices: 0,
    };
    // Not a session: the sequential id alone, a guessed secret, nothing.
    let forged = format!("{}.{}", w.id.split('.').next().expect("id"), "0".repeat(32));
    for (what, worker_id) in [
        ("empty worker_id", ""),
        ("the bare id", w.id.split('.').next().expect("id")),
        ("a forged secret", forged.as_str()),
        ("a name", "online-0"),
    ] {
        let err = within(
            STEP,
            what,
            c.propose_bind(propose(worker_id, Some(pod_ref("a")), "n1")),
        )
        .await
        .expect_err(what);
        assert_eq!(err.code(), Code::Unauthenticated, "{what}: {err:?}");
        assert!(err.message().contains("register again"), "{what}: {err:?}");
    }
    let cases = [
        ("missing pod", propose(&w.id, None, "n1")),
        (
            "pod without a name",
            propose(
                &w.id,
                Some(pb::PodRef {
                    name: String::new(),
                    ..pod_ref("a")
                }),
                "n1",
            ),
        ),
        (
            "pod without a uid",
            propose(
                &w.id,
                Some(pb::PodRef {
                    uid: String::new(),
                    ..pod_ref("a")
                }),
                "n1",
            ),
        ),
        ("empty node_name", propose(&w.id, Some(pod_ref("a")), "")),
    ];
    for (what, req) in cases {
        let err = within(STEP, what, c.propose_bind(req))
            .await
            .expect_err(what);
        assert_eq!(err.code(), Code::InvalidArgument, "{what}: {err:?}");
    }

    let err = within(
        STEP,
        "report without pod",
        c.report_unschedulable(pb::UnschedulableReport {
            worker_id: w.id.clone(),
            pod: None,
            message: "0/1 nodes are available: 1 Insufficient cpu.".into(),
            node_statuses: Vec::new(),
            ..Default::default()
        }),
    )
    .await
    .expect_err("missing pod");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");
    let err = within(
        STEP,
        "report without worker",
        c.report_unschedulable(pb::UnschedulableReport {
            worker_id: String::new(),
            pod: Some(pod_ref("a")),
            message: "x".into(),
            node_statuses: Vec::new(),
            ..Default::default()
        }),
    )
    .await
    .expect_err("empty worker_id");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");

    let err = within(
        STEP,
        "register without class",
        c.register(pb::RegisterRequest {
            worker_name: "w".into(),
            workload_class: pb::WorkloadClass::Unspecified.into(),
            profiles_fingerprint: 0,
        }),
    )
    .await
    .expect_err("unspecified class");
    assert_eq!(err.code(), Code::InvalidArgument, "{err:?}");

    let err = within(
        STEP,
        "watch as a stranger",
        c.watch(pb::WatchRequest {
            worker_id: "999".into(),
        }),
    )
    .await
    .expect_err("unknown worker");
    assert_eq!(err.code(), Code::Unauthenticated, "{err:?}");

    // Nothing was bound or recorded by the bad requests.
    assert_eq!(h.cluster.write_counts(), (0, 0));
    assert_eq!(h.coordinator.summary().counters.proposals, 0);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_node_deleted_and_re_added_still_counts_the_pods_bound_to_it() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("1").pods(110).build())
        .expect("node");
    cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    cluster
        .create_pod(PodBuilder::new("b").cpu("1").build())
        .expect("pod");
    let h = Harness::start(cluster).await;
    let w = FakeWorker::join(&h, "online-0", Online).await;
    let d = w.propose("a", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Bound, "{d:?}");

    // The node object is deleted and re-created (pods bound to it stay, as
    // in Kubernetes until garbage collection).
    let node = h.cluster.nodes().into_iter().next().expect("n1");
    h.cluster.delete_node("n1").expect("delete");
    let c = h.coordinator.clone();
    wait_until(STEP, "the coordinator dropping n1", || {
        c.node_pods("n1").is_none()
    })
    .await;
    h.cluster.apply_node((*node).clone()).expect("re-create");
    wait_until(STEP, "the coordinator seeing n1 again", || {
        c.node_pods("n1").is_some()
    })
    .await;

    let d = w.propose("b", "n1").await;
    let bound: Vec<_> = bound_pods(&h);
    assert_eq!(
        outcome(&d),
        pb::BindOutcome::Conflict,
        "pod a still holds n1's only cpu; bound now: {bound:?}"
    );
    assert!(
        d.reason.contains("Insufficient cpu"),
        "reason: {:?}",
        d.reason
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_bound_before_its_node_appears_is_counted_when_the_node_arrives() {
    let cluster = EmbeddedCluster::new();
    cluster
        .create_pod(PodBuilder::new("early").cpu("1").node_name("n1").build())
        .expect("pod");
    cluster
        .create_pod(PodBuilder::new("b").cpu("1").build())
        .expect("pod");
    let h = Harness::start(cluster).await;
    h.cluster
        .apply_node(NodeBuilder::new("n1").cpu("1").pods(110).build())
        .expect("node");
    let c = h.coordinator.clone();
    wait_until(STEP, "the coordinator seeing n1", || {
        c.node_pods("n1").is_some()
    })
    .await;
    let w = FakeWorker::join(&h, "online-0", Online).await;

    let d = w.propose("b", "n1").await;
    assert_eq!(
        outcome(&d),
        pb::BindOutcome::Conflict,
        "pod early already holds n1's only cpu; on n1: {:?}",
        c.node_pods("n1")
    );
    h.shutdown().await;
}

/// The single-scheduler baseline (`set_arbitration(false)`) grants what a
/// lone scheduler decided, unchecked; turned back on, the same over-commit
/// is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn without_arbitration_a_proposal_is_granted_unchecked() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("1").pods(110).build())
        .expect("node");
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;
    for name in ["a", "b", "c"] {
        h.cluster
            .create_pod(PodBuilder::new(name).cpu("1").build())
            .expect("pod");
    }
    let mut dispatched = 0;
    while dispatched < 3 {
        let e = w.read_until(|e| !assigned_names(e).is_empty()).await;
        dispatched += assigned_names(&e).len();
    }

    assert_eq!(outcome(&w.propose("a", "n1").await), pb::BindOutcome::Bound);
    h.coordinator.set_arbitration(false);
    assert_eq!(
        outcome(&w.propose("b", "n1").await),
        pb::BindOutcome::Bound,
        "granted though n1 is full"
    );
    h.coordinator.set_arbitration(true);
    let d = w.propose("c", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Conflict, "{d:?}");
    assert!(d.reason.contains("Insufficient cpu"), "{}", d.reason);
    assert_eq!(bound_pods(&h).len(), 2);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unschedulable_report_keeps_a_sample_of_its_per_node_reasons_and_the_whole_message() {
    let nodes: Vec<(String, &str)> = (0..50).map(|i| (format!("n{i:02}"), "1")).collect();
    let refs: Vec<(&str, &str)> = nodes.iter().map(|(n, c)| (n.as_str(), *c)).collect();
    let (h, mut online, _batch) = nodes_and_two_pools(&refs).await;
    h.cluster
        .create_pod(PodBuilder::new("big").cpu("2").build())
        .expect("pod");
    let got = online.read_until(|e| !assigned_names(e).is_empty()).await;
    assert_eq!(assigned_names(&got), ["big"]);

    let message = "0/50 nodes are available: 50 Insufficient cpu.";
    let statuses: Vec<pb::NodeStatus> = nodes
        .iter()
        .map(|(n, _)| pb::NodeStatus {
            node_name: n.clone(),
            reasons: vec!["Insufficient cpu".into()],
            plugin: "NodeResourcesFit".into(),
        })
        .collect();
    online.report_unschedulable("big", message, statuses).await;

    let rec = h.coordinator.record("default", "big").expect("record");
    assert_eq!(rec.unschedulable.as_deref(), Some(message));
    let kept: Vec<&str> = rec.rejections.iter().map(|r| r.node.as_str()).collect();
    let first: Vec<&str> = nodes[..pb::MAX_NODE_STATUSES]
        .iter()
        .map(|(n, _)| n.as_str())
        .collect();
    assert_eq!(
        kept,
        first,
        "the first {} nodes, in order",
        pb::MAX_NODE_STATUSES
    );
    assert!(
        rec.rejections
            .iter()
            .all(|r| r.reasons == ["Insufficient cpu"])
    );
}
