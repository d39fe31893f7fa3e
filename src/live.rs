//! The deployed process on a live cluster: the coordinator over the
//! `kube` backend and its gRPC service, and optionally workers in the same
//! process, until a signal, an idle spell (`--exit-when-idle`) or the loss
//! of leadership; then a [`LiveReport`].
//!
//! `flotilla run --kubeconfig` runs it with workers in process;
//! `flotilla coordinator --kubeconfig` (and in a cluster, `--in-cluster`)
//! with none: workers are separate `flotilla worker` processes.
//! `flotilla bench --kubeconfig` runs it as the Flotilla side of its
//! comparison ([`bench_starter`]).

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use flotilla_coordinator::cluster::kube::KubeCluster;
use flotilla_coordinator::leader::Leadership;
use flotilla_coordinator::{Coordinator, server};
use flotilla_loadtest::bench::api::{FlotillaStart, StartFlotilla};
use flotilla_loadtest::bench::measure::percentile;
use flotilla_loadtest::live::{EventReport, LiveReport, StopReason};
use flotilla_loadtest::report::{self, Latency};
use flotilla_scheduler::Registry;
use flotilla_scheduler::config::SchedulerConfig;
use flotilla_scheduler::framework::RegistryError;
use flotilla_scheduler::worker::{self, WorkerStats};

/// Longest wait at exit for the Events still queued to be written.
const EVENT_FLUSH: Duration = Duration::from_secs(5);

/// How a live run is set up.
#[derive(Debug, Clone)]
pub struct LiveConfig {
    /// Workers started in this process (online gets the odd one).
    pub in_process_workers: usize,
    /// Coordinator listen address.
    pub listen: String,
    /// Plaintext (loopback, or `--insecure`) or mutual TLS.
    pub serve: server::ServeOptions,
    /// The in-process workers' TLS (with `serve.tls`).
    pub worker_tls: Option<flotilla_shared::tls::ClientTlsMaterial>,
    /// Stop once no pod has waited for a scheduling attempt (nothing
    /// queued, in flight or being bound) for this long. `None`: run until a
    /// signal.
    pub exit_when_idle: Option<Duration>,
    /// The scheduler configuration: the coordinator serves its profiles'
    /// `schedulerName`s, in-process workers run its profiles and backoffs.
    pub scheduler: SchedulerConfig,
    /// The plugins the profiles name: the in-process workers' frameworks
    /// and the coordinator's bind checks are built from it
    /// ([`SchedulerConfig::served_profiles`]); usually
    /// [`Registry::in_tree`].
    pub registry: Registry,
    /// The `/metrics`, `/healthz`, `/readyz` endpoint, if one is served:
    /// its readiness becomes the coordinator's (synced, and every
    /// in-process worker registered) once it runs.
    pub telemetry: Option<flotilla_shared::telemetry::Endpoint>,
    /// Seed of the in-process workers' random choices (`--seed`).
    pub seed: Option<u64>,
}

