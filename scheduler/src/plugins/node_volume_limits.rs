//! `NodeVolumeLimits`: the distinct CSI volumes of each driver on a node
//! must stay within the node's CSINode `allocatable.count` (upstream
//! `pkg/scheduler/framework/plugins/nodevolumelimits/csi.go`, `CSILimits`).
//!
//! - PreFilter: the pod's CSI volumes ([`limits::new_pod_csi_volumes`]:
//!   its claims' PVs, or their class's provisioner while unbound, and its
//!   ephemeral claims). `Skip` when it has none (upstream skips only pods
//!   without claims, and its Filter then passes every node when none of
//!   them is CSI: the same decisions). A missing claim or an ephemeral
//!   claim not owned by the pod is kept and reported by Filter on every
//!   node, with upstream's text and code.
//! - Filter: [`limits::check_csi_limits`]: the volumes of the node's pods
//!   and its VolumeAttachments, each counted once, plus the pod's new
//!   ones, per driver against the limit; `node(s) exceed max volume count`
//!   (`Unschedulable`). A node without a CSINode, or a driver without a
//!   count, has no limit.
//!
//! In-tree volumes migrated to CSI are not counted (see
//! [`limits`]). Bind check: the same two functions over the arbiter's
//! view, whose node holds every granted pod, so two workers never together
//! push a node over a driver's limit.

use std::sync::Arc;

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, FilterPlugin, Plugin,
    PreFilterPlugin, PreFilterResult, SharedLister, Status,
};
use flotilla_shared::volumes::limits::{self, CsiVolumeId};
use flotilla_shared::volumes::{VolumeRejection, VolumeState};
use flotilla_shared::{NodeInfo, PodInfo};

use super::{as_status, names};

/// Registry name.
pub const NAME: &str = names::NODE_VOLUME_LIMITS;

/// Upstream `ErrReasonMaxVolumeCountExceeded`.
pub const REASON: &str = limits::REASON_MAX_VOLUME_COUNT;

const STATE_KEY: &str = "PreFilterNodeVolumeLimits";

/// A new or raised CSINode, a pod with volumes deleted, a claim created, a
/// VolumeAttachment deleted (upstream's events).
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::CsiNodeChanged,
    ClusterEvent::AssignedPodDeleted,
    ClusterEvent::PvcChanged,
    ClusterEvent::VolumeAttachmentDeleted,
];

/// PreFilter's result: the pod's CSI volumes, or why they cannot be read
/// (reported by Filter, node by node, as upstream), and the volume objects
/// Filter reads.
struct NewVolumes {
    volumes: Result<Vec<CsiVolumeId>, VolumeRejection>,
    objects: Arc<VolumeState>,
}

/// PreFilter + Filter on CSI volume counts per node.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeVolumeLimits;

impl NodeVolumeLimits {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        NodeVolumeLimits
    }
}

impl Plugin for NodeVolumeLimits {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for NodeVolumeLimits {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        if pod.volumes.as_deref().is_none_or(|v| v.claims.is_empty()) {
            return (PreFilterResult::default(), Status::skip());
        }
        let objects = cluster.volumes();
        let volumes = limits::new_pod_csi_volumes(pod, &objects);
        if volumes.as_ref().is_ok_and(Vec::is_empty) {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(STATE_KEY, NewVolumes { volumes, objects });
        (PreFilterResult::default(), Status::success())
    }
}

impl FilterPlugin for NodeVolumeLimits {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let result = state
            .read_pre_filter::<NewVolumes>(STATE_KEY, NAME)
            .map(|s| match &s.volumes {
                Ok(new) => limits::check_csi_limits(new, node, &s.objects),
                Err(r) => Err(r.clone()),
            });
        as_status(result, NAME)
    }
}

