//! Scheduling profiles: the in-process form of one `KubeSchedulerConfiguration`
//! profile after defaulting (`plugins` per extension point plus `multiPoint`,
//! `pluginConfig`, `percentageOfNodesToScore`). [`super::Framework::new`]
//! expands `multiPoint` the way upstream's framework runtime does.

use std::collections::BTreeMap;

use flotilla_shared::WorkloadClass;
use flotilla_shared::framework::ExtensionPoint;

use crate::plugins::names;
use crate::webhook::WebhookConfig;

/// One plugin named in a plugin set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PluginRef {
    /// Registry name.
    pub name: String,
    /// Score weight; 0 means "unset" and counts as 1 (upstream). Ignored for
    /// plugins without a Score side.
    pub weight: i64,
}

impl PluginRef {
    /// A plugin with a weight.
    #[must_use]
    pub fn new(name: &str, weight: i64) -> Self {
        PluginRef {
            name: name.to_owned(),
            weight,
        }
    }
}

/// `enabled` / `disabled` of one extension point (upstream `PluginSet`).
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct PluginSet {
    /// Enabled plugins, in run order.
    pub enabled: Vec<PluginRef>,
    /// Disabled plugin names; `"*"` disables every default (and, at a
    /// specific point, every `multiPoint` plugin at that point).
    pub disabled: Vec<String>,
}

/// A profile's plugins: `multiPoint` plus per-point sets.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Plugins {
    /// Enabled at every extension point each plugin implements.
    pub multi_point: PluginSet,
    /// Per-point sets (`queueSort`, `preFilter`, `filter`, `preScore`,
    /// `score`, `bind`, ...). A missing point is an empty set.
    pub points: BTreeMap<ExtensionPoint, PluginSet>,
}

impl Plugins {
    /// The set of `point` (empty when absent).
    #[must_use]
    pub fn point(&self, point: ExtensionPoint) -> PluginSet {
        self.points.get(&point).cloned().unwrap_or_default()
    }
}

/// Upstream's `percentageOfNodesToScore` default: 0 means adaptive.
pub const DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE: u32 = 0;

/// A profile.
#[derive(Debug, Clone, PartialEq)]
pub struct Profile {
    /// `schedulerName` pods select the profile with.
    pub scheduler_name: String,
    /// Enabled/disabled plugins after merging with the defaults.
    pub plugins: Plugins,
    /// `pluginConfig`: plugin name → args (JSON; `apiVersion`/`kind`
    /// stripped). Plugins without an entry get their default args.
    pub plugin_config: BTreeMap<String, serde_json::Value>,
    /// Share of nodes (1..=100) to find feasible before scoring; 0 = adaptive
    /// (upstream: `max(5, 50 - nodes/125)` %, at least 100 nodes).
    pub percentage_of_nodes_to_score: u32,
    /// Flotilla extension: the workload class every pod of this profile is
    /// dispatched as (`None`: classify each pod by label / owner / QoS).
    pub workload_class: Option<WorkloadClass>,
    /// Flotilla extension: the placement webhook the profile delegates the
    /// choice of node to ([`crate::webhook`]); `None`: the in-process
    /// pipeline chooses.
    pub webhook: Option<WebhookConfig>,
    /// Flotilla extension: how equally scored nodes are told apart
    /// (`tieBreak`; default [`TieBreak::Random`], as upstream).
    pub tie_break: TieBreak,
}

/// How the scheduling cycle picks among equally scored nodes.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum TieBreak {
    /// Uniformly at random (upstream `selectHost`).
    #[default]
    Random,
    /// The smallest node name: reproducible runs, as the FGD paper's
    /// simulator patches kube-scheduler to do.
    NodeName,
}

impl TieBreak {
    /// The config spelling (`Random`, `NodeName`).
    #[must_use]
    pub const fn as_str(self) -> &'static str {
        match self {
            TieBreak::Random => "Random",
            TieBreak::NodeName => "NodeName",
        }
    }

    /// Parses the config spelling.
    #[must_use]
    pub fn parse(s: &str) -> Option<Self> {
        match s {
            "Random" => Some(TieBreak::Random),
            "NodeName" => Some(TieBreak::NodeName),
            _ => None,
        }
    }
}

