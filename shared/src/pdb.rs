//! `PdbInfo`: the compact view of a `policy/v1` `PodDisruptionBudget` that
//! preemption reads (namespace, compiled selector, `status.disruptionsAllowed`,
//! `status.disruptedPods`).
//!
//! Two selection rules exist upstream and both are offered here:
//! - [`PdbInfo::selects`] is the `policy/v1` API meaning (the disruption
//!   controller's): an empty selector (`{}`) selects every pod of the
//!   namespace, an absent one selects none.
//! - [`PdbInfo::limits_preemption_of`] is what the scheduler's
//!   DefaultPreemption uses (`filterPodsWithPDBViolation` in
//!   `pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go`):
//!   a nil **or empty** selector matches nothing there, and a pod without
//!   labels matches no budget.

use std::collections::BTreeSet;
use std::sync::Arc;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;

use crate::label_selector::LabelSelector;
use crate::pod_info::PodInfo;

/// A PodDisruptionBudget, compiled once.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PdbInfo {
    /// `metadata.namespace` (`default` when unset); a budget only covers
    /// pods of its own namespace.
    pub namespace: Arc<str>,
    /// `metadata.name`.
    pub name: Arc<str>,
    /// `spec.selector`, compiled; `None` when the field is absent (selects
    /// no pod).
    pub selector: Option<LabelSelector>,
    /// `status.disruptionsAllowed`: how many covered pods may still be
    /// disrupted (0 when the status is missing, as Go's zero value).
    pub disruptions_allowed: i32,
    /// Names (not keys: the namespace is the budget's) of the pods in
    /// `status.disruptedPods`: evictions the API server already counted,
    /// which preemption does not count again.
    pub disrupted_pods: BTreeSet<String>,
}

/// A PodDisruptionBudget that cannot be read; names the object and the field.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("poddisruptionbudget {pdb}: {message}")]
pub struct PdbError {
    /// `namespace/name` (or `<unnamed>`).
    pub pdb: String,
    /// Field path and problem, e.g.
    /// `spec.selector.matchExpressions[0].operator: "Gt" is not a valid ...`.
    pub message: String,
}

/// `(namespace, name)` of a PodDisruptionBudget (`default` when the
/// namespace is unset): the key stores use.
#[must_use]
pub fn key_of(p: &PodDisruptionBudget) -> (String, String) {
    (
        p.metadata
            .namespace
            .clone()
            .unwrap_or_else(|| "default".into()),
        p.metadata.name.clone().unwrap_or_default(),
    )
}

impl PdbInfo {
    /// Compiles a `PodDisruptionBudget`.
    ///
    /// # Errors
    /// [`PdbError`] for a missing name or a malformed `spec.selector`
    /// (unknown operator, values that do not fit the operator). Upstream's
    /// scheduler silently skips such a budget; callers may do the same after
    /// reporting the error.
    // `Option::from` below is a no-op with the 1.36+ API types (the
    // version picked in this workspace) and a real conversion before.
    #[allow(clippy::useless_conversion)]
    pub fn from_pdb(pdb: &PodDisruptionBudget) -> Result<Self, PdbError> {
        let namespace = pdb.metadata.namespace.as_deref().unwrap_or("default");
        let Some(name) = pdb.metadata.name.as_deref() else {
            return Err(PdbError {
                pdb: "<unnamed>".into(),
                message: "metadata.name: required".into(),
            });
        };
        let selector = match pdb.spec.as_ref().and_then(|s| s.selector.as_ref()) {
            Some(s) => Some(
                LabelSelector::compile(s, "spec.selector").map_err(|e| PdbError {
                    pdb: format!("{namespace}/{name}"),
                    message: e.to_string(),
                })?,
            ),
            None => None,
        };
        let status = pdb.status.as_ref();
        Ok(PdbInfo {
            namespace: Arc::from(namespace),
            name: Arc::from(name),
            selector,
            // An `i32` up to Kubernetes 1.35, an `Option<i32>` from 1.36 on:
            // `Option::from` reads both.
            disruptions_allowed: status
                .and_then(|s| Option::<i32>::from(s.disruptions_allowed))
                .unwrap_or(0),
            disrupted_pods: status
                .and_then(|s| s.disrupted_pods.as_ref())
                .map(|m| m.keys().cloned().collect())
                .unwrap_or_default(),
        })
    }

    /// `policy/v1` selection: the pod is in the budget's namespace and the
    /// selector matches its labels (`{}` matches every pod, an absent
    /// selector none).
    #[must_use]
    pub fn selects(&self, pod: &PodInfo) -> bool {
        *pod.key.namespace == *self.namespace
            && self
                .selector
                .as_ref()
                .is_some_and(|s| s.matches(&pod.labels))
    }

