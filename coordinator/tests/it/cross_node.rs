//! The bind arbiter re-checks cross-node constraints (inter-pod
//! anti-affinity, topology spread, the instance cap) against grants
//! workers have not seen: two workers deciding at the same moment on stale
//! snapshots must never both win, for the profiles whose Filters enable
//! them.

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::{Batch, Online};
use flotilla_shared::framework::ServedProfile;
use flotilla_shared::max_instances::ANNOTATION_MAX_INSTANCES_PER_NODE;
use flotilla_shared::testing::{NodeBuilder, PodAffinityKind, PodBuilder, pod_affinity_term};
use k8s_openapi::api::core::v1::TopologySpreadConstraint;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector;

use crate::{FakeWorker, Harness, STEP, assigned_names, default_profiles, profiles_of, within};

const CLASS_LABEL: &str = "flotilla.io/workload-class";
const ZONE: &str = "topology.kubernetes.io/zone";

fn outcome(d: &pb::BindDecision) -> pb::BindOutcome {
    pb::BindOutcome::try_from(d.outcome).expect("a known outcome")
}

/// n1, n2 in zone a; n3 in zone b; room for everything.
fn cluster() -> EmbeddedCluster {
    let c = EmbeddedCluster::new();
    for (n, z) in [("n1", "a"), ("n2", "a"), ("n3", "b")] {
        c.apply_node(
            NodeBuilder::new(n)
                .cpu("8")
                .memory("32Gi")
                .pods(110)
                .label(ZONE, z)
                .build(),
        )
        .expect("node");
    }
    c
}

/// Starts the harness serving `profiles` (`None`: the default profile)
/// with an online and a batch worker; creates `pods` (one per class, online
/// first) and waits until each worker got its pod.
async fn two_workers_with(
    pods: [PodBuilder; 2],
    profiles: Option<Vec<ServedProfile>>,
) -> (Harness, FakeWorker, FakeWorker) {
    let h = Harness::serving(cluster(), profiles.unwrap_or_else(default_profiles)).await;
    let mut online = FakeWorker::join(&h, "online-0", Online).await;
    let mut batch = FakeWorker::join(&h, "batch-0", Batch).await;
    online.until_synced().await;
    batch.until_synced().await;
    let [p0, p1] = pods;
    h.cluster
        .create_pod(p0.label(CLASS_LABEL, "online").build())
        .expect("pod");
    h.cluster
        .create_pod(p1.label(CLASS_LABEL, "batch").build())
        .expect("pod");
    online.read_until(|e| !assigned_names(e).is_empty()).await;
    batch.read_until(|e| !assigned_names(e).is_empty()).await;
    (h, online, batch)
}

fn anti_affine(name: &str) -> PodBuilder {
    PodBuilder::new(name)
        .cpu("100m")
        .label("app", "db")
        .pod_affinity(
            PodAffinityKind::RequiredAnti,
            pod_affinity_term("app", "In", &["db"], ZONE),
        )
}

/// App `dlrm` capped at one instance per node.
fn capped(name: &str, k: &str) -> PodBuilder {
    PodBuilder::new(name)
        .cpu("100m")
        .label("app", "dlrm")
        .annotation(ANNOTATION_MAX_INSTANCES_PER_NODE, k)
}

/// The default profile plus MaxInstancesPerNode (app label `app`).
fn with_cap() -> Vec<ServedProfile> {
    profiles_of(
        "  - schedulerName: default-scheduler
    plugins:
      multiPoint:
        enabled:
          - name: MaxInstancesPerNode
",
    )
}

fn spread(name: &str) -> PodBuilder {
    PodBuilder::new(name)
        .cpu("100m")
        .label("app", "web")
        .spread_constraint(TopologySpreadConstraint {
            max_skew: 1,
            topology_key: ZONE.into(),
            when_unsatisfiable: "DoNotSchedule".into(),
            label_selector: Some(LabelSelector {
                match_labels: Some([("app".to_owned(), "web".to_owned())].into()),
                ..Default::default()
            }),
            ..Default::default()
        })
}

/// Proposes a→`na` and b→`nb` at once; returns the two decisions.
async fn race(
    online: &mut FakeWorker,
    batch: &mut FakeWorker,
    na: &str,
    nb: &str,
) -> (pb::BindDecision, pb::BindDecision) {
    within(STEP, "two concurrent proposals", async {
        tokio::join!(online.propose("a", na), batch.propose("b", nb))
    })
    .await
}

