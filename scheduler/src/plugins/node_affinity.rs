//! `NodeAffinity`: `spec.nodeSelector` and node affinity (upstream
//! `pkg/scheduler/framework/plugins/nodeaffinity/node_affinity.go`).
//!
//! - **PreFilter**: `Skip` when the pod has neither a `nodeSelector` nor a
//!   required affinity (Filter has nothing to check). When **every** required
//!   term pins nodes by name (`matchFields: metadata.name In [...]`), returns
//!   the union of the pinned names as a [`PreFilterResult`], so the framework
//!   filters only those nodes; several `In` field requirements in one term
//!   are ANDed (intersected). If the union is empty (every term pins
//!   conflicting names) the pod is rejected outright with
//!   `UnschedulableAndUnresolvable` `"pod affinity terms conflict"`. A single
//!   term without such a requirement makes every node eligible (terms are
//!   ORed), so the result is "all nodes".
//! - **Filter**: every `nodeSelector` pair must equal a node label, and the
//!   required affinity (any term) must match; otherwise
//!   `UnschedulableAndUnresolvable`
//!   `"node(s) didn't match Pod's node affinity/selector"`.
//! - **Bind check**: the Filter's rule ([`NodeAffinity::rejection`], with
//!   the profile's `addedAffinity`) on the coordinator's view of the node,
//!   so a node relabelled while a proposal was in flight does not get a pod
//!   it no longer matches. (PreFilter's node-name set needs no re-check:
//!   a node outside it fails the same terms in Filter.)
//! - **PreScore**: `Skip` (no Score) when neither the pod nor `addedAffinity`
//!   has preferred terms, as upstream; `simulate` then shows no NodeAffinity
//!   score for the pod.
//! - **Score**: the sum of the weights of the preferred terms the node
//!   matches; `normalize_score` is `DefaultNormalizeScore(100, false)`.
//!
//! # Scheduler-enforced affinity (`NodeAffinityArgs.addedAffinity`)
//! A profile may add a `NodeAffinity` applied to every pod it schedules:
//! - its required selector must match **in addition to** the pod's own
//!   (PreFilter no longer skips); a node failing it is rejected first, with
//!   `UnschedulableAndUnresolvable`
//!   `"node(s) didn't match scheduler-enforced node affinity"`;
//! - the weights of its preferred terms the node matches add to the score.

use std::borrow::Cow;
use std::collections::HashSet;
use std::sync::Arc;

use k8s_openapi::api::core::v1::NodeAffinity as K8sNodeAffinity;
use serde::Deserialize;

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, Code, CycleState, FilterPlugin, MAX_NODE_SCORE,
    Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, SharedLister, Status,
    default_normalize_score,
};
use flotilla_shared::pod_info::WeightedTerm;
use flotilla_shared::selector::{self, FIELD_METADATA_NAME, Operator, Selector, Term};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;
use crate::framework::decode_args;

/// Registry name.
pub const NAME: &str = names::NODE_AFFINITY;

/// The args kind in `pluginConfig`.
pub const ARGS_KIND: &str = "NodeAffinityArgs";

/// Upstream Filter reason (`ErrReasonPod`).
pub const REASON: &str = "node(s) didn't match Pod's node affinity/selector";

/// Upstream Filter reason when the profile's `addedAffinity` does not match
/// (`errReasonEnforced`).
pub const REASON_ENFORCED: &str = "node(s) didn't match scheduler-enforced node affinity";

/// Upstream PreFilter reason when the name-pinning terms leave no node
/// (`errReasonConflict`).
pub const REASON_CONFLICT: &str = "pod affinity terms conflict";

/// A new node or a label change can help.
const EVENTS: &[ClusterEvent] = &[ClusterEvent::NodeAdded, ClusterEvent::NodeLabelChanged];

/// `NodeAffinityArgs` (`kubescheduler.config.k8s.io/v1`).
#[derive(Debug, Clone, Default, PartialEq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct NodeAffinityArgs {
    /// Node affinity every pod of the profile gets on top of its own
    /// (`requiredDuringSchedulingIgnoredDuringExecution` ANDed with the
    /// pod's, preferred terms added to the score).
    pub added_affinity: Option<K8sNodeAffinity>,
}

