//! The upstream HTTP scheduler extender (`KubeSchedulerConfiguration`
//! `extenders`), shared by the workers (filter, prioritize, preempt) and
//! the coordinator (bind):
//!
//! - [`wire`]: the JSON bodies kube-scheduler sends and reads, field for
//!   field (capitalized Go names out, any key case in), so an extender
//!   written for kube-scheduler works with Flotilla unchanged;
//! - [`ExtenderConfig`]: one configured extender after defaulting and
//!   validation (`flotilla_scheduler::config` builds it from the file);
//! - [`HttpExtender`]: upstream's `HTTPExtender`, one verb call each
//!   ([`HttpExtender::filter`], [`HttpExtender::prioritize`],
//!   [`HttpExtender::bind`], [`HttpExtender::process_preemption`]) over
//!   [`crate::http::JsonClient`], with `IsInterested` (managed resources),
//!   `IsIgnorable`, `IsBinder`, `SupportsPreemption`.
//!
//! How the verbs' results are combined (the filter chain, prioritize in
//! parallel, ignorable extenders skipped, ...) is the callers' part: see
//! `flotilla_scheduler::extender` and the coordinator's bind.

pub mod wire;

use std::collections::{BTreeMap, HashSet};
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::time::{Duration, Instant};

use k8s_openapi::api::core::v1::{Container, Node, Pod};
use serde::Serialize;

use crate::http::{HttpError, JsonClient, TlsConfig};
use wire::{
    ExtenderBindingArgs, ExtenderBindingResult, ExtenderFilterResult, ExtenderPreemptionResult,
    HostPriority, MetaPod, MetaVictims, WireError,
};

pub use wire::DEFAULT_EXTENDER_TIMEOUT;

/// The name extenders go by among the plugins that rejected a pod
/// (upstream `framework.ExtenderName`): a pod some extender filtered nodes
/// out for is retried on any cluster event, since extenders register for
/// none.
pub const EXTENDER_NAME: &str = "Extender";

/// `managedResources[]`: an extended resource the extender manages.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ManagedResource {
    /// The resource name, e.g. `example.com/foo`.
    pub name: String,
    /// `ignoredByScheduler`: NodeResourcesFit does not check it (the
    /// extender does).
    pub ignored_by_scheduler: bool,
}

/// One extender after defaulting and validation (upstream `Extender`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExtenderConfig {
    /// `urlPrefix`: verbs are POSTed to `urlPrefix + "/" + verb`. Also the
    /// extender's name in logs and results (upstream `Name()`).
    pub url_prefix: String,
    /// `filterVerb` (empty: the extender does not filter).
    pub filter_verb: String,
    /// `prioritizeVerb` (empty: it does not score).
    pub prioritize_verb: String,
    /// `preemptVerb` (empty: it is not consulted on preemption).
    pub preempt_verb: String,
    /// `bindVerb` (empty: it does not bind; at most one extender binds).
    pub bind_verb: String,
    /// `weight`: its 0..=10 scores count `score × weight × 10` beside the
    /// plugins' 0..=100 (positive when `prioritize_verb` is set).
    pub weight: i64,
    /// `enableHTTPS`. As upstream, with no CA in [`ExtenderConfig::tls`]
    /// the server's certificate is then not verified (see
    /// [`ExtenderConfig::effective_tls`]).
    pub enable_https: bool,
    /// `tlsConfig`.
    pub tls: Option<TlsConfig>,
    /// `httpTimeout`, per call. Defaults to 5 s
    /// ([`DEFAULT_EXTENDER_TIMEOUT`]).
    pub http_timeout: Duration,
    /// `nodeCacheCapable`: send node names only (`NodeNames`) and victims by
    /// uid (`NodeNameToMetaVictims`), not whole objects.
    pub node_cache_capable: bool,
    /// `managedResources`: when not empty, only pods requesting (or
    /// limiting) one of them are sent to this extender.
    pub managed_resources: Vec<ManagedResource>,
    /// `ignorable`: a failing or unreachable extender is skipped instead of
    /// failing the pod's attempt.
    pub ignorable: bool,
}

impl ExtenderConfig {
    /// An extender at `url_prefix` with no verb, upstream's defaults
    /// elsewhere (5 s timeout, weight 1).
    #[must_use]
    pub fn new(url_prefix: &str) -> Self {
        ExtenderConfig {
            url_prefix: url_prefix.to_owned(),
            filter_verb: String::new(),
            prioritize_verb: String::new(),
            preempt_verb: String::new(),
            bind_verb: String::new(),
            weight: 1,
            enable_https: false,
            tls: None,
            http_timeout: DEFAULT_EXTENDER_TIMEOUT,
            node_cache_capable: false,
            managed_resources: Vec::new(),
            ignorable: false,
        }
    }

