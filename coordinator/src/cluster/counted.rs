//! [`Counted`]: a backend wrapper that counts the coordinator's writes in
//! `flotilla_api_writes_total{kind}` (attempted writes, successful or not;
//! a `PodScheduled=False` that is already set counts though the backend may
//! skip it), so API writes per pod can be read off the metrics.

use std::sync::Arc;

use flotilla_shared::metrics::metrics;
use flotilla_shared::pod_group::{PodGroup, PodGroupStatus};
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::Pod;

use super::{Cluster, ClusterError, PodRef, SchedulingEvent, WatchEvent};

/// Counts writes, then forwards every call to the wrapped backend.
pub struct Counted {
    inner: Arc<dyn Cluster>,
}

impl Counted {
    /// Wraps `inner`.
    #[must_use]
    pub fn new(inner: Arc<dyn Cluster>) -> Self {
        Counted { inner }
    }
}

fn count(kind: &str) {
    metrics().api_writes.with_label_values(&[kind]).inc();
}

#[tonic::async_trait]
impl Cluster for Counted {
    fn changes(self: Arc<Self>) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        self.inner.clone().changes()
    }

    async fn bind(&self, pod: &PodRef, node: &str) -> Result<(), ClusterError> {
        count("binding");
        self.inner.bind(pod, node).await
    }

    async fn bound_by_extender(&self, pod: &PodRef, node: &str) -> Result<(), ClusterError> {
        // The extender wrote the Binding: one write, as through the API.
        count("binding");
        self.inner.bound_by_extender(pod, node).await
    }

    async fn mark_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        count("status");
        self.inner.mark_unschedulable(pod, message).await
    }

    async fn mark_scheduler_error(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        count("status");
        self.inner.mark_scheduler_error(pod, message).await
    }

    fn record_event(&self, event: SchedulingEvent) {
        count("event");
        self.inner.record_event(event);
    }

    async fn update_pod_group_status(
        &self,
        group: &PodGroup,
        status: &PodGroupStatus,
    ) -> Result<(), ClusterError> {
        count("pod_group_status");
        self.inner.update_pod_group_status(group, status).await
    }

    async fn delete_pod(&self, pod: &PodRef, grace: Option<i64>) -> Result<(), ClusterError> {
        count("eviction");
        self.inner.delete_pod(pod, grace).await
    }

    async fn mark_preemption_victim(
        &self,
        pod: &PodRef,
        scheduler_name: &str,
    ) -> Result<(), ClusterError> {
        count("status");
        self.inner.mark_preemption_victim(pod, scheduler_name).await
    }

    async fn set_nominated_node(&self, pod: &Pod, node: Option<&str>) -> Result<(), ClusterError> {
        count("nomination");
        self.inner.set_nominated_node(pod, node).await
    }
}
