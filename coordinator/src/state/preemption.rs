//! Preemption arbitration: a worker's proposal to evict victims so that a
//! pod fits, checked and granted under the lock; the pod's nomination
//! (the room it holds while its victims go) and the victims' eviction.

use std::sync::Arc;
use std::time::Instant;

use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use tracing::{debug, info, warn};

use flotilla_shared::framework::{BindView, KeptCounts};
use flotilla_shared::pod_info::PodInfo;

use super::stream::{PodIdentity, WorkerEvent, json, nominated_event};
use super::{Coordinator, Inner, PodPhase};
use crate::arbiter::{self, Refusal};
use crate::cluster::{ClusterError, PodRef, SchedulingEvent};
use crate::partition::WorkerId;

/// A preemption that passed its checks: the preemptor, the node (the map's
/// key) and the victims as the coordinator holds them.
type GrantedPreemption = (Arc<PodInfo>, Arc<str>, Vec<Arc<PodInfo>>);

/// Outcome of a preemption proposal (the wire's `PreemptionOutcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PreemptionDecision {
    /// The pod is nominated to the node and its victims are being deleted.
    Granted,
    /// A victim or the room changed; nothing was done.
    Conflict(String),
    /// The preemptor is not pending or not the proposer's any more.
    PodGone(String),
}

fn pod_ref_of(p: &PodInfo) -> PodRef {
    PodRef {
        namespace: p.key.namespace.to_string(),
        name: p.key.name.to_string(),
        uid: p.uid.to_string(),
    }
}

fn is_terminating(p: &PodInfo) -> bool {
    p.terminating
}

impl Inner {
    /// Pods nominated to `node` that `pod` must leave room for: pending,
    /// not `pod` itself, priority at least `pod`'s (upstream's
    /// `addGENominatedPods`).
    pub(super) fn nominated_on(&self, node: &str, pod: &PodInfo) -> Vec<Arc<PodInfo>> {
        self.nominations
            .get(node)
            .into_iter()
            .flatten()
            .filter(|u| **u != pod.uid)
            .filter_map(|u| self.pods.get(u))
            .filter(|r| matches!(r.phase, PodPhase::Pending(_)) && r.info.priority >= pod.priority)
            .map(|r| r.info.clone())
            .collect()
    }

    /// Drops `uid`'s nomination from the maps; returns the node it had.
    fn unnominate(&mut self, uid: &str) -> Option<Arc<str>> {
        let node = self.nominated.remove(uid)?;
        if let Some(list) = self.nominations.get_mut(&node) {
            list.retain(|u| &**u != uid);
            if list.is_empty() {
                self.nominations.remove(&node);
            }
        }
        Some(node)
    }

    /// Ends `pod`'s nomination, if any, and tells the workers.
    pub(super) fn clear_nomination(&mut self, pod: &PodInfo) {
        if self.unnominate(&pod.uid).is_some() {
            self.broadcast(&WorkerEvent::NominationCleared(PodIdentity::of(pod)));
        }
    }

    /// A bind proposal of `pod` for `node` was refused. Workers drop a
    /// nomination when they assume its pod (upstream's nominator does), so
    /// keep both sides agreeing: refused at its nominated node, the
    /// nomination stands and is sent again (the room stays reserved for its
    /// next try); refused elsewhere, it ends, as upstream clears
    /// `nominatedNodeName` after a failed binding.
    pub(super) fn nominee_conflicted(&mut self, pod: &PodInfo, node: &str) {
        match self.nominated.get(&pod.uid) {
            Some(n) if &**n == node => {
                let e = nominated_event(pod, n);
                self.broadcast(&e);
            }
            Some(_) => self.clear_nomination(pod),
            None => {}
        }
    }

    /// Nominates `pod` to `node` (replacing an earlier nomination) and
    /// tells the workers.
    fn nominate(&mut self, pod: &PodInfo, node: Arc<str>) {
        self.unnominate(&pod.uid);
        self.nominated.insert(pod.uid.clone(), node.clone());
        self.nominations
            .entry(node.clone())
            .or_default()
            .push(pod.uid.clone());
        self.broadcast(&nominated_event(pod, &node));
    }

