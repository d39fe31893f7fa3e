//! What the coordinator reports and keeps for inspection: workers'
//! failure reports (the FitError and its per-node reasons), counters, the
//! summary, pod records, and the log of Bindings written.

use std::sync::Arc;
use std::time::Instant;

use tracing::warn;

use flotilla_shared::{PodKey, WorkloadClass};

use super::{Coordinator, PodPhase, PodRecord};
use crate::cluster::{PodRef, SchedulingEvent};

/// One Binding the coordinator wrote, kept when
/// [`Coordinator::set_bind_log`] is on (benchmarks: pods deleted later keep
/// their sample, unlike [`Coordinator::records`]).
#[derive(Debug, Clone)]
pub struct BindSample {
    /// The pod.
    pub pod: PodKey,
    /// When the coordinator first saw it pending.
    pub first_seen: Instant,
    /// When its Binding succeeded.
    pub bound_at: Instant,
}

/// Why one node rejected a pod (from the worker's FitError).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NodeRejection {
    /// Node name.
    pub node: String,
    /// Upstream reason texts.
    pub reasons: Vec<String>,
    /// The Filter plugin that rejected it.
    pub plugin: String,
}

/// Counters for reports and metrics.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct Counters {
    /// Bind proposals received.
    pub proposals: u64,
    /// Proposals granted (Binding attempted).
    pub grants: u64,
    /// Proposals rejected because the room was taken or the node changed
    /// (on the proposed node and on every alternative offered).
    pub conflicts: u64,
    /// Proposals granted on one of their alternatives, the proposed node's
    /// room having been taken (counted in `grants`, not in `conflicts`).
    pub alternatives_granted: u64,
    /// Bindings that failed at the cluster.
    pub bind_errors: u64,
    /// Bindings whose first answer never came (timed out, connection
    /// lost): their room was kept and the Binding sent again until its
    /// outcome was known.
    pub bind_outcomes_unknown: u64,
    /// Unschedulable reports received.
    pub unschedulable_reports: u64,
    /// Gang proposals granted (every member bound at once).
    pub gangs_scheduled: u64,
    /// Gangs whose members waited past their timeout on a worker (reported
    /// by the worker with the members' release).
    pub gang_timeouts: u64,
    /// Preemption proposals received.
    pub preemption_attempts: u64,
    /// Victims deleted for granted preemptions.
    pub preemption_victims: u64,
}

/// A consistent summary of the coordinator's view.
#[derive(Debug, Clone, Default)]
pub struct Summary {
    /// Pending pods known (including unschedulable), plus bound ones.
    pub pods_total: usize,
    /// Pods bound.
    pub bound: usize,
    /// Pending pods whose last attempt found no node.
    pub unschedulable: usize,
    /// Pending pods not reported unschedulable (queued, backing off, in flight).
    pub pending: usize,
    /// Grants whose Binding is still being written.
    pub granting: usize,
    /// Counters.
    pub counters: Counters,
    /// When the last proposal or report arrived.
    pub last_activity: Option<Instant>,
    /// (worker name, class, pods bound through it), by worker id.
    pub workers: Vec<(Arc<str>, WorkloadClass, u64)>,
    /// Pods that could not be read: the error, naming the pod and field.
    pub invalid: Vec<String>,
    /// Nodes that could not be read: the error, naming the node and field.
    pub invalid_nodes: Vec<String>,
    /// Pending pods that name another `schedulerName` (not ours to place).
    pub other_scheduler: usize,
    /// Nodes known.
    pub nodes: usize,
    /// Pods bound by this coordinator's Bindings.
    pub bound_by_us: usize,
    /// Whether every kind was listed once (pods are dispatched from then on).
    pub synced: bool,
    /// Pending pods nominated to a node by a granted preemption, not bound
    /// yet (they wait for their victims to go).
    pub nominated: usize,
    /// Pending pods held at PreEnqueue, as upstream's queue counts them
    /// gated: by `spec.schedulingGates`, or waiting for their gang to reach
    /// its minimum (counted apart from `pending`: nothing schedules them
    /// until the gates are removed or the members come).
    pub gated: usize,
    /// Pending pods whose last attempt failed with an error (counted in
    /// `pending` too).
    pub failing: usize,
}

impl Coordinator {
    /// Starts (`true`) or stops keeping a [`BindSample`] per Binding
    /// written, read with [`Coordinator::bind_log`]. Off by default: it
    /// grows with every pod bound.
    pub fn set_bind_log(&self, on: bool) {
        let mut inner = self.inner.lock();
        match (on, inner.bind_log.is_some()) {
            (true, false) => inner.bind_log = Some(Vec::new()),
            (false, true) => inner.bind_log = None,
            _ => {}
        }
    }

    /// The Bindings written since [`Coordinator::set_bind_log`]`(true)`, in
    /// order (empty when off).
    #[must_use]
    pub fn bind_log(&self) -> Vec<BindSample> {
        self.inner.lock().bind_log.clone().unwrap_or_default()
    }

