//! The placement webhook: a profile that delegates the choice of node to an
//! external HTTP service (Flotilla's extension; no upstream scheduler has
//! it). The in-process plugins (and extenders) still run first: the service
//! chooses among the nodes that passed Filter, with their Score totals and
//! the node the in-process pipeline would pick, and answers with one node.
//! The coordinator's bind arbiter validates that choice like any other.
//!
//! # Configuration (profile field `placementWebhook`)
//! ```yaml
//! profiles:
//! - schedulerName: webhook-scheduler
//!   placementWebhook:
//!     url: http://127.0.0.1:9090/placement   # required, http:// or https://
//!     timeout: 1s          # deadline per call; default 1s
//!     fallback: InProcess  # or Pending; default InProcess
//!     nodeObjects: false   # also send each candidate's whole Node object
//!     batch:               # optional: many pods per call
//!       maxPods: 32        # 1 (default) = one pod per call
//!       maxWait: 5ms       # wait up to this long for a batch to fill; default 0
//!     tlsConfig: {...}     # as an extender's tlsConfig
//! ```
//!
//! # Wire format
//! One pod per call (`batch.maxPods: 1`): `POST url` with a
//! [`PlacementRequest`], answered by a [`PlacementDecision`]:
//! ```json
//! {"apiVersion": "flotilla.io/v1alpha1", "kind": "PlacementRequest",
//!  "requestTime": "2026-12-01T17:00:00.123Z", "timeoutMillis": 1000,
//!  "shard": {"worker": "online-0", "workloadClass": "online", "profile": "webhook-scheduler"},
//!  "pod": {"apiVersion": "v1", "kind": "Pod", "metadata": {...}, "spec": {...}},
//!  "nodes": [{"name": "n1", "score": 250}, {"name": "n2", "score": 180}],
//!  "inProcessChoice": "n1"}
//! ```
//! ```json
//! {"nodeName": "n2", "reason": "rack r7 has the warm cache"}
//! ```
//! `nodes` are the feasible nodes (after Filter and the extenders), each
//! with its weighted Score total (plugins and extenders; 0 when only one
//! node was feasible and scoring was skipped), plus `"node": {...}` (the
//! Node object) with `nodeObjects: true`. Replies may use any key case.
//!
//! Batched (`batch.maxPods` > 1): a [`BatchPlacementRequest`] (`kind:
//! BatchPlacementRequest`, the same fields with `items: [{pod, nodes,
//! inProcessChoice}, ...]` instead of `pod`/`nodes`/`inProcessChoice`),
//! answered by `{"decisions": [{"nodeName": ..., "reason": ...}, ...]}`,
//! one decision per item, in order; a decision may carry the pod's `uid`,
//! which must then match. Every pod of a batch was evaluated against the
//! same snapshot, so a node may be chosen for more pods than it holds: the
//! worker applies the decisions in order and re-checks each chosen node
//! (Filter, with the earlier pods of the batch assumed) before placing the
//! pod; a node no longer feasible counts as a failed decision for that pod.
//!
//! # Decisions and failures
//! - A `nodeName` among the candidates: the pod goes there (assumed, then
//!   proposed to the coordinator like any placement).
//! - No `nodeName` (absent, null or empty): the service declines to place
//!   the pod now. It stays pending, reported unschedulable with the
//!   service's `reason`, and waits in the unschedulable pool like a pod that
//!   fits nowhere: the next cluster event (or the 5-minute flush) retries
//!   it. This is a decision, not a failure: the fallback does not apply.
//! - A failure, handled by `fallback`: the call failed (connection, TLS,
//!   non-200 status), timed out, the reply does not parse, or it names a
//!   node that is not a candidate (unknown, filtered out, or, in a batch,
//!   no longer feasible). `InProcess` places the pod where the in-process
//!   pipeline chose; `Pending` leaves it pending with the failure as the
//!   reason (reported unschedulable, retried after its backoff, as after
//!   any error, until the service answers).

