//! VolumeRestrictions: inline disks a node's pods already mount, and
//! `ReadWriteOncePod` claims another pod already uses (upstream
//! `volumerestrictions/volume_restrictions.go`).
//!
//! - [`read_write_once_pod_claims`] (PreFilter): the pod's PVC volumes'
//!   claims with the `ReadWriteOncePod` access mode; a claim not found
//!   rejects the pod. [`count_in_use`] then counts those another pod uses
//!   anywhere in the cluster (from [`super::ClaimUsers`], kept current as
//!   pods come and go, so no walk over every pod).
//! - [`check_restrictions`] (Filter): an inline disk conflicting with one
//!   of the node's pods ([`super::InlineDisk::conflicts_with`]) rejects the
//!   node, then any claim in use rejects it too. Both are `Unschedulable`:
//!   evicting the pods holding the disk or the claim makes room, so
//!   preemption may help (its dry run removes the victims from the view,
//!   and the count follows).

use std::sync::Arc;

use super::model::AccessMode;
use super::pod_volumes::PodVolumes;
use super::state::{Lookup, VolumeState};
use super::{VolumeRejection, claim_not_found};
use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;

/// Upstream `ErrReasonDiskConflict` (`Unschedulable`).
pub const REASON_DISK_CONFLICT: &str = "node(s) had no available disk";
/// Upstream `ErrReasonReadWriteOncePodConflict` (`Unschedulable`; this
/// text since v1.33).
pub const REASON_READ_WRITE_ONCE_POD_CONFLICT: &str = "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode already in-use by another pod";

/// The names of `pod`'s PVC-volume claims that have the
/// `ReadWriteOncePod` access mode, each once.
///
/// # Errors
/// `UnschedulableAndUnresolvable` `persistentvolumeclaim "<name>" not
/// found` for a claim that does not exist (the pod waits for it), or the
/// [`super::VolumeError`] of a claim that cannot be read.
pub fn read_write_once_pod_claims(
    pod: &PodInfo,
    state: &VolumeState,
) -> Result<Vec<Arc<str>>, VolumeRejection> {
    let mut out: Vec<Arc<str>> = Vec::new();
    let Some(volumes) = pod.volumes.as_deref() else {
        return Ok(out);
    };
    for c in volumes.pvc_claims() {
        let claim = match state.claim(&pod.key.namespace, &c.claim) {
            Lookup::Found(claim) => claim,
            Lookup::Invalid(e) => return Err(VolumeRejection::invalid(e)),
            Lookup::Missing => {
                return Err(VolumeRejection::unresolvable(claim_not_found(&c.claim)));
            }
        };
        if claim.access_modes.contains(AccessMode::ReadWriteOncePod) && !out.contains(&c.claim) {
            out.push(c.claim.clone());
        }
    }
    Ok(out)
}

/// How many of `claims` (of `pod`'s namespace) `used_by_other` says
/// another pod uses (upstream `conflictingPVCRefCount`).
pub fn count_in_use(claims: &[Arc<str>], used_by_other: impl Fn(&str) -> bool) -> usize {
    claims.iter().filter(|c| used_by_other(c)).count()
}

/// Whether one of `pod`'s inline disks conflicts with a disk of a pod on
/// `node` (upstream `satisfyVolumeConflicts`, negated).
#[must_use]
pub fn disk_conflict(pod: &PodVolumes, node: &NodeInfo) -> bool {
    pod.inline_disks.iter().any(|d| {
        node.pods
            .iter()
            .filter_map(|p| p.volumes.as_deref())
            .any(|v| v.inline_disks.iter().any(|e| d.conflicts_with(e)))
    })
}

/// The Filter: `pod` on `node`, with `claims_in_use` from [`count_in_use`].
///
/// # Errors
/// [`REASON_DISK_CONFLICT`], else [`REASON_READ_WRITE_ONCE_POD_CONFLICT`],
/// both `Unschedulable`.
pub fn check_restrictions(
    pod: &PodInfo,
    claims_in_use: usize,
    node: &NodeInfo,
) -> Result<(), VolumeRejection> {
    if pod
        .volumes
        .as_deref()
        .is_some_and(|v| disk_conflict(v, node))
    {
        return Err(VolumeRejection::unschedulable(REASON_DISK_CONFLICT));
    }
    if claims_in_use > 0 {
        return Err(VolumeRejection::unschedulable(
            REASON_READ_WRITE_ONCE_POD_CONFLICT,
        ));
    }
    Ok(())
}

#[cfg(test)]
mod tests;
