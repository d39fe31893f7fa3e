//! DefaultPreemption, the PostFilter that runs when a pod fits on no node:
//! which lower-priority pods to evict, and on which node, so the pod fits.
//!
//! Mirrors upstream's `pkg/scheduler/framework/preemption/preemption.go`
//! (`Evaluator.Preempt`, `findCandidates`, `DryRunPreemption`,
//! `pickOneNodeForPreemption`) and
//! `pkg/scheduler/framework/plugins/defaultpreemption/default_preemption.go`
//! (`PodEligibleToPreemptOthers`, `SelectVictimsOnNode`,
//! `calculateNumCandidates`, `filterPodsWithPDBViolation`). This module is
//! pure: it decides; evicting the victims and setting the pod's
//! `status.nominatedNodeName` are the caller's (worker / coordinator).
//!
//! [`preempt`] in order:
//! 1. **Eligibility.** `preemptionPolicy: Never` → not eligible. A pod whose
//!    nominated node still holds a lower-priority pod terminating because
//!    the scheduler preempted it (`deletionTimestamp` set and a
//!    `DisruptionTarget` condition with reason `PreemptionByScheduler`)
//!    waits for it, unless this cycle found the nominated node
//!    UnschedulableAndUnresolvable.
//! 2. **Potential nodes.** Only nodes whose filter status in the cycle's
//!    [`FitError`] was `Unschedulable`; `UnschedulableAndUnresolvable` ones
//!    (taints, node affinity, nodes cut by a PreFilterResult, a PreFilter
//!    rejection) are not tried.
//! 3. **Dry run.** From `offset` (random upstream; a parameter here so
//!    tests are deterministic), nodes are tried in turn
//!    ([`victims`]); the search stops once it holds
//!    [`DefaultPreemptionArgs::num_candidates`] candidates and at least one
//!    of them violates no PodDisruptionBudget. Each node check runs the
//!    framework's PreFilter plugins over a copy of the snapshot with that
//!    node changed, then its Filter plugins: pod affinity, topology spread
//!    and the rest are respected as in a real cycle. The snapshot is copied
//!    once per call; node entries are swapped in and restored.
//! 4. **Extenders** with a preempt verb see the candidates and may drop
//!    some or change their victims ([`crate::extender::Extenders::process_preemption`],
//!    upstream `callExtenders`); none left: `preemption: no candidate node
//!    for preemption`.
//! 5. **Pick** one candidate ([`pick::pick_one_node_for_preemption`]).

pub mod args;
pub mod pick;
pub mod victims;

use std::collections::HashMap;
use std::sync::Arc;

use flotilla_shared::framework::{Code, Diagnosis, FitError, Status};
use flotilla_shared::pdb::PdbInfo;
use flotilla_shared::{NodeInfo, PodInfo};

pub use args::DefaultPreemptionArgs;
/// The mark victims get before their delete (re-exported from `shared`).
pub use flotilla_shared::preemption::disruption_target_condition;
pub use pick::pick_one_node_for_preemption;
pub use victims::REASON_NO_VICTIMS;

use crate::cache::Snapshot;
use crate::framework::{Framework, ScheduleError};
use crate::plugins::names;

/// Prefix DefaultPreemption puts before each of its messages.
pub const MESSAGE_PREFIX: &str = "preemption: ";
/// Message for a pod with `spec.preemptionPolicy: Never`.
pub const NOT_ELIGIBLE_PREEMPTION_POLICY_NEVER: &str =
    "not eligible due to preemptionPolicy=Never.";
/// Message for a pod whose nominated node still holds a pod being evicted
/// by an earlier preemption.
pub const NOT_ELIGIBLE_TERMINATING_POD: &str =
    "not eligible due to a terminating pod on the nominated node.";
/// Message when the extenders dropped every candidate (upstream's
/// `SelectCandidate` found none).
pub const NO_CANDIDATE_AFTER_EXTENDERS: &str = "no candidate node for preemption";
/// Per-node reason for nodes preemption did not try (their filter status
/// was UnschedulableAndUnresolvable, or they had none).
pub const REASON_NOT_HELPFUL: &str = "Preemption is not helpful for scheduling";

