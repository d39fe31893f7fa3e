//! Runs one scheduling cycle for one pod over a [`Snapshot`]:
//! PreFilter → (nominated node first) → Filter (parallel, stops once enough
//! feasible nodes are found) → Score → NormalizeScore → weight → pick the
//! best (ties at random).
//!
//! # Nominated pods
//! Pods a preemption nominated to a node (`status.nominatedNodeName`, kept
//! by the node cache and carried by the [`Snapshot`]) hold room there that
//! is not theirs yet. Like upstream's `RunFilterPluginsWithNominatedPods`,
//! Filter on a node that has nominated pods of **greater or equal
//! priority** than the pod (other than the pod itself) runs twice: pass 1
//! with those pods added to a copy of the node, pass 2, only if pass 1
//! passed, on the node as it is (a nominated pod may end up elsewhere, so
//! what fits only because it is absent must not pass either). Nodes without
//! such pods are filtered once, as before; a cycle over a snapshot without
//! nominations pays one emptiness check per node.
//!
//! Upstream updates PreFilter state for pass 1 with each plugin's
//! `PreFilterExtensions.AddPod`. Flotilla's plugins have no such hook:
//! pass 1 instead re-runs the PreFilter plugins that did not `Skip` over a
//! view of the snapshot in which that one node carries its nominated pods.
//! The state is then exactly what `AddPod` would have produced (the
//! InterPodAffinity and PodTopologySpread counts include the nominated pods
//! of that node, and only of that node), at the cost of a PreFilter pass
//! (O(nodes) for those two plugins) per node with nominated pods — nodes
//! with nominations are few (preemption leaves them), so this stays cheap.
//! Plugins that `Skip`ped in the cycle's PreFilter stay skipped in pass 1,
//! as upstream's `AddPod` skips them.
//!
//! A pod that itself has a nominated node tries that node first, alone
//! (upstream `evaluateNominatedNode`): if it passes Filter, it is chosen
//! without searching or scoring other nodes.

use std::collections::{BTreeMap, BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

use std::time::Instant;

use rayon::prelude::*;

use flotilla_shared::extender::EXTENDER_NAME;
use flotilla_shared::framework::BindCheck;
use flotilla_shared::framework::{
    ClusterEvent, Code, CycleState, Diagnosis, ExtensionPoint, FilterPlugin, FitError,
    PreFilterPlugin, PreScorePlugin, REASON_FILTERED_BY_PREFILTER, ScorePlugin, SharedLister,
    Status,
};
use flotilla_shared::metrics::sample_plugin_metrics;
use flotilla_shared::node_hot::{HotFilter, NodeHot};
use flotilla_shared::{NodeInfo, PodInfo};

use super::metrics::ProfileMetrics;
use super::profile::{Profile, num_feasible_nodes_to_find};
use super::registry::{PluginHandle, Registry, RegistryError};
use crate::cache::Snapshot;
use crate::cycle::CycleRng;
use crate::extender::Extenders;
use crate::framework::profile::TieBreak;
use crate::plugins::GpuShare;
use crate::preemption::DefaultPreemptionArgs;
use flotilla_shared::gpu::DeviceSet;

/// Filter runs on the calling thread for the first this-many candidates;
/// only if they did not yield enough feasible nodes does the rest run in
/// parallel chunks. Measured on 2 cores (criterion `scheduling_cycle`): a
/// fully parallel Filter was 5x slower for an easy pod at 1,000 nodes (135 µs
/// vs 26 µs sequential), because parallel chunks overshoot the feasible-node
/// limit and thread wake-ups cost more than the work; pods that fit on few
/// nodes (long scans) are where parallelism pays.
const SEQUENTIAL_FILTER_PREFIX: usize = 1024;
/// What `simulate` / `explain` show for a node an extender's filter
/// removed without naming it in `FailedNodes` (the FitError, as upstream's,
/// counts only the nodes given a reason).
pub const REASON_EXTENDER_REMOVED: &str = "removed by an extender's filter (no reason given)";
/// Nodes per parallel Filter task.
const FILTER_CHUNK: usize = 256;
/// Below this many feasible nodes, Score runs on the calling thread.
const PARALLEL_SCORE_MIN_NODES: usize = 4096;

/// Feasible nodes with their weighted Score totals, in the order found
/// ([`Framework::schedule_with_candidates`]).
pub type Candidates = Vec<(Arc<str>, i64)>;

/// The chosen node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ScheduleResult {
    /// Node name.
    pub node: Arc<str>,
    /// Its weighted total score (0 when only one node was feasible).
    pub score: i64,
    /// Nodes the Filter phase evaluated.
    pub evaluated: usize,
    /// Feasible nodes found (scored).
    pub feasible: usize,
    /// Whether the chosen node is outside the worker's partition (fallback).
    pub outside_partition: bool,
    /// The next best feasible nodes, best first, at most
    /// [`MAX_BIND_ALTERNATIVES`]: sent with the bind proposal, so that when
    /// another worker took the room on `node` first the arbiter grants the
    /// first of them that still fits instead of refusing (no second cycle
    /// on a view the arbiter knows is stale). Empty when only one node was
    /// feasible.
    pub alternatives: Vec<Arc<str>>,
    /// The GPU devices the pod takes on `node` (GpuShare's Reserve, set
    /// by the cycle when it assumes the pod): sent with the bind proposal
    /// for the arbiter to re-check. `None` for a pod asking for no GPU.
    pub gpu_devices: Option<DeviceSet>,
}

/// Most nodes a placement offers the arbiter after its choice
/// ([`ScheduleResult::alternatives`]). Each costs the arbiter one run of the
/// profile's bind checks, only when the nodes before it were taken.
pub const MAX_BIND_ALTERNATIVES: usize = 3;

/// What Score chose: the best node, its total, and the runners-up.
struct Selection {
    /// Index into the snapshot's nodes.
    best: usize,
    score: i64,
    /// Snapshot indices of the next best, best first
    /// ([`ScheduleResult::alternatives`]).
    alternatives: Vec<usize>,
    /// Each feasible node's total score, in the order of the feasible
    /// indices scored.
    totals: Vec<i64>,
}

/// Why a cycle placed no pod.
#[derive(Debug, Clone, thiserror::Error)]
pub enum ScheduleError {
    /// The pod fits on no node; carries the upstream message and per-node reasons.
    #[error("{0}")]
    Unschedulable(Box<FitError>),
    /// A plugin returned `Error`; the attempt fails and the pod backs off.
    #[error("plugin {plugin}: {message}")]
    Internal {
        /// The plugin.
        plugin: &'static str,
        /// Its message.
        message: String,
    },
}

/// A profile's plugins, instantiated and split by extension point.
pub struct Framework {
    profile_name: String,
    pre_filters: Vec<Arc<dyn PreFilterPlugin>>,
    filters: Vec<Arc<dyn FilterPlugin>>,
    /// The bind checks of the enabled Filters that provide one, in Filter
    /// order (the coordinator's arbiter runs them; the cycle does not).
    bind_checks: Vec<Arc<dyn BindCheck>>,
    /// Enabled Filters that provide no bind check, in Filter order.
    unchecked_filters: Vec<&'static str>,
    pre_scores: Vec<Arc<dyn PreScorePlugin>>,
    scores: Vec<(Arc<dyn ScorePlugin>, i64)>,
    /// Names enabled per extension point, in run order (for `explain` and
    /// config tests).
    enabled: BTreeMap<ExtensionPoint, Vec<&'static str>>,
    percentage_of_nodes_to_score: u32,
    interest: HashMap<ClusterEvent, HashSet<&'static str>>,
    /// Rotates where the Filter search starts, so every node gets examined
    /// (upstream `nextStartNodeIndex`).
    next_start: AtomicUsize,
    /// DefaultPreemption's args when the profile enables it at postFilter.
    preemption: Option<DefaultPreemptionArgs>,
    /// The scheduler's HTTP extenders (none: `None`), called after Filter,
    /// beside Score and in preemption ([`crate::extender`]).
    extenders: Option<Arc<Extenders>>,
    /// Handles into the process metrics for this profile.
    metrics: ProfileMetrics,
    /// GpuShare when the profile enables it at Filter: its Reserve picks
    /// the devices a GPU pod takes on its chosen node.
    gpu_share: Option<Arc<GpuShare>>,
    /// How equally scored nodes are told apart.
    tie_break: TieBreak,
}

