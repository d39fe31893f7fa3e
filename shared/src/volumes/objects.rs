//! [`VolumeObject`]: one of the six storage objects as the cluster holds it
//! (PersistentVolumeClaim, PersistentVolume, StorageClass, CSINode,
//! CSIDriver, VolumeAttachment), the one type the coordinator's change
//! stream, the worker's watch stream, `--trace k8s` and `simulate` carry,
//! so each knows one way to key it, to shrink it for the wire
//! ([`VolumeObject::compact`]) and to apply it to a [`VolumeState`].

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, StorageClass as K8sStorageClass, VolumeAttachment as K8sVolumeAttachment,
};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use super::model::{
    ANNOTATION_BETA_STORAGE_CLASS, ANNOTATION_BIND_COMPLETED, ANNOTATION_SELECTED_NODE, VolumeError,
};
use super::state::{Lookup, VolumeState};
use crate::framework::ClusterEvent;

/// The six kinds of volume objects.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum VolumeKind {
    /// `v1` PersistentVolumeClaim (namespaced).
    Claim,
    /// `v1` PersistentVolume.
    Pv,
    /// `storage.k8s.io/v1` StorageClass.
    StorageClass,
    /// `storage.k8s.io/v1` CSINode (named after its node).
    CsiNode,
    /// `storage.k8s.io/v1` CSIDriver.
    CsiDriver,
    /// `storage.k8s.io/v1` VolumeAttachment.
    VolumeAttachment,
}

impl VolumeKind {
    /// Every kind, in the order a list applies them (classes and PVs
    /// before the claims that name them).
    pub const ALL: [VolumeKind; 6] = [
        VolumeKind::StorageClass,
        VolumeKind::CsiDriver,
        VolumeKind::CsiNode,
        VolumeKind::Pv,
        VolumeKind::Claim,
        VolumeKind::VolumeAttachment,
    ];

    /// The API resource's plural name (`persistentvolumeclaims`, ...).
    #[must_use]
    pub const fn resource(self) -> &'static str {
        match self {
            VolumeKind::Claim => "persistentvolumeclaims",
            VolumeKind::Pv => "persistentvolumes",
            VolumeKind::StorageClass => "storageclasses",
            VolumeKind::CsiNode => "csinodes",
            VolumeKind::CsiDriver => "csidrivers",
            VolumeKind::VolumeAttachment => "volumeattachments",
        }
    }

    /// The object's `kind` (`PersistentVolumeClaim`, ...).
    #[must_use]
    pub const fn kind_name(self) -> &'static str {
        match self {
            VolumeKind::Claim => "PersistentVolumeClaim",
            VolumeKind::Pv => "PersistentVolume",
            VolumeKind::StorageClass => "StorageClass",
            VolumeKind::CsiNode => "CSINode",
            VolumeKind::CsiDriver => "CSIDriver",
            VolumeKind::VolumeAttachment => "VolumeAttachment",
        }
    }

    /// The kind of `kind_name` (an object's `kind`), if a volume kind.
    #[must_use]
    pub fn of_kind_name(kind_name: &str) -> Option<Self> {
        VolumeKind::ALL
            .into_iter()
            .find(|k| k.kind_name() == kind_name)
    }

    /// The queueing event of an object of this kind being added
    /// (`added`), updated, or deleted (`deleted`), as upstream's volume
    /// plugins register them: claims, PVs, CSINodes and CSIDrivers on add
    /// and update; StorageClasses on add (the binding mode cannot change);
    /// VolumeAttachments on delete. `None`: no rejected pod can be helped.
    #[must_use]
    pub const fn cluster_event(self, added: bool, deleted: bool) -> Option<ClusterEvent> {
        match (self, deleted) {
            (VolumeKind::Claim, false) => Some(ClusterEvent::PvcChanged),
            (VolumeKind::Pv, false) => Some(ClusterEvent::PvChanged),
            (VolumeKind::StorageClass, false) if added => Some(ClusterEvent::StorageClassAdded),
            (VolumeKind::CsiNode, false) => Some(ClusterEvent::CsiNodeChanged),
            (VolumeKind::CsiDriver, false) => Some(ClusterEvent::CsiDriverChanged),
            (VolumeKind::VolumeAttachment, true) => Some(ClusterEvent::VolumeAttachmentDeleted),
            _ => None,
        }
    }
}

