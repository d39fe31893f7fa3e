//! Cluster backends behind one trait: the embedded simulated cluster (the
//! default) and a real API server through `kube` ([`kube::KubeCluster`]).
//!
//! The coordinator is the only component that talks to a backend. It follows
//! one stream of changes ([`Cluster::changes`]) that starts with a full list
//! of every kind and lists again whenever the backend loses track (an expired
//! resourceVersion, a broken watch); it writes Bindings, records
//! `PodScheduled=False` for pods that fit nowhere, and records Events.
//!
//! # The change stream
//! For each kind ([`Kind::Namespace`], [`Kind::Node`], [`Kind::Pod`],
//! [`Kind::PodGroup`], [`Kind::WorkloadPodGroup`], [`Kind::PriorityClass`],
//! [`Kind::PodDisruptionBudget`], and each [`Kind::Volume`] kind) a backend emits
//! `Relisting(kind)`, then every object of that kind as `*Applied`, then
//! `Listed(kind)`: objects of that kind the consumer knows but that were not
//! applied in between no longer exist. After that come single changes, in
//! order per kind. The consumer counts as synced (kube's `InitDone`, client-go's
//! `HasSynced`) once every kind was listed once. `Err` items are transient
//! (the backend retries with backoff and relists on its own); the stream ends
//! only when the backend stops.

pub mod counted;
pub mod embedded;
pub mod events;
pub mod kube;
pub mod pv_controller;
pub mod ratelimit;

use std::sync::Arc;
use std::time::Duration;

use flotilla_shared::gang::{PodGroupCondition, WorkloadPodGroup};
use flotilla_shared::pod_group::{PodGroup, PodGroupStatus};
use flotilla_shared::volumes::{VolumeKind, VolumeObject};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use tokio::sync::mpsc;
use tokio_stream::wrappers::ReceiverStream;

pub use embedded::EmbeddedCluster;
pub use events::{EventType, SchedulingEvent};

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

impl PodRef {
    /// The ref of a pod object (`default` when it has no namespace).
    #[must_use]
    pub fn of(pod: &Pod) -> Self {
        PodRef {
            namespace: pod
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            name: pod.metadata.name.clone().unwrap_or_default(),
            uid: pod.metadata.uid.clone().unwrap_or_default(),
        }
    }
}

impl std::fmt::Display for PodRef {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}/{}", self.namespace, self.name)
    }
}

/// The kinds of objects a backend lists and watches.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    /// `v1` Namespace (its labels, for pod affinity's `namespaceSelector`).
    Namespace,
    /// `v1` Node.
    Node,
    /// `v1` Pod (non-terminal ones: upstream's scheduler informer lists with
    /// `status.phase!=Succeeded,status.phase!=Failed`).
    Pod,
    /// `scheduling.x-k8s.io/v1alpha1` PodGroup (gang scheduling). A cluster
    /// without the CustomResourceDefinition lists none.
    PodGroup,
    /// `scheduling.k8s.io` PodGroup (`v1beta1`, else `v1alpha2`): Kubernetes'
    /// own gangs. A server that serves neither lists none.
    WorkloadPodGroup,
    /// `scheduling.k8s.io/v1` PriorityClass (resolves `spec.priority` of
    /// pods that admission did not see).
    PriorityClass,
    /// `policy/v1` PodDisruptionBudget (forwarded to workers for
    /// preemption's victim selection).
    PodDisruptionBudget,
    /// A storage kind (PersistentVolumeClaims, PersistentVolumes, and
    /// `storage.k8s.io/v1` StorageClasses, CSINodes, CSIDrivers and
    /// VolumeAttachments), forwarded to workers for the volume Filters and
    /// kept for the arbiter. A server that does not serve one lists none.
    Volume(VolumeKind),
}

