//! Gang scheduling end to end: PodGroups, the Coscheduling plugin in real
//! workers over loopback gRPC, and the coordinator's all-or-none grant.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flotilla_coordinator::cluster::{EmbeddedCluster, PodRef};
use flotilla_coordinator::state::Decision;
use flotilla_scheduler::Registry;
use flotilla_scheduler::framework::profile::PluginRef;
use flotilla_scheduler::worker::{self, WorkerConfig, WorkerError, WorkerStats};
use flotilla_scheduler::{Profile, plugins::names};
use flotilla_shared::WorkloadClass;
use flotilla_shared::pod_group::{LABEL_POD_GROUP, PodGroup};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use k8s_openapi::api::core::v1::Pod;
use tokio::task::JoinHandle;

use crate::{Harness, OUTCOME, STEP, node_of, unschedulable_message, wait_until, within};

pub(crate) const CLASS_LABEL: &str = "flotilla.io/workload-class";

pub(crate) struct Worker {
    stats: Arc<WorkerStats>,
    handle: JoinHandle<Result<(), WorkerError>>,
}

/// The default profile with Coscheduling (default permit wait 60 s; groups
/// set their own timeout).
pub(crate) fn gang_profile() -> Profile {
    let mut profile = Profile::default();
    profile
        .plugins
        .multi_point
        .enabled
        .push(PluginRef::new(names::COSCHEDULING, 0));
    profile
}

/// A coordinator over `cluster` serving [`gang_profile`], as its workers
/// run it.
pub(crate) async fn start(cluster: EmbeddedCluster) -> Harness {
    let served = flotilla_scheduler::config::SchedulerConfig {
        profiles: vec![gang_profile()],
        ..Default::default()
    }
    .served_profiles(&Registry::in_tree())
    .expect("the gang profile builds");
    Harness::serving(cluster, served).await
}

/// A batch worker running [`gang_profile`].
pub(crate) fn spawn_worker(h: &Harness, name: &str) -> Worker {
    let mut cfg = WorkerConfig::new(&h.url(), name, WorkloadClass::Batch);
    cfg.profiles = vec![gang_profile()];
    let stats = Arc::new(WorkerStats::default());
    let st = stats.clone();
    let token = h.token.clone();
    let handle =
        tokio::spawn(async move { worker::run(cfg, &Registry::in_tree(), st, token).await });
    Worker { stats, handle }
}

pub(crate) async fn start_workers(h: &Harness, n: usize) -> Vec<Worker> {
    let workers: Vec<Worker> = (0..n)
        .map(|i| spawn_worker(h, &format!("batch-{i}")))
        .collect();
    let c = h.coordinator.clone();
    wait_until(STEP, "workers connecting", || c.live_workers() == n).await;
    wait_until(STEP, "workers ready", || {
        workers
            .iter()
            .all(|w| w.stats.ready.load(Ordering::Acquire))
    })
    .await;
    workers
}

pub(crate) async fn stop(h: Harness, workers: Vec<Worker>) {
    h.token.cancel();
    for w in workers {
        within(STEP, "worker stopping", w.handle)
            .await
            .expect("worker task does not panic")
            .expect("worker ends cleanly");
    }
    h.shutdown().await;
}

pub(crate) fn pod_group(name: &str, min: i32, timeout: Option<i32>) -> PodGroup {
    let mut g = PodGroup::default();
    g.metadata.name = Some(name.into());
    g.metadata.namespace = Some("default".into());
    g.spec.min_member = min;
    g.spec.schedule_timeout_seconds = timeout;
    g
}

pub(crate) fn member(name: &str, group: &str, cpu: &str) -> Pod {
    PodBuilder::new(name)
        .cpu(cpu)
        .label(CLASS_LABEL, "batch")
        .label(LABEL_POD_GROUP, group)
        .build()
}

pub(crate) fn bound_names(cluster: &EmbeddedCluster) -> Vec<String> {
    let mut v: Vec<String> = cluster
        .pods()
        .iter()
        .filter(|p| node_of(p).is_some())
        .filter_map(|p| p.metadata.name.clone())
        .collect();
    v.sort();
    v
}

