//! Bindings that fail at the cluster, through a backend whose `bind` waits
//! for the test to release it with an injected result.

use std::sync::Arc;

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use flotilla_coordinator::cluster::{
    ClaimTarget, Cluster, ClusterError, ClusterList, EmbeddedCluster, ListWatch, PodRef,
    SchedulingEvent, WatchEvent, list_watch,
};
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::WorkloadClass::Online;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{FakeWorker, Harness, STEP, assigned_names, node_of, pod_ref, wait_until, within};

const CLASS_LABEL: &str = "flotilla.io/workload-class";

/// The embedded cluster, except that while a gate is armed the next `bind`
/// waits for it and returns what the test sends (`Ok` = really bind).
struct GatedCluster {
    inner: Arc<EmbeddedCluster>,
    gate: Mutex<Option<oneshot::Receiver<Result<(), ClusterError>>>>,
    /// An injected error still binds (a request the server applied whose
    /// answer was lost).
    lands: std::sync::atomic::AtomicBool,
}

impl GatedCluster {
    /// Arms the gate; send on the returned sender to release the bind.
    fn arm(&self) -> oneshot::Sender<Result<(), ClusterError>> {
        let (tx, rx) = oneshot::channel();
        *self.gate.lock() = Some(rx);
        tx
    }
}

#[tonic::async_trait]
impl ListWatch for GatedCluster {
    async fn list(&self) -> Result<ClusterList, ClusterError> {
        self.inner.list().await
    }

    fn watch(&self, resource_version: u64) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        self.inner.watch(resource_version)
    }
}

#[tonic::async_trait]
impl Cluster for GatedCluster {
    fn changes(self: Arc<Self>) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        list_watch(self)
    }

    async fn annotate_pod(
        &self,
        pod: &PodRef,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        self.inner.annotate_pod(pod, annotations).await
    }

    async fn bind(
        &self,
        pod: &PodRef,
        node: &str,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        let gate = self.gate.lock().take();
        if let Some(rx) = gate {
            let injected = rx
                .await
                .unwrap_or_else(|_| Err(ClusterError::Unavailable("gate dropped".into())));
            if injected.is_err() && self.lands.load(std::sync::atomic::Ordering::SeqCst) {
                self.inner.bind(pod, node, annotations).await?;
            }
            injected?;
        }
        self.inner.bind(pod, node, annotations).await
    }

    async fn bind_pv(&self, pv: &str, claim: &ClaimTarget<'_>) -> Result<(), ClusterError> {
        self.inner.bind_pv(pv, claim).await
    }

    async fn select_node(&self, ns: &str, claim: &str, node: &str) -> Result<(), ClusterError> {
        self.inner.select_node(ns, claim, node).await
    }

    async fn mark_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.inner.mark_unschedulable(pod, message).await
    }

    fn record_event(&self, event: SchedulingEvent) {
        self.inner.record_event(event);
    }

    async fn delete_pod(&self, pod: &PodRef, grace: Option<i64>) -> Result<(), ClusterError> {
        Cluster::delete_pod(&*self.inner, pod, grace).await
    }

    async fn set_nominated_node(&self, pod: &Pod, node: Option<&str>) -> Result<(), ClusterError> {
        self.inner.set_nominated_node(pod, node).await
    }
}

async fn start() -> (Harness, Arc<GatedCluster>) {
    let cluster = Arc::new(EmbeddedCluster::new());
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    let gated = Arc::new(GatedCluster {
        inner: cluster.clone(),
        gate: Mutex::new(None),
        lands: std::sync::atomic::AtomicBool::new(false),
    });
    let h = Harness::start_with(gated.clone(), cluster).await;
    (h, gated)
}

/// [`start`] with pods `a` and `b` of 4 CPU (each fills n1) recorded and
/// a worker joined.
async fn start_with_two_pods() -> (Harness, Arc<GatedCluster>, FakeWorker) {
    let (h, gated) = start().await;
    for p in ["a", "b"] {
        h.cluster
            .create_pod(PodBuilder::new(p).cpu("4").build())
            .expect("pod");
        h.wait_for_record(&format!("uid-{p}")).await;
    }
    let w = FakeWorker::join(&h, "online-0", Online).await;
    (h, gated, w)
}

