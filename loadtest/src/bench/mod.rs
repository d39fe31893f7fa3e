//! `flotilla bench`: a named scenario on the embedded cluster (the
//! coordinator and N workers over loopback gRPC, as `flotilla run`), and
//! the figures that say how fast and how well: pods/s (average and peak
//! windows), scheduling latency, conflict fraction, attempts per pod, CPU
//! seconds per 1,000 pods, peak RSS, API writes per pod; plus an SVG chart.
//!
//! - [`scenarios`]: the workloads (upstream `scheduler_perf` shapes, the
//!   openb trace, a 30,000-node fixed-rate scenario after Gödel).
//! - [`measure`]: throughput windows, percentiles, the latency CDF.
//! - [`chart`]: the SVG.
//! - [`fgd`]: the FGD paper's GPU-sharing protocol (seeded streams tuned to
//!   130 % of GPU capacity, allocation curves, the authors' CSV and figure),
//!   independent of the placer.
//! - [`api`]: a scenario against a real API server (`--kubeconfig`),
//!   optionally beside upstream kube-scheduler.
//!
//! Only the *measured* pods (after the init pods' barrier, as upstream)
//! count for throughput and latency; attempts, conflicts and API writes
//! cover the whole run.

pub mod api;
pub mod chart;
pub mod fgd;
pub mod measure;
pub mod scenarios;

use std::collections::HashSet;
use std::fmt::Write as _;
use std::time::{Duration, Instant};

use serde::Serialize;

use flotilla_scheduler::config::SchedulerConfig;

use crate::procstat;
use crate::report::Checks;
use crate::run::{RunConfig, RunError, run_embedded_full};
use measure::Throughput;
use scenarios::{Scenario, UpstreamFloor};

/// How to run a benchmark.
#[derive(Debug, Clone)]
pub struct BenchConfig {
    /// Scheduler workers (split between the online and batch pools).
    pub workers: usize,
    /// The single-scheduler baseline: one worker, bind arbitration off
    /// (the coordinator writes what the worker decided, unchecked).
    pub single_scheduler: bool,
    /// Give up after this long.
    pub timeout: Duration,
    /// Show a progress bar.
    pub progress: bool,
    /// The scheduler configuration (default: upstream's default profile);
    /// the scenario adds the plugins it needs ([`Scenario::configure`]).
    pub scheduler: SchedulerConfig,
    /// Coordinator and workers over mutual TLS on loopback
    /// ([`RunConfig::with_loopback_tls`]); plaintext otherwise.
    pub tls: bool,
}

impl Default for BenchConfig {
    fn default() -> Self {
        BenchConfig {
            workers: 1,
            single_scheduler: false,
            timeout: Duration::from_secs(600),
            progress: false,
            scheduler: SchedulerConfig::default(),
            tls: false,
        }
    }
}

/// Why a benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum BenchError {
    /// The single-scheduler baseline has exactly one worker.
    #[error("--single-scheduler runs one worker, not {0}")]
    SingleSchedulerWorkers(usize),
    /// At least one worker.
    #[error("--workers must be at least 1")]
    NoWorkers,
    /// No profile of the configuration schedules the scenario's pods
    /// (`spec.schedulerName: default-scheduler`): nothing would be bound.
    #[error(
        "the scenario's pods name schedulerName {expected}, which no profile of the configuration \
         serves (its profiles: {profiles}); add a profile with that schedulerName"
    )]
    NoProfileForPods {
        /// The scenario pods' `schedulerName`.
        expected: &'static str,
        /// The configuration's profiles' names, comma-separated.
        profiles: String,
    },
    /// The ephemeral TLS certificates could not be made (`tls`).
    #[error("--tls: {0}")]
    Tls(#[from] flotilla_shared::tls::TlsError),
    /// The run failed.
    #[error(transparent)]
    Run(#[from] RunError),
}

/// Latency percentiles of the measured pods, milliseconds, from the
/// coordinator first seeing a pod pending to its Binding.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct LatencyMs {
    /// Median.
    pub p50: f64,
    /// 90th percentile.
    pub p90: f64,
    /// 99th percentile.
    pub p99: f64,
    /// Slowest.
    pub max: f64,
}

