//! Pod records: each pod as the cluster shows it, its priority resolved
//! from its PriorityClass, and its dispatch to a worker of its class.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::core::v1::Pod;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use tracing::{info_span, warn};

use flotilla_shared::WorkloadClass;
use flotilla_shared::pod_info::PodInfo;
use flotilla_shared::priority::PriorityClasses;
use flotilla_shared::trace::Carrier;

use super::report::NodeRejection;
use super::stream::{PodIdentity, WorkerEvent};
use super::sync::Deferred;
use super::{Coordinator, Inner, WorkerEntry, gang};
use crate::partition::WorkerId;

/// Where a pod stands, from the coordinator's point of view.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PodPhase {
    /// Waiting to be placed, by this worker (None: no worker yet).
    Pending(Option<WorkerId>),
    /// The arbiter granted `node`; the Binding is being written.
    Granted(Arc<str>),
    /// Bound to `node` (by us or anyone else).
    Bound(Arc<str>),
}

/// What the coordinator knows about one pod.
#[derive(Debug, Clone)]
pub struct PodRecord {
    /// The compiled pod.
    pub info: Arc<PodInfo>,
    /// Phase.
    pub phase: PodPhase,
    /// When the coordinator first saw it pending (latency starts here).
    pub first_seen: Instant,
    /// When its Binding succeeded (set by our binds only).
    pub bound_at: Option<Instant>,
    /// Name of the worker whose proposal bound it.
    pub bound_by: Option<Arc<str>>,
    /// Last FitError message reported for it (cleared when it binds), or
    /// the error of its last attempt when [`PodRecord::failing`].
    pub unschedulable: Option<String>,
    /// Its last attempt failed with an error (an extender, a webhook, a
    /// rejected Binding), not a fit: it is pending and retried after its
    /// backoff; `unschedulable` holds the message.
    pub failing: bool,
    /// Its worker holds it at PreEnqueue (a gang short of its minimum):
    /// counted as gated, as upstream's queue does, not pending; nothing
    /// was written on the pod. `unschedulable` holds the message.
    pub waiting: bool,
    /// The per-node reasons behind that message, for inspection: a sample
    /// of at most `flotilla_proto::v1::MAX_NODE_STATUSES` nodes (the
    /// message counts them all).
    pub rejections: Arc<[NodeRejection]>,
    /// The worker whose proposal was granted, until the bound pod comes
    /// back from the cluster (that worker's confirmation is sent then).
    pub granted_to: Option<WorkerId>,
    /// The copy of the pod its worker was last sent (`assigned_pod`): when
    /// the bound pod is that copy plus its Binding, the worker gets the
    /// short `pod_bound` confirmation instead of the whole object.
    pub sent: Option<Arc<PodInfo>>,
}

impl PodRecord {
    /// A record for a pod first seen now, in `phase`.
    fn new(info: Arc<PodInfo>, phase: PodPhase) -> Self {
        PodRecord {
            info,
            phase,
            first_seen: Instant::now(),
            bound_at: None,
            bound_by: None,
            unschedulable: None,
            failing: false,
            waiting: false,
            rejections: Arc::from([]),
            granted_to: None,
            sent: None,
        }
    }
}

/// Whether `new` differs from `old` in what a node's view of its pods
/// holds: labels (affinity, spread, instance caps), annotations (instance
/// caps), the deletion timestamp (terminating pods do not count), requests
/// and host ports (fit), the GPU devices held (written with the Binding:
/// the worker whose grant it is gets the bound copy, not a confirmation,
/// so it counts the devices the arbiter granted, which may not be the
/// ones it chose).
fn placement_changed(old: &PodInfo, new: &PodInfo) -> bool {
    old.labels != new.labels
        || old.max_instances_annotation != new.max_instances_annotation
        || old.requests != new.requests
        || old.host_ports != new.host_ports
        || old.terminating != new.terminating
        || old.gpu != new.gpu
}

