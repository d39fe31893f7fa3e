//! Prometheus metrics of a Flotilla process, named and labelled as
//! kube-scheduler's where one exists (`pkg/scheduler/metrics/metrics.go`:
//! subsystem `scheduler`, the same buckets), so existing dashboards work,
//! plus Flotilla's own (`flotilla_*`): the quantities of the Omega paper
//! per shard (worker) and workload class — conflict fraction, scheduler
//! busyness, wasted work, attempts per pod, API writes per pod.
//!
//! One registry per process ([`metrics`]); [`render`] writes it in the text
//! exposition format, served at `/metrics` by [`crate::telemetry`]. Workers
//! label what is theirs with `worker` (several run in one `flotilla run`
//! process); queries written for kube-scheduler that do not name the label
//! aggregate over it.
//!
//! # kube-scheduler's metrics (recorded by workers)
//! | metric | labels | recorded |
//! | --- | --- | --- |
//! | `scheduler_schedule_attempts_total` | `result` (`scheduled`, `unschedulable`, `error`), `profile` | every cycle's outcome (`scheduled` once the Binding is written) |
//! | `scheduler_scheduling_attempt_duration_seconds` | `result`, `profile` | cycle start to the outcome (to the Binding for `scheduled`), 1 ms × 2^k |
//! | `scheduler_scheduling_algorithm_duration_seconds` | — | Filter to the chosen node |
//! | `scheduler_framework_extension_point_duration_seconds` | `extension_point`, `status`, `profile` | PreFilter, Filter, PostFilter, PreScore, Score per cycle; PreBind (volumes) and Bind per binding |
//! | `scheduler_plugin_execution_duration_seconds` | `plugin`, `extension_point`, `status` | one cycle in ten (upstream's sampling): each PreFilter / Filter (per node) / PreScore / Score (per node) call |
//! | `scheduler_pending_pods` | `queue` (`active`, `backoff`, `unschedulable`, `gated`), `worker` | every 200 ms |
//! | `scheduler_queue_incoming_pods_total` | `queue`, `event`, `worker` | pods entering activeQ / backoffQ / the unschedulable pool |
//! | `scheduler_preemption_attempts_total`, `scheduler_preemption_victims` | — | each `ProposePreemption`; victims of granted ones |
//! | `scheduler_pod_scheduling_attempts` | — | attempts a pod took, once bound |
//! | `scheduler_pod_scheduling_sli_duration_seconds` | `attempts` | queue add to Binding |
//! | `scheduler_cache_size` | `type` (`nodes`, `pods`, `assumed_pods`), `worker` | every 200 ms |
//!
//! # Flotilla's
//! | metric | labels | meaning |
//! | --- | --- | --- |
//! | `flotilla_bind_proposals_total` | `worker`, `class`, `outcome` (`bound`, `bound_alternative`: bound to one of the proposal's alternatives, the first choice's room taken; `conflict`, `error`, `pod_gone`) | conflict fraction = `conflict` / all |
//! | `flotilla_scheduler_busy_seconds_total` | `worker`, `class` | time in scheduling cycles; busyness = its rate |
//! | `flotilla_wasted_work_seconds_total` | `worker`, `class` | cycle time spent on decisions the arbiter (or the Binding) rejected |
//! | `flotilla_pod_attempts` | `class` | attempts per pod, once bound (Omega's "attempts per transaction") |
//! | `flotilla_api_writes_total` | `kind` (`binding`, `status`, `event`, `nomination`, `eviction`, `pod_group_status`) | coordinator writes to the cluster; per pod = its sum / `flotilla_pods_bound_total` |
//! | `flotilla_pods_bound_total` | `class` | pods the coordinator bound |
//! | `flotilla_dispatched_pods_total` | `class` | pods the coordinator handed to a worker (re-dispatches included) |
//! | `flotilla_rebalanced_pods_total` | `class` | pods moved to a worker that joined its pool (its share of the others' untried backlog) |
//! | `flotilla_refused_calls_total` | `method`, `reason` (`session`: no such session; `not_assigned`: a pod not assigned to the caller; `already_watching`: a second `Watch`; `expired`: a `Watch` past the registration TTL; `class`: a `Register` for a class the client certificate does not allow; with method `TLS`, refused handshakes: `no_certificate`, `unknown_ca`, `bad_certificate`, `handshake`, `timeout`, `busy`) | worker calls (and TLS handshakes) the coordinator refused |

use std::sync::OnceLock;

use prometheus::{
    CounterVec, Encoder as _, Histogram, HistogramOpts, HistogramVec, IntCounter, IntCounterVec,
    IntGaugeVec, Opts, Registry, TextEncoder, exponential_buckets,
};

