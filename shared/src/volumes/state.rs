//! [`VolumeState`]: the volume objects a scheduling cycle reads, keyed for
//! the lookups the Filters make; and [`ClaimUsers`]: which pods use each
//! claim across the cluster, kept current as pods come and go.

use foldhash::HashMap;
use std::sync::{Arc, LazyLock};

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, StorageClass as K8sStorageClass, VolumeAttachment as K8sVolumeAttachment,
};

use super::model::{
    ClaimRef, CsiDriver, CsiNode, Pv, Pvc, StorageClass, VolumeAttachment, VolumeError,
};
use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;

/// namespace → name → `T`.
type ByNamespace<T> = HashMap<Arc<str>, HashMap<Arc<str>, T>>;

/// A stored object: compiled, or the error that kept it from compiling
/// (so a pod using it is told what is wrong with it).
pub type Entry<T> = Result<Arc<T>, Arc<VolumeError>>;

/// The answer to a lookup in [`VolumeState`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Lookup<'a, T> {
    /// The object.
    Found(&'a Arc<T>),
    /// The object exists but could not be read.
    Invalid(&'a VolumeError),
    /// No such object.
    Missing,
}

impl<'a, T> Lookup<'a, T> {
    fn of(entry: Option<&'a Entry<T>>) -> Self {
        match entry {
            Some(Ok(v)) => Lookup::Found(v),
            Some(Err(e)) => Lookup::Invalid(e),
            None => Lookup::Missing,
        }
    }

    /// The object when found and valid.
    #[must_use]
    pub fn found(self) -> Option<&'a Arc<T>> {
        match self {
            Lookup::Found(v) => Some(v),
            _ => None,
        }
    }
}

/// The volume objects of the cluster, as the volume Filters read them:
/// claims by namespace and name, PVs, StorageClasses and CSIDrivers by
/// name, CSINodes by node name, VolumeAttachments by node. Every lookup is
/// a hash lookup without allocation.
///
/// Objects that do not compile are kept as their [`VolumeError`]
/// ([`Lookup::Invalid`]): a pod using them gets that message, naming the
/// object and the field.
///
/// The scheduling cycle reads it through
/// [`crate::framework::SharedLister::volumes`], an empty state unless the
/// snapshot was given one (with an empty state every pod with a claim is
/// rejected: `persistentvolumeclaim "<name>" not found`). A worker's is
/// fed by the coordinator's volume events; the coordinator keeps its own
/// for the bind arbiter (`BindView::volumes`).
#[derive(Debug, Clone, Default)]
pub struct VolumeState {
    /// namespace → name → claim.
    claims: ByNamespace<Entry<Pvc>>,
    pvs: HashMap<Arc<str>, Entry<Pv>>,
    classes: HashMap<Arc<str>, Entry<StorageClass>>,
    csi_nodes: HashMap<Arc<str>, Entry<CsiNode>>,
    csi_drivers: HashMap<Arc<str>, Entry<CsiDriver>>,
    /// node name → attachments to it.
    attachments: HashMap<Arc<str>, Vec<Arc<VolumeAttachment>>>,
    /// attachment name → its node (to remove it by name).
    attachment_node: HashMap<Arc<str>, Arc<str>>,
    /// PVs shown with an assumed `claimRef` ([`VolumeState::assume_pv_claim`]).
    assumed_pvs: HashMap<Arc<str>, Assumed<Pv, ClaimRef>>,
    /// Claims shown with an assumed `selected-node`
    /// ([`VolumeState::assume_selected_node`]), by (namespace, name).
    assumed_claims: HashMap<(Arc<str>, Arc<str>), Assumed<Pvc, Arc<str>>>,
}

/// An object shown as Reserve assumed it (upstream's assume cache): the
/// copy the watch last gave, kept to be shown again when the last
/// reservation holding the assumption is dropped.
#[derive(Debug, Clone)]
struct Assumed<T, A> {
    /// What the watch last gave.
    real: Entry<T>,
    /// What is assumed: the PV's `claimRef`, the claim's selected node.
    assumed: A,
    /// How many reservations hold the assumption (pods sharing a claim
    /// assume the same binding).
    holds: u32,
}

/// `real` with `claimRef` set to `claim_ref`.
fn assumed_pv(real: &Pv, claim_ref: &ClaimRef) -> Pv {
    let mut shown = real.clone();
    shown.claim_ref = Some(claim_ref.clone());
    shown
}