/// PreFilter, Filter and Score plugin for node selectors and node affinity
/// (default score weight 2).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct NodeAffinity {
    /// `addedAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    added_required: Option<Selector>,
    /// `addedAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    added_preferred: Vec<WeightedTerm>,
}

impl NodeAffinity {
    /// The plugin without `addedAffinity`.
    #[must_use]
    pub const fn new() -> Self {
        NodeAffinity {
            added_required: None,
            added_preferred: Vec::new(),
        }
    }

    /// The plugin with `args` compiled.
    ///
    /// # Errors
    /// A malformed `addedAffinity` selector, as
    /// `addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[1].operator: ...`.
    pub fn from_args(args: &NodeAffinityArgs) -> Result<Self, String> {
        let Some(added) = &args.added_affinity else {
            return Ok(Self::new());
        };
        const BASE: &str = "addedAffinity";
        let added_required = added
            .required_during_scheduling_ignored_during_execution
            .as_ref()
            .map(|s| {
                selector::compile_selector(
                    s,
                    &format!("{BASE}.requiredDuringSchedulingIgnoredDuringExecution"),
                )
            })
            .transpose()
            .map_err(|e| e.to_string())?;
        let added_preferred = added
            .preferred_during_scheduling_ignored_during_execution
            .iter()
            .flatten()
            .enumerate()
            .map(|(i, p)| {
                let field = format!(
                    "{BASE}.preferredDuringSchedulingIgnoredDuringExecution[{i}].preference"
                );
                selector::compile_term(&p.preference, &field).map(|term| WeightedTerm {
                    weight: i64::from(p.weight),
                    term,
                })
            })
            .collect::<Result<Vec<_>, _>>()
            .map_err(|e| e.to_string())?;
        // A value a label selector does not parse matches nothing in a pod's
        // affinity; in the configuration upstream refuses it.
        let required_terms = added_required.iter().flat_map(|s| &s.terms);
        let preferred_terms = added_preferred.iter().map(|w| &w.term);
        if let Some(why) = required_terms
            .chain(preferred_terms)
            .find_map(selector::Term::unparsable)
        {
            return Err(why.to_owned());
        }
        Ok(NodeAffinity {
            added_required,
            added_preferred,
        })
    }

    /// Decodes `pluginConfig` args (`None`: no `addedAffinity`) and compiles
    /// them.
    ///
    /// # Errors
    /// A message starting with the field path inside the args.
    pub fn from_config(args: Option<&serde_json::Value>) -> Result<Self, String> {
        Self::from_args(&decode_args::<NodeAffinityArgs>(args, ARGS_KIND)?)
    }

    /// Why Filter rejects `node` for `pod`, if it does: the profile's
    /// `addedAffinity` first ([`REASON_ENFORCED`]), then the pod's
    /// `nodeSelector` and required affinity ([`REASON`]). The Filter and
    /// the bind check both decide with it.
    #[must_use]
    pub fn rejection(&self, pod: &PodInfo, node: &NodeInfo) -> Option<&'static str> {
        if self
            .added_required
            .as_ref()
            .is_some_and(|s| !s.matches(node.name(), &node.spec.labels))
        {
            return Some(REASON_ENFORCED);
        }
        (!selector::matches_required_node_affinity(pod, &node.spec)).then_some(REASON)
    }
}

/// The node names a term restricts itself to: the intersection of its
/// `metadata.name In [...]` field requirements, or `None` when it has none
/// (then the term says nothing about names).
fn term_node_names(term: &Term) -> Option<HashSet<&str>> {
    let mut names: Option<HashSet<&str>> = None;
    for r in &term.fields {
        let Operator::In(values) = &r.op else {
            continue;
        };
        if r.key != FIELD_METADATA_NAME {
            continue;
        }
        let these = values.iter().map(String::as_str);
        names = Some(match names {
            None => these.collect(),
            Some(prev) => these.filter(|v| prev.contains(v)).collect(),
        });
    }
    names
}

