//! What a worker's event stream carries: [`WorkerEvent`], the coordinator's
//! own form of the `Watch` stream's messages, sent through a [`WorkerTx`].
//! The gRPC edge ([`crate::grpc`]) turns each into its wire form as the
//! stream sends it.
//!
//! An event is built once, under the lock, and cloned for every worker it
//! goes to, so what it holds is cheap to clone. An object travels as its
//! JSON in an `Arc<[u8]>`: encoded once per event (a pod's is the JSON its
//! record keeps, not encoded at all), shared by every worker's copy, and
//! copied into each worker's wire message at the edge, outside the lock.
//! A pod is named by its shared names ([`PodIdentity`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use tokio::sync::mpsc;

use flotilla_shared::PodKey;
use flotilla_shared::pod_info::PodInfo;
use flotilla_shared::trace::Carrier;
use flotilla_shared::volumes::{VolumeKey, VolumeKind};

/// Sender half of a worker's event stream.
pub type WorkerTx = mpsc::UnboundedSender<WorkerEvent>;

/// A pod's identity on a worker's stream (the wire's `PodRef`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodIdentity {
    /// `namespace/name`.
    pub key: PodKey,
    /// `metadata.uid`.
    pub uid: Arc<str>,
}

impl PodIdentity {
    /// The identity of `pod`, its names shared rather than copied.
    #[must_use]
    pub fn of(pod: &PodInfo) -> Self {
        PodIdentity {
            key: pod.key.clone(),
            uid: pod.uid.clone(),
        }
    }
}

/// One message of a worker's event stream: the wire's `WatchEvent`, each
/// variant its event of the same name (the `.proto` says what a worker
/// does with it). Objects are their JSON, shared between the workers'
/// copies.
#[derive(Debug, Clone)]
pub enum WorkerEvent {
    /// A Node was added or changed.
    NodeUpsert(Arc<[u8]>),
    /// A Node was deleted: its name.
    NodeDeleted(Arc<str>),
    /// A pod bound to a node (by anyone), as the cluster holds it.
    BoundPod(Arc<[u8]>),
    /// The Binding of a pod this worker proposed was written, and the pod
    /// is otherwise the copy the worker was last sent (sent instead of
    /// [`WorkerEvent::BoundPod`], to that worker only).
    PodBound {
        /// The pod.
        pod: PodIdentity,
        /// The node it is bound to.
        node: Arc<str>,
    },
    /// A pod left the cluster or stopped holding resources.
    PodDeleted(PodIdentity),
    /// A pending pod this worker is to schedule (its priority resolved).
    AssignedPod {
        /// The pod.
        pod: Arc<[u8]>,
        /// The W3C trace context of the coordinator's `dispatch` span, which
        /// the worker's scheduling cycle continues; empty when tracing is
        /// off, and when the pod is sent again because it changed.
        trace_context: Carrier,
    },
    /// A pending pod no longer assigned to this worker.
    UnassignedPod(PodIdentity),
    /// The nodes this worker searches first.
    Partition {
        /// The coordinator's epoch (it grows as workers come and go).
        epoch: u64,
        /// The nodes' names.
        node_names: Vec<String>,
    },
    /// End of the replay that opens the stream.
    Synced,
    /// A Namespace was added or its labels changed.
    NamespaceUpsert {
        /// Its name.
        name: String,
        /// Its labels.
        labels: HashMap<String, String>,
    },
    /// A Namespace was deleted: its name.
    NamespaceDeleted(String),
    /// A PodGroup was added or changed.
    PodGroupUpsert(Arc<[u8]>),
    /// A PodGroup was deleted: its `namespace/name`.
    PodGroupDeleted(String),
    /// A PodDisruptionBudget was added or changed.
    PdbUpsert(Arc<[u8]>),
    /// A PodDisruptionBudget was deleted.
    PdbDeleted {
        /// Its namespace.
        namespace: String,
        /// Its name.
        name: String,
    },
    /// A volume object was added or changed: its compact JSON.
    VolumeUpsert {
        /// Its kind.
        kind: VolumeKind,
        /// The object, compact ([`flotilla_shared::volumes::VolumeObject::compact`]).
        json: Arc<[u8]>,
    },
    /// A volume object was deleted.
    VolumeDeleted(VolumeKey),
    /// A pending pod was nominated to a node (preemption made room there).
    NominatedPod {
        /// The pod, as the coordinator holds it.
        pod: Arc<[u8]>,
        /// The node.
        node: Arc<str>,
    },
    /// A pod's nomination ended.
    NominationCleared(PodIdentity),
}

/// The JSON of an object the coordinator holds whole (a Node, a PodGroup,
/// a PDB), encoded once for every worker it goes to.
pub(super) fn json(obj: &impl serde::Serialize) -> Arc<[u8]> {
    // Serializing a k8s-openapi object to JSON cannot fail.
    Arc::from(serde_json::to_vec(obj).unwrap_or_default())
}

/// A namespace's labels, for workers' `namespaceSelector`s.
pub(super) fn namespace_event(name: &str, labels: &BTreeMap<String, String>) -> WorkerEvent {
    WorkerEvent::NamespaceUpsert {
        name: name.to_owned(),
        labels: labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
    }
}

/// `p`'s nomination to `node`.
pub(super) fn nominated_event(p: &PodInfo, node: &Arc<str>) -> WorkerEvent {
    WorkerEvent::NominatedPod {
        pod: p.json(),
        node: node.clone(),
    }
}