impl Kind {
    /// Every kind; the consumer is synced once each was listed.
    pub const ALL: [Kind; 13] = [
        Kind::Namespace,
        Kind::Node,
        Kind::Pod,
        Kind::PodGroup,
        Kind::WorkloadPodGroup,
        Kind::PriorityClass,
        Kind::PodDisruptionBudget,
        Kind::Volume(VolumeKind::ALL[0]),
        Kind::Volume(VolumeKind::ALL[1]),
        Kind::Volume(VolumeKind::ALL[2]),
        Kind::Volume(VolumeKind::ALL[3]),
        Kind::Volume(VolumeKind::ALL[4]),
        Kind::Volume(VolumeKind::ALL[5]),
    ];
}

impl std::fmt::Display for Kind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(match self {
            Kind::Namespace => "namespaces",
            Kind::Node => "nodes",
            Kind::Pod => "pods",
            Kind::PodGroup => "podgroups",
            Kind::WorkloadPodGroup => "podgroups.scheduling.k8s.io",
            Kind::PriorityClass => "priorityclasses",
            Kind::PodDisruptionBudget => "poddisruptionbudgets",
            Kind::Volume(k) => k.resource(),
        })
    }
}

/// The result of a list: every object and the resourceVersion to watch from.
#[derive(Debug, Clone, Default)]
pub struct ClusterList {
    /// All namespaces.
    pub namespaces: Vec<Arc<Namespace>>,
    /// All nodes.
    pub nodes: Vec<Arc<Node>>,
    /// All pods.
    pub pods: Vec<Arc<Pod>>,
    /// All PodGroups.
    pub pod_groups: Vec<Arc<PodGroup>>,
    /// All `scheduling.k8s.io` PodGroups.
    pub workload_pod_groups: Vec<Arc<WorkloadPodGroup>>,
    /// Watch from here to miss nothing.
    pub resource_version: u64,
    /// All PriorityClasses.
    pub priority_classes: Vec<Arc<PriorityClass>>,
    /// All PodDisruptionBudgets.
    pub pdbs: Vec<Arc<PodDisruptionBudget>>,
    /// Every volume object, of the six kinds.
    pub volumes: Vec<VolumeObject>,
}

/// One item of the change stream (see the module docs for the order).
#[derive(Debug, Clone)]
pub enum WatchEvent {
    /// A namespace was created or changed (or listed).
    NamespaceApplied(Arc<Namespace>),
    /// A namespace was deleted (last state).
    NamespaceDeleted(Arc<Namespace>),
    /// A node was created or changed (or listed).
    NodeApplied(Arc<Node>),
    /// A node was deleted (last state).
    NodeDeleted(Arc<Node>),
    /// A pod was created or changed (or listed).
    PodApplied(Arc<Pod>),
    /// A pod was deleted, or left the watched set by turning terminal (last
    /// state).
    PodDeleted(Arc<Pod>),
    /// A (re)list of this kind begins: its objects follow as `*Applied`.
    Relisting(Kind),
    /// The (re)list of this kind is complete: objects of the kind not applied
    /// since `Relisting` are gone.
    Listed(Kind),
    /// A PodGroup was created or changed (or listed).
    PodGroupApplied(Arc<PodGroup>),
    /// A PodGroup was deleted (last state).
    PodGroupDeleted(Arc<PodGroup>),
    /// A `scheduling.k8s.io` PodGroup was created or changed (or listed).
    WorkloadPodGroupApplied(Arc<WorkloadPodGroup>),
    /// A `scheduling.k8s.io` PodGroup was deleted (last state).
    WorkloadPodGroupDeleted(Arc<WorkloadPodGroup>),
    /// A PriorityClass was created or changed (or listed).
    PriorityClassApplied(Arc<PriorityClass>),
    /// A PriorityClass was deleted (last state).
    PriorityClassDeleted(Arc<PriorityClass>),
    /// A PodDisruptionBudget was created or changed (or listed).
    PdbApplied(Arc<PodDisruptionBudget>),
    /// A PodDisruptionBudget was deleted (last state).
    PdbDeleted(Arc<PodDisruptionBudget>),
    /// A volume object was created or changed (or listed).
    VolumeApplied(VolumeObject),
    /// A volume object was deleted (last state).
    VolumeDeleted(VolumeObject),
}