static EMPTY: LazyLock<Arc<VolumeState>> = LazyLock::new(Arc::default);

/// Stores `obj` compiled, or its error under its name; the error is
/// returned too (for the caller's log). An object without a name cannot
/// be stored: only the error is returned.
fn apply<K, T>(
    map: &mut HashMap<Arc<str>, Entry<T>>,
    obj: &K,
    name: Option<&str>,
) -> Result<(), VolumeError>
where
    T: for<'a> TryFrom<&'a K, Error = VolumeError>,
{
    let compiled = T::try_from(obj);
    let Some(name) = name.filter(|n| !n.is_empty()) else {
        return compiled.map(|_| ());
    };
    match compiled {
        Ok(v) => {
            map.insert(Arc::from(name), Ok(Arc::new(v)));
            Ok(())
        }
        Err(e) => {
            map.insert(Arc::from(name), Err(Arc::new(e.clone())));
            Err(e)
        }
    }
}

impl VolumeState {
    /// A shared empty state (what a lister without volume state answers).
    #[must_use]
    pub fn empty() -> Arc<VolumeState> {
        Arc::clone(&EMPTY)
    }

    /// The claim `namespace/name`.
    #[must_use]
    pub fn claim(&self, namespace: &str, name: &str) -> Lookup<'_, Pvc> {
        Lookup::of(self.claims.get(namespace).and_then(|m| m.get(name)))
    }

    /// The PV `name`.
    #[must_use]
    pub fn pv(&self, name: &str) -> Lookup<'_, Pv> {
        Lookup::of(self.pvs.get(name))
    }

    /// Every PV that could be read, in no particular order (O(PVs)).
    pub fn pvs(&self) -> impl Iterator<Item = &Arc<Pv>> {
        self.pvs.values().filter_map(|e| e.as_ref().ok())
    }

    /// The StorageClass `name`.
    #[must_use]
    pub fn storage_class(&self, name: &str) -> Lookup<'_, StorageClass> {
        Lookup::of(self.classes.get(name))
    }

    /// The CSINode of node `node`.
    #[must_use]
    pub fn csi_node(&self, node: &str) -> Lookup<'_, CsiNode> {
        Lookup::of(self.csi_nodes.get(node))
    }

    /// The CSIDriver `name`.
    #[must_use]
    pub fn csi_driver(&self, name: &str) -> Lookup<'_, CsiDriver> {
        Lookup::of(self.csi_drivers.get(name))
    }

    /// The VolumeAttachments to node `node` (empty when none).
    #[must_use]
    pub fn attachments_on(&self, node: &str) -> &[Arc<VolumeAttachment>] {
        self.attachments.get(node).map_or(&[], Vec::as_slice)
    }

    /// Whether the VolumeAttachment `name` is held.
    #[must_use]
    pub fn has_volume_attachment(&self, name: &str) -> bool {
        self.attachment_node.contains_key(name)
    }

    /// Adds or replaces a claim.
    ///
    /// # Errors
    /// The claim's [`VolumeError`] (it is stored as invalid, unless it has
    /// no name).
    pub fn apply_claim(&mut self, claim: &PersistentVolumeClaim) -> Result<(), VolumeError> {
        let ns = claim.metadata.namespace.as_deref().unwrap_or("default");
        let by_name = self.claims.entry(Arc::from(ns)).or_default();
        let result = apply::<_, Pvc>(by_name, claim, claim.metadata.name.as_deref());
        if let Some(name) = claim.metadata.name.as_deref() {
            self.keep_assumed_claim(ns, name);
        }
        result
    }

    /// Adds or replaces a compiled claim (as [`VolumeState::apply_claim`]).
    pub fn insert_claim(&mut self, claim: Pvc) {
        let (ns, name) = (claim.namespace.clone(), claim.name.clone());
        self.insert_compiled_claim(Ok(Arc::new(claim)), &ns, &name);
        self.keep_assumed_claim(&ns, &name);
    }

    /// Removes the claim `namespace/name` (and any assumption about it).
    pub fn remove_claim(&mut self, namespace: &str, name: &str) {
        self.assumed_claims
            .remove(&(Arc::<str>::from(namespace), Arc::<str>::from(name)));
        if let Some(m) = self.claims.get_mut(namespace) {
            m.remove(name);
            if m.is_empty() {
                self.claims.remove(namespace);
            }
        }
    }

    /// Adds or replaces a PV. A PV whose `claimRef` is assumed stays shown
    /// as assumed until the object given has a `claimRef` (the write
    /// landed, or another binding won: the object given is shown).
    ///
    /// # Errors
    /// As [`VolumeState::apply_claim`].
    pub fn apply_pv(&mut self, pv: &PersistentVolume) -> Result<(), VolumeError> {
        let result = apply::<_, Pv>(&mut self.pvs, pv, pv.metadata.name.as_deref());
        if let Some(name) = pv.metadata.name.as_deref() {
            self.keep_assumed_pv(name);
        }
        result
    }

    /// Adds or replaces a compiled PV (as [`VolumeState::apply_pv`]).
    pub fn insert_pv(&mut self, pv: Pv) {
        let name = pv.name.clone();
        self.pvs.insert(name.clone(), Ok(Arc::new(pv)));
        self.keep_assumed_pv(&name);
    }

    /// After the watch gave PV `name`: if its `claimRef` is assumed and the
    /// object given has none, the given object is kept aside and the
    /// assumed copy shown again; otherwise the assumption ends.
    fn keep_assumed_pv(&mut self, name: &str) {
        let Some(a) = self.assumed_pvs.get_mut(name) else {
            return;
        };
        let given = self.pvs.get(name).cloned();
        match given {
            Some(Ok(g)) if g.claim_ref.is_none() => {
                let shown = assumed_pv(&g, &a.assumed);
                a.real = Ok(g);
                self.pvs.insert(Arc::from(name), Ok(Arc::new(shown)));
            }
            _ => {
                self.assumed_pvs.remove(name);
            }
        }
    }

    /// Removes the PV `name` (and any assumption about it).
    pub fn remove_pv(&mut self, name: &str) {
        self.pvs.remove(name);
        self.assumed_pvs.remove(name);
    }

    /// Reserve of a static binding: shows PV `pv` with its `claimRef` set
    /// to the claim `namespace/claim` (its uid), so no other claim takes it,
    /// until the watch shows the PV's own `claimRef` or the last hold is
    /// dropped ([`VolumeState::forget_pv_claim`]). Returns `false` (nothing
    /// assumed) when the PV or the claim is not found or cannot be read.
    pub fn assume_pv_claim(&mut self, pv: &str, namespace: &str, claim: &str) -> bool {
        let Lookup::Found(c) = self.claim(namespace, claim) else {
            return false;
        };
        let claim_ref = ClaimRef {
            namespace: c.namespace.clone(),
            name: c.name.clone(),
            uid: Some(c.uid.clone()),
        };
        if let Some(a) = self.assumed_pvs.get_mut(pv) {
            a.holds += 1;
            return true;
        }
        let Some(Ok(real)) = self.pvs.get(pv).cloned() else {
            return false;
        };
        let shown = assumed_pv(&real, &claim_ref);
        self.pvs.insert(Arc::from(pv), Ok(Arc::new(shown)));
        self.assumed_pvs.insert(
            Arc::from(pv),
            Assumed {
                real: Ok(real),
                assumed: claim_ref,
                holds: 1,
            },
        );
        true
    }

    /// Drops one hold of [`VolumeState::assume_pv_claim`] on `pv`; the last
    /// shows the PV the watch last gave again.
    pub fn forget_pv_claim(&mut self, pv: &str) {
        let Some(a) = self.assumed_pvs.get_mut(pv) else {
            return;
        };
        a.holds = a.holds.saturating_sub(1);
        if a.holds == 0
            && let Some(a) = self.assumed_pvs.remove(pv)
        {
            self.pvs.insert(Arc::from(pv), a.real);
        }
    }

    /// Reserve of a provision: shows the claim `namespace/claim` with
    /// `volume.kubernetes.io/selected-node: node`, until the watch shows the
    /// claim with a selected node of its own or bound, or the last hold is
    /// dropped ([`VolumeState::forget_selected_node`]). Returns `false`
    /// when the claim is not found or cannot be read.
    pub fn assume_selected_node(&mut self, namespace: &str, claim: &str, node: &str) -> bool {
        let key = (Arc::<str>::from(namespace), Arc::<str>::from(claim));
        if let Some(a) = self.assumed_claims.get_mut(&key) {
            a.holds += 1;
            return true;
        }
        let Lookup::Found(real) = self.claim(namespace, claim) else {
            return false;
        };
        let real = Arc::clone(real);
        let mut shown = (*real).clone();
        shown.selected_node = Some(Arc::from(node));
        self.insert_compiled_claim(Ok(Arc::new(shown)), &key.0, &key.1);
        self.assumed_claims.insert(
            key,
            Assumed {
                real: Ok(real),
                assumed: Arc::from(node),
                holds: 1,
            },
        );
        true
    }

    /// Drops one hold of [`VolumeState::assume_selected_node`]; the last
    /// shows the claim the watch last gave again.
    pub fn forget_selected_node(&mut self, namespace: &str, claim: &str) {
        let key = (Arc::<str>::from(namespace), Arc::<str>::from(claim));
        let Some(a) = self.assumed_claims.get_mut(&key) else {
            return;
        };
        a.holds = a.holds.saturating_sub(1);
        if a.holds == 0
            && let Some(a) = self.assumed_claims.remove(&key)
        {
            self.insert_compiled_claim(a.real, &key.0, &key.1);
        }
    }

    fn insert_compiled_claim(&mut self, claim: Entry<Pvc>, namespace: &Arc<str>, name: &Arc<str>) {
        self.claims
            .entry(namespace.clone())
            .or_default()
            .insert(name.clone(), claim);
    }

    /// After the watch gave the claim `namespace/name`: if its selected
    /// node is assumed and the object given neither names one nor is
    /// bound, the given object is kept aside and the assumed copy shown
    /// again; otherwise the assumption ends.
    fn keep_assumed_claim(&mut self, namespace: &str, name: &str) {
        let key = (Arc::<str>::from(namespace), Arc::<str>::from(name));
        let Some(a) = self.assumed_claims.get_mut(&key) else {
            return;
        };
        let given = self
            .claims
            .get(namespace)
            .and_then(|m| m.get(name))
            .cloned();
        match given {
            Some(Ok(g)) if g.selected_node.is_none() && g.volume_name.is_none() => {
                let mut shown = (*g).clone();
                shown.selected_node = Some(a.assumed.clone());
                a.real = Ok(g);
                self.insert_compiled_claim(Ok(Arc::new(shown)), &key.0, &key.1);
            }
            _ => {
                self.assumed_claims.remove(&key);
            }
        }
    }

    /// Adds or replaces a StorageClass.
    ///
    /// # Errors
    /// As [`VolumeState::apply_claim`].
    pub fn apply_storage_class(&mut self, class: &K8sStorageClass) -> Result<(), VolumeError> {
        apply::<_, StorageClass>(&mut self.classes, class, class.metadata.name.as_deref())
    }

    /// Removes the StorageClass `name`.
    pub fn remove_storage_class(&mut self, name: &str) {
        self.classes.remove(name);
    }

    /// Adds or replaces a CSINode.
    ///
    /// # Errors
    /// As [`VolumeState::apply_claim`].
    pub fn apply_csi_node(&mut self, node: &CSINode) -> Result<(), VolumeError> {
        apply::<_, CsiNode>(&mut self.csi_nodes, node, node.metadata.name.as_deref())
    }

    /// Removes the CSINode `name`.
    pub fn remove_csi_node(&mut self, name: &str) {
        self.csi_nodes.remove(name);
    }

    /// Adds or replaces a CSIDriver.
    ///
    /// # Errors
    /// As [`VolumeState::apply_claim`].
    pub fn apply_csi_driver(&mut self, driver: &CSIDriver) -> Result<(), VolumeError> {
        apply::<_, CsiDriver>(
            &mut self.csi_drivers,
            driver,
            driver.metadata.name.as_deref(),
        )
    }

    /// Removes the CSIDriver `name`.
    pub fn remove_csi_driver(&mut self, name: &str) {
        self.csi_drivers.remove(name);
    }

    /// Adds or replaces a VolumeAttachment (an attachment moved to another
    /// node leaves the old one).
    ///
    /// # Errors
    /// The attachment's [`VolumeError`]; an attachment that does not
    /// compile is not stored (it has no node to be counted on) and an
    /// earlier copy of it is removed.
    pub fn apply_volume_attachment(&mut self, va: &K8sVolumeAttachment) -> Result<(), VolumeError> {
        match VolumeAttachment::try_from(va) {
            Ok(a) => {
                self.insert_volume_attachment(a);
                Ok(())
            }
            Err(e) => {
                if let Some(name) = va.metadata.name.as_deref() {
                    self.remove_volume_attachment(name);
                }
                Err(e)
            }
        }
    }

    /// Adds or replaces a compiled VolumeAttachment.
    pub fn insert_volume_attachment(&mut self, va: VolumeAttachment) {
        self.remove_volume_attachment(&va.name);
        self.attachment_node
            .insert(va.name.clone(), va.node_name.clone());
        self.attachments
            .entry(va.node_name.clone())
            .or_default()
            .push(Arc::new(va));
    }

    /// Removes the VolumeAttachment `name`.
    pub fn remove_volume_attachment(&mut self, name: &str) {
        let Some(node) = self.attachment_node.remove(name) else {
            return;
        };
        if let Some(list) = self.attachments.get_mut(&node) {
            list.retain(|a| &*a.name != name);
            if list.is_empty() {
                self.attachments.remove(&node);
            }
        }
    }
}

