//! End to end: the coordinator with real scheduler workers
//! (`flotilla_scheduler::worker::run`) over loopback gRPC.

use std::sync::Arc;
use std::sync::atomic::Ordering;

use flotilla_coordinator::cluster::{EmbeddedCluster, EventType};
use flotilla_coordinator::partition;
use flotilla_scheduler::Registry;
use flotilla_scheduler::worker::{self, WorkerConfig, WorkerError, WorkerStats};
use flotilla_shared::WorkloadClass;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use tokio::task::JoinHandle;

use crate::{Harness, OUTCOME, STEP, node_of, unschedulable_message, wait_until, within};

const CLASS_LABEL: &str = "flotilla.io/workload-class";

struct Worker {
    name: String,
    stats: Arc<WorkerStats>,
    handle: JoinHandle<Result<(), WorkerError>>,
}

fn spawn_worker(h: &Harness, name: &str, class: WorkloadClass) -> Worker {
    let cfg = WorkerConfig::new(&h.url(), name, class);
    let stats = Arc::new(WorkerStats::default());
    let st = stats.clone();
    let token = h.token.clone();
    let handle =
        tokio::spawn(async move { worker::run(cfg, &Registry::in_tree(), st, token).await });
    Worker {
        name: name.to_owned(),
        stats,
        handle,
    }
}

async fn start_workers(h: &Harness, spec: &[(&str, WorkloadClass)]) -> Vec<Worker> {
    let workers: Vec<Worker> = spec.iter().map(|(n, c)| spawn_worker(h, n, *c)).collect();
    let c = h.coordinator.clone();
    let want = spec.len();
    wait_until(STEP, "workers connecting", || c.live_workers() == want).await;
    wait_until(STEP, "workers replaying the coordinator's view", || {
        workers
            .iter()
            .all(|w| w.stats.ready.load(Ordering::Acquire))
    })
    .await;
    workers
}

