//! One scheduling attempt for one pod, as a value: upstream's
//! `schedulingCycle` split from what acts on it.
//!
//! [`Cycle::schedule_one`] runs, for one pod and the cache as it stands:
//! 1. the profile's cycle ([`Framework::run`]: PreFilter, Filter, PreScore,
//!    Score, select; ties broken by the attempt's [`CycleRng`]);
//! 2. the profile's placement webhook, if it has one, choosing among the
//!    feasible nodes ([`crate::webhook`]);
//! 3. for a pod that fits nowhere, the PostFilter plugins in the profile's
//!    order until one succeeds, as upstream's `RunPostFilterPlugins`:
//!    DefaultPreemption (a candidate node and its victims; the dry run
//!    starts at an offset drawn from the [`CycleRng`]) and Coscheduling
//!    (the gang's waiting members released when it cannot reach
//!    `minMember` any more);
//! 4. for a placed pod, **assume** in the cache and Permit (Coscheduling:
//!    wait for the gang, or bind it whole).
//!
//! It returns a [`Decision`]; the caller applies it. Two drivers do:
//! the worker ([`crate::worker`]: proposes Bindings, preemptions and gangs
//! to the coordinator, re-queues, reports) and `simulate` / `explain`
//! ([`crate::simulate`]: binds in its simulated cluster, evicts victims and
//! retries the preemptor at once). Neither composes the steps above itself,
//! so the two decide alike: with the same seed, the same objects and the
//! same order of attempts, the same placements and victims.
//!
//! The cycle touches shared state only where upstream's does: the cache
//! (assume, forget of released gang members, the end of a nomination when
//! preemption finds no candidate) and the gang book (Permit's waiting
//! members). Everything else (queue, coordinator, reports, metrics of the
//! attempt) is the driver's.

pub mod rng;

use std::collections::{BTreeSet, HashMap};
use std::sync::Arc;
use std::time::Instant;

use flotilla_shared::extender::EXTENDER_NAME;
use flotilla_shared::framework::{Code, ExtensionPoint, FitError};
use flotilla_shared::pdb::PdbInfo;
use flotilla_shared::{PodInfo, WorkloadClass};

use crate::cache::{NodeCache, Snapshot};
use crate::framework::{
    Candidates, CycleDetail, Framework, ProfileMap, ScheduleError, ScheduleResult,
};
use crate::gang::{self, GangBook, PermitOutcome, Placement};
use crate::plugins::names;
use crate::preemption::{self, Candidate, PostFilterOutcome};
use crate::webhook::{Ask, Resolution, Shard, Webhook};
use flotilla_shared::gang::{GangApi, is_workload_key};

pub use rng::CycleRng;

/// What one attempt decided for its pod. Every variant but
/// [`Decision::Bind`], [`Decision::Wait`] and [`Decision::BindGang`] leaves
/// the pod unassumed.
#[derive(Debug)]
pub enum Decision {
    /// The pod is assumed on `node`: its binding cycle proposes it there,
    /// offering the arbiter the result's alternatives.
    Bind(ScheduleResult),
    /// A gang member assumed on its node, waiting at Permit until its
    /// PodGroup has `minMember` members placed.
    Wait(ScheduleResult),
    /// This pod completed its gang: every member (this one last) is
    /// assumed on its node, and they bind together, all or none.
    BindGang {
        /// This pod's placement.
        result: ScheduleResult,
        /// The PodGroup.
        group: String,
        /// Every member with its node.
        members: Vec<Placement>,
    },
    /// The pod fits nowhere (or Permit rejected it): it waits for a cluster
    /// event that may help (see [`Unschedulable::plugins`]).
    Unschedulable(Box<Unschedulable>),
    /// The placement webhook left the pod pending: it declined (a decision:
    /// the pod waits for a cluster event, as one that fits nowhere does) or
    /// failed with `fallback: Pending` (the pod backs off, as after any
    /// error).
    Pending {
        /// The service's reason, or the failure.
        message: String,
        /// The service declined (not a failure).
        declined: bool,
    },
    /// The attempt failed: a plugin or extender error, preemption failing,
    /// or the cache refusing the assume (the node went away). The pod backs
    /// off.
    Error {
        /// What went wrong.
        message: String,
        /// What belongs on the pod (its `FailedScheduling` event and
        /// condition): the operator's to see for extender and preemption
        /// failures, as upstream records them; `None` for the scheduler's
        /// own hiccups.
        report: Option<String>,
    },
    /// No profile serves the pod's `spec.schedulerName`.
    NoProfile(String),
}