/// Which pods use each claim, across every node of a view (upstream's
/// snapshot `usedPVCSet`, built from `NodeInfo.PVCRefCounts`): the claims
/// of PVC volumes ([`super::PodVolumes::pvc_claims`]) of the pods placed
/// on nodes (bound, assumed or granted). VolumeRestrictions'
/// `ReadWriteOncePod` check reads it.
///
/// Kept current by [`ClaimUsers::node_replaced`] (O(pods with claims on
/// the two copies of the node)); a new view starts with
/// [`ClaimUsers::count_nodes`]. Pods without claims cost one pointer check.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ClaimUsers {
    /// namespace → claim name → uids of the pods using it.
    users: ByNamespace<Vec<Arc<str>>>,
}

impl ClaimUsers {
    /// Counts every pod of `nodes`.
    pub fn count_nodes<'a>(nodes: impl IntoIterator<Item = &'a NodeInfo>) -> Self {
        let mut out = ClaimUsers::default();
        for n in nodes {
            for p in &n.pods {
                out.add_pod(p);
            }
        }
        out
    }

    /// Counts `pod` (placed on some node).
    pub fn add_pod(&mut self, pod: &PodInfo) {
        let Some(v) = pod.volumes.as_deref() else {
            return;
        };
        for c in v.pvc_claims() {
            let users = self
                .users
                .entry(pod.key.namespace.clone())
                .or_default()
                .entry(c.claim.clone())
                .or_default();
            if !users.contains(&pod.uid) {
                users.push(pod.uid.clone());
            }
        }
    }

    /// Uncounts `pod` (removed from its node).
    pub fn remove_pod(&mut self, pod: &PodInfo) {
        let Some(v) = pod.volumes.as_deref() else {
            return;
        };
        let Some(by_name) = self.users.get_mut(&*pod.key.namespace) else {
            return;
        };
        for c in v.pvc_claims() {
            if let Some(users) = by_name.get_mut(&*c.claim) {
                users.retain(|u| *u != pod.uid);
                if users.is_empty() {
                    by_name.remove(&*c.claim);
                }
            }
        }
        if by_name.is_empty() {
            self.users.remove(&*pod.key.namespace);
        }
    }

    /// `old` was replaced by `new` (the same node, pods added or removed).
    pub fn node_replaced(&mut self, old: &NodeInfo, new: &NodeInfo) {
        for p in old.pods.iter().filter(|p| p.volumes.is_some()) {
            self.remove_pod(p);
        }
        for p in new.pods.iter().filter(|p| p.volumes.is_some()) {
            self.add_pod(p);
        }
    }

    /// Whether a pod other than the one with uid `uid` uses the claim
    /// `namespace/claim` (upstream `IsPVCUsedByPods`, which never meets
    /// the pod being scheduled; the coordinator's view may hold a granted
    /// copy of it, which is no other pod).
    #[must_use]
    pub fn used_by_other_pod(&self, namespace: &str, claim: &str, uid: &str) -> bool {
        self.users
            .get(namespace)
            .and_then(|m| m.get(claim))
            .is_some_and(|users| users.iter().any(|u| &**u != uid))
    }
}

