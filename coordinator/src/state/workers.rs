//! Workers registering, their event streams opening (with the replay of
//! the view) and closing, and the sends to them.

use std::collections::HashSet;
use std::sync::Arc;

use tokio::sync::mpsc;
use tracing::{info, warn};

use flotilla_shared::WorkloadClass;

use super::stream::{WorkerEvent, json, namespace_event, nominated_event};
use super::{
    Coordinator, Inner, MAX_UNWATCHED_REGISTRATIONS, PodPhase, REGISTRATION_TTL, WorkerEntry,
};
use crate::partition::WorkerId;

impl Inner {
    /// Sends `e` to every worker with an open stream, a clone each (shared
    /// JSON and names: no object is copied here).
    pub(super) fn broadcast(&self, e: &WorkerEvent) {
        for w in self.workers.values() {
            if let Some(tx) = &w.tx {
                let _ = tx.send(e.clone());
            }
        }
    }

    /// Sends `e` to `worker`; whether its stream took it.
    pub(super) fn send_to(&self, worker: WorkerId, e: WorkerEvent) -> bool {
        self.workers
            .get(&worker)
            .and_then(|w| w.tx.as_ref())
            .is_some_and(|tx| tx.send(e).is_ok())
    }
}

/// A worker's report about a pod, against the coordinator's view
/// ([`Coordinator::report_standing`]).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReportStanding {
    /// Pending and handed to the reporter: the report is acted on.
    Assigned,
    /// Pending and not the reporter's (held back, or another worker's):
    /// refused.
    Elsewhere,
    /// Bound or deleted meanwhile, or never known: late, changes nothing.
    Late,
}

/// Why [`Coordinator::attach`] refused a stream.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum AttachError {
    /// Never registered, or gone (left, expired, dropped).
    #[error("worker {0} is not registered")]
    NotRegistered(WorkerId),
    /// Its stream is open: a second `Watch` is refused, never a takeover.
    #[error("worker {0} is already watching")]
    AlreadyWatching(WorkerId),
    /// Registered longer than [`REGISTRATION_TTL`] ago without a `Watch`.
    #[error(
        "worker {0}: registration expired ({REGISTRATION_TTL:?} without a Watch); register again"
    )]
    Expired(WorkerId),
}

impl AttachError {
    /// The `reason` label of `flotilla_refused_calls_total`.
    #[must_use]
    pub fn reason(&self) -> &'static str {
        match self {
            AttachError::NotRegistered(_) => "session",
            AttachError::AlreadyWatching(_) => "already_watching",
            AttachError::Expired(_) => "expired",
        }
    }
}

impl Coordinator {
    /// Whether a worker whose profiles have fingerprint `fingerprint` runs
    /// the profiles served (`0`: not given, not compared). The bind arbiter
    /// re-checks what the served profiles filter, so a worker deciding with
    /// others (another `--config`) may have its proposals refused again and
    /// again. The worker still registers (the fingerprint also differs for
    /// equal configurations written differently); the caller warns.
    ///
    /// # Errors
    /// The warning, naming the fix.
    pub fn admits_profiles(&self, fingerprint: u64) -> Result<(), String> {
        let own = self.inner.lock().profiles_fingerprint;
        if fingerprint == 0 || own == 0 || fingerprint == own {
            return Ok(());
        }
        Err(format!(
            "the worker's scheduler profiles (fingerprint {fingerprint:016x}) are not written as \
             the coordinator's ({own:016x}): if they filter differently, the bind arbiter \
             refuses its proposals again and again; give workers and coordinator the same \
             --config"
        ))
    }

    /// Registers a worker of `class`; returns (id, epoch). It receives work
    /// once it opens its stream with [`Coordinator::attach`].
    pub fn register(&self, name: &str, class: WorkloadClass) -> (WorkerId, u64) {
        let (id, epoch, _) = self.register_session(name, class);
        (id, epoch)
    }

