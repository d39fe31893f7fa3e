//! The coordinator's authoritative view and its jobs: fan the cluster out
//! to workers, dispatch pending pods by workload class, arbitrate bind
//! proposals, and arbitrate preemption (nominations and victims).
//!
//! # Priority and preemption
//! - A pod without `spec.priority` (no admission ran: the embedded cluster,
//!   a dump) gets it from its PriorityClass as upstream's `Priority`
//!   admission would ([`flotilla_shared::priority`]); workers receive the
//!   resolved object. A pod naming a class that does not exist is not
//!   dispatched: it gets a `FailedScheduling` Event and `PodScheduled=False`
//!   with `spec.priorityClassName: no PriorityClass with name X was found`,
//!   and is tried again whenever PriorityClasses change.
//! - [`Coordinator::propose_preemption`] grants a worker's preemption under
//!   the lock (victims still bound there, not terminating, lower in
//!   priority, not evicted for someone else; the pod fits once they are
//!   gone, counting other pods nominated there), then nominates the pod
//!   (`status.nominatedNodeName`, broadcast to workers) and deletes the
//!   victims gracefully with a `Preempted` Event on each.
//! - A nominated pod's room is reserved: [`Coordinator::propose`] counts the
//!   pods nominated to the node with a priority at least the proposer's
//!   (upstream's `addGENominatedPods`). A nomination ends when the pod binds,
//!   is deleted, or is nominated elsewhere.
//!
//! # Data flow
//! ```text
//! Cluster watch ──▶ apply_event ──▶ nodes / pod records ──▶ per-worker streams
//! worker ProposeBind ──▶ propose (check + grant under the lock) ──▶ Cluster::bind
//! ```
//! # Locking
//! One `parking_lot::Mutex` guards [`Inner`]. It is never held across an
//! `.await`: `propose` grants under the lock, releases it for the Binding
//! call, then re-takes it to settle. Sends to worker streams happen under the
//! lock (unbounded channels never block), which keeps each worker's stream in
//! the order the coordinator applied changes.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tracing::{Instrument as _, debug, info, info_span, warn};

use flotilla_proto::v1 as pb;
use flotilla_shared::extender::{ExtenderConfig, HttpExtender};
use flotilla_shared::framework::{BindCheck, BindView, KeptCounts, ServedProfile};
use flotilla_shared::node_info::{NodeInfo, NodeSpec, Orphans};
use flotilla_shared::pod_info::PodInfo;
use flotilla_shared::priority::PriorityClasses;
use flotilla_shared::{PodKey, WorkloadClass};

use crate::arbiter::{self, Refusal};
use crate::cluster::{Cluster, ClusterError, Kind, PodRef, SchedulingEvent, WatchEvent};
use crate::partition::{self, WorkerId};

/// Sender half of a worker's event stream.
pub type WorkerTx = mpsc::UnboundedSender<pb::WatchEvent>;

/// Where a pod stands, from the coordinator's point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodPhase {
    /// Waiting to be placed, by this worker (None: no worker yet).
    Pending(Option<WorkerId>),
    /// The arbiter granted `node`; the Binding is being written.
    Granted(Arc<str>),
    /// Bound to `node` (by us or anyone else).
    Bound(Arc<str>),
}

/// What the coordinator knows about one pod.
#[derive(Debug, Clone)]
pub struct PodRecord {
    /// The compiled pod.
    pub info: Arc<PodInfo>,
    /// Phase.
    pub phase: PodPhase,
    /// When the coordinator first saw it pending (latency starts here).
    pub first_seen: Instant,
    /// When its Binding succeeded (set by our binds only).
    pub bound_at: Option<Instant>,
    /// Name of the worker whose proposal bound it.
    pub bound_by: Option<Arc<str>>,
    /// Last FitError message reported for it (cleared when it binds), or
    /// the error of its last attempt when [`PodRecord::failing`].
    pub unschedulable: Option<String>,
    /// Its last attempt failed with an error (an extender, a webhook, a
    /// rejected Binding), not a fit: it is pending and retried after its
    /// backoff; `unschedulable` holds the message.
    pub failing: bool,
    /// The per-node reasons behind that message, for inspection: a sample
    /// of at most `flotilla_proto::v1::MAX_NODE_STATUSES` nodes (the
    /// message counts them all).
    pub rejections: Arc<[NodeRejection]>,
    /// The worker whose proposal was granted, until the bound pod comes
    /// back from the cluster (that worker's confirmation is sent then).
    pub granted_to: Option<WorkerId>,
    /// The copy of the pod its worker was last sent (`assigned_pod`): when
    /// the bound pod is that copy plus its Binding, the worker gets the
    /// short `pod_bound` confirmation instead of the whole object.
    pub sent: Option<Arc<PodInfo>>,
}

impl PodRecord {
    /// A record for a pod first seen now, in `phase`.
    fn new(info: Arc<PodInfo>, phase: PodPhase) -> Self {
        PodRecord {
            info,
            phase,
            first_seen: Instant::now(),
            bound_at: None,
            bound_by: None,
            unschedulable: None,
            failing: false,
            rejections: Arc::from([]),
            granted_to: None,
            sent: None,
        }
    }
}

/// One Binding the coordinator wrote, kept when
/// [`Coordinator::set_bind_log`] is on (benchmarks: pods deleted later keep
/// their sample, unlike [`Coordinator::records`]).
#[derive(Debug, Clone)]
pub struct BindSample {
    /// The pod.
    pub pod: PodKey,
    /// When the coordinator first saw it pending.
    pub first_seen: Instant,
    /// When its Binding succeeded.
    pub bound_at: Instant,
}

/// Why one node rejected a pod (from the worker's FitError).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRejection {
    /// Node name.
    pub node: String,
    /// Upstream reason texts.
    pub reasons: Vec<String>,
    /// The Filter plugin that rejected it.
    pub plugin: String,
}

#[derive(Debug)]
struct WorkerEntry {
    name: Arc<str>,
    class: WorkloadClass,
    tx: Option<WorkerTx>,
    assigned: HashSet<Arc<str>>,
    partition: Vec<Arc<str>>,
    bound: u64,
}

/// Counters for reports and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bind proposals received.
    pub proposals: u64,
    /// Proposals granted (Binding attempted).
    pub grants: u64,
    /// Proposals rejected because the room was taken or the node changed
    /// (on the proposed node and on every alternative offered).
    pub conflicts: u64,
    /// Proposals granted on one of their alternatives, the proposed node's
    /// room having been taken (counted in `grants`, not in `conflicts`).
    pub alternatives_granted: u64,
    /// Bindings that failed at the cluster.
    pub bind_errors: u64,
    /// Unschedulable reports received.
    pub unschedulable_reports: u64,
    /// Gang proposals granted (every member bound at once).
    pub gangs_scheduled: u64,
    /// Gangs whose members waited past their timeout on a worker (reported
    /// by the worker with the members' release).
    pub gang_timeouts: u64,
    /// Preemption proposals received.
    pub preemption_attempts: u64,
    /// Victims deleted for granted preemptions.
    pub preemption_victims: u64,
}

/// A consistent summary of the coordinator's view.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Pending pods known (including unschedulable), plus bound ones.
    pub pods_total: usize,
    /// Pods bound.
    pub bound: usize,
    /// Pending pods whose last attempt found no node.
    pub unschedulable: usize,
    /// Pending pods not reported unschedulable (queued, backing off, in flight).
    pub pending: usize,
    /// Grants whose Binding is still being written.
    pub granting: usize,
    /// Counters.
    pub counters: Counters,
    /// When the last proposal or report arrived.
    pub last_activity: Option<Instant>,
    /// (worker name, class, pods bound through it), by worker id.
    pub workers: Vec<(Arc<str>, WorkloadClass, u64)>,
    /// Pods that could not be read: the error, naming the pod and field.
    pub invalid: Vec<String>,
    /// Nodes that could not be read: the error, naming the node and field.
    pub invalid_nodes: Vec<String>,
    /// Pending pods that name another `schedulerName` (not ours to place).
    pub other_scheduler: usize,
    /// Nodes known.
    pub nodes: usize,
    /// Pods bound by this coordinator's Bindings.
    pub bound_by_us: usize,
    /// Whether every kind was listed once (pods are dispatched from then on).
    pub synced: bool,
    /// Pending pods nominated to a node by a granted preemption, not bound
    /// yet (they wait for their victims to go).
    pub nominated: usize,
    /// Pending pods held by `spec.schedulingGates` (counted apart from
    /// `pending`: nothing schedules them until the gates are removed).
    pub gated: usize,
    /// Pending pods whose last attempt failed with an error (counted in
    /// `pending` too).
    pub failing: usize,
}

