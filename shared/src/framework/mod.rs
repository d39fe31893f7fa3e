//! The plugin API: one small trait per extension point, mirroring upstream's
//! `k8s.io/kube-scheduler/framework` interfaces.
//!
//! A scheduling cycle runs, for one pod:
//! 1. **PreFilter** ([`PreFilterPlugin`]): per-pod checks and pre-computation;
//!    may reject the pod outright or narrow the candidate nodes
//!    ([`PreFilterResult`]).
//! 2. **Filter** ([`FilterPlugin`]): is this node feasible? Called for many
//!    nodes in parallel, so it is `&self` and must not do I/O.
//! 3. **PreScore** ([`PreScorePlugin`]): once per pod, over the feasible
//!    nodes; pre-computes what Score reads. `Skip` turns off the same
//!    plugin's Score for this pod.
//! 4. **Score** ([`ScorePlugin`]): rank each feasible node, then
//!    `normalize_score` brings the plugin's scores into
//!    [`MIN_NODE_SCORE`]..=[`MAX_NODE_SCORE`]; the framework multiplies by the
//!    plugin's weight and sums.
//!
//! Plugins are synchronous and pure CPU work; binding is the only async step
//! and is not a plugin concern here. A Filter plugin also provides its
//! bind-time re-check ([`BindCheck`]): the coordinator's bind arbiter runs
//! it against its authoritative view before writing the Binding, so two
//! workers deciding on stale caches cannot together break what the Filter
//! guards. Each plugin declares the cluster events
//! that could make a pod it rejected schedulable
//! ([`Plugin::events_to_register`]), upstream's queueing hints in their
//! simplest form.

pub mod bind;
mod cycle_state;
mod fit_error;
mod status;

use std::collections::{BTreeMap, HashSet};
use std::sync::Arc;

pub use bind::{
    BindCheck, BindResult, BindView, KeptCounts, ServedProfile, profiles_fingerprint, refuse_if,
};
pub use cycle_state::CycleState;
pub use fit_error::{Diagnosis, FitError, REASON_FILTERED_BY_PREFILTER};
pub use status::{Code, Status};

use crate::node_hot::{HotFilter, NodeHot};
use crate::node_info::NodeInfo;
use crate::pod_affinity::RequiredAffinityState;
use crate::pod_info::PodInfo;
use crate::topology_spread::{DomainCounts, TopologySpreadConstraint};
use crate::volumes::VolumeState;

/// Lowest score a plugin may give after normalization (upstream `MinNodeScore`).
pub const MIN_NODE_SCORE: i64 = 0;
/// Highest score a plugin may give after normalization (upstream `MaxNodeScore`).
pub const MAX_NODE_SCORE: i64 = 100;

/// A change in the cluster that may make a rejected pod schedulable.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum ClusterEvent {
    /// A node joined.
    NodeAdded,
    /// A node's allocatable grew.
    NodeAllocatableGrew,
    /// A node's labels changed.
    NodeLabelChanged,
    /// A node's taints changed.
    NodeTaintChanged,
    /// A cordoned node was uncordoned.
    NodeBecameSchedulable,
    /// A pod bound to a node was deleted or terminated (its resources and
    /// ports are free again).
    AssignedPodDeleted,
    /// A pod was bound to a node, or a bound pod's labels changed (pod
    /// affinity may now be satisfied, spread counts moved).
    AssignedPodAdded,
    /// A pending pod of a PodGroup joined the queue (upstream `Pod/Add`, as
    /// Coscheduling registers it: the group may now have `minMember` pods).
    UnscheduledPodAdded,
    /// A PodGroup was added or changed (upstream
    /// `podgroups.v1alpha1.scheduling.x-k8s.io` `Add|Update`).
    PodGroupChanged,
    /// A PersistentVolumeClaim was added or updated (upstream
    /// `PersistentVolumeClaim/Add|Update`): a missing claim may exist now,
    /// an unbound one may be bound.
    PvcChanged,
    /// A PersistentVolume was added or updated (its zone labels, its
    /// binding).
    PvChanged,
    /// A StorageClass was added (`StorageClass/Add`; the binding mode
    /// cannot change afterwards).
    StorageClassAdded,
    /// A CSINode was added or updated (a driver installed, a volume limit
    /// raised).
    CsiNodeChanged,
    /// A CSIDriver was added or updated.
    CsiDriverChanged,
    /// A VolumeAttachment was deleted (a CSI volume slot freed on its
    /// node).
    VolumeAttachmentDeleted,
}