use std::sync::Arc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::{Deserialize, Serialize};

use flotilla_shared::PodInfo;
use flotilla_shared::http::{HttpError, JsonClient, Reply, TlsConfig};

/// `apiVersion` of the webhook's messages.
pub const API_VERSION: &str = "flotilla.io/v1alpha1";
/// Deadline of one call when `timeout` is unset.
pub const DEFAULT_WEBHOOK_TIMEOUT: Duration = Duration::from_secs(1);
/// Most pods in one batched call.
pub const MAX_BATCH_PODS: usize = 1000;

/// What to do when the webhook fails for a pod.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub enum Fallback {
    /// Place the pod where the in-process pipeline chose (default).
    #[default]
    InProcess,
    /// Leave it pending with the failure as the reason.
    Pending,
}

/// `placementWebhook.batch`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WebhookBatch {
    /// Most pods per call (1..=[`MAX_BATCH_PODS`]); 1 = one pod per call.
    pub max_pods: usize,
    /// How long the worker waits for more pods of the profile to fill a
    /// batch once it holds one (0: only those already queued).
    pub max_wait: Duration,
}

impl Default for WebhookBatch {
    fn default() -> Self {
        WebhookBatch {
            max_pods: 1,
            max_wait: Duration::ZERO,
        }
    }
}

/// A profile's `placementWebhook`, validated.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct WebhookConfig {
    /// Where requests are POSTed (`http://` or `https://`).
    pub url: String,
    /// Deadline of one call (connect to last byte of the reply).
    pub timeout: Duration,
    /// What a failure does.
    pub fallback: Fallback,
    /// Send each candidate's Node object too.
    pub node_objects: bool,
    /// Batching.
    pub batch: WebhookBatch,
    /// TLS for `https://` URLs (`None`: system roots).
    pub tls: Option<TlsConfig>,
}

impl WebhookConfig {
    /// A webhook at `url` with the defaults (1 s, `InProcess`, one pod per
    /// call).
    #[must_use]
    pub fn new(url: &str) -> Self {
        WebhookConfig {
            url: url.to_owned(),
            timeout: DEFAULT_WEBHOOK_TIMEOUT,
            fallback: Fallback::InProcess,
            node_objects: false,
            batch: WebhookBatch::default(),
            tls: None,
        }
    }

    /// Whether pods are sent many per call.
    #[must_use]
    pub fn is_batched(&self) -> bool {
        self.batch.max_pods > 1
    }
}

/// Who is asking: the worker and its pool, and the profile.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Shard {
    /// Worker name, e.g. `online-0`.
    pub worker: String,
    /// `online` or `batch`.
    pub workload_class: String,
    /// The profile's `schedulerName`.
    pub profile: String,
}

/// A feasible node as the service sees it.
#[derive(Debug, Clone, Serialize)]
pub struct CandidateOut<'a> {
    /// Node name.
    pub name: &'a str,
    /// Weighted Score total (plugins and extenders).
    pub score: i64,
    /// The Node, with `nodeObjects: true`.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub node: Option<&'a Node>,
}

/// One pod to place: the pod, its candidates, the in-process choice.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementItem<'a> {
    /// The pod.
    pub pod: &'a Pod,
    /// Its feasible nodes, in the order the pipeline found them.
    pub nodes: Vec<CandidateOut<'a>>,
    /// Where the in-process pipeline would place it.
    pub in_process_choice: &'a str,
}

/// The one-pod request.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRequest<'a> {
    /// [`API_VERSION`].
    pub api_version: &'static str,
    /// `PlacementRequest`.
    pub kind: &'static str,
    /// When the request was sent (RFC 3339, UTC).
    pub request_time: String,
    /// The call's deadline, milliseconds.
    pub timeout_millis: u64,
    /// Who asks.
    pub shard: &'a Shard,
    /// The pod and its candidates.
    #[serde(flatten)]
    pub item: PlacementItem<'a>,
}