/// A benchmark's figures (`--output json`: this object, camelCase keys).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BenchReport {
    /// Scenario name.
    pub scenario: String,
    /// Its shape, after scaling.
    pub description: String,
    /// `sharded` or `single-scheduler`.
    pub mode: String,
    /// Scheduler workers.
    pub workers: usize,
    /// Nodes at the start.
    pub nodes: usize,
    /// Pods resolved before the measured phase.
    pub init_pods: usize,
    /// Pods measured.
    pub pods: usize,
    /// Measured pods bound.
    pub scheduled: usize,
    /// Pods left `PodScheduled=False` at the end (churn pods included).
    pub unschedulable: usize,
    /// Pods neither bound nor unschedulable (only after a timeout).
    pub pending: usize,
    /// Measured pods bound per second, over the measured phase.
    pub pods_per_second_avg: f64,
    /// The busiest window of the measured phase, pods per second.
    pub pods_per_second_peak: f64,
    /// Throughput over the measured phase (windows, their length, the
    /// phase's duration).
    pub throughput: Throughput,
    /// Measured pods' latency.
    pub latency_ms: LatencyMs,
    /// Bind proposals the arbiter refused, over all proposals.
    pub conflict_fraction: f64,
    /// Bind proposals bound to one of their alternatives (the first
    /// choice's room taken by another worker), over all proposals: near
    /// misses that cost no second cycle.
    pub alternative_fraction: f64,
    /// Scheduling cycles per pod placed or found unschedulable.
    pub attempts_per_pod: Option<f64>,
    /// CPU seconds (user + system, the whole process: coordinator, workers,
    /// embedded cluster) per 1,000 measured pods, during the measured phase.
    pub cpu_seconds_per_1000_pods: Option<f64>,
    /// The process's peak resident memory during the run (workload
    /// generation included), bytes.
    pub peak_rss_bytes: Option<u64>,
    /// Writes to the cluster (Bindings, status patches, events, deletions)
    /// per pod resolved.
    pub api_writes_per_pod: f64,
    /// Upstream's threshold for the same shape, if any.
    pub upstream_floor_pods_per_second: Option<f64>,
    /// Which upstream workload that floor is from.
    pub upstream_floor_source: Option<String>,
    /// Safety checks over the final cluster state.
    pub checks: Checks,
    /// Whether the run hit its timeout.
    pub timed_out: bool,
    /// Seconds for the whole run, setup included.
    pub wall_seconds: f64,
    /// Timeline ops that failed, with the reason.
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub timeline_errors: Vec<String>,
    /// `(latency ms, fraction)` points of the latency CDF (for the chart).
    #[serde(skip)]
    pub latency_cdf: Vec<(f64, f64)>,
}

/// The `pods` keys (`namespace/name`) of a scenario's measured pods.
fn measured_keys(s: &Scenario) -> HashSet<String> {
    let w = &s.workload;
    let first = w.barriers.last().copied().unwrap_or(0);
    let key = |p: &k8s_openapi::api::core::v1::Pod| {
        format!(
            "{}/{}",
            p.metadata.namespace.as_deref().unwrap_or("default"),
            p.metadata.name.as_deref().unwrap_or_default()
        )
    };
    let mut keys: HashSet<String> = w.pods[first.min(w.pods.len())..].iter().map(key).collect();
    keys.extend(
        w.timeline
            .iter()
            .filter(|o| !o.background)
            .filter_map(|o| o.op.created_pod_key())
            .map(|(namespace, name)| format!("{namespace}/{name}")),
    );
    keys
}

