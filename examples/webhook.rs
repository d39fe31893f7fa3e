//! A **placement webhook** service for Flotilla's `placementWebhook`
//! (profile field; protocol in `flotilla_scheduler::webhook`): the
//! scheduler runs its plugins, then asks this service to choose among the
//! feasible nodes. The server part decodes the protocol with its own serde
//! structs (camelCase, unknown fields ignored) and imports nothing from
//! Flotilla.
//!
//! # Policy: bin-packing
//! Flotilla's default scoring (`NodeResourcesFit` `LeastAllocated`,
//! `NodeResourcesBalancedAllocation`) spreads pods. This service packs
//! them: among the candidate nodes it chooses the one with the **lowest**
//! in-process Score total (the fullest), ties broken by node name, so
//! nodes fill one after the other and whole nodes stay free. A pod
//! labelled `placement=decline` is declined (no `nodeName`, with a
//! reason): Flotilla leaves it pending, reports it unschedulable with that
//! reason, and retries it after its backoff.
//!
//! # Protocol
//! `POST /placement` or `POST /placement/batch`; both paths take both
//! kinds, told apart by `kind` (or, without one, by the presence of
//! `items`):
//! - `PlacementRequest` (`{"kind": "PlacementRequest", "pod": {...},
//!   "nodes": [{"name": "n1", "score": 250}, ...], "inProcessChoice":
//!   "n1", ...}`) is answered with one decision, `{"nodeName": "n2",
//!   "reason": "..."}`;
//! - `BatchPlacementRequest` (`{"kind": "BatchPlacementRequest", "items":
//!   [{"pod", "nodes", "inProcessChoice"}, ...]}`) with `{"decisions":
//!   [...]}`, one per item in order, each carrying its pod's `uid`.
//!
//! A declined pod's decision is `{"nodeName": null, "reason": "..."}`. A
//! body that cannot be read, or of another `apiVersion` or `kind`, gets
//! HTTP 400 with `{"error": "<message>: <field>: <problem>"}` (Flotilla
//! then applies the profile's `fallback`), never a panic.
//!
//! Within a batch every item was evaluated against the same snapshot, so
//! this service, which does not track capacity, may choose one node for
//! more pods than it holds; Flotilla re-checks each decision in order and
//! places a pod whose chosen node no longer fits by its `fallback`.
//!
//! # Running it
//! `cargo run --example webhook -- --listen 127.0.0.1:9090` serves it and
//! prints the profile to configure. Its tests (`cargo test --example
//! webhook`) drive the handlers over loopback, check Flotilla's own client
//! reads the decisions, and run Flotilla end to end with it, one pod per
//! call and batched.

use std::sync::Arc;
use std::sync::atomic::{AtomicUsize, Ordering};

mod support;

use axum::Router;
use axum::body::Bytes;
use axum::extract::{DefaultBodyLimit, State};
use axum::http::StatusCode;
use axum::response::{IntoResponse, Response};
use axum::routing::post;
use clap::Parser as _;
use k8s_openapi::api::core::v1::Pod;
use serde::{Deserialize, Serialize};

use serde_json::Value;
use support::ServerArgs;

/// `apiVersion` of the protocol's messages.
pub const API_VERSION: &str = "flotilla.io/v1alpha1";
/// `kind` of a one-pod request.
pub const KIND_SINGLE: &str = "PlacementRequest";
/// `kind` of a batched request.
pub const KIND_BATCH: &str = "BatchPlacementRequest";
/// Pod label key that, with value [`DECLINE_VALUE`], makes the service
/// decline the pod.
pub const LABEL_PLACEMENT: &str = "placement";
/// See [`LABEL_PLACEMENT`].
pub const DECLINE_VALUE: &str = "decline";
/// The reason given for a declined pod.
pub const DECLINE_REASON: &str =
    "the pod is labelled placement=decline: this service does not place it";
/// Largest request body read (bytes): a batch with `nodeObjects: true`
/// runs to megabytes (axum's default limit is 2 MiB).
pub const MAX_BODY_BYTES: usize = 64 << 20;
/// Where `main` listens unless `--listen` says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:9090";

/// A feasible node as the scheduler sends it (`node`, sent with
/// `nodeObjects: true`, is ignored by this policy).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct Candidate {
    /// Node name.
    pub name: String,
    /// The node's weighted in-process Score total.
    #[serde(default)]
    pub score: i64,
}

