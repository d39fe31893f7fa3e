//! `simulate` and `explain`: what the scheduler would do with a cluster's
//! pending pods, in-process, without gRPC or a cluster.
//!
//! Each attempt is the workers' own: [`crate::cycle::Cycle::schedule_one`]
//! (the profile's plugins, the placement webhook, PostFilter, assume and
//! Permit) over a [`NodeCache`] built from the input. This module only
//! applies the decisions to its simulated cluster, as the worker applies
//! them through the coordinator.
//!
//! The input is a [`ClusterObjects`] from any source (a file, or a live
//! cluster's lists read-only, both loaded by `flotilla_loadtest::workload`),
//! and the profiles to run (`&[Profile]`, one [`Framework`] each, selected
//! by the pods' `spec.schedulerName`).
//!
//! # The simulated cluster
//! - Every Node goes into a [`NodeCache`]; every pod with `spec.nodeName` is
//!   placed on its node as bound (terminal pods hold nothing, as upstream).
//! - Namespaces feed `namespaceSelector`s. Every namespace carries
//!   `kubernetes.io/metadata.name: <name>` (the apiserver sets it on every
//!   namespace); a namespace that pods use but the input does not list is
//!   known with that label alone.
//! - `spec.priority` is resolved from PriorityClasses as admission does
//!   ([`flotilla_shared::priority`]); a pod naming a class that does not
//!   exist gets an [`Outcome::Error`] result instead of a place in the queue.
//! - PodDisruptionBudgets feed preemption's victim choice; PodGroups feed
//!   gang scheduling (profiles that enable `Coscheduling`).
//!
//! # The queue
//! Pending pods (no `spec.nodeName`, not `Succeeded`/`Failed`, not being
//! deleted, no `spec.schedulingGates`) whose `schedulerName` has a profile
//! are scheduled one at a time in queue order, upstream `PrioritySort`:
//! priority descending, then arrival, which is the order in the input. Each
//! placement is applied (the pod bound to its node) before the next cycle,
//! so later pods see the room earlier ones took. A pod that fits nowhere
//! stays unschedulable, unless a preemption later evicts pods: as the
//! victims' deletion moves upstream's unschedulable pods back to the active
//! queue, the pods found unschedulable so far (gang members aside) are
//! tried again right after it, in queue order, and their result is the
//! retry's. The preemptor's own nominated attempt comes first, as in a
//! cluster whose victims go at once (grace period 0, the simulation's
//! model); with a grace period, a pod waiting out its backoff may take the
//! freed room before the preemptor does. Other pending pods are [`SkippedPod`]s with the reason.
//!
//! # Preemption
//! A pod that fits nowhere in a profile with `DefaultPreemption` gets
//! upstream's PostFilter: when evicting lower-priority pods somewhere makes
//! room ([`crate::preemption::preempt`], PodDisruptionBudgets
//! respected), the victims are evicted from the simulated cluster at once
//! (no grace period), and the pod's next attempt runs right away,
//! nominated (its nominated node first, as upstream's next attempt would);
//! the result carries `nominated_node` and `victims`, and the final status
//! and node. When preemption cannot help, the FitError message ends with
//! upstream's `preemption: ...` text.
//!
//! # Gangs
//! Pods of a PodGroup (label `scheduling.x-k8s.io/pod-group`) in a profile
//! that enables `Coscheduling` wait, assumed, until `minMember` of the group
//! are placed (upstream Permit), then all bind. A group that never gets
//! there (too few pods, a member that fits nowhere, or the end of the queue)
//! releases its room and every member is `Unschedulable` with upstream's
//! message: all or nothing.
//!
//! # Randomness, and a worker's decisions
//! Ties between equally scored nodes, and where preemption's search
//! starts, are drawn at random as upstream does, so runs over clusters with
//! ties can differ; [`Options::seed`] fixes them. A seeded attempt draws
//! the same numbers in a worker given the same seed
//! ([`crate::cycle::CycleRng`]), so a one-worker `flotilla run` over the
//! same objects makes the same decisions as long as its attempts see the
//! same cluster: a worker's preemptor retries only once its victims are
//! gone (other pods may be placed meanwhile), and with more than 100 nodes
//! where each search starts depends on the cycles before it
//! (`percentageOfNodesToScore`).
//!
//! # Explain
//! [`explain`] runs one attempt for one pod against the cluster as the
//! input shows it: bound pods only, no other pending pod placed first;
//! nothing is evicted, and a gang member shows where it would wait at
//! Permit.

pub mod output;
pub mod replay;

pub use replay::Replay;

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::Pod;

use flotilla_shared::extender::ExtenderConfig;
use flotilla_shared::framework::{Code, Status};
use flotilla_shared::gpu::DeviceSet;
use flotilla_shared::node_info::NodeError;
use flotilla_shared::objects::{ClusterObjects, DEFAULT_NAMESPACE};
use flotilla_shared::pdb::PdbInfo;
use flotilla_shared::pod_info::PodError;
use flotilla_shared::priority::PriorityClasses;
use flotilla_shared::volumes::VolumeState;
use flotilla_shared::volumes::binding;
use flotilla_shared::{NodeSpec, PodInfo, PodKey};

use crate::cache::{NodeCache, Snapshot};
use crate::cycle::{Attempt, Cycle, Decision, WebhookVerdict};
use crate::extender::Extenders;
use crate::framework::registry::coscheduling_factory;
use crate::framework::{CycleDetail, ProfileMap, RegistryError};
use crate::gang::GangBook;
use crate::plugins::names;
use crate::webhook::Webhook;
use crate::{Framework, Profile, Registry};
use flotilla_shared::gang::{self, GangObject};

/// Namespace label the apiserver sets on every namespace to its name.
pub const LABEL_METADATA_NAME: &str = "kubernetes.io/metadata.name";

