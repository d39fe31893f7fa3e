//! A session with the coordinator: joining one of its replicas
//! (`Register`, then `Watch`), the session's tasks and scheduling thread,
//! and the drain at its end.

use std::collections::HashMap;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use futures::stream::FuturesUnordered;
use tokio_util::sync::CancellationToken;
use tokio_util::task::TaskTracker;
use tonic::transport::{Channel, Endpoint};
use tracing::{debug, info, warn};

use flotilla_proto::Liveness;
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::coordinator_client::CoordinatorClient;
use flotilla_shared::WorkloadClass;
use flotilla_shared::framework::ExtensionPoint;

use super::bind_stream::BindStream;
use super::telemetry::WorkerMetrics;
use super::{
    MAX_BINDS_IN_FLIGHT, SCHEDULER_THREAD_JOIN, Shared, WorkerConfig, WorkerError, WorkerStats,
    binding, events, housekeeping, scheduling,
};
use crate::cache::NodeCache;
use crate::framework::{Profile, ProfileMap};
use crate::gang::GangBook;
use crate::pdbs::PdbStore;
use crate::plugins::names;
use crate::queue::SchedulingQueue;
use crate::webhook::Webhook;
use crate::window::ProposalWindow;

/// Whether a failed Register/Watch means "try another replica" (a standby
/// coordinator, or one shutting down) rather than a broken request. A call
/// that failed on its connection (no answer: the status carries tonic's
/// transport error) is one too: under mutual TLS that is how a refused
/// client certificate shows (TLS 1.3 tells the client only after its side
/// of the handshake), which a certificate rotation in progress can cause;
/// the next round reads the files again.
fn try_elsewhere(status: &tonic::Status) -> bool {
    // Unauthenticated: our registration was dropped before our Watch
    // (others registering in a flood): register again.
    matches!(
        status.code(),
        tonic::Code::Unavailable
            | tonic::Code::FailedPrecondition
            | tonic::Code::NotFound
            | tonic::Code::Unauthenticated
    ) || std::error::Error::source(status).is_some_and(|e| e.is::<tonic::transport::Error>())
}

/// Connects, registers and opens the watch stream on one of the coordinator
/// addresses (`cfg.coordinator`, comma-separated), for up to `patience`.
/// Each address is tried in its own loop (with backoff between tries), the
/// next started [`JOIN_STAGGER`] after the one before, and the first watch
/// opened is kept. A replica that does not answer within
/// [`Liveness::bound`] (frozen, or a standby behind a dropping network)
/// fails that try like one that refuses, and holds up no other address's
/// tries. With `cfg.tls`, each try reads the TLS files again (a file
/// unreadable in the middle of a rotation is retried like an unreachable
/// coordinator).
async fn join(
    cfg: &WorkerConfig,
    class: pb::WorkloadClass,
    patience: Duration,
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
        endpoints.push((addr.to_owned(), with_liveness(ep, cfg.liveness)));
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
    let deadline = Instant::now() + patience;
    let answer_within = cfg.liveness.bound();
    // Each replica in its own loop of tries (backoff 50 ms doubling to
    // 1 s, the TLS files read again at each try, so certificates rotated
    // on disk are presented), started in order JOIN_STAGGER apart (as
    // Happy Eyeballs does, RFC 8305); the first to open its watch wins. A
    // live first replica wins; a frozen one (its kernel accepts TCP,
    // nothing more ever comes, or it answered Register and never Watch)
    // holds up only its own loop, so a standby that starts leading is
    // joined at its next try, not after the frozen one's liveness bound;
    // a standby does not listen at all. A registration left behind by a
    // slower replica expires unwatched; a watch opened by one is closed as
    // it is dropped.
    let mut joining: FuturesUnordered<_> = endpoints
        .iter()
        .zip(0u32..)
        .map(|(pair, i)| async move {
            tokio::time::sleep(JOIN_STAGGER * i).await;
            let mut delay = Duration::from_millis(50);
            loop {
                let tried = match super::tls::with_tls(cfg.tls.as_ref(), std::slice::from_ref(pair))
                {
                    Ok(eps) => {
                        let ep = eps
                            .into_iter()
                            .next()
                            .map_or_else(|| pair.1.clone(), |(_, ep)| ep);
                        join_at(cfg, class, &pair.0, &ep, answer_within).await
                    }
                    Err(e) => Err(Attempt::Elsewhere(WorkerError::Tls(e))),
                };
                match tried {
                    Err(Attempt::Elsewhere(_)) if Instant::now() < deadline => {
                        tokio::time::sleep(delay).await;
                        delay = (delay * 2).min(Duration::from_secs(1));
                    }
                    done => return done,
                }
            }
        })
        .collect();
    let mut last = None;
    while let Some(joined) = joining.next().await {
        match joined {
            Ok((addr, client, reg, stream)) => {
                if endpoints.len() > 1 {
                    info!(worker = %cfg.name, coordinator = %addr, "joined");
                }
                return Ok((client, reg, stream));
            }
            Err(Attempt::Elsewhere(e)) => last = Some(e),
            Err(Attempt::Fatal(e)) => return Err(e),
        }
    }
    // Every replica's loop gave up at the deadline (`endpoints` is never
    // empty, so there is an error to tell).
    Err(last.unwrap_or_else(|| WorkerError::Rpc {
        call: "connect",
        status: Box::new(no_answer(answer_within)),
    }))
}

