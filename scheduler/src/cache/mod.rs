//! The worker's node cache: what is placed where, including the worker's own
//! **assumed** pods (decided, binding not confirmed yet).
//!
//! # Pod states
//! ```text
//!            assume                finish_binding            bound_pod event
//! (pending) ───────▶ Assumed ───────────────────▶ Assumed+deadline ─────────▶ Bound
//!                      │ forget (bind rejected)        │ expire (no confirm)
//!                      ▼                               ▼
//!                  (pending)                       (pending)
//! bound_pod event for a pod we never assumed ─────────────────────────────▶ Bound
//! pod_deleted event (any state) ─────────────────────────────────────────▶ gone
//! ```
//! An assumed pod whose binding finished but whose confirmation (the bound pod
//! coming back through the coordinator's watch) does not arrive within
//! `assumed_pod_ttl` is expired: its resources are released so a lost event
//! cannot leak capacity forever.
//!
//! # Concurrency
//! One `parking_lot::Mutex` guards the cache; every operation holds it for a
//! few map operations only. The scheduling cycle never reads the cache: it
//! reads its own [`Snapshot`], refreshed by [`NodeCache::update_snapshot`]
//! before each cycle, which copies (Arc clones) only the nodes changed since
//! the last refresh. Writers (the watch task, binding tasks) therefore never
//! block a running cycle, and a cycle never sees a half-applied change.

mod snapshot;

use std::collections::{BTreeMap, HashMap, HashSet};
use std::sync::Arc;
use std::time::{Duration, Instant};

use parking_lot::{Condvar, Mutex};

use flotilla_shared::framework::ClusterEvent;
use flotilla_shared::images::NodeImages;
use flotilla_shared::node_info::Orphans;
use flotilla_shared::volumes::VolumeState;
use flotilla_shared::{NodeInfo, NodeSpec, PodInfo, PodKey};

pub use snapshot::{NominatedPods, Snapshot};

/// How long an assumed pod whose binding finished may wait for confirmation
/// before it is expired. Upstream kube-scheduler used 30 s before it moved to
/// never expiring; we keep a bound so a lost event cannot leak capacity.
pub const DEFAULT_ASSUMED_POD_TTL: Duration = Duration::from_secs(30);

/// Errors of cache operations. None is retryable as is: they report caller
/// bugs or races the caller must resolve (e.g. the node vanished).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CacheError {
    /// `assume` for a node the cache does not know.
    #[error("node {0} is not in the cache")]
    UnknownNode(String),
    /// `assume` for a pod that is already assumed or bound.
    #[error("pod {0} is already assumed or bound")]
    AlreadyPlaced(PodKey),
}

#[derive(Debug)]
struct PodState {
    pod: Arc<PodInfo>,
    node: Arc<str>,
    assumed: bool,
    /// Its binding was proposed ([`NodeCache::mark_proposed`]): while it is
    /// also assumed, it counts in [`Inner::unconfirmed`].
    proposed: bool,
    /// Set by `finish_binding`; expiry applies only after it.
    deadline: Option<Instant>,
}

impl PodState {
    /// Whether it counts as a proposal not confirmed yet.
    fn in_flight(&self) -> bool {
        self.assumed && self.proposed
    }
}

#[derive(Debug, Default)]
struct Inner {
    /// foldhash, as `pods`: every bound pod looks its node up (SipHash was
    /// ~1 % of a 4-worker run's CPU).
    nodes: foldhash::HashMap<Arc<str>, Arc<NodeInfo>>,
    /// foldhash: a fast rehash as the map grows (it runs under the lock).
    pods: foldhash::HashMap<Arc<str>, PodState>,
    /// Bound pods whose node is not known (yet, or any more): they are
    /// attached when the node (re)appears, so its room stays counted.
    orphans: Orphans,
    partition: HashSet<Arc<str>>,
    /// Global change counter; a NodeInfo's `generation` is the value at its
    /// last change.
    generation: u64,
    /// Node names by the generation of their last change: a snapshot at
    /// generation `g` copies `recency.range(g + 1..)`.
    recency: BTreeMap<u64, Arc<str>>,
    /// Bumped when the node set or the partition changes: snapshots re-order.
    layout_generation: u64,
    /// Namespace name → labels (for `namespaceSelector`), copied into
    /// snapshots as one Arc when it changes.
    namespaces: Arc<HashMap<String, BTreeMap<String, String>>>,
    /// Image name → how many nodes report it in `status.images`
    /// (ImageLocality's spread). Shared with snapshots as one Arc and
    /// copied on write, so at most one copy is made per snapshot refresh;
    /// a node update whose image names did not change leaves it alone.
    images: Arc<HashMap<Arc<str>, usize>>,
    /// Pods nominated to nodes by preemption (upstream's nominator), by
    /// node; shared with snapshots as one Arc, copied on write.
    nominated: Arc<NominatedPods>,
    /// Pod uid → the node it is nominated to.
    nominated_node_of: HashMap<Arc<str>, Arc<str>>,
    /// Assumed pods whose binding was proposed and that the cluster has not
    /// confirmed yet (neither bound back through the watch nor forgotten).
    unconfirmed: usize,
    /// The volume objects, shared with snapshots as one Arc (empty until
    /// [`NodeCache::set_volume_state`]).
    volumes: Arc<VolumeState>,
}