/// Runs `scenario` and measures it.
///
/// # Errors
/// [`BenchError`]: a bad worker count, or the run failing to start.
#[allow(clippy::cast_precision_loss)]
pub async fn run_bench(scenario: Scenario, cfg: &BenchConfig) -> Result<BenchReport, BenchError> {
    if cfg.workers == 0 {
        return Err(BenchError::NoWorkers);
    }
    if cfg.single_scheduler && cfg.workers != 1 {
        return Err(BenchError::SingleSchedulerWorkers(cfg.workers));
    }
    let expected = crate::workload::DEFAULT_SCHEDULER_NAME;
    if !cfg
        .scheduler
        .profiles
        .iter()
        .any(|p| p.scheduler_name == expected)
    {
        return Err(BenchError::NoProfileForPods {
            expected,
            profiles: cfg
                .scheduler
                .profiles
                .iter()
                .map(|p| p.scheduler_name.as_str())
                .collect::<Vec<_>>()
                .join(", "),
        });
    }
    let measured = measured_keys(&scenario);
    let nodes = scenario.workload.nodes.len();
    let scheduler = scenario.configure(cfg.scheduler.clone());
    let run_cfg = RunConfig {
        in_process_workers: cfg.workers,
        expect_workers: cfg.workers,
        progress: cfg.progress,
        timeout: cfg.timeout,
        // Settle quickly: the figures come from the bind samples, not the
        // wall clock, but every second here is a second of the bench.
        settle: Duration::from_millis(300),
        scheduler,
        // No kubelet: victims and deleted pods free their room at once.
        grace_period: Some(0),
        single_scheduler: cfg.single_scheduler,
        bind_log: true,
        ..RunConfig::default()
    };
    let run_cfg = if cfg.tls {
        run_cfg.with_loopback_tls()?
    } else {
        run_cfg
    };
    procstat::reset_peak_rss();
    let out = run_embedded_full(scenario.workload, run_cfg).await?;
    let peak_rss_bytes = procstat::peak_rss_bytes();
    #[allow(clippy::cast_precision_loss)]
    let writes = out.coordinator.api_writes() as f64;

    let samples: Vec<_> = out
        .coordinator
        .bind_log()
        .into_iter()
        .filter(|b| {
            measured.contains(&format!("{}/{}", b.pod.namespace, b.pod.name))
                && b.bound_at >= out.measured_start
        })
        .collect();
    let binds: Vec<Instant> = samples.iter().map(|b| b.bound_at).collect();
    let tp = measure::throughput(out.measured_start, &binds);
    let mut lat: Vec<f64> = samples
        .iter()
        .map(|b| b.bound_at.duration_since(b.first_seen).as_secs_f64() * 1000.0)
        .collect();
    lat.sort_by(f64::total_cmp);
    if tracing::enabled!(tracing::Level::DEBUG) {
        // The tail, by pod (RUST_LOG=flotilla_loadtest=debug).
        let mut slow: Vec<_> = samples.iter().collect();
        slow.sort_by_key(|b| std::cmp::Reverse(b.bound_at.duration_since(b.first_seen)));
        for b in slow.iter().take(20) {
            tracing::debug!(
                pod = %b.pod,
                latency_ms = b.bound_at.duration_since(b.first_seen).as_secs_f64() * 1000.0,
                bound_after_ms = b.bound_at.duration_since(out.measured_start).as_secs_f64() * 1000.0,
                "slowest pods"
            );
        }
    }
    let r = &out.report;
    let resolved = r.scheduled + r.unschedulable + r.preempted;
    let floor: Option<UpstreamFloor> = scenario.name.upstream_floor();
    Ok(BenchReport {
        scenario: scenario.name.as_str().to_owned(),
        description: scenario.description,
        mode: if cfg.single_scheduler {
            "single-scheduler"
        } else {
            "sharded"
        }
        .to_owned(),
        workers: cfg.workers,
        nodes,
        init_pods: scenario.init_pods,
        pods: scenario.measured_pods,
        scheduled: samples.len(),
        unschedulable: r.unschedulable,
        // Pods a timed-out run never created are in `r.pending` already.
        pending: r.pending,
        pods_per_second_avg: tp.average,
        pods_per_second_peak: tp.peak,
        latency_ms: LatencyMs {
            p50: measure::percentile(&lat, 50.0),
            p90: measure::percentile(&lat, 90.0),
            p99: measure::percentile(&lat, 99.0),
            max: lat.last().copied().unwrap_or(0.0),
        },
        throughput: tp,
        conflict_fraction: r.conflicts.fraction,
        alternative_fraction: if r.conflicts.proposals == 0 {
            0.0
        } else {
            r.conflicts.alternatives as f64 / r.conflicts.proposals as f64
        },
        attempts_per_pod: r.attempts_per_pod,
        cpu_seconds_per_1000_pods: out
            .measured_cpu_seconds
            .filter(|_| !samples.is_empty())
            .map(|c| c * 1000.0 / samples.len() as f64),
        peak_rss_bytes,
        api_writes_per_pod: if resolved > 0 {
            writes / resolved as f64
        } else {
            0.0
        },
        upstream_floor_pods_per_second: floor.map(|f| f.pods_per_second),
        upstream_floor_source: floor.map(|f| f.source.to_owned()),
        checks: r.checks.clone(),
        timed_out: r.timed_out,
        wall_seconds: r.wall_seconds,
        timeline_errors: out.timeline_errors,
        latency_cdf: measure::cdf(&lat, 200),
    })
}

