//! Cross-node checks of the bind arbiter.
//!
//! Workers decide on their own snapshot, which lags the grants other workers
//! just received. Per-node resources are re-checked by [`flotilla_shared::fit`];
//! constraints that depend on pods on *other* nodes need the whole view:
//! - **InterPodAffinity**: the pod's required affinity / anti-affinity, and
//!   existing pods' required anti-affinity against the pod (two workers must
//!   never place two mutually anti-affine pods in one topology domain);
//! - **PodTopologySpread**: the pod's `DoNotSchedule` constraints (two
//!   workers must never break a `maxSkew` together);
//! - **MaxInstancesPerNode**: the pod's
//!   `scheduling.flotilla.dev/max-instances-per-node` cap on its app's pods
//!   on the target node (a per-node count, but two workers granted the same
//!   node would break it together just the same).
//!
//! The arbiter's view counts every grant, even those the cluster has not
//! reflected yet, so a proposal that became infeasible meanwhile is a
//! conflict and the worker re-queues the pod. The same pure functions the
//! Filter plugins use decide ([`flotilla_shared::pod_affinity::check_placement`],
//! [`flotilla_shared::topology_spread::check_placement`],
//! [`flotilla_shared::max_instances::check_placement`]).

use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use flotilla_shared::affinity_counts::AffinityCounts;
use flotilla_shared::pod_affinity::RequiredAffinityState;
use flotilla_shared::spread_counts::SpreadCounts;
use flotilla_shared::{NodeInfo, PodInfo, max_instances, pod_affinity};

/// Which inter-pod Filter plugins a profile runs, so the arbiter enforces
/// exactly those for its pods. Unknown profiles get what the default
/// profile enables ([`CrossNodeChecks::DEFAULT`]: affinity and spread, not
/// the instance cap).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CrossNodeChecks {
    /// `InterPodAffinity` is enabled at `filter`.
    pub pod_affinity: bool,
    /// `PodTopologySpread` is enabled at `filter`.
    pub topology_spread: bool,
    /// `MaxInstancesPerNode` is enabled at `filter`, with this app label
    /// key (`None`: not enabled).
    pub max_instances_label: Option<Arc<str>>,
}

impl CrossNodeChecks {
    /// The default profile's: InterPodAffinity and PodTopologySpread.
    pub const DEFAULT: CrossNodeChecks = CrossNodeChecks {
        pod_affinity: true,
        topology_spread: true,
        max_instances_label: None,
    };
}

impl Default for CrossNodeChecks {
    fn default() -> Self {
        Self::DEFAULT
    }
}

/// Whether a pod has required anti-affinity terms (then it constrains every
/// later pod, and the arbiter must look at the whole cluster for any pod).
#[must_use]
pub fn has_required_anti_affinity(pod: &PodInfo) -> bool {
    pod.pod_affinity
        .as_ref()
        .is_some_and(|a| !a.required_anti_affinity.is_empty())
}

/// Counts the arbiter keeps over its view so a check costs O(domains)
/// instead of a pass over every pod: hard spread constraints per domain
/// and required inter-pod (anti-)affinity per topology pair. Feed it every
/// placement and removal; invalidate it when a node comes, goes or
/// relabels.
#[derive(Debug, Default)]
pub struct KeptCounts {
    /// Hard topology spread counts.
    pub spread: SpreadCounts,
    /// Required inter-pod (anti-)affinity counts.
    pub affinity: AffinityCounts,
}

impl KeptCounts {
    /// `pod` was just placed on `node`.
    pub fn pod_placed(&mut self, pod: &PodInfo, node: &NodeInfo) {
        self.spread.pod_placed(pod, node);
        self.affinity.pod_placed(pod, node);
    }

    /// `pod` was just removed from `node`.
    pub fn pod_removed(&mut self, pod: &PodInfo, node: &NodeInfo) {
        self.spread.pod_removed(pod, node);
        self.affinity.pod_removed(pod, node);
    }

    /// Forgets every count (a node added or removed, or relabelled).
    pub fn invalidate(&mut self) {
        self.spread.invalidate();
        self.affinity.invalidate();
    }
}

/// Re-checks placing `pod` on `node` against every node of the arbiter's
/// view. `anti_affinity_pods` is how many placed pods carry required
/// anti-affinity (0 lets a pod without terms skip the cluster-wide pass);
/// `kept` holds the view's spread and affinity counts (made on first use,
/// kept current by the caller).
///
/// # Errors
/// The upstream Filter reason of the first violated constraint.
pub fn check(
    checks: &CrossNodeChecks,
    pod: &PodInfo,
    node: &NodeInfo,
    nodes: &HashMap<std::sync::Arc<str>, NodeInfo>,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    anti_affinity_pods: usize,
    kept: &mut KeptCounts,
) -> Result<(), &'static str> {
    if let Some(label) = checks.max_instances_label.as_deref() {
        max_instances::check_placement(pod, node, label).map_err(|v| v.reason())?;
    }
    if checks.topology_spread && pod.topology_spread_constraints.iter().any(|c| c.is_hard()) {
        kept.spread
            .check_placement(pod, || nodes.values(), node)
            .map_err(|v| v.reason())?;
    }
    let pod_terms = pod
        .pod_affinity
        .as_ref()
        .is_some_and(|a| !a.required_affinity.is_empty() || !a.required_anti_affinity.is_empty());
    if checks.pod_affinity && (pod_terms || anti_affinity_pods > 0) {
        kept.affinity
            .required_state(
                pod,
                namespaces,
                || nodes.values(),
                || RequiredAffinityState::of_nodes(pod, nodes.values(), namespaces),
            )
            .check_placement(pod, node)
            .map_err(pod_affinity::AffinityViolation::reason)?;
    }
    Ok(())
}
