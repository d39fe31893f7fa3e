//! Builders for the volume objects (claims, PVs, StorageClasses, CSINodes,
//! VolumeAttachments) and inline pod volumes, for tests:
//! `PvcBuilder::new("data").bound_to("pv1").build()`.

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{
    AWSElasticBlockStoreVolumeSource, CSIPersistentVolumeSource, GCEPersistentDiskVolumeSource,
    ISCSIVolumeSource, NodeSelector, NodeSelectorRequirement, NodeSelectorTerm, ObjectReference,
    PersistentVolume, PersistentVolumeClaim, PersistentVolumeClaimSpec,
    PersistentVolumeClaimStatus, PersistentVolumeSpec, PersistentVolumeStatus, RBDVolumeSource,
    TopologySelectorLabelRequirement, TopologySelectorTerm, Volume, VolumeNodeAffinity,
    VolumeResourceRequirements,
};
use k8s_openapi::api::storage::v1::{
    CSINode, CSINodeDriver, CSINodeSpec, StorageClass, VolumeAttachment, VolumeAttachmentSource,
    VolumeAttachmentSpec, VolumeAttachmentStatus, VolumeNodeResources,
};
use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
    LabelSelector, ObjectMeta, OwnerReference, Time,
};

use crate::volumes::model::ANNOTATION_BIND_COMPLETED;

fn meta(name: &str) -> ObjectMeta {
    ObjectMeta {
        name: Some(name.into()),
        uid: Some(format!("uid-{name}")),
        ..Default::default()
    }
}

fn push_access_mode(modes: &mut Option<Vec<String>>, mode: &str) {
    modes.get_or_insert_with(Vec::new).push(mode.into());
}

fn set_storage(list: &mut Option<BTreeMap<String, Quantity>>, q: &str) {
    list.get_or_insert_with(BTreeMap::new)
        .insert("storage".into(), Quantity(q.into()));
}

/// Builds a `PersistentVolumeClaim` in `default`, uid `uid-<name>`,
/// unbound, without class or access modes.
#[derive(Debug, Clone)]
pub struct PvcBuilder {
    claim: PersistentVolumeClaim,
}

impl PvcBuilder {
    /// Claim `default/<name>`.
    #[must_use]
    pub fn new(name: &str) -> Self {
        let mut metadata = meta(name);
        metadata.namespace = Some("default".into());
        PvcBuilder {
            claim: PersistentVolumeClaim {
                metadata,
                spec: Some(PersistentVolumeClaimSpec::default()),
                status: None,
            },
        }
    }

    fn spec(&mut self) -> &mut PersistentVolumeClaimSpec {
        self.claim.spec.get_or_insert_with(Default::default)
    }

    /// `metadata.namespace`.
    #[must_use]
    pub fn namespace(mut self, ns: &str) -> Self {
        self.claim.metadata.namespace = Some(ns.into());
        self
    }

    /// `spec.volumeName` only (binding not completed).
    #[must_use]
    pub fn volume_name(mut self, pv: &str) -> Self {
        self.spec().volume_name = Some(pv.into());
        self
    }

    /// `spec.volumeName` and the bind-completed annotation: bound.
    #[must_use]
    pub fn bound_to(self, pv: &str) -> Self {
        self.volume_name(pv)
            .annotation(ANNOTATION_BIND_COMPLETED, "yes")
    }