async fn stop(h: Harness, workers: Vec<Worker>) {
    h.token.cancel();
    for w in workers {
        within(STEP, &format!("worker {} stopping", w.name), w.handle)
            .await
            .expect("worker task does not panic")
            .unwrap_or_else(|e| panic!("worker {} failed: {e}", w.name));
    }
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn the_pod_that_loses_the_last_room_stays_pending_with_the_fit_error() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(
            NodeBuilder::new("n1")
                .cpu("1")
                .memory("4Gi")
                .pods(110)
                .build(),
        )
        .expect("node");
    let h = Harness::start(cluster).await;
    let workers = start_workers(
        &h,
        &[
            ("online-0", WorkloadClass::Online),
            ("batch-0", WorkloadClass::Batch),
        ],
    )
    .await;
    // One pod per pool: two workers race for the one cpu.
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
    let cluster = h.cluster.clone();
    let resolved = move || {
        let pods = cluster.pods();
        let bound = pods.iter().filter(|p| node_of(p).is_some()).count();
        let refused = pods
            .iter()
            .filter(|p| unschedulable_message(p).is_some())
            .count();
        bound == 1 && refused == 1
    };
    wait_until(OUTCOME, "one pod bound, the other unschedulable", resolved).await;

    let pods = h.cluster.pods();
    let bound: Vec<_> = pods.iter().filter(|p| node_of(p).is_some()).collect();
    assert_eq!(bound.len(), 1, "exactly one pod bound");
    assert_eq!(node_of(bound[0]), Some("n1"));
    let loser = pods.iter().find(|p| node_of(p).is_none()).expect("a loser");
    assert_eq!(
        unschedulable_message(loser),
        // The winner has the loser's priority: DefaultPreemption finds no
        // victim (upstream's PostFilter suffix).
        Some(
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: \
             1 No preemption victims found for incoming pod."
        )
    );
    assert_eq!(h.cluster.write_counts().0, 1, "one Binding written");
    let s = h.coordinator.summary();
    assert_eq!((s.bound, s.unschedulable, s.pending), (1, 1, 0));

    // The Events upstream records for both outcomes.
    let winner = bound[0].metadata.name.clone().expect("name");
    let loser = loser.metadata.name.clone().expect("name");
    let events = h.cluster.events();
    let scheduled: Vec<_> = events.iter().filter(|e| e.reason == "Scheduled").collect();
    assert_eq!(scheduled.len(), 1, "{events:?}");
    assert_eq!(scheduled[0].pod.name, winner);
    assert_eq!(
        (scheduled[0].type_, scheduled[0].action),
        (EventType::Normal, "Binding")
    );
    assert_eq!(
        scheduled[0].note,
        format!("Successfully assigned default/{winner} to n1")
    );
    let failed: Vec<_> = events
        .iter()
        .filter(|e| e.reason == "FailedScheduling")
        .collect();
    assert!(!failed.is_empty(), "{events:?}");
    for f in failed {
        assert_eq!(f.pod.name, loser);
        assert_eq!((f.type_, f.action), (EventType::Warning, "Scheduling"));
        assert_eq!(
            f.note,
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: \
             1 No preemption victims found for incoming pod."
        );
    }
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_that_fits_only_outside_the_workers_partition_is_still_placed() {
    const PODS: usize = 10;
    let cluster = EmbeddedCluster::new();
    let names: Vec<String> = (0..6).map(|i| format!("node-{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        let b = NodeBuilder::new(n).cpu("4").memory("8Gi").pods(110);
        let b = if i == 3 {
            b.label("disk", "ssd")
        } else {
            b.label("disk", "hdd")
        };
        cluster.apply_node(b.build()).expect("node");
    }
    let h = Harness::start(cluster).await;
    let workers = start_workers(
        &h,
        &[
            ("online-0", WorkloadClass::Online),
            ("online-1", WorkloadClass::Online),
        ],
    )
    .await;
    for i in 0..PODS {
        h.cluster
            .create_pod(
                PodBuilder::new(&format!("ssd-{i}"))
                    .cpu("100m")
                    .memory("100Mi")
                    .node_selector("disk", "ssd")
                    .label(CLASS_LABEL, "online")
                    .build(),
            )
            .expect("pod");
    }
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "every ssd pod bound", move || {
        cluster
            .pods()
            .iter()
            .filter(|p| node_of(p).is_some())
            .count()
            == PODS
    })
    .await;
    for p in h.cluster.pods() {
        assert_eq!(node_of(&p), Some("node-3"), "{:?}", p.metadata.name);
    }
    assert_eq!(
        h.cluster.write_counts().0,
        PODS as u64,
        "one Binding per pod"
    );

    // The worker that does not own node-3 placed its pods by falling back.
    let summary = h.coordinator.summary();
    let owner = partition::owner("node-3", &[1, 2]).expect("an owner");
    let (owner_name, other_name) = if owner == 1 {
        (&summary.workers[0].0, &summary.workers[1].0)
    } else {
        (&summary.workers[1].0, &summary.workers[0].0)
    };
    let other_bound = summary
        .workers
        .iter()
        .find(|w| w.0 == *other_name)
        .expect("worker")
        .2;
    let other = workers
        .iter()
        .find(|w| *w.name == **other_name)
        .expect("the non-owner is one of ours");
    let fallbacks = other.stats.fallbacks.load(Ordering::Relaxed);
    eprintln!(
        "node-3 owned by {owner_name}; {other_name} bound {other_bound} pod(s) with {fallbacks} fallback(s)"
    );
    // Pods are dealt out alternately, so both workers got some.
    assert!(
        other_bound > 0,
        "{other_name} placed none of the pods: {summary:?}"
    );
    assert!(
        fallbacks >= other_bound,
        "every pod {other_name} bound was a fallback placement: {fallbacks} < {other_bound}"
    );
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unschedulable_pod_carries_the_upstream_message_through_the_real_pipeline() {
    let cluster = EmbeddedCluster::new();
    for i in 0..3 {
        cluster
            .apply_node(
                NodeBuilder::new(&format!("small-{i}"))
                    .cpu("1")
                    .memory("8Gi")
                    .pods(110)
                    .build(),
            )
            .expect("node");
    }
    for i in 0..2 {
        cluster
            .apply_node(
                NodeBuilder::new(&format!("tainted-{i}"))
                    .cpu("8")
                    .memory("8Gi")
                    .pods(110)
                    .taint("dedicated", "gpu", "NoSchedule")
                    .build(),
            )
            .expect("node");
    }
    let h = Harness::start(cluster).await;
    let workers = start_workers(
        &h,
        &[
            ("online-0", WorkloadClass::Online),
            ("online-1", WorkloadClass::Online),
        ],
    )
    .await;
    h.cluster
        .create_pod(PodBuilder::new("big").cpu("2").build())
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the pod marked unschedulable", move || {
        cluster
            .pod("default", "big")
            .is_some_and(|p| unschedulable_message(&p).is_some())
    })
    .await;
    let p = h.cluster.pod("default", "big").expect("pod");
    assert_eq!(node_of(&p), None);
    assert_eq!(
        unschedulable_message(&p),
        // Taints are unresolvable, and so is a request beyond allocatable
        // (v1.34+): preemption cannot help anywhere.
        Some(
            "0/5 nodes are available: 2 node(s) had untolerated taint(s), 3 Insufficient cpu. \
             preemption: 0/5 nodes are available: 5 Preemption is not helpful for scheduling."
        )
    );
    assert_eq!(
        h.cluster.write_counts(),
        (0, 1),
        "no Binding, one status write"
    );
    // The per-node reasons behind the message are kept for inspection.
    let rec = h.coordinator.record("default", "big").expect("record");
    let mut per_node: Vec<(String, Vec<String>, String)> = rec
        .rejections
        .iter()
        .map(|r| (r.node.clone(), r.reasons.clone(), r.plugin.clone()))
        .collect();
    per_node.sort();
    let small = |n: &str| {
        (
            n.to_owned(),
            vec!["Insufficient cpu".to_owned()],
            "NodeResourcesFit".to_owned(),
        )
    };
    let tainted = |n: &str| {
        (
            n.to_owned(),
            vec!["node(s) had untolerated taint(s)".to_owned()],
            "TaintToleration".to_owned(),
        )
    };
    assert_eq!(
        per_node,
        vec![
            small("small-0"),
            small("small-1"),
            small("small-2"),
            tainted("tainted-0"),
            tainted("tainted-1"),
        ]
    );
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn on_a_large_cluster_the_message_counts_every_node_and_a_sample_of_reasons_is_kept() {
    let nodes = 3 * flotilla_proto::v1::MAX_NODE_STATUSES;
    let cluster = EmbeddedCluster::new();
    for i in 0..nodes {
        cluster
            .apply_node(
                NodeBuilder::new(&format!("small-{i:03}"))
                    .cpu("1")
                    .memory("8Gi")
                    .pods(110)
                    .build(),
            )
            .expect("node");
    }
    let h = Harness::start(cluster).await;
    let workers = start_workers(&h, &[("online-0", WorkloadClass::Online)]).await;
    h.cluster
        .create_pod(PodBuilder::new("big").cpu("2").build())
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the pod marked unschedulable", move || {
        cluster
            .pod("default", "big")
            .is_some_and(|p| unschedulable_message(&p).is_some())
    })
    .await;
    let p = h.cluster.pod("default", "big").expect("pod");
    assert_eq!(
        unschedulable_message(&p),
        Some(format!(
            "0/{nodes} nodes are available: {nodes} Insufficient cpu. \
             preemption: 0/{nodes} nodes are available: {nodes} Preemption is not helpful for scheduling."
        ))
        .as_deref()
    );
    let rec = h.coordinator.record("default", "big").expect("record");
    assert_eq!(rec.rejections.len(), flotilla_proto::v1::MAX_NODE_STATUSES);
    assert!(
        rec.rejections
            .iter()
            .all(|r| r.reasons == ["Insufficient cpu"] && r.plugin == "NodeResourcesFit"),
        "{:?}",
        rec.rejections
    );
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn an_unschedulable_pod_is_placed_once_a_fitting_node_joins() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(
            NodeBuilder::new("small")
                .cpu("1")
                .memory("4Gi")
                .pods(110)
                .build(),
        )
        .expect("node");
    let h = Harness::start(cluster).await;
    let workers = start_workers(&h, &[("online-0", WorkloadClass::Online)]).await;
    h.cluster
        .create_pod(PodBuilder::new("big").cpu("2").build())
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the pod marked unschedulable", move || {
        cluster
            .pod("default", "big")
            .is_some_and(|p| unschedulable_message(&p).is_some())
    })
    .await;
    assert_eq!(
        unschedulable_message(&h.cluster.pod("default", "big").expect("pod")),
        Some(
            "0/1 nodes are available: 1 Insufficient cpu. preemption: 0/1 nodes are available: \
             1 Preemption is not helpful for scheduling."
        )
    );

    h.cluster
        .apply_node(
            NodeBuilder::new("large")
                .cpu("4")
                .memory("8Gi")
                .pods(110)
                .build(),
        )
        .expect("node");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the pod bound to the new node", move || {
        cluster
            .pod("default", "big")
            .is_some_and(|p| node_of(&p).is_some())
    })
    .await;
    let p = h.cluster.pod("default", "big").expect("pod");
    assert_eq!(node_of(&p), Some("large"));
    let cond = crate::pod_scheduled(&p).expect("PodScheduled condition");
    assert_eq!(
        cond.status, "True",
        "binding clears the Unschedulable condition"
    );
    assert_eq!(h.coordinator.summary().unschedulable, 0);
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_waiting_for_room_is_placed_when_a_bound_pod_is_deleted() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(
            NodeBuilder::new("n1")
                .cpu("2")
                .memory("4Gi")
                .pods(110)
                .build(),
        )
        .expect("node");
    cluster
        .create_pod(PodBuilder::new("old").cpu("2").node_name("n1").build())
        .expect("pod");
    let h = Harness::start(cluster).await;
    let workers = start_workers(&h, &[("online-0", WorkloadClass::Online)]).await;
    h.cluster
        .create_pod(PodBuilder::new("new").cpu("2").build())
        .expect("pod");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the new pod marked unschedulable", move || {
        cluster
            .pod("default", "new")
            .is_some_and(|p| unschedulable_message(&p).is_some())
    })
    .await;

    h.cluster.delete_pod("default", "old").expect("delete");
    let cluster = h.cluster.clone();
    wait_until(OUTCOME, "the new pod bound in the freed room", move || {
        cluster
            .pod("default", "new")
            .is_some_and(|p| node_of(&p) == Some("n1"))
    })
    .await;
    assert_eq!(h.cluster.write_counts().0, 1);
    stop(h, workers).await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_worker_confirmed_a_binding_it_does_not_hold_registers_again_and_resyncs() {
    let cluster = EmbeddedCluster::new();
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    // Gated: the worker holds it and never schedules it (and nothing writes
    // its status meanwhile).
    cluster
        .create_pod(
            PodBuilder::new("picky")
                .cpu("1")
                .scheduling_gate("example.com/hold")
                .build(),
        )
        .expect("pod");
    let h = Harness::start(cluster).await;
    let workers = start_workers(&h, &[("online-0", WorkloadClass::Online)]).await;
    let c = h.coordinator.clone();
    wait_until(STEP, "picky assigned to the worker", || {
        c.record("default", "picky")
            .is_some_and(|r| r.phase == flotilla_coordinator::PodPhase::Pending(Some(1)))
    })
    .await;
    // Over gRPC, a proposal in the worker's name (id 1, the first
    // registered) that the worker never made is refused: the id alone is
    // not its session.
    let mut client = h.client().await;
    let err = within(
        STEP,
        "ProposeBind",
        client.propose_bind(flotilla_proto::v1::BindProposal {
            worker_id: "1".into(),
            pod: Some(crate::pod_ref("picky")),
            node_name: "n1".into(),
            alternatives: Vec::new(),
            gpu_devices: 0,
        }),
    )
    .await
    .expect_err("a forged proposal is refused");
    assert_eq!(err.code(), tonic::Code::Unauthenticated, "{err:?}");
    assert_eq!(h.cluster.write_counts().0, 0, "nothing bound");
    // In process (no session check), the arbiter grants it (it checks
    // room, not gates), so the coordinator confirms to the worker a
    // binding it has no assumed pod for.
    let d = h
        .coordinator
        .propose(1, &crate::pod_ref_of("picky"), "n1")
        .await;
    assert_eq!(d, flotilla_coordinator::state::Decision::Bound, "{d:?}");
    // Out of step, the worker starts a new session from a fresh replay
    // (where picky is an ordinary bound pod) instead of carrying on with a
    // cache that lacks a bound pod.
    let w = &workers[0];
    wait_until(OUTCOME, "the worker registering again", || {
        w.stats.reconnects.load(Ordering::Relaxed) == 1 && w.stats.ready.load(Ordering::Acquire)
    })
    .await;
    wait_until(STEP, "the new session live", || c.live_workers() == 1).await;
    stop(h, workers).await;
}

