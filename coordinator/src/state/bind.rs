//! Bind arbitration: a proposal checked against the authoritative view
//! (the bind checks of the pod's profile, with the room nominated pods
//! hold), granted under the lock, its Binding written without it, then
//! settled.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{Instrument as _, debug, info_span, warn};

use flotilla_shared::extender::{ExtenderConfig, FailureKind, HttpExtender};
use flotilla_shared::framework::BindView;
use flotilla_shared::gpu::{self, DeviceSet};
use flotilla_shared::pod_info::PodInfo;
use flotilla_shared::volumes::binding::{self, VolumePlan};

use super::report::BindSample;
use super::volumes::PreBindError;
use super::{Coordinator, Inner, PodPhase};
use crate::arbiter::{self, Refusal};
use crate::cluster::{ClusterError, PodRef, SchedulingEvent};
use crate::partition::WorkerId;

/// Outcome of a bind proposal (the wire's `BindOutcome`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Decision {
    /// Granted and bound.
    Bound,
    /// Room taken or node changed; re-queue with backoff.
    Conflict(String),
    /// Pod gone or bound elsewhere; forget it.
    PodGone(String),
    /// Binding failed transiently; re-queue with backoff.
    Error(String),
}

/// Most of a proposal's alternatives [`Coordinator::arbitrate`] checks
/// (workers send at most three): a bound on the work one proposal can make
/// the arbiter do under its lock.
pub const MAX_ALTERNATIVES_CHECKED: usize = 8;

/// What [`Coordinator::arbitrate`] decided.
#[derive(Debug)]
pub enum Arbitration {
    /// Answered at once: refused, gone, or already bound there.
    Decided(Decision),
    /// Granted: the room is counted; [`Coordinator::settle`] writes the
    /// Binding.
    Granted(Grant),
}

/// A granted placement whose Binding is not written yet (see
/// [`Coordinator::settle`]). Dropping it without settling leaves the pod
/// `Granted` with its room counted, so every grant must be settled.
#[derive(Debug)]
#[must_use = "a grant holds room until it is settled"]
pub struct Grant {
    worker: WorkerId,
    info: Arc<PodInfo>,
    node: Arc<str>,
}

impl Grant {
    /// The node granted: the proposed one, or the alternative that fit.
    #[must_use]
    pub fn node(&self) -> &Arc<str> {
        &self.node
    }
}

impl Inner {
    /// The Binding of `info` to `node`, granted to `worker`'s proposal, was
    /// written: the record is bound (by that worker), no worker holds the
    /// pod any more, its nomination ends.
    pub(super) fn binding_written(&mut self, worker: WorkerId, info: &PodInfo, node: &Arc<str>) {
        let worker_name = self.workers.get(&worker).map(|w| w.name.clone());
        if let Some(w) = self.workers.get_mut(&worker) {
            w.bound += 1;
        }
        flotilla_shared::metrics::metrics()
            .pods_bound
            .with_label_values(&[info.class.as_str()])
            .inc();
        if let Some(rec) = self.pods.get_mut(&info.uid) {
            let now = Instant::now();
            rec.bound_at = Some(now);
            rec.bound_by = worker_name;
            if let Some(log) = &mut self.bind_log {
                log.push(BindSample {
                    pod: info.key.clone(),
                    first_seen: rec.first_seen,
                    bound_at: now,
                });
            }
            rec.unschedulable = None;
            rec.waiting = false;
            rec.failing = false;
            if rec.phase == PodPhase::Granted(node.clone()) {
                rec.phase = PodPhase::Bound(node.clone());
            }
        }
        for w in self.workers.values_mut() {
            w.assigned.remove(&info.uid);
        }
        self.clear_nomination(info);
        self.unreserve_volumes(&info.uid);
    }

    /// The Binding granted to `worker`'s proposal settled with `result`:
    /// written ([`Inner::binding_written`]), failed
    /// ([`Inner::binding_failed`]), or given up at shutdown with its
    /// outcome still unknown ([`ClusterError::OutcomeUnknown`] is only
    /// left by [`Coordinator::learn_outcome`] then): that one may still
    /// land, so its room stays granted (no proposal answered during the
    /// shutdown may take it) and the pod is not dispatched again; the next
    /// leader lists the truth.
    pub(super) fn binding_settled(
        &mut self,
        worker: WorkerId,
        info: &PodInfo,
        node: &Arc<str>,
        result: &Result<(), ClusterError>,
    ) {
        match result {
            Ok(()) => self.binding_written(worker, info, node),
            Err(ClusterError::OutcomeUnknown(_)) => self.counters.bind_errors += 1,
            Err(_) => self.binding_failed(worker, info, node),
        }
    }

