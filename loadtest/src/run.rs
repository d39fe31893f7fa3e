//! One scheduling run on the embedded cluster: load a [`Workload`], start the
//! coordinator (real gRPC on loopback) and N workers, submit the pods, wait
//! until every pod is bound or unschedulable, and build a [`Report`].
//!
//! The same code serves `flotilla run` (workers in process) and
//! `flotilla coordinator` (workers as separate `flotilla worker` processes:
//! `in_process_workers = 0`, `expect_workers = N`).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use indicatif::{ProgressBar, ProgressStyle};
use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use flotilla_coordinator::cluster::EmbeddedCluster;
use flotilla_coordinator::{Coordinator, server};
use flotilla_scheduler::Registry;
use flotilla_scheduler::config::SchedulerConfig;
use flotilla_scheduler::framework::RegistryError;
use flotilla_scheduler::plugins::node_resources_fit;
use flotilla_scheduler::worker::{self, WorkerStats};

use crate::report::{self, Report, WorkerReport};
use crate::workload::Workload;

/// How a run is set up.
#[derive(Debug, Clone)]
pub struct RunConfig {
    /// Workers started in this process (split between the online and batch
    /// pools, online getting the odd one).
    pub in_process_workers: usize,
    /// Workers to wait for before submitting pods (≥ `in_process_workers`;
    /// the rest connect from other processes).
    pub expect_workers: usize,
    /// Coordinator listen address (`127.0.0.1:0` = any free port).
    pub listen: String,
    /// How the coordinator serves its workers: plaintext (loopback only,
    /// unless `insecure`) or mutual TLS.
    pub serve: server::ServeOptions,
    /// The in-process workers' TLS to the coordinator (with `serve.tls`;
    /// see [`flotilla_shared::tls::ephemeral::loopback`]).
    pub worker_tls: Option<flotilla_shared::tls::ClientTlsMaterial>,
    /// Show a progress bar (on stderr, only when it is a terminal).
    pub progress: bool,
    /// Give up waiting after this long; unresolved pods are reported pending.
    pub timeout: Duration,
    /// How long nothing must happen before the run is considered settled.
    pub settle: Duration,
    /// The scheduler configuration (`--config`): the profiles the workers
    /// run and the coordinator serves (with their `workloadClass`
    /// overrides), and the queue backoffs.
    pub scheduler: SchedulerConfig,
    /// The plugins the profiles name: the in-process workers build their
    /// frameworks from it, and the coordinator its profiles' bind checks
    /// ([`SchedulerConfig::served_profiles`]). Default
    /// [`Registry::in_tree`]; add out-of-tree plugins to run them here.
    pub registry: Registry,
    /// Grace period, seconds, of every pod the embedded cluster deletes
    /// (preemption's victims), overriding the pods' own
    /// `terminationGracePeriodSeconds` (default 30 s). No kubelet runs
    /// there, so a victim simply holds its room that long; `Some(0)` frees
    /// it at once. `None`: as the pods ask.
    pub grace_period: Option<i64>,
    /// Serve `/metrics`, `/healthz` and `/readyz` here during the run
    /// ([`flotilla_shared::telemetry`]); ready once the coordinator synced
    /// and every in-process worker registered.
    pub metrics_listen: Option<String>,
    /// The single-scheduler baseline: bind arbitration off
    /// ([`Coordinator::set_arbitration`]), so one worker binds what it
    /// decides, as a lone kube-scheduler does. Only sound with one worker.
    pub single_scheduler: bool,
    /// Keep a sample per Binding ([`Coordinator::set_bind_log`]), for
    /// [`RunOutput::coordinator`]'s `bind_log` (benchmarks).
    pub bind_log: bool,
    /// Seed of the workers' random choices ([`worker::WorkerConfig::seed`]);
    /// `None`: from the OS.
    pub seed: Option<u64>,
    /// The workload's first wave is a backlog: its pods are in the cluster
    /// before the coordinator starts, as when a scheduler (re)starts with
    /// pods pending, so each worker receives its share in its initial
    /// replay and schedules them in queue order (priority, then creation),
    /// not as they trickle in. Off: every wave is created once the workers
    /// are ready.
    pub backlog: bool,
    /// Cancelled to stop the run early (SIGINT/SIGTERM): no more pods are
    /// submitted, in-flight bindings settle, the workers and the
    /// coordinator drain, and the report counts unresolved pods as pending
    /// ([`Report::stopped_by_signal`]).
    pub stop: CancellationToken,
}

