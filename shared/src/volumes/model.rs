//! The compact volume objects: what the volume plugins read of
//! PersistentVolumeClaims, PersistentVolumes, StorageClasses, CSINodes,
//! CSIDrivers and VolumeAttachments, compiled once from the Kubernetes
//! objects (`TryFrom<&k8s>`), with a [`VolumeError`] naming the object and
//! the field for anything the plugins could not read.

use std::collections::BTreeMap;
use std::sync::Arc;

use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
use k8s_openapi::api::storage::v1::{
    CSIDriver, CSINode, StorageClass as K8sStorageClass, VolumeAttachment as K8sVolumeAttachment,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

use crate::label_selector::LabelSelector;
use crate::quantity;
use crate::selector::{self, Selector};

/// `pv.kubernetes.io/bind-completed`: set by the PV controller once it
/// finished binding a claim; without it a claim with `spec.volumeName` is
/// still unbound ([`Pvc::is_bound`]).
pub const ANNOTATION_BIND_COMPLETED: &str = "pv.kubernetes.io/bind-completed";
/// `volume.kubernetes.io/selected-node`: the node a `WaitForFirstConsumer`
/// claim is to be provisioned for (written by the scheduler's PreBind).
pub const ANNOTATION_SELECTED_NODE: &str = "volume.kubernetes.io/selected-node";
/// `volume.beta.kubernetes.io/storage-class`: the old way to name a
/// claim's or a PV's class; when present it wins over
/// `spec.storageClassName` (upstream `GetPersistentVolumeClaimClass`).
pub const ANNOTATION_BETA_STORAGE_CLASS: &str = "volume.beta.kubernetes.io/storage-class";

/// A volume object the plugins cannot read; names the kind, the object,
/// the field and the problem. Stored in [`super::VolumeState`] in place of
/// the object, so a pod using it is told why (never a panic).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{kind} {object}: {field}: {message}")]
pub struct VolumeError {
    /// `PersistentVolumeClaim`, `PersistentVolume`, `StorageClass`,
    /// `CSINode`, `CSIDriver` or `VolumeAttachment`.
    pub kind: &'static str,
    /// `namespace/name` for claims, the name for the others
    /// (`<unnamed>` when missing).
    pub object: String,
    /// Field path, e.g. `spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl VolumeError {
    fn new(kind: &'static str, object: &str, field: &str, message: impl Into<String>) -> Self {
        VolumeError {
            kind,
            object: object.to_owned(),
            field: field.to_owned(),
            message: message.into(),
        }
    }
}

/// `metadata.name`, or the error naming the kind.
fn name_of(kind: &'static str, meta: &ObjectMeta) -> Result<Arc<str>, VolumeError> {
    match meta.name.as_deref() {
        Some(n) if !n.is_empty() => Ok(Arc::from(n)),
        _ => Err(VolumeError::new(
            kind,
            "<unnamed>",
            "metadata.name",
            "required",
        )),
    }
}

fn non_empty(s: Option<&str>) -> Option<Arc<str>> {
    s.filter(|s| !s.is_empty()).map(Arc::from)
}

fn annotation<'a>(meta: &'a ObjectMeta, key: &str) -> Option<&'a str> {
    meta.annotations
        .as_ref()
        .and_then(|a| a.get(key))
        .map(String::as_str)
}

/// The class of a claim or PV: the beta annotation when present, else
/// `spec.storageClassName`; `None` for `""` (no class).
fn class_of(meta: &ObjectMeta, spec_class: Option<&str>) -> Option<Arc<str>> {
    match annotation(meta, ANNOTATION_BETA_STORAGE_CLASS) {
        Some(c) => non_empty(Some(c)),
        None => non_empty(spec_class),
    }
}

/// `storage` in a resource list, in bytes (0 when absent).
fn storage_bytes(list: Option<&BTreeMap<String, Quantity>>, field: &str) -> Result<i64, String> {
    match list.and_then(|l| l.get("storage")) {
        Some(q) => quantity::value(&q.0).map_err(|e| format!("{field}.storage: {e}")),
        None => Ok(0),
    }
}