/// Every metric of the process.
#[derive(Debug)]
pub struct Metrics {
    registry: Registry,
    /// `scheduler_schedule_attempts_total{result, profile}`.
    pub schedule_attempts: IntCounterVec,
    /// `scheduler_scheduling_attempt_duration_seconds{result, profile}`.
    pub scheduling_attempt_duration: HistogramVec,
    /// `scheduler_scheduling_algorithm_duration_seconds`.
    pub scheduling_algorithm_duration: Histogram,
    /// `scheduler_framework_extension_point_duration_seconds{extension_point, status, profile}`.
    pub extension_point_duration: HistogramVec,
    /// `scheduler_plugin_execution_duration_seconds{plugin, extension_point, status}`.
    pub plugin_execution_duration: HistogramVec,
    /// `scheduler_pending_pods{queue, worker}`.
    pub pending_pods: IntGaugeVec,
    /// `scheduler_queue_incoming_pods_total{queue, event, worker}`.
    pub queue_incoming_pods: IntCounterVec,
    /// `scheduler_preemption_attempts_total`.
    pub preemption_attempts: IntCounter,
    /// `scheduler_preemption_victims`.
    pub preemption_victims: Histogram,
    /// `scheduler_pod_scheduling_attempts`.
    pub pod_scheduling_attempts: Histogram,
    /// `scheduler_pod_scheduling_sli_duration_seconds{attempts}`.
    pub pod_scheduling_sli_duration: HistogramVec,
    /// `scheduler_cache_size{type, worker}`.
    pub cache_size: IntGaugeVec,
    /// `flotilla_bind_proposals_total{worker, class, outcome}`.
    pub bind_proposals: IntCounterVec,
    /// `flotilla_scheduler_busy_seconds_total{worker, class}`.
    pub busy_seconds: CounterVec,
    /// `flotilla_wasted_work_seconds_total{worker, class}`.
    pub wasted_seconds: CounterVec,
    /// `flotilla_pod_attempts{class}`.
    pub pod_attempts: HistogramVec,
    /// `flotilla_api_writes_total{kind}`.
    pub api_writes: IntCounterVec,
    /// `flotilla_pods_bound_total{class}`.
    pub pods_bound: IntCounterVec,
    /// `flotilla_dispatched_pods_total{class}`.
    pub dispatched_pods: IntCounterVec,
    /// `flotilla_rebalanced_pods_total{class}`.
    pub rebalanced_pods: IntCounterVec,
    /// `flotilla_refused_calls_total{method, reason}`.
    pub refused_calls: IntCounterVec,
}

fn counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntCounterVec {
    let m = IntCounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("registered once");
    m
}

fn float_counter_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> CounterVec {
    let m = CounterVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("registered once");
    m
}

