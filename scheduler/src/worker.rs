//! A scheduler worker: connects to the coordinator, mirrors the cluster into
//! its node cache, and runs scheduling cycles for the pods assigned to it.
//!
//! # Threads and tasks
//! - **watch task** (async): coordinator events → cache and queue (the one
//!   writer of cluster state);
//! - **scheduling thread** (a plain OS thread, CPU-bound): pop → snapshot →
//!   Filter/Score → assume → hand the binding to a task; one cycle at a time,
//!   as upstream's scheduling cycle is serial;
//! - **binding** (async): every assumed pod's proposal goes on the
//!   session's bind stream ([`crate::bind_stream`]); a task reads the
//!   answers and confirms or forgets + re-queues each pod (one
//!   `ProposeBind` task per pod with a coordinator lacking the stream);
//! - **preemption tasks** (async): after an Unschedulable cycle in a profile
//!   with DefaultPreemption, `ProposePreemption` for the candidate the
//!   PostFilter chose ([`post_filter`]); the pod waits in the unschedulable
//!   pool either way, and the victims' deletions bring it back;
//! - **housekeeping task**: expires unconfirmed assumed pods, releases gang
//!   members that waited past their PodGroup's timeout, and flushes the
//!   unschedulable pool.
//!
//! Gang members (pods of a PodGroup, with `Coscheduling` enabled in their
//! profile) do not propose their bind alone: they wait assumed at Permit
//! until `minMember` are placed, then one binding task sends them all in
//! `ProposeGang` (see [`crate::gang`]).
//!
//! Data flows one way: events → cache → queue → cycle → bind.

use std::collections::{HashMap, VecDeque};
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::{Channel, Endpoint};
use tracing::{Instrument as _, debug, info, info_span, warn};

use flotilla_proto::v1 as pb;
use flotilla_proto::v1::coordinator_client::CoordinatorClient;
use flotilla_shared::extender::ExtenderConfig;
use flotilla_shared::framework::{ClusterEvent, Code, ExtensionPoint, FitError};
use flotilla_shared::http::HttpError;
use flotilla_shared::node_info::NodeSpec;
use flotilla_shared::trace;
use flotilla_shared::{PodInfo, WorkloadClass};

use crate::bind_stream::{self, BindStream};
use crate::cache::{DEFAULT_ASSUMED_POD_TTL, NodeCache, Snapshot};
use crate::extender::Extenders;
use crate::framework::{
    AttemptResult, Candidates, Framework, Profile, ProfileMap, Registry, RegistryError,
    ScheduleError, ScheduleResult,
};
use crate::gang::{self, GangBook, PermitOutcome, Placement};
use crate::pdbs::PdbStore;
use crate::plugins::coscheduling;
use crate::plugins::names;
use crate::preemption::{self, PostFilterOutcome};
use crate::queue::{QueueConfig, QueueLengths, QueuedPodInfo, SchedulingQueue};
use crate::webhook::{Ask, Resolution, Shard, Webhook};
use crate::window::ProposalWindow;

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Coordinator address, e.g. `http://127.0.0.1:7070`; several
    /// (replicas, of which one leads) are comma-separated and tried in turn
    /// on every (re)connect.
    pub coordinator: String,
    /// Name shown in logs and reports.
    pub name: String,
    /// The pool this worker serves.
    pub class: WorkloadClass,
    /// The profiles (`KubeSchedulerConfiguration.profiles`, merged): each
    /// pod runs the one named by its `spec.schedulerName`.
    pub profiles: Vec<Profile>,
    /// Queue timing (backoffs from the configuration).
    pub queue: QueueConfig,
    /// Expiry of assumed pods never confirmed. Defaults to 30 s.
    pub assumed_pod_ttl: Duration,
    /// How long to keep trying to join (connect and register with one of
    /// the addresses), at start and after the stream breaks. Defaults to
    /// 10 s.
    pub connect_timeout: Duration,
    /// The HTTP extenders every profile calls
    /// (`KubeSchedulerConfiguration.extenders`; see [`crate::extender`]).
    /// Their bind verb is the coordinator's to call.
    pub extenders: Vec<ExtenderConfig>,
}

impl WorkerConfig {
    /// Defaults for a worker of `class` named `name` talking to `coordinator`.
    #[must_use]
    pub fn new(coordinator: &str, name: &str, class: WorkloadClass) -> Self {
        WorkerConfig {
            coordinator: coordinator.to_owned(),
            name: name.to_owned(),
            class,
            profiles: vec![Profile::default()],
            queue: QueueConfig::default(),
            assumed_pod_ttl: DEFAULT_ASSUMED_POD_TTL,
            connect_timeout: Duration::from_secs(10),
            extenders: Vec::new(),
        }
    }
}

/// Why a worker stopped with an error.
#[derive(Debug, thiserror::Error)]
pub enum WorkerError {
    /// The profile could not be built.
    #[error("profile: {0}")]
    Profile(#[from] RegistryError),
    /// An extender or placement webhook client could not be built (TLS).
    #[error("{what}: {source}")]
    Http {
        /// Which extender or webhook.
        what: String,
        /// Cause.
        #[source]
        source: HttpError,
    },
    /// The coordinator address is malformed.
    #[error("coordinator address {addr:?}: {source}")]
    Address {
        /// The address.
        addr: String,
        /// Cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// The coordinator could not be reached in time.
    #[error("cannot reach the coordinator at {addr}: {source}")]
    Connect {
        /// The address.
        addr: String,
        /// Cause.
        #[source]
        source: tonic::transport::Error,
    },
    /// A call to the coordinator failed.
    #[error("coordinator call {call} failed: {status}")]
    Rpc {
        /// The RPC.
        call: &'static str,
        /// The status.
        status: Box<tonic::Status>,
    },
}

/// What a worker did (atomic counters, readable while it runs).
#[derive(Debug, Default)]
pub struct WorkerStats {
    /// Scheduling cycles run.
    pub attempts: AtomicU64,
    /// Pods bound through this worker.
    pub bound: AtomicU64,
    /// Proposals the arbiter rejected.
    pub conflicts: AtomicU64,
    /// Proposals the arbiter granted on one of their alternatives (the
    /// proposed node's room was taken first).
    pub alternatives: AtomicU64,
    /// Cycles that found no node.
    pub unschedulable: AtomicU64,
    /// Placements outside the worker's partition (fallback).
    pub fallbacks: AtomicU64,
    /// Internal errors (plugin errors, failed RPCs).
    pub errors: AtomicU64,
    /// Nanoseconds spent in scheduling cycles.
    pub cycle_nanos: AtomicU64,
    /// Nanoseconds spent in cycles whose decision the arbiter rejected.
    pub wasted_nanos: AtomicU64,
    /// Queue sizes, refreshed every 200 ms.
    pub queue: parking_lot::Mutex<QueueLengths>,
    /// Set once the worker registered and replayed the coordinator's view.
    pub ready: std::sync::atomic::AtomicBool,
    /// Times the coordinator stream broke (each followed by an attempt to
    /// register again, which may fail and end the worker).
    pub reconnects: AtomicU64,
    /// Preemption proposals sent (`ProposePreemption`).
    pub preemption_attempts: AtomicU64,
    /// Victims of the preemptions the coordinator granted.
    pub preemption_victims: AtomicU64,
    /// The extenders this worker calls (their call counters), once built.
    pub extenders: std::sync::OnceLock<Arc<Extenders>>,
    /// The placement webhooks, by profile (their counters), once built.
    pub webhooks: std::sync::OnceLock<Vec<(String, Arc<Webhook>)>>,
}

impl WorkerStats {
    /// Whether the worker holds no pod: nothing queued, backing off or in
    /// flight (unschedulable pods may remain parked).
    #[must_use]
    pub fn is_idle(&self) -> bool {
        let q = *self.queue.lock();
        q.active == 0 && q.backoff == 0 && q.in_flight == 0
    }
}

struct Shared {
    id: String,
    client: CoordinatorClient<Channel>,
    cache: NodeCache,
    queue: SchedulingQueue,
    frameworks: ProfileMap,
    stats: Arc<WorkerStats>,
    tracker: TaskTracker,
    runtime: tokio::runtime::Handle,
    /// Caps unary proposals in flight ([`MAX_BINDS_IN_FLIGHT`]).
    binds: Arc<tokio::sync::Semaphore>,
    /// The session's bind stream (`BindStream`), which every single-pod
    /// proposal takes; `None` with a coordinator that predates it, whose
    /// proposals go one `ProposeBind` call each.
    bind_stream: Option<Arc<BindStream<InFlightBind>>>,
    /// Set once the session is ending: failures then are expected, not news.
    stopping: std::sync::atomic::AtomicBool,
    /// PodGroups, members and the members waiting at Permit.
    gangs: Arc<GangBook>,
    /// PodDisruptionBudgets, for preemption.
    pdbs: PdbStore,
    /// Who asks a placement webhook (worker name, pool).
    shard: (String, WorkloadClass),
    /// Placement webhooks by profile name.
    webhooks: HashMap<String, Arc<Webhook>>,
    /// This worker's handles into the process metrics.
    metrics: WorkerMetrics,
    /// How many placements may wait for the cluster's confirmation.
    window: ProposalWindow,
    /// Per pod: the trace to continue (from its dispatch) and its last
    /// attempt's span (to link the next one to). Filled only when tracing
    /// is on; dropped when the pod leaves the worker.
    traces: parking_lot::Mutex<HashMap<Arc<str>, PodTrace>>,
}

/// A pod's trace contexts ([`Shared::traces`]).
#[derive(Debug, Default)]
struct PodTrace {
    parent: Option<trace::Carrier>,
    last: Option<trace::Carrier>,
}

/// A worker's labelled handles into the process metrics
/// ([`flotilla_shared::metrics`]).
struct WorkerMetrics {
    busy: prometheus::Counter,
    wasted: prometheus::Counter,
    /// bound, conflict, error, pod_gone.
    proposals: [prometheus::IntCounter; 5],
    /// active, backoff, unschedulable, gated.
    pending: [prometheus::IntGauge; 4],
    /// nodes, pods, assumed_pods.
    cache: [prometheus::IntGauge; 3],
    pod_attempts: prometheus::Histogram,
}

impl WorkerMetrics {
    fn new(worker: &str, class: WorkloadClass) -> Self {
        let m = flotilla_shared::metrics::metrics();
        let class = class.to_string();
        let class = class.as_str();
        WorkerMetrics {
            busy: m.busy_seconds.with_label_values(&[worker, class]),
            wasted: m.wasted_seconds.with_label_values(&[worker, class]),
            proposals: [
                "bound",
                "conflict",
                "error",
                "pod_gone",
                "bound_alternative",
            ]
            .map(|o| m.bind_proposals.with_label_values(&[worker, class, o])),
            pending: ["active", "backoff", "unschedulable", "gated"]
                .map(|q| m.pending_pods.with_label_values(&[q, worker])),
            cache: ["nodes", "pods", "assumed_pods"]
                .map(|t| m.cache_size.with_label_values(&[t, worker])),
            pod_attempts: m.pod_attempts.with_label_values(&[class]),
        }
    }
}

/// One attempt's history, for the metrics: when its cycle started, and the
/// pod's failed attempts and first queueing.
#[derive(Debug, Clone, Copy)]
struct Attempt {
    started: Instant,
    attempts: u32,
    queued: Instant,
}

impl Attempt {
    fn of(qp: &QueuedPodInfo, started: Instant) -> Self {
        Attempt {
            started,
            attempts: qp.attempts,
            queued: qp.initial_attempt,
        }
    }
}

fn pb_ref(p: &PodInfo) -> pb::PodRef {
    pb::PodRef {
        namespace: p.key.namespace.to_string(),
        name: p.key.name.to_string(),
        uid: p.uid.to_string(),
    }
}

/// Compiles a pod the coordinator sent, keeping its JSON rather than the
/// decoded object (see [`PodInfo::from_json`]): a worker holds every pod of
/// the cluster, and the object itself is read only by extenders, webhooks
/// and preemption's victim check.
fn parse_pod(raw: &pb::RawObject) -> Option<Arc<PodInfo>> {
    match PodInfo::from_json(&raw.json) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            warn!(error = %e, "coordinator sent a pod that cannot be read");
            None
        }
    }
}