fn thousands(v: f64) -> String {
    #[allow(clippy::cast_possible_truncation)]
    let n = v.round() as i64;
    let s = n.abs().to_string();
    let mut out = String::new();
    for (i, c) in s.chars().enumerate() {
        if i > 0 && (s.len() - i).is_multiple_of(3) {
            out.push(',');
        }
        out.push(c);
    }
    if n < 0 { format!("-{out}") } else { out }
}

impl BenchReport {
    /// The chart's title.
    #[must_use]
    pub fn title(&self) -> String {
        format!(
            "Flotilla bench: {}, {} worker{}, {}",
            self.scenario,
            self.workers,
            if self.workers == 1 { "" } else { "s" },
            self.mode
        )
    }

    /// The SVG chart (throughput over time, latency CDF).
    ///
    /// # Errors
    /// [`chart::ChartError`].
    pub fn chart_svg(&self) -> Result<String, chart::ChartError> {
        chart::render_svg(&self.title(), &self.throughput, &self.latency_cdf)
    }

    /// The human-readable form.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "{}", self.title());
        let _ = writeln!(s, "  scenario       {}", self.description);
        let floor = self
            .upstream_floor_pods_per_second
            .map(|f| format!("; upstream floor {}", thousands(f)))
            .unwrap_or_default();
        let _ = writeln!(
            s,
            "  throughput     {} pods/s average, {} peak ({:.3} s windows, {:.3} s){floor}",
            thousands(self.pods_per_second_avg),
            thousands(self.pods_per_second_peak),
            self.throughput.window_seconds,
            self.throughput.duration_seconds,
        );
        let _ = writeln!(
            s,
            "  pods           {} of {} measured bound, {} unschedulable, {} pending",
            self.scheduled, self.pods, self.unschedulable, self.pending
        );
        let l = &self.latency_ms;
        let _ = writeln!(
            s,
            "  latency        p50 {:.2} ms, p90 {:.2} ms, p99 {:.2} ms, max {:.2} ms (queue add to \
             Binding)",
            l.p50, l.p90, l.p99, l.max
        );
        let _ = writeln!(
            s,
            "  conflicts      {:.3} % of bind proposals ({:.3} % more bound to an alternative node)",
            self.conflict_fraction * 100.0,
            self.alternative_fraction * 100.0
        );
        if let Some(a) = self.attempts_per_pod {
            let _ = writeln!(s, "  attempts/pod   {a:.3}");
        }
        if let Some(c) = self.cpu_seconds_per_1000_pods {
            let _ = writeln!(s, "  CPU            {c:.3} s per 1,000 pods");
        }
        if let Some(b) = self.peak_rss_bytes {
            #[allow(clippy::cast_precision_loss)]
            let mib = b as f64 / f64::from(1 << 20);
            let _ = writeln!(s, "  peak RSS       {mib:.0} MiB");
        }
        let _ = writeln!(s, "  API writes     {:.3} per pod", self.api_writes_per_pod);
        let c = &self.checks;
        let _ = writeln!(
            s,
            "  checks         {} over-committed nodes, {} over an instance cap, {} Bindings for {} \
             pods bound",
            c.overcommitted_nodes,
            c.over_instance_cap_nodes,
            c.bindings_written,
            c.pods_bound_by_flotilla
        );
        if self.timed_out {
            let _ = writeln!(s, "  TIMED OUT      unresolved pods are counted pending");
        }
        for e in self.timeline_errors.iter().take(5) {
            let _ = writeln!(s, "  timeline error {e}");
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::thousands;

    #[test]
    fn thousands_are_grouped() {
        assert_eq!(thousands(0.4), "0");
        assert_eq!(thousands(999.0), "999");
        assert_eq!(thousands(12_345.6), "12,346");
        assert_eq!(thousands(1_234_567.0), "1,234,567");
    }
}
