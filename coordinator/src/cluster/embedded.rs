//! The embedded simulated cluster: an in-memory API server for Nodes, Pods,
//! PodGroups (`scheduling.x-k8s.io/v1alpha1`, and Kubernetes' own
//! `scheduling.k8s.io` ones, with their `status` subresource), PriorityClasses, PodDisruptionBudgets and the
//! volume objects (claims, PVs, StorageClasses, CSINodes, CSIDrivers,
//! VolumeAttachments, [`EmbeddedCluster::apply_volume`]) with
//! resourceVersions, list + watch, Bindings, graceful pod deletion, pod
//! status conditions and
//! recorded Events.
//! The default backend, so Flotilla runs on a machine with no cluster.
//!
//! Every write bumps one global resourceVersion and appends to an in-memory
//! history of the last [`HISTORY_LIMIT`] changes, so a watch from a recent
//! resourceVersion replays exactly what it missed; an older one gets
//! [`ClusterError::Expired`] and must list again (the API server's `410 Gone`
//! after etcd compaction). There is no kubelet: bound pods stay `Pending`
//! with `PodScheduled=True` unless a caller changes their phase. A graceful
//! delete ([`Cluster::delete_pod`]) sets `metadata.deletionTimestamp` and
//! removes the pod when the grace period ends (a timer task standing in for
//! the kubelet); until then it stays bound and holds its room.

use std::collections::{BTreeMap, VecDeque};
use std::sync::Arc;

use flotilla_shared::gang::{self, PodGroupCondition, WorkloadPodGroup};
use flotilla_shared::pod_group::{PodGroup, PodGroupStatus};
use flotilla_shared::volumes::{VolumeKey, VolumeKind, VolumeObject};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{Node, Pod, PodCondition, PodStatus};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use k8s_openapi::jiff::{SignedDuration, Timestamp};
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tokio_stream::wrappers::UnboundedReceiverStream;

use super::{
    ClaimTarget, Cluster, ClusterError, ClusterList, ListWatch, PodRef, SchedulingEvent,
    WatchEvent, list_watch, pv_controller,
};

/// The key of a volume object.
fn vkey(kind: VolumeKind, namespace: &str, name: &str) -> VolumeKey {
    VolumeKey {
        kind,
        namespace: namespace.to_owned(),
        name: name.to_owned(),
    }
}

/// Changes kept for watches that resume from an older resourceVersion. Each
/// holds the object as it was, so a superseded pod version lives until its
/// change falls out: 10,000 changes is ~60 MB of `Pod`s at most, and covers
/// seconds of the fastest runs (kube-apiserver's watch cache starts at 100
/// events per resource and grows to ~100,000 only while they are recent).
pub const HISTORY_LIMIT: usize = 10_000;

/// Events kept for [`EmbeddedCluster::events`] (all are counted).
pub const EVENTS_KEPT: usize = 100_000;

/// Grace period (seconds) of a delete that names none, for a pod without
/// `spec.terminationGracePeriodSeconds` (the API's default for that field).
pub const DEFAULT_GRACE_PERIOD_SECONDS: i64 = 30;

#[derive(Debug, Default)]
struct State {
    nodes: BTreeMap<String, Arc<Node>>,
    /// foldhash (fast rehash as it grows, see the coordinator's records).
    pods: foldhash::HashMap<(String, String), StoredPod>,
    /// Pod keys in creation order (lists come back in that order).
    pod_order: Vec<(String, String)>,
    resource_version: u64,
    history: VecDeque<(u64, WatchEvent)>,
    watchers: Vec<mpsc::UnboundedSender<Result<WatchEvent, ClusterError>>>,
    bind_count: u64,
    status_writes: u64,
    events: Vec<SchedulingEvent>,
    events_recorded: u64,
    /// PodGroups by (namespace, name).
    pod_groups: BTreeMap<(String, String), Arc<PodGroup>>,
    /// `scheduling.k8s.io` PodGroups by (namespace, name).
    workload_pod_groups: BTreeMap<(String, String), Arc<WorkloadPodGroup>>,
    priority_classes: BTreeMap<String, Arc<PriorityClass>>,
    /// `priority_classes` indexed for admission; rebuilt on first use after
    /// they change.
    admission: Option<flotilla_shared::priority::PriorityClasses>,
    pdbs: BTreeMap<(String, String), Arc<PodDisruptionBudget>>,
    /// Volume objects by key. PreBind's writes are finished at once, as a
    /// PV controller and a provisioner would ([`super::pv_controller`]);
    /// nothing else acts on them.
    volumes: BTreeMap<VolumeKey, VolumeObject>,
    /// [`EmbeddedCluster::set_volume_controllers`] turned them off.
    volume_controllers_off: bool,
    /// Overrides every grace period when set ([`EmbeddedCluster::set_grace_period`]).
    grace_override: Option<i64>,
    /// Graceful deletes accepted.
    deletes: u64,
    /// Pods removed by [`Cluster::delete_pod`] (preemption's victims), last
    /// state, in removal order.
    evicted: Vec<Arc<Pod>>,
    /// Uids of pods bound through [`Cluster::bind`].
    bound_uids: foldhash::HashSet<String>,
    /// Pods bound through [`Cluster::bind`] and later removed by
    /// [`EmbeddedCluster::delete_pod`] (a trace's deletions).
    deleted_bound: usize,
}

/// A pod as the embedded cluster keeps it. An unbound pod (the schedulers'
/// working set) stays decoded, as the next write to it (its Binding) needs
/// it; a bound pod is kept as its JSON, as etcd keeps objects as bytes, and
/// decoded again only when read or written. A decoded k8s-openapi `Pod` holds
/// several KB of heap (~2.7 KB of fields before any string, a B-tree node
/// per map), its JSON well under 1 KB.
/// Cloning is cheap (`Arc`s): copies are taken under the lock and decoded
/// outside it.
#[derive(Debug, Clone)]
enum StoredPod {
    Decoded(Arc<Pod>),
    Encoded {
        json: Arc<[u8]>,
        /// `metadata.uid`, read by deletes.
        uid: Option<Box<str>>,
        /// `metadata.deletionTimestamp` is set.
        terminating: bool,
    },
}

impl StoredPod {
    /// Keeps `pod` decoded while it has no `spec.nodeName`, else as JSON.
    fn new(pod: Arc<Pod>) -> Self {
        match Self::json_if_bound(&pod) {
            Some(json) => Self::encoded(&pod, json),
            None => StoredPod::Decoded(pod),
        }
    }

    /// `pod`'s JSON when it is bound (`spec.nodeName` set), else `None`.
    fn json_if_bound(pod: &Pod) -> Option<Vec<u8>> {
        let bound = pod
            .spec
            .as_ref()
            .and_then(|s| s.node_name.as_deref())
            .is_some_and(|n| !n.is_empty());
        // A `Pod` always serializes; were it ever not to, it stays decoded.
        bound.then(|| serde_json::to_vec(pod).ok()).flatten()
    }

    fn encoded(pod: &Pod, json: Vec<u8>) -> Self {
        StoredPod::Encoded {
            json: Arc::from(json),
            uid: pod.metadata.uid.as_deref().map(Into::into),
            terminating: pod.metadata.deletion_timestamp.is_some(),
        }
    }

    /// The pod (decoded anew when kept as JSON).
    fn pod(&self) -> Arc<Pod> {
        match self {
            StoredPod::Decoded(pod) => pod.clone(),
            StoredPod::Encoded { json, .. } => Arc::new(
                serde_json::from_slice(json)
                    .expect("a stored pod's JSON decodes: the cluster encoded it from a Pod"),
            ),
        }
    }

    fn uid(&self) -> Option<&str> {
        match self {
            StoredPod::Decoded(pod) => pod.metadata.uid.as_deref(),
            StoredPod::Encoded { uid, .. } => uid.as_deref(),
        }
    }

    fn terminating(&self) -> bool {
        match self {
            StoredPod::Decoded(pod) => pod.metadata.deletion_timestamp.is_some(),
            StoredPod::Encoded { terminating, .. } => *terminating,
        }
    }
}

impl State {
    /// Every stored pod, in creation order (cheap copies, to decode after
    /// the lock is released).
    fn stored_in_order(&self) -> Vec<StoredPod> {
        self.pod_order
            .iter()
            .filter_map(|k| self.pods.get(k).cloned())
            .collect()
    }