/// How long a join waits for one replica before it also tries the next.
const JOIN_STAGGER: Duration = Duration::from_millis(250);

/// How one replica's join attempt failed.
enum Attempt {
    /// Not this replica now (unreachable, frozen, a standby, a refusal
    /// another may not give): try it again, and the others.
    Elsewhere(WorkerError),
    /// A refusal every replica would give (e.g. the certificate's class):
    /// give up.
    Fatal(WorkerError),
}

/// Connects to one replica, registers and opens the watch stream, each
/// step bounded by `answer_within` (the endpoint's own connect timeout
/// covers only TCP, not the TLS or HTTP/2 handshake).
async fn join_at<'a>(
    cfg: &WorkerConfig,
    class: pb::WorkloadClass,
    addr: &'a str,
    endpoint: &Endpoint,
    answer_within: Duration,
) -> Result<
    (
        &'a str,
        CoordinatorClient<Channel>,
        pb::RegisterResponse,
        tonic::Streaming<pb::WatchEvent>,
    ),
    Attempt,
> {
    let ch = match tokio::time::timeout(answer_within, endpoint.connect()).await {
        Ok(Ok(ch)) => ch,
        Ok(Err(source)) => {
            return Err(Attempt::Elsewhere(WorkerError::Connect {
                addr: addr.to_owned(),
                source,
            }));
        }
        Err(_) => {
            debug!(%addr, "no handshake within {answer_within:?}");
            return Err(Attempt::Elsewhere(WorkerError::Rpc {
                call: "connect",
                status: Box::new(no_answer(answer_within)),
            }));
        }
    };
    let mut client = CoordinatorClient::new(ch)
        .max_decoding_message_size(64 * 1024 * 1024)
        .max_encoding_message_size(64 * 1024 * 1024);
    let registered = tokio::time::timeout(
        answer_within,
        client.register(pb::RegisterRequest {
            worker_name: cfg.name.clone(),
            workload_class: class.into(),
            profiles_fingerprint: Profile::fingerprint_of(&cfg.profiles),
        }),
    )
    .await
    .unwrap_or_else(|_| Err(no_answer(answer_within)));
    let refused = |call: &'static str, s: tonic::Status| {
        let elsewhere = try_elsewhere(&s);
        let e = WorkerError::Rpc {
            call,
            status: Box::new(s),
        };
        if elsewhere {
            debug!(%addr, error = %e, "coordinator refused the join; trying the others");
            Attempt::Elsewhere(e)
        } else {
            Attempt::Fatal(e)
        }
    };
    let reg = registered.map_err(|s| refused("Register", s))?.into_inner();
    let watched = tokio::time::timeout(
        answer_within,
        client.watch(pb::WatchRequest {
            worker_id: reg.worker_id.clone(),
        }),
    )
    .await
    .unwrap_or_else(|_| Err(no_answer(answer_within)));
    let stream = watched.map_err(|s| refused("Watch", s))?.into_inner();
    Ok((addr, client, reg, stream))
}