/// A worker whose profiles are not the coordinator's (another `--config`)
/// is told apart at registration (the coordinator warns) but still joins,
/// since equal configurations can be written differently; one with the
/// same configuration is not told apart.
#[tokio::test]
async fn a_worker_with_other_profiles_is_noticed_and_still_joins() {
    use flotilla_scheduler::Profile;
    use flotilla_scheduler::config;

    let yaml = "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n\
        profiles:\n- pluginConfig:\n  - name: NodeResourcesFit\n    args:\n      \
        ignoredResourceGroups: [example.com]\n";
    let sched = config::parse(yaml, "ign.yaml").expect("valid configuration");
    let served = sched
        .served_profiles(&Registry::in_tree())
        .expect("profiles build");
    let h = Harness::serving(EmbeddedCluster::new(), served).await;
    let other = Profile::fingerprint_of(&[Profile::default()]);
    let same = Profile::fingerprint_of(&sched.profiles);
    let why = h
        .coordinator
        .admits_profiles(other)
        .expect_err("told apart");
    assert!(why.contains("same --config"), "{why}");
    h.coordinator
        .admits_profiles(same)
        .expect("the same profiles");
    h.coordinator.admits_profiles(0).expect("not given");

    // The worker with the default profiles still joins.
    let cfg = WorkerConfig::new(&h.url(), "online-0", WorkloadClass::Online);
    let token = h.token.child_token();
    let t = token.clone();
    let handle = tokio::spawn(async move {
        worker::run(
            cfg,
            &Registry::in_tree(),
            Arc::new(WorkerStats::default()),
            t,
        )
        .await
    });
    let c = h.coordinator.clone();
    wait_until(STEP, "the worker joining", || c.live_workers() == 1).await;
    token.cancel();
    let _ = handle.await;
}

