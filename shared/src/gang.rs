//! Gangs from the two APIs Flotilla reads, as one model.
//!
//! - **scheduler-plugins** `PodGroup` (`scheduling.x-k8s.io/v1alpha1`,
//!   [`crate::pod_group::PodGroup`]): pods join with the label
//!   `scheduling.x-k8s.io/pod-group`; the `Coscheduling` plugin serves it.
//! - **Kubernetes' own** `PodGroup` (`scheduling.k8s.io`: `v1alpha2` in 1.36,
//!   `v1beta1` in 1.37; [`WorkloadPodGroup`]): pods join through the
//!   immutable `spec.schedulingGroup.podGroupName`; the `GangScheduling`
//!   plugin serves it. `spec.schedulingPolicy` is either `basic` (members are
//!   scheduled pod by pod) or `gang.minCount` (all or nothing).
//!
//! Both become a [`Gang`], keyed by [`gang_of`]: `namespace/name` for the
//! scheduler-plugins kind and `podgroups.scheduling.k8s.io/namespace/name`
//! for Kubernetes' kind, so one namespace may hold one of each with the same
//! name. A pod that carries both the label and `spec.schedulingGroup`
//! belongs to the `scheduling.k8s.io` group (the field wins).

use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};
use serde::{Deserialize, Serialize};

use crate::pod_group::{self, PodGroup};
use crate::pod_info::PodInfo;

/// API group of [`WorkloadPodGroup`].
pub const WORKLOAD_GROUP: &str = "scheduling.k8s.io";
/// `apiVersion` of the PodGroup in Kubernetes 1.37 (beta).
pub const V1BETA1: &str = "scheduling.k8s.io/v1beta1";
/// `apiVersion` of the PodGroup in Kubernetes 1.36 (alpha).
pub const V1ALPHA2: &str = "scheduling.k8s.io/v1alpha2";
/// The versions read, the preferred first.
pub const API_VERSIONS: [&str; 2] = [V1BETA1, V1ALPHA2];
/// Prefix of the key of a `scheduling.k8s.io` group (see [`workload_key`]).
pub const WORKLOAD_KEY_PREFIX: &str = "podgroups.scheduling.k8s.io/";
/// How long members of a `scheduling.k8s.io` gang wait at Permit for the
/// rest (upstream GangScheduling's fixed `permitTimeoutDuration`; the API
/// has no timeout field).
pub const WORKLOAD_PERMIT_TIMEOUT: Duration = Duration::from_secs(300);

/// Condition types and reasons the scheduler writes on a
/// `scheduling.k8s.io` PodGroup (upstream `PodGroupStatus.conditions`).
pub mod condition {
    /// Condition type in `v1beta1` (renamed in 1.37): the group's
    /// scheduling requirement was met once. True is terminal.
    pub const INITIALLY_SCHEDULED: &str = "PodGroupInitiallyScheduled";
    /// The same condition's type in `v1alpha2`.
    pub const SCHEDULED: &str = "PodGroupScheduled";
    /// Reason of the True condition.
    pub const REASON_SCHEDULED: &str = "Scheduled";
    /// Reason of a False condition: no room for the gang.
    pub const REASON_UNSCHEDULABLE: &str = "Unschedulable";
    /// Reason of a False condition: the group cannot be scheduled as written
    /// (e.g. its pods name different `schedulerName`s).
    pub const REASON_SCHEDULER_ERROR: &str = "SchedulerError";
}

/// Kubernetes' `PodGroup` (`scheduling.k8s.io` `v1alpha2` / `v1beta1`): the
/// fields the scheduler reads and writes. Both versions share them; the
/// `apiVersion` is kept so that status is written in the object's version.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPodGroup {
    /// `scheduling.k8s.io/v1beta1` or `scheduling.k8s.io/v1alpha2`.
    #[serde(default)]
    pub api_version: String,
    /// `PodGroup`.
    #[serde(default)]
    pub kind: String,
    /// Standard object metadata.
    #[serde(default)]
    pub metadata: ObjectMeta,
    /// Desired behaviour.
    #[serde(default)]
    pub spec: WorkloadPodGroupSpec,
    /// Observed state.
    #[serde(default)]
    pub status: WorkloadPodGroupStatus,
}

