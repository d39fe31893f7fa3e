//! `PodGroup` (`scheduling.x-k8s.io/v1alpha1`): the gang of the
//! scheduler-plugins Coscheduling plugin (kubernetes-sigs/scheduler-plugins
//! `apis/scheduling/v1alpha1/types.go`). k8s-openapi has no type for this
//! custom resource, so it is declared here with the upstream field names.
//!
//! Pods join a group with the label [`LABEL_POD_GROUP`] naming a PodGroup of
//! their namespace. The coordinator routes a whole group to one worker and
//! grants its placements all or none; the worker's `Coscheduling` plugin
//! (scheduler `plugins::coscheduling`) holds members until `minMember` of
//! them are placed. Loadtest dumps keep PodGroups too.

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

/// `status.phase` values (upstream `PodGroupPhase`, current
/// `apis/scheduling/v1alpha1/types.go`: there is no `Scheduled` phase and no
/// `status.scheduled` counter any more).
pub mod phase {
    /// Accepted, but the scheduler cannot place `minMember` pods yet (or
    /// fewer than `minMember` pods exist).
    pub const PENDING: &str = "Pending";
    /// At least `minMember` pods exist and are being placed, fewer than
    /// `minMember` are running.
    pub const SCHEDULING: &str = "Scheduling";
    /// `minMember` pods run (or succeeded).
    pub const RUNNING: &str = "Running";
    /// Some pods are placed, the others cannot be.
    pub const UNKNOWN: &str = "Unknown";
    /// `minMember` pods succeeded.
    pub const FINISHED: &str = "Finished";
    /// At least one of `minMember` pods failed.
    pub const FAILED: &str = "Failed";
}

/// The PodGroup a pod belongs to: the value of its [`LABEL_POD_GROUP`] label
/// (a name in the pod's namespace), `None` without the label or when empty
/// (upstream `util.GetPodGroupLabel`).
#[must_use]
pub fn group_label(labels: &BTreeMap<String, String>) -> Option<&str> {
    labels
        .get(LABEL_POD_GROUP)
        .map(String::as_str)
        .filter(|s| !s.is_empty())
}

/// `namespace/name` of the PodGroup a pod with `labels` in `namespace`
/// belongs to (upstream `util.GetPodGroupFullName`).
#[must_use]
pub fn full_name(namespace: &str, labels: &BTreeMap<String, String>) -> Option<String> {
    group_label(labels).map(|g| format!("{namespace}/{g}"))
}

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

impl PodGroup {
    /// `namespace/name` (`default` namespace when unset).
    #[must_use]
    pub fn full_name(&self) -> String {
        format!(
            "{}/{}",
            self.metadata.namespace.as_deref().unwrap_or("default"),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// How long members wait for the whole group: `spec.scheduleTimeoutSeconds`
    /// when set and positive, else `default` (upstream
    /// `util.GetWaitTimeDuration`).
    #[must_use]
    pub fn wait_time(&self, default: std::time::Duration) -> std::time::Duration {
        match self.spec.schedule_timeout_seconds {
            Some(s) if s > 0 => std::time::Duration::from_secs(u64::from(s.unsigned_abs())),
            _ => default,
        }
    }
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

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn group_label_and_full_name() {
        let mut labels = BTreeMap::new();
        assert_eq!(group_label(&labels), None);
        labels.insert(LABEL_POD_GROUP.to_owned(), String::new());
        assert_eq!(group_label(&labels), None, "an empty label is no group");
        labels.insert(LABEL_POD_GROUP.to_owned(), "pg1".to_owned());
        assert_eq!(group_label(&labels), Some("pg1"));
        assert_eq!(full_name("ns", &labels).as_deref(), Some("ns/pg1"));
    }

    #[test]
    fn wait_time_prefers_the_group_timeout() {
        let default = std::time::Duration::from_secs(60);
        let mut pg = PodGroup::default();
        assert_eq!(pg.wait_time(default), default);
        pg.spec.schedule_timeout_seconds = Some(0);
        assert_eq!(pg.wait_time(default), default, "0 means unset upstream");
        pg.spec.schedule_timeout_seconds = Some(5);
        assert_eq!(pg.wait_time(default), std::time::Duration::from_secs(5));
    }
}