/// An access mode of a claim or a PV (`spec.accessModes[*]`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AccessMode {
    /// `ReadWriteOnce`: read-write by the pods of one node.
    ReadWriteOnce,
    /// `ReadOnlyMany`.
    ReadOnlyMany,
    /// `ReadWriteMany`.
    ReadWriteMany,
    /// `ReadWriteOncePod`: read-write by one pod in the whole cluster
    /// (Kubernetes 1.22+).
    ReadWriteOncePod,
}

impl AccessMode {
    const fn bit(self) -> u8 {
        match self {
            AccessMode::ReadWriteOnce => 1,
            AccessMode::ReadOnlyMany => 2,
            AccessMode::ReadWriteMany => 4,
            AccessMode::ReadWriteOncePod => 8,
        }
    }

    /// The API's name of a mode; `None` for a name the API does not define.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "ReadWriteOnce" => Some(AccessMode::ReadWriteOnce),
            "ReadOnlyMany" => Some(AccessMode::ReadOnlyMany),
            "ReadWriteMany" => Some(AccessMode::ReadWriteMany),
            "ReadWriteOncePod" => Some(AccessMode::ReadWriteOncePod),
            _ => None,
        }
    }
}

/// A set of [`AccessMode`]s.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub struct AccessModes(u8);

impl AccessModes {
    /// Whether `mode` is in the set.
    #[must_use]
    pub const fn contains(self, mode: AccessMode) -> bool {
        self.0 & mode.bit() != 0
    }

    /// Adds `mode`.
    pub fn insert(&mut self, mode: AccessMode) {
        self.0 |= mode.bit();
    }

    /// Whether every mode of `other` is in the set.
    #[must_use]
    pub const fn contains_all(self, other: AccessModes) -> bool {
        self.0 & other.0 == other.0
    }

    /// `spec.accessModes`; an unknown mode is an error naming `field[i]`.
    fn parse(list: Option<&[String]>, field: &str) -> Result<Self, (String, String)> {
        let mut set = AccessModes::default();
        for (i, m) in list.unwrap_or_default().iter().enumerate() {
            let mode = AccessMode::parse(m).ok_or_else(|| {
                (
                    format!("{field}[{i}]"),
                    format!(
                        "unsupported value {m:?}: supported values: \"ReadOnlyMany\", \
                         \"ReadWriteMany\", \"ReadWriteOnce\", \"ReadWriteOncePod\""
                    ),
                )
            })?;
            set.insert(mode);
        }
        Ok(set)
    }
}

/// `spec.volumeMode` of a claim or a PV.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum VolumeMode {
    /// `Filesystem` (also what an unset field means, as upstream defaults
    /// a nil mode).
    #[default]
    Filesystem,
    /// `Block`: a raw block device.
    Block,
}

impl VolumeMode {
    /// `spec.volumeMode` (`None`: `Filesystem`); an unknown mode is an
    /// error naming the field.
    fn parse(value: Option<&str>) -> Result<Self, (String, String)> {
        match value {
            None | Some("Filesystem") => Ok(VolumeMode::Filesystem),
            Some("Block") => Ok(VolumeMode::Block),
            Some(other) => Err((
                "spec.volumeMode".to_owned(),
                format!("unsupported value {other:?}: supported values: \"Block\", \"Filesystem\""),
            )),
        }
    }
}

/// A PersistentVolumeClaim, as the volume plugins read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pvc {
    /// `metadata.namespace` (`default` when unset).
    pub namespace: Arc<str>,
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `metadata.uid` (empty when unset).
    pub uid: Arc<str>,
    /// `spec.volumeName`: the PV the claim is (being) bound to; `None` for
    /// `""`.
    pub volume_name: Option<Arc<str>>,
    /// The annotation [`ANNOTATION_BIND_COMPLETED`] is present.
    pub bind_completed: bool,
    /// `spec.accessModes`.
    pub access_modes: AccessModes,
    /// The claim's class (the beta annotation, else
    /// `spec.storageClassName`); `None` for no class (`""` or unset).
    pub storage_class_name: Option<Arc<str>>,
    /// `spec.resources.requests.storage` in bytes (0 when absent).
    pub requested_bytes: i64,
    /// `spec.selector`, compiled (`None`: no selector).
    pub selector: Option<LabelSelector>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `metadata.ownerReferences[controller=true].uid`: the pod owning an
    /// ephemeral volume's claim.
    pub controller_uid: Option<Arc<str>>,
    /// The annotation [`ANNOTATION_SELECTED_NODE`].
    pub selected_node: Option<Arc<str>>,
    /// `status.phase` is `Lost`: the claim's PV disappeared (the PV
    /// controller says so; VolumeBinding's PreFilter rejects the pod).
    pub lost: bool,
    /// `spec.volumeMode`.
    pub volume_mode: VolumeMode,
    /// `spec.volumeAttributesClassName`; `None` for `""` or unset.
    pub volume_attributes_class: Option<Arc<str>>,
}

