//! Pod topology spread constraints (`spec.topologySpreadConstraints`),
//! compiled once per pod, and the pure counting / checking / scoring
//! functions of upstream's `PodTopologySpread` plugin
//! (`pkg/scheduler/framework/plugins/podtopologyspread/{common,filtering,scoring}.go`).
//!
//! The functions take plain iterators of [`NodeInfo`], so the worker's
//! plugin, in its Filter and its bind check (run by the coordinator's bind
//! arbiter over its own view, with counts kept in
//! [`crate::spread_counts::SpreadCounts`]), judges a placement with the same
//! code.
//!
//! # Terms
//! - A **domain** is one value of a constraint's `topologyKey` (one zone, one
//!   hostname). A node belongs to the domain named by its label.
//! - A node is **eligible** for a constraint when it has *every* topology key
//!   of the pod's constraints of that kind (hard or soft) and passes the
//!   constraint's node inclusion policies: `nodeAffinityPolicy: Honor` (the
//!   default) keeps only nodes matching the pod's `nodeSelector` and required
//!   node affinity; `nodeTaintsPolicy: Honor` (default `Ignore`) keeps only
//!   nodes without an untolerated `NoSchedule` / `NoExecute` taint.
//! - A pod **matches** a constraint when it is in the incoming pod's
//!   namespace, is not terminating (`metadata.deletionTimestamp` unset) and
//!   its labels satisfy the constraint's selector. An absent `labelSelector`
//!   matches nothing; an empty one (`{}`) matches every pod of the namespace
//!   (upstream after kubernetes/kubernetes#141340, which fixed `{}` counting
//!   no pod).
//!
//! # Filter (`whenUnsatisfiable: DoNotSchedule`)
//! For every hard constraint, in order: a node without the topology key is
//! rejected `UnschedulableAndUnresolvable` ([`REASON_MISSING_LABEL`]);
//! otherwise `skew = matching pods in the node's domain + (1 if the incoming
//! pod matches its own selector) - global minimum`, where the global minimum
//! is the smallest count over eligible domains, or 0 when there are fewer
//! eligible domains than `minDomains`. `skew > maxSkew` rejects the node
//! `Unschedulable` ([`REASON_CONSTRAINTS_NOT_MATCH`]).
//!
//! # Score (`whenUnsatisfiable: ScheduleAnyway`)
//! Feasible nodes lacking any soft topology key are *ignored* (score 0). For
//! the others, each soft constraint adds `count * ln(domains + 2) +
//! (maxSkew - 1)`, where `count` is the matching pods in the node's domain
//! (over all eligible nodes of the cluster, but only domains that contain a
//! feasible node; for `kubernetes.io/hostname`, the pods on the node itself)
//! and `domains` the number of such domains (for the hostname key: the
//! feasible, not ignored nodes). The sum is rounded. Normalization reverses
//! and min-max scales the raw scores over the non-ignored nodes:
//! `100 * (max + min - s) / max` (100 for all when `max` is 0).

use std::collections::{BTreeMap, HashMap};
use std::fmt;
use std::sync::Arc;

use k8s_openapi::api::core::v1::TopologySpreadConstraint as K8sTopologySpreadConstraint;

use crate::framework::MAX_NODE_SCORE;
use crate::label_selector::LabelSelector;
use crate::node_info::{NodeInfo, NodeSpec};
use crate::pod_info::PodInfo;
use crate::selector::matches_required_node_affinity;
use crate::taints;

/// `kubernetes.io/hostname`: per-node domains, counted on the node itself
/// when scoring.
pub const LABEL_HOSTNAME: &str = "kubernetes.io/hostname";
/// `topology.kubernetes.io/zone`.
pub const LABEL_TOPOLOGY_ZONE: &str = "topology.kubernetes.io/zone";

/// Filter reason when a domain would exceed `maxSkew` (upstream
/// `ErrReasonConstraintsNotMatch`, code `Unschedulable`).
pub const REASON_CONSTRAINTS_NOT_MATCH: &str =
    "node(s) didn't match pod topology spread constraints";
/// Filter reason when the node lacks a hard constraint's topology key
/// (upstream `ErrReasonNodeLabelNotMatch`, code `UnschedulableAndUnresolvable`).
pub const REASON_MISSING_LABEL: &str =
    "node(s) didn't match pod topology spread constraints (missing required label)";

/// Raw score marking a node ignored by scoring (it lacks a soft topology
/// key); [`normalize_scores`] turns it into 0 (upstream `invalidScore`).
pub const IGNORED_SCORE: i64 = -1;

/// `whenUnsatisfiable`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum WhenUnsatisfiable {
    /// `DoNotSchedule`: a hard constraint, checked by Filter.
    DoNotSchedule,
    /// `ScheduleAnyway`: a soft constraint, used by Score.
    ScheduleAnyway,
}

impl WhenUnsatisfiable {
    /// The API spelling.
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            WhenUnsatisfiable::DoNotSchedule => "DoNotSchedule",
            WhenUnsatisfiable::ScheduleAnyway => "ScheduleAnyway",
        }
    }

    /// Parses the API spelling.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "DoNotSchedule" => Some(WhenUnsatisfiable::DoNotSchedule),
            "ScheduleAnyway" => Some(WhenUnsatisfiable::ScheduleAnyway),
            _ => None,
        }
    }
}

impl fmt::Display for WhenUnsatisfiable {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.as_str())
    }
}

/// `nodeAffinityPolicy` / `nodeTaintsPolicy` (`v1.NodeInclusionPolicy`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum NodeInclusionPolicy {
    /// `Honor`: only nodes passing the pod's affinity / tolerating the taints
    /// count as domains.
    Honor,
    /// `Ignore`: every node counts.
    Ignore,
}

impl NodeInclusionPolicy {
    /// Parses the API spelling.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Honor" => Some(NodeInclusionPolicy::Honor),
            "Ignore" => Some(NodeInclusionPolicy::Ignore),
            _ => None,
        }
    }
}

/// One compiled topology spread constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopologySpreadConstraint {
    /// `maxSkew`, ≥ 1.
    pub max_skew: i32,
    /// `topologyKey`: the node label naming the domains.
    pub topology_key: String,
    /// Hard (`DoNotSchedule`) or soft (`ScheduleAnyway`).
    pub when_unsatisfiable: WhenUnsatisfiable,
    /// `labelSelector` with `matchLabelKeys` merged in (`key = <the pod's
    /// value>` for every key the pod has). `None` (field absent) matches no
    /// pod.
    pub selector: Option<LabelSelector>,
    /// `minDomains` (1 when unset; only set with `DoNotSchedule`).
    pub min_domains: i32,
    /// `nodeAffinityPolicy` (default `Honor`).
    pub node_affinity_policy: NodeInclusionPolicy,
    /// `nodeTaintsPolicy` (default `Ignore`).
    pub node_taints_policy: NodeInclusionPolicy,
}

impl TopologySpreadConstraint {
    /// Whether this is a hard constraint (`DoNotSchedule`).
    #[must_use]
    pub fn is_hard(&self) -> bool {
        self.when_unsatisfiable == WhenUnsatisfiable::DoNotSchedule
    }

    /// Whether `labels` satisfy the selector (an absent selector matches
    /// nothing).
    #[must_use]
    pub fn selects(&self, labels: &BTreeMap<String, String>) -> bool {
        self.selector.as_ref().is_some_and(|s| s.matches(labels))
    }

    /// Whether `node` passes this constraint's node inclusion policies for
    /// `pod` (upstream `matchNodeInclusionPolicies`).
    #[must_use]
    pub fn includes_node(&self, pod: &PodInfo, node: &NodeSpec) -> bool {
        if self.node_affinity_policy == NodeInclusionPolicy::Honor
            && !matches_required_node_affinity(pod, node)
        {
            return false;
        }
        if self.node_taints_policy == NodeInclusionPolicy::Honor
            && taints::has_untolerated_hard_taint(&pod.tolerations, &node.taints)
        {
            return false;
        }
        true
    }

    /// Matching pods among `pods`: same `namespace`, not terminating,
    /// selected (upstream `countPodsMatchSelector`).
    #[must_use]
    pub fn count_matching(&self, pods: &[Arc<PodInfo>], namespace: &str) -> i64 {
        let Some(selector) = &self.selector else {
            return 0;
        };
        // Cheapest test first: the labels live in the `PodInfo`, the
        // namespace and the deletion timestamp behind two more pointers
        // (cache misses on large clusters); most pods fail the selector.
        let n = pods
            .iter()
            .filter(|p| {
                selector.matches(&p.labels) && &*p.key.namespace == namespace && !p.terminating
            })
            .count();
        i64::try_from(n).unwrap_or(i64::MAX)
    }
}

/// Whether `labels` hold every constraint's topology key (upstream
/// `nodeLabelsMatchSpreadConstraints`).
#[must_use]
pub fn has_all_keys<'a>(
    labels: &BTreeMap<String, String>,
    constraints: impl IntoIterator<Item = &'a TopologySpreadConstraint>,
) -> bool {
    constraints
        .into_iter()
        .all(|c| labels.contains_key(&c.topology_key))
}

/// Compiles `spec.topologySpreadConstraints` found at `field`, merging
/// `matchLabelKeys` with the pod's own `labels`.
///
/// Validates what the scheduler needs to interpret a constraint, with the
/// API server's messages: `maxSkew` > 0, non-empty `topologyKey`, a known
/// `whenUnsatisfiable`, `minDomains` > 0 and only with `DoNotSchedule`,
/// known `nodeAffinityPolicy` / `nodeTaintsPolicy`, a well-formed
/// `labelSelector`. Duplicate `{topologyKey, whenUnsatisfiable}` pairs are
/// left to the API server (the scheduler evaluates each constraint).
///
/// # Errors
/// A message starting with the field path, e.g.
/// `spec.topologySpreadConstraints[1].maxSkew: Invalid value: 0: must be greater than zero`.
pub fn compile(
    constraints: &[K8sTopologySpreadConstraint],
    labels: Option<&BTreeMap<String, String>>,
    field: &str,
) -> Result<Vec<TopologySpreadConstraint>, String> {
    constraints
        .iter()
        .enumerate()
        .map(|(i, c)| compile_one(c, labels, &format!("{field}[{i}]")))
        .collect()
}

