//! Inter-pod affinity (`spec.affinity.podAffinity` / `podAntiAffinity`):
//! terms compiled once per pod, and the counting and checking logic of
//! upstream's `InterPodAffinity` plugin
//! (`pkg/scheduler/framework/plugins/interpodaffinity/{filtering,scoring}.go`)
//! as pure functions over `&NodeInfo`s, so the scheduler plugin's Filter and
//! its bind check (run by the coordinator's bind arbiter) run the same code.
//!
//! # Terms
//! A [`AffinityTerm`] selects **pods** (not nodes), upstream
//! `framework.AffinityTerm`:
//! - `labelSelector`: absent → the term matches no pod; `{}` → every pod.
//!   `matchLabelKeys` / `mismatchLabelKeys` are merged in with the owning
//!   pod's label values (`key In [v]` / `key NotIn [v]`; keys the pod lacks
//!   are ignored; nothing is merged into an absent selector), as
//!   kube-apiserver does at pod creation (`applyMatchLabelKeysAndMismatchLabelKeys`).
//!   Merging again a term the apiserver already merged adds nothing.
//! - namespaces: a pod's namespace must be listed in `namespaces` **or** its
//!   Namespace's labels must match `namespaceSelector`. When both are unset
//!   the term means the owning pod's own namespace. `namespaceSelector: {}`
//!   selects every namespace; a non-empty selector never selects a
//!   namespace the lister does not know.
//! - `topologyKey`: the node label whose value defines the domain ("same
//!   zone"); required.
//!
//! # Required terms (Filter)
//! [`RequiredAffinityState`] holds upstream's three topology-pair counts:
//! existing pods whose required anti-affinity terms match the incoming pod,
//! existing pods matching **all** of the incoming pod's required affinity
//! terms, and existing pods matching each of its required anti-affinity
//! terms. [`RequiredAffinityState::check`] then decides one node.
//!
//! # Preferred terms (Score)
//! [`preferred_scores`] sums term weights per topology pair: the incoming
//! pod's preferred (anti-)affinity against existing pods, and existing
//! pods' preferred (anti-)affinity and required affinity
//! (`hardPodAffinityWeight`) against the incoming pod.

use std::collections::{BTreeMap, HashMap};

use k8s_openapi::api::core::v1::{Affinity, PodAffinityTerm, WeightedPodAffinityTerm};

use crate::framework::SharedLister;
use crate::label_selector::LabelSelector;
use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;
use crate::selector::{Operator, Requirement};

/// Filter reason when the incoming pod's required pod affinity is not met
/// (upstream `ErrReasonAffinityRulesNotMatch`).
pub const REASON_AFFINITY_RULES_NOT_MATCH: &str = "node(s) didn't match pod affinity rules";
/// Filter reason when the incoming pod's required anti-affinity is violated
/// (upstream `ErrReasonAntiAffinityRulesNotMatch`).
pub const REASON_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't match pod anti-affinity rules";
/// Filter reason when an existing pod's required anti-affinity would be
/// violated (upstream `ErrReasonExistingAntiAffinityRulesNotMatch`).
pub const REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH: &str =
    "node(s) didn't satisfy existing pods anti-affinity rules";

/// Where namespace labels come from (for `namespaceSelector`).
pub trait NamespaceLabels {
    /// `metadata.labels` of the Namespace `namespace`; `None` when unknown.
    fn labels_of(&self, namespace: &str) -> Option<&BTreeMap<String, String>>;
}

impl<T: SharedLister + ?Sized> NamespaceLabels for T {
    fn labels_of(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.namespace_labels(namespace)
    }
}

impl NamespaceLabels for HashMap<String, BTreeMap<String, String>> {
    fn labels_of(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.get(namespace)
    }
}

impl NamespaceLabels for BTreeMap<String, BTreeMap<String, String>> {
    fn labels_of(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.get(namespace)
    }
}

/// A compiled `PodAffinityTerm` (upstream `framework.AffinityTerm`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AffinityTerm {
    /// `labelSelector` with `matchLabelKeys` / `mismatchLabelKeys` merged
    /// in; `None` (the field was absent) matches no pod.
    pub selector: Option<LabelSelector>,
    /// Namespaces whose pods the term considers: `namespaces`, or the owning
    /// pod's namespace when both `namespaces` and `namespaceSelector` are unset.
    pub namespaces: Vec<String>,
    /// `namespaceSelector` over Namespace labels: `None` selects no
    /// namespace, an empty selector every namespace.
    pub namespace_selector: Option<LabelSelector>,
    /// `topologyKey`: node label defining the topology domain.
    pub topology_key: String,
}

impl AffinityTerm {
    /// Whether a pod in `namespace` with `labels` matches the term (upstream
    /// `AffinityTerm.Matches`): its namespace is listed or selected, and its
    /// labels match the selector.
    #[must_use]
    pub fn matches<N: NamespaceLabels + ?Sized>(
        &self,
        namespace: &str,
        labels: &BTreeMap<String, String>,
        ns: &N,
    ) -> bool {
        let Some(selector) = &self.selector else {
            return false;
        };
        let namespace_ok = self.namespaces.iter().any(|n| n == namespace)
            || match &self.namespace_selector {
                None => false,
                Some(s) if s.is_empty() => true,
                Some(s) => ns.labels_of(namespace).is_some_and(|l| s.matches(l)),
            };
        namespace_ok && selector.matches(labels)
    }