/// One pod to place, with its candidates.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementItem {
    /// The pod.
    pub pod: Pod,
    /// Its feasible nodes.
    #[serde(default)]
    pub nodes: Vec<Candidate>,
    /// Where the in-process pipeline would place it.
    #[serde(default)]
    pub in_process_choice: String,
}

/// Who asks: the worker, its pool and the profile.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase", default)]
pub struct Shard {
    /// Worker name, e.g. `online-0`.
    pub worker: String,
    /// `online` or `batch`.
    pub workload_class: String,
    /// The profile's `schedulerName`.
    pub profile: String,
}

/// The one-pod request (`kind: PlacementRequest`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementRequest {
    /// [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// [`KIND_SINGLE`].
    #[serde(default)]
    pub kind: String,
    /// Who asks.
    #[serde(default)]
    pub shard: Shard,
    /// The pod.
    pub pod: Pod,
    /// Its feasible nodes.
    #[serde(default)]
    pub nodes: Vec<Candidate>,
    /// Where the in-process pipeline would place it.
    #[serde(default)]
    pub in_process_choice: String,
}

/// The batched request (`kind: BatchPlacementRequest`).
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct BatchPlacementRequest {
    /// [`API_VERSION`].
    #[serde(default)]
    pub api_version: String,
    /// [`KIND_BATCH`].
    #[serde(default)]
    pub kind: String,
    /// Who asks.
    #[serde(default)]
    pub shard: Shard,
    /// The pods.
    pub items: Vec<PlacementItem>,
}

/// The answer for one pod.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "camelCase")]
pub struct PlacementDecision {
    /// The chosen node; `null`: declined.
    pub node_name: Option<String>,
    /// Why.
    pub reason: String,
    /// The pod's uid (batches: Flotilla checks it against the item's pod).
    #[serde(skip_serializing_if = "Option::is_none", default)]
    pub uid: Option<String>,
}

/// The answer to a batch: one decision per item, in order.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct BatchPlacementDecision {
    /// The decisions.
    pub decisions: Vec<PlacementDecision>,
}

/// The body of an HTTP 400 reply.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What is wrong with the request.
    pub error: String,
}

/// A request this service cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// Not JSON, or not of the message's shape; `field` is the path to the
    /// offending value (`(body)` for the document itself).
    #[error("{message}: {field}: {problem}")]
    Decode {
        /// The message expected (`PlacementRequest`, ...).
        message: &'static str,
        /// Where, e.g. `items[2].nodes[0].score`.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// A `kind` this service does not speak.
    #[error("kind: {0:?} is not {KIND_SINGLE} or {KIND_BATCH}")]
    Kind(String),
    /// Another version of the protocol.
    #[error("apiVersion: {0:?} is not {API_VERSION}")]
    ApiVersion(String),
}

impl IntoResponse for BadRequest {
    fn into_response(self) -> Response {
        (
            StatusCode::BAD_REQUEST,
            axum::Json(ErrorReply {
                error: self.to_string(),
            }),
        )
            .into_response()
    }
}

/// A request, either kind.
#[derive(Debug, Clone, PartialEq)]
pub enum Request {
    /// One pod.
    Single(Box<PlacementRequest>),
    /// Many pods.
    Batch(Box<BatchPlacementRequest>),
}

fn decode_as<T: serde::de::DeserializeOwned>(
    message: &'static str,
    v: Value,
) -> Result<T, BadRequest> {
    serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        BadRequest::Decode {
            message,
            field: if path == "." { "(body)".into() } else { path },
            problem: e.into_inner().to_string(),
        }
    })
}

