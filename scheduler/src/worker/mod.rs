//! A scheduler worker: connects to the coordinator, mirrors the cluster into
//! its node cache, and runs scheduling cycles for the pods assigned to it.
//!
//! The worker decides nothing itself: each attempt is
//! [`crate::cycle::Cycle::schedule_one`] (or `schedule_batch`, for a
//! batched placement webhook), and the worker applies the
//! [`crate::cycle::Decision`]: proposes the Binding, the gang or the
//! preemption to the coordinator, re-queues, reports. It is the one module
//! of this crate that speaks the coordinator's wire types.
//!
//! # Modules
//! - `session`: joining a coordinator (one of several replicas), the
//!   session's tasks, shutdown, and registering again after the stream
//!   breaks;
//! - `events`: the coordinator's watch events → cache, queue, gang book,
//!   PodDisruptionBudgets (the one writer of cluster state);
//! - `scheduling`: the scheduling thread (pop → cycle → apply the
//!   decision);
//! - `binding`: bind, gang and preemption proposals and their outcomes;
//! - [`bind_stream`]: the session's `BindStream` (proposals and answers on
//!   one gRPC stream);
//! - `reports`: unschedulable and error reports to the coordinator;
//! - `housekeeping`: expiry of unconfirmed assumed pods and of gangs
//!   waiting past their timeout, queue flushes, gauges;
//! - `telemetry`: the worker's metrics handles and trace contexts;
//! - `tls`: the client side of the coordinator's mutual TLS (files read
//!   again at every join, so rotated certificates are picked up).
//!
//! # Threads and tasks
//! - **watch task** (async): coordinator events → cache and queue;
//! - **scheduling thread** (a plain OS thread, CPU-bound): pop → cycle →
//!   apply; one cycle at a time, as upstream's scheduling cycle is serial;
//! - **binding** (async): every assumed pod's proposal goes on the
//!   session's bind stream; a task reads the answers and confirms or
//!   forgets + re-queues each pod (one `ProposeBind` task per pod with a
//!   coordinator lacking the stream);
//! - **preemption tasks** (async): `ProposePreemption` for the candidate
//!   the cycle's PostFilter chose; the pod waits in the unschedulable pool
//!   either way, and the victims' deletions bring it back;
//! - **housekeeping task**.
//!
//! Gang members (pods of a PodGroup, with `Coscheduling` enabled in their
//! profile) do not propose their bind alone: they wait assumed at Permit
//! until `minMember` are placed, then one binding task sends them all in
//! `ProposeGang` (see [`crate::gang`]).
//!
//! Data flows one way: events → cache → queue → cycle → bind.

pub mod bind_stream;
mod binding;
mod events;
mod housekeeping;
mod reports;
mod scheduling;
mod session;
mod telemetry;
mod tls;
mod volumes;

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::Channel;
use tracing::{info, warn};

use flotilla_proto::Liveness;
use flotilla_proto::v1::coordinator_client::CoordinatorClient;
use flotilla_shared::WorkloadClass;
use flotilla_shared::extender::ExtenderConfig;
use flotilla_shared::http::HttpError;
use flotilla_shared::pdb::PdbInfo;
use flotilla_shared::tls::{ClientTlsMaterial, TlsError};

use crate::cache::{DEFAULT_ASSUMED_POD_TTL, NodeCache};
use crate::config::SchedulerConfig;
use crate::cycle::Cycle;
use crate::extender::Extenders;
use crate::framework::{Profile, ProfileMap, Registry, RegistryError};
use crate::gang::GangBook;
use crate::pdbs::PdbStore;
use crate::plugins::coscheduling;
use crate::queue::{QueueConfig, QueueLengths, SchedulingQueue};
use crate::webhook::Webhook;
use crate::window::ProposalWindow;

use bind_stream::BindStream;
use binding::InFlightBind;
use session::SessionEnd;
use telemetry::{PodTrace, WorkerMetrics};