impl Pvc {
    /// Bound: `spec.volumeName` set **and** the bind-completed annotation
    /// (upstream treats a claim without the annotation as unbound).
    #[must_use]
    pub fn is_bound(&self) -> bool {
        self.volume_name.is_some() && self.bind_completed
    }

    /// `namespace/name`.
    #[must_use]
    pub fn key(&self) -> String {
        format!("{}/{}", self.namespace, self.name)
    }
}

impl TryFrom<&PersistentVolumeClaim> for Pvc {
    type Error = VolumeError;

    fn try_from(c: &PersistentVolumeClaim) -> Result<Self, VolumeError> {
        const KIND: &str = "PersistentVolumeClaim";
        let namespace: Arc<str> = Arc::from(c.metadata.namespace.as_deref().unwrap_or("default"));
        let name = name_of(KIND, &c.metadata)?;
        let object = format!("{namespace}/{name}");
        let err = |(field, message): (String, String)| VolumeError {
            kind: KIND,
            object: object.clone(),
            field,
            message,
        };
        let spec = c.spec.as_ref();
        let access_modes = AccessModes::parse(
            spec.and_then(|s| s.access_modes.as_deref()),
            "spec.accessModes",
        )
        .map_err(err)?;
        let requested_bytes = storage_bytes(
            spec.and_then(|s| s.resources.as_ref())
                .and_then(|r| r.requests.as_ref()),
            "spec.resources.requests",
        )
        .map_err(|m| err(("spec.resources.requests.storage".into(), m)))?;
        let selector = match spec.and_then(|s| s.selector.as_ref()) {
            Some(s) => Some(
                LabelSelector::compile(s, "spec.selector")
                    .map_err(|e| err((e.field, e.message)))?,
            ),
            None => None,
        };
        let volume_mode =
            VolumeMode::parse(spec.and_then(|s| s.volume_mode.as_deref())).map_err(err)?;
        let controller_uid = c
            .metadata
            .owner_references
            .iter()
            .flatten()
            .find(|o| o.controller == Some(true))
            .map(|o| Arc::from(o.uid.as_str()));
        Ok(Pvc {
            uid: Arc::from(c.metadata.uid.as_deref().unwrap_or("")),
            volume_name: non_empty(spec.and_then(|s| s.volume_name.as_deref())),
            bind_completed: annotation(&c.metadata, ANNOTATION_BIND_COMPLETED).is_some(),
            access_modes,
            storage_class_name: class_of(
                &c.metadata,
                spec.and_then(|s| s.storage_class_name.as_deref()),
            ),
            requested_bytes,
            selector,
            deleting: c.metadata.deletion_timestamp.is_some(),
            controller_uid,
            selected_node: non_empty(annotation(&c.metadata, ANNOTATION_SELECTED_NODE)),
            lost: c
                .status
                .as_ref()
                .is_some_and(|s| s.phase.as_deref() == Some("Lost")),
            volume_mode,
            volume_attributes_class: non_empty(
                spec.and_then(|s| s.volume_attributes_class_name.as_deref()),
            ),
            namespace,
            name,
        })
    }
}