    /// A worker found no node for `pod`: record the FitError message and the
    /// per-node reasons (the first `flotilla_proto::v1::MAX_NODE_STATUSES`
    /// of them), record a `FailedScheduling` Event and set
    /// `PodScheduled=False` in the cluster (upstream's
    /// `handleSchedulingFailure`, in that order).
    pub async fn report_unschedulable(
        &self,
        pod: &PodRef,
        message: &str,
        rejections: Vec<NodeRejection>,
    ) {
        self.report_failure(pod, message, rejections, false).await;
    }

    /// `pod`'s worker holds it at PreEnqueue with `message` (a gang short
    /// of its minimum): recorded, counted as gated; as upstream, nothing
    /// is written on the pod.
    pub fn report_waiting(&self, pod: &PodRef, message: &str) {
        let mut inner = self.inner.lock();
        if let Some(rec) = inner.pods.get_mut(pod.uid.as_str())
            && matches!(rec.phase, PodPhase::Pending(_))
        {
            rec.unschedulable = Some(message.to_owned());
            rec.failing = false;
            rec.waiting = true;
        }
    }

    /// [`Coordinator::report_unschedulable`] for an attempt that failed
    /// with an error (`error`: an extender or webhook failing, a Binding
    /// rejected): the pod stays counted as pending, and `PodScheduled=False`
    /// gets reason `SchedulerError` (upstream's for errors).
    pub async fn report_failure(
        &self,
        pod: &PodRef,
        message: &str,
        mut rejections: Vec<NodeRejection>,
        error: bool,
    ) {
        rejections.truncate(flotilla_proto::v1::MAX_NODE_STATUSES);
        let current = {
            let mut inner = self.inner.lock();
            inner.counters.unschedulable_reports += 1;
            inner.last_activity = Some(Instant::now());
            match inner.pods.get_mut(pod.uid.as_str()) {
                Some(rec) if matches!(rec.phase, PodPhase::Pending(_)) => {
                    rec.unschedulable = Some(message.to_owned());
                    rec.failing = error;
                    rec.waiting = false;
                    rec.rejections = rejections.into();
                    let current = rec.info.pod_once();
                    if let Some(g) = flotilla_shared::gang::gang_of(&rec.info) {
                        inner.gangs.member_failed(&g, message, error);
                    }
                    current
                }
                _ => return,
            }
        };
        if self.inner.lock().gangs.has_dirty() {
            self.write_pod_group_status().await;
        }
        self.cluster
            .record_event(SchedulingEvent::failed_scheduling(pod, message));
        let written = if error {
            self.cluster.mark_scheduler_error(&current, message).await
        } else {
            self.cluster.mark_unschedulable(&current, message).await
        };
        if let Err(e) = written {
            warn!(%pod, error = %e, "could not record PodScheduled=False");
        }
    }

    /// A consistent summary.
    #[must_use]
    pub fn summary(&self) -> Summary {
        let inner = self.inner.lock();
        let mut s = Summary {
            counters: inner.counters,
            last_activity: inner.last_activity,
            ..Summary::default()
        };
        for rec in inner.pods.values() {
            s.pods_total += 1;
            match rec.phase {
                PodPhase::Bound(_) => s.bound += 1,
                PodPhase::Granted(_) => s.granting += 1,
                PodPhase::Pending(_) if rec.failing => {
                    s.pending += 1;
                    s.failing += 1;
                }
                PodPhase::Pending(_) if rec.waiting => s.gated += 1,
                PodPhase::Pending(_) if rec.unschedulable.is_some() => s.unschedulable += 1,
                PodPhase::Pending(_) if !rec.info.scheduling_gates.is_empty() => s.gated += 1,
                PodPhase::Pending(_) => s.pending += 1,
            }
        }
        s.invalid = inner.invalid.values().cloned().collect();
        s.invalid_nodes = inner.invalid_nodes.values().cloned().collect();
        s.other_scheduler = inner.foreign.len();
        s.nodes = inner.nodes.len();
        s.bound_by_us = inner.pods.values().filter(|r| r.bound_at.is_some()).count();
        s.synced = inner.synced;
        s.nominated = inner.nominated.len();
        s.workers = inner
            .workers
            .values()
            .map(|w| (w.name.clone(), w.class, w.bound))
            .chain(inner.departed.iter().cloned())
            .collect();
        s
    }

    /// The record of one pod, by `namespace/name` (e.g. to see why it is
    /// pending: `unschedulable` and the per-node `rejections`).
    #[must_use]
    pub fn record(&self, namespace: &str, name: &str) -> Option<PodRecord> {
        let inner = self.inner.lock();
        inner
            .pods
            .values()
            .find(|r| &*r.info.key.namespace == namespace && &*r.info.key.name == name)
            .map(|r| PodRecord::clone(r))
    }

    /// Every pod record (for reports and placements).
    #[must_use]
    pub fn records(&self) -> Vec<PodRecord> {
        self.inner
            .lock()
            .pods
            .values()
            .map(|r| PodRecord::clone(r))
            .collect()
    }
}