    /// Stores `json` for the pod at `key` when `pod` is still its current
    /// version (a write in between leaves the newer one alone).
    fn keep_as_json(&mut self, key: &(String, String), pod: &Arc<Pod>, json: Vec<u8>) {
        if let Some(slot) = self.pods.get_mut(key)
            && matches!(slot, StoredPod::Decoded(cur) if Arc::ptr_eq(cur, pod))
        {
            *slot = StoredPod::encoded(pod, json);
        }
    }

    fn emit(&mut self, ev: WatchEvent) {
        if self.history.len() == HISTORY_LIMIT {
            self.history.pop_front();
        }
        self.history.push_back((self.resource_version, ev.clone()));
        self.watchers.retain(|w| w.send(Ok(ev.clone())).is_ok());
    }

    /// Stores a volume object written through the API (PreBind's writes,
    /// the stand-in controllers'): a new resourceVersion and a watch event.
    fn put_volume(&mut self, obj: VolumeObject) {
        self.next_rv();
        self.volumes.insert(obj.key(), obj.clone());
        self.emit(WatchEvent::VolumeApplied(obj));
    }

    fn next_rv(&mut self) -> String {
        self.resource_version += 1;
        self.resource_version.to_string()
    }

    /// The API server's `Priority` admission at creation: `spec.priority`
    /// (and the class's preemption policy) from `spec.priorityClassName`,
    /// or from the global default class, or 0. A pod naming a class that
    /// does not exist is left unresolved (an API server would refuse it;
    /// the coordinator holds it pending with upstream's message).
    fn admit_priority(&mut self, pod: &mut Pod) {
        if pod.spec.as_ref().is_none_or(|s| s.priority.is_some()) {
            return;
        }
        let classes = self.admission.get_or_insert_with(|| {
            let listed: Vec<PriorityClass> = self
                .priority_classes
                .values()
                .map(|pc| (**pc).clone())
                .collect();
            flotilla_shared::priority::PriorityClasses::new(&listed)
        });
        let _unknown_class_left_unresolved = classes.admit(pod);
    }

    /// Removes the pod at `key` (when `uid` is given, only that very pod).
    fn remove_pod(&mut self, key: &(String, String), uid: Option<&str>) -> Option<Arc<Pod>> {
        let cur = self.pods.get(key)?;
        if uid.is_some_and(|u| cur.uid() != Some(u)) {
            return None;
        }
        let pod = self.pods.remove(key)?.pod();
        self.pod_order.retain(|k| k != key);
        self.next_rv();
        self.emit(WatchEvent::PodDeleted(pod.clone()));
        Some(pod)
    }
}

/// Errors of the embedded cluster's admin calls (creating objects).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AdminError {
    /// The object has no `metadata.name`.
    #[error("{kind}: metadata.name is required")]
    MissingName {
        /// `Node` or `Pod`.
        kind: &'static str,
    },
    /// An object with that name exists.
    #[error("{kind} {name} already exists")]
    AlreadyExists {
        /// `Node` or `Pod`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
    /// No such object.
    #[error("{kind} {name} not found")]
    NotFound {
        /// `Node` or `Pod`.
        kind: &'static str,
        /// Its name.
        name: String,
    },
}

/// The embedded cluster. Cheap to share (`Arc<EmbeddedCluster>`).
#[derive(Debug, Default)]
pub struct EmbeddedCluster {
    state: Arc<Mutex<State>>,
}