mod volumes {
    //! The volume Filters end to end: the objects flow from the embedded
    //! cluster through the coordinator to a real worker.

    use std::sync::Arc;

    use flotilla_coordinator::cluster::EmbeddedCluster;
    use flotilla_shared::WorkloadClass;
    use flotilla_shared::testing::volumes::{PvBuilder, PvcBuilder, storage_class};
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use flotilla_shared::volumes::model::LABEL_ZONE;
    use flotilla_shared::volumes::{VolumeKey, VolumeKind, VolumeObject};
    use k8s_openapi::api::core::v1::Pod;

    use super::{CLASS_LABEL, Worker, start_workers, stop};
    use crate::{Harness, OUTCOME, node_of, unschedulable_message, wait_until};

    fn claim(c: PvcBuilder) -> VolumeObject {
        VolumeObject::Claim(Arc::new(c.build()))
    }

    fn pv(p: PvBuilder) -> VolumeObject {
        VolumeObject::Pv(Arc::new(p.build()))
    }

    /// `nodes` as `(name, zone)`, with room for everything (and their
    /// `kubernetes.io/hostname` label).
    fn cluster(nodes: &[(&str, &str)]) -> EmbeddedCluster {
        let c = EmbeddedCluster::new();
        for (n, zone) in nodes {
            c.apply_node(
                NodeBuilder::new(n)
                    .cpu("8")
                    .memory("32Gi")
                    .pods(110)
                    .label(LABEL_ZONE, zone)
                    .label(HOSTNAME, n)
                    .build(),
            )
            .expect("node");
        }
        c
    }