impl Inner {
    /// Drops `uid`'s nomination, if any. Returns whether there was one.
    fn unnominate(&mut self, uid: &str) -> bool {
        let Some(node) = self.nominated_node_of.remove(uid) else {
            return false;
        };
        let map = Arc::make_mut(&mut self.nominated);
        if let Some(list) = map.get_mut(&node) {
            list.retain(|p| &*p.uid != uid);
            if list.is_empty() {
                map.remove(&node);
            }
        }
        true
    }

    /// Mutates a node, stamping it with a new generation.
    fn touch<R>(&mut self, name: &Arc<str>, f: impl FnOnce(&mut NodeInfo) -> R) -> Option<R> {
        let entry = self.nodes.get_mut(name)?;
        self.generation += 1;
        let g = self.generation;
        let info = Arc::make_mut(entry);
        let old = info.generation;
        let r = f(info);
        info.generation = g;
        self.recency.remove(&old);
        self.recency.insert(g, name.clone());
        Some(r)
    }

    fn place(&mut self, node: &Arc<str>, pod: Arc<PodInfo>) -> bool {
        if self.nodes.contains_key(node) {
            self.touch(node, |info| info.add_pod(pod)).unwrap_or(false)
        } else {
            self.orphans.park(node, pod);
            true
        }
    }

    /// Counts (`add`) or uncounts a node's reported image names.
    fn count_images(&mut self, images: &NodeImages, add: bool) {
        if images.is_empty() {
            return;
        }
        let counts = Arc::make_mut(&mut self.images);
        for name in images.keys() {
            if add {
                *counts.entry(name.clone()).or_insert(0) += 1;
            } else if let Some(c) = counts.get_mut(name) {
                *c -= 1;
                if *c == 0 {
                    counts.remove(name);
                }
            }
        }
    }

    fn unplace(&mut self, node: &Arc<str>, uid: &str) -> Option<Arc<PodInfo>> {
        if let Some(pod) = self.orphans.remove(node, uid) {
            return Some(pod);
        }
        self.touch(node, |info| info.remove_pod(uid)).flatten()
    }
}

/// The node cache. Cheap to share (`Arc<NodeCache>`); all methods take `&self`.
#[derive(Debug)]
pub struct NodeCache {
    inner: Mutex<Inner>,
    assumed_pod_ttl: Duration,
    /// Signalled when a proposed pod is confirmed or dropped
    /// ([`NodeCache::wait_for_room`]).
    flight: Condvar,
}

impl Default for NodeCache {
    fn default() -> Self {
        Self::new(DEFAULT_ASSUMED_POD_TTL)
    }
}

impl NodeCache {
    /// An empty cache expiring unconfirmed assumed pods after `assumed_pod_ttl`.
    #[must_use]
    pub fn new(assumed_pod_ttl: Duration) -> Self {
        NodeCache {
            inner: Mutex::new(Inner {
                layout_generation: 1,
                ..Inner::default()
            }),
            assumed_pod_ttl,
            flight: Condvar::new(),
        }
    }

    /// Adds or replaces a node, keeping the pods on it. Returns the cluster
    /// events the change amounts to (for requeueing unschedulable pods).
    pub fn upsert_node(&self, spec: NodeSpec) -> Vec<ClusterEvent> {
        let mut inner = self.inner.lock();
        let name = spec.name.clone();
        let spec = Arc::new(spec);
        let Some(old) = inner.nodes.get(&name).map(|n| n.spec.clone()) else {
            inner.count_images(&spec.images, true);
            let mut info = NodeInfo::new(spec);
            for pod in inner.orphans.take(&name) {
                info.add_pod(pod);
            }
            inner.nodes.insert(name.clone(), Arc::new(info));
            inner.touch(&name, |_| ());
            inner.layout_generation += 1;
            return vec![ClusterEvent::NodeAdded];
        };
        let events = node_change_events(&old, &spec);
        let same_images = old.images.len() == spec.images.len()
            && old.images.keys().all(|k| spec.images.contains_key(k));
        if !same_images {
            inner.count_images(&old.images, false);
            inner.count_images(&spec.images, true);
        }
        inner.touch(&name, |info| info.set_spec(spec));
        events
    }

