//! The scheduler extender wire format, exactly as kube-scheduler speaks it
//! (`k8s.io/kube-scheduler/extender/v1`, `types.go`).
//!
//! Upstream's Go types carry **no JSON tags**, so their fields travel under
//! the Go field names, capitalized (`Pod`, `Nodes`, `NodeNames`,
//! `FailedNodes`, `FailedAndUnresolvableNodes`, `Error`, `Host`, `Score`,
//! ...), while the Kubernetes objects inside (`Pod`, `NodeList`) use their
//! usual camelCase JSON. Go's decoder matches field names
//! case-insensitively, so extenders written against it may answer `error`
//! or `nodenames`: this module **encodes** the exact upstream names and
//! **decodes** any case. A reply that is not what the verb expects is a
//! [`WireError`] naming the message and field, never a panic.
//!
//! Each verb is an HTTP `POST` of one JSON body to `urlPrefix + "/" + verb`:
//!
//! | verb | request | reply |
//! | --- | --- | --- |
//! | filter | [`ExtenderArgs`] | [`ExtenderFilterResult`] |
//! | prioritize | [`ExtenderArgs`] | `[HostPriority]` ([`HostPriority`]) |
//! | bind | [`ExtenderBindingArgs`] | [`ExtenderBindingResult`] |
//! | preempt | [`ExtenderPreemptionArgs`] | [`ExtenderPreemptionResult`] |

use std::collections::BTreeMap;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Node, Pod};
use serde::Serialize;
use serde_json::{Map, Value};

/// Lowest score a prioritize verb may give (upstream `MinExtenderPriority`).
pub const MIN_EXTENDER_PRIORITY: i64 = 0;
/// Highest score a prioritize verb may give (upstream `MaxExtenderPriority`).
pub const MAX_EXTENDER_PRIORITY: i64 = 10;
/// Per-call timeout when `httpTimeout` is unset (upstream
/// `DefaultExtenderTimeout`).
pub const DEFAULT_EXTENDER_TIMEOUT: Duration = Duration::from_secs(5);

/// An extender's score (0..=10) as it counts beside plugin scores (0..=100):
/// `score × weight × (MaxNodeScore / MaxExtenderPriority)`, as upstream's
/// `prioritizeNodes` adds it.
#[must_use]
pub fn scaled_priority(score: i64, weight: i64) -> i64 {
    score
        .saturating_mul(weight)
        .saturating_mul(crate::framework::MAX_NODE_SCORE / MAX_EXTENDER_PRIORITY)
}

/// A reply (or request, on the extender's side) that cannot be read.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("{message_type}: {field}: {problem}")]
pub struct WireError {
    /// The upstream type expected, e.g. `ExtenderFilterResult`.
    pub message_type: &'static str,
    /// The field (upstream name), or `(body)` for the document itself.
    pub field: String,
    /// What is wrong.
    pub problem: String,
}

fn wire_err(message_type: &'static str, field: &str, problem: impl ToString) -> WireError {
    WireError {
        message_type,
        field: field.to_owned(),
        problem: problem.to_string(),
    }
}

/// A JSON object whose keys are matched case-insensitively, as Go's
/// `encoding/json` matches struct fields.
struct Fields<'a> {
    message_type: &'static str,
    map: &'a Map<String, Value>,
}

impl<'a> Fields<'a> {
    fn of(message_type: &'static str, v: &'a Value) -> Result<Self, WireError> {
        match v {
            Value::Object(map) => Ok(Fields { message_type, map }),
            other => Err(wire_err(
                message_type,
                "(body)",
                format!("expected a JSON object, got {}", kind(other)),
            )),
        }
    }

    /// The field, `None` when absent or `null` (Go leaves the zero value).
    fn get(&self, name: &str) -> Option<&'a Value> {
        self.map
            .iter()
            .find(|(k, _)| k.eq_ignore_ascii_case(name))
            .map(|(_, v)| v)
            .filter(|v| !v.is_null())
    }

    fn decode<T: serde::de::DeserializeOwned>(&self, name: &str) -> Result<Option<T>, WireError> {
        self.get(name)
            .map(|v| T::deserialize(v).map_err(|e| wire_err(self.message_type, name, e)))
            .transpose()
    }

    fn string(&self, name: &str) -> Result<String, WireError> {
        Ok(self.decode::<String>(name)?.unwrap_or_default())
    }
}

