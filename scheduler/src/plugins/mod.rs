//! In-tree plugins (one file per plugin). See `names` for registry names.
//!
//! Each plugin mirrors the upstream kube-scheduler plugin of the same name:
//! reason texts, status codes and scores are upstream's (see each module).
//! [`node_name`] is the template to copy for a new plugin.
//!
//! | plugin | PreFilter | Filter | Score (default weight) | normalize | events that can help a rejected pod |
//! | --- | --- | --- | --- | --- | --- |
//! | [`NodeUnschedulable`] | | cordon (`shared::fit`) | | | `NodeAdded`, `NodeBecameSchedulable`, `NodeTaintChanged` |
//! | [`NodeName`] | | `spec.nodeName` | | | `NodeAdded` |
//! | [`TaintToleration`] | | `NoSchedule` / `NoExecute` taints | untolerated `PreferNoSchedule` taints (3) | reverse | `NodeAdded`, `NodeTaintChanged` |
//! | [`NodeAffinity`] | `metadata.name` pins → node set; `Skip` without constraints | `addedAffinity`, `nodeSelector` + required affinity | preferred term weights, `addedAffinity`'s too (2) | default | `NodeAdded`, `NodeLabelChanged` |
//! | [`NodePorts`] | | host ports (`shared::fit`) | | | `NodeAdded`, `AssignedPodDeleted` |
//! | [`NodeResourcesFit`] | | requests (`shared::fit`), minus ignored extended resources | `LeastAllocated` / `MostAllocated` / `RequestedToCapacityRatio` over weighted resources (1) | none | `NodeAdded`, `NodeAllocatableGrew`, `AssignedPodDeleted` |
//! | [`VolumeRestrictions`] | the pod's `ReadWriteOncePod` claims another pod uses (cluster-wide); claim not found; `Skip` without inline disks or claims in use | inline GCE PD / EBS / RBD / iSCSI disk conflicts, RWOP claim in use | | | `AssignedPodDeleted`, `NodeAdded`, `PvcChanged` |
//! | [`NodeVolumeLimits`] | the pod's new CSI volumes; `Skip` without any | distinct CSI volumes per driver (pods + VolumeAttachments) against CSINode `allocatable.count` | | | `CsiNodeChanged`, `AssignedPodDeleted`, `PvcChanged`, `VolumeAttachmentDeleted` |
//! | [`VolumeZone`] | the bound PVs with zone/region labels; claim/class/PV not found, unbound `Immediate`; `Skip` without any | PV zone/region labels (`__` sets, beta labels) against the node's | | | `StorageClassAdded`, `NodeAdded`, `NodeLabelChanged`, `PvcChanged`, `PvChanged` |
//! | [`PodTopologySpread`] | hard constraints counted per domain; `Skip` without them | `maxSkew` / `minDomains` per hard constraint, missing topology key | soft constraints: matching pods per domain × ln(domains + 2) (2); `Skip` without them | reverse min-max, nodes lacking a key 0 | `NodeAdded`, `NodeLabelChanged`, `NodeTaintChanged`, `AssignedPodAdded`, `AssignedPodDeleted` |
//! | [`InterPodAffinity`] | topology-pair counts of matching pods; `Skip` when nothing applies | required pod affinity / anti-affinity, existing pods' anti-affinity | preferred terms both ways + existing required affinity (2) | min-max | `NodeAdded`, `NodeLabelChanged`, `AssignedPodAdded`, `AssignedPodDeleted` |
//! | [`NodeResourcesBalancedAllocation`] | | | change in resource balance (1); PreScore `Skip` for pods requesting none of the resources | none | none (rejects nothing) |
//! | [`ImageLocality`] | | | size × spread of the pod's images on the node (1); PreScore `Skip` when no node has them | none | none (rejects nothing) |
//!
//! [`MaxInstancesPerNode`] (Flotilla's, not upstream's, and not in the
//! default profile) caps the pods of one app per node from the pod
//! annotation `scheduling.flotilla.dev/max-instances-per-node`: PreFilter
//! reads it (`Skip` without it), Filter counts the app's pods on the node
//! (`shared::max_instances`, also its bind check); events
//! `NodeAdded`, `AssignedPodDeleted`.
//!
//! [`SchedulingGates`] is a PreEnqueue plugin the queue runs: a pod with
//! `spec.schedulingGates` waits in the queue's gated set until they are removed.
//!
//! [`Coscheduling`] (scheduler-plugins gangs, not in the default profile)
//! and [`GangScheduling`] (Kubernetes' `scheduling.k8s.io` gangs, in it) hold
//! gang members at Permit; the worker sends each gang whole to the
//! coordinator (see [`crate::gang`]).
//!
//! The four volume plugins read the volume objects the coordinator
//! forwards ([`flotilla_shared::framework::SharedLister::volumes`]); their
//! checks live in `shared::volumes`, which their bind checks call too.
//! Pods without volumes make them `Skip` at PreFilter. [`VolumeBinding`]
//! checks bound PVs' node affinity and finds a PV or a provisioner for
//! each unbound `WaitForFirstConsumer` claim in the worker's cycle; its
//! Reserve and PreBind (bind or provision the claims, wait until bound)
//! run at the coordinator after the grant.
//!
//! [`resource_allocation`] holds what the two resource score plugins share.
//! [`DefaultPreemption`] (PostFilter) only carries its args; the algorithm
//! is [`crate::preemption`].
//!
//! `PodTopologySpread` default constraints (`defaultingType: System` or a
//! `List`) apply upstream only with a selector built from the Services /
//! ReplicaSets / StatefulSets / ReplicationControllers selecting the pod;
//! Flotilla's snapshot has none of them, so pods without their own
//! `topologySpreadConstraints` are **not** spread (see
//! [`pod_topology_spread`]).
//!
//! The framework multiplies each plugin's normalized score (0..=100) by its
//! weight ([`DEFAULT_SCORE_WEIGHTS`], upstream `default_plugins.go`) and sums.