/// [`ClaimUsers::used_by_other_pod`] by walking `nodes` (for views that
/// keep no [`ClaimUsers`]: O(pods)).
#[must_use]
pub fn claim_used_by_other_pod<'a>(
    nodes: impl IntoIterator<Item = &'a Arc<NodeInfo>>,
    namespace: &str,
    claim: &str,
    uid: &str,
) -> bool {
    nodes.into_iter().any(|n| {
        n.pods.iter().any(|p| {
            &*p.uid != uid
                && &*p.key.namespace == namespace
                && p.volumes
                    .as_deref()
                    .is_some_and(|v| v.pvc_claims().any(|c| &*c.claim == claim))
        })
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::volumes::{PvcBuilder, storage_class, volume_attachment};
    use crate::testing::{NodeBuilder, PodBuilder};

    #[test]
    fn lookups_find_valid_invalid_and_missing_objects() {
        let mut s = VolumeState::default();
        s.apply_claim(&PvcBuilder::new("ok").build()).unwrap();
        let e = s
            .apply_claim(&PvcBuilder::new("bad").access_mode("Sometimes").build())
            .unwrap_err();
        assert!(matches!(s.claim("default", "ok"), Lookup::Found(c) if &*c.name == "ok"));
        assert_eq!(s.claim("default", "bad"), Lookup::Invalid(&e));
        assert_eq!(s.claim("other", "ok"), Lookup::Missing);
        s.remove_claim("default", "ok");
        assert_eq!(s.claim("default", "ok"), Lookup::Missing);

        s.apply_storage_class(&storage_class("c", "p", Some("Immediate")))
            .unwrap();
        assert!(s.storage_class("c").found().is_some());
        assert_eq!(VolumeState::empty().claim("default", "ok"), Lookup::Missing);
    }

    #[test]
    fn attachments_are_kept_by_node_and_move_with_their_node() {
        let mut s = VolumeState::default();
        s.apply_volume_attachment(&volume_attachment("va1", "drv", "n1", "pv1"))
            .unwrap();
        s.apply_volume_attachment(&volume_attachment("va2", "drv", "n1", "pv2"))
            .unwrap();
        assert_eq!(s.attachments_on("n1").len(), 2);
        s.apply_volume_attachment(&volume_attachment("va1", "drv", "n2", "pv1"))
            .unwrap();
        assert_eq!(s.attachments_on("n1").len(), 1);
        assert_eq!(&*s.attachments_on("n2")[0].name, "va1");
        s.remove_volume_attachment("va2");
        assert!(s.attachments_on("n1").is_empty());
        let e = s
            .apply_volume_attachment(&volume_attachment("va1", "drv", "", "pv1"))
            .unwrap_err();
        assert_eq!(e.field, "spec.nodeName");
        assert!(s.attachments_on("n2").is_empty(), "the bad update drops it");
    }

    #[test]
    fn claim_users_follow_pods_and_ignore_the_pod_itself() {
        let user = |name: &str, node: &str, claim: &str| {
            PodBuilder::new(name)
                .node_name(node)
                .pvc_volume("v", claim)
                .build_info()
        };
        let n1 = NodeBuilder::new("n1").build_info_with([user("a", "n1", "c1")]);
        let n2 = NodeBuilder::new("n2").build_info_with([]);
        let mut u = ClaimUsers::count_nodes([&n1, &n2]);
        assert!(u.used_by_other_pod("default", "c1", "uid-b"));
        assert!(!u.used_by_other_pod("default", "c1", "uid-a"), "itself");
        assert!(!u.used_by_other_pod("other", "c1", "uid-b"), "namespaced");
        assert!(!u.used_by_other_pod("default", "c2", "uid-b"));

        // a leaves n1, b lands on n2 with c2.
        let n1b = NodeBuilder::new("n1").build_info_with([]);
        u.node_replaced(&n1, &n1b);
        assert!(!u.used_by_other_pod("default", "c1", "uid-b"));
        let n2b = NodeBuilder::new("n2").build_info_with([user("b", "n2", "c2")]);
        u.node_replaced(&n2, &n2b);
        assert!(u.used_by_other_pod("default", "c2", "uid-x"));
        assert_eq!(
            u,
            ClaimUsers::count_nodes([&n1b, &n2b]),
            "same as a recount"
        );
        let nodes = [Arc::new(n1b), Arc::new(n2b)];
        assert!(claim_used_by_other_pod(&nodes, "default", "c2", "uid-x"));
        assert!(!claim_used_by_other_pod(&nodes, "default", "c2", "uid-b"));
    }
}