/// Whether the bound copy `new` of a pod differs from `old`, its copy
/// before the Binding, in anything a worker's cache holds of a placed pod
/// besides the node: what [`placement_changed`] compares, its priority and
/// start time (preemption's victim order). A pod's spec cannot change in
/// the rest (affinity terms, tolerations, containers' images).
fn bound_changed(old: &PodInfo, new: &PodInfo) -> bool {
    placement_changed(old, new)
        || old.priority != new.priority
        || old.start_time != new.start_time
        || old.terminal != new.terminal
}

impl Inner {
    /// Tells every worker that `pod` is bound to `node`: the whole object
    /// (its JSON, shared by every worker's event), except to `confirm_to`,
    /// the worker whose grant it is and which holds it assumed as is, which
    /// gets the short `pod_bound` confirmation.
    fn broadcast_bound(&self, info: &PodInfo, node: &Arc<str>, confirm_to: Option<WorkerId>) {
        let mut whole = None;
        for (id, w) in &self.workers {
            let Some(tx) = &w.tx else {
                continue;
            };
            let e = if Some(*id) == confirm_to {
                WorkerEvent::PodBound {
                    pod: PodIdentity::of(info),
                    node: node.clone(),
                }
            } else {
                WorkerEvent::BoundPod(whole.get_or_insert_with(|| info.json()).clone())
            };
            let _ = tx.send(e);
        }
    }

    /// The pool `pod` goes to: its profile's `workloadClass`, which
    /// overrides the pod's own class, else the pod's.
    fn class_of(&self, pod: &PodInfo) -> WorkloadClass {
        self.scheduler_names
            .get(&*pod.scheduler_name)
            .copied()
            .flatten()
            .unwrap_or(pod.class)
    }

    /// Picks the live worker for a class: its own pool if any, else any
    /// pool; least assigned pods first, then lowest id.
    fn pick_worker(&self, class: WorkloadClass) -> Option<WorkerId> {
        let live = |w: &&WorkerEntry| w.tx.is_some();
        let best = |same_class: bool| {
            self.workers
                .iter()
                .filter(|(_, w)| live(w) && (!same_class || w.class == class))
                .min_by_key(|(id, w)| (w.assigned.len(), **id))
                .map(|(id, _)| *id)
        };
        best(true).or_else(|| best(false))
    }

    /// Sends pending pod `uid` to a worker (its gang's, else the one
    /// `pick_worker` picks for its class), starting its trace; until the
    /// caches are synced, or while no worker is live, it waits in
    /// `undispatched`. A pod waiting for its PriorityClass is not sent.
    pub(super) fn dispatch(&mut self, uid: &Arc<str>) {
        if self.unresolved.contains_key(uid) {
            // Waits for its PriorityClass (retried when classes change).
            return;
        }
        let Some(rec) = self.pods.get(uid) else {
            return;
        };
        if !matches!(rec.phase, PodPhase::Pending(_)) {
            return;
        }
        let class = self.class_of(&rec.info);
        let group = gang::group_of(&rec.info);
        if self.synced
            && let Some(g) = &group
            && let Err(message) = self.gangs.admission(g)
        {
            // A `scheduling.k8s.io` group that cannot be scheduled yet (or
            // as written): its members wait here, the reason on each.
            let g = g.clone();
            self.hold_gang_member(&g, uid, message);
            return;
        }
        let picked = if self.synced {
            // A gang goes whole to the worker already serving it.
            group
                .as_ref()
                .and_then(|g| self.gangs.worker_of(g))
                .filter(|w| self.workers.get(w).is_some_and(|e| e.tx.is_some()))
                .or_else(|| self.pick_worker(class))
        } else {
            // Not before the caches are synced (the node list may still be
            // on its way): the pod waits in `undispatched`.
            None
        };
        let Some(w) = picked else {
            if let Some(rec) = self.pods.get_mut(uid) {
                rec.phase = PodPhase::Pending(None);
            }
            self.undispatched.push_back(uid.clone());
            return;
        };
        self.hand_to(uid, w, class, group);
    }