/// Compiles a node the coordinator sent, keeping its JSON rather than the
/// decoded `Node` ([`NodeSpec::from_json`]).
fn parse_node(raw: &pb::RawObject) -> Option<NodeSpec> {
    NodeSpec::from_json(&raw.json)
        .map_err(|e| warn!(error = %e, "coordinator sent a node that cannot be read"))
        .ok()
}

/// Whether a failed Register/Watch means "try another replica" (a standby
/// coordinator, or one shutting down) rather than a broken request.
fn try_elsewhere(status: &tonic::Status) -> bool {
    matches!(
        status.code(),
        tonic::Code::Unavailable | tonic::Code::FailedPrecondition | tonic::Code::NotFound
    )
}

/// Connects, registers and opens the watch stream, trying the coordinator
/// addresses (`cfg.coordinator`, comma-separated) in turn until one accepts,
/// for up to `connect_timeout` (with backoff between rounds).
async fn join(
    cfg: &WorkerConfig,
    class: pb::WorkloadClass,
) -> Result<
    (
        CoordinatorClient<Channel>,
        pb::RegisterResponse,
        tonic::Streaming<pb::WatchEvent>,
    ),
    WorkerError,
> {
    let mut endpoints = Vec::new();
    for addr in cfg
        .coordinator
        .split(',')
        .map(str::trim)
        .filter(|a| !a.is_empty())
    {
        let ep = Endpoint::from_shared(addr.to_owned()).map_err(|source| WorkerError::Address {
            addr: addr.to_owned(),
            source,
        })?;
        endpoints.push((addr.to_owned(), ep));
    }
    if endpoints.is_empty() {
        // No address at all: let the URI parser say what is wrong with it.
        let ep = Endpoint::from_shared(cfg.coordinator.clone()).map_err(|source| {
            WorkerError::Address {
                addr: cfg.coordinator.clone(),
                source,
            }
        })?;
        endpoints.push((cfg.coordinator.clone(), ep));
    }
    let deadline = Instant::now() + cfg.connect_timeout;
    let mut delay = Duration::from_millis(50);
    loop {
        let mut last = None;
        for (addr, endpoint) in &endpoints {
            let ch = match endpoint.connect().await {
                Ok(ch) => ch,
                Err(source) => {
                    last = Some(WorkerError::Connect {
                        addr: addr.clone(),
                        source,
                    });
                    continue;
                }
            };
            let mut client = CoordinatorClient::new(ch)
                .max_decoding_message_size(64 * 1024 * 1024)
                .max_encoding_message_size(64 * 1024 * 1024);
            let rpc = |call: &'static str, s: tonic::Status| WorkerError::Rpc {
                call,
                status: Box::new(s),
            };
            let reg = match client
                .register(pb::RegisterRequest {
                    worker_name: cfg.name.clone(),
                    workload_class: class.into(),
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) if try_elsewhere(&s) => {
                    debug!(%addr, status = %s, "coordinator refused the registration; trying the next");
                    last = Some(rpc("Register", s));
                    continue;
                }
                Err(s) => return Err(rpc("Register", s)),
            };
            let stream = match client
                .watch(pb::WatchRequest {
                    worker_id: reg.worker_id.clone(),
                })
                .await
            {
                Ok(r) => r.into_inner(),
                Err(s) if try_elsewhere(&s) => {
                    last = Some(rpc("Watch", s));
                    continue;
                }
                Err(s) => return Err(rpc("Watch", s)),
            };
            if endpoints.len() > 1 {
                info!(worker = %cfg.name, coordinator = %addr, "joined");
            }
            return Ok((client, reg, stream));
        }
        // `endpoints` is not empty, so every round leaves an error.
        if let Some(e) = last
            && Instant::now() >= deadline
        {
            return Err(e);
        }
        tokio::time::sleep(delay).await;
        delay = (delay * 2).min(Duration::from_secs(1));
    }
}

/// How long a stopping worker waits for the cycle in progress to end.
const SCHEDULER_THREAD_JOIN: Duration = Duration::from_secs(2);

/// Most bind proposals one worker keeps in flight. Beyond it, binding tasks
/// wait their turn: an unbounded burst of small requests on one HTTP/2
/// connection trips h2's flood guard (`ENHANCE_YOUR_CALM`), and a slow
/// coordinator gains nothing from a deeper backlog.
pub const MAX_BINDS_IN_FLIGHT: usize = 64;

/// HTTP/2 flow-control windows for the coordinator connection (bytes). The
/// watch stream carries the whole cluster, so the defaults (64 KiB) would
/// throttle it.
pub const STREAM_WINDOW_BYTES: u32 = 4 << 20;
/// See [`STREAM_WINDOW_BYTES`].
pub const CONNECTION_WINDOW_BYTES: u32 = 16 << 20;