fn gauge_vec(r: &Registry, name: &str, help: &str, labels: &[&str]) -> IntGaugeVec {
    let m = IntGaugeVec::new(Opts::new(name, help), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("registered once");
    m
}

fn buckets(start: f64, factor: f64, count: usize) -> Vec<f64> {
    exponential_buckets(start, factor, count).expect("valid buckets")
}

fn histogram_vec(
    r: &Registry,
    name: &str,
    help: &str,
    labels: &[&str],
    b: Vec<f64>,
) -> HistogramVec {
    let m =
        HistogramVec::new(HistogramOpts::new(name, help).buckets(b), labels).expect("valid metric");
    r.register(Box::new(m.clone())).expect("registered once");
    m
}

fn histogram(r: &Registry, name: &str, help: &str, b: Vec<f64>) -> Histogram {
    let m = Histogram::with_opts(HistogramOpts::new(name, help).buckets(b)).expect("valid metric");
    r.register(Box::new(m.clone())).expect("registered once");
    m
}

impl Metrics {
    /// Observes one `extension_point` run for `profile` that took since
    /// `started`, `Success` when `ok`, else `Error`
    /// (`scheduler_framework_extension_point_duration_seconds`).
    pub fn observe_extension_point(
        &self,
        extension_point: &str,
        ok: bool,
        profile: &str,
        started: std::time::Instant,
    ) {
        self.extension_point_duration
            .with_label_values(&[
                extension_point,
                if ok { "Success" } else { "Error" },
                profile,
            ])
            .observe(started.elapsed().as_secs_f64());
    }

    fn new() -> Self {
        let r = Registry::new();
        let preemption_attempts = IntCounter::new(
            "scheduler_preemption_attempts_total",
            "Total preemption attempts in the cluster till now",
        )
        .expect("valid metric");
        r.register(Box::new(preemption_attempts.clone()))
            .expect("registered once");
        Metrics {
            schedule_attempts: counter_vec(
                &r,
                "scheduler_schedule_attempts_total",
                "Number of attempts to schedule pods, by the result. 'unschedulable' means a pod \
                 could not be scheduled, while 'error' means an internal scheduler problem.",
                &["result", "profile"],
            ),
            scheduling_attempt_duration: histogram_vec(
                &r,
                "scheduler_scheduling_attempt_duration_seconds",
                "Scheduling attempt latency in seconds (scheduling algorithm + binding)",
                &["result", "profile"],
                buckets(0.001, 2.0, 15),
            ),
            scheduling_algorithm_duration: histogram(
                &r,
                "scheduler_scheduling_algorithm_duration_seconds",
                "Scheduling algorithm latency in seconds",
                buckets(0.001, 2.0, 15),
            ),
            extension_point_duration: histogram_vec(
                &r,
                "scheduler_framework_extension_point_duration_seconds",
                "Latency for running all plugins of a specific extension point.",
                &["extension_point", "status", "profile"],
                buckets(0.0001, 2.0, 12),
            ),
            plugin_execution_duration: histogram_vec(
                &r,
                "scheduler_plugin_execution_duration_seconds",
                "Duration for running a plugin at a specific extension point.",
                &["plugin", "extension_point", "status"],
                buckets(0.000_01, 1.5, 20),
            ),
            pending_pods: gauge_vec(
                &r,
                "scheduler_pending_pods",
                "Number of pending pods, by the queue type. 'active' means number of pods in \
                 activeQ; 'backoff' means number of pods in backoffQ; 'unschedulable' means \
                 number of pods in the unschedulable pool; 'gated' is the number of pods held by \
                 scheduling gates.",
                &["queue", "worker"],
            ),
            queue_incoming_pods: counter_vec(
                &r,
                "scheduler_queue_incoming_pods_total",
                "Number of pods added to scheduling queues by event and queue type.",
                &["queue", "event", "worker"],
            ),
            preemption_attempts,
            preemption_victims: histogram(
                &r,
                "scheduler_preemption_victims",
                "Number of selected preemption victims for preemption initiated by a single pod",
                buckets(1.0, 2.0, 7),
            ),
            pod_scheduling_attempts: histogram(
                &r,
                "scheduler_pod_scheduling_attempts",
                "Number of attempts to successfully schedule a pod.",
                buckets(1.0, 2.0, 5),
            ),
            pod_scheduling_sli_duration: histogram_vec(
                &r,
                "scheduler_pod_scheduling_sli_duration_seconds",
                "E2e latency for a pod being scheduled, from the time the pod enters the \
                 scheduling queue and might involve multiple scheduling attempts.",
                &["attempts"],
                buckets(0.01, 2.0, 20),
            ),
            cache_size: gauge_vec(
                &r,
                "scheduler_cache_size",
                "Number of nodes, pods, and assumed (bound) pods in the scheduler cache.",
                &["type", "worker"],
            ),
            bind_proposals: counter_vec(
                &r,
                "flotilla_bind_proposals_total",
                "Bind proposals a worker sent to the coordinator's arbiter, by outcome \
                 (conflict fraction = conflict / all).",
                &["worker", "class", "outcome"],
            ),
            busy_seconds: float_counter_vec(
                &r,
                "flotilla_scheduler_busy_seconds_total",
                "Seconds a worker spent in scheduling cycles (busyness = rate).",
                &["worker", "class"],
            ),
            wasted_seconds: float_counter_vec(
                &r,
                "flotilla_wasted_work_seconds_total",
                "Seconds of scheduling cycles whose decision the arbiter or the Binding rejected.",
                &["worker", "class"],
            ),
            pod_attempts: histogram_vec(
                &r,
                "flotilla_pod_attempts",
                "Scheduling attempts a pod took until it was bound, by workload class.",
                &["class"],
                buckets(1.0, 2.0, 6),
            ),
            api_writes: counter_vec(
                &r,
                "flotilla_api_writes_total",
                "Writes the coordinator made to the cluster, by kind.",
                &["kind"],
            ),
            pods_bound: counter_vec(
                &r,
                "flotilla_pods_bound_total",
                "Pods the coordinator bound, by workload class.",
                &["class"],
            ),
            dispatched_pods: counter_vec(
                &r,
                "flotilla_dispatched_pods_total",
                "Pods the coordinator handed to a worker (re-dispatches included), by class.",
                &["class"],
            ),
            rebalanced_pods: counter_vec(
                &r,
                "flotilla_rebalanced_pods_total",
                "Pods moved to a worker that joined its pool, from the untried backlog of \
                 the others, by class.",
                &["class"],
            ),
            refused_calls: counter_vec(
                &r,
                "flotilla_refused_calls_total",
                "Worker calls the coordinator refused: no such session, a pod not assigned \
                 to the caller, a second Watch, a class the client certificate does not \
                 allow; and TLS handshakes refused (method TLS).",
                &["method", "reason"],
            ),
            registry: r,
        }
    }

    /// The registry (for tests and custom exporters).
    #[must_use]
    pub fn registry(&self) -> &Registry {
        &self.registry
    }
}

/// The process's metrics (created on first use).
pub fn metrics() -> &'static Metrics {
    static M: OnceLock<Metrics> = OnceLock::new();
    M.get_or_init(Metrics::new)
}

/// Every metric in Prometheus' text exposition format (version 0.0.4).
#[must_use]
pub fn render() -> String {
    let families = metrics().registry.gather();
    let mut out = Vec::new();
    if TextEncoder::new().encode(&families, &mut out).is_err() {
        return String::new();
    }
    String::from_utf8(out).unwrap_or_default()
}

/// Whether this cycle records per-plugin durations: one in ten, as
/// upstream's `pluginMetricsSamplePercent`.
#[must_use]
pub fn sample_plugin_metrics() -> bool {
    use std::sync::atomic::{AtomicU64, Ordering};
    static N: AtomicU64 = AtomicU64::new(0);
    N.fetch_add(1, Ordering::Relaxed).is_multiple_of(10)
}