/// `topology.kubernetes.io/zone`.
pub const LABEL_ZONE: &str = "topology.kubernetes.io/zone";
/// `topology.kubernetes.io/region`.
pub const LABEL_REGION: &str = "topology.kubernetes.io/region";
/// `failure-domain.beta.kubernetes.io/zone` (deprecated; still read).
pub const LABEL_BETA_ZONE: &str = "failure-domain.beta.kubernetes.io/zone";
/// `failure-domain.beta.kubernetes.io/region` (deprecated; still read).
pub const LABEL_BETA_REGION: &str = "failure-domain.beta.kubernetes.io/region";

/// The PV labels VolumeZone compares with the node's, in upstream's order
/// (`topologyLabels`).
pub const ZONE_LABELS: [&str; 4] = [LABEL_BETA_ZONE, LABEL_BETA_REGION, LABEL_ZONE, LABEL_REGION];

/// Separator of several zones in one PV label value (upstream
/// `LabelMultiZoneDelimiter`): `a__b` means zone `a` or zone `b`.
pub const MULTI_ZONE_DELIMITER: &str = "__";

/// One zone/region label of a PV: the key (one of [`ZONE_LABELS`]) and the
/// zones its value lists.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZoneLabel {
    /// The label key.
    pub key: &'static str,
    /// The value split at [`MULTI_ZONE_DELIMITER`], each part trimmed.
    pub values: Vec<String>,
}

impl ZoneLabel {
    /// The GA key a beta key stands for (`failure-domain.beta…/zone` →
    /// `topology.kubernetes.io/zone`); a GA key is its own.
    #[must_use]
    pub fn ga_key(&self) -> &'static str {
        match self.key {
            LABEL_BETA_ZONE => LABEL_ZONE,
            LABEL_BETA_REGION => LABEL_REGION,
            k => k,
        }
    }
}

/// Upstream `LabelZonesToSet`: the parts of `value` split at `__`,
/// trimmed; `None` when a part is empty (upstream then ignores the label).
fn zones_of(value: &str) -> Option<Vec<String>> {
    let mut out: Vec<String> = Vec::new();
    for part in value.split(MULTI_ZONE_DELIMITER) {
        let z = part.trim();
        if z.is_empty() {
            return None;
        }
        if !out.iter().any(|o| o == z) {
            out.push(z.to_owned());
        }
    }
    Some(out)
}

/// A CSI volume: `spec.csi` of a PV.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct CsiSource {
    /// `driver`.
    pub driver: Arc<str>,
    /// `volumeHandle`.
    pub volume_handle: Arc<str>,
}

/// `spec.claimRef` of a PV.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ClaimRef {
    /// `namespace` (`default` when unset).
    pub namespace: Arc<str>,
    /// `name`.
    pub name: Arc<str>,
    /// `uid`; `None` when the PV is pre-bound by name only.
    pub uid: Option<Arc<str>>,
}

/// `status.phase` of a PV.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PvPhase {
    /// `Pending`.
    Pending,
    /// `Available`: free to bind.
    Available,
    /// `Bound`.
    Bound,
    /// `Released`: its claim was deleted.
    Released,
    /// `Failed`.
    Failed,
}

/// A PersistentVolume, as the volume plugins read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pv {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `metadata.labels` (a claim's `spec.selector` matches them).
    pub labels: BTreeMap<String, String>,
    /// The zone/region labels of [`ZONE_LABELS`] the PV has, in that
    /// order, each with its zones; a value with an empty part (`a____b`)
    /// is left out, as upstream ignores it.
    pub zone_labels: Vec<ZoneLabel>,
    /// `spec.nodeAffinity.required`, compiled; `None` when absent (the
    /// volume is reachable from every node).
    pub node_affinity: Option<Selector>,
    /// `spec.csi`; `None` for other volume types.
    pub csi: Option<CsiSource>,
    /// `spec.claimRef`.
    pub claim_ref: Option<ClaimRef>,
    /// `spec.capacity.storage` in bytes (0 when absent).
    pub capacity_bytes: i64,
    /// `spec.accessModes`.
    pub access_modes: AccessModes,
    /// The PV's class (beta annotation, else `spec.storageClassName`);
    /// `None` for no class.
    pub storage_class_name: Option<Arc<str>>,
    /// `status.phase`; `None` when unset.
    pub phase: Option<PvPhase>,
    /// `metadata.deletionTimestamp` is set.
    pub deleting: bool,
    /// `spec.volumeMode`.
    pub volume_mode: VolumeMode,
    /// `spec.volumeAttributesClassName`; `None` for `""` or unset.
    pub volume_attributes_class: Option<Arc<str>>,
}

