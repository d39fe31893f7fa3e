//! Watch streams: the initial replay, pod dispatch and re-dispatch when a
//! worker leaves, and node partitions.

use std::collections::BTreeSet;

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_proto::v1::WorkloadClass::{Batch, Online};
use flotilla_proto::v1::watch_event::Event;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{FakeWorker, Harness, STEP, assigned_names, raw_name, wait_until};

const CLASS_LABEL: &str = "flotilla.io/workload-class";

fn node_names(n: usize) -> Vec<String> {
    (0..n).map(|i| format!("node-{i}")).collect()
}

fn cluster_with_nodes(n: usize) -> EmbeddedCluster {
    let c = EmbeddedCluster::new();
    for name in node_names(n) {
        c.apply_node(
            NodeBuilder::new(&name)
                .cpu("8")
                .memory("16Gi")
                .pods(110)
                .build(),
        )
        .expect("node");
    }
    c
}

/// The node names of the last partition event in `events`.
fn last_partition(events: &[Event]) -> Option<BTreeSet<String>> {
    events.iter().rev().find_map(|e| match e {
        Event::Partition(p) => Some(p.node_names.iter().cloned().collect()),
        _ => None,
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_departing_workers_pods_are_redispatched_to_the_remaining_worker() {
    const NODES: usize = 6;
    const PODS: usize = 10;
    let h = Harness::start(cluster_with_nodes(NODES)).await;
    let mut w1 = FakeWorker::join(&h, "online-0", Online).await;
    let mut w2 = FakeWorker::join(&h, "online-1", Online).await;
    let mut ev1 = w1.until_synced().await;
    let mut ev2 = w2.until_synced().await;
    wait_until(STEP, "two live workers", || {
        h.coordinator.live_workers() == 2
    })
    .await;

    for i in 0..PODS {
        h.cluster
            .create_pod(
                PodBuilder::new(&format!("p-{i}"))
                    .cpu("100m")
                    .label(CLASS_LABEL, "online")
                    .build(),
            )
            .expect("pod");
    }
    // Pods are spread over both workers (fewest assigned first). Read each
    // stream until the two together hold every pod.
    let mut got1 = Vec::new();
    let mut got2 = Vec::new();
    while got1.len() + got2.len() < PODS {
        tokio::select! {
            e = w1.next_event() => { ev1.push(e); got1 = assigned_names(&ev1); }
            e = w2.next_event() => { ev2.push(e); got2 = assigned_names(&ev2); }
        }
    }
    assert_eq!(got1.len() + got2.len(), PODS, "w1 {got1:?} w2 {got2:?}");
    assert!(
        !got1.is_empty() && !got2.is_empty(),
        "both workers get pods: w1 {got1:?} w2 {got2:?}"
    );
    let all: BTreeSet<String> = got1.iter().chain(&got2).cloned().collect();
    assert_eq!(all.len(), PODS, "no pod is assigned twice");

    // Both workers got a partition; together they cover every node once.
    let p1 = last_partition(&ev1).expect("worker 1 received a partition");
    let p2 = last_partition(&ev2).expect("worker 2 received a partition");
    assert!(p1.is_disjoint(&p2), "{p1:?} / {p2:?}");
    let every_node: BTreeSet<String> = node_names(NODES).into_iter().collect();
    assert_eq!(p1.union(&p2).cloned().collect::<BTreeSet<_>>(), every_node);

    // Worker 1 leaves: its pods move to worker 2, which now owns every node.
    w1.leave();
    let want: BTreeSet<String> = got1.iter().cloned().collect();
    let after = w2
        .read_until(|e| {
            let moved: BTreeSet<String> = assigned_names(e).into_iter().collect();
            want.is_subset(&moved) && last_partition(e).as_ref() == Some(&every_node)
        })
        .await;
    let moved = assigned_names(&after);
    assert_eq!(
        moved.len(),
        want.len(),
        "each of worker 1's pods is re-sent once: {moved:?}"
    );
    assert!(
        moved.iter().all(|p| !got2.contains(p)),
        "worker 2's own pods are not re-sent: {moved:?}"
    );
    wait_until(STEP, "worker 1 gone", || h.coordinator.live_workers() == 1).await;
    drop(w2);
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn watch_replays_nodes_and_bound_pods_then_synced() {
    let h = Harness::start(cluster_with_nodes(3)).await;
    let mut early = FakeWorker::join(&h, "online-0", Online).await;
    early.until_synced().await;

    h.cluster
        .create_pod(
            PodBuilder::new("bound-0")
                .cpu("1")
                .node_name("node-0")
                .build(),
        )
        .expect("pod");
    h.cluster
        .create_pod(
            PodBuilder::new("bound-1")
                .cpu("1")
                .node_name("node-2")
                .build(),
        )
        .expect("pod");
    h.cluster
        .create_pod(
            PodBuilder::new("pending")
                .cpu("1")
                .label(CLASS_LABEL, "online")
                .build(),
        )
        .expect("pod");
    let seen = early
        .read_until(|e| assigned_names(e).contains(&"pending".to_owned()))
        .await;
    assert_eq!(
        seen.iter()
            .filter(|e| matches!(e, Event::BoundPod(_)))
            .count(),
        2,
        "the attached worker saw both bound pods live"
    );

    let mut late = FakeWorker::join(&h, "batch-0", Batch).await;
    let replay = late.until_synced().await;
    let kinds: Vec<&str> = replay
        .iter()
        .map(|e| match e {
            Event::NodeUpsert(_) => "node",
            Event::BoundPod(_) => "bound",
            Event::Partition(_) => "partition",
            Event::AssignedPod(_) => "assigned",
            _ => "other",
        })
        .collect();
    assert_eq!(
        kinds,
        ["node", "node", "node", "bound", "bound", "partition"],
        "nodes, then bound pods, then the partition, then synced"
    );
    let nodes: BTreeSet<String> = replay[..3]
        .iter()
        .map(|e| match e {
            Event::NodeUpsert(raw) => raw_name(raw),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(nodes, node_names(3).into_iter().collect());
    let bound: BTreeSet<String> = replay[3..5]
        .iter()
        .map(|e| match e {
            Event::BoundPod(raw) => raw_name(raw),
            _ => unreachable!(),
        })
        .collect();
    assert_eq!(
        bound,
        BTreeSet::from(["bound-0".to_owned(), "bound-1".to_owned()])
    );
    let Event::Partition(p) = &replay[5] else {
        unreachable!()
    };
    let owned: BTreeSet<String> = p.node_names.iter().cloned().collect();
    assert_eq!(
        owned,
        node_names(3).into_iter().collect(),
        "the only batch worker owns every node for its pool"
    );

    // After the replay, changes stream live.
    h.cluster
        .create_pod(
            PodBuilder::new("bound-2")
                .cpu("1")
                .node_name("node-1")
                .build(),
        )
        .expect("pod");
    let Event::BoundPod(raw) = late.next_event().await else {
        panic!("expected the new bound pod");
    };
    assert_eq!(raw_name(&raw), "bound-2");
    drop((early, late));
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_waiting_for_a_worker_are_dispatched_in_the_replay_before_synced() {
    let cluster = cluster_with_nodes(2);
    for i in 0..3 {
        cluster
            .create_pod(PodBuilder::new(&format!("w-{i}")).cpu("1").build())
            .expect("pod");
    }
    let h = Harness::start(cluster).await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    let replay = w.until_synced().await;
    let mut got = assigned_names(&replay);
    got.sort();
    assert_eq!(got, ["w-0", "w-1", "w-2"]);
    drop(w);
    h.shutdown().await;
}

/// A worker that joins its pool takes its share of the backlog the others
/// hold and have not tried (a replacement after a crash, or the second
/// worker to start, no longer waits idle beside a peer with thousands of
/// pods): the untried pods are split evenly, pods already reported
/// unschedulable stay, a moved pod's proposal from its old worker is
/// refused, and a worker of the other pool takes none.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_that_joins_takes_its_share_of_the_untried_backlog() {
    const PODS: usize = 10;
    let h = Harness::start(cluster_with_nodes(2)).await;
    let mut w1 = FakeWorker::join(&h, "online-0", Online).await;
    w1.until_synced().await;
    for i in 0..PODS {
        h.cluster
            .create_pod(
                PodBuilder::new(&format!("p-{i}"))
                    .cpu("100m")
                    .label(CLASS_LABEL, "online")
                    .build(),
            )
            .expect("pod");
    }
    let ev1 = w1.read_until(|e| assigned_names(e).len() == PODS).await;
    assert_eq!(assigned_names(&ev1).len(), PODS);
    // Two were tried and found unschedulable: they wait where they are.
    for p in ["p-0", "p-1"] {
        w1.report_unschedulable(p, "0/2 nodes are available: 2 Insufficient cpu.", vec![])
            .await;
    }

    // A batch worker joins: online pods stay.
    let mut batch = FakeWorker::join(&h, "batch-0", Batch).await;
    let evb = batch.until_synced().await;
    assert!(
        assigned_names(&evb).is_empty(),
        "{:?}",
        assigned_names(&evb)
    );

    // A second online worker joins: it takes half of the 8 untried pods.
    let mut w2 = FakeWorker::join(&h, "online-1", Online).await;
    let ev2 = w2.until_synced().await;
    let taken: BTreeSet<String> = assigned_names(&ev2).into_iter().collect();
    assert_eq!(taken.len(), 4, "{taken:?}");
    assert!(
        !taken.contains("p-0") && !taken.contains("p-1"),
        "{taken:?}"
    );
    let back = w1
        .read_until(|e| {
            e.iter()
                .filter(|e| matches!(e, Event::UnassignedPod(_)))
                .count()
                == 4
        })
        .await;
    let unassigned: BTreeSet<String> = back
        .iter()
        .filter_map(|e| match e {
            Event::UnassignedPod(p) => Some(p.name.clone()),
            _ => None,
        })
        .collect();
    assert_eq!(unassigned, taken, "what w2 took, w1 was told to drop");

    // A moved pod: the old worker's proposal is refused, the new one's bound.
    let moved = taken.iter().next().expect("a moved pod").clone();
    let d = w1.propose(&moved, "node-0").await;
    assert_eq!(
        d.outcome,
        i32::from(flotilla_proto::v1::BindOutcome::PodGone),
        "{d:?}"
    );
    let d = w2.propose(&moved, "node-0").await;
    assert_eq!(
        d.outcome,
        i32::from(flotilla_proto::v1::BindOutcome::Bound),
        "{d:?}"
    );
    // A pod w1 kept is still its own.
    let kept = (0..PODS)
        .map(|i| format!("p-{i}"))
        .find(|p| !taken.contains(p) && p != "p-0" && p != "p-1")
        .expect("w1 kept untried pods");
    let d = w1.propose(&kept, "node-1").await;
    assert_eq!(
        d.outcome,
        i32::from(flotilla_proto::v1::BindOutcome::Bound),
        "{d:?}"
    );
    drop((w1, w2, batch));
    h.shutdown().await;
}

/// Pods of a pool that had no worker went to the other pool's; when a
/// worker of their own pool joins, they all come to it.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pools_pods_held_by_the_other_pool_go_to_its_first_worker() {
    const PODS: usize = 6;
    let h = Harness::start(cluster_with_nodes(2)).await;
    let mut online = FakeWorker::join(&h, "online-0", Online).await;
    online.until_synced().await;
    for i in 0..PODS {
        h.cluster
            .create_pod(
                PodBuilder::new(&format!("b-{i}"))
                    .cpu("100m")
                    .label(CLASS_LABEL, "batch")
                    .build(),
            )
            .expect("pod");
    }
    let held = online.read_until(|e| assigned_names(e).len() == PODS).await;
    assert_eq!(assigned_names(&held).len(), PODS, "no batch worker yet");
    let mut batch = FakeWorker::join(&h, "batch-0", Batch).await;
    let got: BTreeSet<String> = assigned_names(&batch.until_synced().await)
        .into_iter()
        .collect();
    assert_eq!(got.len(), PODS, "{got:?}");
    drop((online, batch));
    h.shutdown().await;
}