impl ClusterEvent {
    /// Every event (what a pod rejected by an extender waits for: any).
    pub const ALL: [ClusterEvent; 15] = [
        ClusterEvent::NodeAdded,
        ClusterEvent::NodeAllocatableGrew,
        ClusterEvent::NodeLabelChanged,
        ClusterEvent::NodeTaintChanged,
        ClusterEvent::NodeBecameSchedulable,
        ClusterEvent::AssignedPodDeleted,
        ClusterEvent::AssignedPodAdded,
        ClusterEvent::UnscheduledPodAdded,
        ClusterEvent::PodGroupChanged,
        ClusterEvent::PvcChanged,
        ClusterEvent::PvChanged,
        ClusterEvent::StorageClassAdded,
        ClusterEvent::CsiNodeChanged,
        ClusterEvent::CsiDriverChanged,
        ClusterEvent::VolumeAttachmentDeleted,
    ];
}

/// The extension points of the scheduling framework, as named in
/// `KubeSchedulerConfiguration` (`plugins.<point>`).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum ExtensionPoint {
    /// `preEnqueue`: may keep a pod out of activeQ (scheduling gates).
    PreEnqueue,
    /// `queueSort`: orders activeQ; exactly one per scheduler.
    QueueSort,
    /// `preFilter`.
    PreFilter,
    /// `filter`.
    Filter,
    /// `postFilter`: runs when no node fits (preemption).
    PostFilter,
    /// `preScore`.
    PreScore,
    /// `score`.
    Score,
    /// `reserve`.
    Reserve,
    /// `permit`.
    Permit,
    /// `preBind`.
    PreBind,
    /// `bind`: at least one per profile.
    Bind,
    /// `postBind`.
    PostBind,
}

impl ExtensionPoint {
    /// Every point, in cycle order.
    pub const ALL: [ExtensionPoint; 12] = [
        ExtensionPoint::PreEnqueue,
        ExtensionPoint::QueueSort,
        ExtensionPoint::PreFilter,
        ExtensionPoint::Filter,
        ExtensionPoint::PostFilter,
        ExtensionPoint::PreScore,
        ExtensionPoint::Score,
        ExtensionPoint::Reserve,
        ExtensionPoint::Permit,
        ExtensionPoint::PreBind,
        ExtensionPoint::Bind,
        ExtensionPoint::PostBind,
    ];