/// Reads a request body of either kind.
///
/// # Errors
/// [`BadRequest`] naming the field at fault.
pub fn decode_request(body: &[u8]) -> Result<Request, BadRequest> {
    let bad_body = |problem: String| BadRequest::Decode {
        message: "PlacementRequest",
        field: "(body)".into(),
        problem,
    };
    let v: Value = serde_json::from_slice(body).map_err(|e| bad_body(e.to_string()))?;
    let Value::Object(m) = &v else {
        return Err(bad_body("expected a JSON object".into()));
    };
    match m.get("apiVersion") {
        None | Some(Value::Null) => {}
        Some(Value::String(a)) if a.is_empty() || a == API_VERSION => {}
        Some(other) => {
            return Err(BadRequest::ApiVersion(
                other
                    .as_str()
                    .map_or_else(|| other.to_string(), str::to_owned),
            ));
        }
    }
    let kind = match m.get("kind") {
        None | Some(Value::Null) => {
            if m.contains_key("items") {
                KIND_BATCH.to_owned()
            } else {
                KIND_SINGLE.to_owned()
            }
        }
        Some(Value::String(k)) => k.clone(),
        Some(other) => return Err(BadRequest::Kind(other.to_string())),
    };
    match kind.as_str() {
        KIND_SINGLE => decode_as(KIND_SINGLE, v).map(|r| Request::Single(Box::new(r))),
        KIND_BATCH => decode_as(KIND_BATCH, v).map(|r| Request::Batch(Box::new(r))),
        _ => Err(BadRequest::Kind(kind)),
    }
}

/// Whether the service declines `pod` (label `placement=decline`).
#[must_use]
pub fn declines(pod: &Pod) -> bool {
    pod.metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_PLACEMENT))
        .is_some_and(|v| v == DECLINE_VALUE)
}

/// The policy for one pod: decline it when labelled so; else the candidate
/// with the lowest score, ties by name; decline when there is none.
#[must_use]
pub fn decide(pod: &Pod, nodes: &[Candidate], in_process_choice: &str) -> PlacementDecision {
    let uid = pod.metadata.uid.clone();
    if declines(pod) {
        return PlacementDecision {
            node_name: None,
            reason: DECLINE_REASON.into(),
            uid,
        };
    }
    match nodes
        .iter()
        .min_by(|a, b| (a.score, &a.name).cmp(&(b.score, &b.name)))
    {
        None => PlacementDecision {
            node_name: None,
            reason: "no candidate node".into(),
            uid,
        },
        Some(c) => PlacementDecision {
            node_name: Some(c.name.clone()),
            reason: format!(
                "bin-packing: lowest score {} among {} candidate(s) (in-process choice {})",
                c.score,
                nodes.len(),
                if in_process_choice.is_empty() {
                    "unknown"
                } else {
                    in_process_choice
                }
            ),
            uid,
        },
    }
}

/// Requests served (readable while the server runs).
#[derive(Debug, Default)]
pub struct Stats {
    /// Every request, read or not.
    pub calls: AtomicUsize,
    /// `PlacementRequest`s answered.
    pub single: AtomicUsize,
    /// `BatchPlacementRequest`s answered.
    pub batches: AtomicUsize,
    /// Pods decided (or declined), over both kinds.
    pub pods: AtomicUsize,
    /// Items of the largest batch.
    pub largest_batch: AtomicUsize,
    /// Pods declined.
    pub declined: AtomicUsize,
    /// Requests answered with 400.
    pub bad_requests: AtomicUsize,
}

impl Stats {
    fn decided(&self, d: &PlacementDecision) {
        self.pods.fetch_add(1, Ordering::Relaxed);
        if d.node_name.is_none() {
            self.declined.fetch_add(1, Ordering::Relaxed);
        }
    }
}

