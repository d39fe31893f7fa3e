//! A cluster's objects as read from a dump or a live API server: the input
//! of `simulate` and `explain` ([`ClusterObjects`]), whatever loaded it.

use std::fmt;

use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;

use crate::gang::WorkloadPodGroup;
use crate::pod_group::PodGroup;

/// Namespace given to namespaced objects that have none.
pub const DEFAULT_NAMESPACE: &str = "default";

/// Every object of a cluster dump that Flotilla reads, each kind in file
/// order. The input of `simulate` / `explain`, whatever the source (a file,
/// or a live cluster's lists, both read by `flotilla_loadtest::workload`).
#[derive(Debug, Clone, Default)]
pub struct ClusterObjects {
    /// Human-readable name of the source (the file stem).
    pub name: String,
    /// Nodes.
    pub nodes: Vec<Node>,
    /// Pods, bound (`spec.nodeName` set) and pending, in file order.
    pub pods: Vec<Pod>,
    /// Namespaces (their labels feed `namespaceSelector`s).
    pub namespaces: Vec<Namespace>,
    /// PriorityClasses (resolve `spec.priorityClassName`).
    pub priority_classes: Vec<PriorityClass>,
    /// PodDisruptionBudgets (preemption's choice of victims).
    pub pod_disruption_budgets: Vec<PodDisruptionBudget>,
    /// PodGroups (`scheduling.x-k8s.io/v1alpha1`: gangs, in profiles that
    /// enable Coscheduling).
    pub pod_groups: Vec<PodGroup>,
    /// PodGroups of Kubernetes' own API (`scheduling.k8s.io` `v1alpha2` /
    /// `v1beta1`: gangs and basic groups, served by GangScheduling).
    pub workload_pod_groups: Vec<WorkloadPodGroup>,
    /// Volume objects: PersistentVolumeClaims, PersistentVolumes,
    /// StorageClasses, CSINodes, CSIDrivers, VolumeAttachments (the volume
    /// Filters read them).
    pub volumes: Vec<crate::volumes::VolumeObject>,
    /// Bad objects skipped (when the loader was told to skip them) and
    /// objects of other kinds,
    /// in input order.
    pub warnings: Vec<LoadWarning>,
}

/// A bad row or object that was skipped, or an object of an unsupported kind.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LoadWarning {
    /// Where: file name and line (`openb_pod_list_default.csv line 17`) or
    /// file name and object (`cluster.yaml: item 3 (Pod default/web-1)`).
    pub location: String,
    /// What was wrong, e.g. `field cpu_milli: invalid digit "12x00"`.
    pub message: String,
}

impl fmt::Display for LoadWarning {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "{}: {}", self.location, self.message)
    }
}