    /// Upstream's name in metrics' `extension_point` label, e.g.
    /// `"PreFilter"`.
    #[must_use]
    pub const fn metric_name(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "PreEnqueue",
            ExtensionPoint::QueueSort => "QueueSort",
            ExtensionPoint::PreFilter => "PreFilter",
            ExtensionPoint::Filter => "Filter",
            ExtensionPoint::PostFilter => "PostFilter",
            ExtensionPoint::PreScore => "PreScore",
            ExtensionPoint::Score => "Score",
            ExtensionPoint::Reserve => "Reserve",
            ExtensionPoint::Permit => "Permit",
            ExtensionPoint::PreBind => "PreBind",
            ExtensionPoint::Bind => "Bind",
            ExtensionPoint::PostBind => "PostBind",
        }
    }

    /// The config field name, e.g. `"preFilter"`.
    #[must_use]
    pub const fn config_name(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "preEnqueue",
            ExtensionPoint::QueueSort => "queueSort",
            ExtensionPoint::PreFilter => "preFilter",
            ExtensionPoint::Filter => "filter",
            ExtensionPoint::PostFilter => "postFilter",
            ExtensionPoint::PreScore => "preScore",
            ExtensionPoint::Score => "score",
            ExtensionPoint::Reserve => "reserve",
            ExtensionPoint::Permit => "permit",
            ExtensionPoint::PreBind => "preBind",
            ExtensionPoint::Bind => "bind",
            ExtensionPoint::PostBind => "postBind",
        }
    }

    /// The name of upstream's Go interface for plugins at this point
    /// (`PreFilterPlugin`), as its configuration errors name it: `plugin
    /// "X" does not extend PreFilterPlugin plugin`.
    #[must_use]
    pub const fn plugin_interface(self) -> &'static str {
        match self {
            ExtensionPoint::PreEnqueue => "PreEnqueuePlugin",
            ExtensionPoint::QueueSort => "QueueSortPlugin",
            ExtensionPoint::PreFilter => "PreFilterPlugin",
            ExtensionPoint::Filter => "FilterPlugin",
            ExtensionPoint::PostFilter => "PostFilterPlugin",
            ExtensionPoint::PreScore => "PreScorePlugin",
            ExtensionPoint::Score => "ScorePlugin",
            ExtensionPoint::Reserve => "ReservePlugin",
            ExtensionPoint::Permit => "PermitPlugin",
            ExtensionPoint::PreBind => "PreBindPlugin",
            ExtensionPoint::Bind => "BindPlugin",
            ExtensionPoint::PostBind => "PostBindPlugin",
        }
    }

    /// Upstream's error for plugin `name` enabled twice at this point.
    #[must_use]
    pub fn already_registered(self, name: &str) -> String {
        format!(
            "plugin {name:?} already registered as {:?}",
            self.plugin_interface()
        )
    }

    /// Upstream's error for plugin `name` enabled at this point when it
    /// does not implement it.
    #[must_use]
    pub fn not_extended(self, name: &str) -> String {
        format!(
            "plugin {name:?} does not extend {} plugin",
            self.plugin_interface()
        )
    }
}

/// What PreFilter and PreScore may read besides the pod: the whole cycle
/// snapshot (upstream's `SharedLister`). Plugins that count pods across the
/// cluster (PodTopologySpread, InterPodAffinity) use it; per-node plugins
/// need only the `NodeInfo` Filter/Score are given.
pub trait SharedLister: Sync {
    /// Every node in the snapshot (order is the snapshot's, stable within a cycle).
    fn nodes(&self) -> &[Arc<NodeInfo>];
    /// A node by name.
    fn get(&self, name: &str) -> Option<&Arc<NodeInfo>>;
    /// `metadata.labels` of a Namespace, when the snapshot knows it (for
    /// `namespaceSelector`). `None`: namespace unknown.
    fn namespace_labels(&self, namespace: &str) -> Option<&BTreeMap<String, String>>;

    /// Nodes with at least one pod that has a pod affinity or anti-affinity
    /// term (upstream `HavePodsWithAffinityList`), in [`SharedLister::nodes`]
    /// order. The default filters `nodes()`; snapshots keep the list.
    fn have_pods_with_affinity(&self) -> Vec<&Arc<NodeInfo>> {
        self.nodes()
            .iter()
            .filter(|n| !n.pods_with_affinity.is_empty())
            .collect()
    }

    /// Nodes with at least one pod whose own terms can add to another
    /// pod's InterPodAffinity score: required affinity (weighted by
    /// `hardPodAffinityWeight`) or preferred (anti-)affinity terms. A
    /// subset of [`SharedLister::have_pods_with_affinity`] (pods with only
    /// required anti-affinity add nothing to a score), in
    /// [`SharedLister::nodes`] order. The default filters `nodes()`.
    fn have_pods_with_scoring_affinity(&self) -> Vec<&Arc<NodeInfo>> {
        self.nodes()
            .iter()
            .filter(|n| has_scoring_affinity(n))
            .collect()
    }