    const HOSTNAME: &str = "kubernetes.io/hostname";

    fn class(name: &str, provisioner: &str) -> VolumeObject {
        VolumeObject::StorageClass(Arc::new(storage_class(
            name,
            provisioner,
            Some("WaitForFirstConsumer"),
        )))
    }

    /// An unbound 1Gi claim of `class`.
    fn wffc_claim(name: &str, class: &str) -> VolumeObject {
        claim(
            PvcBuilder::new(name)
                .class(class)
                .storage("1Gi")
                .access_mode("ReadWriteOnce"),
        )
    }

    /// An available 10Gi PV of class `local`, reachable from `node` only
    /// (`None`: from every node).
    fn local_pv(name: &str, node: Option<&str>) -> VolumeObject {
        let b = PvBuilder::new(name)
            .class("local")
            .capacity("10Gi")
            .access_mode("ReadWriteOnce")
            .available();
        pv(match node {
            Some(n) => b.node_affinity(HOSTNAME, "In", &[n]),
            None => b,
        })
    }

    /// The claim `name` as the cluster holds it.
    fn claim_in(h: &Harness, name: &str) -> Arc<k8s_openapi::api::core::v1::PersistentVolumeClaim> {
        match h.cluster.volume_object(&VolumeKey {
            kind: VolumeKind::Claim,
            namespace: "default".into(),
            name: name.into(),
        }) {
            Some(VolumeObject::Claim(c)) => c,
            other => panic!("claim {name}: {other:?}"),
        }
    }

    /// Every PV in the cluster: (name, the claim its `claimRef` names).
    fn pv_claims(h: &Harness) -> Vec<(String, Option<String>)> {
        h.cluster
            .volumes()
            .iter()
            .filter_map(|o| match o {
                VolumeObject::Pv(pv) => Some((
                    pv.metadata.name.clone().unwrap_or_default(),
                    pv.spec
                        .as_ref()
                        .and_then(|s| s.claim_ref.as_ref())
                        .and_then(|r| r.name.clone()),
                )),
                _ => None,
            })
            .collect()
    }