    /// Removes a node. Pods still bound to it keep their state and their
    /// room: they wait as orphans and count again if the node comes back
    /// (a Node object deleted and re-created keeps its pods in Kubernetes).
    pub fn remove_node(&self, name: &str) {
        let mut inner = self.inner.lock();
        if let Some(info) = inner.nodes.remove(name) {
            inner.count_images(&info.spec.images, false);
            inner.recency.remove(&info.generation);
            inner.orphans.park_all(&info);
            inner.generation += 1;
            inner.layout_generation += 1;
        }
    }

    /// Records a Namespace's labels (add or update).
    pub fn upsert_namespace(&self, name: &str, labels: BTreeMap<String, String>) {
        let mut inner = self.inner.lock();
        if inner.namespaces.get(name) != Some(&labels) {
            Arc::make_mut(&mut inner.namespaces).insert(name.to_owned(), labels);
        }
    }

    /// Forgets a deleted Namespace.
    pub fn remove_namespace(&self, name: &str) {
        let mut inner = self.inner.lock();
        if inner.namespaces.contains_key(name) {
            Arc::make_mut(&mut inner.namespaces).remove(name);
        }
    }

    /// Sets the nodes this worker searches first.
    pub fn set_partition(&self, names: impl IntoIterator<Item = Arc<str>>) {
        let mut inner = self.inner.lock();
        inner.partition = names.into_iter().collect();
        inner.layout_generation += 1;
    }

    /// Records `pod` on `node` before binding (the scheduling cycle's decision).
    ///
    /// # Errors
    /// The node is unknown, or the pod is already assumed or bound.
    pub fn assume(&self, pod: Arc<PodInfo>, node: &str) -> Result<(), CacheError> {
        let mut inner = self.inner.lock();
        let Some((name, _)) = inner.nodes.get_key_value(node) else {
            return Err(CacheError::UnknownNode(node.to_owned()));
        };
        let name = name.clone();
        if inner.pods.contains_key(&pod.uid) {
            return Err(CacheError::AlreadyPlaced(pod.key.clone()));
        }
        // The pod's own nomination is now a placement (upstream's assume
        // deletes it from the nominator; a failed binding does not restore
        // it, as upstream clears the nominated node then).
        inner.unnominate(&pod.uid);
        inner.place(&name, pod.clone());
        inner.pods.insert(
            pod.uid.clone(),
            PodState {
                pod,
                node: name,
                assumed: true,
                proposed: false,
                deadline: None,
            },
        );
        Ok(())
    }

    /// Records that `pod` is nominated to `node` (`status.nominatedNodeName`
    /// after a preemption, for a pod of any worker), replacing its earlier
    /// nomination. Like upstream's nominator, a pod that is already assumed
    /// or bound is not nominated (it holds its room for real). Cycles see
    /// nominations after the next [`NodeCache::update_snapshot`]: Filter
    /// then counts the pod on `node` for pods of lower or equal priority
    /// (see [`crate::framework::runtime`]). `node` need not be known yet.
    pub fn set_nominated(&self, pod: Arc<PodInfo>, node: &str) {
        let mut inner = self.inner.lock();
        inner.unnominate(&pod.uid);
        if inner.pods.contains_key(&pod.uid) || node.is_empty() {
            return;
        }
        let node: Arc<str> = Arc::from(node);
        inner
            .nominated_node_of
            .insert(pod.uid.clone(), node.clone());
        Arc::make_mut(&mut inner.nominated)
            .entry(node)
            .or_default()
            .push(pod);
    }

    /// Drops a pod's nomination (it was scheduled, deleted, or preemption
    /// cleared `status.nominatedNodeName`). Returns whether it had one.
    pub fn clear_nominated(&self, uid: &str) -> bool {
        self.inner.lock().unnominate(uid)
    }

    /// Pods nominated to `node` (for inspection; cycles read their snapshot).
    #[must_use]
    pub fn nominated_pods(&self, node: &str) -> Vec<Arc<PodInfo>> {
        self.inner
            .lock()
            .nominated
            .get(node)
            .cloned()
            .unwrap_or_default()
    }

    /// The assumed pod's binding was proposed: until the cluster confirms it
    /// (or it is forgotten, deleted or expired) it counts as unconfirmed
    /// ([`NodeCache::unconfirmed`]). Nothing for a pod not assumed.
    pub fn mark_proposed(&self, uid: &str) {
        let mut inner = self.inner.lock();
        if let Some(st) = inner.pods.get_mut(uid)
            && st.assumed
            && !st.proposed
        {
            st.proposed = true;
            inner.unconfirmed += 1;
        }
    }

    /// A pod's state left the in-flight set (removed, or no longer
    /// assumed): counts it out of [`Inner::unconfirmed`] if it was in, and
    /// wakes a [`NodeCache::wait_for_room`] waiter then.
    fn left_flight(&self, inner: &mut Inner, was_in_flight: bool) {
        if was_in_flight {
            inner.unconfirmed -= 1;
            self.flight.notify_all();
        }
    }

