//! Scheduling profiles: which plugins run, in which order, with which score
//! weights (the in-process form of a `KubeSchedulerConfiguration` profile).

use crate::plugins::names;

/// One enabled plugin.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    /// Registry name.
    pub name: String,
    /// Score weight (ignored for plugins without a Score side). Must be ≥ 1.
    pub weight: i64,
    /// `pluginConfig` args, if any.
    pub args: Option<serde_json::Value>,
}

impl PluginRef {
    /// A plugin with weight 1 and no args.
    #[must_use]
    pub fn new(name: &str, weight: i64) -> Self {
        PluginRef {
            name: name.to_owned(),
            weight,
            args: None,
        }
    }
}

/// Upstream's `percentageOfNodesToScore` default: 0 means adaptive.
pub const DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE: u32 = 0;

/// A profile.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Profile {
    /// `schedulerName` pods select the profile with.
    pub scheduler_name: String,
    /// Enabled plugins in run order (each runs at every extension point it
    /// implements).
    pub plugins: Vec<PluginRef>,
    /// Share of nodes (1..=100) to find feasible before scoring; 0 = adaptive
    /// (upstream: `max(5, 50 - nodes/125)` %, at least 100 nodes).
    pub percentage_of_nodes_to_score: u32,
}

impl Default for Profile {
    /// Upstream's default profile for the plugins Flotilla implements, with
    /// upstream's score weights: TaintToleration 3, NodeAffinity 2,
    /// NodeResourcesFit 1, NodeResourcesBalancedAllocation 1.
    fn default() -> Self {
        Profile {
            scheduler_name: flotilla_shared::pod_info::DEFAULT_SCHEDULER_NAME.to_owned(),
            plugins: vec![
                PluginRef::new(names::NODE_UNSCHEDULABLE, 1),
                PluginRef::new(names::NODE_NAME, 1),
                PluginRef::new(names::TAINT_TOLERATION, 3),
                PluginRef::new(names::NODE_AFFINITY, 2),
                PluginRef::new(names::NODE_PORTS, 1),
                PluginRef::new(names::NODE_RESOURCES_FIT, 1),
                PluginRef::new(names::NODE_RESOURCES_BALANCED_ALLOCATION, 1),
            ],
            percentage_of_nodes_to_score: DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE,
        }
    }
}

/// Fewest nodes upstream ever searches (`minFeasibleNodesToFind`).
pub const MIN_FEASIBLE_NODES_TO_FIND: usize = 100;
/// Lowest adaptive percentage (`minFeasibleNodesPercentageToFind`).
pub const MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND: usize = 5;

/// How many feasible nodes to find before scoring, as upstream's
/// `numFeasibleNodesToFind`: every node below 100 nodes or at 100 %;
/// otherwise `percentage` (adaptive when 0: `max(5, 50 - n/125)`) of the
/// nodes, but at least 100.
#[must_use]
pub fn num_feasible_nodes_to_find(percentage: u32, num_all_nodes: usize) -> usize {
    if num_all_nodes < MIN_FEASIBLE_NODES_TO_FIND || percentage >= 100 {
        return num_all_nodes;
    }
    let pct = if percentage == 0 {
        50usize
            .saturating_sub(num_all_nodes / 125)
            .max(MIN_FEASIBLE_NODES_PERCENTAGE_TO_FIND)
    } else {
        percentage as usize
    };
    (num_all_nodes * pct / 100).max(MIN_FEASIBLE_NODES_TO_FIND)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn adaptive_percentage_matches_upstream_examples() {
        assert_eq!(num_feasible_nodes_to_find(0, 99), 99);
        assert_eq!(
            num_feasible_nodes_to_find(0, 100),
            100,
            "50% of 100 is below the floor"
        );
        assert_eq!(num_feasible_nodes_to_find(0, 1000), 420, "42%");
        assert_eq!(num_feasible_nodes_to_find(0, 1523), 578, "38% of 1523");
        assert_eq!(num_feasible_nodes_to_find(0, 5000), 500, "10%");
        assert_eq!(num_feasible_nodes_to_find(0, 6000), 300, "floor of 5%");
        assert_eq!(num_feasible_nodes_to_find(0, 100_000), 5000);
        assert_eq!(num_feasible_nodes_to_find(30, 1000), 300);
        assert_eq!(num_feasible_nodes_to_find(100, 5000), 5000);
        assert_eq!(
            num_feasible_nodes_to_find(1, 1000),
            100,
            "explicit percentage keeps the floor"
        );
    }
}