impl std::fmt::Debug for Framework {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Framework")
            .field("profile", &self.profile_name)
            .field("enabled", &self.enabled)
            .field(
                "score_weights",
                &self
                    .scores
                    .iter()
                    .map(|(p, w)| (p.name(), *w))
                    .collect::<Vec<_>>(),
            )
            .finish_non_exhaustive()
    }
}

/// Filter results: feasible node indices, and rejected ones with why.
type FilterOutcome<'f> = (Vec<usize>, Vec<(usize, Rejection<'f>)>);

/// Why the search rejected a node: the Filter chain's status, or only the
/// Filter whose [`FilterPlugin::fits`] said no, its status built when
/// someone reads it ([`Rejection::into_status`]: a FitError, `explain`).
/// Most rejected nodes' statuses are never read: the pod is placed.
enum Rejection<'f> {
    /// The first non-success status of the chain, with its plugin.
    Status(Status),
    /// This Filter rejected the node (every Filter before it passed).
    By(&'f Arc<dyn FilterPlugin>),
}

impl Rejection<'_> {
    /// The status the whole chain gives: for [`Rejection::By`], that
    /// Filter's `filter` on the same node (the Filters before it passed,
    /// and its `fits` promised a non-success, non-`Error` status).
    fn into_status(self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status {
        match self {
            Rejection::Status(st) => st,
            Rejection::By(f) => f.filter(state, pod, node).with_plugin(f.name()),
        }
    }
}

/// What the PreFilter plugins left for Filter
/// ([`Framework::run_pre_filter_plugins`]).
#[derive(Debug, Default)]
pub struct PreFilterOutcome {
    /// The cycle state they wrote.
    pub state: CycleState,
    /// Plugins whose PreFilter returned `Skip`: their Filter does not run
    /// for this pod (upstream `SkipFilterPlugins`).
    pub skipped: Vec<&'static str>,
    /// The only node names worth filtering (intersection of every plugin's
    /// [`flotilla_shared::framework::PreFilterResult`]); `None`: all nodes.
    pub node_names: Option<HashSet<Arc<str>>>,
    /// Filter calls left to time for `scheduler_plugin_execution_duration_seconds`
    /// in this cycle (0 outside sampled cycles).
    timed_filter_nodes: AtomicUsize,
}

impl PreFilterOutcome {
    /// Whether some of this cycle's timed Filter calls are still to come.
    fn timing_pending(&self) -> bool {
        self.timed_filter_nodes.load(Ordering::Relaxed) > 0
    }

    /// Whether this node's Filter calls are timed (uses up one of the
    /// cycle's timed nodes).
    fn take_timed_node(&self) -> bool {
        self.timed_filter_nodes.load(Ordering::Relaxed) > 0
            && self
                .timed_filter_nodes
                .fetch_update(Ordering::Relaxed, Ordering::Relaxed, |b| b.checked_sub(1))
                .is_ok()
    }
}

/// In a sampled cycle (one in ten, upstream's `pluginMetricsSamplePercent`),
/// how many nodes' Filter and Score calls are timed per plugin: enough for
/// the distribution, few enough that sampling stays cheap.
const TIMED_NODES_PER_SAMPLED_CYCLE: usize = 8;

/// The index of the highest total; among several, the `draw(ties)`-th of
/// them in order, where `draw(n)` is uniform over `0..n`: every tied node
/// is picked equally often, as with upstream's reservoir sampling, for one
/// random number per cycle instead of one per tie. 0 when `totals` is
/// empty.
fn pick_best(totals: &[i64], draw: impl FnOnce(usize) -> usize) -> usize {
    let Some(&max) = totals.iter().max() else {
        return 0;
    };
    let ties = totals.iter().filter(|&&t| t == max).count();
    let nth = if ties > 1 { draw(ties) } else { 0 };
    totals
        .iter()
        .enumerate()
        .filter(|(_, t)| **t == max)
        .nth(nth)
        .map_or(0, |(i, _)| i)
}

/// The index of the highest total; among several, the one whose node
/// `name(index)` is smallest ([`TieBreak::NodeName`]). 0 when `totals` is
/// empty.
fn smallest_name_best<'n>(totals: &[i64], name: impl Fn(usize) -> &'n str) -> usize {
    let Some(&max) = totals.iter().max() else {
        return 0;
    };
    (0..totals.len())
        .filter(|&i| totals[i] == max)
        .min_by(|&a, &b| name(a).cmp(name(b)))
        .unwrap_or(0)
}

/// The indices of the `k` highest totals other than `best`'s, highest
/// first (ties in index order).
fn runners_up(totals: &[i64], best: usize, k: usize) -> Vec<usize> {
    let mut top: Vec<usize> = Vec::with_capacity(k + 1);
    for (i, &t) in totals.iter().enumerate() {
        if i == best || k == 0 {
            continue;
        }
        // Where `i` ranks among the kept (after those with a total at
        // least its own), if within the first `k`.
        let at = top.partition_point(|&j| totals[j] >= t);
        if at < k {
            top.insert(at, i);
            top.truncate(k);
        }
    }
    top
}

#[cfg(test)]
mod pick_best_tests {
    use super::{pick_best, runners_up};

    #[test]
    fn node_name_ties_go_to_the_smallest_name() {
        let names = ["n-3", "n-1", "n-2", "n-0"];
        assert_eq!(super::smallest_name_best(&[5, 9, 9, 1], |i| names[i]), 1);
        assert_eq!(super::smallest_name_best(&[9, 9, 9, 9], |i| names[i]), 3);
        assert_eq!(super::smallest_name_best(&[1, 2, 0, 0], |i| names[i]), 1);
        assert_eq!(super::smallest_name_best(&[], |i| names[i]), 0);
    }

    #[test]
    fn runners_up_are_the_next_highest_totals_best_first() {
        let totals = [5, 9, 1, 9, 7, 3, 8];
        assert_eq!(runners_up(&totals, 1, 3), [3, 6, 4]);
        assert_eq!(runners_up(&totals, 3, 2), [1, 6]);
        assert_eq!(runners_up(&totals, 1, 0), Vec::<usize>::new());
        assert_eq!(runners_up(&[4], 0, 3), Vec::<usize>::new());
        assert_eq!(
            runners_up(&[4, 4, 4], 1, 3),
            [0, 2],
            "ties keep index order"
        );
    }

    #[test]
    fn the_draw_chooses_among_the_tied_best_only() {
        let totals = [5, 9, 1, 9, 9, 3];
        let picks: Vec<usize> = (0..3)
            .map(|k| {
                pick_best(&totals, |ties| {
                    assert_eq!(ties, 3, "three nodes share the best total");
                    k
                })
            })
            .collect();
        assert_eq!(picks, [1, 3, 4]);
        assert_eq!(pick_best(&[1, 7, 2], |_| unreachable!("no tie")), 1);
        assert_eq!(pick_best(&[], |_| unreachable!("nothing to draw")), 0);
    }
}

/// Nodes per parallel Score task.
const SCORE_CHUNK: usize = 1024;

/// One plugin's raw scores of the nodes `idx` into `out`: the hot records
/// first, in one batch ([`ScorePlugin::score_hot_batch`]), then the full
/// `NodeInfo` for the nodes they could not score. `hot_out` is scratch of
/// the same length.
fn score_chunk(
    plugin: &dyn ScorePlugin,
    state: &CycleState,
    pod: &PodInfo,
    snap: &Snapshot,
    idx: &[usize],
    hot_out: &mut [Option<i64>],
    out: &mut [i64],
) -> Result<(), Status> {
    plugin.score_hot_batch(state, pod, snap.hot(), idx, hot_out);
    let nodes = snap.nodes();
    for ((o, h), &i) in out.iter_mut().zip(hot_out.iter()).zip(idx) {
        *o = match h {
            Some(s) => *s,
            None => plugin.score(state, pod, &nodes[i])?,
        };
    }
    Ok(())
}

