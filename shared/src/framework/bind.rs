//! Bind-time re-checks: a Filter plugin's [`BindCheck`], which the
//! coordinator's bind arbiter runs against its authoritative view before it
//! writes a Binding.
//!
//! # Why
//! Workers schedule optimistically, each on its own cache, which lags the
//! grants other workers just received: two workers may claim the same room
//! (the last GPU of a node, the one zone an anti-affine pod may use). The
//! coordinator is the one writer to the cluster; before it writes a
//! Binding, its arbiter runs the bind checks of the pod's profile against a
//! view that counts every grant, even those the cluster has not reflected
//! yet. One of the two claims wins; the other is refused as a conflict and
//! its worker schedules the pod again on a fresher cache.
//!
//! # When the arbiter calls a check
//! For each bind proposal, on the proposed node and then, while they are
//! refused, on each alternative node the worker offered: the checks of the
//! enabled Filter plugins of the pod's profile (its `spec.schedulerName`)
//! that provide one, in Filter order, until one refuses. Gang members are
//! checked the same way, one by one. A placement is granted only when every
//! check passes; the first `Err(reason)` refuses it, and the worker's
//! conflict reason is `node <name>: <reason>`.
//!
//! Preemption proposals run the [`BindCheck::node_local`] checks on the
//! node without the victims (with the pods nominated there added): the
//! preemptor must fit once they are gone.
//!
//! # Nominated pods
//! A pod nominated to a node by a granted preemption
//! (`status.nominatedNodeName`) holds its room there against pods of equal
//! or lower priority (upstream `addGENominatedPods`). When every check
//! passed on the node, the arbiter runs the `node_local` checks again on a
//! copy of the node with those nominees placed on it; a refusal there reads
//! `node <name>: <reason> (room reserved for nominated pods ns/a, ns/b)`.
//! Checks that read the rest of the view (topology spread, inter-pod
//! affinity) are not run again with the nominees: the arbiter's counts do
//! not hold them.
//!
//! # Not re-checked
//! A Filter plugin without a bind check is not re-checked at bind time:
//! the coordinator logs it once when it starts (a warning naming the plugin
//! and the profile) and lists it ([`ServedProfile::unchecked_filters`]);
//! two workers may then together over-commit what it guards. PreFilter-only
//! plugins and extenders' `filter` verbs are not re-checked either.
//!
//! # Units
//! What a check reads is what Filter reads: `PodInfo::requests` and
//! `NodeInfo::requested` / `NodeSpec::allocatable` hold cpu in millicores,
//! memory and ephemeral storage in bytes, extended resources in their own
//! integer units (devices), pods as a count.

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use super::Plugin;
use crate::affinity_counts::AffinityCounts;
use crate::node_info::NodeInfo;
use crate::pod_info::PodInfo;
use crate::spread_counts::SpreadCounts;
use crate::volumes::binding::VolumePlan;
use crate::volumes::{ClaimUsers, VolumeState};
use crate::workload::WorkloadClass;

/// What a [`BindCheck`] returns: `Ok`, or the Filter's reason for
/// rejecting the node.
pub type BindResult = Result<(), Cow<'static, str>>;

/// `Err(reason)` when `refused`, else `Ok`: the whole body of a check whose
/// Filter is one predicate with one reason.
///
/// # Errors
/// `reason`, when `refused`.
pub fn refuse_if(refused: bool, reason: &'static str) -> BindResult {
    if refused {
        Err(Cow::Borrowed(reason))
    } else {
        Ok(())
    }
}

