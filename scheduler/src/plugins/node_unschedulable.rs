//! `NodeUnschedulable`: a cordoned node (`spec.unschedulable: true`) takes
//! only pods tolerating `node.kubernetes.io/unschedulable:NoSchedule`
//! (upstream `pkg/scheduler/framework/plugins/nodeunschedulable/node_unschedulable.go`).
//!
//! The check itself is [`flotilla_shared::fit::blocked_by_cordon`], which
//! both the Filter and the bind check (run by the coordinator's bind
//! arbiter) call, so the two cannot disagree: a node cordoned while a
//! proposal was in flight does not get the pod.

use flotilla_shared::fit::{self, REASON_UNSCHEDULABLE};
use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, FilterPlugin, Plugin, Status,
    refuse_if,
};
use flotilla_shared::node_hot::{HotFilter, HotFlags};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;

/// Registry name.
pub const NAME: &str = names::NODE_UNSCHEDULABLE;

/// A new node, an uncordon, or a taint change (the cordon is mirrored as a
/// taint) can make a rejected pod fit.
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeBecameSchedulable,
    ClusterEvent::NodeTaintChanged,
];

/// Filter: rejects cordoned nodes with `UnschedulableAndUnresolvable`
/// `"node(s) were unschedulable"` unless the pod tolerates the cordon taint.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeUnschedulable;

impl NodeUnschedulable {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        NodeUnschedulable
    }
}

impl Plugin for NodeUnschedulable {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

/// The Filter's cordon check on the arbiter's copy of the node.
impl BindCheck for NodeUnschedulable {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        refuse_if(fit::blocked_by_cordon(pod, node), REASON_UNSCHEDULABLE)
    }
}

impl FilterPlugin for NodeUnschedulable {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if fit::blocked_by_cordon(pod, node) {
            Status::unresolvable(REASON_UNSCHEDULABLE).with_plugin(NAME)
        } else {
            Status::success()
        }
    }

    /// Passes every node that is not cordoned (a cordoned node gets the
    /// full check: the pod may tolerate the cordon).
    fn hot_filter(&self, _state: &CycleState, _pod: &PodInfo) -> Option<HotFilter> {
        Some(HotFilter {
            clear: HotFlags::UNSCHEDULABLE,
            ..HotFilter::ANY
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::taints::TAINT_NODE_UNSCHEDULABLE;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use std::sync::Arc;

    fn node(cordoned: bool) -> NodeInfo {
        let b = NodeBuilder::new("n1");
        let b = if cordoned { b.unschedulable() } else { b };
        NodeInfo::new(Arc::new(b.build_spec()))
    }

    #[test]
    fn cordoned_node_rejects_with_upstream_reason_and_code() {
        let pod = PodBuilder::new("p").build_info();
        let st = NodeUnschedulable::new().filter(&CycleState::default(), &pod, &node(true));
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(st.reasons, ["node(s) were unschedulable"]);
        assert_eq!(st.plugin, "NodeUnschedulable");
    }

    #[test]
    fn schedulable_node_accepts_any_pod() {
        let pod = PodBuilder::new("p").build_info();
        let st = NodeUnschedulable.filter(&CycleState::default(), &pod, &node(false));
        assert_eq!(st, Status::success());
    }

    #[test]
    fn pod_tolerating_the_cordon_taint_fits() {
        let state = CycleState::default();
        let exists = PodBuilder::new("p")
            .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoSchedule")
            .build_info();
        assert!(
            NodeUnschedulable
                .filter(&state, &exists, &node(true))
                .is_success()
        );
        // Wildcard toleration (empty key, Exists, any effect) tolerates it too.
        let wildcard = PodBuilder::new("w")
            .toleration("", "Exists", "", "")
            .build_info();
        assert!(
            NodeUnschedulable
                .filter(&state, &wildcard, &node(true))
                .is_success()
        );
        // A toleration for another effect does not.
        let wrong = PodBuilder::new("x")
            .toleration(TAINT_NODE_UNSCHEDULABLE, "Exists", "", "NoExecute")
            .build_info();
        assert!(
            NodeUnschedulable
                .filter(&state, &wrong, &node(true))
                .is_rejected()
        );
    }

    #[test]
    fn registers_cordon_related_events() {
        let ev = NodeUnschedulable.events_to_register();
        assert!(ev.contains(&ClusterEvent::NodeAdded));
        assert!(ev.contains(&ClusterEvent::NodeBecameSchedulable));
        assert!(ev.contains(&ClusterEvent::NodeTaintChanged));
        assert_eq!(ev.len(), 3);
    }
}