/// Why a simulation could not run. None is retryable: each names bad input
/// (the object and field) or a bad request.
#[derive(Debug, thiserror::Error)]
pub enum SimulateError {
    /// A Node cannot be read (names the node and the field).
    #[error(transparent)]
    Node(#[from] NodeError),
    /// A Pod cannot be read (names the pod and the field).
    #[error(transparent)]
    Pod(#[from] PodError),
    /// A profile does not make a valid framework.
    #[error(transparent)]
    Profile(#[from] RegistryError),
    /// An extender's or placement webhook's client could not be built.
    #[error("{what}: {source}")]
    Http {
        /// Which one.
        what: String,
        /// Cause.
        #[source]
        source: flotilla_shared::http::HttpError,
    },
    /// Two profiles share a `schedulerName`.
    #[error("profiles: schedulerName {0:?} is used by more than one profile")]
    DuplicateProfile(String),
    /// `explain` was asked about something that is not `NAMESPACE/NAME`.
    #[error("{0:?} is not a pod name: give NAMESPACE/NAME (or NAME for namespace default)")]
    BadPodName(String),
    /// `explain` was asked about a pod the input does not hold.
    #[error("pod {pod} is not in {source_name}")]
    UnknownPod {
        /// `namespace/name` asked for.
        pod: String,
        /// The input's name.
        source_name: String,
    },
    /// `explain` was asked about a pod whose `schedulerName` no profile serves.
    #[error(
        "pod {pod}: spec.schedulerName {scheduler:?} has no profile (profiles: {profiles}); \
         no scheduler simulated here would place it"
    )]
    NoProfile {
        /// The pod.
        pod: String,
        /// Its `spec.schedulerName`.
        scheduler: String,
        /// The profiles' scheduler names, comma-separated.
        profiles: String,
    },
}

/// How one pod's cycle ended.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Outcome {
    /// Placed on `node`.
    Scheduled {
        /// The chosen node.
        node: String,
    },
    /// Fits on no node; `message` is upstream's FitError text
    /// (`0/N nodes are available: ...`).
    Unschedulable {
        /// The FitError message.
        message: String,
    },
    /// The pod could not be scheduled for another reason: its
    /// PriorityClass does not exist (admission would refuse it), or a
    /// plugin returned `Error`.
    Error {
        /// What went wrong.
        message: String,
    },
}

impl Outcome {
    /// `Scheduled`, `Unschedulable` or `Error`.
    #[must_use]
    pub fn status(&self) -> &'static str {
        match self {
            Outcome::Scheduled { .. } => "Scheduled",
            Outcome::Unschedulable { .. } => "Unschedulable",
            Outcome::Error { .. } => "Error",
        }
    }

    /// The chosen node, if scheduled.
    #[must_use]
    pub fn node(&self) -> Option<&str> {
        match self {
            Outcome::Scheduled { node } => Some(node),
            _ => None,
        }
    }

    /// The FitError or error text; empty when scheduled.
    #[must_use]
    pub fn message(&self) -> &str {
        match self {
            Outcome::Scheduled { .. } => "",
            Outcome::Unschedulable { message } | Outcome::Error { message } => message,
        }
    }
}

/// How the cycle saw one node.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeResult {
    /// Filter result: `Success` for a feasible node, else the status of the
    /// first plugin that rejected it (PreFilter included) with its reasons
    /// in order.
    pub filter: Status,
    /// Each Score plugin's normalized score (0..=100) before weighting, in
    /// run order; `None` for rejected nodes.
    pub scores: Option<Vec<(&'static str, i64)>>,
    /// Each extender's scaled score (`score × weight × 10`) by its
    /// `urlPrefix`; empty when no extender scored the node.
    pub extender_scores: Vec<(String, i64)>,
    /// Weighted sum of [`NodeResult::scores`] and the extender scores;
    /// `None` for rejected nodes.
    pub total_score: Option<i64>,
}

/// What a profile's placement webhook did for a pod the in-process
/// pipeline could place.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookResult {
    /// Where the in-process pipeline would have placed it.
    pub in_process_choice: String,
    /// `webhook` (the service chose the node), `fallback` (it failed: the
    /// in-process choice was used) or `pending` (it declined, or failed with
    /// `fallback: Pending`).
    pub decided_by: &'static str,
    /// The service's reason, or the failure.
    pub message: String,
}

/// One pod's result.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PodResult {
    /// The pod.
    pub pod: PodKey,
    /// Its resolved priority (`None` when it could not be resolved).
    pub priority: Option<i32>,
    /// The profile (`schedulerName`) that ran it.
    pub profile: String,
    /// How it ended.
    pub outcome: Outcome,
    /// Every node the cycle evaluated, by name. Nodes the search never
    /// reached (upstream's `percentageOfNodesToScore`) are absent.
    pub nodes: BTreeMap<String, NodeResult>,
    /// Nodes in the cluster when the cycle ran.
    pub num_all_nodes: usize,
    /// The profile's Score plugins and weights, in run order.
    pub score_weights: Vec<(&'static str, i64)>,
    /// The node DefaultPreemption nominated for the pod (it fit nowhere, and
    /// evicting [`PodResult::victims`] there made room); `None` when it did
    /// not preempt.
    pub nominated_node: Option<String>,
    /// The pods evicted for it, `namespace/name`, most important first.
    pub victims: Vec<String>,
    /// The placement webhook's part, for profiles that have one.
    pub webhook: Option<WebhookResult>,
}

/// A pending pod the simulation did not schedule, and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SkippedPod {
    /// The pod.
    pub pod: PodKey,
    /// Why, e.g. `spec.schedulerName "other" has no profile`.
    pub reason: String,
}

/// The outcome of [`simulate`].
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Simulation {
    /// One result per scheduled-or-attempted pod: queue order first, then
    /// pods that never entered the queue (unknown PriorityClass) in input
    /// order.
    pub results: Vec<PodResult>,
    /// Pending pods not simulated (no profile for their `schedulerName`,
    /// scheduling gates, terminal, being deleted), in input order.
    pub skipped: Vec<SkippedPod>,
    /// Remarks about the input (e.g. a pod bound to a node the input does
    /// not list), for stderr.
    pub notes: Vec<String>,
}

/// The outcome of [`explain`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Explanation {
    /// The pod's cycle.
    pub result: PodResult,
    /// Remarks (e.g. the pod is scheduling-gated, or already bound and was
    /// evaluated without its own placement).
    pub notes: Vec<String>,
    /// Bound pods that hold room in the evaluated cluster.
    pub bound_pods: usize,
}

