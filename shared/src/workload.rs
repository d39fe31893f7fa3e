//! Workload classes: which scheduler pool (online or batch) serves a pod.
//!
//! Classification, first rule that applies wins:
//! 1. the label `flotilla.io/workload-class` with value `online` or `batch`
//!    (any other value is an error on that pod);
//! 2. a pod owned by a `Job` or `CronJob` is `batch`;
//! 3. a pod of Kubernetes QoS class `BestEffort` (no container sets any
//!    request or limit) is `batch`;
//! 4. everything else is `online`.

use std::fmt;

use k8s_openapi::api::core::v1::Pod;

/// The label that sets a pod's class explicitly.
pub const WORKLOAD_CLASS_LABEL: &str = "flotilla.io/workload-class";

/// A scheduling pool.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum WorkloadClass {
    /// Latency-sensitive services.
    Online,
    /// Throughput-oriented work.
    Batch,
}

impl WorkloadClass {
    /// Both classes, online first.
    pub const ALL: [WorkloadClass; 2] = [WorkloadClass::Online, WorkloadClass::Batch];

    /// `"online"` or `"batch"`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            WorkloadClass::Online => "online",
            WorkloadClass::Batch => "batch",
        }
    }

    /// Parses `"online"` / `"batch"`.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "online" => Some(WorkloadClass::Online),
            "batch" => Some(WorkloadClass::Batch),
            _ => None,
        }
    }
}

impl fmt::Display for WorkloadClass {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// Classifies a pod by the rules in the module doc.
///
/// # Errors
/// The label holds a value other than `online` or `batch`; the message names
/// the field.
pub fn classify(pod: &Pod) -> Result<WorkloadClass, String> {
    if let Some(v) = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(WORKLOAD_CLASS_LABEL))
    {
        return WorkloadClass::parse(v).ok_or_else(|| {
            format!(
                "metadata.labels[\"{WORKLOAD_CLASS_LABEL}\"]: {v:?} is not one of \"online\", \"batch\""
            )
        });
    }
    let owned_by_job = pod
        .metadata
        .owner_references
        .iter()
        .flatten()
        .any(|o| o.kind == "Job" || o.kind == "CronJob");
    if owned_by_job {
        return Ok(WorkloadClass::Batch);
    }
    let best_effort = pod.spec.as_ref().is_none_or(|s| {
        s.containers
            .iter()
            .chain(s.init_containers.iter().flatten())
            .all(|c| {
                c.resources.as_ref().is_none_or(|r| {
                    r.requests.as_ref().is_none_or(|m| m.is_empty())
                        && r.limits.as_ref().is_none_or(|m| m.is_empty())
                })
            })
    });
    Ok(if best_effort {
        WorkloadClass::Batch
    } else {
        WorkloadClass::Online
    })
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::api::core::v1::{Container, PodSpec, ResourceRequirements};
    use k8s_openapi::apimachinery::pkg::api::resource::Quantity;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::OwnerReference;
    use std::collections::BTreeMap;

    fn pod_with_requests() -> Pod {
        Pod {
            spec: Some(PodSpec {
                containers: vec![Container {
                    resources: Some(ResourceRequirements {
                        requests: Some(BTreeMap::from([("cpu".into(), Quantity("1".into()))])),
                        ..Default::default()
                    }),
                    ..Default::default()
                }],
                ..Default::default()
            }),
            ..Default::default()
        }
    }

    #[test]
    fn label_wins_then_owner_then_qos() {
        let mut p = pod_with_requests();
        assert_eq!(classify(&p), Ok(WorkloadClass::Online));
        p.metadata.owner_references = Some(vec![OwnerReference {
            kind: "Job".into(),
            ..Default::default()
        }]);
        assert_eq!(classify(&p), Ok(WorkloadClass::Batch));
        p.metadata.labels = Some(BTreeMap::from([(
            WORKLOAD_CLASS_LABEL.into(),
            "online".into(),
        )]));
        assert_eq!(classify(&p), Ok(WorkloadClass::Online));
        let best_effort = Pod {
            spec: Some(PodSpec {
                containers: vec![Container::default()],
                ..Default::default()
            }),
            ..Default::default()
        };
        assert_eq!(classify(&best_effort), Ok(WorkloadClass::Batch));
    }

    #[test]
    fn unknown_label_value_names_the_field() {
        let mut p = pod_with_requests();
        p.metadata.labels = Some(BTreeMap::from([(
            WORKLOAD_CLASS_LABEL.into(),
            "gold".into(),
        )]));
        let e = classify(&p).unwrap_err();
        assert!(
            e.contains("flotilla.io/workload-class") && e.contains("gold"),
            "{e}"
        );
    }
}