    /// An annotation.
    #[must_use]
    pub fn annotation(mut self, k: &str, v: &str) -> Self {
        self.claim
            .metadata
            .annotations
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// `spec.storageClassName`.
    #[must_use]
    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.into());
        self
    }

    /// Appends to `spec.accessModes`.
    #[must_use]
    pub fn access_mode(mut self, mode: &str) -> Self {
        push_access_mode(&mut self.spec().access_modes, mode);
        self
    }

    /// `spec.resources.requests.storage`.
    #[must_use]
    pub fn storage(mut self, q: &str) -> Self {
        let resources = self
            .spec()
            .resources
            .get_or_insert_with(VolumeResourceRequirements::default);
        set_storage(&mut resources.requests, q);
        self
    }

    /// A controller owner reference to the pod with uid `uid` (an
    /// ephemeral volume's claim).
    #[must_use]
    pub fn owner_pod(mut self, uid: &str) -> Self {
        self.claim.metadata.owner_references = Some(vec![OwnerReference {
            api_version: "v1".into(),
            kind: "Pod".into(),
            name: "owner".into(),
            uid: uid.into(),
            controller: Some(true),
            ..Default::default()
        }]);
        self
    }

    /// `metadata.deletionTimestamp` set (the claim is being deleted).
    #[must_use]
    pub fn deleting(mut self) -> Self {
        self.claim.metadata.deletion_timestamp = Some(deletion_time());
        self
    }

    /// `status.phase: Lost`.
    #[must_use]
    pub fn lost(mut self) -> Self {
        self.claim.status = Some(PersistentVolumeClaimStatus {
            phase: Some("Lost".into()),
            ..Default::default()
        });
        self
    }

    /// `spec.volumeMode`.
    #[must_use]
    pub fn volume_mode(mut self, mode: &str) -> Self {
        self.spec().volume_mode = Some(mode.into());
        self
    }

    /// Adds `k: v` to `spec.selector.matchLabels`.
    #[must_use]
    pub fn selector_label(mut self, k: &str, v: &str) -> Self {
        self.spec()
            .selector
            .get_or_insert_with(LabelSelector::default)
            .match_labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// The claim.
    #[must_use]
    pub fn build(self) -> PersistentVolumeClaim {
        self.claim
    }
}

/// Builds a `PersistentVolume`.
#[derive(Debug, Clone)]
pub struct PvBuilder {
    pv: PersistentVolume,
}

impl PvBuilder {
    /// PV `<name>` with an empty spec.
    #[must_use]
    pub fn new(name: &str) -> Self {
        PvBuilder {
            pv: PersistentVolume {
                metadata: meta(name),
                spec: Some(PersistentVolumeSpec::default()),
                status: None,
            },
        }
    }

    fn spec(&mut self) -> &mut PersistentVolumeSpec {
        self.pv.spec.get_or_insert_with(Default::default)
    }

    /// A label.
    #[must_use]
    pub fn label(mut self, k: &str, v: &str) -> Self {
        self.pv
            .metadata
            .labels
            .get_or_insert_with(BTreeMap::new)
            .insert(k.into(), v.into());
        self
    }

    /// `spec.nodeAffinity.required` with one term of one expression.
    #[must_use]
    pub fn node_affinity(mut self, key: &str, op: &str, values: &[&str]) -> Self {
        self.spec().node_affinity = Some(VolumeNodeAffinity {
            required: Some(NodeSelector {
                node_selector_terms: vec![NodeSelectorTerm {
                    match_expressions: Some(vec![NodeSelectorRequirement {
                        key: key.into(),
                        operator: op.into(),
                        values: Some(values.iter().map(|v| (*v).to_owned()).collect()),
                    }]),
                    match_fields: None,
                }],
            }),
        });
        self
    }

    /// `spec.csi` with `driver` and `volumeHandle`.
    #[must_use]
    pub fn csi(mut self, driver: &str, handle: &str) -> Self {
        self.spec().csi = Some(CSIPersistentVolumeSource {
            driver: driver.into(),
            volume_handle: handle.into(),
            ..Default::default()
        });
        self
    }

    /// `spec.storageClassName`.
    #[must_use]
    pub fn class(mut self, class: &str) -> Self {
        self.spec().storage_class_name = Some(class.into());
        self
    }

    /// `spec.capacity.storage`.
    #[must_use]
    pub fn capacity(mut self, q: &str) -> Self {
        set_storage(&mut self.spec().capacity, q);
        self
    }

    /// Appends to `spec.accessModes`.
    #[must_use]
    pub fn access_mode(mut self, mode: &str) -> Self {
        push_access_mode(&mut self.spec().access_modes, mode);
        self
    }

    /// `spec.volumeMode`.
    #[must_use]
    pub fn volume_mode(mut self, mode: &str) -> Self {
        self.spec().volume_mode = Some(mode.into());
        self
    }

    /// `status.phase`.
    #[must_use]
    pub fn phase(mut self, phase: &str) -> Self {
        self.pv.status = Some(PersistentVolumeStatus {
            phase: Some(phase.into()),
            ..Default::default()
        });
        self
    }

    /// `status.phase: Available`.
    #[must_use]
    pub fn available(self) -> Self {
        self.phase("Available")
    }

