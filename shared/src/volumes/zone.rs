//! VolumeZone: a pod's bound PVs' zone and region labels must match the
//! node's (upstream `volumezone/volume_zone.go`).
//!
//! - [`pod_zone_pvs`] (PreFilter): the PVs of the pod's PVC volumes that
//!   carry a zone/region label. A claim whose `spec.volumeName` is empty is
//!   skipped when its class is `WaitForFirstConsumer` (VolumeBinding picks
//!   its node) and rejects the pod otherwise. Only PVC volumes count
//!   (ephemeral and inline volumes have no PV to read yet), and a claim
//!   counts by `spec.volumeName` alone, as upstream reads it (not
//!   [`super::Pvc::is_bound`]).
//! - [`check_zone`] (Filter): a node with none of the four zone/region
//!   labels passes (a single-zone cluster); otherwise each PV label must
//!   find the node's value (under the same key, or a beta PV key under its
//!   GA key) among the PV's zones (`a__b`: zone `a` or `b`).

use std::collections::BTreeMap;
use std::sync::Arc;

use super::model::{Pv, VolumeBindingMode, ZONE_LABELS};
use super::state::{Lookup, VolumeState};
use super::{VolumeRejection, claim_not_found, not_found};
use crate::pod_info::PodInfo;

/// Upstream `ErrReasonConflict` (`UnschedulableAndUnresolvable`).
pub const REASON_ZONE_CONFLICT: &str = "node(s) had no available volume zone";
/// A PVC volume with an empty `claimName`.
pub const REASON_CLAIM_NO_NAME: &str = "PersistentVolumeClaim had no name";
/// An unbound claim without a class.
pub const REASON_CLAIM_NO_PV_NO_CLASS: &str =
    "PersistentVolumeClaim had no pv name and storageClass name";
/// An unbound claim of an `Immediate` class (the PV controller has not
/// bound it yet).
pub const REASON_PV_NO_NAME: &str = "PersistentVolume had no name";

/// The PVs of `pod`'s PVC volumes that have zone/region labels, for
/// [`check_zone`]; empty when none does (the plugin then skips its
/// Filter).
///
/// # Errors
/// `UnschedulableAndUnresolvable`, with upstream's text, for: a volume
/// without a claim name; a claim, its StorageClass or its PV not found; an
/// unbound claim without a class, of a class without a binding mode
/// (`VolumeBindingMode not set for StorageClass "<name>"`) or of an
/// `Immediate` class; an object that cannot be read (its [`super::VolumeError`]).
pub fn pod_zone_pvs(pod: &PodInfo, state: &VolumeState) -> Result<Vec<Arc<Pv>>, VolumeRejection> {
    let mut out = Vec::new();
    let Some(volumes) = pod.volumes.as_deref() else {
        return Ok(out);
    };
    for c in volumes.pvc_claims() {
        if c.claim.is_empty() {
            return Err(VolumeRejection::unresolvable(REASON_CLAIM_NO_NAME));
        }
        let claim = match state.claim(&pod.key.namespace, &c.claim) {
            Lookup::Found(claim) => claim,
            Lookup::Invalid(e) => return Err(VolumeRejection::invalid(e)),
            Lookup::Missing => {
                return Err(VolumeRejection::unresolvable(claim_not_found(&c.claim)));
            }
        };
        let Some(pv_name) = claim.volume_name.as_deref() else {
            let Some(class_name) = claim.storage_class_name.as_deref() else {
                return Err(VolumeRejection::unresolvable(REASON_CLAIM_NO_PV_NO_CLASS));
            };
            let class = match state.storage_class(class_name) {
                Lookup::Found(class) => class,
                Lookup::Invalid(e) => return Err(VolumeRejection::invalid(e)),
                Lookup::Missing => {
                    return Err(VolumeRejection::unresolvable(not_found(
                        "storageclass.storage.k8s.io",
                        class_name,
                    )));
                }
            };
            match class.binding_mode {
                Some(VolumeBindingMode::WaitForFirstConsumer) => continue,
                Some(VolumeBindingMode::Immediate) => {
                    return Err(VolumeRejection::unresolvable(REASON_PV_NO_NAME));
                }
                None => {
                    return Err(VolumeRejection::unresolvable(format!(
                        "VolumeBindingMode not set for StorageClass \"{class_name}\""
                    )));
                }
            }
        };
        match state.pv(pv_name) {
            Lookup::Found(pv) if !pv.zone_labels.is_empty() => out.push(Arc::clone(pv)),
            Lookup::Found(_) => {}
            Lookup::Invalid(e) => return Err(VolumeRejection::invalid(e)),
            Lookup::Missing => {
                return Err(VolumeRejection::unresolvable(not_found(
                    "persistentvolume",
                    pv_name,
                )));
            }
        }
    }
    Ok(out)
}

/// Whether a node with `labels` can reach every PV of `pvs` (from
/// [`pod_zone_pvs`]); see the module docs for the rule.
///
/// # Errors
/// [`REASON_ZONE_CONFLICT`], `UnschedulableAndUnresolvable`.
pub fn check_zone(
    pvs: &[Arc<Pv>],
    labels: &BTreeMap<String, String>,
) -> Result<(), VolumeRejection> {
    if pvs.is_empty() || !ZONE_LABELS.iter().any(|k| labels.contains_key(*k)) {
        return Ok(());
    }
    let conflict = pvs.iter().flat_map(|pv| &pv.zone_labels).any(|z| {
        labels
            .get(z.key)
            .or_else(|| labels.get(z.ga_key()))
            .is_none_or(|v| !z.values.contains(v))
    });
    if conflict {
        Err(VolumeRejection::unresolvable(REASON_ZONE_CONFLICT))
    } else {
        Ok(())
    }
}

#[cfg(test)]
mod tests;