/// `spec` of a [`WorkloadPodGroup`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPodGroupSpec {
    /// How the members are scheduled: exactly one of `basic` and `gang`.
    #[serde(default)]
    pub scheduling_policy: SchedulingPolicy,
}

/// `spec.schedulingPolicy`: exactly one member is set.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulingPolicy {
    /// Members are scheduled pod by pod, as if ungrouped.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub basic: Option<serde_json::Map<String, serde_json::Value>>,
    /// All or nothing: at least `minCount` members are placed together.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub gang: Option<GangSchedulingPolicy>,
}

/// `spec.schedulingPolicy.gang`.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct GangSchedulingPolicy {
    /// Fewest members placed together; must be greater than zero.
    #[serde(default)]
    pub min_count: i32,
}

/// `status` of a [`WorkloadPodGroup`].
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct WorkloadPodGroupStatus {
    /// Latest observations (`metav1.Condition`s).
    #[serde(default, skip_serializing_if = "Vec::is_empty")]
    pub conditions: Vec<PodGroupCondition>,
}

/// One `metav1.Condition` of a PodGroup's status.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PodGroupCondition {
    /// Condition type, e.g. `PodGroupInitiallyScheduled`.
    #[serde(rename = "type", default)]
    pub type_: String,
    /// `True`, `False` or `Unknown`.
    #[serde(default)]
    pub status: String,
    /// Machine-readable reason (`Scheduled`, `Unschedulable`, `SchedulerError`).
    #[serde(default)]
    pub reason: String,
    /// Human-readable message.
    #[serde(default)]
    pub message: String,
    /// When `status` last changed.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub last_transition_time: Option<Time>,
}

impl WorkloadPodGroup {
    /// The group's [`Gang`] key: `podgroups.scheduling.k8s.io/namespace/name`.
    #[must_use]
    pub fn key(&self) -> String {
        workload_key(
            self.metadata
                .namespace
                .as_deref()
                .unwrap_or(crate::objects::DEFAULT_NAMESPACE),
            self.metadata.name.as_deref().unwrap_or_default(),
        )
    }

    /// `namespace/name`, for messages.
    #[must_use]
    pub fn full_name(&self) -> String {
        format!(
            "{}/{}",
            self.metadata
                .namespace
                .as_deref()
                .unwrap_or(crate::objects::DEFAULT_NAMESPACE),
            self.metadata.name.as_deref().unwrap_or_default()
        )
    }

    /// The type of the condition the scheduler writes: `PodGroupScheduled`
    /// in `v1alpha2`, `PodGroupInitiallyScheduled` in `v1beta1` (and later).
    #[must_use]
    pub fn condition_type(&self) -> &'static str {
        if self.api_version == V1ALPHA2 {
            condition::SCHEDULED
        } else {
            condition::INITIALLY_SCHEDULED
        }
    }

    /// The scheduler's condition, if written.
    #[must_use]
    pub fn scheduled_condition(&self) -> Option<&PodGroupCondition> {
        let t = self.condition_type();
        self.status.conditions.iter().find(|c| c.type_ == t)
    }

    /// The group's minimum count: `Some(minCount)` for a gang, `None` for
    /// `basic`.
    ///
    /// # Errors
    /// The policy as the API server's validation would word it, naming the
    /// field: neither or both of `basic` and `gang`, or `minCount` < 1.
    pub fn min_count(&self) -> Result<Option<i32>, String> {
        let p = &self.spec.scheduling_policy;
        match (&p.basic, &p.gang) {
            (Some(_), Some(_)) => Err(
                "spec.schedulingPolicy: Invalid value: must set exactly one of basic or gang, not both"
                    .to_owned(),
            ),
            (None, None) => Err(
                "spec.schedulingPolicy: Required value: must set exactly one of basic or gang"
                    .to_owned(),
            ),
            (Some(_), None) => Ok(None),
            (None, Some(g)) if g.min_count < 1 => Err(format!(
                "spec.schedulingPolicy.gang.minCount: Invalid value: {}: must be greater than zero",
                g.min_count
            )),
            (None, Some(g)) => Ok(Some(g.min_count)),
        }
    }
}

