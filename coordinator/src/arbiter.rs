//! The bind arbiter's decision: does a proposed placement pass the bind
//! checks of the pod's profile against the coordinator's view?
//!
//! Workers decide on their own snapshot, which lags the grants other
//! workers just received. For each proposal, and each alternative node it
//! tries, the arbiter runs [`check`]: the [`BindCheck`]s of the enabled
//! Filter plugins of the pod's profile ([`ServedProfile::bind_checks`],
//! built from the configuration and plugin registry the workers use), in
//! Filter order, each calling the pure function its Filter calls. For the
//! default profile that is the cordon, `spec.nodeName`, taints and
//! tolerations, `nodeSelector` and required node affinity (with the
//! profile's `addedAffinity`), host ports, resources (minus the profile's
//! ignored ones), topology spread and inter-pod affinity; a profile also
//! enabling MaxInstancesPerNode or an out-of-tree Filter with a check (a
//! vendor's devices) is held to those too, and a profile without a plugin
//! is not held to it. The view counts every grant, even those the cluster
//! has not reflected yet, so a placement that became infeasible meanwhile
//! (the room taken by another worker's grant, the node tainted or
//! relabelled) is refused, and the worker re-queues the pod.
//!
//! Pods nominated to the node with a priority at least the pod's hold
//! their room: the checks that read only the node
//! ([`BindCheck::node_local`]) must also pass with them placed there
//! ([`Refusal::Reserved`]). Filters without a bind check are not
//! re-checked (the coordinator warns once at start; see
//! [`flotilla_shared::framework::BindCheck`]).
//!
//! Cost: one dynamic call per check, each returning after a look at the pod
//! when it does not concern it; cross-node checks read the counts the
//! coordinator keeps ([`KeptCounts`]), O(domains) rather than a pass over
//! every pod. Nothing is allocated for a granted pod without spread
//! constraints.
//!
//! [`ServedProfile::bind_checks`]: flotilla_shared::framework::ServedProfile::bind_checks
//! [`KeptCounts`]: flotilla_shared::framework::KeptCounts

use std::borrow::Cow;
use std::sync::Arc;

use flotilla_shared::framework::{BindCheck, BindView};
use flotilla_shared::{NodeInfo, PodInfo};

/// Whether a pod has required anti-affinity terms (then it constrains every
/// later pod, and InterPodAffinity's check must look at the whole view for
/// any pod: the coordinator counts such pods for [`BindView`]).
#[must_use]
pub fn has_required_anti_affinity(pod: &PodInfo) -> bool {
    pod.pod_affinity
        .as_ref()
        .is_some_and(|a| !a.required_anti_affinity.is_empty())
}