/// ProposeBind as a task (the proposal outlives the caller's borrow).
fn propose_in_background(
    w: &FakeWorker,
    pod: &str,
    node: &str,
) -> tokio::task::JoinHandle<Result<pb::BindDecision, tonic::Status>> {
    let mut client = w.client.clone();
    let req = pb::BindProposal {
        worker_id: w.id.clone(),
        pod: Some(pod_ref(pod)),
        node_name: node.into(),
        alternatives: Vec::new(),
        gpu_devices: 0,
    };
    tokio::spawn(async move {
        client
            .propose_bind(req)
            .await
            .map(tonic::Response::into_inner)
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_binding_that_fails_at_the_cluster_is_an_error_and_frees_the_room() {
    let (h, gated) = start().await;
    h.cluster
        .create_pod(PodBuilder::new("a").cpu("4").build())
        .expect("pod");
    h.wait_for_record("uid-a").await;
    let w = FakeWorker::join(&h, "online-0", Online).await;

    let release = gated.arm();
    let proposal = propose_in_background(&w, "a", "n1");
    let c = h.coordinator.clone();
    wait_until(STEP, "the grant", || c.summary().granting == 1).await;
    assert_eq!(
        c.node_pods("n1").expect("n1").len(),
        1,
        "a grant holds the room while the Binding is written"
    );
    release
        .send(Err(ClusterError::Unavailable("injected".into())))
        .expect("bind is waiting");
    let d = within(STEP, "the failed proposal", proposal)
        .await
        .expect("no panic")
        .expect("ProposeBind answers");
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Error), "{d:?}");
    assert!(d.reason.contains("injected"), "reason: {:?}", d.reason);
    assert!(
        c.node_pods("n1").expect("n1").is_empty(),
        "the room is free again"
    );
    assert_eq!(node_of(&h.cluster.pod("default", "a").expect("pod")), None);
    let s = c.summary();
    assert_eq!(
        (s.pending, s.granting, s.bound, s.counters.bind_errors),
        (1, 0, 0, 1)
    );

    // The retry binds.
    let d = w.propose("a", "n1").await;
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Bound), "{d:?}");
    assert_eq!(
        node_of(&h.cluster.pod("default", "a").expect("pod")),
        Some("n1")
    );
    h.shutdown().await;
}

/// Proposes `pod` on `node` in the background, answers its Binding
/// "outcome unknown" and waits until that is counted; the retry's gate is
/// armed (send on the returned sender to answer it).
async fn propose_with_unknown_outcome(
    h: &Harness,
    gated: &GatedCluster,
    w: &FakeWorker,
    pod: &str,
    node: &str,
) -> (
    tokio::task::JoinHandle<Result<pb::BindDecision, tonic::Status>>,
    oneshot::Sender<Result<(), ClusterError>>,
) {
    let c = h.coordinator.clone();
    let first = gated.arm();
    let proposal = propose_in_background(w, pod, node);
    wait_until(STEP, "the grant", || c.summary().granting == 1).await;
    // Re-armed before the retry (0.1 s later): the retry waits too.
    let retry = gated.arm();
    first
        .send(Err(ClusterError::OutcomeUnknown(
            "no answer within 30s".into(),
        )))
        .expect("bind is waiting");
    wait_until(STEP, "the outcome counted unknown", || {
        c.summary().counters.bind_outcomes_unknown == 1
    })
    .await;
    (proposal, retry)
}

/// A Binding sent and never answered keeps its room (no other pod may
/// take it: the server may still apply it) and is sent again until an
/// answer comes; the pod is then bound once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_binding_whose_outcome_is_unknown_keeps_its_room_until_it_is_known() {
    let (h, gated, w) = start_with_two_pods().await;
    let c = h.coordinator.clone();
    let (proposal, second) = propose_with_unknown_outcome(&h, &gated, &w, "a", "n1").await;
    // While unknown: the room is held, and another pod cannot take it.
    assert_eq!(c.summary().granting, 1);
    assert_eq!(c.node_pods("n1").expect("n1").len(), 1);
    let d = w.propose("b", "n1").await;
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Conflict), "{d:?}");
    assert!(
        !proposal.is_finished(),
        "the worker still waits for the answer"
    );

    // The retry's answer comes: bound, once.
    second.send(Ok(())).expect("the retry is waiting");
    let d = within(STEP, "the answer", proposal)
        .await
        .expect("no panic")
        .expect("ProposeBind answers");
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Bound), "{d:?}");
    assert_eq!(
        node_of(&h.cluster.pod("default", "a").expect("pod")),
        Some("n1")
    );
    let s = c.summary();
    assert_eq!((s.counters.bind_errors, s.granting), (0, 0));
    h.shutdown().await;
}