    /// Assumed pods whose binding was proposed and not confirmed yet: how
    /// far this worker's decisions run ahead of what the cluster (and so
    /// the other workers) has seen.
    #[must_use]
    pub fn unconfirmed(&self) -> usize {
        self.inner.lock().unconfirmed
    }

    /// Blocks the calling thread while `max` or more proposed pods are
    /// unconfirmed, at most `timeout`; returns whether there is room. The
    /// scheduling thread's backpressure: a worker does not run more than
    /// `max` placements ahead of the cluster's confirmations, so the other
    /// workers' views (fed by the same confirmations) stay that fresh, and
    /// the watch stream gets the CPU it needs to keep up.
    pub fn wait_for_room(&self, max: usize, timeout: Duration) -> bool {
        let deadline = Instant::now() + timeout;
        let mut inner = self.inner.lock();
        while inner.unconfirmed >= max {
            if self.flight.wait_until(&mut inner, deadline).timed_out() {
                break;
            }
        }
        inner.unconfirmed < max
    }

    /// The binding call for an assumed pod returned; start its expiry clock.
    pub fn finish_binding(&self, uid: &str, now: Instant) {
        let ttl = self.assumed_pod_ttl;
        let mut inner = self.inner.lock();
        if let Some(st) = inner.pods.get_mut(uid)
            && st.assumed
        {
            st.deadline = Some(now + ttl);
        }
    }

    /// Drops an assumed pod (binding rejected or failed), releasing its
    /// resources. Returns false when the pod was not assumed (already
    /// confirmed, expired or never assumed): nothing is changed then.
    pub fn forget(&self, uid: &str) -> bool {
        let mut inner = self.inner.lock();
        match inner.pods.get(uid) {
            Some(st) if st.assumed => {
                let (node, in_flight) = (st.node.clone(), st.in_flight());
                inner.pods.remove(uid);
                self.left_flight(&mut inner, in_flight);
                inner.unplace(&node, uid);
                true
            }
            _ => false,
        }
    }

    /// A pod bound to `pod.node_name` arrived from the cluster: confirms our
    /// assumption (moving it if the cluster placed it elsewhere), or accounts
    /// for someone else's placement. Terminal pods are removed instead.
    /// Either way the pod's nomination, if any, is dropped.
    pub fn add_bound_pod(&self, pod: Arc<PodInfo>) {
        let Some(node) = pod.node_name.clone() else {
            return;
        };
        if pod.terminal {
            self.remove_pod(&pod.uid);
            return;
        }
        let mut inner = self.inner.lock();
        inner.unnominate(&pod.uid);
        if let Some(st) = inner.pods.get(&pod.uid) {
            let (old, in_flight) = (st.node.clone(), st.in_flight());
            self.left_flight(&mut inner, in_flight);
            inner.unplace(&old, &pod.uid);
        }
        inner.place(&node, pod.clone());
        inner.pods.insert(
            pod.uid.clone(),
            PodState {
                pod,
                node,
                assumed: false,
                proposed: false,
                deadline: None,
            },
        );
    }

    /// Moves a pod assumed on another node to `node`, keeping it assumed (and
    /// proposed, and its expiry): the arbiter bound it to one of its
    /// alternatives ([`crate::framework::ScheduleResult::alternatives`])
    /// because the room on the node it was assumed on was taken. Returns
    /// whether it moved (`false`: not assumed here, or assumed on `node`
    /// already).
    pub fn move_assumed(&self, uid: &str, node: &str) -> bool {
        let mut inner = self.inner.lock();
        let Some(st) = inner.pods.get(uid) else {
            return false;
        };
        if !st.assumed || &*st.node == node {
            return false;
        }
        let old = st.node.clone();
        let name: Arc<str> = inner
            .nodes
            .get_key_value(node)
            .map_or_else(|| Arc::from(node), |(n, _)| n.clone());
        let Some(pod) = inner.unplace(&old, uid) else {
            return false;
        };
        inner.place(&name, pod);
        if let Some(st) = inner.pods.get_mut(uid) {
            st.node = name;
        }
        true
    }

    /// The coordinator confirmed, without resending it, that the pod this
    /// cache holds assumed on `node` is bound there as is (`pod_bound`):
    /// it is bound now, in place (its node is not touched, so snapshots
    /// copy nothing). Returns the pod, or `None` when it is not assumed on
    /// `node` here (the cache is out of step with the coordinator).
    pub fn confirm_assumed(&self, uid: &str, node: &str) -> Option<Arc<PodInfo>> {
        let mut inner = self.inner.lock();
        let st = inner.pods.get_mut(uid)?;
        if !st.assumed || &*st.node != node {
            return None;
        }
        let in_flight = st.in_flight();
        st.assumed = false;
        st.deadline = None;
        let pod = st.pod.clone();
        self.left_flight(&mut inner, in_flight);
        inner.unnominate(uid);
        Some(pod)
    }

