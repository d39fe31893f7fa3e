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

use std::collections::{BTreeSet, HashMap, HashSet};
use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::apimachinery::pkg::apis::meta::v1::Time;
use tracing::{debug, info, warn};

use flotilla_shared::gang::{
    self, GangObject, PodGroupCondition, WorkloadPodGroup, condition, is_workload_key,
};
use flotilla_shared::pod_group::{self, PodGroup, PodGroupStatus};
use flotilla_shared::pod_info::PodInfo;

use super::stream::WorkerEvent;
use super::sync::Deferred;
use super::{Coordinator, Decision, Inner, PodPhase};
use crate::cluster::{ClusterError, PodRef, SchedulingEvent};
use crate::partition::WorkerId;

/// The key of the gang `pod` belongs to, if any ([`gang::gang_of`]).
pub(super) fn group_of(pod: &PodInfo) -> Option<String> {
    gang::gang_of(pod)
}

/// PodGroups of both APIs, gang routes and member indexes (inside the
/// coordinator lock).
#[derive(Debug, Default)]
pub(super) struct Gangs {
    /// PodGroup objects by gang key.
    groups: HashMap<String, GangObject>,
    /// Group → the worker serving its pending members.
    routes: HashMap<String, WorkerId>,
    /// Group → uids of its non-terminal pods (pending or placed) of a
    /// served scheduler name, or bound.
    members: HashMap<String, HashSet<Arc<str>>>,
    /// `scheduling.k8s.io` group → uid → `spec.schedulerName` of every
    /// non-terminal member, served or not (upstream rejects a group whose
    /// pods name different schedulers).
    scheduler_names: HashMap<String, HashMap<Arc<str>, Arc<str>>>,
    /// `scheduling.k8s.io` group → pending members held back (not
    /// dispatched) while the group cannot be scheduled as written.
    held: HashMap<String, HashSet<Arc<str>>>,
    /// Groups whose status may have changed since the last write.
    dirty: HashSet<String>,
    /// Last status written per scheduler-plugins group: (phase, running).
    written: HashMap<String, (String, i32)>,
    /// `scheduling.k8s.io` group → the condition it should show when not
    /// scheduled yet: (reason, message) of the last failure.
    failure: HashMap<String, (&'static str, String)>,
    /// Last condition written per `scheduling.k8s.io` group: (status,
    /// reason, message).
    condition_written: HashMap<String, (String, String, String)>,
    /// Groups whose admission must be checked again once the pod change
    /// being applied is complete ([`Inner::run_gang_checks`]).
    pub(super) to_check: Vec<String>,
}

impl Gangs {
    /// The members `group` must place together (its object's `minMember` /
    /// `gang.minCount`); 0 for a `basic` group or one not known.
    pub(super) fn min_members(&self, group: &str) -> usize {
        self.groups.get(group).map_or(0, |g| g.gang().min_members())
    }

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

    /// Every PodGroup, as workers receive it.
    pub(super) fn group_events(&self) -> impl Iterator<Item = WorkerEvent> + '_ {
        self.groups
            .values()
            .map(|g| WorkerEvent::PodGroupUpsert(Arc::from(g.to_json())))
    }

    /// Keys of the groups of one API (`workload`: `scheduling.k8s.io`) not
    /// in `keys` (gone after a relist).
    pub(super) fn groups_not_in(&self, keys: &HashSet<String>, workload: bool) -> Vec<GangObject> {
        self.groups
            .iter()
            .filter(|(k, _)| is_workload_key(k) == workload && !keys.contains(*k))
            .map(|(_, g)| g.clone())
            .collect()
    }

    /// Records a PodGroup; whether workers must hear of it (spec or
    /// identity changed: a status-only change is not news to them).
    pub(super) fn apply_group(&mut self, g: GangObject) -> bool {
        let key = g.key();
        let news = self.groups.get(&key).is_none_or(|old| match (old, &g) {
            (GangObject::Coscheduling(a), GangObject::Coscheduling(b)) => {
                a.spec != b.spec || a.metadata.uid != b.metadata.uid
            }
            (GangObject::Workload(a), GangObject::Workload(b)) => {
                a.spec != b.spec || a.metadata.uid != b.metadata.uid
            }
            _ => true,
        });
        if self
            .groups
            .get(&key)
            .is_some_and(|old| old.uid() != g.uid())
        {
            self.written.remove(&key);
            self.condition_written.remove(&key);
            self.failure.remove(&key);
        }
        self.groups.insert(key.clone(), g);
        self.dirty.insert(key);
        news
    }

