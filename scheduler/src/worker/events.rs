//! The coordinator's watch events applied to the session's state: nodes,
//! namespaces and bound pods into the cache, assigned pods into the queue,
//! PodGroups into the gang book, PodDisruptionBudgets into their store,
//! volume objects into [`super::volumes::WorkerVolumes`]. This
//! is the one writer of cluster state in a worker.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use tracing::{debug, warn};

use flotilla_proto::v1 as pb;
use flotilla_shared::PodInfo;
use flotilla_shared::framework::ClusterEvent;
use flotilla_shared::node_info::NodeSpec;
use flotilla_shared::trace;
use flotilla_shared::volumes::{VolumeKey, VolumeKind, VolumeObject};

use super::Shared;
use super::telemetry::forget_trace;

/// Compiles a pod the coordinator sent, keeping its JSON rather than the
/// decoded object (see [`PodInfo::from_json`]): a worker holds every pod of
/// the cluster, and the object itself is read only by extenders, webhooks
/// and preemption's victim check.
fn parse_pod(raw: &pb::RawObject) -> Option<Arc<PodInfo>> {
    match PodInfo::from_json(&raw.json) {
        Ok(p) => Some(Arc::new(p)),
        Err(e) => {
            warn!(error = %e, "coordinator sent a pod that cannot be read");
            None
        }
    }
}

/// Compiles a node the coordinator sent, keeping its JSON rather than the
/// decoded `Node` ([`NodeSpec::from_json`]).
fn parse_node(raw: &pb::RawObject) -> Option<NodeSpec> {
    NodeSpec::from_json(&raw.json)
        .map_err(|e| warn!(error = %e, "coordinator sent a node that cannot be read"))
        .ok()
}

/// The volume kind of the wire's `VolumeKind` (`None`: unspecified or
/// unknown).
fn volume_kind(wire: i32) -> Option<VolumeKind> {
    Some(match pb::VolumeKind::try_from(wire).ok()? {
        pb::VolumeKind::Unspecified => return None,
        pb::VolumeKind::Claim => VolumeKind::Claim,
        pb::VolumeKind::Pv => VolumeKind::Pv,
        pb::VolumeKind::StorageClass => VolumeKind::StorageClass,
        pb::VolumeKind::CsiNode => VolumeKind::CsiNode,
        pb::VolumeKind::CsiDriver => VolumeKind::CsiDriver,
        pb::VolumeKind::VolumeAttachment => VolumeKind::VolumeAttachment,
    })
}

