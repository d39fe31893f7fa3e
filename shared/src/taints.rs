//! Taints and tolerations, as `k8s.io/api/core/v1` `Toleration.ToleratesTaint`.
//!
//! A toleration tolerates a taint when its effect is empty or equal, and
//! either its key is empty with operator `Exists` (tolerates everything), or
//! the keys are equal and the operator is `Exists` or `Equal` (the default)
//! with equal values.

use k8s_openapi::api::core::v1::{Taint as K8sTaint, Toleration as K8sToleration};

/// `NoSchedule`.
pub const NO_SCHEDULE: &str = "NoSchedule";
/// `PreferNoSchedule`.
pub const PREFER_NO_SCHEDULE: &str = "PreferNoSchedule";
/// `NoExecute`.
pub const NO_EXECUTE: &str = "NoExecute";
/// The taint the node lifecycle controller puts on cordoned nodes.
pub const TAINT_NODE_UNSCHEDULABLE: &str = "node.kubernetes.io/unschedulable";

/// A node taint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Taint {
    /// Taint key.
    pub key: String,
    /// Taint value (may be empty).
    pub value: String,
    /// `NoSchedule`, `PreferNoSchedule` or `NoExecute`.
    pub effect: String,
}

impl From<&K8sTaint> for Taint {
    fn from(t: &K8sTaint) -> Self {
        Taint {
            key: t.key.clone(),
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone(),
        }
    }
}

/// A pod toleration.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Toleration {
    /// Empty means "every key" (only with `exists`).
    pub key: String,
    /// `Exists` (true) or `Equal` (false, the default).
    pub exists: bool,
    /// Value compared under `Equal`.
    pub value: String,
    /// Empty means every effect.
    pub effect: String,
}

impl Toleration {
    /// Reads a Kubernetes toleration; `field` names it in errors.
    ///
    /// # Errors
    /// An unknown operator (only `Exists` and `Equal` exist).
    pub fn from_k8s(t: &K8sToleration, field: &str) -> Result<Self, String> {
        let exists = match t.operator.as_deref() {
            None | Some("" | "Equal") => false,
            Some("Exists") => true,
            Some(other) => {
                return Err(format!("{field}.operator: unsupported operator {other:?}"));
            }
        };
        Ok(Toleration {
            key: t.key.clone().unwrap_or_default(),
            exists,
            value: t.value.clone().unwrap_or_default(),
            effect: t.effect.clone().unwrap_or_default(),
        })
    }

    /// Whether this toleration tolerates `taint`.
    #[must_use]
    pub fn tolerates(&self, taint: &Taint) -> bool {
        if !self.effect.is_empty() && self.effect != taint.effect {
            return false;
        }
        if self.key.is_empty() {
            return self.exists;
        }
        self.key == taint.key && (self.exists || self.value == taint.value)
    }
}

/// Whether any toleration tolerates `taint`.
#[must_use]
pub fn tolerated(tolerations: &[Toleration], taint: &Taint) -> bool {
    tolerations.iter().any(|t| t.tolerates(taint))
}

/// Whether `taints` hold a `NoSchedule` / `NoExecute` taint that no
/// toleration of `tolerations` tolerates (upstream
/// `FindMatchingUntoleratedTaint` with `DoNotScheduleTaintsFilterFunc`):
/// TaintToleration's Filter, and PodTopologySpread's `nodeTaintsPolicy:
/// Honor`.
#[must_use]
pub fn has_untolerated_hard_taint(tolerations: &[Toleration], taints: &[Taint]) -> bool {
    taints
        .iter()
        .any(|t| (t.effect == NO_SCHEDULE || t.effect == NO_EXECUTE) && !tolerated(tolerations, t))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn taint(k: &str, v: &str, e: &str) -> Taint {
        Taint {
            key: k.into(),
            value: v.into(),
            effect: e.into(),
        }
    }

    #[test]
    fn toleration_matching_follows_upstream() {
        let t = taint("gpu", "true", NO_SCHEDULE);
        let eq = Toleration {
            key: "gpu".into(),
            value: "true".into(),
            ..Default::default()
        };
        assert!(eq.tolerates(&t));
        assert!(
            !Toleration {
                value: "false".into(),
                ..eq.clone()
            }
            .tolerates(&t)
        );
        assert!(
            !Toleration {
                effect: NO_EXECUTE.into(),
                ..eq.clone()
            }
            .tolerates(&t)
        );
        assert!(
            Toleration {
                exists: true,
                value: String::new(),
                ..eq.clone()
            }
            .tolerates(&t)
        );
        let all = Toleration {
            exists: true,
            ..Default::default()
        };
        assert!(all.tolerates(&t), "empty key + Exists tolerates everything");
        let empty_key_equal = Toleration::default();
        assert!(!empty_key_equal.tolerates(&t));
    }

    #[test]
    fn unknown_operator_is_an_error() {
        let k = K8sToleration {
            operator: Some("Maybe".into()),
            ..Default::default()
        };
        let e = Toleration::from_k8s(&k, "spec.tolerations[2]").unwrap_err();
        assert!(e.starts_with("spec.tolerations[2].operator"), "{e}");
    }
}