impl Plugin for NodeAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for NodeAffinity {
    fn pre_filter(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        let Some(required) = &pod.required_affinity else {
            let status = if pod.node_selector.is_empty() && self.added_required.is_none() {
                Status::skip()
            } else {
                Status::success()
            };
            return (PreFilterResult::default(), status);
        };
        if required.terms.is_empty() {
            return (PreFilterResult::default(), Status::success());
        }
        let mut union: HashSet<Arc<str>> = HashSet::new();
        for term in &required.terms {
            let Some(names) = term_node_names(term) else {
                // This term can match any node: terms are ORed.
                return (PreFilterResult::default(), Status::success());
            };
            union.extend(names.into_iter().map(Arc::from));
        }
        if union.is_empty() {
            return (
                PreFilterResult::default(),
                Status::new(Code::UnschedulableAndUnresolvable, REASON_CONFLICT).with_plugin(NAME),
            );
        }
        (
            PreFilterResult {
                node_names: Some(union),
            },
            Status::success(),
        )
    }
}

impl FilterPlugin for NodeAffinity {
    fn filter(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match self.rejection(pod, node) {
            None => Status::success(),
            Some(reason) => Status::unresolvable(reason).with_plugin(NAME),
        }
    }
}

/// The Filter's rule on the arbiter's copy of the node.
impl BindCheck for NodeAffinity {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, _view: &mut BindView<'_>) -> BindResult {
        match self.rejection(pod, node) {
            None => Ok(()),
            Some(reason) => Err(Cow::Borrowed(reason)),
        }
    }
}

impl PreScorePlugin for NodeAffinity {
    fn pre_score(
        &self,
        _state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[Arc<NodeInfo>],
        _cluster: &dyn SharedLister,
    ) -> Status {
        if pod.preferred_affinity.is_empty() && self.added_preferred.is_empty() {
            Status::skip()
        } else {
            Status::success()
        }
    }
}