    /// A pod left the cluster (or terminated); its nomination, if any, is
    /// dropped too. Returns true when it held resources on a node, i.e. the
    /// removal is an `AssignedPodDeleted` event.
    pub fn remove_pod(&self, uid: &str) -> bool {
        let mut inner = self.inner.lock();
        inner.unnominate(uid);
        let Some(st) = inner.pods.remove(uid) else {
            return false;
        };
        self.left_flight(&mut inner, st.in_flight());
        inner.unplace(&st.node, uid).is_some()
    }

    /// Expires assumed pods whose binding finished more than the TTL ago and
    /// that were never confirmed. Returns their keys.
    pub fn cleanup_expired(&self, now: Instant) -> Vec<PodKey> {
        let mut inner = self.inner.lock();
        let expired: Vec<(Arc<str>, Arc<str>, PodKey)> = inner
            .pods
            .iter()
            .filter(|(_, st)| st.assumed && st.deadline.is_some_and(|d| d <= now))
            .map(|(uid, st)| (uid.clone(), st.node.clone(), st.pod.key.clone()))
            .collect();
        for (uid, node, _) in &expired {
            if let Some(st) = inner.pods.remove(uid) {
                self.left_flight(&mut inner, st.in_flight());
            }
            inner.unplace(node, uid);
        }
        expired.into_iter().map(|(_, _, k)| k).collect()
    }

    /// (nodes, pods, assumed pods) in the cache (`scheduler_cache_size`).
    #[must_use]
    pub fn sizes(&self) -> (usize, usize, usize) {
        let inner = self.inner.lock();
        let assumed = inner.pods.values().filter(|p| p.assumed).count();
        (inner.nodes.len(), inner.pods.len(), assumed)
    }

    /// Whether the pod is assumed (not yet confirmed).
    #[must_use]
    pub fn is_assumed(&self, uid: &str) -> bool {
        self.inner.lock().pods.get(uid).is_some_and(|s| s.assumed)
    }

    /// Node the pod is assumed or bound on.
    #[must_use]
    pub fn pod_node(&self, uid: &str) -> Option<Arc<str>> {
        self.inner.lock().pods.get(uid).map(|s| s.node.clone())
    }

    /// How many nodes report image name `image` (what snapshots answer to
    /// [`SharedLister::image_node_count`](flotilla_shared::framework::SharedLister::image_node_count)).
    #[must_use]
    pub fn image_node_count(&self, image: &str) -> usize {
        self.inner.lock().images.get(image).copied().unwrap_or(0)
    }

    /// Replaces the volume objects the next snapshots read (claims, PVs,
    /// StorageClasses, CSINodes, VolumeAttachments): a worker calls it as
    /// the coordinator's volume events arrive (`worker::volumes`).
    pub fn set_volume_state(&self, volumes: Arc<VolumeState>) {
        self.inner.lock().volumes = volumes;
    }

    /// Changes the volume objects the next snapshot gets, in place unless
    /// a snapshot still shares them (then on a copy: at most one per
    /// snapshot taken). Runs `f` under the cache's lock.
    pub fn update_volume_state<R>(&self, f: impl FnOnce(&mut VolumeState) -> R) -> R {
        f(Arc::make_mut(&mut self.inner.lock().volumes))
    }

    /// The volume objects the next snapshot gets.
    #[must_use]
    pub fn volume_state(&self) -> Arc<VolumeState> {
        self.inner.lock().volumes.clone()
    }

    /// A copy of one node's info (for tests and inspection).
    #[must_use]
    pub fn node(&self, name: &str) -> Option<Arc<NodeInfo>> {
        self.inner.lock().nodes.get(name).cloned()
    }

    /// Brings `snap` up to date: copies the nodes changed since the
    /// generation it reflects (an Arc clone each), or re-orders it entirely
    /// if nodes joined or left or the partition changed. Any number of
    /// snapshots may follow one cache. Holds the cache lock only for those
    /// copies.
    pub fn update_snapshot(&self, snap: &mut Snapshot) {
        let inner = self.inner.lock();
        if !Arc::ptr_eq(&snap.namespaces, &inner.namespaces) {
            snap.namespaces = inner.namespaces.clone();
        }
        if !Arc::ptr_eq(&snap.images, &inner.images) {
            snap.images = inner.images.clone();
        }
        if !Arc::ptr_eq(&snap.nominated, &inner.nominated) {
            snap.nominated = inner.nominated.clone();
        }
        if !Arc::ptr_eq(&snap.volumes, &inner.volumes) {
            snap.volumes = inner.volumes.clone();
        }
        if snap.layout_generation != inner.layout_generation {
            snap.rebuild(&inner.nodes, &inner.partition, inner.generation);
            snap.layout_generation = inner.layout_generation;
            return;
        }
        for name in inner.recency.range(snap.generation + 1..).map(|(_, n)| n) {
            if let Some(info) = inner.nodes.get(name) {
                snap.replace(info);
            }
        }
        snap.generation = inner.generation;
    }
}

