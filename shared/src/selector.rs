//! Node selector terms (node affinity), compiled once per pod.
//!
//! Semantics mirror `k8s.io/component-helpers/scheduling/corev1/nodeaffinity`:
//! - a `NodeSelector` matches when **any** of its terms matches;
//! - a term matches when **all** of its `matchExpressions` (on labels) and
//!   `matchFields` (only `metadata.name`) match;
//! - an empty term (no expressions, no fields) matches **nothing**;
//! - `NotIn` and `DoesNotExist` match a node without the label;
//! - `Gt`/`Lt` need the label to parse as an integer;
//! - a `matchExpressions` value that is not a valid label value (which the
//!   API server lets through) makes upstream's term fail to parse, and a
//!   term that fails to parse matches **no** node (upstream's
//!   `LazyErrorNodeSelector` keeps the other terms): such a requirement
//!   compiles to [`Operator::Unparsable`].

use std::collections::BTreeMap;

use k8s_openapi::api::core::v1::{NodeSelector, NodeSelectorRequirement, NodeSelectorTerm};

use crate::node_info::NodeSpec;
use crate::pod_info::PodInfo;

/// The only field `matchFields` supports.
pub const FIELD_METADATA_NAME: &str = "metadata.name";

/// A requirement's operator, with its value(s) parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operator {
    /// Label value is one of the values.
    In(Vec<String>),
    /// Label absent, or its value is none of the values.
    NotIn(Vec<String>),
    /// Label present.
    Exists,
    /// Label absent.
    DoesNotExist,
    /// Label is an integer greater than this.
    Gt(i64),
    /// Label is an integer less than this.
    Lt(i64),
    /// A value upstream's label selector refuses to parse (why, naming the
    /// field): matches nothing, so its term matches nothing.
    Unparsable(String),
}

/// One `key <op> values` requirement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Requirement {
    /// Label key (or `metadata.name` for a field requirement).
    pub key: String,
    /// Operator and values.
    pub op: Operator,
}

impl Requirement {
    /// Whether a value (None = key absent) satisfies the requirement.
    #[must_use]
    pub fn matches(&self, value: Option<&str>) -> bool {
        match (&self.op, value) {
            (Operator::In(vs), Some(v)) => vs.iter().any(|x| x == v),
            (Operator::In(_) | Operator::Exists | Operator::Gt(_) | Operator::Lt(_), None)
            | (Operator::DoesNotExist, Some(_)) => false,
            (Operator::NotIn(vs), Some(v)) => !vs.iter().any(|x| x == v),
            (Operator::NotIn(_) | Operator::DoesNotExist, None) | (Operator::Exists, Some(_)) => {
                true
            }
            (Operator::Gt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x > *n),
            (Operator::Lt(n), Some(v)) => v.parse::<i64>().is_ok_and(|x| x < *n),
            (Operator::Unparsable(_), _) => false,
        }
    }
}

/// A compiled `NodeSelectorTerm`.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Term {
    /// Requirements on node labels.
    pub expressions: Vec<Requirement>,
    /// Requirements on node fields (`metadata.name`).
    pub fields: Vec<Requirement>,
}

impl Term {
    /// Whether the node with `name` and `labels` satisfies the term. An empty
    /// term matches nothing.
    #[must_use]
    pub fn matches(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        if self.expressions.is_empty() && self.fields.is_empty() {
            return false;
        }
        self.expressions
            .iter()
            .all(|r| r.matches(labels.get(&r.key).map(String::as_str)))
            && self.fields.iter().all(|r| r.matches(Some(name)))
    }

    /// Why the term does not parse upstream ([`Operator::Unparsable`]), if
    /// it does not.
    #[must_use]
    pub fn unparsable(&self) -> Option<&str> {
        self.expressions
            .iter()
            .chain(&self.fields)
            .find_map(|r| match &r.op {
                Operator::Unparsable(why) => Some(why.as_str()),
                _ => None,
            })
    }

    /// When the term pins nodes by name (`metadata.name In [...]`), those names.
    #[must_use]
    pub fn pinned_node_names(&self) -> Option<&[String]> {
        self.fields.iter().find_map(|r| match &r.op {
            Operator::In(vs) if r.key == FIELD_METADATA_NAME => Some(vs.as_slice()),
            _ => None,
        })
    }
}

/// A compiled required `NodeSelector`: any term matches.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Selector {
    /// The ORed terms.
    pub terms: Vec<Term>,
}

impl Selector {
    /// Whether any term matches.
    #[must_use]
    pub fn matches(&self, name: &str, labels: &BTreeMap<String, String>) -> bool {
        self.terms.iter().any(|t| t.matches(name, labels))
    }
}