/// Applies one event from the coordinator; `trace_context` is the
/// dispatch span's context sent with an assigned pod (empty when tracing is
/// off), which its next scheduling cycle continues.
///
/// # Errors
/// The event contradicts this worker's state (a `pod_bound` for a pod it
/// does not hold assumed): the session must start over, from a replay.
pub(super) fn apply_event(
    s: &Arc<Shared>,
    event: pb::watch_event::Event,
    trace_context: trace::Carrier,
) -> Result<(), String> {
    use pb::watch_event::Event;
    let now = Instant::now();
    match event {
        Event::NodeUpsert(raw) => {
            if let Some(spec) = parse_node(&raw) {
                for ev in s.cache.upsert_node(spec) {
                    s.queue.on_event(ev, now);
                }
            }
        }
        Event::NodeDeleted(d) => s.cache.remove_node(&d.name),
        Event::PodBound(b) => {
            let (uid, node) = (b.pod.map(|p| p.uid).unwrap_or_default(), b.node_name);
            // Assumed elsewhere: the arbiter granted one of the proposal's
            // alternatives and this confirmation overtook its answer.
            let confirmed = s.cache.confirm_assumed(&uid, &node).or_else(|| {
                s.cache
                    .move_assumed(&uid, &node)
                    .then(|| s.cache.confirm_assumed(&uid, &node))
                    .flatten()
            });
            let Some(pod) = confirmed else {
                return Err(format!(
                    "the coordinator confirmed pod {uid} on {node}, which this worker does not hold assumed there"
                ));
            };
            s.gangs.pod_bound(&pod);
            allow_waiting_members(s, &pod, now);
            s.queue.on_event(ClusterEvent::AssignedPodAdded, now);
        }
        Event::BoundPod(raw) => {
            if let Some(pod) = parse_pod(&raw) {
                s.gangs.pod_bound(&pod);
                allow_waiting_members(s, &pod, now);
                // Bound by anyone: not ours to schedule any more.
                if !s.cache.is_assumed(&pod.uid) {
                    s.queue.delete(&pod.uid);
                }
                s.cache.add_bound_pod(pod);
                s.queue.on_event(ClusterEvent::AssignedPodAdded, now);
            }
        }
        Event::PodDeleted(r) => {
            forget_trace(s, &r.uid);
            s.gangs.pod_gone(&r.uid);
            s.queue.delete(&r.uid);
            if s.cache.remove_pod(&r.uid) {
                s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
            }
        }
        Event::AssignedPod(raw) => {
            if let Some(pod) = parse_pod(&raw) {
                if !trace_context.is_empty() {
                    s.traces.lock().entry(pod.uid.clone()).or_default().parent =
                        Some(trace_context);
                }
                // Its own nomination (status.nominatedNodeName) holds room
                // for it against lower-priority pods of this worker.
                match pod.nominated_node_name.as_deref() {
                    Some(node) => s.cache.set_nominated(pod.clone(), node),
                    None => {
                        s.cache.clear_nominated(&pod.uid);
                    }
                }
                // A new pod, or an update (e.g. its last scheduling gate
                // removed): the queue re-checks its gates either way.
                let member = s.gangs.pod_pending(&pod);
                s.queue.add(pod, now);
                if member {
                    s.queue.on_event(ClusterEvent::UnscheduledPodAdded, now);
                }
            }
        }
        Event::UnassignedPod(r) => {
            forget_trace(s, &r.uid);
            // A gang member taken back while it waited at Permit (its
            // PodGroup deleted or made invalid, a member of another
            // scheduler joined): its room is free again.
            if !s.gangs.is_bound(&r.uid) && s.gangs.pod_gone(&r.uid) {
                s.cache.forget(&r.uid);
                s.queue.on_event(ClusterEvent::AssignedPodDeleted, now);
            }
            s.queue.delete(&r.uid);
        }
        Event::PodGroupUpsert(raw) => {
            match flotilla_shared::gang::GangObject::from_json(&raw.json) {
                Ok(g) => {
                    s.gangs.apply(&g);
                    // A lower minimum (or `basic`) may let waiting members go.
                    if let Some((group, members)) = s.gangs.allow_waiting_group(&g.key()) {
                        propose_gang_now(s, group, members, now);
                    }
                    s.queue.on_event(ClusterEvent::PodGroupChanged, now);
                }
                Err(e) => warn!(error = %e, "coordinator sent a PodGroup that does not parse"),
            }
        }
        Event::PodGroupDeleted(name) => s.gangs.delete_group(&name),
        Event::Partition(p) => {
            debug!(nodes = p.node_names.len(), epoch = p.epoch, "partition");
            s.cache
                .set_partition(p.node_names.iter().map(|n| Arc::from(n.as_str())));
        }
        Event::NamespaceUpsert(ns) => {
            s.cache
                .upsert_namespace(&ns.name, ns.labels.into_iter().collect());
        }
        Event::NamespaceDeleted(name) => s.cache.remove_namespace(&name),
        Event::Synced(_) => {}
        Event::PdbUpsert(raw) => match serde_json::from_slice::<PodDisruptionBudget>(&raw.json) {
            Ok(pdb) => s.pdbs.upsert(pdb),
            Err(e) => {
                warn!(error = %e, "coordinator sent a PodDisruptionBudget that does not parse")
            }
        },
        Event::PdbDeleted(r) => {
            s.pdbs.remove(&r.namespace, &r.name);
        }
        Event::VolumeUpsert(v) => {
            let decoded = volume_kind(v.kind).map(|kind| VolumeObject::from_json(kind, &v.json));
            match decoded {
                Some(Ok(obj)) => {
                    let ev = s.volumes.lock().upsert(&obj, &s.cache);
                    if let Some(ev) = ev {
                        s.queue.on_event(ev, now);
                    }
                }
                Some(Err(e)) => {
                    warn!(error = %e, "coordinator sent a volume object that does not parse")
                }
                None => warn!(
                    kind = v.kind,
                    "coordinator sent a volume object of an unknown kind"
                ),
            }
        }
        Event::VolumeDeleted(r) => {
            if let Some(kind) = volume_kind(r.kind) {
                let key = VolumeKey {
                    kind,
                    namespace: r.namespace,
                    name: r.name,
                };
                let ev = s.volumes.lock().delete(&key, &s.cache);
                if let Some(ev) = ev {
                    s.queue.on_event(ev, now);
                }
            }
        }
        Event::NominatedPod(n) => {
            if let Some(pod) = n.pod.as_ref().and_then(parse_pod) {
                debug!(pod = %pod.key, node = %n.node_name, "nominated");
                // Ours: its next cycle tries the nominated node first.
                s.queue
                    .set_nominated_node(&pod.uid, Some(Arc::from(n.node_name.as_str())));
                s.cache.set_nominated(pod, &n.node_name);
            }
        }
        Event::NominationCleared(r) => {
            debug!(uid = %r.uid, "nomination cleared");
            s.queue.set_nominated_node(&r.uid, None);
            s.cache.clear_nominated(&r.uid);
        }
    }
    Ok(())
}

/// A gang member was bound: members of its group waiting at Permit that,
/// with the bound ones, now reach the group's minimum are proposed together
/// (see [`crate::gang::GangBook::allow_waiting`]).
fn allow_waiting_members(s: &Arc<Shared>, pod: &PodInfo, now: Instant) {
    if let Some((group, members)) = s.gangs.allow_waiting(pod) {
        propose_gang_now(s, group, members, now);
    }
}

/// Proposes `members` of `group`, allowed outside a scheduling cycle.
fn propose_gang_now(
    s: &Arc<Shared>,
    group: String,
    members: Vec<crate::gang::Placement>,
    now: Instant,
) {
    debug!(pod_group = %group, members = members.len(), "waiting gang members allowed");
    let clock = super::telemetry::AttemptClock {
        started: now,
        attempts: 0,
        queued: now,
    };
    s.tracker.spawn_on(
        super::binding::bind_gang(s.clone(), group, members, std::time::Duration::ZERO, clock),
        &s.runtime,
    );
}