    /// Forgets a PodGroup; whether it was known.
    pub(super) fn delete_group(&mut self, key: &str) -> bool {
        self.written.remove(key);
        self.condition_written.remove(key);
        self.failure.remove(key);
        self.groups.remove(key).is_some()
    }

    /// A non-terminal pod of a served scheduler name (or bound) was seen.
    pub(super) fn member_seen(&mut self, pod: &PodInfo) {
        if let Some(g) = group_of(pod) {
            self.members
                .entry(g.clone())
                .or_default()
                .insert(pod.uid.clone());
            self.dirty.insert(g);
        }
    }

    /// Any non-terminal pod was seen, served or not: its scheduler name
    /// counts toward its `scheduling.k8s.io` group's. Returns the group when
    /// the set of names changed (its admission must be checked again).
    pub(super) fn scheduler_name_seen(&mut self, pod: &PodInfo) -> Option<String> {
        let g = group_of(pod).filter(|g| is_workload_key(g))?;
        let names = self.scheduler_names.entry(g.clone()).or_default();
        let before = distinct(names);
        names.insert(pod.uid.clone(), pod.scheduler_name.clone());
        (distinct(names) != before).then_some(g)
    }

    /// A pod left (deleted or terminal). Returns its `scheduling.k8s.io`
    /// group when that group's scheduler names changed.
    pub(super) fn member_gone(&mut self, pod: &PodInfo) -> Option<String> {
        let g = group_of(pod)?;
        if let Some(m) = self.members.get_mut(&g) {
            m.remove(&pod.uid);
            if m.is_empty() {
                self.members.remove(&g);
                self.routes.remove(&g);
            }
        }
        if let Some(h) = self.held.get_mut(&g) {
            h.remove(&pod.uid);
        }
        self.dirty.insert(g);
        self.scheduler_name_gone(&pod.uid)
    }

    /// A pod known only by its uid left (deleted, or terminal): it no
    /// longer counts toward its group's scheduler names. Returns the group
    /// when they changed.
    pub(super) fn scheduler_name_gone(&mut self, uid: &str) -> Option<String> {
        let g = self
            .scheduler_names
            .iter()
            .find(|(_, m)| m.contains_key(uid))
            .map(|(g, _)| g.clone())?;
        let names = self.scheduler_names.get_mut(&g)?;
        let before = distinct(names);
        names.remove(uid);
        let changed = distinct(names) != before;
        if names.is_empty() {
            self.scheduler_names.remove(&g);
        }
        changed.then_some(g)
    }

    /// Whether the pending members of `group` may be dispatched: always for
    /// a scheduler-plugins group (its plugin decides on the worker); for a
    /// `scheduling.k8s.io` group, `Err` with the message its pods get when
    /// the PodGroup does not exist (upstream GangScheduling's PreEnqueue
    /// message), is invalid (the field and why), or its pods name different
    /// `schedulerName`s (upstream's message, the whole group rejected).
    pub(super) fn admission(&self, group: &str) -> Result<(), String> {
        let Some(name) = group.strip_prefix(gang::WORKLOAD_KEY_PREFIX) else {
            return Ok(());
        };
        let name = name.split_once('/').map_or(name, |(_, n)| n);
        let g = self.groups.get(group).map(GangObject::gang);
        gang::admission(
            name,
            g.as_ref(),
            self.scheduler_names
                .get(group)
                .into_iter()
                .flat_map(|m| m.values().map(|n| &**n)),
        )
    }

    /// A member of `group` failed to schedule (`error`: an error, not a
    /// lack of room): a `scheduling.k8s.io` group not scheduled yet shows
    /// it in its condition.
    pub(super) fn member_failed(&mut self, group: &str, message: &str, error: bool) {
        if !is_workload_key(group)
            || !self.groups.contains_key(group)
            || gang::is_waiting_message(message)
        {
            return;
        }
        let reason = if error {
            condition::REASON_SCHEDULER_ERROR
        } else {
            condition::REASON_UNSCHEDULABLE
        };
        self.failure
            .insert(group.to_owned(), (reason, message.to_owned()));
        self.dirty.insert(group.to_owned());
    }
}

