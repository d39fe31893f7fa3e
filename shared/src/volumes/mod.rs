//! Volumes: the compact model of the storage objects and the pure checks
//! of the volume plugins, shared by the scheduler's Filters and the
//! coordinator's bind arbiter, so each decision lives in one place.
//!
//! # Layout
//! - [`model`]: [`Pvc`], [`Pv`], [`StorageClass`], [`CsiNode`],
//!   [`CsiDriver`], [`VolumeAttachment`], compiled from the Kubernetes
//!   objects (`TryFrom<&k8s>`) with a [`VolumeError`] naming object and
//!   field.
//! - [`state`]: [`VolumeState`], the objects keyed for the Filters'
//!   lookups (invalid objects kept as their error), and [`ClaimUsers`],
//!   which pods use each claim cluster-wide.
//! - [`objects`]: [`VolumeObject`], one storage object whole as the
//!   cluster holds it, keyed ([`VolumeKey`]), shrunk for the wire and
//!   applied to a [`VolumeState`]: what the backends, the coordinator, the
//!   workers and `simulate` pass around.
//! - [`pod_volumes`]: [`PodVolumes`], what a pod's `spec.volumes` asks,
//!   computed once per pod ([`crate::PodInfo::volumes`]).
//! - [`zone`], [`restrictions`], [`limits`], [`binding`]: the checks of
//!   VolumeZone, VolumeRestrictions, NodeVolumeLimits (CSI) and
//!   VolumeBinding's Filter side, each split into the per-pod part
//!   (PreFilter) and the per-node part (Filter).
//!
//! Reasons and status codes are upstream's (kube-scheduler
//! `pkg/scheduler/framework/plugins/{volumezone,volumerestrictions,nodevolumelimits,volumebinding}`);
//! a check that rejects returns a [`VolumeRejection`] carrying both.

pub mod binding;
pub mod limits;
pub mod model;
pub mod objects;
pub mod pod_volumes;
pub mod restrictions;
pub mod state;
pub mod zone;

use std::borrow::Cow;

pub use model::{
    AccessMode, AccessModes, CsiDriver, CsiNode, CsiSource, Pv, Pvc, StorageClass,
    VolumeAttachment, VolumeBindingMode, VolumeError, VolumeMode,
};
pub use objects::{VolumeKey, VolumeKind, VolumeObject};
pub use pod_volumes::{InlineDisk, PodClaim, PodVolumes};
pub use state::{ClaimUsers, Lookup, VolumeState};

use crate::framework::{Code, Status};

/// Why a volume check rejects a pod: upstream's code and reason.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct VolumeRejection {
    /// `Unschedulable`, `UnschedulableAndUnresolvable` or `Error`.
    pub code: Code,
    /// Upstream's reason text (or the [`VolumeError`] of an object that
    /// could not be read).
    pub reason: Cow<'static, str>,
}

impl VolumeRejection {
    /// `UnschedulableAndUnresolvable`.
    #[must_use]
    pub fn unresolvable(reason: impl Into<Cow<'static, str>>) -> Self {
        VolumeRejection {
            code: Code::UnschedulableAndUnresolvable,
            reason: reason.into(),
        }
    }

    /// `Unschedulable`.
    #[must_use]
    pub fn unschedulable(reason: impl Into<Cow<'static, str>>) -> Self {
        VolumeRejection {
            code: Code::Unschedulable,
            reason: reason.into(),
        }
    }

    /// `Error` (upstream's `AsStatus(err)`).
    #[must_use]
    pub fn error(reason: impl Into<Cow<'static, str>>) -> Self {
        VolumeRejection {
            code: Code::Error,
            reason: reason.into(),
        }
    }

    /// An object that exists but could not be read:
    /// `UnschedulableAndUnresolvable` with its error (the pod waits for the
    /// object to change).
    #[must_use]
    pub fn invalid(e: &VolumeError) -> Self {
        Self::unresolvable(e.to_string())
    }

    /// The plugin's status.
    #[must_use]
    pub fn into_status(self, plugin: &'static str) -> Status {
        Status::new(self.code, self.reason).with_plugin(plugin)
    }
}

/// The API's not-found error text, as upstream's listers give it:
/// `persistentvolumeclaim "data" not found` (`resource` is
/// `persistentvolumeclaim`, `persistentvolume` or
/// `storageclass.storage.k8s.io`).
#[must_use]
pub fn not_found(resource: &str, name: &str) -> String {
    format!("{resource} \"{name}\" not found")
}

/// `persistentvolumeclaim "<name>" not found`.
#[must_use]
pub fn claim_not_found(name: &str) -> String {
    not_found("persistentvolumeclaim", name)
}

/// Upstream's error for a generic ephemeral volume whose claim the pod
/// does not own (`ephemeral.VolumeIsForPod`): `PVC <ns>/<claim> was not
/// created for pod <ns>/<pod> (pod is not owner)`.
#[must_use]
pub fn ephemeral_not_owned(namespace: &str, claim: &str, pod: &crate::PodInfo) -> String {
    format!(
        "PVC {namespace}/{claim} was not created for pod {} (pod is not owner)",
        pod.key
    )
}
