//! The session's periodic work.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_util::sync::CancellationToken;
use tracing::{info, warn};

use flotilla_shared::framework::ClusterEvent;

use super::Shared;
use super::reports::{Report, report};

/// Every 200 ms until `stop`: queue and cache gauges, expiry of assumed
/// pods never confirmed and of gangs waiting past their timeout, the
/// unschedulable pool's periodic flush.
pub(super) async fn housekeeping(s: Arc<Shared>, stop: CancellationToken) {
    let mut tick = tokio::time::interval(Duration::from_millis(200));
    loop {
        tokio::select! {
            () = stop.cancelled() => return,
            _ = tick.tick() => {}
        }
        let lengths = s.queue.lengths();
        *s.stats.queue.lock() = lengths;
        for (g, v) in s.metrics.pending.iter().zip([
            lengths.active,
            lengths.backoff,
            lengths.unschedulable,
            lengths.gated,
        ]) {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        let (nodes, pods, assumed) = s.cache.sizes();
        for (g, v) in s.metrics.cache.iter().zip([nodes, pods, assumed]) {
            g.set(i64::try_from(v).unwrap_or(i64::MAX));
        }
        let now = Instant::now();
        let expired = s.cache.cleanup_expired(now);
        if let Some(first) = expired.first() {
            // One line per sweep: a worker waking from a freeze finds
            // thousands.
            warn!(pods = expired.len(), first = %first, "assumed pods expired without confirmation");
        }
        for _ in &expired {
            s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
        }
        for gang in s.cycle(&[]).expire_gangs(now) {
            info!(pod_group = %gang.group, members = gang.members.len(), "gang members waited past the timeout; releasing them");
            for (i, (pod, _)) in gang.members.iter().enumerate() {
                s.queue.add_backoff(&pod.uid, now);
                let kind = if i == 0 {
                    Report::GangTimeout
                } else {
                    Report::Unschedulable
                };
                report(&s, pod, gang.message.clone(), Vec::new(), kind);
            }
            s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
        }
        s.queue.flush_unschedulable_leftover(now);
        s.queue.notify();
    }
}