    /// The TLS settings the client uses, as upstream's `makeTransport`:
    /// `tlsConfig` as given, except that `enableHTTPS` without a CA
    /// (`caFile`/`caData`) turns on `insecure`.
    #[must_use]
    pub fn effective_tls(&self) -> Option<TlsConfig> {
        let mut tls = self.tls.clone();
        if self.enable_https && !tls.as_ref().is_some_and(TlsConfig::has_ca) {
            tls.get_or_insert_with(TlsConfig::default).insecure = true;
        }
        tls
    }
}

/// Counters of one extender's calls (all verbs), readable while it runs.
#[derive(Debug, Default)]
pub struct ExtenderStats {
    /// Calls made.
    pub calls: AtomicU64,
    /// Calls that failed (transport, timeout, non-200, a reply that does
    /// not parse, or an `Error` in the reply).
    pub failures: AtomicU64,
    /// Failures of an `ignorable` extender, skipped.
    pub ignored: AtomicU64,
    /// Nanoseconds spent waiting for replies.
    pub nanos: AtomicU64,
}

impl ExtenderStats {
    /// Counts a failure that was skipped because the extender is ignorable.
    pub fn record_ignored(&self) {
        self.ignored.fetch_add(1, Ordering::Relaxed);
    }
}

/// What kind of failure an [`ExtenderError`] is.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum FailureKind {
    /// No reply within `httpTimeout`.
    Timeout,
    /// Connecting or the exchange failed (refused, reset, TLS).
    Transport,
    /// A status other than 200.
    Status(u16),
    /// The reply does not parse as the verb's result.
    Malformed,
    /// The reply's `Error` was set, or it names nodes or pods the request
    /// did not hold.
    Refused,
}

/// One failed extender call: the extender (its `urlPrefix`), the verb and
/// what went wrong, in upstream's words where upstream has them
/// (`failed filter with extender at URL ..., code 500`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[error("extender {extender} {verb}: {message}")]
pub struct ExtenderError {
    /// `urlPrefix`.
    pub extender: String,
    /// `filter`, `prioritize`, `bind` or `preempt`.
    pub verb: &'static str,
    /// What went wrong.
    pub message: String,
    /// The kind of failure.
    pub kind: FailureKind,
}

/// A verb call in progress; it owns everything it needs, so it can be
/// awaited on any runtime or waited for with
/// [`crate::http::run_blocking`].
pub type Call<T> = Pin<Box<dyn Future<Output = Result<T, ExtenderError>> + Send + 'static>>;

/// What a filter call decided about the nodes it was sent.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FilterOutcome {
    /// Names of the nodes that passed, each one of the nodes sent.
    pub passed: Vec<String>,
    /// Node → why it failed (preemption may help).
    pub failed: BTreeMap<String, String>,
    /// Node → why it failed where preemption cannot help.
    pub failed_and_unresolvable: BTreeMap<String, String>,
}

/// Victims to send to `process_preemption`: node → (pods, PDB violations).
pub type VictimsByNode<'a> = BTreeMap<String, (Vec<&'a Pod>, i64)>;

/// Upstream's `HTTPExtender`: one configured extender and its client.
pub struct HttpExtender {
    config: ExtenderConfig,
    client: JsonClient,
    managed: HashSet<String>,
    stats: Arc<ExtenderStats>,
    warned_scores: Arc<AtomicBool>,
}

impl std::fmt::Debug for HttpExtender {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("HttpExtender")
            .field("url_prefix", &self.config.url_prefix)
            .finish_non_exhaustive()
    }
}

#[derive(Serialize)]
struct NodeListOut<'a> {
    metadata: BTreeMap<String, String>,
    items: Vec<&'a Node>,
}

/// `ExtenderArgs` encoded from borrowed objects (same JSON as
/// [`wire::ExtenderArgs`]).
#[derive(Serialize)]
struct ArgsOut<'a> {
    #[serde(rename = "Pod")]
    pod: &'a Pod,
    #[serde(rename = "Nodes", skip_serializing_if = "Option::is_none")]
    nodes: Option<NodeListOut<'a>>,
    #[serde(rename = "NodeNames", skip_serializing_if = "Option::is_none")]
    node_names: Option<Vec<&'a str>>,
}

