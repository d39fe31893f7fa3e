//! `VolumeRestrictions`: inline disks already mounted on the node, and
//! `ReadWriteOncePod` claims another pod already uses (upstream
//! `pkg/scheduler/framework/plugins/volumerestrictions/volume_restrictions.go`).
//!
//! - PreFilter: the pod's `ReadWriteOncePod` claims
//!   ([`restrictions::read_write_once_pod_claims`]; a claim not found:
//!   `persistentvolumeclaim "<name>" not found`,
//!   `UnschedulableAndUnresolvable`) and how many of them another pod in the
//!   cluster uses ([`SharedLister::claim_used_by_other_pod`], kept by the
//!   snapshot as pods come and go). `Skip` when the pod has no inline GCE
//!   PD / AWS EBS / RBD / iSCSI disk and none of its claims is in use.
//! - Filter: [`restrictions::check_restrictions`]: a conflicting inline
//!   disk on the node (`node(s) had no available disk`), then a claim in
//!   use (`node(s) unavailable due to PersistentVolumeClaim with
//!   ReadWriteOncePod access mode already in-use by another pod`), both
//!   `Unschedulable` (preemption re-runs PreFilter over its dry-run view,
//!   so evicting the claim's user counts).
//!
//! Bind check: the same functions, the claim's users read from the
//! arbiter's [`flotilla_shared::volumes::ClaimUsers`]
//! ([`BindView::claim_users`]), which counts every granted pod: two
//! workers never both place pods using one `ReadWriteOncePod` claim. It
//! reads the whole view, so it is not [`BindCheck::node_local`] (not
//! re-run with nominees, nor for preemption proposals, whose eviction of
//! the claim's user upstream's preemption counts).

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, FilterPlugin, Plugin,
    PreFilterPlugin, PreFilterResult, SharedLister, Status,
};
use flotilla_shared::volumes::restrictions;
use flotilla_shared::{NodeInfo, PodInfo};

use super::{as_status, names};

/// Registry name.
pub const NAME: &str = names::VOLUME_RESTRICTIONS;

/// Upstream `ErrReasonDiskConflict`.
pub const REASON_DISK_CONFLICT: &str = restrictions::REASON_DISK_CONFLICT;
/// Upstream `ErrReasonReadWriteOncePodConflict`.
pub const REASON_READ_WRITE_ONCE_POD_CONFLICT: &str =
    restrictions::REASON_READ_WRITE_ONCE_POD_CONFLICT;

const STATE_KEY: &str = "PreFilterVolumeRestrictions";

/// A pod using a disk or claim deleted, a new node, a claim created
/// (upstream's events).
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::AssignedPodDeleted,
    ClusterEvent::NodeAdded,
    ClusterEvent::PvcChanged,
];

/// PreFilter's result: how many of the pod's `ReadWriteOncePod` claims
/// another pod uses (upstream `conflictingPVCRefCount`).
struct ClaimsInUse(usize);

/// PreFilter + Filter on inline disks and `ReadWriteOncePod` claims.
#[derive(Debug, Clone, Copy, Default)]
pub struct VolumeRestrictions;

impl VolumeRestrictions {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        VolumeRestrictions
    }
}

impl Plugin for VolumeRestrictions {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for VolumeRestrictions {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        let Some(volumes) = pod.volumes.as_deref() else {
            return (PreFilterResult::default(), Status::skip());
        };
        let claims = match restrictions::read_write_once_pod_claims(pod, &cluster.volumes()) {
            Ok(c) => c,
            Err(r) => return (PreFilterResult::default(), r.into_status(NAME)),
        };
        let in_use = restrictions::count_in_use(&claims, |claim| {
            cluster.claim_used_by_other_pod(&pod.key.namespace, claim, &pod.uid)
        });
        if volumes.inline_disks.is_empty() && in_use == 0 {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(STATE_KEY, ClaimsInUse(in_use));
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for VolumeRestrictions {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let result = state
            .read_pre_filter::<ClaimsInUse>(STATE_KEY, NAME)
            .map(|ClaimsInUse(in_use)| restrictions::check_restrictions(pod, *in_use, node));
        as_status(result, NAME)
    }
}

impl BindCheck for VolumeRestrictions {
    /// PreFilter then Filter: [`restrictions::read_write_once_pod_claims`]
    /// and [`restrictions::count_in_use`] against the arbiter's claim
    /// users, then [`restrictions::check_restrictions`] on `node`.
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, view: &mut BindView<'_>) -> BindResult {
        if pod.volumes.is_none() {
            return Ok(());
        }
        let claims =
            restrictions::read_write_once_pod_claims(pod, view.volumes).map_err(|r| r.reason)?;
        let in_use = if claims.is_empty() {
            0
        } else {
            let users = view.claim_users();
            restrictions::count_in_use(&claims, |claim| {
                users.used_by_other_pod(&pod.key.namespace, claim, &pod.uid)
            })
        };
        restrictions::check_restrictions(pod, in_use, node).map_err(|r| r.reason)
    }

