//! The worker's end of `BindStream`: one gRPC stream per session that
//! carries every bind proposal the worker makes and every answer the
//! coordinator gives, instead of one `ProposeBind` call per pod.
//!
//! A unary call per pod costs an HTTP/2 stream (HEADERS, DATA, trailers)
//! and a trip through the server's service stack each way; on one stream a
//! proposal is a few dozen bytes of DATA, and proposals (answers) made
//! (settled) while the transport was busy travel together in one message.
//! The coordinator arbitrates a stream's proposals in the order they were
//! sent, so one worker's pipelined proposals never overtake each other.
//!
//! Each proposal carries a caller's payload `T` (the assumed pod and its
//! attempt) until its answer arrives; [`BindStream::run_answers`] hands
//! every payload back exactly once: with the coordinator's answer, or, if
//! the stream breaks or ends first, with [`pb::BindOutcome::Error`], so no
//! assumed pod is left waiting for an answer that will not come.

use std::collections::HashMap;
use std::pin::Pin;
use std::sync::Arc;
use std::task::{Context, Poll};

use futures::Stream;
use parking_lot::Mutex;
use tokio::sync::mpsc;
use tonic::transport::Channel;

use flotilla_proto::v1 as pb;
use flotilla_proto::v1::coordinator_client::CoordinatorClient;

/// Most proposals sent in one `BindRequests` message.
const MAX_PROPOSALS_PER_MESSAGE: usize = 512;

/// How an answer reached the caller.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Answer {
    /// The coordinator's outcome; `Error` when the stream failed.
    pub outcome: pb::BindOutcome,
    /// Why it was not bound (empty when bound).
    pub reason: String,
    /// Bound on one of the proposal's alternatives, this one (the proposed
    /// node's room was taken); `None`: on the proposed node.
    pub granted_node: Option<String>,
    /// The stream failed or ended before the coordinator answered (the
    /// connection is going; the caller backs the pod off).
    pub stream_failed: bool,
}

/// The proposals in flight and the sending half, under one lock so a
/// proposal is either answered by the stream or refused to the caller,
/// never lost between the two.
struct InFlight<T> {
    /// `None` once the stream is closed or broken.
    tx: Option<mpsc::UnboundedSender<pb::BindRequest>>,
    pending: HashMap<u64, T>,
    next_id: u64,
}

/// One session's bind stream. Share it as `Arc<BindStream<T>>`.
pub struct BindStream<T> {
    inner: Mutex<InFlight<T>>,
}

impl<T> std::fmt::Debug for BindStream<T> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        let inner = self.inner.lock();
        f.debug_struct("BindStream")
            .field("open", &inner.tx.is_some())
            .field("in_flight", &inner.pending.len())
            .finish()
    }
}

/// The request side: every proposal queued when the transport asks goes
/// in one message.
struct Requests {
    worker_id: String,
    rx: mpsc::UnboundedReceiver<pb::BindRequest>,
}

impl Stream for Requests {
    type Item = pb::BindRequests;
    fn poll_next(mut self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Option<Self::Item>> {
        let first = match self.rx.poll_recv(cx) {
            Poll::Pending => return Poll::Pending,
            Poll::Ready(None) => return Poll::Ready(None),
            Poll::Ready(Some(p)) => p,
        };
        let mut proposals = vec![first];
        while proposals.len() < MAX_PROPOSALS_PER_MESSAGE {
            match self.rx.try_recv() {
                Ok(p) => proposals.push(p),
                Err(_) => break,
            }
        }
        Poll::Ready(Some(pb::BindRequests {
            worker_id: self.worker_id.clone(),
            proposals,
        }))
    }
}

impl<T: Send + 'static> BindStream<T> {
    /// Opens the stream for worker `worker_id`. Returns the stream and its
    /// answers, to be passed to [`BindStream::run_answers`].
    ///
    /// # Errors
    /// The call's status: `UNIMPLEMENTED` from a coordinator that predates
    /// `BindStream` (use `ProposeBind` then), or the connection failing.
    pub async fn open(
        client: &mut CoordinatorClient<Channel>,
        worker_id: &str,
    ) -> Result<(Arc<Self>, tonic::Streaming<pb::BindResults>), tonic::Status> {
        let (tx, rx) = mpsc::unbounded_channel();
        let requests = Requests {
            worker_id: worker_id.to_owned(),
            rx,
        };
        let answers = client.bind_stream(requests).await?.into_inner();
        let stream = Arc::new(BindStream {
            inner: Mutex::new(InFlight {
                tx: Some(tx),
                pending: HashMap::new(),
                next_id: 0,
            }),
        });
        Ok((stream, answers))
    }