/// How a session with the coordinator ended.
enum SessionEnd {
    /// Our shutdown signal fired.
    Shutdown,
    /// The coordinator ended the stream cleanly (it is shutting down).
    Closed,
    /// The stream broke (connection lost, coordinator crashed).
    Failed(tonic::Status),
}

/// Runs a worker until `shutdown` fires or the coordinator ends the stream
/// cleanly (with several coordinator addresses, a clean end makes it join
/// another replica instead). If the stream breaks, the worker registers again (a new session:
/// its pods were re-dispatched by the coordinator, and the replay rebuilds
/// its cache), giving up with [`WorkerError::Connect`] when the coordinator
/// stays unreachable for `connect_timeout`. On shutdown it stops taking pods,
/// lets in-flight bindings settle, then returns. `stats` is updated while it
/// runs.
///
/// # Errors
/// See [`WorkerError`].
pub async fn run(
    cfg: WorkerConfig,
    registry: &Registry,
    stats: Arc<WorkerStats>,
    shutdown: CancellationToken,
) -> Result<(), WorkerError> {
    // Extender and webhook clients live across sessions (their counters
    // and connection pools with them).
    let extenders =
        Arc::new(
            Extenders::new(&cfg.extenders).map_err(|source| WorkerError::Http {
                what: "extenders".into(),
                source,
            })?,
        );
    let mut webhooks = HashMap::new();
    for p in &cfg.profiles {
        if let Some(w) = &p.webhook {
            let hook = Webhook::new(w.clone()).map_err(|source| WorkerError::Http {
                what: format!("profile {:?}: placementWebhook", p.scheduler_name),
                source,
            })?;
            webhooks.insert(p.scheduler_name.clone(), Arc::new(hook));
        }
    }
    let _ = stats.extenders.set(extenders.clone());
    let _ = stats.webhooks.set(
        webhooks
            .iter()
            .map(|(k, v)| (k.clone(), v.clone()))
            .collect(),
    );
    loop {
        // Each session has its own gang book, read by its Coscheduling.
        let gangs = Arc::new(GangBook::new());
        let mut registry = registry.clone();
        registry.replace(
            coscheduling::NAME,
            crate::framework::registry::coscheduling_factory(gangs.clone()),
        );
        let frameworks = ProfileMap::with_extenders(&cfg.profiles, &registry, &extenders)?;
        let end = session(
            &cfg,
            frameworks,
            gangs,
            webhooks.clone(),
            stats.clone(),
            shutdown.clone(),
        )
        .await;
        // This session's queue is gone (its pods are the coordinator's again).
        *stats.queue.lock() = QueueLengths::default();
        stats.ready.store(false, Ordering::Release);
        match end? {
            SessionEnd::Closed if cfg.coordinator.contains(',') => {
                // One replica stepped down cleanly (a rolling restart, a
                // leader releasing its lease): join whichever leads now.
                info!(worker = %cfg.name, "coordinator closed the stream; joining another replica");
                stats.reconnects.fetch_add(1, Ordering::Relaxed);
            }
            SessionEnd::Shutdown | SessionEnd::Closed => return Ok(()),
            SessionEnd::Failed(status) => {
                warn!(worker = %cfg.name, %status, "coordinator stream broke; registering again");
                stats.reconnects.fetch_add(1, Ordering::Relaxed);
                tokio::select! {
                    () = shutdown.cancelled() => return Ok(()),
                    () = tokio::time::sleep(Duration::from_millis(500)) => {}
                }
            }
        }
    }
}

async fn session(
    cfg: &WorkerConfig,
    frameworks: ProfileMap,
    gangs: Arc<GangBook>,
    webhooks: HashMap<String, Arc<Webhook>>,
    stats: Arc<WorkerStats>,
    shutdown: CancellationToken,
) -> Result<SessionEnd, WorkerError> {
    let class = match cfg.class {
        WorkloadClass::Online => pb::WorkloadClass::Online,
        WorkloadClass::Batch => pb::WorkloadClass::Batch,
    };
    let (mut client, reg, mut stream) = join(cfg, class).await?;
    info!(worker = %cfg.name, id = %reg.worker_id, epoch = reg.epoch, "registered");
    let (bind_stream, answers) = match BindStream::open(&mut client, &reg.worker_id).await {
        Ok((b, answers)) => (Some(b), Some(answers)),
        Err(status) if status.code() == tonic::Code::Unimplemented => {
            info!(worker = %cfg.name, "coordinator has no BindStream; proposing one call per pod");
            (None, None)
        }
        Err(status) => {
            return Err(WorkerError::Rpc {
                call: "BindStream",
                status: Box::new(status),
            });
        }
    };

    let interest = frameworks.event_interest();
    let mut queue_cfg = cfg.queue;
    // Gates hold pods back only where the profile runs SchedulingGates
    // (upstream: without the PreEnqueue plugin, gated pods are scheduled).
    queue_cfg.honour_scheduling_gates &=
        frameworks.any_enables(ExtensionPoint::PreEnqueue, names::SCHEDULING_GATES);
    let shared = Arc::new(Shared {
        id: reg.worker_id,
        client,
        cache: NodeCache::new(cfg.assumed_pod_ttl),
        queue: SchedulingQueue::new(queue_cfg, interest),
        frameworks,
        stats,
        tracker: TaskTracker::new(),
        runtime: tokio::runtime::Handle::current(),
        binds: Arc::new(tokio::sync::Semaphore::new(MAX_BINDS_IN_FLIGHT)),
        bind_stream: bind_stream.clone(),
        stopping: std::sync::atomic::AtomicBool::new(false),
        gangs,
        pdbs: PdbStore::new(),
        shard: (cfg.name.clone(), cfg.class),
        webhooks,
        metrics: WorkerMetrics::new(&cfg.name, cfg.class),
        window: ProposalWindow::default(),
        traces: parking_lot::Mutex::new(HashMap::new()),
    });

    if let (Some(b), Some(answers)) = (bind_stream.clone(), answers) {
        let s = shared.clone();
        shared
            .tracker
            .spawn(b.run_answers(answers, move |p, answer| {
                p.span.record("outcome", answer.outcome.as_str_name());
                let _enter = p.span.enter();
                settle_binding(&s, &p.pod, &p.node, &answer, p.cycle, p.attempt);
            }));
    }
    let stop = shutdown.child_token();
    let mut scheduler_thread = None;
    let housekeeping = tokio::spawn(housekeeping(shared.clone(), stop.clone()));
    let end = loop {
        let msg = tokio::select! {
            () = stop.cancelled() => break SessionEnd::Shutdown,
            m = stream.next() => m,
        };
        let (event, trace_context) = match msg {
            Some(Ok(pb::WatchEvent {
                event: Some(e),
                trace_context,
            })) => (e, trace_context),
            Some(Ok(_)) => continue,
            Some(Err(status)) => break SessionEnd::Failed(status),
            None => {
                info!(worker = %cfg.name, "coordinator closed the stream");
                break SessionEnd::Closed;
            }
        };
        if let pb::watch_event::Event::Synced(_) = event {
            shared.stats.ready.store(true, Ordering::Release);
            if scheduler_thread.is_none() {
                let s = shared.clone();
                let name = cfg.name.clone();
                scheduler_thread = Some(
                    std::thread::Builder::new()
                        .name(format!("sched-{name}"))
                        .spawn(move || scheduling_loop(&s, &name))
                        .expect("spawning the scheduling thread"),
                );
            }
            continue;
        }
        if let Err(why) = apply_event(&shared, event, trace_context) {
            warn!(worker = %cfg.name, %why, "out of step with the coordinator; registering again");
            break SessionEnd::Failed(tonic::Status::aborted(why));
        }
    };

    // Stop intake, let the cycle in progress finish, let bindings settle.
    shared.stopping.store(true, Ordering::Release);
    stop.cancel();
    shared.queue.close();
    if let Some(t) = scheduler_thread {
        // A cycle blocked on a slow extender or webhook (up to its timeout)
        // must not hold the shutdown: past a short wait the thread is left
        // to end on its own (it places nothing once stopping is set).
        let joined = tokio::task::spawn_blocking(move || t.join());
        if tokio::time::timeout(SCHEDULER_THREAD_JOIN, joined)
            .await
            .is_err()
        {
            debug!(worker = %cfg.name, "the scheduling cycle in progress is still waiting; not waiting for it");
        }
    }
    // No more proposals: the coordinator answers those in flight, then
    // ends the stream, and its reader task ends.
    if let Some(b) = &shared.bind_stream {
        b.close();
    }
    shared.tracker.close();
    let _ = tokio::time::timeout(Duration::from_secs(10), shared.tracker.wait()).await;
    let _ = housekeeping.await;
    Ok(end)
}