impl Default for RunConfig {
    fn default() -> Self {
        RunConfig {
            in_process_workers: 4,
            expect_workers: 4,
            listen: "127.0.0.1:0".into(),
            serve: server::ServeOptions::default(),
            worker_tls: None,
            progress: true,
            timeout: Duration::from_secs(600),
            settle: Duration::from_millis(1000),
            scheduler: SchedulerConfig::default(),
            registry: Registry::in_tree(),
            grace_period: None,
            metrics_listen: None,
            single_scheduler: false,
            bind_log: false,
            seed: None,
            backlog: false,
            stop: CancellationToken::new(),
        }
    }
}

impl RunConfig {
    /// This configuration with the coordinator serving its in-process
    /// workers over mutual TLS on loopback, with a CA and certificates made
    /// in memory for this run ([`flotilla_shared::tls::ephemeral::loopback`]):
    /// `run --tls` and `bench --tls`, to measure what TLS costs.
    ///
    /// # Errors
    /// Making or loading the certificates failed.
    pub fn with_loopback_tls(mut self) -> Result<Self, flotilla_shared::tls::TlsError> {
        let (server, client) = flotilla_shared::tls::ephemeral::loopback()?;
        self.serve.tls = Some(Arc::new(flotilla_coordinator::tls::ServerTls::load(
            server,
        )?));
        self.worker_tls = Some(client);
        Ok(self)
    }
}