fn compile_one(
    c: &K8sTopologySpreadConstraint,
    labels: Option<&BTreeMap<String, String>>,
    path: &str,
) -> Result<TopologySpreadConstraint, String> {
    if c.max_skew <= 0 {
        return Err(format!(
            "{path}.maxSkew: Invalid value: {}: must be greater than zero",
            c.max_skew
        ));
    }
    if c.topology_key.is_empty() {
        return Err(format!(
            "{path}.topologyKey: Required value: can not be empty"
        ));
    }
    let when_unsatisfiable = WhenUnsatisfiable::parse(&c.when_unsatisfiable).ok_or_else(|| {
        format!(
            "{path}.whenUnsatisfiable: Unsupported value: {:?}: supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
            c.when_unsatisfiable
        )
    })?;
    let min_domains = match c.min_domains {
        None => 1,
        Some(n) if n <= 0 => {
            return Err(format!(
                "{path}.minDomains: Invalid value: {n}: must be greater than zero"
            ));
        }
        Some(n) if when_unsatisfiable != WhenUnsatisfiable::DoNotSchedule => {
            return Err(format!(
                "{path}.minDomains: Invalid value: {n}: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not {when_unsatisfiable}"
            ));
        }
        Some(n) => n,
    };
    let policy = |v: Option<&str>, name: &str, default| match v {
        None => Ok(default),
        Some(s) => NodeInclusionPolicy::parse(s).ok_or_else(|| {
            format!(
                "{path}.{name}: Unsupported value: {s:?}: supported values: \"Honor\", \"Ignore\""
            )
        }),
    };
    let node_affinity_policy = policy(
        c.node_affinity_policy.as_deref(),
        "nodeAffinityPolicy",
        NodeInclusionPolicy::Honor,
    )?;
    let node_taints_policy = policy(
        c.node_taints_policy.as_deref(),
        "nodeTaintsPolicy",
        NodeInclusionPolicy::Ignore,
    )?;
    let selector = match &c.label_selector {
        None => None,
        Some(s) => {
            let mut sel = LabelSelector::compile(s, &format!("{path}.labelSelector"))
                .map_err(|e| e.to_string())?;
            // matchLabelKeys: `key = value` for every key the pod carries;
            // keys the pod lacks are ignored. With no labelSelector the
            // constraint matches nothing and stays so (upstream).
            for key in c.match_label_keys.iter().flatten() {
                if let Some(v) = labels.and_then(|l| l.get(key)) {
                    sel.add_equals(key, v);
                }
            }
            Some(sel)
        }
    };
    Ok(TopologySpreadConstraint {
        max_skew: c.max_skew,
        topology_key: c.topology_key.clone(),
        when_unsatisfiable,
        selector,
        min_domains,
        node_affinity_policy,
        node_taints_policy,
    })
}

// ---------------------------------------------------------------------------
// Filter: hard constraints.
// ---------------------------------------------------------------------------

/// Matching pods per eligible domain of one hard constraint (upstream
/// `preFilterState.TpValueToMatchNum[i]`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DomainCounts {
    /// Topology value → matching pods. Every eligible domain has an entry,
    /// possibly 0.
    pub counts: HashMap<String, i64>,
}

impl DomainCounts {
    fn add(&mut self, value: &str, n: i64) {
        if let Some(c) = self.counts.get_mut(value) {
            *c += n;
        } else {
            self.counts.insert(value.to_owned(), n);
        }
    }

    /// Adds `other`'s counts into `self` (partial counts of disjoint node
    /// sets, e.g. from parallel chunks).
    pub fn merge(&mut self, other: &DomainCounts) {
        for (v, n) in &other.counts {
            self.add(v, *n);
        }
    }

    /// The global minimum for the skew: the smallest count over eligible
    /// domains, or 0 when there are fewer than `min_domains` of them
    /// (upstream `minMatchNum`).
    #[must_use]
    pub fn global_min(&self, min_domains: i32) -> i64 {
        let domains = i64::try_from(self.counts.len()).unwrap_or(i64::MAX);
        if domains < i64::from(min_domains) {
            return 0;
        }
        self.counts.values().copied().min().unwrap_or(0)
    }

    /// Matching pods in domain `value` (0 when it is not an eligible domain).
    #[must_use]
    pub fn get(&self, value: &str) -> i64 {
        self.counts.get(value).copied().unwrap_or(0)
    }
}

/// Counts, for each of `constraints` (the pod's hard constraints), the
/// matching pods per eligible domain over `nodes` (upstream
/// `calPreFilterState`). Nodes lacking any of the constraints' keys are no
/// domain of any; a node failing one constraint's inclusion policies is no
/// domain of that constraint. Counts over disjoint node sets add up with
/// [`DomainCounts::merge`].
#[must_use]
pub fn count_domains<'a>(
    pod: &PodInfo,
    constraints: &[TopologySpreadConstraint],
    nodes: impl IntoIterator<Item = &'a NodeInfo>,
) -> Vec<DomainCounts> {
    let mut out = vec![DomainCounts::default(); constraints.len()];
    let namespace = &*pod.key.namespace;
    for node in nodes {
        let labels = &node.spec.labels;
        if !has_all_keys(labels, constraints) {
            continue;
        }
        for (c, counts) in constraints.iter().zip(out.iter_mut()) {
            if !c.includes_node(pod, &node.spec) {
                continue;
            }
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            counts.add(value, c.count_matching(&node.pods, namespace));
        }
    }
    out
}

/// Why a node fails a hard constraint.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpreadViolation {
    /// The node lacks the constraint's topology key
    /// (`UnschedulableAndUnresolvable`, [`REASON_MISSING_LABEL`]).
    MissingLabel {
        /// The missing key.
        topology_key: String,
    },
    /// Placing the pod would make its domain exceed `maxSkew`
    /// (`Unschedulable`, [`REASON_CONSTRAINTS_NOT_MATCH`]).
    MaxSkewExceeded {
        /// The constraint's key.
        topology_key: String,
        /// The node's domain.
        value: String,
        /// `matching pods in the domain + self match - global minimum`.
        skew: i64,
        /// The constraint's `maxSkew`.
        max_skew: i32,
    },
}

impl SpreadViolation {
    /// The upstream reason text.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            SpreadViolation::MissingLabel { .. } => REASON_MISSING_LABEL,
            SpreadViolation::MaxSkewExceeded { .. } => REASON_CONSTRAINTS_NOT_MATCH,
        }
    }

    /// Whether removing pods (preemption) cannot help: a missing label.
    #[must_use]
    pub fn is_unresolvable(&self) -> bool {
        matches!(self, SpreadViolation::MissingLabel { .. })
    }
}

impl fmt::Display for SpreadViolation {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            SpreadViolation::MissingLabel { topology_key } => {
                write!(
                    f,
                    "{REASON_MISSING_LABEL}: node has no label {topology_key:?}"
                )
            }
            SpreadViolation::MaxSkewExceeded {
                topology_key,
                value,
                skew,
                max_skew,
            } => write!(
                f,
                "{REASON_CONSTRAINTS_NOT_MATCH}: {topology_key}={value} would have skew {skew} > maxSkew {max_skew}"
            ),
        }
    }
}

/// Checks `node` against `constraints` (hard ones) given `counts` from
/// [`count_domains`] and `self_match[i]` = whether the pod matches
/// constraint `i`'s selector itself (upstream `Filter`). Constraints are
/// checked in order; the first failure is returned.
///
/// # Errors
/// The first [`SpreadViolation`].
pub fn check_node(
    constraints: &[TopologySpreadConstraint],
    counts: &[impl std::borrow::Borrow<DomainCounts>],
    self_match: &[bool],
    node: &NodeSpec,
) -> Result<(), SpreadViolation> {
    let mins = global_mins(constraints, counts);
    check_node_with_mins(constraints, counts, self_match, &mins, node)
}

/// `counts[i].global_min(constraints[i].min_domains)` for each constraint
/// (upstream keeps them in `TpKeyToCriticalPaths`), for
/// [`check_node_with_mins`].
#[must_use]
pub fn global_mins(
    constraints: &[TopologySpreadConstraint],
    counts: &[impl std::borrow::Borrow<DomainCounts>],
) -> Vec<i64> {
    constraints
        .iter()
        .zip(counts)
        .map(|(c, d)| d.borrow().global_min(c.min_domains))
        .collect()
}

/// [`check_node`] with the global minima already taken
/// ([`global_mins`]): Filter checks many nodes against the same counts,
/// so it takes them once per cycle instead of once per node.
///
/// # Errors
/// The first [`SpreadViolation`].
pub fn check_node_with_mins(
    constraints: &[TopologySpreadConstraint],
    counts: &[impl std::borrow::Borrow<DomainCounts>],
    self_match: &[bool],
    mins: &[i64],
    node: &NodeSpec,
) -> Result<(), SpreadViolation> {
    for (i, c) in constraints.iter().enumerate() {
        let Some(value) = node.labels.get(&c.topology_key) else {
            return Err(SpreadViolation::MissingLabel {
                topology_key: c.topology_key.clone(),
            });
        };
        let (Some(domains), Some(min)) =
            (counts.get(i).map(std::borrow::Borrow::borrow), mins.get(i))
        else {
            continue;
        };
        let own = i64::from(self_match.get(i).copied().unwrap_or(false));
        let skew = domains.get(value) + own - min;
        if skew > i64::from(c.max_skew) {
            return Err(SpreadViolation::MaxSkewExceeded {
                topology_key: c.topology_key.clone(),
                value: value.clone(),
                skew,
                max_skew: c.max_skew,
            });
        }
    }
    Ok(())
}

/// The pod's hard constraints, in order.
#[must_use]
pub fn hard_constraints(pod: &PodInfo) -> Vec<TopologySpreadConstraint> {
    pod.topology_spread_constraints
        .iter()
        .filter(|c| c.is_hard())
        .cloned()
        .collect()
}

/// One-shot check of placing `pod` on `target` in a cluster made of `nodes`
/// (which may include `target`): counts the pod's hard constraints over
/// `nodes`, then checks `target`. The reference the kept counts
/// ([`crate::spread_counts::SpreadCounts::check_placement`]) must agree
/// with.
///
/// # Errors
/// The first [`SpreadViolation`] on `target`.
pub fn check_placement<'a>(
    pod: &PodInfo,
    nodes: impl IntoIterator<Item = &'a NodeInfo>,
    target: &NodeInfo,
) -> Result<(), SpreadViolation> {
    let constraints = hard_constraints(pod);
    if constraints.is_empty() {
        return Ok(());
    }
    let counts = count_domains(pod, &constraints, nodes);
    let self_match: Vec<bool> = constraints.iter().map(|c| c.selects(&pod.labels)).collect();
    check_node(&constraints, &counts, &self_match, &target.spec)
}

// ---------------------------------------------------------------------------
// Score: soft constraints.
// ---------------------------------------------------------------------------

/// What Score reads for a pod's soft constraints (upstream `preScoreState`).
#[derive(Debug, Clone, Default)]
pub struct SoftSpread {
    /// The soft constraints, in order.
    pub constraints: Vec<TopologySpreadConstraint>,
    /// Per constraint: matching pods per domain that holds a feasible node
    /// (empty for the hostname key, counted per node in [`SoftSpread::raw_score`]).
    pub counts: Vec<HashMap<String, i64>>,
    /// Per constraint: `ln(domains + 2)` (upstream `topologyNormalizingWeight`).
    pub weights: Vec<f64>,
}