impl WatchEvent {
    /// The kind of object this event is about.
    #[must_use]
    pub fn kind(&self) -> Kind {
        match self {
            WatchEvent::NamespaceApplied(_) | WatchEvent::NamespaceDeleted(_) => Kind::Namespace,
            WatchEvent::NodeApplied(_) | WatchEvent::NodeDeleted(_) => Kind::Node,
            WatchEvent::PodApplied(_) | WatchEvent::PodDeleted(_) => Kind::Pod,
            WatchEvent::Relisting(k) | WatchEvent::Listed(k) => *k,
            WatchEvent::PodGroupApplied(_) | WatchEvent::PodGroupDeleted(_) => Kind::PodGroup,
            WatchEvent::WorkloadPodGroupApplied(_) | WatchEvent::WorkloadPodGroupDeleted(_) => {
                Kind::WorkloadPodGroup
            }
            WatchEvent::PriorityClassApplied(_) | WatchEvent::PriorityClassDeleted(_) => {
                Kind::PriorityClass
            }
            WatchEvent::PdbApplied(_) | WatchEvent::PdbDeleted(_) => Kind::PodDisruptionBudget,
            WatchEvent::VolumeApplied(o) | WatchEvent::VolumeDeleted(o) => Kind::Volume(o.kind()),
        }
    }
}

/// Backend errors. `Unavailable` is retryable with backoff; the others
/// describe the request and are final for it.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ClusterError {
    /// The pod does not exist (or has another uid now). HTTP 404 upstream.
    #[error("pod {0} not found")]
    PodNotFound(String),
    /// The pod is already bound (HTTP 409 upstream); `node` is where, when
    /// the backend says.
    #[error("pod {pod} is already assigned to node {node:?}")]
    AlreadyBound {
        /// The pod.
        pod: String,
        /// Where it is bound (empty when the backend did not say).
        node: String,
    },
    /// The target node does not exist.
    #[error("node {0:?} not found")]
    NodeNotFound(String),
    /// The extender that binds refused or failed (its message); the pod is
    /// tried again after its backoff.
    #[error("{0}")]
    BindRejected(String),
    /// The watch fell too far behind: list again.
    #[error("resourceVersion {0} is too old")]
    Expired(u64),
    /// The backend cannot be reached, refused the request for a reason that
    /// may pass (5xx, 429, 403 while RBAC is being set up, a timeout), or
    /// this process may not write any more (leadership lost); retry with
    /// backoff.
    #[error("cluster unavailable: {0}")]
    Unavailable(String),
    /// A volume write of PreBind was refused (the object's name and why).
    #[error("{0}")]
    VolumeRejected(String),
    /// A write went out and no answer came back (it timed out, the
    /// connection broke): the server may have applied it or may apply it
    /// still. A Binding in this state keeps its room until its outcome is
    /// known (`Coordinator::settle`).
    #[error("outcome unknown: {0}")]
    OutcomeUnknown(String),
}

/// The claim a static PV is bound to (VolumeBinding's PreBind): the PV's
/// `spec.claimRef`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ClaimTarget<'a> {
    /// The claim's namespace.
    pub namespace: &'a str,
    /// The claim's name.
    pub name: &'a str,
    /// The claim's uid.
    pub uid: &'a str,
}