fn kind(v: &Value) -> &'static str {
    match v {
        Value::Null => "null",
        Value::Bool(_) => "a boolean",
        Value::Number(_) => "a number",
        Value::String(_) => "a string",
        Value::Array(_) => "an array",
        Value::Object(_) => "an object",
    }
}

fn parse_body(message_type: &'static str, body: &[u8]) -> Result<Value, WireError> {
    serde_json::from_slice(body).map_err(|e| wire_err(message_type, "(body)", e))
}

/// `v1.NodeList` as extenders receive it: `{"metadata": {}, "items": [...]}`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct NodeList {
    /// List metadata (empty).
    pub metadata: BTreeMap<String, Value>,
    /// The nodes.
    pub items: Vec<Node>,
}

impl NodeList {
    fn decode(v: &Value, message_type: &'static str, field: &str) -> Result<Self, WireError> {
        let f = Fields::of(message_type, v)?;
        let items = f
            .decode::<Vec<Node>>("items")
            .map_err(|e| wire_err(message_type, &format!("{field}.items"), e.problem))?
            .unwrap_or_default();
        Ok(NodeList {
            metadata: BTreeMap::new(),
            items,
        })
    }
}

/// The filter and prioritize request: the pod, and the candidate nodes,
/// whole (`Nodes`) or by name only (`NodeNames`, for `nodeCacheCapable`
/// extenders).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtenderArgs {
    /// The pod being scheduled.
    #[serde(rename = "Pod")]
    pub pod: Pod,
    /// Candidate nodes, when the extender is not `nodeCacheCapable`.
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeList>,
    /// Candidate node names, when it is.
    #[serde(rename = "NodeNames", skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
}

impl ExtenderArgs {
    /// Reads a request body (an extender's side), any key case.
    ///
    /// # Errors
    /// Not JSON, not an object, or a field of the wrong shape.
    pub fn decode(body: &[u8]) -> Result<Self, WireError> {
        const T: &str = "ExtenderArgs";
        let v = parse_body(T, body)?;
        let f = Fields::of(T, &v)?;
        let pod = f
            .decode::<Pod>("Pod")?
            .ok_or_else(|| wire_err(T, "Pod", "required"))?;
        let nodes = f
            .get("Nodes")
            .map(|n| NodeList::decode(n, T, "Nodes"))
            .transpose()?;
        Ok(ExtenderArgs {
            pod,
            nodes,
            node_names: f.decode("NodeNames")?,
        })
    }
}

/// The filter reply.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct ExtenderFilterResult {
    /// Nodes that passed (when the request sent whole nodes).
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none")]
    pub nodes: Option<NodeList>,
    /// Names of nodes that passed (when the request sent names).
    #[serde(rename = "NodeNames", skip_serializing_if = "Option::is_none")]
    pub node_names: Option<Vec<String>>,
    /// Node → why it failed (preemption may help).
    #[serde(rename = "FailedNodes")]
    pub failed_nodes: BTreeMap<String, String>,
    /// Node → why it failed where preemption cannot help (wins over
    /// `FailedNodes` for a node in both).
    #[serde(rename = "FailedAndUnresolvableNodes")]
    pub failed_and_unresolvable_nodes: BTreeMap<String, String>,
    /// Non-empty: the call failed.
    #[serde(rename = "Error")]
    pub error: String,
}

impl ExtenderFilterResult {
    /// Reads a filter reply, any key case.
    ///
    /// # Errors
    /// Not JSON, not an object, or a field of the wrong shape.
    pub fn decode(body: &[u8]) -> Result<Self, WireError> {
        const T: &str = "ExtenderFilterResult";
        let v = parse_body(T, body)?;
        let f = Fields::of(T, &v)?;
        Ok(ExtenderFilterResult {
            nodes: f
                .get("Nodes")
                .map(|n| NodeList::decode(n, T, "Nodes"))
                .transpose()?,
            node_names: f.decode("NodeNames")?,
            failed_nodes: f.decode("FailedNodes")?.unwrap_or_default(),
            failed_and_unresolvable_nodes: f
                .decode("FailedAndUnresolvableNodes")?
                .unwrap_or_default(),
            error: f.string("Error")?,
        })
    }