impl ScorePlugin for NodeAffinity {
    fn score(&self, _state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let name = node.name();
        let labels = &node.spec.labels;
        Ok(self
            .added_preferred
            .iter()
            .chain(&pod.preferred_affinity)
            .filter(|w| w.term.matches(name, labels))
            .map(|w| w.weight)
            .sum())
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        default_normalize_score(MAX_NODE_SCORE, false, scores);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn pre_score_skips_pods_without_preferred_terms() {
        let lister = flotilla_shared::testing::FakeLister::default();
        let plain = PodBuilder::new("p").build_info();
        let st = NodeAffinity::new().pre_score(&mut CycleState::default(), &plain, &[], &lister);
        assert_eq!(st.code, Code::Skip);
        let pref = PodBuilder::new("q")
            .preferred_affinity(5, "zone", "In", &["a"])
            .build_info();
        let st = NodeAffinity::new().pre_score(&mut CycleState::default(), &pref, &[], &lister);
        assert_eq!(st.code, Code::Success);
        let added = with_added(serde_json::json!({"addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 3, "preference": {"matchExpressions": [
                    {"key": "zone", "operator": "In", "values": ["a"]}]}}]}}));
        let st = added.pre_score(&mut CycleState::default(), &plain, &[], &lister);
        assert_eq!(
            st.code,
            Code::Success,
            "addedAffinity's preferred terms score"
        );
    }
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::{
        Affinity, NodeAffinity as K8sNodeAffinity, NodeSelector, NodeSelectorRequirement,
        NodeSelectorTerm,
    };

    fn node(name: &str, labels: &[(&str, &str)]) -> NodeInfo {
        let mut b = NodeBuilder::new(name);
        for (k, v) in labels {
            b = b.label(k, v);
        }
        NodeInfo::new(Arc::new(b.build_spec()))
    }

    fn req(key: &str, op: &str, values: &[&str]) -> NodeSelectorRequirement {
        NodeSelectorRequirement {
            key: key.into(),
            operator: op.into(),
            values: Some(values.iter().map(|s| (*s).to_owned()).collect()),
        }
    }

    fn term(
        fields: Vec<NodeSelectorRequirement>,
        exprs: Vec<NodeSelectorRequirement>,
    ) -> NodeSelectorTerm {
        NodeSelectorTerm {
            match_fields: (!fields.is_empty()).then_some(fields),
            match_expressions: (!exprs.is_empty()).then_some(exprs),
        }
    }

    /// A pod whose required node affinity has exactly `terms`.
    fn pod_with_terms(terms: Vec<NodeSelectorTerm>) -> PodInfo {
        let mut pod = PodBuilder::new("p").build();
        pod.spec.as_mut().unwrap().affinity = Some(Affinity {
            node_affinity: Some(K8sNodeAffinity {
                required_during_scheduling_ignored_during_execution: Some(NodeSelector {
                    node_selector_terms: terms,
                }),
                ..Default::default()
            }),
            ..Default::default()
        });
        PodInfo::from_pod(Arc::new(pod)).unwrap()
    }

    fn pre_filter(pod: &PodInfo) -> (PreFilterResult, Status) {
        NodeAffinity::new().pre_filter(
            &mut CycleState::default(),
            pod,
            &flotilla_shared::testing::FakeLister::default(),
        )
    }

    fn names(r: &PreFilterResult) -> Vec<String> {
        let mut v: Vec<String> = r
            .node_names
            .as_ref()
            .expect("a node set")
            .iter()
            .map(ToString::to_string)
            .collect();
        v.sort();
        v
    }

    #[test]
    fn a_pod_with_an_invalid_affinity_value_is_not_placed_on_the_node() {
        // Upstream node_affinity_test "Pod with an invalid value in
        // Affinity term won't be scheduled onto the node".
        let state = CycleState::default();
        let pod = PodBuilder::new("p")
            .required_affinity("foo", "NotIn", &["invalid value: ___@#$%^"])
            .build_info();
        let st = NodeAffinity::new().filter(&state, &pod, &node("n1", &[("foo", "bar")]));
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(st.reasons, [REASON]);
    }

    #[test]
    fn node_selector_needs_every_pair() {
        let state = CycleState::default();
        let pod = PodBuilder::new("p")
            .node_selector("disk", "ssd")
            .node_selector("zone", "a")
            .build_info();
        let both = node("n1", &[("disk", "ssd"), ("zone", "a")]);
        assert_eq!(
            NodeAffinity::new().filter(&state, &pod, &both),
            Status::success()
        );
        let one = node("n2", &[("disk", "ssd"), ("zone", "b")]);
        let st = NodeAffinity::new().filter(&state, &pod, &one);
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            st.reasons,
            ["node(s) didn't match Pod's node affinity/selector"]
        );
        assert_eq!(st.plugin, "NodeAffinity");
        assert!(
            NodeAffinity::new()
                .filter(&state, &pod, &node("n3", &[]))
                .is_rejected()
        );
    }

    #[test]
    fn required_affinity_and_node_selector_are_anded() {
        let state = CycleState::default();
        let pod = PodBuilder::new("p")
            .node_selector("disk", "ssd")
            .required_affinity("zone", "In", &["a", "b"])
            .build_info();
        assert!(
            NodeAffinity::new()
                .filter(&state, &pod, &node("n1", &[("disk", "ssd"), ("zone", "b")]))
                .is_success()
        );
        assert!(
            NodeAffinity::new()
                .filter(&state, &pod, &node("n2", &[("disk", "hdd"), ("zone", "b")]))
                .is_rejected()
        );
        assert!(
            NodeAffinity::new()
                .filter(&state, &pod, &node("n3", &[("disk", "ssd"), ("zone", "c")]))
                .is_rejected()
        );
        // Required terms are ORed.
        let ored = PodBuilder::new("q")
            .required_affinity("zone", "In", &["a"])
            .required_affinity("gpu", "Exists", &[])
            .build_info();
        assert!(
            NodeAffinity::new()
                .filter(&state, &ored, &node("n4", &[("gpu", "1")]))
                .is_success()
        );
        assert!(
            NodeAffinity::new()
                .filter(&state, &ored, &node("n5", &[("zone", "b")]))
                .is_rejected()
        );
    }

    #[test]
    fn pod_without_constraints_is_skipped_and_fits() {
        let pod = PodBuilder::new("p").build_info();
        let (r, st) = pre_filter(&pod);
        assert_eq!(st.code, Code::Skip);
        assert!(r.node_names.is_none());
        assert!(
            NodeAffinity::new()
                .filter(&CycleState::default(), &pod, &node("n1", &[]))
                .is_success()
        );
        // A nodeSelector alone needs Filter but narrows nothing.
        let sel = PodBuilder::new("s")
            .node_selector("disk", "ssd")
            .build_info();
        let (r, st) = pre_filter(&sel);
        assert_eq!(st, Status::success());
        assert!(r.node_names.is_none());
    }

    #[test]
    fn prefilter_returns_union_of_pinned_names() {
        let pod = pod_with_terms(vec![
            term(vec![req(FIELD_METADATA_NAME, "In", &["n1"])], vec![]),
            term(
                vec![req(FIELD_METADATA_NAME, "In", &["n3"])],
                vec![req("zone", "In", &["a"])],
            ),
        ]);
        let (r, st) = pre_filter(&pod);
        assert_eq!(st, Status::success());
        assert_eq!(names(&r), ["n1", "n3"]);
        // Filter still applies the term's label expressions on pinned nodes.
        let state = CycleState::default();
        assert!(
            NodeAffinity::new()
                .filter(&state, &pod, &node("n1", &[]))
                .is_success()
        );
        assert!(
            NodeAffinity::new()
                .filter(&state, &pod, &node("n3", &[("zone", "b")]))
                .is_rejected()
        );
        assert!(
            NodeAffinity::new()
                .filter(&state, &pod, &node("n3", &[("zone", "a")]))
                .is_success()
        );
        assert!(
            NodeAffinity::new()
                .filter(&state, &pod, &node("n2", &[]))
                .is_rejected()
        );
    }

    #[test]
    fn prefilter_keeps_all_nodes_unless_every_term_pins() {
        // Second term has only a label expression: any node may match it.
        let pod = pod_with_terms(vec![
            term(vec![req(FIELD_METADATA_NAME, "In", &["n1"])], vec![]),
            term(vec![], vec![req("zone", "In", &["a"])]),
        ]);
        let (r, st) = pre_filter(&pod);
        assert_eq!(st, Status::success());
        assert!(r.node_names.is_none());
        // NotIn on metadata.name does not pin.
        let not_in = pod_with_terms(vec![term(
            vec![req(FIELD_METADATA_NAME, "NotIn", &["n1"])],
            vec![],
        )]);
        let (r, st) = pre_filter(&not_in);
        assert_eq!(st, Status::success());
        assert!(r.node_names.is_none());
    }

    #[test]
    fn prefilter_intersects_within_a_term_and_rejects_conflicts() {
        // One term, two field requirements naming different nodes: the
        // intersection is empty, the union of all terms is empty -> conflict.
        let conflict = pod_with_terms(vec![term(
            vec![
                req(FIELD_METADATA_NAME, "In", &["n1"]),
                req(FIELD_METADATA_NAME, "In", &["n2"]),
            ],
            vec![],
        )]);
        let (r, st) = pre_filter(&conflict);
        assert!(r.node_names.is_none());
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(st.reasons, ["pod affinity terms conflict"]);
        // Same, but another term pins n3: upstream unions, so only n3 remains.
        let partly = pod_with_terms(vec![
            term(
                vec![
                    req(FIELD_METADATA_NAME, "In", &["n1"]),
                    req(FIELD_METADATA_NAME, "In", &["n2"]),
                ],
                vec![],
            ),
            term(vec![req(FIELD_METADATA_NAME, "In", &["n3"])], vec![]),
        ]);
        let (r, st) = pre_filter(&partly);
        assert_eq!(st, Status::success());
        assert_eq!(names(&r), ["n3"]);
        // Two requirements naming the same node keep it.
        let same = pod_with_terms(vec![term(
            vec![
                req(FIELD_METADATA_NAME, "In", &["n1"]),
                req(FIELD_METADATA_NAME, "In", &["n1"]),
            ],
            vec![],
        )]);
        assert_eq!(names(&pre_filter(&same).0), ["n1"]);
    }

    #[test]
    fn preferred_weights_sum_and_normalize() {
        // Upstream-style case: terms (w=2 foo=bar), (w=4 key=value),
        // (w=5 az=az1). Raw: n1 {foo} = 2, n2 {foo,key} = 6, n3 {all} = 11,
        // n4 {} = 0. DefaultNormalizeScore(100, false) with max 11:
        // 2*100/11 = 18, 6*100/11 = 54, 11*100/11 = 100, 0.
        let pod = PodBuilder::new("p")
            .preferred_affinity(2, "foo", "In", &["bar"])
            .preferred_affinity(4, "key", "In", &["value"])
            .preferred_affinity(5, "az", "In", &["az1"])
            .build_info();
        let nodes = [
            node("n1", &[("foo", "bar")]),
            node("n2", &[("foo", "bar"), ("key", "value")]),
            node("n3", &[("foo", "bar"), ("key", "value"), ("az", "az1")]),
            node("n4", &[("foo", "baz")]),
        ];
        let state = CycleState::default();
        let mut s: Vec<i64> = nodes
            .iter()
            .map(|n| NodeAffinity::new().score(&state, &pod, n).unwrap())
            .collect();
        assert_eq!(s, [2, 6, 11, 0]);
        NodeAffinity::new().normalize_score(&state, &pod, &mut s);
        assert_eq!(s, [18, 54, 100, 0]);
    }

    #[test]
    fn no_preferred_terms_scores_zero_everywhere() {
        let pod = PodBuilder::new("p").build_info();
        let state = CycleState::default();
        let mut s = vec![
            NodeAffinity::new()
                .score(&state, &pod, &node("n1", &[("a", "b")]))
                .unwrap();
            2
        ];
        NodeAffinity::new().normalize_score(&state, &pod, &mut s);
        assert_eq!(s, [0, 0]);
        assert_eq!(
            NodeAffinity::new().events_to_register(),
            [ClusterEvent::NodeAdded, ClusterEvent::NodeLabelChanged]
        );
    }

    fn with_added(v: serde_json::Value) -> NodeAffinity {
        NodeAffinity::from_config(Some(&v)).expect("valid NodeAffinityArgs")
    }

    #[test]
    fn added_affinity_decodes_from_plugin_config() {
        assert_eq!(
            NodeAffinity::from_config(None).unwrap(),
            NodeAffinity::new()
        );
        let p = with_added(serde_json::json!({
            "apiVersion": "kubescheduler.config.k8s.io/v1",
            "kind": "NodeAffinityArgs",
            "addedAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                    {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}
                ]},
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 3, "preference": {"matchExpressions": [
                        {"key": "key", "operator": "In", "values": ["value"]}]}}
                ]
            }
        }));
        assert!(p.added_required.is_some());
        assert_eq!(p.added_preferred.len(), 1);
        assert_eq!(p.added_preferred[0].weight, 3);

        let e = NodeAffinity::from_config(Some(&serde_json::json!({
            "addedAffinity": {"requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "Near", "values": ["x"]}]}
            ]}}
        })))
        .unwrap_err();
        assert!(
            e.starts_with(
                "addedAffinity.requiredDuringSchedulingIgnoredDuringExecution.nodeSelectorTerms[0].matchExpressions[0].operator: "
            ),
            "{e}"
        );
        let e = NodeAffinity::from_config(Some(&serde_json::json!({
            "addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchFields": [
                    {"key": "metadata.labels", "operator": "In", "values": ["x"]}]}}
            ]}
        })))
        .unwrap_err();
        assert!(
            e.starts_with(
                "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchFields[0].key: "
            ),
            "{e}"
        );
        let e = NodeAffinity::from_config(Some(&serde_json::json!({
            "addedAffinity": {"preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 1, "preference": {"matchExpressions": [
                    {"key": "k", "operator": "NotIn", "values": ["ok", "not ok!"]}]}}
            ]}
        })))
        .unwrap_err();
        assert_eq!(
            e,
            "addedAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].preference.matchExpressions[0].values: \"not ok!\" is not a valid label value"
        );
        let e =
            NodeAffinity::from_config(Some(&serde_json::json!({"addedAfinity": {}}))).unwrap_err();
        assert!(e.contains("unknown field `addedAfinity`"), "{e}");
    }

    #[test]
    fn added_required_affinity_is_anded_with_the_pods_own() {
        let pl = with_added(serde_json::json!({"addedAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {"nodeSelectorTerms": [
                {"matchExpressions": [{"key": "pool", "operator": "In", "values": ["batch"]}]}
            ]}
        }}));
        let state = CycleState::default();
        // A pod without constraints is no longer skipped: Filter must run.
        let plain = PodBuilder::new("p").build_info();
        let (r, st) = pl.pre_filter(
            &mut CycleState::default(),
            &plain,
            &flotilla_shared::testing::FakeLister::default(),
        );
        assert_eq!(st, Status::success());
        assert!(r.node_names.is_none());
        assert!(
            pl.filter(&state, &plain, &node("n1", &[("pool", "batch")]))
                .is_success()
        );
        let st = pl.filter(&state, &plain, &node("n2", &[("pool", "web")]));
        assert_eq!(st.code, Code::UnschedulableAndUnresolvable);
        assert_eq!(
            st.reasons,
            ["node(s) didn't match scheduler-enforced node affinity"]
        );
        assert_eq!(st.plugin, "NodeAffinity");
        // The enforced affinity is checked first, then the pod's own.
        let picky = PodBuilder::new("q")
            .node_selector("disk", "ssd")
            .build_info();
        assert_eq!(
            pl.filter(&state, &picky, &node("n3", &[("disk", "ssd")]))
                .reasons,
            [REASON_ENFORCED]
        );
        assert_eq!(
            pl.filter(&state, &picky, &node("n4", &[("pool", "batch")]))
                .reasons,
            [REASON]
        );
        assert!(
            pl.filter(
                &state,
                &picky,
                &node("n5", &[("pool", "batch"), ("disk", "ssd")])
            )
            .is_success()
        );
        // Preferred-only addedAffinity keeps the Skip.
        let pref_only = with_added(serde_json::json!({"addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 3, "preference": {"matchExpressions": [
                    {"key": "key", "operator": "In", "values": ["value"]}]}}
            ]
        }}));
        let (_, st) = pref_only.pre_filter(
            &mut CycleState::default(),
            &plain,
            &flotilla_shared::testing::FakeLister::default(),
        );
        assert_eq!(st.code, Code::Skip);
    }

    #[test]
    fn added_preferred_terms_add_to_the_score() {
        // upstream node_affinity_test.go TestNodeAffinityPriority, "added
        // affinity and pod has default affinity": pod prefers foo=bar (2),
        // addedAffinity prefers key=value (3). Raw 2, 3, 5 -> 40, 60, 100.
        let pl = with_added(serde_json::json!({"addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 3, "preference": {"matchExpressions": [
                    {"key": "key", "operator": "In", "values": ["value"]}]}}
            ]
        }}));
        let pod = PodBuilder::new("p")
            .preferred_affinity(2, "foo", "In", &["bar"])
            .build_info();
        let nodes = [
            node("node1", &[("foo", "bar")]),
            node("node2", &[("key", "value")]),
            node("node3", &[("foo", "bar"), ("key", "value"), ("az", "az1")]),
        ];
        let state = CycleState::default();
        let mut s: Vec<i64> = nodes
            .iter()
            .map(|n| pl.score(&state, &pod, n).unwrap())
            .collect();
        assert_eq!(s, [2, 3, 5]);
        pl.normalize_score(&state, &pod, &mut s);
        assert_eq!(s, [40, 60, 100]);
        // "added affinity": a pod without preferences, added foo=bar (2).
        let pl = with_added(serde_json::json!({"addedAffinity": {
            "preferredDuringSchedulingIgnoredDuringExecution": [
                {"weight": 2, "preference": {"matchExpressions": [
                    {"key": "foo", "operator": "In", "values": ["bar"]}]}}
            ]
        }}));
        let plain = PodBuilder::new("q").build_info();
        let mut s: Vec<i64> = nodes[..2]
            .iter()
            .map(|n| pl.score(&state, &plain, n).unwrap())
            .collect();
        pl.normalize_score(&state, &plain, &mut s);
        assert_eq!(s, [100, 0]);
    }
}
