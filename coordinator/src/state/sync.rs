//! The cluster's change stream: each (re)list buffered and applied at
//! once, each change applied under the lock, and the cluster writes
//! decided under the lock made after it is released.

use std::collections::{HashMap, HashSet};
use std::sync::Arc;

use k8s_openapi::api::core::v1::Pod;
use tracing::{info, warn};

use flotilla_shared::gang::GangObject;

use super::stream::WorkerEvent;
use super::{Coordinator, Inner};
use crate::cluster::{ClusterError, Kind, PodRef, SchedulingEvent, WatchEvent};

/// A cluster write decided under the lock.
#[derive(Debug)]
pub(super) enum Deferred {
    /// A `FailedScheduling` Event and `PodScheduled=False` with the message.
    Unschedulable(Arc<Pod>, String),
}

/// Lists in progress, per kind, and the kinds listed at least once.
#[derive(Debug, Default)]
struct ListState {
    buffers: HashMap<Kind, Vec<WatchEvent>>,
    listed: HashSet<Kind>,
}

impl Coordinator {
    /// Follows the cluster's change stream until it ends or `shutdown` fires.
    /// Each (re)list of a kind is buffered and applied at once under the lock
    /// (workers never see half a list), dropping what the list no longer
    /// holds; `synced` fires once every kind was listed, and pods are
    /// dispatched to workers only from then on. Transient backend errors are
    /// logged; the backend retries them.
    ///
    /// # Errors
    /// None today (the stream carries transient errors only); kept for
    /// backends whose failure is final.
    pub async fn sync_and_watch(
        self: Arc<Self>,
        shutdown: tokio_util::sync::CancellationToken,
        synced: tokio::sync::oneshot::Sender<()>,
    ) -> Result<(), ClusterError> {
        use futures::{FutureExt as _, StreamExt as _};
        let mut synced = Some(synced);
        let mut sync = ListState::default();
        let mut changes = self.cluster.clone().changes();
        loop {
            let next = tokio::select! {
                () = shutdown.cancelled() => return Ok(()),
                n = changes.next() => n,
            };
            let mut batch = match next {
                None => return Ok(()),
                Some(Err(e)) => {
                    warn!(error = %e, "cluster watch error; the backend retries");
                    continue;
                }
                Some(Ok(e)) => vec![e],
            };
            // Take what is already there, so one lock and one repartition
            // cover a burst.
            while batch.len() < 4096 {
                match changes.next().now_or_never() {
                    Some(Some(Ok(e))) => batch.push(e),
                    Some(Some(Err(e))) => {
                        warn!(error = %e, "cluster watch error; the backend retries");
                    }
                    Some(None) | None => break,
                }
            }
            let (newly_synced, deferred) = {
                let mut inner = self.inner.lock();
                let was = inner.synced;
                for e in batch {
                    Self::absorb(&mut inner, &mut sync, e);
                }
                if inner.partition_dirty {
                    inner.repartition();
                }
                (!was && inner.synced, std::mem::take(&mut inner.deferred))
            };
            self.run_deferred(deferred);
            if self.inner.lock().gangs.has_dirty() {
                let me = self.clone();
                tokio::spawn(async move { me.write_pod_group_status().await });
            }
            if newly_synced {
                info!("coordinator cache synced");
                if let Some(tx) = synced.take() {
                    let _ = tx.send(());
                }
            }
        }
    }

    /// Makes the cluster writes decided under the lock, each in its own task
    /// (nothing happens outside a tokio runtime).
    fn run_deferred(&self, deferred: Vec<Deferred>) {
        if deferred.is_empty() {
            return;
        }
        let Ok(rt) = tokio::runtime::Handle::try_current() else {
            return;
        };
        for d in deferred {
            let cluster = self.cluster.clone();
            match d {
                Deferred::Unschedulable(pod, message) => {
                    rt.spawn(async move {
                        let r = PodRef::of(&pod);
                        cluster.record_event(SchedulingEvent::failed_scheduling(&r, &message));
                        if let Err(e) = cluster.mark_unschedulable(&pod, &message).await {
                            warn!(pod = %r, error = %e, "could not record PodScheduled=False");
                        }
                    });
                }
            }
        }
    }

    /// One item of the change stream: buffered while its kind is being
    /// listed, applied otherwise.
    fn absorb(inner: &mut Inner, sync: &mut ListState, e: WatchEvent) {
        match e {
            WatchEvent::Relisting(kind) => {
                sync.buffers.insert(kind, Vec::new());
            }
            WatchEvent::Listed(kind) => {
                let listed = sync.buffers.remove(&kind).unwrap_or_default();
                Self::reconcile(inner, kind, listed);
                sync.listed.insert(kind);
                if !inner.synced && Kind::ALL.iter().all(|k| sync.listed.contains(k)) {
                    inner.synced = true;
                    let waiting: Vec<Arc<str>> = inner.undispatched.drain(..).collect();
                    for uid in &waiting {
                        inner.dispatch(uid);
                    }
                }
            }
            e => match sync.buffers.get_mut(&e.kind()) {
                Some(buf) => buf.push(e),
                None => Self::apply_locked(inner, e),
            },
        }
    }