    /// [`Coordinator::register`], also returning the session's credential,
    /// `<id>.<secret>` (128 random bits): what the worker names itself by in
    /// every later call ([`Coordinator::session`]). Registrations that
    /// never opened their stream within [`REGISTRATION_TTL`] are dropped
    /// here, so registering in a loop cannot grow the table.
    pub fn register_session(&self, name: &str, class: WorkloadClass) -> (WorkerId, u64, String) {
        let secret = format!("{:032x}", rand::random::<u128>());
        let mut inner = self.inner.lock();
        let now = std::time::Instant::now();
        // Registrations not followed by a Watch: those past the TTL go,
        // and beyond MAX_UNWATCHED_REGISTRATIONS the oldest go (ids grow,
        // so the first are the oldest).
        let unwatched: Vec<(WorkerId, bool)> = inner
            .workers
            .iter()
            .filter(|(_, w)| w.tx.is_none())
            .map(|(id, w)| (*id, now.duration_since(w.registered_at) >= REGISTRATION_TTL))
            .collect();
        let excess = (unwatched.len() + 1).saturating_sub(MAX_UNWATCHED_REGISTRATIONS);
        for (i, (id, expired)) in unwatched.into_iter().enumerate() {
            if (expired || i < excess)
                && let Some(w) = inner.workers.remove(&id)
            {
                warn!(worker = id, name = %w.name, "registration dropped: no Watch followed it");
            }
        }
        let id = inner.next_worker_id;
        inner.next_worker_id += 1;
        inner.epoch += 1;
        inner.workers.insert(
            id,
            WorkerEntry {
                name: Arc::from(name),
                class,
                secret: secret.clone(),
                registered_at: now,
                certificate: None,
                tx: None,
                assigned: HashSet::new(),
                partition: Vec::new(),
                bound: 0,
            },
        );
        info!(worker = id, name, %class, "worker registered");
        (id, inner.epoch, format!("{id}.{secret}"))
    }

    /// Ties worker `id`'s session to the client certificate (DER) its
    /// `Register` came with ([`Coordinator::session_presenting`]).
    pub fn bind_certificate(&self, id: WorkerId, certificate: Vec<u8>) {
        if let Some(w) = self.inner.lock().workers.get_mut(&id) {
            w.certificate = Some(certificate);
        }
    }

    /// [`Coordinator::session`] for a call over a connection that presented
    /// `certificate` (DER; `None` in plaintext): a session tied to a
    /// certificate answers only calls presenting the same one.
    ///
    /// # Errors
    /// As [`Coordinator::session`], or the certificate differs.
    pub fn session_presenting(
        &self,
        credential: &str,
        certificate: Option<&[u8]>,
    ) -> Result<WorkerId, String> {
        let id = self.session(credential)?;
        let inner = self.inner.lock();
        match inner
            .workers
            .get(&id)
            .and_then(|w| w.certificate.as_deref())
        {
            Some(bound) if Some(bound) != certificate => Err(format!(
                "worker_id: session {id} belongs to another client certificate"
            )),
            _ => Ok(id),
        }
    }

    /// The worker whose session `credential` (`<id>.<secret>`, from
    /// [`Coordinator::register_session`]) names.
    ///
    /// # Errors
    /// Not a credential, or no live session has it (never issued, expired,
    /// or the worker left): the caller must register again.
    pub fn session(&self, credential: &str) -> Result<WorkerId, String> {
        let refused = || "worker_id: no such session (register again)".to_owned();
        let (id, secret) = credential.split_once('.').ok_or_else(refused)?;
        let id: WorkerId = id.parse().map_err(|_| refused())?;
        let inner = self.inner.lock();
        let w = inner.workers.get(&id).ok_or_else(refused)?;
        // Compared in constant time: the answer's timing says nothing of
        // how much of a guess was right.
        let same = w.secret.len() == secret.len()
            && w.secret
                .bytes()
                .zip(secret.bytes())
                .fold(0u8, |acc, (a, b)| acc | (a ^ b))
                == 0;
        if same { Ok(id) } else { Err(refused()) }
    }

    /// What worker `id` may do with a report about `pod`, in one look.
    #[must_use]
    pub fn report_standing(&self, pod: &crate::cluster::PodRef, id: WorkerId) -> ReportStanding {
        match self
            .inner
            .lock()
            .pods
            .get(pod.uid.as_str())
            .map(|r| &r.phase)
        {
            Some(PodPhase::Pending(Some(w))) if *w == id => ReportStanding::Assigned,
            Some(PodPhase::Pending(_)) => ReportStanding::Elsewhere,
            _ => ReportStanding::Late,
        }
    }