    /// `spec.claimRef` to `default/<claim>`, with `uid` when given.
    #[must_use]
    pub fn claim_ref(mut self, claim: &str, uid: Option<&str>) -> Self {
        self.spec().claim_ref = Some(ObjectReference {
            kind: Some("PersistentVolumeClaim".into()),
            namespace: Some("default".into()),
            name: Some(claim.into()),
            uid: uid.map(Into::into),
            ..Default::default()
        });
        self
    }

    /// `metadata.deletionTimestamp` set.
    #[must_use]
    pub fn deleting(mut self) -> Self {
        self.pv.metadata.deletion_timestamp = Some(deletion_time());
        self
    }

    /// The PV.
    #[must_use]
    pub fn build(self) -> PersistentVolume {
        self.pv
    }
}

/// A StorageClass with `provisioner` and `volumeBindingMode` (`None`:
/// unset).
#[must_use]
pub fn storage_class(name: &str, provisioner: &str, mode: Option<&str>) -> StorageClass {
    StorageClass {
        metadata: meta(name),
        provisioner: provisioner.into(),
        volume_binding_mode: mode.map(Into::into),
        ..Default::default()
    }
}

/// Adds an `allowedTopologies` term to `class`: the node's label `key`
/// must be one of `values`.
#[must_use]
pub fn allowed_topology(mut class: StorageClass, key: &str, values: &[&str]) -> StorageClass {
    class
        .allowed_topologies
        .get_or_insert_with(Vec::new)
        .push(TopologySelectorTerm {
            match_label_expressions: Some(vec![TopologySelectorLabelRequirement {
                key: key.into(),
                values: values.iter().map(|v| (*v).to_owned()).collect(),
            }]),
        });
    class
}

fn deletion_time() -> Time {
    Time(Default::default())
}

/// A CSINode for node `name` with `(driver, allocatable.count)` entries.
#[must_use]
pub fn csi_node(name: &str, drivers: &[(&str, Option<i32>)]) -> CSINode {
    CSINode {
        metadata: meta(name),
        spec: CSINodeSpec {
            drivers: drivers
                .iter()
                .map(|(d, count)| CSINodeDriver {
                    name: (*d).into(),
                    node_id: name.into(),
                    allocatable: count.map(|c| VolumeNodeResources { count: Some(c) }),
                    topology_keys: None,
                })
                .collect(),
        },
        ..Default::default()
    }
}

/// An attached VolumeAttachment of PV `pv` to `node` by `attacher`.
#[must_use]
pub fn volume_attachment(name: &str, attacher: &str, node: &str, pv: &str) -> VolumeAttachment {
    VolumeAttachment {
        metadata: meta(name),
        spec: VolumeAttachmentSpec {
            attacher: attacher.into(),
            node_name: node.into(),
            source: VolumeAttachmentSource {
                persistent_volume_name: Some(pv.into()),
                inline_volume_spec: None,
            },
        },
        status: Some(VolumeAttachmentStatus {
            attached: true,
            ..Default::default()
        }),
    }
}

/// An inline `gcePersistentDisk` volume.
#[must_use]
pub fn gce_pd(name: &str, pd_name: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        gce_persistent_disk: Some(GCEPersistentDiskVolumeSource {
            pd_name: pd_name.into(),
            read_only: Some(read_only),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An inline `awsElasticBlockStore` volume.
#[must_use]
pub fn ebs(name: &str, volume_id: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        aws_elastic_block_store: Some(AWSElasticBlockStoreVolumeSource {
            volume_id: volume_id.into(),
            read_only: Some(read_only),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An inline `rbd` volume in pool `rbd` (the API default).
#[must_use]
pub fn rbd(name: &str, monitors: &[&str], image: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        rbd: Some(RBDVolumeSource {
            monitors: monitors.iter().map(|m| (*m).to_owned()).collect(),
            image: image.into(),
            read_only: Some(read_only),
            ..Default::default()
        }),
        ..Default::default()
    }
}

/// An inline `iscsi` volume.
#[must_use]
pub fn iscsi(name: &str, iqn: &str, read_only: bool) -> Volume {
    Volume {
        name: name.into(),
        iscsi: Some(ISCSIVolumeSource {
            iqn: iqn.into(),
            target_portal: "127.0.0.1:3260".into(),
            read_only: Some(read_only),
            ..Default::default()
        }),
        ..Default::default()
    }
}