/// An unschedulable pod's verdict: upstream's FitError with what the
/// PostFilter plugins added, and what they decided.
#[derive(Debug)]
pub struct Unschedulable {
    /// The message for the pod: the FitError (`0/N nodes are available:
    /// ...`, then the PostFilter messages), or Permit's rejection.
    pub message: String,
    /// The FitError (`None` when Permit rejected a pod that fit).
    pub fit: Option<Box<FitError>>,
    /// The plugins that rejected it: the cluster events they registered
    /// for move it back to the active queue.
    pub plugins: BTreeSet<&'static str>,
    /// DefaultPreemption's choice: evicting `victims` on `node` makes room,
    /// and the pod is nominated there.
    pub nominate: Option<Candidate>,
    /// Preemption found no candidate: the pod's nomination, if it had one,
    /// ends (upstream clears `status.nominatedNodeName`); the cycle already
    /// dropped it from the cache.
    pub clear_nomination: bool,
    /// Gang members released at Permit because this one failed (forgotten
    /// in the cache by the cycle), with Coscheduling's message: they go back
    /// to the queue.
    pub released: Vec<Placement>,
    /// Coscheduling's PostFilter message, when it released the gang.
    pub gang_message: Option<String>,
    /// The pod's `scheduling.k8s.io` gang is rejected as a unit (upstream's
    /// pod group cycle): `released` and the members not tried yet wait with
    /// this pod, with its message.
    pub gang_rejected: bool,
    /// Rejected at PreEnqueue (GangScheduling: the group is missing or
    /// short of `minCount`): the pod waits for its group; upstream writes no
    /// status or Event for it, and neither does the worker.
    pub pre_enqueue: bool,
}

/// Who chose the node of a pod whose profile has a placement webhook.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DecidedBy {
    /// The service chose it.
    Webhook,
    /// The service failed; the in-process choice stood (`fallback:
    /// InProcess`).
    Fallback,
    /// The service left the pod pending (declined, or failed with
    /// `fallback: Pending`).
    Pending,
}

impl DecidedBy {
    /// `webhook`, `fallback` or `pending`.
    #[must_use]
    pub fn as_str(self) -> &'static str {
        match self {
            DecidedBy::Webhook => "webhook",
            DecidedBy::Fallback => "fallback",
            DecidedBy::Pending => "pending",
        }
    }
}

/// What a placement webhook did for a pod the in-process cycle could place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookVerdict {
    /// Where the in-process cycle would have placed it.
    pub in_process: Arc<str>,
    /// Who decided.
    pub decided_by: DecidedBy,
    /// The service's reason, or the failure.
    pub message: String,
}

/// One attempt: its decision, and what the cycle saw for those who show
/// it (`simulate`, `explain`, the worker's span).
#[derive(Debug)]
pub struct Attempt {
    /// The decision.
    pub decision: Decision,
    /// Every node's Filter status and every plugin's score, when the
    /// [`Cycle`] asked for detail.
    pub detail: Option<CycleDetail>,
    /// The placement webhook's part, for profiles that have one and pods
    /// the in-process cycle placed.
    pub webhook: Option<WebhookVerdict>,
    /// Nodes in the snapshot the attempt ran on.
    pub num_all_nodes: usize,
}