#[derive(Debug, Default)]
struct Inner {
    nodes: HashMap<Arc<str>, NodeInfo>,
    /// Keyed by uid; foldhash, not SipHash: a growing map rehashes every
    /// key under the lock, which SipHash made a 5-20 ms stall of every
    /// bind at each doubling.
    /// Boxed: the table moves 24 bytes per pod, not a whole record, when it
    /// grows.
    pods: foldhash::HashMap<Arc<str>, Box<PodRecord>>,
    workers: BTreeMap<WorkerId, WorkerEntry>,
    next_worker_id: WorkerId,
    epoch: u64,
    undispatched: VecDeque<Arc<str>>,
    counters: Counters,
    last_activity: Option<Instant>,
    partition_dirty: bool,
    /// Workers that left, for the final report.
    departed: Vec<(Arc<str>, WorkloadClass, u64)>,
    /// Bound pods whose node is not known (yet, or any more), by node: they
    /// are counted again when the node (re)appears.
    orphans: Orphans,
    /// `spec.schedulerName`s this coordinator serves, each with the
    /// profile's `workloadClass` override (None: classify the pod).
    scheduler_names: HashMap<String, Option<WorkloadClass>>,
    /// The bind checks of each profile served, by `schedulerName` (its
    /// enabled Filters', in Filter order): the arbiter runs exactly these
    /// for the profile's pods, and refuses a pod whose profile is absent.
    bind_checks: foldhash::HashMap<String, Vec<Arc<dyn BindCheck>>>,
    /// `(profile, plugin)` of each enabled Filter without a bind check (not
    /// re-checked at bind time).
    unchecked_filters: Vec<(String, String)>,
    /// Placed pods (bound, granted or orphaned) with required anti-affinity.
    anti_affinity_pods: usize,
    /// Spread and affinity counts for the arbiter, fed by `place` /
    /// `unplace` over `nodes`, reset when a node comes, goes or relabels.
    kept: KeptCounts,
    /// [`Coordinator::set_arbitration`]`(false)`: grant every proposal for
    /// a known node unchecked (the single-scheduler baseline).
    unarbitrated: bool,
    /// Every Binding written, when on ([`Coordinator::set_bind_log`]).
    bind_log: Option<Vec<BindSample>>,
    /// Set by `close_streams`: workers leaving now is expected.
    closing: bool,
    /// Pods that could not be read, by `namespace/name`: the error.
    invalid: BTreeMap<String, String>,
    /// Nodes that could not be read, by name: the error.
    invalid_nodes: BTreeMap<String, String>,
    /// Pending pods of other schedulers, by uid.
    foreign: HashSet<Arc<str>>,
    /// Every kind was listed once: pods may be dispatched.
    synced: bool,
    /// Namespace name → labels (forwarded to workers for `namespaceSelector`).
    namespaces: BTreeMap<String, BTreeMap<String, String>>,
    /// Gang scheduling state (PodGroups, sticky routing, members).
    gangs: gang::Gangs,
    /// PriorityClasses by name.
    priority_classes: BTreeMap<String, Arc<PriorityClass>>,
    /// `priority_classes` ready to resolve pods.
    classes: PriorityClasses,
    /// PriorityClasses were listed once (before that a missing class may
    /// only be late, so it is not reported).
    classes_listed: bool,
    /// Pending pods whose `spec.priorityClassName` names no class, by uid:
    /// whether that was reported to the cluster yet. Not dispatched.
    unresolved: HashMap<Arc<str>, bool>,
    /// PodDisruptionBudgets by (namespace, name), forwarded to workers.
    pdbs: BTreeMap<(String, String), Arc<PodDisruptionBudget>>,
    /// Nominated pods: uid → node.
    nominated: HashMap<Arc<str>, Arc<str>>,
    /// Node → the uids nominated to it.
    nominations: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Victims being evicted: victim uid → preemptor uid.
    evicting: HashMap<Arc<str>, Arc<str>>,
    /// Cluster writes decided under the lock, made after it is released.
    deferred: Vec<Deferred>,
}

/// A cluster write decided under the lock.
#[derive(Debug)]
enum Deferred {
    /// A `FailedScheduling` Event and `PodScheduled=False` with the message.
    Unschedulable(Arc<Pod>, String),
}

/// Lists in progress, per kind, and the kinds listed at least once.
#[derive(Debug, Default)]
struct ListState {
    buffers: HashMap<Kind, Vec<WatchEvent>>,
    listed: HashSet<Kind>,
}

/// The coordinator. Share it as `Arc<Coordinator>`.
pub struct Coordinator {
    cluster: Arc<dyn Cluster>,
    /// The same backend, typed: its write counter.
    counted: Arc<crate::cluster::counted::Counted>,
    inner: Mutex<Inner>,
    /// The extender with a `bindVerb`, if any: it writes the Bindings of
    /// the pods it is interested in.
    binder: parking_lot::RwLock<Option<Arc<HttpExtender>>>,
    /// Cancelled by [`Coordinator::close_streams`]: bind streams stop
    /// taking proposals.
    closing: tokio_util::sync::CancellationToken,
}

impl std::fmt::Debug for Coordinator {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Coordinator").finish_non_exhaustive()
    }
}

/// Outcome of a bind proposal (mirrors `pb::BindOutcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Granted and bound.
    Bound,
    /// Room taken or node changed; re-queue with backoff.
    Conflict(String),
    /// Pod gone or bound elsewhere; forget it.
    PodGone(String),
    /// Binding failed transiently; re-queue with backoff.
    Error(String),
}

/// Most of a proposal's alternatives [`Coordinator::arbitrate`] checks
/// (workers send at most three): a bound on the work one proposal can make
/// the arbiter do under its lock.
pub const MAX_ALTERNATIVES_CHECKED: usize = 8;

/// What [`Coordinator::arbitrate`] decided.
#[derive(Debug)]
pub enum Arbitration {
    /// Answered at once: refused, gone, or already bound there.
    Decided(Decision),
    /// Granted: the room is counted; [`Coordinator::settle`] writes the
    /// Binding.
    Granted(Grant),
}

/// A granted placement whose Binding is not written yet (see
/// [`Coordinator::settle`]). Dropping it without settling leaves the pod
/// `Granted` with its room counted, so every grant must be settled.
#[derive(Debug)]
#[must_use = "a grant holds room until it is settled"]
pub struct Grant {
    worker: WorkerId,
    info: Arc<PodInfo>,
    node: Arc<str>,
}

impl Grant {
    /// The node granted: the proposed one, or the alternative that fit.
    #[must_use]
    pub fn node(&self) -> &Arc<str> {
        &self.node
    }
}

/// A preemption that passed its checks: the preemptor, the node (the map's
/// key) and the victims as the coordinator holds them.
type GrantedPreemption = (Arc<PodInfo>, Arc<str>, Vec<Arc<PodInfo>>);

/// Outcome of a preemption proposal (mirrors `pb::PreemptionOutcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreemptionDecision {
    /// The pod is nominated to the node and its victims are being deleted.
    Granted,
    /// A victim or the room changed; nothing was done.
    Conflict(String),
    /// The preemptor is not pending or not the proposer's any more.
    PodGone(String),
}

fn raw(obj: &impl serde::Serialize) -> pb::RawObject {
    pb::RawObject {
        // Serializing a k8s-openapi object to JSON cannot fail.
        json: serde_json::to_vec(obj).unwrap_or_default(),
    }
}

/// The pod's JSON as the workers are sent it (the coordinator keeps pods as
/// JSON, [`PodInfo::keep_json`]).
fn raw_pod(info: &PodInfo) -> pb::RawObject {
    pb::RawObject {
        json: info.json().to_vec(),
    }
}

/// The node's JSON as the workers are sent it.
fn raw_node(spec: &flotilla_shared::NodeSpec) -> pb::RawObject {
    pb::RawObject {
        json: spec.json().to_vec(),
    }
}

fn ev(e: pb::watch_event::Event) -> pb::WatchEvent {
    pb::WatchEvent {
        event: Some(e),
        trace_context: HashMap::new(),
    }
}

fn namespace_event(name: &str, labels: &BTreeMap<String, String>) -> pb::WatchEvent {
    ev(pb::watch_event::Event::NamespaceUpsert(
        pb::NamespaceLabels {
            name: name.to_owned(),
            labels: labels.iter().map(|(k, v)| (k.clone(), v.clone())).collect(),
        },
    ))
}

fn pb_pod_ref(p: &PodInfo) -> pb::PodRef {
    pb::PodRef {
        namespace: p.key.namespace.to_string(),
        name: p.key.name.to_string(),
        uid: p.uid.to_string(),
    }
}

fn pdb_deleted_event((namespace, name): (String, String)) -> pb::WatchEvent {
    ev(pb::watch_event::Event::PdbDeleted(pb::ObjectRef {
        namespace,
        name,
    }))
}

fn nominated_event(p: &PodInfo, node: &str) -> pb::WatchEvent {
    ev(pb::watch_event::Event::NominatedPod(pb::NominatedPod {
        pod: Some(raw_pod(p)),
        node_name: node.to_owned(),
    }))
}

fn pod_ref_of(p: &PodInfo) -> PodRef {
    PodRef {
        namespace: p.key.namespace.to_string(),
        name: p.key.name.to_string(),
        uid: p.uid.to_string(),
    }
}

/// Whether `new` differs from `old` in what a node's view of its pods
/// holds: labels (affinity, spread, instance caps), annotations (instance
/// caps), the deletion timestamp (terminating pods do not count), requests
/// and host ports (fit).
fn placement_changed(old: &PodInfo, new: &PodInfo) -> bool {
    old.labels != new.labels
        || old.max_instances_annotation != new.max_instances_annotation
        || old.requests != new.requests
        || old.host_ports != new.host_ports
        || old.terminating != new.terminating
}

/// Whether the bound copy `new` of a pod differs from `old`, its copy
/// before the Binding, in anything a worker's cache holds of a placed pod
/// besides the node: what [`placement_changed`] compares, its priority and
/// start time (preemption's victim order). A pod's spec cannot change in
/// the rest (affinity terms, tolerations, containers' images).
fn bound_changed(old: &PodInfo, new: &PodInfo) -> bool {
    placement_changed(old, new)
        || old.priority != new.priority
        || old.start_time != new.start_time
        || old.terminal != new.terminal
}

fn is_terminating(p: &PodInfo) -> bool {
    p.terminating
}

impl Inner {
    /// The Binding of `info` to `node`, granted to `worker`'s proposal, was
    /// written: the record is bound (by that worker), no worker holds the
    /// pod any more, its nomination ends.
    fn binding_written(&mut self, worker: WorkerId, info: &PodInfo, node: &Arc<str>) {
        let worker_name = self.workers.get(&worker).map(|w| w.name.clone());
        if let Some(w) = self.workers.get_mut(&worker) {
            w.bound += 1;
        }
        flotilla_shared::metrics::metrics()
            .pods_bound
            .with_label_values(&[info.class.as_str()])
            .inc();
        if let Some(rec) = self.pods.get_mut(&info.uid) {
            let now = Instant::now();
            rec.bound_at = Some(now);
            rec.bound_by = worker_name;
            if let Some(log) = &mut self.bind_log {
                log.push(BindSample {
                    pod: info.key.clone(),
                    first_seen: rec.first_seen,
                    bound_at: now,
                });
            }
            rec.unschedulable = None;
            rec.failing = false;
            if rec.phase == PodPhase::Granted(node.clone()) {
                rec.phase = PodPhase::Bound(node.clone());
            }
        }
        for w in self.workers.values_mut() {
            w.assigned.remove(&info.uid);
        }
        self.clear_nomination(info);
    }