    /// Whether any node of the snapshot has GPU devices
    /// ([`NodeInfo::gpu`]). GpuShare's PreScore skips pods without GPUs
    /// when none has. This default scans every node, O(nodes); the
    /// scheduler's snapshot keeps a count, O(1).
    fn has_gpu_nodes(&self) -> bool {
        self.nodes().iter().any(|n| n.gpu.is_some())
    }

    /// Nodes with at least one pod that has a required anti-affinity term
    /// (upstream `HavePodsWithRequiredAntiAffinityList`), in
    /// [`SharedLister::nodes`] order. The default filters `nodes()`.
    fn have_pods_with_required_anti_affinity(&self) -> Vec<&Arc<NodeInfo>> {
        self.nodes()
            .iter()
            .filter(|n| !n.pods_with_required_anti_affinity.is_empty())
            .collect()
    }

    /// Matching pods per eligible domain for `constraints` (`pod`'s hard
    /// topology spread constraints, in order), exactly what
    /// [`crate::topology_spread::count_domains`] over [`SharedLister::nodes`]
    /// returns (upstream `calPreFilterState`'s `TpValueToMatchNum`).
    /// `count` makes that full count; this default calls it. The
    /// scheduler's snapshot answers from per-domain counts it keeps across
    /// cycles ([`crate::spread_counts::SpreadCounts`]), calling `count` only
    /// on first use of a selector.
    fn spread_domain_counts(
        &self,
        pod: &PodInfo,
        constraints: &[TopologySpreadConstraint],
        count: &dyn Fn() -> Vec<DomainCounts>,
    ) -> Vec<Arc<DomainCounts>> {
        let _ = (pod, constraints);
        count().into_iter().map(Arc::new).collect()
    }

    /// InterPodAffinity's PreFilter state for `pod` over every node, what
    /// [`RequiredAffinityState::count_nodes`] over [`SharedLister::nodes`]
    /// gives (upstream `preFilterState`'s three count maps). `count` makes
    /// that full count; this default calls it. The scheduler's snapshot
    /// answers from counts it keeps across cycles
    /// ([`crate::affinity_counts::AffinityCounts`]).
    fn required_affinity_state(
        &self,
        pod: &PodInfo,
        count: &dyn Fn() -> RequiredAffinityState,
    ) -> RequiredAffinityState {
        let _ = pod;
        count()
    }

    /// How many nodes of the snapshot report the image name `image` (exactly
    /// as in `status.images`), for ImageLocality's spread (upstream
    /// `ImageStateSummary.NumNodes`). This default scans every node,
    /// O(nodes); the scheduler's snapshot answers from a map its node cache
    /// maintains.
    fn image_node_count(&self, image: &str) -> usize {
        self.nodes()
            .iter()
            .filter(|n| n.spec.images.contains_key(image))
            .count()
    }

    /// The volume objects (claims, PVs, StorageClasses, CSINodes,
    /// VolumeAttachments) the volume plugins read. This default is an empty
    /// state: every claim reads as not found, so the volume plugins must
    /// not run over a lister that was given none. An `Arc` (one count
    /// bump) so a PreFilter can keep it for its Filter.
    fn volumes(&self) -> Arc<VolumeState> {
        VolumeState::empty()
    }

    /// Whether a pod on a node of this view, other than the one with uid
    /// `uid`, uses the claim `namespace/claim` through a PVC volume
    /// (upstream `StorageInfos().IsPVCUsedByPods`). This default walks
    /// every pod, O(pods); the scheduler's snapshot answers from the
    /// [`crate::volumes::ClaimUsers`] it keeps.
    fn claim_used_by_other_pod(&self, namespace: &str, claim: &str, uid: &str) -> bool {
        crate::volumes::state::claim_used_by_other_pod(self.nodes(), namespace, claim, uid)
    }
}