impl TryFrom<&PersistentVolume> for Pv {
    type Error = VolumeError;

    fn try_from(v: &PersistentVolume) -> Result<Self, VolumeError> {
        const KIND: &str = "PersistentVolume";
        let name = name_of(KIND, &v.metadata)?;
        let err = |field: &str, message: String| VolumeError::new(KIND, &name, field, message);
        let labels = v.metadata.labels.clone().unwrap_or_default();
        let zone_labels = ZONE_LABELS
            .iter()
            .filter_map(|&key| {
                let values = zones_of(labels.get(key)?)?;
                Some(ZoneLabel { key, values })
            })
            .collect();
        let spec = v.spec.as_ref();
        let node_affinity = match spec
            .and_then(|s| s.node_affinity.as_ref())
            .and_then(|a| a.required.as_ref())
        {
            Some(sel) => Some(
                selector::compile_selector(sel, "spec.nodeAffinity.required")
                    .map_err(|e| err(&e.field, e.message))?,
            ),
            None => None,
        };
        let access_modes = AccessModes::parse(
            spec.and_then(|s| s.access_modes.as_deref()),
            "spec.accessModes",
        )
        .map_err(|(f, m)| err(&f, m))?;
        let capacity_bytes = storage_bytes(spec.and_then(|s| s.capacity.as_ref()), "spec.capacity")
            .map_err(|m| err("spec.capacity.storage", m))?;
        let volume_mode = VolumeMode::parse(spec.and_then(|s| s.volume_mode.as_deref()))
            .map_err(|(f, m)| err(&f, m))?;
        let phase = match v.status.as_ref().and_then(|s| s.phase.as_deref()) {
            None | Some("") => None,
            Some("Pending") => Some(PvPhase::Pending),
            Some("Available") => Some(PvPhase::Available),
            Some("Bound") => Some(PvPhase::Bound),
            Some("Released") => Some(PvPhase::Released),
            Some("Failed") => Some(PvPhase::Failed),
            Some(other) => {
                return Err(err(
                    "status.phase",
                    format!(
                        "unsupported value {other:?}: supported values: \"Available\", \
                         \"Bound\", \"Failed\", \"Pending\", \"Released\""
                    ),
                ));
            }
        };
        Ok(Pv {
            csi: spec.and_then(|s| s.csi.as_ref()).map(|c| CsiSource {
                driver: Arc::from(c.driver.as_str()),
                volume_handle: Arc::from(c.volume_handle.as_str()),
            }),
            claim_ref: spec.and_then(|s| s.claim_ref.as_ref()).map(|r| ClaimRef {
                namespace: Arc::from(r.namespace.as_deref().unwrap_or("default")),
                name: Arc::from(r.name.as_deref().unwrap_or("")),
                uid: non_empty(r.uid.as_deref()),
            }),
            capacity_bytes,
            access_modes,
            storage_class_name: class_of(
                &v.metadata,
                spec.and_then(|s| s.storage_class_name.as_deref()),
            ),
            phase,
            deleting: v.metadata.deletion_timestamp.is_some(),
            volume_mode,
            volume_attributes_class: non_empty(
                spec.and_then(|s| s.volume_attributes_class_name.as_deref()),
            ),
            node_affinity,
            zone_labels,
            labels,
            name,
        })
    }
}

/// `volumeBindingMode` of a StorageClass.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum VolumeBindingMode {
    /// `Immediate`: the PV controller binds or provisions as soon as the
    /// claim exists; a pod with an unbound claim of this class waits.
    Immediate,
    /// `WaitForFirstConsumer`: binding waits for the scheduler's choice of
    /// node.
    WaitForFirstConsumer,
}

/// One term of `allowedTopologies`: every requirement must hold.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologyTerm {
    /// `matchLabelExpressions`: (key, values), the node's label `key` must
    /// be one of `values`.
    pub requirements: Vec<(String, Vec<String>)>,
}