/// Errors that stop a run.
#[derive(Debug, thiserror::Error)]
pub enum RunError {
    /// The coordinator could not start.
    #[error("coordinator: {0}")]
    Coordinator(#[from] server::ServeError),
    /// A node of the workload was rejected by the cluster.
    #[error("loading node: {0}")]
    Load(#[from] flotilla_coordinator::cluster::embedded::AdminError),
    /// The binder extender's client could not be built (TLS).
    #[error("extenders: {0}")]
    Extender(#[from] flotilla_shared::http::HttpError),
    /// A profile does not make a framework with the run's registry (an
    /// unknown plugin, bad args).
    #[error("profiles: {0}")]
    Profiles(#[from] RegistryError),
    /// The metrics endpoint could not listen.
    #[error("--metrics-listen {addr}: {source}")]
    Metrics {
        /// The address.
        addr: String,
        /// Cause.
        #[source]
        source: std::io::Error,
    },
    /// Workers did not connect in time.
    #[error("only {connected} of {expected} workers connected within {waited:?}")]
    Workers {
        /// Connected.
        connected: usize,
        /// Expected.
        expected: usize,
        /// Waited.
        waited: Duration,
    },
}

/// Runs `workload` and reports. Invalid pods (rejected by the cluster or not
/// readable by the coordinator) are counted, never dropped silently.
///
/// # Errors
/// See [`RunError`].
pub async fn run_embedded(workload: Workload, cfg: RunConfig) -> Result<Report, RunError> {
    run_embedded_with_cluster(workload, cfg)
        .await
        .map(|(r, _)| r)
}

/// As [`run_embedded`], also returning the cluster in its final state (for
/// placements and independent checks).
///
/// # Errors
/// See [`RunError`].
pub async fn run_embedded_with_cluster(
    workload: Workload,
    cfg: RunConfig,
) -> Result<(Report, Arc<EmbeddedCluster>), RunError> {
    run_embedded_full(workload, cfg)
        .await
        .map(|o| (o.report, o.cluster))
}

/// Everything a run leaves behind, for benchmarks.
pub struct RunOutput {
    /// The report.
    pub report: Report,
    /// The cluster in its final state.
    pub cluster: Arc<EmbeddedCluster>,
    /// The coordinator after the run (its records, counters, bind log).
    pub coordinator: Arc<Coordinator>,
    /// When the last wave of pods was submitted and the timeline started:
    /// the start of the measured phase (upstream `scheduler_perf` measures
    /// the pods after the last barrier).
    pub measured_start: Instant,
    /// When the run settled (every pod resolved).
    pub scheduling_done: Instant,
    /// CPU seconds (user + system) this process used between
    /// `measured_start` and `scheduling_done`; `None` where `/proc` cannot
    /// tell.
    pub measured_cpu_seconds: Option<f64>,
    /// Timeline ops that failed (a pod rejected, a delete of a pod that
    /// was gone), with the reason.
    pub timeline_errors: Vec<String>,
    /// Pods of the workload never created because the run stopped or timed
    /// out first (a wave not submitted, timeline creations not applied):
    /// unresolved; the report counts them in `pods` and `pending`.
    pub pods_not_created: usize,
}

/// Pods created and deleted by the timeline so far, and its errors.
#[derive(Default)]
struct TimelineCounts {
    created: std::sync::atomic::AtomicUsize,
    deleted: std::sync::atomic::AtomicUsize,
    foreground_left: std::sync::atomic::AtomicUsize,
    errors: parking_lot::Mutex<Vec<String>>,
}

/// Applies `ops` (sorted by `at`) from `start`; background ops are dropped
/// once `stop_background` is cancelled.
async fn drive_timeline(
    cluster: Arc<EmbeddedCluster>,
    ops: Vec<crate::workload::TimedOp>,
    start: tokio::time::Instant,
    stop_background: CancellationToken,
    counts: Arc<TimelineCounts>,
) {
    use crate::workload::Op;
    for op in ops {
        if op.background {
            if stop_background.is_cancelled() {
                continue;
            }
            tokio::select! {
                () = tokio::time::sleep_until(start + op.at) => {}
                () = stop_background.cancelled() => continue,
            }
        } else {
            tokio::time::sleep_until(start + op.at).await;
        }
        let result = match op.op {
            op @ (Op::CreatePod(_) | Op::CreatePodFrom { .. }) => {
                let pod = op.into_created_pod().expect("a create op creates a pod");
                cluster.create_pod(pod).map(|()| {
                    counts.created.fetch_add(1, Ordering::Relaxed);
                })
            }
            Op::DeletePod { namespace, name } => cluster.delete_pod(&namespace, &name).map(|()| {
                counts.deleted.fetch_add(1, Ordering::Relaxed);
            }),
            Op::CreateNode(node) => cluster.apply_node(*node),
            Op::DeleteNode(name) => cluster.delete_node(&name),
        };
        if let Err(e) = result {
            counts.errors.lock().push(e.to_string());
        }
        if !op.background {
            counts.foreground_left.fetch_sub(1, Ordering::Relaxed);
        }
    }
}

/// As [`run_embedded`], with everything the run leaves behind.
///
/// # Errors
/// See [`RunError`].
#[allow(clippy::too_many_lines)]
pub async fn run_embedded_full(
    mut workload: Workload,
    cfg: RunConfig,
) -> Result<RunOutput, RunError> {
    let started = Instant::now();
    let cluster = Arc::new(EmbeddedCluster::new());
    cluster.set_grace_period(cfg.grace_period);
    // Moved, not cloned: the cluster holds the only copy (30,000 nodes
    // are ~100 MB as `Node` objects).
    for node in std::mem::take(&mut workload.nodes) {
        cluster.apply_node(node)?;
    }
    for pc in &workload.priority_classes {
        cluster.apply_priority_class(pc.clone())?;
    }
    for pdb in &workload.pod_disruption_budgets {
        cluster.apply_pdb(pdb.clone())?;
    }
    for v in &workload.volumes {
        cluster.apply_volume(v.clone())?;
    }
    for g in &workload.pod_groups {
        cluster.apply_pod_group(g.clone())?;
    }
    for g in &workload.workload_pod_groups {
        cluster.apply_workload_pod_group(g.clone())?;
    }
    let mut rejected = Vec::new();
    let backlog = if cfg.backlog {
        let first = wave_bounds(workload.pods.len(), &workload.barriers)
            .into_iter()
            .next()
            .unwrap_or(0..0);
        for pod in &workload.pods[first.clone()] {
            if let Err(e) = cluster.create_pod(pod.clone()) {
                rejected.push(e.to_string());
            }
        }
        Some(first)
    } else {
        None
    };
    // `token` stops the coordinator's service; the in-process workers stop
    // first (`workers_stop`, cancelled with it on an early return) so their
    // last proposals and reports still reach it.
    let token = CancellationToken::new();
    let _token_guard = token.clone().drop_guard();
    let workers_stop = token.child_token();
    let served = cfg.scheduler.served_profiles(&cfg.registry)?;
    let coordinator = Arc::new(Coordinator::with_profiles(cluster.clone(), served));
    coordinator.set_arbitration(!cfg.single_scheduler);
    coordinator.set_bind_log(cfg.bind_log);
    coordinator.set_extenders(&cfg.scheduler.extenders)?;
    let running = server::start_with(
        coordinator.clone(),
        &cfg.listen,
        token.clone(),
        cfg.serve.clone(),
    )
    .await?;
    let _ = running.synced.await;
    info!(addr = %running.addr, "coordinator listening");
    if cfg.in_process_workers < cfg.expect_workers {
        eprintln!(
            "coordinator listening on {}; waiting for {} worker(s)",
            running.addr,
            cfg.expect_workers - cfg.in_process_workers
        );
    }

    let mut workers = worker::spawn_in_process(
        &running.addr.to_string(),
        &cfg.scheduler,
        &cfg.registry,
        cfg.seed,
        cfg.in_process_workers,
        cfg.worker_tls.as_ref(),
        &workers_stop,
    );
    if let Some(addr) = &cfg.metrics_listen {
        let ws: Vec<Arc<WorkerStats>> = workers.iter().map(|w| w.stats.clone()).collect();
        let t = token.clone();
        let endpoint =
            flotilla_shared::telemetry::start(addr, readiness(&coordinator, ws), async move {
                t.cancelled().await
            })
            .await
            .map_err(|source| RunError::Metrics {
                addr: addr.clone(),
                source,
            })?;
        eprintln!("serving /metrics, /healthz, /readyz on {}", endpoint.addr());
    }
    let wait_from = Instant::now();
    // External workers may take a while to be started: wait up to the run's
    // timeout for them; in-process ones connect at once.
    let wait_limit = if cfg.expect_workers > cfg.in_process_workers {
        cfg.timeout
    } else {
        Duration::from_secs(30)
    };
    // Connected and, for the in-process ones, synced (the coordinator's
    // view replayed, the scheduling thread started), as scheduler_perf
    // waits for the scheduler's informers before it creates pods: else
    // the first pods wait for the initial node sync and the latency
    // measures start-up.
    let synced = || {
        workers
            .iter()
            .all(|w| w.stats.ready.load(Ordering::Acquire))
    };
    while (coordinator.live_workers() < cfg.expect_workers || !synced()) && !cfg.stop.is_cancelled()
    {
        if wait_from.elapsed() > wait_limit {
            token.cancel();
            return Err(RunError::Workers {
                connected: coordinator.live_workers(),
                expected: cfg.expect_workers,
                waited: wait_limit,
            });
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    info!(
        pods = workload.pods.len(),
        workers = coordinator.live_workers(),
        "submitting the pods"
    );
    let submitted = Instant::now();
    // Waves of pods between barriers: the next wave is submitted once every
    // pod of the earlier ones is resolved; the timeline starts with the
    // last one.
    let mut waves = wave_bounds(workload.pods.len(), &workload.barriers);
    // A barrier at the very end holds the timeline until every pod is
    // resolved (init pods, then a trace's arrivals): an empty last wave.
    if !workload.pods.is_empty()
        && !workload.timeline.is_empty()
        && workload.barriers.last() == Some(&workload.pods.len())
    {
        waves.push(workload.pods.len()..workload.pods.len());
    }
    let mut waves = waves.into_iter().peekable();
    let pods = std::mem::take(&mut workload.pods);
    // Submits a wave, up to where a stop interrupts it; returns how far it
    // got.
    let submit = |range: std::ops::Range<usize>, rejected: &mut Vec<String>| {
        for (i, pod) in pods[range.clone()].iter().enumerate() {
            if cfg.stop.is_cancelled() {
                return range.start + i;
            }
            if let Err(e) = cluster.create_pod(pod.clone()) {
                rejected.push(e.to_string());
            }
        }
        range.end
    };
    let mut timeline = std::mem::take(&mut workload.timeline);
    timeline.sort_by_key(|op| op.at);
    let timeline_pods = timeline
        .iter()
        .filter(|o| o.op.created_pod_key().is_some() && !o.background)
        .count();
    let counts = Arc::new(TimelineCounts::default());
    counts.foreground_left.store(
        timeline.iter().filter(|o| !o.background).count(),
        Ordering::Relaxed,
    );
    let stop_background = CancellationToken::new();
    let mut timeline_task: Option<tokio::task::JoinHandle<()>> = None;
    let mut measured_start = submitted;
    let mut measured_cpu_start = crate::procstat::cpu_seconds();
    let mut start_timeline = |timeline_task: &mut Option<tokio::task::JoinHandle<()>>| {
        let ops = std::mem::take(&mut timeline);
        *timeline_task = Some(tokio::spawn(drive_timeline(
            cluster.clone(),
            ops,
            tokio::time::Instant::now(),
            stop_background.clone(),
            counts.clone(),
        )));
    };
    // The measured phase (and the timeline) starts as the last wave goes
    // in: here when there is one wave, else at the last barrier below.
    let first = waves.next();
    if waves.peek().is_none() {
        start_timeline(&mut timeline_task);
    }
    let mut submitted_pods = match first {
        // Created before the coordinator started.
        Some(r) if backlog.as_ref() == Some(&r) => r.end,
        Some(r) => submit(r, &mut rejected),
        None => 0,
    };

    let bar = if cfg.progress {
        let b = ProgressBar::new((pods.len() + timeline_pods) as u64);
        b.set_style(
            ProgressStyle::with_template(
                "{spinner} [{elapsed_precise}] {bar:40} {pos}/{len} pods resolved  {msg}",
            )
            .unwrap_or_else(|_| ProgressStyle::default_bar()),
        );
        b
    } else {
        ProgressBar::hidden()
    };
    let deadline = submitted + cfg.timeout;
    let mut timed_out = false;
    let mut stopped_by_signal = false;
    loop {
        tokio::select! {
            () = tokio::time::sleep(Duration::from_millis(100)) => {}
            () = cfg.stop.cancelled() => {
                stopped_by_signal = true;
                info!("stopping: draining the workers and the coordinator");
                break;
            }
        }
        let s = coordinator.summary();
        let invalid = s.invalid.len();
        let resolved = s.bound + s.unschedulable;
        bar.set_position((resolved + invalid + rejected.len()) as u64);
        let terminating = cluster.terminating_count();
        bar.set_message(format!(
            "bound {}  unschedulable {}  conflicts {}{}",
            s.bound,
            s.unschedulable,
            s.counters.conflicts,
            if terminating > 0 {
                format!("  (waiting for {terminating} preemption victim(s) to terminate)")
            } else {
                String::new()
            }
        ));
        let idle_workers = workers.iter().all(|w| w.stats.is_idle());
        let quiet = s.last_activity.is_none_or(|t| t.elapsed() >= cfg.settle);
        let accepted = (submitted_pods + counts.created.load(Ordering::Relaxed))
            .saturating_sub(rejected.len() + counts.deleted.load(Ordering::Relaxed));
        let (evicted, _) = cluster.evicted_counts();
        let all_seen = s.pods_total + invalid + s.other_scheduler + evicted >= accepted;
        let foreground_done =
            timeline_task.is_some() && counts.foreground_left.load(Ordering::Relaxed) == 0;
        if foreground_done && all_seen && s.pending == 0 && s.granting == 0 {
            // Nothing left but churn: stop it, then settle as usual.
            stop_background.cancel();
        }
        let timeline_done = timeline_task
            .as_ref()
            .is_some_and(tokio::task::JoinHandle::is_finished);
        // Victims still terminating will free room for their preemptors, and
        // a nominated preemptor retries once they are gone (after its
        // backoff): not settled while either waits, unless nothing at all
        // happened for longer than the longest backoff (a nominee that can
        // no longer fit anywhere).
        let nominee_patience = cfg.settle + cfg.scheduler.queue_config().backoff.max;
        let quiet = quiet
            && terminating == 0
            && (s.nominated == 0
                || s.last_activity
                    .is_none_or(|t| t.elapsed() >= nominee_patience));
        if all_seen && s.pending == 0 && s.granting == 0 && idle_workers && quiet {
            match waves.next() {
                Some(r) => {
                    if waves.peek().is_none() {
                        measured_start = Instant::now();
                        measured_cpu_start = crate::procstat::cpu_seconds();
                        start_timeline(&mut timeline_task);
                    }
                    submitted_pods = submit(r, &mut rejected);
                    continue;
                }
                None if timeline_done => break,
                None => {}
            }
        }
        if cfg.in_process_workers > 0
            && cfg.in_process_workers == cfg.expect_workers
            && workers.iter().all(|w| w.task.is_finished())
        {
            timed_out = true;
            warn!("every worker stopped; reporting unresolved pods as pending");
            break;
        }
        if Instant::now() > deadline {
            timed_out = true;
            warn!("run timed out; reporting unresolved pods as pending");
            break;
        }
    }
    bar.finish_and_clear();
    let scheduling_done = Instant::now();
    let measured_cpu_seconds = match (measured_cpu_start, crate::procstat::cpu_seconds()) {
        (Some(a), Some(b)) => Some(b - a),
        _ => None,
    };
    stop_background.cancel();
    if let Some(t) = timeline_task.take() {
        // A timed-out run leaves foreground ops unapplied: drop them.
        t.abort();
        let _ = t.await;
    }

    workers_stop.cancel();
    for w in &mut workers {
        let _ = (&mut w.task).await;
    }
    token.cancel();
    let _ = running.handle.await;

    let worker_reports = workers
        .iter()
        .map(|w| WorkerReport {
            worker: w.name.clone(),
            class: w.class.to_string(),
            pods: 0,
            attempts: w.stats.attempts.load(Ordering::Relaxed),
            conflicts: w.stats.conflicts.load(Ordering::Relaxed),
            alternatives: w.stats.alternatives.load(Ordering::Relaxed),
            fallbacks: w.stats.fallbacks.load(Ordering::Relaxed),
            busy_seconds: Duration::from_nanos(w.stats.cycle_nanos.load(Ordering::Relaxed))
                .as_secs_f64(),
            wasted_seconds: Duration::from_nanos(w.stats.wasted_nanos.load(Ordering::Relaxed))
                .as_secs_f64(),
            in_process: true,
        })
        .collect();
    let worker_stats: Vec<&WorkerStats> = workers.iter().map(|w| &*w.stats).collect();
    let binder = coordinator.binder();
    let extensions = report::extension_reports(&worker_stats, binder.as_deref());
    let mut report = report::build(&report::Inputs {
        workload_name: workload.name.clone(),
        workers: cfg.expect_workers,
        cluster: &cluster,
        coordinator: &coordinator,
        rejected,
        warnings: workload.warnings.iter().map(ToString::to_string).collect(),
        submitted,
        scheduling_done,
        started,
        timed_out,
        stopped_by_signal,
        worker_reports,
        extensions,
        ignored_resources: cfg
            .scheduler
            .profiles
            .iter()
            .map(|p| {
                (
                    p.scheduler_name.clone(),
                    node_resources_fit::ignored_resources(p),
                )
            })
            .filter(|(_, ig)| !ig.is_empty())
            .collect(),
    });
    let timeline_errors = std::mem::take(&mut *counts.errors.lock());
    let pods_not_created = (pods.len() - submitted_pods)
        + timeline_pods.saturating_sub(counts.created.load(Ordering::Relaxed));
    // Pods never created (the run stopped or timed out first) are pods of
    // the workload left pending.
    report.pods += pods_not_created;
    report.pending += pods_not_created;
    Ok(RunOutput {
        report,
        cluster,
        coordinator,
        measured_start,
        scheduling_done,
        measured_cpu_seconds,
        timeline_errors,
        pods_not_created,
    })
}

/// The readiness of a coordinator and its in-process workers: ready once
/// `coordinator` synced and every one of `workers` registered.
#[must_use]
pub fn readiness(
    coordinator: &Arc<Coordinator>,
    workers: Vec<Arc<WorkerStats>>,
) -> flotilla_shared::telemetry::Readiness {
    let c = coordinator.clone();
    Arc::new(move || {
        if !c.is_synced() {
            return Err("the coordinator has not listed the cluster yet".into());
        }
        let waiting = workers
            .iter()
            .filter(|w| !w.ready.load(Ordering::Acquire))
            .count();
        if waiting > 0 {
            return Err(format!("{waiting} worker(s) not registered yet"));
        }
        Ok(())
    })
}

/// The pod index ranges between `barriers` (ascending indices into a list
/// of `len` pods); one range when there is no barrier.
fn wave_bounds(len: usize, barriers: &[usize]) -> Vec<std::ops::Range<usize>> {
    let mut out = Vec::new();
    let mut start = 0;
    for &b in barriers {
        let b = b.min(len);
        if b > start {
            out.push(start..b);
            start = b;
        }
    }
    if start < len || out.is_empty() {
        out.push(start..len);
    }
    out
}

#[cfg(test)]
mod tests {
    use super::wave_bounds;

    #[test]
    fn waves_split_at_barriers_and_ignore_empty_ones() {
        assert_eq!(wave_bounds(5, &[]), vec![0..5]);
        assert_eq!(wave_bounds(5, &[2]), [0..2, 2..5]);
        assert_eq!(wave_bounds(5, &[0, 2, 2, 9]), [0..2, 2..5]);
        assert_eq!(wave_bounds(0, &[]), vec![0..0]);
    }
}
