//! The `flotilla.v1.Coordinator` gRPC service: validates requests, converts
//! wire types to the coordinator's (requests) and back (answers, and each
//! [`WorkerEvent`] of a worker's stream), and delegates to [`Coordinator`].
//! Nothing else speaks proto.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::stream::FuturesUnordered;
use futures::{Stream, StreamExt as _};
use tokio::sync::mpsc;
use tonic::{Request, Response, Status};
use tracing::{Instrument as _, info_span, warn};

use flotilla_proto::v1 as pb;
use flotilla_proto::v1::coordinator_server::{Coordinator as CoordinatorApi, CoordinatorServer};
use flotilla_shared::WorkloadClass;

use crate::cluster::PodRef;
use crate::partition::WorkerId;
use crate::state::{
    Arbitration, AttachError, Coordinator, Decision, NodeRejection, PodIdentity,
    PreemptionDecision, ReportStanding, WorkerEvent,
};

/// The service.
#[derive(Debug, Clone)]
pub struct CoordinatorService {
    coordinator: Arc<Coordinator>,
}

impl CoordinatorService {
    /// Wraps a coordinator.
    #[must_use]
    pub fn new(coordinator: Arc<Coordinator>) -> Self {
        CoordinatorService { coordinator }
    }

    /// The tonic server for this service.
    #[must_use]
    pub fn into_server(self) -> CoordinatorServer<Self> {
        CoordinatorServer::new(self)
            .max_decoding_message_size(MAX_REQUEST_BYTES)
            .max_encoding_message_size(64 * 1024 * 1024)
    }
}

/// The W3C trace context a worker sent in the request's metadata.
fn carrier(md: &tonic::metadata::MetadataMap) -> flotilla_shared::trace::Carrier {
    ["traceparent", "tracestate"]
        .into_iter()
        .filter_map(|k| {
            md.get(k)
                .and_then(|v| v.to_str().ok())
                .map(|v| (k.to_owned(), v.to_owned()))
        })
        .collect()
}

/// The worker whose session `credential` (the `worker_id` Register
/// answered) names; `Unauthenticated`, counted, for any other value.
/// Over mutual TLS the session must also come over a connection
/// presenting the certificate it registered with (`certificate`: the
/// connection's leaf certificate, DER).
fn session(
    coordinator: &Coordinator,
    credential: &str,
    certificate: Option<&[u8]>,
    method: &str,
) -> Result<WorkerId, Status> {
    coordinator
        .session_presenting(credential, certificate)
        .map_err(|m| {
            refused(method, "session");
            Status::unauthenticated(m)
        })
}

/// The leaf client certificate (DER) of the connection `req` came over,
/// if it presented one.
fn leaf_certificate<T>(req: &Request<T>) -> Option<Vec<u8>> {
    req.peer_certs()
        .and_then(|certs| certs.first().map(|c| c.as_ref().to_vec()))
}

/// Counts a refused call (`flotilla_refused_calls_total`).
pub(crate) fn refused(method: &str, reason: &str) {
    flotilla_shared::metrics::metrics()
        .refused_calls
        .with_label_values(&[method, reason])
        .inc();
}

/// Longest free text kept from a worker (a report's message): longer ones
/// are cut, with a note, so no request can make the coordinator hold
/// megabytes per pod.
pub const MAX_MESSAGE_BYTES: usize = 8 * 1024;
/// Longest per-node reason, node or plugin name kept from a report.
const MAX_FIELD_BYTES: usize = 1024;
/// Most reasons kept per node of a report.
const MAX_REASONS_PER_NODE: usize = 16;
/// Largest request the coordinator decodes (a batch of proposals or a
/// gang is far smaller).
pub const MAX_REQUEST_BYTES: usize = 16 * 1024 * 1024;