    /// The Binding granted to `worker`'s proposal failed at the cluster: the
    /// grant's room is released and the pod is pending again with that
    /// worker, or, if the worker left meanwhile (nobody would retry it),
    /// dispatched to another.
    pub(super) fn binding_failed(&mut self, worker: WorkerId, info: &PodInfo, node: &Arc<str>) {
        self.counters.bind_errors += 1;
        let granted_here = self
            .pods
            .get(&info.uid)
            .is_some_and(|r| r.phase == PodPhase::Granted(node.clone()));
        if !granted_here {
            return;
        }
        self.unplace(node, &info.uid);
        let alive = self.workers.get(&worker).is_some_and(|w| w.tx.is_some());
        if let Some(rec) = self.pods.get_mut(&info.uid) {
            rec.phase = PodPhase::Pending(alive.then_some(worker));
            rec.granted_to = None;
        }
        if !alive {
            self.dispatch(&info.uid);
        }
    }

    /// `info` holding the GPU devices it takes on `node` (already known to
    /// fit there): `proposed` (the worker's choice) when they still hold
    /// its share on the arbiter's view with the pods nominated there
    /// counted, else the tightest that do
    /// ([`flotilla_shared::gpu::choose_best_fit`]). What is placed, and
    /// written on the pod with the Binding. `info` itself for a pod asking
    /// for no GPU.
    pub(super) fn with_devices(
        &self,
        info: &Arc<PodInfo>,
        node: &str,
        proposed: Option<DeviceSet>,
    ) -> Arc<PodInfo> {
        let (Some(g), Some(state)) = (
            info.gpu.as_deref(),
            self.nodes.get(node).and_then(|n| n.gpu.as_deref()),
        ) else {
            return info.clone();
        };
        // The devices the pods nominated here (at least the pod's
        // priority) will need are theirs, as the check counted them: the
        // choice is made with them counted, on a copy.
        let nominated = if self.unarbitrated {
            Vec::new()
        } else {
            self.nominated_on(node, info)
        };
        let reserved = nominated.iter().any(|p| p.gpu.is_some()).then(|| {
            let mut copy = state.clone();
            for p in &nominated {
                if let Some(pg) = p.gpu.as_deref() {
                    copy.add(&p.uid, pg);
                }
            }
            copy
        });
        let view = reserved.as_ref().unwrap_or(state).gpus();
        let chosen = proposed
            .filter(|&d| gpu::holds(view, &g.request, d))
            .or_else(|| gpu::choose_best_fit(view, &g.request))
            .or_else(|| gpu::choose_best_fit(state.gpus(), &g.request));
        match chosen {
            Some(d) => Arc::new(info.with_gpu_devices(d)),
            None => info.clone(),
        }
    }

    /// The bind arbiter's check of one placement against the authoritative
    /// view: [`arbiter::check`] with the bind checks of the pod's profile
    /// and the pods nominated to the node. Returns the node's interned name
    /// when granted, and the volume bindings VolumeBinding's check planned
    /// there (for [`Inner::reserve_volumes`]). With arbitration off only
    /// VolumeBinding's check runs (its plan is Reserve's, not a re-check).
    pub(super) fn check_grant(
        &mut self,
        info: &PodInfo,
        node: &str,
    ) -> Result<(Arc<str>, Option<VolumePlan>), Refusal> {
        let Some((name, ninfo)) = self.nodes.get_key_value(node) else {
            return Err(Refusal::NoNode);
        };
        let nominated = if self.unarbitrated {
            Vec::new()
        } else {
            self.nominated_on(node, info)
        };
        let checks = self.bind_checks.get(&*info.scheduler_name);
        let mut view = BindView::new(
            &self.nodes,
            &self.namespaces,
            self.anti_affinity_pods,
            &mut self.kept,
        )
        .with_volumes(&self.volume_state);
        if self.unarbitrated {
            if info.volumes.is_some()
                && let Some(vb) = checks
                    .into_iter()
                    .flatten()
                    .find(|c| c.name() == binding::PLUGIN_NAME)
            {
                vb.check_bind(info, ninfo, &mut view)
                    .map_err(Refusal::Check)?;
            }
            return Ok((name.clone(), view.volume_plan));
        }
        let Some(checks) = checks else {
            return Err(Refusal::NoProfile(info.scheduler_name.clone()));
        };
        arbiter::check(checks, info, ninfo, &nominated, &mut view)?;
        Ok((name.clone(), view.volume_plan))
    }
}