/// Upstream's default `multiPoint` plugins (`getDefaultPlugins`, 1.35, and
/// `GangScheduling` as with the `GenericWorkload` feature), in upstream
/// order, restricted to the plugins Flotilla implements, with upstream's
/// score weights; then Flotilla's `GpuShare`.
#[must_use]
pub fn default_multi_point() -> Vec<PluginRef> {
    [
        (names::SCHEDULING_GATES, 0),
        (names::PRIORITY_SORT, 0),
        (names::NODE_UNSCHEDULABLE, 0),
        (names::NODE_NAME, 0),
        (names::TAINT_TOLERATION, 3),
        (names::NODE_AFFINITY, 2),
        (names::NODE_PORTS, 0),
        (names::NODE_RESOURCES_FIT, 1),
        (names::VOLUME_RESTRICTIONS, 0),
        (names::NODE_VOLUME_LIMITS, 0),
        (names::VOLUME_BINDING, 0),
        (names::VOLUME_ZONE, 0),
        (names::POD_TOPOLOGY_SPREAD, 2),
        (names::INTER_POD_AFFINITY, 2),
        (names::DEFAULT_PREEMPTION, 0),
        (names::NODE_RESOURCES_BALANCED_ALLOCATION, 1),
        (names::IMAGE_LOCALITY, 1),
        (names::DEFAULT_BINDER, 0),
        // Upstream adds it with the `GenericWorkload` feature (the
        // `scheduling.k8s.io` PodGroup API): it acts only on pods naming one.
        (names::GANG_SCHEDULING, 0),
        // Flotilla's: per-device GPU placement and the GPU policy (FGD by
        // default). It acts only where GPUs are: PreFilter skips pods
        // asking for none, PreScore skips them when no feasible node has
        // GPUs. Weight 5 so that on GPU nodes the policy leads the
        // spreading scores (1-3 each).
        (names::GPU_SHARE, 5),
    ]
    .into_iter()
    .map(|(n, w)| PluginRef::new(n, w))
    .collect()
}

impl Default for Profile {
    /// Upstream's `default-scheduler` profile for the plugins Flotilla
    /// implements ([`default_multi_point`]).
    fn default() -> Self {
        Profile {
            scheduler_name: flotilla_shared::pod_info::DEFAULT_SCHEDULER_NAME.to_owned(),
            plugins: Plugins {
                multi_point: PluginSet {
                    enabled: default_multi_point(),
                    disabled: Vec::new(),
                },
                points: BTreeMap::new(),
            },
            plugin_config: BTreeMap::new(),
            percentage_of_nodes_to_score: DEFAULT_PERCENTAGE_OF_NODES_TO_SCORE,
            workload_class: None,
            webhook: None,
            tie_break: TieBreak::Random,
        }
    }
}

impl Profile {
    /// A fingerprint of how this profile decides, the same in every
    /// process and build: its `schedulerName`, `workloadClass`,
    /// `percentageOfNodesToScore`, plugin sets (multiPoint and each point:
    /// enabled with weights, disabled) and `pluginConfig` args. Two
    /// profiles with equal fingerprints run the same plugins with the same
    /// args (the placement webhook is left out).
    #[must_use]
    pub fn fingerprint(&self) -> u64 {
        use std::fmt::Write as _;
        let mut text = String::new();
        let _ = writeln!(
            text,
            "{}|{}|{}|{}",
            self.scheduler_name,
            self.workload_class
                .map(|c| c.to_string())
                .unwrap_or_default(),
            self.percentage_of_nodes_to_score,
            self.tie_break.as_str()
        );
        let sets = std::iter::once(("multiPoint", &self.plugins.multi_point)).chain(
            self.plugins
                .points
                .iter()
                .map(|(point, set)| (point.config_name(), set)),
        );
        for (label, set) in sets {
            if set.enabled.is_empty() && set.disabled.is_empty() {
                continue;
            }
            let _ = write!(text, "{label}:");
            for r in &set.enabled {
                let _ = write!(text, "+{}/{}", r.name, r.weight);
            }
            for d in &set.disabled {
                let _ = write!(text, "-{d}");
            }
            text.push('\n');
        }
        // serde_json's maps are sorted (no `preserve_order`): the compact
        // text of equal args is equal.
        for (name, args) in &self.plugin_config {
            let _ = writeln!(text, "{name}={args}");
        }
        flotilla_shared::stable_hash::fnv1a(text.as_bytes())
    }

    /// The fingerprint of a set of profiles
    /// ([`flotilla_shared::framework::profiles_fingerprint`] of each
    /// [`Profile::fingerprint`]): what a worker presents when it registers.
    #[must_use]
    pub fn fingerprint_of(profiles: &[Profile]) -> u64 {
        flotilla_shared::framework::profiles_fingerprint(
            profiles
                .iter()
                .map(|p| (p.scheduler_name.as_str(), p.fingerprint())),
        )
    }

    /// A profile running exactly `plugins` at every point each implements
    /// (as `multiPoint`), plus `PrioritySort` and `DefaultBinder`; handy in
    /// tests.
    #[must_use]
    pub fn only(plugins: &[(&str, i64)]) -> Self {
        let mut enabled = vec![PluginRef::new(names::PRIORITY_SORT, 0)];
        enabled.extend(plugins.iter().map(|(n, w)| PluginRef::new(n, *w)));
        enabled.push(PluginRef::new(names::DEFAULT_BINDER, 0));
        Profile {
            plugins: Plugins {
                multi_point: PluginSet {
                    enabled,
                    disabled: Vec::new(),
                },
                points: BTreeMap::new(),
            },
            ..Profile::default()
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