    /// Hands pending pod `uid` (of `class`, in gang `group`) to worker `w`:
    /// records the assignment and sends the pod, starting its trace.
    fn hand_to(
        &mut self,
        uid: &Arc<str>,
        w: WorkerId,
        class: WorkloadClass,
        group: Option<String>,
    ) {
        let mut trace_context = Carrier::new();
        let Some(pod) = self.pods.get(uid).map(|r| r.info.json()) else {
            return;
        };
        if let Some(rec) = self.pods.get_mut(uid) {
            rec.phase = PodPhase::Pending(Some(w));
            rec.sent = Some(rec.info.clone());
            // The pod's trace starts here; the worker continues it.
            let span = info_span!(
                "dispatch",
                pod = %rec.info.key,
                worker = %self.workers.get(&w).map_or("", |e| &*e.name),
                class = %class,
            );
            trace_context = flotilla_shared::trace::inject(&span);
        }
        if let Some(g) = group {
            self.gangs.route(g, w);
        }
        if let Some(entry) = self.workers.get_mut(&w) {
            entry.assigned.insert(uid.clone());
        }
        flotilla_shared::metrics::metrics()
            .dispatched_pods
            .with_label_values(&[class.as_str()])
            .inc();
        if !self.send_to(w, WorkerEvent::AssignedPod { pod, trace_context }) {
            warn!(worker = w, "worker stream closed while dispatching");
        }
    }

    /// Worker `joined` opened its stream: it takes its share of its pool's
    /// backlog, the pods of its class handed to other workers and not
    /// tried yet (no report on them). Those another pool held while this
    /// one had no worker all come to it; then each worker of the pool above
    /// an even share gives up its excess, lowest priority and newest first
    /// (what it would reach last), until `joined` holds its share. Gang members
    /// stay with their gang's worker, nominated pods with the worker that
    /// preempted for them, pods already found unschedulable where they
    /// wait for a change. A moved pod is taken back from its worker
    /// (`UnassignedPod`): a proposal for it still in flight there is
    /// refused as not assigned, and the worker forgets it.
    pub(super) fn rebalance(&mut self, joined: WorkerId) -> usize {
        let Some(class) = self.workers.get(&joined).map(|w| w.class) else {
            return 0;
        };
        // Pods of `class` that worker `w` holds and may give up.
        let movable = |inner: &Inner, w: WorkerId, uid: &Arc<str>| {
            inner.pods.get(uid).is_some_and(|r| {
                r.phase == PodPhase::Pending(Some(w))
                    && r.unschedulable.is_none()
                    && gang::group_of(&r.info).is_none()
                    && !inner.nominated.contains_key(uid)
                    && inner.class_of(&r.info) == class
            })
        };
        let backlog_of = |inner: &Inner, id: WorkerId, e: &WorkerEntry| -> Vec<Arc<str>> {
            e.assigned
                .iter()
                .filter(|u| movable(inner, id, u))
                .cloned()
                .collect()
        };
        // The pool's pods another pool held while this one had no worker
        // come home whole.
        let mut moved: Vec<Arc<str>> = self
            .workers
            .iter()
            .filter(|(_, e)| e.tx.is_some() && e.class != class)
            .flat_map(|(id, e)| backlog_of(self, *id, e))
            .collect();
        let mut backlogs: Vec<(WorkerId, Vec<Arc<str>>)> = self
            .workers
            .iter()
            .filter(|(_, e)| e.tx.is_some() && e.class == class)
            .map(|(id, e)| (*id, backlog_of(self, *id, e)))
            .collect();
        let total: usize = backlogs.iter().map(|(_, b)| b.len()).sum::<usize>() + moved.len();
        let share = total / backlogs.len().max(1);
        let held = backlogs
            .iter()
            .find(|(id, _)| *id == joined)
            .map_or(0, |(_, b)| b.len())
            + moved.len();
        let mut wanted = share.saturating_sub(held);
        // The most loaded give first.
        backlogs.sort_by_key(|(id, b)| (std::cmp::Reverse(b.len()), *id));
        for (id, mut backlog) in backlogs {
            if id == joined || wanted == 0 {
                continue;
            }
            let give = backlog.len().saturating_sub(share).min(wanted);
            if give == 0 {
                continue;
            }
            backlog.sort_by_cached_key(|u| {
                let r = &self.pods[u];
                (r.info.priority, std::cmp::Reverse(r.first_seen), u.clone())
            });
            moved.extend(backlog.into_iter().take(give));
            wanted -= give;
        }
        for uid in &moved {
            self.unassign(uid);
            let Some(rec) = self.pods.get_mut(uid) else {
                continue;
            };
            rec.phase = PodPhase::Pending(None);
            let info = rec.info.clone();
            let class = self.class_of(&info);
            self.hand_to(uid, joined, class, None);
        }
        if !moved.is_empty() {
            flotilla_shared::metrics::metrics()
                .rebalanced_pods
                .with_label_values(&[class.as_str()])
                .inc_by(moved.len() as u64);
        }
        moved.len()
    }