/// Attaches a cycle's span to the pod's trace: the coordinator's dispatch
/// for its first attempt (continued as its child), else a link to its
/// previous attempt; remembers this attempt for the next. Nothing when
/// tracing is off.
fn attach_trace(s: &Shared, span: &tracing::Span, uid: &Arc<str>) {
    if !trace::enabled() {
        return;
    }
    let mut traces = s.traces.lock();
    let t = traces.entry(uid.clone()).or_default();
    match t.parent.take() {
        Some(parent) => trace::set_parent(span, &parent),
        None => {
            if let Some(last) = &t.last {
                trace::link(span, last);
            }
        }
    }
    t.last = Some(trace::inject(span));
}

/// Drops a pod's trace contexts (it left this worker, or bound).
fn forget_trace(s: &Shared, uid: &str) {
    if trace::enabled() {
        s.traces.lock().remove(uid);
    }
}

/// Applies one event from the coordinator; `trace_context` is the
/// dispatch span's context sent with an assigned pod (empty when tracing is
/// off), which its next scheduling cycle continues.
///
/// # Errors
/// The event contradicts this worker's state (a `pod_bound` for a pod it
/// does not hold assumed): the session must start over, from a replay.
fn apply_event(
    s: &Shared,
    event: pb::watch_event::Event,
    trace_context: trace::Carrier,
) -> Result<(), String> {
    use pb::watch_event::Event;
    let now = Instant::now();
    match event {
        Event::NodeUpsert(raw) => {
            if let Some(spec) = parse_node(&raw) {
                for ev in s.cache.upsert_node(spec) {
                    s.queue.on_event(ev, now);
                }
            }
        }
        Event::NodeDeleted(d) => s.cache.remove_node(&d.name),
        Event::PodBound(b) => {
            let (uid, node) = (b.pod.map(|p| p.uid).unwrap_or_default(), b.node_name);
            // Assumed elsewhere: the arbiter granted one of the proposal's
            // alternatives and this confirmation overtook its answer.
            let confirmed = s.cache.confirm_assumed(&uid, &node).or_else(|| {
                s.cache
                    .move_assumed(&uid, &node)
                    .then(|| s.cache.confirm_assumed(&uid, &node))
                    .flatten()
            });
            let Some(pod) = confirmed else {
                return Err(format!(
                    "the coordinator confirmed pod {uid} on {node}, which this worker does not hold assumed there"
                ));
            };
            s.gangs.pod_bound(&pod);
            s.queue.on_event(ClusterEvent::AssignedPodAdded, now);
        }
        Event::BoundPod(raw) => {
            if let Some(pod) = parse_pod(&raw) {
                s.gangs.pod_bound(&pod);
                // Bound by anyone: not ours to schedule any more.
                if !s.cache.is_assumed(&pod.uid) {
                    s.queue.delete(&pod.uid);
                }
                s.cache.add_bound_pod(pod);
                s.queue.on_event(ClusterEvent::AssignedPodAdded, now);
            }
        }
        Event::PodDeleted(r) => {
            forget_trace(s, &r.uid);
            s.gangs.pod_gone(&r.uid);
            s.queue.delete(&r.uid);
            if s.cache.remove_pod(&r.uid) {
                s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
            }
        }
        Event::AssignedPod(raw) => {
            if let Some(pod) = parse_pod(&raw) {
                if !trace_context.is_empty() {
                    s.traces.lock().entry(pod.uid.clone()).or_default().parent =
                        Some(trace_context);
                }
                // Its own nomination (status.nominatedNodeName) holds room
                // for it against lower-priority pods of this worker.
                match pod.nominated_node_name.as_deref() {
                    Some(node) => s.cache.set_nominated(pod.clone(), node),
                    None => {
                        s.cache.clear_nominated(&pod.uid);
                    }
                }
                // A new pod, or an update (e.g. its last scheduling gate
                // removed): the queue re-checks its gates either way.
                let member = s.gangs.pod_pending(&pod);
                s.queue.add(pod, now);
                if member {
                    s.queue.on_event(ClusterEvent::UnscheduledPodAdded, now);
                }
            }
        }
        Event::UnassignedPod(r) => {
            forget_trace(s, &r.uid);
            if !s.gangs.is_bound(&r.uid) {
                s.gangs.pod_gone(&r.uid);
            }
            s.queue.delete(&r.uid);
        }
        Event::PodGroupUpsert(raw) => {
            match serde_json::from_slice::<flotilla_shared::pod_group::PodGroup>(&raw.json) {
                Ok(g) => {
                    s.gangs.apply_group(Arc::new(g));
                    s.queue.on_event(ClusterEvent::PodGroupChanged, now);
                }
                Err(e) => warn!(error = %e, "coordinator sent a PodGroup that does not parse"),
            }
        }
        Event::PodGroupDeleted(name) => s.gangs.delete_group(&name),
        Event::Partition(p) => {
            debug!(nodes = p.node_names.len(), epoch = p.epoch, "partition");
            s.cache
                .set_partition(p.node_names.iter().map(|n| Arc::from(n.as_str())));
        }
        Event::NamespaceUpsert(ns) => {
            s.cache
                .upsert_namespace(&ns.name, ns.labels.into_iter().collect());
        }
        Event::NamespaceDeleted(name) => s.cache.remove_namespace(&name),
        Event::Synced(_) => {}
        Event::PdbUpsert(raw) => match serde_json::from_slice::<PodDisruptionBudget>(&raw.json) {
            Ok(pdb) => s.pdbs.upsert(pdb),
            Err(e) => {
                warn!(error = %e, "coordinator sent a PodDisruptionBudget that does not parse")
            }
        },
        Event::PdbDeleted(r) => {
            s.pdbs.remove(&r.namespace, &r.name);
        }
        Event::NominatedPod(n) => {
            if let Some(pod) = n.pod.as_ref().and_then(parse_pod) {
                debug!(pod = %pod.key, node = %n.node_name, "nominated");
                // Ours: its next cycle tries the nominated node first.
                s.queue
                    .set_nominated_node(&pod.uid, Some(Arc::from(n.node_name.as_str())));
                s.cache.set_nominated(pod, &n.node_name);
            }
        }
        Event::NominationCleared(r) => {
            debug!(uid = %r.uid, "nomination cleared");
            s.queue.set_nominated_node(&r.uid, None);
            s.cache.clear_nominated(&r.uid);
        }
    }
    Ok(())
}

async fn housekeeping(s: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let lengths = s.queue.lengths();
        *s.stats.queue.lock() = lengths;
        for (g, v) in s.metrics.pending.iter().zip([
            lengths.active,
            lengths.backoff,
            lengths.unschedulable,
            lengths.gated,
        ]) {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        let (nodes, pods, assumed) = s.cache.sizes();
        for (g, v) in s.metrics.cache.iter().zip([nodes, pods, assumed]) {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        let now = Instant::now();
        for key in s.cache.cleanup_expired(now) {
            warn!(pod = %key, "assumed pod expired without confirmation");
            s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
        }
        for (group, waited, members) in s.gangs.take_expired(now) {
            info!(pod_group = %group, members = members.len(), "gang members waited past the timeout; releasing them");
            let message = format!(
                "rejected due to timeout after waiting {} at plugin {}",
                gang::go_duration(waited),
                coscheduling::NAME
            );
            for (i, (pod, _)) in members.iter().enumerate() {
                s.cache.forget(&pod.uid);
                s.queue.add_backoff(&pod.uid, now);
                let kind = if i == 0 {
                    Report::GangTimeout
                } else {
                    Report::Unschedulable
                };
                report(&s, pod, message.clone(), Vec::new(), kind);
            }
            s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
        }
        s.queue.flush_unschedulable_leftover(now);
        s.queue.notify();
    }
}

#[allow(clippy::cast_possible_truncation)]
fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
}

/// How long the scheduling thread waits for confirmations before it goes
/// on anyway (a stalled confirmation must not stop scheduling).
const UNCONFIRMED_WAIT: Duration = Duration::from_secs(1);

fn scheduling_loop(s: &Arc<Shared>, worker: &str) {
    let mut snapshot = Snapshot::default();
    // Pods popped while filling a webhook batch that belong elsewhere.
    let mut later: VecDeque<QueuedPodInfo> = VecDeque::new();
    loop {
        let next = match later.pop_front() {
            Some(qp) => Some(qp),
            None => s.queue.pop_blocking(Duration::from_millis(200)),
        };
        // Run no further ahead of the cluster's confirmations than the
        // window allows (see `crate::window`).
        s.cache.wait_for_room(s.window.size(), UNCONFIRMED_WAIT);
        match next {
            Some(qp) => match batched_webhook(s, &qp) {
                None => schedule_one(s, worker, &mut snapshot, qp),
                Some(hook) => {
                    let batch = fill_batch(s, qp, &hook, &mut later);
                    schedule_batch(s, worker, &mut snapshot, &hook, batch);
                }
            },
            None if s.queue.is_closed() => return,
            None => {}
        }
    }
}