impl Coordinator {
    /// Turns bind arbitration off (`false`) or back on (the default): off,
    /// every proposal for a node the coordinator knows is granted without
    /// the bind checks (nor the room of nominated pods), as a lone
    /// kube-scheduler binds whatever its cycle decided. Only sound with a
    /// single worker; the benchmarks' "single scheduler" baseline uses it
    /// to measure what arbitration costs.
    pub fn set_arbitration(&self, on: bool) {
        self.inner.lock().unarbitrated = !on;
    }

    /// Delegates Bindings to the extender of `extenders` that has a
    /// `bindVerb` (configuration validation allows at most one), as
    /// upstream's `extendersBinding`: for a pod it is interested in, once
    /// the arbiter granted the placement, the coordinator POSTs the bind
    /// verb instead of writing the Binding; a failure of an `ignorable`
    /// binder falls back to the API Binding, any other failure fails the
    /// bind (the room is freed and the worker re-queues the pod). After the
    /// extender's success the backend is told
    /// ([`Cluster::bound_by_extender`](crate::cluster::Cluster::bound_by_extender)):
    /// a real API server shows the extender's Binding through the watch; the
    /// embedded cluster, which no extender can reach, records it itself.
    ///
    /// # Errors
    /// The binder's TLS settings cannot be used.
    pub fn set_extenders(
        &self,
        extenders: &[ExtenderConfig],
    ) -> Result<(), flotilla_shared::http::HttpError> {
        let binder = extenders
            .iter()
            .find(|e| !e.bind_verb.is_empty())
            .map(|e| HttpExtender::new(e.clone()).map(Arc::new))
            .transpose()?;
        *self.binder.write() = binder;
        Ok(())
    }

    /// The binder extender, if any (its counters).
    #[must_use]
    pub fn binder(&self) -> Option<Arc<HttpExtender>> {
        self.binder.read().clone()
    }

    /// Writes the Binding of `pod` (granted on `node`): through the binder
    /// extender when it is interested in the pod, else the API's
    /// `pods/binding`.
    pub(crate) async fn write_binding(
        &self,
        pod: &PodRef,
        info: &PodInfo,
        node: &str,
    ) -> Result<(), ClusterError> {
        let binder = self
            .binder
            .read()
            .clone()
            .filter(|b| b.is_interested(&info.pod()));
        let annotations: Vec<(&str, String)> = info
            .gpu
            .as_deref()
            .and_then(|g| g.devices)
            .map(|d| {
                (
                    gpu::dialect::ANNOTATION_GPU_INDEX,
                    gpu::dialect::devices_annotation(d),
                )
            })
            .into_iter()
            .collect();
        if let Some(b) = binder {
            // The extender's Binding carries no annotations: written first.
            if !annotations.is_empty() {
                self.cluster.annotate_pod(pod, &annotations).await?;
            }
            match b.bind(&pod.namespace, &pod.name, &pod.uid, node).await {
                Ok(()) => return self.cluster.bound_by_extender(pod, node).await,
                Err(e) if b.is_ignorable() => {
                    b.stats().record_ignored();
                    warn!(%pod, node, error = %e, "ignorable extender failed to bind; writing the Binding instead");
                }
                // No answer: the extender may still write the Binding.
                Err(e) if matches!(e.kind, FailureKind::Timeout | FailureKind::Transport) => {
                    return Err(ClusterError::OutcomeUnknown(e.to_string()));
                }
                Err(e) => return Err(ClusterError::BindRejected(e.to_string())),
            }
        }
        self.cluster.bind(pod, node, &annotations).await
    }