/// Worker settings.
#[derive(Debug, Clone)]
pub struct WorkerConfig {
    /// Coordinator address, e.g. `http://127.0.0.1:7070`; several
    /// (replicas, of which one leads) are comma-separated and tried in order
    /// on every (re)connect, each 250 ms after the one before without
    /// waiting for it to give up (a frozen replica does not hold up the
    /// leader).
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
    /// How long to keep trying to join at start (connect and register with
    /// one of the addresses). Defaults to 10 s.
    pub connect_timeout: Duration,
    /// How long to keep trying to join again after a session broke (the
    /// coordinator died, froze, or stepped down). Defaults to 60 s: longer
    /// than a leader's lease takes to pass to a standby (15 s) plus its
    /// start.
    pub rejoin_timeout: Duration,
    /// Keepalive toward the coordinator: one that does not answer is left
    /// within [`Liveness::bound`], and the worker joins whichever replica
    /// leads.
    pub liveness: Liveness,
    /// The HTTP extenders every profile calls
    /// (`KubeSchedulerConfiguration.extenders`; see [`crate::extender`]).
    /// Their bind verb is the coordinator's to call.
    pub extenders: Vec<ExtenderConfig>,
    /// Seed of the cycles' random choices (ties between equally scored
    /// nodes, where preemption's search starts); `None`, the default: from
    /// the OS, as upstream. See [`crate::cycle::CycleRng`].
    pub seed: Option<u64>,
    /// Mutual TLS to the coordinator, for `https://` addresses (an
    /// `http://` address is plaintext whatever this says). Its files are
    /// read again at every join. `None`, the default: plaintext.
    pub tls: Option<ClientTlsMaterial>,
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
            rejoin_timeout: Duration::from_secs(60),
            liveness: Liveness::DEFAULT,
            extenders: Vec::new(),
            seed: None,
            tls: None,
        }
    }

    /// This configuration with what a `KubeSchedulerConfiguration` sets for
    /// a worker: its profiles, queue backoffs and extenders.
    #[must_use]
    pub fn configured(mut self, config: &SchedulerConfig) -> Self {
        self.profiles = config.profiles.clone();
        self.queue = config.queue_config();
        self.extenders = config.extenders.clone();
        self
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
    /// The TLS files cannot be used (read again at every join, so a
    /// rotation half done is retried until `connect_timeout`).
    #[error("TLS to the coordinator: {0}")]
    Tls(#[from] TlsError),
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

/// One session's state, shared by its tasks and its scheduling thread.
struct Shared {
    id: String,
    client: CoordinatorClient<Channel>,
    cache: NodeCache,
    queue: SchedulingQueue,
    profiles: ProfileMap,
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
    /// The volume objects, published to `cache` for the volume Filters.
    volumes: parking_lot::Mutex<volumes::WorkerVolumes>,
    /// This worker's name and pool (who asks a placement webhook).
    name: String,
    class: WorkloadClass,
    /// Placement webhooks by profile name.
    webhooks: HashMap<String, Arc<Webhook>>,
    /// Seed of the cycles' random choices.
    seed: Option<u64>,
    /// This worker's handles into the process metrics.
    metrics: WorkerMetrics,
    /// How many placements may wait for the cluster's confirmation.
    window: ProposalWindow,
    /// Per pod: the trace to continue (from its dispatch) and its last
    /// attempt's span (to link the next one to). Filled only when tracing
    /// is on; dropped when the pod leaves the worker.
    traces: parking_lot::Mutex<HashMap<Arc<str>, PodTrace>>,
}

impl Shared {
    /// What this session's cycles run with, over the PodDisruptionBudgets
    /// `pdbs`.
    fn cycle<'a>(&'a self, pdbs: &'a [PdbInfo]) -> Cycle<'a> {
        Cycle {
            profiles: &self.profiles,
            webhooks: &self.webhooks,
            worker: &self.name,
            pool: Some(self.class),
            cache: &self.cache,
            gangs: &self.gangs,
            pdbs,
            seed: self.seed,
            detail: false,
        }
    }
}

#[allow(clippy::cast_possible_truncation)]
fn nanos(d: Duration) -> u64 {
    d.as_nanos() as u64
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
    // The first join waits `connect_timeout`, a rejoin `rejoin_timeout`.
    let mut patience = cfg.connect_timeout;
    loop {
        // Each session has its own gang book, read by its Coscheduling.
        let gangs = Arc::new(GangBook::new());
        let mut registry = registry.clone();
        registry.replace(
            coscheduling::NAME,
            crate::framework::registry::coscheduling_factory(gangs.clone()),
        );
        let profiles = ProfileMap::with_extenders(&cfg.profiles, &registry, &extenders)?;
        let end = session::session(
            &cfg,
            patience,
            profiles,
            gangs,
            webhooks.clone(),
            stats.clone(),
            shutdown.clone(),
        )
        .await;
        // This session's queue is gone (its pods are the coordinator's again).
        *stats.queue.lock() = QueueLengths::default();
        stats.ready.store(false, Ordering::Release);
        patience = cfg.rejoin_timeout.max(cfg.connect_timeout);
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

/// The names used in reports: the pool of `class`, numbered.
#[must_use]
pub fn worker_name(class: WorkloadClass, index: usize) -> String {
    format!("{class}-{index}")
}

/// Pool sizes for `n` workers: online gets half, rounded up.
#[must_use]
pub fn pools(n: usize) -> (usize, usize) {
    (n.div_ceil(2), n / 2)
}

/// A worker running as a task of this process ([`spawn_in_process`]).
#[derive(Debug)]
pub struct InProcessWorker {
    /// Its name ([`worker_name`]).
    pub name: String,
    /// Its pool.
    pub class: WorkloadClass,
    /// Its counters, updated while it runs.
    pub stats: Arc<WorkerStats>,
    /// The task; it ends once `stop` fired and the worker drained, or on
    /// an error, which it logs.
    pub task: tokio::task::JoinHandle<()>,
}

/// Starts `n` workers as tasks of this process ([`pools`]: online gets the
/// odd one), each connecting to the coordinator at `addr` (`host:port`;
/// `https://` with `tls`), configured from `scheduler`
/// ([`WorkerConfig::configured`]) with `seed`, its frameworks built from
/// `registry`; they drain and stop when `stop` fires. What `flotilla run`
/// and `run --kubeconfig` run beside their coordinator.
#[must_use]
pub fn spawn_in_process(
    addr: &str,
    scheduler: &SchedulerConfig,
    registry: &Registry,
    seed: Option<u64>,
    n: usize,
    tls: Option<&ClientTlsMaterial>,
    stop: &CancellationToken,
) -> Vec<InProcessWorker> {
    let (online, batch) = pools(n);
    let url = if tls.is_some() {
        format!("https://{addr}")
    } else {
        format!("http://{addr}")
    };
    let mut workers = Vec::with_capacity(n);
    for (class, count) in [
        (WorkloadClass::Online, online),
        (WorkloadClass::Batch, batch),
    ] {
        for i in 0..count {
            let name = worker_name(class, i);
            let mut cfg = WorkerConfig::new(&url, &name, class).configured(scheduler);
            cfg.seed = seed;
            cfg.tls = tls.cloned();
            let stats = Arc::new(WorkerStats::default());
            let (st, registry, token) = (stats.clone(), registry.clone(), stop.clone());
            let label = name.clone();
            let task = tokio::spawn(async move {
                if let Err(e) = run(cfg, &registry, st, token).await {
                    warn!(worker = %label, error = %e, "worker stopped with an error");
                }
            });
            workers.push(InProcessWorker {
                name,
                class,
                stats,
                task,
            });
        }
    }
    workers
}