/// The batched placement webhook of `qp`'s profile, if it has one.
fn batched_webhook(s: &Shared, qp: &QueuedPodInfo) -> Option<Arc<Webhook>> {
    s.webhooks
        .get(&*qp.pod.scheduler_name)
        .filter(|w| w.config().is_batched())
        .cloned()
}

/// `first` and more pods of its profile, up to `batch.maxPods`, waiting at
/// most `batch.maxWait` for them; pods of other profiles popped meanwhile go
/// to `later` (scheduled next, in order).
fn fill_batch(
    s: &Shared,
    first: QueuedPodInfo,
    hook: &Webhook,
    later: &mut VecDeque<QueuedPodInfo>,
) -> Vec<QueuedPodInfo> {
    let profile = first.pod.scheduler_name.clone();
    let cfg = hook.config().batch;
    let deadline = Instant::now() + cfg.max_wait;
    let mut batch = vec![first];
    // Pods already popped for later that belong here come first.
    let mut i = 0;
    while i < later.len() && batch.len() < cfg.max_pods {
        if later[i].pod.scheduler_name == profile {
            batch.extend(later.remove(i));
        } else {
            i += 1;
        }
    }
    while batch.len() < cfg.max_pods {
        let wait = deadline.saturating_duration_since(Instant::now());
        match s.queue.pop_blocking(wait) {
            None => break,
            Some(qp) if qp.pod.scheduler_name == profile => batch.push(qp),
            Some(qp) => later.push_back(qp),
        }
    }
    batch
}

/// The no-profile case: the coordinator serves a scheduler name this
/// worker's configuration lacks (both must load the same file).
fn no_profile(s: &Arc<Shared>, pod: &Arc<PodInfo>) {
    let message = format!(
        "no profile for schedulerName {:?} in this worker's configuration",
        pod.scheduler_name
    );
    warn!(%message, "cannot schedule the pod");
    s.stats.errors.fetch_add(1, Ordering::Relaxed);
    s.queue
        .add_unschedulable(&pod.uid, Default::default(), Instant::now());
    report_unschedulable(s, pod, message, Vec::new());
}

fn shard(s: &Shared, framework: &Framework) -> Shard {
    Shard {
        worker: s.shard.0.clone(),
        workload_class: s.shard.1.to_string(),
        profile: framework.profile_name().to_owned(),
    }
}

fn schedule_one(s: &Arc<Shared>, worker: &str, snapshot: &mut Snapshot, qp: QueuedPodInfo) {
    let pod = qp.pod.clone();
    let span = info_span!(
        "scheduling_cycle",
        pod = %pod.key,
        worker,
        class = %pod.class,
        profile = %pod.scheduler_name,
        attempt = qp.attempts + 1,
        evaluated = tracing::field::Empty,
        feasible = tracing::field::Empty,
        node = tracing::field::Empty,
        score = tracing::field::Empty,
        result = tracing::field::Empty,
    );
    attach_trace(s, &span, &pod.uid);
    let _enter = span.enter();
    let start = Instant::now();
    let Some(framework) = s.frameworks.for_pod(&pod) else {
        no_profile(s, &pod);
        return;
    };
    s.cache.update_snapshot(snapshot);
    s.stats.attempts.fetch_add(1, Ordering::Relaxed);
    let result = match s.webhooks.get(framework.profile_name()) {
        None => framework.schedule(&pod, snapshot),
        Some(hook) => {
            let (result, candidates) = framework.schedule_with_candidates(&pod, snapshot);
            match result {
                Ok(r) => {
                    let snap = &*snapshot;
                    let node_of = |n: &str| snap.get(n).map(|i| i.spec.node());
                    let ask = Ask {
                        pod: &pod,
                        candidates: &candidates,
                        in_process: &r.node,
                        node_of: &node_of,
                    };
                    let answer = hook.decide(&shard(s, framework), &ask);
                    let feasible = |n: &str| {
                        candidates
                            .iter()
                            .find(|(c, _)| &**c == n)
                            .map(|(c, _)| c.clone())
                    };
                    match hook.resolve(answer, feasible, &r.node) {
                        // The service decides: no alternatives for the
                        // arbiter to grant instead.
                        Resolution::Place { node, .. } => Ok(ScheduleResult {
                            node,
                            alternatives: Vec::new(),
                            ..r
                        }),
                        Resolution::Pending { message, declined } => {
                            let attempt = Attempt::of(&qp, start);
                            leave_pending(s, framework, &pod, message, declined, attempt);
                            return;
                        }
                    }
                }
                Err(e) => Err(e),
            }
        }
    };
    let cycle = start.elapsed();
    finish_cycle(
        s,
        framework,
        &pod,
        snapshot,
        result,
        cycle,
        Attempt::of(&qp, start),
    );
}

/// A webhook left the pod pending, reported with `message`: a pod the
/// service declined waits in the unschedulable pool for a cluster event
/// (no plugin recorded: any event retries it); after a failure it backs
/// off, as after any error.
fn leave_pending(
    s: &Arc<Shared>,
    framework: &Framework,
    pod: &Arc<PodInfo>,
    message: String,
    declined: bool,
    attempt: Attempt,
) {
    let cycle = attempt.started.elapsed();
    s.stats
        .cycle_nanos
        .fetch_add(nanos(cycle), Ordering::Relaxed);
    s.metrics.busy.inc_by(cycle.as_secs_f64());
    framework.metrics().attempt(
        if declined {
            AttemptResult::Unschedulable
        } else {
            AttemptResult::Error
        },
        cycle,
    );
    debug!(pod = %pod.key, %message, declined, "left pending by the placement webhook");
    let now = Instant::now();
    if declined {
        s.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
        s.queue.add_unschedulable(&pod.uid, Default::default(), now);
    } else {
        s.stats.errors.fetch_add(1, Ordering::Relaxed);
        s.queue.add_backoff(&pod.uid, now);
    }
    let kind = if declined {
        Report::Unschedulable
    } else {
        Report::Error
    };
    report(s, pod, message, Vec::new(), kind);
}

/// One batched webhook round: every pod's in-process cycle over the same
/// snapshot, one call for those that fit somewhere, then each decision
/// applied in order, its node re-checked (Filter) against the cache with
/// the batch's earlier pods assumed.
fn schedule_batch(
    s: &Arc<Shared>,
    worker: &str,
    snapshot: &mut Snapshot,
    hook: &Webhook,
    batch: Vec<QueuedPodInfo>,
) {
    let span = info_span!("webhook_batch", worker, pods = batch.len());
    let _enter = span.enter();
    let start = Instant::now();
    s.cache.update_snapshot(snapshot);
    // (pod, its in-process result, its candidates, its attempt)
    let mut placed: Vec<(Arc<PodInfo>, ScheduleResult, Candidates, Attempt)> = Vec::new();
    let Some(framework) = s.frameworks.for_pod(&batch[0].pod) else {
        for qp in &batch {
            no_profile(s, &qp.pod);
        }
        return;
    };
    for qp in &batch {
        s.stats.attempts.fetch_add(1, Ordering::Relaxed);
        let t = Instant::now();
        let (result, candidates) = framework.schedule_with_candidates(&qp.pod, snapshot);
        let attempt = Attempt::of(qp, t);
        match result {
            Ok(r) => placed.push((qp.pod.clone(), r, candidates, attempt)),
            Err(e) => finish_cycle(
                s,
                framework,
                &qp.pod,
                snapshot,
                Err(e),
                t.elapsed(),
                attempt,
            ),
        }
    }
    if placed.is_empty() {
        return;
    }
    let answers = {
        let snap = &*snapshot;
        let node_of = |n: &str| snap.get(n).map(|i| i.spec.node());
        let asks: Vec<Ask<'_>> = placed
            .iter()
            .map(|(pod, r, candidates, _)| Ask {
                pod,
                candidates,
                in_process: &r.node,
                node_of: &node_of,
            })
            .collect();
        hook.decide_batch(&shard(s, framework), &asks)
    };
    // The call's time, shared among the pods it decided.
    let share = start.elapsed() / u32::try_from(placed.len()).unwrap_or(u32::MAX).max(1);
    for (i, (pod, r, candidates, attempt)) in placed.into_iter().enumerate() {
        // Earlier pods of this batch are assumed now.
        s.cache.update_snapshot(snapshot);
        let answer = answers.as_ref().map(|d| d[i].clone()).map_err(Clone::clone);
        let snap = &*snapshot;
        let feasible = |n: &str| {
            let (name, _) = candidates.iter().find(|(c, _)| &**c == n)?;
            let node = snap.get(n)?;
            framework
                .dry_run_filters(&pod, snap, node)
                .is_success()
                .then(|| name.clone())
        };
        let result = match hook.resolve(answer, feasible, &r.node) {
            Resolution::Place {
                node,
                by_webhook: true,
                ..
            } => Ok(ScheduleResult {
                node,
                alternatives: Vec::new(),
                ..r
            }),
            // The in-process choice was made before the batch's earlier
            // pods were placed: decide again, now.
            Resolution::Place {
                by_webhook: false, ..
            } => framework.schedule(&pod, snapshot),
            Resolution::Pending { message, declined } => {
                leave_pending(s, framework, &pod, message, declined, attempt);
                continue;
            }
        };
        finish_cycle(s, framework, &pod, snapshot, result, share, attempt);
    }
}