    /// Takes pending pod `uid` back from the worker it was sent to.
    pub(super) fn unassign(&mut self, uid: &Arc<str>) {
        let Some(rec) = self.pods.get(uid) else {
            return;
        };
        if let PodPhase::Pending(Some(w)) = rec.phase {
            let msg = WorkerEvent::UnassignedPod(PodIdentity::of(&rec.info));
            if let Some(entry) = self.workers.get_mut(&w) {
                entry.assigned.remove(uid);
            }
            self.send_to(w, msg);
        }
    }

    /// PriorityClasses changed: recompile them and try the pods waiting
    /// for a class again.
    pub(super) fn classes_changed(&mut self) {
        let classes: Vec<PriorityClass> = self
            .priority_classes
            .values()
            .map(|c| (**c).clone())
            .collect();
        self.classes = PriorityClasses::new(&classes);
        let waiting: Vec<Arc<Pod>> = self
            .unresolved
            .keys()
            .filter_map(|u| self.pods.get(u))
            .map(|r| r.info.pod())
            .collect();
        for pod in waiting {
            Coordinator::apply_pod(self, pod);
        }
        self.run_gang_checks();
    }

    /// A pod was deleted (or left the watched set): its record, worker,
    /// nomination and room go, and the workers are told.
    pub(super) fn pod_deleted(&mut self, pod: Arc<Pod>) {
        let Some(uid) = pod.metadata.uid.as_deref() else {
            return;
        };
        self.foreign.remove(uid);
        if let Some(g) = self.gangs.scheduler_name_gone(uid) {
            self.recheck_gang(&g);
        }
        let Some((uid, _)) = self.pods.get_key_value(uid) else {
            return;
        };
        let uid = uid.clone();
        self.unassign(&uid);
        self.unresolved.remove(&uid);
        self.evicting.remove(&uid);
        let rec = self.pods.remove(&uid).expect("present");
        if let Some(g) = self.gangs.member_gone(&rec.info) {
            self.recheck_gang(&g);
        }
        self.clear_nomination(&rec.info);
        if let PodPhase::Granted(n) | PodPhase::Bound(n) = &rec.phase {
            self.unplace(n, &uid);
        }
        self.undispatched.retain(|u| *u != uid);
        self.broadcast(&WorkerEvent::PodDeleted(PodIdentity::of(&rec.info)));
    }

    /// A PriorityClass was created or changed.
    pub(super) fn priority_class_applied(&mut self, pc: Arc<PriorityClass>) {
        if let Some(name) = pc.metadata.name.clone() {
            self.priority_classes.insert(name, pc);
            self.classes_changed();
        }
    }

    /// A PriorityClass was deleted.
    pub(super) fn priority_class_deleted(&mut self, pc: Arc<PriorityClass>) {
        if let Some(name) = pc.metadata.name.as_deref()
            && self.priority_classes.remove(name).is_some()
        {
            self.classes_changed();
        }
    }
}