/// A Filter plugin's bind-time re-check (see the [module docs](crate::framework::bind)).
///
/// # Contract
/// - **It agrees with the plugin's Filter.** On the same view,
///   [`BindCheck::check_bind`] returns `Ok` exactly when the plugin's
///   PreFilter and Filter (as a worker runs them, a PreFilter `Skip`
///   counting as a pass) accept the node for the pod. Call the pure
///   function the Filter calls; do not write the rule twice.
/// - **It is fast and pure.** It runs under the coordinator's one lock, for
///   every proposal (tens of thousands a second) and every alternative
///   tried: no I/O, no blocking, no lock, no allocation for a pod the
///   plugin does not concern (return `Ok` after one look at the pod). A
///   check that counts pods across the cluster reads [`BindView::kept`]
///   (counts kept current across proposals) rather than walking every
///   node each time.
/// - **Its reason is the Filter's.** The `Err` text is the reason the
///   Filter gives (upstream's text for an upstream plugin), e.g.
///   `node(s) had untolerated taint(s)`; several reasons are joined by
///   `", "` as `Status::message` does. The worker sees
///   `node <name>: <reason>` as the conflict reason.
pub trait BindCheck: Plugin {
    /// Whether `pod` may be bound to `node`, with the arbiter's view of the
    /// whole cluster in `view` (`node` is in `view.nodes`, except when the
    /// arbiter checks a copy with nominated pods added or victims removed:
    /// then only [`BindCheck::node_local`] checks run, and they must read
    /// `node`, not `view`).
    ///
    /// # Errors
    /// The Filter's reason for rejecting the node.
    fn check_bind(&self, pod: &PodInfo, node: &NodeInfo, view: &mut BindView<'_>) -> BindResult;

    /// Whether the check reads only `pod` and `node` (resources, ports,
    /// taints, labels), not the rest of the view. Those are also run on the
    /// node with its nominated pods added (the room they hold) and in
    /// preemption proposals. The default, `true`, is right for any check
    /// that ignores `view`; a check that reads `view` (counts across nodes)
    /// returns `false`.
    fn node_local(&self) -> bool {
        true
    }
}

impl std::fmt::Debug for dyn BindCheck {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.name())
    }
}

/// What the arbiter knows when it runs a [`BindCheck`]: every node with the
/// pods placed on it (bound, or granted and being bound), the
/// Namespaces' labels, and counts kept across proposals. Built by the
/// coordinator for each check run; plugins only read it (and let
/// [`KeptCounts`] index what they count).
#[derive(Debug)]
#[non_exhaustive]
pub struct BindView<'a> {
    /// Every node the arbiter knows, by name, with its placed pods.
    pub nodes: &'a HashMap<Arc<str>, NodeInfo>,
    /// Namespace name → `metadata.labels` (for `namespaceSelector`).
    pub namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
    /// How many placed pods have a required pod anti-affinity term: 0 lets
    /// a pod without terms of its own skip InterPodAffinity's cluster-wide
    /// look (no existing pod can refuse it).
    pub anti_affinity_pods: usize,
    /// Spread and affinity counts over `nodes`, kept current by the
    /// coordinator as pods are placed and removed.
    pub kept: &'a mut KeptCounts,
    /// The volume objects (claims, PVs, StorageClasses, CSINodes,
    /// VolumeAttachments) the volume checks read; empty unless given
    /// ([`BindView::with_volumes`]).
    pub volumes: &'a VolumeState,
    /// Set by VolumeBinding's check when it passes a pod whose claims are
    /// to be bound or provisioned on the node: what the coordinator's
    /// Reserve assumes and its PreBind writes
    /// ([`crate::volumes::binding::VolumePlan`]).
    pub volume_plan: Option<VolumePlan>,
}

impl<'a> BindView<'a> {
    /// A view over `nodes` and `namespaces`, with `anti_affinity_pods` placed
    /// pods carrying required anti-affinity and `kept` counting over
    /// `nodes`.
    #[must_use]
    pub fn new(
        nodes: &'a HashMap<Arc<str>, NodeInfo>,
        namespaces: &'a BTreeMap<String, BTreeMap<String, String>>,
        anti_affinity_pods: usize,
        kept: &'a mut KeptCounts,
    ) -> Self {
        BindView {
            nodes,
            namespaces,
            anti_affinity_pods,
            kept,
            volumes: &EMPTY_VOLUMES,
            volume_plan: None,
        }
    }

    /// The view with `volumes` as its volume objects.
    #[must_use]
    pub fn with_volumes(mut self, volumes: &'a VolumeState) -> Self {
        self.volumes = volumes;
        self
    }

    /// Which pods use each claim across `nodes` ([`ClaimUsers`]), counted
    /// on first use and kept current by [`KeptCounts`] from then on.
    pub fn claim_users(&mut self) -> &ClaimUsers {
        let nodes = self.nodes;
        self.kept
            .claims
            .get_or_insert_with(|| ClaimUsers::count_nodes(nodes.values()))
    }
}