/// A cluster backend.
#[tonic::async_trait]
pub trait Cluster: Send + Sync + 'static {
    /// The change stream: every kind listed, then changes, relisting when
    /// the backend loses track. See the module docs.
    fn changes(self: Arc<Self>) -> BoxStream<'static, Result<WatchEvent, ClusterError>>;

    /// Binds the pod to the node (the `pods/binding` subresource), with
    /// `annotations` written on the pod by the same Binding (the API server
    /// copies a Binding's `metadata.annotations` onto the pod with
    /// `spec.nodeName`): the GPU devices a pod holds
    /// ([`flotilla_shared::gpu::dialect::ANNOTATION_GPU_INDEX`]); usually
    /// none.
    ///
    /// # Errors
    /// `PodNotFound`, `AlreadyBound`, `NodeNotFound`, `Unavailable`.
    async fn bind(
        &self,
        pod: &PodRef,
        node: &str,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError>;

    /// Merges `annotations` into the pod's `metadata.annotations` (a merge
    /// patch of the pod, guarded by its uid). Written just before a binder
    /// extender is asked to bind the pod, since the extender protocol's
    /// `ExtenderBindingArgs` carries no annotations: the GPU devices the
    /// pod holds reach it before it is bound, as through
    /// [`Cluster::bind`].
    ///
    /// # Errors
    /// `PodNotFound` (gone, or another uid), `Unavailable`.
    async fn annotate_pod(
        &self,
        pod: &PodRef,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError>;

    /// The scheduler extender with the bind verb wrote the Binding of
    /// `pod` to `node` (upstream `extendersBinding`). A real API server
    /// shows it through the watch, so the default does nothing; a backend
    /// no extender can reach (the embedded cluster) applies it itself.
    ///
    /// # Errors
    /// As [`Cluster::bind`], for backends that apply it.
    async fn bound_by_extender(&self, _pod: &PodRef, _node: &str) -> Result<(), ClusterError> {
        Ok(())
    }

    /// Sets condition `PodScheduled=False`, reason `Unschedulable`, with
    /// `message` (the FitError text) on `pod` (the coordinator's current
    /// copy: upstream's `updatePod` diffs against its informer's copy), merged
    /// by condition type: other conditions stay. Writes nothing when the
    /// condition is already so.
    ///
    /// # Errors
    /// `PodNotFound`, `Unavailable`.
    async fn mark_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), ClusterError>;

    /// As [`Cluster::mark_unschedulable`], with reason `SchedulerError`:
    /// the attempt failed for another reason than fit (an extender or
    /// webhook failing, a Binding rejected), as upstream's
    /// `handleSchedulingFailure` records errors. The default writes the
    /// `Unschedulable` condition (backends that do not tell them apart).
    ///
    /// # Errors
    /// `PodNotFound`, `Unavailable`.
    async fn mark_scheduler_error(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.mark_unschedulable(pod, message).await
    }

    /// VolumeBinding's PreBind of a static binding: sets `spec.claimRef` of
    /// PV `pv` to `claim` (and the annotation
    /// `pv.kubernetes.io/bound-by-controller: "yes"`), as upstream's
    /// `bindAPIUpdate`; the PV controller then completes the binding (the
    /// claim's `volumeName`, both `Bound`). A PV whose `claimRef` already
    /// names the claim is left as it is.
    ///
    /// # Errors
    /// [`ClusterError::VolumeRejected`]: the PV is not found, is bound or
    /// pre-bound to another claim, or the API refused the update (a
    /// conflict: the PV changed meanwhile); `Unavailable`.
    async fn bind_pv(&self, pv: &str, claim: &ClaimTarget<'_>) -> Result<(), ClusterError>;

    /// VolumeBinding's PreBind of a provision: annotates claim
    /// `namespace/name` with `volume.kubernetes.io/selected-node: node`, so
    /// the external provisioner creates its volume where the pod goes.
    ///
    /// # Errors
    /// [`ClusterError::VolumeRejected`]: the claim is not found, or is
    /// bound already, or the API refused the patch; `Unavailable`.
    async fn select_node(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
    ) -> Result<(), ClusterError>;

    /// Records an Event about a pod (`Scheduled`, `FailedScheduling`).
    /// Never blocks and never fails: a backend that cannot keep up drops
    /// events and counts them.
    fn record_event(&self, event: SchedulingEvent);

    /// Writes `status` of PodGroup `group` (its `status` subresource, merged:
    /// fields not set in `status` stay). Best effort: the coordinator logs
    /// failures and writes again on the next change. The default writes
    /// nothing (backends without PodGroups).
    ///
    /// # Errors
    /// `Unavailable` (including a cluster without the PodGroup CRD).
    async fn update_pod_group_status(
        &self,
        _group: &PodGroup,
        _status: &PodGroupStatus,
    ) -> Result<(), ClusterError> {
        Ok(())
    }

    /// Sets `condition` on `scheduling.k8s.io` PodGroup `group` (its
    /// `status` subresource, in the object's `apiVersion`; other conditions
    /// stay). Best effort, as [`Cluster::update_pod_group_status`]. The
    /// default writes nothing.
    ///
    /// # Errors
    /// `Unavailable`.
    async fn set_workload_pod_group_condition(
        &self,
        _group: &WorkloadPodGroup,
        _condition: &PodGroupCondition,
    ) -> Result<(), ClusterError> {
        Ok(())
    }

    /// Deletes a pod gracefully (preemption's victims): `grace` seconds
    /// (`None`: the pod's `terminationGracePeriodSeconds`, else the API's
    /// default of 30 s; `0`: at once), guarded by the pod's uid (a
    /// namesake is never deleted). The pod gets `metadata.deletionTimestamp`
    /// and stays bound, holding its room, until the grace period ends.
    ///
    /// # Errors
    /// `PodNotFound` (gone already, or another uid), `Unavailable`.
    async fn delete_pod(&self, pod: &PodRef, grace: Option<i64>) -> Result<(), ClusterError>;

    /// Marks `pod` as about to be evicted by preemption, before
    /// [`Cluster::delete_pod`]: condition `DisruptionTarget=True`, reason
    /// `PreemptionByScheduler`, message `<scheduler_name>: preempting to
    /// accommodate a higher priority pod`, merged by condition type (what
    /// upstream's preemption writes; DefaultPreemption reads it to tell a
    /// preemption's victims still terminating). Best effort; the default
    /// writes nothing.
    ///
    /// # Errors
    /// `PodNotFound`, `Unavailable`.
    async fn mark_preemption_victim(
        &self,
        _pod: &PodRef,
        _scheduler_name: &str,
    ) -> Result<(), ClusterError> {
        Ok(())
    }

    /// Sets (`Some`) or clears (`None`) `status.nominatedNodeName` of `pod`
    /// (a merge patch of the status subresource, as upstream's preemption
    /// writes it).
    ///
    /// # Errors
    /// `PodNotFound`, `Unavailable`.
    async fn set_nominated_node(&self, pod: &Pod, node: Option<&str>) -> Result<(), ClusterError>;
}

/// A backend that lists and watches with numeric resourceVersions (the
/// embedded cluster, and test doubles wrapping it). [`list_watch`] turns it
/// into a change stream.
#[tonic::async_trait]
pub trait ListWatch: Send + Sync + 'static {
    /// Lists every namespace, node, pod, PodGroup, PriorityClass,
    /// PodDisruptionBudget and volume object.
    async fn list(&self) -> Result<ClusterList, ClusterError>;

    /// Changes after `resource_version`, in order, until the backend or the
    /// consumer stops (object events only, no list markers).
    /// `Err(Expired)` means: list again.
    fn watch(&self, resource_version: u64) -> BoxStream<'static, Result<WatchEvent, ClusterError>>;
}