/// `s` cut to at most `max` bytes (at a character boundary), with a note
/// saying how long it was.
fn bounded(mut s: String, max: usize) -> String {
    if s.len() <= max {
        return s;
    }
    let len = s.len();
    let mut cut = max;
    while !s.is_char_boundary(cut) {
        cut -= 1;
    }
    s.truncate(cut);
    s.push_str(&format!(" … (cut from {len} bytes)"));
    s
}

fn parse_pod(p: Option<pb::PodRef>) -> Result<PodRef, Status> {
    let p = p.ok_or_else(|| Status::invalid_argument("pod: required"))?;
    if p.name.is_empty() || p.uid.is_empty() {
        return Err(Status::invalid_argument("pod: name and uid are required"));
    }
    if p.name.len() > 253 || p.namespace.len() > 63 || p.uid.len() > 128 {
        return Err(Status::invalid_argument(
            "pod: name (253), namespace (63) or uid (128 bytes) too long",
        ));
    }
    Ok(PodRef {
        namespace: if p.namespace.is_empty() {
            "default".into()
        } else {
            p.namespace
        },
        name: p.name,
        uid: p.uid,
    })
}

/// A worker's event stream, each event sent in its wire form; dropping it
/// (client gone) detaches the worker.
struct WorkerStream {
    rx: mpsc::UnboundedReceiver<WorkerEvent>,
    coordinator: Arc<Coordinator>,
    id: WorkerId,
}

impl Stream for WorkerStream {
    type Item = Result<pb::WatchEvent, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        self.rx.poll_recv(cx).map(|o| o.map(|e| Ok(watch_event(e))))
    }
}

/// The wire form of a volume kind (the worker's `events.rs` reads it back).
fn wire_volume_kind(kind: flotilla_shared::volumes::VolumeKind) -> pb::VolumeKind {
    use flotilla_shared::volumes::VolumeKind as K;
    match kind {
        K::Claim => pb::VolumeKind::Claim,
        K::Pv => pb::VolumeKind::Pv,
        K::StorageClass => pb::VolumeKind::StorageClass,
        K::CsiNode => pb::VolumeKind::CsiNode,
        K::CsiDriver => pb::VolumeKind::CsiDriver,
        K::VolumeAttachment => pb::VolumeKind::VolumeAttachment,
    }
}

/// The wire form of a worker's event. An object's JSON, encoded once and
/// shared by every worker's copy of the event, is copied into this
/// worker's message; shared names become strings.
fn watch_event(e: WorkerEvent) -> pb::WatchEvent {
    use pb::watch_event::Event;
    let raw = |json: &[u8]| pb::RawObject {
        json: json.to_vec(),
    };
    let pod_ref = |p: PodIdentity| pb::PodRef {
        namespace: p.key.namespace.to_string(),
        name: p.key.name.to_string(),
        uid: p.uid.to_string(),
    };
    let mut trace_context = HashMap::new();
    let event = match e {
        WorkerEvent::NodeUpsert(node) => Event::NodeUpsert(raw(&node)),
        WorkerEvent::NodeDeleted(name) => Event::NodeDeleted(pb::NodeDeleted {
            name: name.to_string(),
        }),
        WorkerEvent::BoundPod(pod) => Event::BoundPod(raw(&pod)),
        WorkerEvent::PodBound { pod, node } => Event::PodBound(pb::PodBound {
            pod: Some(pod_ref(pod)),
            node_name: node.to_string(),
        }),
        WorkerEvent::PodDeleted(pod) => Event::PodDeleted(pod_ref(pod)),
        WorkerEvent::AssignedPod {
            pod,
            trace_context: carrier,
        } => {
            trace_context = carrier;
            Event::AssignedPod(raw(&pod))
        }
        WorkerEvent::UnassignedPod(pod) => Event::UnassignedPod(pod_ref(pod)),
        WorkerEvent::Partition { epoch, node_names } => {
            Event::Partition(pb::Partition { epoch, node_names })
        }
        WorkerEvent::Synced => Event::Synced(pb::SyncDone {}),
        WorkerEvent::NamespaceUpsert { name, labels } => {
            Event::NamespaceUpsert(pb::NamespaceLabels { name, labels })
        }
        WorkerEvent::NamespaceDeleted(name) => Event::NamespaceDeleted(name),
        WorkerEvent::PodGroupUpsert(group) => Event::PodGroupUpsert(raw(&group)),
        WorkerEvent::PodGroupDeleted(name) => Event::PodGroupDeleted(name),
        WorkerEvent::PdbUpsert(pdb) => Event::PdbUpsert(raw(&pdb)),
        WorkerEvent::PdbDeleted { namespace, name } => {
            Event::PdbDeleted(pb::ObjectRef { namespace, name })
        }
        WorkerEvent::VolumeUpsert { kind, json } => Event::VolumeUpsert(pb::VolumeObject {
            kind: wire_volume_kind(kind).into(),
            json: json.to_vec(),
        }),
        WorkerEvent::VolumeDeleted(key) => Event::VolumeDeleted(pb::VolumeRef {
            kind: wire_volume_kind(key.kind).into(),
            namespace: key.namespace,
            name: key.name,
        }),
        WorkerEvent::NominatedPod { pod, node } => Event::NominatedPod(pb::NominatedPod {
            pod: Some(raw(&pod)),
            node_name: node.to_string(),
        }),
        WorkerEvent::NominationCleared(pod) => Event::NominationCleared(pod_ref(pod)),
    };
    pb::WatchEvent {
        event: Some(event),
        trace_context,
    }
}