/// Asserts exactly one of two racing proposals was bound and the other
/// refused as a conflict whose reason contains `reason`; returns whether the
/// loser was pod a.
fn one_wins(da: &pb::BindDecision, db: &pb::BindDecision, reason: &str) -> bool {
    let outcomes = [outcome(da), outcome(db)];
    let bound = outcomes
        .iter()
        .filter(|o| **o == pb::BindOutcome::Bound)
        .count();
    assert_eq!(bound, 1, "exactly one wins: {da:?} {db:?}");
    let (loser, loser_is_a) = if outcomes[0] == pb::BindOutcome::Bound {
        (db, false)
    } else {
        (da, true)
    };
    assert_eq!(outcome(loser), pb::BindOutcome::Conflict, "{loser:?}");
    assert!(loser.reason.contains(reason), "{:?}", loser.reason);
    loser_is_a
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn mutually_anti_affine_pods_never_share_a_zone() {
    let (h, mut online, mut batch) =
        two_workers_with([anti_affine("a"), anti_affine("b")], None).await;
    // Both workers saw an empty zone a and chose it.
    let (da, db) = race(&mut online, &mut batch, "n1", "n2").await;
    // An upstream anti-affinity reason.
    let loser_is_a = one_wins(&da, &db, "anti-affinity rules");
    // The loser's retry in the other zone is granted.
    let retry = if loser_is_a {
        online.propose("a", "n3").await
    } else {
        batch.propose("b", "n3").await
    };
    assert_eq!(outcome(&retry), pb::BindOutcome::Bound, "{retry:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_spread_pods_cannot_break_max_skew_together() {
    let (h, mut online, mut batch) = two_workers_with([spread("a"), spread("b")], None).await;
    // Zone a then holds 2 matching pods and zone b none: skew 2 > maxSkew 1.
    let (da, db) = race(&mut online, &mut batch, "n1", "n2").await;
    one_wins(
        &da,
        &db,
        "node(s) didn't match pod topology spread constraints",
    );
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_profile_without_the_plugins_is_not_held_to_them() {
    let off = profiles_of(
        "  - schedulerName: default-scheduler
    plugins:
      filter:
        disabled:
          - name: InterPodAffinity
          - name: PodTopologySpread
",
    );
    let (h, mut online, mut batch) =
        two_workers_with([anti_affine("a"), anti_affine("b")], Some(off)).await;
    let (da, db) = race(&mut online, &mut batch, "n1", "n2").await;
    assert_eq!(outcome(&da), pb::BindOutcome::Bound, "{da:?}");
    assert_eq!(outcome(&db), pb::BindOutcome::Bound, "{db:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_workers_cannot_put_more_instances_on_a_node_than_the_cap() {
    let (h, mut online, mut batch) =
        two_workers_with([capped("a", "1"), capped("b", "1")], Some(with_cap())).await;
    // Both workers saw n1 empty of the app and chose it.
    let (da, db) = race(&mut online, &mut batch, "n1", "n1").await;
    let loser_is_a = one_wins(
        &da,
        &db,
        "node(s) already run the maximum number of instances of this app",
    );
    // Another node is fine.
    let retry = if loser_is_a {
        online.propose("a", "n2").await
    } else {
        batch.propose("b", "n2").await
    };
    assert_eq!(outcome(&retry), pb::BindOutcome::Bound, "{retry:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_cap_of_two_lets_two_instances_share_a_node() {
    let (h, mut online, mut batch) =
        two_workers_with([capped("a", "2"), capped("b", "2")], Some(with_cap())).await;
    let (da, db) = race(&mut online, &mut batch, "n1", "n1").await;
    assert_eq!(outcome(&da), pb::BindOutcome::Bound, "{da:?}");
    assert_eq!(outcome(&db), pb::BindOutcome::Bound, "{db:?}");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_malformed_cap_is_refused_by_the_arbiter() {
    let (h, online, _batch) =
        two_workers_with([capped("a", "many"), capped("b", "1")], Some(with_cap())).await;
    let d = online.propose("a", "n1").await;
    assert_eq!(outcome(&d), pb::BindOutcome::Conflict, "{d:?}");
    // PreFilter's message, naming the pod and the annotation.
    assert!(
        d.reason.contains(
            "pod default/a: annotation scheduling.flotilla.dev/max-instances-per-node: \"many\" \
             is not a positive integer"
        ),
        "{:?}",
        d.reason
    );
    h.shutdown().await;
}

/// A bound pod updated in place (here relabelled out of the selector) is
/// counted as it is now: the arbiter must not refuse a spread pod over a
/// match that no longer exists (the workers already count the new copy).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_bound_pod_updated_in_place_is_counted_as_it_is_now() {
    use flotilla_coordinator::cluster::WatchEvent;
    use std::sync::Arc;

    let h = Harness::start(cluster()).await;
    let mut online = FakeWorker::join(&h, "online-0", Online).await;
    online.until_synced().await;
    let old = PodBuilder::new("old")
        .cpu("100m")
        .label("app", "web")
        .node_name("n1")
        .build();
    h.cluster.create_pod(old.clone()).expect("pod");
    h.wait_for_record("uid-old").await;
    // Zone a holds one app=web pod, zone b none: a second in zone a would
    // be skew 2 > maxSkew 1.
    let mut relabelled = old;
    relabelled
        .metadata
        .labels
        .get_or_insert_with(Default::default)
        .insert("app".into(), "retired".into());
    h.coordinator
        .apply(WatchEvent::PodApplied(Arc::new(relabelled)));
    h.cluster
        .create_pod(spread("a").label(CLASS_LABEL, "online").build())
        .expect("pod");
    online.read_until(|e| !assigned_names(e).is_empty()).await;
    let d = online.propose("a", "n1").await;
    assert_eq!(
        outcome(&d),
        pb::BindOutcome::Bound,
        "zone a has no app=web pod any more: {d:?}"
    );
    h.shutdown().await;
}