    /// The Binding granted to `worker`'s proposal failed at the cluster: the
    /// grant's room is released and the pod is pending again with that
    /// worker, or, if the worker left meanwhile (nobody would retry it),
    /// dispatched to another.
    fn binding_failed(&mut self, worker: WorkerId, info: &PodInfo, node: &Arc<str>) {
        self.counters.bind_errors += 1;
        let granted_here = self
            .pods
            .get(&info.uid)
            .is_some_and(|r| r.phase == PodPhase::Granted(node.clone()));
        if !granted_here {
            return;
        }
        self.unplace(node, &info.uid);
        let alive = self.workers.get(&worker).is_some_and(|w| w.tx.is_some());
        if let Some(rec) = self.pods.get_mut(&info.uid) {
            rec.phase = PodPhase::Pending(alive.then_some(worker));
            rec.granted_to = None;
        }
        if !alive {
            self.dispatch(&info.uid);
        }
    }

    /// The bind arbiter's check of one placement against the authoritative
    /// view: [`arbiter::check`] with the bind checks of the pod's profile
    /// and the pods nominated to the node. Returns the node's interned name
    /// when granted.
    fn check_grant(&mut self, info: &PodInfo, node: &str) -> Result<Arc<str>, Refusal> {
        let Some((name, ninfo)) = self.nodes.get_key_value(node) else {
            return Err(Refusal::NoNode);
        };
        if self.unarbitrated {
            return Ok(name.clone());
        }
        let Some(checks) = self.bind_checks.get(&*info.scheduler_name) else {
            return Err(Refusal::NoProfile(info.scheduler_name.clone()));
        };
        let nominated = self.nominated_on(node, info);
        let mut view = BindView::new(
            &self.nodes,
            &self.namespaces,
            self.anti_affinity_pods,
            &mut self.kept,
        );
        arbiter::check(checks, info, ninfo, &nominated, &mut view)?;
        Ok(name.clone())
    }

    /// Tells every worker that `pod` is bound to `node`: the whole object
    /// (serialized once), except to `confirm_to`, the worker whose grant
    /// it is and which holds it assumed as is, which gets the short
    /// `pod_bound` confirmation.
    fn broadcast_bound(&self, info: &PodInfo, node: &str, confirm_to: Option<WorkerId>) {
        let mut whole = None;
        for (id, w) in &self.workers {
            let Some(tx) = &w.tx else {
                continue;
            };
            let e = if Some(*id) == confirm_to {
                ev(pb::watch_event::Event::PodBound(pb::PodBound {
                    pod: Some(pb_pod_ref(info)),
                    node_name: node.to_owned(),
                }))
            } else {
                whole
                    .get_or_insert_with(|| ev(pb::watch_event::Event::BoundPod(raw_pod(info))))
                    .clone()
            };
            let _ = tx.send(e);
        }
    }

    fn broadcast(&self, e: &pb::WatchEvent) {
        for w in self.workers.values() {
            if let Some(tx) = &w.tx {
                let _ = tx.send(e.clone());
            }
        }
    }

    fn send_to(&self, worker: WorkerId, e: pb::WatchEvent) -> bool {
        self.workers
            .get(&worker)
            .and_then(|w| w.tx.as_ref())
            .is_some_and(|tx| tx.send(e).is_ok())
    }

    /// Picks the live worker for a class: its own pool if any, else any
    /// pool; least assigned pods first, then lowest id.
    fn pick_worker(&self, class: WorkloadClass) -> Option<WorkerId> {
        let live = |w: &&WorkerEntry| w.tx.is_some();
        let best = |same_class: bool| {
            self.workers
                .iter()
                .filter(|(_, w)| live(w) && (!same_class || w.class == class))
                .min_by_key(|(id, w)| (w.assigned.len(), **id))
                .map(|(id, _)| *id)
        };
        best(true).or_else(|| best(false))
    }

    fn dispatch(&mut self, uid: &Arc<str>) {
        if self.unresolved.contains_key(uid) {
            // Waits for its PriorityClass (retried when classes change).
            return;
        }
        let Some(rec) = self.pods.get(uid) else {
            return;
        };
        if !matches!(rec.phase, PodPhase::Pending(_)) {
            return;
        }
        // A profile's workloadClass overrides the pod's own class.
        let class = self
            .scheduler_names
            .get(&*rec.info.scheduler_name)
            .copied()
            .flatten()
            .unwrap_or(rec.info.class);
        let mut msg = ev(pb::watch_event::Event::AssignedPod(raw_pod(&rec.info)));
        let group = gang::group_of(&rec.info);
        let picked = if self.synced {
            // A gang goes whole to the worker already serving it.
            group
                .as_ref()
                .and_then(|g| self.gangs.worker_of(g))
                .filter(|w| self.workers.get(w).is_some_and(|e| e.tx.is_some()))
                .or_else(|| self.pick_worker(class))
        } else {
            // Not before the caches are synced (the node list may still be
            // on its way): the pod waits in `undispatched`.
            None
        };
        let Some(w) = picked else {
            if let Some(rec) = self.pods.get_mut(uid) {
                rec.phase = PodPhase::Pending(None);
            }
            self.undispatched.push_back(uid.clone());
            return;
        };
        if let Some(rec) = self.pods.get_mut(uid) {
            rec.phase = PodPhase::Pending(Some(w));
            rec.sent = Some(rec.info.clone());
            // The pod's trace starts here; the worker continues it.
            let span = info_span!(
                "dispatch",
                pod = %rec.info.key,
                worker = %self.workers.get(&w).map_or("", |e| &*e.name),
                class = %class,
            );
            msg.trace_context = flotilla_shared::trace::inject(&span);
        }
        if let Some(g) = group {
            self.gangs.route(g, w);
        }
        if let Some(entry) = self.workers.get_mut(&w) {
            entry.assigned.insert(uid.clone());
        }
        flotilla_shared::metrics::metrics()
            .dispatched_pods
            .with_label_values(&[class.as_str()])
            .inc();
        if !self.send_to(w, msg) {
            warn!(worker = w, "worker stream closed while dispatching");
        }
    }

    fn unassign(&mut self, uid: &Arc<str>) {
        let Some(rec) = self.pods.get(uid) else {
            return;
        };
        if let PodPhase::Pending(Some(w)) = rec.phase {
            let msg = ev(pb::watch_event::Event::UnassignedPod(pb_pod_ref(&rec.info)));
            if let Some(entry) = self.workers.get_mut(&w) {
                entry.assigned.remove(uid);
            }
            self.send_to(w, msg);
        }
    }

    fn repartition(&mut self) {
        self.partition_dirty = false;
        // One partition per pool (online, batch): the pools overlap, so the
        // arbiter settles cross-pool conflicts, and each pool searches the
        // whole cluster first (an online worker half of it with 4 workers,
        // not a quarter). One partition over all workers was measured twice
        // on openb with 4 workers: first 11 -> 8 % conflicts but worse
        // packing; later (before bind alternatives and the linear window)
        // 4-6 -> 1.6-3.3 %, the rest being fallbacks into other workers'
        // nodes. With both, the pools' overlap costs under 1 %.
        let mut pools: BTreeMap<WorkloadClass, Vec<WorkerId>> = BTreeMap::new();
        for (id, w) in &self.workers {
            if w.tx.is_some() {
                pools.entry(w.class).or_default().push(*id);
            }
        }
        let parts = partition::partition(self.nodes.keys(), &pools);
        let epoch = self.epoch;
        for (id, names) in parts {
            let Some(w) = self.workers.get_mut(&id) else {
                continue;
            };
            if w.partition == names {
                continue;
            }
            w.partition = names;
            let msg = ev(pb::watch_event::Event::Partition(pb::Partition {
                epoch,
                node_names: w.partition.iter().map(ToString::to_string).collect(),
            }));
            if let Some(tx) = &w.tx {
                let _ = tx.send(msg);
            }
        }
    }

    fn place(&mut self, node: &Arc<str>, info: &Arc<PodInfo>) {
        let added = match self.nodes.get_mut(node) {
            Some(n) => {
                let added = n.add_pod(info.clone());
                if added {
                    self.kept.pod_placed(info, n);
                }
                added
            }
            None => {
                self.orphans.park(node, info.clone());
                true
            }
        };
        if added && arbiter::has_required_anti_affinity(info) {
            self.anti_affinity_pods += 1;
        }
    }

    /// Pods nominated to `node` that `pod` must leave room for: pending,
    /// not `pod` itself, priority at least `pod`'s (upstream's
    /// `addGENominatedPods`).
    fn nominated_on(&self, node: &str, pod: &PodInfo) -> Vec<Arc<PodInfo>> {
        self.nominations
            .get(node)
            .into_iter()
            .flatten()
            .filter(|u| **u != pod.uid)
            .filter_map(|u| self.pods.get(u))
            .filter(|r| matches!(r.phase, PodPhase::Pending(_)) && r.info.priority >= pod.priority)
            .map(|r| r.info.clone())
            .collect()
    }

    /// Drops `uid`'s nomination from the maps; returns the node it had.
    fn unnominate(&mut self, uid: &str) -> Option<Arc<str>> {
        let node = self.nominated.remove(uid)?;
        if let Some(list) = self.nominations.get_mut(&node) {
            list.retain(|u| &**u != uid);
            if list.is_empty() {
                self.nominations.remove(&node);
            }
        }
        Some(node)
    }

    /// Ends `pod`'s nomination, if any, and tells the workers.
    fn clear_nomination(&mut self, pod: &PodInfo) {
        if self.unnominate(&pod.uid).is_some() {
            self.broadcast(&ev(pb::watch_event::Event::NominationCleared(pb_pod_ref(
                pod,
            ))));
        }
    }

    /// A bind proposal of `pod` for `node` was refused. Workers drop a
    /// nomination when they assume its pod (upstream's nominator does), so
    /// keep both sides agreeing: refused at its nominated node, the
    /// nomination stands and is sent again (the room stays reserved for its
    /// next try); refused elsewhere, it ends, as upstream clears
    /// `nominatedNodeName` after a failed binding.
    fn nominee_conflicted(&mut self, pod: &PodInfo, node: &str) {
        match self.nominated.get(&pod.uid) {
            Some(n) if &**n == node => {
                let e = nominated_event(pod, node);
                self.broadcast(&e);
            }
            Some(_) => self.clear_nomination(pod),
            None => {}
        }
    }