    /// Names of the nodes that passed, from `NodeNames` or `Nodes`.
    #[must_use]
    pub fn passed(&self) -> Vec<String> {
        match (&self.node_names, &self.nodes) {
            (Some(names), _) => names.clone(),
            (None, Some(list)) => list
                .items
                .iter()
                .filter_map(|n| n.metadata.name.clone())
                .collect(),
            (None, None) => Vec::new(),
        }
    }
}

/// One node's score in a prioritize reply (`HostPriorityList`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct HostPriority {
    /// Node name.
    #[serde(rename = "Host")]
    pub host: String,
    /// 0..=10 ([`MIN_EXTENDER_PRIORITY`]..=[`MAX_EXTENDER_PRIORITY`]).
    #[serde(rename = "Score")]
    pub score: i64,
}

impl HostPriority {
    /// Whether the score is within the protocol's range,
    /// [`MIN_EXTENDER_PRIORITY`]..=[`MAX_EXTENDER_PRIORITY`].
    #[must_use]
    pub fn in_range(&self) -> bool {
        (MIN_EXTENDER_PRIORITY..=MAX_EXTENDER_PRIORITY).contains(&self.score)
    }

    /// Reads a prioritize reply (a JSON array), any key case. Scores are
    /// taken as given, as upstream does (it does not check the 0..=10
    /// range either): see [`HostPriority::in_range`].
    ///
    /// # Errors
    /// Not a JSON array of objects with `Host` (string) and `Score`
    /// (integer).
    pub fn decode_list(body: &[u8]) -> Result<Vec<Self>, WireError> {
        const T: &str = "HostPriorityList";
        let v = parse_body(T, body)?;
        let Value::Array(items) = &v else {
            return Err(wire_err(
                T,
                "(body)",
                format!("expected a JSON array, got {}", kind(&v)),
            ));
        };
        items
            .iter()
            .enumerate()
            .map(|(i, item)| {
                let f =
                    Fields::of(T, item).map_err(|e| wire_err(T, &format!("[{i}]"), e.problem))?;
                let at =
                    |field: &str, e: WireError| wire_err(T, &format!("[{i}].{field}"), e.problem);
                let host = f.decode::<String>("Host").map_err(|e| at("Host", e))?;
                let host = host.ok_or_else(|| wire_err(T, &format!("[{i}].Host"), "required"))?;
                let score = f
                    .decode::<i64>("Score")
                    .map_err(|e| at("Score", e))?
                    .unwrap_or(0);
                Ok(HostPriority { host, score })
            })
            .collect()
    }
}

/// The bind request: the extender writes the Binding itself.
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct ExtenderBindingArgs {
    /// `metadata.name`.
    #[serde(rename = "PodName")]
    pub pod_name: String,
    /// `metadata.namespace`.
    #[serde(rename = "PodNamespace")]
    pub pod_namespace: String,
    /// `metadata.uid`.
    #[serde(rename = "PodUID")]
    pub pod_uid: String,
    /// The node to bind to.
    #[serde(rename = "Node")]
    pub node: String,
}

impl ExtenderBindingArgs {
    /// Reads a bind request (an extender's side), any key case.
    ///
    /// # Errors
    /// Not JSON, not an object, or a field that is not a string.
    pub fn decode(body: &[u8]) -> Result<Self, WireError> {
        const T: &str = "ExtenderBindingArgs";
        let v = parse_body(T, body)?;
        let f = Fields::of(T, &v)?;
        Ok(ExtenderBindingArgs {
            pod_name: f.string("PodName")?,
            pod_namespace: f.string("PodNamespace")?,
            pod_uid: f.string("PodUID")?,
            node: f.string("Node")?,
        })
    }
}

/// The bind reply.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExtenderBindingResult {
    /// Non-empty: the binding failed.
    #[serde(rename = "Error")]
    pub error: String,
}

impl ExtenderBindingResult {
    /// Reads a bind reply, any key case.
    ///
    /// # Errors
    /// Not JSON, not an object, or `Error` not a string.
    pub fn decode(body: &[u8]) -> Result<Self, WireError> {
        const T: &str = "ExtenderBindingResult";
        let v = parse_body(T, body)?;
        Ok(ExtenderBindingResult {
            error: Fields::of(T, &v)?.string("Error")?,
        })
    }
}

/// A victim named by uid (`MetaPod`).
#[derive(Debug, Clone, PartialEq, Eq, Serialize)]
pub struct MetaPod {
    /// `metadata.uid`.
    #[serde(rename = "UID")]
    pub uid: String,
}

