//! [`Counted`]: a backend wrapper that counts the coordinator's writes in
//! `flotilla_api_writes_total{kind}` (attempted writes, successful or not;
//! a `PodScheduled=False` that is already set counts though the backend may
//! skip it), so API writes per pod can be read off the metrics.

use std::sync::Arc;

use flotilla_shared::gang::{PodGroupCondition, WorkloadPodGroup};
use flotilla_shared::metrics::metrics;
use flotilla_shared::pod_group::{PodGroup, PodGroupStatus};
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;

use super::{ClaimTarget, Cluster, ClusterError, PodRef, SchedulingEvent, WatchEvent};

/// Counts writes, then forwards every call to the wrapped backend.
pub struct Counted {
    inner: Arc<dyn Cluster>,
    /// Writes through this wrapper (the metric is process-wide).
    writes: std::sync::atomic::AtomicU64,
}

impl Counted {
    /// Wraps `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn Cluster>) -> Self {
        Counted {
            inner,
            writes: std::sync::atomic::AtomicU64::new(0),
        }
    }

    /// Writes made through this wrapper so far, every kind.
    #[must_use]
    pub fn writes(&self) -> u64 {
        self.writes.load(std::sync::atomic::Ordering::Relaxed)
    }

    fn count(&self, kind: &str) {
        self.writes
            .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        metrics().api_writes.with_label_values(&[kind]).inc();
    }
}

#[tonic::async_trait]
impl Cluster for Counted {
    fn changes(self: Arc<Self>) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        self.inner.clone().changes()
    }

    async fn bind(
        &self,
        pod: &PodRef,
        node: &str,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        self.count("binding");
        self.inner.bind(pod, node, annotations).await
    }

    async fn annotate_pod(
        &self,
        pod: &PodRef,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        self.count("pod");
        self.inner.annotate_pod(pod, annotations).await
    }

    async fn bound_by_extender(&self, pod: &PodRef, node: &str) -> Result<(), ClusterError> {
        // The extender wrote the Binding: one write, as through the API.
        self.count("binding");
        self.inner.bound_by_extender(pod, node).await
    }

    async fn bind_pv(&self, pv: &str, claim: &ClaimTarget<'_>) -> Result<(), ClusterError> {
        self.count("persistentvolume");
        self.inner.bind_pv(pv, claim).await
    }

    async fn select_node(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
    ) -> Result<(), ClusterError> {
        self.count("persistentvolumeclaim");
        self.inner.select_node(namespace, name, node).await
    }

    async fn mark_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.count("status");
        self.inner.mark_unschedulable(pod, message).await
    }

    async fn mark_scheduler_error(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.count("status");
        self.inner.mark_scheduler_error(pod, message).await
    }

    fn record_event(&self, event: SchedulingEvent) {
        self.count("event");
        self.inner.record_event(event);
    }

    async fn update_pod_group_status(
        &self,
        group: &PodGroup,
        status: &PodGroupStatus,
    ) -> Result<(), ClusterError> {
        self.count("pod_group_status");
        self.inner.update_pod_group_status(group, status).await
    }

    async fn set_workload_pod_group_condition(
        &self,
        group: &WorkloadPodGroup,
        condition: &PodGroupCondition,
    ) -> Result<(), ClusterError> {
        self.count("pod_group_status");
        self.inner
            .set_workload_pod_group_condition(group, condition)
            .await
    }

    async fn delete_pod(&self, pod: &PodRef, grace: Option<i64>) -> Result<(), ClusterError> {
        self.count("eviction");
        self.inner.delete_pod(pod, grace).await
    }

    async fn mark_preemption_victim(
        &self,
        pod: &PodRef,
        scheduler_name: &str,
    ) -> Result<(), ClusterError> {
        self.count("status");
        self.inner.mark_preemption_victim(pod, scheduler_name).await
    }

    async fn set_nominated_node(&self, pod: &Pod, node: Option<&str>) -> Result<(), ClusterError> {
        self.count("nomination");
        self.inner.set_nominated_node(pod, node).await
    }
}