/// A StorageClass, as the volume plugins read it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StorageClass {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `provisioner` (a CSI driver name for CSI classes).
    pub provisioner: Arc<str>,
    /// `volumeBindingMode`; `None` when unset (the API server defaults it
    /// to `Immediate`, so only hand-made objects lack it).
    pub binding_mode: Option<VolumeBindingMode>,
    /// `allowedTopologies`: the node must match any term; empty = any node.
    pub allowed_topologies: Vec<TopologyTerm>,
}

impl StorageClass {
    /// Whether a node with `labels` is in `allowedTopologies` (upstream
    /// `MatchTopologySelectorTerms`): any term matches; no terms: every
    /// node; a term without requirements selects no node.
    #[must_use]
    pub fn allows(&self, labels: &BTreeMap<String, String>) -> bool {
        self.allowed_topologies.is_empty()
            || self.allowed_topologies.iter().any(|t| {
                !t.requirements.is_empty()
                    && t.requirements
                        .iter()
                        .all(|(k, vs)| labels.get(k).is_some_and(|v| vs.contains(v)))
            })
    }
}

impl TryFrom<&K8sStorageClass> for StorageClass {
    type Error = VolumeError;

    fn try_from(c: &K8sStorageClass) -> Result<Self, VolumeError> {
        const KIND: &str = "StorageClass";
        let name = name_of(KIND, &c.metadata)?;
        let binding_mode = match c.volume_binding_mode.as_deref() {
            None => None,
            Some("Immediate") => Some(VolumeBindingMode::Immediate),
            Some("WaitForFirstConsumer") => Some(VolumeBindingMode::WaitForFirstConsumer),
            Some(other) => {
                return Err(VolumeError::new(
                    KIND,
                    &name,
                    "volumeBindingMode",
                    format!(
                        "unsupported value {other:?}: supported values: \"Immediate\", \
                         \"WaitForFirstConsumer\""
                    ),
                ));
            }
        };
        let allowed_topologies = c
            .allowed_topologies
            .iter()
            .flatten()
            .map(|t| TopologyTerm {
                requirements: t
                    .match_label_expressions
                    .iter()
                    .flatten()
                    .map(|r| (r.key.clone(), r.values.clone()))
                    .collect(),
            })
            .collect();
        Ok(StorageClass {
            provisioner: Arc::from(c.provisioner.as_str()),
            binding_mode,
            allowed_topologies,
            name,
        })
    }
}

/// One driver of a CSINode.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiNodeDriver {
    /// `name`.
    pub name: Arc<str>,
    /// `allocatable.count`: the most volumes of this driver the node may
    /// use; `None`: no limit.
    pub allocatable_count: Option<i64>,
    /// `topologyKeys`.
    pub topology_keys: Vec<String>,
}

/// A CSINode: the CSI drivers installed on one node (same name as the
/// node) and their volume limits.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiNode {
    /// `metadata.name` = the node's name.
    pub name: Arc<str>,
    /// `spec.drivers`.
    pub drivers: Vec<CsiNodeDriver>,
}

impl CsiNode {
    /// The node's limit of distinct volumes of `driver` (its
    /// `allocatable.count`); `None` when the driver is not listed or has
    /// no count.
    #[must_use]
    pub fn volume_limit(&self, driver: &str) -> Option<i64> {
        self.drivers
            .iter()
            .find(|d| &*d.name == driver)
            .and_then(|d| d.allocatable_count)
    }
}

impl TryFrom<&CSINode> for CsiNode {
    type Error = VolumeError;

    fn try_from(n: &CSINode) -> Result<Self, VolumeError> {
        const KIND: &str = "CSINode";
        let name = name_of(KIND, &n.metadata)?;
        let mut drivers = Vec::with_capacity(n.spec.drivers.len());
        for (i, d) in n.spec.drivers.iter().enumerate() {
            let count = d.allocatable.as_ref().and_then(|a| a.count);
            if let Some(c) = count.filter(|c| *c < 0) {
                return Err(VolumeError::new(
                    KIND,
                    &name,
                    &format!("spec.drivers[{i}].allocatable.count"),
                    format!("{c} must be greater than or equal to 0"),
                ));
            }
            drivers.push(CsiNodeDriver {
                name: Arc::from(d.name.as_str()),
                allocatable_count: count.map(i64::from),
                topology_keys: d.topology_keys.clone().unwrap_or_default(),
            });
        }
        Ok(CsiNode { name, drivers })
    }
}