/// The rest of a cycle once its result is known: assume and bind (through
/// Permit for gang members), or the unschedulable path (PostFilter,
/// report), or back off after an error.
fn finish_cycle(
    s: &Arc<Shared>,
    framework: &Framework,
    pod: &Arc<PodInfo>,
    snapshot: &Snapshot,
    result: Result<ScheduleResult, ScheduleError>,
    cycle: Duration,
    attempt: Attempt,
) {
    let pod = pod.clone();
    s.stats
        .cycle_nanos
        .fetch_add(nanos(cycle), Ordering::Relaxed);
    s.metrics.busy.inc_by(cycle.as_secs_f64());
    if s.stopping.load(Ordering::Acquire) {
        // The session is ending (the cycle outlived the shutdown, e.g. on a
        // slow extender): place and report nothing; the coordinator hands
        // the pod out again.
        return;
    }
    if result.is_ok() {
        flotilla_shared::metrics::metrics()
            .scheduling_algorithm_duration
            .observe(cycle.as_secs_f64());
    }
    let span = tracing::Span::current();
    match &result {
        Ok(r) => {
            span.record("node", &*r.node);
            span.record("score", r.score);
            span.record("evaluated", r.evaluated);
            span.record("feasible", r.feasible);
            span.record("result", "placed");
        }
        Err(ScheduleError::Unschedulable(_)) => {
            span.record("result", "unschedulable");
        }
        Err(ScheduleError::Internal { .. }) => {
            span.record("result", "error");
        }
    }
    match result {
        Ok(r) => {
            debug!(node = %r.node, score = r.score, evaluated = r.evaluated, feasible = r.feasible, outside_partition = r.outside_partition, "placed");
            if r.outside_partition && snapshot.partition_len() > 0 {
                s.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
            }
            if let Err(e) = s.cache.assume(pod.clone(), &r.node) {
                warn!(error = %e, "assume failed; backing off");
                s.stats.errors.fetch_add(1, Ordering::Relaxed);
                s.queue.add_backoff(&pod.uid, Instant::now());
                return;
            }
            if framework
                .enabled_at(ExtensionPoint::Permit)
                .contains(&coscheduling::NAME)
            {
                match s.gangs.permit(&pod, &r.node, Instant::now()) {
                    PermitOutcome::NotGang => {}
                    PermitOutcome::Wait => {
                        debug!(node = %r.node, "waiting at Permit for the rest of the gang");
                        return;
                    }
                    PermitOutcome::Ready(group, members) => {
                        let s2 = s.clone();
                        s.tracker
                            .spawn_on(bind_gang(s2, group, members, cycle, attempt), &s.runtime);
                        return;
                    }
                    PermitOutcome::Reject(message) => {
                        s.cache.forget(&pod.uid);
                        s.queue.add_unschedulable(
                            &pod.uid,
                            [coscheduling::NAME].into_iter().collect(),
                            Instant::now(),
                        );
                        report_unschedulable(s, &pod, message, Vec::new());
                        return;
                    }
                }
            }
            propose_bind(s, pod, r.node, r.alternatives, &span, cycle, attempt);
        }
        Err(ScheduleError::Unschedulable(mut fit)) => {
            s.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
            // PostFilter: DefaultPreemption first (upstream's default
            // order); its message becomes part of the FitError.
            let mut candidate = None;
            let mut clear_nomination = false;
            let post_filter_started = Instant::now();
            let outcome = post_filter(s, framework, &pod, snapshot, &fit);
            if outcome.is_some() {
                let code = match &outcome {
                    Some(Ok(PostFilterOutcome::Nominate(_))) => Code::Success,
                    Some(Err(_)) => Code::Error,
                    _ => Code::Unschedulable,
                };
                framework.metrics().point(
                    ExtensionPoint::PostFilter,
                    code,
                    post_filter_started.elapsed(),
                );
            }
            if let Some(Err(e)) = &outcome {
                // A PostFilter error fails the attempt (upstream): the pod
                // backs off, reported with the error (an extender's preempt
                // verb failing, say).
                warn!(error = %e, "preemption failed; backing off");
                framework
                    .metrics()
                    .attempt(AttemptResult::Error, attempt.started.elapsed());
                s.stats.errors.fetch_add(1, Ordering::Relaxed);
                s.queue.add_backoff(&pod.uid, Instant::now());
                report(s, &pod, e.to_string(), Vec::new(), Report::Error);
                return;
            }
            framework
                .metrics()
                .attempt(AttemptResult::Unschedulable, attempt.started.elapsed());
            match outcome {
                None | Some(Err(_)) => {}
                Some(Ok(PostFilterOutcome::Nominate(c))) => candidate = Some(c),
                Some(Ok(PostFilterOutcome::NotHelpful(msg))) => {
                    fit.diagnosis.post_filter_msg = Some(msg);
                }
                Some(Ok(PostFilterOutcome::NoCandidate(msg))) => {
                    fit.diagnosis.post_filter_msg = Some(msg);
                    // Upstream's PostFilter clears the nominated node then:
                    // the room it held here is free for this worker's other
                    // pods at once, and the report ends it everywhere.
                    clear_nomination = true;
                    s.cache.clear_nominated(&pod.uid);
                    s.queue.set_nominated_node(&pod.uid, None);
                }
            }
            let mut message = fit.to_string();
            if framework
                .enabled_at(ExtensionPoint::PostFilter)
                .contains(&coscheduling::NAME)
            {
                let now = Instant::now();
                let (released, msg) = s.gangs.post_filter(&pod, now);
                release(s, &released, now);
                if let Some(m) = msg {
                    // Upstream appends the PostFilter messages to the
                    // FitError, joined with ", ".
                    let sep = if fit.diagnosis.post_filter_msg.is_some() {
                        ", "
                    } else {
                        " "
                    };
                    message = format!("{message}{sep}{m}");
                }
            }
            debug!(%message, "unschedulable");
            s.queue.add_unschedulable(
                &pod.uid,
                fit.diagnosis.unschedulable_plugins.clone(),
                Instant::now(),
            );
            // A sample: the message counts every node.
            let node_statuses = fit
                .diagnosis
                .node_to_status
                .iter()
                .take(pb::MAX_NODE_STATUSES)
                .map(|(node, st)| pb::NodeStatus {
                    node_name: node.to_string(),
                    reasons: st.reasons.iter().map(ToString::to_string).collect(),
                    plugin: st.plugin.to_owned(),
                })
                .collect();
            let kind = if clear_nomination {
                Report::NoPreemptionCandidate
            } else {
                Report::Unschedulable
            };
            report(s, &pod, message, node_statuses, kind);
            if let Some(c) = candidate {
                debug!(node = %c.node, victims = c.victims.len(), "preempting");
                propose_preemption(s, &pod, &c.node, &c.victims);
            }
        }
        Err(e @ ScheduleError::Internal { .. }) => {
            warn!(error = %e, "scheduling cycle failed; backing off");
            framework
                .metrics()
                .attempt(AttemptResult::Error, attempt.started.elapsed());
            s.stats.errors.fetch_add(1, Ordering::Relaxed);
            s.queue.add_backoff(&pod.uid, Instant::now());
            // An extender's failure is the operator's to see on the pod
            // (upstream records it as a FailedScheduling event).
            if let ScheduleError::Internal {
                plugin: flotilla_shared::extender::EXTENDER_NAME,
                message,
            } = &e
            {
                report(s, &pod, message.clone(), Vec::new(), Report::Error);
            }
        }
    }
}