impl Drop for WorkerStream {
    fn drop(&mut self) {
        self.coordinator.detach(self.id);
    }
}

/// Most answers sent in one `BindResults` message.
const MAX_RESULTS_PER_MESSAGE: usize = 512;

/// The answers of one bind stream, as they settle: every answer ready when
/// the transport asks goes in one message.
struct BindResultStream {
    rx: mpsc::UnboundedReceiver<Result<pb::BindResult, Status>>,
    /// A fatal status met while batching, sent after the batch.
    failed: Option<Status>,
}

impl Stream for BindResultStream {
    type Item = Result<pb::BindResults, Status>;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        if let Some(st) = self.failed.take() {
            return Poll::Ready(Some(Err(st)));
        }
        let first = match self.rx.poll_recv(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Ready(Some(Err(st))) => return Poll::Ready(Some(Err(st))),
            Poll::Ready(Some(Ok(r))) => r,
        };
        let mut results = vec![first];
        while results.len() < MAX_RESULTS_PER_MESSAGE {
            match self.rx.try_recv() {
                Ok(Ok(r)) => results.push(r),
                Ok(Err(st)) => {
                    self.failed = Some(st);
                    break;
                }
                Err(_) => break,
            }
        }
        Poll::Ready(Some(Ok(pb::BindResults { results })))
    }
}

/// The span of one arbitration (unary or streamed), continuing the
/// worker's trace from `parent`.
fn arbitration_span(
    worker: WorkerId,
    pod: &PodRef,
    node: &str,
    method: &'static str,
    parent: &flotilla_shared::trace::Carrier,
) -> tracing::Span {
    let span = info_span!(
        "bind_arbitration",
        otel.kind = "server",
        rpc.system = "grpc",
        rpc.method = method,
        worker,
        pod = %pod,
        node = %node,
        outcome = tracing::field::Empty,
        reason = tracing::field::Empty,
        granted_node = tracing::field::Empty,
    );
    flotilla_shared::trace::set_parent(&span, parent);
    span
}

/// Records an arbitration's outcome on its span and turns it into wire
/// form.
fn record_outcome(span: &tracing::Span, decision: Decision) -> (pb::BindOutcome, String) {
    let (outcome, label, reason) = bind_outcome(decision);
    span.record("outcome", label);
    if !reason.is_empty() {
        span.record("reason", reason.as_str());
    }
    (outcome, reason)
}