    /// Sends a proposal to bind `pod` to `node` (or, should its room be
    /// taken, to the first of `alternatives` that fits), keeping `payload`
    /// until its answer. `trace_context` is the binding cycle's W3C context
    /// (empty when tracing is off).
    ///
    /// # Errors
    /// The payload back when the stream is closed or broken: the caller
    /// proposes some other way (`ProposeBind`).
    pub fn propose(
        &self,
        pod: pb::PodRef,
        node: String,
        alternatives: Vec<String>,
        gpu_devices: u64,
        trace_context: std::collections::HashMap<String, String>,
        payload: T,
    ) -> Result<(), T> {
        let mut inner = self.inner.lock();
        let id = inner.next_id;
        let request = pb::BindRequest {
            id,
            pod: Some(pod),
            node_name: node,
            trace_context,
            alternatives,
            gpu_devices,
        };
        let sent = inner.tx.as_ref().is_some_and(|tx| tx.send(request).is_ok());
        if !sent {
            return Err(payload);
        }
        inner.next_id += 1;
        inner.pending.insert(id, payload);
        Ok(())
    }

    /// Proposals sent and not answered yet.
    #[must_use]
    pub fn in_flight(&self) -> usize {
        self.inner.lock().pending.len()
    }

    /// Stops sending: the coordinator answers what is in flight, then ends
    /// the stream (and [`BindStream::run_answers`] returns). Later
    /// proposals are refused.
    pub fn close(&self) {
        self.inner.lock().tx = None;
    }

    /// Reads the answers until the stream ends, handing each payload to
    /// `on_answer` with its answer; then refuses further proposals and
    /// hands every payload still in flight to `on_answer` with
    /// [`pb::BindOutcome::Error`].
    pub async fn run_answers(
        self: Arc<Self>,
        mut answers: tonic::Streaming<pb::BindResults>,
        on_answer: impl Fn(T, Answer),
    ) {
        let why = loop {
            match answers.message().await {
                Ok(Some(batch)) => {
                    for r in batch.results {
                        let payload = self.inner.lock().pending.remove(&r.id);
                        // An id we do not hold (answered twice): nothing to do.
                        if let Some(p) = payload {
                            let outcome = pb::BindOutcome::try_from(r.outcome)
                                .unwrap_or(pb::BindOutcome::Error);
                            on_answer(
                                p,
                                Answer {
                                    outcome,
                                    reason: r.reason,
                                    granted_node: (!r.node_name.is_empty()).then_some(r.node_name),
                                    stream_failed: false,
                                },
                            );
                        }
                    }
                }
                Ok(None) => break "the bind stream ended".to_owned(),
                Err(status) => break format!("the bind stream broke: {status}"),
            }
        };
        let orphans: Vec<T> = {
            let mut inner = self.inner.lock();
            inner.tx = None;
            inner.pending.drain().map(|(_, p)| p).collect()
        };
        for p in orphans {
            on_answer(
                p,
                Answer {
                    outcome: pb::BindOutcome::Error,
                    reason: why.clone(),
                    granted_node: None,
                    stream_failed: true,
                },
            );
        }
    }
}