    /// A PodDisruptionBudget was created or changed: kept and forwarded to
    /// the workers (their preemption weighs it when choosing victims).
    pub(super) fn pdb_applied(&mut self, pdb: Arc<PodDisruptionBudget>) {
        let msg = WorkerEvent::PdbUpsert(json(&*pdb));
        self.pdbs.insert(flotilla_shared::pdb::key_of(&pdb), pdb);
        self.broadcast(&msg);
    }

    /// A PodDisruptionBudget was deleted: the workers are told.
    pub(super) fn pdb_deleted(&mut self, pdb: Arc<PodDisruptionBudget>) {
        let key = flotilla_shared::pdb::key_of(&pdb);
        if self.pdbs.remove(&key).is_some() {
            let (namespace, name) = key;
            self.broadcast(&WorkerEvent::PdbDeleted { namespace, name });
        }
    }
}

impl Coordinator {
    /// Preemption arbitration for worker `worker`'s proposal to evict
    /// `victims` from `node` so that `pod` fits there. Checked under the
    /// lock: the pod is pending and assigned to `worker`, may preempt
    /// (`preemptionPolicy` is not `Never`); every victim is bound to `node`,
    /// not terminating, lower in priority than the pod and not already
    /// being evicted for another pod; the pod fits on `node` once the
    /// victims are gone, counting the pods nominated there with a priority
    /// at least its own. On success the pod is nominated to `node`
    /// (broadcast to workers, `status.nominatedNodeName` written), the
    /// victims are deleted gracefully and each gets a `Preempted` Event
    /// (upstream's note: `Preempted by pod <uid> on node <node>`).
    pub async fn propose_preemption(
        &self,
        worker: WorkerId,
        pod: &PodRef,
        node: &str,
        victims: &[PodRef],
    ) -> PreemptionDecision {
        let (preemptor, node_name, victims) = {
            let mut inner = self.inner.lock();
            inner.counters.preemption_attempts += 1;
            inner.last_activity = Some(Instant::now());
            let (preemptor, node_name, victims) =
                match Self::check_preemption(&inner, worker, pod, node, victims) {
                    Ok(v) => v,
                    Err(d) => {
                        debug!(%pod, node, decision = ?d, "preemption refused");
                        return d;
                    }
                };
            inner.nominate(&preemptor, node_name.clone());
            for v in &victims {
                inner.evicting.insert(v.uid.clone(), preemptor.uid.clone());
            }
            inner.counters.preemption_victims += victims.len() as u64;
            (preemptor, node_name, victims)
        };
        info!(pod = %pod, node = %node_name, victims = victims.len(), "preemption granted");
        if let Err(e) = self
            .cluster
            .set_nominated_node(&preemptor.pod(), Some(&node_name))
            .await
        {
            warn!(%pod, error = %e, "could not write status.nominatedNodeName");
        }
        for v in &victims {
            let r = pod_ref_of(v);
            // As upstream: the DisruptionTarget condition first (it tells a
            // later attempt of the preemptor that its victims are on their
            // way out), then the graceful delete.
            if let Err(e) = self
                .cluster
                .mark_preemption_victim(&r, &preemptor.scheduler_name)
                .await
            {
                debug!(victim = %r, error = %e, "could not mark the preemption victim");
            }
            match self.cluster.delete_pod(&r, None).await {
                Ok(()) => {
                    self.cluster.record_event(SchedulingEvent::preempted(
                        &r,
                        &preemptor.uid,
                        &node_name,
                    ));
                }
                Err(ClusterError::PodNotFound(_)) => {
                    debug!(victim = %r, "victim already deleted");
                }
                Err(e) => {
                    warn!(victim = %r, error = %e, "could not delete a preemption victim");
                    self.inner.lock().evicting.remove(&v.uid);
                }
            }
        }
        PreemptionDecision::Granted
    }