/// Serves one `BindStream`: arbitrates each proposal as it arrives, in
/// order, and settles the grants concurrently, sending every answer to
/// `tx`. Stops taking proposals when the worker closes its side, the
/// stream breaks, or the coordinator shuts down; answers the grants in
/// flight either way.
async fn serve_bind_stream(
    coordinator: Arc<Coordinator>,
    mut inbound: tonic::Streaming<pb::BindRequests>,
    certificate: Option<Vec<u8>>,
    tx: mpsc::UnboundedSender<Result<pb::BindResult, Status>>,
) {
    const METHOD: &str = "flotilla.v1.Coordinator/BindStream";
    let closing = coordinator.closing();
    let mut settling = FuturesUnordered::new();
    let mut open = true;
    while open || !settling.is_empty() {
        tokio::select! {
            Some(answer) = settling.next(), if !settling.is_empty() => {
                let _ = tx.send(Ok(answer));
            }
            msg = inbound.message(), if open => {
                let batch = match msg {
                    Ok(Some(b)) => b,
                    Ok(None) | Err(_) => {
                        open = false;
                        continue;
                    }
                };
                let worker = match session(
                    &coordinator,
                    &batch.worker_id,
                    certificate.as_deref(),
                    "BindStream",
                ) {
                    Ok(w) => w,
                    Err(st) => {
                        let _ = tx.send(Err(st));
                        open = false;
                        continue;
                    }
                };
                for p in batch.proposals {
                    let id = p.id;
                    let pod = match parse_pod(p.pod) {
                        Ok(pod) if !p.node_name.is_empty() => pod,
                        Ok(_) => {
                            let _ = tx.send(Ok(error_result(id, "node_name: required")));
                            continue;
                        }
                        Err(st) => {
                            let _ = tx.send(Ok(error_result(id, st.message())));
                            continue;
                        }
                    };
                    let node = p.node_name;
                    let span = arbitration_span(worker, &pod, &node, METHOD, &p.trace_context);
                    let arbitration = span
                        .in_scope(|| {
                            coordinator.arbitrate(
                                worker,
                                &pod,
                                &node,
                                &p.alternatives,
                                gpu_devices(p.gpu_devices),
                            )
                        });
                    match arbitration {
                        Arbitration::Decided(d) => {
                            let (outcome, reason) = record_outcome(&span, d);
                            let _ = tx.send(Ok(pb::BindResult {
                                id,
                                outcome: outcome.into(),
                                reason,
                                node_name: String::new(),
                            }));
                        }
                        Arbitration::Granted(grant) => {
                            let c = coordinator.clone();
                            let granted = alternative_granted(&node, grant.node(), &span);
                            settling.push(async move {
                                let d = c.settle(&pod, grant).instrument(span.clone()).await;
                                let (outcome, reason) = record_outcome(&span, d);
                                pb::BindResult { id, outcome: outcome.into(), reason, node_name: granted }
                            });
                        }
                    }
                }
            }
            () = closing.cancelled(), if open => {
                open = false;
            }
        }
    }
}

/// The answer to a proposal that cannot be read.
fn error_result(id: u64, reason: &str) -> pb::BindResult {
    pb::BindResult {
        id,
        outcome: pb::BindOutcome::Error.into(),
        reason: reason.to_owned(),
        node_name: String::new(),
    }
}

/// The answer's `node_name` for a grant on `granted` of a proposal for
/// `proposed`: empty when it is the proposed node, else the alternative
/// (also recorded on the arbitration span).
fn alternative_granted(proposed: &str, granted: &str, span: &tracing::Span) -> String {
    if proposed == granted {
        return String::new();
    }
    span.record("granted_node", granted);
    granted.to_owned()
}

