//! Kubernetes' own gangs end to end: `scheduling.k8s.io` PodGroups
//! (`spec.schedulingGroup.podGroupName`), the default profile's
//! GangScheduling in real workers over loopback gRPC, the coordinator's
//! all-or-none grant, its hold of members that may not be scheduled, and
//! the PodGroup's condition. The scheduler-plugins gangs beside them are in
//! `gang.rs`.

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_shared::gang::{V1ALPHA2, V1BETA1, WorkloadPodGroup};
use flotilla_shared::testing::PodBuilder;
use k8s_openapi::api::core::v1::Pod;

use crate::gang::{CLASS_LABEL, bound_names, member, node, pod_group, start, start_workers, stop};
use crate::{OUTCOME, STEP, pod_scheduled, unschedulable_message, wait_until};

/// A `scheduling.k8s.io` PodGroup in `default`, as `kubectl get -o json`
/// shows it: `policy` is the `spec.schedulingPolicy`.
fn workload_group(api_version: &str, name: &str, policy: serde_json::Value) -> WorkloadPodGroup {
    serde_json::from_value(serde_json::json!({
        "apiVersion": api_version, "kind": "PodGroup",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"schedulingPolicy": policy},
    }))
    .expect("a PodGroup")
}

fn gang(name: &str, min: i32) -> WorkloadPodGroup {
    workload_group(
        V1BETA1,
        name,
        serde_json::json!({"gang": {"minCount": min}}),
    )
}

/// A batch pod of `group` (`spec.schedulingGroup.podGroupName`).
fn grouped(name: &str, group: &str, cpu: &str) -> Pod {
    PodBuilder::new(name)
        .cpu(cpu)
        .label(CLASS_LABEL, "batch")
        .pod_group_name(group)
        .build()
}

/// The scheduler's condition on PodGroup `name`: (type, status, reason,
/// message).
fn condition(cluster: &EmbeddedCluster, name: &str) -> Option<(String, String, String, String)> {
    let g = cluster.workload_pod_group("default", name)?;
    let c = g.scheduled_condition()?;
    Some((
        c.type_.clone(),
        c.status.clone(),
        c.reason.clone(),
        c.message.clone(),
    ))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_binds_whole_and_its_pod_group_says_scheduled() {
    let cluster = EmbeddedCluster::new();
    for n in ["n1", "n2"] {
        cluster.apply_node(node(n, "4")).expect("node");
    }
    cluster
        .apply_workload_pod_group(gang("pg", 6))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 2).await;
    for i in 0..6 {
        h.cluster
            .create_pod(grouped(&format!("m{i}"), "pg", "1"))
            .expect("pod");
    }
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "all six members bound", || {
        bound_names(&cluster).len() == 6
    })
    .await;
    assert_eq!(h.coordinator.summary().counters.gangs_scheduled, 1);
    let cluster = h.cluster.clone();
    wait_until(STEP, "PodGroupInitiallyScheduled=True", || {
        condition(&cluster, "pg").is_some_and(|(t, s, r, _)| {
            t == "PodGroupInitiallyScheduled" && s == "True" && r == "Scheduled"
        })
    })
    .await;
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_that_cannot_fit_binds_nothing_and_says_why() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "3")).expect("node");
    // v1alpha2 (1.36): the condition is PodGroupScheduled there.
    cluster
        .apply_workload_pod_group(workload_group(
            V1ALPHA2,
            "pg",
            serde_json::json!({"gang": {"minCount": 4}}),
        ))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    for i in 0..4 {
        h.cluster
            .create_pod(grouped(&format!("m{i}"), "pg", "1"))
            .expect("pod");
    }
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "PodGroupScheduled=False, Unschedulable", || {
        condition(&cluster, "pg").is_some_and(|(t, s, r, m)| {
            t == "PodGroupScheduled"
                && s == "False"
                && r == "Unschedulable"
                && m.starts_with("0/1 nodes are available: 1 Insufficient cpu.")
        })
    })
    .await;
    assert!(bound_names(&h.cluster).is_empty(), "no member bound");
    assert_eq!(h.cluster.write_counts().0, 0, "no Binding written");
    // The group was rejected as a unit: the room its members held is free.
    h.cluster
        .create_pod(
            PodBuilder::new("small")
                .cpu("3")
                .label(CLASS_LABEL, "batch")
                .build(),
        )
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the small pod bound", || {
        bound_names(&cluster).iter().any(|n| n == "small")
    })
    .await;
    assert_eq!(bound_names(&h.cluster), ["small"]);
    assert_eq!(h.coordinator.summary().counters.gangs_scheduled, 0);
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_upstream_gangs_competing_for_room_do_not_deadlock() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "6")).expect("node");
    for g in ["a", "b"] {
        cluster.apply_workload_pod_group(gang(g, 4)).expect("group");
    }
    let h = start(cluster).await;
    let workers = start_workers(&h, 2).await;
    // Interleaved, so each gang first takes part of the room.
    for i in 0..4 {
        for g in ["a", "b"] {
            h.cluster
                .create_pod(grouped(&format!("{g}{i}"), g, "1"))
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
    // The other holds nothing: a 2-cpu pod fits in what is left.
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
async fn members_wait_for_their_pod_group_then_bind() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "4")).expect("node");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    for i in 0..2 {
        h.cluster
            .create_pod(grouped(&format!("m{i}"), "late", "1"))
            .expect("pod");
    }
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "upstream's PreEnqueue message on both", || {
        (0..2).all(|i| {
            cluster.pod("default", &format!("m{i}")).is_some_and(|p| {
                unschedulable_message(&p)
                    == Some("waiting for pods's pod group \"late\" to appear in scheduling queue")
            })
        })
    })
    .await;
    assert!(bound_names(&h.cluster).is_empty());
    h.cluster
        .apply_workload_pod_group(gang("late", 2))
        .expect("group");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "both bound", || {
        bound_names(&cluster) == ["m0", "m1"]
    })
    .await;
    stop(h, workers).await;
}