/// Tells the coordinator why `pod` fits nowhere (in a task).
fn report_unschedulable(
    s: &Arc<Shared>,
    pod: &PodInfo,
    message: String,
    node_statuses: Vec<pb::NodeStatus>,
) {
    report(s, pod, message, node_statuses, Report::Unschedulable);
}

/// What a report to the coordinator says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Report {
    /// The pod fits nowhere (or the webhook declined it).
    Unschedulable,
    /// The pod fits nowhere and preemption found no candidate: its
    /// nomination, if any, ends too.
    NoPreemptionCandidate,
    /// The attempt failed with an error (the pod backs off).
    Error,
    /// A gang's members waited past their timeout (counted once per gang).
    GangTimeout,
}

/// Gang members released at Permit: forgotten in the cache (their room is
/// free again) and re-queued with backoff.
fn release(s: &Shared, members: &[Placement], now: Instant) {
    if members.is_empty() {
        return;
    }
    for (pod, _) in members {
        s.cache.forget(&pod.uid);
        s.queue.add_backoff(&pod.uid, now);
    }
    s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
}

/// [`report_unschedulable`], flagging a gang timeout when `timed_out`.
fn report(
    s: &Arc<Shared>,
    pod: &PodInfo,
    message: String,
    node_statuses: Vec<pb::NodeStatus>,
    kind: Report,
) {
    let mut client = s.client.clone();
    let timed_out = kind == Report::GangTimeout;
    let req = pb::UnschedulableReport {
        worker_id: s.id.clone(),
        pod: Some(pb_ref(pod)),
        message,
        node_statuses,
        scheduler_error: kind == Report::Error,
        pod_group_timed_out: timed_out,
        clear_nomination: kind == Report::NoPreemptionCandidate,
    };
    s.tracker.spawn_on(
        async move {
            if let Err(status) = client.report_unschedulable(req).await {
                warn!(%status, "ReportUnschedulable failed");
            }
        },
        &s.runtime,
    );
}

/// The PostFilter step after an Unschedulable cycle: when the pod's profile
/// enables DefaultPreemption, upstream's victim search over the cycle's
/// snapshot with the cluster's PodDisruptionBudgets, starting at a random
/// offset among the candidate nodes as upstream does.
fn post_filter(
    s: &Shared,
    framework: &Framework,
    pod: &Arc<PodInfo>,
    snapshot: &Snapshot,
    fit: &FitError,
) -> Option<Result<PostFilterOutcome, ScheduleError>> {
    let args = framework.preemption()?;
    let offset = rand::random_range(0..snapshot.len().max(1));
    Some(preemption::preempt(
        framework,
        pod,
        snapshot,
        fit,
        &s.pdbs.compiled(),
        args,
        offset,
    ))
}