impl Coordinator {
    /// `pod` with `spec.priority` resolved from its PriorityClass when
    /// admission did not set it, and the error when its class does not
    /// exist (the pod is then returned as it is).
    fn resolve_priority(inner: &Inner, pod: Arc<Pod>) -> (Arc<Pod>, Option<String>) {
        if pod.spec.as_ref().is_none_or(|s| s.priority.is_some()) {
            return (pod, None);
        }
        let mut resolved = (*pod).clone();
        // Admission fixes a pod's priority once: a later change of the
        // classes does not move it.
        let earlier = pod
            .metadata
            .uid
            .as_deref()
            .filter(|u| !inner.unresolved.contains_key(*u))
            .and_then(|u| inner.pods.get(u))
            .map(|r| r.info.pod());
        let earlier = earlier
            .as_deref()
            .and_then(|p| p.spec.as_ref())
            .filter(|s| s.priority.is_some());
        if let (Some(earlier), Some(spec)) = (earlier, resolved.spec.as_mut()) {
            spec.priority = earlier.priority;
            if spec.preemption_policy.is_none() {
                spec.preemption_policy
                    .clone_from(&earlier.preemption_policy);
            }
            if spec.priority_class_name.is_none() {
                spec.priority_class_name
                    .clone_from(&earlier.priority_class_name);
            }
            return (Arc::new(resolved), None);
        }
        match inner.classes.admit(&mut resolved) {
            Ok(_) => (Arc::new(resolved), None),
            Err(e) => (pod, Some(e.to_string())),
        }
    }

    /// Records that pending `info` waits for its PriorityClass; reports it
    /// to the cluster once classes were listed.
    fn hold_unresolved(inner: &mut Inner, info: &Arc<PodInfo>, message: String) {
        let reported = inner.unresolved.get(&info.uid).copied().unwrap_or(false);
        let report = !reported && inner.classes_listed;
        inner
            .unresolved
            .insert(info.uid.clone(), reported || report);
        if let Some(rec) = inner.pods.get_mut(&info.uid) {
            rec.unschedulable = Some(message.clone());
        }
        if report {
            warn!(pod = %info.key, %message, "pod not dispatched");
            inner
                .deferred
                .push(Deferred::Unschedulable(info.pod(), message));
        }
    }