/// How [`simulate_with`] and [`explain_with`] run besides the objects and
/// profiles.
#[derive(Debug, Clone, Copy, Default)]
pub struct Options<'a> {
    /// The configuration's `extenders`: their filter, prioritize and
    /// preempt verbs are called over HTTP, as the workers would; calls
    /// block until answered or timed out; failures are handled as in the
    /// workers (ignorable extenders skipped).
    pub extenders: &'a [ExtenderConfig],
    /// Seed of the cycles' random choices (ties between equally scored
    /// nodes, where preemption's search starts;
    /// [`crate::cycle::CycleRng`]); `None`: from the OS, as upstream, so
    /// runs over clusters with ties can differ.
    pub seed: Option<u64>,
}

/// Simulates every pending pod of `objects` with `profiles` (plugins from
/// `registry`), one at a time in queue order, each placement applied before
/// the next (see the module docs).
///
/// # Errors
/// A Node or Pod that cannot be read (named with the field), or a profile
/// that does not make a valid framework. A pod whose PriorityClass does not
/// exist is not an error: it gets an [`Outcome::Error`] result.
pub fn simulate(
    objects: &ClusterObjects,
    profiles: &[Profile],
    registry: &Registry,
) -> Result<Simulation, SimulateError> {
    simulate_with(objects, profiles, registry, &Options::default())
}

/// [`simulate`] with [`Options`]: extenders, and the seed. Each profile's
/// placement webhook is called too.
///
/// # Errors
/// As [`simulate`], and an extender or webhook whose TLS settings cannot be
/// used.
pub fn simulate_with(
    objects: &ClusterObjects,
    profiles: &[Profile],
    registry: &Registry,
    opts: &Options<'_>,
) -> Result<Simulation, SimulateError> {
    let mut sim = Simulation::default();
    let cluster = Cluster::build(objects, None, &mut sim.notes)?;
    let scheduler = Scheduler::new(objects, profiles, registry, opts, &mut sim.notes)?;
    let classes = PriorityClasses::new(&objects.priority_classes);

    // (priority, input order, pod), then pods whose class is unknown.
    let mut queue: Vec<(i32, usize, PodInfo)> = Vec::new();
    let mut refused: Vec<PodResult> = Vec::new();
    for (order, pod) in objects.pods.iter().enumerate() {
        if is_bound(pod) {
            continue;
        }
        let key = key_of(pod);
        if let Some(reason) = not_schedulable_reason(pod) {
            sim.skipped.push(SkippedPod { pod: key, reason });
            continue;
        }
        let scheduler_name = scheduler_name(pod);
        let Some(fw) = scheduler.profiles.get(scheduler_name) else {
            sim.skipped.push(SkippedPod {
                pod: key,
                reason: format!("spec.schedulerName {scheduler_name:?} has no profile"),
            });
            continue;
        };
        let mut admitted = pod.clone();
        match classes.admit(&mut admitted) {
            Ok(priority) => {
                let info = PodInfo::from_pod(Arc::new(admitted))?;
                if let Some(message) = gang::gang_of(&info).and_then(|g| scheduler.held.get(&g)) {
                    let mut r = PodResult::refused(key, fw, cluster.node_count, String::new());
                    r.priority = Some(priority);
                    r.outcome = Outcome::Unschedulable {
                        message: message.clone(),
                    };
                    refused.push(r);
                    continue;
                }
                queue.push((priority, order, info));
            }
            Err(e) => {
                // Still read the pod, so bad fields are reported as such.
                PodInfo::from_pod(Arc::new(admitted))?;
                refused.push(PodResult::refused(
                    key,
                    fw,
                    cluster.node_count,
                    e.to_string(),
                ));
            }
        }
    }
    // PrioritySort: higher priority first; equal priority keeps input order.
    queue.sort_by_key(|(priority, order, _)| (std::cmp::Reverse(*priority), *order));

    // The simulation's clock does not advance: gang timeouts happen only
    // at the end of the queue.
    let now = Instant::now();
    let cycle = scheduler.cycle(&cluster.cache);
    let mut snapshot = Snapshot::default();
    // Result index of each gang member waiting at Permit, by uid.
    let mut waiting: HashMap<Arc<str>, usize> = HashMap::new();
    // (queue position, pod, attempts so far, result index when retried).
    let mut active: VecDeque<(usize, Arc<PodInfo>, u32, Option<usize>)> = queue
        .into_iter()
        .enumerate()
        .map(|(at, (_, _, pod))| (at, Arc::new(pod), 0, None))
        .collect();
    // Pods found unschedulable (not gang members), as `active` holds them:
    // an eviction frees room, and moves them back (upstream: the victims'
    // deletion, an AssignedPodDeleted event, moves the pods it may help
    // back to the active queue).
    let mut unschedulable: Vec<(usize, Arc<PodInfo>, u32, usize)> = Vec::new();
    while let Some((at, pod, attempts, retried)) = active.pop_front() {
        let fw = scheduler
            .profiles
            .for_pod(&pod)
            .expect("queued pods have a profile");
        let mut attempt = cycle.schedule_one(&mut snapshot, &pod, attempts, now);
        let mut tries = attempts + 1;
        let mut result = PodResult::of(&pod, fw, &attempt);
        let mut evicted = false;
        if let Decision::Unschedulable(u) = &attempt.decision
            && let Some(c) = &u.nominate
        {
            // Preemption: the victims go, and the pod's next attempt runs
            // at once, nominated (its node is tried first).
            for v in &c.victims {
                cluster.cache.remove_pod(&v.uid);
            }
            evicted = !c.victims.is_empty();
            let mut nominated = (*pod).clone();
            nominated.nominated_node_name = Some(c.node.clone());
            let victims = c.victims.iter().map(|v| v.key.to_string()).collect();
            let node = c.node.to_string();
            attempt = cycle.schedule_one(&mut snapshot, &Arc::new(nominated), tries, now);
            tries += 1;
            result = PodResult {
                nominated_node: Some(node),
                victims,
                ..PodResult::of(&pod, fw, &attempt)
            };
        }
        let index = retried.unwrap_or(sim.results.len());
        match attempt.decision {
            Decision::Bind(r) => {
                cluster.cache.forget(&pod.uid);
                reserve_volumes(&cluster.cache, &pod, &r.node);
                cluster
                    .cache
                    .add_bound_pod(Arc::new(bind(&pod, &r.node, r.gpu_devices)?));
            }
            Decision::Wait(_) => {
                waiting.insert(pod.uid.clone(), index);
            }
            Decision::BindGang { members, .. } => {
                for (m, n) in members {
                    waiting.remove(&m.uid);
                    cluster.cache.forget(&m.uid);
                    reserve_volumes(&cluster.cache, &m, &n);
                    cluster.cache.add_bound_pod(Arc::new(bind(
                        &m,
                        &n,
                        m.gpu.as_deref().and_then(|g| g.devices),
                    )?));
                    scheduler.gangs.pod_bound(&m);
                }
            }
            Decision::Unschedulable(u) => {
                // A member that fits nowhere may doom its waiting siblings
                // (the cycle forgot them).
                if let Some(m) = u.gang_message.as_ref().or_else(|| {
                    // A `scheduling.k8s.io` gang is rejected as a unit:
                    // its waiting members get the failing member's reason.
                    u.gang_rejected.then_some(&u.message)
                }) {
                    for (sibling, _) in &u.released {
                        if let Some(i) = waiting.remove(&sibling.uid) {
                            sim.results[i].outcome = Outcome::Unschedulable { message: m.clone() };
                        }
                    }
                }
                if crate::gang::group_of(&pod).is_none() {
                    unschedulable.push((at, pod.clone(), tries, index));
                }
            }
            Decision::Pending { .. } | Decision::Error { .. } | Decision::NoProfile(_) => {}
        }
        if retried.is_some() {
            // The retry's outcome replaces the earlier one; what the earlier
            // attempt's preemption did stays on record.
            let earlier = &mut sim.results[index];
            if result.victims.is_empty() {
                result.nominated_node = earlier.nominated_node.take();
                result.victims = std::mem::take(&mut earlier.victims);
            }
            *earlier = result;
        } else {
            sim.results.push(result);
        }
        if evicted {
            // Retried next, in queue order: they were ahead of every pod
            // still queued (PrioritySort).
            unschedulable.sort_by_key(|(at, ..)| std::cmp::Reverse(*at));
            for (at, p, tries, i) in unschedulable.drain(..) {
                active.push_front((at, p, tries, Some(i)));
            }
        }
    }
    // Gangs still short of minMember when the queue ran dry wait out their
    // timeout (`scheduleTimeoutSeconds` is an int32): every member is
    // released.
    let end = now
        .checked_add(Duration::from_secs(u64::from(u32::MAX)))
        .unwrap_or(now);
    for gang in cycle.expire_gangs(end) {
        for (m, _) in gang.members {
            if let Some(i) = waiting.remove(&m.uid) {
                sim.results[i].outcome = Outcome::Unschedulable {
                    message: gang.message.clone(),
                };
            }
        }
    }
    sim.results.extend(refused);
    Ok(sim)
}

