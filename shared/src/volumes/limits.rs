//! NodeVolumeLimits (CSI): the distinct CSI volumes of each driver on a
//! node, the pod's included, must not exceed the node's CSINode
//! `allocatable.count` for that driver (upstream
//! `nodevolumelimits/csi.go`, plugin `CSILimits`).
//!
//! A volume is counted by its [`CsiVolumeId`]:
//! - a claim whose `spec.volumeName` names a CSI PV: the PV's driver and
//!   `volumeHandle` (so two pods sharing a volume count it once);
//! - a claim without `spec.volumeName` (or whose PV is not found): the
//!   provisioner of its StorageClass, with an id made of the claim's
//!   namespace and name (upstream uses a random prefix plus
//!   `<namespace>/<name>`; a separate variant here, which no PV handle
//!   can collide with); a claim without class, or of a class not found,
//!   is not counted (an `Immediate` claim must be bound first);
//! - generic ephemeral volumes through their claim (`<pod>-<volume>`,
//!   which must be owned by the pod);
//! - a VolumeAttachment to the node: its `attacher` and its PV's
//!   `volumeHandle` (attached or still attaching: both hold a slot).
//!
//! Not counted, unlike upstream: in-tree volumes migrated to CSI (GCE PD,
//! AWS EBS, Azure Disk, Cinder, Portworx inline or as PVs; upstream
//! translates them when the CSINode's migration annotation says so), and
//! limits read from the Node's `attachable-volumes-csi-*` allocatable (a
//! pre-CSINode fallback). A node without a CSINode, or whose CSINode has no
//! count for a driver, has no limit for it.

use std::collections::HashSet;
use std::sync::Arc;

use super::model::CsiNode;
use super::state::{Lookup, VolumeState};
use super::{VolumeRejection, claim_not_found, ephemeral_not_owned};
use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;

/// Upstream `ErrReasonMaxVolumeCountExceeded` (`Unschedulable`).
pub const REASON_MAX_VOLUME_COUNT: &str = "node(s) exceed max volume count";

/// One CSI volume, as NodeVolumeLimits tells volumes apart.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub enum CsiVolumeId {
    /// A provisioned volume: `driver/volumeHandle`.
    Handle {
        /// CSI driver.
        driver: Arc<str>,
        /// `volumeHandle`.
        handle: Arc<str>,
    },
    /// A claim not bound yet, counted as one volume of its class's
    /// provisioner.
    UnboundClaim {
        /// The StorageClass's provisioner.
        driver: Arc<str>,
        /// The claim's namespace.
        namespace: Arc<str>,
        /// The claim's name.
        claim: Arc<str>,
    },
}

impl CsiVolumeId {
    /// The CSI driver.
    #[must_use]
    pub fn driver(&self) -> &str {
        match self {
            CsiVolumeId::Handle { driver, .. } | CsiVolumeId::UnboundClaim { driver, .. } => driver,
        }
    }
}

/// Where [`add_pod_volumes`] collects volumes: the new pod's few, in
/// order (a `Vec`), or a node's many (a `HashSet`).
trait VolumeSet {
    fn add(&mut self, id: CsiVolumeId);
}

impl VolumeSet for Vec<CsiVolumeId> {
    fn add(&mut self, id: CsiVolumeId) {
        if !self.contains(&id) {
            self.push(id);
        }
    }
}

impl VolumeSet for HashSet<CsiVolumeId> {
    fn add(&mut self, id: CsiVolumeId) {
        self.insert(id);
    }
}

/// Whether the pod being placed or one already on the node: for the new
/// pod a missing claim rejects it; for a placed pod it is skipped.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Whose {
    New,
    Placed,
}

/// Adds the CSI volumes of `pod`'s claims to `out` (a volume already there
/// is not added twice).
fn add_pod_volumes(
    pod: &PodInfo,
    state: &VolumeState,
    whose: Whose,
    out: &mut impl VolumeSet,
) -> Result<(), VolumeRejection> {
    let Some(volumes) = pod.volumes.as_deref() else {
        return Ok(());
    };
    let ns = &pod.key.namespace;
    for c in &volumes.claims {
        if c.claim.is_empty() {
            return Err(VolumeRejection::error("PersistentVolumeClaim had no name"));
        }
        let claim = match state.claim(ns, &c.claim) {
            Lookup::Found(claim) => claim,
            Lookup::Invalid(e) if whose == Whose::New => {
                return Err(VolumeRejection::invalid(e));
            }
            Lookup::Missing if whose == Whose::New => {
                return Err(VolumeRejection::unresolvable(format!(
                    "looking up PVC {ns}/{}: {}",
                    c.claim,
                    claim_not_found(&c.claim)
                )));
            }
            Lookup::Invalid(_) | Lookup::Missing => continue,
        };
        if c.ephemeral && claim.controller_uid.as_deref() != Some(&*pod.uid) {
            return Err(VolumeRejection::error(ephemeral_not_owned(
                ns, &c.claim, pod,
            )));
        }
        let from_pv = claim.volume_name.as_deref().map(|name| state.pv(name));
        let id = match from_pv {
            Some(Lookup::Found(pv)) => pv.csi.as_ref().map(|csi| CsiVolumeId::Handle {
                driver: csi.driver.clone(),
                handle: csi.volume_handle.clone(),
            }),
            // No PV name, or a PV not found or unreadable: by class.
            _ => claim
                .storage_class_name
                .as_deref()
                .and_then(|name| state.storage_class(name).found())
                .map(|class| CsiVolumeId::UnboundClaim {
                    driver: class.provisioner.clone(),
                    namespace: ns.clone(),
                    claim: c.claim.clone(),
                }),
        };
        if let Some(id) = id.filter(|id| !id.driver().is_empty()) {
            out.add(id);
        }
    }
    Ok(())
}