    /// Whether preempting `pod` counts against this budget, as upstream's
    /// DefaultPreemption decides it: same namespace, the pod has labels, the
    /// selector is present **and non-empty** and matches them, and the pod is
    /// not already in `status.disruptedPods`.
    #[must_use]
    pub fn limits_preemption_of(&self, pod: &PodInfo) -> bool {
        !pod.labels.is_empty()
            && self.selector.as_ref().is_some_and(|s| !s.is_empty())
            && self.selects(pod)
            && !self.disrupted_pods.contains(&*pod.key.name)
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use k8s_openapi::api::policy::v1::{PodDisruptionBudgetSpec, PodDisruptionBudgetStatus};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector as K8sLabelSelector, LabelSelectorRequirement, ObjectMeta, Time,
    };

    use super::*;
    use crate::testing::PodBuilder;

    fn pdb(
        selector: Option<K8sLabelSelector>,
        allowed: i32,
        disrupted: &[&str],
    ) -> PodDisruptionBudget {
        PodDisruptionBudget {
            metadata: ObjectMeta {
                name: Some("web-pdb".into()),
                namespace: Some("shop".into()),
                ..Default::default()
            },
            spec: Some(PodDisruptionBudgetSpec {
                selector,
                ..Default::default()
            }),
            status: Some(PodDisruptionBudgetStatus {
                disruptions_allowed: allowed.into(),
                disrupted_pods: Some(
                    disrupted
                        .iter()
                        .map(|n| ((*n).to_owned(), Time(Default::default())))
                        .collect::<BTreeMap<_, _>>(),
                ),
                ..Default::default()
            }),
        }
    }

    fn app(v: &str) -> Option<K8sLabelSelector> {
        Some(K8sLabelSelector {
            match_labels: Some([("app".to_owned(), v.to_owned())].into()),
            ..Default::default()
        })
    }

    #[test]
    fn compiles_status_and_selector() {
        let p = PdbInfo::from_pdb(&pdb(app("web"), 2, &["web-0"])).unwrap();
        assert_eq!((&*p.namespace, &*p.name), ("shop", "web-pdb"));
        assert_eq!(p.disruptions_allowed, 2);
        assert!(p.disrupted_pods.contains("web-0"));
        let web = PodBuilder::new("web-1")
            .namespace("shop")
            .label("app", "web")
            .build_info();
        let other_ns = PodBuilder::new("web-1").label("app", "web").build_info();
        let db = PodBuilder::new("db-1")
            .namespace("shop")
            .label("app", "db")
            .build_info();
        assert!(p.selects(&web) && p.limits_preemption_of(&web));
        assert!(
            !p.selects(&other_ns),
            "a budget covers its own namespace only"
        );
        assert!(!p.selects(&db));
        let counted = PodBuilder::new("web-0")
            .namespace("shop")
            .label("app", "web")
            .build_info();
        assert!(p.selects(&counted));
        assert!(
            !p.limits_preemption_of(&counted),
            "a pod in disruptedPods is not counted again"
        );
    }

    #[test]
    fn empty_and_absent_selectors() {
        let any = PodBuilder::new("x")
            .namespace("shop")
            .label("a", "b")
            .build_info();
        let empty = PdbInfo::from_pdb(&pdb(Some(K8sLabelSelector::default()), 0, &[])).unwrap();
        assert!(
            empty.selects(&any),
            "policy/v1: {{}} selects every pod of the namespace"
        );
        assert!(
            !empty.limits_preemption_of(&any),
            "the scheduler's preemption ignores an empty selector"
        );
        let absent = PdbInfo::from_pdb(&pdb(None, 0, &[])).unwrap();
        assert!(!absent.selects(&any) && !absent.limits_preemption_of(&any));
        let exists = PdbInfo::from_pdb(&pdb(
            Some(K8sLabelSelector {
                match_expressions: Some(vec![LabelSelectorRequirement {
                    key: "tier".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                }]),
                ..Default::default()
            }),
            0,
            &[],
        ))
        .unwrap();
        let bare = PodBuilder::new("bare").namespace("shop").build_info();
        assert!(exists.selects(&bare));
        assert!(
            !exists.limits_preemption_of(&bare),
            "a pod without labels matches no budget in preemption"
        );
    }

    #[test]
    fn bad_selector_names_the_budget_and_field() {
        let bad = Some(K8sLabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "app".into(),
                operator: "Gt".into(),
                values: Some(vec!["1".into()]),
            }]),
            ..Default::default()
        });
        let e = PdbInfo::from_pdb(&pdb(bad, 1, &[])).unwrap_err();
        assert_eq!(e.pdb, "shop/web-pdb");
        assert!(
            e.to_string().starts_with(
                "poddisruptionbudget shop/web-pdb: spec.selector.matchExpressions[0].operator: "
            ),
            "{e}"
        );
        let mut unnamed = pdb(None, 0, &[]);
        unnamed.metadata.name = None;
        assert_eq!(
            PdbInfo::from_pdb(&unnamed).unwrap_err().message,
            "metadata.name: required"
        );
    }
}