/// Shutting down while a Binding's outcome is unknown gives up on it
/// without saying it failed: the Binding may have landed, so nothing is
/// written on the pod (no `Binding rejected` status on a pod that may be
/// bound); the next leader lists the truth.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn shutdown_during_an_unknown_outcome_writes_nothing_on_the_pod() {
    let (h, gated) = start().await;
    h.cluster
        .create_pod(PodBuilder::new("a").cpu("4").build())
        .expect("pod");
    h.wait_for_record("uid-a").await;
    let w = FakeWorker::join(&h, "online-0", Online).await;
    // The retry waits for ever: only shutdown ends it.
    let (proposal, _retry) = propose_with_unknown_outcome(&h, &gated, &w, "a", "n1").await;
    h.coordinator.close_streams();
    let _ = within(STEP, "the proposal ends", proposal).await;
    let pod = h.cluster.pod("default", "a").expect("pod");
    let conditions = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.clone())
        .unwrap_or_default();
    assert!(
        conditions.iter().all(|c| c.type_ != "PodScheduled"),
        "nothing said about a pod whose Binding may have landed: {conditions:?}"
    );
    assert_eq!(h.cluster.write_counts().1, 0, "no status written");
    h.shutdown().await;
}

/// A Binding given up at shutdown may still land (the server applies it
/// late): its room stays taken, so a proposal still answered while the
/// coordinator shuts down cannot put a second pod in it, and the node is
/// not over-committed when the first Binding lands.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_binding_given_up_at_shutdown_keeps_its_room() {
    let (h, gated, w) = start_with_two_pods().await;
    let (proposal, retry) = propose_with_unknown_outcome(&h, &gated, &w, "a", "n1").await;
    h.coordinator.close_streams();
    let _ = within(STEP, "the proposal ends", proposal).await;
    let c = h.coordinator.clone();
    assert_eq!(
        c.node_pods("n1").expect("n1").len(),
        1,
        "the room of a Binding that may land stays taken"
    );
    // No more gate: the next Binding is written at once.
    drop(retry);
    gated.gate.lock().take();
    // A proposal in flight as the coordinator shuts down (or refused, the
    // worker's session ended with its stream): never granted a's room.
    let answer = within(STEP, "ProposeBind", propose_in_background(&w, "b", "n1"))
        .await
        .expect("no panic");
    if let Ok(d) = answer {
        assert_eq!(d.outcome, i32::from(pb::BindOutcome::Conflict), "{d:?}");
    }
    // The first Binding lands late.
    h.cluster
        .bind(&crate::pod_ref_of("a"), "n1", &[])
        .await
        .expect("a's Binding lands");
    let on_n1 = ["a", "b"]
        .into_iter()
        .filter(|p| node_of(&h.cluster.pod("default", p).expect("pod")) == Some("n1"))
        .count();
    assert_eq!(on_n1, 1, "n1 (4 CPU) holds one 4-CPU pod");
    h.shutdown().await;
}