/// A node where evicting `victims` lets the pod fit.
#[derive(Debug, Clone)]
pub struct Candidate {
    /// The node to nominate.
    pub node: Arc<str>,
    /// The pods to evict, most important first (higher priority, then
    /// earlier start).
    pub victims: Vec<Arc<PodInfo>>,
    /// How many victims' evictions violate a PodDisruptionBudget.
    pub pdb_violations: usize,
}

/// What DefaultPreemption decided for a pod that fits nowhere.
#[derive(Debug, Clone)]
pub enum PostFilterOutcome {
    /// Preemption would help: evict `victims` on `node`, nominate it.
    Nominate(Candidate),
    /// It would not, and the pod keeps its nomination, if any: it is not
    /// eligible (`preemption: not eligible ...`, e.g. its nominated node's
    /// victims are still terminating), the extenders dropped every
    /// candidate, or the cluster has no node. The status message, to put in
    /// `FitError.diagnosis.post_filter_msg`.
    NotHelpful(String),
    /// No node where evicting lower-priority pods would make room: the
    /// message (`preemption: 0/3 nodes are available: ...`), and the pod's
    /// nomination, if any, ends, as upstream's PostFilter returns an empty
    /// nominated node then and `status.nominatedNodeName` is cleared (the
    /// room it held is free for others).
    NoCandidate(String),
}

impl PostFilterOutcome {
    /// The message of an outcome that nominates nothing.
    #[must_use]
    pub fn message(&self) -> Option<&str> {
        match self {
            PostFilterOutcome::Nominate(_) => None,
            PostFilterOutcome::NotHelpful(m) | PostFilterOutcome::NoCandidate(m) => Some(m),
        }
    }
}

/// Runs DefaultPreemption for `pod`, which the cycle over `snap` found
/// unschedulable with `fit`. `pdbs` are the cluster's budgets (all
/// namespaces); `offset` is where the dry run starts among the potential
/// nodes (taken modulo their number; upstream draws it at random).
///
/// # Errors
/// [`ScheduleError::Internal`] (plugin `DefaultPreemption`) when no
/// candidate was found and some node check failed with an `Error` status
/// (upstream returns the aggregated errors). An empty snapshot is
/// [`PostFilterOutcome::NotHelpful`].
pub fn preempt(
    fw: &Framework,
    pod: &PodInfo,
    snap: &Snapshot,
    fit: &FitError,
    pdbs: &[PdbInfo],
    args: &DefaultPreemptionArgs,
    offset: usize,
) -> Result<PostFilterOutcome, ScheduleError> {
    let not_helpful = |msg: &str| {
        Ok(PostFilterOutcome::NotHelpful(format!(
            "{MESSAGE_PREFIX}{msg}"
        )))
    };
    let codes = StatusCodes::new(fit);
    if let Err(msg) = eligible_to_preempt_others(pod, snap, &codes) {
        return not_helpful(msg);
    }
    if snap.is_empty() {
        // Upstream never reaches PostFilter on an empty cluster (it stops
        // with ErrNoNodesAvailable); the pod waits, unschedulable, for a
        // node to be added rather than retrying as an error.
        return not_helpful("no nodes available");
    }
    let potential: Vec<&Arc<NodeInfo>> = snap
        .nodes()
        .iter()
        .filter(|n| codes.code(n.name()) == Code::Unschedulable)
        .collect();

    let mut non_violating: Vec<Candidate> = Vec::new();
    let mut violating: Vec<Candidate> = Vec::new();
    let mut statuses: Vec<(Arc<str>, Status)> = Vec::new();
    let mut errors: Vec<String> = Vec::new();
    if !potential.is_empty() {
        let wanted = args.num_candidates(potential.len());
        let mut scratch = snap.clone();
        for i in 0..potential.len() {
            let node = potential[(offset % potential.len() + i) % potential.len()];
            let name = node.spec.name.clone();
            match victims::select_victims_on_node(fw, pod, &mut scratch, node, pdbs) {
                Ok((victims, pdb_violations)) if !victims.is_empty() => {
                    let list = if pdb_violations == 0 {
                        &mut non_violating
                    } else {
                        &mut violating
                    };
                    if list.len() < wanted {
                        list.push(Candidate {
                            node: name,
                            victims,
                            pdb_violations,
                        });
                    }
                    if !non_violating.is_empty() && non_violating.len() + violating.len() >= wanted
                    {
                        break;
                    }
                }
                Ok(_) => {
                    let msg = format!("expected at least one victim pod on node {name:?}");
                    errors.push(msg.clone());
                    statuses.push((name, Status::error(msg)));
                }
                Err(st) => {
                    if st.code == Code::Error {
                        errors.push(st.message());
                    }
                    statuses.push((name, st));
                }
            }
        }
    }

    let mut candidates = non_violating;
    candidates.extend(violating);
    // Upstream `callExtenders`: extenders with a preempt verb may drop
    // candidates or change their victims before one is picked.
    if !candidates.is_empty()
        && let Some(ext) = fw.extenders()
    {
        candidates = ext.process_preemption(pod, snap, candidates)?;
        if candidates.is_empty() {
            return not_helpful(NO_CANDIDATE_AFTER_EXTENDERS);
        }
    }
    match pick_one_node_for_preemption(&candidates) {
        Some(i) => Ok(PostFilterOutcome::Nominate(candidates.swap_remove(i))),
        None if !errors.is_empty() => Err(internal(errors.join(", "))),
        None => {
            let none_found = FitError {
                pod: pod.key.clone(),
                num_all_nodes: snap.len(),
                diagnosis: Diagnosis {
                    node_to_status: statuses,
                    absent_nodes_status: Some(Status::unresolvable(REASON_NOT_HELPFUL)),
                    ..Diagnosis::default()
                },
            };
            Ok(PostFilterOutcome::NoCandidate(format!(
                "{MESSAGE_PREFIX}{none_found}"
            )))
        }
    }
}