impl std::fmt::Display for VolumeKind {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.resource())
    }
}

/// A volume object's identity: its kind, namespace (claims only; empty
/// otherwise) and name.
#[derive(Debug, Clone, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct VolumeKey {
    /// The kind.
    pub kind: VolumeKind,
    /// `metadata.namespace` of a claim (`default` when unset); empty for
    /// the cluster-scoped kinds.
    pub namespace: String,
    /// `metadata.name`.
    pub name: String,
}

impl VolumeKey {
    /// Removes the object from `state` (nothing when absent).
    pub fn remove_from(&self, state: &mut VolumeState) {
        match self.kind {
            VolumeKind::Claim => state.remove_claim(&self.namespace, &self.name),
            VolumeKind::Pv => state.remove_pv(&self.name),
            VolumeKind::StorageClass => state.remove_storage_class(&self.name),
            VolumeKind::CsiNode => state.remove_csi_node(&self.name),
            VolumeKind::CsiDriver => state.remove_csi_driver(&self.name),
            VolumeKind::VolumeAttachment => state.remove_volume_attachment(&self.name),
        }
    }

    /// Whether `state` holds the object (valid or not).
    #[must_use]
    pub fn is_in(&self, state: &VolumeState) -> bool {
        self.held(state) != Held::Missing
    }

    /// Whether `state` holds the object and could read it (an object
    /// stored as its [`VolumeError`] is not).
    #[must_use]
    pub fn is_valid_in(&self, state: &VolumeState) -> bool {
        self.held(state) == Held::Valid
    }

    fn held(&self, state: &VolumeState) -> Held {
        match self.kind {
            VolumeKind::Claim => Held::of(state.claim(&self.namespace, &self.name)),
            VolumeKind::Pv => Held::of(state.pv(&self.name)),
            VolumeKind::StorageClass => Held::of(state.storage_class(&self.name)),
            VolumeKind::CsiNode => Held::of(state.csi_node(&self.name)),
            VolumeKind::CsiDriver => Held::of(state.csi_driver(&self.name)),
            // Only attachments that compile are stored.
            VolumeKind::VolumeAttachment if state.has_volume_attachment(&self.name) => Held::Valid,
            VolumeKind::VolumeAttachment => Held::Missing,
        }
    }
}

/// What a [`VolumeState`] holds under a key.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Held {
    Missing,
    Invalid,
    Valid,
}

impl Held {
    fn of<T>(l: Lookup<'_, T>) -> Self {
        match l {
            Lookup::Found(_) => Held::Valid,
            Lookup::Invalid(_) => Held::Invalid,
            Lookup::Missing => Held::Missing,
        }
    }
}

impl std::fmt::Display for VolumeKey {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        if self.namespace.is_empty() {
            write!(f, "{} {}", self.kind.kind_name(), self.name)
        } else {
            write!(
                f,
                "{} {}/{}",
                self.kind.kind_name(),
                self.namespace,
                self.name
            )
        }
    }
}

/// One volume object, whole, shared.
#[derive(Debug, Clone, PartialEq)]
pub enum VolumeObject {
    /// A PersistentVolumeClaim.
    Claim(Arc<PersistentVolumeClaim>),
    /// A PersistentVolume.
    Pv(Arc<PersistentVolume>),
    /// A StorageClass.
    StorageClass(Arc<K8sStorageClass>),
    /// A CSINode.
    CsiNode(Arc<CSINode>),
    /// A CSIDriver.
    CsiDriver(Arc<CSIDriver>),
    /// A VolumeAttachment.
    VolumeAttachment(Arc<K8sVolumeAttachment>),
}

