//! `VolumeZone`: a pod's bound PersistentVolumes must be reachable from the
//! node's zone and region (upstream
//! `pkg/scheduler/framework/plugins/volumezone/volume_zone.go`).
//!
//! - PreFilter: the PVs of the pod's PVC volumes that carry a zone/region
//!   label ([`zone::pod_zone_pvs`]); `Skip` when there are none. A claim,
//!   StorageClass or PV not found, an unbound `Immediate` claim and the
//!   like reject the pod `UnschedulableAndUnresolvable` with upstream's
//!   text (e.g. `persistentvolumeclaim "data" not found`); an unreadable
//!   object with its error, naming object and field.
//! - Filter: [`zone::check_zone`]: a node without zone/region labels
//!   passes; otherwise each PV label (`topology.kubernetes.io/zone|region`,
//!   `failure-domain.beta.kubernetes.io/zone|region`, values joined by `__`
//!   meaning a set) must list the node's value, else
//!   `node(s) had no available volume zone` (`UnschedulableAndUnresolvable`).
//!
//! The volume objects come from [`SharedLister::volumes`] (the
//! coordinator forwards them to every worker). Bind check: the same two
//! functions over the arbiter's volume objects ([`BindView::volumes`]), so
//! a PV relabelled, or a claim bound, between a worker's cycle and its
//! proposal is seen.

use std::sync::Arc;

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, FilterPlugin, Plugin,
    PreFilterPlugin, PreFilterResult, SharedLister, Status,
};
use flotilla_shared::volumes::{Pv, zone};
use flotilla_shared::{NodeInfo, PodInfo};

use super::{as_status, names};

/// Registry name.
pub const NAME: &str = names::VOLUME_ZONE;

/// Upstream reason text (`ErrReasonConflict`).
pub const REASON: &str = zone::REASON_ZONE_CONFLICT;

const STATE_KEY: &str = "PreFilterVolumeZone";

/// A new StorageClass (`WaitForFirstConsumer` skips the claim), a new node
/// or changed zone labels, a claim created or bound, a PV created or
/// relabelled (upstream's events, without the queueing hints' filtering).
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::StorageClassAdded,
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeLabelChanged,
    ClusterEvent::PvcChanged,
    ClusterEvent::PvChanged,
];

/// PreFilter's result: the PVs with zone labels.
struct ZonePvs(Vec<Arc<Pv>>);

/// PreFilter + Filter on the zones of a pod's bound PVs.
#[derive(Debug, Clone, Copy, Default)]
pub struct VolumeZone;

impl VolumeZone {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        VolumeZone
    }
}

impl Plugin for VolumeZone {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for VolumeZone {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        match zone::pod_zone_pvs(pod, &cluster.volumes()) {
            Err(r) => (PreFilterResult::default(), r.into_status(NAME)),
            Ok(pvs) if pvs.is_empty() => (PreFilterResult::default(), Status::skip()),
            Ok(pvs) => {
                state.write(STATE_KEY, ZonePvs(pvs));
                (PreFilterResult::default(), Status::success())
            }
        }
    }
}

impl FilterPlugin for VolumeZone {
    fn filter(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Status {
        let result = state
            .read_pre_filter::<ZonePvs>(STATE_KEY, NAME)
            .map(|ZonePvs(pvs)| zone::check_zone(pvs, &node.spec.labels));
        as_status(result, NAME)
    }
}

impl BindCheck for VolumeZone {
    /// PreFilter then Filter: [`zone::pod_zone_pvs`] (no allocation for a
    /// pod without claims) and [`zone::check_zone`].
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, view: &mut BindView<'_>) -> BindResult {
        zone::pod_zone_pvs(pod, view.volumes)
            .and_then(|pvs| zone::check_zone(&pvs, &node.spec.labels))
            .map_err(|r| r.reason)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::volumes::{PvBuilder, PvcBuilder, storage_class};
    use flotilla_shared::testing::{FakeLister, NodeBuilder, PodBuilder, pre_filter_then_filter};
    use flotilla_shared::volumes::VolumeState;
    use flotilla_shared::volumes::model::{LABEL_BETA_ZONE, LABEL_ZONE};

