//! `InterPodAffinity`: pods that want (or refuse) to share a topology domain
//! with other pods (upstream
//! `pkg/scheduler/framework/plugins/interpodaffinity/{plugin,filtering,scoring}.go`).
//! The terms are compiled once per pod ([`flotilla_shared::pod_affinity`]);
//! the counting and checking are the shared pure functions there, so the
//! bind arbiter can re-check a placement with the same code.
//!
//! # PreFilter / Filter (required terms)
//! PreFilter makes one pass over the snapshot's placed pods and counts, per
//! topology pair (`topologyKey`, node label value):
//! - existing pods whose required anti-affinity matches the incoming pod
//!   (only nodes holding such pods are visited: the snapshot keeps them);
//! - existing pods matching **all** of the incoming pod's required affinity
//!   terms, and existing pods matching each of its required anti-affinity
//!   terms (every node; only for pods with required terms).
//!
//! It returns `Skip` when the pod has no required term and no existing
//! pod's anti-affinity matches it: the common pod without affinity costs
//! one look at an (usually empty) list.
//!
//! Filter, per node, in upstream order:
//! 1. affinity: the node must carry every term's topology key and each
//!    domain must hold a matching pod, else `UnschedulableAndUnresolvable`
//!    `"node(s) didn't match pod affinity rules"`. Exception: when no pod in
//!    the cluster matches and the pod matches its own terms (the first pod of
//!    a self-affine group), any node with the topology keys passes;
//! 2. anti-affinity: no domain of the node may hold a pod matching a term,
//!    else `Unschedulable` `"node(s) didn't match pod anti-affinity rules"`;
//!    a node without the topology key is not in any domain and passes;
//! 3. existing pods' anti-affinity: the node must be outside every domain
//!    where a placed pod's required anti-affinity matches the incoming pod,
//!    else `Unschedulable` `"node(s) didn't satisfy existing pods anti-affinity rules"`.
//!
//! # Bind check
//! PreFilter's counts over the coordinator's view (from the counts it
//! keeps, [`flotilla_shared::affinity_counts`]) and Filter's check on the
//! node ([`RequiredAffinityState::check_placement`]), so two workers can
//! never place two mutually anti-affine pods in one domain. Like PreFilter,
//! a pod without required terms is only looked at when some placed pod has
//! required anti-affinity.
//!
//! # PreScore / Score / NormalizeScore (preferred terms)
//! PreScore sums weights per topology pair over the placed pods
//! ([`preferred_scores`]): the incoming pod's preferred affinity (+weight)
//! and anti-affinity (-weight) against existing pods, and existing pods'
//! required affinity (+`hardPodAffinityWeight`), preferred affinity (+) and
//! preferred anti-affinity (-) against the incoming pod. Pods without
//! preferred terms only visit nodes holding pods with affinity. It returns
//! `Skip` when nothing matched, or with `ignorePreferredTermsOfExistingPods`
//! when the incoming pod has no preferred term.
//!
//! Score is the sum, over the topology keys that scored, of the sum at the
//! node's value (may be negative). NormalizeScore maps min..max onto
//! 0..=100 (`100 * (s - min) / (max - min)` in floating point, truncated);
//! when all scores are equal every node gets 0.
//!
//! # Args
//! The args are [`InterPodAffinityArgs`]: `hardPodAffinityWeight` (default 1, 0..=100)
//! and `ignorePreferredTermsOfExistingPods` (default false).

use std::borrow::Cow;
use std::sync::Arc;

use serde::Deserialize;

use flotilla_shared::framework::{
    BindCheck, BindResult, BindView, ClusterEvent, Code, CycleState, FilterPlugin, MAX_NODE_SCORE,
    Plugin, PreFilterPlugin, PreFilterResult, PreScorePlugin, ScorePlugin, SharedLister, Status,
};
use flotilla_shared::pod_affinity::{
    AffinityViolation, RequiredAffinityState, TopologyCounts, preferred_scores,
};
pub use flotilla_shared::pod_affinity::{
    REASON_AFFINITY_RULES_NOT_MATCH, REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
    REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH,
};
use flotilla_shared::{NodeInfo, PodInfo};

use super::names;
use crate::framework::decode_args;
use crate::framework::parallel::fold_nodes;

/// Registry name.
pub const NAME: &str = names::INTER_POD_AFFINITY;

/// The args kind in `pluginConfig`.
pub const ARGS_KIND: &str = "InterPodAffinityArgs";

/// Upstream default of `hardPodAffinityWeight`
/// (`v1.DefaultHardPodAffinitySymmetricWeight`).
pub const DEFAULT_HARD_POD_AFFINITY_WEIGHT: i32 = 1;

/// CycleState key of the PreFilter counts (upstream `preFilterStateKey`).
const PRE_FILTER_KEY: &str = "PreFilterInterPodAffinity";
/// CycleState key of the PreScore sums (upstream `preScoreStateKey`).
const PRE_SCORE_KEY: &str = "PreScoreInterPodAffinity";

/// A new node or a node label change (topology keys), a pod placed
/// (affinity may now be met) or a pod leaving (anti-affinity may now be met).
const EVENTS: &[ClusterEvent] = &[
    ClusterEvent::NodeAdded,
    ClusterEvent::NodeLabelChanged,
    ClusterEvent::AssignedPodAdded,
    ClusterEvent::AssignedPodDeleted,
];

/// `InterPodAffinityArgs` (`kubescheduler.config.k8s.io/v1`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Deserialize)]
#[serde(deny_unknown_fields, rename_all = "camelCase", default)]
pub struct InterPodAffinityArgs {
    /// Score weight of an existing pod's **required** affinity term that the
    /// incoming pod matches (symmetry), 0..=100; 0 turns it off. Default 1.
    pub hard_pod_affinity_weight: i32,
    /// When the incoming pod has no preferred (anti-)affinity term, skip
    /// scoring entirely instead of weighing existing pods' terms. Default
    /// false.
    pub ignore_preferred_terms_of_existing_pods: bool,
}

impl Default for InterPodAffinityArgs {
    fn default() -> Self {
        InterPodAffinityArgs {
            hard_pod_affinity_weight: DEFAULT_HARD_POD_AFFINITY_WEIGHT,
            ignore_preferred_terms_of_existing_pods: false,
        }
    }
}

impl InterPodAffinityArgs {
    /// Decodes `pluginConfig` args (`None`: defaults) and validates them.
    ///
    /// # Errors
    /// A message starting with the field path: unknown fields, wrong types,
    /// `hardPodAffinityWeight` outside 0..=100 (upstream
    /// `ValidateInterPodAffinityArgs`).
    pub fn decode(args: Option<&serde_json::Value>) -> Result<Self, String> {
        let a: InterPodAffinityArgs = decode_args(args, ARGS_KIND)?;
        a.validate()?;
        Ok(a)
    }

    /// Checks the ranges.
    ///
    /// # Errors
    /// `hardPodAffinityWeight: Invalid value: <w>: not in valid range [0, 100]`.
    pub fn validate(&self) -> Result<(), String> {
        let w = self.hard_pod_affinity_weight;
        if !(0..=100).contains(&w) {
            return Err(format!(
                "hardPodAffinityWeight: Invalid value: {w}: not in valid range [0, 100]"
            ));
        }
        Ok(())
    }
}

/// PreFilter, Filter, PreScore and Score plugin for inter-pod affinity and
/// anti-affinity (default score weight 2).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct InterPodAffinity {
    args: InterPodAffinityArgs,
}

impl InterPodAffinity {
    /// The plugin with `args`.
    ///
    /// # Errors
    /// As [`InterPodAffinityArgs::validate`].
    pub fn new(args: InterPodAffinityArgs) -> Result<Self, String> {
        args.validate()?;
        Ok(InterPodAffinity { args })
    }