    /// [`AffinityTerm::matches`] for a compiled pod.
    #[must_use]
    pub fn matches_pod<N: NamespaceLabels + ?Sized>(&self, pod: &PodInfo, ns: &N) -> bool {
        self.matches(&pod.key.namespace, &pod.labels, ns)
    }
}

/// A compiled `WeightedPodAffinityTerm`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WeightedAffinityTerm {
    /// `weight`, 1..=100.
    pub weight: i64,
    /// `podAffinityTerm`.
    pub term: AffinityTerm,
}

/// A pod's inter-pod affinity, compiled once (upstream `PodInfo`'s
/// `Required*Terms` / `Preferred*Terms`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PodAffinity {
    /// `podAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_affinity: Vec<AffinityTerm>,
    /// `podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution`.
    pub required_anti_affinity: Vec<AffinityTerm>,
    /// `podAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_affinity: Vec<WeightedAffinityTerm>,
    /// `podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution`.
    pub preferred_anti_affinity: Vec<WeightedAffinityTerm>,
}

/// A malformed pod affinity term, with its field path.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{field}: {message}")]
pub struct PodAffinityError {
    /// Path, e.g.
    /// `spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].topologyKey`.
    pub field: String,
    /// What is wrong.
    pub message: String,
}

const POD_AFFINITY: &str = "spec.affinity.podAffinity";
const POD_ANTI_AFFINITY: &str = "spec.affinity.podAntiAffinity";
const REQUIRED: &str = "requiredDuringSchedulingIgnoredDuringExecution";
const PREFERRED: &str = "preferredDuringSchedulingIgnoredDuringExecution";

impl PodAffinity {
    /// Compiles the pod (anti-)affinity of a pod in `namespace` with
    /// `labels`. `Ok(None)` when it has no term at all (most pods).
    ///
    /// # Errors
    /// [`PodAffinityError`] naming the field: an empty `topologyKey`, a
    /// preferred `weight` outside 1..=100, a malformed `labelSelector` or
    /// `namespaceSelector`.
    pub fn compile(
        affinity: &Affinity,
        namespace: &str,
        labels: &BTreeMap<String, String>,
    ) -> Result<Option<Self>, PodAffinityError> {
        let mut out = PodAffinity::default();
        let compile_required = |terms: Option<&Vec<PodAffinityTerm>>, base: &str| {
            terms
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, t)| {
                    compile_term(t, namespace, labels, &format!("{base}.{REQUIRED}[{i}]"))
                })
                .collect::<Result<Vec<_>, _>>()
        };
        let compile_preferred = |terms: Option<&Vec<WeightedPodAffinityTerm>>, base: &str| {
            terms
                .into_iter()
                .flatten()
                .enumerate()
                .map(|(i, w)| {
                    let field = format!("{base}.{PREFERRED}[{i}]");
                    if !(1..=100).contains(&w.weight) {
                        return Err(PodAffinityError {
                            field: format!("{field}.weight"),
                            message: format!("{} must be in the range 1-100", w.weight),
                        });
                    }
                    Ok(WeightedAffinityTerm {
                        weight: i64::from(w.weight),
                        term: compile_term(
                            &w.pod_affinity_term,
                            namespace,
                            labels,
                            &format!("{field}.podAffinityTerm"),
                        )?,
                    })
                })
                .collect::<Result<Vec<_>, _>>()
        };
        if let Some(a) = &affinity.pod_affinity {
            out.required_affinity = compile_required(
                a.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                POD_AFFINITY,
            )?;
            out.preferred_affinity = compile_preferred(
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
                POD_AFFINITY,
            )?;
        }
        if let Some(a) = &affinity.pod_anti_affinity {
            out.required_anti_affinity = compile_required(
                a.required_during_scheduling_ignored_during_execution
                    .as_ref(),
                POD_ANTI_AFFINITY,
            )?;
            out.preferred_anti_affinity = compile_preferred(
                a.preferred_during_scheduling_ignored_during_execution
                    .as_ref(),
                POD_ANTI_AFFINITY,
            )?;
        }
        Ok((!out.is_empty()).then_some(out))
    }

    /// Whether there is no term at all.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.required_affinity.is_empty()
            && self.required_anti_affinity.is_empty()
            && !self.has_preferred_terms()
    }

    /// Whether there is a preferred affinity or anti-affinity term.
    #[must_use]
    pub fn has_preferred_terms(&self) -> bool {
        !self.preferred_affinity.is_empty() || !self.preferred_anti_affinity.is_empty()
    }

    /// Whether there is a required affinity or anti-affinity term.
    #[must_use]
    pub fn has_required_terms(&self) -> bool {
        !self.required_affinity.is_empty() || !self.required_anti_affinity.is_empty()
    }
}

/// Adds `key <op> [value]` unless the selector already has exactly it.
fn merge_label_key(sel: &mut LabelSelector, key: &str, op: Operator) {
    let r = Requirement {
        key: key.to_owned(),
        op,
    };
    if !sel.requirements.contains(&r) {
        sel.requirements.push(r);
    }
}