#[derive(Serialize)]
struct VictimsOut<'a> {
    #[serde(rename = "Pods")]
    pods: &'a [&'a Pod],
    #[serde(rename = "NumPDBViolations")]
    num_pdb_violations: i64,
}

#[derive(Serialize)]
struct PreemptionArgsOut<'a> {
    #[serde(rename = "Pod")]
    pod: &'a Pod,
    #[serde(rename = "NodeNameToVictims", skip_serializing_if = "Option::is_none")]
    whole: Option<BTreeMap<&'a str, VictimsOut<'a>>>,
    #[serde(
        rename = "NodeNameToMetaVictims",
        skip_serializing_if = "Option::is_none"
    )]
    meta: Option<BTreeMap<&'a str, MetaVictims>>,
}

fn node_name(n: &Node) -> &str {
    n.metadata.name.as_deref().unwrap_or_default()
}

impl HttpExtender {
    /// The extender of `config`, with its HTTP client.
    ///
    /// # Errors
    /// Unusable TLS settings ([`HttpError::Tls`]).
    pub fn new(config: ExtenderConfig) -> Result<Self, HttpError> {
        let client = JsonClient::new(config.effective_tls().as_ref(), config.http_timeout)?;
        let managed = config
            .managed_resources
            .iter()
            .map(|r| r.name.clone())
            .collect();
        Ok(HttpExtender {
            config,
            client,
            managed,
            stats: Arc::default(),
            warned_scores: Arc::default(),
        })
    }

    /// The extender's name: its `urlPrefix` (upstream `Name()`).
    #[must_use]
    pub fn name(&self) -> &str {
        &self.config.url_prefix
    }

    /// Its configuration.
    #[must_use]
    pub fn config(&self) -> &ExtenderConfig {
        &self.config
    }

    /// Its call counters.
    #[must_use]
    pub fn stats(&self) -> &ExtenderStats {
        &self.stats
    }

    /// `ignorable`.
    #[must_use]
    pub fn is_ignorable(&self) -> bool {
        self.config.ignorable
    }

    /// Whether it has a `filterVerb`.
    #[must_use]
    pub fn is_filter(&self) -> bool {
        !self.config.filter_verb.is_empty()
    }

    /// Whether it has a `prioritizeVerb`.
    #[must_use]
    pub fn is_prioritizer(&self) -> bool {
        !self.config.prioritize_verb.is_empty()
    }

    /// Whether it has a `bindVerb` (upstream `IsBinder`).
    #[must_use]
    pub fn is_binder(&self) -> bool {
        !self.config.bind_verb.is_empty()
    }

    /// Whether it has a `preemptVerb` (upstream `SupportsPreemption`).
    #[must_use]
    pub fn supports_preemption(&self) -> bool {
        !self.config.preempt_verb.is_empty()
    }

    /// Upstream `IsInterested`: with no `managedResources`, every pod;
    /// otherwise pods whose containers or init containers request or limit
    /// one of them.
    #[must_use]
    pub fn is_interested(&self, pod: &Pod) -> bool {
        if self.managed.is_empty() {
            return true;
        }
        let Some(spec) = pod.spec.as_ref() else {
            return false;
        };
        let uses = |cs: &[Container]| {
            cs.iter().any(|c| {
                c.resources.as_ref().is_some_and(|r| {
                    r.requests
                        .iter()
                        .chain(r.limits.iter())
                        .flat_map(|m| m.keys())
                        .any(|k| self.managed.contains(k))
                })
            })
        };
        uses(&spec.containers) || spec.init_containers.as_deref().is_some_and(uses)
    }

    fn url(&self, verb: &str) -> String {
        format!("{}/{verb}", self.config.url_prefix.trim_end_matches('/'))
    }

