//! Cluster backends behind one trait: the embedded simulated cluster (the
//! default) and, later, a real API server through `kube`.
//!
//! The coordinator is the only component that talks to a backend. It lists,
//! then watches from the list's resourceVersion, writes Bindings and records
//! `PodScheduled=False` for pods that fit nowhere.

pub mod embedded;

use std::sync::Arc;

use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, Pod};

pub use embedded::EmbeddedCluster;

/// A pod's identity for writes: the uid guards against a namesake that was
/// deleted and re-created.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct PodRef {
    /// Namespace.
    pub namespace: String,
    /// Name.
    pub name: String,
    /// `metadata.uid`; empty means "don't check".
    pub uid: String,
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The result of a list: every object and the resourceVersion to watch from.
#[derive(Debug, Clone, Default)]
pub struct ClusterList {
    /// All nodes.
    pub nodes: Vec<Arc<Node>>,
    /// All pods.
    pub pods: Vec<Arc<Pod>>,
    /// Watch from here to miss nothing.
    pub resource_version: u64,
}

/// One change, in resourceVersion order.
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// A node was created or changed.
    NodeApplied(Arc<Node>),
    /// A node was deleted (last state).
    NodeDeleted(Arc<Node>),
    /// A pod was created or changed.
    PodApplied(Arc<Pod>),
    /// A pod was deleted (last state).
    PodDeleted(Arc<Pod>),
}

/// Backend errors. `Unavailable` is retryable with backoff; the others
/// describe the request and are final for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The pod does not exist (or has another uid now).
    #[error("pod {0} not found")]
    PodNotFound(String),
    /// The pod is already bound (HTTP 409 upstream).
    #[error("pod {pod} is already assigned to node {node:?}")]
    AlreadyBound {
        /// The pod.
        pod: String,
        /// Where it is bound.
        node: String,
    },
    /// The target node does not exist.
    #[error("node {0:?} not found")]
    NodeNotFound(String),
    /// The watch fell too far behind: list again.
    #[error("resourceVersion {0} is too old")]
    Expired(u64),
    /// The backend cannot be reached; retry with backoff.
    #[error("cluster unavailable: {0}")]
    Unavailable(String),
}

/// A cluster backend.
#[tonic::async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// Lists every node and pod.
    async fn list(&self) -> Result<ClusterList, ClusterError>;

    /// Changes after `resource_version`, in order, until the backend or the
    /// consumer stops.
    fn watch(&self, resource_version: u64) -> BoxStream<'static, Result<WatchEvent, ClusterError>>;

    /// Binds the pod to the node (the `pods/binding` subresource).
    ///
    /// # Errors
    /// `PodNotFound`, `AlreadyBound`, `NodeNotFound`, `Unavailable`.
    async fn bind(&self, pod: &PodRef, node: &str) -> Result<(), ClusterError>;

    /// Sets condition `PodScheduled=False`, reason `Unschedulable`, with
    /// `message` (the FitError text).
    ///
    /// # Errors
    /// `PodNotFound`, `Unavailable`.
    async fn mark_unschedulable(&self, pod: &PodRef, message: &str) -> Result<(), ClusterError>;
}
