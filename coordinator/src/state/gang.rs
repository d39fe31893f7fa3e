//! Gang scheduling in the coordinator (PodGroup, scheduler-plugins
//! Coscheduling semantics, Flotilla's placement).
//!
//! # Design
//! - **One worker per gang.** Every pending pod labelled
//!   `scheduling.x-k8s.io/pod-group` goes to the worker already serving its
//!   group (a sticky map group → worker); the first member picks a worker as
//!   any pod does. When that worker leaves, the route is dropped and the
//!   whole group is re-dispatched to one new worker. One worker then sees
//!   every pending member, which upstream's Permit needs (it counts the
//!   group's assumed pods in one scheduler's cache).
//! - **Atomic grant.** The worker holds members at Permit until `minMember`
//!   are placed, then sends them all in one `ProposeGang`. The coordinator
//!   checks each member (its profile's bind checks) against its view with the
//!   earlier members of the same request already placed — reserving as it
//!   goes — and on the first failure releases what it reserved and answers
//!   `CONFLICT`: all or none. Upstream has no such step (its waiting pods
//!   are bound one by one after Permit allows them, and a bind failure leaves
//!   the others bound); neither does any upstream or peer scheduler grant a
//!   gang atomically across schedulers.
//! - **Bindings after the grant.** Once granted, every Binding is written
//!   (concurrently). A Binding that fails then is settled like any failed
//!   bind: the member is released in the view, returned to its worker
//!   (listed in the answer's `failed`) and re-queued with backoff; the
//!   members already bound stay bound, as upstream.
//! - **PodGroup status.** The coordinator keeps `status.phase` (`Pending`
//!   while fewer than `minMember` pods exist, `Scheduling` once they exist,
//!   `Running` once `minMember` of them run; upstream's PodGroup controller
//!   phases), `status.running` and `status.scheduleStartTime`, written best
//!   effort through [`Cluster::update_pod_group_status`].

use std::collections::{HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::{debug, info, warn};

use flotilla_shared::pod_group::{self, PodGroup, PodGroupStatus};
use flotilla_shared::pod_info::PodInfo;

use super::stream::{WorkerEvent, json};
use super::{Coordinator, Decision, Inner, PodPhase};
use crate::cluster::{ClusterError, PodRef, SchedulingEvent};
use crate::partition::WorkerId;

/// `namespace/name` of the PodGroup `pod` belongs to, if any.
pub(super) fn group_of(pod: &PodInfo) -> Option<String> {
    pod_group::full_name(&pod.key.namespace, &pod.labels)
}

/// PodGroups, gang routes and member indexes (inside the coordinator lock).
#[derive(Debug, Default)]
pub(super) struct Gangs {
    /// PodGroup objects by `namespace/name`.
    groups: HashMap<String, Arc<PodGroup>>,
    /// Group → the worker serving its pending members.
    routes: HashMap<String, WorkerId>,
    /// Group → uids of its non-terminal pods (pending or placed).
    members: HashMap<String, HashSet<Arc<str>>>,
    /// Groups whose status may have changed since the last write.
    dirty: HashSet<String>,
    /// Last status written per group: (phase, running).
    written: HashMap<String, (String, i32)>,
}

impl Gangs {
    /// The worker serving `group`, if routed.
    pub(super) fn worker_of(&self, group: &str) -> Option<WorkerId> {
        self.routes.get(group).copied()
    }

    /// Routes `group` to `worker` (sticky until the worker leaves).
    pub(super) fn route(&mut self, group: String, worker: WorkerId) {
        self.routes.insert(group, worker);
    }

    /// Whether some group's status may need a write.
    pub(super) fn has_dirty(&self) -> bool {
        !self.dirty.is_empty()
    }

    /// Drops every route to `worker` (it left).
    pub(super) fn forget_worker(&mut self, worker: WorkerId) {
        self.routes.retain(|_, w| *w != worker);
    }

    /// Every PodGroup.
    pub(super) fn groups(&self) -> impl Iterator<Item = &Arc<PodGroup>> {
        self.groups.values()
    }

    /// PodGroups whose full name is not in `names` (gone after a relist).
    pub(super) fn groups_not_in(&self, names: &HashSet<String>) -> Vec<Arc<PodGroup>> {
        self.groups
            .iter()
            .filter(|(n, _)| !names.contains(*n))
            .map(|(_, g)| g.clone())
            .collect()
    }

    /// Records a PodGroup; whether workers must hear of it (spec, labels or
    /// existence changed: a status-only change is not news to them).
    pub(super) fn apply_group(&mut self, g: Arc<PodGroup>) -> bool {
        let name = g.full_name();
        let news = self
            .groups
            .get(&name)
            .is_none_or(|old| old.spec != g.spec || old.metadata.uid != g.metadata.uid);
        if let Some(old) = self.groups.get(&name)
            && old.metadata.uid != g.metadata.uid
        {
            self.written.remove(&name);
        }
        self.groups.insert(name.clone(), g);
        self.dirty.insert(name);
        news
    }

    /// Forgets a PodGroup; whether it was known.
    pub(super) fn delete_group(&mut self, name: &str) -> bool {
        self.written.remove(name);
        self.groups.remove(name).is_some()
    }

    /// A non-terminal pod was seen (pending or placed).
    pub(super) fn member_seen(&mut self, pod: &PodInfo) {
        if let Some(g) = group_of(pod) {
            self.members
                .entry(g.clone())
                .or_default()
                .insert(pod.uid.clone());
            self.dirty.insert(g);
        }
    }

    /// A pod left (deleted or terminal).
    pub(super) fn member_gone(&mut self, pod: &PodInfo) {
        if let Some(g) = group_of(pod) {
            if let Some(m) = self.members.get_mut(&g) {
                m.remove(&pod.uid);
                if m.is_empty() {
                    self.members.remove(&g);
                    self.routes.remove(&g);
                }
            }
            self.dirty.insert(g);
        }
    }
}

/// What `ProposeGang` answers.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GangDecision {
    /// `Bound` when every member was granted (even if some Bindings then
    /// failed, see `failed`); otherwise why none was granted.
    pub decision: Decision,
    /// Granted members whose Binding failed: re-queue them.
    pub failed: Vec<PodRef>,
}