/// Which cluster events a node update amounts to.
fn node_change_events(old: &NodeSpec, new: &NodeSpec) -> Vec<ClusterEvent> {
    let mut ev = Vec::new();
    let (a, b) = (&old.allocatable, &new.allocatable);
    let grew = b.milli_cpu > a.milli_cpu
        || b.memory > a.memory
        || b.ephemeral_storage > a.ephemeral_storage
        || b.allowed_pod_number > a.allowed_pod_number
        || b.scalar.iter().any(|(n, v)| *v > a.scalar(n));
    if grew {
        ev.push(ClusterEvent::NodeAllocatableGrew);
    }
    if old.labels != new.labels {
        ev.push(ClusterEvent::NodeLabelChanged);
    }
    if old.taints != new.taints {
        ev.push(ClusterEvent::NodeTaintChanged);
    }
    if old.unschedulable && !new.unschedulable {
        ev.push(ClusterEvent::NodeBecameSchedulable);
    }
    ev
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};

    fn cache_with(nodes: &[&str]) -> NodeCache {
        let c = NodeCache::new(Duration::from_secs(30));
        for n in nodes {
            c.upsert_node(
                NodeBuilder::new(n)
                    .cpu("4")
                    .memory("8Gi")
                    .pods(110)
                    .build_spec(),
            );
        }
        c
    }

    fn pod(name: &str, cpu: &str) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new(name).cpu(cpu).build_info())
    }

    fn bound(name: &str, cpu: &str, node: &str) -> Arc<PodInfo> {
        Arc::new(PodBuilder::new(name).cpu(cpu).node_name(node).build_info())
    }

    #[test]
    fn assume_then_forget_releases_everything() {
        let c = cache_with(&["n1"]);
        let p = pod("a", "1");
        c.assume(p.clone(), "n1").unwrap();
        assert_eq!(c.node("n1").unwrap().requested.milli_cpu, 1000);
        assert_eq!(
            c.assume(p.clone(), "n1"),
            Err(CacheError::AlreadyPlaced(p.key.clone()))
        );
        assert!(c.forget(&p.uid));
        assert!(!c.forget(&p.uid), "second forget is a no-op");
        let n = c.node("n1").unwrap();
        assert_eq!(n.requested.milli_cpu, 0);
        assert_eq!(n.pod_count(), 0);
    }

    #[test]
    fn assume_on_unknown_node_fails() {
        let c = cache_with(&["n1"]);
        assert_eq!(
            c.assume(pod("a", "1"), "nx"),
            Err(CacheError::UnknownNode("nx".into()))
        );
    }

    #[test]
    fn confirm_makes_the_pod_bound_and_forget_no_longer_applies() {
        let c = cache_with(&["n1"]);
        let p = pod("a", "1");
        c.assume(p, "n1").unwrap();
        c.add_bound_pod(bound("a", "1", "n1"));
        assert!(!c.is_assumed("uid-a"));
        assert!(!c.forget("uid-a"));
        assert_eq!(
            c.node("n1").unwrap().requested.milli_cpu,
            1000,
            "counted once"
        );
    }

    #[test]
    fn confirm_in_place_binds_the_assumed_pod_without_touching_its_node() {
        let c = cache_with(&["n1", "n2"]);
        let t0 = Instant::now();
        c.assume(pod("a", "1"), "n1").unwrap();
        c.finish_binding("uid-a", t0);
        let generation = c.node("n1").unwrap().generation;
        assert!(
            c.confirm_assumed("uid-a", "n2").is_none(),
            "not assumed there"
        );
        assert!(
            c.is_assumed("uid-a"),
            "a refused confirmation changes nothing"
        );
        let got = c.confirm_assumed("uid-a", "n1").expect("assumed on n1");
        assert_eq!(got.key.to_string(), "default/a");
        assert!(!c.is_assumed("uid-a"));
        assert!(!c.forget("uid-a"), "bound pods are not forgotten");
        assert!(
            c.cleanup_expired(t0 + Duration::from_secs(3600)).is_empty(),
            "bound pods do not expire"
        );
        let n = c.node("n1").unwrap();
        assert_eq!((n.requested.milli_cpu, n.pod_count()), (1000, 1));
        assert_eq!(n.generation, generation, "the node is not touched");
        assert!(c.confirm_assumed("uid-a", "n1").is_none(), "only once");
        assert!(c.confirm_assumed("uid-x", "n1").is_none(), "unknown pod");
        // A full confirmation afterwards still applies (a later update).
        c.add_bound_pod(bound("a", "1", "n1"));
        assert_eq!(c.node("n1").unwrap().requested.milli_cpu, 1000);
    }

    #[test]
    fn an_assumed_pod_granted_an_alternative_moves_there_still_assumed() {
        let c = cache_with(&["n1", "n2"]);
        let t0 = Instant::now();
        c.assume(pod("a", "1"), "n1").unwrap();
        c.mark_proposed("uid-a");
        assert!(!c.move_assumed("uid-a", "n1"), "already there");
        assert!(c.move_assumed("uid-a", "n2"));
        let cpu = |n: &str| c.node(n).unwrap().requested.milli_cpu;
        assert_eq!((cpu("n1"), cpu("n2")), (0, 1000), "the room moved with it");
        assert!(c.is_assumed("uid-a"));
        assert_eq!(c.unconfirmed(), 1, "still waiting for the cluster");
        // The confirmation names the new node; forgetting frees that one.
        assert!(c.confirm_assumed("uid-a", "n1").is_none());
        c.finish_binding("uid-a", t0);
        assert!(c.forget("uid-a"));
        assert_eq!((cpu("n1"), cpu("n2")), (0, 0));
        assert_eq!(c.unconfirmed(), 0);
        // Bound pods and unknown pods do not move.
        c.add_bound_pod(bound("b", "1", "n1"));
        assert!(!c.move_assumed("uid-b", "n2"));
        assert!(!c.move_assumed("uid-x", "n2"));
        assert_eq!((cpu("n1"), cpu("n2")), (1000, 0));
    }

    #[test]
    fn proposed_pods_count_as_unconfirmed_until_confirmed_forgotten_deleted_or_expired() {
        let c = cache_with(&["n1", "n2"]);
        let t0 = Instant::now();
        for (name, node) in [
            ("a", "n1"),
            ("b", "n1"),
            ("c", "n2"),
            ("d", "n2"),
            ("e", "n1"),
        ] {
            c.assume(pod(name, "0"), node).unwrap();
            c.mark_proposed(&format!("uid-{name}"));
        }
        c.mark_proposed("uid-a");
        c.mark_proposed("uid-nobody");
        assert_eq!(c.unconfirmed(), 5, "each proposed assumed pod once");
        assert!(c.confirm_assumed("uid-a", "n1").is_some());
        c.add_bound_pod(bound("b", "0", "n2"));
        assert!(c.forget("uid-c"));
        assert!(c.remove_pod("uid-d"));
        assert_eq!(c.unconfirmed(), 1);
        c.finish_binding("uid-e", t0);
        assert_eq!(c.cleanup_expired(t0 + Duration::from_secs(3600)).len(), 1);
        assert_eq!(c.unconfirmed(), 0);
        // Assumed but not proposed (a gang member waiting at Permit): not
        // counted, and bound pods are never marked.
        c.assume(pod("f", "0"), "n1").unwrap();
        c.mark_proposed("uid-b");
        assert_eq!(c.unconfirmed(), 0);
    }

    #[test]
    fn wait_for_room_returns_once_a_confirmation_makes_room() {
        let c = Arc::new(cache_with(&["n1"]));
        c.assume(pod("a", "0"), "n1").unwrap();
        c.mark_proposed("uid-a");
        assert!(c.wait_for_room(2, Duration::ZERO), "1 of 2 in flight");
        assert!(
            !c.wait_for_room(1, Duration::from_millis(20)),
            "full: waits out the timeout"
        );
        let confirmer = {
            let c = c.clone();
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(50));
                c.confirm_assumed("uid-a", "n1").expect("assumed");
            })
        };
        assert!(
            c.wait_for_room(1, Duration::from_secs(30)),
            "woken by the confirmation"
        );
        confirmer.join().unwrap();
    }

    #[test]
    fn confirm_on_another_node_moves_the_pod() {
        let c = cache_with(&["n1", "n2"]);
        c.assume(pod("a", "1"), "n1").unwrap();
        c.add_bound_pod(bound("a", "1", "n2"));
        assert_eq!(c.node("n1").unwrap().requested.milli_cpu, 0);
        assert_eq!(c.node("n2").unwrap().requested.milli_cpu, 1000);
    }

    #[test]
    fn unconfirmed_assumed_pods_expire_only_after_binding_finished_plus_ttl() {
        let c = cache_with(&["n1"]);
        let t0 = Instant::now();
        c.assume(pod("a", "1"), "n1").unwrap();
        assert!(
            c.cleanup_expired(t0 + Duration::from_secs(3600)).is_empty(),
            "binding still running"
        );
        c.finish_binding("uid-a", t0);
        assert!(c.cleanup_expired(t0 + Duration::from_secs(29)).is_empty());
        let expired = c.cleanup_expired(t0 + Duration::from_secs(30));
        assert_eq!(expired, vec![PodKey::new("default", "a")]);
        assert_eq!(c.node("n1").unwrap().requested.milli_cpu, 0);
    }

    #[test]
    fn confirmed_pods_never_expire() {
        let c = cache_with(&["n1"]);
        let t0 = Instant::now();
        c.assume(pod("a", "1"), "n1").unwrap();
        c.finish_binding("uid-a", t0);
        c.add_bound_pod(bound("a", "1", "n1"));
        assert!(c.cleanup_expired(t0 + Duration::from_secs(3600)).is_empty());
    }

    #[test]
    fn pods_bound_before_their_node_arrives_are_attached_later() {
        let c = cache_with(&[]);
        c.add_bound_pod(bound("a", "2", "late"));
        c.upsert_node(NodeBuilder::new("late").cpu("4").pods(10).build_spec());
        assert_eq!(c.node("late").unwrap().requested.milli_cpu, 2000);
        assert!(c.remove_pod("uid-a"));
        assert_eq!(c.node("late").unwrap().requested.milli_cpu, 0);
    }

    #[test]
    fn node_updates_report_the_events_that_matter() {
        let c = cache_with(&["n1"]);
        let ev = c.upsert_node(
            NodeBuilder::new("n1")
                .cpu("8")
                .memory("8Gi")
                .pods(110)
                .label("zone", "a")
                .build_spec(),
        );
        assert_eq!(
            ev,
            vec![
                ClusterEvent::NodeAllocatableGrew,
                ClusterEvent::NodeLabelChanged
            ]
        );
        let ev = c.upsert_node(NodeBuilder::new("n2").build_spec());
        assert_eq!(ev, vec![ClusterEvent::NodeAdded]);
    }

    #[test]
    fn image_counts_follow_node_adds_updates_and_removals_into_snapshots() {
        use flotilla_shared::framework::SharedLister;
        let c = NodeCache::default();
        let with = |name: &str, images: &[&[&str]]| {
            images
                .iter()
                .fold(NodeBuilder::new(name), |b, names| b.image(names, 1 << 20))
                .build_spec()
        };
        c.upsert_node(with("a", &[&["nginx:1", "nginx:latest"], &["redis:7"]]));
        c.upsert_node(with("b", &[&["nginx:1"]]));
        c.upsert_node(with("c", &[]));
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        assert_eq!(s.image_node_count("nginx:1"), 2);
        assert_eq!(s.image_node_count("nginx:latest"), 1);
        assert_eq!(s.image_node_count("redis:7"), 1);
        assert_eq!(s.image_node_count("absent:latest"), 0);

        // b pulls redis and drops nginx; the old snapshot keeps its view.
        c.upsert_node(with("b", &[&["redis:7"]]));
        assert_eq!(s.image_node_count("nginx:1"), 2, "snapshot is stable");
        c.update_snapshot(&mut s);
        assert_eq!(s.image_node_count("nginx:1"), 1);
        assert_eq!(s.image_node_count("redis:7"), 2);

        // A status update with the same image names changes nothing.
        let before = Arc::clone(&s.images);
        c.upsert_node(with("b", &[&["redis:7"]]));
        c.update_snapshot(&mut s);
        assert!(Arc::ptr_eq(&before, &s.images), "no copy without a change");

        c.remove_node("a");
        c.update_snapshot(&mut s);
        assert_eq!(s.image_node_count("nginx:1"), 0);
        assert_eq!(s.image_node_count("nginx:latest"), 0);
        assert_eq!(s.image_node_count("redis:7"), 1);
        assert_eq!(c.image_node_count("redis:7"), 1);
        // The snapshot's map agrees with a scan of its nodes (the trait default).
        for image in ["nginx:1", "redis:7"] {
            let scanned = s
                .nodes()
                .iter()
                .filter(|n| n.spec.images.contains_key(image))
                .count();
            assert_eq!(s.image_node_count(image), scanned, "{image}");
        }
    }

    #[test]
    fn snapshot_sees_changes_only_after_refresh_and_keeps_partition_first() {
        let c = cache_with(&["a", "b", "c", "d"]);
        c.set_partition(["c".into(), "a".into()]);
        let mut s = Snapshot::default();
        c.update_snapshot(&mut s);
        assert_eq!(s.len(), 4);
        assert_eq!(s.partition_len(), 2);
        let first: HashSet<&str> = s.nodes()[..2].iter().map(|n| n.name()).collect();
        assert_eq!(first, HashSet::from(["a", "c"]));
        c.assume(pod("p", "1"), "b").unwrap();
        assert_eq!(
            s.get("b").unwrap().requested.milli_cpu,
            0,
            "snapshot is a stable view"
        );
        c.update_snapshot(&mut s);
        assert_eq!(s.get("b").unwrap().requested.milli_cpu, 1000);
        c.remove_node("d");
        c.update_snapshot(&mut s);
        assert_eq!(s.len(), 3);
        assert!(s.get("d").is_none());
    }
}
