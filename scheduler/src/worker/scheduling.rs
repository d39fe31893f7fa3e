//! The scheduling thread: pops a pod (or a batch of one profile's pods, for
//! a batched placement webhook), runs its attempt through
//! [`crate::cycle::Cycle`], and applies the [`Decision`] the cycle returns.

use std::collections::VecDeque;
use std::sync::Arc;
use std::sync::atomic::Ordering;
use std::time::{Duration, Instant};

use tracing::{debug, info_span, warn};

use flotilla_proto::v1 as pb;
use flotilla_shared::PodInfo;

use super::binding::{bind_gang, propose_bind, propose_preemption};
use super::reports::{Report, release, report};
use super::telemetry::{AttemptClock, attach_trace};
use super::{Shared, nanos};
use crate::cache::Snapshot;
use crate::cycle::{Cycle, Decision, Unschedulable};
use crate::framework::AttemptResult;
use crate::queue::QueuedPodInfo;
use crate::webhook::Webhook;

/// How long the scheduling thread waits for confirmations before it goes
/// on anyway (a stalled confirmation must not stop scheduling).
const UNCONFIRMED_WAIT: Duration = Duration::from_secs(1);

/// The thread's loop, until the queue is closed.
pub(super) fn scheduling_loop(s: &Arc<Shared>, worker: &str) {
    let mut snapshot = Snapshot::default();
    // Pods popped while filling a webhook batch that belong elsewhere.
    let mut later: VecDeque<QueuedPodInfo> = VecDeque::new();
    loop {
        let next = match later.pop_front() {
            Some(qp) => Some(qp),
            None => s.queue.pop_blocking(Duration::from_millis(200)),
        };
        // Run no further ahead of the cluster's confirmations than the
        // window allows (see `crate::window`).
        s.cache.wait_for_room(s.window.size(), UNCONFIRMED_WAIT);
        match next {
            Some(qp) => {
                let pdbs = s.pdbs.compiled();
                let cycle = s.cycle(&pdbs);
                match cycle.batched_webhook(&qp.pod).cloned() {
                    None => run_one(s, &cycle, worker, &mut snapshot, &qp),
                    Some(hook) => {
                        let batch = fill_batch(s, qp, &hook, &mut later);
                        run_batch(s, &cycle, worker, &mut snapshot, &batch);
                    }
                }
            }
            None if s.queue.is_closed() => return,
            None => {}
        }
    }
}

/// `first` and more pods of its profile, up to `batch.maxPods`, waiting at
/// most `batch.maxWait` for them; pods of other profiles popped meanwhile go
/// to `later` (scheduled next, in order).
fn fill_batch(
    s: &Shared,
    first: QueuedPodInfo,
    hook: &Webhook,
    later: &mut VecDeque<QueuedPodInfo>,
) -> Vec<QueuedPodInfo> {
    let profile = first.pod.scheduler_name.clone();
    let cfg = hook.config().batch;
    let deadline = Instant::now() + cfg.max_wait;
    let mut batch = vec![first];
    // Pods already popped for later that belong here come first.
    let mut i = 0;
    while i < later.len() && batch.len() < cfg.max_pods {
        if later[i].pod.scheduler_name == profile {
            batch.extend(later.remove(i));
        } else {
            i += 1;
        }
    }
    while batch.len() < cfg.max_pods {
        let wait = deadline.saturating_duration_since(Instant::now());
        match s.queue.pop_blocking(wait) {
            None => break,
            Some(qp) if qp.pod.scheduler_name == profile => batch.push(qp),
            Some(qp) => later.push_back(qp),
        }
    }
    batch
}

/// One pod's attempt, in its `scheduling_cycle` span.
fn run_one(
    s: &Arc<Shared>,
    cycle: &Cycle<'_>,
    worker: &str,
    snapshot: &mut Snapshot,
    qp: &QueuedPodInfo,
) {
    let pod = &qp.pod;
    let span = info_span!(
        "scheduling_cycle",
        pod = %pod.key,
        worker,
        class = %pod.class,
        profile = %pod.scheduler_name,
        attempt = qp.attempts + 1,
        evaluated = tracing::field::Empty,
        feasible = tracing::field::Empty,
        node = tracing::field::Empty,
        score = tracing::field::Empty,
        result = tracing::field::Empty,
    );
    attach_trace(s, &span, &pod.uid);
    let _enter = span.enter();
    let start = Instant::now();
    let attempt = cycle.schedule_one(snapshot, pod, qp.attempts, start);
    let elapsed = start.elapsed();
    apply(
        s,
        pod,
        attempt.decision,
        elapsed,
        AttemptClock::of(qp, start),
        snapshot,
    );
}