/// Why the arbiter refuses a placement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Refusal {
    /// The node is not known.
    NoNode,
    /// The pod's `spec.schedulerName` names no profile the coordinator
    /// serves: it has no checks, so it is never granted.
    NoProfile(Arc<str>),
    /// A bind check refused: its Filter's reason.
    Check(Cow<'static, str>),
    /// It passes alone but not with the pods nominated to the node (named,
    /// `namespace/name`): their room is reserved.
    Reserved(Cow<'static, str>, Vec<String>),
}

impl Refusal {
    /// The conflict reason for `node`, as workers and logs see it:
    /// `node <name>: <reason>`.
    #[must_use]
    pub fn reason(&self, node: &str) -> String {
        match self {
            Refusal::NoNode => format!("node {node} not found"),
            Refusal::NoProfile(name) => {
                format!(
                    "node {node}: schedulerName {name:?} is not a profile this coordinator serves"
                )
            }
            Refusal::Check(r) => format!("node {node}: {r}"),
            Refusal::Reserved(r, names) => format!(
                "node {node}: {r} (room reserved for nominated pods {})",
                names.join(", ")
            ),
        }
    }
}

/// The arbiter's check of placing `pod` on `node` (a node of `view`):
/// every one of `checks` (the pod's profile's, in Filter order) on the
/// node, then the node-local ones with the pods of `nominated` (those
/// holding room on the node against `pod`) placed there too.
///
/// # Errors
/// [`Refusal::Check`] with the first refusing check's reason, or
/// [`Refusal::Reserved`] when the node fits only without the nominees.
pub fn check(
    checks: &[Arc<dyn BindCheck>],
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &[Arc<PodInfo>],
    view: &mut BindView<'_>,
) -> Result<(), Refusal> {
    for c in checks {
        c.check_bind(pod, node, view).map_err(Refusal::Check)?;
    }
    if !nominated.is_empty() {
        fits_with(checks, pod, node, nominated, view).map_err(|reason| {
            let names = nominated.iter().map(|p| p.key.to_string()).collect();
            Refusal::Reserved(reason, names)
        })?;
    }
    Ok(())
}

/// Whether `pod` passes the node-local `checks` on `node` with the pods of
/// `nominated` placed there too (on a copy; `node` alone when there are
/// none): the room nominated pods hold, for [`check`] and for preemption
/// proposals (`node` then without the victims).
///
/// # Errors
/// The first refusing check's reason.
pub fn fits_with(
    checks: &[Arc<dyn BindCheck>],
    pod: &PodInfo,
    node: &NodeInfo,
    nominated: &[Arc<PodInfo>],
    view: &mut BindView<'_>,
) -> Result<(), Cow<'static, str>> {
    let with;
    let node = if nominated.is_empty() {
        node
    } else {
        let mut n = node.clone();
        for p in nominated {
            n.add_pod(p.clone());
        }
        with = n;
        &with
    };
    for c in checks.iter().filter(|c| c.node_local()) {
        c.check_bind(pod, node, view)?;
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use std::collections::{BTreeMap, HashMap};
    use std::sync::atomic::{AtomicUsize, Ordering};

    use flotilla_shared::framework::{BindResult, KeptCounts, Plugin, refuse_if};
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};

    use super::*;

    /// Refuses a node holding more than `max` pods; counts its calls.
    struct AtMost {
        name: &'static str,
        max: usize,
        local: bool,
        calls: AtomicUsize,
    }

    impl AtMost {
        fn new(name: &'static str, max: usize, local: bool) -> Arc<Self> {
            Arc::new(AtMost {
                name,
                max,
                local,
                calls: AtomicUsize::new(0),
            })
        }
    }

    impl Plugin for AtMost {
        fn name(&self) -> &'static str {
            self.name
        }
    }

    impl BindCheck for AtMost {
        fn check_bind(&self, _: &PodInfo, node: &NodeInfo, _: &mut BindView<'_>) -> BindResult {
            self.calls.fetch_add(1, Ordering::Relaxed);
            refuse_if(node.pods.len() + 1 > self.max, self.name)
        }

        fn node_local(&self) -> bool {
            self.local
        }
    }

    fn run(
        checks: &[Arc<dyn BindCheck>],
        on_node: usize,
        nominated: &[Arc<PodInfo>],
    ) -> Result<(), Refusal> {
        let node = NodeBuilder::new("n1")
            .pods(110)
            .build_info_with((0..on_node).map(|i| PodBuilder::new(&format!("p{i}")).build_info()));
        let nodes: HashMap<Arc<str>, NodeInfo> = [(node.spec.name.clone(), node)].into();
        let (namespaces, mut kept) = (BTreeMap::new(), KeptCounts::default());
        let mut view = BindView::new(&nodes, &namespaces, 0, &mut kept);
        let pod = PodBuilder::new("incoming").build_info();
        check(checks, &pod, &nodes["n1"], nominated, &mut view)
    }

    #[test]
    fn checks_run_in_order_and_the_first_refusal_is_the_reason() {
        let (a, b) = (AtMost::new("a", 1, true), AtMost::new("b", 1, true));
        let checks: [Arc<dyn BindCheck>; 2] = [a.clone(), b.clone()];
        assert_eq!(run(&checks, 0, &[]), Ok(()));
        let r = run(&checks, 1, &[]).expect_err("refused");
        assert_eq!(r, Refusal::Check("a".into()));
        assert_eq!(r.reason("n1"), "node n1: a");
        assert_eq!(
            b.calls.load(Ordering::Relaxed),
            1,
            "not called after a refusal"
        );
    }

    #[test]
    fn only_node_local_checks_also_run_with_the_nominees() {
        let nominee = Arc::new(PodBuilder::new("nominee").build_info());
        let (local, counts) = (
            AtMost::new("local", 2, true),
            AtMost::new("counts", 2, false),
        );
        let checks: [Arc<dyn BindCheck>; 2] = [counts.clone(), local.clone()];
        // 1 pod + the incoming fit; with the nominee they do not.
        let r = run(&checks, 1, std::slice::from_ref(&nominee)).expect_err("reserved");
        assert_eq!(
            r.reason("n1"),
            "node n1: local (room reserved for nominated pods default/nominee)"
        );
        assert_eq!(
            counts.calls.load(Ordering::Relaxed),
            1,
            "once, on the node alone"
        );
        assert_eq!(
            local.calls.load(Ordering::Relaxed),
            2,
            "alone, then with the nominee"
        );
        // Without nominees each check runs once.
        assert_eq!(run(&checks, 1, &[]), Ok(()));
        assert_eq!(local.calls.load(Ordering::Relaxed), 3);
    }

    #[test]
    fn a_pod_of_a_profile_not_served_is_refused_with_its_scheduler_name() {
        assert_eq!(
            Refusal::NoProfile("other".into()).reason("n1"),
            "node n1: schedulerName \"other\" is not a profile this coordinator serves"
        );
        assert_eq!(Refusal::NoNode.reason("n9"), "node n9 not found");
    }
}
