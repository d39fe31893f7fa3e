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
//! # Layout
//! [`Coordinator`] is one `Inner` behind one lock; each file adds the
//! `impl` blocks of one seam:
//! - `sync.rs`: the cluster's change stream (lists, relists, each change
//!   applied) and the cluster writes decided under the lock.
//! - `pods.rs`: pod records, priority resolution, dispatch to workers.
//! - `nodes.rs`: nodes and the pods placed on them, orphans, namespaces,
//!   partitions.
//! - `bind.rs`: bind arbitration: the check, the grant, the Binding, the
//!   settling.
//! - `preemption.rs`: preemption arbitration, nominations, evictions.
//! - `gang.rs`: PodGroups and all-or-none gang grants.
//! - `workers.rs`: workers registering, their streams opening and closing,
//!   sends to them.
//! - `stream.rs`: what a worker's stream carries ([`WorkerEvent`]).
//! - `volumes.rs`: the volume objects, kept for the arbiter and forwarded.
//! - `report.rs`: failure reports, counters, the summary, records, the
//!   bind log.
//!
//! # Data flow
//! ```text
//! Cluster watch ──▶ apply ──▶ nodes / pod records ──▶ WorkerEvent per worker ──▶ grpc: WatchEvent
//! grpc: BindProposal ──▶ propose (check + grant under the lock) ──▶ Cluster::bind
//! ```
//! Nothing here speaks proto: [`crate::grpc`] turns requests into the
//! coordinator's types ([`PodRef`](crate::cluster::PodRef),
//! [`NodeRejection`], ...) and each [`WorkerEvent`] into its wire form.
//! Shared with the protocol is only its limit on the per-node reasons a
//! report carries and a record keeps (`MAX_NODE_STATUSES`).
//!
//! # Locking
//! One `parking_lot::Mutex` guards [`Inner`]. It is never held across an
//! `.await`: `propose` grants under the lock, releases it for the Binding
//! call, then re-takes it to settle. Sends to worker streams happen under the
//! lock (unbounded channels never block), which keeps each worker's stream in
//! the order the coordinator applied changes; an event is built once and
//! cloned per worker cheaply (shared JSON and names), and made a wire
//! message by each worker's stream, outside the lock.

use std::collections::{BTreeMap, HashMap, HashSet, VecDeque};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use parking_lot::Mutex;

use flotilla_shared::WorkloadClass;
use flotilla_shared::extender::HttpExtender;
use flotilla_shared::framework::{BindCheck, KeptCounts, ServedProfile, profiles_fingerprint};
use flotilla_shared::node_info::{NodeInfo, Orphans};
use flotilla_shared::priority::PriorityClasses;
use flotilla_shared::volumes::binding::VolumePlan;
use flotilla_shared::volumes::{VolumeKey, VolumeState};

use crate::cluster::Cluster;
use crate::partition::WorkerId;

mod bind;
mod gang;
mod nodes;
mod pods;
mod preemption;
mod report;
mod stream;
mod sync;
mod volumes;
mod workers;

pub use bind::{Arbitration, Decision, Grant, MAX_ALTERNATIVES_CHECKED};
pub use gang::{GangDecision, desired_phase};
pub use pods::{PodPhase, PodRecord};
pub use preemption::PreemptionDecision;
pub use report::{BindSample, Counters, NodeRejection, Summary};
pub use stream::{PodIdentity, WorkerEvent, WorkerTx};
pub use workers::{AttachError, ReportStanding};

use sync::Deferred;

/// How long a registration may wait for its `Watch` before it is dropped
/// (at the next registration): a client that registers and never watches
/// holds nothing for long.
pub const REGISTRATION_TTL: std::time::Duration = std::time::Duration::from_secs(60);

/// Most registrations waiting for their `Watch` at once: past it, each new
/// one drops the oldest (a client registering in a loop holds a bounded
/// table, and every lookup stays cheap).
pub const MAX_UNWATCHED_REGISTRATIONS: usize = 1024;

#[derive(Debug)]
struct WorkerEntry {
    name: Arc<str>,
    class: WorkloadClass,
    /// The session's secret: calls name the session as `<id>.<secret>`
    /// ([`Coordinator::session`]), so no client can act for another by
    /// guessing its (sequential) id.
    secret: String,
    /// When it registered; a registration never followed by `Watch`
    /// expires after [`REGISTRATION_TTL`].
    registered_at: std::time::Instant,
    /// The client certificate (DER) its `Register` came with, over mutual
    /// TLS: every later call must come over a connection presenting the
    /// same, so a credential is worth nothing to another worker.
    certificate: Option<Vec<u8>>,
    tx: Option<WorkerTx>,
    assigned: HashSet<Arc<str>>,
    partition: Vec<Arc<str>>,
    bound: u64,
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
    /// [`profiles_fingerprint`] of the profiles served: a registering
    /// worker must present the same.
    profiles_fingerprint: u64,
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
    /// Volume objects by key: their compact JSON, as sent to workers.
    volumes: BTreeMap<VolumeKey, Arc<[u8]>>,
    /// The volume objects compiled, for the arbiter's volume checks, with
    /// the bindings granted pods reserved shown as assumed.
    volume_state: VolumeState,
    /// Granted pods' volume bindings (uid → plan): assumed in
    /// `volume_state` until the pod is bound or its grant released.
    volume_plans: HashMap<Arc<str>, Arc<VolumePlan>>,
    /// Woken when a volume object changes (PreBind's wait).
    volumes_changed: Arc<tokio::sync::Notify>,
    /// Nominated pods: uid → node.
    nominated: HashMap<Arc<str>, Arc<str>>,
    /// Node → the uids nominated to it.
    nominations: HashMap<Arc<str>, Vec<Arc<str>>>,
    /// Victims being evicted: victim uid → preemptor uid.
    evicting: HashMap<Arc<str>, Arc<str>>,
    /// Cluster writes decided under the lock, made after it is released.
    deferred: Vec<Deferred>,
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
        let fingerprint = profiles_fingerprint(
            profiles
                .iter()
                .map(|p| (p.scheduler_name.as_str(), p.fingerprint)),
        );
        for p in profiles {
            for plugin in &p.unchecked_filters {
                tracing::warn!(
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
                profiles_fingerprint: fingerprint,
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

    /// Writes this coordinator made to its cluster so far (Bindings, status
    /// patches, events, evictions, nominations...; as
    /// `flotilla_api_writes_total`, which is process-wide).
    #[must_use]
    pub fn api_writes(&self) -> u64 {
        self.counted.writes()
    }

    /// The backend.
    #[must_use]
    pub fn cluster(&self) -> &Arc<dyn Cluster> {
        &self.cluster
    }
}
