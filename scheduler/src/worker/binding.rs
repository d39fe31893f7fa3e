//! Binding cycles and preemption proposals: what the worker sends the
//! coordinator for a decision that placed or nominated a pod, and how the
//! answer settles it (confirmed, or forgotten and re-queued).

use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tracing::{Instrument as _, debug, warn};

use flotilla_proto::v1 as pb;
use flotilla_shared::PodInfo;
use flotilla_shared::framework::ClusterEvent;
use flotilla_shared::trace;

use super::bind_stream;
use super::reports::release;
use super::telemetry::{AttemptClock, binding_span, forget_trace, traced};
use super::{Shared, nanos};
use crate::framework::AttemptResult;
use crate::gang::Placement;

/// The wire reference to a pod.
pub(super) fn pb_ref(p: &PodInfo) -> pb::PodRef {
    pb::PodRef {
        namespace: p.key.namespace.to_string(),
        name: p.key.name.to_string(),
        uid: p.uid.to_string(),
    }
}

/// Sends `ProposePreemption` for `pod` (in a task): on `GRANTED` the pod
/// stays in the unschedulable pool (the victims' deletions bring it back,
/// as upstream); on `CONFLICT` it retries after the conflict delay
/// ([`crate::queue::SchedulingQueue::preemption_refused`]); on `POD_GONE`
/// it is dropped.
pub(super) fn propose_preemption(
    s: &Arc<Shared>,
    pod: &Arc<PodInfo>,
    node: &str,
    victims: &[Arc<PodInfo>],
) {
    s.stats.preemption_attempts.fetch_add(1, Ordering::Relaxed);
    flotilla_shared::metrics::metrics()
        .preemption_attempts
        .inc();
    // Claim the room at once, as upstream's nominator does in the cycle:
    // this worker's next preemptors and pods then see it taken, before the
    // coordinator's answer (and its broadcast) arrives. Undone if refused.
    s.cache.set_nominated(pod.clone(), node);
    let mut client = s.client.clone();
    let req = traced(pb::PreemptionProposal {
        worker_id: s.id.clone(),
        pod: Some(pb_ref(pod)),
        node_name: node.to_owned(),
        victims: victims.iter().map(|v| pb_ref(v)).collect(),
    });
    let n = victims.len() as u64;
    let s2 = s.clone();
    let pod = pod.clone();
    s.tracker.spawn_on(
        async move {
            match client.propose_preemption(req).await {
                Ok(r) => {
                    let d = r.into_inner();
                    match pb::PreemptionOutcome::try_from(d.outcome) {
                        Ok(pb::PreemptionOutcome::Granted) => {
                            s2.stats.preemption_victims.fetch_add(n, Ordering::Relaxed);
                            #[allow(clippy::cast_precision_loss)]
                            flotilla_shared::metrics::metrics()
                                .preemption_victims
                                .observe(n as f64);
                        }
                        Ok(pb::PreemptionOutcome::PodGone) => {
                            debug!(pod = %pod.key, reason = %d.reason, "preemptor gone; dropping it");
                            s2.cache.clear_nominated(&pod.uid);
                            s2.queue.delete(&pod.uid);
                        }
                        _ => {
                            debug!(pod = %pod.key, reason = %d.reason, "preemption refused");
                            s2.cache.clear_nominated(&pod.uid);
                            // A stale view, as a bind conflict: retry soon.
                            s2.queue.preemption_refused(&pod.uid, Instant::now());
                        }
                    }
                }
                Err(status) => {
                    s2.cache.clear_nominated(&pod.uid);
                    if !s2.stopping.load(Ordering::Acquire) {
                        warn!(%status, "ProposePreemption failed");
                    }
                    s2.stats.errors.fetch_add(1, Ordering::Relaxed);
                }
            }
        },
        &s.runtime,
    );
}