/// `endpoint` with HTTP/2 keepalive ([`Liveness`]), also while idle (a
/// worker with nothing to schedule still notices a frozen coordinator),
/// and a TCP connect bounded by the same time.
fn with_liveness(endpoint: Endpoint, l: Liveness) -> Endpoint {
    endpoint
        .http2_keep_alive_interval(l.interval)
        .keep_alive_timeout(l.timeout)
        .keep_alive_while_idle(true)
        .connect_timeout(l.bound())
}

/// The status of a call the coordinator did not answer in time: passed
/// over as `Unavailable`, as a replica that is not serving.
fn no_answer(waited: Duration) -> tonic::Status {
    tonic::Status::unavailable(format!("no answer within {waited:?}"))
}

/// How a session with the coordinator ended.
pub(super) enum SessionEnd {
    /// Our shutdown signal fired.
    Shutdown,
    /// The coordinator ended the stream cleanly (it is shutting down).
    Closed,
    /// The stream broke (connection lost, coordinator crashed).
    Failed(tonic::Status),
}

/// One session: join, replay the coordinator's view, schedule until the
/// shutdown signal or the end of the stream, then drain.
pub(super) async fn session(
    cfg: &WorkerConfig,
    patience: Duration,
    profiles: ProfileMap,
    gangs: Arc<GangBook>,
    webhooks: HashMap<String, Arc<Webhook>>,
    stats: Arc<WorkerStats>,
    shutdown: CancellationToken,
) -> Result<SessionEnd, WorkerError> {
    let class = match cfg.class {
        WorkloadClass::Online => pb::WorkloadClass::Online,
        WorkloadClass::Batch => pb::WorkloadClass::Batch,
    };
    let (mut client, reg, mut stream) = tokio::select! {
        joined = join(cfg, class, patience) => joined?,
        () = shutdown.cancelled() => return Ok(SessionEnd::Shutdown),
    };
    // The credential's secret half stays out of the logs.
    let id = reg.worker_id.split('.').next().unwrap_or_default();
    info!(worker = %cfg.name, id, epoch = reg.epoch, "registered");
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

    let interest = profiles.event_interest();
    let mut queue_cfg = cfg.queue;
    // Gates hold pods back only where the profile runs SchedulingGates
    // (upstream: without the PreEnqueue plugin, gated pods are scheduled).
    queue_cfg.honour_scheduling_gates &=
        profiles.any_enables(ExtensionPoint::PreEnqueue, names::SCHEDULING_GATES);
    let shared = Arc::new(Shared {
        id: reg.worker_id,
        client,
        cache: NodeCache::new(cfg.assumed_pod_ttl),
        queue: SchedulingQueue::new(queue_cfg, interest),
        profiles,
        stats,
        tracker: TaskTracker::new(),
        runtime: tokio::runtime::Handle::current(),
        binds: Arc::new(tokio::sync::Semaphore::new(MAX_BINDS_IN_FLIGHT)),
        bind_stream: bind_stream.clone(),
        stopping: std::sync::atomic::AtomicBool::new(false),
        gangs,
        pdbs: PdbStore::new(),
        volumes: parking_lot::Mutex::default(),
        name: cfg.name.clone(),
        class: cfg.class,
        webhooks,
        seed: cfg.seed,
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
                binding::settle_binding(&s, &p.pod, &p.node, &answer, p.cycle, p.attempt);
            }));
    }
    let stop = shutdown.child_token();
    let mut scheduler_thread = None;
    let housekeeping = tokio::spawn(housekeeping::housekeeping(shared.clone(), stop.clone()));
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
            shared.volumes.lock().go_live(&shared.cache);
            shared.stats.ready.store(true, Ordering::Release);
            if scheduler_thread.is_none() {
                let s = shared.clone();
                let name = cfg.name.clone();
                scheduler_thread = Some(
                    std::thread::Builder::new()
                        .name(format!("sched-{name}"))
                        .spawn(move || scheduling::scheduling_loop(&s, &name))
                        .expect("spawning the scheduling thread"),
                );
            }
            continue;
        }
        if let Err(why) = events::apply_event(&shared, event, trace_context) {
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