    fn args<'a>(&self, pod: &'a Pod, nodes: &[&'a Node]) -> ArgsOut<'a> {
        if self.config.node_cache_capable {
            ArgsOut {
                pod,
                nodes: None,
                node_names: Some(nodes.iter().map(|n| node_name(n)).collect()),
            }
        } else {
            ArgsOut {
                pod,
                nodes: Some(NodeListOut {
                    metadata: BTreeMap::new(),
                    items: nodes.to_vec(),
                }),
                node_names: None,
            }
        }
    }

    /// POSTs `body` to `verb` and decodes a 200 reply with `decode`.
    fn send<T: Send + 'static>(
        &self,
        verb_name: &'static str,
        verb: &str,
        body: Result<Vec<u8>, serde_json::Error>,
        decode: impl FnOnce(&[u8]) -> Result<T, ExtenderError> + Send + 'static,
    ) -> Call<T> {
        let err = ExtenderErrorMaker {
            extender: self.config.url_prefix.clone(),
            verb: verb_name,
        };
        let url = self.url(verb);
        let stats = self.stats.clone();
        stats.calls.fetch_add(1, Ordering::Relaxed);
        let body = match body {
            Ok(b) => b,
            Err(e) => {
                stats.failures.fetch_add(1, Ordering::Relaxed);
                let e = err.make(format!("encoding the request: {e}"), FailureKind::Malformed);
                return Box::pin(async move { Err(e) });
            }
        };
        let started = Instant::now();
        let reply = self.client.post(&url, body);
        Box::pin(async move {
            let reply = reply.await;
            stats.nanos.fetch_add(
                u64::try_from(started.elapsed().as_nanos()).unwrap_or(u64::MAX),
                Ordering::Relaxed,
            );
            let result = match reply {
                Err(e @ HttpError::Timeout { .. }) => {
                    Err(err.make(e.to_string(), FailureKind::Timeout))
                }
                Err(e) => Err(err.make(e.to_string(), FailureKind::Transport)),
                // Upstream's words for a non-200 reply.
                Ok(r) if r.status != 200 => Err(err.make(
                    format!(
                        "failed {verb_name} with extender at URL {url}, code {}",
                        r.status
                    ),
                    FailureKind::Status(r.status),
                )),
                Ok(r) => decode(&r.body),
            };
            if result.is_err() {
                stats.failures.fetch_add(1, Ordering::Relaxed);
            }
            result
        })
    }

    /// The filter verb on `nodes` (upstream `Filter`). Without a filter
    /// verb every node passes, without a call.
    ///
    /// # Errors
    /// The call failed, its `Error` is set, or it passed a node that was
    /// not sent (`extender "..." claims a filtered node "..." which is not
    /// found in the input node list`).
    pub fn filter(&self, pod: &Pod, nodes: &[&Node]) -> Call<FilterOutcome> {
        let sent: Vec<String> = nodes.iter().map(|n| node_name(n).to_owned()).collect();
        if !self.is_filter() {
            return Box::pin(async move {
                Ok(FilterOutcome {
                    passed: sent,
                    ..FilterOutcome::default()
                })
            });
        }
        let body = serde_json::to_vec(&self.args(pod, nodes));
        let err = ExtenderErrorMaker {
            extender: self.config.url_prefix.clone(),
            verb: "filter",
        };
        self.send("filter", &self.config.filter_verb, body, move |b| {
            let r = ExtenderFilterResult::decode(b).map_err(|e| err.wire(&e))?;
            if !r.error.is_empty() {
                return Err(err.make(r.error, FailureKind::Refused));
            }
            let known: HashSet<&str> = sent.iter().map(String::as_str).collect();
            let passed = r.passed();
            if let Some(stray) = passed.iter().find(|n| !known.contains(n.as_str())) {
                return Err(err.make(
                    format!(
                        "extender {:?} claims a filtered node {stray:?} which is not found in \
                         the input node list",
                        err.extender
                    ),
                    FailureKind::Refused,
                ));
            }
            Ok(FilterOutcome {
                passed,
                failed: r.failed_nodes,
                failed_and_unresolvable: r.failed_and_unresolvable_nodes,
            })
        })
    }

    /// The prioritize verb on `nodes` (upstream `Prioritize`): each node's
    /// score as the extender gave it (0..=10 by the protocol; taken as
    /// given, as upstream does, with one warning per extender for scores
    /// outside the range). Without a prioritize verb, no call and no
    /// scores.
    ///
    /// # Errors
    /// The call failed or its reply is not a `HostPriorityList`.
    pub fn prioritize(&self, pod: &Pod, nodes: &[&Node]) -> Call<Vec<HostPriority>> {
        if !self.is_prioritizer() {
            return Box::pin(async { Ok(Vec::new()) });
        }
        let body = serde_json::to_vec(&self.args(pod, nodes));
        let err = ExtenderErrorMaker {
            extender: self.config.url_prefix.clone(),
            verb: "prioritize",
        };
        let warned = self.warned_scores.clone();
        self.send("prioritize", &self.config.prioritize_verb, body, move |b| {
            let list = HostPriority::decode_list(b).map_err(|e| err.wire(&e))?;
            if let Some(h) = list.iter().find(|h| !h.in_range())
                && !warned.swap(true, Ordering::Relaxed)
            {
                tracing::warn!(
                    extender = %err.extender,
                    host = %h.host,
                    score = h.score,
                    "extender score outside 0..=10; used as given, as kube-scheduler does \
                     (warned once per extender)"
                );
            }
            Ok(list)
        })
    }