async fn placement(State(stats): State<Arc<Stats>>, body: Bytes) -> Response {
    stats.calls.fetch_add(1, Ordering::Relaxed);
    match decode_request(&body) {
        Err(e) => {
            stats.bad_requests.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
        Ok(Request::Single(r)) => {
            stats.single.fetch_add(1, Ordering::Relaxed);
            let mut d = decide(&r.pod, &r.nodes, &r.in_process_choice);
            stats.decided(&d);
            // The one-pod reply has no uid (the request names one pod).
            d.uid = None;
            axum::Json(d).into_response()
        }
        Ok(Request::Batch(b)) => {
            stats.batches.fetch_add(1, Ordering::Relaxed);
            stats
                .largest_batch
                .fetch_max(b.items.len(), Ordering::Relaxed);
            let decisions: Vec<PlacementDecision> = b
                .items
                .iter()
                .map(|i| decide(&i.pod, &i.nodes, &i.in_process_choice))
                .collect();
            for d in &decisions {
                stats.decided(d);
            }
            axum::Json(BatchPlacementDecision { decisions }).into_response()
        }
    }
}

/// The service: `POST /placement` and `POST /placement/batch`.
pub fn app() -> Router {
    app_with_stats(Arc::default())
}

/// [`app`], counting what it serves in `stats`.
pub fn app_with_stats(stats: Arc<Stats>) -> Router {
    Router::new()
        .route("/placement", post(placement))
        .route("/placement/batch", post(placement))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(stats)
}

/// A profile that sends its pods to the service at `base` (`http://host:port`),
/// one per call, or batched with `batch: Some(max_pods)`.
#[must_use]
pub fn profile_snippet(base: &str, batch: Option<usize>) -> String {
    let mut s = format!(
        "profiles:\n\
         - schedulerName: default-scheduler\n\
         \x20 placementWebhook:\n\
         \x20   url: {base}/placement{}\n\
         \x20   timeout: 2s\n\
         \x20   fallback: InProcess\n",
        if batch.is_some() { "/batch" } else { "" }
    );
    if let Some(n) = batch {
        s.push_str(&format!(
            "    batch:\n      maxPods: {n}\n      maxWait: 20ms\n"
        ));
    }
    s
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let listen = ServerArgs::parse().listen_or(DEFAULT_LISTEN);
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    let base = format!("http://{addr}");
    println!("placement webhook listening on {base} (POST /placement, POST /placement/batch)");
    println!("configure a profile (one pod per call):\n");
    print!("{}", profile_snippet(&base, None));
    println!("\nor batched:\n");
    print!("{}", profile_snippet(&base, Some(32)));
    axum::serve(listener, app()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::support::testing::{json_of, post, serve};
    use super::*;

    use std::collections::BTreeMap;
    use std::time::Duration;

    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use serde_json::json;

    fn pod(name: &str, cpu: &str) -> PodBuilder {
        PodBuilder::new(name).cpu(cpu).memory("100Mi")
    }

    fn declined(name: &str) -> PodBuilder {
        pod(name, "100m").label(LABEL_PLACEMENT, DECLINE_VALUE)
    }

    #[test]
    fn a_single_request_gets_the_lowest_scored_node_ties_by_name() {
        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        // As documented, with a node object and fields this service ignores.
        let body = json!({
            "apiVersion": "flotilla.io/v1alpha1", "kind": "PlacementRequest",
            "requestTime": "2026-12-01T17:00:00.123Z", "timeoutMillis": 1000,
            "shard": {"worker": "online-0", "workloadClass": "online", "profile": "default-scheduler"},
            "pod": pod("web", "1").build(),
            "nodes": [
                {"name": "n1", "score": 250},
                {"name": "n3", "score": 180, "node": NodeBuilder::new("n3").build()},
                {"name": "n2", "score": 180},
            ],
            "inProcessChoice": "n1",
            "futureField": true,
        });
        let r = post(addr, "/placement", serde_json::to_vec(&body).expect("json"));
        assert_eq!(r.status, 200);
        let v = json_of(&r);
        assert_eq!(v["nodeName"], "n2");
        assert_eq!(
            v["reason"],
            "bin-packing: lowest score 180 among 3 candidate(s) (in-process choice n1)"
        );
        assert!(v.get("uid").is_none(), "{v}");
        // The batch path takes a single request too (told apart by kind).
        let r = post(
            addr,
            "/placement/batch",
            serde_json::to_vec(&body).expect("json"),
        );
        assert_eq!(json_of(&r)["nodeName"], "n2");
        assert_eq!(stats.single.load(Ordering::Relaxed), 2);
        assert_eq!(stats.batches.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn a_batch_gets_one_decision_per_item_in_order_with_uids() {
        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        let nodes = json!([{"name": "b", "score": 10}, {"name": "a", "score": 10}, {"name": "c", "score": 90}]);
        let body = json!({
            "apiVersion": "flotilla.io/v1alpha1", "kind": "BatchPlacementRequest",
            "items": [
                {"pod": pod("p1", "1").build(), "nodes": nodes, "inProcessChoice": "c"},
                {"pod": declined("p2").build(), "nodes": nodes, "inProcessChoice": "c"},
                {"pod": pod("p3", "1").build(), "nodes": [{"name": "c", "score": 0}]},
                {"pod": pod("p4", "1").build(), "nodes": []},
            ],
        });
        let r = post(
            addr,
            "/placement/batch",
            serde_json::to_vec(&body).expect("json"),
        );
        assert_eq!(r.status, 200);
        let got: BatchPlacementDecision = serde_json::from_slice(&r.body).expect("decisions");
        let summary: Vec<(Option<&str>, Option<&str>)> = got
            .decisions
            .iter()
            .map(|d| (d.node_name.as_deref(), d.uid.as_deref()))
            .collect();
        assert_eq!(
            summary,
            [
                (Some("a"), Some("uid-p1")),
                (None, Some("uid-p2")),
                (Some("c"), Some("uid-p3")),
                (None, Some("uid-p4")),
            ]
        );
        assert_eq!(got.decisions[1].reason, DECLINE_REASON);
        assert_eq!(got.decisions[3].reason, "no candidate node");
        // Without a kind, `items` makes it a batch.
        let r = post(
            addr,
            "/placement",
            serde_json::to_vec(&json!({"items": [{"pod": {}, "nodes": [{"name": "x"}]}]}))
                .expect("json"),
        );
        assert_eq!(json_of(&r)["decisions"][0]["nodeName"], "x");
        assert_eq!(stats.batches.load(Ordering::Relaxed), 2);
        assert_eq!(stats.largest_batch.load(Ordering::Relaxed), 4);
        assert_eq!(stats.pods.load(Ordering::Relaxed), 5);
        assert_eq!(stats.declined.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn a_pod_labelled_placement_decline_is_declined_with_the_reason() {
        let addr = serve(app());
        let body = json!({
            "kind": "PlacementRequest",
            "pod": declined("shy").build(),
            "nodes": [{"name": "n1", "score": 0}],
            "inProcessChoice": "n1",
        });
        let r = post(addr, "/placement", serde_json::to_vec(&body).expect("json"));
        assert_eq!(r.status, 200);
        assert_eq!(
            json_of(&r),
            json!({"nodeName": null, "reason": DECLINE_REASON})
        );
    }

    #[test]
    fn malformed_requests_get_400_with_an_error_naming_the_problem() {
        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        let cases: &[(&[u8], &str)] = &[
            (b"<html>", "PlacementRequest: (body): expected value"),
            (b"[]", "PlacementRequest: (body): expected a JSON object"),
            (b"", "PlacementRequest: (body): EOF"),
            (
                br#"{"kind":"PlacementRequest"}"#,
                "PlacementRequest: (body): missing field `pod`",
            ),
            (
                br#"{"kind":"PlacementRequest","pod":{},"nodes":{}}"#,
                "PlacementRequest: nodes: invalid type: map",
            ),
            (
                br#"{"pod":{},"nodes":[{"name":"n1","score":"high"}]}"#,
                "PlacementRequest: nodes[0].score: invalid type: string",
            ),
            (
                br#"{"kind":"BatchPlacementRequest","items":{}}"#,
                "BatchPlacementRequest: items: invalid type: map",
            ),
            (
                br#"{"kind":"BatchPlacementRequest","items":[{"pod":{"metadata":{"name":7}}}]}"#,
                "BatchPlacementRequest: items[0].pod.metadata.name: invalid type: integer",
            ),
            (
                br#"{"kind":"BatchPlacementRequest"}"#,
                "BatchPlacementRequest: (body): missing field `items`",
            ),
            (
                br#"{"kind":"Pod","pod":{}}"#,
                "kind: \"Pod\" is not PlacementRequest or BatchPlacementRequest",
            ),
            (br#"{"kind":3}"#, "kind: \"3\" is not"),
            (
                br#"{"apiVersion":"flotilla.io/v2","pod":{}}"#,
                "apiVersion: \"flotilla.io/v2\" is not flotilla.io/v1alpha1",
            ),
        ];
        for path in ["/placement", "/placement/batch"] {
            for (body, want) in cases {
                let r = post(addr, path, body.to_vec());
                assert_eq!(r.status, 400, "{path} {}", String::from_utf8_lossy(body));
                let v = json_of(&r);
                let err = v["error"].as_str().expect("an error string");
                assert!(err.starts_with(want), "{path}: {err:?} / want {want:?}");
            }
        }
        assert_eq!(stats.bad_requests.load(Ordering::Relaxed), cases.len() * 2);
        assert_eq!(stats.pods.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn flotillas_webhook_client_reads_the_decisions() {
        use flotilla_scheduler::webhook::{
            Ask, Fallback, Resolution, Shard as FlotillaShard, Webhook, WebhookBatch, WebhookConfig,
        };
        let addr = serve(app());
        let shard = FlotillaShard {
            worker: "online-0".into(),
            workload_class: "online".into(),
            profile: "default-scheduler".into(),
        };
        let candidates: Vec<(Arc<str>, i64)> =
            vec![("n1".into(), 300), ("n2".into(), 120), ("n3".into(), 120)];
        let in_process: Arc<str> = "n1".into();
        let node_of = |n: &str| Some(Arc::new(NodeBuilder::new(n).cpu("4").build()));
        let web = pod("web", "1").build_info();
        let shy = declined("shy").build_info();
        let ask = |p| Ask {
            pod: p,
            candidates: &candidates,
            in_process: &in_process,
            node_of: &node_of,
        };
        let feasible = |n: &str| {
            candidates
                .iter()
                .find(|(c, _)| &**c == n)
                .map(|(c, _)| c.clone())
        };

        let mut config = WebhookConfig::new(&format!("http://{addr}/placement"));
        config.node_objects = true;
        config.fallback = Fallback::Pending;
        let hook = Webhook::new(config).expect("client");
        let d = hook.decide(&shard, &ask(&web)).expect("a decision");
        assert_eq!(d.node_name.as_deref(), Some("n2"));
        match hook.resolve(Ok(d), feasible, &in_process) {
            Resolution::Place {
                node, by_webhook, ..
            } => assert_eq!((&*node, by_webhook), ("n2", true)),
            other => panic!("{other:?}"),
        }
        let d = hook.decide(&shard, &ask(&shy)).expect("a decision");
        match hook.resolve(Ok(d), feasible, &in_process) {
            Resolution::Pending { message, .. } => {
                assert!(message.contains(DECLINE_REASON), "{message}");
            }
            other => panic!("{other:?}"),
        }

        let mut config = WebhookConfig::new(&format!("http://{addr}/placement/batch"));
        config.batch = WebhookBatch {
            max_pods: 8,
            max_wait: Duration::from_millis(20),
        };
        let hook = Webhook::new(config).expect("client");
        let ds = hook
            .decide_batch(&shard, &[ask(&web), ask(&shy), ask(&web)])
            .expect("decisions, uids checked");
        let nodes: Vec<Option<&str>> = ds.iter().map(|d| d.node_name.as_deref()).collect();
        assert_eq!(nodes, [Some("n2"), None, Some("n2")]);
    }

    fn three_nodes() -> Vec<k8s_openapi::api::core::v1::Node> {
        ["node-a", "node-b", "node-c"]
            .iter()
            .map(|n| NodeBuilder::new(n).cpu("4").memory("8Gi").pods(110).build())
            .collect()
    }

    fn webhook_config(url: &str, batch: bool) -> flotilla_scheduler::config::SchedulerConfig {
        let batch = if batch {
            "\n    batch:\n      maxPods: 8\n      maxWait: 20ms"
        } else {
            ""
        };
        let yaml = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
podInitialBackoffSeconds: 1
podMaxBackoffSeconds: 4
profiles:
- schedulerName: default-scheduler
  placementWebhook:
    url: {url}
    timeout: 2s{batch}
"
        );
        flotilla_scheduler::config::parse(&yaml, "webhook-test.yaml")
            .expect("the configuration loads")
    }

    /// Pods bound to each node, by node name.
    fn per_node(
        cluster: &flotilla_coordinator::cluster::EmbeddedCluster,
    ) -> BTreeMap<String, usize> {
        let mut out = BTreeMap::new();
        for p in cluster.pods() {
            if let Some(n) = p.spec.as_ref().and_then(|s| s.node_name.clone()) {
                *out.entry(n).or_default() += 1;
            }
        }
        out
    }

    fn run_config(
        scheduler: flotilla_scheduler::config::SchedulerConfig,
    ) -> flotilla_loadtest::run::RunConfig {
        flotilla_loadtest::run::RunConfig {
            in_process_workers: 1,
            expect_workers: 1,
            progress: false,
            timeout: Duration::from_secs(60),
            settle: Duration::from_millis(500),
            scheduler,
            ..flotilla_loadtest::run::RunConfig::default()
        }
    }

    fn workload(pods: Vec<Pod>) -> flotilla_loadtest::workload::Workload {
        flotilla_loadtest::workload::Workload {
            name: "webhook-e2e".into(),
            nodes: three_nodes(),
            pods,
            ..Default::default()
        }
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn flotilla_places_pods_where_the_webhook_packs_them() {
        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        let scheduler = webhook_config(&format!("http://{addr}/placement"), false);
        // 6 pods of 1 CPU on 3 nodes of 4: spreading gives 2/2/2, packing 4/2/0.
        let mut pods: Vec<Pod> = (0..6)
            .map(|i| pod(&format!("web-{i}"), "1").build())
            .collect();
        pods.insert(3, declined("shy").build());
        let (report, cluster) = flotilla_loadtest::run::run_embedded_with_cluster(
            workload(pods),
            run_config(scheduler),
        )
        .await
        .expect("the run completes");
        println!("{}", report.to_text());
        assert!(!report.timed_out);
        assert_eq!(report.scheduled, 6);
        assert!(report.unschedulable >= 1);
        assert_eq!(report.checks.overcommitted_nodes, 0);
        assert_eq!(
            per_node(&cluster),
            BTreeMap::from([("node-a".to_owned(), 4), ("node-b".to_owned(), 2)]),
            "packed, node-c left empty"
        );
        // The declined pod: pending, with the service's reason.
        let shy = cluster.pod("default", "shy").expect("the pod exists");
        let status = shy.status.as_ref().expect("status");
        assert!(
            shy.spec
                .as_ref()
                .and_then(|s| s.node_name.as_ref())
                .is_none()
        );
        let cond = status
            .conditions
            .iter()
            .flatten()
            .find(|c| c.type_ == "PodScheduled")
            .expect("a PodScheduled condition");
        assert_eq!(cond.status, "False");
        let message = cond.message.as_deref().unwrap_or_default();
        assert!(message.contains(DECLINE_REASON), "{message}");
        // One call per attempt, none batched.
        assert_eq!(stats.batches.load(Ordering::Relaxed), 0);
        assert!(stats.single.load(Ordering::Relaxed) >= 7, "{stats:?}");
        assert!(stats.declined.load(Ordering::Relaxed) >= 1, "{stats:?}");
        assert_eq!(stats.bad_requests.load(Ordering::Relaxed), 0);
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn batched_calls_stay_within_max_pods_and_capacity_holds() {
        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        let scheduler = webhook_config(&format!("http://{addr}/placement/batch"), true);
        // 10 pods of 1 CPU on 3 nodes of 4. Each batch was evaluated on one
        // snapshot, so the service picks the same (fullest feasible) node
        // for the whole batch; Flotilla re-checks each decision in order and
        // places the overflow in-process.
        let pods: Vec<Pod> = (0..10)
            .map(|i| pod(&format!("job-{i:02}"), "1").build())
            .collect();
        let (report, cluster) = flotilla_loadtest::run::run_embedded_with_cluster(
            workload(pods),
            run_config(scheduler),
        )
        .await
        .expect("the run completes");
        println!("{}", report.to_text());
        println!("{stats:?}");
        assert!(!report.timed_out);
        assert_eq!(report.scheduled, 10);
        assert_eq!(report.unschedulable, 0);
        assert_eq!(report.checks.overcommitted_nodes, 0);
        let placed = per_node(&cluster);
        assert!(
            placed.values().all(|&n| n <= 4),
            "never more than fit: {placed:?}"
        );
        assert_eq!(placed.get("node-a"), Some(&4), "packed first: {placed:?}");
        assert_eq!(placed.values().sum::<usize>(), 10);
        let calls = stats.batches.load(Ordering::Relaxed);
        assert!((1..10).contains(&calls), "{stats:?}");
        let largest = stats.largest_batch.load(Ordering::Relaxed);
        assert!((2..=8).contains(&largest), "{stats:?}");
        assert_eq!(
            stats.pods.load(Ordering::Relaxed),
            10,
            "each pod asked once"
        );
        assert_eq!(stats.single.load(Ordering::Relaxed), 0);
        assert_eq!(stats.bad_requests.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn the_printed_profiles_load() {
        for batch in [None, Some(32)] {
            let yaml = format!(
                "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n{}",
                profile_snippet("http://127.0.0.1:9090", batch)
            );
            let cfg = flotilla_scheduler::config::parse(&yaml, "snippet.yaml").expect("loads");
            let w = cfg.profiles[0].webhook.as_ref().expect("a webhook");
            assert_eq!(w.batch.max_pods, batch.unwrap_or(1));
            assert!(w.url.ends_with(if batch.is_some() {
                "/batch"
            } else {
                "/placement"
            }));
        }
    }
}