/// The victims on one node, by uid (`MetaVictims`).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct MetaVictims {
    /// The pods to evict.
    #[serde(rename = "Pods")]
    pub pods: Vec<MetaPod>,
    /// How many of those evictions violate a PodDisruptionBudget.
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// The victims on one node, whole (`Victims`): what upstream sends to
/// extenders that are not `nodeCacheCapable`.
#[derive(Debug, Clone, Default, PartialEq, Serialize)]
pub struct Victims {
    /// The pods to evict.
    #[serde(rename = "Pods")]
    pub pods: Vec<Pod>,
    /// How many of those evictions violate a PodDisruptionBudget.
    #[serde(rename = "NumPDBViolations")]
    pub num_pdb_violations: i64,
}

/// The preempt request: the candidates the scheduler found, node → victims:
/// whole pods in `NodeNameToVictims` for extenders that are not
/// `nodeCacheCapable`, uids in `NodeNameToMetaVictims` for those that are
/// (upstream sends exactly one of the two).
#[derive(Debug, Clone, PartialEq, Serialize)]
pub struct ExtenderPreemptionArgs {
    /// The preemptor.
    #[serde(rename = "Pod")]
    pub pod: Pod,
    /// Candidate node → its victims, whole.
    #[serde(rename = "NodeNameToVictims", skip_serializing_if = "Option::is_none")]
    pub node_name_to_victims: Option<BTreeMap<String, Victims>>,
    /// Candidate node → its victims, by uid.
    #[serde(
        rename = "NodeNameToMetaVictims",
        skip_serializing_if = "Option::is_none"
    )]
    pub node_name_to_meta_victims: Option<BTreeMap<String, MetaVictims>>,
}

impl ExtenderPreemptionArgs {
    /// Reads a preempt request (an extender's side), any key case. Victims
    /// sent whole are also given by uid in
    /// [`ExtenderPreemptionArgs::meta_victims`].
    ///
    /// # Errors
    /// Not JSON, not an object, or a field of the wrong shape.
    pub fn decode(body: &[u8]) -> Result<Self, WireError> {
        const T: &str = "ExtenderPreemptionArgs";
        let v = parse_body(T, body)?;
        let f = Fields::of(T, &v)?;
        let pod = f
            .decode::<Pod>("Pod")?
            .ok_or_else(|| wire_err(T, "Pod", "required"))?;
        let whole = match f.get("NodeNameToVictims") {
            None => None,
            Some(Value::Object(nodes)) => {
                let mut out = BTreeMap::new();
                for (node, victims) in nodes {
                    let at = |field: &str| format!("NodeNameToVictims.{node}{field}");
                    let vf = Fields::of(T, victims).map_err(|e| wire_err(T, &at(""), e.problem))?;
                    let pods = vf
                        .decode::<Vec<Pod>>("Pods")
                        .map_err(|e| wire_err(T, &at(".Pods"), e.problem))?
                        .unwrap_or_default();
                    let num_pdb_violations = vf
                        .decode::<i64>("NumPDBViolations")
                        .map_err(|e| wire_err(T, &at(".NumPDBViolations"), e.problem))?
                        .unwrap_or(0);
                    out.insert(
                        node.clone(),
                        Victims {
                            pods,
                            num_pdb_violations,
                        },
                    );
                }
                Some(out)
            }
            Some(other) => {
                return Err(wire_err(
                    T,
                    "NodeNameToVictims",
                    format!("expected an object, got {}", kind(other)),
                ));
            }
        };
        let meta = match f.get("NodeNameToMetaVictims") {
            None => None,
            Some(m) => Some(decode_meta_victims(T, "NodeNameToMetaVictims", m)?),
        };
        Ok(ExtenderPreemptionArgs {
            pod,
            node_name_to_victims: whole,
            node_name_to_meta_victims: meta,
        })
    }

    /// The victims by uid, from whichever map was sent.
    #[must_use]
    pub fn meta_victims(&self) -> BTreeMap<String, MetaVictims> {
        if let Some(m) = &self.node_name_to_meta_victims {
            return m.clone();
        }
        self.node_name_to_victims
            .iter()
            .flatten()
            .map(|(node, v)| {
                let pods = v
                    .pods
                    .iter()
                    .map(|p| MetaPod {
                        uid: p.metadata.uid.clone().unwrap_or_default(),
                    })
                    .collect();
                (
                    node.clone(),
                    MetaVictims {
                        pods,
                        num_pdb_violations: v.num_pdb_violations,
                    },
                )
            })
            .collect()
    }
}