    /// Replaces every object of `kind` with `listed` (a complete list): what
    /// is known but not listed was deleted while nobody watched.
    fn reconcile(inner: &mut Inner, kind: Kind, listed: Vec<WatchEvent>) {
        match kind {
            Kind::Namespace => {
                let names: HashSet<&str> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::NamespaceApplied(n) => n.metadata.name.as_deref(),
                        _ => None,
                    })
                    .collect();
                let gone: Vec<String> = inner
                    .namespaces
                    .keys()
                    .filter(|n| !names.contains(n.as_str()))
                    .cloned()
                    .collect();
                for name in gone {
                    inner.namespaces.remove(&name);
                    inner.broadcast(&WorkerEvent::NamespaceDeleted(name));
                }
            }
            Kind::Node => {
                let names: HashSet<&str> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::NodeApplied(n) => n.metadata.name.as_deref(),
                        _ => None,
                    })
                    .collect();
                let gone: Vec<_> = inner
                    .nodes
                    .values()
                    .filter(|n| !names.contains(n.name()))
                    .map(|n| n.spec.node())
                    .collect();
                for n in gone {
                    Self::apply_locked(inner, WatchEvent::NodeDeleted(n));
                }
            }
            Kind::Pod => {
                let uids: HashSet<&str> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::PodApplied(p) => p.metadata.uid.as_deref(),
                        _ => None,
                    })
                    .collect();
                let gone: Vec<_> = inner
                    .pods
                    .values()
                    .filter(|r| !uids.contains(&*r.info.uid))
                    .map(|r| r.info.pod())
                    .collect();
                inner.foreign.retain(|u| uids.contains(&**u));
                for p in gone {
                    Self::apply_locked(inner, WatchEvent::PodDeleted(p));
                }
            }
            Kind::PodGroup | Kind::WorkloadPodGroup => {
                let keys: HashSet<String> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::PodGroupApplied(g) => Some(g.full_name()),
                        WatchEvent::WorkloadPodGroupApplied(g) => Some(g.key()),
                        _ => None,
                    })
                    .collect();
                for g in inner
                    .gangs
                    .groups_not_in(&keys, kind == Kind::WorkloadPodGroup)
                {
                    inner.pod_group_deleted(&g);
                }
            }
            Kind::PriorityClass => {
                inner.priority_classes = listed
                    .into_iter()
                    .filter_map(|e| match e {
                        WatchEvent::PriorityClassApplied(pc) => {
                            pc.metadata.name.clone().map(|n| (n, pc))
                        }
                        _ => None,
                    })
                    .collect();
                inner.classes_listed = true;
                inner.classes_changed();
                return;
            }
            Kind::Volume(kind) => {
                for key in inner.volumes_not_listed(kind, &listed) {
                    inner.volume_deleted(&key);
                }
            }
            Kind::PodDisruptionBudget => {
                let keys: HashSet<(String, String)> = listed
                    .iter()
                    .filter_map(|e| match e {
                        WatchEvent::PdbApplied(p) => Some(flotilla_shared::pdb::key_of(p)),
                        _ => None,
                    })
                    .collect();
                let gone: Vec<_> = inner
                    .pdbs
                    .values()
                    .filter(|p| !keys.contains(&flotilla_shared::pdb::key_of(p)))
                    .cloned()
                    .collect();
                for p in gone {
                    Self::apply_locked(inner, WatchEvent::PdbDeleted(p));
                }
            }
        }
        for e in listed {
            Self::apply_locked(inner, e);
        }
    }

    /// Applies one cluster change (exposed for tests). List markers are
    /// ignored here.
    pub fn apply(&self, e: WatchEvent) {
        let deferred = {
            let mut inner = self.inner.lock();
            Self::apply_locked(&mut inner, e);
            if inner.partition_dirty {
                inner.repartition();
            }
            std::mem::take(&mut inner.deferred)
        };
        self.run_deferred(deferred);
    }

    /// Applies one cluster change under the lock, each kind by its seam.
    fn apply_locked(inner: &mut Inner, e: WatchEvent) {
        match e {
            WatchEvent::NodeApplied(node) => inner.node_applied(node),
            WatchEvent::NodeDeleted(node) => inner.node_deleted(node),
            WatchEvent::NamespaceApplied(ns) => inner.namespace_applied(ns),
            WatchEvent::NamespaceDeleted(ns) => inner.namespace_deleted(ns),
            WatchEvent::PodApplied(pod) => {
                Self::apply_pod(inner, pod);
                inner.run_gang_checks();
            }
            WatchEvent::PodDeleted(pod) => inner.pod_deleted(pod),
            WatchEvent::PodGroupApplied(g) => inner.pod_group_applied(GangObject::Coscheduling(g)),
            WatchEvent::PodGroupDeleted(g) => inner.pod_group_deleted(&GangObject::Coscheduling(g)),
            WatchEvent::WorkloadPodGroupApplied(g) => {
                inner.pod_group_applied(GangObject::Workload(g));
            }
            WatchEvent::WorkloadPodGroupDeleted(g) => {
                inner.pod_group_deleted(&GangObject::Workload(g));
            }
            WatchEvent::Relisting(_) | WatchEvent::Listed(_) => {}
            WatchEvent::PriorityClassApplied(pc) => inner.priority_class_applied(pc),
            WatchEvent::PriorityClassDeleted(pc) => inner.priority_class_deleted(pc),
            WatchEvent::PdbApplied(pdb) => inner.pdb_applied(pdb),
            WatchEvent::PdbDeleted(pdb) => inner.pdb_deleted(pdb),
            WatchEvent::VolumeApplied(obj) => inner.volume_applied(&obj),
            WatchEvent::VolumeDeleted(obj) => inner.volume_deleted(&obj.key()),
        }
    }

    /// Whether every kind was listed once (pods are dispatched from then
    /// on): the coordinator's readiness.
    #[must_use]
    pub fn is_synced(&self) -> bool {
        self.inner.lock().synced
    }
}
