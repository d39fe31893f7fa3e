//! `NodePorts`: a pod asking for host ports fits only where none of them is
//! already taken (upstream `pkg/scheduler/framework/plugins/nodeports/node_ports.go`).
//!
//! The conflict rule (same protocol and port, same IP or either side the
//! `0.0.0.0` wildcard) lives in [`flotilla_shared::fit::ports_conflict`],
//! which the Filter and the bind check (run by the coordinator's bind
//! arbiter, also with the pods nominated to the node) both call.

use flotilla_shared::fit::{self, REASON_PORTS};
use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, ExtensionPoint, FilterPlugin,
    Plugin, Status, refuse_if,
};
use flotilla_shared::node_hot::HotFilter;
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;

/// Registry name.
pub const NAME: &str = names::NODE_PORTS;

/// Upstream's PreFilter point, accepted in a configuration with nothing to
/// run: upstream's PreFilter collects the pod's host ports for its Filter,
/// and this Filter reads them from the pod itself.
pub const POINTS: &[ExtensionPoint] = &[ExtensionPoint::PreFilter];

/// A new node, or a pod leaving a node (freeing its ports), can help.
const EVENTS: &[ClusterEvent] = &[ClusterEvent::NodeAdded, ClusterEvent::AssignedPodDeleted];

/// Filter: `Unschedulable` (preemption may free the port)
/// `"node(s) didn't have free ports for the requested pod ports"` on a clash.
/// Pods without host ports pass without looking at the node.
#[derive(Debug, Clone, Copy, Default)]
pub struct NodePorts;

impl NodePorts {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        NodePorts
    }
}

impl Plugin for NodePorts {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

/// The Filter's port check on the arbiter's copy of the node.
impl BindCheck for NodePorts {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        refuse_if(fit::ports_conflict(pod, node), REASON_PORTS)
    }
}

impl FilterPlugin for NodePorts {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        // `ports_conflict` iterates the pod's host ports first, so the common
        // case (no host ports) costs one empty-slice check.
        if fit::ports_conflict(pod, node) {
            Status::unschedulable(REASON_PORTS).with_plugin(NAME)
        } else {
            Status::success()
        }
    }

    /// A pod without host ports passes everywhere.
    fn hot_filter(&self, _state: &CycleState, pod: &PodInfo) -> Option<HotFilter> {
        pod.host_ports.is_empty().then_some(HotFilter::ANY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use std::sync::Arc;

    fn node_using(ports: &[i32]) -> NodeInfo {
        let mut n = NodeInfo::new(Arc::new(NodeBuilder::new("n1").pods(10).build_spec()));
        for (i, p) in ports.iter().enumerate() {
            let pod = PodBuilder::new(&format!("existing-{i}"))
                .host_port(*p)
                .build_info();
            n.add_pod(Arc::new(pod));
        }
        n
    }

    #[test]
    fn clashing_port_is_unschedulable_with_upstream_reason() {
        let pod = PodBuilder::new("p").host_port(8080).build_info();
        let st = NodePorts::new().filter(&CycleState::default(), &pod, &node_using(&[8080]));
        assert_eq!(st.code, Code::Unschedulable, "preemption can free a port");
        assert_eq!(
            st.reasons,
            ["node(s) didn't have free ports for the requested pod ports"]
        );
        assert_eq!(st.plugin, "NodePorts");
    }

    #[test]
    fn free_or_no_ports_fit() {
        let state = CycleState::default();
        let n = node_using(&[80]);
        let other = PodBuilder::new("p").host_port(8080).build_info();
        assert_eq!(NodePorts.filter(&state, &other, &n), Status::success());
        let none = PodBuilder::new("q").build_info();
        assert_eq!(NodePorts.filter(&state, &none, &n), Status::success());
    }

    #[test]
    fn port_freed_after_pod_removed() {
        let mut n = node_using(&[80]);
        let pod = PodBuilder::new("p").host_port(80).build_info();
        assert!(
            NodePorts
                .filter(&CycleState::default(), &pod, &n)
                .is_rejected()
        );
        n.remove_pod("uid-existing-0");
        assert!(
            NodePorts
                .filter(&CycleState::default(), &pod, &n)
                .is_success()
        );
        assert_eq!(
            NodePorts.events_to_register(),
            [ClusterEvent::NodeAdded, ClusterEvent::AssignedPodDeleted]
        );
    }
}