    /// The plugin's args.
    #[must_use]
    pub fn args(&self) -> InterPodAffinityArgs {
        self.args
    }
}

/// Counts the required-term matches over `nodes` ([`fold_nodes`]).
fn count_required(
    state: &mut RequiredAffinityState,
    pod: &PodInfo,
    nodes: &[&Arc<NodeInfo>],
    cluster: &dyn SharedLister,
) {
    let counted = fold_nodes(
        nodes,
        |chunk| {
            let mut s = RequiredAffinityState::default();
            s.count_nodes(pod, chunk.iter().map(|n| &***n), cluster);
            s
        },
        |mut a, b| {
            a.merge_counts(b);
            a
        },
    );
    state.merge_counts(counted);
}

/// [`preferred_scores`] over `nodes` ([`fold_nodes`]).
fn sum_preferred(
    pod: &PodInfo,
    nodes: &[&Arc<NodeInfo>],
    hard_pod_affinity_weight: i64,
    cluster: &dyn SharedLister,
) -> TopologyCounts {
    fold_nodes(
        nodes,
        |chunk| {
            preferred_scores(
                pod,
                chunk.iter().map(|n| &***n),
                hard_pod_affinity_weight,
                cluster,
            )
        },
        |mut a, b| {
            a.merge(b);
            a
        },
    )
}

impl Plugin for InterPodAffinity {
    fn name(&self) -> &'static str {
        NAME
    }

    fn events_to_register(&self) -> &'static [ClusterEvent] {
        EVENTS
    }
}

impl PreFilterPlugin for InterPodAffinity {
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status) {
        let has_required = pod
            .pod_affinity
            .as_deref()
            .is_some_and(|a| a.has_required_terms());
        let nodes = if has_required {
            cluster.nodes().iter().collect()
        } else {
            // Only existing pods' anti-affinity can reject this pod.
            let nodes = cluster.have_pods_with_required_anti_affinity();
            if nodes.is_empty() {
                return (PreFilterResult::default(), Status::skip());
            }
            nodes
        };
        let counts = cluster.required_affinity_state(pod, &|| {
            let mut counts = RequiredAffinityState::new(pod, cluster);
            count_required(&mut counts, pod, &nodes, cluster);
            counts
        });
        if counts.nothing_to_check(pod) {
            return (PreFilterResult::default(), Status::skip());
        }
        state.write(PRE_FILTER_KEY, counts);
        (PreFilterResult::default(), Status::success())
    }
}

/// PreFilter's counts over the arbiter's whole view (from the counts it
/// keeps), checked on the node as Filter checks them.
impl BindCheck for InterPodAffinity {
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, view: &mut BindView<'_>) -> BindResult {
        let has_required = pod
            .pod_affinity
            .as_deref()
            .is_some_and(|a| a.has_required_terms());
        if !has_required && view.anti_affinity_pods == 0 {
            // PreFilter's Skip: nothing can refuse the pod.
            return Ok(());
        }
        let (nodes, namespaces) = (view.nodes, view.namespaces);
        view.kept
            .affinity
            .required_state(
                pod,
                namespaces,
                || nodes.values(),
                || RequiredAffinityState::of_nodes(pod, nodes.values(), namespaces),
            )
            .check_placement(pod, node)
            .map_err(|v| Cow::Borrowed(v.reason()))
    }

    /// Reads every node's counts.
    fn node_local(&self) -> bool {
        false
    }
}

impl FilterPlugin for InterPodAffinity {
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        let Some(counts) = state.read::<RequiredAffinityState>(PRE_FILTER_KEY) else {
            return Status::error(format!(
                "error reading {PRE_FILTER_KEY:?} from cycleState: not found"
            ))
            .with_plugin(NAME);
        };
        match counts.check(pod, node) {
            Ok(()) => Status::success(),
            Err(v) => {
                let code = match v {
                    AffinityViolation::PodAffinity => Code::UnschedulableAndUnresolvable,
                    AffinityViolation::PodAntiAffinity
                    | AffinityViolation::ExistingPodsAntiAffinity => Code::Unschedulable,
                };
                Status::new(code, v.reason()).with_plugin(NAME)
            }
        }
    }
}

impl PreScorePlugin for InterPodAffinity {
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        _feasible: &[Arc<NodeInfo>],
        cluster: &dyn SharedLister,
    ) -> Status {
        let has_preferred = pod
            .pod_affinity
            .as_deref()
            .is_some_and(|a| a.has_preferred_terms());
        if self.args.ignore_preferred_terms_of_existing_pods && !has_preferred {
            return Status::skip();
        }
        // Unless the pod has preferred terms, only nodes holding pods whose
        // own terms score others can contribute (not those whose pods only
        // have required anti-affinity).
        let nodes: Vec<&Arc<NodeInfo>> = if has_preferred {
            cluster.nodes().iter().collect()
        } else {
            cluster.have_pods_with_scoring_affinity()
        };
        if nodes.is_empty() {
            return Status::skip();
        }
        let scores = sum_preferred(
            pod,
            &nodes,
            i64::from(self.args.hard_pod_affinity_weight),
            cluster,
        );
        if scores.is_empty() {
            return Status::skip();
        }
        state.write(PRE_SCORE_KEY, scores);
        Status::success()
    }
}

/// Upstream InterPodAffinity `NormalizeScore`: maps min..max onto
/// 0..=[`MAX_NODE_SCORE`]; all equal → all 0.
fn normalize(scores: &mut [i64]) {
    let (Some(&min), Some(&max)) = (scores.iter().min(), scores.iter().max()) else {
        return;
    };
    let diff = max - min;
    for s in scores.iter_mut() {
        *s = if diff > 0 {
            // Same float arithmetic as upstream, truncated.
            #[allow(clippy::cast_precision_loss, clippy::cast_possible_truncation)]
            let v = (MAX_NODE_SCORE as f64 * ((*s - min) as f64 / diff as f64)) as i64;
            v
        } else {
            0
        };
    }
}