/// Which API (and plugin) a gang comes from.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum GangApi {
    /// `scheduling.x-k8s.io` PodGroup, the `Coscheduling` plugin.
    Coscheduling,
    /// `scheduling.k8s.io` PodGroup, the `GangScheduling` plugin.
    GangScheduling,
}

/// A group of pods as the scheduler sees it, whatever its API.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Gang {
    /// The key members name (see [`gang_of`]).
    pub key: String,
    /// `namespace/name` of the object, for messages.
    pub full_name: String,
    /// The object's name (`spec.schedulingGroup.podGroupName` of members).
    pub name: String,
    /// Which API.
    pub api: GangApi,
    /// Members that must be placed together (`minMember`, `gang.minCount`);
    /// `None` for a `basic` group, scheduled pod by pod.
    pub min_count: Option<i32>,
    /// Permit wait set on the object (`scheduleTimeoutSeconds`); `None`
    /// uses the plugin's.
    pub timeout: Option<Duration>,
    /// Why the object cannot be scheduled as written (a field error);
    /// members are held with this message.
    pub invalid: Option<String>,
}

impl Gang {
    /// The gang of a scheduler-plugins PodGroup.
    #[must_use]
    pub fn from_pod_group(g: &PodGroup) -> Self {
        Gang {
            key: g.full_name(),
            full_name: g.full_name(),
            name: g.metadata.name.clone().unwrap_or_default(),
            api: GangApi::Coscheduling,
            min_count: Some(g.spec.min_member),
            timeout: g
                .spec
                .schedule_timeout_seconds
                .filter(|s| *s > 0)
                .map(|s| Duration::from_secs(u64::from(s.unsigned_abs()))),
            invalid: None,
        }
    }

    /// The gang of a `scheduling.k8s.io` PodGroup.
    #[must_use]
    pub fn from_workload(g: &WorkloadPodGroup) -> Self {
        let (min_count, invalid) = match g.min_count() {
            Ok(m) => (m, None),
            Err(e) => (None, Some(format!("PodGroup {}: {e}", g.full_name()))),
        };
        Gang {
            key: g.key(),
            full_name: g.full_name(),
            name: g.metadata.name.clone().unwrap_or_default(),
            api: GangApi::GangScheduling,
            min_count,
            timeout: Some(WORKLOAD_PERMIT_TIMEOUT),
            invalid,
        }
    }

    /// How long members wait at Permit: the object's timeout, else `default`
    /// (the plugin's).
    #[must_use]
    pub fn wait_time(&self, default: Duration) -> Duration {
        self.timeout.unwrap_or(default)
    }

    /// Members that must be placed together, as a count (`0` for `basic`
    /// or a scheduler-plugins group with `minMember` ≤ 0).
    #[must_use]
    pub fn min_members(&self) -> usize {
        self.min_count
            .map_or(0, |m| usize::try_from(m.max(0)).unwrap_or(0))
    }
}

/// A PodGroup object of either API.
#[derive(Debug, Clone, PartialEq)]
pub enum GangObject {
    /// `scheduling.x-k8s.io/v1alpha1`.
    Coscheduling(Arc<PodGroup>),
    /// `scheduling.k8s.io` `v1alpha2` / `v1beta1`.
    Workload(Arc<WorkloadPodGroup>),
}

/// The `apiVersion` of an object, read alone.
#[derive(Deserialize)]
#[serde(rename_all = "camelCase")]
struct TypeMeta {
    #[serde(default)]
    api_version: String,
}