pub(crate) fn node(name: &str, cpu: &str) -> k8s_openapi::api::core::v1::Node {
    NodeBuilder::new(name)
        .cpu(cpu)
        .memory("64Gi")
        .pods(110)
        .build()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_that_cannot_fit_binds_nothing_and_leaves_room_for_a_small_pod() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "3")).expect("node");
    cluster
        .apply_pod_group(pod_group("pg", 4, Some(1)))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    for i in 0..4 {
        h.cluster
            .create_pod(member(&format!("m{i}"), "pg", "1"))
            .expect("pod");
    }
    // A member fails, the waiting siblings are rejected (gap 25 % > 10 %).
    let cluster = h.cluster.clone();
    wait_until(
        OUTCOME,
        "a member reported with the PostFilter message",
        || {
            cluster.pods().iter().any(|p| {
                unschedulable_message(p).is_some_and(|m| {
                    m.contains("gets rejected due to Pod") && m.contains("default/pg")
                })
            })
        },
    )
    .await;
    assert!(bound_names(&h.cluster).is_empty(), "no member bound");
    assert_eq!(h.cluster.write_counts().0, 0, "no Binding written");
    // The room the members held is released: a small pod still fits.
    h.cluster
        .create_pod(
            PodBuilder::new("small")
                .cpu("2")
                .label(CLASS_LABEL, "batch")
                .build(),
        )
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the small pod bound", || {
        bound_names(&cluster) == ["small"]
    })
    .await;
    let s = h.coordinator.summary();
    assert_eq!(s.granting, 0);
    assert_eq!(s.counters.gangs_scheduled, 0);
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_binds_whole_through_one_worker_of_two() {
    let cluster = EmbeddedCluster::new();
    for n in ["n1", "n2"] {
        cluster.apply_node(node(n, "4")).expect("node");
    }
    cluster
        .apply_pod_group(pod_group("pg", 6, None))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 2).await;
    for i in 0..6 {
        h.cluster
            .create_pod(member(&format!("m{i}"), "pg", "1"))
            .expect("pod");
    }
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "all six members bound", || {
        bound_names(&cluster).len() == 6
    })
    .await;
    let by: std::collections::HashSet<String> = (0..6)
        .map(|i| {
            h.coordinator
                .record("default", &format!("m{i}"))
                .and_then(|r| r.bound_by)
                .expect("bound by a worker")
                .to_string()
        })
        .collect();
    assert_eq!(by.len(), 1, "one worker placed the whole gang: {by:?}");
    let s = h.coordinator.summary();
    assert_eq!(s.counters.gangs_scheduled, 1);
    // Six pods of minMember 6 exist: upstream's controller says Scheduling
    // (no kubelet runs them here, so never Running).
    let cluster = h.cluster.clone();
    wait_until(STEP, "PodGroup status Scheduling", || {
        cluster
            .pod_group("default", "pg")
            .is_some_and(|g| g.status.phase.as_deref() == Some("Scheduling"))
    })
    .await;
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gangs_competing_for_room_do_not_deadlock() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "6")).expect("node");
    cluster
        .apply_pod_group(pod_group("a", 4, Some(1)))
        .expect("group");
    cluster
        .apply_pod_group(pod_group("b", 4, Some(1)))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 2).await;
    // Interleaved, so each gang first takes part of the room.
    for i in 0..4 {
        for g in ["a", "b"] {
            h.cluster
                .create_pod(member(&format!("{g}{i}"), g, "1"))
                .expect("pod");
        }
    }
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "one gang bound whole", || {
        bound_names(&cluster).len() == 4
    })
    .await;
    let bound = bound_names(&h.cluster);
    let first = &bound[0][..1];
    assert!(
        bound.iter().all(|n| n.starts_with(first)),
        "one whole gang, not a mix: {bound:?}"
    );
    // The other gang holds nothing at the coordinator; its members' room
    // comes back: a 2-cpu pod fits in what is left.
    h.cluster
        .create_pod(
            PodBuilder::new("small")
                .cpu("2")
                .label(CLASS_LABEL, "batch")
                .build(),
        )
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the small pod bound", || {
        bound_names(&cluster).iter().any(|n| n == "small")
    })
    .await;
    assert_eq!(
        bound_names(&h.cluster).len(),
        5,
        "the other gang stays pending"
    );
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_waiting_past_the_timeout_are_released_and_reported() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "9")).expect("node");
    // minMember 10 on room for 9: the 10th fails but the gap is 10 %, so
    // the nine wait (upstream PostFilter) until the group's 1 s timeout.
    cluster
        .apply_pod_group(pod_group("pg", 10, Some(1)))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    for i in 0..10 {
        h.cluster
            .create_pod(member(&format!("m{i}"), "pg", "1"))
            .expect("pod");
    }
    let c = h.coordinator.clone();
    wait_until(OUTCOME, "a gang timeout counted", || {
        c.summary().counters.gang_timeouts >= 1
    })
    .await;
    let cluster = h.cluster.clone();
    wait_until(
        STEP,
        "a member reported with upstream's timeout message",
        || {
            cluster.pods().iter().any(|p| {
                unschedulable_message(p)
                    == Some("rejected due to timeout after waiting 1s at plugin Coscheduling")
            })
        },
    )
    .await;
    assert!(bound_names(&h.cluster).is_empty());
    assert_eq!(h.cluster.write_counts().0, 0);
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_member_without_its_pod_group_is_rejected_at_permit_until_it_exists() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "4")).expect("node");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    h.cluster
        .create_pod(member("m0", "late", "1"))
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "PodGroup not found", || {
        cluster
            .pod("default", "m0")
            .is_some_and(|p| unschedulable_message(&p) == Some("PodGroup not found"))
    })
    .await;
    assert!(bound_names(&h.cluster).is_empty());
    // The PodGroup appearing moves the member back (PodGroupChanged).
    h.cluster
        .apply_pod_group(pod_group("late", 1, None))
        .expect("group");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the member bound", || {
        bound_names(&cluster) == ["m0"]
    })
    .await;
    stop(h, workers).await;
}

