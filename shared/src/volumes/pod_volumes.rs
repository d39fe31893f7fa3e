//! What a pod's `spec.volumes` asks of the volume plugins, computed once
//! per pod ([`crate::PodInfo::volumes`]): its claims (PVC volumes and
//! generic ephemeral volumes), its inline disks (GCE PD, AWS EBS, RBD,
//! iSCSI: VolumeRestrictions' conflicts) and its CSI inline volumes.
//! Volumes of other types (configMap, secret, emptyDir, ...) concern no
//! volume plugin and are not kept.

use std::sync::Arc;

use k8s_openapi::api::core::v1::Volume;

/// The RBD pool the API server defaults `rbd.pool` to.
const DEFAULT_RBD_POOL: &str = "rbd";

/// A claim a pod uses.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodClaim {
    /// The pod's volume name (`spec.volumes[*].name`).
    pub volume: Arc<str>,
    /// The claim's name in the pod's namespace: `persistentVolumeClaim.claimName`
    /// (may be empty: upstream reports `PersistentVolumeClaim had no name`),
    /// or `<pod name>-<volume name>` for an ephemeral volume (upstream
    /// `ephemeral.VolumeClaimName`).
    pub claim: Arc<str>,
    /// A generic ephemeral volume (`ephemeral.volumeClaimTemplate`): the
    /// claim must be owned by the pod.
    pub ephemeral: bool,
}

/// An inline disk VolumeRestrictions checks for conflicts with the disks
/// of the pods already on a node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum InlineDisk {
    /// `gcePersistentDisk`.
    GcePd {
        /// `pdName`.
        pd_name: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// `awsElasticBlockStore`.
    AwsEbs {
        /// `volumeID`.
        volume_id: String,
    },
    /// `rbd`.
    Rbd {
        /// `monitors`.
        monitors: Vec<String>,
        /// `pool` (`rbd` when unset, as the API server defaults it).
        pool: String,
        /// `image`.
        image: String,
        /// `readOnly`.
        read_only: bool,
    },
    /// `iscsi`.
    Iscsi {
        /// `iqn`.
        iqn: String,
        /// `readOnly`.
        read_only: bool,
    },
}

impl InlineDisk {
    /// Whether two pods mounting these disks cannot share a node (upstream
    /// `isVolumeConflict`):
    /// - GCE PD: the same `pdName`, unless both mount it read-only;
    /// - AWS EBS: the same `volumeID`, always (read-only or not);
    /// - iSCSI: the same `iqn`, unless both are read-only;
    /// - RBD: a monitor in common, the same pool and image, unless both are
    ///   read-only.
    ///
    /// Disks of different types never conflict.
    #[must_use]
    pub fn conflicts_with(&self, other: &InlineDisk) -> bool {
        match (self, other) {
            (
                InlineDisk::GcePd { pd_name, read_only },
                InlineDisk::GcePd {
                    pd_name: other_name,
                    read_only: other_ro,
                },
            ) => pd_name == other_name && !(*read_only && *other_ro),
            (
                InlineDisk::AwsEbs { volume_id },
                InlineDisk::AwsEbs {
                    volume_id: other_id,
                },
            ) => volume_id == other_id,
            (
                InlineDisk::Iscsi { iqn, read_only },
                InlineDisk::Iscsi {
                    iqn: other_iqn,
                    read_only: other_ro,
                },
            ) => iqn == other_iqn && !(*read_only && *other_ro),
            (
                InlineDisk::Rbd {
                    monitors,
                    pool,
                    image,
                    read_only,
                },
                InlineDisk::Rbd {
                    monitors: other_monitors,
                    pool: other_pool,
                    image: other_image,
                    read_only: other_ro,
                },
            ) => {
                monitors.iter().any(|m| other_monitors.contains(m))
                    && pool == other_pool
                    && image == other_image
                    && !(*read_only && *other_ro)
            }
            _ => false,
        }
    }
}

/// The volumes of a pod the volume plugins read, in `spec.volumes` order
/// within each list.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodVolumes {
    /// PVC volumes and generic ephemeral volumes.
    pub claims: Vec<PodClaim>,
    /// GCE PD, AWS EBS, RBD and iSCSI volumes.
    pub inline_disks: Vec<InlineDisk>,
    /// `csi.driver` of each CSI inline volume (counted by no plugin
    /// upstream; kept for the CSI driver checks to come).
    pub csi_inline_drivers: Vec<Arc<str>>,
}

impl PodVolumes {
    /// Reads `spec.volumes` of pod `pod_name`; `None` when no volume
    /// concerns a volume plugin (most pods).
    #[must_use]
    pub fn from_spec(pod_name: &str, volumes: &[Volume]) -> Option<Self> {
        let mut out = PodVolumes::default();
        for v in volumes {
            if let Some(c) = &v.persistent_volume_claim {
                out.claims.push(PodClaim {
                    volume: Arc::from(v.name.as_str()),
                    claim: Arc::from(c.claim_name.as_str()),
                    ephemeral: false,
                });
            } else if v.ephemeral.is_some() {
                out.claims.push(PodClaim {
                    volume: Arc::from(v.name.as_str()),
                    claim: Arc::from(format!("{pod_name}-{}", v.name).as_str()),
                    ephemeral: true,
                });
            } else if let Some(d) = &v.gce_persistent_disk {
                out.inline_disks.push(InlineDisk::GcePd {
                    pd_name: d.pd_name.clone(),
                    read_only: d.read_only.unwrap_or(false),
                });
            } else if let Some(d) = &v.aws_elastic_block_store {
                out.inline_disks.push(InlineDisk::AwsEbs {
                    volume_id: d.volume_id.clone(),
                });
            } else if let Some(d) = &v.rbd {
                out.inline_disks.push(InlineDisk::Rbd {
                    monitors: d.monitors.clone(),
                    pool: d
                        .pool
                        .clone()
                        .filter(|p| !p.is_empty())
                        .unwrap_or_else(|| DEFAULT_RBD_POOL.to_owned()),
                    image: d.image.clone(),
                    read_only: d.read_only.unwrap_or(false),
                });
            } else if let Some(d) = &v.iscsi {
                out.inline_disks.push(InlineDisk::Iscsi {
                    iqn: d.iqn.clone(),
                    read_only: d.read_only.unwrap_or(false),
                });
            } else if let Some(d) = &v.csi {
                out.csi_inline_drivers.push(Arc::from(d.driver.as_str()));
            }
        }
        let empty = out.claims.is_empty()
            && out.inline_disks.is_empty()
            && out.csi_inline_drivers.is_empty();
        (!empty).then_some(out)
    }

