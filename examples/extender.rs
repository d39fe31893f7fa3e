//! An upstream kube-scheduler HTTP **extender** (`KubeSchedulerConfiguration`
//! `extenders`), written only against upstream's wire format
//! (`k8s.io/kube-scheduler/extender/v1`, `types.go`): the server part
//! imports nothing from Flotilla, so the very same program serves
//! kube-scheduler and Flotilla unchanged. Its tests show both sides meet.
//!
//! # Policy
//! - **`POST /filter`**: a node labelled `exclude-from-scheduling=true`
//!   fails (`node is labelled exclude-from-scheduling=true`), and so does a
//!   node whose `Ready` condition is not `True`, or that reports no `Ready`
//!   condition at all (`node is not Ready (...)`). Both go to
//!   `FailedAndUnresolvableNodes`: evicting pods cannot fix either, so
//!   preemption does not try. Every other node passes; the reply carries
//!   them the way the request did (`Nodes` whole, or `NodeNames`).
//! - **`POST /prioritize`**: a pod labelled `architecture=arm64` scores 10
//!   on nodes labelled `kubernetes.io/arch=arm64` and 0 elsewhere; any other
//!   pod scores 10 on `kubernetes.io/arch=amd64` nodes and 0 elsewhere
//!   (scores are upstream's 0..=10; the scheduler counts each as
//!   `score × weight × 10` beside its plugins' 0..=100).
//!
//! # Wire format
//! Upstream's Go types carry no JSON tags, so their fields travel under the
//! capitalized Go names, while the Kubernetes objects inside use their usual
//! camelCase JSON:
//! ```json
//! {"Pod": {...}, "Nodes": {"metadata": {}, "items": [{...}, ...]}, "NodeNames": null}
//! ```
//! is answered by `filter` with
//! ```json
//! {"Nodes": {"metadata": {}, "items": [...]}, "NodeNames": null,
//!  "FailedNodes": {}, "FailedAndUnresolvableNodes": {"n3": "node is not Ready (Ready=False)"},
//!  "Error": ""}
//! ```
//! and by `prioritize` with `[{"Host": "n1", "Score": 10}, ...]`. Go's
//! decoder matches field names case-insensitively; this server also takes
//! the all-lower-case spelling (`pod`, `nodes`, `nodenames`). Unknown
//! fields are ignored. A body that cannot be read gets HTTP 400 with
//! `{"Error": "ExtenderArgs: <field>: <problem>"}`, never a panic; bodies
//! are read up to [`MAX_BODY_BYTES`].
//!
//! # `nodeCacheCapable`
//! The policy reads node labels and conditions, so configure the extender
//! with `nodeCacheCapable: false` (the default): the scheduler then sends
//! whole nodes. A `nodeCacheCapable` scheduler sends only `NodeNames`; this
//! extender keeps no node cache of its own, so it cannot judge them: filter
//! passes every name through and prioritize gives each the same score (0),
//! leaving the choice to the scheduler.
//!
//! # Running it
//! `cargo run --example extender -- --listen 127.0.0.1:8888` serves it and
//! prints the `extenders:` entry to put in the scheduler's configuration.
//! Its tests (`cargo test --example extender`) drive the handlers over
//! loopback HTTP, check that Flotilla's own encoding is what it reads, run
//! Flotilla end to end with it, and run `flotilla simulate`'s engine with it.

use std::collections::BTreeMap;
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
use k8s_openapi::api::core::v1::{Node, Pod};
use k8s_openapi::apimachinery::pkg::apis::meta::v1::ListMeta;
use serde::{Deserialize, Serialize};

use support::ServerArgs;

/// Node label that takes a node out of scheduling when `"true"`.
pub const LABEL_EXCLUDE: &str = "exclude-from-scheduling";
/// Pod label naming the architecture the pod wants (`arm64`; anything else,
/// or none, means `amd64`).
pub const LABEL_POD_ARCH: &str = "architecture";
/// Well-known node label with the node's CPU architecture.
pub const LABEL_NODE_ARCH: &str = "kubernetes.io/arch";
/// Highest score of upstream's prioritize verb (`MaxExtenderPriority`).
pub const MAX_SCORE: i64 = 10;
/// Lowest score of upstream's prioritize verb (`MinExtenderPriority`).
pub const MIN_SCORE: i64 = 0;
/// Largest request body read (bytes): whole nodes of a large cluster run to
/// megabytes (axum's default limit is 2 MiB).
pub const MAX_BODY_BYTES: usize = 64 << 20;
/// Where `main` listens unless `--listen` says otherwise.
pub const DEFAULT_LISTEN: &str = "127.0.0.1:8888";