/// Records a binding's outcome in the metrics: the proposal, the attempt
/// (a bound pod's attempt ends here, as upstream's ends with its Binding),
/// and, once bound, the pod's attempts and end-to-end latency.
fn record_binding(
    s: &Shared,
    pod: &PodInfo,
    outcome: pb::BindOutcome,
    alternative: bool,
    attempt: AttemptClock,
    cycle: Duration,
) {
    let (i, result) = match outcome {
        pb::BindOutcome::Bound if alternative => (4, AttemptResult::Scheduled),
        pb::BindOutcome::Bound => (0, AttemptResult::Scheduled),
        pb::BindOutcome::Conflict => (1, AttemptResult::Error),
        pb::BindOutcome::PodGone => (3, AttemptResult::Error),
        pb::BindOutcome::Error | pb::BindOutcome::Unspecified => (2, AttemptResult::Error),
    };
    s.metrics.proposals[i].inc();
    if let Some(fw) = s.profiles.for_pod(pod) {
        fw.metrics().attempt(result, attempt.started.elapsed());
    }
    if result == AttemptResult::Scheduled {
        let attempts = attempt.attempts + 1;
        let m = flotilla_shared::metrics::metrics();
        m.pod_scheduling_attempts.observe(f64::from(attempts));
        s.metrics.pod_attempts.observe(f64::from(attempts));
        m.pod_scheduling_sli_duration
            .with_label_values(&[&attempts.to_string()])
            .observe(attempt.queued.elapsed().as_secs_f64());
    } else if outcome != pb::BindOutcome::PodGone {
        s.metrics.wasted.inc_by(cycle.as_secs_f64());
    }
}

/// The wire form of the GPU devices `pod` holds (bit i = device i; 0 for
/// none).
fn gpu_devices_of(pod: &PodInfo) -> u64 {
    pod.gpu
        .as_deref()
        .and_then(|g| g.devices)
        .map_or(0, |d| d.0)
}

/// A proposal sent on the bind stream, until its answer.
pub(super) struct InFlightBind {
    pub(super) pod: Arc<PodInfo>,
    pub(super) node: Arc<str>,
    /// Offered to the arbiter should `node`'s room be taken.
    pub(super) alternatives: Vec<Arc<str>>,
    pub(super) cycle: Duration,
    pub(super) attempt: AttemptClock,
    /// The binding cycle's span (its outcome is recorded with the answer).
    pub(super) span: tracing::Span,
}

/// Starts the binding cycle of an assumed pod (`cycle_span` is its
/// scheduling cycle's): a proposal on the session's bind stream, or, with
/// no stream, a `ProposeBind` call in a task. The answer settles it
/// ([`settle_binding`]).
pub(super) fn propose_bind(
    s: &Arc<Shared>,
    pod: Arc<PodInfo>,
    node: Arc<str>,
    alternatives: Vec<Arc<str>>,
    cycle_span: &tracing::Span,
    cycle: Duration,
    attempt: AttemptClock,
) {
    let span = binding_span(&trace::inject(cycle_span));
    s.cache.mark_proposed(&pod.uid);
    let payload = InFlightBind {
        pod,
        node,
        alternatives,
        cycle,
        attempt,
        span,
    };
    let payload = match &s.bind_stream {
        Some(b) => {
            let req = pb_ref(&payload.pod);
            let node = payload.node.to_string();
            let alternatives = payload
                .alternatives
                .iter()
                .map(ToString::to_string)
                .collect();
            let tc = trace::inject(&payload.span);
            let gpus = gpu_devices_of(&payload.pod);
            match b.propose(req, node, alternatives, gpus, tc, payload) {
                Ok(()) => return,
                // The stream is gone (the session is ending): the unary
                // call settles it like any other failure.
                Err(p) => p,
            }
        }
        None => payload,
    };
    let InFlightBind {
        pod,
        node,
        alternatives,
        cycle,
        attempt,
        span,
    } = payload;
    s.tracker.spawn_on(
        bind(s.clone(), pod, node, alternatives, cycle, attempt).instrument(span),
        &s.runtime,
    );
}