/// The batched request.
#[derive(Debug, Clone, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchPlacementRequest<'a> {
    /// [`API_VERSION`].
    pub api_version: &'static str,
    /// `BatchPlacementRequest`.
    pub kind: &'static str,
    /// When the request was sent (RFC 3339, UTC).
    pub request_time: String,
    /// The call's deadline, milliseconds.
    pub timeout_millis: u64,
    /// Who asks.
    pub shard: &'a Shard,
    /// The pods, each with its candidates.
    pub items: Vec<PlacementItem<'a>>,
}

/// The service's answer for one pod.
#[derive(Debug, Clone, Default, PartialEq, Eq, Deserialize)]
pub struct PlacementDecision {
    /// The chosen node; `None` (or empty): decline to place the pod now.
    #[serde(default, rename = "nodeName")]
    pub node_name: Option<String>,
    /// Why (shown in events and reports).
    #[serde(default)]
    pub reason: String,
    /// The pod's uid (batches; checked when present).
    #[serde(default)]
    pub uid: Option<String>,
}

/// Why the webhook gave no usable answer for a pod.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("placement webhook {url}: {message}")]
pub struct WebhookError {
    /// The webhook's URL.
    pub url: String,
    /// What went wrong.
    pub message: String,
    /// A timeout (as opposed to any other failure).
    pub timed_out: bool,
}

/// Counters of one webhook, readable while it runs.
#[derive(Debug, Default)]
pub struct WebhookStats {
    /// Calls made (a batch is one call).
    pub calls: AtomicU64,
    /// Pods decided by the service (its node used).
    pub decided: AtomicU64,
    /// Pods the service declined to place.
    pub declined: AtomicU64,
    /// Pods whose decision failed (the fallback applied).
    pub failures: AtomicU64,
    /// Nanoseconds spent waiting for replies.
    pub nanos: AtomicU64,
}

/// What to do with a pod once the webhook answered (or failed).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Resolution {
    /// Place it on `node`.
    Place {
        /// The node.
        node: Arc<str>,
        /// The service chose it (false: the in-process fallback did).
        by_webhook: bool,
        /// The service's reason, or (fallback) why the service's answer
        /// could not be used.
        reason: String,
    },
    /// Leave it pending and report `message`.
    Pending {
        /// Why (the service's reason, or the failure).
        message: String,
        /// The service declined (a decision: the pod waits for a cluster
        /// event, as a pod that fits nowhere does); false: the service
        /// failed (`fallback: Pending`: the pod retries after its backoff,
        /// as after any error).
        declined: bool,
    },
}

/// A configured webhook and its HTTP client.
#[derive(Debug)]
pub struct Webhook {
    config: WebhookConfig,
    client: JsonClient,
    stats: WebhookStats,
}

/// One pod of a call: the pod, its candidates (name, score), the
/// in-process choice, and the Node objects when asked for.
#[derive(Clone)]
pub struct Ask<'a> {
    /// The pod.
    pub pod: &'a PodInfo,
    /// Feasible nodes and their Score totals.
    pub candidates: &'a [(Arc<str>, i64)],
    /// The in-process choice.
    pub in_process: &'a Arc<str>,
    /// Node objects by name (only read with `nodeObjects: true`).
    pub node_of: &'a (dyn Fn(&str) -> Option<Arc<Node>> + Sync),
}

impl std::fmt::Debug for Ask<'_> {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Ask")
            .field("pod", &self.pod.key)
            .field("candidates", &self.candidates.len())
            .field("in_process", &self.in_process)
            .finish_non_exhaustive()
    }
}

/// Now, RFC 3339 in UTC (e.g. `2026-12-01T17:00:00.123456789Z`).
fn now_rfc3339() -> String {
    let since = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .unwrap_or_default();
    let nanos = i128::try_from(since.as_nanos()).unwrap_or(0);
    k8s_openapi::jiff::Timestamp::from_nanosecond(nanos)
        .map(|t| t.to_string())
        .unwrap_or_default()
}