/// The list markers and objects of every volume kind, in
/// [`VolumeKind::ALL`] order: `Relisting`, the kind's objects as
/// `VolumeApplied`, `Listed`.
fn volume_list_events(volumes: Vec<VolumeObject>) -> Vec<WatchEvent> {
    let mut out = Vec::with_capacity(volumes.len() + 2 * VolumeKind::ALL.len());
    for kind in VolumeKind::ALL {
        out.push(WatchEvent::Relisting(Kind::Volume(kind)));
        out.extend(
            volumes
                .iter()
                .filter(|o| o.kind() == kind)
                .cloned()
                .map(WatchEvent::VolumeApplied),
        );
        out.push(WatchEvent::Listed(Kind::Volume(kind)));
    }
    out
}

/// First delay after a failed list; doubles up to [`LIST_RETRY_MAX`].
pub const LIST_RETRY_INITIAL: Duration = Duration::from_millis(200);
/// Longest delay between failed lists.
pub const LIST_RETRY_MAX: Duration = Duration::from_secs(10);

/// Events buffered between the list/watch task and the consumer.
const CHANGE_BUFFER: usize = 1024;

/// The change stream of a [`ListWatch`] backend: list (retrying
/// `Unavailable` with backoff, reported as `Err` items), emit it as
/// `Relisting`/`*Applied`/`Listed` per kind, then follow the watch from the
/// list's resourceVersion; on `Expired` or a watch error, list again. Runs in
/// a task that stops when the stream is dropped.
pub fn list_watch<S: ListWatch + ?Sized>(
    source: Arc<S>,
) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
    let (tx, rx) = mpsc::channel(CHANGE_BUFFER);
    tokio::spawn(async move {
        let closed = tx.clone();
        tokio::select! {
            () = closed.closed() => {}
            () = list_watch_loop(source, tx) => {}
        }
    });
    ReceiverStream::new(rx).boxed()
}