/// Upstream `topologyNormalizingWeight`: `ln(size + 2)`.
#[must_use]
pub fn topology_normalizing_weight(size: usize) -> f64 {
    // Domain counts are far below 2^52: the conversion is exact.
    #[allow(clippy::cast_precision_loss)]
    let size = size as f64;
    (size + 2.0).ln()
}

impl SoftSpread {
    /// Registers the domains of the `feasible` nodes (upstream
    /// `initPreScoreState`): nodes lacking any soft key are ignored; the
    /// weight of the hostname key counts the non-ignored feasible nodes.
    /// Counts start at 0; fill them with [`SoftSpread::count`].
    #[must_use]
    pub fn new<'a>(
        constraints: Vec<TopologySpreadConstraint>,
        feasible: impl IntoIterator<Item = &'a NodeInfo>,
    ) -> Self {
        let mut counts = vec![HashMap::new(); constraints.len()];
        let mut scored = 0usize;
        for node in feasible {
            let labels = &node.spec.labels;
            if !has_all_keys(labels, &constraints) {
                continue;
            }
            scored += 1;
            for (c, map) in constraints.iter().zip(counts.iter_mut()) {
                if c.topology_key == LABEL_HOSTNAME {
                    continue;
                }
                if let Some(v) = labels.get(&c.topology_key)
                    && !map.contains_key(v.as_str())
                {
                    map.insert(v.clone(), 0);
                }
            }
        }
        let weights = constraints
            .iter()
            .zip(&counts)
            .map(|(c, map)| {
                let size = if c.topology_key == LABEL_HOSTNAME {
                    scored
                } else {
                    map.len()
                };
                topology_normalizing_weight(size)
            })
            .collect();
        SoftSpread {
            constraints,
            counts,
            weights,
        }
    }

    /// Matching pods per registered domain over `nodes` (upstream
    /// `PreScore`'s pass over all nodes): nodes lacking a soft key, failing a
    /// constraint's inclusion policies, or in a domain without a feasible
    /// node add nothing. Returns partial counts; add them with
    /// [`SoftSpread::add_counts`] (several calls over disjoint node sets may
    /// run in parallel).
    #[must_use]
    pub fn count<'a>(
        &self,
        pod: &PodInfo,
        nodes: impl IntoIterator<Item = &'a NodeInfo>,
    ) -> Vec<HashMap<String, i64>> {
        let namespace = &*pod.key.namespace;
        let mut out: Vec<HashMap<String, i64>> = vec![HashMap::new(); self.constraints.len()];
        for node in nodes {
            let labels = &node.spec.labels;
            if !has_all_keys(labels, &self.constraints) {
                continue;
            }
            for ((c, registered), partial) in self
                .constraints
                .iter()
                .zip(&self.counts)
                .zip(out.iter_mut())
            {
                let Some(value) = labels.get(&c.topology_key) else {
                    continue;
                };
                if !registered.contains_key(value.as_str()) || !c.includes_node(pod, &node.spec) {
                    continue;
                }
                let n = c.count_matching(&node.pods, namespace);
                if n == 0 {
                    continue;
                }
                if let Some(x) = partial.get_mut(value.as_str()) {
                    *x += n;
                } else {
                    partial.insert(value.clone(), n);
                }
            }
        }
        out
    }

    /// Adds partial counts from [`SoftSpread::count`].
    pub fn add_counts(&mut self, partial: &[HashMap<String, i64>]) {
        for (map, part) in self.counts.iter_mut().zip(partial) {
            for (v, n) in part {
                if let Some(x) = map.get_mut(v.as_str()) {
                    *x += n;
                }
            }
        }
    }

    /// Raw score of `node` for `pod` (upstream `Score`): [`IGNORED_SCORE`]
    /// when the node lacks a soft key, else the rounded sum over constraints
    /// of `count * weight + (maxSkew - 1)`. Higher means more crowded.
    #[must_use]
    pub fn raw_score(&self, pod: &PodInfo, node: &NodeInfo) -> i64 {
        let labels = &node.spec.labels;
        if !has_all_keys(labels, &self.constraints) {
            return IGNORED_SCORE;
        }
        let mut score = 0.0f64;
        for ((c, map), weight) in self.constraints.iter().zip(&self.counts).zip(&self.weights) {
            let Some(value) = labels.get(&c.topology_key) else {
                continue;
            };
            let count = if c.topology_key == LABEL_HOSTNAME {
                c.count_matching(&node.pods, &pod.key.namespace)
            } else {
                map.get(value.as_str()).copied().unwrap_or(0)
            };
            // Pod counts stay far below 2^52: the conversion is exact.
            #[allow(clippy::cast_precision_loss)]
            let count = count as f64;
            score += count * weight + f64::from(c.max_skew - 1);
        }
        // A sum of a few small terms: far inside i64.
        #[allow(clippy::cast_possible_truncation)]
        let rounded = score.round() as i64;
        rounded
    }
}

/// Upstream `NormalizeScore`: ignored nodes ([`IGNORED_SCORE`]) get 0; the
/// others `MAX_NODE_SCORE * (max + min - s) / max` over the non-ignored raw
/// scores, or `MAX_NODE_SCORE` for all when `max` is 0. Fewer pods in the
/// node's domains → higher score.
pub fn normalize_scores(scores: &mut [i64]) {
    let mut min = i64::MAX;
    let mut max = 0i64;
    for &s in scores.iter().filter(|s| **s != IGNORED_SCORE) {
        min = min.min(s);
        max = max.max(s);
    }
    for s in scores.iter_mut() {
        if *s == IGNORED_SCORE {
            *s = 0;
        } else if max == 0 {
            *s = MAX_NODE_SCORE;
        } else {
            *s = MAX_NODE_SCORE * (max + min - *s) / max;
        }
    }
}

#[cfg(test)]
mod tests {
    //! Cases mirror upstream's `filtering_test.go` (`TestPreFilterState`,
    //! `TestSingleConstraint`, `TestMultipleConstraints`) and
    //! `scoring_test.go` (`TestPodTopologySpreadScore`); names are upstream's.
    //! Upstream runs these without the NodeAffinity / TaintToleration
    //! filters, so nodes they would reject still get a verdict here too.

    use super::*;
    use crate::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{
        LabelSelector as K8sLabelSelector, LabelSelectorRequirement, Time,
    };

    const DNS: &str = "DoNotSchedule";
    const SA: &str = "ScheduleAnyway";