/// A CSIDriver: how the cluster treats one CSI driver.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CsiDriver {
    /// `metadata.name` = the driver's name.
    pub name: Arc<str>,
    /// `spec.attachRequired` (default true): volumes are attached through
    /// VolumeAttachments.
    pub attach_required: bool,
    /// `spec.storageCapacity` (default false): the scheduler checks
    /// CSIStorageCapacity before provisioning.
    pub storage_capacity: bool,
}

impl TryFrom<&CSIDriver> for CsiDriver {
    type Error = VolumeError;

    fn try_from(d: &CSIDriver) -> Result<Self, VolumeError> {
        Ok(CsiDriver {
            name: name_of("CSIDriver", &d.metadata)?,
            attach_required: d.spec.attach_required.unwrap_or(true),
            storage_capacity: d.spec.storage_capacity.unwrap_or(false),
        })
    }
}

/// A VolumeAttachment: a PV attached (or being attached) to a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeAttachment {
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `spec.attacher`: the CSI driver attaching the volume.
    pub attacher: Arc<str>,
    /// `spec.nodeName`.
    pub node_name: Arc<str>,
    /// `spec.source.persistentVolumeName`; `None` for an inline volume
    /// spec (migrated in-tree volumes), which NodeVolumeLimits does not
    /// count.
    pub pv_name: Option<Arc<str>>,
    /// `status.attached`.
    pub attached: bool,
}

impl TryFrom<&K8sVolumeAttachment> for VolumeAttachment {
    type Error = VolumeError;