fn compile_term(
    t: &PodAffinityTerm,
    namespace: &str,
    labels: &BTreeMap<String, String>,
    field: &str,
) -> Result<AffinityTerm, PodAffinityError> {
    let sel_err = |e: crate::label_selector::LabelSelectorError| PodAffinityError {
        field: e.field,
        message: e.message,
    };
    if t.topology_key.is_empty() {
        return Err(PodAffinityError {
            field: format!("{field}.topologyKey"),
            message: "required value: can not be empty".into(),
        });
    }
    let mut selector = t
        .label_selector
        .as_ref()
        .map(|s| LabelSelector::compile(s, &format!("{field}.labelSelector")))
        .transpose()
        .map_err(sel_err)?;
    if let Some(sel) = &mut selector {
        for key in t.match_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                merge_label_key(sel, key, Operator::In(vec![v.clone()]));
            }
        }
        for key in t.mismatch_label_keys.iter().flatten() {
            if let Some(v) = labels.get(key) {
                merge_label_key(sel, key, Operator::NotIn(vec![v.clone()]));
            }
        }
    }
    let namespace_selector = t
        .namespace_selector
        .as_ref()
        .map(|s| LabelSelector::compile(s, &format!("{field}.namespaceSelector")))
        .transpose()
        .map_err(sel_err)?;
    let listed = t.namespaces.clone().unwrap_or_default();
    let namespaces = if listed.is_empty() && namespace_selector.is_none() {
        vec![namespace.to_owned()]
    } else {
        listed
    };
    Ok(AffinityTerm {
        selector,
        namespaces,
        namespace_selector,
        topology_key: t.topology_key.clone(),
    })
}

/// Counts (or summed weights) per topology pair (`topologyKey`, node label
/// value), upstream `topologyToMatchedTermCount` / `scoreMap`. Entries are
/// kept even when they sum to 0, so [`TopologyCounts::is_empty`] means "no
/// term matched anywhere".
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopologyCounts {
    by_key: HashMap<String, HashMap<String, i64>>,
}

impl TopologyCounts {
    /// Adds `n` to the pair (`key`, `value`).
    pub fn add(&mut self, key: &str, value: &str, n: i64) {
        let values = match self.by_key.get_mut(key) {
            Some(v) => v,
            None => self.by_key.entry(key.to_owned()).or_default(),
        };
        match values.get_mut(value) {
            Some(c) => *c += n,
            None => {
                values.insert(value.to_owned(), n);
            }
        }
    }

    /// Adds `n` (may be negative) to (`key`, `value`), dropping a pair that
    /// reaches 0 and a key left without pairs: kept this way, counts of
    /// matching pods stay equal to a fresh count, which holds only
    /// positive pairs.
    pub(crate) fn adjust(&mut self, key: &str, value: &str, n: i64) {
        if n == 0 {
            return;
        }
        self.add(key, value, n);
        if let Some(values) = self.by_key.get_mut(key) {
            if values.get(value) == Some(&0) {
                values.remove(value);
            }
            if values.is_empty() {
                self.by_key.remove(key);
            }
        }
    }

    /// Adds `n` to (`key`, the node's value of label `key`) when the node
    /// has that label.
    pub fn add_for_node(&mut self, node: &NodeInfo, key: &str, n: i64) {
        if let Some(value) = node.spec.labels.get(key) {
            self.add(key, value, n);
        }
    }

    /// The count of (`key`, `value`) (0 when absent).
    #[must_use]
    pub fn get(&self, key: &str, value: &str) -> i64 {
        self.by_key
            .get(key)
            .and_then(|v| v.get(value))
            .copied()
            .unwrap_or(0)
    }

    /// Whether no pair was ever added.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.by_key.is_empty()
    }

    /// Adds every pair of `other`.
    pub fn merge(&mut self, other: TopologyCounts) {
        if self.by_key.is_empty() {
            self.by_key = other.by_key;
            return;
        }
        for (key, values) in other.by_key {
            let mine = self.by_key.entry(key).or_default();
            for (value, n) in values {
                *mine.entry(value).or_default() += n;
            }
        }
    }

    /// The sum, over this map's topology keys the node has as labels, of the
    /// count at the node's value (upstream InterPodAffinity `Score`).
    #[must_use]
    pub fn node_sum(&self, node: &NodeInfo) -> i64 {
        let labels = &node.spec.labels;
        self.by_key
            .iter()
            .filter_map(|(key, values)| labels.get(key).and_then(|v| values.get(v)))
            .sum()
    }

    /// Whether some pair with a positive count is one of the node's labels.
    #[must_use]
    pub fn any_positive_on(&self, node: &NodeInfo) -> bool {
        let labels = &node.spec.labels;
        self.by_key.iter().any(|(key, values)| {
            labels
                .get(key)
                .and_then(|v| values.get(v))
                .is_some_and(|c| *c > 0)
        })
    }
}

