//! Pod priority from PriorityClasses, as upstream's `Priority` admission
//! plugin computes it when a pod is created
//! (`plugin/pkg/admission/priority/admission.go`, `admitPod`):
//!
//! - a pod that already carries `spec.priority` keeps it: in a dump of a live
//!   cluster, admission has run and the value is authoritative;
//! - otherwise a `spec.priorityClassName` is looked up; a class that does not
//!   exist is an error (upstream refuses the pod with
//!   `no PriorityClass with name <name> was found`);
//! - a pod without a class gets the `globalDefault` class (when several are
//!   marked, the one with the lowest value, as upstream picks) and its name,
//!   or priority 0 (`DefaultPriorityWhenNoDefaultClassExists`) when there is
//!   none;
//! - `spec.preemptionPolicy` is taken from the class when the pod sets none.
//!
//! The two system classes the apiserver always creates,
//! `system-cluster-critical` (2000000000) and `system-node-critical`
//! (2000001000), are known even when the input does not list them.

use std::collections::HashMap;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;

/// Priority of pods when no class applies (upstream
/// `scheduling.DefaultPriorityWhenNoDefaultClassExists`).
pub const DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS: i32 = 0;

/// Built-in classes: `(name, value)` (upstream `scheduling.SystemPriorityClasses`).
pub const SYSTEM_PRIORITY_CLASSES: [(&str, i32); 2] = [
    ("system-node-critical", 2_000_001_000),
    ("system-cluster-critical", 2_000_000_000),
];

/// A PriorityClass's `value`: required by the API, but an `Option` in the
/// v1.36+ types and a plain `i32` before (this works with both).
#[must_use]
#[allow(clippy::useless_conversion)] // identity only under v1.36+ types
pub fn priority_class_value(pc: &PriorityClass) -> Option<i32> {
    Option::<i32>::from(pc.value)
}

/// A class as admission reads it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Class {
    value: i32,
    preemption_policy: Option<String>,
}

/// The PriorityClasses of a cluster, ready to resolve pods.
#[derive(Debug, Clone, Default)]
pub struct PriorityClasses {
    by_name: HashMap<String, Class>,
    /// The `globalDefault` class with the lowest value, by name.
    global_default: Option<String>,
}

/// A pod's priority cannot be resolved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("spec.priorityClassName: no PriorityClass with name {0} was found")]
pub struct UnknownPriorityClass(pub String);

impl PriorityClasses {
    /// Indexes `classes` (plus the system classes, unless listed).
    #[must_use]
    pub fn new(classes: &[PriorityClass]) -> Self {
        let mut by_name: HashMap<String, Class> = SYSTEM_PRIORITY_CLASSES
            .iter()
            .map(|(name, value)| {
                let class = Class {
                    value: *value,
                    preemption_policy: None,
                };
                ((*name).to_owned(), class)
            })
            .collect();
        let mut global_default: Option<(String, i32)> = None;
        for pc in classes {
            let Some(name) = pc.metadata.name.clone() else {
                continue;
            };
            // `value` is required by the API (the loader checks it); it is an
            // `Option` in the v1.36+ types, a plain `i32` before.
            let value = priority_class_value(pc).unwrap_or_default();
            if pc.global_default == Some(true)
                && global_default.as_ref().is_none_or(|(_, v)| value < *v)
            {
                global_default = Some((name.clone(), value));
            }
            by_name.insert(
                name,
                Class {
                    value,
                    preemption_policy: pc.preemption_policy.clone(),
                },
            );
        }
        PriorityClasses {
            by_name,
            global_default: global_default.map(|(name, _)| name),
        }
    }