/// A snapshot seen with one node replaced (by the same node carrying its
/// nominated pods): what pass 1 of the nominated-pods check re-runs
/// PreFilter over.
struct NodeOverlay<'a> {
    base: &'a Snapshot,
    nodes: Vec<Arc<NodeInfo>>,
}

impl SharedLister for NodeOverlay<'_> {
    fn nodes(&self) -> &[Arc<NodeInfo>] {
        &self.nodes
    }

    fn get(&self, name: &str) -> Option<&Arc<NodeInfo>> {
        self.base.index_of(name).map(|i| &self.nodes[i])
    }

    fn namespace_labels(&self, namespace: &str) -> Option<&BTreeMap<String, String>> {
        self.base.namespace_labels(namespace)
    }

    fn image_node_count(&self, image: &str) -> usize {
        self.base.image_node_count(image)
    }

    fn volumes(&self) -> Arc<flotilla_shared::volumes::VolumeState> {
        self.base.volumes()
    }

    // `claim_used_by_other_pod`: the trait's walk over `nodes`, which holds
    // the replaced node (a rare path: pods nominated to the node).
}

/// One scored node in a [`CycleDetail`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeScores {
    /// Node name.
    pub node: Arc<str>,
    /// Each Score plugin's normalized score (0..=100) before weighting, in
    /// run order.
    pub plugin_scores: Vec<(&'static str, i64)>,
    /// Each extender's scaled score (`score × weight × 10`), by its
    /// `urlPrefix`, in call order (extenders that failed are absent).
    pub extender_scores: Vec<(Arc<str>, i64)>,
    /// Weighted sum of plugin and extender scores.
    pub total: i64,
}

/// What one cycle saw, for `simulate` / `explain`: every node Filter (or an
/// extender) rejected with its status, and every node scored. Nodes the
/// search never reached (`percentageOfNodesToScore`) appear in neither.
#[derive(Debug, Clone, Default)]
pub struct CycleDetail {
    /// Rejected nodes with the first rejecting plugin's status (PreFilter
    /// rejections: every node, with that plugin's status).
    pub rejected: Vec<(Arc<str>, Status)>,
    /// Scored (feasible) nodes. Unlike a normal cycle, a single feasible node
    /// is scored too, so its plugin scores can be shown.
    pub scored: Vec<NodeScores>,
}

/// Ordered set that remembers insertion order.
#[derive(Default)]
struct Ordered(Vec<String>);

impl Ordered {
    fn has(&self, n: &str) -> bool {
        self.0.iter().any(|x| x == n)
    }
}

/// The Filters' fast path for one cycle: the AND of their hot conditions
/// (a node meeting it needs only the `residual` Filters, those without a
/// condition), and each Filter's own condition (`each[i]` for the i-th
/// running Filter) for the nodes that miss the AND.
struct HotPath<'f> {
    cond: HotFilter,
    residual: Vec<&'f Arc<dyn FilterPlugin>>,
    each: Vec<Option<HotFilter>>,
}