impl BindCheck for NodeVolumeLimits {
    /// PreFilter then Filter: [`limits::new_pod_csi_volumes`] (nothing
    /// allocated for a pod without claims) and
    /// [`limits::check_csi_limits`] on `node` (its pods, and with
    /// nominees when the arbiter adds them).
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, view: &mut BindView<'_>) -> BindResult {
        if pod.volumes.as_deref().is_none_or(|v| v.claims.is_empty()) {
            return Ok(());
        }
        limits::new_pod_csi_volumes(pod, view.volumes)
            .and_then(|new| limits::check_csi_limits(&new, node, view.volumes))
            .map_err(|r| r.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::testing::volumes::{PvBuilder, PvcBuilder, csi_node, volume_attachment};
    use flotilla_shared::testing::{FakeLister, NodeBuilder, PodBuilder, pre_filter_then_filter};

    const EBS: &str = "ebs.csi.aws.com";

    /// Claims `c0`..`c3` bound to CSI PVs `pv0`..`pv3`; CSINode `n1` allows
    /// 2 EBS volumes, `n2` has no CSINode.
    fn lister(nodes: Vec<NodeInfo>, attached: &[&str]) -> FakeLister {
        let mut s = VolumeState::default();
        for i in 0..4 {
            s.apply_pv(
                &PvBuilder::new(&format!("pv{i}"))
                    .csi(EBS, &format!("vol-{i}"))
                    .build(),
            )
            .unwrap();
            s.apply_claim(
                &PvcBuilder::new(&format!("c{i}"))
                    .bound_to(&format!("pv{i}"))
                    .build(),
            )
            .unwrap();
        }
        s.apply_csi_node(&csi_node("n1", &[(EBS, Some(2))]))
            .unwrap();
        for (i, pv) in attached.iter().enumerate() {
            s.apply_volume_attachment(&volume_attachment(&format!("va{i}"), EBS, "n1", pv))
                .unwrap();
        }
        let mut l = FakeLister::new(nodes);
        l.volumes = Arc::new(s);
        l
    }

    fn run(pod: &PodInfo, l: &FakeLister) -> Result<Vec<Status>, Status> {
        pre_filter_then_filter(&NodeVolumeLimits, pod, l)
    }

    fn nodes(on_n1: &[&str]) -> Vec<NodeInfo> {
        let existing = PodBuilder::new("e")
            .node_name("n1")
            .pvc_volumes(on_n1)
            .build_info();
        vec![
            NodeBuilder::new("n1").build_info_with([existing]),
            NodeBuilder::new("n2").build_info_with([]),
        ]
    }

    #[test]
    fn limit_counts_pods_and_attachments_on_the_node() {
        let exceed = Status::unschedulable("node(s) exceed max volume count").with_plugin(NAME);
        let pod = PodBuilder::new("p").pvc_volume("v", "c2").build_info();
        // One volume there, one attaching: the pod's would be the third.
        let l = lister(nodes(&["c0"]), &["pv1"]);
        assert_eq!(run(&pod, &l), Ok(vec![exceed, Status::success()]));
        // The attachment is the pod's own volume on the node: room.
        let l = lister(nodes(&["c0"]), &["pv0"]);
        assert_eq!(
            run(&pod, &l),
            Ok(vec![Status::success(), Status::success()])
        );
    }

    #[test]
    fn a_missing_claim_is_reported_by_filter_on_every_node() {
        let l = lister(nodes(&[]), &[]);
        let pod = PodBuilder::new("p").pvc_volume("v", "ghost").build_info();
        let st = Status::unresolvable(
            "looking up PVC default/ghost: persistentvolumeclaim \"ghost\" not found",
        )
        .with_plugin(NAME);
        assert_eq!(run(&pod, &l), Ok(vec![st.clone(), st]));
    }

    #[test]
    fn pods_without_csi_volumes_skip() {
        let l = lister(nodes(&[]), &[]);
        assert_eq!(
            run(&PodBuilder::new("p").build_info(), &l),
            Err(Status::skip())
        );
        assert_eq!(
            NodeVolumeLimits.events_to_register(),
            [
                ClusterEvent::CsiNodeChanged,
                ClusterEvent::AssignedPodDeleted,
                ClusterEvent::PvcChanged,
                ClusterEvent::VolumeAttachmentDeleted,
            ]
        );
    }
}