/// Sends `ProposePreemption` for `pod` (in a task): on `GRANTED` the pod
/// stays in the unschedulable pool (the victims' deletions bring it back,
/// as upstream); on `CONFLICT` it retries after the conflict delay
/// ([`crate::queue::SchedulingQueue::preemption_refused`]); on `POD_GONE`
/// it is dropped.
fn propose_preemption(s: &Arc<Shared>, pod: &Arc<PodInfo>, node: &str, victims: &[Arc<PodInfo>]) {
    s.stats.preemption_attempts.fetch_add(1, Ordering::Relaxed);
    flotilla_shared::metrics::metrics()
        .preemption_attempts
        .inc();
    // Claim the room at once, as upstream's nominator does in the cycle:
    // this worker's next preemptors and pods then see it taken, before the
    // coordinator's answer (and its broadcast) arrives. Undone if refused.
    s.cache.set_nominated(pod.clone(), node);
    let mut client = s.client.clone();
    let req = traced(pb::PreemptionProposal {
        worker_id: s.id.clone(),
        pod: Some(pb_ref(pod)),
        node_name: node.to_owned(),
        victims: victims.iter().map(|v| pb_ref(v)).collect(),
    });
    let n = victims.len() as u64;
    let s2 = s.clone();
    let pod = pod.clone();
    s.tracker.spawn_on(
        async move {
            match client.propose_preemption(req).await {
                Ok(r) => {
                    let d = r.into_inner();
                    match pb::PreemptionOutcome::try_from(d.outcome) {
                        Ok(pb::PreemptionOutcome::Granted) => {
                            s2.stats.preemption_victims.fetch_add(n, Ordering::Relaxed);
                            #[allow(clippy::cast_precision_loss)]
                            flotilla_shared::metrics::metrics()
                                .preemption_victims
                                .observe(n as f64);
                        }
                        Ok(pb::PreemptionOutcome::PodGone) => {
                            debug!(pod = %pod.key, reason = %d.reason, "preemptor gone; dropping it");
                            s2.cache.clear_nominated(&pod.uid);
                            s2.queue.delete(&pod.uid);
                        }
                        _ => {
                            debug!(pod = %pod.key, reason = %d.reason, "preemption refused");
                            s2.cache.clear_nominated(&pod.uid);
                            // A stale view, as a bind conflict: retry soon.
                            s2.queue.preemption_refused(&pod.uid, Instant::now());
                        }
                    }
                }
                Err(status) => {
                    s2.cache.clear_nominated(&pod.uid);
                    if !s2.stopping.load(Ordering::Acquire) {
                        warn!(%status, "ProposePreemption failed");
                    }
                    s2.stats.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        },
        &s.runtime,
    );
}

/// The span of a binding cycle, continuing the scheduling cycle's trace.
fn binding_span(parent: &trace::Carrier) -> tracing::Span {
    let span = info_span!("binding_cycle", outcome = tracing::field::Empty);
    trace::set_parent(&span, parent);
    span
}

/// A request carrying the current span's trace context in its metadata.
fn traced<T>(message: T) -> tonic::Request<T> {
    let mut req = tonic::Request::new(message);
    for (k, v) in trace::metadata_pairs(&tracing::Span::current()) {
        if let (Ok(k), Ok(v)) = (
            tonic::metadata::MetadataKey::from_bytes(k.as_bytes()),
            tonic::metadata::MetadataValue::try_from(v.as_str()),
        ) {
            req.metadata_mut().insert(k, v);
        }
    }
    req
}

/// Records a binding's outcome in the metrics: the proposal, the attempt
/// (a bound pod's attempt ends here, as upstream's ends with its Binding),
/// and, once bound, the pod's attempts and end-to-end latency.
fn record_binding(
    s: &Shared,
    pod: &PodInfo,
    outcome: pb::BindOutcome,
    alternative: bool,
    attempt: Attempt,
    cycle: Duration,
) {
    let (i, result) = match outcome {
        pb::BindOutcome::Bound if alternative => (4, AttemptResult::Scheduled),
        pb::BindOutcome::Bound => (0, AttemptResult::Scheduled),
        pb::BindOutcome::Conflict => (1, AttemptResult::Error),
        pb::BindOutcome::PodGone => (3, AttemptResult::Error),
        pb::BindOutcome::Error | pb::BindOutcome::Unspecified => (2, AttemptResult::Error),
    };
    s.metrics.proposals[i].inc();
    if let Some(fw) = s.frameworks.for_pod(pod) {
        fw.metrics().attempt(result, attempt.started.elapsed());
    }
    if result == AttemptResult::Scheduled {
        let attempts = attempt.attempts + 1;
        let m = flotilla_shared::metrics::metrics();
        m.pod_scheduling_attempts.observe(f64::from(attempts));
        s.metrics.pod_attempts.observe(f64::from(attempts));
        m.pod_scheduling_sli_duration
            .with_label_values(&[&attempts.to_string()])
            .observe(attempt.queued.elapsed().as_secs_f64());
    } else if outcome != pb::BindOutcome::PodGone {
        s.metrics.wasted.inc_by(cycle.as_secs_f64());
    }
}

/// A proposal sent on the bind stream, until its answer.
struct InFlightBind {
    pod: Arc<PodInfo>,
    node: Arc<str>,
    /// Offered to the arbiter should `node`'s room be taken.
    alternatives: Vec<Arc<str>>,
    cycle: Duration,
    attempt: Attempt,
    /// The binding cycle's span (its outcome is recorded with the answer).
    span: tracing::Span,
}

/// Starts the binding cycle of an assumed pod (`cycle_span` is its
/// scheduling cycle's): a proposal on the session's bind stream, or, with
/// no stream, a `ProposeBind` call in a task. The answer settles it
/// ([`settle_binding`]).
fn propose_bind(
    s: &Arc<Shared>,
    pod: Arc<PodInfo>,
    node: Arc<str>,
    alternatives: Vec<Arc<str>>,
    cycle_span: &tracing::Span,
    cycle: Duration,
    attempt: Attempt,
) {
    let span = binding_span(&trace::inject(cycle_span));
    s.cache.mark_proposed(&pod.uid);
    let payload = InFlightBind {
        pod,
        node,
        alternatives,
        cycle,
        attempt,
        span,
    };
    let payload = match &s.bind_stream {
        Some(b) => {
            let req = pb_ref(&payload.pod);
            let node = payload.node.to_string();
            let alternatives = payload
                .alternatives
                .iter()
                .map(ToString::to_string)
                .collect();
            let tc = trace::inject(&payload.span);
            match b.propose(req, node, alternatives, tc, payload) {
                Ok(()) => return,
                // The stream is gone (the session is ending): the unary
                // call settles it like any other failure.
                Err(p) => p,
            }
        }
        None => payload,
    };
    let InFlightBind {
        pod,
        node,
        alternatives,
        cycle,
        attempt,
        span,
    } = payload;
    s.tracker.spawn_on(
        bind(s.clone(), pod, node, alternatives, cycle, attempt).instrument(span),
        &s.runtime,
    );
}

/// The binding cycle for one assumed pod over a `ProposeBind` call.
async fn bind(
    s: Arc<Shared>,
    pod: Arc<PodInfo>,
    node: Arc<str>,
    alternatives: Vec<Arc<str>>,
    cycle: Duration,
    attempt: Attempt,
) {
    // The semaphore is never closed, so acquiring only waits.
    let _permit = s.binds.clone().acquire_owned().await;
    let mut client = s.client.clone();
    let req = pb::BindProposal {
        worker_id: s.id.clone(),
        pod: Some(pb_ref(&pod)),
        node_name: node.to_string(),
        alternatives: alternatives.iter().map(ToString::to_string).collect(),
    };
    let res = client.propose_bind(traced(req)).await;
    let answer = match res {
        Ok(r) => {
            let d = r.into_inner();
            bind_stream::Answer {
                outcome: pb::BindOutcome::try_from(d.outcome).unwrap_or(pb::BindOutcome::Error),
                reason: d.reason,
                granted_node: (!d.node_name.is_empty()).then_some(d.node_name),
                stream_failed: false,
            }
        }
        Err(status) => bind_stream::Answer {
            outcome: pb::BindOutcome::Error,
            reason: status.to_string(),
            granted_node: None,
            stream_failed: true,
        },
    };
    tracing::Span::current().record("outcome", answer.outcome.as_str_name());
    settle_binding(&s, &pod, &node, &answer, cycle, attempt);
}

/// The end of a binding cycle, given the coordinator's answer: confirmed
/// (the assumed pod's expiry clock starts), or forgotten and re-queued
/// (after a conflict shortly, after an error with backoff), or forgotten
/// and dropped (the pod is gone or bound elsewhere).
fn settle_binding(
    s: &Shared,
    pod: &Arc<PodInfo>,
    node: &Arc<str>,
    answer: &bind_stream::Answer,
    cycle: Duration,
    attempt: Attempt,
) {
    let now = Instant::now();
    let outcome = answer.outcome;
    let reason = &answer.reason;
    let alternative = answer
        .granted_node
        .as_deref()
        .filter(|g| *g != &**node && outcome == pb::BindOutcome::Bound);
    record_binding(s, pod, outcome, alternative.is_some(), attempt, cycle);
    match outcome {
        pb::BindOutcome::Bound => {
            if let Some(granted) = alternative {
                // The room on `node` was taken first; the arbiter bound the
                // pod to the next best node that still fit.
                debug!(pod = %pod.key, %node, granted, "first choice taken; bound to an alternative");
                s.stats.alternatives.fetch_add(1, Ordering::Relaxed);
                // A near miss: this worker's view was stale, as in a
                // conflict, so it runs less far ahead.
                s.window.on_conflict(now);
                s.cache.move_assumed(&pod.uid, granted);
            }
            s.window.on_bound();
            s.cache.finish_binding(&pod.uid, now);
            s.queue.done(&pod.uid);
            s.stats.bound.fetch_add(1, Ordering::Relaxed);
            forget_trace(s, &pod.uid);
        }
        pb::BindOutcome::Conflict | pb::BindOutcome::Error | pb::BindOutcome::Unspecified => {
            if outcome == pb::BindOutcome::Conflict {
                debug!(pod = %pod.key, %node, %reason, "bind conflict; retrying shortly");
                s.window.on_conflict(now);
                s.stats.conflicts.fetch_add(1, Ordering::Relaxed);
            } else {
                // A failed call means the connection is going: the broken
                // stream is reported once; one warning per pod would flood.
                if answer.stream_failed || s.stopping.load(Ordering::Acquire) {
                    debug!(pod = %pod.key, %node, %reason, "binding failed during shutdown");
                } else {
                    warn!(pod = %pod.key, %node, %reason, "binding failed; re-queueing with backoff");
                }
                s.stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            s.stats
                .wasted_nanos
                .fetch_add(nanos(cycle), Ordering::Relaxed);
            s.cache.forget(&pod.uid);
            if outcome == pb::BindOutcome::Conflict {
                s.queue.add_conflict(&pod.uid, now);
            } else {
                s.queue.add_backoff(&pod.uid, now);
            }
            // Forgetting freed room in our cache: pods waiting on it may fit.
            s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
        }
        pb::BindOutcome::PodGone => {
            debug!(pod = %pod.key, %reason, "pod gone; dropping it");
            s.cache.forget(&pod.uid);
            s.queue.delete(&pod.uid);
        }
    }
}

/// The binding cycle of a gang: one `ProposeGang` with every member; all
/// bound, or all released (forgotten, re-queued with backoff) together.
async fn bind_gang(
    s: Arc<Shared>,
    group: String,
    members: Vec<Placement>,
    cycle: Duration,
    attempt: Attempt,
) {
    let _permit = s.binds.clone().acquire_owned().await;
    let mut client = s.client.clone();
    let req = pb::GangProposal {
        worker_id: s.id.clone(),
        pod_group: group.clone(),
        members: members
            .iter()
            .map(|(p, n)| pb::GangMember {
                pod: Some(pb_ref(p)),
                node_name: n.to_string(),
            })
            .collect(),
    };
    let res = client.propose_gang(traced(req)).await;
    let now = Instant::now();
    let (outcome, reason, failed) = match res {
        Ok(r) => {
            let d = r.into_inner();
            (
                pb::BindOutcome::try_from(d.outcome).unwrap_or(pb::BindOutcome::Error),
                d.reason,
                d.failed,
            )
        }
        Err(status) => (pb::BindOutcome::Error, status.to_string(), Vec::new()),
    };
    // One proposal, recorded with the attempt that completed the gang.
    if let Some((last, _)) = members.last() {
        record_binding(&s, last, outcome, false, attempt, cycle);
    }
    if outcome == pb::BindOutcome::Bound {
        let failed: std::collections::HashSet<&str> =
            failed.iter().map(|p| p.uid.as_str()).collect();
        let mut retry = Vec::new();
        for (pod, node) in &members {
            if failed.contains(&*pod.uid) {
                retry.push((pod.clone(), node.clone()));
            } else {
                s.cache.finish_binding(&pod.uid, now);
                s.queue.done(&pod.uid);
                s.stats.bound.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !retry.is_empty() {
            warn!(pod_group = %group, failed = retry.len(), "gang granted but some Bindings failed; re-queueing them");
            s.stats
                .errors
                .fetch_add(retry.len() as u64, Ordering::Relaxed);
            release(&s, &retry, now);
        }
        return;
    }
    if outcome == pb::BindOutcome::Conflict {
        debug!(pod_group = %group, %reason, "gang refused; releasing every member");
        s.stats.conflicts.fetch_add(1, Ordering::Relaxed);
    } else if !s.stopping.load(Ordering::Acquire) {
        warn!(pod_group = %group, %reason, "gang binding failed; releasing every member");
        s.stats.errors.fetch_add(1, Ordering::Relaxed);
    }
    s.stats
        .wasted_nanos
        .fetch_add(nanos(cycle), Ordering::Relaxed);
    // Members that joined the waiting set meanwhile go back too (upstream
    // Unreserve rejects every waiting sibling).
    let mut all = members;
    all.extend(s.gangs.reject_waiting(&group));
    release(&s, &all, now);
}

/// The names used in reports: the pool of `class`, numbered.
#[must_use]
pub fn worker_name(class: WorkloadClass, index: usize) -> String {
    format!("{class}-{index}")
}