    /// Bind arbitration. Checks the proposal against the authoritative view
    /// (every grant counted, even those the cluster has not reflected yet)
    /// with the bind checks of the pod's profile ([`crate::arbiter`]); on
    /// success records the grant, writes the Binding, and settles.
    /// Idempotent: re-proposing a bound placement answers `Bound`. The same
    /// as [`Coordinator::arbitrate`] followed by [`Coordinator::settle`].
    pub async fn propose(&self, worker: WorkerId, pod: &PodRef, node: &str) -> Decision {
        self.propose_placement(worker, pod, node, &[], None).await.0
    }

    /// [`Coordinator::propose`] with the worker's next best nodes and its
    /// GPU devices (see [`Coordinator::arbitrate`]); also returns the node
    /// decided on (the granted alternative, else `node`).
    pub async fn propose_placement(
        &self,
        worker: WorkerId,
        pod: &PodRef,
        node: &str,
        alternatives: &[String],
        gpus: Option<DeviceSet>,
    ) -> (Decision, Arc<str>) {
        match self.arbitrate(worker, pod, node, alternatives, gpus) {
            Arbitration::Decided(d) => (d, Arc::from(node)),
            Arbitration::Granted(grant) => {
                let granted = grant.node.clone();
                (self.settle(pod, grant).await, granted)
            }
        }
    }

    /// The synchronous half of [`Coordinator::propose`]: the check and, when
    /// it passes, the grant (the room is counted from now on), under the
    /// lock. Proposals arbitrated one after another are checked in that
    /// order, each against the grants before it. A grant must be passed to
    /// [`Coordinator::settle`], which writes its Binding.
    ///
    /// When `node` no longer fits (another worker's grant took the room
    /// first, or the node changed), the first of `alternatives` (the
    /// worker's next best feasible nodes, best first; at most
    /// [`MAX_ALTERNATIVES_CHECKED`] are looked at) that passes the same
    /// check is granted instead, as a scheduler whose view had been
    /// current would have chosen its next best node; only when none does is
    /// the answer a conflict. The grant's node says which it was.
    ///
    /// `gpus`: the GPU devices of `node` the worker chose. Granted on
    /// `node`, the pod holds them when they still hold its share, else the
    /// tightest that do; granted on an alternative, the tightest there.
    pub fn arbitrate(
        &self,
        worker: WorkerId,
        pod: &PodRef,
        node: &str,
        alternatives: &[String],
        gpus: Option<DeviceSet>,
    ) -> Arbitration {
        let mut inner = self.inner.lock();
        inner.counters.proposals += 1;
        inner.last_activity = Some(Instant::now());
        let Some(rec) = inner.pods.get(pod.uid.as_str()) else {
            return Arbitration::Decided(Decision::PodGone(format!("pod {pod} is not pending")));
        };
        match &rec.phase {
            // Granted with volumes to bind: its PreBind may still fail
            // (then the pod is pending again), so it is not answered bound
            // yet; the worker retries after a backoff.
            PodPhase::Granted(n)
                if &**n == node && inner.volume_plans.contains_key(pod.uid.as_str()) =>
            {
                return Arbitration::Decided(Decision::Error(format!(
                    "pod {pod} is granted {n}, its volumes being bound (PreBind); not bound yet"
                )));
            }
            PodPhase::Bound(n) | PodPhase::Granted(n) if &**n == node => {
                return Arbitration::Decided(Decision::Bound);
            }
            PodPhase::Bound(n) | PodPhase::Granted(n) => {
                return Arbitration::Decided(Decision::PodGone(format!(
                    "pod {pod} is already bound to {n}"
                )));
            }
            PodPhase::Pending(Some(w)) if *w == worker => {}
            PodPhase::Pending(_) => return Arbitration::Decided(not_assigned(pod, "ProposeBind")),
        }
        let info = rec.info.clone();
        let (name, plan) = match inner.check_grant(&info, node) {
            Ok(granted) => granted,
            Err(refusal) => {
                let alternative = alternatives
                    .iter()
                    .take(MAX_ALTERNATIVES_CHECKED)
                    .filter(|a| a.as_str() != node)
                    .find_map(|a| inner.check_grant(&info, a).ok());
                let reason = refusal.reason(node);
                match alternative {
                    Some((name, plan)) => {
                        inner.counters.alternatives_granted += 1;
                        debug!(%pod, node, granted = %name, %reason, "first choice taken; alternative granted");
                        (name, plan)
                    }
                    None => {
                        inner.counters.conflicts += 1;
                        inner.nominee_conflicted(&info, node);
                        debug!(%pod, node, %reason, "bind conflict");
                        return Arbitration::Decided(Decision::Conflict(reason));
                    }
                }
            }
        };
        inner.counters.grants += 1;
        let info = inner.with_devices(&info, &name, gpus.filter(|_| &*name == node));
        inner.place(&name, &info);
        inner.reserve_volumes(&info.uid, plan);
        if let Some(rec) = inner.pods.get_mut(&info.uid) {
            rec.phase = PodPhase::Granted(name.clone());
            rec.granted_to = Some(worker);
        }
        Arbitration::Granted(Grant {
            worker,
            info,
            node: name,
        })
    }

