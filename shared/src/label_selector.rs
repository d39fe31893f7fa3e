//! `metav1.LabelSelector` (pods' `labelSelector` in pod affinity and
//! topology spread), compiled once.
//!
//! Semantics mirror `metav1.LabelSelectorAsSelector`:
//! - `matchLabels` and `matchExpressions` are ANDed;
//! - an empty selector (`{}`) matches **every** object; an absent selector
//!   (`None` where the API allows it) matches **nothing**: callers model the
//!   latter with `Option<LabelSelector>`;
//! - operators `In`, `NotIn`, `Exists`, `DoesNotExist`; `NotIn` and
//!   `DoesNotExist` match an object without the key; `In`/`NotIn` need at
//!   least one value, `Exists`/`DoesNotExist` none.

use std::collections::BTreeMap;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelector as K8sLabelSelector;

use crate::selector::{Operator, Requirement};

/// A compiled label selector.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct LabelSelector {
    /// All must hold (`matchLabels` become `In [value]`).
    pub requirements: Vec<Requirement>,
}

/// A malformed selector, with the field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct LabelSelectorError {
    /// Field path, e.g. `spec.topologySpreadConstraints[0].labelSelector.matchExpressions[1].operator`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

impl LabelSelector {
    /// Compiles a selector found at `field`.
    ///
    /// # Errors
    /// An unknown operator, or values that do not fit the operator.
    pub fn compile(s: &K8sLabelSelector, field: &str) -> Result<Self, LabelSelectorError> {
        let mut requirements = Vec::new();
        for (k, v) in s.match_labels.iter().flatten() {
            requirements.push(Requirement {
                key: k.clone(),
                op: Operator::In(vec![v.clone()]),
            });
        }
        for (i, e) in s.match_expressions.iter().flatten().enumerate() {
            let f = format!("{field}.matchExpressions[{i}]");
            let values = e.values.clone().unwrap_or_default();
            let err = |message: String| LabelSelectorError {
                field: f.clone(),
                message,
            };
            let op = match e.operator.as_str() {
                "In" | "NotIn" => {
                    if values.is_empty() {
                        return Err(err(format!(
                            "values: must be non-empty for operator {}",
                            e.operator
                        )));
                    }
                    if e.operator == "In" {
                        Operator::In(values)
                    } else {
                        Operator::NotIn(values)
                    }
                }
                "Exists" | "DoesNotExist" => {
                    if !values.is_empty() {
                        return Err(err(format!(
                            "values: must be empty for operator {}",
                            e.operator
                        )));
                    }
                    if e.operator == "Exists" {
                        Operator::Exists
                    } else {
                        Operator::DoesNotExist
                    }
                }
                other => {
                    return Err(LabelSelectorError {
                        field: format!("{f}.operator"),
                        message: format!(
                            "{other:?} is not a valid label selector operator (In, NotIn, Exists, DoesNotExist)"
                        ),
                    });
                }
            };
            requirements.push(Requirement {
                key: e.key.clone(),
                op,
            });
        }
        Ok(LabelSelector { requirements })
    }

    /// A selector requiring `key` to equal `value` for every pair (what
    /// `matchLabelKeys` adds).
    pub fn add_equals(&mut self, key: &str, value: &str) {
        self.requirements.push(Requirement {
            key: key.to_owned(),
            op: Operator::In(vec![value.to_owned()]),
        });
    }

    /// Whether `labels` satisfy every requirement (`{}` matches everything).
    #[must_use]
    pub fn matches(&self, labels: &BTreeMap<String, String>) -> bool {
        self.requirements
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
    }

    /// Whether the selector has no requirement (matches everything).
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.requirements.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::LabelSelectorRequirement;

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn expr(key: &str, op: &str, values: &[&str]) -> LabelSelectorRequirement {
        LabelSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: if values.is_empty() {
                None
            } else {
                Some(values.iter().map(|s| (*s).to_owned()).collect())
            },
        }
    }

    #[test]
    fn empty_selector_matches_everything() {
        let s = LabelSelector::compile(&K8sLabelSelector::default(), "x").unwrap();
        assert!(s.matches(&labels(&[])));
        assert!(s.matches(&labels(&[("a", "b")])));
    }

    #[test]
    fn match_labels_and_expressions_are_anded() {
        let k = K8sLabelSelector {
            match_labels: Some(labels(&[("app", "web")]).into_iter().collect()),
            match_expressions: Some(vec![
                expr("tier", "NotIn", &["db"]),
                expr("zone", "Exists", &[]),
                expr("legacy", "DoesNotExist", &[]),
            ]),
        };
        let s = LabelSelector::compile(&k, "x").unwrap();
        assert!(s.matches(&labels(&[("app", "web"), ("zone", "a")])));
        assert!(s.matches(&labels(&[("app", "web"), ("zone", "a"), ("tier", "fe")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("zone", "a"), ("tier", "db")])));
        assert!(!s.matches(&labels(&[("app", "web")])), "zone must exist");
        assert!(!s.matches(&labels(&[("app", "api"), ("zone", "a")])));
        assert!(!s.matches(&labels(&[("app", "web"), ("zone", "a"), ("legacy", "1")])));
    }

    #[test]
    fn bad_operators_and_values_name_the_field() {
        let k = K8sLabelSelector {
            match_expressions: Some(vec![expr("a", "Gt", &["1"])]),
            ..Default::default()
        };
        let e = LabelSelector::compile(&k, "spec.x.labelSelector").unwrap_err();
        assert_eq!(e.field, "spec.x.labelSelector.matchExpressions[0].operator");
        let k = K8sLabelSelector {
            match_expressions: Some(vec![expr("a", "In", &[])]),
            ..Default::default()
        };
        let e = LabelSelector::compile(&k, "sel").unwrap_err();
        assert!(e.to_string().contains("must be non-empty"), "{e}");
        let k = K8sLabelSelector {
            match_expressions: Some(vec![expr("a", "Exists", &["x"])]),
            ..Default::default()
        };
        assert!(LabelSelector::compile(&k, "sel").is_err());
    }
}
