//! Volume objects: kept compiled for the bind arbiter (the volume checks
//! read [`VolumeState`] through `BindView::volumes`), and forwarded to the
//! workers in compact form ([`VolumeObject::compact`]: no managed fields,
//! only the annotations the volume model reads), each encoded once.

use std::collections::HashSet;
use std::sync::Arc;
use std::time::{Duration, Instant};

use flotilla_shared::volumes::binding::{self, VolumePlan};
use flotilla_shared::volumes::{VolumeKey, VolumeKind, VolumeObject};
use tracing::{debug, warn};

use super::stream::WorkerEvent;
use super::{Coordinator, Inner, PodPhase};
use crate::cluster::WatchEvent;
use crate::cluster::{ClaimTarget, ClusterError, PodRef};

impl Inner {
    /// A volume object was created or changed: compiled into the
    /// arbiter's state (an object that does not compile is kept as its
    /// error, logged, so the pods using it are told why) and sent to the
    /// workers.
    pub(super) fn volume_applied(&mut self, obj: &VolumeObject) {
        let key = obj.key();
        if let Err(e) = obj.apply_to(&mut self.volume_state) {
            warn!(object = %key, error = %e, "volume object cannot be read; pods using it are unschedulable until it changes");
        }
        let json: std::sync::Arc<[u8]> = obj.compact().to_json().into();
        let msg = WorkerEvent::VolumeUpsert {
            kind: key.kind,
            json: json.clone(),
        };
        self.volumes.insert(key, json);
        self.broadcast(&msg);
        self.volumes_changed.notify_waiters();
    }

    /// A volume object was deleted: removed, and the workers are told.
    pub(super) fn volume_deleted(&mut self, key: &VolumeKey) {
        if self.volumes.remove(key).is_some() {
            key.remove_from(&mut self.volume_state);
            self.broadcast(&WorkerEvent::VolumeDeleted(key.clone()));
            self.volumes_changed.notify_waiters();
        }
    }

    /// The objects of `kind` known but not in `listed` (a complete list
    /// of the kind): deleted while nobody watched.
    pub(super) fn volumes_not_listed(
        &self,
        kind: VolumeKind,
        listed: &[WatchEvent],
    ) -> Vec<VolumeKey> {
        let keys: HashSet<VolumeKey> = listed
            .iter()
            .filter_map(|e| match e {
                WatchEvent::VolumeApplied(o) => Some(o.key()),
                _ => None,
            })
            .collect();
        self.volumes
            .keys()
            .filter(|k| k.kind == kind && !keys.contains(*k))
            .cloned()
            .collect()
    }

    /// Reserve: the volume bindings planned for the granted pod `uid` are
    /// assumed in the arbiter's view (no other grant takes the same PV).
    pub(super) fn reserve_volumes(&mut self, uid: &Arc<str>, plan: Option<VolumePlan>) {
        let Some(plan) = plan else {
            return;
        };
        plan.assume(&mut self.volume_state);
        if let Some(old) = self.volume_plans.insert(uid.clone(), Arc::new(plan)) {
            old.forget(&mut self.volume_state);
        }
    }

    /// Unreserve (or bound): the pod's assumed volume bindings are
    /// dropped; the view shows the objects as the watch last gave them.
    pub(super) fn unreserve_volumes(&mut self, uid: &str) {
        if self.volume_plans.is_empty() {
            return;
        }
        if let Some(plan) = self.volume_plans.remove(uid) {
            plan.forget(&mut self.volume_state);
        }
    }

    /// What a worker's stream replays of the volume objects.
    pub(super) fn volume_events(&self) -> impl Iterator<Item = WorkerEvent> + '_ {
        self.volumes
            .iter()
            .map(|(k, json)| WorkerEvent::VolumeUpsert {
                kind: k.kind,
                json: json.clone(),
            })
    }
}

/// Why PreBind failed (upstream's message: `running PreBind plugin
/// "VolumeBinding": binding volumes: <reason>`).
#[derive(Debug)]
pub(crate) enum PreBindError {
    /// The pod's grant is gone (the pod deleted, or bound elsewhere).
    Gone(ClusterError),
    /// A write failed, a claim cannot be bound as decided, or the wait
    /// timed out: unreserve, and the pod backs off.
    Failed(String),
}

impl PreBindError {
    /// The message written on the pod.
    pub(crate) fn message(&self) -> String {
        match self {
            PreBindError::Gone(e) => e.to_string(),
            PreBindError::Failed(m) => {
                format!(
                    "running PreBind plugin \"{}\": binding volumes: {m}",
                    binding::PLUGIN_NAME
                )
            }
        }
    }
}

/// How often PreBind looks at the claims when no volume object changed.
const RECHECK: Duration = Duration::from_secs(1);