    fn annotation<'a>(
        c: &'a k8s_openapi::api::core::v1::PersistentVolumeClaim,
        key: &str,
    ) -> Option<&'a str> {
        c.metadata
            .annotations
            .as_ref()?
            .get(key)
            .map(String::as_str)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn wait_for_first_consumer_claims_get_a_static_pv_the_node_reaches_or_one_provisioned_there()
     {
        let c = cluster(&[("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b")]);
        for o in [
            class(
                "local",
                flotilla_shared::volumes::binding::NOT_SUPPORTED_PROVISIONER,
            ),
            class("fast", "csi.example.com"),
            local_pv("local-n2", Some("n2")),
            local_pv("local-n4", Some("n4")),
            wffc_claim("s0", "local"),
            wffc_claim("s1", "local"),
            wffc_claim("d0", "fast"),
        ] {
            c.apply_volume(o).expect("volume object");
        }
        let h = Harness::start(c).await;
        let workers = start_workers(&h, &[("online-0", WorkloadClass::Online)]).await;
        for (p, cl) in [("ps0", "s0"), ("ps1", "s1"), ("pd0", "d0")] {
            h.cluster.create_pod(pod(p, cl)).expect("pod");
        }
        let mut static_nodes = vec![bound_node(&h, "ps0").await, bound_node(&h, "ps1").await];
        static_nodes.sort();
        assert_eq!(
            static_nodes,
            ["n2", "n4"],
            "each on the node its PV reaches"
        );
        for (p, cl) in [("ps0", "s0"), ("ps1", "s1")] {
            let node = bound_node(&h, p).await;
            let claim = claim_in(&h, cl);
            let pv = claim.spec.as_ref().and_then(|s| s.volume_name.clone());
            assert_eq!(
                pv,
                Some(format!("local-{node}")),
                "{cl} bound to the PV of {node}"
            );
        }
        let node = bound_node(&h, "pd0").await;
        let d0 = claim_in(&h, "d0");
        assert_eq!(
            annotation(&d0, "volume.kubernetes.io/selected-node"),
            Some(node.as_str()),
            "provisioned where the pod went"
        );
        assert_eq!(
            d0.spec.as_ref().and_then(|s| s.volume_name.as_deref()),
            Some("pvc-uid-d0")
        );
        stop(h, workers).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn four_real_workers_never_bind_one_static_pv_to_two_claims() {
        const ROUNDS: usize = 3;
        const PVS: usize = 3;
        let c = cluster(&[("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b")]);
        c.apply_volume(class(
            "local",
            flotilla_shared::volumes::binding::NOT_SUPPORTED_PROVISIONER,
        ))
        .expect("class");
        let h = Harness::start(c).await;
        let workers = four_workers(&h).await;
        for r in 0..ROUNDS {
            // PVS free PVs, twice as many claims (and pods) wanting them.
            for i in 0..PVS {
                h.cluster
                    .apply_volume(local_pv(&format!("pv-{r}-{i}"), None))
                    .expect("pv");
            }
            for i in 0..2 * PVS {
                h.cluster
                    .apply_volume(wffc_claim(&format!("c-{r}-{i}"), "local"))
                    .expect("claim");
            }
            let cl = h.coordinator.clone();
            let want = 1 + (r + 1) * 3 * PVS;
            wait_until(crate::STEP, "the round's objects seen", || {
                cl.volume_objects() == want
            })
            .await;
            for i in 0..2 * PVS {
                h.cluster
                    .create_pod(pod(&format!("p-{r}-{i}"), &format!("c-{r}-{i}")))
                    .expect("pod");
            }
            let (mut bound, mut pending) = (Vec::new(), Vec::new());
            for i in 0..2 * PVS {
                let name = format!("p-{r}-{i}");
                let cluster = h.cluster.clone();
                let n = name.clone();
                wait_until(OUTCOME, "each pod bound or told why not", move || {
                    cluster.pod("default", &n).is_some_and(|p| {
                        node_of(&p).is_some() || unschedulable_message(&p).is_some()
                    })
                })
                .await;
                let p = h.cluster.pod("default", &name).expect("pod");
                match node_of(&p) {
                    Some(_) => bound.push(format!("c-{r}-{i}")),
                    None => {
                        pending.push(name.clone());
                        let m = unschedulable_message(&p).unwrap_or_default();
                        assert!(
                            m.contains("didn't find available persistent volumes to bind"),
                            "{name}: {m}"
                        );
                    }
                }
            }
            assert_eq!(bound.len(), PVS, "round {r}: one pod per PV: {bound:?}");
            // Each PV bound to exactly one claim, each a bound pod's, and
            // each such claim bound to its own PV.
            let prefix = format!("pv-{r}-");
            let mut owners: Vec<String> = pv_claims(&h)
                .into_iter()
                .filter(|(pv, _)| pv.starts_with(&prefix))
                .map(|(pv, owner)| owner.unwrap_or_else(|| panic!("{pv} left free")))
                .collect();
            owners.sort();
            bound.sort();
            assert_eq!(owners, bound, "round {r}");
            let mut pvs: Vec<String> = bound
                .iter()
                .filter_map(|c| claim_in(&h, c).spec.as_ref()?.volume_name.clone())
                .collect();
            pvs.sort();
            pvs.dedup();
            assert_eq!(pvs.len(), PVS, "round {r}: distinct PVs");
            // The losers would take the next round's PVs.
            for p in pending {
                h.cluster.delete_pod("default", &p).expect("delete");
            }
        }
        stop(h, workers).await;
    }

    /// Four real online workers on `h`.
    async fn four_workers(h: &Harness) -> Vec<Worker> {
        let names: Vec<String> = (0..4).map(|i| format!("online-{i}")).collect();
        let spec: Vec<(&str, WorkloadClass)> = names
            .iter()
            .map(|n| (n.as_str(), WorkloadClass::Online))
            .collect();
        start_workers(h, &spec).await
    }

    /// Waits until each of `pods` is bound or told why not; returns the
    /// bound ones' nodes and the others' messages.
    async fn outcomes(h: &Harness, pods: &[String]) -> (Vec<String>, Vec<String>) {
        let (mut nodes, mut messages) = (Vec::new(), Vec::new());
        for name in pods {
            let cluster = h.cluster.clone();
            let n = name.clone();
            wait_until(OUTCOME, "each pod bound or told why not", move || {
                cluster
                    .pod("default", &n)
                    .is_some_and(|p| node_of(&p).is_some() || unschedulable_message(&p).is_some())
            })
            .await;
            let p = h.cluster.pod("default", name).expect("pod");
            match node_of(&p) {
                Some(n) => nodes.push(n.to_owned()),
                None => messages.push(unschedulable_message(&p).unwrap_or_default().to_owned()),
            }
        }
        (nodes, messages)
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn four_real_workers_never_place_two_pods_using_one_read_write_once_pod_claim() {
        const ROUNDS: usize = 3;
        let c = cluster(&[("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b")]);
        let h = Harness::start(c).await;
        let workers = four_workers(&h).await;
        for r in 0..ROUNDS {
            let (claim_name, pv_name) = (format!("solo-{r}"), format!("pv-solo-{r}"));
            h.cluster
                .apply_volume(pv(PvBuilder::new(&pv_name)))
                .expect("pv");
            h.cluster
                .apply_volume(claim(
                    PvcBuilder::new(&claim_name)
                        .access_mode("ReadWriteOncePod")
                        .bound_to(&pv_name),
                ))
                .expect("claim");
            let cl = h.coordinator.clone();
            wait_until(crate::STEP, "the round's objects seen", move || {
                cl.volume_objects() == 2 * (r + 1)
            })
            .await;
            let pods: Vec<String> = (0..8).map(|i| format!("p-{r}-{i}")).collect();
            for p in &pods {
                h.cluster.create_pod(pod(p, &claim_name)).expect("pod");
            }
            let (bound, messages) = outcomes(&h, &pods).await;
            assert_eq!(
                bound.len(),
                1,
                "round {r}: one user of the claim: {bound:?}"
            );
            for m in &messages {
                assert!(
                    m.contains(
                        flotilla_shared::volumes::restrictions::REASON_READ_WRITE_ONCE_POD_CONFLICT
                    ),
                    "round {r}: {m}"
                );
            }
            for p in &pods {
                h.cluster.delete_pod("default", p).expect("delete");
            }
        }
        stop(h, workers).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn four_real_workers_never_together_push_a_node_over_its_csi_attach_limit() {
        const DRIVER: &str = "ebs.csi.aws.com";
        let nodes = [("n1", "a"), ("n2", "a"), ("n3", "b"), ("n4", "b")];
        let c = cluster(&nodes);
        // Each node attaches at most two volumes of the driver.
        for (n, _) in nodes {
            c.apply_volume(VolumeObject::CsiNode(Arc::new(
                flotilla_shared::testing::volumes::csi_node(n, &[(DRIVER, Some(2))]),
            )))
            .expect("csinode");
        }
        // Twelve pods, each with its own CSI volume: room for eight.
        for i in 0..12 {
            let (claim_name, pv_name) = (format!("c{i}"), format!("pv-c{i}"));
            c.apply_volume(pv(PvBuilder::new(&pv_name).csi(DRIVER, &format!("vol-{i}"))))
                .expect("pv");
            c.apply_volume(claim(
                PvcBuilder::new(&claim_name)
                    .access_mode("ReadWriteOnce")
                    .bound_to(&pv_name),
            ))
            .expect("claim");
        }
        let h = Harness::start(c).await;
        let workers = four_workers(&h).await;
        let pods: Vec<String> = (0..12).map(|i| format!("p{i}")).collect();
        for (i, p) in pods.iter().enumerate() {
            h.cluster.create_pod(pod(p, &format!("c{i}"))).expect("pod");
        }
        let (bound, messages) = outcomes(&h, &pods).await;
        assert_eq!(bound.len(), 8, "two a node: {bound:?}");
        for (n, _) in nodes {
            let on = bound.iter().filter(|b| *b == n).count();
            assert_eq!(on, 2, "{n} holds {on} volumes of a limit of 2");
        }
        for m in &messages {
            assert!(
                m.contains(flotilla_shared::volumes::limits::REASON_MAX_VOLUME_COUNT),
                "{m}"
            );
        }
        stop(h, workers).await;
    }

    fn pod(name: &str, claim: &str) -> Pod {
        PodBuilder::new(name)
            .cpu("100m")
            .label(CLASS_LABEL, "online")
            .pvc_volume("data", claim)
            .build()
    }

    /// `read(pod)` of pod `name`, once it is `Some` (waiting up to
    /// [`OUTCOME`] for `what`).
    async fn wait_for_pod(
        h: &Harness,
        name: &str,
        what: &str,
        read: fn(&Pod) -> Option<&str>,
    ) -> String {
        let cluster = h.cluster.clone();
        let name = name.to_owned();
        let current = move || {
            cluster
                .pods()
                .iter()
                .find(|p| p.metadata.name.as_deref() == Some(&name))
                .and_then(|p| read(p).map(str::to_owned))
        };
        let c = current.clone();
        wait_until(OUTCOME, what, move || c().is_some()).await;
        current().unwrap_or_default()
    }

    /// The message of `name`'s `PodScheduled=False` condition, once set.
    async fn pending_message(h: &Harness, name: &str) -> String {
        wait_for_pod(
            h,
            name,
            "the pod reported unschedulable",
            unschedulable_message,
        )
        .await
    }

    /// The node `name` is bound to, once bound.
    async fn bound_node(h: &Harness, name: &str) -> String {
        wait_for_pod(h, name, "the pod bound", node_of).await
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_pod_whose_bound_pv_is_in_zone_a_lands_only_on_zone_a_nodes() {
        let c = cluster(&[("n1", "a"), ("n2", "b"), ("n3", "a"), ("n4", "b")]);
        for i in 0..6 {
            let (name, pv_name) = (format!("data-{i}"), format!("pv-{i}"));
            c.apply_volume(pv(PvBuilder::new(&pv_name).label(LABEL_ZONE, "a")))
                .expect("pv");
            c.apply_volume(claim(PvcBuilder::new(&name).bound_to(&pv_name)))
                .expect("claim");
        }
        let h = Harness::start(c).await;
        let workers = start_workers(&h, &[("online-0", WorkloadClass::Online)]).await;
        for i in 0..6 {
            h.cluster
                .create_pod(pod(&format!("p{i}"), &format!("data-{i}")))
                .expect("pod");
        }
        for i in 0..6 {
            let node = bound_node(&h, &format!("p{i}")).await;
            assert!(
                node == "n1" || node == "n3",
                "p{i} on {node}, outside zone a"
            );
        }
        stop(h, workers).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_pod_whose_read_write_once_pod_claim_is_in_use_waits_until_its_user_is_deleted() {
        let c = cluster(&[("n1", "a"), ("n2", "a")]);
        c.apply_volume(pv(PvBuilder::new("pv-solo"))).expect("pv");
        c.apply_volume(claim(
            PvcBuilder::new("solo")
                .access_mode("ReadWriteOncePod")
                .bound_to("pv-solo"),
        ))
        .expect("claim");
        let h = Harness::start(c).await;
        let workers = start_workers(&h, &[("online-0", WorkloadClass::Online)]).await;
        h.cluster.create_pod(pod("first", "solo")).expect("pod");
        bound_node(&h, "first").await;
        h.cluster.create_pod(pod("second", "solo")).expect("pod");
        assert_eq!(
            pending_message(&h, "second").await,
            "0/2 nodes are available: 2 node(s) unavailable due to PersistentVolumeClaim with \
             ReadWriteOncePod access mode already in-use by another pod. preemption: 0/2 nodes \
             are available: 2 No preemption victims found for incoming pod."
        );
        // The user deleted (AssignedPodDeleted): the claim is free.
        h.cluster.delete_pod("default", "first").expect("delete");
        bound_node(&h, "second").await;
        stop(h, workers).await;
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 4)]
    async fn a_missing_claim_or_an_unknown_binding_mode_is_told_on_the_pod_and_retried_when_fixed()
    {
        let c = cluster(&[("n1", "a"), ("n2", "b")]);
        let bad_class = storage_class("odd", "example.com/csi", Some("Sometimes"));
        c.apply_volume(VolumeObject::StorageClass(Arc::new(bad_class)))
            .expect("class");
        c.apply_volume(claim(PvcBuilder::new("unbound").class("odd")))
            .expect("claim");
        let wait = storage_class("wait", "example.com/csi", Some("WaitForFirstConsumer"));
        c.apply_volume(VolumeObject::StorageClass(Arc::new(wait)))
            .expect("class");
        let h = Harness::start(c).await;
        let workers = start_workers(&h, &[("online-0", WorkloadClass::Online)]).await;

        h.cluster.create_pod(pod("orphan", "ghost")).expect("pod");
        assert_eq!(
            pending_message(&h, "orphan").await,
            "0/2 nodes are available: persistentvolumeclaim \"ghost\" not found. preemption: \
             0/2 nodes are available: 2 Preemption is not helpful for scheduling."
        );
        h.cluster
            .create_pod(pod("odd-class", "unbound"))
            .expect("pod");
        let m = pending_message(&h, "odd-class").await;
        assert!(
            m.contains("StorageClass odd") && m.contains("volumeBindingMode"),
            "names the object and the field: {m}"
        );

        // Each is retried when its object appears or is fixed.
        h.cluster
            .apply_volume(claim(PvcBuilder::new("ghost").class("wait")))
            .expect("claim");
        bound_node(&h, "orphan").await;
        let fixed = storage_class("odd", "example.com/csi", Some("WaitForFirstConsumer"));
        h.cluster
            .apply_volume(VolumeObject::StorageClass(Arc::new(fixed)))
            .expect("class");
        bound_node(&h, "odd-class").await;
        h.cluster
            .delete_volume(&VolumeKey {
                kind: VolumeKind::StorageClass,
                namespace: String::new(),
                name: "odd".into(),
            })
            .expect("delete");
        stop(h, workers).await;
    }
}