/// Whether a pod on `node` has terms that can score other pods (see
/// [`SharedLister::have_pods_with_scoring_affinity`]).
#[must_use]
pub fn has_scoring_affinity(node: &NodeInfo) -> bool {
    node.pods_with_affinity.iter().any(|p| {
        p.pod_affinity
            .as_deref()
            .is_some_and(|a| !a.required_affinity.is_empty() || a.has_preferred_terms())
    })
}

/// Common to every plugin.
pub trait Plugin: Send + Sync {
    /// The registry name, e.g. `"NodeResourcesFit"`.
    fn name(&self) -> &'static str;

    /// Events that could make a pod this plugin rejected schedulable. A pod
    /// parked as unschedulable moves back to the queue only on one of the
    /// events registered by the plugins that rejected it (or after the
    /// unschedulable timeout).
    fn events_to_register(&self) -> &'static [ClusterEvent] {
        &[]
    }
}

/// What PreFilter may return besides a status: the only nodes worth
/// filtering. `None` means all nodes.
#[derive(Debug, Clone, Default)]
pub struct PreFilterResult {
    /// Candidate node names; nodes outside are reported with
    /// [`REASON_FILTERED_BY_PREFILTER`].
    pub node_names: Option<HashSet<Arc<str>>>,
}

/// PreFilter: once per pod per cycle.
pub trait PreFilterPlugin: Plugin {
    /// Inspect the pod, store pre-computed state, optionally narrow the node
    /// set. A rejecting status rejects the pod on every node; `Skip` means
    /// this plugin's Filter is not run for this pod (upstream).
    fn pre_filter(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        cluster: &dyn SharedLister,
    ) -> (PreFilterResult, Status);
}

/// Filter: is `node` feasible for `pod`? Success, `Unschedulable` (evicting
/// lower-priority pods from this node may help: DefaultPreemption tries it)
/// or `UnschedulableAndUnresolvable` (nothing on the node can change it:
/// preemption skips it), with upstream reason texts; the reasons are counted
/// per node in the pod's FitError. `Error` aborts the cycle. Guide:
/// `docs/plugins.md`.
pub trait FilterPlugin: Plugin {
    /// Decide feasibility. Called concurrently for many nodes (from several
    /// threads): read `state`, never block.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;

    /// The search's cheap form of [`FilterPlugin::filter`]: whether the
    /// node passes, without building a rejection's reasons. `Some(true)`:
    /// `filter` returns success; `Some(false)`: it returns `Unschedulable`
    /// or `UnschedulableAndUnresolvable` (never `Error`); `None`, the
    /// default: call `filter`. The framework calls `filter` for the reasons
    /// only when they are read (a FitError, `explain`); upstream builds
    /// every rejected node's status, which a pod that is then placed
    /// discards unread. Called concurrently, like `filter`.
    fn fits(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeInfo) -> Option<bool> {
        None
    }

    /// The fast path: a condition on a node's [`NodeHot`] fields under which
    /// [`FilterPlugin::filter`] surely returns success for `pod`, decided
    /// once per cycle (after PreFilter, so `state` is readable). On a node
    /// meeting the conditions of the Filters that have one, the framework
    /// calls only the other Filters; on any other node, the whole chain as
    /// usual (a condition that fails says nothing: the Filter decides and
    /// gives its reason). `None`, the default, means no condition exists
    /// for this pod: this plugin's `filter` is then called on every node,
    /// so a plugin that does not implement it stays correct.
    fn hot_filter(&self, _state: &CycleState, _pod: &PodInfo) -> Option<HotFilter> {
        None
    }
}