impl Framework {
    /// Instantiates `profile`'s plugins from `registry`: every plugin named at
    /// any point (or `multiPoint`) is built once with its `pluginConfig`
    /// args, then `multiPoint` is expanded as upstream's framework does
    /// (`expandMultiPointPlugins`): at each point, plugins explicitly enabled
    /// there that also appear in `multiPoint` come first (explicit settings
    /// win), then the other `multiPoint` plugins that implement the point and
    /// are not disabled there, then the remaining explicit ones; a point
    /// with `disabled: ["*"]` gets no `multiPoint` plugins. Score weights:
    /// the `score` entry's weight wins over `multiPoint`'s; 0 counts as 1.
    ///
    /// # Errors
    /// An unknown plugin, bad args, a plugin enabled at a point it does not
    /// implement, a plugin enabled twice at one point, a negative weight,
    /// no QueueSort plugin or more than one, or no Bind plugin (upstream's
    /// `NewFramework` errors).
    pub fn new(profile: &Profile, registry: &Registry) -> Result<Self, RegistryError> {
        let perr = |message: String| RegistryError::Profile {
            profile: profile.scheduler_name.clone(),
            message,
        };
        // Build every plugin named anywhere, once.
        let mut handles: BTreeMap<String, PluginHandle> = BTreeMap::new();
        let named = profile.plugins.multi_point.enabled.iter().chain(
            profile
                .plugins
                .points
                .values()
                .flat_map(|s| s.enabled.iter()),
        );
        for r in named {
            if !handles.contains_key(&r.name) {
                let h = registry.build(&r.name, profile.plugin_config.get(&r.name))?;
                handles.insert(r.name.clone(), h);
            }
        }

        let mut enabled: BTreeMap<ExtensionPoint, Vec<&'static str>> = BTreeMap::new();
        for point in ExtensionPoint::ALL {
            let set = profile.plugins.point(point);
            let mut explicit = Ordered::default();
            for r in &set.enabled {
                let h = &handles[&r.name];
                if !h.implements(point) {
                    return Err(perr(point.not_extended(&r.name)));
                }
                if explicit.has(&r.name) {
                    return Err(perr(point.already_registered(&r.name)));
                }
                explicit.0.push(r.name.clone());
            }
            let disabled: HashSet<&str> = set.disabled.iter().map(String::as_str).collect();
            let mut overrides = Ordered::default();
            let mut multi = Ordered::default();
            if !disabled.contains("*") {
                for r in &profile.plugins.multi_point.enabled {
                    if !handles[&r.name].implements(point) || disabled.contains(r.name.as_str()) {
                        continue;
                    }
                    if explicit.has(&r.name) {
                        overrides.0.push(r.name.clone());
                        continue;
                    }
                    if multi.has(&r.name) {
                        return Err(perr(point.already_registered(&r.name)));
                    }
                    multi.0.push(r.name.clone());
                }
            }
            let order: Vec<&String> = overrides
                .0
                .iter()
                .chain(multi.0.iter())
                .chain(explicit.0.iter().filter(|n| !overrides.has(n)))
                .collect();
            let names: Vec<&'static str> =
                order.iter().map(|n| handles[*n].plugin.name()).collect();
            enabled.insert(point, names);
        }
        match enabled[&ExtensionPoint::QueueSort].len() {
            1 => {}
            0 => return Err(perr("no queue sort plugin is enabled".into())),
            _ => return Err(perr("only one queue sort plugin can be enabled".into())),
        }
        if enabled[&ExtensionPoint::Bind].is_empty() {
            return Err(perr("at least one bind plugin is needed".into()));
        }

        // Weights: `score` entries first, then multiPoint; first one wins.
        let mut weights: HashMap<&str, i64> = HashMap::new();
        let score_set = profile.plugins.point(ExtensionPoint::Score);
        for r in score_set
            .enabled
            .iter()
            .chain(profile.plugins.multi_point.enabled.iter())
        {
            if r.weight < 0 {
                return Err(perr(format!(
                    "score plugin {:?} weight {} must not be negative",
                    r.name, r.weight
                )));
            }
            if handles[&r.name].score.is_some() && !weights.contains_key(r.name.as_str()) {
                weights.insert(handles[&r.name].plugin.name(), r.weight.max(1));
            }
        }

        let by_name: HashMap<&'static str, &PluginHandle> =
            handles.values().map(|h| (h.plugin.name(), h)).collect();
        let mut fw = Framework {
            profile_name: profile.scheduler_name.clone(),
            pre_filters: Vec::new(),
            filters: Vec::new(),
            bind_checks: Vec::new(),
            unchecked_filters: Vec::new(),
            pre_scores: Vec::new(),
            scores: Vec::new(),
            enabled: BTreeMap::new(),
            percentage_of_nodes_to_score: profile.percentage_of_nodes_to_score,
            interest: HashMap::new(),
            next_start: AtomicUsize::new(0),
            preemption: None,
            extenders: None,
            metrics: ProfileMetrics::new(&profile.scheduler_name, &[]),
            gpu_share: None,
            tie_break: profile.tie_break,
        };
        for (point, names) in &enabled {
            for name in names {
                let h = by_name[name];
                match point {
                    ExtensionPoint::PreFilter => fw.pre_filters.extend(h.pre_filter.clone()),
                    ExtensionPoint::Filter => {
                        fw.filters.extend(h.filter.clone());
                        fw.gpu_share = fw.gpu_share.take().or_else(|| h.gpu_share.clone());
                        match &h.bind_check {
                            Some(c) => fw.bind_checks.push(c.clone()),
                            None => fw.unchecked_filters.push(name),
                        }
                        // Only plugins that can reject decide requeueing.
                        for ev in h.plugin.events_to_register() {
                            fw.interest.entry(*ev).or_default().insert(name);
                        }
                    }
                    // PreEnqueue and Permit plugins reject too (GangScheduling).
                    ExtensionPoint::PreEnqueue | ExtensionPoint::Permit => {
                        for ev in h.plugin.events_to_register() {
                            fw.interest.entry(*ev).or_default().insert(name);
                        }
                    }
                    ExtensionPoint::PreScore => fw.pre_scores.extend(h.pre_score.clone()),
                    ExtensionPoint::PostFilter => {
                        fw.preemption = fw.preemption.or(h.preemption_args);
                    }
                    ExtensionPoint::Score => {
                        if let Some(p) = h.score.clone() {
                            fw.scores.push((p, weights.get(name).copied().unwrap_or(1)));
                        }
                    }
                    _ => {}
                }
            }
        }
        // A Score whose plugin's PreScore is not enabled still gets what it
        // needs computed per cycle (upstream's NodeAffinity, NodeResourcesFit
        // and BalancedAllocation compute it in Score; its ImageLocality has
        // no PreScore point at all), after the enabled PreScores.
        for name in &enabled[&ExtensionPoint::Score] {
            if enabled[&ExtensionPoint::PreScore].contains(name) {
                continue;
            }
            if let Some(p) = by_name[name].score_preparation() {
                fw.pre_scores.push(p.clone());
            }
        }
        for p in &fw.pre_filters {
            for ev in p.events_to_register() {
                fw.interest.entry(*ev).or_default().insert(p.name());
            }
        }
        fw.enabled = enabled;
        let timed: Vec<(&'static str, ExtensionPoint)> = fw
            .pre_filters
            .iter()
            .map(|p| (p.name(), ExtensionPoint::PreFilter))
            .chain(
                fw.filters
                    .iter()
                    .map(|p| (p.name(), ExtensionPoint::Filter)),
            )
            .chain(
                fw.pre_scores
                    .iter()
                    .map(|p| (p.name(), ExtensionPoint::PreScore)),
            )
            .chain(
                fw.scores
                    .iter()
                    .map(|(p, _)| (p.name(), ExtensionPoint::Score)),
            )
            .collect();
        fw.metrics = ProfileMetrics::new(&fw.profile_name, &timed);
        Ok(fw)
    }

    /// This profile's handles into the process metrics (the worker records
    /// attempts with them).
    #[must_use]
    pub fn metrics(&self) -> &ProfileMetrics {
        &self.metrics
    }

    /// Plugin names enabled at `point`, in run order.
    #[must_use]
    pub fn enabled_at(&self, point: ExtensionPoint) -> &[&'static str] {
        self.enabled.get(&point).map_or(&[], Vec::as_slice)
    }

    /// The bind-time re-checks of the enabled Filter plugins that provide
    /// one, in Filter order: what the coordinator's bind arbiter runs for
    /// this profile's pods ([`BindCheck`]).
    #[must_use]
    pub fn bind_checks(&self) -> &[Arc<dyn BindCheck>] {
        &self.bind_checks
    }

    /// The enabled Filter plugins that provide no bind check, in Filter
    /// order: the arbiter does not re-check them.
    #[must_use]
    pub fn unchecked_filters(&self) -> &[&'static str] {
        &self.unchecked_filters
    }

    /// Score plugins with their effective weights, in run order.
    #[must_use]
    pub fn score_weights(&self) -> Vec<(&'static str, i64)> {
        self.scores.iter().map(|(p, w)| (p.name(), *w)).collect()
    }

    /// `percentageOfNodesToScore` of this profile (0 = adaptive).
    #[must_use]
    pub fn percentage_of_nodes_to_score(&self) -> u32 {
        self.percentage_of_nodes_to_score
    }

    /// The profile's scheduler name.
    #[must_use]
    pub fn profile_name(&self) -> &str {
        &self.profile_name
    }

    /// DefaultPreemption's args when the profile enables it at `postFilter`
    /// (directly or through `multiPoint`); `None` when it is disabled, so
    /// unschedulable pods just wait.
    #[must_use]
    pub fn preemption(&self) -> Option<&DefaultPreemptionArgs> {
        self.preemption.as_ref()
    }

    /// GpuShare's Reserve: `pod` as it is assumed on `node`, holding the
    /// GPU devices the profile's GpuShare chooses there (the same `pod`
    /// when it asks for no GPU, the profile does not enable GpuShare, or
    /// nothing fits: the node then counts it on the default rule's
    /// devices).
    #[must_use]
    pub fn reserve_gpus(&self, pod: &Arc<PodInfo>, node: Option<&NodeInfo>) -> Arc<PodInfo> {
        match (&self.gpu_share, node, pod.gpu.is_some()) {
            (Some(g), Some(node), true) => match g.choose_devices(pod, node) {
                Some(d) => Arc::new(pod.with_gpu_devices(d)),
                None => pod.clone(),
            },
            _ => pod.clone(),
        }
    }

    /// Gives the framework the scheduler's HTTP extenders (upstream's
    /// extenders are scheduler-wide: every profile calls the same ones). An
    /// empty set changes nothing.
    #[must_use]
    pub fn with_extenders(mut self, extenders: Arc<Extenders>) -> Self {
        self.extenders = (!extenders.is_empty()).then_some(extenders);
        if self.extenders.is_some() {
            // Extenders register for no event: a pod they filtered nodes
            // out for is retried on any (upstream `ExtenderName` in the
            // rejecting plugins).
            for ev in ClusterEvent::ALL {
                self.interest.entry(ev).or_default().insert(EXTENDER_NAME);
            }
        }
        self
    }

    /// The extenders this framework calls, if any.
    #[must_use]
    pub fn extenders(&self) -> Option<&Arc<Extenders>> {
        self.extenders.as_ref()
    }

    /// Preemption's dry-run check: every PreFilter plugin over `snap` (fresh
    /// cycle state), then the Filter plugins not skipped by their PreFilter
    /// on `node`, counting the pods nominated to it with a priority at least
    /// the pod's, as upstream's `SelectVictimsOnNode` does (through
    /// `RunFilterPluginsWithNominatedPods`): a node whose room a previous
    /// preemption already claimed does not look free. The first rejecting
    /// status is returned (with its plugin); a node outside a
    /// PreFilterResult gets upstream's `node is filtered out by the
    /// prefilter result`.
    pub(crate) fn dry_run_filters(
        &self,
        pod: &PodInfo,
        snap: &Snapshot,
        node: &NodeInfo,
    ) -> Status {
        let pre = match self.run_pre_filter_plugins(pod, snap) {
            Ok(pre) => pre,
            Err(st) => return st,
        };
        if pre
            .node_names
            .as_ref()
            .is_some_and(|names| !names.contains(node.name()))
        {
            return Status::unresolvable(REASON_FILTERED_BY_PREFILTER);
        }
        self.filter_with_nominated_pods(&pre, pod, node, snap)
    }

    /// Cluster event → plugins that registered for it (feeds the queue).
    #[must_use]
    pub fn event_interest(&self) -> HashMap<ClusterEvent, HashSet<&'static str>> {
        self.interest.clone()
    }