/// Members of a gang short of its minimum wait at PreEnqueue: nothing is
/// written on them (as upstream), and they count as gated, not pending (a
/// run does not wait for them to time out); the last member lets all go.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_short_of_min_count_are_gated_not_pending() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "4")).expect("node");
    cluster
        .apply_workload_pod_group(gang("short", 3))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    for i in 0..2 {
        h.cluster
            .create_pod(grouped(&format!("m{i}"), "short", "1"))
            .expect("pod");
    }
    let c = h.coordinator.clone();
    wait_until(OUTCOME, "both members gated", || {
        let s = c.summary();
        (s.gated, s.pending, s.unschedulable) == (2, 0, 0)
    })
    .await;
    for i in 0..2 {
        let p = h.cluster.pod("default", &format!("m{i}")).expect("pod");
        assert_eq!(crate::pod_scheduled(&p), None, "nothing written on m{i}");
    }
    h.cluster
        .create_pod(grouped("m2", "short", "1"))
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "all three bound", || {
        bound_names(&cluster) == ["m0", "m1", "m2"]
    })
    .await;
    assert_eq!(h.coordinator.summary().gated, 0);
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn bad_groups_hold_their_pods_with_the_reason_until_fixed() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "8")).expect("node");
    cluster
        .apply_workload_pod_group(gang("zero", 0))
        .expect("group");
    cluster
        .apply_workload_pod_group(gang("mixed", 1))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    h.cluster
        .create_pod(grouped("z0", "zero", "1"))
        .expect("pod");
    // A member another scheduler serves (first, so that x0 is never
    // dispatched alone): upstream rejects the whole group.
    let mut other = grouped("x1", "mixed", "1");
    other.spec.as_mut().expect("spec").scheduler_name = Some("other-scheduler".into());
    h.cluster.create_pod(other).expect("pod");
    h.cluster
        .create_pod(grouped("x0", "mixed", "1"))
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "both held, each with its reason", || {
        let msg = |n: &str| {
            cluster
                .pod("default", n)
                .and_then(|p| unschedulable_message(&p).map(str::to_owned))
        };
        msg("z0").as_deref()
            == Some(
                "PodGroup default/zero: spec.schedulingPolicy.gang.minCount: Invalid value: 0: \
                 must be greater than zero",
            )
            && msg("x0").as_deref()
                == Some(
                    "all pods in a single pod group should have the same .spec.schedulerName \
                     set, got: \"other-scheduler\" and \"default-scheduler\"",
                )
    })
    .await;
    let cluster = h.cluster.clone();
    wait_until(
        STEP,
        "the mixed group's condition says SchedulerError",
        || {
            condition(&cluster, "mixed").is_some_and(|(_, s, r, m)| {
                s == "False" && r == "SchedulerError" && m.contains("got:")
            })
        },
    )
    .await;
    assert!(bound_names(&h.cluster).is_empty(), "nothing bound");
    assert!(
        h.cluster
            .pod("default", "x0")
            .and_then(|p| pod_scheduled(&p).map(|c| c.status.clone()))
            .is_some_and(|s| s == "False")
    );
    // Fixed: the group's minCount set right, the other scheduler's pod gone.
    h.cluster
        .apply_workload_pod_group(gang("zero", 1))
        .expect("group");
    h.cluster.delete_pod("default", "x1").expect("delete");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "both bound once fixed", || {
        bound_names(&cluster) == ["x0", "z0"]
    })
    .await;
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_basic_group_schedules_pod_by_pod() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "2")).expect("node");
    cluster
        .apply_workload_pod_group(workload_group(
            V1BETA1,
            "web",
            serde_json::json!({"basic": {}}),
        ))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    for i in 0..3 {
        h.cluster
            .create_pod(grouped(&format!("w{i}"), "web", "1"))
            .expect("pod");
    }
    // Room for two: two bind on their own, the third is unschedulable.
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "two bound, one unschedulable", || {
        bound_names(&cluster).len() == 2
            && cluster
                .pods()
                .iter()
                .any(|p| unschedulable_message(p).is_some_and(|m| m.contains("Insufficient cpu")))
    })
    .await;
    assert_eq!(h.coordinator.summary().counters.gangs_scheduled, 0);
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn both_gang_apis_side_by_side_with_the_same_name() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "8")).expect("node");
    // One scheduler-plugins and one Kubernetes PodGroup, both "pg".
    cluster
        .apply_pod_group(pod_group("pg", 2, None))
        .expect("group");
    cluster
        .apply_workload_pod_group(gang("pg", 3))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 2).await;
    for i in 0..2 {
        h.cluster
            .create_pod(member(&format!("c{i}"), "pg", "1"))
            .expect("pod");
    }
    for i in 0..3 {
        h.cluster
            .create_pod(grouped(&format!("k{i}"), "pg", "1"))
            .expect("pod");
    }
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "both gangs bound", || {
        bound_names(&cluster).len() == 5
    })
    .await;
    assert_eq!(h.coordinator.summary().counters.gangs_scheduled, 2);
    stop(h, workers).await;
}