impl Coordinator {
    /// VolumeBinding's PreBind for a granted pod: writes the plan (each
    /// static PV's `claimRef`, then each provisioned claim's
    /// `volume.kubernetes.io/selected-node`), then waits until the watch
    /// shows every claim bound to a PV the node reaches
    /// ([`binding::check_bindings`]), up to the plan's `bind_timeout`.
    /// The pod's Binding is written only after it returns `Ok`.
    ///
    /// # Errors
    /// [`PreBindError::Gone`] when the pod's grant ended meanwhile;
    /// [`PreBindError::Failed`] for a refused write, a binding that cannot
    /// complete as decided, the timeout (`timed out waiting for the
    /// condition`), or shutdown.
    pub(crate) async fn pre_bind_volumes(
        &self,
        pod: &PodRef,
        uid: &str,
        plan: &VolumePlan,
    ) -> Result<(), PreBindError> {
        let started = Instant::now();
        let deadline = started + plan.bind_timeout;
        for b in &plan.decisions.static_bindings {
            let claim_uid = {
                let inner = self.inner.lock();
                inner
                    .volume_state
                    .claim(&plan.namespace, &b.claim)
                    .found()
                    .map(|c| c.uid.clone())
            };
            let Some(claim_uid) = claim_uid else {
                return Err(PreBindError::Failed(
                    flotilla_shared::volumes::claim_not_found(&b.claim),
                ));
            };
            let target = ClaimTarget {
                namespace: &plan.namespace,
                name: &b.claim,
                uid: &claim_uid,
            };
            self.cluster
                .bind_pv(&b.pv, &target)
                .await
                .map_err(|e| PreBindError::Failed(e.to_string()))?;
        }
        for c in &plan.decisions.dynamic_provisions {
            self.cluster
                .select_node(&plan.namespace, c, &plan.node)
                .await
                .map_err(|e| PreBindError::Failed(e.to_string()))?;
        }
        let changed = self.inner.lock().volumes_changed.clone();
        loop {
            let notified = changed.notified();
            tokio::pin!(notified);
            notified.as_mut().enable();
            {
                let inner = self.inner.lock();
                match inner.pods.get(uid).map(|r| &r.phase) {
                    Some(PodPhase::Granted(n)) if *n == plan.node => {}
                    Some(PodPhase::Bound(n)) => {
                        return Err(PreBindError::Gone(ClusterError::AlreadyBound {
                            pod: pod.to_string(),
                            node: n.to_string(),
                        }));
                    }
                    _ => {
                        return Err(PreBindError::Gone(ClusterError::PodNotFound(
                            pod.to_string(),
                        )));
                    }
                }
                let Some(node) = inner.nodes.get(&plan.node) else {
                    return Err(PreBindError::Gone(ClusterError::NodeNotFound(
                        plan.node.to_string(),
                    )));
                };
                match binding::check_bindings(plan, &inner.volume_state, &node.spec.labels) {
                    Ok(true) => {
                        debug!(%pod, node = %plan.node, waited = ?started.elapsed(), "claims bound");
                        return Ok(());
                    }
                    Ok(false) => {}
                    Err(e) => return Err(PreBindError::Failed(e)),
                }
            }
            let now = Instant::now();
            if now >= deadline {
                return Err(PreBindError::Failed(
                    "timed out waiting for the condition".into(),
                ));
            }
            let wait = (deadline - now).min(RECHECK);
            tokio::select! {
                () = self.closing.cancelled() => {
                    return Err(PreBindError::Failed("the coordinator is shutting down".into()));
                }
                () = &mut notified => {}
                () = tokio::time::sleep(wait) => {}
            }
        }
    }

    /// How many volume objects the coordinator holds (from the watch).
    #[must_use]
    pub fn volume_objects(&self) -> usize {
        self.inner.lock().volumes.len()
    }

    /// How many granted pods hold volume reservations (Reserve's plans not
    /// yet dropped by a Binding, a failure or the pod's end).
    #[must_use]
    pub fn volume_reservations(&self) -> usize {
        self.inner.lock().volume_plans.len()
    }

    /// PreBind of a granted pod: [`Coordinator::pre_bind_volumes`] when its
    /// grant reserved volume bindings, else nothing (timed as upstream's
    /// `PreBind` extension point).
    pub(super) async fn pre_bind(
        &self,
        pod: &PodRef,
        info: &flotilla_shared::PodInfo,
    ) -> Result<(), PreBindError> {
        let plan = self.inner.lock().volume_plans.get(&info.uid).cloned();
        let Some(plan) = plan else {
            return Ok(());
        };
        let started = Instant::now();
        let result = self.pre_bind_volumes(pod, &info.uid, &plan).await;
        flotilla_shared::metrics::metrics().observe_extension_point(
            "PreBind",
            result.is_ok(),
            &info.scheduler_name,
            started,
        );
        result
    }
}