    /// The bind verb (upstream `Bind`): the extender writes the Binding of
    /// pod `namespace/name` (uid) to `node`.
    ///
    /// # Errors
    /// No bind verb, the call failed, or its `Error` is set.
    pub fn bind(&self, namespace: &str, name: &str, uid: &str, node: &str) -> Call<()> {
        let args = ExtenderBindingArgs {
            pod_name: name.to_owned(),
            pod_namespace: namespace.to_owned(),
            pod_uid: uid.to_owned(),
            node: node.to_owned(),
        };
        let err = ExtenderErrorMaker {
            extender: self.config.url_prefix.clone(),
            verb: "bind",
        };
        if !self.is_binder() {
            let e = err.make(
                "unexpected empty bindVerb in extender".into(),
                FailureKind::Refused,
            );
            return Box::pin(async move { Err(e) });
        }
        self.send(
            "bind",
            &self.config.bind_verb,
            serde_json::to_vec(&args),
            move |b| {
                let r = ExtenderBindingResult::decode(b).map_err(|e| err.wire(&e))?;
                if r.error.is_empty() {
                    Ok(())
                } else {
                    Err(err.make(r.error, FailureKind::Refused))
                }
            },
        )
    }

    /// The preempt verb (upstream `ProcessPreemption`) on the candidates
    /// `victims` (node → pods to evict, PDB violations): whole pods, or by
    /// uid for `nodeCacheCapable` extenders. Returns the candidates the
    /// extender keeps, by uid; the caller maps them back to pods (upstream
    /// `convertToVictims`) and checks them.
    ///
    /// # Errors
    /// No preempt verb, the call failed, or its reply does not parse.
    pub fn process_preemption(
        &self,
        pod: &Pod,
        victims: &VictimsByNode<'_>,
    ) -> Call<BTreeMap<String, MetaVictims>> {
        let err = ExtenderErrorMaker {
            extender: self.config.url_prefix.clone(),
            verb: "preempt",
        };
        if !self.supports_preemption() {
            let e = err.make(
                format!(
                    "preempt verb is not defined for extender {} but run into ProcessPreemption",
                    self.config.url_prefix
                ),
                FailureKind::Refused,
            );
            return Box::pin(async move { Err(e) });
        }
        let args = if self.config.node_cache_capable {
            PreemptionArgsOut {
                pod,
                whole: None,
                meta: Some(
                    victims
                        .iter()
                        .map(|(node, (pods, pdb))| {
                            let pods = pods
                                .iter()
                                .map(|p| MetaPod {
                                    uid: p.metadata.uid.clone().unwrap_or_default(),
                                })
                                .collect();
                            (
                                node.as_str(),
                                MetaVictims {
                                    pods,
                                    num_pdb_violations: *pdb,
                                },
                            )
                        })
                        .collect(),
                ),
            }
        } else {
            PreemptionArgsOut {
                pod,
                whole: Some(
                    victims
                        .iter()
                        .map(|(node, (pods, pdb))| {
                            (
                                node.as_str(),
                                VictimsOut {
                                    pods,
                                    num_pdb_violations: *pdb,
                                },
                            )
                        })
                        .collect(),
                ),
                meta: None,
            }
        };
        self.send(
            "preempt",
            &self.config.preempt_verb,
            serde_json::to_vec(&args),
            move |b| {
                ExtenderPreemptionResult::decode(b)
                    .map(|r| r.node_name_to_meta_victims)
                    .map_err(|e| err.wire(&e))
            },
        )
    }
}

#[derive(Clone)]
struct ExtenderErrorMaker {
    extender: String,
    verb: &'static str,
}

impl ExtenderErrorMaker {
    fn make(&self, message: String, kind: FailureKind) -> ExtenderError {
        ExtenderError {
            extender: self.extender.clone(),
            verb: self.verb,
            message,
            kind,
        }
    }

    fn wire(&self, e: &WireError) -> ExtenderError {
        self.make(e.to_string(), FailureKind::Malformed)
    }
}

#[cfg(test)]
mod tests;