    /// [`Framework::run_filters`], timing each plugin call.
    fn run_filters_timed(
        &self,
        filters: &[&Arc<dyn FilterPlugin>],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for f in filters {
            let t = Instant::now();
            let st = f.filter(state, pod, node);
            self.metrics
                .plugin(f.name(), ExtensionPoint::Filter, st.code, t.elapsed());
            if !st.is_success() {
                return st.with_plugin(f.name());
            }
        }
        Status::success()
    }

    /// Runs `filters` in order; the first non-success status (with its
    /// plugin) or success.
    fn run_filters(
        filters: &[&Arc<dyn FilterPlugin>],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Status {
        for f in filters {
            let st = f.filter(state, pod, node);
            if !st.is_success() {
                return st.with_plugin(f.name());
            }
        }
        Status::success()
    }

    /// [`Framework::run_filters`] for the search: a Filter with a
    /// [`FilterPlugin::fits`] answer is asked that instead, so a rejection
    /// builds no reasons until they are read.
    fn search_filters<'f>(
        filters: &[&'f Arc<dyn FilterPlugin>],
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Rejection<'f>> {
        for f in filters {
            Self::search_filter(f, state, pod, node)?;
        }
        Ok(())
    }

    /// One Filter of [`Framework::search_filters`].
    fn search_filter<'f>(
        f: &'f Arc<dyn FilterPlugin>,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Rejection<'f>> {
        match f.fits(state, pod, node) {
            Some(true) => Ok(()),
            Some(false) => Err(Rejection::By(f)),
            None => {
                let st = f.filter(state, pod, node);
                if st.is_success() {
                    Ok(())
                } else {
                    Err(Rejection::Status(st.with_plugin(f.name())))
                }
            }
        }
    }

    /// Runs every PreFilter plugin in order over `cluster` (upstream
    /// `RunPreFilterPlugins`), intersecting their node sets.
    ///
    /// # Errors
    /// The first status that is neither success nor `Skip`, with its plugin
    /// set: `Unschedulable` / `UnschedulableAndUnresolvable` rejects the pod
    /// on every node, `Error` fails the attempt.
    pub fn run_pre_filter_plugins(
        &self,
        pod: &PodInfo,
        cluster: &dyn SharedLister,
    ) -> Result<PreFilterOutcome, Status> {
        self.pre_filter_plugins(pod, cluster, false)
    }

    /// [`Framework::run_pre_filter_plugins`], timing each plugin when
    /// `timed`.
    fn pre_filter_plugins(
        &self,
        pod: &PodInfo,
        cluster: &dyn SharedLister,
        timed: bool,
    ) -> Result<PreFilterOutcome, Status> {
        let mut out = PreFilterOutcome::default();
        for p in &self.pre_filters {
            let t = timed.then(Instant::now);
            let (res, st) = p.pre_filter(&mut out.state, pod, cluster);
            self.metrics
                .plugin_ran(p.name(), ExtensionPoint::PreFilter, st.code, t);
            match st.code {
                Code::Success => {}
                Code::Skip => out.skipped.push(p.name()),
                _ => return Err(st.with_plugin(p.name())),
            }
            if let Some(names) = res.node_names {
                out.node_names = Some(match out.node_names {
                    None => names,
                    Some(prev) => prev.intersection(&names).cloned().collect(),
                });
            }
        }
        Ok(out)
    }

    /// The running Filters' hot conditions for `pod` (see [`HotPath`]).
    fn hot_filter<'f>(
        filters: &[&'f Arc<dyn FilterPlugin>],
        state: &CycleState,
        pod: &PodInfo,
    ) -> HotPath<'f> {
        let mut cond = HotFilter::ANY;
        let mut residual = Vec::new();
        let mut each = Vec::with_capacity(filters.len());
        for f in filters {
            let c = f.hot_filter(state, pod);
            match c {
                Some(c) => cond = cond.and(c),
                None => residual.push(*f),
            }
            each.push(c);
        }
        HotPath {
            cond,
            residual,
            each,
        }
    }

