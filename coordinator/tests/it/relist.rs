//! A broken watch makes the coordinator list again; the relist must also
//! notice what was deleted while it was not watching.

use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};

use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;
use parking_lot::Mutex;
use tokio::sync::oneshot;

use flotilla_coordinator::cluster::{
    ClaimTarget, Cluster, ClusterError, ClusterList, EmbeddedCluster, ListWatch, PodRef,
    SchedulingEvent, WatchEvent, list_watch,
};
use flotilla_shared::testing::{NodeBuilder, PodBuilder};

use crate::{Harness, STEP, wait_until};

/// The embedded cluster, except that its first watch delivers nothing and
/// then fails when the test says so.
struct FlakyWatch {
    inner: Arc<EmbeddedCluster>,
    first: AtomicBool,
    fail: Mutex<Option<oneshot::Receiver<()>>>,
}

#[tonic::async_trait]
impl ListWatch for FlakyWatch {
    async fn list(&self) -> Result<ClusterList, ClusterError> {
        self.inner.list().await
    }

    fn watch(&self, resource_version: u64) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        if self.first.swap(false, Ordering::SeqCst) {
            let rx = self.fail.lock().take().expect("armed once");
            return futures::stream::once(async move {
                let _ = rx.await;
                Err(ClusterError::Unavailable("watch connection reset".into()))
            })
            .boxed();
        }
        self.inner.watch(resource_version)
    }
}

#[tonic::async_trait]
impl Cluster for FlakyWatch {
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

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_relist_after_a_broken_watch_drops_what_was_deleted_meanwhile() {
    let cluster = Arc::new(EmbeddedCluster::new());
    for n in ["n1", "n2"] {
        cluster
            .apply_node(NodeBuilder::new(n).cpu("4").pods(110).build())
            .expect("node");
    }
    cluster
        .create_pod(PodBuilder::new("bound").cpu("1").node_name("n2").build())
        .expect("pod");
    cluster
        .create_pod(PodBuilder::new("pending").cpu("1").build())
        .expect("pod");
    let (fail, rx) = oneshot::channel();
    let flaky = Arc::new(FlakyWatch {
        inner: cluster.clone(),
        first: AtomicBool::new(true),
        fail: Mutex::new(Some(rx)),
    });
    let h = Harness::start_with(flaky, cluster.clone()).await;
    h.wait_for_record("uid-pending").await;
    assert_eq!(h.coordinator.summary().pods_total, 2);

    // While the coordinator hears nothing: a node and both pods go, one pod
    // arrives.
    cluster.delete_pod("default", "pending").expect("delete");
    cluster.delete_pod("default", "bound").expect("delete");
    cluster.delete_node("n2").expect("delete node");
    cluster
        .create_pod(PodBuilder::new("new").cpu("1").build())
        .expect("pod");
    assert_eq!(h.coordinator.summary().pods_total, 2, "nothing seen yet");

    fail.send(()).expect("watch still open");
    let c = h.coordinator.clone();
    wait_until(STEP, "the relist", || {
        c.records()
            .iter()
            .map(|r| r.info.key.name.to_string())
            .collect::<Vec<_>>()
            == ["new"]
    })
    .await;
    assert!(h.coordinator.node_pods("n2").is_none(), "n2 was deleted");
    assert_eq!(h.coordinator.node_pods("n1"), Some(Vec::new()));
    h.shutdown().await;
}
