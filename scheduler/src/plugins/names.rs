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
/// `PrioritySort` (QueueSort; the queue's order).
pub const PRIORITY_SORT: &str = "PrioritySort";
/// `DefaultBinder` (Bind; the coordinator writes the Binding).
pub const DEFAULT_BINDER: &str = "DefaultBinder";
/// `PodTopologySpread`.
pub const POD_TOPOLOGY_SPREAD: &str = "PodTopologySpread";
/// `InterPodAffinity`.
pub const INTER_POD_AFFINITY: &str = "InterPodAffinity";
/// `ImageLocality`.
pub const IMAGE_LOCALITY: &str = "ImageLocality";
/// `DefaultPreemption` (PostFilter).
pub const DEFAULT_PREEMPTION: &str = "DefaultPreemption";
/// `Coscheduling` (scheduler-plugins gang scheduling; not a default plugin).
pub const COSCHEDULING: &str = "Coscheduling";
/// `GangScheduling` (Kubernetes' own gangs: `scheduling.k8s.io` PodGroups).
pub const GANG_SCHEDULING: &str = "GangScheduling";
/// `MaxInstancesPerNode` (Flotilla: at most `k` pods of one app per node,
/// from a pod annotation; not a default plugin).
pub const MAX_INSTANCES_PER_NODE: &str = "MaxInstancesPerNode";
/// `GpuShare` (Flotilla: per-device GPU placement and GPU scoring
/// policies; the FGD paper's `Open-Gpu-Share`).
pub const GPU_SHARE: &str = "GpuShare";
/// `SchedulingGates` (PreEnqueue).
pub const SCHEDULING_GATES: &str = "SchedulingGates";

/// `VolumeZone`.
pub const VOLUME_ZONE: &str = "VolumeZone";
/// `VolumeRestrictions`.
pub const VOLUME_RESTRICTIONS: &str = "VolumeRestrictions";
/// `NodeVolumeLimits` (upstream's CSI limits plugin, `CSILimits`).
pub const NODE_VOLUME_LIMITS: &str = "NodeVolumeLimits";
/// `VolumeBinding`.
pub const VOLUME_BINDING: &str = "VolumeBinding";

/// Upstream default plugins Flotilla does not implement (yet): configs may
/// name them; they are ignored with a warning.
pub const NOT_IMPLEMENTED: &[&str] = &["DynamicResources", "NodeDeclaredFeatures"];