    /// The checks of [`Coordinator::propose_preemption`]: the preemptor, the
    /// node and the victims as the coordinator holds them.
    fn check_preemption(
        inner: &Inner,
        worker: WorkerId,
        pod: &PodRef,
        node: &str,
        victims: &[PodRef],
    ) -> Result<GrantedPreemption, PreemptionDecision> {
        use PreemptionDecision::{Conflict, PodGone};
        let Some(rec) = inner.pods.get(pod.uid.as_str()) else {
            return Err(PodGone(format!("pod {pod} is not pending")));
        };
        match rec.phase {
            PodPhase::Pending(Some(w)) if w == worker => {}
            PodPhase::Pending(_) => {
                flotilla_shared::metrics::metrics()
                    .refused_calls
                    .with_label_values(&["ProposePreemption", "not_assigned"])
                    .inc();
                return Err(PodGone(format!(
                    "pod {pod} is not assigned to worker {worker}"
                )));
            }
            PodPhase::Granted(_) | PodPhase::Bound(_) => {
                return Err(PodGone(format!("pod {pod} is not pending")));
            }
        }
        let preemptor = rec.info.clone();
        if preemptor.preemption_policy_never {
            return Err(Conflict(format!(
                "pod {pod}: spec.preemptionPolicy is Never"
            )));
        }
        let Some((node_name, ninfo)) = inner.nodes.get_key_value(node) else {
            return Err(Conflict(format!("node {node} not found")));
        };
        let mut found: Vec<Arc<PodInfo>> = Vec::with_capacity(victims.len());
        for v in victims {
            let Some(vrec) = inner.pods.get(v.uid.as_str()) else {
                return Err(Conflict(format!("victim {v} is gone")));
            };
            if !matches!(&vrec.phase, PodPhase::Bound(n) if &**n == node) {
                return Err(Conflict(format!("victim {v} is not bound to node {node}")));
            }
            if is_terminating(&vrec.info) {
                return Err(Conflict(format!("victim {v} is already terminating")));
            }
            if let Some(other) = inner.evicting.get(v.uid.as_str()) {
                return Err(Conflict(format!(
                    "victim {v} is already being evicted for pod {other}"
                )));
            }
            if vrec.info.priority >= preemptor.priority {
                return Err(Conflict(format!(
                    "victim {v} has priority {}, not lower than {}",
                    vrec.info.priority, preemptor.priority
                )));
            }
            if !found.iter().any(|f| f.uid == vrec.info.uid) {
                found.push(vrec.info.clone());
            }
        }
        let mut without = ninfo.clone();
        for v in &found {
            without.remove_pod(&v.uid);
        }
        let nominated = inner.nominated_on(node, &preemptor);
        let Some(checks) = inner.bind_checks.get(&*preemptor.scheduler_name) else {
            let refusal = Refusal::NoProfile(preemptor.scheduler_name.clone());
            return Err(Conflict(refusal.reason(node)));
        };
        // Only the node-local checks run here, and they read no counts:
        // an empty set stands in for the kept ones (`inner` is shared).
        let mut scratch = KeptCounts::default();
        let mut view = BindView::new(
            &inner.nodes,
            &inner.namespaces,
            inner.anti_affinity_pods,
            &mut scratch,
        )
        .with_volumes(&inner.volume_state);
        if let Err(reason) = arbiter::fits_with(checks, &preemptor, &without, &nominated, &mut view)
        {
            return Err(Conflict(format!(
                "node {node}: {reason} even without the victims"
            )));
        }
        Ok((preemptor, node_name.clone(), found))
    }

    /// The node `namespace/name` is nominated to, if any.
    #[must_use]
    pub fn nominated_node(&self, namespace: &str, name: &str) -> Option<Arc<str>> {
        let inner = self.inner.lock();
        inner
            .pods
            .values()
            .find(|r| &*r.info.key.namespace == namespace && &*r.info.key.name == name)
            .and_then(|r| inner.nominated.get(&r.info.uid).cloned())
    }

    /// `pod`'s preemption found no candidate (upstream's PostFilter result
    /// with an empty nominated node): its nomination, if any, ends, the
    /// workers are told, and `status.nominatedNodeName` is cleared, so the
    /// room it held is free for pods of lower or equal priority again.
    pub async fn end_nomination(&self, pod: &PodRef) {
        let ended = {
            let mut inner = self.inner.lock();
            let Some(rec) = inner.pods.get(pod.uid.as_str()) else {
                return;
            };
            if !matches!(rec.phase, PodPhase::Pending(_)) {
                return;
            }
            let info = rec.info.clone();
            let had = inner.nominated.contains_key(&info.uid);
            inner.clear_nomination(&info);
            had.then(|| info.pod_once())
        };
        if let Some(current) = ended
            && let Err(e) = self.cluster.set_nominated_node(&current, None).await
        {
            warn!(%pod, error = %e, "could not clear status.nominatedNodeName");
        }
    }
}