/// Why a node fails the required inter-pod (anti-)affinity of a placement.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum AffinityViolation {
    /// The incoming pod's required affinity is not met (upstream code
    /// `UnschedulableAndUnresolvable`: preemption cannot add pods).
    PodAffinity,
    /// The incoming pod's required anti-affinity matches pods in the node's
    /// domain (upstream code `Unschedulable`).
    PodAntiAffinity,
    /// An existing pod's required anti-affinity matches the incoming pod
    /// (upstream code `Unschedulable`).
    ExistingPodsAntiAffinity,
}

impl AffinityViolation {
    /// The upstream Filter reason text.
    #[must_use]
    pub const fn reason(self) -> &'static str {
        match self {
            AffinityViolation::PodAffinity => REASON_AFFINITY_RULES_NOT_MATCH,
            AffinityViolation::PodAntiAffinity => REASON_ANTI_AFFINITY_RULES_NOT_MATCH,
            AffinityViolation::ExistingPodsAntiAffinity => {
                REASON_EXISTING_ANTI_AFFINITY_RULES_NOT_MATCH
            }
        }
    }
}

/// Upstream InterPodAffinity's `preFilterState`: what a cluster-wide pass
/// over the placed pods found, for checking any node afterwards.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct RequiredAffinityState {
    /// Per topology pair: existing pods' required anti-affinity terms that
    /// match the incoming pod (counted at the existing pod's node).
    pub existing_anti_affinity: TopologyCounts,
    /// Per topology pair of each required affinity term of the incoming
    /// pod: existing pods that match **all** those terms.
    pub affinity: TopologyCounts,
    /// Per topology pair of each required anti-affinity term of the
    /// incoming pod: existing pods that match that term.
    pub anti_affinity: TopologyCounts,
    /// The incoming pod has required affinity terms and matches all of them
    /// itself (the first pod of a self-affine group may go anywhere that has
    /// the topology keys).
    pub matches_own_affinity: bool,
}

impl RequiredAffinityState {
    /// An empty state for `pod` (no node counted yet).
    #[must_use]
    pub fn new<N: NamespaceLabels + ?Sized>(pod: &PodInfo, ns: &N) -> Self {
        let matches_own_affinity = pod.pod_affinity.as_deref().is_some_and(|a| {
            !a.required_affinity.is_empty()
                && a.required_affinity.iter().all(|t| t.matches_pod(pod, ns))
        });
        RequiredAffinityState {
            matches_own_affinity,
            ..RequiredAffinityState::default()
        }
    }

    /// Counts the pods placed on `node`. Visits only the node's pods with
    /// required anti-affinity unless the incoming pod has required terms.
    pub fn count_node<N: NamespaceLabels + ?Sized>(
        &mut self,
        pod: &PodInfo,
        node: &NodeInfo,
        ns: &N,
    ) {
        for existing in &node.pods_with_required_anti_affinity {
            let Some(terms) = existing.pod_affinity.as_deref() else {
                continue;
            };
            for t in &terms.required_anti_affinity {
                if t.matches_pod(pod, ns) {
                    self.existing_anti_affinity
                        .add_for_node(node, &t.topology_key, 1);
                }
            }
        }
        let Some(own) = pod
            .pod_affinity
            .as_deref()
            .filter(|a| a.has_required_terms())
        else {
            return;
        };
        for existing in &node.pods {
            if !own.required_affinity.is_empty()
                && own
                    .required_affinity
                    .iter()
                    .all(|t| t.matches_pod(existing, ns))
            {
                for t in &own.required_affinity {
                    self.affinity.add_for_node(node, &t.topology_key, 1);
                }
            }
            for t in &own.required_anti_affinity {
                if t.matches_pod(existing, ns) {
                    self.anti_affinity.add_for_node(node, &t.topology_key, 1);
                }
            }
        }
    }

