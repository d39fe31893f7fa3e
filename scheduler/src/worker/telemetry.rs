//! The worker's telemetry: its handles into the process metrics, the
//! clock of each attempt, and the trace contexts that tie a pod's attempts
//! and its binding into one trace.

use std::sync::Arc;
use std::time::Instant;

use flotilla_shared::WorkloadClass;
use flotilla_shared::trace;
use tracing::info_span;

use super::Shared;
use crate::queue::QueuedPodInfo;

/// A worker's labelled handles into the process metrics
/// ([`flotilla_shared::metrics`]).
pub(super) struct WorkerMetrics {
    pub(super) busy: prometheus::Counter,
    pub(super) wasted: prometheus::Counter,
    /// bound, conflict, error, pod_gone.
    pub(super) proposals: [prometheus::IntCounter; 5],
    /// active, backoff, unschedulable, gated.
    pub(super) pending: [prometheus::IntGauge; 4],
    /// nodes, pods, assumed_pods.
    pub(super) cache: [prometheus::IntGauge; 3],
    pub(super) pod_attempts: prometheus::Histogram,
}

impl WorkerMetrics {
    pub(super) fn new(worker: &str, class: WorkloadClass) -> Self {
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

/// One attempt's clock, for the metrics: when its cycle started, and the
/// pod's failed attempts and first queueing.
#[derive(Debug, Clone, Copy)]
pub(super) struct AttemptClock {
    pub(super) started: Instant,
    pub(super) attempts: u32,
    pub(super) queued: Instant,
}

impl AttemptClock {
    pub(super) fn of(qp: &QueuedPodInfo, started: Instant) -> Self {
        AttemptClock {
            started,
            attempts: qp.attempts,
            queued: qp.initial_attempt,
        }
    }
}

/// A pod's trace contexts ([`Shared::traces`]).
#[derive(Debug, Default)]
pub(super) struct PodTrace {
    pub(super) parent: Option<trace::Carrier>,
    last: Option<trace::Carrier>,
}

/// Attaches a cycle's span to the pod's trace: the coordinator's dispatch
/// for its first attempt (continued as its child), else a link to its
/// previous attempt; remembers this attempt for the next. Nothing when
/// tracing is off.
pub(super) fn attach_trace(s: &Shared, span: &tracing::Span, uid: &Arc<str>) {
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
pub(super) fn forget_trace(s: &Shared, uid: &str) {
    if trace::enabled() {
        s.traces.lock().remove(uid);
    }
}

/// The span of a binding cycle, continuing the scheduling cycle's trace.
pub(super) fn binding_span(parent: &trace::Carrier) -> tracing::Span {
    let span = info_span!("binding_cycle", outcome = tracing::field::Empty);
    trace::set_parent(&span, parent);
    span
}

/// A request carrying the current span's trace context in its metadata.
pub(super) fn traced<T>(message: T) -> tonic::Request<T> {
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