    /// The claims of PVC volumes (not ephemeral ones), what VolumeZone,
    /// VolumeRestrictions' `ReadWriteOncePod` check and the cluster-wide
    /// claim use counts read (upstream reads only
    /// `volume.persistentVolumeClaim` there).
    pub fn pvc_claims(&self) -> impl Iterator<Item = &PodClaim> {
        self.claims.iter().filter(|c| !c.ephemeral)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;
    use crate::testing::volumes::{ebs, gce_pd, iscsi, rbd};

    #[test]
    fn claims_disks_and_csi_inline_volumes_are_read_once() {
        let p = PodBuilder::new("web")
            .pvc_volume("data", "claim-a")
            .ephemeral_volume("scratch")
            .volume(gce_pd("pd", "disk-1", true))
            .volume(k8s_openapi::api::core::v1::Volume {
                name: "cfg".into(),
                config_map: Some(Default::default()),
                ..Default::default()
            })
            .build_info();
        let v = p.volumes.as_deref().unwrap();
        assert_eq!(
            v.claims,
            [
                PodClaim {
                    volume: "data".into(),
                    claim: "claim-a".into(),
                    ephemeral: false
                },
                PodClaim {
                    volume: "scratch".into(),
                    claim: "web-scratch".into(),
                    ephemeral: true
                },
            ]
        );
        assert_eq!(v.pvc_claims().count(), 1);
        assert_eq!(
            v.inline_disks,
            [InlineDisk::GcePd {
                pd_name: "disk-1".into(),
                read_only: true
            }]
        );
        assert!(PodBuilder::new("plain").build_info().volumes.is_none());
    }

    /// Upstream `TestGCEDiskConflicts`, `TestAWSDiskConflicts`,
    /// `TestRBDDiskConflicts`, `TestISCSIDiskConflicts` pairs.
    #[test]
    fn inline_disk_conflicts_follow_each_types_read_only_rule() {
        let disk = |v: k8s_openapi::api::core::v1::Volume| {
            PodVolumes::from_spec("p", &[v]).unwrap().inline_disks[0].clone()
        };
        let cases = [
            // GCE PD: a conflict unless both read-only.
            (
                disk(gce_pd("a", "foo", false)),
                disk(gce_pd("b", "foo", false)),
                true,
            ),
            (
                disk(gce_pd("a", "foo", true)),
                disk(gce_pd("b", "foo", false)),
                true,
            ),
            (
                disk(gce_pd("a", "foo", true)),
                disk(gce_pd("b", "foo", true)),
                false,
            ),
            (
                disk(gce_pd("a", "foo", false)),
                disk(gce_pd("b", "bar", false)),
                false,
            ),
            // AWS EBS: the same volume always conflicts.
            (
                disk(ebs("a", "foo", true)),
                disk(ebs("b", "foo", true)),
                true,
            ),
            (
                disk(ebs("a", "foo", false)),
                disk(ebs("b", "bar", false)),
                false,
            ),
            // RBD: a shared monitor, same pool and image.
            (
                disk(rbd("a", &["m1", "m2"], "foo", false)),
                disk(rbd("b", &["m2", "m3"], "foo", false)),
                true,
            ),
            (
                disk(rbd("a", &["m1", "m2"], "foo", true)),
                disk(rbd("b", &["m2"], "foo", true)),
                false,
            ),
            (
                disk(rbd("a", &["m1"], "foo", false)),
                disk(rbd("b", &["m3"], "foo", false)),
                false,
            ),
            (
                disk(rbd("a", &["m1"], "foo", false)),
                disk(rbd("b", &["m1"], "bar", false)),
                false,
            ),
            // iSCSI: the same IQN unless both read-only.
            (
                disk(iscsi("a", "iqn.a", false)),
                disk(iscsi("b", "iqn.a", true)),
                true,
            ),
            (
                disk(iscsi("a", "iqn.a", true)),
                disk(iscsi("b", "iqn.a", true)),
                false,
            ),
            (
                disk(iscsi("a", "iqn.a", false)),
                disk(iscsi("b", "iqn.b", false)),
                false,
            ),
            // Different types never conflict.
            (
                disk(gce_pd("a", "foo", false)),
                disk(ebs("b", "foo", false)),
                false,
            ),
        ];
        for (i, (a, b, want)) in cases.iter().enumerate() {
            assert_eq!(a.conflicts_with(b), *want, "case {i}: {a:?} vs {b:?}");
            assert_eq!(b.conflicts_with(a), *want, "case {i} reversed");
        }
    }
}