/// Distinct scheduler names among a group's pods.
fn distinct(names: &HashMap<Arc<str>, Arc<str>>) -> BTreeSet<Arc<str>> {
    names.values().cloned().collect()
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

/// A PodGroup status write decided under the lock.
enum StatusWrite {
    /// scheduler-plugins: phase and counters.
    Phase(Arc<PodGroup>, PodGroupStatus),
    /// `scheduling.k8s.io`: the scheduler's condition.
    Condition(Arc<WorkloadPodGroup>, PodGroupCondition),
}

impl Inner {
    /// Status writes due for dirty groups.
    fn pod_group_status_updates(&mut self) -> Vec<StatusWrite> {
        let dirty: Vec<String> = self.gangs.dirty.drain().collect();
        let mut out = Vec::new();
        for key in dirty {
            match self.gangs.groups.get(&key).cloned() {
                Some(GangObject::Coscheduling(g)) => {
                    if let Some(status) = self.phase_update(&key, &g) {
                        out.push(StatusWrite::Phase(g, status));
                    }
                }
                Some(GangObject::Workload(g)) => {
                    if let Some(c) = self.condition_update(&key, &g) {
                        out.push(StatusWrite::Condition(g, c));
                    }
                }
                None => {}
            }
        }
        out
    }

    /// A scheduler-plugins group's phase (upstream's PodGroup controller),
    /// when it differs from what it shows and was last written.
    fn phase_update(&mut self, key: &str, g: &PodGroup) -> Option<PodGroupStatus> {
        let (mut members, mut running) = (0usize, 0usize);
        for uid in self.gangs.members.get(key).into_iter().flatten() {
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
        if current == want || self.gangs.written.get(key) == Some(&want) {
            return None;
        }
        self.gangs.written.insert(key.to_owned(), want);
        let mut status = PodGroupStatus {
            phase: Some(phase.to_owned()),
            running,
            ..PodGroupStatus::default()
        };
        if phase != pod_group::phase::PENDING && g.status.schedule_start_time.is_none() {
            status.schedule_start_time = Some(Time(k8s_openapi::jiff::Timestamp::now()));
        }
        Some(status)
    }

    /// A `scheduling.k8s.io` group's condition (`PodGroupInitiallyScheduled`,
    /// `PodGroupScheduled` in v1alpha2), when it differs from what it shows
    /// and was last written: `True`/`Scheduled` once `minCount` members (one
    /// for `basic`) are granted or bound, and terminal from then on;
    /// otherwise `False` with the last failure (`Unschedulable`, or
    /// `SchedulerError` for an error or a group that cannot be scheduled as
    /// written).
    fn condition_update(&mut self, key: &str, g: &WorkloadPodGroup) -> Option<PodGroupCondition> {
        if g.scheduled_condition().is_some_and(|c| c.status == "True") {
            return None;
        }
        let needed = g
            .min_count()
            .ok()
            .flatten()
            .map_or(1, |m| usize::try_from(m.max(1)).unwrap_or(usize::MAX));
        let placed = self
            .gangs
            .members
            .get(key)
            .into_iter()
            .flatten()
            .filter(|uid| {
                self.pods
                    .get(*uid)
                    .is_some_and(|r| matches!(r.phase, PodPhase::Bound(_) | PodPhase::Granted(_)))
            })
            .count();
        let want = if placed >= needed {
            ("True", condition::REASON_SCHEDULED, String::new())
        } else if let Err(m) = self.gangs.admission(key) {
            ("False", condition::REASON_SCHEDULER_ERROR, m)
        } else if let Some((reason, m)) = self.gangs.failure.get(key) {
            ("False", *reason, m.clone())
        } else {
            return None;
        };
        let want_owned = (want.0.to_owned(), want.1.to_owned(), want.2.clone());
        let shown = g
            .scheduled_condition()
            .map(|c| (c.status.clone(), c.reason.clone(), c.message.clone()));
        if shown.as_ref() == Some(&want_owned)
            || self.gangs.condition_written.get(key) == Some(&want_owned)
        {
            return None;
        }
        self.gangs
            .condition_written
            .insert(key.to_owned(), want_owned);
        Some(PodGroupCondition {
            type_: g.condition_type().to_owned(),
            status: want.0.to_owned(),
            reason: want.1.to_owned(),
            message: want.2,
            last_transition_time: Some(Time(k8s_openapi::jiff::Timestamp::now())),
        })
    }

    /// A PodGroup of either API was created or changed: the workers are
    /// told when its spec or identity changed; held members are checked
    /// again.
    pub(super) fn pod_group_applied(&mut self, g: GangObject) {
        let key = g.key();
        let event = WorkerEvent::PodGroupUpsert(Arc::from(g.to_json()));
        if self.gangs.apply_group(g) {
            self.broadcast(&event);
        }
        self.recheck_gang(&key);
    }

    /// A PodGroup was deleted: the workers are told; a `scheduling.k8s.io`
    /// group's pending members are held again.
    pub(super) fn pod_group_deleted(&mut self, g: &GangObject) {
        let key = g.key();
        if self.gangs.delete_group(&key) {
            self.broadcast(&WorkerEvent::PodGroupDeleted(key.clone()));
        }
        self.recheck_gang(&key);
    }

    /// Holds pending pod `uid` (a member of `group`) back from the workers
    /// with `message`, reported on the pod (`FailedScheduling` Event,
    /// `PodScheduled=False`) when it changed.
    pub(super) fn hold_gang_member(&mut self, group: &str, uid: &Arc<str>, message: String) {
        self.unassign(uid);
        self.undispatched.retain(|u| u != uid);
        let Some(rec) = self.pods.get_mut(uid) else {
            return;
        };
        rec.phase = PodPhase::Pending(None);
        let report = rec.unschedulable.as_deref() != Some(&message);
        rec.unschedulable = Some(message.clone());
        let pod = rec.info.pod();
        self.gangs
            .held
            .entry(group.to_owned())
            .or_default()
            .insert(uid.clone());
        if report {
            info!(pod = %rec.info.key, pod_group = group, %message, "gang member held");
            self.deferred.push(Deferred::Unschedulable(pod, message));
        }
    }

    /// Runs the admission checks queued while applying a pod change.
    pub(super) fn run_gang_checks(&mut self) {
        for g in std::mem::take(&mut self.gangs.to_check) {
            self.recheck_gang(&g);
        }
    }

    /// Checks `group`'s admission again: members held are dispatched once it
    /// passes; pending members are taken back from their worker and held
    /// when it fails (a member naming another scheduler joined, the
    /// PodGroup was deleted or made invalid). Nothing before the caches are
    /// synced (pods are not dispatched yet then).
    pub(super) fn recheck_gang(&mut self, group: &str) {
        if !self.synced || !is_workload_key(group) {
            return;
        }
        self.gangs.dirty.insert(group.to_owned());
        match self.gangs.admission(group) {
            Ok(()) => {
                let held: Vec<Arc<str>> = self
                    .gangs
                    .held
                    .remove(group)
                    .into_iter()
                    .flatten()
                    .collect();
                for uid in held {
                    if self
                        .pods
                        .get(&uid)
                        .is_some_and(|r| matches!(r.phase, PodPhase::Pending(_)))
                    {
                        self.dispatch(&uid);
                    }
                }
            }
            Err(message) => {
                let pending: Vec<Arc<str>> = self
                    .gangs
                    .members
                    .get(group)
                    .into_iter()
                    .flatten()
                    .filter(|uid| {
                        self.pods
                            .get(*uid)
                            .is_some_and(|r| matches!(r.phase, PodPhase::Pending(_)))
                    })
                    .cloned()
                    .collect();
                for uid in pending {
                    self.hold_gang_member(group, &uid, message.clone());
                }
            }
        }
    }
}

impl Coordinator {
    /// Writes the PodGroup statuses that changed (best effort: failures are
    /// logged, the next change writes again).
    pub async fn write_pod_group_status(&self) {
        let updates = self.inner.lock().pod_group_status_updates();
        for w in updates {
            match w {
                StatusWrite::Phase(g, status) => {
                    if let Err(e) = self.cluster.update_pod_group_status(&g, &status).await {
                        warn!(pod_group = %g.full_name(), error = %e, "could not update PodGroup status");
                        self.inner.lock().gangs.written.remove(&g.full_name());
                    }
                }
                StatusWrite::Condition(g, c) => {
                    if let Err(e) = self.cluster.set_workload_pod_group_condition(&g, &c).await {
                        warn!(pod_group = %g.full_name(), error = %e, "could not update PodGroup condition");
                        self.inner.lock().gangs.condition_written.remove(&g.key());
                    }
                }
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
        // A pod listed twice (by name or by uid) would be reserved on two
        // nodes; refuse the whole proposal (a worker bug, not a placement
        // conflict).
        let (mut names, mut uids) = (HashSet::new(), HashSet::new());
        if let Some((pod, _)) = members.iter().find(|(p, _)| {
            let new_name = names.insert((&p.namespace, &p.name));
            let new_uid = uids.insert(&p.uid);
            !(new_name && new_uid)
        }) {
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
                match reserve(&mut inner, worker, group, pod, node) {
                    Ok(Some(r)) => reserved.push(r),
                    Ok(None) => {}
                    Err(d) => {
                        failure = Some(d);
                        break;
                    }
                }
            }
            // All or nothing: the grant may not leave the group with fewer
            // than its minimum placed (a worker proposing members beyond
            // the minimum while the proposal of the minimum itself is
            // refused must not get them bound alone).
            if failure.is_none()
                && let Some(short) = inner.gang_short(group, reserved.len())
            {
                failure = Some(Decision::Conflict(short));
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
                let mut r = match self.pre_bind(&pod, info).await {
                    Ok(()) => self.write_binding(&pod, info, node).await,
                    Err(super::volumes::PreBindError::Gone(e)) => Err(e),
                    Err(e) => Err(ClusterError::BindRejected(e.message())),
                };
                if matches!(r, Err(ClusterError::OutcomeUnknown(_))) {
                    // The member's room stays granted until the outcome is
                    // known, as a single pod's.
                    r = self.learn_outcome(&pod, info, node, r).await;
                }
                (pod, node.clone(), info.clone(), r)
            }
        });
        let results = futures::future::join_all(binds).await;

        let mut failed = Vec::new();
        let mut events = Vec::new();
        {
            let mut inner = self.inner.lock();
            for (pod, node, info, result) in results {
                inner.binding_settled(worker, &info, &node, &result);
                match result {
                    Ok(()) => events.push(SchedulingEvent::scheduled(&pod, &node)),
                    Err(e) => {
                        warn!(%pod, %node, error = %e, "gang member's Binding failed");
                        // Not re-queued: gone, bound, or (given up at
                        // shutdown) perhaps bound.
                        if !matches!(
                            e,
                            ClusterError::PodNotFound(_)
                                | ClusterError::AlreadyBound { .. }
                                | ClusterError::OutcomeUnknown(_)
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

impl Inner {
    /// Why granting `adding` more members of `group` would leave it with
    /// fewer placed (bound or granted) than its minimum; `None` when it
    /// would not (or the group has no minimum, or is unknown).
    fn gang_short(&self, group: &str, adding: usize) -> Option<String> {
        let min = self.gangs.min_members(group);
        if min == 0 {
            return None;
        }
        let placed = self.gangs.members.get(group).map_or(0, |uids| {
            uids.iter()
                .filter(|u| {
                    self.pods.get(*u).is_some_and(|r| {
                        matches!(r.phase, PodPhase::Bound(_) | PodPhase::Granted(_))
                    })
                })
                .count()
        });
        (placed + adding < min).then(|| {
            format!(
                "pod group {group}: {} of its minimum {min} members would be placed",
                placed + adding
            )
        })
    }
}

/// A member placed in the view for a gang grant: (node, pod).
type Reserved = (Arc<str>, Arc<PodInfo>);

/// Checks one gang member and places it in the view. `Ok(None)`: already
/// bound or granted where proposed.
fn reserve(
    inner: &mut Inner,
    worker: WorkerId,
    group: &str,
    pod: &PodRef,
    node: &str,
) -> Result<Option<Reserved>, Decision> {
    let Some(rec) = inner.pods.get(pod.uid.as_str()) else {
        return Err(Decision::PodGone(format!("pod {pod} is not pending")));
    };
    if *rec.info.key.namespace != *pod.namespace || *rec.info.key.name != *pod.name {
        return Err(Decision::Error(format!(
            "pod {pod}: uid {} belongs to pod {}",
            pod.uid, rec.info.key
        )));
    }
    if group_of(&rec.info).as_deref() != Some(group) {
        return Err(Decision::Error(format!(
            "pod {pod} is not a member of pod group {group}"
        )));
    }
    match &rec.phase {
        // Its PreBind may still fail: not counted as placed yet (as a
        // single pod's repeated proposal, `Coordinator::arbitrate`).
        PodPhase::Granted(n) if &**n == node && inner.volume_plans.contains_key(&*rec.info.uid) => {
            return Err(Decision::Error(format!(
                "pod {pod} is granted {n}, its volumes being bound (PreBind); not bound yet"
            )));
        }
        PodPhase::Bound(n) | PodPhase::Granted(n) if &**n == node => return Ok(None),
        PodPhase::Bound(n) | PodPhase::Granted(n) => {
            return Err(Decision::PodGone(format!(
                "pod {pod} is already bound to {n}"
            )));
        }
        PodPhase::Pending(Some(w)) if *w == worker => {}
        PodPhase::Pending(_) => return Err(super::bind::not_assigned(pod, "ProposeGang")),
    }
    let info = rec.info.clone();
    let (name, plan) = inner
        .check_grant(&info, node)
        .map_err(|r| Decision::Conflict(format!("pod {pod}: {}", r.reason(node))))?;
    // Gang members hold the tightest GPU devices on the arbiter's view.
    let info = inner.with_devices(&info, &name, None);
    inner.place(&name, &info);
    inner.reserve_volumes(&info.uid, plan);
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