async fn list_watch_loop<S: ListWatch + ?Sized>(
    source: Arc<S>,
    tx: mpsc::Sender<Result<WatchEvent, ClusterError>>,
) {
    let mut delay = LIST_RETRY_INITIAL;
    loop {
        let list = match source.list().await {
            Ok(l) => l,
            Err(e) => {
                if tx.send(Err(e)).await.is_err() {
                    return;
                }
                tokio::time::sleep(delay).await;
                delay = (delay * 2).min(LIST_RETRY_MAX);
                continue;
            }
        };
        delay = LIST_RETRY_INITIAL;
        let rv = list.resource_version;
        let listed = std::iter::once(WatchEvent::Relisting(Kind::Namespace))
            .chain(
                list.namespaces
                    .into_iter()
                    .map(WatchEvent::NamespaceApplied),
            )
            .chain([
                WatchEvent::Listed(Kind::Namespace),
                WatchEvent::Relisting(Kind::Node),
            ])
            .chain(list.nodes.into_iter().map(WatchEvent::NodeApplied))
            .chain([
                WatchEvent::Listed(Kind::Node),
                // Classes before pods: pods without `spec.priority` are
                // resolved against them.
                WatchEvent::Relisting(Kind::PriorityClass),
            ])
            .chain(
                list.priority_classes
                    .into_iter()
                    .map(WatchEvent::PriorityClassApplied),
            )
            .chain([
                WatchEvent::Listed(Kind::PriorityClass),
                WatchEvent::Relisting(Kind::PodDisruptionBudget),
            ])
            .chain(list.pdbs.into_iter().map(WatchEvent::PdbApplied))
            .chain([
                WatchEvent::Listed(Kind::PodDisruptionBudget),
                WatchEvent::Relisting(Kind::Pod),
            ])
            .chain(list.pods.into_iter().map(WatchEvent::PodApplied))
            .chain([
                WatchEvent::Listed(Kind::Pod),
                WatchEvent::Relisting(Kind::PodGroup),
            ])
            .chain(list.pod_groups.into_iter().map(WatchEvent::PodGroupApplied))
            .chain([
                WatchEvent::Listed(Kind::PodGroup),
                WatchEvent::Relisting(Kind::WorkloadPodGroup),
            ])
            .chain(
                list.workload_pod_groups
                    .into_iter()
                    .map(WatchEvent::WorkloadPodGroupApplied),
            )
            .chain(std::iter::once(WatchEvent::Listed(Kind::WorkloadPodGroup)))
            .chain(volume_list_events(list.volumes));
        for e in listed {
            if tx.send(Ok(e)).await.is_err() {
                return;
            }
        }
        let mut watch = source.watch(rv);
        loop {
            match watch.next().await {
                None => return,
                Some(Ok(e)) => {
                    if tx.send(Ok(e)).await.is_err() {
                        return;
                    }
                }
                Some(Err(ClusterError::Expired(_))) => break,
                Some(Err(e)) => {
                    if tx.send(Err(e)).await.is_err() {
                        return;
                    }
                    break;
                }
            }
        }
    }
}