/// The first Binding landed though its answer was lost: the retry is
/// answered "already bound to this node", which is the pod bound.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_lost_answer_of_a_binding_that_landed_is_the_pod_bound() {
    let (h, gated) = start().await;
    h.cluster
        .create_pod(PodBuilder::new("a").cpu("4").build())
        .expect("pod");
    h.wait_for_record("uid-a").await;
    let w = FakeWorker::join(&h, "online-0", Online).await;
    let c = h.coordinator.clone();
    gated.lands.store(true, std::sync::atomic::Ordering::SeqCst);
    let first = gated.arm();
    let proposal = propose_in_background(&w, "a", "n1");
    wait_until(STEP, "the grant", || c.summary().granting == 1).await;
    first
        .send(Err(ClusterError::OutcomeUnknown("connection reset".into())))
        .expect("bind is waiting");
    let d = within(STEP, "the answer", proposal)
        .await
        .expect("no panic")
        .expect("ProposeBind answers");
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Bound), "{d:?}");
    let s = c.summary();
    assert_eq!(
        (
            s.bound,
            s.counters.bind_outcomes_unknown,
            s.counters.bind_errors
        ),
        (1, 1, 0)
    );
    assert_eq!(c.node_pods("n1").expect("n1").len(), 1, "counted once");
    h.shutdown().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_pod_whose_binding_fails_after_its_worker_left_goes_to_another_worker() {
    let (h, gated) = start().await;
    let mut w1 = FakeWorker::join(&h, "online-0", Online).await;
    let mut w2 = FakeWorker::join(&h, "online-1", Online).await;
    w1.until_synced().await;
    w2.until_synced().await;
    h.cluster
        .create_pod(
            PodBuilder::new("a")
                .cpu("1")
                .label(CLASS_LABEL, "online")
                .build(),
        )
        .expect("pod");
    // Fewest assigned pods, then lowest id: worker 1 gets it.
    let got = w1.read_until(|e| !assigned_names(e).is_empty()).await;
    assert_eq!(assigned_names(&got), ["a"]);

    let release = gated.arm();
    let proposal = propose_in_background(&w1, "a", "n1");
    let c = h.coordinator.clone();
    wait_until(STEP, "the grant", || c.summary().granting == 1).await;
    w1.leave();
    wait_until(STEP, "worker 1 leaving", || c.live_workers() == 1).await;
    release
        .send(Err(ClusterError::Unavailable("injected".into())))
        .expect("bind is waiting");
    let d = within(STEP, "the failed proposal", proposal)
        .await
        .expect("no panic")
        .expect("ProposeBind answers");
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Error), "{d:?}");

    // The pod is pending again and worker 2 is the only worker left.
    let got = w2.read_until(|e| !assigned_names(e).is_empty()).await;
    assert_eq!(assigned_names(&got), ["a"]);
    drop(w2);
    h.shutdown().await;
}

/// The embedded cluster, except that the first `failures` Bindings fail as
/// an unreachable API server would.
struct FailingBinds {
    inner: Arc<EmbeddedCluster>,
    failures: std::sync::atomic::AtomicUsize,
    attempts: std::sync::atomic::AtomicUsize,
}