/// The volume state of a view given none.
static EMPTY_VOLUMES: std::sync::LazyLock<VolumeState> =
    std::sync::LazyLock::new(VolumeState::default);

/// Counts the arbiter keeps over its view so a check costs O(domains)
/// instead of a pass over every pod: hard topology spread constraints per
/// domain ([`SpreadCounts`]), required inter-pod (anti-)affinity per
/// topology pair ([`AffinityCounts`]) and the users of each claim
/// ([`ClaimUsers`]). Entries are made on first use by a
/// full count. Its owner feeds it every placement and removal, and
/// invalidates it when a node comes, goes or is relabelled.
#[derive(Debug, Default)]
pub struct KeptCounts {
    /// Hard topology spread counts.
    pub spread: SpreadCounts,
    /// Required inter-pod (anti-)affinity counts.
    pub affinity: AffinityCounts,
    /// Which pods use each claim (VolumeRestrictions' `ReadWriteOncePod`
    /// check); `None` until first used ([`BindView::claim_users`]).
    pub claims: Option<ClaimUsers>,
}

impl KeptCounts {
    /// `pod` was just placed on `node`.
    pub fn pod_placed(&mut self, pod: &PodInfo, node: &NodeInfo) {
        self.spread.pod_placed(pod, node);
        self.affinity.pod_placed(pod, node);
        if let Some(c) = &mut self.claims {
            c.add_pod(pod);
        }
    }

    /// `pod` was just removed from `node`.
    pub fn pod_removed(&mut self, pod: &PodInfo, node: &NodeInfo) {
        self.spread.pod_removed(pod, node);
        self.affinity.pod_removed(pod, node);
        if let Some(c) = &mut self.claims {
            c.remove_pod(pod);
        }
    }

    /// Forgets every count (a node added or removed, or relabelled).
    pub fn invalidate(&mut self) {
        self.spread.invalidate();
        self.affinity.invalidate();
        self.claims = None;
    }
}

/// One scheduling profile as the coordinator serves it: which pods are its
/// (`spec.schedulerName`), where they are dispatched, and what the arbiter
/// re-checks for them. Built by the scheduler crate from the configuration
/// and the plugin registry (`SchedulerConfig::served_profiles`), so the
/// arbiter runs exactly the Filters the profile's workers run.
#[derive(Debug, Clone)]
pub struct ServedProfile {
    /// `spec.schedulerName` of the profile's pods.
    pub scheduler_name: String,
    /// The profile's `workloadClass`: every pod of the profile goes to that
    /// worker pool; `None`: each pod's own class (label, owner, QoS).
    pub workload_class: Option<WorkloadClass>,
    /// The bind checks of the profile's enabled Filter plugins, in Filter
    /// order.
    pub bind_checks: Vec<Arc<dyn BindCheck>>,
    /// Enabled Filter plugins that provide no bind check (not re-checked
    /// at bind time), in Filter order.
    pub unchecked_filters: Vec<String>,
    /// The profile's configuration fingerprint (the scheduler crate's
    /// `Profile::fingerprint`): with [`profiles_fingerprint`], what a worker
    /// must present to register, so that workers decide with the profiles
    /// the arbiter checks.
    pub fingerprint: u64,
}

/// One fingerprint for a set of profiles, each `(schedulerName, its
/// fingerprint)`, in any order: what a worker sends when it registers and
/// the coordinator compares with its own (0 is never returned, so it can
/// mean "not given").
#[must_use]
pub fn profiles_fingerprint<'a>(profiles: impl IntoIterator<Item = (&'a str, u64)>) -> u64 {
    let mut sorted: Vec<(&str, u64)> = profiles.into_iter().collect();
    sorted.sort_unstable();
    let h = sorted
        .iter()
        .fold(crate::stable_hash::fnv1a(b"profiles"), |h, (name, fp)| {
            let h = crate::stable_hash::fnv1a_extend(h, name.as_bytes());
            crate::stable_hash::fnv1a_extend(h, &fp.to_le_bytes())
        });
    h.max(1)
}
