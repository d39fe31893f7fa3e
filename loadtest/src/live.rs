//! The report of Flotilla scheduling a live cluster through the `kube`
//! backend ([`LiveReport`]): what `flotilla run --kubeconfig` and
//! `flotilla coordinator --kubeconfig` print when they stop, and what the
//! API benchmark reads of Flotilla's run. The process itself is assembled
//! by the `flotilla` binary (`src/live.rs`).

use std::fmt::Write as _;

use serde::Serialize;

use crate::report::Latency;

/// Why a live run ended.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub enum StopReason {
    /// SIGINT/SIGTERM (or the caller's token).
    Signal,
    /// `--exit-when-idle` elapsed.
    Idle,
    /// The Lease was lost: writes stopped at once.
    LeadershipLost,
}

/// Event pipeline counts.
#[derive(Debug, Clone, Copy, Default, Serialize, PartialEq, Eq)]
#[serde(rename_all = "camelCase")]
pub struct EventReport {
    /// Handed to the recorder.
    pub recorded: u64,
    /// Accepted by the API server.
    pub written: u64,
    /// Repeats of a (pod, reason) within the dedupe window.
    pub deduplicated: u64,
    /// Dropped because the queue was full.
    pub dropped: u64,
    /// Refused by the API server or failed (given up after upstream's 12
    /// tries while it did not answer).
    pub failed: u64,
    /// Writes tried again while the server did not answer (or answered
    /// 5xx/429); the writer backs off meanwhile.
    pub retried: u64,
    /// Still queued when the run stopped (not written).
    pub unwritten: u64,
}

/// The report of a live run.
#[derive(Debug, Clone, Serialize, PartialEq)]
#[serde(rename_all = "camelCase")]
pub struct LiveReport {
    /// API server version (`gitVersion`).
    pub server_version: String,
    /// Workers in this process.
    pub in_process_workers: usize,
    /// Nodes known at the end.
    pub nodes: usize,
    /// Pods bound by this coordinator's Bindings.
    pub bound_by_flotilla: usize,
    /// Pods bound by anyone else (or before we started).
    pub already_bound: usize,
    /// Our pods left `PodScheduled=False` (fit nowhere, last attempt).
    pub unschedulable: usize,
    /// Our pods still waiting for an attempt (or being bound).
    pub pending: usize,
    /// Pending pods that name another `schedulerName` (left alone).
    pub other_scheduler: usize,
    /// Pods and nodes that could not be read, with the reason.
    pub invalid: Vec<String>,
    /// Bind proposals, and how many the arbiter rejected.
    pub proposals: u64,
    /// Rejected proposals.
    pub conflicts: u64,
    /// Bindings that failed at the API server (re-queued).
    pub bind_errors: u64,
    /// Events.
    pub events: EventReport,
    /// Writes the coordinator made (Bindings, status patches, Events,
    /// deletions, nominations), successful or not.
    pub api_writes: u64,
    /// First seen pending → Binding written, milliseconds.
    pub latency_ms: Latency,
    /// Seconds from start to stop.
    pub wall_seconds: f64,
    /// Why it stopped.
    pub stop_reason: StopReason,
    /// HTTP extenders' calls (empty without `extenders`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub extenders: Vec<crate::report::ExtenderReport>,
    /// Placement webhooks' calls (empty without `placementWebhook`).
    #[serde(skip_serializing_if = "Vec::is_empty")]
    pub webhooks: Vec<crate::report::WebhookReport>,
}

impl LiveReport {
    /// The human-readable form.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let _ = writeln!(s, "Flotilla on a live cluster ({})", self.server_version);
        let _ = writeln!(
            s,
            "  cluster        {} nodes, {} in-process workers",
            self.nodes, self.in_process_workers
        );
        let _ = writeln!(
            s,
            "  pods           {} bound by Flotilla, {} unschedulable, {} pending, {} invalid",
            self.bound_by_flotilla,
            self.unschedulable,
            self.pending,
            self.invalid.len()
        );
        let _ = writeln!(
            s,
            "                 {} bound by others, {} left to other schedulers",
            self.already_bound, self.other_scheduler
        );
        if self.bound_by_flotilla > 0 {
            let l = &self.latency_ms;
            let _ = writeln!(
                s,
                "  latency        p50 {:.1} ms, p90 {:.1} ms, p99 {:.1} ms, max {:.1} ms (first seen to Binding)",
                l.p50, l.p90, l.p99, l.max
            );
        }
        let _ = writeln!(
            s,
            "  binds          {} proposals, {} conflicts, {} failed at the API server",
            self.proposals, self.conflicts, self.bind_errors
        );
        let e = &self.events;
        let _ = writeln!(
            s,
            "  events         {} recorded, {} written, {} deduplicated, {} dropped, {} failed, {} retried, {} unwritten at exit",
            e.recorded, e.written, e.deduplicated, e.dropped, e.failed, e.retried, e.unwritten
        );
        let why = match self.stop_reason {
            StopReason::Signal => "signal",
            StopReason::Idle => "idle",
            StopReason::LeadershipLost => "LEADERSHIP LOST",
        };
        crate::report::extensions_text(&mut s, &self.extenders, &self.webhooks);
        let _ = writeln!(s, "  stopped        {why} after {:.1} s", self.wall_seconds);
        for i in self.invalid.iter().take(10) {
            let _ = writeln!(s, "  invalid        {i}");
        }
        s
    }
}