    /// The state for `pod` counted over every node in `nodes` (`new`, then
    /// [`RequiredAffinityState::count_nodes`]).
    #[must_use]
    pub fn of_nodes<'a, N: NamespaceLabels + ?Sized>(
        pod: &PodInfo,
        nodes: impl IntoIterator<Item = &'a NodeInfo>,
        ns: &N,
    ) -> Self {
        let mut state = RequiredAffinityState::new(pod, ns);
        state.count_nodes(pod, nodes, ns);
        state
    }

    /// [`RequiredAffinityState::check`], or `Ok` when there is nothing to
    /// check ([`RequiredAffinityState::nothing_to_check`]).
    ///
    /// # Errors
    /// As [`RequiredAffinityState::check`].
    pub fn check_placement(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), AffinityViolation> {
        if self.nothing_to_check(pod) {
            return Ok(());
        }
        self.check(pod, node)
    }

    /// Counts the pods of every node in `nodes`.
    pub fn count_nodes<'a, N: NamespaceLabels + ?Sized>(
        &mut self,
        pod: &PodInfo,
        nodes: impl IntoIterator<Item = &'a NodeInfo>,
        ns: &N,
    ) {
        for node in nodes {
            self.count_node(pod, node, ns);
        }
    }

    /// Adds the counts of `other` (e.g. from a parallel chunk of nodes).
    pub fn merge_counts(&mut self, other: RequiredAffinityState) {
        self.existing_anti_affinity
            .merge(other.existing_anti_affinity);
        self.affinity.merge(other.affinity);
        self.anti_affinity.merge(other.anti_affinity);
    }

    /// Whether Filter has nothing to check for `pod`: it has no required
    /// term and no existing pod's required anti-affinity matches it
    /// (upstream PreFilter returns `Skip`).
    #[must_use]
    pub fn nothing_to_check(&self, pod: &PodInfo) -> bool {
        self.existing_anti_affinity.is_empty()
            && !pod
                .pod_affinity
                .as_deref()
                .is_some_and(PodAffinity::has_required_terms)
    }

    /// Whether `pod` may go to `node`, checked in upstream's order: the
    /// pod's affinity, its anti-affinity, then existing pods' anti-affinity.
    ///
    /// # Errors
    /// The first [`AffinityViolation`] found.
    pub fn check(&self, pod: &PodInfo, node: &NodeInfo) -> Result<(), AffinityViolation> {
        let labels = &node.spec.labels;
        if let Some(own) = pod.pod_affinity.as_deref() {
            // Affinity: every topology key must be on the node; matching pods
            // must exist in each term's domain, unless no pod anywhere
            // matches and the pod matches its own terms.
            let mut pods_exist = true;
            for t in &own.required_affinity {
                let Some(value) = labels.get(&t.topology_key) else {
                    return Err(AffinityViolation::PodAffinity);
                };
                if self.affinity.get(&t.topology_key, value) <= 0 {
                    pods_exist = false;
                }
            }
            let first_of_group = self.affinity.is_empty() && self.matches_own_affinity;
            if !pods_exist && !first_of_group {
                return Err(AffinityViolation::PodAffinity);
            }
            if !self.anti_affinity.is_empty() {
                for t in &own.required_anti_affinity {
                    if labels
                        .get(&t.topology_key)
                        .is_some_and(|v| self.anti_affinity.get(&t.topology_key, v) > 0)
                    {
                        return Err(AffinityViolation::PodAntiAffinity);
                    }
                }
            }
        }
        if self.existing_anti_affinity.any_positive_on(node) {
            return Err(AffinityViolation::ExistingPodsAntiAffinity);
        }
        Ok(())
    }
}

/// One-shot check of placing `pod` on `node` given every placed pod in
/// `nodes` (which should include `node`, and must not hold `pod` itself,
/// or a pod avoiding its own kind would reject itself). Costs one pass over
/// the pods of `nodes` when `pod` has required terms, else one over the
/// pods with required anti-affinity. The plugin's bind check reads counts
/// the arbiter keeps instead ([`crate::affinity_counts::AffinityCounts`]).
///
/// # Errors
/// The first [`AffinityViolation`], as [`RequiredAffinityState::check`].
pub fn check_placement<'a, N: NamespaceLabels + ?Sized>(
    pod: &PodInfo,
    node: &NodeInfo,
    nodes: impl IntoIterator<Item = &'a NodeInfo>,
    ns: &N,
) -> Result<(), AffinityViolation> {
    RequiredAffinityState::of_nodes(pod, nodes, ns).check_placement(pod, node)
}