    /// The Filter chain on a node that misses the AND of the hot
    /// conditions: Filters whose own condition the node meets surely
    /// pass, so only the others are called, in order; the first rejection
    /// is the one the whole chain would give.
    fn run_filters_missing<'f>(
        filters: &[&'f Arc<dyn FilterPlugin>],
        hot: &HotPath<'_>,
        node_hot: &NodeHot,
        state: &CycleState,
        pod: &PodInfo,
        node: &NodeInfo,
    ) -> Result<(), Rejection<'f>> {
        for (f, c) in filters.iter().zip(&hot.each) {
            if c.is_some_and(|c| c.passes(node_hot)) {
                continue;
            }
            Self::search_filter(f, state, pod, node)?;
        }
        Ok(())
    }

    /// Filter plugins that run given the PreFilter skips.
    fn active_filters(&self, skipped: &[&'static str]) -> Vec<&Arc<dyn FilterPlugin>> {
        self.filters
            .iter()
            .filter(|f| !skipped.contains(&f.name()))
            .collect()
    }

    /// Upstream `RunFilterPluginsWithNominatedPods` for one node: Filter
    /// `pod` on `node`, taking into account the pods `snap` has nominated to
    /// that node (by name) with priority ≥ the pod's, other than the pod
    /// itself (see the module docs for the two passes and how pass 1 gets
    /// its PreFilter state). `pre` is the pod's PreFilter outcome for
    /// `node` as given: a caller that changed the node (preemption removing
    /// victims) passes state consistent with that change; `node` may
    /// differ from the snapshot's copy, and pass 1 sees the cluster with
    /// `node` (plus nominated pods) in place of the snapshot's.
    ///
    /// Returns success, the first rejecting status with its plugin, or an
    /// `Error` status.
    pub fn filter_with_nominated_pods(
        &self,
        pre: &PreFilterOutcome,
        pod: &PodInfo,
        node: &NodeInfo,
        snap: &Snapshot,
    ) -> Status {
        let filters = self.active_filters(&pre.skipped);
        self.filter_node(&filters, pre, pod, node, snap)
    }

    /// [`Framework::filter_with_nominated_pods`] with the filter list
    /// already resolved (the hot path: one lookup per cycle, not per node).
    fn filter_node(
        &self,
        filters: &[&Arc<dyn FilterPlugin>],
        pre: &PreFilterOutcome,
        pod: &PodInfo,
        node: &NodeInfo,
        snap: &Snapshot,
    ) -> Status {
        match self.search_node(filters, pre, pod, node, snap) {
            Ok(()) => Status::success(),
            Err(r) => r.into_status(&pre.state, pod, node),
        }
    }

    /// [`Framework::filter_node`] for the search: a rejection's status is
    /// built only when read (see [`Rejection`]).
    fn search_node<'f>(
        &self,
        filters: &[&'f Arc<dyn FilterPlugin>],
        pre: &PreFilterOutcome,
        pod: &PodInfo,
        node: &NodeInfo,
        snap: &Snapshot,
    ) -> Result<(), Rejection<'f>> {
        let as_result = |st: Status| {
            if st.is_success() {
                Ok(())
            } else {
                Err(Rejection::Status(st))
            }
        };
        let added: Vec<&Arc<PodInfo>> = if snap.has_nominated_pods() {
            snap.nominated_pods_for_node(node.name())
                .iter()
                .filter(|p| p.priority >= pod.priority && p.uid != pod.uid)
                .collect()
        } else {
            Vec::new()
        };
        if added.is_empty() {
            if pre.take_timed_node() {
                return as_result(self.run_filters_timed(filters, &pre.state, pod, node));
            }
            return Self::search_filters(filters, &pre.state, pod, node);
        }
        // Pass 1: the node with the nominated pods on it.
        let mut with = node.clone();
        for p in added {
            with.add_pod(Arc::clone(p));
        }
        let with = Arc::new(with);
        as_result(self.filter_with_added_pods(pre, pod, &with, snap))?;
        // Pass 2: the node without them.
        Self::search_filters(filters, &pre.state, pod, node)
    }

    /// Pass 1: re-runs the PreFilter plugins that did not skip over the
    /// snapshot with `with` in place of its node, then Filter on `with`.
    fn filter_with_added_pods(
        &self,
        pre: &PreFilterOutcome,
        pod: &PodInfo,
        with: &Arc<NodeInfo>,
        snap: &Snapshot,
    ) -> Status {
        let rerun: Vec<&Arc<dyn PreFilterPlugin>> = self
            .pre_filters
            .iter()
            .filter(|p| !pre.skipped.contains(&p.name()))
            .collect();
        if rerun.is_empty() {
            let filters = self.active_filters(&pre.skipped);
            return Self::run_filters(&filters, &pre.state, pod, with);
        }
        let Some(replaced) = snap.index_of(with.name()) else {
            // A node outside the snapshot: nothing else to count it against.
            let filters = self.active_filters(&pre.skipped);
            return Self::run_filters(&filters, &pre.state, pod, with);
        };
        let mut nodes = snap.nodes().to_vec();
        nodes[replaced] = Arc::clone(with);
        let overlay = NodeOverlay { base: snap, nodes };
        let mut state = CycleState::default();
        let mut skipped = pre.skipped.clone();
        for p in rerun {
            let (_, st) = p.pre_filter(&mut state, pod, &overlay);
            match st.code {
                Code::Success => {}
                Code::Skip => skipped.push(p.name()),
                _ => return st.with_plugin(p.name()),
            }
        }
        let filters = self.active_filters(&skipped);
        Self::run_filters(&filters, &state, pod, with)
    }

    /// Schedules `pod` on the nodes of `snap`, searching the worker's
    /// partition first and falling back to every other node, so a partition
    /// never makes a pod falsely unschedulable. Ties are broken at random
    /// ([`Framework::run`] takes the random source).
    ///
    /// # Errors
    /// [`ScheduleError::Unschedulable`] when no node fits (after a search of
    /// the whole cluster); [`ScheduleError::Internal`] when a plugin errs.
    pub fn schedule(
        &self,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> Result<ScheduleResult, ScheduleError> {
        self.run(pod, snap, &mut CycleRng::from_entropy(), None, None)
    }

    /// [`Framework::schedule`], also returning every feasible node that was
    /// scored (or, when only one was feasible, that one, with score 0),
    /// with its weighted total, in the order found: the candidates a
    /// placement webhook chooses among.
    ///
    /// # Errors
    /// As [`Framework::schedule`].
    pub fn schedule_with_candidates(
        &self,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> (Result<ScheduleResult, ScheduleError>, Candidates) {
        let mut candidates = Vec::new();
        let r = self.run(
            pod,
            snap,
            &mut CycleRng::from_entropy(),
            None,
            Some(&mut candidates),
        );
        (r, candidates)
    }

    /// [`Framework::schedule`], also reporting every node's filter status and
    /// every plugin's score ([`CycleDetail`]) for `simulate` / `explain`.
    /// The choice is made exactly as in `schedule`.
    ///
    /// # Errors
    /// As [`Framework::schedule`].
    pub fn schedule_detailed(
        &self,
        pod: &PodInfo,
        snap: &Snapshot,
    ) -> (Result<ScheduleResult, ScheduleError>, CycleDetail) {
        let mut detail = CycleDetail::default();
        let r = self.run(
            pod,
            snap,
            &mut CycleRng::from_entropy(),
            Some(&mut detail),
            None,
        );
        (r, detail)
    }

    /// The cycle itself (PreFilter → nominated node → Filter → Score →
    /// select), which every other entry point calls: equally scored nodes
    /// are told apart by `rng`; `detail`, when given, receives every node's
    /// Filter status and every plugin's score (a single feasible node is
    /// then scored too); `candidates`, when given, every feasible node
    /// scored with its total. The choice does not depend on either.
    ///
    /// # Errors
    /// As [`Framework::schedule`].
    pub fn run(
        &self,
        pod: &PodInfo,
        snap: &Snapshot,
        rng: &mut CycleRng,
        mut detail: Option<&mut CycleDetail>,
        mut candidates: Option<&mut Candidates>,
    ) -> Result<ScheduleResult, ScheduleError> {
        let sampled = sample_plugin_metrics();
        let t = Instant::now();
        let pre = {
            let _span = tracing::info_span!("PreFilter").entered();
            self.pre_filter_plugins(pod, snap, sampled)
        };
        self.metrics.point(
            ExtensionPoint::PreFilter,
            pre.as_ref().map_or_else(|st| st.code, |_| Code::Success),
            t.elapsed(),
        );
        let mut pre = match pre {
            Ok(pre) => {
                if sampled {
                    pre.timed_filter_nodes
                        .store(TIMED_NODES_PER_SAMPLED_CYCLE, Ordering::Relaxed);
                }
                pre
            }
            Err(st) if st.code == Code::Error => {
                return Err(ScheduleError::Internal {
                    plugin: st.plugin,
                    message: st.message(),
                });
            }
            Err(st) => {
                if let Some(d) = detail.as_deref_mut() {
                    d.rejected = snap
                        .nodes()
                        .iter()
                        .map(|n| (n.spec.name.clone(), st.clone()))
                        .collect();
                }
                return Err(ScheduleError::Unschedulable(Box::new(FitError {
                    pod: pod.key.clone(),
                    num_all_nodes: snap.len(),
                    diagnosis: Diagnosis {
                        // Upstream gives every node the PreFilter's status,
                        // so preemption reads its code.
                        absent_nodes_status: Some(st.clone()),
                        pre_filter_msg: Some(st.message()),
                        unschedulable_plugins: BTreeSet::from([st.plugin]),
                        ..Diagnosis::default()
                    },
                })));
            }
        };
        let allowed = pre.node_names.take();
        let filters = self.active_filters(&pre.skipped);
        let filters = filters.as_slice();
        let nodes = snap.nodes();
        // Extenders that would filter this pod (most pods: none).
        let extenders = self.extenders.as_deref().filter(|e| e.filters(pod));
        // Nodes the extenders failed, with their statuses.
        let mut ext_statuses: BTreeMap<Arc<str>, Status> = BTreeMap::new();
        // Nodes the extenders removed (with a status or without).
        let mut ext_removed: Vec<usize> = Vec::new();
        let mut pass_extenders =
            |feasible: Vec<usize>, statuses: &mut BTreeMap<Arc<str>, Status>| match extenders {
                None => Ok(feasible),
                Some(e) => {
                    let (left, removed) = e.filter(pod, nodes, feasible, statuses)?;
                    ext_removed.extend(removed);
                    Ok::<_, ScheduleError>(left)
                }
            };

        // A node nominated for this pod by an earlier preemption is most
        // likely the one it fits: try it alone first (upstream
        // `evaluateNominatedNode`, extenders included; a failure there just
        // falls through to the full search).
        if let Some(idx) = pod
            .nominated_node_name
            .as_deref()
            .and_then(|n| snap.index_of(n))
        {
            let node = &nodes[idx];
            if self
                .filter_node(filters, &pre, pod, node, snap)
                .is_success()
                && extenders.map_or(Ok(true), |e| {
                    e.filter(pod, nodes, vec![idx], &mut BTreeMap::new())
                        .map(|(left, _)| !left.is_empty())
                })?
            {
                let score = match detail {
                    Some(d) => {
                        self.score_and_select(&mut pre.state, pod, snap, &[idx], rng, Some(d))?
                            .score
                    }
                    None => 0,
                };
                if let Some(c) = candidates.as_deref_mut() {
                    c.push((node.spec.name.clone(), score));
                }
                return Ok(ScheduleResult {
                    gpu_devices: None,
                    node: node.spec.name.clone(),
                    score,
                    evaluated: 1,
                    feasible: 1,
                    outside_partition: idx >= snap.partition_len(),
                    alternatives: Vec::new(),
                });
            }
        }
        let filter_started = Instant::now();
        let filter_span = tracing::info_span!(
            "Filter",
            evaluated = tracing::field::Empty,
            feasible = tracing::field::Empty
        )
        .entered();
        let total = nodes.len();
        let limit = num_feasible_nodes_to_find(self.percentage_of_nodes_to_score, total);
        // The fast path: a node meeting the hot conditions of the Filters
        // that have one needs only the other Filters (none, for most pods)
        // called. Off when a pod is nominated somewhere (Filter must count
        // nominated pods), and for the first nodes of a sampled cycle
        // (whose Filter calls are timed for the plugin metrics).
        let hot = if snap.has_nominated_pods() {
            None
        } else {
            Some(Self::hot_filter(filters, &pre.state, pod))
        };
        let hot_nodes = snap.hot();
        let eval = |idx: usize| {
            if let Some(h) = &hot
                && !pre.timing_pending()
            {
                let node_hot = &hot_nodes[idx];
                if h.cond.passes(node_hot) {
                    // The Filters the condition stands for pass, so the
                    // first rejection, if any, is the first residual one's:
                    // the same status the whole chain would give.
                    return Self::search_filters(&h.residual, &pre.state, pod, &nodes[idx]);
                }
                return Self::run_filters_missing(
                    filters,
                    h,
                    node_hot,
                    &pre.state,
                    pod,
                    &nodes[idx],
                );
            }
            self.search_node(filters, &pre, pod, &nodes[idx], snap)
        };
        // Parallel chunks may find a few feasible nodes past the limit; like
        // upstream, only `limit` of them count as processed (and get scored
        // and sent to the extenders).
        let mut evaluated = 0;
        let (mut feasible, rejected) = match &allowed {
            Some(names) => {
                let mut cands: Vec<usize> = names.iter().filter_map(|n| snap.index_of(n)).collect();
                cands.sort_unstable();
                if let Some(d) = detail.as_deref_mut() {
                    let st = Status::unresolvable(REASON_FILTERED_BY_PREFILTER);
                    d.rejected.extend(
                        nodes
                            .iter()
                            .filter(|n| !names.contains(&n.spec.name))
                            .map(|n| (n.spec.name.clone(), st.clone())),
                    );
                }
                let (mut f, r) = Self::filter_phase(&eval, cands.len(), limit, |i| cands[i]);
                f.truncate(limit);
                evaluated += f.len() + r.len();
                (pass_extenders(f, &mut ext_statuses)?, r)
            }
            None => {
                // The partition first (rotating start); only if nothing there
                // fits (Filter and extenders), every other node (Gödel's
                // fallback).
                let p = snap.partition_len();
                let start = self.next_start.load(Ordering::Relaxed);
                let (feasible, mut rejected) = if p > 0 {
                    let first = start % p;
                    let (mut f, r) = Self::filter_phase(&eval, p, limit, |i| {
                        // (first + i) % p, without a division per node.
                        let j = first + i;
                        if j >= p { j - p } else { j }
                    });
                    f.truncate(limit);
                    evaluated += f.len() + r.len();
                    (pass_extenders(f, &mut ext_statuses)?, r)
                } else {
                    (Vec::new(), Vec::new())
                };
                if feasible.is_empty() && total > p {
                    let rest = total - p;
                    let first_rest = start % rest;
                    let (mut f, r) = Self::filter_phase(&eval, rest, limit, |i| {
                        let j = first_rest + i;
                        p + if j >= rest { j - rest } else { j }
                    });
                    f.truncate(limit);
                    evaluated += f.len() + r.len();
                    rejected.extend(r);
                    (pass_extenders(f, &mut ext_statuses)?, rejected)
                } else {
                    (feasible, rejected)
                }
            }
        };
        if allowed.is_none() && !nodes.is_empty() {
            self.next_start.fetch_add(evaluated, Ordering::Relaxed);
        }
        self.metrics.point(
            ExtensionPoint::Filter,
            if feasible.is_empty() {
                Code::Unschedulable
            } else {
                Code::Success
            },
            filter_started.elapsed(),
        );
        filter_span.record("evaluated", evaluated);
        filter_span.record("feasible", feasible.len());
        drop(filter_span);
        // The statuses are read (built, for rejections by `fits`) only for
        // `explain` and when nothing fits.
        let statuses = |rejected: Vec<(usize, Rejection<'_>)>| -> Vec<(Arc<str>, Status)> {
            rejected
                .into_iter()
                .map(|(i, r)| {
                    let node = &nodes[i];
                    (node.spec.name.clone(), r.into_status(&pre.state, pod, node))
                })
                .collect()
        };
        if let Some(st) = rejected.iter().find_map(|(_, r)| match r {
            Rejection::Status(st) if st.code == Code::Error => Some(st),
            _ => None,
        }) {
            return Err(ScheduleError::Internal {
                plugin: st.plugin,
                message: st.message(),
            });
        }
        let rejected = if detail.is_some() || feasible.is_empty() {
            Err(statuses(rejected))
        } else {
            Ok(rejected.len())
        };
        if let (Some(d), Err(node_statuses)) = (detail.as_deref_mut(), &rejected) {
            d.rejected.extend(node_statuses.iter().cloned());
            d.rejected
                .extend(ext_statuses.iter().map(|(n, st)| (n.clone(), st.clone())));
            // Removed without a reason in FailedNodes: say so.
            d.rejected.extend(
                ext_removed
                    .iter()
                    .filter(|&&i| !ext_statuses.contains_key(nodes[i].name()))
                    .map(|&i| {
                        (
                            nodes[i].spec.name.clone(),
                            Status::unschedulable(REASON_EXTENDER_REMOVED)
                                .with_plugin(EXTENDER_NAME),
                        )
                    }),
            );
        }
        if let Err(node_statuses) = rejected
            && feasible.is_empty()
        {
            let mut unschedulable_plugins: BTreeSet<&'static str> =
                node_statuses.iter().map(|(_, st)| st.plugin).collect();
            if !ext_removed.is_empty() {
                unschedulable_plugins.insert(EXTENDER_NAME);
            }
            let absent_nodes_status = allowed
                .as_ref()
                .map(|_| Status::unresolvable(REASON_FILTERED_BY_PREFILTER));
            let mut node_to_status = node_statuses;
            node_to_status.extend(ext_statuses);
            return Err(ScheduleError::Unschedulable(Box::new(FitError {
                pod: pod.key.clone(),
                num_all_nodes: snap.len(),
                diagnosis: Diagnosis {
                    node_to_status,
                    absent_nodes_status,
                    unschedulable_plugins,
                    pre_filter_msg: None,
                    post_filter_msg: None,
                },
            })));
        }
        feasible.truncate(limit);

        let chosen = if feasible.len() == 1 && detail.is_none() {
            Selection {
                best: feasible[0],
                score: 0,
                alternatives: Vec::new(),
                totals: vec![0],
            }
        } else {
            self.score_and_select(&mut pre.state, pod, snap, &feasible, rng, detail)?
        };
        if let Some(c) = candidates {
            c.extend(
                feasible
                    .iter()
                    .zip(&chosen.totals)
                    .map(|(&i, &t)| (nodes[i].spec.name.clone(), t)),
            );
        }
        Ok(ScheduleResult {
            gpu_devices: None,
            node: nodes[chosen.best].spec.name.clone(),
            score: chosen.score,
            evaluated,
            feasible: feasible.len(),
            outside_partition: chosen.best >= snap.partition_len(),
            alternatives: chosen
                .alternatives
                .iter()
                .map(|&i| nodes[i].spec.name.clone())
                .collect(),
        })
    }

    /// Runs Filter (`eval`: node index → feasible or why not) over `count` candidates
    /// (`index_of(i)` → node index), stopping once `limit` feasible nodes
    /// are found: the first [`SEQUENTIAL_FILTER_PREFIX`] on this thread, the
    /// rest in parallel.
    fn filter_phase<'f>(
        eval: &(impl Fn(usize) -> Result<(), Rejection<'f>> + Sync),
        count: usize,
        limit: usize,
        index_of: impl Fn(usize) -> usize + Sync,
    ) -> FilterOutcome<'f> {
        let found = AtomicUsize::new(0);
        let eval_chunk = |range: std::ops::Range<usize>| {
            let mut feasible = Vec::with_capacity(limit.min(range.len()));
            let mut rejected = Vec::new();
            for i in range {
                if found.load(Ordering::Relaxed) >= limit {
                    break;
                }
                let idx = index_of(i);
                match eval(idx) {
                    Ok(()) => {
                        found.fetch_add(1, Ordering::Relaxed);
                        feasible.push(idx);
                    }
                    Err(r) => rejected.push((idx, r)),
                }
            }
            (feasible, rejected)
        };
        let prefix = SEQUENTIAL_FILTER_PREFIX.min(count);
        let (mut feasible, mut rejected) = eval_chunk(0..prefix);
        if prefix == count || feasible.len() >= limit {
            return (feasible, rejected);
        }
        let rest = count - prefix;
        let chunks: Vec<FilterOutcome> = (0..rest.div_ceil(FILTER_CHUNK))
            .into_par_iter()
            .map(|c| {
                eval_chunk(prefix + c * FILTER_CHUNK..prefix + ((c + 1) * FILTER_CHUNK).min(rest))
            })
            .collect();
        for (f, r) in chunks {
            feasible.extend(f);
            rejected.extend(r);
        }
        (feasible, rejected)
    }

    /// A sampled cycle's Score for one plugin: the first
    /// [`TIMED_NODES_PER_SAMPLED_CYCLE`] nodes' calls on the full `NodeInfo`
    /// are timed for the plugin metrics, the rest take the fast path.
    fn score_timed(
        &self,
        plugin: &dyn ScorePlugin,
        state: &CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        feasible: &[usize],
        out: &mut [i64],
    ) -> Result<(), Status> {
        let (nodes, hot) = (snap.nodes(), snap.hot());
        for (k, (o, &i)) in out.iter_mut().zip(feasible).enumerate() {
            if k >= TIMED_NODES_PER_SAMPLED_CYCLE {
                *o = match plugin.score_hot(state, pod, &hot[i]) {
                    Some(s) => s,
                    None => plugin.score(state, pod, &nodes[i])?,
                };
                continue;
            }
            let t = Instant::now();
            let r = plugin.score(state, pod, &nodes[i]);
            let code = r.as_ref().map_or_else(|st| st.code, |_| Code::Success);
            self.metrics
                .plugin(plugin.name(), ExtensionPoint::Score, code, t.elapsed());
            *o = r?;
        }
        Ok(())
    }

    fn score_and_select(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        snap: &Snapshot,
        feasible: &[usize],
        rng: &mut CycleRng,
        detail: Option<&mut CycleDetail>,
    ) -> Result<Selection, ScheduleError> {
        let nodes = snap.nodes();
        let mut skipped_scores: Vec<&'static str> = Vec::new();
        let timed = sample_plugin_metrics();
        let pre_score_started = Instant::now();
        let pre_score_span = tracing::info_span!("PreScore").entered();
        if !self.pre_scores.is_empty() {
            // The feasible nodes are usually a run of consecutive snapshot
            // entries (the search walks the snapshot in order): hand that
            // run over as is rather than cloning one Arc per node per cycle.
            let owned: Vec<Arc<NodeInfo>>;
            let feasible_nodes: &[Arc<NodeInfo>] = match feasible.first() {
                Some(&first) if feasible.windows(2).all(|w| w[1] == w[0] + 1) => {
                    &nodes[first..first + feasible.len()]
                }
                _ => {
                    owned = feasible.iter().map(|&i| nodes[i].clone()).collect();
                    &owned
                }
            };
            for p in &self.pre_scores {
                let t = timed.then(Instant::now);
                let st = p.pre_score(state, pod, feasible_nodes, snap);
                self.metrics
                    .plugin_ran(p.name(), ExtensionPoint::PreScore, st.code, t);
                match st.code {
                    Code::Success => {}
                    Code::Skip => skipped_scores.push(p.name()),
                    _ => {
                        return Err(ScheduleError::Internal {
                            plugin: p.name(),
                            message: st.message(),
                        });
                    }
                }
            }
        }
        self.metrics.point(
            ExtensionPoint::PreScore,
            Code::Success,
            pre_score_started.elapsed(),
        );
        drop(pre_score_span);
        let score_started = Instant::now();
        let _score_span = tracing::info_span!("Score", nodes = feasible.len()).entered();
        let state = &*state;
        let n = feasible.len();
        let mut totals = vec![0i64; n];
        // One plugin's raw scores, then normalized (reused across plugins).
        let mut scores = vec![0i64; n];
        // What the hot records decided, per node (reused across plugins).
        let mut hot_scores: Vec<Option<i64>> = vec![None; n];
        let mut per_plugin: Vec<(&'static str, Vec<i64>)> = Vec::new();
        for (plugin, weight) in &self.scores {
            if skipped_scores.contains(&plugin.name()) {
                continue;
            }
            let plugin = &**plugin;
            let filled = if timed {
                // A sampled cycle: the first nodes' calls (on the full
                // NodeInfo) are timed.
                self.score_timed(plugin, state, pod, snap, feasible, &mut scores)
            } else if n < PARALLEL_SCORE_MIN_NODES {
                score_chunk(
                    plugin,
                    state,
                    pod,
                    snap,
                    feasible,
                    &mut hot_scores,
                    &mut scores,
                )
            } else {
                scores
                    .par_chunks_mut(SCORE_CHUNK)
                    .zip(hot_scores.par_chunks_mut(SCORE_CHUNK))
                    .zip(feasible.par_chunks(SCORE_CHUNK))
                    .try_for_each(|((out, hot_out), idx)| {
                        score_chunk(plugin, state, pod, snap, idx, hot_out, out)
                    })
            };
            filled.map_err(|st| ScheduleError::Internal {
                plugin: plugin.name(),
                message: st.message(),
            })?;
            plugin.normalize_score(state, pod, &mut scores);
            tracing::debug!(plugin = plugin.name(), weight, "Score plugin");
            for (t, s) in totals.iter_mut().zip(&scores) {
                *t += s * weight;
            }
            if detail.is_some() {
                per_plugin.push((plugin.name(), scores.clone()));
            }
        }
        self.metrics.point(
            ExtensionPoint::Score,
            Code::Success,
            score_started.elapsed(),
        );
        // The extenders' prioritize verbs (in parallel), scaled into the
        // plugins' range and weighted.
        let ext_scores = self
            .extenders
            .as_deref()
            .map(|e| e.prioritize(pod, nodes, feasible))
            .unwrap_or_default();
        for (_, by_node) in &ext_scores {
            for (t, &i) in totals.iter_mut().zip(feasible) {
                if let Some(s) = by_node.get(nodes[i].name()) {
                    *t = t.saturating_add(*s);
                }
            }
        }
        if let Some(d) = detail {
            d.scored = feasible
                .iter()
                .enumerate()
                .map(|(k, &i)| NodeScores {
                    node: nodes[i].spec.name.clone(),
                    plugin_scores: per_plugin.iter().map(|(n, v)| (*n, v[k])).collect(),
                    extender_scores: ext_scores
                        .iter()
                        .filter_map(|(e, by_node)| {
                            by_node.get(nodes[i].name()).map(|s| (e.clone(), *s))
                        })
                        .collect(),
                    total: totals[k],
                })
                .collect();
        }
        let best = match self.tie_break {
            TieBreak::Random => pick_best(&totals, |ties| rng.below(ties)),
            TieBreak::NodeName => smallest_name_best(&totals, |k| nodes[feasible[k]].name()),
        };
        Ok(Selection {
            best: feasible[best],
            score: totals[best],
            alternatives: runners_up(&totals, best, MAX_BIND_ALTERNATIVES)
                .into_iter()
                .map(|k| feasible[k])
                .collect(),
            totals,
        })
    }
}
