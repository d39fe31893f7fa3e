//! Registry names of the in-tree plugins (upstream names).

/// `NodeUnschedulable`.
pub const NODE_UNSCHEDULABLE: &str = "NodeUnschedulable";
/// `NodeName`.
pub const NODE_NAME: &str = "NodeName";
/// `TaintToleration`.
pub const TAINT_TOLERATION: &str = "TaintToleration";
/// `NodeAffinity`.
pub const NODE_AFFINITY: &str = "NodeAffinity";
/// `NodePorts`.
pub const NODE_PORTS: &str = "NodePorts";
/// `NodeResourcesFit`.
pub const NODE_RESOURCES_FIT: &str = "NodeResourcesFit";
/// `NodeResourcesBalancedAllocation`.
pub const NODE_RESOURCES_BALANCED_ALLOCATION: &str = "NodeResourcesBalancedAllocation";