/// One batched webhook round; the round's time is shared among its pods.
fn run_batch(
    s: &Arc<Shared>,
    cycle: &Cycle<'_>,
    worker: &str,
    snapshot: &mut Snapshot,
    batch: &[QueuedPodInfo],
) {
    let span = info_span!("webhook_batch", worker, pods = batch.len());
    let _enter = span.enter();
    let start = Instant::now();
    let pods: Vec<(Arc<PodInfo>, u32)> = batch
        .iter()
        .map(|qp| (qp.pod.clone(), qp.attempts))
        .collect();
    let attempts = cycle.schedule_batch(snapshot, &pods, start);
    let share = start.elapsed() / u32::try_from(batch.len()).unwrap_or(u32::MAX).max(1);
    for (qp, a) in batch.iter().zip(attempts) {
        apply(
            s,
            &qp.pod,
            a.decision,
            share,
            AttemptClock::of(qp, start),
            snapshot,
        );
    }
}

/// Applies one attempt's decision (`cycle` is the time it took): the
/// binding cycle for a placed pod, Permit's wait, the gang's proposal, the
/// unschedulable path (queue, report, preemption proposal), or backoff.
fn apply(
    s: &Arc<Shared>,
    pod: &Arc<PodInfo>,
    decision: Decision,
    cycle: Duration,
    attempt: AttemptClock,
    snapshot: &Snapshot,
) {
    let now = Instant::now();
    if let Decision::NoProfile(message) = decision {
        // The coordinator serves a scheduler name this worker's
        // configuration lacks (both must load the same file).
        warn!(%message, "cannot schedule the pod");
        s.stats.errors.fetch_add(1, Ordering::Relaxed);
        s.queue.add_unschedulable(&pod.uid, Default::default(), now);
        report(s, pod, message, Vec::new(), Report::Unschedulable);
        return;
    }
    s.stats.attempts.fetch_add(1, Ordering::Relaxed);
    s.stats
        .cycle_nanos
        .fetch_add(nanos(cycle), Ordering::Relaxed);
    s.metrics.busy.inc_by(cycle.as_secs_f64());
    if s.stopping.load(Ordering::Acquire) {
        // The session is ending (the cycle outlived the shutdown, e.g. on a
        // slow extender): place and report nothing; the coordinator hands
        // the pod out again, and the session's cache goes with it.
        return;
    }
    let Some(framework) = s.profiles.for_pod(pod) else {
        return;
    };
    let span = tracing::Span::current();
    if let Decision::Bind(r) | Decision::Wait(r) | Decision::BindGang { result: r, .. } = &decision
    {
        span.record("node", &*r.node);
        span.record("score", r.score);
        span.record("evaluated", r.evaluated);
        span.record("feasible", r.feasible);
        span.record("result", "placed");
        flotilla_shared::metrics::metrics()
            .scheduling_algorithm_duration
            .observe(cycle.as_secs_f64());
        debug!(node = %r.node, score = r.score, evaluated = r.evaluated, feasible = r.feasible, outside_partition = r.outside_partition, "placed");
        if r.outside_partition && snapshot.partition_len() > 0 {
            s.stats.fallbacks.fetch_add(1, Ordering::Relaxed);
        }
    }
    match decision {
        Decision::Bind(r) => {
            // The pod as assumed: holding the GPU devices Reserve chose.
            let pod = match r.gpu_devices {
                Some(d) => Arc::new(pod.with_gpu_devices(d)),
                None => pod.clone(),
            };
            propose_bind(s, pod, r.node, r.alternatives, &span, cycle, attempt);
        }
        Decision::Wait(r) => {
            debug!(node = %r.node, "waiting at Permit for the rest of the gang");
        }
        Decision::BindGang { group, members, .. } => {
            s.tracker.spawn_on(
                bind_gang(s.clone(), group, members, cycle, attempt),
                &s.runtime,
            );
        }
        Decision::Unschedulable(u) => {
            span.record("result", "unschedulable");
            unschedulable(s, framework, pod, *u, attempt, now);
        }
        Decision::Pending { message, declined } => {
            // A pod the webhook declined waits in the unschedulable pool for
            // a cluster event (no plugin recorded: any event retries it);
            // after a failure it backs off, as after any error.
            debug!(pod = %pod.key, %message, declined, "left pending by the placement webhook");
            let (result, kind) = if declined {
                s.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
                s.queue.add_unschedulable(&pod.uid, Default::default(), now);
                (AttemptResult::Unschedulable, Report::Unschedulable)
            } else {
                s.stats.errors.fetch_add(1, Ordering::Relaxed);
                s.queue.add_backoff(&pod.uid, now);
                (AttemptResult::Error, Report::Error)
            };
            framework.metrics().attempt(result, cycle);
            report(s, pod, message, Vec::new(), kind);
        }
        Decision::Error { message, report: r } => {
            span.record("result", "error");
            warn!(error = %message, "scheduling attempt failed; backing off");
            framework
                .metrics()
                .attempt(AttemptResult::Error, attempt.started.elapsed());
            s.stats.errors.fetch_add(1, Ordering::Relaxed);
            s.queue.add_backoff(&pod.uid, now);
            if let Some(r) = r {
                report(s, pod, r, Vec::new(), Report::Error);
            }
        }
        Decision::NoProfile(_) => {}
    }
}