/// The binding cycle for one assumed pod over a `ProposeBind` call.
async fn bind(
    s: Arc<Shared>,
    pod: Arc<PodInfo>,
    node: Arc<str>,
    alternatives: Vec<Arc<str>>,
    cycle: Duration,
    attempt: AttemptClock,
) {
    // The semaphore is never closed, so acquiring only waits.
    let _permit = s.binds.clone().acquire_owned().await;
    let mut client = s.client.clone();
    let req = pb::BindProposal {
        worker_id: s.id.clone(),
        pod: Some(pb_ref(&pod)),
        node_name: node.to_string(),
        alternatives: alternatives.iter().map(ToString::to_string).collect(),
        gpu_devices: gpu_devices_of(&pod),
    };
    let res = client.propose_bind(traced(req)).await;
    let answer = match res {
        Ok(r) => {
            let d = r.into_inner();
            bind_stream::Answer {
                outcome: pb::BindOutcome::try_from(d.outcome).unwrap_or(pb::BindOutcome::Error),
                reason: d.reason,
                granted_node: (!d.node_name.is_empty()).then_some(d.node_name),
                stream_failed: false,
            }
        }
        Err(status) => bind_stream::Answer {
            outcome: pb::BindOutcome::Error,
            reason: status.to_string(),
            granted_node: None,
            stream_failed: true,
        },
    };
    tracing::Span::current().record("outcome", answer.outcome.as_str_name());
    settle_binding(&s, &pod, &node, &answer, cycle, attempt);
}

/// The end of a binding cycle, given the coordinator's answer: confirmed
/// (the assumed pod's expiry clock starts), or forgotten and re-queued
/// (after a conflict shortly, after an error with backoff), or forgotten
/// and dropped (the pod is gone or bound elsewhere).
pub(super) fn settle_binding(
    s: &Shared,
    pod: &Arc<PodInfo>,
    node: &Arc<str>,
    answer: &bind_stream::Answer,
    cycle: Duration,
    attempt: AttemptClock,
) {
    let now = Instant::now();
    let outcome = answer.outcome;
    let reason = &answer.reason;
    let alternative = answer
        .granted_node
        .as_deref()
        .filter(|g| *g != &**node && outcome == pb::BindOutcome::Bound);
    record_binding(s, pod, outcome, alternative.is_some(), attempt, cycle);
    match outcome {
        pb::BindOutcome::Bound => {
            if let Some(granted) = alternative {
                // The room on `node` was taken first; the arbiter bound the
                // pod to the next best node that still fit.
                debug!(pod = %pod.key, %node, granted, "first choice taken; bound to an alternative");
                s.stats.alternatives.fetch_add(1, Ordering::Relaxed);
                // A near miss: this worker's view was stale, as in a
                // conflict, so it runs less far ahead.
                s.window.on_conflict(now);
                s.cache.move_assumed(&pod.uid, granted);
            }
            s.window.on_bound();
            s.cache.finish_binding(&pod.uid, now);
            s.queue.done(&pod.uid);
            s.stats.bound.fetch_add(1, Ordering::Relaxed);
            forget_trace(s, &pod.uid);
        }
        pb::BindOutcome::Conflict | pb::BindOutcome::Error | pb::BindOutcome::Unspecified => {
            if outcome == pb::BindOutcome::Conflict {
                debug!(pod = %pod.key, %node, %reason, "bind conflict; retrying shortly");
                s.window.on_conflict(now);
                s.stats.conflicts.fetch_add(1, Ordering::Relaxed);
            } else {
                // A failed call means the connection is going: the broken
                // stream is reported once; one warning per pod would flood.
                if answer.stream_failed || s.stopping.load(Ordering::Acquire) {
                    debug!(pod = %pod.key, %node, %reason, "binding failed during shutdown");
                } else {
                    warn!(pod = %pod.key, %node, %reason, "binding failed; re-queueing with backoff");
                }
                s.stats.errors.fetch_add(1, Ordering::Relaxed);
            }
            s.stats
                .wasted_nanos
                .fetch_add(nanos(cycle), Ordering::Relaxed);
            s.cache.forget(&pod.uid);
            if outcome == pb::BindOutcome::Conflict {
                s.queue.add_conflict(&pod.uid, now);
            } else {
                s.queue.add_backoff(&pod.uid, now);
            }
            // Forgetting freed room in our cache: pods waiting on it may fit.
            s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
        }
        pb::BindOutcome::PodGone => {
            debug!(pod = %pod.key, %reason, "pod gone; dropping it");
            s.cache.forget(&pod.uid);
            s.queue.delete(&pod.uid);
        }
    }
}