    /// Nominates `pod` to `node` (replacing an earlier nomination) and
    /// tells the workers.
    fn nominate(&mut self, pod: &PodInfo, node: Arc<str>) {
        self.unnominate(&pod.uid);
        self.nominated.insert(pod.uid.clone(), node.clone());
        self.nominations
            .entry(node.clone())
            .or_default()
            .push(pod.uid.clone());
        self.broadcast(&nominated_event(pod, &node));
    }

    /// PriorityClasses changed: recompile them and try the pods waiting
    /// for a class again.
    fn classes_changed(&mut self) {
        let classes: Vec<PriorityClass> = self
            .priority_classes
            .values()
            .map(|c| (**c).clone())
            .collect();
        self.classes = PriorityClasses::new(&classes);
        let waiting: Vec<Arc<Pod>> = self
            .unresolved
            .keys()
            .filter_map(|u| self.pods.get(u))
            .map(|r| r.info.pod())
            .collect();
        for pod in waiting {
            Coordinator::apply_pod(self, pod);
        }
    }

    /// Swaps the newer copy `info` of a pod placed on `node` in for the
    /// placed one, which nothing counted differs from (checked by the
    /// caller with [`placement_changed`]): the granted copy is freed once
    /// the bound one comes back, rather than kept for the pod's lifetime.
    fn swap_placed(&mut self, node: &Arc<str>, info: &Arc<PodInfo>) {
        if let Some(n) = self.nodes.get_mut(node)
            && !n.swap_pod(info.clone())
        {
            self.unplace(node, &info.uid);
            self.place(node, info);
        }
    }

    fn unplace(&mut self, node: &Arc<str>, uid: &str) {
        let removed = match self.orphans.remove(node, uid) {
            Some(p) => Some(p),
            None => self.nodes.get_mut(node).and_then(|n| {
                let p = n.remove_pod(uid)?;
                self.kept.pod_removed(&p, n);
                Some(p)
            }),
        };
        if removed.is_some_and(|p| arbiter::has_required_anti_affinity(&p)) {
            self.anti_affinity_pods -= 1;
        }
    }
}

impl Coordinator {
    /// A coordinator over `cluster` serving `profiles` (built from the
    /// scheduler configuration and plugin registry the workers use:
    /// `SchedulerConfig::served_profiles`): pods whose `spec.schedulerName`
    /// names one of them; a profile's `Some(workload_class)` dispatches all
    /// its pods to that pool, overriding their label / owner / QoS class;
    /// the bind arbiter runs the profile's bind checks for its pods. Each
    /// enabled Filter without a bind check is logged here, once, as not
    /// re-checked ([`Coordinator::unchecked_filters`]).
    #[must_use]
    pub fn with_profiles(cluster: Arc<dyn Cluster>, profiles: Vec<ServedProfile>) -> Self {
        let mut scheduler_names = HashMap::with_capacity(profiles.len());
        let mut bind_checks = foldhash::HashMap::default();
        let mut unchecked_filters = Vec::new();
        for p in profiles {
            for plugin in &p.unchecked_filters {
                warn!(
                    plugin = %plugin,
                    profile = %p.scheduler_name,
                    "Filter plugin provides no bind check: the bind arbiter does not re-check it, \
                     so workers deciding at the same time may together break what it guards"
                );
                unchecked_filters.push((p.scheduler_name.clone(), plugin.clone()));
            }
            scheduler_names.insert(p.scheduler_name.clone(), p.workload_class);
            bind_checks.insert(p.scheduler_name, p.bind_checks);
        }
        let counted = Arc::new(crate::cluster::counted::Counted::new(cluster));
        Coordinator {
            cluster: counted.clone(),
            counted,
            binder: parking_lot::RwLock::new(None),
            closing: tokio_util::sync::CancellationToken::new(),
            inner: Mutex::new(Inner {
                next_worker_id: 1,
                scheduler_names,
                bind_checks,
                unchecked_filters,
                ..Inner::default()
            }),
        }
    }

    /// `(profile, plugin)` of each enabled Filter plugin that provides no
    /// bind check: the arbiter does not re-check it (logged at start).
    #[must_use]
    pub fn unchecked_filters(&self) -> Vec<(String, String)> {
        self.inner.lock().unchecked_filters.clone()
    }

    /// Turns bind arbitration off (`false`) or back on (the default): off,
    /// every proposal for a node the coordinator knows is granted without
    /// the bind checks (nor the room of nominated pods), as a lone
    /// kube-scheduler binds whatever its cycle decided. Only sound with a single worker;
    /// the benchmarks' "single scheduler" baseline uses it to measure what
    /// arbitration costs.
    pub fn set_arbitration(&self, on: bool) {
        self.inner.lock().unarbitrated = !on;
    }

    /// Writes this coordinator made to its cluster so far (Bindings, status
    /// patches, events, evictions, nominations...; as
    /// `flotilla_api_writes_total`, which is process-wide).
    #[must_use]
    pub fn api_writes(&self) -> u64 {
        self.counted.writes()
    }

    /// Starts (`true`) or stops keeping a [`BindSample`] per Binding
    /// written, read with [`Coordinator::bind_log`]. Off by default: it
    /// grows with every pod bound.
    pub fn set_bind_log(&self, on: bool) {
        let mut inner = self.inner.lock();
        match (on, inner.bind_log.is_some()) {
            (true, false) => inner.bind_log = Some(Vec::new()),
            (false, true) => inner.bind_log = None,
            _ => {}
        }
    }

    /// The Bindings written since [`Coordinator::set_bind_log`]`(true)`, in
    /// order (empty when off).
    #[must_use]
    pub fn bind_log(&self) -> Vec<BindSample> {
        self.inner.lock().bind_log.clone().unwrap_or_default()
    }

    /// The backend.
    #[must_use]
    pub fn cluster(&self) -> &Arc<dyn Cluster> {
        &self.cluster
    }

    /// Delegates Bindings to the extender of `extenders` that has a
    /// `bindVerb` (configuration validation allows at most one), as
    /// upstream's `extendersBinding`: for a pod it is interested in, once
    /// the arbiter granted the placement, the coordinator POSTs the bind
    /// verb instead of writing the Binding; a failure of an `ignorable`
    /// binder falls back to the API Binding, any other failure fails the
    /// bind (the room is freed and the worker re-queues the pod). After the
    /// extender's success the backend is told
    /// ([`Cluster::bound_by_extender`]): a real API server shows the
    /// extender's Binding through the watch; the embedded cluster, which no
    /// extender can reach, records it itself.
    ///
    /// # Errors
    /// The binder's TLS settings cannot be used.
    pub fn set_extenders(
        &self,
        extenders: &[ExtenderConfig],
    ) -> Result<(), flotilla_shared::http::HttpError> {
        let binder = extenders
            .iter()
            .find(|e| !e.bind_verb.is_empty())
            .map(|e| HttpExtender::new(e.clone()).map(Arc::new))
            .transpose()?;
        *self.binder.write() = binder;
        Ok(())
    }

    /// The binder extender, if any (its counters).
    #[must_use]
    pub fn binder(&self) -> Option<Arc<HttpExtender>> {
        self.binder.read().clone()
    }

    /// Writes the Binding of `pod` (granted on `node`): through the binder
    /// extender when it is interested in the pod, else the API's
    /// `pods/binding`.
    pub(crate) async fn write_binding(
        &self,
        pod: &PodRef,
        info: &PodInfo,
        node: &str,
    ) -> Result<(), ClusterError> {
        let binder = self
            .binder
            .read()
            .clone()
            .filter(|b| b.is_interested(&info.pod()));
        if let Some(b) = binder {
            match b.bind(&pod.namespace, &pod.name, &pod.uid, node).await {
                Ok(()) => return self.cluster.bound_by_extender(pod, node).await,
                Err(e) if b.is_ignorable() => {
                    b.stats().record_ignored();
                    warn!(%pod, node, error = %e, "ignorable extender failed to bind; writing the Binding instead");
                }
                Err(e) => return Err(ClusterError::BindRejected(e.to_string())),
            }
        }
        self.cluster.bind(pod, node).await
    }