/// Upstream InterPodAffinity `PreScore`: summed weights per topology pair
/// over the pods on `nodes`. For each existing pod on a node with the term's
/// topology label:
/// - each preferred affinity term of `pod` it matches adds the term's weight,
///   each preferred anti-affinity term subtracts it;
/// - each required affinity term of the existing pod that `pod` matches adds
///   `hard_pod_affinity_weight` (when > 0);
/// - each preferred affinity term of the existing pod that `pod` matches
///   adds its weight, each preferred anti-affinity term subtracts it.
///
/// When `pod` has no preferred term only the nodes' pods with affinity are
/// visited (only their terms can contribute). Empty result: nothing
/// matched (upstream PreScore `Skip`).
pub fn preferred_scores<'a, N: NamespaceLabels + ?Sized>(
    pod: &PodInfo,
    nodes: impl IntoIterator<Item = &'a NodeInfo>,
    hard_pod_affinity_weight: i64,
    ns: &N,
) -> TopologyCounts {
    let own = pod
        .pod_affinity
        .as_deref()
        .filter(|a| a.has_preferred_terms());
    let mut scores = TopologyCounts::default();
    for node in nodes {
        if node.spec.labels.is_empty() {
            continue;
        }
        let existing_pods = if own.is_some() {
            &node.pods
        } else {
            &node.pods_with_affinity
        };
        for existing in existing_pods {
            if let Some(own) = own {
                for w in &own.preferred_affinity {
                    if w.term.matches_pod(existing, ns) {
                        scores.add_for_node(node, &w.term.topology_key, w.weight);
                    }
                }
                for w in &own.preferred_anti_affinity {
                    if w.term.matches_pod(existing, ns) {
                        scores.add_for_node(node, &w.term.topology_key, -w.weight);
                    }
                }
            }
            let Some(theirs) = existing.pod_affinity.as_deref() else {
                continue;
            };
            if hard_pod_affinity_weight > 0 {
                for t in &theirs.required_affinity {
                    if t.matches_pod(pod, ns) {
                        scores.add_for_node(node, &t.topology_key, hard_pod_affinity_weight);
                    }
                }
            }
            for w in &theirs.preferred_affinity {
                if w.term.matches_pod(pod, ns) {
                    scores.add_for_node(node, &w.term.topology_key, w.weight);
                }
            }
            for w in &theirs.preferred_anti_affinity {
                if w.term.matches_pod(pod, ns) {
                    scores.add_for_node(node, &w.term.topology_key, -w.weight);
                }
            }
        }
    }
    scores
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::*;
    use crate::pod_info::PodError;
    use crate::testing::{NodeBuilder, PodAffinityKind, PodBuilder, pod_affinity_term};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector as K8sLabelSelector, LabelSelectorRequirement,
    };

    fn labels(kv: &[(&str, &str)]) -> BTreeMap<String, String> {
        kv.iter()
            .map(|(k, v)| ((*k).to_owned(), (*v).to_owned()))
            .collect()
    }

    /// upstream scoring_test.go `namespaces` fixture.
    fn namespaces() -> BTreeMap<String, BTreeMap<String, String>> {
        [
            ("subteam1.team1", "team1"),
            ("subteam2.team1", "team1"),
            ("subteam1.team2", "team2"),
            ("subteam2.team2", "team2"),
        ]
        .into_iter()
        .map(|(ns, team)| (ns.to_owned(), labels(&[("team", team)])))
        .collect()
    }

    fn team_selector(team: &str) -> K8sLabelSelector {
        K8sLabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".into(),
                operator: "In".into(),
                values: Some(vec![team.into()]),
            }]),
            match_labels: None,
        }
    }

    fn compiled(pod: PodBuilder) -> Arc<PodAffinity> {
        pod.build_info()
            .pod_affinity
            .expect("pod has affinity terms")
    }

    fn node_with(name: &str, node_labels: &[(&str, &str)], pods: Vec<PodBuilder>) -> NodeInfo {
        let mut b = NodeBuilder::new(name);
        for (k, v) in node_labels {
            b = b.label(k, v);
        }
        let mut n = NodeInfo::new(Arc::new(b.build_spec()));
        for p in pods {
            assert!(n.add_pod(Arc::new(p.node_name(name).build_info())));
        }
        n
    }

    #[test]
    fn pods_without_pod_affinity_compile_to_none() {
        assert!(PodBuilder::new("p").build_info().pod_affinity.is_none());
        // Node affinity alone is not pod affinity.
        let p = PodBuilder::new("p")
            .required_affinity("zone", "In", &["a"])
            .build_info();
        assert!(p.pod_affinity.is_none());
    }

    #[test]
    fn namespaces_default_to_the_owning_pods_own() {
        let a = compiled(
            PodBuilder::new("p")
                .namespace("ns1")
                .label("app", "web")
                .pod_affinity(
                    PodAffinityKind::Required,
                    pod_affinity_term("app", "In", &["web"], "zone"),
                ),
        );
        let t = &a.required_affinity[0];
        assert_eq!(t.namespaces, ["ns1"]);
        assert_eq!(t.namespace_selector, None);
        let ns = namespaces();
        assert!(t.matches("ns1", &labels(&[("app", "web")]), &ns));
        assert!(!t.matches("ns2", &labels(&[("app", "web")]), &ns));
        assert!(!t.matches("ns1", &labels(&[("app", "db")]), &ns));
    }

    #[test]
    fn namespace_selector_and_namespaces_are_ored() {
        // upstream scoring_test.go affinityNamespaceSelector: namespaces
        // [subteam2.team2] plus namespaceSelector team In [team1].
        let mut term = pod_affinity_term("security", "In", &["S1"], "region");
        term.namespaces = Some(vec!["subteam2.team2".into()]);
        term.namespace_selector = Some(team_selector("team1"));
        let a = compiled(PodBuilder::new("p").pod_affinity(PodAffinityKind::Preferred(5), term));
        let t = &a.preferred_affinity[0].term;
        assert_eq!(a.preferred_affinity[0].weight, 5);
        let ns = namespaces();
        let s1 = labels(&[("security", "S1")]);
        assert!(t.matches("subteam1.team1", &s1, &ns), "selected by label");
        assert!(t.matches("subteam2.team1", &s1, &ns), "selected by label");
        assert!(t.matches("subteam2.team2", &s1, &ns), "listed");
        assert!(!t.matches("subteam1.team2", &s1, &ns), "neither");
        assert!(!t.matches("unknown", &s1, &ns), "unknown namespace");
        assert!(
            !t.matches("default", &s1, &ns),
            "a namespace list replaces the own-namespace default"
        );
    }

    #[test]
    fn empty_namespace_selector_selects_every_namespace_even_unknown_ones() {
        let mut term = pod_affinity_term("app", "Exists", &[], "zone");
        term.namespace_selector = Some(K8sLabelSelector::default());
        let a = compiled(PodBuilder::new("p").pod_affinity(PodAffinityKind::RequiredAnti, term));
        let t = &a.required_anti_affinity[0];
        assert!(t.namespaces.is_empty());
        let none: BTreeMap<String, BTreeMap<String, String>> = BTreeMap::new();
        assert!(t.matches("anything", &labels(&[("app", "x")]), &none));
        assert!(!t.matches("anything", &labels(&[]), &none));
    }

    #[test]
    fn absent_label_selector_matches_no_pod_and_empty_matches_all() {
        let mut absent = pod_affinity_term("app", "Exists", &[], "zone");
        absent.label_selector = None;
        absent.match_label_keys = Some(vec!["app".into()]);
        let mut all = pod_affinity_term("app", "Exists", &[], "zone");
        all.label_selector = Some(K8sLabelSelector::default());
        let a = compiled(
            PodBuilder::new("p")
                .label("app", "web")
                .pod_affinity(PodAffinityKind::Required, absent)
                .pod_affinity(PodAffinityKind::Required, all),
        );
        let ns = namespaces();
        assert_eq!(
            a.required_affinity[0].selector, None,
            "nothing is merged into an absent selector"
        );
        assert!(!a.required_affinity[0].matches("default", &labels(&[("app", "web")]), &ns));
        assert!(a.required_affinity[1].matches("default", &labels(&[]), &ns));
    }

    #[test]
    fn match_and_mismatch_label_keys_merge_the_pods_values() {
        // KEP-3633: matchLabelKeys [pod-template-hash] keeps the term to the
        // same rollout; mismatchLabelKeys [tenant] to other tenants.
        let mut term = pod_affinity_term("app", "In", &["web"], "zone");
        term.match_label_keys = Some(vec!["pod-template-hash".into(), "absent".into()]);
        term.mismatch_label_keys = Some(vec!["tenant".into()]);
        let pod = PodBuilder::new("p")
            .label("app", "web")
            .label("pod-template-hash", "abc")
            .label("tenant", "t1")
            .pod_affinity(PodAffinityKind::Required, term.clone());
        let a = compiled(pod);
        let t = &a.required_affinity[0];
        let ns = namespaces();
        let m = |kv: &[(&str, &str)]| t.matches("default", &labels(kv), &ns);
        assert!(m(&[
            ("app", "web"),
            ("pod-template-hash", "abc"),
            ("tenant", "t2")
        ]));
        assert!(
            !m(&[
                ("app", "web"),
                ("pod-template-hash", "xyz"),
                ("tenant", "t2")
            ]),
            "another rollout"
        );
        assert!(
            !m(&[
                ("app", "web"),
                ("pod-template-hash", "abc"),
                ("tenant", "t1")
            ]),
            "same tenant"
        );
        assert!(
            m(&[("app", "web"), ("pod-template-hash", "abc")]),
            "NotIn matches a pod without the key"
        );
        assert_eq!(
            t.selector.as_ref().map(|s| s.requirements.len()),
            Some(3),
            "a key the pod lacks is ignored"
        );

        // A term the apiserver already merged compiles to the same selector.
        let mut merged = term;
        merged
            .label_selector
            .as_mut()
            .unwrap()
            .match_expressions
            .as_mut()
            .unwrap()
            .extend([
                LabelSelectorRequirement {
                    key: "pod-template-hash".into(),
                    operator: "In".into(),
                    values: Some(vec!["abc".into()]),
                },
                LabelSelectorRequirement {
                    key: "tenant".into(),
                    operator: "NotIn".into(),
                    values: Some(vec!["t1".into()]),
                },
            ]);
        let again = compiled(
            PodBuilder::new("p")
                .label("app", "web")
                .label("pod-template-hash", "abc")
                .label("tenant", "t1")
                .pod_affinity(PodAffinityKind::Required, merged),
        );
        assert_eq!(again.required_affinity[0].selector, t.selector);
    }

    fn compile_error(pod: PodBuilder) -> PodError {
        PodInfo::from_pod(Arc::new(pod.build())).unwrap_err()
    }

    #[test]
    fn bad_terms_name_the_pod_and_the_field_path() {
        let e = compile_error(
            PodBuilder::new("bad")
                .pod_affinity(
                    PodAffinityKind::RequiredAnti,
                    pod_affinity_term("app", "In", &["a"], "zone"),
                )
                .pod_affinity(
                    PodAffinityKind::RequiredAnti,
                    pod_affinity_term("app", "In", &["a"], ""),
                ),
        );
        assert_eq!(e.pod, "default/bad");
        assert!(
            e.message.starts_with(
                "spec.affinity.podAntiAffinity.requiredDuringSchedulingIgnoredDuringExecution[1].topologyKey: "
            ),
            "{e}"
        );

        let e = compile_error(PodBuilder::new("bad").pod_affinity(
            PodAffinityKind::Preferred(0),
            pod_affinity_term("app", "In", &["a"], "zone"),
        ));
        assert_eq!(
            e.message,
            "spec.affinity.podAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].weight: 0 must be in the range 1-100"
        );

        let e = compile_error(PodBuilder::new("bad").pod_affinity(
            PodAffinityKind::PreferredAnti(10),
            pod_affinity_term("app", "Gt", &["1"], "zone"),
        ));
        assert!(
            e.message.starts_with(
                "spec.affinity.podAntiAffinity.preferredDuringSchedulingIgnoredDuringExecution[0].podAffinityTerm.labelSelector.matchExpressions[0].operator: "
            ),
            "{e}"
        );

        let mut term = pod_affinity_term("app", "In", &["a"], "zone");
        term.namespace_selector = Some(K8sLabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "team".into(),
                operator: "In".into(),
                values: None,
            }]),
            match_labels: None,
        });
        let e = compile_error(PodBuilder::new("bad").pod_affinity(PodAffinityKind::Required, term));
        assert!(
            e.message.starts_with(
                "spec.affinity.podAffinity.requiredDuringSchedulingIgnoredDuringExecution[0].namespaceSelector.matchExpressions[0]: "
            ),
            "{e}"
        );
    }

    #[test]
    fn topology_counts_add_merge_and_sum_per_node() {
        let zone_a = node_with("n1", &[("zone", "a"), ("region", "r1")], vec![]);
        let zone_b = node_with("n2", &[("zone", "b"), ("region", "r1")], vec![]);
        let bare = node_with("n3", &[], vec![]);
        let mut c = TopologyCounts::default();
        assert!(c.is_empty());
        c.add_for_node(&zone_a, "zone", 3);
        c.add_for_node(&bare, "zone", 7);
        assert_eq!(c.get("zone", "a"), 3);
        let mut other = TopologyCounts::default();
        other.add("region", "r1", -2);
        other.add("zone", "a", 1);
        c.merge(other);
        assert_eq!(c.node_sum(&zone_a), 4 - 2);
        assert_eq!(c.node_sum(&zone_b), -2);
        assert_eq!(c.node_sum(&bare), 0);
        assert!(c.any_positive_on(&zone_a));
        assert!(!c.any_positive_on(&zone_b));
        // A zero sum still counts as "something matched".
        let mut z = TopologyCounts::default();
        z.add("zone", "a", 5);
        z.add("zone", "a", -5);
        assert!(!z.is_empty());
    }

    #[test]
    fn chunked_counting_merges_to_the_single_pass_result() {
        let anti = |name: &str| {
            PodBuilder::new(name).label("app", "db").pod_affinity(
                PodAffinityKind::RequiredAnti,
                pod_affinity_term("app", "In", &["web"], "zone"),
            )
        };
        let nodes = [
            node_with(
                "n1",
                &[("zone", "a")],
                vec![anti("x1"), PodBuilder::new("w1").label("app", "web")],
            ),
            node_with("n2", &[("zone", "a")], vec![anti("x2")]),
            node_with(
                "n3",
                &[("zone", "b")],
                vec![PodBuilder::new("w2").label("app", "web")],
            ),
        ];
        let pod = PodBuilder::new("in")
            .label("app", "web")
            .pod_affinity(
                PodAffinityKind::Required,
                pod_affinity_term("app", "In", &["web"], "zone"),
            )
            .build_info();
        let ns = namespaces();
        let mut whole = RequiredAffinityState::new(&pod, &ns);
        whole.count_nodes(&pod, nodes.iter(), &ns);
        assert!(whole.matches_own_affinity);
        assert_eq!(whole.existing_anti_affinity.get("zone", "a"), 2);
        assert_eq!(whole.affinity.get("zone", "a"), 1);
        assert_eq!(whole.affinity.get("zone", "b"), 1);
        let mut chunked = RequiredAffinityState::new(&pod, &ns);
        for chunk in nodes.chunks(2) {
            let mut s = RequiredAffinityState::default();
            s.count_nodes(&pod, chunk.iter(), &ns);
            chunked.merge_counts(s);
        }
        assert_eq!(chunked, whole);
        assert_eq!(
            whole.check(&pod, &nodes[0]),
            Err(AffinityViolation::ExistingPodsAntiAffinity)
        );
        assert_eq!(whole.check(&pod, &nodes[2]), Ok(()));
    }

    #[test]
    fn check_placement_rechecks_one_placement_against_a_view() {
        // The bind arbiter's use: two mutually anti-affine pods raced for
        // the same zone; the second placement must be refused.
        let term = || pod_affinity_term("app", "In", &["web"], "zone");
        let first = PodBuilder::new("web-1")
            .label("app", "web")
            .pod_affinity(PodAffinityKind::RequiredAnti, term());
        let view = [
            node_with("n1", &[("zone", "a")], vec![first]),
            node_with("n2", &[("zone", "a")], vec![]),
            node_with("n3", &[("zone", "b")], vec![]),
        ];
        let second = PodBuilder::new("web-2")
            .label("app", "web")
            .pod_affinity(PodAffinityKind::RequiredAnti, term())
            .build_info();
        let ns: HashMap<String, BTreeMap<String, String>> = HashMap::new();
        assert_eq!(
            check_placement(&second, &view[1], view.iter(), &ns),
            Err(AffinityViolation::PodAntiAffinity)
        );
        assert_eq!(check_placement(&second, &view[2], view.iter(), &ns), Ok(()));
        // A pod without terms is refused only by existing pods' anti-affinity.
        let plain = PodBuilder::new("web-3").label("app", "web").build_info();
        assert_eq!(
            check_placement(&plain, &view[1], view.iter(), &ns),
            Err(AffinityViolation::ExistingPodsAntiAffinity)
        );
        let other = PodBuilder::new("db").label("app", "db").build_info();
        assert_eq!(check_placement(&other, &view[1], view.iter(), &ns), Ok(()));
        assert_eq!(
            AffinityViolation::ExistingPodsAntiAffinity.reason(),
            "node(s) didn't satisfy existing pods anti-affinity rules"
        );
    }
}