/// The binding cycle of a gang: one `ProposeGang` with every member; all
/// bound, or all released (forgotten, re-queued with backoff) together.
pub(super) async fn bind_gang(
    s: Arc<Shared>,
    group: String,
    members: Vec<Placement>,
    cycle: Duration,
    attempt: AttemptClock,
) {
    let _permit = s.binds.clone().acquire_owned().await;
    let mut client = s.client.clone();
    let req = pb::GangProposal {
        worker_id: s.id.clone(),
        pod_group: group.clone(),
        members: members
            .iter()
            .map(|(p, n)| pb::GangMember {
                pod: Some(pb_ref(p)),
                node_name: n.to_string(),
            })
            .collect(),
    };
    let res = client.propose_gang(traced(req)).await;
    let now = Instant::now();
    let (outcome, reason, failed) = match res {
        Ok(r) => {
            let d = r.into_inner();
            (
                pb::BindOutcome::try_from(d.outcome).unwrap_or(pb::BindOutcome::Error),
                d.reason,
                d.failed,
            )
        }
        Err(status) => (pb::BindOutcome::Error, status.to_string(), Vec::new()),
    };
    // One proposal, recorded with the attempt that completed the gang.
    if let Some((last, _)) = members.last() {
        record_binding(&s, last, outcome, false, attempt, cycle);
    }
    if outcome == pb::BindOutcome::Bound {
        let failed: std::collections::HashSet<&str> =
            failed.iter().map(|p| p.uid.as_str()).collect();
        let mut retry = Vec::new();
        for (pod, node) in &members {
            if failed.contains(&*pod.uid) {
                retry.push((pod.clone(), node.clone()));
            } else {
                s.cache.finish_binding(&pod.uid, now);
                s.queue.done(&pod.uid);
                s.stats.bound.fetch_add(1, Ordering::Relaxed);
            }
        }
        if !retry.is_empty() {
            s.gangs.proposal_failed(&group, &retry);
            warn!(pod_group = %group, failed = retry.len(), "gang granted but some Bindings failed; re-queueing them");
            s.stats
                .errors
                .fetch_add(retry.len() as u64, Ordering::Relaxed);
            release(&s, &retry, now);
        }
        return;
    }
    if outcome == pb::BindOutcome::Conflict {
        debug!(pod_group = %group, %reason, "gang refused; releasing every member");
        s.stats.conflicts.fetch_add(1, Ordering::Relaxed);
    } else if !s.stopping.load(Ordering::Acquire) {
        warn!(pod_group = %group, %reason, "gang binding failed; releasing every member");
        s.stats.errors.fetch_add(1, Ordering::Relaxed);
    }
    s.stats
        .wasted_nanos
        .fetch_add(nanos(cycle), Ordering::Relaxed);
    s.gangs.proposal_failed(&group, &members);
    // Members that joined the waiting set meanwhile go back too (upstream
    // Unreserve rejects every waiting sibling).
    let mut all = members;
    all.extend(s.gangs.reject_waiting(&group));
    release(&s, &all, now);
}