/// Upstream's `v1.NodeList` as extenders see it: `{"metadata": {}, "items": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct NodeList {
    /// List metadata (kube-scheduler sends it empty).
    #[serde(default)]
    pub metadata: ListMeta,
    /// The nodes.
    #[serde(default)]
    pub items: Vec<Node>,
}

/// Upstream's `ExtenderArgs`, the filter and prioritize request.
#[derive(Debug, Clone, PartialEq, Serialize, Deserialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod", alias = "pod")]
    pub pod: Pod,
    /// Candidate nodes, whole (`nodeCacheCapable: false`).
    #[serde(rename = "Nodes", alias = "nodes", default)]
    pub nodes: Option<NodeList>,
    /// Candidate node names (`nodeCacheCapable: true`).
    #[serde(rename = "NodeNames", alias = "nodenames", default)]
    pub node_names: Option<Vec<String>>,
}

/// Upstream's `ExtenderFilterResult`, the filter reply. Serialized as Go's
/// `json.Marshal` writes it: every field, `null` for the absent list.
#[derive(Debug, Clone, Default, PartialEq, Serialize, Deserialize)]
pub struct ExtenderFilterResult {
    /// Nodes that passed, when the request sent whole nodes.
    #[serde(rename = "Nodes", default)]
    pub nodes: Option<NodeList>,
    /// Names of the nodes that passed, when the request sent names.
    #[serde(rename = "NodeNames", default)]
    pub node_names: Option<Vec<String>>,
    /// Node → why it failed, where preemption might help (unused by this
    /// policy).
    #[serde(rename = "FailedNodes", default)]
    pub failed_nodes: BTreeMap<String, String>,
    /// Node → why it failed, where preemption cannot help.
    #[serde(rename = "FailedAndUnresolvableNodes", default)]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// Non-empty: the call failed.
    #[serde(rename = "Error", default)]
    pub error: String,
}

/// Upstream's `HostPriority`: one node's score; prioritize answers a list.
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct HostPriority {
    /// Node name.
    #[serde(rename = "Host")]
    pub host: String,
    /// `MIN_SCORE..=MAX_SCORE`.
    #[serde(rename = "Score")]
    pub score: i64,
}

/// The body of an HTTP 400 reply: `{"Error": "..."}` (upstream's field name,
/// so a Go client decoding an `ExtenderFilterResult` reads it as the error).
#[derive(Debug, Clone, PartialEq, Eq, Serialize, Deserialize)]
pub struct ErrorReply {
    /// What is wrong with the request.
    #[serde(rename = "Error")]
    pub error: String,
}

/// A request this extender cannot read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BadRequest {
    /// The body is not JSON of `ExtenderArgs`' shape; `field` is the path
    /// to the offending value (`(body)` for the document itself).
    #[error("ExtenderArgs: {field}: {problem}")]
    Decode {
        /// Where, e.g. `Nodes.items[0].metadata.labels`.
        field: String,
        /// What is wrong.
        problem: String,
    },
    /// A node sent whole has no `metadata.name`, so no verdict could name it.
    #[error("ExtenderArgs: Nodes.items[{index}].metadata.name: required")]
    UnnamedNode {
        /// Its index in `Nodes.items`.
        index: usize,
    },
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

/// Reads a filter or prioritize request body.
///
/// # Errors
/// [`BadRequest`] naming the field at fault.
pub fn decode_args(body: &[u8]) -> Result<ExtenderArgs, BadRequest> {
    let body_err = |problem: String| BadRequest::Decode {
        field: "(body)".into(),
        problem,
    };
    let v: serde_json::Value = serde_json::from_slice(body).map_err(|e| body_err(e.to_string()))?;
    if !v.is_object() {
        return Err(body_err(format!(
            "expected a JSON object, got {}",
            kind(&v)
        )));
    }
    let args: ExtenderArgs = serde_path_to_error::deserialize(v).map_err(|e| {
        let path = e.path().to_string();
        BadRequest::Decode {
            field: if path == "." { "(body)".into() } else { path },
            problem: e.into_inner().to_string(),
        }
    })?;
    if let Some(list) = &args.nodes
        && let Some(index) = list
            .items
            .iter()
            .position(|n| n.metadata.name.as_deref().is_none_or(str::is_empty))
    {
        return Err(BadRequest::UnnamedNode { index });
    }
    Ok(args)
}

