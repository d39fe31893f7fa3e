//! Reports to the coordinator on attempts that placed nothing, and the
//! release of gang members back to the queue.

use std::sync::Arc;
use std::time::Instant;

use tracing::warn;

use flotilla_proto::v1 as pb;
use flotilla_shared::PodInfo;
use flotilla_shared::framework::ClusterEvent;

use super::Shared;
use super::binding::pb_ref;
use crate::gang::Placement;

/// What a report to the coordinator says.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Report {
    /// The pod fits nowhere (or the webhook declined it).
    Unschedulable,
    /// The pod fits nowhere and preemption found no candidate: its
    /// nomination, if any, ends too.
    NoPreemptionCandidate,
    /// The attempt failed with an error (the pod backs off).
    Error,
    /// A gang's members waited past their timeout (counted once per gang).
    GangTimeout,
    /// The pod waits at PreEnqueue (its gang short of its minimum): the
    /// coordinator records it and writes nothing.
    PreEnqueue,
}

/// Gang members released at Permit: forgotten in the cache (their room is
/// free again) and re-queued with backoff.
pub(super) fn release(s: &Shared, members: &[Placement], now: Instant) {
    if members.is_empty() {
        return;
    }
    for (pod, _) in members {
        s.cache.forget(&pod.uid);
        s.queue.add_backoff(&pod.uid, now);
    }
    s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
}

/// Tells the coordinator, in a task, why `pod`'s attempt did not place
/// it: `message` (a FitError, an error, a gang's release) and a sample of
/// the per-node reasons, as `kind` says.
pub(super) fn report(
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
        pre_enqueue: kind == Report::PreEnqueue,
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