/// `From<Arc<k8s type>>` for each variant.
macro_rules! from_arc {
    ($($variant:ident($ty:ty)),* $(,)?) => {$(
        impl From<Arc<$ty>> for VolumeObject {
            fn from(o: Arc<$ty>) -> Self {
                VolumeObject::$variant(o)
            }
        }
    )*};
}

from_arc!(
    Claim(PersistentVolumeClaim),
    Pv(PersistentVolume),
    StorageClass(K8sStorageClass),
    CsiNode(CSINode),
    CsiDriver(CSIDriver),
    VolumeAttachment(K8sVolumeAttachment),
);

/// Why a volume object could not be decoded.
#[derive(Debug, thiserror::Error)]
#[error("{kind} does not decode: {source}")]
pub struct DecodeError {
    /// The kind expected.
    pub kind: VolumeKind,
    /// The decoder's error.
    #[source]
    pub source: serde_json::Error,
}

/// Annotations the volume model reads; [`VolumeObject::compact`] keeps
/// only these.
const KEPT_ANNOTATIONS: [&str; 3] = [
    ANNOTATION_BIND_COMPLETED,
    ANNOTATION_SELECTED_NODE,
    ANNOTATION_BETA_STORAGE_CLASS,
];

/// `meta` without what no volume check reads: managed fields, and every
/// annotation but [`KEPT_ANNOTATIONS`] (`kubectl`'s
/// `last-applied-configuration` alone often doubles an object).
fn compact_meta(meta: &ObjectMeta) -> ObjectMeta {
    let annotations: Option<BTreeMap<String, String>> = meta.annotations.as_ref().map(|a| {
        a.iter()
            .filter(|(k, _)| KEPT_ANNOTATIONS.contains(&k.as_str()))
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect()
    });
    ObjectMeta {
        managed_fields: None,
        annotations: annotations.filter(|a| !a.is_empty()),
        ..meta.clone()
    }
}

impl VolumeObject {
    /// Its kind.
    #[must_use]
    pub const fn kind(&self) -> VolumeKind {
        match self {
            VolumeObject::Claim(_) => VolumeKind::Claim,
            VolumeObject::Pv(_) => VolumeKind::Pv,
            VolumeObject::StorageClass(_) => VolumeKind::StorageClass,
            VolumeObject::CsiNode(_) => VolumeKind::CsiNode,
            VolumeObject::CsiDriver(_) => VolumeKind::CsiDriver,
            VolumeObject::VolumeAttachment(_) => VolumeKind::VolumeAttachment,
        }
    }

    fn meta(&self) -> &ObjectMeta {
        match self {
            VolumeObject::Claim(o) => &o.metadata,
            VolumeObject::Pv(o) => &o.metadata,
            VolumeObject::StorageClass(o) => &o.metadata,
            VolumeObject::CsiNode(o) => &o.metadata,
            VolumeObject::CsiDriver(o) => &o.metadata,
            VolumeObject::VolumeAttachment(o) => &o.metadata,
        }
    }

    /// Its key: a claim's namespace is `default` when unset; the other
    /// kinds have none. A missing name is empty.
    #[must_use]
    pub fn key(&self) -> VolumeKey {
        let meta = self.meta();
        let namespace = match self {
            VolumeObject::Claim(_) => meta.namespace.as_deref().unwrap_or("default").to_owned(),
            _ => String::new(),
        };
        VolumeKey {
            kind: self.kind(),
            namespace,
            name: meta.name.clone().unwrap_or_default(),
        }
    }

    /// Adds or replaces it in `state`.
    ///
    /// # Errors
    /// The object's [`VolumeError`] (naming the object and field): it is
    /// kept in `state` as invalid, so a pod using it is told.
    pub fn apply_to(&self, state: &mut VolumeState) -> Result<(), VolumeError> {
        match self {
            VolumeObject::Claim(o) => state.apply_claim(o),
            VolumeObject::Pv(o) => state.apply_pv(o),
            VolumeObject::StorageClass(o) => state.apply_storage_class(o),
            VolumeObject::CsiNode(o) => state.apply_csi_node(o),
            VolumeObject::CsiDriver(o) => state.apply_csi_driver(o),
            VolumeObject::VolumeAttachment(o) => state.apply_volume_attachment(o),
        }
    }