use flotilla_shared::framework::Status;
use flotilla_shared::volumes::VolumeRejection;

pub mod coscheduling;
pub mod default_binder;
pub mod default_preemption;
pub mod gang_scheduling;
pub mod gpu_share;
pub mod image_locality;
pub mod inter_pod_affinity;
pub mod max_instances_per_node;
pub mod names;
pub mod node_affinity;
pub mod node_name;
pub mod node_ports;
pub mod node_resources_balanced_allocation;
pub mod node_resources_fit;
pub mod node_unschedulable;
pub mod node_volume_limits;
pub mod pod_topology_spread;
pub mod priority_sort;
pub mod resource_allocation;
pub mod scheduling_gates;
pub mod taint_toleration;
pub mod volume_binding;
pub mod volume_restrictions;
pub mod volume_zone;

pub use coscheduling::Coscheduling;
pub use default_binder::DefaultBinder;
pub use default_preemption::DefaultPreemption;
pub use gang_scheduling::GangScheduling;
pub use gpu_share::GpuShare;
pub use image_locality::ImageLocality;
pub use inter_pod_affinity::InterPodAffinity;
pub use max_instances_per_node::MaxInstancesPerNode;
pub use node_affinity::NodeAffinity;
pub use node_name::NodeName;
pub use node_ports::NodePorts;
pub use node_resources_balanced_allocation::NodeResourcesBalancedAllocation;
pub use node_resources_fit::NodeResourcesFit;
pub use node_unschedulable::NodeUnschedulable;
pub use node_volume_limits::NodeVolumeLimits;
pub use pod_topology_spread::PodTopologySpread;
pub use priority_sort::PrioritySort;
pub use scheduling_gates::SchedulingGates;
pub use taint_toleration::TaintToleration;
pub use volume_binding::VolumeBinding;
pub use volume_restrictions::VolumeRestrictions;
pub use volume_zone::VolumeZone;

/// A volume Filter's status: the missing-state error, the check's
/// rejection (with `plugin`), or success.
fn as_status(result: Result<Result<(), VolumeRejection>, Status>, plugin: &'static str) -> Status {
    match result {
        Ok(Ok(())) => Status::success(),
        Ok(Err(r)) => r.into_status(plugin),
        Err(st) => st,
    }
}

/// Upstream default Score weights of the in-tree score plugins
/// (`pkg/scheduler/apis/config/v1/default_plugins.go`).
pub const DEFAULT_SCORE_WEIGHTS: &[(&str, i64)] = &[
    (names::TAINT_TOLERATION, 3),
    (names::NODE_AFFINITY, 2),
    (names::NODE_RESOURCES_FIT, 1),
    (names::POD_TOPOLOGY_SPREAD, 2),
    (names::INTER_POD_AFFINITY, 2),
    (names::NODE_RESOURCES_BALANCED_ALLOCATION, 1),
    (names::IMAGE_LOCALITY, 1),
];

#[cfg(test)]
mod tests {
    use super::*;
    use flotilla_shared::framework::{Plugin, ScorePlugin};

    #[test]
    fn default_weights_cover_exactly_the_score_plugins() {
        let pts = PodTopologySpread::new();
        let score_plugins: [&dyn ScorePlugin; 7] = [
            &TaintToleration,
            &NodeAffinity::new(),
            &NodeResourcesFit::new(),
            &pts,
            &InterPodAffinity::default(),
            &NodeResourcesBalancedAllocation::new(),
            &ImageLocality,
        ];
        assert_eq!(DEFAULT_SCORE_WEIGHTS.len(), score_plugins.len());
        for p in score_plugins {
            assert!(
                DEFAULT_SCORE_WEIGHTS.iter().any(|(n, _)| *n == p.name()),
                "{} has no default weight",
                p.name()
            );
        }
        let weight = |name: &str| {
            DEFAULT_SCORE_WEIGHTS
                .iter()
                .find(|(n, _)| *n == name)
                .map(|w| w.1)
        };
        assert_eq!(weight("TaintToleration"), Some(3));
        assert_eq!(weight("NodeAffinity"), Some(2));
        assert_eq!(weight("NodeResourcesFit"), Some(1));
        assert_eq!(weight("InterPodAffinity"), Some(2));
        assert_eq!(weight("NodeResourcesBalancedAllocation"), Some(1));
        assert_eq!(weight("PodTopologySpread"), Some(2));
        assert_eq!(weight("ImageLocality"), Some(1));
    }

    #[test]
    fn plugin_names_are_the_registry_names() {
        let pts = PodTopologySpread::new();
        let all: [&dyn Plugin; 10] = [
            &NodeUnschedulable,
            &NodeName,
            &TaintToleration,
            &NodeAffinity::new(),
            &NodePorts,
            &NodeResourcesFit::new(),
            &pts,
            &InterPodAffinity::default(),
            &NodeResourcesBalancedAllocation::new(),
            &ImageLocality,
        ];
        let got: Vec<&str> = all.iter().map(|p| p.name()).collect();
        assert_eq!(
            got,
            [
                names::NODE_UNSCHEDULABLE,
                names::NODE_NAME,
                names::TAINT_TOLERATION,
                names::NODE_AFFINITY,
                names::NODE_PORTS,
                names::NODE_RESOURCES_FIT,
                names::POD_TOPOLOGY_SPREAD,
                names::INTER_POD_AFFINITY,
                names::NODE_RESOURCES_BALANCED_ALLOCATION,
                names::IMAGE_LOCALITY,
            ]
        );
    }
}