#[tonic::async_trait]
impl CoordinatorApi for CoordinatorService {
    async fn register(
        &self,
        req: Request<pb::RegisterRequest>,
    ) -> Result<Response<pb::RegisterResponse>, Status> {
        // Over mutual TLS, the client certificate says which classes the
        // caller may serve (crate::tls::authorize_register).
        let peer_certs = req.peer_certs();
        let r = req.into_inner();
        let class = match pb::WorkloadClass::try_from(r.workload_class) {
            Ok(pb::WorkloadClass::Online) => WorkloadClass::Online,
            Ok(pb::WorkloadClass::Batch) => WorkloadClass::Batch,
            _ => {
                return Err(Status::invalid_argument(
                    "workload_class: must be ONLINE or BATCH",
                ));
            }
        };
        let identity =
            crate::tls::authorize_register(peer_certs.as_deref().map(Vec::as_slice), class)?;
        let name = if r.worker_name.is_empty() {
            format!("{class}-worker")
        } else {
            bounded(r.worker_name, 253)
        };
        if let Err(why) = self.coordinator.admits_profiles(r.profiles_fingerprint) {
            // Not refused: equal configurations can be written differently
            // (defaults spelled out, another weight), which the fingerprint
            // cannot tell from a real difference.
            warn!(worker = %name, "{why}");
        }
        // The worker names itself by the session's credential from now on.
        let (id, epoch, credential) = self.coordinator.register_session(&name, class);
        if let Some(identity) = identity {
            tracing::info!(worker = id, name = %name, identity = %identity.name, %class, "worker authenticated by its client certificate");
        }
        if let Some(leaf) = peer_certs.as_deref().and_then(|c| c.first()) {
            self.coordinator
                .bind_certificate(id, leaf.as_ref().to_vec());
        }
        Ok(Response::new(pb::RegisterResponse {
            worker_id: credential,
            epoch,
        }))
    }

    type WatchStream = Pin<Box<dyn Stream<Item = Result<pb::WatchEvent, Status>> + Send>>;

    async fn watch(
        &self,
        req: Request<pb::WatchRequest>,
    ) -> Result<Response<Self::WatchStream>, Status> {
        let leaf = leaf_certificate(&req);
        let id = session(
            &self.coordinator,
            &req.into_inner().worker_id,
            leaf.as_deref(),
            "Watch",
        )?;
        let rx = self.coordinator.attach(id).map_err(|e| {
            refused("Watch", e.reason());
            match e {
                AttachError::AlreadyWatching(_) => Status::already_exists(e.to_string()),
                AttachError::NotRegistered(_) | AttachError::Expired(_) => {
                    Status::unauthenticated(e.to_string())
                }
            }
        })?;
        Ok(Response::new(Box::pin(WorkerStream {
            rx,
            coordinator: self.coordinator.clone(),
            id,
        })))
    }

    async fn propose_bind(
        &self,
        req: Request<pb::BindProposal>,
    ) -> Result<Response<pb::BindDecision>, Status> {
        let parent = carrier(req.metadata());
        let leaf = leaf_certificate(&req);
        let r = req.into_inner();
        let id = session(
            &self.coordinator,
            &r.worker_id,
            leaf.as_deref(),
            "ProposeBind",
        )?;
        let pod = parse_pod(r.pod)?;
        if r.node_name.is_empty() {
            return Err(Status::invalid_argument("node_name: required"));
        }
        let span = arbitration_span(
            id,
            &pod,
            &r.node_name,
            "flotilla.v1.Coordinator/ProposeBind",
            &parent,
        );
        let c = self.coordinator.clone();
        let (proposed, alternatives) = (r.node_name.clone(), r.alternatives);
        let gpus = gpu_devices(r.gpu_devices);
        let arbitrated = pod.clone();
        let (decision, node) = to_completion(
            async move {
                c.propose_placement(id, &arbitrated, &proposed, &alternatives, gpus)
                    .await
            }
            .instrument(span.clone()),
        )
        .await?;
        let node_name = alternative_granted(&r.node_name, &node, &span);
        let (outcome, reason) = record_outcome(&span, decision);
        Ok(Response::new(pb::BindDecision {
            outcome: outcome.into(),
            reason,
            node_name,
        }))
    }

