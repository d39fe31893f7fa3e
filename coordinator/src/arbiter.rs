//! Cross-node checks of the bind arbiter.
//!
//! Workers decide on their own snapshot, which lags the grants other workers
//! just received. Per-node resources are re-checked by [`flotilla_shared::fit`];
//! constraints that depend on pods on *other* nodes need the whole view:
//! - **InterPodAffinity**: the pod's required affinity / anti-affinity, and
//!   existing pods' required anti-affinity against the pod (two workers must
//!   never place two mutually anti-affine pods in one topology domain);
//! - **PodTopologySpread**: the pod's `DoNotSchedule` constraints (two
//!   workers must never break a `maxSkew` together).
//!
//! The arbiter's view counts every grant, even those the cluster has not
//! reflected yet, so a proposal that became infeasible meanwhile is a
//! conflict and the worker re-queues the pod. The same pure functions the
//! Filter plugins use decide ([`flotilla_shared::pod_affinity::check_placement`],
//! [`flotilla_shared::topology_spread::check_placement`]).

use std::collections::{BTreeMap, HashMap};

use flotilla_shared::spread_counts::SpreadCounts;
use flotilla_shared::{NodeInfo, PodInfo, pod_affinity};

/// Which cross-node Filter plugins a profile runs, so the arbiter enforces
/// exactly those for its pods. Unknown profiles get both (the default
/// profile enables both).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct CrossNodeChecks {
    /// `InterPodAffinity` is enabled at `filter`.
    pub pod_affinity: bool,
    /// `PodTopologySpread` is enabled at `filter`.
    pub topology_spread: bool,
}

impl Default for CrossNodeChecks {
    fn default() -> Self {
        CrossNodeChecks {
            pod_affinity: true,
            topology_spread: true,
        }
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

/// Re-checks placing `pod` on `node` against every node of the arbiter's
/// view. `anti_affinity_pods` is how many placed pods carry required
/// anti-affinity (0 lets a pod without terms skip the cluster-wide pass);
/// `spread` holds the view's per-domain spread counts (made on first use,
/// kept current by the caller).
///
/// # Errors
/// The upstream Filter reason of the first violated constraint.
pub fn check(
    checks: CrossNodeChecks,
    pod: &PodInfo,
    node: &NodeInfo,
    nodes: &HashMap<std::sync::Arc<str>, NodeInfo>,
    namespaces: &BTreeMap<String, BTreeMap<String, String>>,
    anti_affinity_pods: usize,
    spread: &mut SpreadCounts,
) -> Result<(), &'static str> {
    if checks.topology_spread && pod.topology_spread_constraints.iter().any(|c| c.is_hard()) {
        spread
            .check_placement(pod, || nodes.values(), node)
            .map_err(|v| v.reason())?;
    }
    let pod_terms = pod
        .pod_affinity
        .as_ref()
        .is_some_and(|a| !a.required_affinity.is_empty() || !a.required_anti_affinity.is_empty());
    if checks.pod_affinity && (pod_terms || anti_affinity_pods > 0) {
        pod_affinity::check_placement(pod, node, nodes.values(), namespaces)
            .map_err(pod_affinity::AffinityViolation::reason)?;
    }
    Ok(())
}