impl Webhook {
    /// The webhook of `config`.
    ///
    /// # Errors
    /// Unusable TLS settings.
    pub fn new(config: WebhookConfig) -> Result<Self, HttpError> {
        let client = JsonClient::new(config.tls.as_ref(), config.timeout)?;
        Ok(Webhook {
            config,
            client,
            stats: WebhookStats::default(),
        })
    }

    /// Its configuration.
    #[must_use]
    pub fn config(&self) -> &WebhookConfig {
        &self.config
    }

    /// Its counters.
    #[must_use]
    pub fn stats(&self) -> &WebhookStats {
        &self.stats
    }

    fn error(&self, message: String, timed_out: bool) -> WebhookError {
        WebhookError {
            url: self.config.url.clone(),
            message,
            timed_out,
        }
    }

    fn item<'a>(
        &self,
        ask: &'a Ask<'a>,
        pod: &'a Pod,
        objects: &'a [Option<Arc<Node>>],
    ) -> PlacementItem<'a> {
        PlacementItem {
            pod,
            nodes: ask
                .candidates
                .iter()
                .zip(
                    objects
                        .iter()
                        .map(Option::as_deref)
                        .chain(std::iter::repeat(None)),
                )
                .map(|((name, score), node)| CandidateOut {
                    name,
                    score: *score,
                    node,
                })
                .collect(),
            in_process_choice: ask.in_process,
        }
    }

    fn objects(&self, ask: &Ask<'_>) -> Vec<Option<Arc<Node>>> {
        if !self.config.node_objects {
            return Vec::new();
        }
        ask.candidates
            .iter()
            .map(|(n, _)| (ask.node_of)(n))
            .collect()
    }

    /// POSTs `body`, blocking until the reply; a non-200 status is an error.
    fn call(&self, body: Result<Vec<u8>, serde_json::Error>) -> Result<Reply, WebhookError> {
        let body = body.map_err(|e| self.error(format!("encoding the request: {e}"), false))?;
        self.stats.calls.fetch_add(1, Ordering::Relaxed);
        let started = Instant::now();
        let reply = self.client.post_blocking(&self.config.url, body);
        self.stats.nanos.fetch_add(
            u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        match reply {
            Err(e @ HttpError::Timeout { .. }) => Err(self.error(e.to_string(), true)),
            Err(e) => Err(self.error(e.to_string(), false)),
            Ok(r) if r.status != 200 => Err(self.error(
                format!("POST {} answered with status {}", self.config.url, r.status),
                false,
            )),
            Ok(r) => Ok(r),
        }
    }

    /// Asks for one pod (a [`PlacementRequest`]), blocking until the reply
    /// or the deadline.
    ///
    /// # Errors
    /// The call failed or timed out, or the reply is not a
    /// [`PlacementDecision`].
    pub fn decide(&self, shard: &Shard, ask: &Ask<'_>) -> Result<PlacementDecision, WebhookError> {
        let objects = self.objects(ask);
        let pod = ask.pod.pod();
        let req = PlacementRequest {
            api_version: API_VERSION,
            kind: "PlacementRequest",
            request_time: now_rfc3339(),
            timeout_millis: u64::try_from(self.config.timeout.as_millis()).unwrap_or(u64::MAX),
            shard,
            item: self.item(ask, &pod, &objects),
        };
        let reply = self.call(serde_json::to_vec(&req))?;
        decode_decision(&reply.body).map_err(|m| self.error(m, false))
    }

    /// Asks for many pods at once (a [`BatchPlacementRequest`]): one
    /// decision per ask, in order.
    ///
    /// # Errors
    /// The call failed or timed out, the reply is not
    /// `{"decisions": [...]}`, holds another number of decisions, or a
    /// decision's `uid` is not its pod's.
    pub fn decide_batch(
        &self,
        shard: &Shard,
        asks: &[Ask<'_>],
    ) -> Result<Vec<PlacementDecision>, WebhookError> {
        let objects: Vec<Vec<Option<Arc<Node>>>> = asks.iter().map(|a| self.objects(a)).collect();
        let pods: Vec<Arc<Pod>> = asks.iter().map(|a| a.pod.pod()).collect();
        let req = BatchPlacementRequest {
            api_version: API_VERSION,
            kind: "BatchPlacementRequest",
            request_time: now_rfc3339(),
            timeout_millis: u64::try_from(self.config.timeout.as_millis()).unwrap_or(u64::MAX),
            shard,
            items: asks
                .iter()
                .zip(pods.iter().zip(&objects))
                .map(|(a, (p, o))| self.item(a, p, o))
                .collect(),
        };
        let reply = self.call(serde_json::to_vec(&req))?;
        let decisions = decode_batch(&reply.body).map_err(|m| self.error(m, false))?;
        if decisions.len() != asks.len() {
            return Err(self.error(
                format!(
                    "the reply holds {} for {}",
                    plural(decisions.len(), "decision"),
                    plural(asks.len(), "pod")
                ),
                false,
            ));
        }
        for (i, (d, a)) in decisions.iter().zip(asks).enumerate() {
            if let Some(uid) = d.uid.as_deref()
                && !uid.is_empty()
                && uid != &*a.pod.uid
            {
                return Err(self.error(
                    format!(
                        "decisions[{i}].uid {uid:?} is not the uid of pod {} ({})",
                        a.pod.key, a.pod.uid
                    ),
                    false,
                ));
            }
        }
        Ok(decisions)
    }

    /// Asks for one pod in the configured shape: a [`PlacementRequest`],
    /// or a one-item [`BatchPlacementRequest`] when batched (what
    /// `simulate`, which places pods one at a time, sends).
    ///
    /// # Errors
    /// As [`Webhook::decide`] / [`Webhook::decide_batch`].
    pub fn decide_one(
        &self,
        shard: &Shard,
        ask: &Ask<'_>,
    ) -> Result<PlacementDecision, WebhookError> {
        if self.config.is_batched() {
            self.decide_batch(shard, std::slice::from_ref(ask))
                .map(|mut d| d.remove(0))
        } else {
            self.decide(shard, ask)
        }
    }

    /// Turns the service's answer for one pod into what to do, applying
    /// the fallback to failures (see the module docs). `feasible` tells
    /// whether a node is (still) a candidate for the pod.
    pub fn resolve(
        &self,
        answer: Result<PlacementDecision, WebhookError>,
        feasible: impl Fn(&str) -> Option<Arc<str>>,
        in_process: &Arc<str>,
    ) -> Resolution {
        let failure = match answer {
            Ok(d) => match d.node_name.as_deref().filter(|n| !n.is_empty()) {
                Some(n) => match feasible(n) {
                    Some(node) => {
                        self.stats.decided.fetch_add(1, Ordering::Relaxed);
                        return Resolution::Place {
                            node,
                            by_webhook: true,
                            reason: d.reason,
                        };
                    }
                    None => self.error(
                        format!("chose node {n:?}, which is not a feasible node for the pod"),
                        false,
                    ),
                },
                None => {
                    self.stats.declined.fetch_add(1, Ordering::Relaxed);
                    let why = if d.reason.is_empty() {
                        "no reason given".to_owned()
                    } else {
                        d.reason
                    };
                    return Resolution::Pending {
                        message: format!(
                            "placement webhook {}: declined to place the pod: {why}",
                            self.config.url
                        ),
                        declined: true,
                    };
                }
            },
            Err(e) => e,
        };
        self.stats.failures.fetch_add(1, Ordering::Relaxed);
        match self.config.fallback {
            Fallback::InProcess => {
                tracing::debug!(error = %failure, node = %in_process, "webhook failed; placing the pod in-process");
                Resolution::Place {
                    node: in_process.clone(),
                    by_webhook: false,
                    reason: failure.to_string(),
                }
            }
            Fallback::Pending => Resolution::Pending {
                message: failure.to_string(),
                declined: false,
            },
        }
    }
}

/// `1 pod`, `2 pods`.
fn plural(n: usize, what: &str) -> String {
    if n == 1 {
        format!("1 {what}")
    } else {
        format!("{n} {what}s")
    }
}

/// A reply object with its keys lower-cased (Go-style case-insensitive
/// field matching) before decoding.
fn lower_keys(v: serde_json::Value) -> serde_json::Value {
    match v {
        serde_json::Value::Object(m) => serde_json::Value::Object(
            m.into_iter()
                .map(|(k, v)| {
                    let k = match k.to_ascii_lowercase().as_str() {
                        "nodename" | "node_name" => "nodeName".to_owned(),
                        other => other.to_owned(),
                    };
                    (k, v)
                })
                .collect(),
        ),
        other => other,
    }
}

fn decode_decision(body: &[u8]) -> Result<PlacementDecision, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("PlacementDecision: (body): {e}"))?;
    if !v.is_object() {
        return Err("PlacementDecision: (body): expected a JSON object".into());
    }
    let v = lower_keys(v);
    serde_path_to_error::deserialize(v)
        .map_err(|e| format!("PlacementDecision: {}: {}", e.path(), e.inner()))
}