/// Errors that stop a live run.
#[derive(Debug, thiserror::Error)]
pub enum LiveError {
    /// The coordinator could not start.
    #[error("coordinator: {0}")]
    Coordinator(#[from] server::ServeError),
    /// The binder extender's client could not be built (TLS).
    #[error("extenders: {0}")]
    Extender(#[from] flotilla_shared::http::HttpError),
    /// A profile does not make a framework with the registry (an unknown
    /// plugin, bad args).
    #[error("profiles: {0}")]
    Profiles(#[from] RegistryError),
}

/// Serves `cluster` until `stop` fires, the run is idle for
/// `cfg.exit_when_idle`, or `leadership` is lost. The caller holds the
/// lease (if electing) and releases it afterwards.
///
/// # Errors
/// [`LiveError::Coordinator`] when the gRPC address cannot be bound.
pub async fn serve(
    cluster: Arc<KubeCluster>,
    cfg: LiveConfig,
    stop: CancellationToken,
    leadership: Option<&Leadership>,
) -> Result<LiveReport, LiveError> {
    let started = Instant::now();
    // `token` ends the run and the in-process workers; the gRPC service
    // stops only after they drained (their last proposals and reports
    // still reach it).
    let token = stop.child_token();
    let server_stop = CancellationToken::new();
    let _server_stop_guard = server_stop.clone().drop_guard();
    let served = cfg.scheduler.served_profiles(&cfg.registry)?;
    let coordinator = Arc::new(Coordinator::with_profiles(cluster.clone(), served));
    coordinator.set_extenders(&cfg.scheduler.extenders)?;
    let running = server::start_with(
        coordinator.clone(),
        &cfg.listen,
        server_stop.clone(),
        cfg.serve.clone(),
    )
    .await?;
    eprintln!("coordinator listening on {}", running.addr);
    let lost = async {
        match leadership {
            Some(l) => l.lost().await,
            None => std::future::pending().await,
        }
    };
    tokio::pin!(lost);
    let mut stop_reason = None;
    let mut synced = running.synced;
    let mut slow_sync_warned = false;
    loop {
        tokio::select! {
            () = token.cancelled() => { stop_reason = Some(StopReason::Signal); break; }
            () = &mut lost => { stop_reason = Some(StopReason::LeadershipLost); break; }
            r = &mut synced => { if r.is_ok() { break; } }
            () = tokio::time::sleep(Duration::from_secs(10)), if !slow_sync_warned => {
                slow_sync_warned = true;
                warn!("the node and pod lists are not in after 10 s; still waiting (see earlier errors)");
            }
        }
    }
    if stop_reason.is_none() {
        info!("caches synced; scheduling");
    }

    let workers = if stop_reason.is_none() {
        worker::spawn_in_process(
            &running.addr.to_string(),
            &cfg.scheduler,
            &cfg.registry,
            cfg.seed,
            cfg.in_process_workers,
            cfg.worker_tls.as_ref(),
            &token,
        )
    } else {
        Vec::new()
    };
    let stats: Vec<Arc<WorkerStats>> = workers.iter().map(|w| w.stats.clone()).collect();

    if let Some(endpoint) = &cfg.telemetry {
        endpoint.set_readiness(flotilla_loadtest::run::readiness(
            &coordinator,
            stats.clone(),
        ));
    }
    let mut idle_since: Option<Instant> = None;
    let mut last_activity = None;
    while stop_reason.is_none() {
        tokio::select! {
            () = token.cancelled() => { stop_reason = Some(StopReason::Signal); break; }
            () = &mut lost => { stop_reason = Some(StopReason::LeadershipLost); break; }
            () = tokio::time::sleep(Duration::from_millis(200)) => {}
        }
        let Some(limit) = cfg.exit_when_idle else {
            continue;
        };
        let s = coordinator.summary();
        let idle = s.pending == 0
            && s.granting == 0
            && stats.iter().all(|st| st.is_idle())
            && s.last_activity == last_activity;
        last_activity = s.last_activity;
        if !idle {
            idle_since = None;
            continue;
        }
        let since = *idle_since.get_or_insert_with(Instant::now);
        if since.elapsed() >= limit {
            stop_reason = Some(StopReason::Idle);
        }
    }
    let stop_reason = stop_reason.unwrap_or(StopReason::Signal);
    token.cancel();
    for w in workers {
        let _ = tokio::time::timeout(Duration::from_secs(15), w.task).await;
    }
    server_stop.cancel();
    let _ = tokio::time::timeout(Duration::from_secs(15), running.handle).await;
    // Still the leader (the lease is released by the caller, after this):
    // write the Events still queued.
    if stop_reason != StopReason::LeadershipLost && !cluster.flush_events(EVENT_FLUSH).await {
        warn!(
            ?EVENT_FLUSH,
            "Events still queued at exit were not all written"
        );
    }

    let s = coordinator.summary();
    let lat = report::bind_latencies_ms(&coordinator.records());
    let ev = cluster.event_counts();
    let mut invalid = s.invalid.clone();
    invalid.extend(s.invalid_nodes.iter().cloned());
    let worker_stats: Vec<&WorkerStats> = stats.iter().map(|st| &**st).collect();
    let binder = coordinator.binder();
    let (extenders, webhooks) = report::extension_reports(&worker_stats, binder.as_deref());
    Ok(LiveReport {
        server_version: cluster.server_info().version.clone(),
        in_process_workers: cfg.in_process_workers,
        nodes: s.nodes,
        bound_by_flotilla: s.bound_by_us,
        already_bound: s.bound.saturating_sub(s.bound_by_us),
        unschedulable: s.unschedulable,
        pending: s.pending + s.granting,
        other_scheduler: s.other_scheduler,
        invalid,
        proposals: s.counters.proposals,
        conflicts: s.counters.conflicts,
        bind_errors: s.counters.bind_errors,
        events: EventReport {
            recorded: ev.recorded,
            written: ev.written,
            deduplicated: ev.deduplicated,
            dropped: ev.dropped,
            failed: ev.failed,
            retried: ev.retried,
            unwritten: ev
                .recorded
                .saturating_sub(ev.written + ev.deduplicated + ev.dropped + ev.failed),
        },
        api_writes: coordinator.api_writes(),
        latency_ms: Latency {
            p50: percentile(&lat, 50.0),
            p90: percentile(&lat, 90.0),
            p99: percentile(&lat, 99.0),
            max: lat.last().copied().unwrap_or(0.0),
        },
        wall_seconds: started.elapsed().as_secs_f64(),
        stop_reason,
        extenders,
        webhooks,
    })
}

/// The API benchmark's Flotilla: this process, as `run --kubeconfig` runs
/// it (workers in process, no listener but loopback), until the bench
/// stops it.
pub fn bench_starter() -> StartFlotilla {
    Arc::new(|start: FlotillaStart| {
        Box::pin(async move {
            let cfg = LiveConfig {
                in_process_workers: start.workers,
                listen: "127.0.0.1:0".into(),
                serve: server::ServeOptions::default(),
                worker_tls: None,
                exit_when_idle: None,
                scheduler: start.scheduler,
                registry: Registry::in_tree(),
                telemetry: None,
                seed: None,
            };
            serve(start.cluster, cfg, start.stop, None)
                .await
                .map_err(|e| e.to_string())
        })
    })
}