    /// A copy without what no volume check reads ([`compact_meta`]): what
    /// the coordinator sends workers.
    #[must_use]
    pub fn compact(&self) -> VolumeObject {
        fn slim<T: Clone>(o: &Arc<T>, meta: impl Fn(&mut T) -> &mut ObjectMeta) -> Arc<T> {
            let mut c = (**o).clone();
            let m = meta(&mut c);
            *m = compact_meta(m);
            Arc::new(c)
        }
        match self {
            VolumeObject::Claim(o) => VolumeObject::Claim(slim(o, |c| &mut c.metadata)),
            VolumeObject::Pv(o) => VolumeObject::Pv(slim(o, |c| &mut c.metadata)),
            VolumeObject::StorageClass(o) => {
                VolumeObject::StorageClass(slim(o, |c| &mut c.metadata))
            }
            VolumeObject::CsiNode(o) => VolumeObject::CsiNode(slim(o, |c| &mut c.metadata)),
            VolumeObject::CsiDriver(o) => VolumeObject::CsiDriver(slim(o, |c| &mut c.metadata)),
            VolumeObject::VolumeAttachment(o) => {
                VolumeObject::VolumeAttachment(slim(o, |c| &mut c.metadata))
            }
        }
    }

    /// Its JSON.
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        // Serializing a k8s-openapi object to JSON cannot fail.
        match self {
            VolumeObject::Claim(o) => serde_json::to_vec(&**o),
            VolumeObject::Pv(o) => serde_json::to_vec(&**o),
            VolumeObject::StorageClass(o) => serde_json::to_vec(&**o),
            VolumeObject::CsiNode(o) => serde_json::to_vec(&**o),
            VolumeObject::CsiDriver(o) => serde_json::to_vec(&**o),
            VolumeObject::VolumeAttachment(o) => serde_json::to_vec(&**o),
        }
        .unwrap_or_default()
    }

    /// Decodes an object of `kind` from its JSON.
    ///
    /// # Errors
    /// [`DecodeError`] when `json` is not such an object.
    pub fn from_json(kind: VolumeKind, json: &[u8]) -> Result<Self, DecodeError> {
        let wrap = |source| DecodeError { kind, source };
        Ok(match kind {
            VolumeKind::Claim => {
                VolumeObject::Claim(Arc::new(serde_json::from_slice(json).map_err(wrap)?))
            }
            VolumeKind::Pv => {
                VolumeObject::Pv(Arc::new(serde_json::from_slice(json).map_err(wrap)?))
            }
            VolumeKind::StorageClass => {
                VolumeObject::StorageClass(Arc::new(serde_json::from_slice(json).map_err(wrap)?))
            }
            VolumeKind::CsiNode => {
                VolumeObject::CsiNode(Arc::new(serde_json::from_slice(json).map_err(wrap)?))
            }
            VolumeKind::CsiDriver => {
                VolumeObject::CsiDriver(Arc::new(serde_json::from_slice(json).map_err(wrap)?))
            }
            VolumeKind::VolumeAttachment => VolumeObject::VolumeAttachment(Arc::new(
                serde_json::from_slice(json).map_err(wrap)?,
            )),
        })
    }

    /// Decodes a volume object from a generic one (a `kind: List` item of
    /// `kubectl get -o yaml`), `None` when its `kind` is not a volume kind.
    ///
    /// # Errors
    /// [`DecodeError`] when it has a volume kind but does not decode as one.
    pub fn from_value(value: &serde_json::Value) -> Option<Result<Self, DecodeError>> {
        let kind = VolumeKind::of_kind_name(value.get("kind")?.as_str()?)?;
        Some(match serde_json::to_vec(value) {
            Ok(json) => VolumeObject::from_json(kind, &json),
            Err(source) => Err(DecodeError { kind, source }),
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::volumes::{PvBuilder, PvcBuilder, storage_class, volume_attachment};

    #[test]
    fn compact_keeps_what_the_model_reads_and_round_trips() {
        let mut claim = PvcBuilder::new("data")
            .namespace("team")
            .bound_to("pv1")
            .annotation("kubectl.kubernetes.io/last-applied-configuration", "{...}")
            .build();
        claim.metadata.managed_fields = Some(vec![Default::default()]);
        let obj = VolumeObject::Claim(Arc::new(claim));
        let small = obj.compact();
        let VolumeObject::Claim(c) = &small else {
            panic!("a claim")
        };
        assert!(c.metadata.managed_fields.is_none());
        let ann = c.metadata.annotations.as_ref().expect("kept");
        assert_eq!(ann.len(), 1, "{ann:?}");
        assert!(ann.contains_key(ANNOTATION_BIND_COMPLETED));
        assert!(small.to_json().len() < obj.to_json().len());
        let back = VolumeObject::from_json(VolumeKind::Claim, &small.to_json()).unwrap();
        assert_eq!(back, small);
        assert_eq!(
            back.key(),
            VolumeKey {
                kind: VolumeKind::Claim,
                namespace: "team".into(),
                name: "data".into()
            }
        );
        assert_eq!(back.key().to_string(), "PersistentVolumeClaim team/data");
    }

    #[test]
    fn apply_and_remove_by_key_for_every_kind() {
        let objs = [
            VolumeObject::Claim(Arc::new(PvcBuilder::new("c").build())),
            VolumeObject::Pv(Arc::new(PvBuilder::new("pv").build())),
            VolumeObject::StorageClass(Arc::new(storage_class(
                "sc",
                "p",
                Some("WaitForFirstConsumer"),
            ))),
            VolumeObject::VolumeAttachment(Arc::new(volume_attachment("va", "d", "n1", "pv"))),
        ];
        let mut s = VolumeState::default();
        for o in &objs {
            o.apply_to(&mut s).unwrap();
            assert!(o.key().is_in(&s), "{}", o.key());
        }
        for o in &objs {
            o.key().remove_from(&mut s);
            assert!(!o.key().is_in(&s), "{}", o.key());
        }
    }

    #[test]
    fn generic_objects_decode_by_kind() {
        let v = serde_json::json!({"apiVersion": "storage.k8s.io/v1", "kind": "StorageClass",
            "metadata": {"name": "fast"}, "provisioner": "p", "volumeBindingMode": "Sometimes"});
        let o = VolumeObject::from_value(&v).unwrap().unwrap();
        assert_eq!(o.kind(), VolumeKind::StorageClass);
        let mut s = VolumeState::default();
        let e = o.apply_to(&mut s).unwrap_err();
        assert!(e.to_string().contains("volumeBindingMode"), "{e}");
        assert!(
            o.key().is_in(&s) && !o.key().is_valid_in(&s),
            "kept as its error"
        );
        let pod = serde_json::json!({"kind": "Pod", "metadata": {"name": "p"}});
        assert!(VolumeObject::from_value(&pod).is_none());
        let bad = serde_json::json!({"kind": "PersistentVolume", "spec": 3});
        assert!(VolumeObject::from_value(&bad).unwrap().is_err());
    }

    #[test]
    fn events_follow_upstreams_registrations() {
        use VolumeKind as K;
        assert_eq!(
            K::Claim.cluster_event(true, false),
            Some(ClusterEvent::PvcChanged)
        );
        assert_eq!(K::Claim.cluster_event(false, true), None);
        assert_eq!(
            K::StorageClass.cluster_event(true, false),
            Some(ClusterEvent::StorageClassAdded)
        );
        assert_eq!(K::StorageClass.cluster_event(false, false), None);
        assert_eq!(
            K::VolumeAttachment.cluster_event(false, true),
            Some(ClusterEvent::VolumeAttachmentDeleted)
        );
        assert_eq!(K::VolumeAttachment.cluster_event(true, false), None);
    }
}