    /// Follows the cluster's change stream until it ends or `shutdown` fires.
    /// Each (re)list of a kind is buffered and applied at once under the lock
    /// (workers never see half a list), dropping what the list no longer
    /// holds; `synced` fires once every kind was listed, and pods are
    /// dispatched to workers only from then on. Transient backend errors are
    /// logged; the backend retries them.
    ///
    /// # Errors
    /// None today (the stream carries transient errors only); kept for
    /// backends whose failure is final.
    pub async fn sync_and_watch(
        self: Arc<Self>,
        shutdown: tokio_util::sync::CancellationToken,
        synced: tokio::sync::oneshot::Sender<()>,
    ) -> Result<(), ClusterError> {
        use futures::{FutureExt as _, StreamExt as _};
        let mut synced = Some(synced);
        let mut sync = ListState::default();
        let mut changes = self.cluster.clone().changes();
        loop {
            let next = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                n = changes.next() => n,
            };
            let mut batch = match next {
                None => return Ok(()),
                Some(Err(e)) => {
                    warn!(error = %e, "cluster watch error; the backend retries");
                    continue;
                }
                Some(Ok(e)) => vec![e],
            };
            // Take what is already there, so one lock and one repartition
            // cover a burst.
            while batch.len() < 4096 {
                match changes.next().now_or_never() {
                    Some(Some(Ok(e))) => batch.push(e),
                    Some(Some(Err(e))) => {
                        warn!(error = %e, "cluster watch error; the backend retries");
                    }
                    Some(None) | None => break,
                }
            }
            let (newly_synced, deferred) = {
                let mut inner = self.inner.lock();
                let was = inner.synced;
                for e in batch {
                    Self::absorb(&mut inner, &mut sync, e);
                }
                if inner.partition_dirty {
                    inner.repartition();
                }
                (!was && inner.synced, std::mem::take(&mut inner.deferred))
            };
            self.run_deferred(deferred);
            if self.inner.lock().gangs.has_dirty() {
                let me = self.clone();
                tokio::spawn(async move { me.write_pod_group_status().await });
            }
            if newly_synced {
                info!("coordinator cache synced");
                if let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
            }
        }
    }

    /// Makes the cluster writes decided under the lock, each in its own task
    /// (nothing happens outside a tokio runtime).
    fn run_deferred(&self, deferred: Vec<Deferred>) {
        if deferred.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for d in deferred {
            let cluster = self.cluster.clone();
            match d {
                Deferred::Unschedulable(pod, message) => {
                    rt.spawn(async move {
                        let r = PodRef::of(&pod);
                        cluster.record_event(SchedulingEvent::failed_scheduling(&r, &message));
                        if let Err(e) = cluster.mark_unschedulable(&pod, &message).await {
                            warn!(pod = %r, error = %e, "could not record PodScheduled=False");
                        }
                    });
                }
            }
        }
    }

    /// One item of the change stream: buffered while its kind is being
    /// listed, applied otherwise.
    fn absorb(inner: &mut Inner, sync: &mut ListState, e: WatchEvent) {
        match e {
            WatchEvent::Relisting(kind) => {
                sync.buffers.insert(kind, Vec::new());
            }
            WatchEvent::Listed(kind) => {
                let listed = sync.buffers.remove(&kind).unwrap_or_default();
                Self::reconcile(inner, kind, listed);
                sync.listed.insert(kind);
                if !inner.synced && Kind::ALL.iter().all(|k| sync.listed.contains(k)) {
                    inner.synced = true;
                    let waiting: Vec<Arc<str>> = inner.undispatched.drain(..).collect();
                    for uid in &waiting {
                        inner.dispatch(uid);
                    }
                }
            }
            e => match sync.buffers.get_mut(&e.kind()) {
                Some(buf) => buf.push(e),
                None => Self::apply_locked(inner, e),
            },
        }
    }

    /// Replaces every object of `kind` with `listed` (a complete list): what
    /// is known but not listed was deleted while nobody watched.
    fn reconcile(inner: &mut Inner, kind: Kind, listed: Vec<WatchEvent>) {
        match kind {
            Kind::Namespace => {
                let names: HashSet<&str> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::NamespaceApplied(n) => n.metadata.name.as_deref(),
                        _ => None,
                    })
                    .collect();
                let gone: Vec<String> = inner
                    .namespaces
                    .keys()
                    .filter(|n| !names.contains(n.as_str()))
                    .cloned()
                    .collect();
                for name in gone {
                    inner.namespaces.remove(&name);
                    inner.broadcast(&ev(pb::watch_event::Event::NamespaceDeleted(name)));
                }
            }
            Kind::Node => {
                let names: HashSet<&str> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::NodeApplied(n) => n.metadata.name.as_deref(),
                        _ => None,
                    })
                    .collect();
                let gone: Vec<_> = inner
                    .nodes
                    .values()
                    .filter(|n| !names.contains(n.name()))
                    .map(|n| n.spec.node())
                    .collect();
                for n in gone {
                    Self::apply_locked(inner, WatchEvent::NodeDeleted(n));
                }
            }
            Kind::Pod => {
                let uids: HashSet<&str> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::PodApplied(p) => p.metadata.uid.as_deref(),
                        _ => None,
                    })
                    .collect();
                let gone: Vec<_> = inner
                    .pods
                    .values()
                    .filter(|r| !uids.contains(&*r.info.uid))
                    .map(|r| r.info.pod())
                    .collect();
                inner.foreign.retain(|u| uids.contains(&**u));
                for p in gone {
                    Self::apply_locked(inner, WatchEvent::PodDeleted(p));
                }
            }
            Kind::PodGroup => {
                let names: HashSet<String> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::PodGroupApplied(g) => Some(g.full_name()),
                        _ => None,
                    })
                    .collect();
                for g in inner.gangs.groups_not_in(&names) {
                    Self::apply_locked(inner, WatchEvent::PodGroupDeleted(g));
                }
            }
            Kind::PriorityClass => {
                inner.priority_classes = listed
                    .into_iter()
                    .filter_map(|e| match e {
                        WatchEvent::PriorityClassApplied(pc) => {
                            pc.metadata.name.clone().map(|n| (n, pc))
                        }
                        _ => None,
                    })
                    .collect();
                inner.classes_listed = true;
                inner.classes_changed();
                return;
            }
            Kind::PodDisruptionBudget => {
                let keys: HashSet<(String, String)> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::PdbApplied(p) => Some(flotilla_shared::pdb::key_of(p)),
                        _ => None,
                    })
                    .collect();
                let gone: Vec<_> = inner
                    .pdbs
                    .values()
                    .filter(|p| !keys.contains(&flotilla_shared::pdb::key_of(p)))
                    .cloned()
                    .collect();
                for p in gone {
                    Self::apply_locked(inner, WatchEvent::PdbDeleted(p));
                }
            }
        }
        for e in listed {
            Self::apply_locked(inner, e);
        }
    }

    /// Applies one cluster change (exposed for tests). List markers are
    /// ignored here.
    pub fn apply(&self, e: WatchEvent) {
        let deferred = {
            let mut inner = self.inner.lock();
            Self::apply_locked(&mut inner, e);
            if inner.partition_dirty {
                inner.repartition();
            }
            std::mem::take(&mut inner.deferred)
        };
        self.run_deferred(deferred);
    }

    fn apply_locked(inner: &mut Inner, e: WatchEvent) {
        match e {
            WatchEvent::NodeApplied(node) => {
                let spec = match NodeSpec::from_node(node.clone()) {
                    Ok(s) => Arc::new(s),
                    Err(err) => {
                        warn!(error = %err, "ignoring node that cannot be read");
                        inner
                            .invalid_nodes
                            .insert(err.node.clone(), err.to_string());
                        return;
                    }
                };
                let name = spec.name.clone();
                match inner.nodes.get_mut(&name) {
                    Some(n) => {
                        if n.spec.labels != spec.labels {
                            inner.kept.invalidate();
                        }
                        n.set_spec(spec);
                    }
                    None => {
                        inner.kept.invalidate();
                        let mut info = NodeInfo::new(spec);
                        for pod in inner.orphans.take(&name) {
                            info.add_pod(pod);
                        }
                        inner.nodes.insert(name, info);
                        inner.partition_dirty = true;
                    }
                }
                inner.broadcast(&ev(pb::watch_event::Event::NodeUpsert(raw(&*node))));
            }
            WatchEvent::NodeDeleted(node) => {
                let Some(name) = node.metadata.name.as_deref() else {
                    return;
                };
                if let Some(info) = inner.nodes.remove(name) {
                    inner.kept.invalidate();
                    // Pods bound to it still hold its room (a deleted and
                    // re-created Node keeps them in Kubernetes).
                    inner.orphans.park_all(&info);
                    inner.partition_dirty = true;
                    inner.broadcast(&ev(pb::watch_event::Event::NodeDeleted(pb::NodeDeleted {
                        name: name.to_owned(),
                    })));
                }
            }
            WatchEvent::NamespaceApplied(ns) => {
                let Some(name) = ns.metadata.name.clone() else {
                    return;
                };
                let labels = ns.metadata.labels.clone().unwrap_or_default();
                if inner.namespaces.get(&name) != Some(&labels) {
                    let msg = namespace_event(&name, &labels);
                    inner.namespaces.insert(name, labels);
                    inner.broadcast(&msg);
                }
            }
            WatchEvent::NamespaceDeleted(ns) => {
                if let Some(name) = ns.metadata.name.as_deref()
                    && inner.namespaces.remove(name).is_some()
                {
                    inner.broadcast(&ev(pb::watch_event::Event::NamespaceDeleted(
                        name.to_owned(),
                    )));
                }
            }
            WatchEvent::PodApplied(pod) => Self::apply_pod(inner, pod),
            WatchEvent::PodGroupApplied(g) => {
                if inner.gangs.apply_group(g.clone()) {
                    inner.broadcast(&ev(pb::watch_event::Event::PodGroupUpsert(raw(&*g))));
                }
            }
            WatchEvent::PodGroupDeleted(g) => {
                let name = g.full_name();
                if inner.gangs.delete_group(&name) {
                    inner.broadcast(&ev(pb::watch_event::Event::PodGroupDeleted(name)));
                }
            }
            WatchEvent::Relisting(_) | WatchEvent::Listed(_) => {}
            WatchEvent::PriorityClassApplied(pc) => {
                if let Some(name) = pc.metadata.name.clone() {
                    inner.priority_classes.insert(name, pc);
                    inner.classes_changed();
                }
            }
            WatchEvent::PriorityClassDeleted(pc) => {
                if let Some(name) = pc.metadata.name.as_deref()
                    && inner.priority_classes.remove(name).is_some()
                {
                    inner.classes_changed();
                }
            }
            WatchEvent::PdbApplied(pdb) => {
                let msg = ev(pb::watch_event::Event::PdbUpsert(raw(&*pdb)));
                inner.pdbs.insert(flotilla_shared::pdb::key_of(&pdb), pdb);
                inner.broadcast(&msg);
            }
            WatchEvent::PdbDeleted(pdb) => {
                let key = flotilla_shared::pdb::key_of(&pdb);
                if inner.pdbs.remove(&key).is_some() {
                    inner.broadcast(&pdb_deleted_event(key));
                }
            }
            WatchEvent::PodDeleted(pod) => {
                let Some(uid) = pod.metadata.uid.as_deref() else {
                    return;
                };
                inner.foreign.remove(uid);
                let Some((uid, _)) = inner.pods.get_key_value(uid) else {
                    return;
                };
                let uid = uid.clone();
                inner.unassign(&uid);
                inner.unresolved.remove(&uid);
                inner.evicting.remove(&uid);
                let rec = inner.pods.remove(&uid).expect("present");
                inner.gangs.member_gone(&rec.info);
                inner.clear_nomination(&rec.info);
                if let PodPhase::Granted(n) | PodPhase::Bound(n) = &rec.phase {
                    inner.unplace(n, &uid);
                }
                inner.undispatched.retain(|u| *u != uid);
                inner.broadcast(&ev(pb::watch_event::Event::PodDeleted(pb_pod_ref(
                    &rec.info,
                ))));
            }
        }
    }

    /// `pod` with `spec.priority` resolved from its PriorityClass when
    /// admission did not set it, and the error when its class does not
    /// exist (the pod is then returned as it is).
    fn resolve_priority(inner: &Inner, pod: Arc<Pod>) -> (Arc<Pod>, Option<String>) {
        if pod.spec.as_ref().is_none_or(|s| s.priority.is_some()) {
            return (pod, None);
        }
        let mut resolved = (*pod).clone();
        // Admission fixes a pod's priority once: a later change of the
        // classes does not move it.
        let earlier = pod
            .metadata
            .uid
            .as_deref()
            .filter(|u| !inner.unresolved.contains_key(*u))
            .and_then(|u| inner.pods.get(u))
            .map(|r| r.info.pod());
        let earlier = earlier
            .as_deref()
            .and_then(|p| p.spec.as_ref())
            .filter(|s| s.priority.is_some());
        if let (Some(earlier), Some(spec)) = (earlier, resolved.spec.as_mut()) {
            spec.priority = earlier.priority;
            if spec.preemption_policy.is_none() {
                spec.preemption_policy
                    .clone_from(&earlier.preemption_policy);
            }
            if spec.priority_class_name.is_none() {
                spec.priority_class_name
                    .clone_from(&earlier.priority_class_name);
            }
            return (Arc::new(resolved), None);
        }
        match inner.classes.admit(&mut resolved) {
            Ok(_) => (Arc::new(resolved), None),
            Err(e) => (pod, Some(e.to_string())),
        }
    }

    /// Records that pending `info` waits for its PriorityClass; reports it
    /// to the cluster once classes were listed.
    fn hold_unresolved(inner: &mut Inner, info: &Arc<PodInfo>, message: String) {
        let reported = inner.unresolved.get(&info.uid).copied().unwrap_or(false);
        let report = !reported && inner.classes_listed;
        inner
            .unresolved
            .insert(info.uid.clone(), reported || report);
        if let Some(rec) = inner.pods.get_mut(&info.uid) {
            rec.unschedulable = Some(message.clone());
        }
        if report {
            warn!(pod = %info.key, %message, "pod not dispatched");
            inner
                .deferred
                .push(Deferred::Unschedulable(info.pod(), message));
        }
    }

    fn apply_pod(inner: &mut Inner, pod: Arc<Pod>) {
        let (pod, unresolved) = Self::resolve_priority(inner, pod);
        let info = match PodInfo::from_pod(pod.clone()) {
            Ok(mut i) => {
                // Held for the pod's lifetime: as JSON, a tenth of the `Pod`.
                i.keep_json();
                Arc::new(i)
            }
            Err(err) => {
                warn!(error = %err, "pod cannot be read; it will not be scheduled");
                inner.invalid.insert(err.pod.clone(), err.to_string());
                return;
            }
        };
        let uid = info.uid.clone();
        inner.foreign.remove(&uid);
        let existing = inner.pods.get(&uid).cloned();
        if !info.terminal
            && (info.node_name.is_some()
                || inner.scheduler_names.contains_key(&*info.scheduler_name))
        {
            inner.gangs.member_seen(&info);
        }
        if info.terminal {
            inner.unresolved.remove(&uid);
            inner.evicting.remove(&uid);
            if let Some(rec) = existing {
                inner.clear_nomination(&rec.info);
                inner.unassign(&uid);
                if let PodPhase::Granted(n) | PodPhase::Bound(n) = &rec.phase {
                    inner.unplace(n, &uid);
                    inner.broadcast(&ev(pb::watch_event::Event::PodDeleted(pb_pod_ref(&info))));
                }
                inner.pods.remove(&uid);
                inner.gangs.member_gone(&rec.info);
            }
            return;
        }
        if let Some(node) = info.node_name.clone() {
            // Bound in the cluster.
            if let Some(message) = unresolved {
                warn!(pod = %info.key, %message, "bound pod counts with priority 0");
            }
            inner.unresolved.remove(&uid);
            inner.clear_nomination(&info);
            let mut rec = existing
                .unwrap_or_else(|| Box::new(PodRecord::new(info.clone(), PodPhase::Pending(None))));
            // The worker whose grant this Binding is, when all it lacks is
            // the Binding itself: the copy it was last sent is the last one
            // seen here, and nothing a placed pod is counted by changed.
            let confirm_to = match &rec.phase {
                PodPhase::Granted(n) | PodPhase::Bound(n) if *n == node => rec
                    .granted_to
                    .take()
                    .filter(|_| rec.sent.as_ref().is_some_and(|c| Arc::ptr_eq(c, &rec.info)))
                    .filter(|_| !bound_changed(&rec.info, &info)),
                _ => None,
            };
            rec.granted_to = None;
            rec.sent = None;
            match &rec.phase {
                PodPhase::Granted(n) | PodPhase::Bound(n) if *n == node => {
                    // The same node: swap in the new copy when what the
                    // arbiter counts changed (labels, a deletionTimestamp,
                    // resized requests), so it sees the pod as the workers
                    // do. The usual Granted → Bound confirmation changes
                    // none of it and costs nothing here.
                    if placement_changed(&rec.info, &info) {
                        inner.unplace(&node, &uid);
                        inner.place(&node, &info);
                    } else {
                        inner.swap_placed(&node, &info);
                    }
                }
                PodPhase::Granted(n) | PodPhase::Bound(n) => {
                    let n = n.clone();
                    inner.unplace(&n, &uid);
                    inner.place(&node, &info);
                }
                PodPhase::Pending(_) => {
                    inner.pods.insert(uid.clone(), rec.clone());
                    inner.unassign(&uid);
                    inner.undispatched.retain(|u| *u != uid);
                    inner.place(&node, &info);
                }
            }
            rec.phase = PodPhase::Bound(node.clone());
            rec.unschedulable = None;
            rec.info = info.clone();
            inner.pods.insert(uid, rec);
            inner.broadcast_bound(&info, &node, confirm_to);
            return;
        }
        if !inner.scheduler_names.contains_key(&*info.scheduler_name) {
            inner.foreign.insert(uid);
            return;
        }
        match existing {
            None => {
                inner.pods.insert(
                    uid.clone(),
                    Box::new(PodRecord::new(info.clone(), PodPhase::Pending(None))),
                );
                if let Some(message) = unresolved {
                    Self::hold_unresolved(inner, &info, message);
                }
                inner.dispatch(&uid);
            }
            Some(rec) => {
                let old = rec.info.pod_once();
                let changed = old.spec != pod.spec || old.metadata.labels != pod.metadata.labels;
                if let Some(r) = inner.pods.get_mut(&uid) {
                    r.info = info.clone();
                }
                match unresolved {
                    Some(message) => Self::hold_unresolved(inner, &info, message),
                    None if inner.unresolved.remove(&uid).is_some() => {
                        // Its class appeared: schedule it now.
                        if let Some(r) = inner.pods.get_mut(&uid) {
                            r.unschedulable = None;
                        }
                        inner.dispatch(&uid);
                    }
                    None => {
                        if changed && let PodPhase::Pending(Some(w)) = rec.phase {
                            inner.send_to(
                                w,
                                ev(pb::watch_event::Event::AssignedPod(raw_pod(&info))),
                            );
                            if let Some(r) = inner.pods.get_mut(&uid) {
                                r.sent = Some(info.clone());
                            }
                        }
                    }
                }
            }
        }
    }

    /// Registers a worker of `class`; returns (id, epoch). It receives work
    /// once it opens its stream with [`Coordinator::attach`].
    pub fn register(&self, name: &str, class: WorkloadClass) -> (WorkerId, u64) {
        let mut inner = self.inner.lock();
        let id = inner.next_worker_id;
        inner.next_worker_id += 1;
        inner.epoch += 1;
        inner.workers.insert(
            id,
            WorkerEntry {
                name: Arc::from(name),
                class,
                tx: None,
                assigned: HashSet::new(),
                partition: Vec::new(),
                bound: 0,
            },
        );
        info!(worker = id, name, %class, "worker registered");
        (id, inner.epoch)
    }

    /// Opens worker `id`'s event stream: replays nodes, bound pods and its
    /// partition, dispatches waiting pods, then sends `SyncDone`.
    ///
    /// # Errors
    /// The id is unknown (never registered, or already gone).
    pub fn attach(&self, id: WorkerId) -> Result<mpsc::UnboundedReceiver<pb::WatchEvent>, String> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.inner.lock();
        if !inner.workers.contains_key(&id) {
            return Err(format!("worker {id} is not registered"));
        }
        for (name, labels) in &inner.namespaces {
            let _ = tx.send(namespace_event(name, labels));
        }
        for n in inner.nodes.values() {
            let _ = tx.send(ev(pb::watch_event::Event::NodeUpsert(raw_node(&n.spec))));
        }
        for g in inner.gangs.groups() {
            let _ = tx.send(ev(pb::watch_event::Event::PodGroupUpsert(raw(&**g))));
        }
        for rec in inner.pods.values() {
            if let PodPhase::Bound(_) = rec.phase {
                let _ = tx.send(ev(pb::watch_event::Event::BoundPod(raw_pod(&rec.info))));
            }
        }
        for pdb in inner.pdbs.values() {
            let _ = tx.send(ev(pb::watch_event::Event::PdbUpsert(raw(&**pdb))));
        }
        for (uid, node) in &inner.nominated {
            if let Some(rec) = inner.pods.get(uid) {
                let _ = tx.send(nominated_event(&rec.info, node));
            }
        }
        if let Some(w) = inner.workers.get_mut(&id) {
            w.tx = Some(tx.clone());
        }
        inner.epoch += 1;
        inner.repartition();
        let waiting: Vec<Arc<str>> = inner.undispatched.drain(..).collect();
        for uid in &waiting {
            inner.dispatch(uid);
        }
        let _ = tx.send(ev(pb::watch_event::Event::Synced(pb::SyncDone {})));
        Ok(rx)
    }

    /// Worker `id` went away: its pending pods go to other workers and the
    /// nodes are repartitioned.
    pub fn detach(&self, id: WorkerId) {
        let mut inner = self.inner.lock();
        let Some(w) = inner.workers.remove(&id) else {
            return;
        };
        if inner.closing {
            info!(worker = id, name = %w.name, "worker stream closed at shutdown");
        } else {
            warn!(worker = id, name = %w.name, pods = w.assigned.len(), "worker left; re-dispatching its pods");
        }
        inner.departed.push((w.name.clone(), w.class, w.bound));
        inner.gangs.forget_worker(id);
        inner.epoch += 1;
        inner.repartition();
        for uid in &w.assigned {
            if let Some(rec) = inner.pods.get_mut(uid)
                && rec.phase == PodPhase::Pending(Some(id))
            {
                rec.phase = PodPhase::Pending(None);
            }
        }
        let mut uids: Vec<&Arc<str>> = w.assigned.iter().collect();
        uids.sort();
        for uid in uids {
            inner.dispatch(uid);
        }
    }

    /// Bind arbitration. Checks the proposal against the authoritative view
    /// (every grant counted, even those the cluster has not reflected yet)
    /// with the bind checks of the pod's profile ([`crate::arbiter`]); on
    /// success records the grant, writes the Binding, and settles.
    /// Idempotent: re-proposing a bound placement answers `Bound`. The same
    /// as [`Coordinator::arbitrate`] followed by [`Coordinator::settle`].
    pub async fn propose(&self, worker: WorkerId, pod: &PodRef, node: &str) -> Decision {
        self.propose_with_alternatives(worker, pod, node, &[])
            .await
            .0
    }

    /// [`Coordinator::propose`] with the worker's next best nodes (see
    /// [`Coordinator::arbitrate`]); also returns the node decided on (the
    /// granted alternative, else `node`).
    pub async fn propose_with_alternatives(
        &self,
        worker: WorkerId,
        pod: &PodRef,
        node: &str,
        alternatives: &[String],
    ) -> (Decision, Arc<str>) {
        match self.arbitrate(worker, pod, node, alternatives) {
            Arbitration::Decided(d) => (d, Arc::from(node)),
            Arbitration::Granted(grant) => {
                let granted = grant.node.clone();
                (self.settle(pod, grant).await, granted)
            }
        }
    }

    /// The synchronous half of [`Coordinator::propose`]: the check and, when
    /// it passes, the grant (the room is counted from now on), under the
    /// lock. Proposals arbitrated one after another are checked in that
    /// order, each against the grants before it. A grant must be passed to
    /// [`Coordinator::settle`], which writes its Binding.
    ///
    /// When `node` no longer fits (another worker's grant took the room
    /// first, or the node changed), the first of `alternatives` (the
    /// worker's next best feasible nodes, best first; at most
    /// [`MAX_ALTERNATIVES_CHECKED`] are looked at) that passes the same
    /// check is granted instead, as a scheduler whose view had been
    /// current would have chosen its next best node; only when none does is
    /// the answer a conflict. The grant's node says which it was.
    pub fn arbitrate(
        &self,
        worker: WorkerId,
        pod: &PodRef,
        node: &str,
        alternatives: &[String],
    ) -> Arbitration {
        let mut inner = self.inner.lock();
        inner.counters.proposals += 1;
        inner.last_activity = Some(Instant::now());
        let Some(rec) = inner.pods.get(pod.uid.as_str()) else {
            return Arbitration::Decided(Decision::PodGone(format!("pod {pod} is not pending")));
        };
        match &rec.phase {
            PodPhase::Bound(n) | PodPhase::Granted(n) if &**n == node => {
                return Arbitration::Decided(Decision::Bound);
            }
            PodPhase::Bound(n) | PodPhase::Granted(n) => {
                return Arbitration::Decided(Decision::PodGone(format!(
                    "pod {pod} is already bound to {n}"
                )));
            }
            PodPhase::Pending(_) => {}
        }
        let info = rec.info.clone();
        let name = match inner.check_grant(&info, node) {
            Ok(name) => name,
            Err(refusal) => {
                let alternative = alternatives
                    .iter()
                    .take(MAX_ALTERNATIVES_CHECKED)
                    .filter(|a| a.as_str() != node)
                    .find_map(|a| inner.check_grant(&info, a).ok());
                let reason = refusal.reason(node);
                match alternative {
                    Some(name) => {
                        inner.counters.alternatives_granted += 1;
                        debug!(%pod, node, granted = %name, %reason, "first choice taken; alternative granted");
                        name
                    }
                    None => {
                        inner.counters.conflicts += 1;
                        inner.nominee_conflicted(&info, node);
                        debug!(%pod, node, %reason, "bind conflict");
                        return Arbitration::Decided(Decision::Conflict(reason));
                    }
                }
            }
        };
        inner.counters.grants += 1;
        inner.place(&name, &info);
        if let Some(rec) = inner.pods.get_mut(&info.uid) {
            rec.phase = PodPhase::Granted(name.clone());
            rec.granted_to = Some(worker);
        }
        Arbitration::Granted(Grant {
            worker,
            info,
            node: name,
        })
    }

    /// The asynchronous half of [`Coordinator::propose`]: writes the
    /// granted Binding (through the binder extender when it is interested),
    /// then settles the record: bound, or, when the write failed, the room
    /// released and the pod pending again.
    pub async fn settle(&self, pod: &PodRef, grant: Grant) -> Decision {
        let Grant {
            worker,
            info,
            node: node_name,
        } = grant;
        let started = Instant::now();
        let result = self
            .write_binding(pod, &info, &node_name)
            .instrument(info_span!("binding", pod = %pod, node = %node_name))
            .await;
        flotilla_shared::metrics::metrics()
            .extension_point_duration
            .with_label_values(&[
                "Bind",
                if result.is_ok() { "Success" } else { "Error" },
                &info.scheduler_name,
            ])
            .observe(started.elapsed().as_secs_f64());

        let written = {
            let mut inner = self.inner.lock();
            match &result {
                Ok(()) => inner.binding_written(worker, &info, &node_name),
                Err(_) => inner.binding_failed(worker, &info, &node_name),
            }
            result
        };
        match written {
            Ok(()) => {
                self.cluster
                    .record_event(SchedulingEvent::scheduled(pod, &node_name));
                Decision::Bound
            }
            Err(e) => {
                self.binding_rejected(pod, &e).await;
                match e {
                    ClusterError::PodNotFound(m) => Decision::PodGone(m),
                    ClusterError::AlreadyBound { pod, node } if node.is_empty() => {
                        Decision::PodGone(format!("pod {pod} is already bound"))
                    }
                    ClusterError::AlreadyBound { pod, node } => {
                        Decision::PodGone(format!("pod {pod} is already bound to {node}"))
                    }
                    ClusterError::NodeNotFound(n) => {
                        Decision::Conflict(format!("node {n} not found"))
                    }
                    other => Decision::Error(other.to_string()),
                }
            }
        }
    }

    /// A Binding failed for a reason other than the pod or node being gone
    /// or the pod bound already: upstream's binding failure, a
    /// `FailedScheduling` event and `PodScheduled=False` (SchedulerError)
    /// saying why (`Binding rejected: ...`).
    async fn binding_rejected(&self, pod: &PodRef, e: &ClusterError) {
        if matches!(
            e,
            ClusterError::PodNotFound(_)
                | ClusterError::AlreadyBound { .. }
                | ClusterError::NodeNotFound(_)
        ) {
            return;
        }
        let message = format!("Binding rejected: {e}");
        self.report_failure(pod, &message, Vec::new(), true).await;
    }

    /// Preemption arbitration for worker `worker`'s proposal to evict
    /// `victims` from `node` so that `pod` fits there. Checked under the
    /// lock: the pod is pending and assigned to `worker`, may preempt
    /// (`preemptionPolicy` is not `Never`); every victim is bound to `node`,
    /// not terminating, lower in priority than the pod and not already
    /// being evicted for another pod; the pod fits on `node` once the
    /// victims are gone, counting the pods nominated there with a priority
    /// at least its own. On success the pod is nominated to `node`
    /// (broadcast to workers, `status.nominatedNodeName` written), the
    /// victims are deleted gracefully and each gets a `Preempted` Event
    /// (upstream's note: `Preempted by pod <uid> on node <node>`).
    pub async fn propose_preemption(
        &self,
        worker: WorkerId,
        pod: &PodRef,
        node: &str,
        victims: &[PodRef],
    ) -> PreemptionDecision {
        let (preemptor, node_name, victims) = {
            let mut inner = self.inner.lock();
            inner.counters.preemption_attempts += 1;
            inner.last_activity = Some(Instant::now());
            let (preemptor, node_name, victims) =
                match Self::check_preemption(&inner, worker, pod, node, victims) {
                    Ok(v) => v,
                    Err(d) => {
                        debug!(%pod, node, decision = ?d, "preemption refused");
                        return d;
                    }
                };
            inner.nominate(&preemptor, node_name.clone());
            for v in &victims {
                inner.evicting.insert(v.uid.clone(), preemptor.uid.clone());
            }
            inner.counters.preemption_victims += victims.len() as u64;
            (preemptor, node_name, victims)
        };
        info!(pod = %pod, node = %node_name, victims = victims.len(), "preemption granted");
        if let Err(e) = self
            .cluster
            .set_nominated_node(&preemptor.pod(), Some(&node_name))
            .await
        {
            warn!(%pod, error = %e, "could not write status.nominatedNodeName");
        }
        for v in &victims {
            let r = pod_ref_of(v);
            // As upstream: the DisruptionTarget condition first (it tells a
            // later attempt of the preemptor that its victims are on their
            // way out), then the graceful delete.
            if let Err(e) = self
                .cluster
                .mark_preemption_victim(&r, &preemptor.scheduler_name)
                .await
            {
                debug!(victim = %r, error = %e, "could not mark the preemption victim");
            }
            match self.cluster.delete_pod(&r, None).await {
                Ok(()) => {
                    self.cluster.record_event(SchedulingEvent::preempted(
                        &r,
                        &preemptor.uid,
                        &node_name,
                    ));
                }
                Err(ClusterError::PodNotFound(_)) => {
                    debug!(victim = %r, "victim already deleted");
                }
                Err(e) => {
                    warn!(victim = %r, error = %e, "could not delete a preemption victim");
                    self.inner.lock().evicting.remove(&v.uid);
                }
            }
        }
        PreemptionDecision::Granted
    }

    /// The checks of [`Coordinator::propose_preemption`]: the preemptor, the
    /// node and the victims as the coordinator holds them.
    fn check_preemption(
        inner: &Inner,
        worker: WorkerId,
        pod: &PodRef,
        node: &str,
        victims: &[PodRef],
    ) -> Result<GrantedPreemption, PreemptionDecision> {
        use PreemptionDecision::{Conflict, PodGone};
        let Some(rec) = inner.pods.get(pod.uid.as_str()) else {
            return Err(PodGone(format!("pod {pod} is not pending")));
        };
        match rec.phase {
            PodPhase::Pending(Some(w)) if w == worker => {}
            PodPhase::Pending(_) => {
                return Err(PodGone(format!(
                    "pod {pod} is not assigned to worker {worker}"
                )));
            }
            PodPhase::Granted(_) | PodPhase::Bound(_) => {
                return Err(PodGone(format!("pod {pod} is not pending")));
            }
        }
        let preemptor = rec.info.clone();
        if preemptor.preemption_policy_never {
            return Err(Conflict(format!(
                "pod {pod}: spec.preemptionPolicy is Never"
            )));
        }
        let Some((node_name, ninfo)) = inner.nodes.get_key_value(node) else {
            return Err(Conflict(format!("node {node} not found")));
        };
        let mut found: Vec<Arc<PodInfo>> = Vec::with_capacity(victims.len());
        for v in victims {
            let Some(vrec) = inner.pods.get(v.uid.as_str()) else {
                return Err(Conflict(format!("victim {v} is gone")));
            };
            if !matches!(&vrec.phase, PodPhase::Bound(n) if &**n == node) {
                return Err(Conflict(format!("victim {v} is not bound to node {node}")));
            }
            if is_terminating(&vrec.info) {
                return Err(Conflict(format!("victim {v} is already terminating")));
            }
            if let Some(other) = inner.evicting.get(v.uid.as_str()) {
                return Err(Conflict(format!(
                    "victim {v} is already being evicted for pod {other}"
                )));
            }
            if vrec.info.priority >= preemptor.priority {
                return Err(Conflict(format!(
                    "victim {v} has priority {}, not lower than {}",
                    vrec.info.priority, preemptor.priority
                )));
            }
            if !found.iter().any(|f| f.uid == vrec.info.uid) {
                found.push(vrec.info.clone());
            }
        }
        let mut without = ninfo.clone();
        for v in &found {
            without.remove_pod(&v.uid);
        }
        let nominated = inner.nominated_on(node, &preemptor);
        let Some(checks) = inner.bind_checks.get(&*preemptor.scheduler_name) else {
            let refusal = Refusal::NoProfile(preemptor.scheduler_name.clone());
            return Err(Conflict(refusal.reason(node)));
        };
        // Only the node-local checks run here, and they read no counts:
        // an empty set stands in for the kept ones (`inner` is shared).
        let mut scratch = KeptCounts::default();
        let mut view = BindView::new(
            &inner.nodes,
            &inner.namespaces,
            inner.anti_affinity_pods,
            &mut scratch,
        );
        if let Err(reason) = arbiter::fits_with(checks, &preemptor, &without, &nominated, &mut view)
        {
            return Err(Conflict(format!(
                "node {node}: {reason} even without the victims"
            )));
        }
        Ok((preemptor, node_name.clone(), found))
    }

    /// The node `namespace/name` is nominated to, if any.
    #[must_use]
    pub fn nominated_node(&self, namespace: &str, name: &str) -> Option<Arc<str>> {
        let inner = self.inner.lock();
        inner
            .pods
            .values()
            .find(|r| &*r.info.key.namespace == namespace && &*r.info.key.name == name)
            .and_then(|r| inner.nominated.get(&r.info.uid).cloned())
    }

    /// `pod`'s preemption found no candidate (upstream's PostFilter result
    /// with an empty nominated node): its nomination, if any, ends, the
    /// workers are told, and `status.nominatedNodeName` is cleared, so the
    /// room it held is free for pods of lower or equal priority again.
    pub async fn end_nomination(&self, pod: &PodRef) {
        let ended = {
            let mut inner = self.inner.lock();
            let Some(rec) = inner.pods.get(pod.uid.as_str()) else {
                return;
            };
            if !matches!(rec.phase, PodPhase::Pending(_)) {
                return;
            }
            let info = rec.info.clone();
            let had = inner.nominated.contains_key(&info.uid);
            inner.clear_nomination(&info);
            had.then(|| info.pod_once())
        };
        if let Some(current) = ended
            && let Err(e) = self.cluster.set_nominated_node(&current, None).await
        {
            warn!(%pod, error = %e, "could not clear status.nominatedNodeName");
        }
    }

    /// A worker found no node for `pod`: record the FitError message and the
    /// per-node reasons (the first `flotilla_proto::v1::MAX_NODE_STATUSES`
    /// of them), record a `FailedScheduling` Event and set
    /// `PodScheduled=False` in the cluster (upstream's
    /// `handleSchedulingFailure`, in that order).
    pub async fn report_unschedulable(
        &self,
        pod: &PodRef,
        message: &str,
        rejections: Vec<NodeRejection>,
    ) {
        self.report_failure(pod, message, rejections, false).await;
    }

    /// [`Coordinator::report_unschedulable`] for an attempt that failed
    /// with an error (`error`: an extender or webhook failing, a Binding
    /// rejected): the pod stays counted as pending, and `PodScheduled=False`
    /// gets reason `SchedulerError` (upstream's for errors).
    pub async fn report_failure(
        &self,
        pod: &PodRef,
        message: &str,
        mut rejections: Vec<NodeRejection>,
        error: bool,
    ) {
        rejections.truncate(flotilla_proto::v1::MAX_NODE_STATUSES);
        let current = {
            let mut inner = self.inner.lock();
            inner.counters.unschedulable_reports += 1;
            inner.last_activity = Some(Instant::now());
            match inner.pods.get_mut(pod.uid.as_str()) {
                Some(rec) if matches!(rec.phase, PodPhase::Pending(_)) => {
                    rec.unschedulable = Some(message.to_owned());
                    rec.failing = error;
                    rec.rejections = rejections.into();
                    rec.info.pod_once()
                }
                _ => return,
            }
        };
        self.cluster
            .record_event(SchedulingEvent::failed_scheduling(pod, message));
        let written = if error {
            self.cluster.mark_scheduler_error(&current, message).await
        } else {
            self.cluster.mark_unschedulable(&current, message).await
        };
        if let Err(e) = written {
            warn!(%pod, error = %e, "could not record PodScheduled=False");
        }
    }

    /// A consistent summary.
    #[must_use]
    pub fn summary(&self) -> Summary {
        let inner = self.inner.lock();
        let mut s = Summary {
            counters: inner.counters,
            last_activity: inner.last_activity,
            ..Summary::default()
        };
        for rec in inner.pods.values() {
            s.pods_total += 1;
            match rec.phase {
                PodPhase::Bound(_) => s.bound += 1,
                PodPhase::Granted(_) => s.granting += 1,
                PodPhase::Pending(_) if rec.failing => {
                    s.pending += 1;
                    s.failing += 1;
                }
                PodPhase::Pending(_) if rec.unschedulable.is_some() => s.unschedulable += 1,
                PodPhase::Pending(_) if !rec.info.scheduling_gates.is_empty() => s.gated += 1,
                PodPhase::Pending(_) => s.pending += 1,
            }
        }
        s.invalid = inner.invalid.values().cloned().collect();
        s.invalid_nodes = inner.invalid_nodes.values().cloned().collect();
        s.other_scheduler = inner.foreign.len();
        s.nodes = inner.nodes.len();
        s.bound_by_us = inner.pods.values().filter(|r| r.bound_at.is_some()).count();
        s.synced = inner.synced;
        s.nominated = inner.nominated.len();
        s.workers = inner
            .workers
            .values()
            .map(|w| (w.name.clone(), w.class, w.bound))
            .chain(inner.departed.iter().cloned())
            .collect();
        s
    }

    /// The record of one pod, by `namespace/name` (e.g. to see why it is
    /// pending: `unschedulable` and the per-node `rejections`).
    #[must_use]
    pub fn record(&self, namespace: &str, name: &str) -> Option<PodRecord> {
        let inner = self.inner.lock();
        inner
            .pods
            .values()
            .find(|r| &*r.info.key.namespace == namespace && &*r.info.key.name == name)
            .map(|r| PodRecord::clone(r))
    }

    /// Every pod record (for reports and placements).
    #[must_use]
    pub fn records(&self) -> Vec<PodRecord> {
        self.inner
            .lock()
            .pods
            .values()
            .map(|r| PodRecord::clone(r))
            .collect()
    }

    /// Pods on a node in the authoritative view, and whether the node exists.
    #[must_use]
    pub fn node_pods(&self, node: &str) -> Option<Vec<PodKey>> {
        self.inner
            .lock()
            .nodes
            .get(node)
            .map(|n| n.pods.iter().map(|p| p.key.clone()).collect())
    }

    /// Ends every worker stream (shutdown): workers see the stream close and
    /// stop, so the gRPC server's graceful shutdown does not wait on them.
    pub fn close_streams(&self) {
        let mut inner = self.inner.lock();
        inner.closing = true;
        for w in inner.workers.values_mut() {
            w.tx = None;
        }
        self.closing.cancel();
    }

    /// Fires once [`Coordinator::close_streams`] was called: bind streams
    /// then stop taking proposals, answer those in flight, and end.
    #[must_use]
    pub fn closing(&self) -> tokio_util::sync::CancellationToken {
        self.closing.clone()
    }

    /// Whether every kind was listed once (pods are dispatched from then
    /// on): the coordinator's readiness.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        self.inner.lock().synced
    }

    /// Number of workers with an open stream.
    #[must_use]
    pub fn live_workers(&self) -> usize {
        self.inner
            .lock()
            .workers
            .values()
            .filter(|w| w.tx.is_some())
            .count()
    }
}

mod gang;
pub use gang::{GangDecision, desired_phase};