    /// The asynchronous half of [`Coordinator::propose`]: writes the
    /// granted Binding (through the binder extender when it is interested),
    /// then settles the record: bound, or, when the write failed, the room
    /// released and the pod pending again.
    pub async fn settle(&self, pod: &PodRef, grant: Grant) -> Decision {
        let Grant {
            worker,
            info,
            node: node_name,
        } = grant;
        let mut result = match self.pre_bind(pod, &info).await {
            Ok(()) => Ok(()),
            Err(PreBindError::Gone(e)) => Err(e),
            Err(e @ PreBindError::Failed(_)) => {
                let message = e.message();
                warn!(%pod, node = %node_name, error = %message, "PreBind failed; the pod backs off");
                self.inner.lock().binding_failed(worker, &info, &node_name);
                self.report_failure(pod, &message, Vec::new(), true).await;
                return Decision::Error(message);
            }
        };
        let started = Instant::now();
        if result.is_ok() {
            result = self
                .write_binding(pod, &info, &node_name)
                .instrument(info_span!("binding", pod = %pod, node = %node_name))
                .await;
        }
        if matches!(result, Err(ClusterError::OutcomeUnknown(_))) {
            result = self.learn_outcome(pod, &info, &node_name, result).await;
        }
        flotilla_shared::metrics::metrics().observe_extension_point(
            "Bind",
            result.is_ok(),
            &info.scheduler_name,
            started,
        );

        let written = {
            let mut inner = self.inner.lock();
            inner.binding_settled(worker, &info, &node_name, &result);
            result
        };
        match written {
            Ok(()) => {
                self.cluster
                    .record_event(SchedulingEvent::scheduled(pod, &node_name));
                Decision::Bound
            }
            Err(e) => {
                self.binding_rejected(pod, &e).await;
                match e {
                    ClusterError::PodNotFound(m) => Decision::PodGone(m),
                    ClusterError::AlreadyBound { pod, node } if node.is_empty() => {
                        Decision::PodGone(format!("pod {pod} is already bound"))
                    }
                    ClusterError::AlreadyBound { pod, node } => {
                        Decision::PodGone(format!("pod {pod} is already bound to {node}"))
                    }
                    ClusterError::NodeNotFound(n) => {
                        Decision::Conflict(format!("node {n} not found"))
                    }
                    other => Decision::Error(other.to_string()),
                }
            }
        }
    }