/// The status a group should show: upstream's PodGroup controller phases
/// from member counts. `members`: non-terminal pods of the group; `running`:
/// those in phase `Running`.
#[must_use]
pub fn desired_phase(min_member: i32, members: usize, running: usize) -> &'static str {
    let min = usize::try_from(min_member.max(0)).unwrap_or(0);
    if members == 0 || members < min {
        pod_group::phase::PENDING
    } else if running >= min.max(1) {
        pod_group::phase::RUNNING
    } else {
        pod_group::phase::SCHEDULING
    }
}

impl Inner {
    /// Status writes due for dirty groups: (group, status to merge).
    fn pod_group_status_updates(&mut self) -> Vec<(Arc<PodGroup>, PodGroupStatus)> {
        let dirty: Vec<String> = self.gangs.dirty.drain().collect();
        let mut out = Vec::new();
        for name in dirty {
            let Some(g) = self.gangs.groups.get(&name).cloned() else {
                continue;
            };
            let (mut members, mut running) = (0usize, 0usize);
            for uid in self.gangs.members.get(&name).into_iter().flatten() {
                let Some(rec) = self.pods.get(uid) else {
                    continue;
                };
                members += 1;
                let pod_running = rec
                    .info
                    .pod_once()
                    .status
                    .as_ref()
                    .and_then(|s| s.phase.as_deref())
                    == Some("Running");
                if matches!(rec.phase, PodPhase::Bound(_)) && pod_running {
                    running += 1;
                }
            }
            let phase = desired_phase(g.spec.min_member, members, running);
            let running = i32::try_from(running).unwrap_or(i32::MAX);
            let current = (g.status.phase.clone().unwrap_or_default(), g.status.running);
            let want = (phase.to_owned(), running);
            if current == want || self.gangs.written.get(&name) == Some(&want) {
                continue;
            }
            self.gangs.written.insert(name, want);
            let mut status = PodGroupStatus {
                phase: Some(phase.to_owned()),
                running,
                ..PodGroupStatus::default()
            };
            if phase != pod_group::phase::PENDING && g.status.schedule_start_time.is_none() {
                status.schedule_start_time = Some(Time(k8s_openapi::jiff::Timestamp::now()));
            }
            out.push((g, status));
        }
        out
    }

    /// A PodGroup was created or changed: the workers are told when its
    /// spec or identity changed.
    pub(super) fn pod_group_applied(&mut self, g: Arc<PodGroup>) {
        if self.gangs.apply_group(g.clone()) {
            self.broadcast(&WorkerEvent::PodGroupUpsert(json(&*g)));
        }
    }

    /// A PodGroup was deleted: the workers are told.
    pub(super) fn pod_group_deleted(&mut self, g: Arc<PodGroup>) {
        let name = g.full_name();
        if self.gangs.delete_group(&name) {
            self.broadcast(&WorkerEvent::PodGroupDeleted(name));
        }
    }
}

impl Coordinator {
    /// Writes the PodGroup statuses that changed (best effort: failures are
    /// logged, the next change writes again).
    pub async fn write_pod_group_status(&self) {
        let updates = self.inner.lock().pod_group_status_updates();
        for (g, status) in updates {
            if let Err(e) = self.cluster.update_pod_group_status(&g, &status).await {
                warn!(pod_group = %g.full_name(), error = %e, "could not update PodGroup status");
                self.inner.lock().gangs.written.remove(&g.full_name());
            }
        }
    }

    /// A worker released a gang whose members waited past the timeout.
    pub fn count_gang_timeout(&self) {
        self.inner.lock().counters.gang_timeouts += 1;
    }