/// A gang whose members waited at Permit past their timeout
/// ([`Cycle::expire_gangs`]).
#[derive(Debug)]
pub struct ExpiredGang {
    /// The PodGroup.
    pub group: String,
    /// Upstream's message for each member (`rejected due to timeout after
    /// waiting 1m0s at plugin Coscheduling`).
    pub message: String,
    /// The members, forgotten in the cache.
    pub members: Vec<Placement>,
}

/// Everything an attempt runs with, borrowed from its driver.
#[derive(Clone, Copy)]
pub struct Cycle<'a> {
    /// The profiles, by `schedulerName`.
    pub profiles: &'a ProfileMap,
    /// Placement webhooks by profile name.
    pub webhooks: &'a HashMap<String, Arc<Webhook>>,
    /// Who asks the webhooks: the worker's name.
    pub worker: &'a str,
    /// The worker's pool, sent to webhooks; `None` sends each pod's own
    /// workload class (`simulate`).
    pub pool: Option<WorkloadClass>,
    /// The node cache: read through the snapshot, assumed into.
    pub cache: &'a NodeCache,
    /// PodGroups and the members waiting at Permit.
    pub gangs: &'a GangBook,
    /// The cluster's PodDisruptionBudgets, for preemption.
    pub pdbs: &'a [PdbInfo],
    /// Seed of every attempt's [`CycleRng`]; `None`: from the OS.
    pub seed: Option<u64>,
    /// Record each node's Filter status and score ([`Attempt::detail`]).
    pub detail: bool,
}

impl std::fmt::Debug for Cycle<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Cycle")
            .field("worker", &self.worker)
            .field("seed", &self.seed)
            .field("detail", &self.detail)
            .finish_non_exhaustive()
    }
}

/// What an attempt ran with once its profile was found.
struct Profiled<'c> {
    framework: &'c Framework,
    webhook: Option<&'c Arc<Webhook>>,
}