    type BindStreamStream = Pin<Box<dyn Stream<Item = Result<pb::BindResults, Status>> + Send>>;

    async fn bind_stream(
        &self,
        req: Request<tonic::Streaming<pb::BindRequests>>,
    ) -> Result<Response<Self::BindStreamStream>, Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let leaf = leaf_certificate(&req);
        tokio::spawn(serve_bind_stream(
            self.coordinator.clone(),
            req.into_inner(),
            leaf,
            tx,
        ));
        Ok(Response::new(Box::pin(BindResultStream {
            rx,
            failed: None,
        })))
    }

    async fn report_unschedulable(
        &self,
        req: Request<pb::UnschedulableReport>,
    ) -> Result<Response<pb::ReportAck>, Status> {
        let leaf = leaf_certificate(&req);
        let r = req.into_inner();
        let id = session(
            &self.coordinator,
            &r.worker_id,
            leaf.as_deref(),
            "ReportUnschedulable",
        )?;
        let pod = parse_pod(r.pod)?;
        match self.coordinator.report_standing(&pod, id) {
            ReportStanding::Assigned => {}
            ReportStanding::Elsewhere => {
                refused("ReportUnschedulable", "not_assigned");
                return Err(Status::permission_denied(format!(
                    "pod {pod} is not assigned to this worker"
                )));
            }
            // Late (the pod bound or deleted meanwhile) or about no pod we
            // know: nothing to record, nothing counted.
            ReportStanding::Late => return Ok(Response::new(pb::ReportAck {})),
        }
        let message = bounded(r.message, MAX_MESSAGE_BYTES);
        if r.pre_enqueue {
            self.coordinator.report_waiting(&pod, &message);
            return Ok(Response::new(pb::ReportAck {}));
        }
        let nodes = r
            .node_statuses
            .into_iter()
            .take(pb::MAX_NODE_STATUSES)
            .map(|n| NodeRejection {
                node: bounded(n.node_name, MAX_FIELD_BYTES),
                reasons: n
                    .reasons
                    .into_iter()
                    .take(MAX_REASONS_PER_NODE)
                    .map(|r| bounded(r, MAX_FIELD_BYTES))
                    .collect(),
                plugin: bounded(n.plugin, MAX_FIELD_BYTES),
            })
            .collect();
        if r.pod_group_timed_out {
            self.coordinator.count_gang_timeout();
        }
        if r.clear_nomination {
            self.coordinator.end_nomination(&pod).await;
        }
        self.coordinator
            .report_failure(&pod, &message, nodes, r.scheduler_error)
            .await;
        Ok(Response::new(pb::ReportAck {}))
    }

    async fn propose_gang(
        &self,
        req: Request<pb::GangProposal>,
    ) -> Result<Response<pb::GangDecision>, Status> {
        let parent = carrier(req.metadata());
        let leaf = leaf_certificate(&req);
        let r = req.into_inner();
        let id = session(
            &self.coordinator,
            &r.worker_id,
            leaf.as_deref(),
            "ProposeGang",
        )?;
        if r.pod_group.is_empty() || r.pod_group.len() > MAX_FIELD_BYTES {
            return Err(Status::invalid_argument(
                "pod_group: required, at most 1024 bytes",
            ));
        }
        if r.members.is_empty() {
            return Err(Status::invalid_argument(
                "members: at least one is required",
            ));
        }
        let mut members = Vec::with_capacity(r.members.len());
        for (i, m) in r.members.into_iter().enumerate() {
            let pod = parse_pod(m.pod)
                .map_err(|s| Status::invalid_argument(format!("members[{i}].{}", s.message())))?;
            if m.node_name.is_empty() {
                return Err(Status::invalid_argument(format!(
                    "members[{i}].node_name: required"
                )));
            }
            members.push((pod, m.node_name));
        }
        let span = info_span!(
            "gang_arbitration",
            otel.kind = "server",
            rpc.method = "flotilla.v1.Coordinator/ProposeGang",
            worker = id,
            pod_group = %r.pod_group,
            members = members.len(),
        );
        flotilla_shared::trace::set_parent(&span, &parent);
        let c = self.coordinator.clone();
        let group = r.pod_group;
        let d = to_completion(
            async move { c.propose_gang(id, &group, &members).await }.instrument(span),
        )
        .await?;
        let (outcome, _, reason) = bind_outcome(d.decision);
        Ok(Response::new(pb::GangDecision {
            outcome: outcome.into(),
            reason,
            failed: d
                .failed
                .into_iter()
                .map(|p| pb::PodRef {
                    namespace: p.namespace,
                    name: p.name,
                    uid: p.uid,
                })
                .collect(),
        }))
    }

    async fn propose_preemption(
        &self,
        req: Request<pb::PreemptionProposal>,
    ) -> Result<Response<pb::PreemptionDecision>, Status> {
        let parent = carrier(req.metadata());
        let leaf = leaf_certificate(&req);
        let r = req.into_inner();
        let id = session(
            &self.coordinator,
            &r.worker_id,
            leaf.as_deref(),
            "ProposePreemption",
        )?;
        let pod = parse_pod(r.pod)?;
        if r.node_name.is_empty() {
            return Err(Status::invalid_argument("node_name: required"));
        }
        let victims = r
            .victims
            .into_iter()
            .enumerate()
            .map(|(i, v)| {
                parse_pod(Some(v))
                    .map_err(|s| Status::invalid_argument(format!("victims[{i}].{}", s.message())))
            })
            .collect::<Result<Vec<_>, _>>()?;
        let span = info_span!(
            "preemption_arbitration",
            otel.kind = "server",
            rpc.method = "flotilla.v1.Coordinator/ProposePreemption",
            worker = id,
            pod = %pod,
            node = %r.node_name,
            victims = victims.len(),
        );
        flotilla_shared::trace::set_parent(&span, &parent);
        let c = self.coordinator.clone();
        let node = r.node_name;
        let decision = to_completion(
            async move { c.propose_preemption(id, &pod, &node, &victims).await }.instrument(span),
        )
        .await?;
        let (outcome, reason) = match decision {
            PreemptionDecision::Granted => (pb::PreemptionOutcome::Granted, String::new()),
            PreemptionDecision::Conflict(m) => (pb::PreemptionOutcome::Conflict, m),
            PreemptionDecision::PodGone(m) => (pb::PreemptionOutcome::PodGone, m),
        };
        Ok(Response::new(pb::PreemptionDecision {
            outcome: outcome.into(),
            reason,
        }))
    }
}