    /// Gang bind arbitration: grants every `(pod, node)` of `members` or
    /// none. Each member is checked (its profile's bind checks) against the
    /// view with the earlier members already placed; the first failure
    /// releases the earlier ones and answers `Conflict` (or `PodGone` when a
    /// member is gone or bound elsewhere). Members already bound where
    /// proposed count as granted (idempotent re-proposal). After the grant,
    /// every Binding is written; failures are listed in
    /// [`GangDecision::failed`] and settled like a failed single bind.
    pub async fn propose_gang(
        &self,
        worker: WorkerId,
        group: &str,
        members: &[(PodRef, String)],
    ) -> GangDecision {
        let none = |decision| GangDecision {
            decision,
            failed: Vec::new(),
        };
        // A pod listed twice would be reserved on two nodes; refuse the
        // whole proposal (a worker bug, not a placement conflict).
        let mut seen = std::collections::HashSet::new();
        if let Some((pod, _)) = members
            .iter()
            .find(|(p, _)| !seen.insert((&p.namespace, &p.name)))
        {
            return none(Decision::Error(format!(
                "pod group {group}: pod {pod} is listed more than once"
            )));
        }
        let granted = {
            let mut inner = self.inner.lock();
            inner.counters.proposals += members.len() as u64;
            inner.last_activity = Some(Instant::now());
            let mut reserved: Vec<Reserved> = Vec::new();
            let mut failure = None;
            for (pod, node) in members {
                match reserve(&mut inner, pod, node) {
                    Ok(Some(r)) => reserved.push(r),
                    Ok(None) => {}
                    Err(d) => {
                        failure = Some(d);
                        break;
                    }
                }
            }
            if let Some(d) = failure {
                for (node, info) in &reserved {
                    inner.unplace(node, &info.uid);
                }
                if matches!(d, Decision::Conflict(_)) {
                    inner.counters.conflicts += 1;
                }
                debug!(
                    pod_group = group,
                    ?d,
                    "gang proposal rejected; nothing granted"
                );
                return none(d);
            }
            // Commit: every reservation becomes a grant.
            inner.counters.grants += reserved.len() as u64;
            inner.counters.gangs_scheduled += 1;
            for (node, info) in &reserved {
                if let Some(rec) = inner.pods.get_mut(&info.uid) {
                    rec.phase = PodPhase::Granted(node.clone());
                }
            }
            inner.gangs.dirty.insert(group.to_owned());
            reserved
        };
        info!(pod_group = group, members = granted.len(), "gang granted");

        let binds = granted.iter().map(|(node, info)| {
            let pod = PodRef {
                namespace: info.key.namespace.to_string(),
                name: info.key.name.to_string(),
                uid: info.uid.to_string(),
            };
            async move {
                let r = self.write_binding(&pod, info, node).await;
                (pod, node.clone(), info.clone(), r)
            }
        });
        let results = futures::future::join_all(binds).await;

        let mut failed = Vec::new();
        let mut events = Vec::new();
        {
            let mut inner = self.inner.lock();
            for (pod, node, info, result) in results {
                match result {
                    Ok(()) => {
                        inner.binding_written(worker, &info, &node);
                        events.push(SchedulingEvent::scheduled(&pod, &node));
                    }
                    Err(e) => {
                        warn!(%pod, %node, error = %e, "gang member's Binding failed");
                        inner.binding_failed(worker, &info, &node);
                        if !matches!(
                            e,
                            ClusterError::PodNotFound(_) | ClusterError::AlreadyBound { .. }
                        ) {
                            failed.push(pod);
                        }
                    }
                }
            }
        }
        for e in events {
            self.cluster.record_event(e);
        }
        self.write_pod_group_status().await;
        GangDecision {
            decision: Decision::Bound,
            failed,
        }
    }
}

/// A member placed in the view for a gang grant: (node, pod).
type Reserved = (Arc<str>, Arc<PodInfo>);

/// Checks one gang member and places it in the view. `Ok(None)`: already
/// bound or granted where proposed.
fn reserve(inner: &mut Inner, pod: &PodRef, node: &str) -> Result<Option<Reserved>, Decision> {
    let Some(rec) = inner.pods.get(pod.uid.as_str()) else {
        return Err(Decision::PodGone(format!("pod {pod} is not pending")));
    };
    match &rec.phase {
        PodPhase::Bound(n) | PodPhase::Granted(n) if &**n == node => return Ok(None),
        PodPhase::Bound(n) | PodPhase::Granted(n) => {
            return Err(Decision::PodGone(format!(
                "pod {pod} is already bound to {n}"
            )));
        }
        PodPhase::Pending(_) => {}
    }
    let info = rec.info.clone();
    let name = inner
        .check_grant(&info, node)
        .map_err(|r| Decision::Conflict(format!("pod {pod}: {}", r.reason(node))))?;
    inner.place(&name, &info);
    Ok(Some((name, info)))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn phases_follow_upstream_controller() {
        // (minMember, members, running) → phase
        let cases = [
            (3, 0, 0, "Pending"),
            (3, 2, 0, "Pending"),
            (3, 3, 0, "Scheduling"),
            (3, 4, 2, "Scheduling"),
            (3, 4, 3, "Running"),
            (0, 1, 0, "Scheduling"),
            (0, 1, 1, "Running"),
        ];
        for (min, members, running, want) in cases {
            assert_eq!(
                desired_phase(min, members, running),
                want,
                "minMember {min}, {members} members, {running} running"
            );
        }
    }
}