    fn exists(key: &str) -> Option<K8sLabelSelector> {
        Some(K8sLabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: key.into(),
                operator: "Exists".into(),
                values: None,
            }]),
            match_labels: None,
        })
    }

    /// upstream `fooSelector` / `barSelector`.
    fn foo() -> Option<K8sLabelSelector> {
        exists("foo")
    }
    fn bar() -> Option<K8sLabelSelector> {
        exists("bar")
    }

    fn tsc(
        max_skew: i32,
        key: &str,
        when: &str,
        selector: Option<K8sLabelSelector>,
    ) -> K8sTopologySpreadConstraint {
        K8sTopologySpreadConstraint {
            max_skew,
            topology_key: key.into(),
            when_unsatisfiable: when.into(),
            label_selector: selector,
            ..Default::default()
        }
    }

    /// A node with `labels` and no hostname label unless given.
    fn node(name: &str, labels: &[(&str, &str)]) -> NodeBuilder {
        let mut b = NodeBuilder::new(name);
        for (k, v) in labels {
            b = b.label(k, v);
        }
        b
    }

    fn without_hostname(b: NodeBuilder) -> NodeSpec {
        let mut n = b.build();
        n.metadata
            .labels
            .as_mut()
            .expect("labels")
            .remove(LABEL_HOSTNAME);
        NodeSpec::from_node(Arc::new(n)).expect("valid node")
    }

    /// `p(name, node)` with labels.
    fn p(name: &str, node: &str, labels: &[(&str, &str)]) -> PodBuilder {
        let mut b = PodBuilder::new(name).node_name(node);
        for (k, v) in labels {
            b = b.label(k, v);
        }
        b
    }

    fn terminating(b: PodBuilder) -> PodInfo {
        let mut pod = b.build();
        pod.metadata.deletion_timestamp = Some(Time(Default::default()));
        PodInfo::from_pod(Arc::new(pod)).expect("valid pod")
    }

    /// Places compiled pods on the nodes named by their `spec.nodeName`.
    fn cluster_of(specs: Vec<NodeSpec>, pods: Vec<PodInfo>) -> Vec<NodeInfo> {
        let mut nodes: Vec<NodeInfo> = specs
            .into_iter()
            .map(|s| NodeInfo::new(Arc::new(s)))
            .collect();
        for pod in pods {
            let target = pod.node_name.clone().expect("existing pods are bound");
            let n = nodes
                .iter_mut()
                .find(|n| n.name() == &*target)
                .expect("pod's node exists");
            n.add_pod(Arc::new(pod));
        }
        nodes
    }

    fn cluster(nodes: Vec<NodeBuilder>, pods: Vec<PodBuilder>) -> Vec<NodeInfo> {
        cluster_of(
            nodes.into_iter().map(NodeBuilder::build_spec).collect(),
            pods.into_iter().map(PodBuilder::build_info).collect(),
        )
    }

    fn incoming(
        labels: &[(&str, &str)],
        constraints: Vec<K8sTopologySpreadConstraint>,
    ) -> PodBuilder {
        let mut b = PodBuilder::new("p");
        for (k, v) in labels {
            b = b.label(k, v);
        }
        for c in constraints {
            b = b.spread_constraint(c);
        }
        b
    }

    /// Zone/node grid of upstream tests: node-a, node-b in zone1, node-x,
    /// node-y in zone2, each labelled `node=<name>`.
    fn grid() -> Vec<NodeBuilder> {
        ["node-a", "node-b", "node-x", "node-y"]
            .iter()
            .zip(["zone1", "zone1", "zone2", "zone2"])
            .map(|(n, z)| node(n, &[("zone", z), ("node", n)]))
            .collect()
    }

    fn counts_of(counts: &DomainCounts) -> Vec<(String, i64)> {
        let mut v: Vec<(String, i64)> =
            counts.counts.iter().map(|(k, n)| (k.clone(), *n)).collect();
        v.sort();
        v
    }

    fn kv(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        pairs.iter().map(|(k, n)| ((*k).to_owned(), *n)).collect()
    }

    /// Verdict of Filter for one node, in upstream's codes.
    #[derive(Debug, Clone, Copy, PartialEq, Eq)]
    enum V {
        Success,
        Unschedulable,
        Unresolvable,
    }
    use V::{Success as S, Unresolvable as UU, Unschedulable as U};

    fn filter_all(pod: &PodInfo, nodes: &[NodeInfo]) -> Vec<(String, V)> {
        let hard = hard_constraints(pod);
        let counts = count_domains(pod, &hard, nodes);
        let self_match: Vec<bool> = hard.iter().map(|c| c.selects(&pod.labels)).collect();
        nodes
            .iter()
            .map(|n| {
                let v = match check_node(&hard, &counts, &self_match, &n.spec) {
                    Ok(()) => S,
                    Err(e) if e.is_unresolvable() => UU,
                    Err(_) => U,
                };
                (n.name().to_owned(), v)
            })
            .collect()
    }

    fn want(pairs: &[(&str, V)]) -> Vec<(String, V)> {
        pairs.iter().map(|(n, v)| ((*n).to_owned(), *v)).collect()
    }

    // ---------------------------------------------------------------
    // Compilation.
    // ---------------------------------------------------------------

    #[test]
    fn compiles_defaults_and_merges_match_label_keys() {
        let pod = incoming(
            &[("app", "web"), ("pod-template-hash", "abc")],
            vec![K8sTopologySpreadConstraint {
                match_label_keys: Some(vec!["pod-template-hash".into(), "absent".into()]),
                ..tsc(1, "zone", DNS, exists("app"))
            }],
        )
        .build_info();
        let c = &pod.topology_spread_constraints[0];
        assert_eq!(c.max_skew, 1);
        assert_eq!(c.min_domains, 1);
        assert_eq!(c.node_affinity_policy, NodeInclusionPolicy::Honor);
        assert_eq!(c.node_taints_policy, NodeInclusionPolicy::Ignore);
        assert!(c.is_hard());
        let labels = |kv: &[(&str, &str)]| -> BTreeMap<String, String> {
            kv.iter().map(|(k, v)| ((*k).into(), (*v).into())).collect()
        };
        assert!(c.selects(&labels(&[("app", "x"), ("pod-template-hash", "abc")])));
        assert!(
            !c.selects(&labels(&[("app", "x"), ("pod-template-hash", "def")])),
            "matchLabelKeys adds pod-template-hash=abc"
        );
        assert!(!c.selects(&labels(&[("pod-template-hash", "abc")])));
        // Without a labelSelector nothing is selected, matchLabelKeys or not.
        let nil = incoming(
            &[("app", "web")],
            vec![K8sTopologySpreadConstraint {
                match_label_keys: Some(vec!["app".into()]),
                ..tsc(1, "zone", SA, None)
            }],
        )
        .build_info();
        assert!(nil.topology_spread_constraints[0].selector.is_none());
        assert!(!nil.topology_spread_constraints[0].selects(&labels(&[("app", "web")])));
    }

    #[test]
    fn bad_constraints_name_the_field() {
        let bad = |c: K8sTopologySpreadConstraint| {
            let pod = PodBuilder::new("bad")
                .spread_constraint(tsc(1, "zone", DNS, foo()))
                .spread_constraint(c)
                .build();
            PodInfo::from_pod(Arc::new(pod)).unwrap_err().to_string()
        };
        let cases: Vec<(K8sTopologySpreadConstraint, &str)> = vec![
            (
                tsc(0, "zone", DNS, foo()),
                "pod default/bad: spec.topologySpreadConstraints[1].maxSkew: Invalid value: 0: must be greater than zero",
            ),
            (
                tsc(1, "", DNS, foo()),
                "pod default/bad: spec.topologySpreadConstraints[1].topologyKey: Required value: can not be empty",
            ),
            (
                tsc(1, "zone", "Sometimes", foo()),
                "pod default/bad: spec.topologySpreadConstraints[1].whenUnsatisfiable: Unsupported value: \"Sometimes\": supported values: \"DoNotSchedule\", \"ScheduleAnyway\"",
            ),
            (
                K8sTopologySpreadConstraint {
                    min_domains: Some(0),
                    ..tsc(1, "zone", DNS, foo())
                },
                "pod default/bad: spec.topologySpreadConstraints[1].minDomains: Invalid value: 0: must be greater than zero",
            ),
            (
                K8sTopologySpreadConstraint {
                    min_domains: Some(3),
                    ..tsc(1, "zone", SA, foo())
                },
                "pod default/bad: spec.topologySpreadConstraints[1].minDomains: Invalid value: 3: can only use minDomains if whenUnsatisfiable=DoNotSchedule, not ScheduleAnyway",
            ),
            (
                K8sTopologySpreadConstraint {
                    node_affinity_policy: Some("Always".into()),
                    ..tsc(1, "zone", DNS, foo())
                },
                "pod default/bad: spec.topologySpreadConstraints[1].nodeAffinityPolicy: Unsupported value: \"Always\": supported values: \"Honor\", \"Ignore\"",
            ),
            (
                K8sTopologySpreadConstraint {
                    node_taints_policy: Some("honor".into()),
                    ..tsc(1, "zone", DNS, foo())
                },
                "pod default/bad: spec.topologySpreadConstraints[1].nodeTaintsPolicy: Unsupported value: \"honor\": supported values: \"Honor\", \"Ignore\"",
            ),
        ];
        for (c, msg) in cases {
            assert_eq!(bad(c), msg);
        }
        let sel = K8sLabelSelector {
            match_expressions: Some(vec![LabelSelectorRequirement {
                key: "a".into(),
                operator: "Gt".into(),
                values: Some(vec!["1".into()]),
            }]),
            match_labels: None,
        };
        let e = bad(tsc(1, "zone", DNS, Some(sel)));
        assert!(
            e.starts_with(
                "pod default/bad: spec.topologySpreadConstraints[1].labelSelector.matchExpressions[0].operator: "
            ),
            "{e}"
        );
    }

    // ---------------------------------------------------------------
    // PreFilter counts (upstream TestPreFilterState).
    // ---------------------------------------------------------------

    #[test]
    fn prefilter_counts_match_upstream() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            nodes: Vec<NodeBuilder>,
            pods: Vec<PodBuilder>,
            want: Vec<Vec<(String, i64)>>,
        }
        let five = || {
            vec![
                p("p-a1", "node-a", &[("foo", "")]),
                p("p-a2", "node-a", &[("foo", "")]),
                p("p-b1", "node-b", &[("foo", "")]),
                p("p-y1", "node-y", &[("foo", "")]),
                p("p-y2", "node-y", &[("foo", "")]),
            ]
        };
        let five_a = || {
            vec![
                p("p-a1", "node-a", &[("foo", "a")]),
                p("p-a2", "node-a", &[("foo", "a")]),
                p("p-b1", "node-b", &[("foo", "a")]),
                p("p-y1", "node-y", &[("foo", "a")]),
                p("p-y2", "node-y", &[("foo", "a")]),
            ]
        };
        let taint = |b: NodeBuilder| b.taint("node.kubernetes.io/unschedulable", "", "NoSchedule");
        let bar3 = || {
            vec![
                p("p-a", "node-a", &[("bar", "")]),
                p("p-b", "node-b", &[("bar", "")]),
                p("p-c", "node-b", &[("bar", "")]),
                p("p-d", "node-c", &[]),
            ]
        };
        let abc = |c_taint: bool| {
            let c = node("node-c", &[("node", "node-c"), ("bar", "")]);
            vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                if c_taint { taint(c) } else { c },
            ]
        };
        let cases = vec![
            Case {
                name: "clean cluster with one spreadConstraint",
                pod: incoming(
                    &[("foo", "")],
                    vec![tsc(
                        5,
                        "zone",
                        DNS,
                        Some(K8sLabelSelector {
                            match_labels: Some([("foo".to_owned(), "bar".to_owned())].into()),
                            match_expressions: None,
                        }),
                    )],
                ),
                nodes: grid(),
                pods: vec![],
                want: vec![kv(&[("zone1", 0), ("zone2", 0)])],
            },
            Case {
                name: "normal case with one spreadConstraint",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, foo())]),
                nodes: grid(),
                pods: five(),
                want: vec![kv(&[("zone1", 3), ("zone2", 2)])],
            },
            Case {
                name: "normal case with null label selector",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, None)]),
                nodes: grid(),
                pods: five(),
                want: vec![kv(&[("zone1", 0), ("zone2", 0)])],
            },
            Case {
                name: "namespace mismatch doesn't count",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, foo())]),
                nodes: grid(),
                pods: vec![
                    p("p-a1", "node-a", &[("foo", "")]),
                    p("p-a2", "node-a", &[("foo", "")]).namespace("ns1"),
                    p("p-b1", "node-b", &[("foo", "")]),
                    p("p-y1", "node-y", &[("foo", "")]).namespace("ns2"),
                    p("p-y2", "node-y", &[("foo", "")]),
                ],
                want: vec![kv(&[("zone1", 2), ("zone2", 1)])],
            },
            Case {
                name: "normal case with two spreadConstraints",
                pod: incoming(
                    &[("foo", "")],
                    vec![tsc(1, "zone", DNS, foo()), tsc(1, "node", DNS, foo())],
                ),
                nodes: grid(),
                pods: {
                    let mut v = five();
                    v.push(p("p-y3", "node-y", &[("foo", "")]));
                    v.push(p("p-y4", "node-y", &[("foo", "")]));
                    v
                },
                want: vec![
                    kv(&[("zone1", 3), ("zone2", 4)]),
                    kv(&[("node-a", 2), ("node-b", 1), ("node-x", 0), ("node-y", 4)]),
                ],
            },
            Case {
                name: "soft spreadConstraints should be bypassed",
                pod: incoming(
                    &[("foo", "")],
                    vec![
                        tsc(1, "zone", SA, foo()),
                        tsc(1, "zone", DNS, foo()),
                        tsc(1, "node", SA, foo()),
                        tsc(1, "node", DNS, foo()),
                    ],
                ),
                nodes: vec![
                    node("node-a", &[("zone", "zone1"), ("node", "node-a")]),
                    node("node-b", &[("zone", "zone1"), ("node", "node-b")]),
                    node("node-y", &[("zone", "zone2"), ("node", "node-y")]),
                ],
                pods: {
                    let mut v = five();
                    v.push(p("p-y3", "node-y", &[("foo", "")]));
                    v.push(p("p-y4", "node-y", &[("foo", "")]));
                    v
                },
                want: vec![
                    kv(&[("zone1", 3), ("zone2", 4)]),
                    kv(&[("node-a", 2), ("node-b", 1), ("node-y", 4)]),
                ],
            },
            Case {
                name: "NodeTaintsPolicy ignored",
                pod: incoming(&[("foo", "")], vec![tsc(1, "node", DNS, bar())]),
                nodes: abc(true),
                pods: bar3(),
                want: vec![kv(&[("node-a", 1), ("node-b", 2), ("node-c", 0)])],
            },
            Case {
                name: "NodeTaintsPolicy honored",
                pod: incoming(
                    &[("foo", "")],
                    vec![K8sTopologySpreadConstraint {
                        node_taints_policy: Some("Honor".into()),
                        ..tsc(1, "node", DNS, bar())
                    }],
                ),
                nodes: abc(true),
                pods: bar3(),
                want: vec![kv(&[("node-a", 1), ("node-b", 2)])],
            },
            Case {
                name: "NodeTaintsPolicy honored with tolerated taints",
                pod: incoming(
                    &[("foo", "")],
                    vec![K8sTopologySpreadConstraint {
                        node_taints_policy: Some("Honor".into()),
                        ..tsc(1, "node", DNS, bar())
                    }],
                )
                .toleration("node.kubernetes.io/unschedulable", "Exists", "", ""),
                nodes: abc(true),
                pods: bar3(),
                want: vec![kv(&[("node-a", 1), ("node-b", 2), ("node-c", 0)])],
            },
            Case {
                name: "NodeAffinityPolicy ignored with nodeAffinity",
                pod: incoming(
                    &[("foo", "")],
                    vec![K8sTopologySpreadConstraint {
                        node_affinity_policy: Some("Ignore".into()),
                        ..tsc(1, "node", DNS, bar())
                    }],
                )
                .required_affinity("foo", "In", &[""]),
                nodes: vec![
                    node("node-a", &[("node", "node-a"), ("foo", "")]),
                    node("node-b", &[("node", "node-b"), ("foo", "")]),
                    node("node-c", &[("node", "node-c"), ("bar", "")]),
                ],
                pods: bar3(),
                want: vec![kv(&[("node-a", 1), ("node-b", 2), ("node-c", 0)])],
            },
            Case {
                name: "two node inclusion Constraints, zone: honor/ignore, node: ignore/ignore",
                pod: incoming(
                    &[("foo", "")],
                    vec![
                        tsc(1, "zone", DNS, foo()),
                        K8sTopologySpreadConstraint {
                            node_affinity_policy: Some("Ignore".into()),
                            ..tsc(1, "node", DNS, foo())
                        },
                    ],
                )
                .node_selector("foo", ""),
                nodes: vec![
                    node(
                        "node-a",
                        &[("zone", "zone1"), ("node", "node-a"), ("foo", "")],
                    ),
                    node("node-b", &[("zone", "zone1"), ("node", "node-b")]),
                    node(
                        "node-x",
                        &[("zone", "zone2"), ("node", "node-x"), ("foo", "")],
                    ),
                ],
                pods: vec![
                    p("p-b1", "node-b", &[("foo", "")]),
                    p("p-b2", "node-b", &[("foo", "")]),
                    p("p-x1", "node-x", &[("foo", "")]),
                ],
                want: vec![
                    kv(&[("zone1", 0), ("zone2", 1)]),
                    kv(&[("node-a", 0), ("node-b", 2), ("node-x", 1)]),
                ],
            },
            Case {
                name: "two node inclusion Constraints, zone: ignore/ignore, node: honor/honor",
                pod: incoming(
                    &[("foo", "")],
                    vec![
                        K8sTopologySpreadConstraint {
                            node_affinity_policy: Some("Ignore".into()),
                            ..tsc(1, "zone", DNS, foo())
                        },
                        K8sTopologySpreadConstraint {
                            node_taints_policy: Some("Honor".into()),
                            ..tsc(1, "node", DNS, foo())
                        },
                    ],
                )
                .node_selector("foo", ""),
                nodes: vec![
                    node("node-a", &[("zone", "zone1"), ("node", "node-a")]),
                    taint(node(
                        "node-b",
                        &[("zone", "zone1"), ("node", "node-b"), ("foo", "")],
                    )),
                    node(
                        "node-x",
                        &[("zone", "zone2"), ("node", "node-x"), ("foo", "")],
                    ),
                    node(
                        "node-y",
                        &[("zone", "zone2"), ("node", "node-y"), ("foo", "")],
                    ),
                ],
                pods: vec![
                    p("p-a1", "node-a", &[("foo", "")]),
                    p("p-a2", "node-a", &[("foo", "")]),
                    p("p-x1", "node-x", &[("foo", "")]),
                    p("p-x2", "node-x", &[("foo", "")]),
                    p("p-y1", "node-y", &[("foo", "")]),
                ],
                want: vec![
                    kv(&[("zone1", 2), ("zone2", 3)]),
                    kv(&[("node-x", 2), ("node-y", 1)]),
                ],
            },
            Case {
                name: "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
                pod: incoming(
                    &[("foo", ""), ("bar", "a")],
                    vec![K8sTopologySpreadConstraint {
                        match_label_keys: Some(vec!["bar".into()]),
                        ..tsc(1, "zone", DNS, foo())
                    }],
                ),
                nodes: grid(),
                pods: vec![
                    p("p-a1", "node-a", &[("foo", "")]),
                    p("p-a2", "node-a", &[("foo", ""), ("bar", "a")]),
                    p("p-b1", "node-b", &[("foo", "")]),
                    p("p-y1", "node-y", &[("foo", ""), ("bar", "a")]),
                    p("p-y2", "node-y", &[("bar", "")]),
                ],
                want: vec![kv(&[("zone1", 1), ("zone2", 1)])],
            },
            Case {
                name: "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
                pod: incoming(
                    &[("foo", "a")],
                    vec![K8sTopologySpreadConstraint {
                        match_label_keys: Some(vec!["foo".into()]),
                        ..tsc(1, "zone", DNS, Some(K8sLabelSelector::default()))
                    }],
                ),
                nodes: grid(),
                pods: five_a(),
                want: vec![kv(&[("zone1", 3), ("zone2", 2)])],
            },
            Case {
                name: "key in matchLabelKeys is ignored when LabelSelector is nil when feature gate enabled",
                pod: incoming(
                    &[("foo", "")],
                    vec![K8sTopologySpreadConstraint {
                        match_label_keys: Some(vec!["bar".into()]),
                        ..tsc(1, "zone", DNS, None)
                    }],
                ),
                nodes: grid(),
                pods: five_a(),
                want: vec![kv(&[("zone1", 0), ("zone2", 0)])],
            },
            Case {
                name: "key in matchLabelKeys is ignored when it isn't exist in pod.labels",
                pod: incoming(
                    &[("foo", "")],
                    vec![K8sTopologySpreadConstraint {
                        match_label_keys: Some(vec!["bar".into()]),
                        ..tsc(1, "zone", DNS, foo())
                    }],
                ),
                nodes: grid(),
                pods: five_a(),
                want: vec![kv(&[("zone1", 3), ("zone2", 2)])],
            },
            Case {
                name: "two spreadConstraints with the same topologyKey",
                pod: incoming(
                    &[("foo", ""), ("bar", "")],
                    vec![tsc(1, "zone", DNS, foo()), tsc(1, "zone", DNS, bar())],
                ),
                nodes: grid(),
                pods: vec![
                    p("p-a1", "node-a", &[("foo", ""), ("bar", "")]),
                    p("p-b1", "node-b", &[("foo", "")]),
                    p("p-x1", "node-x", &[("bar", "")]),
                    p("p-y1", "node-y", &[("foo", ""), ("bar", "")]),
                    p("p-y2", "node-y", &[("bar", "")]),
                ],
                want: vec![
                    kv(&[("zone1", 2), ("zone2", 1)]),
                    kv(&[("zone1", 1), ("zone2", 3)]),
                ],
            },
        ];
        for case in cases {
            let pod = case.pod.build_info();
            let nodes = cluster(case.nodes, case.pods);
            let hard = hard_constraints(&pod);
            let got: Vec<_> = count_domains(&pod, &hard, &nodes)
                .iter()
                .map(counts_of)
                .collect();
            assert_eq!(got, case.want, "{}", case.name);
            // Counting in two halves and merging gives the same counts.
            let (left, right) = nodes.split_at(nodes.len() / 2);
            let mut merged = count_domains(&pod, &hard, left);
            for (m, r) in merged.iter_mut().zip(count_domains(&pod, &hard, right)) {
                m.merge(&r);
            }
            let merged: Vec<_> = merged.iter().map(counts_of).collect();
            assert_eq!(merged, case.want, "{} (merged)", case.name);
        }
    }

    #[test]
    fn empty_selector_counts_every_pod_of_the_namespace() {
        // kubernetes/kubernetes#141340: `labelSelector: {}` selects all pods.
        let pod = incoming(
            &[],
            vec![tsc(1, "zone", DNS, Some(K8sLabelSelector::default()))],
        )
        .build_info();
        let nodes = cluster(
            grid(),
            vec![
                p("a", "node-a", &[]),
                p("b", "node-b", &[("x", "y")]),
                p("c", "node-x", &[]).namespace("other"),
            ],
        );
        let hard = hard_constraints(&pod);
        let counts = count_domains(&pod, &hard, &nodes);
        assert_eq!(counts_of(&counts[0]), kv(&[("zone1", 2), ("zone2", 0)]));
        assert!(hard[0].selects(&pod.labels), "the pod matches itself");
    }

    // ---------------------------------------------------------------
    // Filter (upstream TestSingleConstraint, TestMultipleConstraints).
    // ---------------------------------------------------------------

    #[test]
    fn single_constraint_filter_matches_upstream() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            nodes: Vec<NodeSpec>,
            pods: Vec<PodInfo>,
            want: Vec<(String, V)>,
        }
        let specs = |v: Vec<NodeBuilder>| v.into_iter().map(NodeBuilder::build_spec).collect();
        let infos = |v: Vec<PodBuilder>| v.into_iter().map(PodBuilder::build_info).collect();
        let spread_2103 = || {
            infos(vec![
                p("p-a1", "node-a", &[("foo", "")]),
                p("p-a2", "node-a", &[("foo", "")]),
                p("p-b1", "node-b", &[("foo", "")]),
                p("p-y1", "node-y", &[("foo", "")]),
                p("p-y2", "node-y", &[("foo", "")]),
                p("p-y3", "node-y", &[("foo", "")]),
            ])
        };
        let abc = || {
            specs(vec![
                node("node-a", &[("node", "node-a")]),
                node("node-b", &[("node", "node-b")]),
                node("node-c", &[("node", "node-c")]),
            ])
        };
        let two_two_one = || {
            infos(vec![
                p("p-a1", "node-a", &[("foo", "")]),
                p("p-a2", "node-a", &[("foo", "")]),
                p("p-b1", "node-b", &[("foo", "")]),
                p("p-b2", "node-b", &[("foo", "")]),
                p("p-c1", "node-c", &[("foo", "")]),
            ])
        };
        let zone_2_1 = || {
            infos(vec![
                p("p-b1", "node-a", &[("foo", "")]),
                p("p-b2", "node-b", &[("foo", "")]),
                p("p-y1", "node-y", &[("foo", "")]),
            ])
        };
        let min_domains = |n: i32, key: &str| K8sTopologySpreadConstraint {
            min_domains: Some(n),
            ..tsc(2, key, DNS, foo())
        };
        let foo_nodes = || {
            specs(vec![
                node("node-a", &[("node", "node-a"), ("foo", "")]),
                node("node-b", &[("node", "node-b"), ("foo", "")]),
                node("node-x", &[("node", "node-x"), ("foo", "")]),
                node("node-y", &[("node", "node-y")]),
            ])
        };
        let one_one_zero_one = || {
            infos(vec![
                p("p-b1", "node-a", &[("foo", "")]),
                p("p-b2", "node-b", &[("foo", "")]),
                p("p-y1", "node-y", &[("foo", "")]),
            ])
        };
        let ignore = |c: K8sTopologySpreadConstraint| K8sTopologySpreadConstraint {
            node_affinity_policy: Some("Ignore".into()),
            ..c
        };
        let cases = vec![
            Case {
                name: "no existing pods",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, foo())]),
                nodes: specs(grid()),
                pods: vec![],
                want: want(&[("node-a", S), ("node-b", S), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "no existing pods, incoming pod doesn't match itself",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, bar())]),
                nodes: specs(grid()),
                pods: vec![],
                want: want(&[("node-a", S), ("node-b", S), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "existing pods in a different namespace do not count",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, foo())]),
                nodes: specs(grid()),
                pods: infos(vec![
                    p("p-a1", "node-a", &[("foo", "")]).namespace("ns1"),
                    p("p-b1", "node-a", &[("foo", "")]).namespace("ns2"),
                    p("p-x1", "node-x", &[("foo", "")]),
                    p("p-y1", "node-y", &[("foo", "")]),
                ]),
                want: want(&[("node-a", S), ("node-b", S), ("node-x", U), ("node-y", U)]),
            },
            Case {
                name: "existing pods do not match null selector",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, None)]),
                nodes: specs(grid()),
                pods: infos(vec![
                    p("p-x1", "node-x", &[("foo", "")]),
                    p("p-y1", "node-y", &[("foo", "")]),
                ]),
                want: want(&[("node-a", S), ("node-b", S), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "pods spread across zones as 3/3, all nodes fit",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, foo())]),
                nodes: specs(grid()),
                pods: spread_2103(),
                want: want(&[("node-a", S), ("node-b", S), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "pods spread across zones as 1/2 due to absence of label 'zone' on node-b",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, foo())]),
                nodes: specs(vec![
                    node("node-a", &[("zone", "zone1"), ("node", "node-a")]),
                    node("node-b", &[("zon", "zone1"), ("node", "node-b")]),
                    node("node-x", &[("zone", "zone2"), ("node", "node-x")]),
                    node("node-y", &[("zone", "zone2"), ("node", "node-y")]),
                ]),
                pods: infos(vec![
                    p("p-a1", "node-a", &[("foo", "")]),
                    p("p-b1", "node-b", &[("foo", "")]),
                    p("p-x1", "node-x", &[("foo", "")]),
                    p("p-y1", "node-y", &[("foo", "")]),
                ]),
                want: want(&[("node-a", S), ("node-b", UU), ("node-x", U), ("node-y", U)]),
            },
            Case {
                name: "pod cannot be scheduled as all nodes don't have label 'rack'",
                pod: incoming(&[("foo", "")], vec![tsc(1, "rack", DNS, foo())]),
                nodes: specs(vec![
                    node("node-a", &[("zone", "zone1"), ("node", "node-a")]),
                    node("node-x", &[("zone", "zone2"), ("node", "node-x")]),
                ]),
                pods: vec![],
                want: want(&[("node-a", UU), ("node-x", UU)]),
            },
            Case {
                name: "pods spread across nodes as 2/1/0/3, only node-x fits",
                pod: incoming(&[("foo", "")], vec![tsc(1, "node", DNS, foo())]),
                nodes: specs(grid()),
                pods: spread_2103(),
                want: want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)]),
            },
            Case {
                name: "pods spread across nodes as 2/1/0/3, maxSkew is 2, node-b and node-x fit",
                pod: incoming(&[("foo", "")], vec![tsc(2, "node", DNS, foo())]),
                nodes: specs(grid()),
                pods: spread_2103(),
                want: want(&[("node-a", U), ("node-b", S), ("node-x", S), ("node-y", U)]),
            },
            Case {
                name: "pods spread across nodes as 2/1/0/3, but pod doesn't match itself",
                pod: incoming(&[("bar", "")], vec![tsc(1, "node", DNS, foo())]),
                nodes: specs(grid()),
                pods: spread_2103(),
                want: want(&[("node-a", U), ("node-b", S), ("node-x", S), ("node-y", U)]),
            },
            Case {
                name: "incoming pod has nodeAffinity, pods spread as 2/~1~/~0~/3, hence node-a fits",
                pod: incoming(&[("foo", "")], vec![tsc(1, "node", DNS, foo())]).required_affinity(
                    "node",
                    "In",
                    &["node-a", "node-y"],
                ),
                nodes: specs(grid()),
                pods: spread_2103(),
                want: want(&[("node-a", S), ("node-b", S), ("node-x", S), ("node-y", U)]),
            },
            Case {
                name: "terminating Pods should be excluded",
                pod: incoming(&[("foo", "")], vec![tsc(1, "node", DNS, foo())]),
                nodes: specs(vec![
                    node("node-a", &[("node", "node-a")]),
                    node("node-b", &[("node", "node-b")]),
                ]),
                pods: vec![
                    terminating(p("p-a", "node-a", &[("foo", "")])),
                    p("p-b", "node-b", &[("foo", "")]).build_info(),
                ],
                want: want(&[("node-a", S), ("node-b", U)]),
            },
            Case {
                name: "incoming pod has nodeAffinity, pods spread as 0/~2~/0/1, hence node-a fits",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", DNS, foo())]).required_affinity(
                    "node",
                    "NotIn",
                    &["node-b"],
                ),
                nodes: specs(grid()),
                pods: infos(vec![
                    p("p-b1", "node-b", &[("foo", "")]),
                    p("p-b2", "node-b", &[("foo", "")]),
                    p("p-y1", "node-y", &[("foo", "")]),
                ]),
                want: want(&[("node-a", S), ("node-b", S), ("node-x", U), ("node-y", U)]),
            },
            Case {
                name: "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains < minDomains, then the third node fits",
                pod: incoming(&[("foo", "")], vec![min_domains(4, "node")]),
                nodes: abc(),
                pods: two_two_one(),
                want: want(&[("node-a", U), ("node-b", U), ("node-c", S)]),
            },
            Case {
                name: "pods spread across nodes as 2/2/1, maxSkew is 2, and the number of domains > minDomains, then the all nodes fit",
                pod: incoming(&[("foo", "")], vec![min_domains(2, "node")]),
                nodes: abc(),
                pods: two_two_one(),
                want: want(&[("node-a", S), ("node-b", S), ("node-c", S)]),
            },
            Case {
                name: "pods spread across zone as 2/1, maxSkew is 2 and the number of domains < minDomains, then the third and fourth nodes fit",
                pod: incoming(&[("foo", "")], vec![min_domains(3, "zone")]),
                nodes: specs(grid()),
                pods: zone_2_1(),
                want: want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "pods spread across zone as 2/1, maxSkew is 2 and the number of domains > minDomains, then the all nodes fit",
                pod: incoming(&[("foo", "")], vec![min_domains(1, "zone")]),
                nodes: specs(grid()),
                pods: zone_2_1(),
                want: want(&[("node-a", S), ("node-b", S), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "NodeAffinityPolicy honored with labelSelectors",
                pod: incoming(&[("foo", "")], vec![tsc(1, "node", DNS, foo())])
                    .node_selector("foo", ""),
                nodes: foo_nodes(),
                pods: one_one_zero_one(),
                want: want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "NodeAffinityPolicy ignored with labelSelectors",
                pod: incoming(&[("foo", "")], vec![ignore(tsc(1, "node", DNS, foo()))])
                    .node_selector("foo", ""),
                nodes: foo_nodes(),
                pods: one_one_zero_one(),
                want: want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)]),
            },
            Case {
                name: "NodeAffinityPolicy honored with nodeAffinity",
                pod: incoming(&[("foo", "")], vec![tsc(1, "node", DNS, foo())]).required_affinity(
                    "foo",
                    "In",
                    &[""],
                ),
                nodes: foo_nodes(),
                pods: one_one_zero_one(),
                want: want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "NodeAffinityPolicy ignored with nodeAffinity",
                pod: incoming(&[("foo", "")], vec![ignore(tsc(1, "node", DNS, foo()))])
                    .required_affinity("foo", "In", &[""]),
                nodes: foo_nodes(),
                pods: one_one_zero_one(),
                want: want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)]),
            },
            Case {
                name: "NodeTaintsPolicy honored",
                pod: incoming(
                    &[("foo", "")],
                    vec![K8sTopologySpreadConstraint {
                        node_taints_policy: Some("Honor".into()),
                        ..tsc(1, "node", DNS, foo())
                    }],
                ),
                nodes: specs(vec![
                    node("node-a", &[("node", "node-a"), ("foo", "")]),
                    node("node-b", &[("node", "node-b"), ("foo", "")]),
                    node("node-x", &[("node", "node-x"), ("foo", "")]),
                    node("node-y", &[("node", "node-y")]).taint(
                        "node.kubernetes.io/unschedulable",
                        "",
                        "NoSchedule",
                    ),
                ]),
                pods: one_one_zero_one(),
                want: want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", S)]),
            },
            Case {
                name: "NodeTaintsPolicy ignored",
                pod: incoming(&[("foo", "")], vec![tsc(1, "node", DNS, foo())]),
                nodes: specs(vec![
                    node("node-a", &[("node", "node-a"), ("foo", "")]),
                    node("node-b", &[("node", "node-b"), ("foo", "")]),
                    node("node-x", &[("node", "node-x"), ("foo", "")]),
                    node("node-y", &[("node", "node-y")]).taint(
                        "node.kubernetes.io/unschedulable",
                        "",
                        "NoSchedule",
                    ),
                ]),
                pods: one_one_zero_one(),
                want: want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)]),
            },
        ];
        for case in cases {
            let pod = case.pod.build_info();
            let nodes = cluster_of(case.nodes, case.pods);
            assert_eq!(filter_all(&pod, &nodes), case.want, "{}", case.name);
        }
    }

    #[test]
    fn multiple_constraints_filter_matches_upstream() {
        let foo_pods = |extra_y: bool| {
            let mut v = vec![
                p("p-a1", "node-a", &[("foo", "")]),
                p("p-a2", "node-a", &[("foo", "")]),
                p("p-b1", "node-b", &[("foo", "")]),
                p("p-y1", "node-y", &[("foo", "")]),
                p("p-y2", "node-y", &[("foo", "")]),
                p("p-y3", "node-y", &[("foo", "")]),
            ];
            if extra_y {
                v.push(p("p-y4", "node-y", &[("foo", "")]));
            }
            v
        };
        let zone_node = || vec![tsc(1, "zone", DNS, foo()), tsc(1, "node", DNS, foo())];
        /// (upstream name, incoming pod, existing pods, verdicts).
        type Case = (&'static str, PodBuilder, Vec<PodBuilder>, Vec<(String, V)>);
        let cases: Vec<Case> = vec![
            (
                "two Constraints on zone and node, spreads = [3/3, 2/1/0/3]",
                incoming(&[("foo", "")], zone_node()),
                foo_pods(false),
                want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)]),
            ),
            (
                "two Constraints on zone and node, spreads = [3/4, 2/1/0/4]",
                incoming(&[("foo", "")], zone_node()),
                foo_pods(true),
                want(&[("node-a", U), ("node-b", U), ("node-x", U), ("node-y", U)]),
            ),
            (
                "Constraints hold different labelSelectors, spreads = [1/0, 1/0/0/1]",
                incoming(
                    &[("foo", ""), ("bar", "")],
                    vec![tsc(1, "zone", DNS, foo()), tsc(1, "node", DNS, bar())],
                ),
                vec![
                    p("p-a1", "node-a", &[("foo", "")]),
                    p("p-y1", "node-y", &[("bar", "")]),
                ],
                want(&[("node-a", U), ("node-b", U), ("node-x", S), ("node-y", U)]),
            ),
        ];
        for (name, pod, pods, expected) in cases {
            let pod = pod.build_info();
            let nodes = cluster(grid(), pods);
            assert_eq!(filter_all(&pod, &nodes), expected, "{name}");
        }
    }

    #[test]
    fn first_failing_constraint_decides_and_violations_carry_upstream_reasons() {
        // node-b lacks "rack" (second constraint) but fails the zone skew
        // (first constraint) first: Unschedulable, like upstream's in-order
        // loop.
        let pod = incoming(
            &[("foo", "")],
            vec![tsc(1, "zone", DNS, foo()), tsc(1, "rack", DNS, foo())],
        )
        .build_info();
        let nodes = cluster(
            vec![
                node("node-a", &[("zone", "zone1"), ("rack", "r1")]),
                node("node-b", &[("zone", "zone2")]),
                node("node-c", &[("zone", "zone2"), ("rack", "r2")]),
            ],
            vec![
                p("p-b1", "node-b", &[("foo", "")]),
                p("p-c1", "node-c", &[("foo", "")]),
                p("p-c2", "node-c", &[("foo", "")]),
            ],
        );
        // node-b is no domain (it lacks rack, so its pod is not counted),
        // but it sits in zone2 which holds 2: 2 + 1 - 0 > 1.
        let err = check_placement(&pod, &nodes, &nodes[1]).unwrap_err();
        assert_eq!(
            err,
            SpreadViolation::MaxSkewExceeded {
                topology_key: "zone".into(),
                value: "zone2".into(),
                skew: 3,
                max_skew: 1,
            }
        );
        assert_eq!(
            err.reason(),
            "node(s) didn't match pod topology spread constraints"
        );
        assert!(!err.is_unresolvable());
        assert!(check_placement(&pod, &nodes, &nodes[0]).is_ok());
        let lone = cluster(vec![node("node-c", &[("zone", "zone1")])], vec![]);
        let err = check_placement(&pod, &lone, &lone[0]).unwrap_err();
        assert_eq!(
            err,
            SpreadViolation::MissingLabel {
                topology_key: "rack".into()
            }
        );
        assert_eq!(
            err.reason(),
            "node(s) didn't match pod topology spread constraints (missing required label)"
        );
        assert!(err.is_unresolvable());
        // A pod without hard constraints fits anywhere.
        let free = incoming(&[("foo", "")], vec![tsc(1, "zone", SA, foo())]).build_info();
        assert!(check_placement(&free, &nodes, &nodes[1]).is_ok());
    }

    // ---------------------------------------------------------------
    // Score (upstream TestPodTopologySpreadScore).
    // ---------------------------------------------------------------

    /// PreScore over `feasible` (a prefix of `all`), Score and
    /// NormalizeScore, like upstream's test loop.
    fn scores(pod: &PodInfo, all: &[NodeInfo], feasible: usize) -> Vec<(String, i64)> {
        let soft: Vec<_> = pod
            .topology_spread_constraints
            .iter()
            .filter(|c| !c.is_hard())
            .cloned()
            .collect();
        let mut state = SoftSpread::new(soft, &all[..feasible]);
        let partial = state.count(pod, all);
        state.add_counts(&partial);
        let mut raw: Vec<i64> = all[..feasible]
            .iter()
            .map(|n| state.raw_score(pod, n))
            .collect();
        normalize_scores(&mut raw);
        all[..feasible]
            .iter()
            .map(|n| n.name().to_owned())
            .zip(raw)
            .collect()
    }

    fn want_scores(pairs: &[(&str, i64)]) -> Vec<(String, i64)> {
        kv(pairs)
    }

    #[test]
    fn scores_match_upstream() {
        struct Case {
            name: &'static str,
            pod: PodBuilder,
            /// Feasible nodes first, then the failed ones.
            nodes: Vec<NodeSpec>,
            feasible: usize,
            pods: Vec<PodInfo>,
            want: Vec<(String, i64)>,
        }
        let h = |names: &[&str]| -> Vec<NodeSpec> {
            names.iter().map(|n| node(n, &[]).build_spec()).collect()
        };
        let infos = |v: Vec<PodBuilder>| -> Vec<PodInfo> {
            v.into_iter().map(PodBuilder::build_info).collect()
        };
        let foo_on = |spec: &[(&str, usize)]| -> Vec<PodInfo> {
            let mut v = Vec::new();
            for (node, n) in spec {
                for i in 0..*n {
                    let suffix = node.trim_start_matches("node-");
                    v.push(p(&format!("p-{suffix}{i}"), node, &[("foo", "")]).build_info());
                }
            }
            v
        };
        let host = |skew: i32, sel| tsc(skew, LABEL_HOSTNAME, SA, sel);
        let zones4 = || -> Vec<NodeSpec> {
            [
                ("node-a", "zone1"),
                ("node-b", "zone1"),
                ("node-x", "zone2"),
                ("node-y", "zone2"),
            ]
            .iter()
            .map(|(n, z)| node(n, &[("zone", z)]).build_spec())
            .collect()
        };
        let mixed = || {
            infos(vec![
                p("p-a1", "node-a", &[("foo", "")]),
                p("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                p("p-y1", "node-y", &[("foo", "")]),
                p("p-y2", "node-y", &[("bar", "")]),
            ])
        };
        let node_abc = |taint_c: bool, foo_ab: bool| -> Vec<NodeSpec> {
            ["node-a", "node-b", "node-c"]
                .iter()
                .map(|n| {
                    let mut b = node(n, &[("node", n)]);
                    if foo_ab && *n != "node-c" {
                        b = b.label("foo", "");
                    }
                    if taint_c && *n == "node-c" {
                        b.taint("node.kubernetes.io/unschedulable", "", "NoSchedule")
                    } else {
                        b
                    }
                    .build_spec()
                })
                .collect()
        };
        let policy = |aff: Option<&str>, taints: Option<&str>| K8sTopologySpreadConstraint {
            node_affinity_policy: aff.map(Into::into),
            node_taints_policy: taints.map(Into::into),
            ..tsc(1, "node", SA, foo())
        };
        let abc_pods = || foo_on(&[("node-a", 2), ("node-b", 1), ("node-c", 1)]);
        let mlk = |keys: &[&str], c: K8sTopologySpreadConstraint| K8sTopologySpreadConstraint {
            match_label_keys: Some(keys.iter().map(|k| (*k).into()).collect()),
            ..c
        };
        let abcd_zones = || -> Vec<NodeSpec> {
            [
                ("node-a", "zone1"),
                ("node-b", "zone1"),
                ("node-c", "zone2"),
                ("node-d", "zone2"),
            ]
            .iter()
            .map(|(n, z)| node(n, &[("zone", z)]).build_spec())
            .collect()
        };
        let cases = vec![
            Case {
                name: "one constraint on node, no existing pods",
                pod: incoming(&[("foo", "")], vec![host(1, foo())]),
                nodes: h(&["node-a", "node-b"]),
                feasible: 2,
                pods: vec![],
                want: want_scores(&[("node-a", 100), ("node-b", 100)]),
            },
            Case {
                name: "one constraint on node, only one node is candidate",
                pod: incoming(&[("foo", "")], vec![host(1, foo())]),
                nodes: h(&["node-a", "node-b"]),
                feasible: 1,
                pods: foo_on(&[("node-a", 2), ("node-b", 1)]),
                want: want_scores(&[("node-a", 100)]),
            },
            Case {
                name: "one constraint on node, all nodes have the same number of matching pods",
                pod: incoming(&[("foo", "")], vec![host(1, foo())]),
                nodes: h(&["node-a", "node-b"]),
                feasible: 2,
                pods: foo_on(&[("node-a", 1), ("node-b", 1)]),
                want: want_scores(&[("node-a", 100), ("node-b", 100)]),
            },
            Case {
                name: "one constraint on node, all 4 nodes are candidates",
                pod: incoming(&[("foo", "")], vec![host(1, foo())]),
                nodes: h(&["node-a", "node-b", "node-c", "node-d"]),
                feasible: 4,
                pods: foo_on(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
                want: want_scores(&[
                    ("node-a", 20),
                    ("node-b", 60),
                    ("node-c", 100),
                    ("node-d", 0),
                ]),
            },
            Case {
                name: "one constraint on node, null selector",
                pod: incoming(&[("foo", "")], vec![host(1, None)]),
                nodes: h(&["node-a", "node-b", "node-c", "node-d"]),
                feasible: 4,
                pods: foo_on(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
                want: want_scores(&[
                    ("node-a", 100),
                    ("node-b", 100),
                    ("node-c", 100),
                    ("node-d", 100),
                ]),
            },
            Case {
                name: "one constraint on node, all 4 nodes are candidates, maxSkew=2",
                pod: incoming(&[("foo", "")], vec![host(2, foo())]),
                nodes: h(&["node-a", "node-b", "node-c", "node-d"]),
                feasible: 4,
                pods: foo_on(&[("node-a", 2), ("node-b", 1), ("node-d", 3)]),
                want: want_scores(&[
                    ("node-a", 33),
                    ("node-b", 66),
                    ("node-c", 100),
                    ("node-d", 16),
                ]),
            },
            Case {
                name: "one constraint on node, all 4 nodes are candidates, maxSkew=3",
                pod: incoming(&[("foo", "")], vec![host(3, foo())]),
                nodes: h(&["node-a", "node-b", "node-c", "node-d"]),
                feasible: 4,
                pods: foo_on(&[("node-a", 4), ("node-b", 3), ("node-c", 2), ("node-d", 1)]),
                want: want_scores(&[
                    ("node-a", 44),
                    ("node-b", 66),
                    ("node-c", 77),
                    ("node-d", 100),
                ]),
            },
            Case {
                name: "one constraint on node, 3 out of 4 nodes are candidates",
                pod: incoming(&[("foo", "")], vec![host(1, foo())]),
                nodes: h(&["node-a", "node-b", "node-x", "node-y"]),
                feasible: 3,
                pods: foo_on(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
                want: want_scores(&[("node-a", 33), ("node-b", 83), ("node-x", 100)]),
            },
            Case {
                name: "one constraint on node, 3 out of 4 nodes are candidates, one node doesn't match topology key",
                pod: incoming(&[("foo", "")], vec![host(1, foo())]),
                nodes: vec![
                    node("node-a", &[]).build_spec(),
                    without_hostname(node("node-b", &[("n", "node-b")])),
                    node("node-x", &[]).build_spec(),
                    node("node-y", &[]).build_spec(),
                ],
                feasible: 3,
                pods: foo_on(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
                want: want_scores(&[("node-a", 16), ("node-b", 0), ("node-x", 100)]),
            },
            Case {
                name: "one constraint on zone, 3 out of 4 nodes are candidates",
                pod: incoming(&[("foo", "")], vec![tsc(1, "zone", SA, foo())]),
                nodes: zones4(),
                feasible: 3,
                pods: foo_on(&[("node-a", 4), ("node-b", 2), ("node-x", 1), ("node-y", 3)]),
                want: want_scores(&[("node-a", 75), ("node-b", 75), ("node-x", 100)]),
            },
            Case {
                name: "two Constraints on zone and node, 2 out of 4 nodes are candidates",
                pod: incoming(
                    &[("foo", "")],
                    vec![tsc(1, "zone", SA, foo()), host(1, foo())],
                ),
                nodes: {
                    let z = zones4();
                    vec![z[0].clone(), z[2].clone(), z[1].clone(), z[3].clone()]
                },
                feasible: 2,
                pods: foo_on(&[("node-a", 2), ("node-b", 1), ("node-x", 2), ("node-y", 4)]),
                want: want_scores(&[("node-a", 100), ("node-x", 63)]),
            },
            Case {
                name: "two Constraints on zone, 2 out of 4 nodes are candidates",
                pod: incoming(
                    &[("foo", ""), ("bar", "")],
                    vec![tsc(1, "zone", SA, foo()), tsc(1, "zone", SA, bar())],
                ),
                nodes: {
                    let z = zones4();
                    vec![z[0].clone(), z[2].clone(), z[1].clone(), z[3].clone()]
                },
                feasible: 2,
                pods: infos(vec![
                    p("p-a1", "node-a", &[("foo", ""), ("bar", "")]),
                    p("p-a2", "node-a", &[("foo", "")]),
                    p("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                    p("p-y1", "node-y", &[("foo", "")]),
                    p("p-y2", "node-y", &[("foo", ""), ("bar", "")]),
                    p("p-y3", "node-y", &[("foo", "")]),
                ]),
                want: want_scores(&[("node-a", 85), ("node-x", 100)]),
            },
            Case {
                name: "two Constraints on zone and node, with different labelSelectors",
                pod: incoming(
                    &[("foo", ""), ("bar", "")],
                    vec![tsc(1, "zone", SA, foo()), host(1, bar())],
                ),
                nodes: zones4(),
                feasible: 4,
                pods: mixed(),
                want: want_scores(&[
                    ("node-a", 60),
                    ("node-b", 20),
                    ("node-x", 100),
                    ("node-y", 60),
                ]),
            },
            Case {
                name: "two Constraints on zone and node, with different labelSelectors, some nodes have 0 pods",
                pod: incoming(
                    &[("foo", ""), ("bar", "")],
                    vec![tsc(1, "zone", SA, foo()), host(1, bar())],
                ),
                nodes: zones4(),
                feasible: 4,
                pods: infos(vec![
                    p("p-b1", "node-b", &[("bar", "")]),
                    p("p-x1", "node-x", &[("foo", "")]),
                    p("p-y1", "node-y", &[("foo", ""), ("bar", "")]),
                ]),
                want: want_scores(&[
                    ("node-a", 100),
                    ("node-b", 60),
                    ("node-x", 40),
                    ("node-y", 0),
                ]),
            },
            Case {
                name: "two Constraints on zone and node, with different labelSelectors, 3 out of 4 nodes are candidates",
                pod: incoming(
                    &[("foo", ""), ("bar", "")],
                    vec![tsc(1, "zone", SA, foo()), host(1, bar())],
                ),
                nodes: zones4(),
                feasible: 3,
                pods: mixed(),
                want: want_scores(&[("node-a", 50), ("node-b", 25), ("node-x", 100)]),
            },
            Case {
                name: "existing pods in a different namespace do not count",
                pod: incoming(&[("foo", "")], vec![host(1, foo())]),
                nodes: h(&["node-a", "node-b"]),
                feasible: 2,
                pods: infos(vec![
                    p("p-a1", "node-a", &[("foo", "")]).namespace("ns1"),
                    p("p-a2", "node-a", &[("foo", "")]),
                    p("p-b1", "node-b", &[("foo", "")]),
                    p("p-b2", "node-b", &[("foo", "")]),
                ]),
                want: want_scores(&[("node-a", 100), ("node-b", 33)]),
            },
            Case {
                name: "terminating Pods should be excluded",
                pod: incoming(&[("foo", "")], vec![host(1, foo())]),
                nodes: h(&["node-a", "node-b"]),
                feasible: 2,
                pods: vec![
                    terminating(p("p-a", "node-a", &[("foo", "")])),
                    p("p-b", "node-b", &[("foo", "")]).build_info(),
                ],
                want: want_scores(&[("node-a", 100), ("node-b", 0)]),
            },
            Case {
                name: "NodeAffinityPolicy honoed with labelSelectors",
                pod: incoming(&[("foo", "")], vec![policy(None, None)]).node_selector("foo", ""),
                nodes: node_abc(false, true),
                feasible: 3,
                pods: abc_pods(),
                want: want_scores(&[("node-a", 0), ("node-b", 33), ("node-c", 100)]),
            },
            Case {
                name: "NodeAffinityPolicy ignored with labelSelectors",
                pod: incoming(&[("foo", "")], vec![policy(Some("Ignore"), None)])
                    .node_selector("foo", ""),
                nodes: node_abc(false, true),
                feasible: 3,
                pods: abc_pods(),
                want: want_scores(&[("node-a", 66), ("node-b", 100), ("node-c", 100)]),
            },
            Case {
                name: "NodeAffinityPolicy honoed with nodeAffinity",
                pod: incoming(&[("foo", "")], vec![policy(None, None)]).required_affinity(
                    "foo",
                    "In",
                    &[""],
                ),
                nodes: node_abc(false, true),
                feasible: 3,
                pods: abc_pods(),
                want: want_scores(&[("node-a", 0), ("node-b", 33), ("node-c", 100)]),
            },
            Case {
                name: "NodeAffinityPolicy ignored with nodeAffinity",
                pod: incoming(&[("foo", "")], vec![policy(Some("Ignore"), None)])
                    .required_affinity("foo", "In", &[""]),
                nodes: node_abc(false, true),
                feasible: 3,
                pods: abc_pods(),
                want: want_scores(&[("node-a", 66), ("node-b", 100), ("node-c", 100)]),
            },
            Case {
                name: "NodeTaintsPolicy honored",
                pod: incoming(&[("foo", "")], vec![policy(None, Some("Honor"))]),
                nodes: node_abc(true, false),
                feasible: 3,
                pods: abc_pods(),
                want: want_scores(&[("node-a", 0), ("node-b", 33), ("node-c", 100)]),
            },
            Case {
                name: "NodeTaintsPolicy ignored",
                pod: incoming(&[("foo", "")], vec![policy(None, None)]),
                nodes: node_abc(true, false),
                feasible: 3,
                pods: abc_pods(),
                want: want_scores(&[("node-a", 66), ("node-b", 100), ("node-c", 100)]),
            },
            Case {
                name: "matchLabelKeys ANDed with LabelSelector when LabelSelector is empty",
                pod: incoming(
                    &[("foo", ""), ("bar", "")],
                    vec![
                        mlk(
                            &["foo"],
                            tsc(1, "zone", SA, Some(K8sLabelSelector::default())),
                        ),
                        mlk(&["bar"], host(1, Some(K8sLabelSelector::default()))),
                    ],
                ),
                nodes: abcd_zones(),
                feasible: 4,
                pods: infos(vec![
                    p("p-a1", "node-a", &[("foo", "")]),
                    p("p-b1", "node-b", &[("foo", ""), ("bar", "")]),
                    p("p-y1", "node-c", &[("foo", "")]),
                    p("p-y2", "node-c", &[("bar", "")]),
                ]),
                want: want_scores(&[
                    ("node-a", 60),
                    ("node-b", 20),
                    ("node-c", 60),
                    ("node-d", 100),
                ]),
            },
            Case {
                name: "matchLabelKeys ANDed with LabelSelector when LabelSelector isn't empty",
                pod: incoming(
                    &[("foo", ""), ("bar", ""), ("baz", "")],
                    vec![tsc(1, "zone", SA, foo()), mlk(&["baz"], host(1, bar()))],
                ),
                nodes: abcd_zones(),
                feasible: 4,
                pods: infos(vec![
                    p("p-a1", "node-a", &[("foo", "")]),
                    p("p-b1", "node-b", &[("foo", ""), ("bar", ""), ("baz", "")]),
                    p("p-c1", "node-c", &[("foo", "")]),
                    p("p-c2", "node-c", &[("bar", "")]),
                    p("p-d3", "node-c", &[("bar", ""), ("baz", "")]),
                ]),
                want: want_scores(&[
                    ("node-a", 60),
                    ("node-b", 20),
                    ("node-c", 60),
                    ("node-d", 100),
                ]),
            },
        ];
        for case in cases {
            let pod = case.pod.build_info();
            let nodes = cluster_of(case.nodes, case.pods);
            assert_eq!(
                scores(&pod, &nodes, case.feasible),
                case.want,
                "{}",
                case.name
            );
        }
    }

    #[test]
    fn normalizing_weight_and_normalize_follow_upstream_formulas() {
        assert!((topology_normalizing_weight(0) - 2f64.ln()).abs() < 1e-12);
        assert!((topology_normalizing_weight(3) - 5f64.ln()).abs() < 1e-12);
        let mut s = [4, 2, 0, 5];
        normalize_scores(&mut s);
        assert_eq!(s, [20, 60, 100, 0]);
        let mut s = [6, IGNORED_SCORE, 1];
        normalize_scores(&mut s);
        assert_eq!(
            s,
            [16, 0, 100],
            "ignored nodes neither count for min nor score"
        );
        let mut s = [0, 0, IGNORED_SCORE];
        normalize_scores(&mut s);
        assert_eq!(s, [100, 100, 0]);
    }
}
