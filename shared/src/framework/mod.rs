//! The plugin API: one small trait per extension point, mirroring upstream's
//! `k8s.io/kube-scheduler/framework` interfaces.
//!
//! A scheduling cycle runs, for one pod:
//! 1. **PreFilter** ([`PreFilterPlugin`]): per-pod checks and pre-computation;
//!    may reject the pod outright or narrow the candidate nodes
//!    ([`PreFilterResult`]).
//! 2. **Filter** ([`FilterPlugin`]): is this node feasible? Called for many
//!    nodes in parallel, so it is `&self` and must not do I/O.
//! 3. **Score** ([`ScorePlugin`]): rank each feasible node, then
//!    `normalize_score` brings the plugin's scores into
//!    [`MIN_NODE_SCORE`]..=[`MAX_NODE_SCORE`]; the framework multiplies by the
//!    plugin's weight and sums.
//!
//! Plugins are synchronous and pure CPU work; binding is the only async step
//! and is not a plugin concern here. Each plugin declares the cluster events
//! that could make a pod it rejected schedulable
//! ([`Plugin::events_to_register`]), upstream's queueing hints in their
//! simplest form.

mod cycle_state;
mod fit_error;
mod status;

use std::collections::HashSet;
use std::sync::Arc;

pub use cycle_state::CycleState;
pub use fit_error::{Diagnosis, FitError, REASON_FILTERED_BY_PREFILTER};
pub use status::{Code, Status};

use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;

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
    /// set. A rejecting status rejects the pod on every node.
    fn pre_filter(&self, state: &mut CycleState, pod: &PodInfo) -> (PreFilterResult, Status);
}

/// Filter: is `node` feasible for `pod`? Success, `Unschedulable` (preemption
/// may help) or `UnschedulableAndUnresolvable`, with upstream reason texts.
pub trait FilterPlugin: Plugin {
    /// Decide feasibility. Called concurrently for many nodes.
    fn filter(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Status;
}

/// Score: rank a feasible node. Raw scores may use any non-negative range if
/// [`ScorePlugin::normalize_score`] maps them into 0..=100.
pub trait ScorePlugin: Plugin {
    /// Raw score of `node` for `pod`.
    ///
    /// # Errors
    /// A `Status` with code `Error` aborts the cycle.
    fn score(&self, state: &CycleState, pod: &PodInfo, node: &NodeInfo) -> Result<i64, Status>;

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