/// `map[string]*MetaVictims`, any key case.
fn decode_meta_victims(
    t: &'static str,
    field: &str,
    m: &Value,
) -> Result<BTreeMap<String, MetaVictims>, WireError> {
    let Value::Object(nodes) = m else {
        return Err(wire_err(
            t,
            field,
            format!("expected an object, got {}", kind(m)),
        ));
    };
    let mut out = BTreeMap::new();
    for (node, victims) in nodes {
        let at = |rest: &str| format!("{field}.{node}{rest}");
        let vf = Fields::of(t, victims).map_err(|e| wire_err(t, &at(""), e.problem))?;
        let pods = match vf.get("Pods") {
            None => Vec::new(),
            Some(Value::Array(items)) => items
                .iter()
                .enumerate()
                .map(|(i, p)| {
                    let pf = Fields::of(t, p)
                        .map_err(|e| wire_err(t, &at(&format!(".Pods[{i}]")), e.problem))?;
                    let uid = pf
                        .string("UID")
                        .map_err(|e| wire_err(t, &at(&format!(".Pods[{i}].UID")), e.problem))?;
                    Ok(MetaPod { uid })
                })
                .collect::<Result<_, WireError>>()?,
            Some(other) => {
                return Err(wire_err(
                    t,
                    &at(".Pods"),
                    format!("expected an array, got {}", kind(other)),
                ));
            }
        };
        let num_pdb_violations = vf
            .decode::<i64>("NumPDBViolations")
            .map_err(|e| wire_err(t, &at(".NumPDBViolations"), e.problem))?
            .unwrap_or(0);
        out.insert(
            node.clone(),
            MetaVictims {
                pods,
                num_pdb_violations,
            },
        );
    }
    Ok(out)
}

/// The preempt reply: the candidates the extender keeps (it may drop nodes
/// or add victims).
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
pub struct ExtenderPreemptionResult {
    /// Node → victims.
    #[serde(rename = "NodeNameToMetaVictims")]
    pub node_name_to_meta_victims: BTreeMap<String, MetaVictims>,
}