/// Explains one pod (`NAMESPACE/NAME`, or `NAME` in `default`): one cycle
/// against the cluster as `objects` shows it (bound pods only; other
/// pending pods are not placed first). A pod that is already bound is
/// evaluated without its own placement; a scheduling-gated or terminal pod
/// is evaluated as if it were schedulable, with a note.
///
/// # Errors
/// A malformed name, a pod not in `objects`, a pod whose `schedulerName`
/// has no profile, or the errors of [`simulate`].
pub fn explain(
    objects: &ClusterObjects,
    profiles: &[Profile],
    registry: &Registry,
    pod: &str,
) -> Result<Explanation, SimulateError> {
    explain_with(objects, profiles, registry, &Options::default(), pod)
}

/// [`explain`] with [`Options`], calling the pod's profile's placement
/// webhook too, as [`simulate_with`] does.
///
/// # Errors
/// As [`explain`] and [`simulate_with`].
pub fn explain_with(
    objects: &ClusterObjects,
    profiles: &[Profile],
    registry: &Registry,
    opts: &Options<'_>,
    pod: &str,
) -> Result<Explanation, SimulateError> {
    let key = parse_pod_key(pod)?;
    let Some(target) = objects.pods.iter().find(|p| key_of(p) == key) else {
        return Err(SimulateError::UnknownPod {
            pod: key.to_string(),
            source_name: objects.name.clone(),
        });
    };
    let mut notes = Vec::new();
    let scheduler = Scheduler::new(objects, profiles, registry, opts, &mut notes)?;
    let scheduler_name = scheduler_name(target);
    let Some(fw) = scheduler.profiles.get(scheduler_name) else {
        return Err(SimulateError::NoProfile {
            pod: key.to_string(),
            scheduler: scheduler_name.to_owned(),
            profiles: profiles
                .iter()
                .map(|p| p.scheduler_name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    };
    let uid = target.metadata.uid.as_deref();
    let cluster = Cluster::build(objects, uid, &mut notes)?;
    if let Some(node) = target.spec.as_ref().and_then(|s| s.node_name.as_deref()) {
        notes.push(format!(
            "pod {key} is bound to node {node} in the input; shown is what the scheduler \
             would decide for it now, without its own placement"
        ));
    }
    if let Some(reason) = not_schedulable_reason(target) {
        notes.push(format!(
            "the scheduler would not try pod {key} now ({reason}); shown is what it would \
             decide if it did"
        ));
    }

    let classes = PriorityClasses::new(&objects.priority_classes);
    let mut admitted = target.clone();
    if let Some(spec) = admitted.spec.as_mut() {
        spec.node_name = None;
    }
    let admission = classes.admit(&mut admitted);
    let info = Arc::new(PodInfo::from_pod(Arc::new(admitted))?);
    let result = match admission {
        Ok(_) => {
            let mut snapshot = Snapshot::default();
            let attempt = scheduler.cycle(&cluster.cache).schedule_one(
                &mut snapshot,
                &info,
                0,
                Instant::now(),
            );
            let mut result = PodResult::of(&info, fw, &attempt);
            match &attempt.decision {
                // The attempt's PostFilter, as upstream reports it: the
                // node it would nominate and the pods it would evict
                // (nothing is evicted here).
                Decision::Unschedulable(u) => {
                    if let Some(c) = &u.nominate {
                        notes.push(format!(
                            "preemption would nominate node {} for pod {} and evict {}",
                            c.node,
                            info.key,
                            c.victims
                                .iter()
                                .map(|v| v.key.to_string())
                                .collect::<Vec<_>>()
                                .join(", ")
                        ));
                        result.nominated_node = Some(c.node.to_string());
                        result.victims = c.victims.iter().map(|v| v.key.to_string()).collect();
                    }
                }
                Decision::Wait(r) => notes.push(format!(
                    "pod {} would wait at Permit on node {} until its PodGroup has minMember \
                     pods placed",
                    info.key, r.node
                )),
                _ => {}
            }
            result
        }
        Err(e) => PodResult::refused(key, fw, cluster.node_count, e.to_string()),
    };
    Ok(Explanation {
        result,
        notes,
        bound_pods: cluster.bound_pods,
    })
}

/// The input's PodDisruptionBudgets, compiled; one that cannot be read is
/// left out with a note (preemption then sees its pods as unprotected).
fn compile_pdbs(objects: &ClusterObjects, notes: &mut Vec<String>) -> Vec<PdbInfo> {
    let mut pdbs = Vec::new();
    for pdb in &objects.pod_disruption_budgets {
        match PdbInfo::from_pdb(pdb) {
            Ok(p) => pdbs.push(p),
            Err(e) => notes.push(format!("{e}; preemption ignores this PodDisruptionBudget")),
        }
    }
    pdbs
}

/// The input's volume objects compiled for the volume Filters, as a
/// worker holds them; each object that cannot be read is noted (and kept
/// as its error: the pods using it are told, as on a live cluster).
fn volume_state(objects: &ClusterObjects, notes: &mut Vec<String>) -> VolumeState {
    let mut state = VolumeState::default();
    for v in &objects.volumes {
        if let Err(e) = v.apply_to(&mut state) {
            notes.push(format!("{e}; pods using it are unschedulable"));
        }
    }
    state
}

/// What simulated cycles run with besides the cluster: the profiles (one
/// gang book behind every profile's Coscheduling), their webhooks, the
/// PodDisruptionBudgets, the seed.
struct Scheduler {
    profiles: ProfileMap,
    webhooks: HashMap<String, Arc<Webhook>>,
    /// `scheduling.k8s.io` groups whose members are held, with the reason
    /// ([`gang::admission`]).
    held: HashMap<String, String>,
    gangs: Arc<GangBook>,
    pdbs: Vec<PdbInfo>,
    seed: Option<u64>,
}

impl Scheduler {
    /// Builds the profiles and webhooks, and loads the input's PodGroups
    /// and their members (bound, and pending: a gated pod still counts as
    /// a member, as upstream lists the group's pods by label) into the
    /// gang book.
    fn new(
        objects: &ClusterObjects,
        profiles: &[Profile],
        registry: &Registry,
        opts: &Options<'_>,
        notes: &mut Vec<String>,
    ) -> Result<Self, SimulateError> {
        let gangs = Arc::new(GangBook::new());
        let mut registry = registry.clone();
        registry.replace(names::COSCHEDULING, coscheduling_factory(gangs.clone()));
        let mut seen = HashSet::new();
        for p in profiles {
            if !seen.insert(p.scheduler_name.as_str()) {
                return Err(SimulateError::DuplicateProfile(p.scheduler_name.clone()));
            }
        }
        let extenders = Extenders::new(opts.extenders)
            .map(Arc::new)
            .map_err(|source| SimulateError::Http {
                what: "extenders".into(),
                source,
            })?;
        let map = ProfileMap::with_extenders(profiles, &registry, &extenders)?;
        let mut webhooks = HashMap::new();
        for p in profiles {
            if let Some(w) = &p.webhook {
                let hook = Webhook::new(w.clone()).map_err(|source| SimulateError::Http {
                    what: format!("profile {:?}: placementWebhook", p.scheduler_name),
                    source,
                })?;
                webhooks.insert(p.scheduler_name.clone(), Arc::new(hook));
            }
        }
        for g in &objects.pod_groups {
            gangs.apply_group(g);
        }
        for g in &objects.workload_pod_groups {
            gangs.apply(&GangObject::Workload(Arc::new(g.clone())));
        }
        // Scheduler names of each `scheduling.k8s.io` group's pods.
        let mut scheduler_names: HashMap<String, Vec<Arc<str>>> = HashMap::new();
        for pod in &objects.pods {
            // Terminal and deleting pods are neither members nor read (a
            // bad field in one does not stop the simulation).
            let bound = is_bound(pod);
            if !bound && not_schedulable_reason(pod).is_some() && !is_gated(pod) {
                continue;
            }
            let info = PodInfo::from_pod(Arc::new(pod.clone()))?;
            if bound {
                gangs.pod_bound(&info);
            } else {
                gangs.pod_pending(&info);
            }
            if !info.terminal
                && let Some(g) = gang::gang_of(&info).filter(|g| gang::is_workload_key(g))
            {
                scheduler_names
                    .entry(g)
                    .or_default()
                    .push(info.scheduler_name.clone());
            }
        }
        // The coordinator's admission of each group: members of a group
        // that may not be scheduled (no PodGroup, an invalid one, pods of
        // different schedulers) are held with the reason.
        let held = scheduler_names
            .into_iter()
            .filter_map(|(key, names)| {
                let name = key.rsplit('/').next().unwrap_or_default().to_owned();
                let group = gangs.group(&key);
                gang::admission(&name, group.as_deref(), names.iter().map(|n| &**n))
                    .err()
                    .map(|m| (key, m))
            })
            .collect();
        Ok(Scheduler {
            profiles: map,
            webhooks,
            held,
            gangs,
            pdbs: compile_pdbs(objects, notes),
            seed: opts.seed,
        })
    }

    /// The cycle over `cache`, with every node's detail recorded.
    fn cycle<'a>(&'a self, cache: &'a NodeCache) -> Cycle<'a> {
        Cycle {
            profiles: &self.profiles,
            webhooks: &self.webhooks,
            worker: "simulate",
            pool: None,
            cache,
            gangs: &self.gangs,
            pdbs: &self.pdbs,
            seed: self.seed,
            detail: true,
        }
    }
}

/// The cache built from the input.
struct Cluster {
    cache: NodeCache,
    node_count: usize,
    /// Non-terminal bound pods placed.
    bound_pods: usize,
}

impl Cluster {
    /// Nodes, namespaces and bound pods (except the pod with uid `exclude`).
    fn build(
        objects: &ClusterObjects,
        exclude: Option<&str>,
        notes: &mut Vec<String>,
    ) -> Result<Self, SimulateError> {
        let cache = NodeCache::default();
        let mut node_names: HashSet<&str> = HashSet::new();
        for node in &objects.nodes {
            let spec = NodeSpec::from_node(Arc::new(node.clone()))?;
            cache.upsert_node(spec);
            node_names.extend(node.metadata.name.as_deref());
        }

        let mut listed: HashSet<&str> = HashSet::new();
        for ns in &objects.namespaces {
            let Some(name) = ns.metadata.name.as_deref() else {
                continue;
            };
            let mut labels = ns.metadata.labels.clone().unwrap_or_default();
            labels
                .entry(LABEL_METADATA_NAME.to_owned())
                .or_insert_with(|| name.to_owned());
            cache.upsert_namespace(name, labels);
            listed.insert(name);
        }
        for pod in &objects.pods {
            let ns = pod
                .metadata
                .namespace
                .as_deref()
                .unwrap_or(DEFAULT_NAMESPACE);
            if listed.insert(ns) {
                let labels = BTreeMap::from([(LABEL_METADATA_NAME.to_owned(), ns.to_owned())]);
                cache.upsert_namespace(ns, labels);
            }
        }

        let mut bound_pods = 0;
        // Bound pods went through admission too: a dump of a live cluster
        // carries their `spec.priority`, a hand-written file may only name
        // the class. Preemption compares these priorities.
        let classes = PriorityClasses::new(&objects.priority_classes);
        for pod in objects.pods.iter().filter(|p| is_bound(p)) {
            if exclude.is_some() && pod.metadata.uid.as_deref() == exclude {
                continue;
            }
            let mut admitted = pod.clone();
            if let Err(e) = classes.admit(&mut admitted) {
                notes.push(format!(
                    "bound pod {}: {e}; it counts with priority 0",
                    key_of(pod)
                ));
            }
            let info = PodInfo::from_pod(Arc::new(admitted))?;
            if info.terminal {
                continue;
            }
            if let Some(node) = info.node_name.as_deref()
                && !node_names.contains(node)
            {
                notes.push(format!(
                    "pod {} is bound to node {node}, which the input does not list",
                    info.key
                ));
            }
            cache.add_bound_pod(Arc::new(info));
            bound_pods += 1;
        }
        cache.set_volume_state(Arc::new(volume_state(objects, notes)));
        Ok(Cluster {
            cache,
            node_count: objects.nodes.len(),
            bound_pods,
        })
    }
}

/// VolumeBinding's Reserve for a pod placed on `node`, as the coordinator
/// makes it ([`binding::plan`]): the static PVs it takes are shown bound to
/// its claims and its provisioned claims name the node, so the next pods
/// do not take the same PVs. Then, as a cluster's controllers would, the
/// next snapshot sees them so (the objects themselves are not rewritten).
fn reserve_volumes(cache: &NodeCache, pod: &PodInfo, node: &Arc<str>) {
    if pod.volumes.is_none() {
        return;
    }
    let Some(labels) = cache.node(node).map(|n| n.spec.labels.clone()) else {
        return;
    };
    let state = cache.volume_state();
    if let Ok(Some(plan)) = binding::plan(pod, node, &labels, &state, Duration::ZERO) {
        let mut next = (*state).clone();
        plan.assume(&mut next);
        cache.set_volume_state(Arc::new(next));
    }
}

impl PodResult {
    /// The result of `attempt` for `pod` in profile `fw`.
    fn of(pod: &PodInfo, fw: &Framework, attempt: &Attempt) -> Self {
        let outcome = match &attempt.decision {
            Decision::Bind(r) | Decision::Wait(r) | Decision::BindGang { result: r, .. } => {
                Outcome::Scheduled {
                    node: r.node.to_string(),
                }
            }
            Decision::Unschedulable(u) => Outcome::Unschedulable {
                message: u.message.clone(),
            },
            // A decline is the service's decision (the pod waits, as one
            // that fits nowhere); a failure is an error, as an extender's.
            Decision::Pending {
                message,
                declined: true,
            } => Outcome::Unschedulable {
                message: message.clone(),
            },
            Decision::Pending { message, .. }
            | Decision::Error { message, .. }
            | Decision::NoProfile(message) => Outcome::Error {
                message: message.clone(),
            },
        };
        PodResult {
            pod: pod.key.clone(),
            priority: Some(pod.priority),
            profile: fw.profile_name().to_owned(),
            outcome,
            nodes: attempt.detail.clone().map(node_results).unwrap_or_default(),
            num_all_nodes: attempt.num_all_nodes,
            score_weights: fw.score_weights(),
            nominated_node: None,
            victims: Vec::new(),
            webhook: attempt.webhook.as_ref().map(WebhookResult::from),
        }
    }

    /// The result of a pod admission refused (its PriorityClass does not
    /// exist): an error, no cycle.
    fn refused(pod: PodKey, fw: &Framework, num_all_nodes: usize, message: String) -> Self {
        PodResult {
            pod,
            priority: None,
            profile: fw.profile_name().to_owned(),
            outcome: Outcome::Error { message },
            nodes: BTreeMap::new(),
            num_all_nodes,
            score_weights: fw.score_weights(),
            nominated_node: None,
            victims: Vec::new(),
            webhook: None,
        }
    }
}

impl From<&WebhookVerdict> for WebhookResult {
    fn from(v: &WebhookVerdict) -> Self {
        WebhookResult {
            in_process_choice: v.in_process.to_string(),
            decided_by: v.decided_by.as_str(),
            message: v.message.clone(),
        }
    }
}

fn node_results(detail: CycleDetail) -> BTreeMap<String, NodeResult> {
    let mut nodes = BTreeMap::new();
    for (name, status) in detail.rejected {
        nodes.insert(
            name.to_string(),
            NodeResult {
                filter: status,
                scores: None,
                extender_scores: Vec::new(),
                total_score: None,
            },
        );
    }
    for scored in detail.scored {
        nodes.insert(
            scored.node.to_string(),
            NodeResult {
                filter: Status::success(),
                scores: Some(scored.plugin_scores),
                extender_scores: scored
                    .extender_scores
                    .iter()
                    .map(|(e, s)| (e.to_string(), *s))
                    .collect(),
                total_score: Some(scored.total),
            },
        );
    }
    nodes
}

/// `pod` bound to `node` (`spec.nodeName` set), as the cache takes it.
fn bind(pod: &PodInfo, node: &str, gpus: Option<DeviceSet>) -> Result<PodInfo, SimulateError> {
    let mut bound: Pod = (*pod.pod()).clone();
    if let Some(spec) = bound.spec.as_mut() {
        spec.node_name = Some(node.to_owned());
    }
    if let Some(d) = gpus {
        flotilla_shared::gpu::dialect::record_devices(&mut bound, d);
    }
    Ok(PodInfo::from_pod(Arc::new(bound))?)
}

/// Whether the pod has a `spec.nodeName`.
fn is_bound(pod: &Pod) -> bool {
    pod.spec
        .as_ref()
        .and_then(|s| s.node_name.as_deref())
        .is_some_and(|n| !n.is_empty())
}

/// Why upstream's scheduler would not try this pending pod, if it would not:
/// terminal phase (the scheduler's informer skips `Succeeded`/`Failed` pods),
/// being deleted (`skipPodSchedule`), or scheduling gates (the
/// `SchedulingGates` PreEnqueue plugin of the default profile).
fn not_schedulable_reason(pod: &Pod) -> Option<String> {
    if let Some(phase @ ("Succeeded" | "Failed")) =
        pod.status.as_ref().and_then(|s| s.phase.as_deref())
    {
        return Some(format!("status.phase is {phase}"));
    }
    if pod.metadata.deletion_timestamp.is_some() {
        return Some("metadata.deletionTimestamp is set (being deleted)".to_owned());
    }
    let gates: Vec<&str> = pod
        .spec
        .as_ref()
        .and_then(|s| s.scheduling_gates.as_ref())
        .into_iter()
        .flatten()
        .map(|g| g.name.as_str())
        .collect();
    if !gates.is_empty() {
        return Some(format!(
            "scheduling gated: spec.schedulingGates [{}]",
            gates.join(", ")
        ));
    }
    None
}

/// Whether the pod has `spec.schedulingGates` (and is otherwise pending).
fn is_gated(pod: &Pod) -> bool {
    pod.metadata.deletion_timestamp.is_none()
        && !matches!(
            pod.status.as_ref().and_then(|s| s.phase.as_deref()),
            Some("Succeeded" | "Failed")
        )
        && pod
            .spec
            .as_ref()
            .and_then(|s| s.scheduling_gates.as_ref())
            .is_some_and(|g| !g.is_empty())
}

/// `spec.schedulerName`, defaulting like upstream.
fn scheduler_name(pod: &Pod) -> &str {
    pod.spec
        .as_ref()
        .and_then(|s| s.scheduler_name.as_deref())
        .filter(|s| !s.is_empty())
        .unwrap_or(flotilla_shared::pod_info::DEFAULT_SCHEDULER_NAME)
}

/// `namespace/name` of a loaded pod.
fn key_of(pod: &Pod) -> PodKey {
    PodKey::new(
        pod.metadata
            .namespace
            .as_deref()
            .unwrap_or(DEFAULT_NAMESPACE),
        pod.metadata.name.as_deref().unwrap_or_default(),
    )
}

/// `NAMESPACE/NAME` or `NAME` (namespace `default`): the pod
/// [`explain`] takes.
///
/// # Errors
/// [`SimulateError::BadPodName`] for an empty part or more than one `/`.
pub fn parse_pod_key(s: &str) -> Result<PodKey, SimulateError> {
    let bad = || SimulateError::BadPodName(s.to_owned());
    match s.split_once('/') {
        None if !s.is_empty() => Ok(PodKey::new(DEFAULT_NAMESPACE, s)),
        Some((ns, name)) if !ns.is_empty() && !name.is_empty() && !name.contains('/') => {
            Ok(PodKey::new(ns, name))
        }
        _ => Err(bad()),
    }
}

/// Kubernetes-style code name of a status (`Success`, `Unschedulable`,
/// `UnschedulableAndUnresolvable`, `Error`, `Skip`).
#[must_use]
pub fn code_name(code: Code) -> &'static str {
    match code {
        Code::Success => "Success",
        Code::Error => "Error",
        Code::Unschedulable => "Unschedulable",
        Code::UnschedulableAndUnresolvable => "UnschedulableAndUnresolvable",
        Code::Skip => "Skip",
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::plugins::names;
    use flotilla_shared::framework::SharedLister as _;
    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::{Namespace, PodSchedulingGate};
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::{ObjectMeta, Time};

    fn objects(pods: Vec<Pod>) -> ClusterObjects {
        ClusterObjects {
            name: "test".into(),
            nodes: vec![
                NodeBuilder::new("n1")
                    .cpu("2")
                    .memory("4Gi")
                    .pods(110)
                    .build(),
            ],
            pods,
            ..ClusterObjects::default()
        }
    }

    fn fit_only() -> [Profile; 1] {
        [Profile::only(&[(names::NODE_RESOURCES_FIT, 1)])]
    }

    #[test]
    fn pods_the_scheduler_would_not_try_are_skipped_with_the_reason() {
        let gated = {
            let mut p = PodBuilder::new("gated").build();
            p.spec.as_mut().expect("spec").scheduling_gates = Some(vec![
                PodSchedulingGate {
                    name: "example.com/quota".into(),
                },
                PodSchedulingGate {
                    name: "example.com/review".into(),
                },
            ]);
            p
        };
        let deleting = {
            let mut p = PodBuilder::new("deleting").build();
            p.metadata.deletion_timestamp = Some(Time(Default::default()));
            p
        };
        let other = {
            let mut p = PodBuilder::new("other").build();
            p.spec.as_mut().expect("spec").scheduler_name = Some("volcano".into());
            p
        };
        let o = objects(vec![
            PodBuilder::new("done").phase("Succeeded").build(),
            PodBuilder::new("failed").phase("Failed").build(),
            deleting,
            gated,
            other,
            PodBuilder::new("ok").cpu("1").build(),
        ]);
        let sim = simulate(&o, &fit_only(), &Registry::in_tree()).expect("simulate");
        let skipped: Vec<String> = sim
            .skipped
            .iter()
            .map(|s| format!("{}: {}", s.pod, s.reason))
            .collect();
        assert_eq!(
            skipped,
            [
                "default/done: status.phase is Succeeded",
                "default/failed: status.phase is Failed",
                "default/deleting: metadata.deletionTimestamp is set (being deleted)",
                "default/gated: scheduling gated: spec.schedulingGates [example.com/quota, \
                 example.com/review]",
                "default/other: spec.schedulerName \"volcano\" has no profile",
            ]
        );
        assert_eq!(sim.results.len(), 1);
        assert_eq!(sim.results[0].outcome.node(), Some("n1"));

        // explain still evaluates a gated pod, and says why it waits.
        let e = explain(&o, &fit_only(), &Registry::in_tree(), "default/gated").expect("explain");
        assert_eq!(e.result.outcome.node(), Some("n1"));
        assert_eq!(e.notes.len(), 1);
        assert!(e.notes[0].contains("scheduling gated"), "{:?}", e.notes);
    }

    #[test]
    fn a_static_pv_taken_by_one_pod_is_not_given_to_the_next() {
        use flotilla_shared::testing::volumes::{PvBuilder, PvcBuilder, storage_class};
        use flotilla_shared::volumes::VolumeObject;
        let mut o = objects(vec![
            PodBuilder::new("a").pvc_volume("data", "ca").build(),
            PodBuilder::new("b").pvc_volume("data", "cb").build(),
        ]);
        let claim = |n: &str| {
            VolumeObject::Claim(Arc::new(
                PvcBuilder::new(n)
                    .class("local")
                    .storage("1Gi")
                    .access_mode("ReadWriteOnce")
                    .build(),
            ))
        };
        o.volumes = vec![
            VolumeObject::StorageClass(Arc::new(storage_class(
                "local",
                binding::NOT_SUPPORTED_PROVISIONER,
                Some("WaitForFirstConsumer"),
            ))),
            VolumeObject::Pv(Arc::new(
                PvBuilder::new("pv-1")
                    .class("local")
                    .capacity("10Gi")
                    .access_mode("ReadWriteOnce")
                    .available()
                    .build(),
            )),
            claim("ca"),
            claim("cb"),
        ];
        let sim = simulate(&o, &[Profile::default()], &Registry::in_tree()).expect("simulate");
        assert_eq!(sim.results[0].outcome.node(), Some("n1"));
        assert_eq!(
            sim.results[1].outcome,
            Outcome::Unschedulable {
                message: "0/1 nodes are available: 1 node(s) didn't find available persistent \
                          volumes to bind. preemption: 0/1 nodes are available: 1 Preemption is \
                          not helpful for scheduling."
                    .into()
            },
            "pv-1 went to a's claim"
        );
    }

    #[test]
    fn namespaces_carry_their_labels_and_the_metadata_name_label() {
        let mut o = objects(vec![
            PodBuilder::new("a").namespace("team-a").build(),
            PodBuilder::new("b").namespace("unlisted").build(),
        ]);
        o.namespaces.push(Namespace {
            metadata: ObjectMeta {
                name: Some("team-a".into()),
                labels: Some(BTreeMap::from([("team".into(), "a".into())])),
                ..ObjectMeta::default()
            },
            ..Namespace::default()
        });
        let mut notes = Vec::new();
        let cluster = Cluster::build(&o, None, &mut notes).expect("cluster");
        let mut snap = Snapshot::default();
        cluster.cache.update_snapshot(&mut snap);
        let label = |ns: &str| {
            snap.namespace_labels(ns).map(|l| {
                l.iter()
                    .map(|(k, v)| format!("{k}={v}"))
                    .collect::<Vec<_>>()
            })
        };
        assert_eq!(
            label("team-a"),
            Some(vec![
                "kubernetes.io/metadata.name=team-a".to_owned(),
                "team=a".to_owned()
            ])
        );
        assert_eq!(
            label("unlisted"),
            Some(vec!["kubernetes.io/metadata.name=unlisted".to_owned()])
        );
        assert_eq!(label("nobody"), None);
    }

    #[test]
    fn bound_pods_hold_room_and_missing_nodes_are_noted() {
        // n1 has 2 cpu; a bound 1.5-cpu pod leaves too little for 1 cpu.
        let o = objects(vec![
            PodBuilder::new("running")
                .cpu("1500m")
                .node_name("n1")
                .build(),
            PodBuilder::new("lost").cpu("1").node_name("gone").build(),
            PodBuilder::new("finished")
                .cpu("2")
                .node_name("n1")
                .phase("Succeeded")
                .build(),
            PodBuilder::new("new").cpu("1").build(),
        ]);
        let sim = simulate(&o, &fit_only(), &Registry::in_tree()).expect("simulate");
        assert_eq!(
            sim.notes,
            ["pod default/lost is bound to node gone, which the input does not list"]
        );
        assert_eq!(sim.results.len(), 1);
        assert_eq!(
            sim.results[0].outcome.message(),
            "0/1 nodes are available: 1 Insufficient cpu."
        );
    }

    #[test]
    fn bad_pods_and_profiles_are_errors_naming_them() {
        let o = objects(vec![PodBuilder::new("bad").cpu("-1").build()]);
        let err = simulate(&o, &fit_only(), &Registry::in_tree()).expect_err("negative cpu");
        assert!(
            err.to_string()
                .starts_with("pod default/bad: spec.containers[0]"),
            "{err}"
        );

        let o = objects(vec![]);
        let twice = [Profile::default(), Profile::default()];
        let err = simulate(&o, &twice, &Registry::in_tree()).expect_err("duplicate profile");
        assert_eq!(
            err.to_string(),
            "profiles: schedulerName \"default-scheduler\" is used by more than one profile"
        );
        let unknown = [Profile::only(&[("NoSuchPlugin", 1)])];
        let err = simulate(&o, &unknown, &Registry::in_tree()).expect_err("unknown plugin");
        assert_eq!(err.to_string(), "plugin \"NoSuchPlugin\" is not registered");
    }

    #[test]
    fn pod_names_parse_like_kubectl() {
        let cases = [
            ("ns/name", Some(("ns", "name"))),
            ("name", Some(("default", "name"))),
            ("", None),
            ("ns/", None),
            ("/name", None),
            ("a/b/c", None),
        ];
        for (input, want) in cases {
            let got = parse_pod_key(input).ok();
            assert_eq!(got, want.map(|(ns, n)| PodKey::new(ns, n)), "{input:?}");
        }
    }
}