impl GangObject {
    /// Reads a PodGroup of either API from JSON: `scheduling.k8s.io/*` is
    /// Kubernetes' kind, anything else (or no `apiVersion`) the
    /// scheduler-plugins kind.
    ///
    /// # Errors
    /// The JSON does not parse as that kind.
    pub fn from_json(json: &[u8]) -> Result<Self, serde_json::Error> {
        let meta: TypeMeta = serde_json::from_slice(json)?;
        if meta
            .api_version
            .split('/')
            .next()
            .is_some_and(|g| g == WORKLOAD_GROUP)
        {
            Ok(GangObject::Workload(Arc::new(serde_json::from_slice(
                json,
            )?)))
        } else {
            Ok(GangObject::Coscheduling(Arc::new(serde_json::from_slice(
                json,
            )?)))
        }
    }

    /// The object as JSON (with its `apiVersion` for Kubernetes' kind).
    #[must_use]
    pub fn to_json(&self) -> Vec<u8> {
        match self {
            GangObject::Coscheduling(g) => serde_json::to_vec(&**g),
            GangObject::Workload(g) => serde_json::to_vec(&**g),
        }
        .unwrap_or_default()
    }

    /// The key members name.
    #[must_use]
    pub fn key(&self) -> String {
        match self {
            GangObject::Coscheduling(g) => g.full_name(),
            GangObject::Workload(g) => g.key(),
        }
    }

    /// `metadata.uid`.
    #[must_use]
    pub fn uid(&self) -> Option<&str> {
        match self {
            GangObject::Coscheduling(g) => g.metadata.uid.as_deref(),
            GangObject::Workload(g) => g.metadata.uid.as_deref(),
        }
    }

    /// The gang it defines.
    #[must_use]
    pub fn gang(&self) -> Gang {
        match self {
            GangObject::Coscheduling(g) => Gang::from_pod_group(g),
            GangObject::Workload(g) => Gang::from_workload(g),
        }
    }
}

/// Upstream GangScheduling's PreEnqueue message for a member of a gang with
/// fewer than `minCount` pods.
pub const WAITING_FOR_MIN_COUNT: &str =
    "waiting for minCount pods from a gang to appear in scheduling queue";

/// Whether `message` says a member waits for its group to be complete or
/// to exist (upstream's PreEnqueue messages), not why the group failed: it
/// does not become the PodGroup's condition.
#[must_use]
pub fn is_waiting_message(message: &str) -> bool {
    message == WAITING_FOR_MIN_COUNT
        || (message.starts_with("waiting for pods's pod group ")
            && message.ends_with(" to appear in scheduling queue"))
}

/// Whether the members of the `scheduling.k8s.io` PodGroup `name` may be
/// scheduled, given its [`Gang`] (`None`: the object does not exist) and
/// the `spec.schedulerName`s of its non-terminal pods (bound ones too).
/// One decision for the coordinator (which holds members back), the
/// worker's PreEnqueue and `simulate`.
///
/// # Errors
/// The message each member gets: upstream GangScheduling's PreEnqueue
/// message while the PodGroup does not exist; the PodGroup's field error;
/// upstream's message when its pods name different schedulers (the whole
/// group is rejected).
pub fn admission<'a>(
    name: &str,
    gang: Option<&Gang>,
    scheduler_names: impl IntoIterator<Item = &'a str>,
) -> Result<(), String> {
    let Some(gang) = gang else {
        return Err(format!(
            "waiting for pods's pod group {name:?} to appear in scheduling queue"
        ));
    };
    if let Some(invalid) = &gang.invalid {
        return Err(invalid.clone());
    }
    let names: std::collections::BTreeSet<&str> = scheduler_names.into_iter().collect();
    let mut it = names.iter();
    if let (Some(a), Some(b)) = (it.next(), it.next()) {
        return Err(format!(
            "all pods in a single pod group should have the same .spec.schedulerName set, got: {b:?} and {a:?}"
        ));
    }
    Ok(())
}