impl ExtenderPreemptionResult {
    /// Reads a preempt reply, any key case (also inside the victims).
    ///
    /// # Errors
    /// Not JSON, not an object, or a field of the wrong shape.
    pub fn decode(body: &[u8]) -> Result<Self, WireError> {
        const T: &str = "ExtenderPreemptionResult";
        let v = parse_body(T, body)?;
        let f = Fields::of(T, &v)?;
        let node_name_to_meta_victims = match f.get("NodeNameToMetaVictims") {
            None => BTreeMap::new(),
            Some(m) => decode_meta_victims(T, "NodeNameToMetaVictims", m)?,
        };
        Ok(ExtenderPreemptionResult {
            node_name_to_meta_victims,
        })
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use k8s_openapi::apimachinery::pkg::apis::meta::v1::ObjectMeta;
    use serde_json::json;

    fn pod() -> Pod {
        Pod {
            metadata: ObjectMeta {
                name: Some("web".into()),
                namespace: Some("default".into()),
                uid: Some("u-1".into()),
                ..ObjectMeta::default()
            },
            ..Pod::default()
        }
    }

    #[test]
    fn requests_encode_with_upstreams_capitalized_names() {
        let by_name = ExtenderArgs {
            pod: pod(),
            nodes: None,
            node_names: Some(vec!["n1".into(), "n2".into()]),
        };
        assert_eq!(
            serde_json::to_value(&by_name).expect("json"),
            // k8s-openapi writes the objects' apiVersion/kind too; Go's
            // decoder reads them into TypeMeta.
            json!({
                "Pod": {"apiVersion": "v1", "kind": "Pod",
                        "metadata": {"name": "web", "namespace": "default", "uid": "u-1"}},
                "NodeNames": ["n1", "n2"]
            })
        );
        let whole = ExtenderArgs {
            pod: pod(),
            nodes: Some(NodeList {
                metadata: BTreeMap::new(),
                items: vec![Node {
                    metadata: ObjectMeta {
                        name: Some("n1".into()),
                        ..ObjectMeta::default()
                    },
                    ..Node::default()
                }],
            }),
            node_names: None,
        };
        assert_eq!(
            serde_json::to_value(&whole).expect("json")["Nodes"],
            json!({"metadata": {}, "items": [
                {"apiVersion": "v1", "kind": "Node", "metadata": {"name": "n1"}}
            ]})
        );
        let bind = ExtenderBindingArgs {
            pod_name: "web".into(),
            pod_namespace: "default".into(),
            pod_uid: "u-1".into(),
            node: "n1".into(),
        };
        assert_eq!(
            serde_json::to_value(&bind).expect("json"),
            json!({"PodName": "web", "PodNamespace": "default", "PodUID": "u-1", "Node": "n1"})
        );
        let preempt = ExtenderPreemptionArgs {
            pod: pod(),
            node_name_to_victims: None,
            node_name_to_meta_victims: Some(BTreeMap::from([(
                "n1".to_owned(),
                MetaVictims {
                    pods: vec![MetaPod { uid: "v-1".into() }],
                    num_pdb_violations: 1,
                },
            )])),
        };
        let v = serde_json::to_value(&preempt).expect("json");
        assert_eq!(
            v["NodeNameToMetaVictims"],
            json!({"n1": {"Pods": [{"UID": "v-1"}], "NumPDBViolations": 1}})
        );
        assert!(v.get("NodeNameToVictims").is_none(), "exactly one map: {v}");
        let whole = ExtenderPreemptionArgs {
            pod: pod(),
            node_name_to_victims: Some(BTreeMap::from([(
                "n1".to_owned(),
                Victims {
                    pods: vec![pod()],
                    num_pdb_violations: 0,
                },
            )])),
            node_name_to_meta_victims: None,
        };
        let v = serde_json::to_value(&whole).expect("json");
        assert_eq!(
            v["NodeNameToVictims"]["n1"]["Pods"][0]["metadata"]["uid"],
            "u-1"
        );
        assert_eq!(v["NodeNameToVictims"]["n1"]["NumPDBViolations"], 0);
        assert!(v.get("NodeNameToMetaVictims").is_none(), "{v}");
        // An extender's side reads either shape and sees uids.
        let back = ExtenderPreemptionArgs::decode(&serde_json::to_vec(&whole).expect("json"))
            .expect("decodes");
        assert_eq!(
            back.meta_victims()["n1"].pods,
            [MetaPod { uid: "u-1".into() }]
        );
        let back = ExtenderPreemptionArgs::decode(
            br#"{"pod":{},"nodenametometavictims":{"n2":{"pods":[{"uid":"x"}]}}}"#,
        )
        .expect("any case");
        assert_eq!(
            back.meta_victims()["n2"].pods,
            [MetaPod { uid: "x".into() }]
        );
    }

    #[test]
    fn scores_are_taken_as_given_like_upstream() {
        let r = HostPriority::decode_list(
            br#"[{"Host":"n1","Score":11},{"Host":"n2","Score":-1},{"Host":"n3"}]"#,
        )
        .expect("upstream does not range-check either");
        assert_eq!(
            r.iter()
                .map(|h| (h.score, h.in_range()))
                .collect::<Vec<_>>(),
            [(11, false), (-1, false), (0, true)]
        );
    }

    #[test]
    fn upstream_shaped_replies_decode_in_any_key_case() {
        // Exactly what a Go extender's json.Marshal of ExtenderFilterResult
        // writes (no json tags: Go field names).
        let upstream = br#"{"Nodes":null,"NodeNames":["n2"],"FailedNodes":{"n1":"label exclude-from-scheduling=true"},"FailedAndUnresolvableNodes":{"n3":"node not Ready"},"Error":""}"#;
        let r = ExtenderFilterResult::decode(upstream).expect("decodes");
        assert_eq!(r.passed(), ["n2"]);
        assert_eq!(r.failed_nodes["n1"], "label exclude-from-scheduling=true");
        assert_eq!(r.failed_and_unresolvable_nodes["n3"], "node not Ready");
        assert!(r.error.is_empty());
        // Go's decoder is case-insensitive; so is ours.
        let lower = br#"{"nodenames":["n2"],"failednodes":{},"error":"boom"}"#;
        let r = ExtenderFilterResult::decode(lower).expect("decodes");
        assert_eq!(
            (r.passed(), r.error.as_str()),
            (vec!["n2".to_owned()], "boom")
        );
        // Whole nodes back.
        let whole = br#"{"Nodes":{"metadata":{},"items":[{"metadata":{"name":"n4"}}]}}"#;
        assert_eq!(
            ExtenderFilterResult::decode(whole)
                .expect("decodes")
                .passed(),
            ["n4"]
        );

        let prios = br#"[{"Host":"n1","Score":10},{"host":"n2","score":3}]"#;
        assert_eq!(
            HostPriority::decode_list(prios).expect("decodes"),
            [
                HostPriority {
                    host: "n1".into(),
                    score: 10
                },
                HostPriority {
                    host: "n2".into(),
                    score: 3
                }
            ]
        );
        assert_eq!(
            ExtenderBindingResult::decode(br#"{"Error":"node gone"}"#)
                .expect("decodes")
                .error,
            "node gone"
        );
        let pre =
            br#"{"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":"v-1"}],"NumPDBViolations":0}}}"#;
        let r = ExtenderPreemptionResult::decode(pre).expect("decodes");
        assert_eq!(
            r.node_name_to_meta_victims["n1"].pods,
            [MetaPod { uid: "v-1".into() }]
        );
        // An extender's side reads kube-scheduler's requests.
        let args = br#"{"Pod":{"metadata":{"name":"web"}},"NodeNames":["n1"]}"#;
        let a = ExtenderArgs::decode(args).expect("decodes");
        assert_eq!(a.pod.metadata.name.as_deref(), Some("web"));
        assert_eq!(a.node_names.as_deref(), Some(&["n1".to_owned()][..]));
        let b = ExtenderBindingArgs::decode(
            br#"{"podname":"web","PodNamespace":"default","PodUID":"u","Node":"n1"}"#,
        )
        .expect("decodes");
        assert_eq!((b.pod_name.as_str(), b.node.as_str()), ("web", "n1"));
    }

    #[test]
    fn garbage_replies_are_errors_naming_the_message_and_field() {
        let cases: &[(&[u8], &str)] = &[
            (
                b"<html>502 Bad Gateway</html>",
                "ExtenderFilterResult: (body): expected value",
            ),
            (
                b"[]",
                "ExtenderFilterResult: (body): expected a JSON object, got an array",
            ),
            (
                br#"{"NodeNames":"n1"}"#,
                "ExtenderFilterResult: NodeNames: invalid type: string",
            ),
            (
                br#"{"FailedNodes":{"n1":3}}"#,
                "ExtenderFilterResult: FailedNodes: invalid type: integer",
            ),
            (
                br#"{"Error":false}"#,
                "ExtenderFilterResult: Error: invalid type: boolean",
            ),
        ];
        for (body, want) in cases {
            let err = ExtenderFilterResult::decode(body).expect_err("garbage");
            assert!(err.to_string().starts_with(want), "{err} / want {want}");
        }
        let prio_cases: &[(&[u8], &str)] = &[
            (
                br#"{"Host":"n1"}"#,
                "HostPriorityList: (body): expected a JSON array, got an object",
            ),
            (br#"[{"Score":3}]"#, "HostPriorityList: [0].Host: required"),
            (
                br#"[{"Host":"n1","Score":"high"}]"#,
                "HostPriorityList: [0].Score: invalid type",
            ),
            (
                br#"[3]"#,
                "HostPriorityList: [0]: expected a JSON object, got a number",
            ),
        ];
        for (body, want) in prio_cases {
            let err = HostPriority::decode_list(body).expect_err("garbage");
            assert!(err.to_string().starts_with(want), "{err} / want {want}");
        }
        let err = ExtenderPreemptionResult::decode(
            br#"{"NodeNameToMetaVictims":{"n1":{"Pods":[{"UID":7}]}}}"#,
        )
        .expect_err("garbage");
        assert!(
            err.to_string().starts_with(
                "ExtenderPreemptionResult: NodeNameToMetaVictims.n1.Pods[0].UID: invalid type"
            ),
            "{err}"
        );
    }

    #[test]
    fn an_extender_score_counts_ten_times_its_weight_beside_plugin_scores() {
        assert_eq!(scaled_priority(10, 1), 100);
        assert_eq!(scaled_priority(3, 5), 150);
        assert_eq!(scaled_priority(0, 7), 0);
        assert_eq!(scaled_priority(i64::MAX, 2), i64::MAX, "saturates");
    }
}