fn kind(v: &serde_json::Value) -> &'static str {
    match v {
        serde_json::Value::Null => "null",
        serde_json::Value::Bool(_) => "a boolean",
        serde_json::Value::Number(_) => "a number",
        serde_json::Value::String(_) => "a string",
        serde_json::Value::Array(_) => "an array",
        serde_json::Value::Object(_) => "an object",
    }
}

/// Why `node` must not take pods, or `None` when it may.
#[must_use]
pub fn rejection(node: &Node) -> Option<String> {
    let labels = node.metadata.labels.as_ref();
    if labels
        .and_then(|l| l.get(LABEL_EXCLUDE))
        .is_some_and(|v| v == "true")
    {
        return Some(format!("node is labelled {LABEL_EXCLUDE}=true"));
    }
    let ready = node
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "Ready"));
    match ready {
        None => Some("node is not Ready (it reports no Ready condition)".into()),
        Some(c) if c.status == "True" => None,
        Some(c) => Some(format!("node is not Ready (Ready={})", c.status)),
    }
}

fn name_of(node: &Node) -> String {
    node.metadata.name.clone().unwrap_or_default()
}

/// The filter verb: whole nodes are judged by [`rejection`]; names alone
/// pass through (see the module docs on `nodeCacheCapable`).
#[must_use]
pub fn filter(args: &ExtenderArgs) -> ExtenderFilterResult {
    let mut result = ExtenderFilterResult::default();
    match &args.nodes {
        Some(list) => {
            let mut passed = Vec::with_capacity(list.items.len());
            for node in &list.items {
                match rejection(node) {
                    None => passed.push(node.clone()),
                    Some(why) => {
                        result
                            .failed_and_unresolvable_nodes
                            .insert(name_of(node), why);
                    }
                }
            }
            result.nodes = Some(NodeList {
                metadata: ListMeta::default(),
                items: passed,
            });
        }
        None => result.node_names = Some(args.node_names.clone().unwrap_or_default()),
    }
    result
}

/// The architecture `pod` wants: `arm64` when labelled so, else `amd64`.
#[must_use]
pub fn wanted_arch(pod: &Pod) -> &'static str {
    let arm = pod
        .metadata
        .labels
        .as_ref()
        .and_then(|l| l.get(LABEL_POD_ARCH))
        .is_some_and(|v| v == "arm64");
    if arm { "arm64" } else { "amd64" }
}

/// The prioritize verb: [`MAX_SCORE`] for nodes of the pod's architecture,
/// [`MIN_SCORE`] for the others; every name scores [`MIN_SCORE`] when only
/// names were sent.
#[must_use]
pub fn prioritize(args: &ExtenderArgs) -> Vec<HostPriority> {
    let want = wanted_arch(&args.pod);
    match &args.nodes {
        Some(list) => list
            .items
            .iter()
            .map(|n| {
                let arch = n
                    .metadata
                    .labels
                    .as_ref()
                    .and_then(|l| l.get(LABEL_NODE_ARCH));
                HostPriority {
                    host: name_of(n),
                    score: if arch.is_some_and(|a| a == want) {
                        MAX_SCORE
                    } else {
                        MIN_SCORE
                    },
                }
            })
            .collect(),
        None => args
            .node_names
            .iter()
            .flatten()
            .map(|n| HostPriority {
                host: n.clone(),
                score: MIN_SCORE,
            })
            .collect(),
    }
}

/// Requests served, by verb (readable while the server runs).
#[derive(Debug, Default)]
pub struct Stats {
    /// `POST /filter` requests, read or not.
    pub filter: AtomicUsize,
    /// `POST /prioritize` requests, read or not.
    pub prioritize: AtomicUsize,
    /// Requests answered with 400.
    pub bad_requests: AtomicUsize,
}

