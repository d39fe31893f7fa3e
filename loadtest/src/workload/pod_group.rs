//! `PodGroup` (`scheduling.x-k8s.io/v1alpha1`): the gang of the
//! scheduler-plugins Coscheduling plugin (kubernetes-sigs/scheduler-plugins
//! `apis/scheduling/v1alpha1/types.go`). k8s-openapi has no type for this
//! custom resource, so it is declared here with the upstream field names.
//!
//! Pods join a group with the label [`LABEL_POD_GROUP`] naming a PodGroup of
//! their namespace. Flotilla reads PodGroups (and counts them) so cluster
//! dumps keep them; gang scheduling itself is not implemented yet.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

/// API group of [`PodGroup`].
pub const GROUP: &str = "scheduling.x-k8s.io";
/// `apiVersion` of [`PodGroup`].
pub const API_VERSION: &str = "scheduling.x-k8s.io/v1alpha1";
/// Pod label naming the pod's PodGroup (same namespace).
pub const LABEL_POD_GROUP: &str = "scheduling.x-k8s.io/pod-group";

/// A collection of pods scheduled all together or not at all.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroup {
    /// Standard object metadata (`name`, `namespace`, ...).
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired behaviour.
    #[serde(default)]
    pub spec: PodGroupSpec,
    /// Observed state, possibly stale.
    #[serde(default)]
    pub status: PodGroupStatus,
}

/// `spec` of a [`PodGroup`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupSpec {
    /// Fewest member pods that must be placed together (0 when unset).
    #[serde(default)]
    pub min_member: i32,
    /// Least total resources the members need (Kubernetes quantities).
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub min_resources: Option<BTreeMap<String, Quantity>>,
    /// How long members wait for the whole group, in seconds.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_timeout_seconds: Option<i32>,
}

/// `status` of a [`PodGroup`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupStatus {
    /// `Pending`, `Scheduling`, `Running`, `Unknown`, `Finished` or `Failed`.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub phase: Option<String>,
    /// UID of the workload that occupies the group.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub occupied_by: Option<String>,
    /// Members running.
    #[serde(default)]
    pub running: i32,
    /// Members that succeeded.
    #[serde(default)]
    pub succeeded: i32,
    /// Members that failed.
    #[serde(default)]
    pub failed: i32,
    /// When the group's scheduling started.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub schedule_start_time: Option<Time>,
}

impl k8s_openapi::Resource for PodGroup {
    const API_VERSION: &'static str = API_VERSION;
    const GROUP: &'static str = GROUP;
    const KIND: &'static str = "PodGroup";
    const VERSION: &'static str = "v1alpha1";
    const URL_PATH_SEGMENT: &'static str = "podgroups";
    type Scope = k8s_openapi::NamespaceResourceScope;
}

impl k8s_openapi::ListableResource for PodGroup {
    const LIST_KIND: &'static str = "PodGroupList";
}

impl k8s_openapi::Metadata for PodGroup {
    type Ty = ObjectMeta;

    fn metadata(&self) -> &ObjectMeta {
        &self.metadata
    }

    fn metadata_mut(&mut self) -> &mut ObjectMeta {
        &mut self.metadata
    }
}