#[tokio::test]
async fn propose_gang_grants_all_or_none() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "2")).expect("node");
    cluster.apply_node(node("n2", "1")).expect("node");
    cluster
        .apply_pod_group(pod_group("pg", 3, None))
        .expect("group");
    for i in 0..3 {
        cluster
            .create_pod(member(&format!("m{i}"), "pg", "1"))
            .expect("pod");
    }
    let h = start(cluster).await;
    let (w, _) = h.coordinator.register("batch-0", WorkloadClass::Batch);
    // Its stream open, the members are handed to it (only then may it
    // propose them).
    let _events = h.coordinator.attach(w).expect("attach");
    let refs: Vec<PodRef> = (0..3)
        .map(|i| PodRef::of(&h.cluster.pod("default", &format!("m{i}")).expect("pod")))
        .collect();
    // Three on n1 (room for two): the third conflicts, none is granted.
    let all_n1: Vec<(PodRef, String)> = refs.iter().map(|r| (r.clone(), "n1".into())).collect();
    let d = h.coordinator.propose_gang(w, "default/pg", &all_n1).await;
    assert!(
        matches!(&d.decision, Decision::Conflict(m) if m.contains("default/m2") && m.contains("Insufficient cpu")),
        "{d:?}"
    );
    assert_eq!(
        h.coordinator.node_pods("n1"),
        Some(vec![]),
        "reservations rolled back"
    );
    assert_eq!(h.cluster.write_counts().0, 0);
    // A member listed twice (on two nodes) is refused outright: nothing
    // reserved anywhere, nothing written.
    let twice = vec![
        (refs[0].clone(), "n1".to_owned()),
        (refs[0].clone(), "n2".to_owned()),
        (refs[1].clone(), "n1".to_owned()),
    ];
    let d = h.coordinator.propose_gang(w, "default/pg", &twice).await;
    assert!(
        matches!(&d.decision, Decision::Error(m) if m.contains("default/m0") && m.contains("more than once")),
        "{d:?}"
    );
    assert_eq!(h.coordinator.node_pods("n1"), Some(vec![]));
    assert_eq!(h.coordinator.node_pods("n2"), Some(vec![]));
    assert_eq!(h.cluster.write_counts().0, 0);
    // One uid under two names (the arbiter looks pods up by uid): refused.
    let mut alias = refs[0].clone();
    alias.name = "alias".into();
    let d = h
        .coordinator
        .propose_gang(
            w,
            "default/pg",
            &[(refs[0].clone(), "n1".into()), (alias, "n2".into())],
        )
        .await;
    assert!(
        matches!(&d.decision, Decision::Error(m) if m.contains("more than once")),
        "{d:?}"
    );
    let mut renamed = refs[1].clone();
    renamed.name = "m9".into();
    let d = h
        .coordinator
        .propose_gang(w, "default/pg", &[(renamed, "n1".into())])
        .await;
    assert!(
        matches!(&d.decision, Decision::Error(m) if m.contains("belongs to pod default/m1")),
        "{d:?}"
    );
    // Members of the group, proposed under another group's name: refused.
    let d = h
        .coordinator
        .propose_gang(w, "default/other", &all_n1)
        .await;
    assert!(
        matches!(&d.decision, Decision::Error(m) if m.contains("not a member of pod group default/other")),
        "{d:?}"
    );
    // Fewer than minMember (3) with none placed yet: all or nothing, so
    // nothing (a worker proposing members beyond the minimum while the
    // minimum itself was refused must not get them bound alone).
    let two: Vec<(PodRef, String)> = refs[..2]
        .iter()
        .map(|r| (r.clone(), "n1".to_owned()))
        .collect();
    let d = h.coordinator.propose_gang(w, "default/pg", &two).await;
    assert!(
        matches!(&d.decision, Decision::Conflict(m) if m.contains("2 of its minimum 3")),
        "{d:?}"
    );
    assert_eq!(h.coordinator.node_pods("n1"), Some(vec![]));
    assert_eq!(h.cluster.write_counts().0, 0);
    // Two on n1, one on n2: all granted and bound.
    let split: Vec<(PodRef, String)> = refs
        .iter()
        .zip(["n1", "n1", "n2"])
        .map(|(r, n)| (r.clone(), n.to_owned()))
        .collect();
    let d = h.coordinator.propose_gang(w, "default/pg", &split).await;
    assert_eq!(d.decision, Decision::Bound);
    assert!(d.failed.is_empty());
    assert_eq!(h.cluster.write_counts().0, 3);
    assert_eq!(h.coordinator.summary().counters.gangs_scheduled, 1);
    // Re-proposing the bound gang is idempotent.
    let d = h.coordinator.propose_gang(w, "default/pg", &split).await;
    assert_eq!(d.decision, Decision::Bound);
    assert_eq!(h.cluster.write_counts().0, 3);
    h.shutdown().await;
}