impl ScorePlugin for InterPodAffinity {
    fn score(&self, state: &CycleState, _pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status> {
        let scores = state.read::<TopologyCounts>(PRE_SCORE_KEY).ok_or_else(|| {
            Status::error(format!(
                "failed to read {PRE_SCORE_KEY:?} from cycleState: not found"
            ))
        })?;
        Ok(scores.node_sum(node))
    }

    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, scores: &mut [i64]) {
        normalize(scores);
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::atomic::{AtomicUsize, Ordering};

    use super::*;
    use flotilla_shared::testing::{
        FakeLister, NodeBuilder, PodAffinityKind, PodBuilder, pod_affinity_term,
    };
    use k8s_openapi::api::core::v1::PodAffinityTerm;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{LabelSelector, LabelSelectorRequirement};

    use PodAffinityKind::{Preferred, PreferredAnti, Required, RequiredAnti};

    const UAU: Code = Code::UnschedulableAndUnresolvable;
    const U: Code = Code::Unschedulable;
    const AFF: Option<(Code, &str)> = Some((UAU, REASON_AFFINITY_RULES_NOT_MATCH));
    const ANTI: Option<(Code, &str)> = Some((U, REASON_ANTI_AFFINITY_RULES_NOT_MATCH));
    const EXIST: Option<(Code, &str)> = Some((U, REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH));

    /// A pod with a unique name (uids must differ on a node).
    fn pod() -> PodBuilder {
        static N: AtomicUsize = AtomicUsize::new(0);
        PodBuilder::new(&format!("p{}", N.fetch_add(1, Ordering::Relaxed)))
    }

    fn with_labels(mut p: PodBuilder, kv: &[(&str, &str)]) -> PodBuilder {
        for (k, v) in kv {
            p = p.label(k, v);
        }
        p
    }

    fn term(key: &str, op: &str, values: &[&str], tk: &str) -> PodAffinityTerm {
        pod_affinity_term(key, op, values, tk)
    }

    fn team_in(team: &str) -> LabelSelector {
        LabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".into(),
                operator: "In".into(),
                values: Some(vec![team.into()]),
            }]),
            match_labels: None,
        }
    }

    /// Nodes with labels, pods placed by their `spec.nodeName` (pods on
    /// unknown nodes are dropped, as upstream's test snapshot does), and the
    /// namespaces of upstream's scoring_test.go fixture.
    fn cluster(nodes: &[(&str, &[(&str, &str)])], pods: Vec<PodBuilder>) -> FakeLister {
        let mut infos: Vec<NodeInfo> = nodes
            .iter()
            .map(|(name, labels)| {
                let mut b = NodeBuilder::new(name);
                for (k, v) in *labels {
                    b = b.label(k, v);
                }
                NodeInfo::new(Arc::new(b.build_spec()))
            })
            .collect();
        for p in pods {
            let p = Arc::new(p.build_info());
            let on = p.node_name.clone().expect("test pods are placed");
            if let Some(n) = infos.iter_mut().find(|n| n.name() == &*on) {
                assert!(n.add_pod(p));
            }
        }
        let mut lister = FakeLister::new(infos);
        for (ns, team) in [
            ("subteam1.team1", "team1"),
            ("subteam2.team1", "team1"),
            ("subteam1.team2", "team2"),
            ("subteam2.team2", "team2"),
        ] {
            lister.namespaces.insert(
                ns.to_owned(),
                BTreeMap::from([("team".to_owned(), team.to_owned())]),
            );
        }
        lister
    }

    struct FilterCase {
        name: &'static str,
        pod: PodBuilder,
        pods: Vec<PodBuilder>,
        nodes: Vec<(&'static str, &'static [(&'static str, &'static str)])>,
        /// `Skip` or `Success`.
        pre_filter: Code,
        /// Per node, in order: `None` = fits.
        want: Vec<Option<(Code, &'static str)>>,
    }

    fn run_filter_cases(cases: Vec<FilterCase>) {
        let pl = InterPodAffinity::default();
        for c in cases {
            let lister = cluster(&c.nodes, c.pods);
            let pod = c.pod.build_info();
            let mut state = CycleState::default();
            let (res, st) = pl.pre_filter(&mut state, &pod, &lister);
            assert!(res.node_names.is_none(), "{}", c.name);
            assert_eq!(st.code, c.pre_filter, "{}: PreFilter {st}", c.name);
            if st.code == Code::Skip {
                continue;
            }
            for (n, want) in lister.nodes.iter().zip(&c.want) {
                let got = pl.filter(&state, &pod, n);
                match want {
                    None => assert_eq!(got, Status::success(), "{} on {}", c.name, n.name()),
                    Some((code, reason)) => {
                        assert_eq!(got.code, *code, "{} on {}", c.name, n.name());
                        assert_eq!(got.reasons, [*reason], "{} on {}", c.name, n.name());
                        assert_eq!(got.plugin, NAME);
                    }
                }
            }
        }
    }

    const NODE1: &[(&str, &str)] = &[("region", "r1"), ("zone", "z11")];
    const SECURITYSCAN: &[(&str, &str)] = &[("service", "securityscan")];
    const S1: &[(&str, &str)] = &[("security", "S1")];

    /// upstream filtering_test.go `TestRequiredAffinitySingleNode`: one node
    /// (region r1, zone z11) holding a pod labelled service=securityscan.
    #[test]
    fn required_affinity_single_node_matches_upstream() {
        let existing = || with_labels(pod(), SECURITYSCAN).node_name("node1");
        let one = |pod: PodBuilder, pods: Vec<PodBuilder>, pre: Code, want| FilterCase {
            name: "",
            pod,
            pods,
            nodes: vec![("node1", NODE1)],
            pre_filter: pre,
            want: vec![want],
        };
        let named = |name, c: FilterCase| FilterCase { name, ..c };
        let ok = Code::Success;
        let mut other_ns = term("service", "In", &["securityscan", "value2"], "region");
        other_ns.namespaces = Some(vec!["DiffNameSpace".into()]);
        let mut ns_sel = term("service", "In", &["securityscan", "value2"], "region");
        ns_sel.namespace_selector = Some(team_in("team1"));
        let mut anti_ns_sel = term("service", "In", &["securityscan", "value2"], "zone");
        anti_ns_sel.namespace_selector = Some(team_in("team1"));
        let mut anti_all_ns = term("service", "In", &["securityscan", "value2"], "zone");
        anti_all_ns.namespace_selector = Some(LabelSelector::default());
        let two_terms = |second: &str| {
            let mut a = term("service", "Exists", &[], "region");
            a.label_selector
                .as_mut()
                .unwrap()
                .match_expressions
                .as_mut()
                .unwrap()
                .push(LabelSelectorRequirement {
                    key: "wrongkey".into(),
                    operator: "DoesNotExist".into(),
                    values: None,
                });
            let mut b = term("service", "In", &[second], "region");
            b.label_selector
                .as_mut()
                .unwrap()
                .match_expressions
                .as_mut()
                .unwrap()
                .push(LabelSelectorRequirement {
                    key: "service".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["WrongValue".into()]),
                });
            with_labels(pod(), S1)
                .pod_affinity(Required, a)
                .pod_affinity(Required, b)
        };
        run_filter_cases(vec![
            named(
                "no required pod affinity, no existing pods: Skip",
                one(pod(), vec![], Code::Skip, None),
            ),
            named(
                "affinity In matches the existing pod",
                one(
                    with_labels(pod(), S1).pod_affinity(
                        Required,
                        term("service", "In", &["securityscan", "value2"], "region"),
                    ),
                    vec![existing()],
                    ok,
                    None,
                ),
            ),
            named(
                "affinity NotIn matches the existing pod",
                one(
                    with_labels(pod(), S1).pod_affinity(
                        Required,
                        term("service", "NotIn", &["securityscan3", "value3"], "region"),
                    ),
                    vec![existing()],
                    ok,
                    None,
                ),
            ),
            named(
                "affinity does not match a pod in another namespace",
                one(
                    with_labels(pod(), S1).pod_affinity(Required, other_ns),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .namespace("ns")
                            .node_name("node1"),
                    ],
                    ok,
                    AFF,
                ),
            ),
            named(
                "affinity labelSelector matches no existing pod",
                one(
                    with_labels(pod(), SECURITYSCAN).pod_affinity(
                        Required,
                        term("service", "In", &["antivirusscan", "value2"], "region"),
                    ),
                    vec![existing()],
                    ok,
                    AFF,
                ),
            ),
            named(
                "different operators in several required terms all match",
                one(two_terms("securityscan"), vec![existing()], ok, None),
            ),
            named(
                "matchExpressions are ANDed: one fails",
                one(two_terms("securityscan2"), vec![existing()], ok, AFF),
            ),
            named(
                "affinity and anti-affinity both satisfied",
                one(
                    with_labels(pod(), S1)
                        .pod_affinity(
                            Required,
                            term("service", "In", &["securityscan", "value2"], "region"),
                        )
                        .pod_affinity(
                            RequiredAnti,
                            term("service", "In", &["antivirusscan", "value2"], "node"),
                        ),
                    vec![existing()],
                    ok,
                    None,
                ),
            ),
            named(
                "anti-affinity symmetry satisfied",
                one(
                    with_labels(pod(), S1)
                        .pod_affinity(
                            Required,
                            term("service", "In", &["securityscan", "value2"], "region"),
                        )
                        .pod_affinity(
                            RequiredAnti,
                            term("service", "In", &["antivirusscan", "value2"], "node"),
                        ),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .node_name("node1")
                            .pod_affinity(
                                RequiredAnti,
                                term("service", "In", &["antivirusscan", "value2"], "node"),
                            ),
                    ],
                    ok,
                    None,
                ),
            ),
            named(
                "affinity satisfied, own anti-affinity violated",
                one(
                    with_labels(pod(), S1)
                        .pod_affinity(
                            Required,
                            term("service", "In", &["securityscan", "value2"], "region"),
                        )
                        .pod_affinity(
                            RequiredAnti,
                            term("service", "In", &["securityscan", "value2"], "zone"),
                        ),
                    vec![existing()],
                    ok,
                    ANTI,
                ),
            ),
            named(
                "existing pod's anti-affinity violated (symmetry)",
                one(
                    with_labels(pod(), SECURITYSCAN)
                        .pod_affinity(
                            Required,
                            term("service", "In", &["securityscan", "value2"], "region"),
                        )
                        .pod_affinity(
                            RequiredAnti,
                            term("service", "In", &["antivirusscan", "value2"], "node"),
                        ),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .node_name("node1")
                            .pod_affinity(
                                RequiredAnti,
                                term("service", "In", &["securityscan", "value2"], "zone"),
                            ),
                    ],
                    ok,
                    EXIST,
                ),
            ),
            named(
                "pod does not match its own affinity, matching pod is on an unknown node",
                one(
                    with_labels(pod(), SECURITYSCAN).pod_affinity(
                        Required,
                        term("service", "NotIn", &["securityscan", "value2"], "region"),
                    ),
                    vec![with_labels(pod(), SECURITYSCAN).node_name("node2")],
                    ok,
                    AFF,
                ),
            ),
            named(
                "existing anti-affinity applies to a pod without affinity",
                one(
                    with_labels(pod(), SECURITYSCAN),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .node_name("node1")
                            .pod_affinity(
                                RequiredAnti,
                                term("service", "In", &["securityscan", "value2"], "zone"),
                            ),
                    ],
                    ok,
                    EXIST,
                ),
            ),
            named(
                "existing anti-affinity that does not match: Skip",
                one(
                    with_labels(pod(), SECURITYSCAN),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .node_name("node1")
                            .pod_affinity(
                                RequiredAnti,
                                term("service", "NotIn", &["securityscan", "value2"], "zone"),
                            ),
                    ],
                    Code::Skip,
                    None,
                ),
            ),
            named(
                "own anti-affinity is checked before the existing pod's",
                one(
                    with_labels(pod(), SECURITYSCAN)
                        .pod_affinity(RequiredAnti, term("service", "Exists", &[], "region"))
                        .pod_affinity(RequiredAnti, term("security", "Exists", &[], "region")),
                    vec![
                        with_labels(pod(), S1)
                            .node_name("node1")
                            .pod_affinity(RequiredAnti, term("security", "Exists", &[], "zone")),
                    ],
                    ok,
                    ANTI,
                ),
            ),
            named(
                "symmetry a2: only the existing pod's term matches",
                one(
                    with_labels(pod(), S1)
                        .pod_affinity(RequiredAnti, term("security", "Exists", &[], "zone")),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .node_name("node1")
                            .pod_affinity(RequiredAnti, term("service", "Exists", &[], "zone"))
                            .pod_affinity(RequiredAnti, term("security", "Exists", &[], "zone")),
                    ],
                    ok,
                    EXIST,
                ),
            ),
            named(
                "affinity with a matching namespaceSelector",
                one(
                    with_labels(pod(), S1).pod_affinity(Required, ns_sel.clone()),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .namespace("subteam1.team1")
                            .node_name("node1"),
                    ],
                    ok,
                    None,
                ),
            ),
            named(
                "affinity with a non-matching namespaceSelector",
                one(
                    with_labels(pod(), S1).pod_affinity(Required, ns_sel),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .namespace("subteam1.team2")
                            .node_name("node1"),
                    ],
                    ok,
                    AFF,
                ),
            ),
            named(
                "anti-affinity with a matching namespaceSelector",
                one(
                    with_labels(pod(), S1)
                        .namespace("subteam1.team1")
                        .pod_affinity(RequiredAnti, anti_ns_sel.clone()),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .namespace("subteam2.team1")
                            .node_name("node1"),
                    ],
                    ok,
                    ANTI,
                ),
            ),
            named(
                "anti-affinity with an all-namespaces selector",
                one(
                    with_labels(pod(), S1)
                        .namespace("subteam1.team1")
                        .pod_affinity(RequiredAnti, anti_all_ns),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .namespace("subteam2.team1")
                            .node_name("node1"),
                    ],
                    ok,
                    ANTI,
                ),
            ),
            named(
                "anti-affinity with a non-matching namespaceSelector",
                one(
                    with_labels(pod(), S1)
                        .namespace("subteam1.team1")
                        .pod_affinity(RequiredAnti, anti_ns_sel),
                    vec![
                        with_labels(pod(), SECURITYSCAN)
                            .namespace("subteam1.team2")
                            .node_name("node1"),
                    ],
                    ok,
                    None,
                ),
            ),
        ]);
    }

    const CHINA: &[(&str, &str)] = &[("region", "China")];
    const CHINA_AZ1: &[(&str, &str)] = &[("region", "China"), ("az", "az1")];
    const INDIA: &[(&str, &str)] = &[("region", "India")];
    const R1Z1A: &[(&str, &str)] = &[("region", "r1"), ("zone", "z1"), ("hostname", "nodeA")];
    const R1Z1B: &[(&str, &str)] = &[("region", "r1"), ("zone", "z1"), ("hostname", "nodeB")];
    const R1Z2B: &[(&str, &str)] = &[("region", "r1"), ("zone", "z2"), ("hostname", "nodeB")];

    /// upstream filtering_test.go `TestRequiredAffinityMultipleNodes`.
    #[test]
    fn required_affinity_multiple_nodes_matches_upstream() {
        let ok = Code::Success;
        let foo_bar_service = || {
            with_labels(pod(), &[("foo", "bar"), ("service", "securityscan")])
                .pod_affinity(Required, term("foo", "In", &["bar"], "zone"))
                .pod_affinity(Required, term("service", "In", &["securityscan"], "zone"))
        };
        run_filter_cases(vec![
            FilterCase {
                name: "every node in the matching pod's region fits",
                pod: pod().pod_affinity(Required, term("foo", "In", &["bar"], "region")),
                pods: vec![with_labels(pod(), &[("foo", "bar")]).node_name("node1")],
                nodes: vec![("node1", CHINA), ("node2", CHINA_AZ1), ("node3", INDIA)],
                pre_filter: ok,
                want: vec![None, None, AFF],
            },
            FilterCase {
                name: "the first pod of a self-affine group may go to any zone",
                pod: foo_bar_service(),
                pods: vec![with_labels(pod(), &[("foo", "bar")]).node_name("nodeA")],
                nodes: vec![
                    ("nodeA", &[("zone", "az1"), ("hostname", "h1")]),
                    ("nodeB", &[("zone", "az2"), ("hostname", "h2")]),
                ],
                pre_filter: ok,
                want: vec![None, None],
            },
            FilterCase {
                name: "... but only to nodes with the topology key",
                pod: foo_bar_service(),
                pods: vec![with_labels(pod(), &[("foo", "bar")]).node_name("nodeA")],
                nodes: vec![
                    ("nodeA", &[("zoneLabel", "az1"), ("hostname", "h1")]),
                    ("nodeB", &[("zoneLabel", "az2"), ("hostname", "h2")]),
                ],
                pre_filter: ok,
                want: vec![AFF, AFF],
            },
            FilterCase {
                name: "once a member of a self-affine group exists, the next must join its zone",
                pod: foo_bar_service(),
                pods: vec![
                    with_labels(pod(), &[("foo", "bar"), ("service", "securityscan")])
                        .node_name("nodeA"),
                ],
                nodes: vec![
                    ("nodeA", &[("zone", "az1"), ("hostname", "h1")]),
                    ("nodeB", &[("zone", "az2"), ("hostname", "h2")]),
                ],
                pre_filter: ok,
                want: vec![None, AFF],
            },
            FilterCase {
                name: "anti-affinity excludes the whole region of the matching pod",
                pod: pod().pod_affinity(RequiredAnti, term("foo", "In", &["abc"], "region")),
                pods: vec![with_labels(pod(), &[("foo", "abc")]).node_name("nodeA")],
                nodes: vec![("nodeA", CHINA), ("nodeB", CHINA_AZ1), ("nodeC", INDIA)],
                pre_filter: ok,
                want: vec![ANTI, ANTI, None],
            },
            FilterCase {
                name: "anti-affinity: any matching term rejects",
                pod: pod()
                    .pod_affinity(RequiredAnti, term("foo", "In", &["abc"], "region"))
                    .pod_affinity(
                        RequiredAnti,
                        term("service", "In", &["securityscan"], "zone"),
                    ),
                pods: vec![
                    with_labels(pod(), &[("foo", "abc"), ("service", "securityscan")])
                        .node_name("nodeA"),
                ],
                nodes: vec![
                    (
                        "nodeA",
                        &[("region", "r1"), ("zone", "z1"), ("hostname", "nodeA")],
                    ),
                    (
                        "nodeB",
                        &[("region", "r1"), ("zone", "z2"), ("hostname", "nodeB")],
                    ),
                ],
                pre_filter: ok,
                want: vec![ANTI, ANTI],
            },
            FilterCase {
                name: "an existing pod's anti-affinity in another namespace does not apply",
                pod: with_labels(pod(), &[("foo", "123")])
                    .namespace("NS1")
                    .pod_affinity(RequiredAnti, term("foo", "In", &["bar"], "region")),
                pods: vec![
                    with_labels(pod(), &[("foo", "bar")])
                        .namespace("NS1")
                        .node_name("nodeA"),
                    pod()
                        .namespace("NS2")
                        .node_name("nodeC")
                        .pod_affinity(RequiredAnti, term("foo", "In", &["123"], "region")),
                ],
                nodes: vec![("nodeA", CHINA), ("nodeB", CHINA_AZ1), ("nodeC", INDIA)],
                pre_filter: ok,
                want: vec![ANTI, ANTI, None],
            },
            FilterCase {
                name: "existing anti-affinity on a topology key no node has: Skip",
                pod: with_labels(pod(), &[("foo", "")]),
                pods: vec![pod().node_name("nodeA").pod_affinity(
                    RequiredAnti,
                    term("foo", "Exists", &[], "invalid-node-label"),
                )],
                nodes: vec![("nodeA", R1Z1A), ("nodeB", R1Z1B)],
                pre_filter: Code::Skip,
                want: vec![None, None],
            },
            FilterCase {
                name: "own anti-affinity on a topology key no node has",
                pod: pod().pod_affinity(
                    RequiredAnti,
                    term("foo", "Exists", &[], "invalid-node-label"),
                ),
                pods: vec![with_labels(pod(), &[("foo", "")]).node_name("nodeA")],
                nodes: vec![("nodeA", R1Z1A), ("nodeB", R1Z1B)],
                pre_filter: ok,
                want: vec![None, None],
            },
            FilterCase {
                name: "every existing pod's anti-affinity is violated on every node",
                pod: with_labels(pod(), &[("foo", ""), ("bar", "")]),
                pods: vec![
                    pod()
                        .node_name("nodeA")
                        .pod_affinity(RequiredAnti, term("foo", "Exists", &[], "zone")),
                    pod()
                        .node_name("nodeA")
                        .pod_affinity(RequiredAnti, term("bar", "Exists", &[], "region")),
                ],
                nodes: vec![("nodeA", R1Z1A), ("nodeB", R1Z2B)],
                pre_filter: ok,
                want: vec![EXIST, EXIST],
            },
            FilterCase {
                name: "existing anti-affinity counts a term only with its topology key",
                pod: with_labels(pod(), &[("foo", ""), ("bar", "")]),
                pods: vec![
                    pod()
                        .node_name("nodeA")
                        .pod_affinity(
                            RequiredAnti,
                            term("foo", "Exists", &[], "invalid-node-label"),
                        )
                        .pod_affinity(RequiredAnti, term("bar", "Exists", &[], "zone")),
                ],
                nodes: vec![("nodeA", R1Z1A), ("nodeB", R1Z2B)],
                pre_filter: ok,
                want: vec![EXIST, None],
            },
            FilterCase {
                name: "own anti-affinity counts a term only with its topology key",
                pod: pod()
                    .pod_affinity(
                        RequiredAnti,
                        term("foo", "Exists", &[], "invalid-node-label"),
                    )
                    .pod_affinity(RequiredAnti, term("bar", "Exists", &[], "zone")),
                pods: vec![with_labels(pod(), &[("foo", ""), ("bar", "")]).node_name("nodeA")],
                nodes: vec![("nodeA", R1Z1A), ("nodeB", R1Z2B)],
                pre_filter: ok,
                want: vec![ANTI, None],
            },
            FilterCase {
                name: "only a third zone is free of existing pods' anti-affinity",
                pod: with_labels(pod(), &[("foo", ""), ("bar", "")]),
                pods: vec![
                    pod()
                        .node_name("nodeA")
                        .pod_affinity(RequiredAnti, term("foo", "Exists", &[], "zone"))
                        .pod_affinity(RequiredAnti, term("labelA", "Exists", &[], "zone")),
                    pod()
                        .node_name("nodeB")
                        .pod_affinity(RequiredAnti, term("bar", "Exists", &[], "zone"))
                        .pod_affinity(RequiredAnti, term("labelB", "Exists", &[], "zone")),
                ],
                nodes: vec![
                    ("nodeA", R1Z1A),
                    ("nodeB", R1Z2B),
                    (
                        "nodeC",
                        &[("region", "r1"), ("zone", "z3"), ("hostname", "nodeC")],
                    ),
                ],
                pre_filter: ok,
                want: vec![EXIST, EXIST, None],
            },
            FilterCase {
                name: "affinity: one pod matches all terms, both nodes share the domains",
                pod: pod()
                    .pod_affinity(Required, term("foo", "Exists", &[], "region"))
                    .pod_affinity(Required, term("bar", "Exists", &[], "zone")),
                pods: vec![with_labels(pod(), &[("foo", ""), ("bar", "")]).node_name("nodeA")],
                nodes: vec![("nodeA", R1Z1A), ("nodeB", R1Z1B)],
                pre_filter: ok,
                want: vec![None, None],
            },
            FilterCase {
                name: "affinity: all terms must be matched by the same pod",
                pod: pod()
                    .pod_affinity(Required, term("foo", "Exists", &[], "region"))
                    .pod_affinity(Required, term("bar", "Exists", &[], "zone")),
                pods: vec![
                    with_labels(pod(), &[("foo", "")]).node_name("nodeA"),
                    with_labels(pod(), &[("bar", "")]).node_name("nodeB"),
                ],
                nodes: vec![("nodeA", R1Z1A), ("nodeB", R1Z2B)],
                pre_filter: ok,
                want: vec![AFF, AFF],
            },
        ]);
    }

    #[test]
    fn filter_without_prefilter_state_is_an_error() {
        let pod = pod().build_info();
        let node = NodeInfo::new(Arc::new(NodeBuilder::new("n").build_spec()));
        let st = InterPodAffinity::default().filter(&CycleState::default(), &pod, &node);
        assert_eq!(st.code, Code::Error);
        assert!(st.message().contains("PreFilterInterPodAffinity"), "{st}");
    }

    // ---- Scoring (upstream scoring_test.go) ----

    fn security(s: &str) -> PodBuilder {
        pod().label("security", s)
    }

    fn stay_with_s1_in_region(p: PodBuilder) -> PodBuilder {
        p.pod_affinity(Preferred(5), term("security", "In", &["S1"], "region"))
    }

    fn stay_with_s2_in_region(p: PodBuilder) -> PodBuilder {
        p.pod_affinity(Preferred(6), term("security", "In", &["S2"], "region"))
    }

    fn away_from_s1_in_az(p: PodBuilder) -> PodBuilder {
        p.pod_affinity(PreferredAnti(5), term("security", "In", &["S1"], "az"))
    }

    fn away_from_s2_in_az(p: PodBuilder) -> PodBuilder {
        p.pod_affinity(PreferredAnti(5), term("security", "In", &["S2"], "az"))
    }

    fn stay_with_s1_in_region_away_from_s2_in_az(p: PodBuilder) -> PodBuilder {
        p.pod_affinity(Preferred(8), term("security", "In", &["S1"], "region"))
            .pod_affinity(PreferredAnti(5), term("security", "In", &["S2"], "az"))
    }

    /// `security Exists, wrongkey DoesNotExist` at `region`.
    fn security_exists_term() -> PodAffinityTerm {
        let mut t = term("security", "Exists", &[], "region");
        t.label_selector
            .as_mut()
            .unwrap()
            .match_expressions
            .as_mut()
            .unwrap()
            .push(LabelSelectorRequirement {
                key: "wrongkey".into(),
                operator: "DoesNotExist".into(),
                values: None,
            });
        t
    }

    fn affinity3(p: PodBuilder) -> PodBuilder {
        let mut first = term("security", "NotIn", &["S1"], "region");
        first
            .label_selector
            .as_mut()
            .unwrap()
            .match_expressions
            .as_mut()
            .unwrap()
            .push(LabelSelectorRequirement {
                key: "security".into(),
                operator: "In".into(),
                values: Some(vec!["S2".into()]),
            });
        p.pod_affinity(Preferred(8), first)
            .pod_affinity(Preferred(2), security_exists_term())
    }

    fn hard_affinity(p: PodBuilder) -> PodBuilder {
        p.pod_affinity(
            Required,
            term("security", "In", &["S1", "value2"], "region"),
        )
        .pod_affinity(Required, security_exists_term())
    }

    /// `security In [S1]` at `region` in namespaces [subteam2.team2] or
    /// team1's.
    fn ns_selector_term() -> PodAffinityTerm {
        let mut t = term("security", "In", &["S1"], "region");
        t.namespaces = Some(vec!["subteam2.team2".into()]);
        t.namespace_selector = Some(team_in("team1"));
        t
    }

    struct ScoreCase {
        name: &'static str,
        pod: PodBuilder,
        pods: Vec<PodBuilder>,
        nodes: Vec<(&'static str, &'static [(&'static str, &'static str)])>,
        args: InterPodAffinityArgs,
        /// `None`: PreScore returns Skip.
        want: Option<Vec<i64>>,
    }

    fn run_score_cases(cases: Vec<ScoreCase>) {
        for c in cases {
            let pl = InterPodAffinity::new(c.args).expect("valid args");
            let lister = cluster(&c.nodes, c.pods);
            let pod = c.pod.build_info();
            let mut state = CycleState::default();
            let st = pl.pre_score(&mut state, &pod, &lister.nodes, &lister);
            let Some(want) = c.want else {
                assert_eq!(st.code, Code::Skip, "{}: PreScore {st}", c.name);
                continue;
            };
            assert_eq!(st, Status::success(), "{}", c.name);
            let mut scores: Vec<i64> = lister
                .nodes
                .iter()
                .map(|n| pl.score(&state, &pod, n).expect("state written"))
                .collect();
            pl.normalize_score(&state, &pod, &mut scores);
            assert_eq!(scores, want, "{}", c.name);
        }
    }

    const AZ1: &[(&str, &str)] = &[("az", "az1")];
    const AZ2: &[(&str, &str)] = &[("az", "az2")];

    /// upstream scoring_test.go `TestPreferredAffinity`.
    #[test]
    fn preferred_affinity_scores_match_upstream() {
        let d = InterPodAffinityArgs::default();
        let three = || vec![("node1", CHINA), ("node2", INDIA), ("node3", AZ1)];
        let five = || {
            vec![
                ("node1", CHINA),
                ("node2", INDIA),
                ("node3", CHINA),
                ("node4", CHINA),
                ("node5", INDIA),
            ]
        };
        let ns_pods = |third_ns: &'static str| {
            vec![
                security("S1")
                    .namespace("subteam1.team1")
                    .node_name("node1"),
                security("S1")
                    .namespace("subteam1.team1")
                    .node_name("node1"),
                security("S1").namespace(third_ns).node_name("node1"),
                security("S1")
                    .namespace("subteam2.team1")
                    .node_name("node2"),
            ]
        };
        run_score_cases(vec![
            ScoreCase {
                name: "no affinity anywhere: Skip",
                pod: security("S1"),
                pods: vec![],
                nodes: three(),
                args: d,
                want: None,
            },
            ScoreCase {
                name: "affinity: the region holding a matching pod scores high",
                pod: stay_with_s1_in_region(security("S1")),
                pods: vec![
                    security("S1").node_name("node1"),
                    security("S2").node_name("node2"),
                    security("S1").node_name("node3"),
                ],
                nodes: three(),
                args: d,
                want: Some(vec![100, 0, 0]),
            },
            ScoreCase {
                name: "affinity: every node of the matching region scores the same",
                pod: stay_with_s1_in_region(pod()),
                pods: vec![security("S1").node_name("node1")],
                nodes: vec![("node1", CHINA), ("node2", CHINA_AZ1), ("node3", INDIA)],
                args: d,
                want: Some(vec![100, 100, 0]),
            },
            ScoreCase {
                name: "affinity: the region with more matching pods wins",
                pod: stay_with_s2_in_region(security("S1")),
                pods: ["node1", "node1", "node2", "node3", "node4", "node5"]
                    .into_iter()
                    .map(|n| security("S2").node_name(n))
                    .collect(),
                nodes: five(),
                args: d,
                want: Some(vec![100, 0, 100, 100, 0]),
            },
            ScoreCase {
                name: "affinity: different operators, partial matches (2 vs 10)",
                pod: affinity3(security("S1")),
                pods: vec![
                    security("S1").node_name("node1"),
                    security("S2").node_name("node2"),
                    security("S1").node_name("node3"),
                ],
                nodes: three(),
                args: d,
                want: Some(vec![20, 100, 0]),
            },
            ScoreCase {
                name: "affinity symmetry: existing pods' preferred terms",
                pod: security("S2"),
                pods: vec![
                    stay_with_s1_in_region(security("S1")).node_name("node1"),
                    stay_with_s2_in_region(security("S2")).node_name("node2"),
                ],
                nodes: three(),
                args: d,
                want: Some(vec![0, 100, 0]),
            },
            ScoreCase {
                name: "affinity symmetry with a namespace selector",
                pod: security("S1").namespace("subteam1.team1"),
                pods: vec![
                    security("S1")
                        .node_name("node1")
                        .pod_affinity(Preferred(5), ns_selector_term()),
                    stay_with_s2_in_region(security("S2")).node_name("node2"),
                ],
                nodes: three(),
                args: d,
                want: Some(vec![100, 0, 0]),
            },
            ScoreCase {
                name: "anti-affinity symmetry with a namespace selector",
                pod: security("S1").namespace("subteam1.team1"),
                pods: vec![
                    security("S1")
                        .node_name("node1")
                        .pod_affinity(PreferredAnti(5), ns_selector_term()),
                    stay_with_s2_in_region(security("S2")).node_name("node2"),
                ],
                nodes: three(),
                args: d,
                want: Some(vec![0, 100, 100]),
            },
            ScoreCase {
                name: "affinity symmetry: existing pods' required terms (hardPodAffinityWeight)",
                pod: security("S1"),
                pods: vec![
                    hard_affinity(security("S1")).node_name("node1"),
                    hard_affinity(security("S2")).node_name("node2"),
                ],
                nodes: three(),
                args: d,
                want: Some(vec![100, 100, 0]),
            },
            ScoreCase {
                name: "anti-affinity: the node holding a matching pod scores low",
                pod: away_from_s1_in_az(security("S1")),
                pods: vec![
                    security("S1").node_name("node1"),
                    security("S2").node_name("node2"),
                ],
                nodes: vec![("node1", AZ1), ("node2", CHINA)],
                args: d,
                want: Some(vec![0, 100]),
            },
            ScoreCase {
                name: "anti-affinity: a node without the topology key is not penalised",
                pod: away_from_s1_in_az(security("S1")),
                pods: vec![
                    security("S1").node_name("node1"),
                    security("S1").node_name("node2"),
                ],
                nodes: vec![("node1", AZ1), ("node2", CHINA)],
                args: d,
                want: Some(vec![0, 100]),
            },
            ScoreCase {
                name: "anti-affinity: more matching pods, lower score",
                pod: away_from_s1_in_az(security("S1")),
                pods: vec![
                    security("S1").node_name("node1"),
                    security("S1").node_name("node1"),
                    security("S2").node_name("node2"),
                ],
                nodes: vec![("node1", AZ1), ("node2", INDIA)],
                args: d,
                want: Some(vec![0, 100]),
            },
            ScoreCase {
                name: "anti-affinity symmetry",
                pod: security("S2"),
                pods: vec![
                    away_from_s2_in_az(security("S1")).node_name("node1"),
                    away_from_s1_in_az(security("S2")).node_name("node2"),
                ],
                nodes: vec![("node1", AZ1), ("node2", AZ2)],
                args: d,
                want: Some(vec![0, 100]),
            },
            ScoreCase {
                name: "affinity and anti-affinity together",
                pod: stay_with_s1_in_region_away_from_s2_in_az(security("S1")),
                pods: vec![
                    security("S1").node_name("node1"),
                    security("S1").node_name("node2"),
                ],
                nodes: vec![("node1", CHINA), ("node2", AZ1)],
                args: d,
                want: Some(vec![100, 0]),
            },
            ScoreCase {
                name: "same region preferred, same az avoided, pods of one service",
                pod: stay_with_s1_in_region_away_from_s2_in_az(security("S1")),
                pods: [
                    "node1", "node1", "node2", "node3", "node3", "node4", "node5",
                ]
                .into_iter()
                .map(|n| security("S1").node_name(n))
                .collect(),
                nodes: vec![
                    ("node1", CHINA_AZ1),
                    ("node2", INDIA),
                    ("node3", CHINA),
                    ("node4", CHINA),
                    ("node5", INDIA),
                ],
                args: d,
                want: Some(vec![100, 0, 100, 100, 0]),
            },
            ScoreCase {
                name: "affinity, anti-affinity and both symmetries (8, -5, 8, -5)",
                pod: stay_with_s1_in_region_away_from_s2_in_az(security("S1")),
                pods: vec![
                    security("S1").node_name("node1"),
                    security("S2").node_name("node2"),
                    stay_with_s1_in_region_away_from_s2_in_az(pod()).node_name("node3"),
                    away_from_s1_in_az(pod()).node_name("node4"),
                ],
                nodes: vec![
                    ("node1", CHINA),
                    ("node2", AZ1),
                    ("node3", INDIA),
                    ("node4", AZ2),
                ],
                args: d,
                want: Some(vec![100, 0, 100, 0]),
            },
            ScoreCase {
                name: "equal scores everywhere normalize to 0 (upstream issue 82796)",
                pod: security("S1"),
                pods: vec![
                    security("S1").node_name("node1"),
                    stay_with_s1_in_region_away_from_s2_in_az(pod()).node_name("node2"),
                ],
                nodes: vec![("node1", CHINA), ("node2", CHINA)],
                args: d,
                want: Some(vec![0, 0]),
            },
            ScoreCase {
                name: "incoming affinity with a namespaceSelector",
                pod: security("S1")
                    .namespace("subteam1.team1")
                    .pod_affinity(Preferred(5), ns_selector_term()),
                pods: ns_pods("subteam1.team2"),
                nodes: vec![("node1", CHINA), ("node2", INDIA)],
                args: d,
                want: Some(vec![100, 0]),
            },
            ScoreCase {
                name: "incoming affinity with namespaceSelector and namespaces",
                pod: security("S1")
                    .namespace("subteam1.team1")
                    .pod_affinity(Preferred(5), ns_selector_term()),
                pods: ns_pods("subteam2.team2"),
                nodes: vec![("node1", CHINA), ("node2", INDIA)],
                args: d,
                want: Some(vec![100, 0]),
            },
            ScoreCase {
                name: "incoming anti-affinity with a namespaceSelector",
                pod: security("S1")
                    .namespace("subteam1.team1")
                    .pod_affinity(PreferredAnti(5), ns_selector_term()),
                pods: ns_pods("subteam1.team2"),
                nodes: vec![("node1", CHINA), ("node2", INDIA)],
                args: d,
                want: Some(vec![0, 100]),
            },
            ScoreCase {
                name: "ignorePreferredTermsOfExistingPods: Skip",
                pod: security("S2"),
                pods: vec![
                    stay_with_s1_in_region_away_from_s2_in_az(security("S1")).node_name("node1"),
                    stay_with_s2_in_region(security("S2")).node_name("node2"),
                ],
                nodes: vec![("node1", CHINA), ("node2", INDIA)],
                args: InterPodAffinityArgs {
                    ignore_preferred_terms_of_existing_pods: true,
                    ..d
                },
                want: None,
            },
            ScoreCase {
                name: "existing pods' preferred terms count by default",
                pod: security("S2"),
                pods: vec![
                    stay_with_s1_in_region_away_from_s2_in_az(security("S1")).node_name("node1"),
                    stay_with_s2_in_region(security("S2")).node_name("node2"),
                ],
                nodes: vec![("node1", CHINA), ("node2", INDIA)],
                args: d,
                want: Some(vec![0, 100]),
            },
            ScoreCase {
                name: "no nodes: Skip",
                pod: security("S2"),
                pods: vec![],
                nodes: vec![],
                args: d,
                want: None,
            },
        ]);
    }

    /// upstream scoring_test.go `TestPreferredAffinityWithHardPodAffinitySymmetricWeight`.
    #[test]
    fn hard_pod_affinity_weight_matches_upstream() {
        let hard = |p: PodBuilder| {
            let mut t = term("service", "In", &["S1"], "region");
            t.namespaces = Some(vec!["default".into(), "subteam2.team2".into()]);
            t.namespace_selector = Some(team_in("team1"));
            p.pod_affinity(Required, t)
        };
        let case = |name, ns: &str, weight, want| ScoreCase {
            name,
            pod: pod().namespace(ns).label("service", "S1"),
            pods: vec![
                hard(pod()).node_name("node1"),
                hard(pod()).node_name("node2"),
            ],
            nodes: vec![("node1", CHINA), ("node2", INDIA), ("node3", AZ1)],
            args: InterPodAffinityArgs {
                hard_pod_affinity_weight: weight,
                ..InterPodAffinityArgs::default()
            },
            want,
        };
        run_score_cases(vec![
            case("default weight", "default", 1, Some(vec![100, 100, 0])),
            case("zero weight: Skip", "default", 0, None),
            case("no matching namespace: Skip", "subteam1.team2", 1, None),
            case(
                "matching namespaceSelector",
                "subteam1.team1",
                1,
                Some(vec![100, 100, 0]),
            ),
            case(
                "matching namespaces",
                "subteam2.team2",
                1,
                Some(vec![100, 100, 0]),
            ),
        ]);
    }

    #[test]
    fn hard_pod_affinity_weight_scales_the_symmetric_term() {
        // Raw sums: an existing pod's required term matched by the incoming
        // pod adds hardPodAffinityWeight; its preferred anti-affinity term
        // (weight 5) subtracts 5. With weight 10 node1 is ahead; with 1 it
        // falls behind node2 (0).
        let existing = || {
            pod()
                .pod_affinity(Required, term("app", "In", &["web"], "region"))
                .pod_affinity(PreferredAnti(5), term("app", "In", &["web"], "region"))
        };
        for (weight, want) in [(10, vec![100, 0]), (1, vec![0, 100])] {
            let lister = cluster(
                &[("node1", CHINA), ("node2", INDIA)],
                vec![existing().node_name("node1")],
            );
            let pl = InterPodAffinity::new(InterPodAffinityArgs {
                hard_pod_affinity_weight: weight,
                ..InterPodAffinityArgs::default()
            })
            .unwrap();
            let incoming = pod().label("app", "web").build_info();
            let mut state = CycleState::default();
            assert!(
                pl.pre_score(&mut state, &incoming, &lister.nodes, &lister)
                    .is_success()
            );
            let raw: Vec<i64> = lister
                .nodes
                .iter()
                .map(|n| pl.score(&state, &incoming, n).unwrap())
                .collect();
            assert_eq!(raw, [i64::from(weight) - 5, 0], "weight {weight}");
            let mut s = raw;
            pl.normalize_score(&state, &incoming, &mut s);
            assert_eq!(s, want, "weight {weight}");
        }
    }

    #[test]
    fn normalize_is_min_max_with_upstream_float_truncation() {
        let mut s = [-5, 0, 10, 1];
        normalize(&mut s);
        // (s+5)/15*100: 0, 33.33, 100, 40.000000000000001
        assert_eq!(s, [0, 33, 100, 40]);
        let mut s = [2, 10, 0];
        normalize(&mut s);
        assert_eq!(s, [20, 100, 0]);
        let mut s = [-3, -3];
        normalize(&mut s);
        assert_eq!(s, [0, 0]);
        let mut s: [i64; 0] = [];
        normalize(&mut s);
    }

    #[test]
    fn args_decode_with_defaults_and_range_errors() {
        assert_eq!(
            InterPodAffinityArgs::decode(None).unwrap(),
            InterPodAffinityArgs {
                hard_pod_affinity_weight: 1,
                ignore_preferred_terms_of_existing_pods: false
            }
        );
        let v = serde_json::json!({"kind": "InterPodAffinityArgs",
            "hardPodAffinityWeight": 0, "ignorePreferredTermsOfExistingPods": true});
        assert_eq!(
            InterPodAffinityArgs::decode(Some(&v)).unwrap(),
            InterPodAffinityArgs {
                hard_pod_affinity_weight: 0,
                ignore_preferred_terms_of_existing_pods: true
            }
        );
        for bad in [101, -1] {
            let v = serde_json::json!({ "hardPodAffinityWeight": bad });
            assert_eq!(
                InterPodAffinityArgs::decode(Some(&v)).unwrap_err(),
                format!("hardPodAffinityWeight: Invalid value: {bad}: not in valid range [0, 100]")
            );
        }
        let v = serde_json::json!({ "hardPodAffinityWeight": "high" });
        let e = InterPodAffinityArgs::decode(Some(&v)).unwrap_err();
        assert!(e.starts_with("hardPodAffinityWeight: "), "{e}");
        let v = serde_json::json!({ "hardPodAffinityWieght": 2 });
        let e = InterPodAffinityArgs::decode(Some(&v)).unwrap_err();
        assert!(e.contains("unknown field `hardPodAffinityWieght`"), "{e}");
        assert!(
            InterPodAffinity::new(InterPodAffinityArgs {
                hard_pod_affinity_weight: 200,
                ..InterPodAffinityArgs::default()
            })
            .is_err()
        );
    }

    #[test]
    fn registers_for_node_and_assigned_pod_events() {
        assert_eq!(
            InterPodAffinity::default().events_to_register(),
            [
                ClusterEvent::NodeAdded,
                ClusterEvent::NodeLabelChanged,
                ClusterEvent::AssignedPodAdded,
                ClusterEvent::AssignedPodDeleted,
            ]
        );
    }

    #[test]
    fn large_clusters_count_in_parallel_with_the_same_result() {
        // Above PARALLEL_MIN_NODES the passes run in chunks; the outcome
        // must equal a sequential pass over the same pods.
        let n = crate::framework::parallel::PARALLEL_PASS_MIN_NODES
            + crate::framework::parallel::PASS_CHUNK / 2;
        let names: Vec<String> = (0..n).map(|i| format!("n{i:05}")).collect();
        let zones = ["a", "b", "c"];
        let mut nodes: Vec<NodeInfo> = names
            .iter()
            .enumerate()
            .map(|(i, name)| {
                NodeInfo::new(Arc::new(
                    NodeBuilder::new(name)
                        .label("zone", zones[i % 3])
                        .build_spec(),
                ))
            })
            .collect();
        // Zone a holds web pods; zone b a pod that avoids web pods.
        for i in (0..n).step_by(97) {
            let p = if i % 3 == 1 {
                pod().pod_affinity(RequiredAnti, term("app", "In", &["web"], "zone"))
            } else {
                pod().label("app", "web")
            };
            assert!(nodes[i].add_pod(Arc::new(p.node_name(&names[i]).build_info())));
        }
        let lister = FakeLister::new(nodes);
        let incoming = pod()
            .label("app", "web")
            .pod_affinity(Required, term("app", "In", &["web"], "zone"))
            .pod_affinity(Preferred(10), term("app", "In", &["web"], "zone"))
            .build_info();
        let pl = InterPodAffinity::default();
        let mut state = CycleState::default();
        assert!(pl.pre_filter(&mut state, &incoming, &lister).1.is_success());
        let mut sequential = RequiredAffinityState::new(&incoming, &lister);
        sequential.count_nodes(&incoming, lister.nodes.iter().map(|n| &**n), &lister);
        assert_eq!(
            state.read::<RequiredAffinityState>(PRE_FILTER_KEY),
            Some(&sequential)
        );
        let by_zone = |z: &str| {
            lister
                .nodes
                .iter()
                .find(|n| n.spec.labels["zone"] == z)
                .unwrap()
        };
        assert!(pl.filter(&state, &incoming, by_zone("a")).is_success());
        assert_eq!(
            pl.filter(&state, &incoming, by_zone("b")).code,
            Code::UnschedulableAndUnresolvable,
            "no web pod in zone b"
        );
        assert!(
            pl.pre_score(&mut state, &incoming, &lister.nodes, &lister)
                .is_success()
        );
        let seq = preferred_scores(&incoming, lister.nodes.iter().map(|n| &**n), 1, &lister);
        assert_eq!(state.read::<TopologyCounts>(PRE_SCORE_KEY), Some(&seq));
        assert!(seq.get("zone", "a") > 0);
    }
}