/// Upstream's `IsValidLabelValue`: empty, or at most 63 characters,
/// alphanumeric at both ends, `-`, `_`, `.` or alphanumeric between.
#[must_use]
pub fn is_valid_label_value(v: &str) -> bool {
    let b = v.as_bytes();
    let inner = |c: &u8| c.is_ascii_alphanumeric() || matches!(c, b'-' | b'_' | b'.');
    match (b.first(), b.last()) {
        (None, _) | (_, None) => true,
        (Some(first), Some(last)) => {
            b.len() <= 63
                && first.is_ascii_alphanumeric()
                && last.is_ascii_alphanumeric()
                && b.iter().all(inner)
        }
    }
}

/// A malformed selector, naming the field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct SelectorError {
    /// Path, e.g. `spec.affinity.nodeAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1].values`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

fn compile_requirement(
    r: &NodeSelectorRequirement,
    field: &str,
    is_field: bool,
) -> Result<Requirement, SelectorError> {
    let err = |sub: &str, message: String| SelectorError {
        field: format!("{field}{sub}"),
        message,
    };
    let values = r.values.clone().unwrap_or_default();
    if is_field && r.key != FIELD_METADATA_NAME {
        return Err(err(
            ".key",
            format!("unsupported field {:?}: only metadata.name", r.key),
        ));
    }
    let op = match r.operator.as_str() {
        "In" | "NotIn" => {
            if values.is_empty() {
                return Err(err(
                    ".values",
                    format!("must be non-empty for operator {}", r.operator),
                ));
            }
            if is_field && values.len() != 1 {
                return Err(err(
                    ".values",
                    "must have one element for matchFields".into(),
                ));
            }
            if let Some(bad) = values
                .iter()
                .find(|v| !is_field && !is_valid_label_value(v))
            {
                Operator::Unparsable(format!(
                    "{field}.values: {bad:?} is not a valid label value"
                ))
            } else if r.operator == "In" {
                Operator::In(values)
            } else {
                Operator::NotIn(values)
            }
        }
        "Exists" | "DoesNotExist" if !is_field => {
            if !values.is_empty() {
                return Err(err(
                    ".values",
                    format!("must be empty for operator {}", r.operator),
                ));
            }
            if r.operator == "Exists" {
                Operator::Exists
            } else {
                Operator::DoesNotExist
            }
        }
        "Gt" | "Lt" if !is_field => {
            let [v] = values.as_slice() else {
                return Err(err(
                    ".values",
                    format!("must have one integer for operator {}", r.operator),
                ));
            };
            let n: i64 = v
                .parse()
                .map_err(|_| err(".values[0]", format!("{v:?} is not an integer")))?;
            if r.operator == "Gt" {
                Operator::Gt(n)
            } else {
                Operator::Lt(n)
            }
        }
        other => {
            return Err(err(".operator", format!("unsupported operator {other:?}")));
        }
    };
    Ok(Requirement {
        key: r.key.clone(),
        op,
    })
}

/// Compiles one term; `field` is its path for error messages.
///
/// # Errors
/// [`SelectorError`] for an unknown operator, a wrong number of values, a
/// non-integer `Gt`/`Lt` value or a field other than `metadata.name`.
pub fn compile_term(t: &NodeSelectorTerm, field: &str) -> Result<Term, SelectorError> {
    let mut term = Term::default();
    for (i, r) in t.match_expressions.iter().flatten().enumerate() {
        term.expressions.push(compile_requirement(
            r,
            &format!("{field}.matchExpressions[{i}]"),
            false,
        )?);
    }
    for (i, r) in t.match_fields.iter().flatten().enumerate() {
        term.fields.push(compile_requirement(
            r,
            &format!("{field}.matchFields[{i}]"),
            true,
        )?);
    }
    Ok(term)
}

/// Compiles a required node selector.
///
/// # Errors
/// As [`compile_term`].
pub fn compile_selector(s: &NodeSelector, field: &str) -> Result<Selector, SelectorError> {
    let terms = s
        .node_selector_terms
        .iter()
        .enumerate()
        .map(|(i, t)| compile_term(t, &format!("{field}.nodeSelectorTerms[{i}]")))
        .collect::<Result<_, _>>()?;
    Ok(Selector { terms })
}