impl Stats {
    /// Every request, both verbs.
    #[must_use]
    pub fn total(&self) -> usize {
        self.filter.load(Ordering::Relaxed) + self.prioritize.load(Ordering::Relaxed)
    }
}

async fn filter_handler(State(stats): State<Arc<Stats>>, body: Bytes) -> Response {
    stats.filter.fetch_add(1, Ordering::Relaxed);
    match decode_args(&body) {
        Ok(args) => axum::Json(filter(&args)).into_response(),
        Err(e) => {
            stats.bad_requests.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

async fn prioritize_handler(State(stats): State<Arc<Stats>>, body: Bytes) -> Response {
    stats.prioritize.fetch_add(1, Ordering::Relaxed);
    match decode_args(&body) {
        Ok(args) => axum::Json(prioritize(&args)).into_response(),
        Err(e) => {
            stats.bad_requests.fetch_add(1, Ordering::Relaxed);
            e.into_response()
        }
    }
}

/// The extender: `POST /filter` and `POST /prioritize`.
pub fn app() -> Router {
    app_with_stats(Arc::default())
}

/// [`app`], counting the requests it serves in `stats`.
pub fn app_with_stats(stats: Arc<Stats>) -> Router {
    Router::new()
        .route("/filter", post(filter_handler))
        .route("/prioritize", post(prioritize_handler))
        .layer(DefaultBodyLimit::max(MAX_BODY_BYTES))
        .with_state(stats)
}

/// The `extenders:` entry that points a scheduler at `url_prefix`.
#[must_use]
pub fn config_snippet(url_prefix: &str) -> String {
    format!(
        "extenders:\n\
         - urlPrefix: {url_prefix}\n\
         \x20 filterVerb: filter\n\
         \x20 prioritizeVerb: prioritize\n\
         \x20 weight: 5\n\
         \x20 nodeCacheCapable: false  # the policy reads node labels and conditions\n"
    )
}

#[tokio::main]
async fn main() -> anyhow::Result<()> {
    let listen = ServerArgs::parse().listen_or(DEFAULT_LISTEN);
    let listener = tokio::net::TcpListener::bind(&listen)
        .await
        .map_err(|e| anyhow::anyhow!("cannot listen on {listen}: {e}"))?;
    let addr = listener.local_addr()?;
    println!("extender listening on http://{addr} (POST /filter, POST /prioritize)");
    println!("add to the KubeSchedulerConfiguration:\n");
    print!("{}", config_snippet(&format!("http://{addr}")));
    axum::serve(listener, app()).await?;
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::support::testing::{json_of, post, serve};
    use super::*;

    use std::net::SocketAddr;
    use std::time::Duration;

    use flotilla_shared::testing::{NodeBuilder, PodBuilder};
    use k8s_openapi::api::core::v1::NodeCondition;
    use serde_json::json;

    fn node(name: &str, arch: &str) -> NodeBuilder {
        NodeBuilder::new(name)
            .cpu("4")
            .memory("8Gi")
            .pods(110)
            .label(LABEL_NODE_ARCH, arch)
    }

    /// `node` with its Ready condition set to `status`, or removed (`None`).
    fn with_ready(mut n: Node, status: Option<&str>) -> Node {
        let conds = n
            .status
            .get_or_insert_with(Default::default)
            .conditions
            .get_or_insert_with(Vec::new);
        conds.retain(|c| c.type_ != "Ready");
        if let Some(s) = status {
            conds.push(NodeCondition {
                type_: "Ready".into(),
                status: s.into(),
                reason: Some("KubeletNotReady".into()),
                ..Default::default()
            });
        }
        n
    }

    fn pod(name: &str, arch: Option<&str>) -> Pod {
        let mut b = PodBuilder::new(name).cpu("100m").memory("100Mi");
        if let Some(a) = arch {
            b = b.label(LABEL_POD_ARCH, a);
        }
        b.build()
    }

    /// The request exactly as kube-scheduler's `json.Marshal` writes it.
    fn upstream_request(pod: &Pod, nodes: &[Node]) -> Vec<u8> {
        serde_json::to_vec(&json!({
            "Pod": pod,
            "Nodes": {"metadata": {}, "items": nodes},
            "NodeNames": null,
        }))
        .expect("json")
    }

    fn names(v: &serde_json::Value) -> Vec<String> {
        v["Nodes"]["items"]
            .as_array()
            .expect("Nodes.items")
            .iter()
            .map(|n| n["metadata"]["name"].as_str().expect("name").to_owned())
            .collect()
    }

    #[test]
    fn filter_rejects_excluded_and_not_ready_nodes_as_unresolvable() {
        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        let nodes = [
            node("ok", "amd64").build(),
            node("excluded", "amd64")
                .label(LABEL_EXCLUDE, "true")
                .build(),
            node("excluded-false", "amd64")
                .label(LABEL_EXCLUDE, "false")
                .build(),
            with_ready(node("not-ready", "arm64").build(), Some("False")),
            with_ready(node("unknown", "arm64").build(), Some("Unknown")),
            with_ready(node("no-condition", "arm64").build(), None),
        ];
        let r = post(addr, "/filter", upstream_request(&pod("web", None), &nodes));
        assert_eq!(r.status, 200);
        let v = json_of(&r);
        // Go's json.Marshal of the result: every field present.
        for field in [
            "Nodes",
            "NodeNames",
            "FailedNodes",
            "FailedAndUnresolvableNodes",
            "Error",
        ] {
            assert!(v.get(field).is_some(), "{field} missing in {v}");
        }
        assert_eq!(names(&v), ["ok", "excluded-false"], "whole nodes back");
        assert_eq!(v["Nodes"]["items"][0]["status"]["allocatable"]["cpu"], "4");
        assert!(v["NodeNames"].is_null());
        assert_eq!(v["FailedNodes"], json!({}));
        assert_eq!(
            v["FailedAndUnresolvableNodes"],
            json!({
                "excluded": "node is labelled exclude-from-scheduling=true",
                "not-ready": "node is not Ready (Ready=False)",
                "unknown": "node is not Ready (Ready=Unknown)",
                "no-condition": "node is not Ready (it reports no Ready condition)",
            })
        );
        assert_eq!(v["Error"], "");
        assert_eq!(stats.filter.load(Ordering::Relaxed), 1);
    }

    #[test]
    fn filter_passes_node_names_through_when_it_cannot_see_the_nodes() {
        let addr = serve(app());
        let body = serde_json::to_vec(&json!({
            "Pod": pod("web", None),
            "NodeNames": ["a", "b", "excluded"],
        }))
        .expect("json");
        let r = post(addr, "/filter", body);
        assert_eq!(r.status, 200);
        let v = json_of(&r);
        assert_eq!(v["NodeNames"], json!(["a", "b", "excluded"]));
        assert!(v["Nodes"].is_null(), "names in, names out: {v}");
        assert_eq!(v["FailedAndUnresolvableNodes"], json!({}));
        // Go's lower-case spelling is read too; no node list at all is an
        // empty list of names.
        let r = post(
            addr,
            "/filter",
            serde_json::to_vec(&json!({"pod": {}, "nodenames": ["x"]})).expect("json"),
        );
        assert_eq!(json_of(&r)["NodeNames"], json!(["x"]));
        let r = post(addr, "/filter", br#"{"Pod":{}}"#.to_vec());
        assert_eq!(json_of(&r)["NodeNames"], json!([]));
    }

    #[test]
    fn prioritize_scores_nodes_of_the_pods_architecture() {
        let addr = serve(app());
        let nodes = [
            node("amd", "amd64").build(),
            node("arm", "arm64").build(),
            NodeBuilder::new("unlabelled").build(),
        ];
        let scores = |p: &Pod| -> serde_json::Value {
            let r = post(addr, "/prioritize", upstream_request(p, &nodes));
            assert_eq!(r.status, 200);
            json_of(&r)
        };
        assert_eq!(
            scores(&pod("arm-pod", Some("arm64"))),
            json!([
                {"Host": "amd", "Score": 0},
                {"Host": "arm", "Score": 10},
                {"Host": "unlabelled", "Score": 0},
            ])
        );
        for p in [pod("plain", None), pod("other", Some("riscv64"))] {
            assert_eq!(
                scores(&p),
                json!([
                    {"Host": "amd", "Score": 10},
                    {"Host": "arm", "Score": 0},
                    {"Host": "unlabelled", "Score": 0},
                ]),
                "{:?}",
                p.metadata.name
            );
        }
        // Names only: no labels to read, every node the same.
        let r = post(
            addr,
            "/prioritize",
            serde_json::to_vec(
                &json!({"Pod": pod("arm-pod", Some("arm64")), "NodeNames": ["a", "b"]}),
            )
            .expect("json"),
        );
        assert_eq!(
            json_of(&r),
            json!([{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}])
        );
    }

    #[test]
    fn malformed_bodies_get_400_with_an_error_naming_the_problem() {
        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        let cases: &[(&[u8], &str)] = &[
            (b"<html>", "ExtenderArgs: (body): expected value"),
            (
                b"[]",
                "ExtenderArgs: (body): expected a JSON object, got an array",
            ),
            (
                b"null",
                "ExtenderArgs: (body): expected a JSON object, got null",
            ),
            (
                br#"{"Nodes":null}"#,
                "ExtenderArgs: (body): missing field `Pod`",
            ),
            (
                br#"{"Pod":{},"Nodes":"n1"}"#,
                "ExtenderArgs: Nodes: invalid type: string",
            ),
            (
                br#"{"Pod":{},"NodeNames":"n1"}"#,
                "ExtenderArgs: NodeNames: invalid type: string",
            ),
            (
                br#"{"Pod":{},"Nodes":{"items":[{"metadata":{"name":"n1","labels":{"a":1}}}]}}"#,
                "ExtenderArgs: Nodes.items[0].metadata.labels.a: invalid type: integer",
            ),
            (
                br#"{"Pod":{},"Nodes":{"items":[{"metadata":{}}]}}"#,
                "ExtenderArgs: Nodes.items[0].metadata.name: required",
            ),
            (
                br#"{"Pod":{}} trailing"#,
                "ExtenderArgs: (body): trailing characters",
            ),
            (b"", "ExtenderArgs: (body): EOF"),
        ];
        for verb in ["/filter", "/prioritize"] {
            for (body, want) in cases {
                let r = post(addr, verb, body.to_vec());
                assert_eq!(r.status, 400, "{verb} {}", String::from_utf8_lossy(body));
                let v = json_of(&r);
                let err = v["Error"].as_str().expect("an Error string");
                assert!(err.starts_with(want), "{verb}: {err:?} / want {want:?}");
            }
        }
        let n = cases.len() * 2;
        assert_eq!(stats.bad_requests.load(Ordering::Relaxed), n);
        // Still serving.
        let r = post(
            addr,
            "/filter",
            upstream_request(&pod("web", None), &[node("ok", "amd64").build()]),
        );
        assert_eq!(
            (r.status, names(&json_of(&r))),
            (200, vec!["ok".to_owned()])
        );
        assert_eq!(stats.total(), n + 1);
    }

    #[test]
    fn flotillas_own_encoding_is_what_the_extender_reads_and_its_replies_decode() {
        use flotilla_shared::extender::wire;
        let addr = serve(app());
        let nodes = vec![
            node("amd", "amd64").build(),
            node("arm", "arm64").build(),
            with_ready(node("down", "arm64").build(), Some("False")),
            node("out", "amd64").label(LABEL_EXCLUDE, "true").build(),
        ];
        let args = wire::ExtenderArgs {
            pod: pod("arm-pod", Some("arm64")),
            nodes: Some(wire::NodeList {
                metadata: Default::default(),
                items: nodes,
            }),
            node_names: None,
        };
        let body = serde_json::to_vec(&args).expect("json");
        // What the extender reads is what Flotilla meant.
        let read = decode_args(&body).expect("the extender reads Flotilla's request");
        assert_eq!(read.pod, args.pod);
        assert_eq!(
            read.nodes.as_ref().map(|l| l.items.clone()),
            args.nodes.as_ref().map(|l| l.items.clone())
        );
        assert_eq!(read.node_names, None);

        let r = post(addr, "/filter", body.clone());
        assert_eq!(r.status, 200);
        let f = wire::ExtenderFilterResult::decode(&r.body).expect("Flotilla reads the reply");
        assert_eq!(f.passed(), ["amd", "arm"]);
        assert!(f.error.is_empty() && f.failed_nodes.is_empty());
        assert_eq!(
            f.failed_and_unresolvable_nodes,
            BTreeMap::from([
                (
                    "down".to_owned(),
                    "node is not Ready (Ready=False)".to_owned()
                ),
                (
                    "out".to_owned(),
                    "node is labelled exclude-from-scheduling=true".to_owned()
                ),
            ])
        );

        let r = post(addr, "/prioritize", body);
        let p = wire::HostPriority::decode_list(&r.body).expect("Flotilla reads the scores");
        let got: Vec<(String, i64, bool)> = p
            .iter()
            .map(|h| (h.host.clone(), h.score, h.in_range()))
            .collect();
        assert_eq!(
            got,
            [
                ("amd".to_owned(), 0, true),
                ("arm".to_owned(), 10, true),
                ("down".to_owned(), 10, true),
                ("out".to_owned(), 0, true),
            ]
        );

        // By name (nodeCacheCapable), both ways.
        let by_name = wire::ExtenderArgs {
            pod: pod("p", None),
            nodes: None,
            node_names: Some(vec!["a".into(), "b".into()]),
        };
        let r = post(addr, "/filter", serde_json::to_vec(&by_name).expect("json"));
        let f = wire::ExtenderFilterResult::decode(&r.body).expect("decodes");
        assert_eq!(f.passed(), ["a", "b"]);
        // And a 400's body reads as the call's error.
        let r = post(addr, "/filter", b"{".to_vec());
        assert_eq!(r.status, 400);
        let f = wire::ExtenderFilterResult::decode(&r.body).expect("decodes");
        assert!(
            f.error.starts_with("ExtenderArgs: (body): EOF"),
            "{}",
            f.error
        );
    }

    fn extender_config(addr: SocketAddr) -> flotilla_scheduler::config::SchedulerConfig {
        let yaml = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1
kind: KubeSchedulerConfiguration
extenders:
- urlPrefix: http://{addr}
  filterVerb: filter
  prioritizeVerb: prioritize
  weight: 5
"
        );
        flotilla_scheduler::config::parse(&yaml, "extender-test.yaml")
            .expect("the configuration loads")
    }

    /// 2 amd64 and 2 arm64 nodes that may take pods, an excluded amd64 node
    /// and a NotReady arm64 one.
    fn cluster_nodes() -> Vec<Node> {
        vec![
            node("amd-1", "amd64").build(),
            node("amd-2", "amd64").build(),
            node("arm-1", "arm64").build(),
            node("arm-2", "arm64").build(),
            node("amd-excluded", "amd64")
                .label(LABEL_EXCLUDE, "true")
                .build(),
            with_ready(node("arm-not-ready", "arm64").build(), Some("False")),
        ]
    }

    fn arch_of(nodes: &[Node], name: &str) -> String {
        nodes
            .iter()
            .find(|n| n.metadata.name.as_deref() == Some(name))
            .and_then(|n| n.metadata.labels.as_ref()?.get(LABEL_NODE_ARCH).cloned())
            .unwrap_or_else(|| panic!("no node {name}"))
    }

    #[tokio::test(flavor = "multi_thread", worker_threads = 2)]
    async fn flotilla_schedules_through_the_extender_end_to_end() {
        use flotilla_loadtest::run::{RunConfig, run_embedded_with_cluster};
        use flotilla_loadtest::workload::Workload;

        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        let nodes = cluster_nodes();
        let mut pods = Vec::new();
        for i in 0..6 {
            pods.push(pod(&format!("arm-{i}"), Some("arm64")));
            pods.push(pod(&format!("plain-{i}"), None));
        }
        let workload = Workload {
            name: "extender-e2e".into(),
            nodes: nodes.clone(),
            pods,
            ..Workload::default()
        };
        let cfg = RunConfig {
            in_process_workers: 2,
            expect_workers: 2,
            progress: false,
            timeout: Duration::from_secs(60),
            scheduler: extender_config(addr),
            ..RunConfig::default()
        };
        let (report, cluster) = run_embedded_with_cluster(workload, cfg)
            .await
            .expect("the run completes");
        println!("{}", report.to_text());
        assert!(!report.timed_out);
        assert_eq!(report.scheduled, 12);
        assert_eq!(report.unschedulable, 0);
        assert_eq!(report.checks.overcommitted_nodes, 0);
        for i in 0..6 {
            for (name, want) in [
                (format!("arm-{i}"), "arm64"),
                (format!("plain-{i}"), "amd64"),
            ] {
                let p = cluster.pod("default", &name).expect("the pod exists");
                let on = p
                    .spec
                    .as_ref()
                    .and_then(|s| s.node_name.clone())
                    .unwrap_or_else(|| panic!("{name} is not bound"));
                assert!(
                    on != "amd-excluded" && on != "arm-not-ready",
                    "{name} on {on}, which the extender filters out"
                );
                assert_eq!(arch_of(&nodes, &on), want, "{name} on {on}");
            }
        }
        // Every pod went through both verbs at least once.
        assert!(
            stats.filter.load(Ordering::Relaxed) >= 12,
            "filter calls: {stats:?}"
        );
        assert!(
            stats.prioritize.load(Ordering::Relaxed) >= 12,
            "prioritize calls: {stats:?}"
        );
        assert_eq!(stats.bad_requests.load(Ordering::Relaxed), 0);
    }

    #[test]
    fn simulate_shows_the_extenders_verdicts_and_scores() {
        use flotilla_loadtest::workload::ClusterObjects;
        use flotilla_scheduler::simulate::{Options, Outcome, simulate_with};

        let stats = Arc::new(Stats::default());
        let addr = serve(app_with_stats(stats.clone()));
        let cfg = extender_config(addr);
        let objects = ClusterObjects {
            name: "extender-sim".into(),
            nodes: cluster_nodes(),
            pods: vec![pod("arm-pod", Some("arm64")), pod("plain-pod", None)],
            ..ClusterObjects::default()
        };
        let sim = simulate_with(
            &objects,
            &cfg.profiles,
            &flotilla_scheduler::Registry::in_tree(),
            &Options {
                extenders: &cfg.extenders,
                seed: None,
            },
        )
        .expect("the simulation runs");
        assert_eq!(sim.results.len(), 2, "{sim:?}");
        let url = format!("http://{addr}");
        for (result, arch) in sim.results.iter().zip(["arm64", "amd64"]) {
            let placed = match &result.outcome {
                Outcome::Scheduled { node } => node.clone(),
                other => panic!("{}: {other:?}", result.pod),
            };
            assert_eq!(arch_of(&objects.nodes, &placed), arch, "{}", result.pod);
            for (name, why) in [
                (
                    "amd-excluded",
                    "node is labelled exclude-from-scheduling=true",
                ),
                ("arm-not-ready", "node is not Ready (Ready=False)"),
            ] {
                let n = &result.nodes[name];
                assert_eq!(n.filter.plugin, "Extender", "{name}");
                assert_eq!(
                    n.filter.code,
                    flotilla_shared::framework::Code::UnschedulableAndUnresolvable
                );
                assert_eq!(n.filter.message(), why);
                assert!(n.extender_scores.is_empty(), "{name} was not scored");
            }
            for name in ["amd-1", "amd-2", "arm-1", "arm-2"] {
                let n = &result.nodes[name];
                assert!(n.filter.is_success(), "{name}: {:?}", n.filter);
                let want = if arch_of(&objects.nodes, name) == arch {
                    MAX_SCORE * 5 * 10
                } else {
                    0
                };
                assert_eq!(n.extender_scores, [(url.clone(), want)], "{name}");
            }
        }
        assert_eq!(stats.filter.load(Ordering::Relaxed), 2);
        assert_eq!(stats.prioritize.load(Ordering::Relaxed), 2);
    }

    #[test]
    fn the_printed_configuration_loads() {
        // The snippet is a configuration Flotilla loads.
        let yaml = format!(
            "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\n{}",
            config_snippet("http://127.0.0.1:8888")
        );
        let cfg = flotilla_scheduler::config::parse(&yaml, "snippet.yaml").expect("loads");
        let e = &cfg.extenders[0];
        assert_eq!(
            (
                e.url_prefix.as_str(),
                e.filter_verb.as_str(),
                e.prioritize_verb.as_str(),
                e.weight,
                e.node_cache_capable
            ),
            ("http://127.0.0.1:8888", "filter", "prioritize", 5, false)
        );
    }
}