#[tonic::async_trait]
impl Cluster for FailingBinds {
    fn changes(self: Arc<Self>) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        self.inner.clone().changes()
    }

    async fn annotate_pod(
        &self,
        pod: &PodRef,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        self.inner.annotate_pod(pod, annotations).await
    }

    async fn bind(
        &self,
        pod: &PodRef,
        node: &str,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        use std::sync::atomic::Ordering::SeqCst;
        self.attempts.fetch_add(1, SeqCst);
        let failing = self
            .failures
            .fetch_update(SeqCst, SeqCst, |n| n.checked_sub(1))
            .is_ok();
        if failing {
            return Err(ClusterError::Unavailable(
                "connection refused (injected)".into(),
            ));
        }
        self.inner.bind(pod, node, annotations).await
    }

    async fn bind_pv(&self, pv: &str, claim: &ClaimTarget<'_>) -> Result<(), ClusterError> {
        self.inner.bind_pv(pv, claim).await
    }

    async fn select_node(&self, ns: &str, claim: &str, node: &str) -> Result<(), ClusterError> {
        self.inner.select_node(ns, claim, node).await
    }

    async fn mark_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.inner.mark_unschedulable(pod, message).await
    }

    fn record_event(&self, event: SchedulingEvent) {
        self.inner.record_event(event);
    }

    async fn delete_pod(&self, pod: &PodRef, grace: Option<i64>) -> Result<(), ClusterError> {
        Cluster::delete_pod(&*self.inner, pod, grace).await
    }

    async fn set_nominated_node(&self, pod: &Pod, node: Option<&str>) -> Result<(), ClusterError> {
        self.inner.set_nominated_node(pod, node).await
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_real_worker_retries_an_unavailable_binding_until_the_pod_is_bound() {
    use flotilla_scheduler::Registry;
    use flotilla_scheduler::worker::{self, WorkerConfig, WorkerStats};
    use flotilla_shared::WorkloadClass;
    use std::sync::atomic::Ordering::SeqCst;

    let cluster = Arc::new(EmbeddedCluster::new());
    cluster
        .apply_node(NodeBuilder::new("n1").cpu("4").pods(110).build())
        .expect("node");
    let backend = Arc::new(FailingBinds {
        inner: cluster.clone(),
        failures: 2.into(),
        attempts: 0.into(),
    });
    let h = Harness::start_with(backend.clone(), cluster).await;
    let stats = Arc::new(WorkerStats::default());
    let cfg = WorkerConfig::new(&h.url(), "online-0", WorkloadClass::Online);
    let (st, token) = (stats.clone(), h.token.clone());
    let handle =
        tokio::spawn(async move { worker::run(cfg, &Registry::in_tree(), st, token).await });
    h.cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");

    let c = h.cluster.clone();
    wait_until(
        crate::OUTCOME,
        "pod a bound after two failed Bindings",
        || c.pod("default", "a").is_some_and(|p| node_of(&p).is_some()),
    )
    .await;
    assert_eq!(
        node_of(&h.cluster.pod("default", "a").expect("pod")),
        Some("n1")
    );
    assert_eq!(
        backend.attempts.load(SeqCst),
        3,
        "two failures, one success"
    );
    let coord = h.coordinator.clone();
    wait_until(STEP, "the worker settling", || {
        stats.is_idle() && coord.summary().granting == 0
    })
    .await;
    // Each failure was forgotten and re-queued, never dropped: the worker
    // holds nothing (no assumed pod, nothing queued or in flight).
    assert_eq!(stats.errors.load(SeqCst), 2);
    assert_eq!(stats.bound.load(SeqCst), 1);
    let s = h.coordinator.summary();
    assert_eq!(
        (s.bound, s.pending, s.granting, s.counters.bind_errors),
        (1, 0, 0, 2)
    );
    assert_eq!(
        h.coordinator.node_pods("n1").expect("n1").len(),
        1,
        "the room is counted once"
    );
    let scheduled = h
        .cluster
        .events()
        .iter()
        .filter(|e| e.reason == "Scheduled")
        .count();
    assert_eq!(
        scheduled, 1,
        "one Scheduled event, for the Binding that worked"
    );
    h.token.cancel();
    within(STEP, "worker stopping", handle)
        .await
        .expect("no panic")
        .expect("worker stops cleanly");
    h.shutdown().await;
}

/// A worker killed while its unary ProposeBind waits for the Binding: the
/// call is dropped with the connection, but the arbitration runs on, so the
/// grant is settled (the pod bound once), never left granted for ever.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_grant_is_settled_when_its_worker_dies_mid_call() {
    let (h, gated) = start().await;
    h.cluster
        .create_pod(PodBuilder::new("a").cpu("1").build())
        .expect("pod");
    h.wait_for_record("uid-a").await;
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.read_until(|e| !assigned_names(e).is_empty()).await;
    let release = gated.arm();
    let proposal = propose_in_background(&w, "a", "n1");
    let c = h.coordinator.clone();
    wait_until(STEP, "the grant", || c.summary().granting == 1).await;
    proposal.abort();
    drop(w);
    wait_until(STEP, "the worker gone", || c.live_workers() == 0).await;
    release
        .send(Ok(()))
        .expect("the Binding still waits: its arbitration outlived the call");
    let cl = h.cluster.clone();
    wait_until(STEP, "pod a bound", || {
        cl.pod("default", "a")
            .is_some_and(|p| node_of(&p) == Some("n1"))
    })
    .await;
    wait_until(STEP, "the grant settled", || {
        let s = c.summary();
        (s.granting, s.bound) == (0, 1)
    })
    .await;
    h.shutdown().await;
}

/// A gang proposed in the background: the coordinator, the gate of the
/// Binding it holds, the proposal, and the proposing worker's stream.
type HeldGang = (
    Arc<flotilla_coordinator::Coordinator>,
    oneshot::Sender<Result<(), ClusterError>>,
    tokio::task::JoinHandle<flotilla_coordinator::state::GangDecision>,
    tokio::sync::mpsc::UnboundedReceiver<flotilla_coordinator::state::WorkerEvent>,
);

/// Gang `pg` (m0, m1 of 2 CPU, both needed) proposed on n1 by a batch
/// worker in the background, once one member's Binding is held at the
/// gate (send on the returned sender to answer it).
async fn propose_gang_with_one_binding_held(h: &Harness, gated: &GatedCluster) -> HeldGang {
    h.cluster
        .apply_pod_group(crate::gang::pod_group("pg", 2, None))
        .expect("group");
    for m in ["m0", "m1"] {
        h.cluster
            .create_pod(crate::gang::member(m, "pg", "2"))
            .expect("pod");
    }
    let c = h.coordinator.clone();
    wait_until(STEP, "both members known", || c.records().len() == 2).await;
    let (w, _) = c.register("batch-0", flotilla_shared::WorkloadClass::Batch);
    let events = c.attach(w).expect("attach");
    let refs: Vec<(PodRef, String)> = ["m0", "m1"]
        .iter()
        .map(|m| {
            let p = h.cluster.pod("default", m).expect("pod");
            (PodRef::of(&p), "n1".to_owned())
        })
        .collect();
    let first = gated.arm();
    let c2 = c.clone();
    let proposal = tokio::spawn(async move { c2.propose_gang(w, "default/pg", &refs).await });
    wait_until(STEP, "the grant, one Binding held", || {
        let s = c.summary();
        s.granting >= 1 && s.granting + s.bound == 2
    })
    .await;
    (c, first, proposal, events)
}