    /// Opens worker `id`'s event stream: replays nodes, bound pods and its
    /// partition, dispatches waiting pods, moves its share of its pool's
    /// backlog to it (`Inner::rebalance`), then sends `SyncDone`.
    ///
    /// # Errors
    /// The id is unknown (never registered, or already gone), or its stream
    /// is already open: a second `Watch` is refused, never a takeover (the
    /// worker that has it keeps it).
    pub fn attach(
        &self,
        id: WorkerId,
    ) -> Result<mpsc::UnboundedReceiver<WorkerEvent>, AttachError> {
        let (tx, rx) = mpsc::unbounded_channel();
        let mut inner = self.inner.lock();
        let Some(w) = inner.workers.get(&id) else {
            return Err(AttachError::NotRegistered(id));
        };
        if w.tx.as_ref().is_some_and(|t| !t.is_closed()) {
            return Err(AttachError::AlreadyWatching(id));
        }
        if w.tx.is_none() && w.registered_at.elapsed() >= REGISTRATION_TTL {
            return Err(AttachError::Expired(id));
        }
        for (name, labels) in &inner.namespaces {
            let _ = tx.send(namespace_event(name, labels));
        }
        for n in inner.nodes.values() {
            let _ = tx.send(WorkerEvent::NodeUpsert(n.spec.json()));
        }
        for e in inner.gangs.group_events() {
            let _ = tx.send(e);
        }
        for rec in inner.pods.values() {
            if let PodPhase::Bound(_) = rec.phase {
                let _ = tx.send(WorkerEvent::BoundPod(rec.info.json()));
            }
        }
        for pdb in inner.pdbs.values() {
            let _ = tx.send(WorkerEvent::PdbUpsert(json(&**pdb)));
        }
        for e in inner.volume_events() {
            let _ = tx.send(e);
        }
        for (uid, node) in &inner.nominated {
            if let Some(rec) = inner.pods.get(uid) {
                let _ = tx.send(nominated_event(&rec.info, node));
            }
        }
        if let Some(w) = inner.workers.get_mut(&id) {
            w.tx = Some(tx.clone());
        }
        inner.epoch += 1;
        inner.repartition();
        let waiting: Vec<Arc<str>> = inner.undispatched.drain(..).collect();
        for uid in &waiting {
            inner.dispatch(uid);
        }
        if inner.synced {
            let moved = inner.rebalance(id);
            if moved > 0 {
                info!(
                    worker = id,
                    pods = moved,
                    "took its share of the pool's backlog"
                );
            }
        }
        let _ = tx.send(WorkerEvent::Synced);
        Ok(rx)
    }

    /// Worker `id` went away: its pending pods go to other workers and the
    /// nodes are repartitioned.
    pub fn detach(&self, id: WorkerId) {
        let mut inner = self.inner.lock();
        let Some(w) = inner.workers.remove(&id) else {
            return;
        };
        if inner.closing {
            info!(worker = id, name = %w.name, "worker stream closed at shutdown");
        } else {
            warn!(worker = id, name = %w.name, pods = w.assigned.len(), "worker left; re-dispatching its pods");
        }
        inner.departed.push((w.name.clone(), w.class, w.bound));
        inner.gangs.forget_worker(id);
        inner.epoch += 1;
        inner.repartition();
        for uid in &w.assigned {
            if let Some(rec) = inner.pods.get_mut(uid)
                && rec.phase == PodPhase::Pending(Some(id))
            {
                rec.phase = PodPhase::Pending(None);
            }
        }
        let mut uids: Vec<&Arc<str>> = w.assigned.iter().collect();
        uids.sort();
        for uid in uids {
            inner.dispatch(uid);
        }
    }

    /// Ends every worker stream (shutdown): workers see the stream close and
    /// stop, so the gRPC server's graceful shutdown does not wait on them.
    pub fn close_streams(&self) {
        let mut inner = self.inner.lock();
        inner.closing = true;
        for w in inner.workers.values_mut() {
            w.tx = None;
        }
        self.closing.cancel();
    }

    /// Fires once [`Coordinator::close_streams`] was called: bind streams
    /// then stop taking proposals, answer those in flight, and end.
    #[must_use]
    pub fn closing(&self) -> tokio_util::sync::CancellationToken {
        self.closing.clone()
    }

    /// Number of workers with an open stream.
    #[must_use]
    pub fn live_workers(&self) -> usize {
        self.inner
            .lock()
            .workers
            .values()
            .filter(|w| w.tx.is_some())
            .count()
    }
}