/// The unschedulable path: the pod waits for the events its rejecting
/// plugins registered for; released gang members back off; the
/// coordinator hears the FitError (and whether the nomination ends); a
/// preemption candidate is proposed.
fn unschedulable(
    s: &Arc<Shared>,
    framework: &crate::Framework,
    pod: &Arc<PodInfo>,
    u: Unschedulable,
    attempt: AttemptClock,
    now: Instant,
) {
    s.stats.unschedulable.fetch_add(1, Ordering::Relaxed);
    framework
        .metrics()
        .attempt(AttemptResult::Unschedulable, attempt.started.elapsed());
    if u.clear_nomination {
        s.queue.set_nominated_node(&pod.uid, None);
    }
    if !u.gang_rejected {
        release(s, &u.released, now);
        s.queue.add_unschedulable(&pod.uid, u.plugins.clone(), now);
    } else {
        // A `scheduling.k8s.io` gang rejected as a unit (upstream's pod
        // group cycle): every member waits, as this one does, for an event
        // that may help, with its status; the room they held is free for
        // the others, an event that does not wake the gang itself.
        let members: Vec<Arc<str>> = u.released.iter().map(|(m, _)| m.uid.clone()).collect();
        for (m, _) in &u.released {
            s.cache.forget(&m.uid);
            report(s, m, u.message.clone(), Vec::new(), Report::Unschedulable);
        }
        for m in s
            .queue
            .add_unschedulable_group(&pod.uid, &members, &u.plugins, now)
        {
            report(s, &m, u.message.clone(), Vec::new(), Report::Unschedulable);
        }
        if !members.is_empty() {
            let mut group = members;
            group.push(pod.uid.clone());
            s.queue.on_event_except(
                flotilla_shared::framework::ClusterEvent::AssignedPodDeleted,
                now,
                &group,
            );
        }
    }
    debug!(message = %u.message, "unschedulable");
    if u.pre_enqueue {
        // Waiting for its group (upstream's PreEnqueue): no status, no
        // Event; the coordinator only counts it as waiting.
        report(s, pod, u.message, Vec::new(), Report::PreEnqueue);
        return;
    }
    // A sample: the message counts every node.
    let node_statuses = u
        .fit
        .iter()
        .flat_map(|fit| fit.diagnosis.node_to_status.iter())
        .take(pb::MAX_NODE_STATUSES)
        .map(|(node, st)| pb::NodeStatus {
            node_name: node.to_string(),
            reasons: st.reasons.iter().map(ToString::to_string).collect(),
            plugin: st.plugin.to_owned(),
        })
        .collect();
    let kind = if u.clear_nomination {
        Report::NoPreemptionCandidate
    } else {
        Report::Unschedulable
    };
    report(s, pod, u.message, node_statuses, kind);
    if let Some(c) = u.nominate {
        debug!(node = %c.node, victims = c.victims.len(), "preempting");
        propose_preemption(s, pod, &c.node, &c.victims);
    }
}