fn internal(message: String) -> ScheduleError {
    ScheduleError::Internal {
        plugin: names::DEFAULT_PREEMPTION,
        message,
    }
}

/// Each node's filter status code in a [`FitError`], upstream's
/// `NodeToStatus.Get`: an explicit status, else the absent-nodes status,
/// else UnschedulableAndUnresolvable.
struct StatusCodes<'a> {
    explicit: HashMap<&'a str, Code>,
    absent: Code,
}

impl<'a> StatusCodes<'a> {
    fn new(fit: &'a FitError) -> Self {
        StatusCodes {
            explicit: fit
                .diagnosis
                .node_to_status
                .iter()
                .map(|(n, st)| (&**n, st.code))
                .collect(),
            absent: fit
                .diagnosis
                .absent_nodes_status
                .as_ref()
                .map_or(Code::UnschedulableAndUnresolvable, |st| st.code),
        }
    }

    fn code(&self, node: &str) -> Code {
        self.explicit.get(node).copied().unwrap_or(self.absent)
    }
}

/// Upstream `PodEligibleToPreemptOthers`.
fn eligible_to_preempt_others(
    pod: &PodInfo,
    snap: &Snapshot,
    codes: &StatusCodes<'_>,
) -> Result<(), &'static str> {
    if pod.preemption_policy_never {
        return Err(NOT_ELIGIBLE_PREEMPTION_POLICY_NEVER);
    }
    let Some(nominated) = pod.nominated_node_name.as_deref() else {
        return Ok(());
    };
    // A nominated node that cannot take the pod anyway: preempt elsewhere.
    if codes.code(nominated) == Code::UnschedulableAndUnresolvable {
        return Ok(());
    }
    let waiting = snap.get(nominated).is_some_and(|node| {
        node.pods
            .iter()
            .any(|p| p.priority < pod.priority && terminating_by_preemption(p))
    });
    if waiting {
        return Err(NOT_ELIGIBLE_TERMINATING_POD);
    }
    Ok(())
}

/// Upstream `podTerminatingByPreemption`: the pod is being deleted and its
/// (first) `DisruptionTarget` condition is `True` with reason
/// `PreemptionByScheduler`.
fn terminating_by_preemption(p: &PodInfo) -> bool {
    p.terminating && flotilla_shared::preemption::marked_by_preemption(&p.pod())
}