    /// A pod was created or changed (or listed): its record follows it
    /// (pending, bound, gone terminal), and the workers are told what
    /// concerns them.
    pub(super) fn apply_pod(inner: &mut Inner, pod: Arc<Pod>) {
        let (pod, unresolved) = Self::resolve_priority(inner, pod);
        let info = match PodInfo::from_pod(pod.clone()) {
            Ok(mut i) => {
                // Held for the pod's lifetime: as JSON, a tenth of the `Pod`.
                i.keep_json();
                Arc::new(i)
            }
            Err(err) => {
                warn!(error = %err, "pod cannot be read; it will not be scheduled");
                inner.invalid.insert(err.pod.clone(), err.to_string());
                return;
            }
        };
        let uid = info.uid.clone();
        inner.foreign.remove(&uid);
        let existing = inner.pods.get(&uid).cloned();
        if !info.terminal
            && (info.node_name.is_some()
                || inner.scheduler_names.contains_key(&*info.scheduler_name))
        {
            inner.gangs.member_seen(&info);
        }
        let names_changed = if info.terminal {
            inner.gangs.scheduler_name_gone(&uid)
        } else {
            inner.gangs.scheduler_name_seen(&info)
        };
        if let Some(g) = names_changed {
            // Checked once the pod's own record is in place (below).
            inner.gangs.to_check.push(g);
        }
        if info.terminal {
            inner.unresolved.remove(&uid);
            inner.evicting.remove(&uid);
            if let Some(rec) = existing {
                inner.clear_nomination(&rec.info);
                inner.unassign(&uid);
                if let PodPhase::Granted(n) | PodPhase::Bound(n) = &rec.phase {
                    inner.unplace(n, &uid);
                    inner.broadcast(&WorkerEvent::PodDeleted(PodIdentity::of(&info)));
                }
                inner.pods.remove(&uid);
                if let Some(g) = inner.gangs.member_gone(&rec.info) {
                    inner.gangs.to_check.push(g);
                }
            }
            return;
        }
        if let Some(node) = info.node_name.clone() {
            // Bound in the cluster.
            if let Some(message) = unresolved {
                warn!(pod = %info.key, %message, "bound pod counts with priority 0");
            }
            inner.unresolved.remove(&uid);
            inner.clear_nomination(&info);
            // Bound: its volume reservation ends, as when its own Binding
            // is written (a PreBind still waiting sees the pod bound and
            // gives up; the same node keeps the pod placed without an
            // `unplace`, which would otherwise end it).
            inner.unreserve_volumes(&uid);
            let mut rec = existing
                .unwrap_or_else(|| Box::new(PodRecord::new(info.clone(), PodPhase::Pending(None))));
            // The worker whose grant this Binding is, when all it lacks is
            // the Binding itself: the copy it was last sent is the last one
            // seen here, and nothing a placed pod is counted by changed.
            let confirm_to = match &rec.phase {
                PodPhase::Granted(n) | PodPhase::Bound(n) if *n == node => rec
                    .granted_to
                    .take()
                    .filter(|_| rec.sent.as_ref().is_some_and(|c| Arc::ptr_eq(c, &rec.info)))
                    .filter(|_| !bound_changed(&rec.info, &info)),
                _ => None,
            };
            rec.granted_to = None;
            rec.sent = None;
            match &rec.phase {
                PodPhase::Granted(n) | PodPhase::Bound(n) if *n == node => {
                    // The same node: swap in the new copy when what the
                    // arbiter counts changed (labels, a deletionTimestamp,
                    // resized requests), so it sees the pod as the workers
                    // do. The usual Granted → Bound confirmation changes
                    // none of it and costs nothing here.
                    if placement_changed(&rec.info, &info) {
                        inner.unplace(&node, &uid);
                        inner.place(&node, &info);
                    } else {
                        inner.swap_placed(&node, &info);
                    }
                }
                PodPhase::Granted(n) | PodPhase::Bound(n) => {
                    let n = n.clone();
                    inner.unplace(&n, &uid);
                    inner.place(&node, &info);
                }
                PodPhase::Pending(_) => {
                    inner.pods.insert(uid.clone(), rec.clone());
                    inner.unassign(&uid);
                    inner.undispatched.retain(|u| *u != uid);
                    inner.place(&node, &info);
                }
            }
            rec.phase = PodPhase::Bound(node.clone());
            rec.unschedulable = None;
            rec.info = info.clone();
            inner.pods.insert(uid, rec);
            inner.broadcast_bound(&info, &node, confirm_to);
            return;
        }
        if !inner.scheduler_names.contains_key(&*info.scheduler_name) {
            inner.foreign.insert(uid);
            return;
        }
        match existing {
            None => {
                inner.pods.insert(
                    uid.clone(),
                    Box::new(PodRecord::new(info.clone(), PodPhase::Pending(None))),
                );
                if let Some(message) = unresolved {
                    Self::hold_unresolved(inner, &info, message);
                }
                inner.dispatch(&uid);
            }
            Some(rec) => {
                let old = rec.info.pod_once();
                let changed = old.spec != pod.spec || old.metadata.labels != pod.metadata.labels;
                if let Some(r) = inner.pods.get_mut(&uid) {
                    r.info = info.clone();
                }
                match unresolved {
                    Some(message) => Self::hold_unresolved(inner, &info, message),
                    None if inner.unresolved.remove(&uid).is_some() => {
                        // Its class appeared: schedule it now.
                        if let Some(r) = inner.pods.get_mut(&uid) {
                            r.unschedulable = None;
                        }
                        inner.dispatch(&uid);
                    }
                    None => {
                        if changed && let PodPhase::Pending(Some(w)) = rec.phase {
                            inner.send_to(
                                w,
                                WorkerEvent::AssignedPod {
                                    pod: info.json(),
                                    trace_context: Carrier::new(),
                                },
                            );
                            if let Some(r) = inner.pods.get_mut(&uid) {
                                r.sent = Some(info.clone());
                            }
                        }
                    }
                }
            }
        }
    }
}