/// PreScore: once per pod, after Filter, over the feasible nodes that will be
/// scored. `Skip` turns off this plugin's Score for this pod; `Error` aborts
/// the cycle.
pub trait PreScorePlugin: Plugin {
    /// Pre-compute what Score reads.
    fn pre_score(
        &self,
        state: &mut CycleState,
        pod: &PodInfo,
        feasible: &[Arc<NodeInfo>],
        cluster: &dyn SharedLister,
    ) -> Status;
}

/// Score: rank a feasible node. Raw scores may use any non-negative range if
/// [`ScorePlugin::normalize_score`] maps them into 0..=100
/// ([`MIN_NODE_SCORE`]..=[`MAX_NODE_SCORE`]); the profile's weight for the
/// plugin multiplies the normalized score, and the node with the highest
/// weighted sum over all Score plugins wins (ties at random, as upstream).
pub trait ScorePlugin: Plugin {
    /// Raw score of `node` for `pod`.
    ///
    /// # Errors
    /// A `Status` with code `Error` aborts the cycle.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

    /// The fast path: the raw score of a node from its [`NodeHot`] fields
    /// when they determine it, which must equal what [`ScorePlugin::score`]
    /// returns for the node; `None`, the default, and the framework calls
    /// `score`.
    fn score_hot(&self, _state: &CycleState, _pod: &PodInfo, _node: &NodeHot) -> Option<i64> {
        None
    }

    /// [`ScorePlugin::score_hot`] over many nodes at once: `out[k]` becomes
    /// the raw score of `hot[nodes[k]]` when its hot record determines it,
    /// else `None` (the framework then calls [`ScorePlugin::score`] for that
    /// node); `out` and `nodes` have the same length. The default calls
    /// `score_hot` node by node (a static call: one dynamic call per plugin
    /// per cycle rather than one per node); a plugin overrides it to do its
    /// per-pod work once, outside the loop. Must agree with `score_hot`.
    fn score_hot_batch(
        &self,
        state: &CycleState,
        pod: &PodInfo,
        hot: &[NodeHot],
        nodes: &[usize],
        out: &mut [Option<i64>],
    ) {
        for (o, &i) in out.iter_mut().zip(nodes) {
            *o = self.score_hot(state, pod, &hot[i]);
        }
    }

    /// Maps raw scores (one per feasible node, same order) into
    /// [`MIN_NODE_SCORE`]..=[`MAX_NODE_SCORE`]. The default leaves them as is.
    fn normalize_score(&self, _state: &CycleState, _pod: &PodInfo, _scores: &mut [i64]) {}
}

/// Upstream `helper.DefaultNormalizeScore`: scales scores so the highest
/// becomes `max_priority`; with `reverse`, high raw scores become low. When
/// every score is 0, all become `max_priority` if `reverse`, else stay 0.
pub fn default_normalize_score(max_priority: i64, reverse: bool, scores: &mut [i64]) {
    let max = scores.iter().copied().max().unwrap_or(0);
    if max == 0 {
        if reverse {
            scores.iter_mut().for_each(|s| *s = max_priority);
        }
        return;
    }
    for s in scores.iter_mut() {
        *s = max_priority * *s / max;
        if reverse {
            *s = max_priority - *s;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn default_normalize_matches_upstream_examples() {
        let mut s = [2, 4, 0];
        default_normalize_score(100, false, &mut s);
        assert_eq!(s, [50, 100, 0]);
        let mut s = [2, 4, 0];
        default_normalize_score(100, true, &mut s);
        assert_eq!(s, [50, 0, 100]);
        let mut s = [0, 0];
        default_normalize_score(100, true, &mut s);
        assert_eq!(s, [100, 100]);
        let mut s = [0, 0];
        default_normalize_score(100, false, &mut s);
        assert_eq!(s, [0, 0]);
        let mut s = [1, 3];
        default_normalize_score(100, false, &mut s);
        assert_eq!(s, [33, 100], "integer division truncates");
    }
}