/// Runs an arbitration to its end even if the caller goes away: hyper
/// drops a unary handler whose client disconnected (a worker killed
/// mid-call), and a grant must still be settled (its Bindings written or
/// its room released; a preemption's nomination and evictions made), never
/// left half done.
async fn to_completion<T: Send + 'static>(
    work: impl std::future::Future<Output = T> + Send + 'static,
) -> Result<T, Status> {
    tokio::spawn(work)
        .await
        .map_err(|e| Status::internal(format!("arbitration failed: {e}")))
}

/// The wire outcome of an arbitration, a short label for its span's
/// `outcome` field, and the reason (empty when bound).
fn bind_outcome(decision: Decision) -> (pb::BindOutcome, &'static str, String) {
    match decision {
        Decision::Bound => (pb::BindOutcome::Bound, "bound", String::new()),
        Decision::Conflict(m) => (pb::BindOutcome::Conflict, "conflict", m),
        Decision::PodGone(m) => (pb::BindOutcome::PodGone, "pod_gone", m),
        Decision::Error(m) => (pb::BindOutcome::Error, "error", m),
    }
}

/// The wire's GPU device set (bit i = device i; 0: none chosen).
fn gpu_devices(bits: u64) -> Option<flotilla_shared::gpu::DeviceSet> {
    (bits != 0).then_some(flotilla_shared::gpu::DeviceSet(bits))
}