/// A gang member's Binding given up at shutdown, its outcome unknown,
/// keeps its room as a single pod's does, and is not handed back to be
/// proposed again (it may be bound).
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_member_given_up_at_shutdown_keeps_its_room() {
    let (h, gated) = start().await;
    let (c, first, proposal, _events) = propose_gang_with_one_binding_held(&h, &gated).await;
    // The retry waits for ever: only shutdown ends it.
    let _retry = gated.arm();
    first
        .send(Err(ClusterError::OutcomeUnknown("connection reset".into())))
        .expect("a member's Binding waits");
    wait_until(STEP, "the outcome counted unknown", || {
        c.summary().counters.bind_outcomes_unknown == 1
    })
    .await;
    c.close_streams();
    let d = within(STEP, "the gang's answer", proposal)
        .await
        .expect("no panic");
    assert!(d.failed.is_empty(), "nothing to propose again: {d:?}");
    assert_eq!(
        c.node_pods("n1").expect("n1").len(),
        2,
        "the room of a Binding that may land stays taken"
    );
    h.shutdown().await;
}

/// A gang member's Binding without an answer keeps its room like a single
/// pod's, and the gang ends bound whole, each member once.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_gang_member_whose_binding_outcome_is_unknown_keeps_its_room() {
    let (h, gated) = start().await;
    gated.lands.store(true, std::sync::atomic::Ordering::SeqCst);
    let (c, first, proposal, _events) = propose_gang_with_one_binding_held(&h, &gated).await;
    first
        .send(Err(ClusterError::OutcomeUnknown("connection reset".into())))
        .expect("a member's Binding waits");
    let d = within(STEP, "the gang's answer", proposal)
        .await
        .expect("no panic");
    assert_eq!(d.decision, flotilla_coordinator::Decision::Bound, "{d:?}");
    assert!(d.failed.is_empty(), "{d:?}");
    let s = c.summary();
    assert_eq!(
        (
            s.bound,
            s.granting,
            s.counters.bind_outcomes_unknown,
            s.counters.bind_errors
        ),
        (2, 0, 1, 0)
    );
    assert_eq!(c.node_pods("n1").expect("n1").len(), 2, "each counted once");
    h.shutdown().await;
}

/// After a Binding without an answer, a retry answered 429 or 5xx (the
/// server restarting) says nothing of the first: the room stays held and
/// the Binding is sent again.
#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn a_retry_answered_429_keeps_the_room_of_an_unknown_binding() {
    let (h, gated, w) = start_with_two_pods().await;
    let c = h.coordinator.clone();
    let first = gated.arm();
    let proposal = propose_in_background(&w, "a", "n1");
    wait_until(STEP, "the grant", || c.summary().granting == 1).await;
    let second = gated.arm();
    first
        .send(Err(ClusterError::OutcomeUnknown("no answer".into())))
        .expect("bind is waiting");
    let g = gated.clone();
    wait_until(STEP, "the retry at the server", || g.gate.lock().is_none()).await;
    let third = gated.arm();
    second
        .send(Err(ClusterError::Unavailable(
            "binding default/a to n1: HTTP 429 TooManyRequests".into(),
        )))
        .expect("the retry is waiting");
    wait_until(STEP, "the third try at the server", || {
        g.gate.lock().is_none()
    })
    .await;
    // Still unknown: the room is held.
    let d = w.propose("b", "n1").await;
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Conflict), "{d:?}");
    third.send(Ok(())).expect("the third try is waiting");
    let d = within(STEP, "the answer", proposal)
        .await
        .expect("no panic")
        .expect("ProposeBind answers");
    assert_eq!(d.outcome, i32::from(pb::BindOutcome::Bound), "{d:?}");
    assert_eq!(c.summary().counters.bind_errors, 0);
    h.shutdown().await;
}