/// m0 and m1 (2 cpu each) placed and waiting at Permit for m2, which is
/// scheduling-gated, so the gang (minCount 3) is never complete.
async fn two_waiting(cluster: &EmbeddedCluster) {
    cluster.create_pod(grouped("m0", "pg", "2")).expect("pod");
    cluster.create_pod(grouped("m1", "pg", "2")).expect("pod");
    let mut gated = grouped("m2", "pg", "1");
    gated.spec.as_mut().expect("spec").scheduling_gates =
        Some(vec![k8s_openapi::api::core::v1::PodSchedulingGate {
            name: "example.com/hold".into(),
        }]);
    cluster.create_pod(gated).expect("pod");
}

fn plain(name: &str, cpu: &str) -> Pod {
    PodBuilder::new(name)
        .cpu(cpu)
        .label(CLASS_LABEL, "batch")
        .build()
}

fn message_of(cluster: &EmbeddedCluster, pod: &str) -> Option<String> {
    cluster
        .pod("default", pod)
        .and_then(|p| unschedulable_message(&p).map(str::to_owned))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_waiting_when_their_pod_group_goes_free_their_room_and_bind_when_it_returns() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "4")).expect("node");
    cluster
        .apply_workload_pod_group(gang("pg", 3))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    two_waiting(&h.cluster).await;
    // Time for both to be placed and hold their room at Permit.
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    h.cluster
        .delete_workload_pod_group("default", "pg")
        .expect("delete");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "members held with upstream's message", || {
        message_of(&cluster, "m0").is_some_and(|m| m.contains("to appear in scheduling queue"))
    })
    .await;
    // The room they held at Permit is free: a pod taking all of it binds.
    h.cluster.create_pod(plain("big", "4")).expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "big bound", || bound_names(&cluster) == ["big"]).await;
    h.cluster.delete_pod("default", "big").expect("delete");
    // The PodGroup back, smaller: m0 and m1 make it.
    h.cluster
        .apply_workload_pod_group(gang("pg", 2))
        .expect("group");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "m0 and m1 bound", || {
        bound_names(&cluster) == ["m0", "m1"]
    })
    .await;
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lower_min_count_lets_waiting_members_go_at_once() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "4")).expect("node");
    cluster
        .apply_workload_pod_group(gang("pg", 3))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    two_waiting(&h.cluster).await;
    tokio::time::sleep(std::time::Duration::from_millis(500)).await;
    assert!(bound_names(&h.cluster).is_empty(), "waiting for m2");
    // Well before the 5-minute Permit timeout.
    h.cluster
        .apply_workload_pod_group(workload_group(
            V1BETA1,
            "pg",
            serde_json::json!({"basic": {}}),
        ))
        .expect("group");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "m0 and m1 bound", || {
        bound_names(&cluster) == ["m0", "m1"]
    })
    .await;
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn members_beyond_min_count_bind_as_they_fit() {
    // minCount 2 of 4 on room for 3: the gang is scheduled with its first
    // two, the third binds too, only the fourth waits.
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "3")).expect("node");
    cluster
        .apply_workload_pod_group(gang("pg", 2))
        .expect("group");
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    for i in 0..4 {
        h.cluster
            .create_pod(grouped(&format!("m{i}"), "pg", "1"))
            .expect("pod");
    }
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "three bound, one unschedulable", || {
        bound_names(&cluster).len() == 3
            && (0..4).any(|i| {
                message_of(&cluster, &format!("m{i}"))
                    .is_some_and(|m| m.contains("Insufficient cpu"))
            })
    })
    .await;
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn two_gangs_that_never_fit_wait_quietly() {
    let cluster = EmbeddedCluster::new();
    cluster.apply_node(node("n1", "3")).expect("node");
    for g in ["a", "b"] {
        cluster.apply_workload_pod_group(gang(g, 4)).expect("group");
    }
    let h = start(cluster).await;
    let workers = start_workers(&h, 1).await;
    for i in 0..4 {
        for g in ["a", "b"] {
            h.cluster
                .create_pod(grouped(&format!("{g}{i}"), g, "1"))
                .expect("pod");
        }
    }
    tokio::time::sleep(std::time::Duration::from_secs(3)).await;
    let before = h.cluster.events_recorded();
    tokio::time::sleep(std::time::Duration::from_secs(5)).await;
    let during = h.cluster.events_recorded() - before;
    // Each gang retries at its backoff's pace (1 s doubling), each try
    // reporting its four members: a few dozen events, not thousands.
    assert!(during < 100, "{during} events in 5 s");
    assert!(bound_names(&h.cluster).is_empty());
    stop(h, workers).await;
}