fn pod_key(p: &Pod) -> (String, String) {
    (
        p.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

impl EmbeddedCluster {
    /// An empty cluster.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Creates or replaces a node (like `kubectl apply`).
    ///
    /// # Errors
    /// [`AdminError::MissingName`].
    pub fn apply_node(&self, mut node: Node) -> Result<(), AdminError> {
        let name = node
            .metadata
            .name
            .clone()
            .ok_or(AdminError::MissingName { kind: "Node" })?;
        let mut st = self.state.lock();
        node.metadata.resource_version = Some(st.next_rv());
        let node = Arc::new(node);
        st.nodes.insert(name, node.clone());
        st.emit(WatchEvent::NodeApplied(node));
        Ok(())
    }

    /// Deletes a node. Pods bound to it stay (as in Kubernetes, until garbage
    /// collected).
    ///
    /// # Errors
    /// [`AdminError::NotFound`].
    pub fn delete_node(&self, name: &str) -> Result<(), AdminError> {
        let mut st = self.state.lock();
        let node = st.nodes.remove(name).ok_or_else(|| AdminError::NotFound {
            kind: "Node",
            name: name.into(),
        })?;
        st.next_rv();
        st.emit(WatchEvent::NodeDeleted(node));
        Ok(())
    }

    /// Creates a pod. A missing namespace becomes `default`, a missing uid is
    /// generated.
    ///
    /// # Errors
    /// [`AdminError::MissingName`], [`AdminError::AlreadyExists`].
    pub fn create_pod(&self, mut pod: Pod) -> Result<(), AdminError> {
        if pod.metadata.name.is_none() {
            return Err(AdminError::MissingName { kind: "Pod" });
        }
        pod.metadata
            .namespace
            .get_or_insert_with(|| "default".into());
        let key = pod_key(&pod);
        let mut st = self.state.lock();
        if st.pods.contains_key(&key) {
            return Err(AdminError::AlreadyExists {
                kind: "Pod",
                name: format!("{}/{}", key.0, key.1),
            });
        }
        let rv = st.next_rv();
        if pod.metadata.uid.as_deref().is_none_or(str::is_empty) {
            pod.metadata.uid = Some(format!("embedded-{rv}"));
        }
        pod.metadata.resource_version = Some(rv);
        st.admit_priority(&mut pod);
        let pod = Arc::new(pod);
        st.pods.insert(key.clone(), StoredPod::new(pod.clone()));
        st.pod_order.push(key);
        st.emit(WatchEvent::PodApplied(pod));
        Ok(())
    }

    /// Deletes a pod at once (no grace period).
    ///
    /// # Errors
    /// [`AdminError::NotFound`].
    pub fn delete_pod(&self, namespace: &str, name: &str) -> Result<(), AdminError> {
        let mut st = self.state.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let pod = st
            .remove_pod(&key, None)
            .ok_or_else(|| AdminError::NotFound {
                kind: "Pod",
                name: format!("{namespace}/{name}"),
            })?;
        if pod
            .metadata
            .uid
            .as_ref()
            .is_some_and(|u| st.bound_uids.contains(u))
        {
            st.deleted_bound += 1;
        }
        Ok(())
    }

    /// Pods bound through a Binding of this cluster and deleted since by
    /// [`EmbeddedCluster::delete_pod`] (their Bindings count in
    /// [`EmbeddedCluster::write_counts`]).
    #[must_use]
    pub fn deleted_bound_count(&self) -> usize {
        self.state.lock().deleted_bound
    }

    /// Grace period (seconds) of every graceful delete from now on, whatever
    /// the caller or the pod asks (`Some(0)`: deletes are immediate); `None`
    /// restores the normal choice (the caller's, else the pod's
    /// `terminationGracePeriodSeconds`, else
    /// [`DEFAULT_GRACE_PERIOD_SECONDS`]). Negative values count as 0.
    pub fn set_grace_period(&self, seconds: Option<i64>) {
        self.state.lock().grace_override = seconds.map(|s| s.max(0));
    }

    /// Whether the stand-in PV controller and provisioner finish what
    /// VolumeBinding's PreBind writes (on by default). Off, a PV's
    /// `claimRef` and a claim's selected node are written and nothing
    /// more: the claims stay unbound, as on a cluster whose controllers are
    /// down.
    pub fn set_volume_controllers(&self, on: bool) {
        self.state.lock().volume_controllers_off = !on;
    }

    /// Graceful deletes accepted so far ([`Cluster::delete_pod`]).
    #[must_use]
    pub fn delete_count(&self) -> u64 {
        self.state.lock().deletes
    }

    /// Pods removed through [`Cluster::delete_pod`] (preemption's victims),
    /// in their last state (still showing the node they ran on), in removal
    /// order. Admin deletes are not listed.
    pub fn evicted_pods(&self) -> Vec<Arc<Pod>> {
        self.state.lock().evicted.clone()
    }

    /// `(evicted, of which bound through a Binding of this cluster)`: the
    /// counts behind [`EmbeddedCluster::evicted_pods`], cheap to poll.
    pub fn evicted_counts(&self) -> (usize, usize) {
        let st = self.state.lock();
        let by_binding = st
            .evicted
            .iter()
            .filter(|p| {
                p.metadata
                    .uid
                    .as_ref()
                    .is_some_and(|u| st.bound_uids.contains(u))
            })
            .count();
        (st.evicted.len(), by_binding)
    }

    /// Pods being deleted gracefully (`metadata.deletionTimestamp` set), still
    /// holding their room.
    pub fn terminating_count(&self) -> usize {
        self.state
            .lock()
            .pods
            .values()
            .filter(|p| p.terminating())
            .count()
    }

    /// Creates or replaces a PriorityClass (like `kubectl apply`).
    ///
    /// # Errors
    /// [`AdminError::MissingName`].
    pub fn apply_priority_class(&self, mut pc: PriorityClass) -> Result<(), AdminError> {
        let name = pc.metadata.name.clone().ok_or(AdminError::MissingName {
            kind: "PriorityClass",
        })?;
        let mut st = self.state.lock();
        pc.metadata.resource_version = Some(st.next_rv());
        let pc = Arc::new(pc);
        st.priority_classes.insert(name, pc.clone());
        st.admission = None;
        st.emit(WatchEvent::PriorityClassApplied(pc));
        Ok(())
    }

    /// Deletes a PriorityClass.
    ///
    /// # Errors
    /// [`AdminError::NotFound`].
    pub fn delete_priority_class(&self, name: &str) -> Result<(), AdminError> {
        let mut st = self.state.lock();
        let pc = st
            .priority_classes
            .remove(name)
            .ok_or_else(|| AdminError::NotFound {
                kind: "PriorityClass",
                name: name.into(),
            })?;
        st.admission = None;
        st.next_rv();
        st.emit(WatchEvent::PriorityClassDeleted(pc));
        Ok(())
    }

    /// Creates or replaces a PodDisruptionBudget (a missing namespace
    /// becomes `default`).
    ///
    /// # Errors
    /// [`AdminError::MissingName`].
    pub fn apply_pdb(&self, mut pdb: PodDisruptionBudget) -> Result<(), AdminError> {
        if pdb.metadata.name.is_none() {
            return Err(AdminError::MissingName {
                kind: "PodDisruptionBudget",
            });
        }
        pdb.metadata
            .namespace
            .get_or_insert_with(|| "default".into());
        let key = flotilla_shared::pdb::key_of(&pdb);
        let mut st = self.state.lock();
        pdb.metadata.resource_version = Some(st.next_rv());
        let pdb = Arc::new(pdb);
        st.pdbs.insert(key, pdb.clone());
        st.emit(WatchEvent::PdbApplied(pdb));
        Ok(())
    }

    /// Deletes a PodDisruptionBudget.
    ///
    /// # Errors
    /// [`AdminError::NotFound`].
    pub fn delete_pdb(&self, namespace: &str, name: &str) -> Result<(), AdminError> {
        let mut st = self.state.lock();
        let pdb = st
            .pdbs
            .remove(&(namespace.to_owned(), name.to_owned()))
            .ok_or_else(|| AdminError::NotFound {
                kind: "PodDisruptionBudget",
                name: format!("{namespace}/{name}"),
            })?;
        st.next_rv();
        st.emit(WatchEvent::PdbDeleted(pdb));
        Ok(())
    }

    /// Creates or replaces a volume object (a claim, a PV, a StorageClass,
    /// a CSINode, a CSIDriver or a VolumeAttachment; like `kubectl
    /// apply`). Kept as given: claims are bound only when VolumeBinding's
    /// PreBind asks (see [`Cluster::bind_pv`] and [`Cluster::select_node`]
    /// here).
    ///
    /// # Errors
    /// [`AdminError::MissingName`].
    pub fn apply_volume(&self, obj: VolumeObject) -> Result<(), AdminError> {
        let key = obj.key();
        if key.name.is_empty() {
            return Err(AdminError::MissingName {
                kind: key.kind.kind_name(),
            });
        }
        let mut st = self.state.lock();
        st.next_rv();
        st.volumes.insert(key, obj.clone());
        st.emit(WatchEvent::VolumeApplied(obj));
        Ok(())
    }

    /// Every volume object, as stored.
    #[must_use]
    pub fn volumes(&self) -> Vec<VolumeObject> {
        self.state.lock().volumes.values().cloned().collect()
    }

    /// The volume object `key`, as stored.
    #[must_use]
    pub fn volume_object(&self, key: &VolumeKey) -> Option<VolumeObject> {
        self.state.lock().volumes.get(key).cloned()
    }

    /// Deletes a volume object.
    ///
    /// # Errors
    /// [`AdminError::NotFound`].
    pub fn delete_volume(&self, key: &VolumeKey) -> Result<(), AdminError> {
        let mut st = self.state.lock();
        let obj = st.volumes.remove(key).ok_or_else(|| AdminError::NotFound {
            kind: key.kind.kind_name(),
            name: if key.namespace.is_empty() {
                key.name.clone()
            } else {
                format!("{}/{}", key.namespace, key.name)
            },
        })?;
        st.next_rv();
        st.emit(WatchEvent::VolumeDeleted(obj));
        Ok(())
    }

    /// Creates or replaces a PodGroup (like `kubectl apply`; the `status`
    /// kept from the current object, as a write to the main resource does).
    /// A missing namespace becomes `default`, a missing uid is generated.
    ///
    /// # Errors
    /// [`AdminError::MissingName`].
    pub fn apply_pod_group(&self, mut group: PodGroup) -> Result<(), AdminError> {
        let name = group
            .metadata
            .name
            .clone()
            .ok_or(AdminError::MissingName { kind: "PodGroup" })?;
        let ns = group
            .metadata
            .namespace
            .get_or_insert_with(|| "default".into())
            .clone();
        let mut st = self.state.lock();
        let key = (ns, name);
        let rv = st.next_rv();
        let old = st.pod_groups.get(&key);
        if let Some(old) = old {
            group.status = old.status.clone();
        }
        applied_metadata(&mut group.metadata, old.map(|o| &o.metadata), rv);
        let group = Arc::new(group);
        st.pod_groups.insert(key, group.clone());
        st.emit(WatchEvent::PodGroupApplied(group));
        Ok(())
    }

    /// Deletes a PodGroup.
    ///
    /// # Errors
    /// [`AdminError::NotFound`].
    pub fn delete_pod_group(&self, namespace: &str, name: &str) -> Result<(), AdminError> {
        let mut st = self.state.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let group = st
            .pod_groups
            .remove(&key)
            .ok_or_else(|| AdminError::NotFound {
                kind: "PodGroup",
                name: format!("{namespace}/{name}"),
            })?;
        st.next_rv();
        st.emit(WatchEvent::PodGroupDeleted(group));
        Ok(())
    }

    /// The current PodGroup, if it exists.
    #[must_use]
    pub fn pod_group(&self, namespace: &str, name: &str) -> Option<Arc<PodGroup>> {
        self.state
            .lock()
            .pod_groups
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// Creates or replaces a `scheduling.k8s.io` PodGroup (like `kubectl
    /// apply`; the `status` kept from the current object, as a write to the
    /// main resource does). An empty `apiVersion` becomes
    /// [`gang::V1BETA1`], an empty `kind` `PodGroup`, a missing namespace
    /// `default`; a missing uid is generated.
    ///
    /// # Errors
    /// [`AdminError::MissingName`].
    pub fn apply_workload_pod_group(&self, mut group: WorkloadPodGroup) -> Result<(), AdminError> {
        let name = group
            .metadata
            .name
            .clone()
            .filter(|n| !n.is_empty())
            .ok_or(AdminError::MissingName { kind: "PodGroup" })?;
        let ns = group
            .metadata
            .namespace
            .get_or_insert_with(|| "default".into())
            .clone();
        if group.api_version.is_empty() {
            gang::V1BETA1.clone_into(&mut group.api_version);
        }
        if group.kind.is_empty() {
            "PodGroup".clone_into(&mut group.kind);
        }
        let mut st = self.state.lock();
        let key = (ns, name);
        let rv = st.next_rv();
        let old = st.workload_pod_groups.get(&key);
        if let Some(old) = old {
            group.status = old.status.clone();
        }
        applied_metadata(&mut group.metadata, old.map(|o| &o.metadata), rv);
        let group = Arc::new(group);
        st.workload_pod_groups.insert(key, group.clone());
        st.emit(WatchEvent::WorkloadPodGroupApplied(group));
        Ok(())
    }

    /// Deletes a `scheduling.k8s.io` PodGroup.
    ///
    /// # Errors
    /// [`AdminError::NotFound`].
    pub fn delete_workload_pod_group(&self, namespace: &str, name: &str) -> Result<(), AdminError> {
        let mut st = self.state.lock();
        let key = (namespace.to_owned(), name.to_owned());
        let group = st
            .workload_pod_groups
            .remove(&key)
            .ok_or_else(|| AdminError::NotFound {
                kind: "PodGroup",
                name: format!("{namespace}/{name}"),
            })?;
        st.next_rv();
        st.emit(WatchEvent::WorkloadPodGroupDeleted(group));
        Ok(())
    }

    /// The current `scheduling.k8s.io` PodGroup, if it exists.
    #[must_use]
    pub fn workload_pod_group(&self, namespace: &str, name: &str) -> Option<Arc<WorkloadPodGroup>> {
        self.state
            .lock()
            .workload_pod_groups
            .get(&(namespace.to_owned(), name.to_owned()))
            .cloned()
    }

    /// The current pod, if it exists.
    #[must_use]
    pub fn pod(&self, namespace: &str, name: &str) -> Option<Arc<Pod>> {
        self.state
            .lock()
            .pods
            .get(&(namespace.to_owned(), name.to_owned()))
            .map(StoredPod::pod)
    }

    /// Every pod, in creation order.
    #[must_use]
    pub fn pods(&self) -> Vec<Arc<Pod>> {
        let stored = self.state.lock().stored_in_order();
        stored.iter().map(StoredPod::pod).collect()
    }

    /// Calls `f` with every pod, in creation order, decoding one at a time
    /// outside the cluster's lock: for a pass over a large cluster that
    /// should not hold every decoded `Pod` at once (a final report), where
    /// [`EmbeddedCluster::pods`] would.
    pub fn for_each_pod(&self, mut f: impl FnMut(Arc<Pod>)) {
        let stored = self.state.lock().stored_in_order();
        for p in stored {
            f(p.pod());
        }
    }

    /// Every node, by name.
    #[must_use]
    pub fn nodes(&self) -> Vec<Arc<Node>> {
        self.state.lock().nodes.values().cloned().collect()
    }

    /// (Bindings written, pod status writes) so far: the API writes a real
    /// server would have served.
    #[must_use]
    pub fn write_counts(&self) -> (u64, u64) {
        let st = self.state.lock();
        (st.bind_count, st.status_writes)
    }

    /// The Events recorded so far (the first [`EVENTS_KEPT`]), in order.
    #[must_use]
    pub fn events(&self) -> Vec<SchedulingEvent> {
        self.state.lock().events.clone()
    }

    /// Events recorded so far (including those beyond [`EVENTS_KEPT`]).
    #[must_use]
    pub fn events_recorded(&self) -> u64 {
        self.state.lock().events_recorded
    }

    /// Sets `PodScheduled=False` with `reason` and `message`, skipping the
    /// write when nothing changes (a real server would too, with a patch
    /// that changes nothing; it keeps resourceVersions quiet).
    fn pod_scheduled_false(
        &self,
        pod: &Pod,
        reason: &str,
        message: &str,
    ) -> Result<(), ClusterError> {
        let pod = &PodRef::of(pod);
        let mut st = self.state.lock();
        let key = (pod.namespace.clone(), pod.name.clone());
        if let Some(cur) = st.pods.get(&key) {
            let mut probe = (*cur.pod()).clone();
            if !set_condition(&mut probe, "False", Some(reason), Some(message)) {
                return Ok(());
            }
        }
        Self::update_pod(&mut st, pod, |p| {
            set_condition(p, "False", Some(reason), Some(message));
            Ok(())
        })?;
        st.status_writes += 1;
        Ok(())
    }

    /// [`EmbeddedCluster::write_pod`], storing the result as JSON when
    /// bound.
    fn update_pod(
        st: &mut State,
        pod: &PodRef,
        f: impl FnOnce(&mut Pod) -> Result<(), ClusterError>,
    ) -> Result<(), ClusterError> {
        let next = Self::write_pod(st, pod, f)?;
        if let Some(json) = StoredPod::json_if_bound(&next) {
            st.keep_as_json(&(pod.namespace.clone(), pod.name.clone()), &next, json);
        }
        Ok(())
    }

    /// Applies `f` to the pod, bumps its resourceVersion, stores it decoded
    /// and emits it; returns the new version.
    fn write_pod(
        st: &mut State,
        pod: &PodRef,
        f: impl FnOnce(&mut Pod) -> Result<(), ClusterError>,
    ) -> Result<Arc<Pod>, ClusterError> {
        let key = (pod.namespace.clone(), pod.name.clone());
        let cur = st
            .pods
            .get(&key)
            .ok_or_else(|| ClusterError::PodNotFound(pod.to_string()))?;
        if !pod.uid.is_empty() && cur.uid() != Some(pod.uid.as_str()) {
            return Err(ClusterError::PodNotFound(format!(
                "{pod} (uid {})",
                pod.uid
            )));
        }
        let mut next = Arc::unwrap_or_clone(cur.pod());
        f(&mut next)?;
        next.metadata.resource_version = Some(st.next_rv());
        let next = Arc::new(next);
        st.pods.insert(key, StoredPod::Decoded(next.clone()));
        st.emit(WatchEvent::PodApplied(next.clone()));
        Ok(next)
    }
}

fn set_condition(pod: &mut Pod, status: &str, reason: Option<&str>, message: Option<&str>) -> bool {
    let st = pod.status.get_or_insert_with(PodStatus::default);
    let conds = st.conditions.get_or_insert_with(Vec::new);
    let new = PodCondition {
        type_: "PodScheduled".into(),
        status: status.into(),
        reason: reason.map(str::to_owned),
        message: message.map(str::to_owned),
        ..Default::default()
    };
    match conds.iter_mut().find(|c| c.type_ == "PodScheduled") {
        Some(c) if c.status == new.status && c.reason == new.reason && c.message == new.message => {
            false
        }
        Some(c) => {
            *c = new;
            true
        }
        None => {
            // Most pods only ever get this one condition here: no room
            // for four (a `Vec`'s first growth) in every stored pod.
            conds.reserve_exact(1);
            conds.push(new);
            true
        }
    }
}

/// The metadata an applied object gets, as the API server sets it: the
/// uid and creation time of the object it replaces (`old`), else a new uid
/// and now; the new `resource_version`.
fn applied_metadata(meta: &mut ObjectMeta, old: Option<&ObjectMeta>, rv: String) {
    if let Some(old) = old {
        meta.uid.clone_from(&old.uid);
        meta.creation_timestamp.clone_from(&old.creation_timestamp);
    }
    if meta.uid.as_deref().is_none_or(str::is_empty) {
        meta.uid = Some(format!("embedded-{rv}"));
    }
    if meta.creation_timestamp.is_none() {
        meta.creation_timestamp = Some(Time(Timestamp::now()));
    }
    meta.resource_version = Some(rv);
}

#[tonic::async_trait]
impl ListWatch for EmbeddedCluster {
    async fn list(&self) -> Result<ClusterList, ClusterError> {
        let st = self.state.lock();
        // Pods kept as JSON are decoded after the lock is released: a
        // re-list of a large cluster must not hold up every Binding.
        let stored = st.stored_in_order();
        let mut list = ClusterList {
            // The embedded cluster keeps no Namespace objects.
            namespaces: Vec::new(),
            nodes: st.nodes.values().cloned().collect(),
            pods: Vec::new(),
            pod_groups: st.pod_groups.values().cloned().collect(),
            workload_pod_groups: st.workload_pod_groups.values().cloned().collect(),
            resource_version: st.resource_version,
            priority_classes: st.priority_classes.values().cloned().collect(),
            pdbs: st.pdbs.values().cloned().collect(),
            volumes: st.volumes.values().cloned().collect(),
        };
        drop(st);
        list.pods = stored.iter().map(StoredPod::pod).collect();
        Ok(list)
    }

    fn watch(&self, resource_version: u64) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut st = self.state.lock();
        // Compacted: changes after `resource_version` are no longer all here.
        let oldest_kept = st
            .history
            .front()
            .map_or(st.resource_version + 1, |(rv, _)| *rv);
        if resource_version + 1 < oldest_kept && resource_version < st.resource_version {
            let _ = tx.send(Err(ClusterError::Expired(resource_version)));
            return UnboundedReceiverStream::new(rx).boxed();
        }
        let start = st
            .history
            .partition_point(|(rv, _)| *rv <= resource_version);
        for (_, ev) in st.history.range(start..) {
            // The receiver is alive: it is in our hands.
            let _ = tx.send(Ok(ev.clone()));
        }
        st.watchers.push(tx);
        UnboundedReceiverStream::new(rx).boxed()
    }
}

#[tonic::async_trait]
impl Cluster for EmbeddedCluster {
    fn changes(self: Arc<Self>) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        list_watch(self)
    }

    /// As the API server: the Binding's annotations are set on the pod
    /// with `spec.nodeName`, in one write.
    async fn bind(
        &self,
        pod: &PodRef,
        node: &str,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        let mut st = self.state.lock();
        if !st.nodes.contains_key(node) {
            return Err(ClusterError::NodeNotFound(node.to_owned()));
        }
        let name = pod.to_string();
        let bound = Self::write_pod(&mut st, pod, |p| {
            let spec = p.spec.get_or_insert_with(Default::default);
            if let Some(bound) = spec.node_name.as_deref().filter(|n| !n.is_empty()) {
                return Err(ClusterError::AlreadyBound {
                    pod: name,
                    node: bound.to_owned(),
                });
            }
            spec.node_name = Some(node.to_owned());
            if !annotations.is_empty() {
                let a = p.metadata.annotations.get_or_insert_with(Default::default);
                for (k, v) in annotations {
                    a.insert((*k).to_owned(), v.clone());
                }
            }
            set_condition(p, "True", None, None);
            Ok(())
        })?;
        st.bind_count += 1;
        if let Some(uid) = &bound.metadata.uid {
            st.bound_uids.insert(uid.clone());
        }
        drop(st);
        // Encoded outside the lock: the Binding is every pod's hot write.
        if let Some(json) = StoredPod::json_if_bound(&bound) {
            let key = (pod.namespace.clone(), pod.name.clone());
            self.state.lock().keep_as_json(&key, &bound, json);
        }
        Ok(())
    }

    /// No extender can reach the embedded cluster: the Binding it reports
    /// is applied here, as the extender's own write would be on a real
    /// server (it counts as a Binding written).
    async fn annotate_pod(
        &self,
        pod: &PodRef,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        let mut st = self.state.lock();
        Self::update_pod(&mut st, pod, |p| {
            let a = p.metadata.annotations.get_or_insert_with(Default::default);
            for (k, v) in annotations {
                a.insert((*k).to_owned(), v.clone());
            }
            Ok(())
        })
    }

    async fn bound_by_extender(&self, pod: &PodRef, node: &str) -> Result<(), ClusterError> {
        self.bind(pod, node, &[]).await
    }

    /// Sets the PV's `claimRef` and, standing in for the PV controller,
    /// completes the binding at once (the PV and the claim `Bound`).
    async fn bind_pv(&self, pv: &str, claim: &ClaimTarget<'_>) -> Result<(), ClusterError> {
        let mut st = self.state.lock();
        let pv_key = vkey(VolumeKind::Pv, "", pv);
        let claim_key = vkey(VolumeKind::Claim, claim.namespace, claim.name);
        let Some(VolumeObject::Pv(current)) = st.volumes.get(&pv_key).cloned() else {
            return Err(ClusterError::VolumeRejected(
                flotilla_shared::volumes::not_found("persistentvolume", pv),
            ));
        };
        let Some(VolumeObject::Claim(c)) = st.volumes.get(&claim_key).cloned() else {
            return Err(ClusterError::VolumeRejected(
                flotilla_shared::volumes::claim_not_found(claim.name),
            ));
        };
        let changed =
            pv_controller::with_claim_ref(&current, claim).map_err(ClusterError::VolumeRejected)?;
        if st.volume_controllers_off {
            if let Some(pv_obj) = changed {
                st.put_volume(VolumeObject::Pv(Arc::new(pv_obj)));
            }
            return Ok(());
        }
        let with_ref = changed.unwrap_or_else(|| (*current).clone());
        let (pv_obj, claim_obj) = pv_controller::completed(&with_ref, &c);
        st.put_volume(VolumeObject::Pv(Arc::new(pv_obj)));
        st.put_volume(VolumeObject::Claim(Arc::new(claim_obj)));
        Ok(())
    }

    /// Annotates the claim and, standing in for a provisioner (when its
    /// StorageClass names one other than `kubernetes.io/no-provisioner`)
    /// and the PV controller, creates its PV on the node and binds the two
    /// at once.
    async fn select_node(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
    ) -> Result<(), ClusterError> {
        let mut st = self.state.lock();
        let key = vkey(VolumeKind::Claim, namespace, name);
        let Some(VolumeObject::Claim(c)) = st.volumes.get(&key).cloned() else {
            return Err(ClusterError::VolumeRejected(
                flotilla_shared::volumes::claim_not_found(name),
            ));
        };
        let Some(node_obj) = st.nodes.get(node).cloned() else {
            return Err(ClusterError::NodeNotFound(node.to_owned()));
        };
        let annotated = pv_controller::with_selected_node(&c, node);
        let provisioner = pv_controller::class_of(&annotated).and_then(|class| {
            match st.volumes.get(&vkey(VolumeKind::StorageClass, "", class)) {
                Some(VolumeObject::StorageClass(sc)) => Some(sc.provisioner.clone()),
                _ => None,
            }
        });
        let provisions = provisioner.is_some_and(|p| {
            !p.is_empty() && p != flotilla_shared::volumes::binding::NOT_SUPPORTED_PROVISIONER
        });
        if !provisions || st.volume_controllers_off {
            st.put_volume(VolumeObject::Claim(Arc::new(annotated)));
            return Ok(());
        }
        let pv = pv_controller::provisioned_pv(&annotated, &node_obj);
        let (pv, claim) = pv_controller::completed(&pv, &annotated);
        st.put_volume(VolumeObject::Pv(Arc::new(pv)));
        st.put_volume(VolumeObject::Claim(Arc::new(claim)));
        Ok(())
    }

    async fn mark_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.pod_scheduled_false(pod, "Unschedulable", message)
    }

    async fn mark_scheduler_error(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.pod_scheduled_false(pod, "SchedulerError", message)
    }

    fn record_event(&self, event: SchedulingEvent) {
        let mut st = self.state.lock();
        st.events_recorded += 1;
        if st.events.len() < EVENTS_KEPT {
            st.events.push(event);
        }
    }

    async fn update_pod_group_status(
        &self,
        group: &PodGroup,
        status: &PodGroupStatus,
    ) -> Result<(), ClusterError> {
        let mut st = self.state.lock();
        let key = (
            group
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            group.metadata.name.clone().unwrap_or_default(),
        );
        let Some(current) = st.pod_groups.get(&key) else {
            return Err(ClusterError::Unavailable(format!(
                "podgroup {}/{} not found",
                key.0, key.1
            )));
        };
        let mut next = (**current).clone();
        if status.phase.is_some() {
            next.status.phase.clone_from(&status.phase);
        }
        if status.schedule_start_time.is_some() {
            next.status
                .schedule_start_time
                .clone_from(&status.schedule_start_time);
        }
        next.status.running = status.running;
        if next.status == current.status {
            return Ok(());
        }
        next.metadata.resource_version = Some(st.next_rv());
        let next = Arc::new(next);
        st.pod_groups.insert(key, next.clone());
        st.emit(WatchEvent::PodGroupApplied(next));
        Ok(())
    }

    async fn set_workload_pod_group_condition(
        &self,
        group: &WorkloadPodGroup,
        condition: &PodGroupCondition,
    ) -> Result<(), ClusterError> {
        let mut st = self.state.lock();
        let key = (
            group
                .metadata
                .namespace
                .clone()
                .unwrap_or_else(|| "default".into()),
            group.metadata.name.clone().unwrap_or_default(),
        );
        let Some(current) = st.workload_pod_groups.get(&key) else {
            return Err(ClusterError::Unavailable(format!(
                "podgroup {}/{} (scheduling.k8s.io) not found",
                key.0, key.1
            )));
        };
        // The stored conditions, not the caller's copy: this is the server.
        let Some(conditions) = super::kube::pod_group_conditions_with(
            &current.status.conditions,
            condition,
            Timestamp::now(),
        ) else {
            return Ok(());
        };
        let mut next = (**current).clone();
        next.status.conditions = conditions;
        next.metadata.resource_version = Some(st.next_rv());
        let next = Arc::new(next);
        st.workload_pod_groups.insert(key, next.clone());
        st.emit(WatchEvent::WorkloadPodGroupApplied(next));
        Ok(())
    }

    async fn mark_preemption_victim(
        &self,
        pod: &PodRef,
        scheduler_name: &str,
    ) -> Result<(), ClusterError> {
        let mut st = self.state.lock();
        let cond = flotilla_shared::preemption::disruption_target_condition(scheduler_name);
        Self::update_pod(&mut st, pod, |p| {
            let conds = p
                .status
                .get_or_insert_with(PodStatus::default)
                .conditions
                .get_or_insert_with(Vec::new);
            match conds.iter_mut().find(|c| c.type_ == cond.type_) {
                Some(c) => *c = cond,
                None => conds.push(cond),
            }
            Ok(())
        })?;
        st.status_writes += 1;
        Ok(())
    }

    async fn delete_pod(&self, pod: &PodRef, grace: Option<i64>) -> Result<(), ClusterError> {
        let key = (pod.namespace.clone(), pod.name.clone());
        let mut st = self.state.lock();
        let cur = st
            .pods
            .get(&key)
            .filter(|p| pod.uid.is_empty() || p.uid() == Some(pod.uid.as_str()))
            .ok_or_else(|| ClusterError::PodNotFound(pod.to_string()))?
            .pod();
        st.deletes += 1;
        let grace = st
            .grace_override
            .or(grace)
            .or_else(|| {
                cur.spec
                    .as_ref()
                    .and_then(|s| s.termination_grace_period_seconds)
            })
            .unwrap_or(DEFAULT_GRACE_PERIOD_SECONDS)
            .max(0);
        let uid = cur.metadata.uid.clone();
        if grace == 0 {
            if let Some(p) = st.remove_pod(&key, uid.as_deref()) {
                st.evicted.push(p);
            }
            return Ok(());
        }
        if cur.metadata.deletion_timestamp.is_some() {
            // Already terminating: its own timer removes it.
            return Ok(());
        }
        // Whole seconds, as the API server keeps `Time` (RFC 3339, no
        // fraction): what is watched is what reads back from the JSON.
        let deadline = Timestamp::from_second(Timestamp::now().as_second())
            .unwrap_or(Timestamp::now())
            .checked_add(SignedDuration::from_secs(grace))
            .unwrap_or(Timestamp::MAX);
        Self::update_pod(&mut st, pod, |p| {
            p.metadata.deletion_timestamp = Some(Time(deadline));
            p.metadata.deletion_grace_period_seconds = Some(grace);
            Ok(())
        })?;
        drop(st);
        let state = self.state.clone();
        #[allow(clippy::cast_sign_loss)] // grace > 0 here
        let wait = std::time::Duration::from_secs(grace as u64);
        tokio::spawn(async move {
            tokio::time::sleep(wait).await;
            let mut st = state.lock();
            if let Some(p) = st.remove_pod(&key, uid.as_deref()) {
                st.evicted.push(p);
            }
        });
        Ok(())
    }

    async fn set_nominated_node(&self, pod: &Pod, node: Option<&str>) -> Result<(), ClusterError> {
        let r = PodRef::of(pod);
        let mut st = self.state.lock();
        let key = (r.namespace.clone(), r.name.clone());
        let same = st.pods.get(&key).map(StoredPod::pod).is_some_and(|p| {
            p.status
                .as_ref()
                .and_then(|s| s.nominated_node_name.as_deref())
                == node
        });
        if same {
            return Ok(());
        }
        Self::update_pod(&mut st, &r, |p| {
            p.status
                .get_or_insert_with(PodStatus::default)
                .nominated_node_name = node.map(str::to_owned);
            Ok(())
        })?;
        st.status_writes += 1;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};

    fn pref(name: &str) -> PodRef {
        PodRef {
            namespace: "default".into(),
            name: name.into(),
            uid: format!("uid-{name}"),
        }
    }

    #[test]
    fn pods_created_without_priority_are_admitted_as_an_api_server_would() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let class = |name: &str, value: i32, default: bool| PriorityClass {
            metadata: ObjectMeta {
                name: Some(name.into()),
                ..ObjectMeta::default()
            },
            value: value.into(),
            global_default: Some(default),
            preemption_policy: (name == "high").then(|| "Never".to_owned()),
            ..PriorityClass::default()
        };
        let with_class = |pod: &str, class: &str| {
            let mut p = PodBuilder::new(pod).build();
            p.spec.as_mut().unwrap().priority_class_name = Some(class.into());
            p
        };
        let c = EmbeddedCluster::new();
        c.create_pod(PodBuilder::new("before").build()).unwrap();
        c.apply_priority_class(class("standard", 100, true))
            .unwrap();
        c.apply_priority_class(class("high", 1000, false)).unwrap();
        c.create_pod(PodBuilder::new("plain").build()).unwrap();
        c.create_pod(with_class("named", "high")).unwrap();
        c.create_pod(with_class("unknown", "nope")).unwrap();
        c.create_pod(PodBuilder::new("set").priority(7).build())
            .unwrap();
        let spec = |name: &str| c.pod("default", name).unwrap().spec.clone().unwrap();
        assert_eq!(spec("before").priority, Some(0), "no default class yet: 0");
        assert_eq!(spec("plain").priority, Some(100), "the global default");
        assert_eq!(
            spec("plain").priority_class_name.as_deref(),
            Some("standard")
        );
        assert_eq!(spec("named").priority, Some(1000));
        assert_eq!(spec("named").preemption_policy.as_deref(), Some("Never"));
        assert_eq!(spec("unknown").priority, None, "left for the coordinator");
        assert_eq!(spec("set").priority, Some(7), "a set priority stays");

        // Classes changing later do not move admitted pods; new pods see them.
        c.delete_priority_class("standard").unwrap();
        c.create_pod(PodBuilder::new("after").build()).unwrap();
        assert_eq!(spec("plain").priority, Some(100));
        assert_eq!(spec("after").priority, Some(0));
    }

    #[tokio::test]
    async fn bind_sets_node_and_condition_and_fails_clearly_when_it_cannot() {
        let c = EmbeddedCluster::new();
        c.apply_node(NodeBuilder::new("n1").build()).unwrap();
        c.create_pod(PodBuilder::new("a").build()).unwrap();
        c.bind(&pref("a"), "n1", &[]).await.unwrap();
        let p = c.pod("default", "a").unwrap();
        assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        assert_eq!(
            c.bind(&pref("a"), "n1", &[]).await,
            Err(ClusterError::AlreadyBound {
                pod: "default/a".into(),
                node: "n1".into()
            })
        );
        c.create_pod(PodBuilder::new("b").build()).unwrap();
        assert_eq!(
            c.bind(&pref("b"), "nx", &[]).await,
            Err(ClusterError::NodeNotFound("nx".into()))
        );
        c.delete_pod("default", "b").unwrap();
        assert!(matches!(
            c.bind(&pref("b"), "n1", &[]).await,
            Err(ClusterError::PodNotFound(_))
        ));
        let mut stale = pref("a");
        stale.uid = "other".into();
        assert!(matches!(
            c.bind(&stale, "n1", &[]).await,
            Err(ClusterError::PodNotFound(_))
        ));
        assert_eq!(c.write_counts().0, 1);
    }

    #[tokio::test]
    async fn a_bound_pod_is_kept_as_json_and_reads_back_whole() {
        let c = EmbeddedCluster::new();
        c.apply_node(NodeBuilder::new("n1").build()).unwrap();
        c.create_pod(PodBuilder::new("a").label("app", "web").cpu("250m").build())
            .unwrap();
        c.create_pod(PodBuilder::new("b").build()).unwrap();
        let stored_as_json = |name: &str| {
            let st = c.state.lock();
            matches!(
                st.pods.get(&("default".to_owned(), name.to_owned())),
                Some(StoredPod::Encoded { .. })
            )
        };
        assert!(!stored_as_json("a"), "pending: kept decoded");
        let mut w = c.watch(c.list().await.unwrap().resource_version);
        c.bind(&pref("a"), "n1", &[]).await.unwrap();
        let Some(Ok(WatchEvent::PodApplied(sent))) = w.next().await else {
            panic!("the Binding is watched");
        };
        assert!(stored_as_json("a"), "bound: kept as JSON");
        assert!(!stored_as_json("b"));
        let read = c.pod("default", "a").unwrap();
        assert_eq!(*read, *sent, "what is read is what was watched");
        assert_eq!(read.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        let mut visited = Vec::new();
        c.for_each_pod(|p| visited.push(p));
        assert_eq!(visited, c.pods(), "one at a time, the same pods in order");
        // A later write to it (a graceful delete) decodes, writes, keeps JSON.
        assert_eq!(c.terminating_count(), 0);
        c.delete_pod_gracefully("a", Some(60)).await;
        assert!(stored_as_json("a"));
        assert_eq!(c.terminating_count(), 1);
        let Some(Ok(WatchEvent::PodApplied(deleting))) = w.next().await else {
            panic!("the delete is watched");
        };
        assert_eq!(
            *c.pod("default", "a").unwrap(),
            *deleting,
            "the deletionTimestamp reads back as watched (whole seconds, as the API keeps it)"
        );
        assert!(
            c.pod("default", "a")
                .unwrap()
                .metadata
                .deletion_timestamp
                .is_some()
        );
        // A delete naming another uid spares it (the uid is kept beside the JSON).
        let mut other = pref("a");
        other.uid = "other".into();
        assert!(Cluster::delete_pod(&c, &other, Some(0)).await.is_err());
        Cluster::delete_pod(&c, &pref("a"), Some(0)).await.unwrap();
        assert!(c.pod("default", "a").is_none());
    }

    #[tokio::test]
    async fn a_watch_from_before_the_kept_history_is_expired() {
        let c = EmbeddedCluster::new();
        for i in 0..(HISTORY_LIMIT + 10) {
            c.apply_node(NodeBuilder::new(&format!("n{}", i % 3)).build())
                .unwrap();
        }
        let mut w = c.watch(5);
        assert!(matches!(
            w.next().await,
            Some(Err(ClusterError::Expired(5)))
        ));
        let latest = c.list().await.unwrap().resource_version;
        let mut w = c.watch(latest - 1);
        assert!(matches!(
            w.next().await,
            Some(Ok(WatchEvent::NodeApplied(_)))
        ));
    }

    #[tokio::test]
    async fn watch_from_a_list_misses_nothing_and_resource_versions_grow() {
        let c = EmbeddedCluster::new();
        c.apply_node(NodeBuilder::new("n1").build()).unwrap();
        let list = c.list().await.unwrap();
        assert_eq!(list.nodes.len(), 1);
        c.create_pod(PodBuilder::new("a").build()).unwrap();
        let mut w = c.watch(list.resource_version);
        let a = c.pod("default", "a").unwrap();
        c.mark_unschedulable(&a, "0/1 nodes are available: 1 Insufficient cpu.")
            .await
            .unwrap();
        let first = w.next().await.unwrap().unwrap();
        let second = w.next().await.unwrap().unwrap();
        let (WatchEvent::PodApplied(p1), WatchEvent::PodApplied(p2)) = (first, second) else {
            panic!("expected two pod events");
        };
        let rv = |p: &Pod| {
            p.metadata
                .resource_version
                .clone()
                .unwrap()
                .parse::<u64>()
                .unwrap()
        };
        assert!(rv(&p2) > rv(&p1));
        let cond = &p2.status.as_ref().unwrap().conditions.as_ref().unwrap()[0];
        assert_eq!(cond.type_, "PodScheduled");
        assert_eq!(cond.status, "False");
        assert_eq!(cond.reason.as_deref(), Some("Unschedulable"));
        // The same message again writes nothing.
        c.mark_unschedulable(&a, "0/1 nodes are available: 1 Insufficient cpu.")
            .await
            .unwrap();
        assert_eq!(c.write_counts().1, 1);
    }

    fn bound(name: &str, grace: Option<i64>) -> Pod {
        let mut p = PodBuilder::new(name).cpu("1").node_name("n1").build();
        p.spec
            .as_mut()
            .expect("spec")
            .termination_grace_period_seconds = grace;
        p
    }

    #[tokio::test(start_paused = true)]
    async fn a_graceful_delete_keeps_the_pod_bound_until_its_grace_period_ends() {
        let c = EmbeddedCluster::new();
        c.apply_node(NodeBuilder::new("n1").build()).unwrap();
        c.create_pod(bound("a", None)).unwrap();
        c.create_pod(bound("b", Some(5))).unwrap();
        let start = tokio::time::Instant::now();
        c.delete_pod_gracefully("a", None).await;
        c.delete_pod_gracefully("b", None).await;
        for name in ["a", "b"] {
            let p = c.pod("default", name).expect("still there: terminating");
            assert!(p.metadata.deletion_timestamp.is_some(), "{name}");
            assert_eq!(p.spec.as_ref().unwrap().node_name.as_deref(), Some("n1"));
        }
        assert_eq!(
            c.pod("default", "a")
                .unwrap()
                .metadata
                .deletion_grace_period_seconds,
            Some(DEFAULT_GRACE_PERIOD_SECONDS)
        );
        // The pod's own terminationGracePeriodSeconds (5 s) applies to b.
        tokio::time::sleep_until(start + std::time::Duration::from_millis(4_900)).await;
        assert!(c.pod("default", "b").is_some(), "b within its grace period");
        tokio::time::sleep_until(start + std::time::Duration::from_millis(5_100)).await;
        assert!(c.pod("default", "b").is_none(), "b gone after 5 s");
        assert!(c.pod("default", "a").is_some(), "a has 30 s");
        // A second delete does not restart the clock.
        c.delete_pod_gracefully("a", Some(60)).await;
        tokio::time::sleep_until(start + std::time::Duration::from_millis(30_100)).await;
        assert!(c.pod("default", "a").is_none(), "a gone after 30 s");
        assert_eq!(c.delete_count(), 3);
    }

    impl EmbeddedCluster {
        async fn delete_pod_gracefully(&self, name: &str, grace: Option<i64>) {
            Cluster::delete_pod(self, &pref(name), grace)
                .await
                .expect("the pod exists");
        }
    }

    #[tokio::test]
    async fn a_zero_grace_or_the_override_deletes_at_once_and_a_namesake_is_spared() {
        let c = EmbeddedCluster::new();
        c.apply_node(NodeBuilder::new("n1").build()).unwrap();
        c.create_pod(bound("a", Some(30))).unwrap();
        c.delete_pod_gracefully("a", Some(0)).await;
        assert!(c.pod("default", "a").is_none());
        c.set_grace_period(Some(0));
        c.create_pod(bound("b", Some(30))).unwrap();
        c.delete_pod_gracefully("b", None).await;
        assert!(c.pod("default", "b").is_none());
        c.create_pod(bound("d", None)).unwrap();
        let mut other = pref("d");
        other.uid = "uid-someone-else".into();
        assert_eq!(
            Cluster::delete_pod(&c, &other, Some(0)).await,
            Err(ClusterError::PodNotFound("default/d".into()))
        );
        assert!(c.pod("default", "d").is_some());
    }

    #[tokio::test]
    async fn set_nominated_node_writes_and_clears_the_status_field() {
        let c = EmbeddedCluster::new();
        c.create_pod(PodBuilder::new("a").build()).unwrap();
        let a = c.pod("default", "a").unwrap();
        let nnn = |c: &EmbeddedCluster| {
            c.pod("default", "a")
                .unwrap()
                .status
                .as_ref()
                .and_then(|s| s.nominated_node_name.clone())
        };
        c.set_nominated_node(&a, Some("n1")).await.unwrap();
        assert_eq!(nnn(&c).as_deref(), Some("n1"));
        c.set_nominated_node(&a, Some("n1")).await.unwrap();
        assert_eq!(c.write_counts().1, 1, "the same value writes nothing");
        c.set_nominated_node(&a, None).await.unwrap();
        assert_eq!(nnn(&c), None);
    }

    #[tokio::test]
    async fn priority_classes_and_pdbs_are_listed_and_watched() {
        use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
        let c = EmbeddedCluster::new();
        let pc = PriorityClass {
            metadata: ObjectMeta {
                name: Some("high".into()),
                ..ObjectMeta::default()
            },
            value: 1000.into(),
            ..PriorityClass::default()
        };
        c.apply_priority_class(pc).unwrap();
        let list = c.list().await.unwrap();
        assert_eq!(list.priority_classes.len(), 1);
        let mut w = c.watch(list.resource_version);
        c.apply_pdb(PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web".into()),
                ..ObjectMeta::default()
            },
            ..PodDisruptionBudget::default()
        })
        .unwrap();
        c.delete_priority_class("high").unwrap();
        assert!(matches!(
            w.next().await,
            Some(Ok(WatchEvent::PdbApplied(p))) if p.metadata.namespace.as_deref() == Some("default")
        ));
        assert!(matches!(
            w.next().await,
            Some(Ok(WatchEvent::PriorityClassDeleted(_)))
        ));
        assert_eq!(c.list().await.unwrap().pdbs.len(), 1);
        assert_eq!(
            c.delete_pdb("default", "nope"),
            Err(AdminError::NotFound {
                kind: "PodDisruptionBudget",
                name: "default/nope".into()
            })
        );
    }

    #[tokio::test]
    async fn volume_objects_are_listed_and_watched() {
        use flotilla_shared::testing::volumes::{PvcBuilder, storage_class};
        use flotilla_shared::volumes::VolumeKind;
        let c = EmbeddedCluster::new();
        let class = VolumeObject::StorageClass(Arc::new(storage_class("local", "p", None)));
        c.apply_volume(class).unwrap();
        let list = c.list().await.unwrap();
        assert_eq!(list.volumes.len(), 1);
        let mut w = c.watch(list.resource_version);
        let claim =
            VolumeObject::Claim(Arc::new(PvcBuilder::new("data").namespace("team").build()));
        c.apply_volume(claim.clone()).unwrap();
        c.delete_volume(&claim.key()).unwrap();
        assert!(matches!(w.next().await, Some(Ok(WatchEvent::VolumeApplied(o))) if o == claim));
        assert!(matches!(w.next().await, Some(Ok(WatchEvent::VolumeDeleted(o))) if o == claim));
        assert_eq!(
            c.delete_volume(&claim.key()),
            Err(AdminError::NotFound {
                kind: "PersistentVolumeClaim",
                name: "team/data".into()
            })
        );
        let unnamed = VolumeObject::Claim(Arc::new(PvcBuilder::new("").build()));
        assert_eq!(
            c.apply_volume(unnamed),
            Err(AdminError::MissingName {
                kind: VolumeKind::Claim.kind_name()
            })
        );
    }
    fn workload_group(name: &str, min_count: i32) -> WorkloadPodGroup {
        serde_json::from_value(serde_json::json!({
            "metadata": {"name": name},
            "spec": {"schedulingPolicy": {"gang": {"minCount": min_count}}},
        }))
        .expect("a PodGroup")
    }

    fn scheduled(status: &str, reason: &str, message: &str) -> PodGroupCondition {
        PodGroupCondition {
            type_: gang::condition::INITIALLY_SCHEDULED.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: None,
        }
    }

    #[tokio::test]
    async fn workload_pod_groups_are_listed_watched_and_keep_their_status() {
        let c = EmbeddedCluster::new();
        c.apply_workload_pod_group(workload_group("pg", 3)).unwrap();
        let list = c.list().await.unwrap();
        assert_eq!(list.workload_pod_groups.len(), 1);
        let g = &list.workload_pod_groups[0];
        assert_eq!(g.api_version, gang::V1BETA1, "apiVersion defaulted");
        assert_eq!(g.kind, "PodGroup");
        assert_eq!(g.metadata.namespace.as_deref(), Some("default"));
        let uid = g.metadata.uid.clone().expect("a uid");
        assert!(g.metadata.creation_timestamp.is_some());
        assert_eq!(g.min_count(), Ok(Some(3)));
        // The scheduler-plugins kind of the same name is another object.
        assert!(list.pod_groups.is_empty());
        assert!(c.pod_group("default", "pg").is_none());

        let mut w = c.watch(list.resource_version);
        let cond = scheduled("False", "Unschedulable", "0/3 nodes are available");
        c.set_workload_pod_group_condition(g, &cond).await.unwrap();
        let Some(Ok(WatchEvent::WorkloadPodGroupApplied(written))) = w.next().await else {
            panic!("the condition write is watched")
        };
        let got = written.scheduled_condition().expect("the condition");
        assert_eq!(
            (got.status.as_str(), got.reason.as_str()),
            ("False", "Unschedulable")
        );
        let first_ltt = got.last_transition_time.clone();
        assert!(first_ltt.is_some(), "lastTransitionTime set");

        // The same condition again writes nothing.
        let rv = written.metadata.resource_version.clone();
        c.set_workload_pod_group_condition(&written, &cond)
            .await
            .unwrap();
        assert_eq!(
            c.workload_pod_group("default", "pg")
                .unwrap()
                .metadata
                .resource_version,
            rv
        );
        // Another message, same status: the transition time stays.
        let cond = scheduled("False", "Unschedulable", "0/4 nodes are available");
        c.set_workload_pod_group_condition(&written, &cond)
            .await
            .unwrap();
        let now = c.workload_pod_group("default", "pg").unwrap();
        let got = now.scheduled_condition().unwrap();
        assert_eq!(got.message, "0/4 nodes are available");
        assert_eq!(got.last_transition_time, first_ltt);
        // Another writer's condition stays; ours is replaced, not added.
        let mut other = (*now).clone();
        other.status.conditions.insert(
            0,
            PodGroupCondition {
                type_: "Other".into(),
                status: "True".into(),
                ..PodGroupCondition::default()
            },
        );
        c.state
            .lock()
            .workload_pod_groups
            .insert(("default".into(), "pg".into()), Arc::new(other));
        c.set_workload_pod_group_condition(&now, &scheduled("True", "Scheduled", ""))
            .await
            .unwrap();
        let now = c.workload_pod_group("default", "pg").unwrap();
        let types: Vec<(&str, &str)> = now
            .status
            .conditions
            .iter()
            .map(|c| (c.type_.as_str(), c.status.as_str()))
            .collect();
        assert_eq!(
            types,
            [
                ("Other", "True"),
                (gang::condition::INITIALLY_SCHEDULED, "True")
            ]
        );

        // A re-apply keeps uid and status, as a write to the main resource.
        c.apply_workload_pod_group(workload_group("pg", 4)).unwrap();
        let again = c.workload_pod_group("default", "pg").unwrap();
        assert_eq!(again.metadata.uid.as_deref(), Some(uid.as_str()));
        assert_eq!(again.status, now.status);
        assert_eq!(again.min_count(), Ok(Some(4)));

        // v1alpha2 keeps its version (its condition type differs).
        let mut alpha = workload_group("alpha", 2);
        alpha.api_version = gang::V1ALPHA2.into();
        alpha.metadata.namespace = Some("ml".into());
        c.apply_workload_pod_group(alpha).unwrap();
        let alpha = c.workload_pod_group("ml", "alpha").unwrap();
        assert_eq!(alpha.api_version, gang::V1ALPHA2);
        assert_eq!(alpha.condition_type(), gang::condition::SCHEDULED);

        c.delete_workload_pod_group("default", "pg").unwrap();
        assert!(c.workload_pod_group("default", "pg").is_none());
        assert_eq!(
            c.delete_workload_pod_group("default", "pg"),
            Err(AdminError::NotFound {
                kind: "PodGroup",
                name: "default/pg".into()
            })
        );
        assert!(matches!(
            c.set_workload_pod_group_condition(&now, &cond).await,
            Err(ClusterError::Unavailable(m)) if m.contains("default/pg")
        ));
        assert_eq!(
            c.apply_workload_pod_group(WorkloadPodGroup::default()),
            Err(AdminError::MissingName { kind: "PodGroup" })
        );
        let mut seen = Vec::new();
        while let Some(Some(Ok(e))) = futures::FutureExt::now_or_never(w.next()) {
            seen.push(match e {
                WatchEvent::WorkloadPodGroupApplied(g) => format!("applied {}", g.full_name()),
                WatchEvent::WorkloadPodGroupDeleted(g) => format!("deleted {}", g.full_name()),
                other => format!("{other:?}"),
            });
        }
        assert_eq!(
            seen,
            [
                "applied default/pg",
                "applied default/pg",
                "applied default/pg",
                "applied ml/alpha",
                "deleted default/pg"
            ]
        );
        assert_eq!(c.list().await.unwrap().workload_pod_groups.len(), 1);
    }
}