fn decode_batch(body: &[u8]) -> Result<Vec<PlacementDecision>, String> {
    let v: serde_json::Value =
        serde_json::from_slice(body).map_err(|e| format!("BatchPlacementDecision: (body): {e}"))?;
    let serde_json::Value::Object(m) = v else {
        return Err("BatchPlacementDecision: (body): expected a JSON object".into());
    };
    let Some((_, list)) = m
        .into_iter()
        .find(|(k, _)| k.eq_ignore_ascii_case("decisions"))
    else {
        return Err("BatchPlacementDecision: decisions: required".into());
    };
    let serde_json::Value::Array(items) = list else {
        return Err("BatchPlacementDecision: decisions: expected an array".into());
    };
    items
        .into_iter()
        .enumerate()
        .map(|(i, item)| {
            if !item.is_object() {
                return Err(format!(
                    "BatchPlacementDecision: decisions[{i}]: expected a JSON object"
                ));
            }
            serde_path_to_error::deserialize(lower_keys(item)).map_err(|e| {
                format!(
                    "BatchPlacementDecision: decisions[{i}].{}: {}",
                    e.path(),
                    e.inner()
                )
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn decisions_decode_in_any_key_case_and_garbage_is_an_error() {
        let d = decode_decision(br#"{"NodeName":"n2","Reason":"warm cache"}"#).expect("decodes");
        assert_eq!(d.node_name.as_deref(), Some("n2"));
        assert_eq!(d.reason, "warm cache");
        let d = decode_decision(br#"{"nodeName":null,"reason":"quota"}"#).expect("decodes");
        assert_eq!(d.node_name, None);
        for (body, want) in [
            (&b"<html>"[..], "PlacementDecision: (body)"),
            (b"[]", "expected a JSON object"),
            (
                br#"{"nodeName":3}"#,
                "PlacementDecision: nodeName: invalid type",
            ),
        ] {
            let err = decode_decision(body).expect_err("garbage");
            assert!(err.contains(want), "{err} / want {want}");
        }
        let b = decode_batch(br#"{"Decisions":[{"nodeName":"a"},{"nodeName":"","reason":"x"}]}"#)
            .expect("decodes");
        assert_eq!(b.len(), 2);
        for (body, want) in [
            (&br#"{}"#[..], "decisions: required"),
            (br#"{"decisions":{}}"#, "expected an array"),
            (
                br#"{"decisions":[1]}"#,
                "decisions[0]: expected a JSON object",
            ),
            (
                br#"{"decisions":[{"reason":5}]}"#,
                "decisions[0].reason: invalid type",
            ),
        ] {
            let err = decode_batch(body).expect_err("garbage");
            assert!(err.contains(want), "{err} / want {want}");
        }
    }
}