/// Whether `node` takes `new` whatever its volumes are: the distinct CSI
/// volumes on it are at most its pods' claims plus its VolumeAttachments,
/// so when that bound plus the new volumes of each `limited` driver stays
/// within the driver's limit, no volume need be looked up (the common
/// case: a few volumes a node, limits in the tens). Never when a pod
/// there has an ephemeral volume, whose ownership the full check verifies
/// as upstream does. O(pods on the node).
fn under_every_limit(
    new: &[CsiVolumeId],
    limited: &[(&str, i64)],
    node: &NodeInfo,
    state: &VolumeState,
) -> bool {
    let mut bound = state.attachments_on(node.name()).len();
    for p in &node.pods {
        if let Some(v) = p.volumes.as_deref() {
            if v.claims.iter().any(|c| c.ephemeral) {
                return false;
            }
            bound += v.claims.len();
        }
    }
    limited.iter().all(|(driver, limit)| {
        let added = new.iter().filter(|id| id.driver() == *driver).count();
        i64::try_from(bound + added).unwrap_or(i64::MAX) <= *limit
    })
}

/// The distinct CSI volumes `pod` (to be placed) would bring to a node.
///
/// # Errors
/// `UnschedulableAndUnresolvable` `looking up PVC <ns>/<name>:
/// persistentvolumeclaim "<name>" not found` for a missing claim (or the
/// error of an unreadable one); `Error` for a volume without a claim name
/// or an ephemeral volume whose claim is not owned by the pod (`PVC
/// <ns>/<claim> was not created for pod <ns>/<pod> (pod is not owner)`),
/// as upstream.
pub fn new_pod_csi_volumes(
    pod: &PodInfo,
    state: &VolumeState,
) -> Result<Vec<CsiVolumeId>, VolumeRejection> {
    let mut out = Vec::new();
    add_pod_volumes(pod, state, Whose::New, &mut out)?;
    Ok(out)
}

/// The Filter: whether `node` can take `new` (from
/// [`new_pod_csi_volumes`]) besides the distinct CSI volumes its pods and
/// its VolumeAttachments already use, driver by driver.
///
/// # Errors
/// [`REASON_MAX_VOLUME_COUNT`] (`Unschedulable`) when a driver with a
/// limit would go over it; the [`VolumeError`] of an unreadable CSINode
/// (`UnschedulableAndUnresolvable`); `Error` when a pod on the node has an
/// ephemeral volume whose claim it does not own, as upstream.
pub fn check_csi_limits(
    new: &[CsiVolumeId],
    node: &NodeInfo,
    state: &VolumeState,
) -> Result<(), VolumeRejection> {
    if new.is_empty() {
        return Ok(());
    }
    let csi_node: &CsiNode = match state.csi_node(node.name()) {
        Lookup::Found(n) => n,
        Lookup::Invalid(e) => return Err(VolumeRejection::invalid(e)),
        Lookup::Missing => return Ok(()),
    };
    // The drivers of the new volumes that have a limit here.
    let mut limited: Vec<(&str, i64)> = Vec::new();
    for id in new {
        let d = id.driver();
        if !limited.iter().any(|(l, _)| *l == d)
            && let Some(limit) = csi_node.volume_limit(d)
        {
            limited.push((d, limit));
        }
    }
    if limited.is_empty() {
        return Ok(());
    }
    if under_every_limit(new, &limited, node, state) {
        return Ok(());
    }
    let mut on_node: HashSet<CsiVolumeId> = HashSet::new();
    for p in node.pods.iter().filter(|p| p.volumes.is_some()) {
        add_pod_volumes(p, state, Whose::Placed, &mut on_node)?;
    }
    for va in state.attachments_on(node.name()) {
        let Some(Lookup::Found(pv)) = va.pv_name.as_deref().map(|n| state.pv(n)) else {
            continue;
        };
        if let Some(csi) = &pv.csi {
            let id = CsiVolumeId::Handle {
                driver: va.attacher.clone(),
                handle: csi.volume_handle.clone(),
            };
            on_node.insert(id);
        }
    }
    for (driver, limit) in limited {
        let added = new
            .iter()
            .filter(|id| id.driver() == driver && !on_node.contains(id))
            .count();
        if added == 0 {
            // Every volume of this driver is there already: nothing new to
            // attach, even on a node over its limit (upstream checks only
            // the drivers with new volumes).
            continue;
        }
        let attached = on_node.iter().filter(|id| id.driver() == driver).count();
        if i64::try_from(attached + added).unwrap_or(i64::MAX) > limit {
            return Err(VolumeRejection::unschedulable(REASON_MAX_VOLUME_COUNT));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests;
