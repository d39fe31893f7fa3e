//! `NodeName`: a pod that names a node in `spec.nodeName` fits only on that
//! node (upstream `pkg/scheduler/framework/plugins/nodename/node_name.go`).
//!
//! This is the smallest in-tree plugin and the template the others follow:
//! - `pub const NAME` is the registry name, taken from [`super::names`];
//! - reasons are `&'static str` constants, so a rejection builds its
//!   `Status` from a borrowed `Cow` and the success path allocates nothing;
//! - the plugin is a stateless unit struct with `Default` and `new()`;
//! - [`Plugin::events_to_register`] lists the cluster events that can turn a
//!   rejection into a fit (here only a new node: the pod's target may not
//!   exist yet);
//! - the Filter's rule is a pure function ([`names_other_node`]) that the
//!   plugin's [`BindCheck`] calls too, so the coordinator's bind arbiter
//!   re-checks exactly what the Filter decided;
//! - tests sit at the bottom and check the upstream reason text and code.

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, CycleState, FilterPlugin, Plugin, Status,
    refuse_if,
};
use flotilla_shared::node_hot::HotFilter;
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;

/// Registry name.
pub const NAME: &str = names::NODE_NAME;

/// Upstream reason text (`ErrReason`).
pub const REASON: &str = "node(s) didn't match the requested node name";

/// Only a node joining can help: node names never change.
const EVENTS: &[ClusterEvent] = &[ClusterEvent::NodeAdded];

/// Filter: when `spec.nodeName` is set, every other node is
/// `UnschedulableAndUnresolvable` (preemption cannot change a node's name).
#[derive(Debug, Clone, Copy, Default)]
pub struct NodeName;

impl NodeName {
    /// The plugin (it has no configuration).
    #[must_use]
    pub const fn new() -> Self {
        NodeName
    }
}

impl Plugin for NodeName {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

/// Whether `pod` names, in `spec.nodeName`, a node other than `node`.
/// `node_name` is `None` for pods that name no node (PodInfo already maps
/// an empty string to `None`), and those fit everywhere.
#[must_use]
pub fn names_other_node(pod: &PodInfo, node: &NodeInfo) -> bool {
    pod.node_name
        .as_deref()
        .is_some_and(|wanted| wanted != node.name())
}

/// The Filter's rule on the arbiter's copy of the node.
impl BindCheck for NodeName {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        refuse_if(names_other_node(pod, node), REASON)
    }
}

impl FilterPlugin for NodeName {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        if names_other_node(pod, node) {
            Status::unresolvable(REASON).with_plugin(NAME)
        } else {
            Status::success()
        }
    }

    /// A pod naming no node passes everywhere; one naming a node has no
    /// hot condition.
    fn hot_filter(&self, _state: &CycleState, pod: &PodInfo) -> Option<HotFilter> {
        pod.node_name.is_none().then_some(HotFilter::ANY)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::Code;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use std::sync::Arc;

    fn node(name: &str) -> NodeInfo {
        NodeInfo::new(Arc::new(NodeBuilder::new(name).build_spec()))
    }

    #[test]
    fn pod_without_node_name_fits_every_node() {
        let pod = PodBuilder::new("p").build_info();
        let st = NodeName::new().filter(&CycleState::default(), &pod, &node("n1"));
        assert_eq!(st, Status::success());
    }

    #[test]
    fn pod_fits_only_the_named_node() {
        let pod = PodBuilder::new("p").node_name("n1").build_info();
        let pl = NodeName::new();
        let state = CycleState::default();
        assert!(pl.filter(&state, &pod, &node("n1")).is_success());

        let st = pl.filter(&state, &pod, &node("n2"));
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(st.reasons, ["node(s) didn't match the requested node name"]);
        assert_eq!(st.plugin, "NodeName");
    }

    #[test]
    fn registers_node_added_only() {
        assert_eq!(NodeName.name(), "NodeName");
        assert_eq!(NodeName.events_to_register(), [ClusterEvent::NodeAdded]);
    }
}