    fn lister(nodes: Vec<NodeInfo>) -> FakeLister {
        let mut s = VolumeState::default();
        s.apply_pv(
            &PvBuilder::new("pv-a")
                .label(LABEL_ZONE, "us-west1-a__us-west1-c")
                .build(),
        )
        .unwrap();
        s.apply_claim(&PvcBuilder::new("data").bound_to("pv-a").build())
            .unwrap();
        s.apply_claim(&PvcBuilder::new("later").class("wffc").build())
            .unwrap();
        s.apply_storage_class(&storage_class(
            "wffc",
            "csi.example.com",
            Some("WaitForFirstConsumer"),
        ))
        .unwrap();
        let mut l = FakeLister::new(nodes);
        l.volumes = Arc::new(s);
        l
    }

    fn zone_node(name: &str, key: &str, zone: &str) -> NodeInfo {
        NodeBuilder::new(name).label(key, zone).build_info_with([])
    }

    fn run(pod: &PodInfo, l: &FakeLister) -> Result<Vec<Status>, Status> {
        pre_filter_then_filter(&VolumeZone, pod, l)
    }

    #[test]
    fn bound_pv_zones_decide_each_node() {
        let l = lister(vec![
            zone_node("a", LABEL_ZONE, "us-west1-a"),
            zone_node("b", LABEL_ZONE, "us-west1-b"),
            zone_node("c-beta", LABEL_BETA_ZONE, "us-west1-c"),
            NodeBuilder::new("plain").build_info_with([]),
        ]);
        let pod = PodBuilder::new("p").pvc_volume("v", "data").build_info();
        let got = run(&pod, &l).unwrap();
        let conflict =
            Status::unresolvable("node(s) had no available volume zone").with_plugin(NAME);
        assert_eq!(
            got,
            [
                Status::success(),
                conflict.clone(),
                conflict,
                Status::success()
            ],
            "a GA PV label is not looked up under the node's beta key; \
             a node without zone labels passes"
        );
    }

    #[test]
    fn prefilter_skips_unbound_wffc_claims_and_rejects_missing_ones() {
        let l = lister(vec![zone_node("a", LABEL_ZONE, "us-west1-a")]);
        let wffc = PodBuilder::new("p").pvc_volume("v", "later").build_info();
        assert_eq!(run(&wffc, &l), Err(Status::skip()));
        let none = PodBuilder::new("p").build_info();
        assert_eq!(run(&none, &l), Err(Status::skip()));
        let missing = PodBuilder::new("p").pvc_volume("v", "ghost").build_info();
        assert_eq!(
            run(&missing, &l),
            Err(
                Status::unresolvable("persistentvolumeclaim \"ghost\" not found").with_plugin(NAME)
            )
        );
    }

    #[test]
    fn an_empty_volume_state_rejects_every_pod_with_a_claim() {
        // A worker before the coordinator sent the volume objects.
        let l = FakeLister::new(vec![zone_node("a", LABEL_ZONE, "us-west1-a")]);
        let pod = PodBuilder::new("p").pvc_volume("v", "data").build_info();
        assert_eq!(
            run(&pod, &l).unwrap_err().code,
            Code::UnschedulableAndUnresolvable
        );
    }

    #[test]
    fn registers_upstream_events() {
        assert_eq!(VolumeZone.name(), "VolumeZone");
        assert_eq!(
            VolumeZone.events_to_register(),
            [
                ClusterEvent::StorageClassAdded,
                ClusterEvent::NodeAdded,
                ClusterEvent::NodeLabelChanged,
                ClusterEvent::PvcChanged,
                ClusterEvent::PvChanged,
            ]
        );
    }
}