    fn try_from(a: &K8sVolumeAttachment) -> Result<Self, VolumeError> {
        const KIND: &str = "VolumeAttachment";
        let name = name_of(KIND, &a.metadata)?;
        if a.spec.node_name.is_empty() {
            return Err(VolumeError::new(KIND, &name, "spec.nodeName", "required"));
        }
        Ok(VolumeAttachment {
            attacher: Arc::from(a.spec.attacher.as_str()),
            node_name: Arc::from(a.spec.node_name.as_str()),
            pv_name: non_empty(a.spec.source.persistent_volume_name.as_deref()),
            attached: a.status.as_ref().is_some_and(|s| s.attached),
            name,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::volumes::{PvBuilder, PvcBuilder, storage_class};

    #[test]
    fn claim_is_bound_only_with_volume_name_and_bind_completed() {
        let c = Pvc::try_from(&PvcBuilder::new("data").volume_name("pv1").build()).unwrap();
        assert_eq!(c.volume_name.as_deref(), Some("pv1"));
        assert!(!c.is_bound(), "no bind-completed annotation");
        let c = Pvc::try_from(&PvcBuilder::new("data").bound_to("pv1").build()).unwrap();
        assert!(c.is_bound());
        assert_eq!(c.key(), "default/data");
    }

    #[test]
    fn claim_class_access_modes_size_and_owner_are_read() {
        let mut k = PvcBuilder::new("data")
            .class("fast")
            .access_mode("ReadWriteOncePod")
            .storage("10Gi")
            .owner_pod("uid-p")
            .build();
        let c = Pvc::try_from(&k).unwrap();
        assert_eq!(c.storage_class_name.as_deref(), Some("fast"));
        assert!(c.access_modes.contains(AccessMode::ReadWriteOncePod));
        assert!(!c.access_modes.contains(AccessMode::ReadWriteOnce));
        assert_eq!(c.requested_bytes, 10 << 30);
        assert_eq!(c.controller_uid.as_deref(), Some("uid-p"));

        // The beta annotation wins over spec.storageClassName.
        k.metadata.annotations = Some(
            [(ANNOTATION_BETA_STORAGE_CLASS.to_owned(), "old".to_owned())]
                .into_iter()
                .collect(),
        );
        assert_eq!(
            Pvc::try_from(&k).unwrap().storage_class_name.as_deref(),
            Some("old")
        );
    }

    #[test]
    fn bad_claim_fields_name_the_claim_and_field() {
        let e = Pvc::try_from(&PvcBuilder::new("data").access_mode("ReadSometimes").build())
            .unwrap_err();
        assert_eq!(
            (e.kind, e.object.as_str(), e.field.as_str()),
            (
                "PersistentVolumeClaim",
                "default/data",
                "spec.accessModes[0]"
            )
        );
        let e = Pvc::try_from(&PvcBuilder::new("data").storage("lots").build()).unwrap_err();
        assert_eq!(e.field, "spec.resources.requests.storage");
        assert!(
            e.to_string()
                .starts_with("PersistentVolumeClaim default/data: ")
        );
    }

    #[test]
    fn volume_mode_lost_phase_and_bad_mode_are_read() {
        let c =
            Pvc::try_from(&PvcBuilder::new("data").volume_mode("Block").lost().build()).unwrap();
        assert_eq!((c.volume_mode, c.lost), (VolumeMode::Block, true));
        let c = Pvc::try_from(&PvcBuilder::new("data").build()).unwrap();
        assert_eq!((c.volume_mode, c.lost), (VolumeMode::Filesystem, false));
        let e = Pv::try_from(&PvBuilder::new("pv1").volume_mode("Tape").build()).unwrap_err();
        assert_eq!(
            (e.object.as_str(), e.field.as_str()),
            ("pv1", "spec.volumeMode")
        );
    }

    #[test]
    fn pv_zone_labels_split_multi_zone_values_and_skip_empty_parts() {
        let pv = Pv::try_from(
            &PvBuilder::new("pv1")
                .label(LABEL_ZONE, "us-a__us-b")
                .label(LABEL_BETA_REGION, "us")
                .label(LABEL_BETA_ZONE, "a____b")
                .build(),
        )
        .unwrap();
        assert_eq!(
            pv.zone_labels,
            [
                ZoneLabel {
                    key: LABEL_BETA_REGION,
                    values: vec!["us".into()]
                },
                ZoneLabel {
                    key: LABEL_ZONE,
                    values: vec!["us-a".into(), "us-b".into()]
                },
            ]
        );
        assert_eq!(pv.zone_labels[0].ga_key(), LABEL_REGION);
    }

    #[test]
    fn pv_with_malformed_node_affinity_is_an_error_naming_pv_and_field() {
        let e = Pv::try_from(
            &PvBuilder::new("pv1")
                .node_affinity("kubernetes.io/hostname", "Near", &["n1"])
                .build(),
        )
        .unwrap_err();
        assert_eq!(e.kind, "PersistentVolume");
        assert_eq!(e.object, "pv1");
        assert_eq!(
            e.field,
            "spec.nodeAffinity.required.nodeSelectorTerms[0].matchExpressions[0].operator"
        );
        let ok = Pv::try_from(
            &PvBuilder::new("pv1")
                .node_affinity("kubernetes.io/hostname", "In", &["n1"])
                .csi("ebs.csi.aws.com", "vol-1")
                .build(),
        )
        .unwrap();
        let sel = ok.node_affinity.unwrap();
        let labels = [("kubernetes.io/hostname".to_owned(), "n1".to_owned())].into();
        assert!(sel.matches("n1", &labels));
        assert_eq!(ok.csi.unwrap().volume_handle.as_ref(), "vol-1");
    }

    #[test]
    fn storage_class_with_unknown_binding_mode_names_class_and_field() {
        let e = StorageClass::try_from(&storage_class("fast", "csi.example.com", Some("Later")))
            .unwrap_err();
        assert_eq!(
            e.to_string(),
            "StorageClass fast: volumeBindingMode: unsupported value \"Later\": supported \
             values: \"Immediate\", \"WaitForFirstConsumer\""
        );
        let c = StorageClass::try_from(&storage_class(
            "wffc",
            "csi.example.com",
            Some("WaitForFirstConsumer"),
        ))
        .unwrap();
        assert_eq!(
            c.binding_mode,
            Some(VolumeBindingMode::WaitForFirstConsumer)
        );
        assert!(c.allows(&BTreeMap::new()), "no allowedTopologies: anywhere");
    }
}