    fn node_local(&self) -> bool {
        false
    }
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use flotilla_shared::testing::volumes::{PvcBuilder, gce_pd};
    use flotilla_shared::testing::{FakeLister, NodeBuilder, PodBuilder, pre_filter_then_filter};
    use flotilla_shared::volumes::VolumeState;

    fn lister(nodes: Vec<NodeInfo>) -> FakeLister {
        let mut s = VolumeState::default();
        s.apply_claim(
            &PvcBuilder::new("rwop")
                .access_mode("ReadWriteOncePod")
                .build(),
        )
        .unwrap();
        s.apply_claim(&PvcBuilder::new("rwo").access_mode("ReadWriteOnce").build())
            .unwrap();
        let mut l = FakeLister::new(nodes);
        l.volumes = Arc::new(s);
        l
    }

    fn run(pod: &PodInfo, l: &FakeLister) -> Result<Vec<Status>, Status> {
        pre_filter_then_filter(&VolumeRestrictions, pod, l)
    }

    #[test]
    fn read_write_once_pod_claim_in_use_rejects_every_node() {
        let user = PodBuilder::new("user")
            .node_name("n2")
            .pvc_volume("v", "rwop")
            .build_info();
        let l = lister(vec![
            NodeBuilder::new("n1").build_info_with([]),
            NodeBuilder::new("n2").build_info_with([user]),
        ]);
        let pod = PodBuilder::new("p").pvc_volume("v", "rwop").build_info();
        let conflict = Status::unschedulable(
            "node(s) unavailable due to PersistentVolumeClaim with ReadWriteOncePod access mode \
             already in-use by another pod",
        )
        .with_plugin(NAME);
        assert_eq!(run(&pod, &l), Ok(vec![conflict.clone(), conflict]));

        // Not in use: nothing to check.
        let free = lister(vec![NodeBuilder::new("n1").build_info_with([])]);
        assert_eq!(run(&pod, &free), Err(Status::skip()));
        // A ReadWriteOnce claim may be shared.
        let rwo = PodBuilder::new("p").pvc_volume("v", "rwo").build_info();
        assert_eq!(run(&rwo, &l), Err(Status::skip()));
    }

    #[test]
    fn inline_disk_conflicts_reject_only_the_node_holding_the_disk() {
        let holder = PodBuilder::new("holder")
            .node_name("n2")
            .volume(gce_pd("d", "disk", false))
            .build_info();
        let l = lister(vec![
            NodeBuilder::new("n1").build_info_with([]),
            NodeBuilder::new("n2").build_info_with([holder]),
        ]);
        let pod = PodBuilder::new("p")
            .volume(gce_pd("d", "disk", true))
            .build_info();
        assert_eq!(
            run(&pod, &l),
            Ok(vec![
                Status::success(),
                Status::unschedulable("node(s) had no available disk").with_plugin(NAME)
            ])
        );
    }

    #[test]
    fn missing_claim_rejects_at_prefilter_and_plain_pods_skip() {
        let l = lister(vec![NodeBuilder::new("n1").build_info_with([])]);
        let pod = PodBuilder::new("p").pvc_volume("v", "ghost").build_info();
        assert_eq!(
            run(&pod, &l),
            Err(
                Status::unresolvable("persistentvolumeclaim \"ghost\" not found").with_plugin(NAME)
            )
        );
        assert_eq!(
            run(&PodBuilder::new("p").build_info(), &l),
            Err(Status::skip())
        );
    }

    #[test]
    fn registers_upstream_events() {
        assert_eq!(VolumeRestrictions.name(), "VolumeRestrictions");
        assert_eq!(
            VolumeRestrictions.events_to_register(),
            [
                ClusterEvent::AssignedPodDeleted,
                ClusterEvent::NodeAdded,
                ClusterEvent::PvcChanged
            ]
        );
    }
}