/// The key of the `scheduling.k8s.io` PodGroup `name` in `namespace`.
#[must_use]
pub fn workload_key(namespace: &str, name: &str) -> String {
    format!("{WORKLOAD_KEY_PREFIX}{namespace}/{name}")
}

/// Whether `key` names a `scheduling.k8s.io` group.
#[must_use]
pub fn is_workload_key(key: &str) -> bool {
    key.starts_with(WORKLOAD_KEY_PREFIX)
}

/// The key of the gang `pod` belongs to: its `spec.schedulingGroup`'s
/// PodGroup, else its scheduler-plugins label's; `None` for most pods.
#[must_use]
pub fn gang_of(pod: &PodInfo) -> Option<String> {
    match &pod.pod_group_name {
        Some(name) => Some(workload_key(&pod.key.namespace, name)),
        None => pod_group::full_name(&pod.key.namespace, &pod.labels),
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;

    fn workload(json: serde_json::Value) -> WorkloadPodGroup {
        serde_json::from_value(json).unwrap()
    }

    #[test]
    fn a_pod_joins_by_its_scheduling_group_or_its_label() {
        let plain = PodBuilder::new("p").build_info();
        assert_eq!(gang_of(&plain), None);
        let labelled = PodBuilder::new("p")
            .label(pod_group::LABEL_POD_GROUP, "pg")
            .build_info();
        assert_eq!(gang_of(&labelled).as_deref(), Some("default/pg"));
        let grouped = PodBuilder::new("p").pod_group_name("pg").build_info();
        assert_eq!(
            gang_of(&grouped).as_deref(),
            Some("podgroups.scheduling.k8s.io/default/pg")
        );
        let both = PodBuilder::new("p")
            .label(pod_group::LABEL_POD_GROUP, "other")
            .pod_group_name("pg")
            .build_info();
        assert_eq!(
            gang_of(&both).as_deref(),
            Some("podgroups.scheduling.k8s.io/default/pg"),
            "the field wins over the label"
        );
        assert!(is_workload_key(&gang_of(&grouped).unwrap()));
        assert!(!is_workload_key(&gang_of(&labelled).unwrap()));
    }

    #[test]
    fn admission_in_upstreams_words() {
        let g = Gang::from_workload(&workload(serde_json::json!({
            "apiVersion": V1BETA1, "metadata": {"name": "pg"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
        })));
        assert_eq!(
            admission("pg", None, []),
            Err("waiting for pods's pod group \"pg\" to appear in scheduling queue".into())
        );
        assert_eq!(admission("pg", Some(&g), []), Ok(()));
        assert_eq!(
            admission("pg", Some(&g), ["default-scheduler", "default-scheduler"]),
            Ok(())
        );
        assert_eq!(
            admission(
                "pg",
                Some(&g),
                ["default-scheduler", "batch", "default-scheduler"]
            ),
            Err(
                "all pods in a single pod group should have the same .spec.schedulerName set, \
                 got: \"default-scheduler\" and \"batch\""
                    .into()
            )
        );
        let bad = Gang::from_workload(&workload(serde_json::json!({
            "apiVersion": V1BETA1, "metadata": {"name": "pg"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 0}}},
        })));
        assert_eq!(
            admission("pg", Some(&bad), ["default-scheduler"]),
            Err(
                "PodGroup default/pg: spec.schedulingPolicy.gang.minCount: Invalid value: 0: \
                 must be greater than zero"
                    .into()
            )
        );
    }

    #[test]
    fn policies_and_their_errors() {
        let cases = [
            (serde_json::json!({"gang": {"minCount": 3}}), Ok(Some(3))),
            (serde_json::json!({"basic": {}}), Ok(None)),
            (
                serde_json::json!({"gang": {"minCount": 0}}),
                Err(
                    "spec.schedulingPolicy.gang.minCount: Invalid value: 0: must be greater than zero",
                ),
            ),
            (
                serde_json::json!({"gang": {"minCount": -2}}),
                Err(
                    "spec.schedulingPolicy.gang.minCount: Invalid value: -2: must be greater than zero",
                ),
            ),
            (
                serde_json::json!({}),
                Err("spec.schedulingPolicy: Required value: must set exactly one of basic or gang"),
            ),
            (
                serde_json::json!({"basic": {}, "gang": {"minCount": 2}}),
                Err(
                    "spec.schedulingPolicy: Invalid value: must set exactly one of basic or gang, not both",
                ),
            ),
        ];
        for (policy, want) in cases {
            let g = workload(serde_json::json!({
                "apiVersion": V1BETA1, "kind": "PodGroup",
                "metadata": {"name": "pg", "namespace": "ns"},
                "spec": {"schedulingPolicy": policy},
            }));
            assert_eq!(g.min_count(), want.map_err(str::to_owned), "{policy}");
            let gang = Gang::from_workload(&g);
            assert_eq!(gang.key, "podgroups.scheduling.k8s.io/ns/pg");
            assert_eq!(gang.api, GangApi::GangScheduling);
            assert_eq!(gang.timeout, Some(WORKLOAD_PERMIT_TIMEOUT));
            match g.min_count() {
                Ok(m) => assert_eq!((gang.min_count, gang.invalid), (m, None)),
                Err(e) => assert_eq!(gang.invalid, Some(format!("PodGroup ns/pg: {e}"))),
            }
        }
    }

    #[test]
    fn objects_of_both_apis_read_back_from_json() {
        // The `kubectl get -o json` shape of a 1.37 PodGroup, status included.
        let beta = serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "workers", "namespace": "ml", "uid": "u1"},
            "spec": {"podGroupTemplateRef": {"workload": {"workloadName": "training",
                     "podGroupTemplateName": "workers"}},
                     "schedulingPolicy": {"gang": {"minCount": 4}}},
            "status": {"conditions": [{"type": "PodGroupInitiallyScheduled", "status": "True",
                       "reason": "Scheduled", "message": "",
                       "lastTransitionTime": "2026-11-01T10:00:00Z"}]}
        });
        let o = GangObject::from_json(beta.to_string().as_bytes()).unwrap();
        let GangObject::Workload(g) = &o else {
            panic!("read as the other kind: {o:?}")
        };
        assert_eq!(o.key(), "podgroups.scheduling.k8s.io/ml/workers");
        assert_eq!(o.uid(), Some("u1"));
        assert_eq!(o.gang().min_count, Some(4));
        assert_eq!(g.condition_type(), condition::INITIALLY_SCHEDULED);
        assert_eq!(
            g.scheduled_condition().map(|c| c.status.as_str()),
            Some("True")
        );
        // Forwarded to workers as JSON and read back as the same kind.
        assert_eq!(GangObject::from_json(&o.to_json()).unwrap(), o);

        let alpha = serde_json::json!({
            "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": "w"}, "spec": {"schedulingPolicy": {"basic": {}}}
        });
        let GangObject::Workload(g) = GangObject::from_json(alpha.to_string().as_bytes()).unwrap()
        else {
            panic!("v1alpha2 read as the other kind")
        };
        assert_eq!(g.condition_type(), condition::SCHEDULED);
        assert_eq!(g.key(), "podgroups.scheduling.k8s.io/default/w");

        let plugins = serde_json::json!({
            "metadata": {"name": "pg", "namespace": "ns"}, "spec": {"minMember": 2}
        });
        let o = GangObject::from_json(plugins.to_string().as_bytes()).unwrap();
        assert!(matches!(o, GangObject::Coscheduling(_)));
        assert_eq!(o.key(), "ns/pg");
        assert_eq!(o.gang().min_count, Some(2));
        assert_eq!(GangObject::from_json(&o.to_json()).unwrap(), o);
    }
}