impl Cycle<'_> {
    /// The profile's batched placement webhook of `pod`, if it has one
    /// (its pods go through [`Cycle::schedule_batch`]).
    #[must_use]
    pub fn batched_webhook(&self, pod: &PodInfo) -> Option<&Arc<Webhook>> {
        self.webhooks
            .get(&*pod.scheduler_name)
            .filter(|w| w.config().is_batched())
    }

    /// One attempt for `pod`, its `attempt`-th (0 for the first; the
    /// [`CycleRng`] depends on it): `snapshot` is refreshed from the cache
    /// first, then the steps of the module docs run.
    pub fn schedule_one(
        &self,
        snapshot: &mut Snapshot,
        pod: &Arc<PodInfo>,
        attempt: u32,
        now: Instant,
    ) -> Attempt {
        self.cache.update_snapshot(snapshot);
        let num_all_nodes = snapshot.len();
        let Some(p) = self.profile(pod) else {
            return self.no_profile(pod, num_all_nodes);
        };
        if let Some(decision) = self.pre_enqueue(p.framework, pod) {
            return Attempt {
                decision,
                detail: None,
                webhook: None,
                num_all_nodes,
            };
        }
        let mut rng = CycleRng::for_attempt(self.seed, &pod.uid, attempt);
        let mut detail = self.detail.then(CycleDetail::default);
        let mut candidates = p.webhook.map(|_| Candidates::new());
        let result = p.framework.run(
            pod,
            snapshot,
            &mut rng,
            detail.as_mut(),
            candidates.as_mut(),
        );
        let mut verdict = None;
        let result = match (result, p.webhook, candidates) {
            (Ok(r), Some(hook), Some(candidates)) => {
                let snap = &*snapshot;
                let node_of = |n: &str| snap.get(n).map(|i| i.spec.node());
                let ask = Ask {
                    pod,
                    candidates: &candidates,
                    in_process: &r.node,
                    node_of: &node_of,
                };
                let answer = hook.decide_one(&self.shard(p.framework, pod), &ask);
                let feasible = |n: &str| {
                    candidates
                        .iter()
                        .find(|(c, _)| &**c == n)
                        .map(|(c, _)| c.clone())
                };
                let resolution = hook.resolve(answer, feasible, &r.node);
                let (result, v) = Self::apply_resolution(resolution, r);
                verdict = Some(v);
                match result {
                    Ok(r) => Ok(r),
                    Err(pending) => {
                        return Attempt {
                            decision: pending,
                            detail,
                            webhook: verdict,
                            num_all_nodes,
                        };
                    }
                }
            }
            (result, ..) => result,
        };
        let decision = self.conclude(p.framework, snapshot, pod, result, &mut rng, now);
        Attempt {
            decision,
            detail,
            webhook: verdict,
            num_all_nodes,
        }
    }

    /// One batched webhook round for `pods` (one profile's, each with its
    /// attempt number): every pod's in-process cycle over the same
    /// snapshot, one call to the service for those that fit somewhere, then
    /// each answer applied in order, its node re-checked (PreFilter and
    /// Filter) with the batch's earlier pods assumed; a pod the service
    /// failed is decided again in-process (the first choice was made before
    /// the earlier pods were placed). Attempts come back in `pods`' order.
    pub fn schedule_batch(
        &self,
        snapshot: &mut Snapshot,
        pods: &[(Arc<PodInfo>, u32)],
        now: Instant,
    ) -> Vec<Attempt> {
        self.cache.update_snapshot(snapshot);
        let num_all_nodes = snapshot.len();
        let attempt = |decision, webhook| Attempt {
            decision,
            detail: None,
            webhook,
            num_all_nodes,
        };
        let Some((first, _)) = pods.first() else {
            return Vec::new();
        };
        let p = match self.profile(first) {
            Some(p) if p.webhook.is_some() => p,
            _ => {
                return pods
                    .iter()
                    .map(|(pod, n)| self.schedule_one(snapshot, pod, *n, now))
                    .collect();
            }
        };
        let (fw, hook) = (p.framework, p.webhook.expect("checked"));
        let mut out: Vec<Option<Attempt>> = pods.iter().map(|_| None).collect();
        // (index, its in-process result, its candidates, its random source)
        let mut placed = Vec::new();
        for (i, (pod, n)) in pods.iter().enumerate() {
            if let Some(d) = self.pre_enqueue(fw, pod) {
                out[i] = Some(attempt(d, None));
                continue;
            }
            let mut rng = CycleRng::for_attempt(self.seed, &pod.uid, *n);
            let mut candidates = Candidates::new();
            match fw.run(pod, snapshot, &mut rng, None, Some(&mut candidates)) {
                Ok(r) => placed.push((i, r, candidates, rng)),
                Err(e) => {
                    let d = self.conclude(fw, snapshot, pod, Err(e), &mut rng, now);
                    out[i] = Some(attempt(d, None));
                }
            }
        }
        if !placed.is_empty() {
            let answers = {
                let snap = &*snapshot;
                let node_of = |n: &str| snap.get(n).map(|i| i.spec.node());
                let asks: Vec<Ask<'_>> = placed
                    .iter()
                    .map(|(i, r, candidates, _)| Ask {
                        pod: &pods[*i].0,
                        candidates,
                        in_process: &r.node,
                        node_of: &node_of,
                    })
                    .collect();
                hook.decide_batch(&self.shard(fw, first), &asks)
            };
            for (k, (i, r, candidates, mut rng)) in placed.into_iter().enumerate() {
                let pod = &pods[i].0;
                // Earlier pods of this batch are assumed now.
                self.cache.update_snapshot(snapshot);
                let answer = answers.as_ref().map(|d| d[k].clone()).map_err(Clone::clone);
                let snap = &*snapshot;
                let feasible = |n: &str| {
                    let (name, _) = candidates.iter().find(|(c, _)| &**c == n)?;
                    let node = snap.get(n)?;
                    fw.dry_run_filters(pod, snap, node)
                        .is_success()
                        .then(|| name.clone())
                };
                let resolution = hook.resolve(answer, feasible, &r.node);
                let (result, verdict) = Self::apply_resolution(resolution, r);
                let result = match (result, verdict.decided_by) {
                    (Ok(r), DecidedBy::Webhook) => Ok(r),
                    (Ok(_), _) => fw.run(pod, snapshot, &mut rng, None, None),
                    (Err(pending), _) => {
                        out[i] = Some(attempt(pending, Some(verdict)));
                        continue;
                    }
                };
                let d = self.conclude(fw, snapshot, pod, result, &mut rng, now);
                out[i] = Some(attempt(d, Some(verdict)));
            }
        }
        out.into_iter()
            .map(|a| a.expect("every pod of the batch was decided"))
            .collect()
    }

    /// Releases the gangs whose members waited at Permit past their
    /// timeout at `now`: their members are forgotten in the cache (their
    /// room is free again); the caller re-queues or reports them.
    pub fn expire_gangs(&self, now: Instant) -> Vec<ExpiredGang> {
        self.gangs
            .take_expired(now)
            .into_iter()
            .map(|(group, waited, members)| {
                for (pod, _) in &members {
                    self.cache.forget(&pod.uid);
                }
                let plugin = if is_workload_key(&group) {
                    names::GANG_SCHEDULING
                } else {
                    names::COSCHEDULING
                };
                ExpiredGang {
                    message: format!(
                        "rejected due to timeout after waiting {} at plugin {plugin}",
                        gang::go_duration(waited),
                    ),
                    group,
                    members,
                }
            })
            .collect()
    }

    /// GangScheduling's PreEnqueue, when the profile enables it: a member
    /// of a `scheduling.k8s.io` group that may not be scheduled yet is
    /// `UnschedulableAndUnresolvable` with upstream's message, and waits for
    /// the plugin's events ([`crate::gang::GangBook::pre_enqueue`]).
    fn pre_enqueue(&self, fw: &Framework, pod: &PodInfo) -> Option<Decision> {
        pod.pod_group_name.as_ref()?;
        if !fw
            .enabled_at(ExtensionPoint::PreEnqueue)
            .contains(&names::GANG_SCHEDULING)
        {
            return None;
        }
        let message = self.gangs.pre_enqueue(pod).err()?;
        Some(Decision::Unschedulable(Box::new(Unschedulable {
            message,
            fit: None,
            plugins: BTreeSet::from([names::GANG_SCHEDULING]),
            nominate: None,
            clear_nomination: false,
            released: Vec::new(),
            gang_message: None,
            gang_rejected: false,
            pre_enqueue: true,
        })))
    }

    /// The plugin holding `pod` at Permit, when it is a gang member and its
    /// profile enables that plugin there (`Coscheduling` for the
    /// scheduler-plugins API, `GangScheduling` for `scheduling.k8s.io`).
    fn gang_plugin(fw: &Framework, pod: &PodInfo) -> Option<&'static str> {
        let plugin = match GangBook::permit_plugin(pod)? {
            GangApi::Coscheduling => names::COSCHEDULING,
            GangApi::GangScheduling => names::GANG_SCHEDULING,
        };
        fw.enabled_at(ExtensionPoint::Permit)
            .contains(&plugin)
            .then_some(plugin)
    }

    fn profile(&self, pod: &PodInfo) -> Option<Profiled<'_>> {
        let framework = self.profiles.for_pod(pod)?;
        Some(Profiled {
            framework,
            webhook: self.webhooks.get(framework.profile_name()),
        })
    }

    fn no_profile(&self, pod: &PodInfo, num_all_nodes: usize) -> Attempt {
        Attempt {
            decision: Decision::NoProfile(format!(
                "no profile for schedulerName {:?} in this worker's configuration",
                pod.scheduler_name
            )),
            detail: None,
            webhook: None,
            num_all_nodes,
        }
    }

    fn shard(&self, framework: &Framework, pod: &PodInfo) -> Shard {
        Shard {
            worker: self.worker.to_owned(),
            workload_class: self.pool.unwrap_or(pod.class).to_string(),
            profile: framework.profile_name().to_owned(),
        }
    }

    /// The webhook's resolution of an in-process result `r`: the placement
    /// (the service decides: no alternatives for the arbiter to grant
    /// instead), or the [`Decision::Pending`] that leaves the pod pending;
    /// and the verdict.
    fn apply_resolution(
        resolution: Resolution,
        r: ScheduleResult,
    ) -> (Result<ScheduleResult, Decision>, WebhookVerdict) {
        let in_process = r.node.clone();
        match resolution {
            Resolution::Place {
                node,
                by_webhook,
                reason,
            } => (
                Ok(ScheduleResult {
                    node,
                    alternatives: Vec::new(),
                    ..r
                }),
                WebhookVerdict {
                    in_process,
                    decided_by: if by_webhook {
                        DecidedBy::Webhook
                    } else {
                        DecidedBy::Fallback
                    },
                    message: reason,
                },
            ),
            Resolution::Pending { message, declined } => (
                Err(Decision::Pending {
                    message: message.clone(),
                    declined,
                }),
                WebhookVerdict {
                    in_process,
                    decided_by: DecidedBy::Pending,
                    message,
                },
            ),
        }
    }

    /// The rest of an attempt once its cycle's result is known: assume and
    /// Permit for a placed pod, the PostFilter plugins for one that fits
    /// nowhere, the error otherwise.
    fn conclude(
        &self,
        fw: &Framework,
        snapshot: &Snapshot,
        pod: &Arc<PodInfo>,
        result: Result<ScheduleResult, ScheduleError>,
        rng: &mut CycleRng,
        now: Instant,
    ) -> Decision {
        match result {
            Ok(mut r) => {
                let pod = fw.reserve_gpus(pod, snapshot.get(&r.node).map(|n| &**n));
                r.gpu_devices = pod.gpu.as_deref().and_then(|g| g.devices);
                self.assume_and_permit(fw, &pod, r, now)
            }
            Err(ScheduleError::Unschedulable(fit)) => {
                self.post_filter(fw, snapshot, pod, fit, rng, now)
            }
            Err(e @ ScheduleError::Internal { .. }) => {
                // An extender's failure is the operator's to see on the pod
                // (upstream records it as a FailedScheduling event).
                let report = match &e {
                    ScheduleError::Internal {
                        plugin: EXTENDER_NAME,
                        message,
                    } => Some(message.clone()),
                    _ => None,
                };
                Decision::Error {
                    message: e.to_string(),
                    report,
                }
            }
        }
    }

    /// Assume, then Permit (Coscheduling, where the profile enables it).
    fn assume_and_permit(
        &self,
        fw: &Framework,
        pod: &Arc<PodInfo>,
        r: ScheduleResult,
        now: Instant,
    ) -> Decision {
        if let Err(e) = self.cache.assume(pod.clone(), &r.node) {
            return Decision::Error {
                message: format!("assume: {e}"),
                report: None,
            };
        }
        let Some(plugin) = Self::gang_plugin(fw, pod) else {
            return Decision::Bind(r);
        };
        match self.gangs.permit(pod, &r.node, now) {
            PermitOutcome::NotGang => Decision::Bind(r),
            PermitOutcome::Wait => Decision::Wait(r),
            PermitOutcome::Ready(group, members) => Decision::BindGang {
                result: r,
                group,
                members,
            },
            PermitOutcome::Reject(message) => {
                self.cache.forget(&pod.uid);
                Decision::Unschedulable(Box::new(Unschedulable {
                    message,
                    fit: None,
                    plugins: BTreeSet::from([plugin]),
                    nominate: None,
                    clear_nomination: false,
                    released: Vec::new(),
                    gang_message: None,
                    gang_rejected: false,
                    pre_enqueue: false,
                }))
            }
        }
    }

    /// The PostFilter plugins in the profile's order, until one succeeds
    /// (upstream `RunPostFilterPlugins`); their messages join the FitError.
    fn post_filter(
        &self,
        fw: &Framework,
        snapshot: &Snapshot,
        pod: &Arc<PodInfo>,
        mut fit: Box<FitError>,
        rng: &mut CycleRng,
        now: Instant,
    ) -> Decision {
        let mut nominate = None;
        let mut clear_nomination = false;
        let mut released = Vec::new();
        let mut gang_message = None;
        for name in fw.enabled_at(ExtensionPoint::PostFilter) {
            match *name {
                names::DEFAULT_PREEMPTION => {
                    let Some(args) = fw.preemption() else {
                        continue;
                    };
                    let started = Instant::now();
                    // Upstream starts the dry run at a random candidate.
                    let offset = rng.below(snapshot.len().max(1));
                    let outcome =
                        preemption::preempt(fw, pod, snapshot, &fit, self.pdbs, args, offset);
                    let code = match &outcome {
                        Ok(PostFilterOutcome::Nominate(_)) => Code::Success,
                        Err(_) => Code::Error,
                        Ok(_) => Code::Unschedulable,
                    };
                    fw.metrics()
                        .point(ExtensionPoint::PostFilter, code, started.elapsed());
                    match outcome {
                        // A PostFilter error fails the attempt (upstream).
                        Err(e) => {
                            return Decision::Error {
                                message: e.to_string(),
                                report: Some(e.to_string()),
                            };
                        }
                        Ok(PostFilterOutcome::Nominate(c)) => {
                            nominate = Some(c);
                            break;
                        }
                        Ok(PostFilterOutcome::NotHelpful(msg)) => {
                            fit.diagnosis.post_filter_msg = Some(msg);
                        }
                        Ok(PostFilterOutcome::NoCandidate(msg)) => {
                            fit.diagnosis.post_filter_msg = Some(msg);
                            // Upstream's PostFilter clears the nominated
                            // node then: the room it held is free at once.
                            clear_nomination = true;
                            self.cache.clear_nominated(&pod.uid);
                        }
                    }
                }
                names::COSCHEDULING => {
                    let (members, msg) = self.gangs.post_filter(pod, now);
                    for (m, _) in &members {
                        self.cache.forget(&m.uid);
                    }
                    released = members;
                    gang_message = msg;
                }
                _ => {}
            }
        }
        // Upstream 1.37 rejects a PodGroup as a unit when a member fits
        // nowhere (while the gang is short of minCount): the members
        // waiting at Permit go back to the queue with it.
        let rejected = if Self::gang_plugin(fw, pod) == Some(names::GANG_SCHEDULING) {
            self.gangs.reject_workload_gang(pod)
        } else {
            None
        };
        let gang_rejected = rejected.is_some();
        if let Some(members) = rejected {
            for (m, _) in &members {
                self.cache.forget(&m.uid);
            }
            released = members;
        }
        let mut message = fit.to_string();
        if let Some(m) = &gang_message {
            // Upstream appends the PostFilter messages to the FitError,
            // joined with ", ".
            let sep = if fit.diagnosis.post_filter_msg.is_some() {
                ", "
            } else {
                " "
            };
            message = format!("{message}{sep}{m}");
        }
        Decision::Unschedulable(Box::new(Unschedulable {
            message,
            plugins: fit.diagnosis.unschedulable_plugins.clone(),
            fit: Some(fit),
            nominate,
            clear_nomination,
            released,
            gang_message,
            gang_rejected,
            pre_enqueue: false,
        }))
    }
}
