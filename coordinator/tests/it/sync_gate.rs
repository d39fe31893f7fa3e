//! The coordinator dispatches nothing before every kind was listed, applies
//! each (re)list at once, and forwards namespace labels to workers.

use std::sync::Arc;

use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Namespace, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;
use tokio_util::sync::CancellationToken;

use flotilla_coordinator::cluster::{
    ClaimTarget, Cluster, ClusterError, EmbeddedCluster, Kind, PodRef, SchedulingEvent, WatchEvent,
};
use flotilla_coordinator::{Coordinator, server};
use flotilla_proto::v1::WorkloadClass::Online;
use flotilla_proto::v1::watch_event::Event;
use flotilla_shared::testing::volumes::PvcBuilder;
use flotilla_shared::testing::{NodeBuilder, PodBuilder};
use flotilla_shared::volumes::{VolumeKind, VolumeObject};

use crate::{FakeWorker, Harness, STEP, raw_name, wait_until, within};

type Tx = mpsc::Sender<Result<WatchEvent, ClusterError>>;

/// A backend whose change stream the test writes by hand.
struct Scripted {
    rx: Mutex<Option<mpsc::Receiver<Result<WatchEvent, ClusterError>>>>,
    inner: Arc<EmbeddedCluster>,
}

#[tonic::async_trait]
impl Cluster for Scripted {
    fn changes(self: Arc<Self>) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        let rx = self.rx.lock().take().expect("one change stream");
        ReceiverStream::new(rx).boxed()
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

async fn send(tx: &Tx, events: Vec<WatchEvent>) {
    for e in events {
        tx.send(Ok(e)).await.expect("coordinator listening");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 4)]
async fn pods_listed_first_wait_for_every_list_and_namespaces_reach_workers() {
    let (tx, rx) = mpsc::channel(64);
    let backend = Arc::new(Scripted {
        rx: Mutex::new(Some(rx)),
        inner: Arc::new(EmbeddedCluster::new()),
    });
    let cluster = backend.inner.clone();
    let coordinator = Arc::new(Coordinator::with_profiles(
        backend,
        crate::default_profiles(),
    ));
    let token = CancellationToken::new();
    let running = server::start(coordinator.clone(), "127.0.0.1:0", token.clone())
        .await
        .expect("starts");
    let mut synced = running.synced;
    let h = Harness {
        cluster,
        coordinator: coordinator.clone(),
        addr: running.addr,
        token,
        handle: Some(running.handle),
    };
    let mut w = FakeWorker::join(&h, "online-0", Online).await;
    w.until_synced().await;

    // The pod list completes first (kube's watchers run independently).
    let pod = Arc::new(PodBuilder::new("a").cpu("1").build());
    send(
        &tx,
        vec![
            WatchEvent::Relisting(Kind::Pod),
            WatchEvent::PodApplied(pod),
            WatchEvent::Listed(Kind::Pod),
            WatchEvent::Relisting(Kind::PriorityClass),
            WatchEvent::Listed(Kind::PriorityClass),
            WatchEvent::Relisting(Kind::PodDisruptionBudget),
            WatchEvent::Listed(Kind::PodDisruptionBudget),
        ]
        .into_iter()
        .chain(
            Kind::ALL
                .into_iter()
                .filter_map(|k| match k {
                    Kind::Volume(_) => Some([WatchEvent::Relisting(k), WatchEvent::Listed(k)]),
                    _ => None,
                })
                .flatten(),
        )
        .collect(),
    )
    .await;
    let c = coordinator.clone();
    wait_until(STEP, "the coordinator learning pod a", || {
        c.records().len() == 1
    })
    .await;
    assert!(
        synced.try_recv().is_err(),
        "not synced without the node list"
    );

    // A partial node list is not applied either.
    send(
        &tx,
        vec![
            WatchEvent::Relisting(Kind::Node),
            WatchEvent::NodeApplied(Arc::new(NodeBuilder::new("n1").cpu("4").build())),
        ],
    )
    .await;
    send(&tx, vec![WatchEvent::Listed(Kind::Node)]).await;
    tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    assert!(
        synced.try_recv().is_err(),
        "not synced without the namespace list"
    );
    let mut team_a = std::collections::BTreeMap::new();
    team_a.insert("team".to_owned(), "a".to_owned());
    let ns: Namespace = Namespace {
        metadata: ObjectMeta {
            name: Some("default".into()),
            labels: Some(team_a),
            ..ObjectMeta::default()
        },
        ..Namespace::default()
    };
    send(
        &tx,
        vec![
            WatchEvent::Relisting(Kind::Namespace),
            WatchEvent::NamespaceApplied(Arc::new(ns)),
            WatchEvent::Listed(Kind::Namespace),
            // A cluster without the PodGroup CRD lists none.
            WatchEvent::Relisting(Kind::PodGroup),
            WatchEvent::Listed(Kind::PodGroup),
            // Nor a server without scheduling.k8s.io PodGroups.
            WatchEvent::Relisting(Kind::WorkloadPodGroup),
            WatchEvent::Listed(Kind::WorkloadPodGroup),
        ],
    )
    .await;
    within(STEP, "synced after every list", &mut synced)
        .await
        .expect("synced fires");

    // The worker hears of the node before it is handed the pod.
    let events = w
        .read_until(|e| e.iter().any(|e| matches!(e, Event::AssignedPod(_))))
        .await;
    let node_at = events
        .iter()
        .position(|e| matches!(e, Event::NodeUpsert(r) if raw_name(r) == "n1"))
        .expect("node n1 sent");
    let pod_at = events
        .iter()
        .position(|e| matches!(e, Event::AssignedPod(r) if raw_name(r) == "a"))
        .expect("pod a assigned");
    assert!(node_at < pod_at, "{events:?}");
    // The namespace's labels reach the worker.
    assert!(
        events.iter().any(|e| matches!(e, Event::NamespaceUpsert(n)
            if n.name == "default" && n.labels.get("team").map(String::as_str) == Some("a"))),
        "{events:?}"
    );
    // A relist without the namespace deletes it at the worker.
    send(
        &tx,
        vec![
            WatchEvent::Relisting(Kind::Namespace),
            WatchEvent::Listed(Kind::Namespace),
        ],
    )
    .await;
    let more = w
        .read_until(|e| e.iter().any(|e| matches!(e, Event::NamespaceDeleted(_))))
        .await;
    assert!(
        more.iter()
            .any(|e| matches!(e, Event::NamespaceDeleted(n) if n == "default")),
        "{more:?}"
    );

    // Volume objects: a relist adds a claim; the next one, without it,
    // deletes it at the worker.
    let claims = Kind::Volume(VolumeKind::Claim);
    let claim = VolumeObject::Claim(Arc::new(PvcBuilder::new("data").build()));
    send(
        &tx,
        vec![
            WatchEvent::Relisting(claims),
            WatchEvent::VolumeApplied(claim),
            WatchEvent::Listed(claims),
        ],
    )
    .await;
    w.read_until(|e| e.iter().any(|e| matches!(e, Event::VolumeUpsert(_))))
        .await;
    send(
        &tx,
        vec![WatchEvent::Relisting(claims), WatchEvent::Listed(claims)],
    )
    .await;
    let gone = w
        .read_until(|e| e.iter().any(|e| matches!(e, Event::VolumeDeleted(_))))
        .await;
    assert!(
        gone.iter().any(|e| matches!(e, Event::VolumeDeleted(r)
            if r.name == "data" && r.namespace == "default"
                && r.kind == flotilla_proto::v1::VolumeKind::Claim as i32)),
        "{gone:?}"
    );
    drop(w);
    h.shutdown().await;
}