    /// Sets `spec.priority` (and, from the class, `spec.priorityClassName`
    /// for the global default and an unset `spec.preemptionPolicy`) the way
    /// admission does; a pod with `spec.priority` already set, or without a
    /// spec, is left as it is. Returns the priority.
    ///
    /// # Errors
    /// [`UnknownPriorityClass`] when `spec.priorityClassName` names no class.
    pub fn admit(&self, pod: &mut Pod) -> Result<i32, UnknownPriorityClass> {
        let Some(spec) = pod.spec.as_mut() else {
            return Ok(DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS);
        };
        if let Some(priority) = spec.priority {
            return Ok(priority);
        }
        let named = spec
            .priority_class_name
            .as_deref()
            .filter(|n| !n.is_empty())
            .map(str::to_owned);
        let class = match named {
            Some(name) => match self.by_name.get(&name) {
                Some(class) => Some(class),
                None => return Err(UnknownPriorityClass(name)),
            },
            None => match &self.global_default {
                Some(name) => {
                    spec.priority_class_name = Some(name.clone());
                    self.by_name.get(name)
                }
                None => None,
            },
        };
        let priority = class.map_or(DEFAULT_PRIORITY_WHEN_NO_DEFAULT_CLASS_EXISTS, |c| c.value);
        spec.priority = Some(priority);
        if spec.preemption_policy.is_none() {
            spec.preemption_policy = class.and_then(|c| c.preemption_policy.clone());
        }
        Ok(priority)
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::testing::PodBuilder;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;

    fn class(name: &str, value: i32, global_default: bool) -> PriorityClass {
        PriorityClass {
            metadata: ObjectMeta {
                name: Some(name.to_owned()),
                ..ObjectMeta::default()
            },
            value: value.into(),
            global_default: Some(global_default),
            preemption_policy: None,
            description: None,
        }
    }

    fn pod(class_name: Option<&str>, priority: Option<i32>) -> Pod {
        let mut pod = PodBuilder::new("p").build();
        let spec = pod.spec.as_mut().expect("spec");
        spec.priority_class_name = class_name.map(str::to_owned);
        spec.priority = priority;
        pod
    }

    /// (classes, priorityClassName, spec.priority, expected priority,
    /// expected class name).
    type Case<'a> = (
        &'a PriorityClasses,
        Option<&'a str>,
        Option<i32>,
        i32,
        Option<&'a str>,
    );

    #[test]
    fn admission_rules_table() {
        let mut never = class("batch-low", -10, false);
        never.preemption_policy = Some("Never".to_owned());
        let with_defaults = PriorityClasses::new(&[
            class("high", 1000, false),
            class("default-a", 50, true),
            class("default-b", 20, true),
            never,
        ]);
        let without_default = PriorityClasses::new(&[class("high", 1000, false)]);
        let cases: [Case<'_>; 7] = [
            (&with_defaults, Some("high"), None, 1000, Some("high")),
            (&with_defaults, None, None, 20, Some("default-b")),
            (&without_default, None, None, 0, None),
            (&with_defaults, Some("high"), Some(7), 7, Some("high")),
            (&with_defaults, Some(""), None, 20, Some("default-b")),
            (
                &without_default,
                Some("system-node-critical"),
                None,
                2_000_001_000,
                Some("system-node-critical"),
            ),
            (
                &with_defaults,
                Some("batch-low"),
                None,
                -10,
                Some("batch-low"),
            ),
        ];
        for (classes, name, given, want, want_name) in cases {
            let mut p = pod(name, given);
            let got = classes.admit(&mut p);
            assert_eq!(got, Ok(want), "{name:?} {given:?}");
            let spec = p.spec.as_ref().expect("spec");
            assert_eq!(spec.priority, Some(want));
            if given.is_none() {
                assert_eq!(spec.priority_class_name.as_deref(), want_name, "{name:?}");
            }
        }
    }

    #[test]
    fn class_preemption_policy_applies_unless_the_pod_sets_one() {
        let mut never = class("batch-low", -10, false);
        never.preemption_policy = Some("Never".to_owned());
        let classes = PriorityClasses::new(&[never]);
        let mut p = pod(Some("batch-low"), None);
        classes.admit(&mut p).expect("known class");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()),
            Some("Never")
        );
        let mut p = pod(Some("batch-low"), None);
        p.spec.as_mut().expect("spec").preemption_policy = Some("PreemptLowerPriority".into());
        classes.admit(&mut p).expect("known class");
        assert_eq!(
            p.spec.as_ref().and_then(|s| s.preemption_policy.as_deref()),
            Some("PreemptLowerPriority")
        );
    }

    #[test]
    fn unknown_class_is_an_error_with_upstream_text() {
        let classes = PriorityClasses::new(&[]);
        let mut p = pod(Some("gold"), None);
        let err = classes.admit(&mut p).expect_err("no such class");
        assert_eq!(
            err.to_string(),
            "spec.priorityClassName: no PriorityClass with name gold was found"
        );
        assert_eq!(p.spec.as_ref().and_then(|s| s.priority), None);
    }
}