/// Whether `pod`'s `nodeSelector` and its required node affinity both
/// match `node` (upstream `nodeaffinity.GetRequiredNodeAffinity(pod).Match`):
/// NodeAffinity's Filter (without the profile's `addedAffinity`), and
/// PodTopologySpread's `nodeAffinityPolicy: Honor`.
#[must_use]
pub fn matches_required_node_affinity(pod: &PodInfo, node: &NodeSpec) -> bool {
    pod.node_selector
        .iter()
        .all(|(k, v)| node.labels.get(k).is_some_and(|have| have == v))
        && pod
            .required_affinity
            .as_ref()
            .is_none_or(|s| s.matches(&node.name, &node.labels))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    fn term(exprs: Vec<NodeSelectorRequirement>) -> Term {
        compile_term(
            &NodeSelectorTerm {
                match_expressions: Some(exprs),
                match_fields: None,
            },
            "t",
        )
        .unwrap()
    }

    #[test]
    fn every_operator_matches_as_upstream() {
        let l = labels(&[("zone", "a"), ("gen", "5")]);
        assert!(term(vec![req("zone", "In", &["a", "b"])]).matches("n", &l));
        assert!(!term(vec![req("zone", "In", &["b"])]).matches("n", &l));
        assert!(!term(vec![req("missing", "In", &["a"])]).matches("n", &l));
        assert!(term(vec![req("zone", "NotIn", &["b"])]).matches("n", &l));
        assert!(term(vec![req("missing", "NotIn", &["b"])]).matches("n", &l));
        assert!(!term(vec![req("zone", "NotIn", &["a"])]).matches("n", &l));
        assert!(term(vec![req("zone", "Exists", &[])]).matches("n", &l));
        assert!(!term(vec![req("missing", "Exists", &[])]).matches("n", &l));
        assert!(term(vec![req("missing", "DoesNotExist", &[])]).matches("n", &l));
        assert!(!term(vec![req("zone", "DoesNotExist", &[])]).matches("n", &l));
        assert!(term(vec![req("gen", "Gt", &["4"])]).matches("n", &l));
        assert!(!term(vec![req("gen", "Gt", &["5"])]).matches("n", &l));
        assert!(term(vec![req("gen", "Lt", &["6"])]).matches("n", &l));
        assert!(
            !term(vec![req("zone", "Lt", &["6"])]).matches("n", &l),
            "non-integer label"
        );
        assert!(!term(vec![req("missing", "Gt", &["1"])]).matches("n", &l));
        // expressions are ANDed
        assert!(!term(vec![req("zone", "In", &["a"]), req("gen", "Gt", &["9"])]).matches("n", &l));
    }

    #[test]
    fn empty_term_matches_nothing_and_terms_are_ored() {
        let l = labels(&[("zone", "a")]);
        assert!(!Term::default().matches("n", &l));
        let s = compile_selector(
            &NodeSelector {
                node_selector_terms: vec![
                    NodeSelectorTerm::default(),
                    NodeSelectorTerm {
                        match_expressions: Some(vec![req("zone", "In", &["a"])]),
                        match_fields: None,
                    },
                ],
            },
            "s",
        )
        .unwrap();
        assert!(s.matches("n", &l));
    }

    #[test]
    fn match_fields_on_metadata_name() {
        let t = compile_term(
            &NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![req(FIELD_METADATA_NAME, "In", &["n1"])]),
            },
            "t",
        )
        .unwrap();
        assert!(t.matches("n1", &BTreeMap::new()));
        assert!(!t.matches("n2", &BTreeMap::new()));
        assert_eq!(t.pinned_node_names(), Some(&["n1".to_owned()][..]));
    }

    #[test]
    fn an_invalid_label_value_makes_its_term_match_no_node() {
        // Upstream node_affinity_test "Pod with an invalid value in
        // Affinity term won't be scheduled onto the node": the API server
        // accepts it, the term does not parse and matches no node; another
        // term still can (LazyErrorNodeSelector keeps the parsed terms).
        let l = labels(&[("foo", "bar")]);
        let invalid = NodeSelectorTerm {
            match_expressions: Some(vec![req("foo", "NotIn", &["invalid value: ___@#$%^"])]),
            match_fields: None,
        };
        let valid = NodeSelectorTerm {
            match_expressions: Some(vec![req("foo", "In", &["bar"])]),
            match_fields: None,
        };
        let one = |terms: Vec<NodeSelectorTerm>| {
            compile_selector(
                &NodeSelector {
                    node_selector_terms: terms,
                },
                "s",
            )
            .expect("the API server accepts it, so must we")
        };
        assert!(!one(vec![invalid.clone()]).matches("n", &l));
        assert!(one(vec![invalid, valid.clone()]).matches("n", &l));
        assert!(one(vec![valid]).matches("n", &l));
        for (v, ok) in [
            ("", true),
            ("a", true),
            ("a-b_c.d", true),
            ("-a", false),
            ("a.", false),
            ("a b", false),
            (&"x".repeat(63), true),
            (&"x".repeat(64), false),
        ] {
            assert_eq!(is_valid_label_value(v), ok, "{v:?}");
        }
    }

    #[test]
    fn malformed_requirements_name_the_field() {
        let bad = |r| {
            compile_term(
                &NodeSelectorTerm {
                    match_expressions: Some(vec![r]),
                    match_fields: None,
                },
                "t",
            )
            .unwrap_err()
        };
        assert_eq!(
            bad(req("k", "In", &[])).field,
            "t.matchExpressions[0].values"
        );
        assert_eq!(
            bad(req("k", "Gt", &["x"])).field,
            "t.matchExpressions[0].values[0]"
        );
        assert_eq!(
            bad(req("k", "Foo", &[])).field,
            "t.matchExpressions[0].operator"
        );
        let e = compile_term(
            &NodeSelectorTerm {
                match_expressions: None,
                match_fields: Some(vec![req("metadata.labels", "In", &["x"])]),
            },
            "t",
        )
        .unwrap_err();
        assert_eq!(e.field, "t.matchFields[0].key");
    }
}