    /// A Binding whose outcome is unknown (`first`: sent, no answer): the
    /// server may have applied it, or may still. Its room stays granted
    /// (no other pod is placed on what it may hold) while the same Binding
    /// is sent again, with backoff (0.1 s doubling to 5 s), until an
    /// answer says what happened: bound (this Binding or the first, which
    /// the server then answers as already bound to this node), bound
    /// elsewhere, or the pod gone. An answer that says nothing of the first
    /// Binding (another timeout, 429, 5xx, a refused connection while the
    /// server restarts) keeps it going; a binder extender's refusal does
    /// for a few tries (it may refuse because the first Binding landed),
    /// until the watch shows the pod. The watch may tell first: the pod
    /// seen bound or deleted ends the wait the same way. Only shutdown
    /// gives up, and even then the room stays granted
    /// ([`Inner::binding_settled`]; a lost lease ends the process).
    pub(super) async fn learn_outcome(
        &self,
        pod: &PodRef,
        info: &PodInfo,
        node: &Arc<str>,
        first: Result<(), ClusterError>,
    ) -> Result<(), ClusterError> {
        const FIRST_RETRY: Duration = Duration::from_millis(100);
        const LONGEST_RETRY: Duration = Duration::from_secs(5);
        if let Err(e) = &first {
            warn!(%pod, node = %node, error = %e, "Binding outcome unknown; keeping its room and sending it again");
        }
        self.inner.lock().counters.bind_outcomes_unknown += 1;
        /// Refusals of a binder extender tried again (about 3 s of
        /// backoff: time for the watch to show a first Binding that landed).
        const REFUSALS_RETRIED: u32 = 5;
        let mut result = first;
        let mut delay = FIRST_RETRY;
        let mut refusals = 0;
        loop {
            match &result {
                Err(ClusterError::OutcomeUnknown(_) | ClusterError::Unavailable(_)) => {}
                Err(ClusterError::BindRejected(_)) if refusals < REFUSALS_RETRIED => refusals += 1,
                _ => break,
            }
            if let Some(seen) = self.outcome_seen(info, node) {
                return seen;
            }
            tokio::select! {
                // Still unknown, whatever the last retry was answered: the
                // first Binding may have landed.
                () = self.closing.cancelled() => {
                    let last = result.err().map_or_else(String::new, |e| e.to_string());
                    return Err(ClusterError::OutcomeUnknown(format!(
                        "given up at shutdown; last answer: {last}"
                    )));
                }
                () = tokio::time::sleep(delay) => {}
            }
            delay = (delay * 2).min(LONGEST_RETRY);
            if let Some(seen) = self.outcome_seen(info, node) {
                return seen;
            }
            result = match self.write_binding(pod, info, node).await {
                // The first Binding landed after all.
                Err(ClusterError::AlreadyBound { node: n, .. }) if n == **node => Ok(()),
                other => other,
            };
        }
        result
    }

    /// What the watch says of a granted pod whose Binding's outcome is
    /// unknown: `None` while it still shows the grant.
    fn outcome_seen(&self, info: &PodInfo, node: &Arc<str>) -> Option<Result<(), ClusterError>> {
        let inner = self.inner.lock();
        match inner.pods.get(&info.uid).map(|r| &r.phase) {
            Some(PodPhase::Granted(n)) if n == node => None,
            Some(PodPhase::Bound(n)) if n == node => Some(Ok(())),
            Some(PodPhase::Bound(n)) => Some(Err(ClusterError::AlreadyBound {
                pod: info.key.to_string(),
                node: n.to_string(),
            })),
            _ => Some(Err(ClusterError::PodNotFound(info.key.to_string()))),
        }
    }

    /// A Binding failed for a reason other than the pod or node being gone
    /// or the pod bound already: upstream's binding failure, a
    /// `FailedScheduling` event and `PodScheduled=False` (SchedulerError)
    /// saying why (`Binding rejected: ...`). Nothing is said of a Binding
    /// whose outcome is still unknown (given up at shutdown): it may have
    /// landed, and the next leader lists the truth.
    async fn binding_rejected(&self, pod: &PodRef, e: &ClusterError) {
        if matches!(
            e,
            ClusterError::PodNotFound(_)
                | ClusterError::AlreadyBound { .. }
                | ClusterError::NodeNotFound(_)
                | ClusterError::OutcomeUnknown(_)
        ) {
            return;
        }
        let message = format!("Binding rejected: {e}");
        self.report_failure(pod, &message, Vec::new(), true).await;
    }
}

/// The answer to a proposal for a pod the coordinator did not hand to the
/// proposing worker (re-dispatched meanwhile, held back, or never its):
/// nothing is granted, and the refusal is counted.
pub(super) fn not_assigned(pod: &PodRef, method: &str) -> Decision {
    flotilla_shared::metrics::metrics()
        .refused_calls
        .with_label_values(&[method, "not_assigned"])
        .inc();
    Decision::PodGone(format!("pod {pod} is not assigned to this worker"))
}
