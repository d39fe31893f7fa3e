//! The real API-server backend, through the `kube` crate.
//!
//! - **Reads**: `kube::runtime::watcher` on Namespaces, Nodes, non-terminal Pods
//!   (`status.phase!=Succeeded,status.phase!=Failed`, upstream's scheduler pod
//!   informer) and `scheduling.k8s.io/v1` PriorityClasses, with kube's
//!   default backoff on errors; it relists by itself
//!   after an expired resourceVersion (410) and its `Init`/`InitApply`/
//!   `InitDone` become our `Relisting`/`*Applied`/`Listed`.
//! - **PodGroups** (`scheduling.x-k8s.io/v1alpha1` `podgroups`, typed as
//!   [`PodGroup`]) and **PodDisruptionBudgets**: watched like the others
//!   once the server serves them. While the list answers 404 (PodGroup CRD
//!   not installed; `policy/v1` before Kubernetes 1.21) the kind counts as
//!   listed and empty (logged once at info) and the list is tried again
//!   every [`OPTIONAL_KIND_RETRY`]. Status writes are a merge patch of the
//!   `status` subresource, best effort.
//! - **Bind**: `POST pods/<name>/binding` with a `v1` Binding (metadata
//!   namespace, name and uid; target Node), as upstream's DefaultBinder. 409 →
//!   [`ClusterError::AlreadyBound`], 404 → [`ClusterError::PodNotFound`],
//!   anything else (5xx, 429, 403, timeouts, connection refused) →
//!   [`ClusterError::Unavailable`].
//! - **Unschedulable**: a strategic-merge patch of `pods/<name>/status`
//!   setting condition `PodScheduled=False`, reason `Unschedulable`, message
//!   the FitError text; conditions merge by `type`, so the others stay. As
//!   upstream's `updatePod`, nothing is written when the condition already
//!   says so, and `lastTransitionTime` moves only when the status changes.
//! - **Delete** (preemption's victims): `DELETE pods/<name>` with
//!   `gracePeriodSeconds` (when given) and `preconditions.uid`, so a
//!   namesake is never deleted; 404 and a failed uid precondition (409) →
//!   [`ClusterError::PodNotFound`].
//! - **Nomination**: a merge patch of `pods/<name>/status` setting (or
//!   clearing, with `null`) `status.nominatedNodeName`.
//! - **Events**: `events.k8s.io/v1` when the server serves it (it does since
//!   1.19), else core `v1` Events, as upstream's event broadcaster adapter;
//!   written by [`EventRecorder`] (rate-limited, never blocking).
//!
//! Every write first checks the [`WriteFence`]: once leadership is lost it
//! answers `Unavailable` without calling the server. With
//! [`KubeOptions::write_limit`] every write but Events then waits for a
//! token of a client-side [`TokenBucket`] (kube-scheduler's
//! `--kube-api-qps` / `--kube-api-burst`). Events have their own limit,
//! [`KubeOptions::events`] (default 50 / 100, kube-scheduler's defaults for
//! its separate event client). Reads (lists, watches) are not limited.
//!
//! At most [`KubeOptions::concurrent_writes`] writes (Events aside, which
//! have their own bound) are in flight at once. The `kube` client speaks
//! HTTP/1.1, one request per connection at a time, where client-go
//! multiplexes everything over one HTTP/2 connection: unbounded, a burst of
//! Bindings opens a connection, and a TLS handshake on both sides, per
//! Binding in flight (2,400 for 5,000 pods against kube-apiserver 1.20,
//! which then spent more CPU on handshakes than on Bindings). Bounded, the
//! connection pool settles at that many connections and reuses them.

use std::path::PathBuf;
use std::sync::Arc;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::Duration;

use ::kube::api::{Api, DeleteParams, Patch, PatchParams, PostParams, Preconditions};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::runtime::WatchStreamExt as _;
use ::kube::runtime::watcher::{self, Event as WatcherEvent};
use ::kube::{Client, Config};
use futures::StreamExt as _;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{
    Binding, Event as CoreEvent, EventSource, Namespace, Node, ObjectReference, Pod, PodCondition,
};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use tracing::{info, warn};

use super::events::{EventCounts, EventLimits, EventRecorder, EventWriter, REPORTING_CONTROLLER};
use super::ratelimit::{self, RateLimit, TokenBucket};
use super::{Cluster, ClusterError, Kind, PodRef, SchedulingEvent, WatchEvent};
use flotilla_shared::pod_group::{PodGroup, PodGroupStatus};

/// How often a kind the server does not serve (404 on list) is listed
/// again: the PodGroup CRD not installed, or `policy/v1`
/// PodDisruptionBudgets on a server older than 1.21. 3 minutes.
pub const OPTIONAL_KIND_RETRY: Duration = Duration::from_secs(180);

/// See [`OPTIONAL_KIND_RETRY`].
pub const POD_GROUP_CRD_RETRY: Duration = OPTIONAL_KIND_RETRY;

/// The change stream of a kind the server may not serve: the watcher once
/// the list works; while it answers 404, an empty list every
/// [`OPTIONAL_KIND_RETRY`] (logged once at info with `missing`, which says
/// what that means).
fn optional_stream<K>(
    api: Api<K>,
    kind: Kind,
    applied: fn(Arc<K>) -> WatchEvent,
    deleted: fn(Arc<K>) -> WatchEvent,
    missing: &'static str,
) -> BoxStream<'static, Result<WatchEvent, ClusterError>>
where
    K: ::kube::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    tokio::spawn(async move {
        let mut logged = false;
        loop {
            let probe = api.list(&::kube::api::ListParams::default().limit(1)).await;
            if let Err(::kube::Error::Api(s)) = &probe
                && s.code == 404
            {
                if !logged {
                    info!(
                        "{missing}; checking again every {}s",
                        OPTIONAL_KIND_RETRY.as_secs()
                    );
                    logged = true;
                }
                for e in [WatchEvent::Relisting(kind), WatchEvent::Listed(kind)] {
                    if tx.send(Ok(e)).await.is_err() {
                        return;
                    }
                }
                tokio::select! {
                    () = tokio::time::sleep(OPTIONAL_KIND_RETRY) => continue,
                    () = tx.closed() => return,
                }
            }
            // Listed (or another error, which the watcher retries with
            // backoff): follow the watcher from now on.
            let mut watch = watch_stream(
                api.clone(),
                watcher::Config::default(),
                kind,
                applied,
                deleted,
            );
            while let Some(e) = watch.next().await {
                if tx.send(e).await.is_err() {
                    return;
                }
            }
            return;
        }
    });
    tokio_stream::wrappers::ReceiverStream::new(rx).boxed()
}

/// Field selector of the pod watch: non-terminal pods only (upstream's
/// `newPodInformer`). A pod turning terminal leaves the set and arrives as a
/// deletion.
pub const NON_TERMINAL_PODS: &str = "status.phase!=Succeeded,status.phase!=Failed";

/// Longest wait for one write (Binding, status patch, Event). Defaults to
/// 30 s; past it the write counts as `Unavailable`.
pub const DEFAULT_REQUEST_TIMEOUT: Duration = Duration::from_secs(30);

/// Where the client configuration comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigSource {
    /// This kubeconfig file (its current context).
    Kubeconfig(PathBuf),
    /// The pod's service account (`KUBERNETES_SERVICE_HOST`, the mounted
    /// token and CA).
    InCluster,
    /// `kube::Config::infer`: `KUBECONFIG`, else `~/.kube/config`, else
    /// in-cluster.
    Infer,
}

/// Errors connecting to the API server.
#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    /// The kubeconfig could not be read or used.
    #[error("kubeconfig {path}: {source}")]
    Kubeconfig {
        /// The file.
        path: String,
        /// Cause.
        #[source]
        source: ::kube::config::KubeconfigError,
    },
    /// No configuration could be found or built.
    #[error("no Kubernetes client configuration: {0}")]
    Config(String),
    /// The client could not be built from the configuration.
    #[error("building the Kubernetes client: {0}")]
    Client(#[source] ::kube::Error),
    /// The API server did not answer `/version`.
    #[error("cannot reach the API server at {url}: {source}")]
    Unreachable {
        /// The server URL.
        url: String,
        /// Cause.
        #[source]
        source: ::kube::Error,
    },
}

/// Builds a client from `source`; also returns the server URL (for
/// messages).
///
/// # Errors
/// [`ConnectError::Kubeconfig`], [`ConnectError::Config`],
/// [`ConnectError::Client`].
pub async fn client(source: &ConfigSource) -> Result<(Client, String), ConnectError> {
    let config = match source {
        ConfigSource::Kubeconfig(path) => {
            let kc = Kubeconfig::read_from(path).map_err(|e| ConnectError::Kubeconfig {
                path: path.display().to_string(),
                source: e,
            })?;
            Config::from_custom_kubeconfig(kc, &KubeConfigOptions::default())
                .await
                .map_err(|e| ConnectError::Kubeconfig {
                    path: path.display().to_string(),
                    source: e,
                })?
        }
        ConfigSource::InCluster => {
            Config::incluster().map_err(|e| ConnectError::Config(format!("in-cluster: {e}")))?
        }
        ConfigSource::Infer => Config::infer()
            .await
            .map_err(|e| ConnectError::Config(e.to_string()))?,
    };
    let url = config.cluster_url.to_string();
    let client = Client::try_from(config).map_err(ConnectError::Client)?;
    Ok((client, url))
}

/// What the API server offers that matters to us, found by discovery.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ServerInfo {
    /// `gitVersion`, e.g. `v1.20.2`.
    pub version: String,
    /// Whether `events.k8s.io/v1` is served (else core `v1` Events are used).
    pub events_v1: bool,
    /// Whether the server knows Pod `spec.schedulingGates` (1.26+; older
    /// servers drop the field, so no pod carries gates and none are waited
    /// on).
    pub scheduling_gates: bool,
}

impl ServerInfo {
    /// Asks the server (`/version`, `/apis/events.k8s.io/v1`).
    ///
    /// # Errors
    /// [`ConnectError::Unreachable`] when `/version` fails. A failing
    /// events discovery only selects the core `v1` fallback.
    pub async fn discover(client: &Client, url: &str) -> Result<Self, ConnectError> {
        let v = client
            .apiserver_version()
            .await
            .map_err(|source| ConnectError::Unreachable {
                url: url.to_owned(),
                source,
            })?;
        let events_v1 = match client.list_api_group_resources("events.k8s.io/v1").await {
            Ok(list) => list.resources.iter().any(|r| r.name == "events"),
            Err(e) => {
                if !matches!(&e, ::kube::Error::Api(s) if s.code == 404) {
                    warn!(error = %e, "events.k8s.io/v1 discovery failed; using core v1 Events");
                }
                false
            }
        };
        let minor: u32 = v
            .minor
            .trim_end_matches(|c: char| !c.is_ascii_digit())
            .parse()
            .unwrap_or(0);
        Ok(ServerInfo {
            version: v.git_version,
            events_v1,
            scheduling_gates: v.major == "1" && minor >= 26,
        })
    }
}

/// Whether this process may write. Shared between the leader elector (which
/// clears it the moment the lease is lost) and the backend (which checks it
/// before every write). Starts open.
#[derive(Debug, Clone)]
pub struct WriteFence(Arc<AtomicBool>);

impl Default for WriteFence {
    fn default() -> Self {
        WriteFence(Arc::new(AtomicBool::new(true)))
    }
}

impl WriteFence {
    /// An open fence.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens (`true`) or closes (`false`) the fence.
    pub fn set(&self, open: bool) {
        self.0.store(open, Ordering::SeqCst);
    }

    /// Whether writes may go out.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.0.load(Ordering::SeqCst)
    }

    fn check(&self) -> Result<(), ClusterError> {
        if self.is_open() {
            Ok(())
        } else {
            Err(ClusterError::Unavailable(
                "not the leader: writes are fenced off".into(),
            ))
        }
    }
}

/// Settings of a [`KubeCluster`].
#[derive(Debug, Clone)]
pub struct KubeOptions {
    /// Event pipeline limits.
    pub events: EventLimits,
    /// Longest wait for one write.
    pub request_timeout: Duration,
    /// `reportingInstance` of our Events (upstream: controller-hostname).
    pub reporting_instance: String,
    /// The fence checked before writes.
    pub fence: WriteFence,
    /// Client-side limit on writes (Bindings, status patches, deletions;
    /// not Events, which [`KubeOptions::events`] limits). `None`:
    /// unlimited.
    pub write_limit: Option<RateLimit>,
    /// Writes (not Events) in flight at once, so HTTP/1.1 connections to
    /// the server (module docs). Default [`DEFAULT_CONCURRENT_WRITES`];
    /// 0 is taken as 1.
    pub concurrent_writes: usize,
}

/// Default [`KubeOptions::concurrent_writes`]: 32. At ~1 ms a Binding on a
/// busy server that is ~30,000 Bindings a second, beyond what one API
/// server takes, with 32 connections kept open.
pub const DEFAULT_CONCURRENT_WRITES: usize = 32;

impl Default for KubeOptions {
    fn default() -> Self {
        KubeOptions {
            events: EventLimits::default(),
            request_timeout: DEFAULT_REQUEST_TIMEOUT,
            reporting_instance: reporting_instance(&hostname()),
            fence: WriteFence::new(),
            write_limit: None,
            concurrent_writes: DEFAULT_CONCURRENT_WRITES,
        }
    }
}

/// This machine's host name (`HOSTNAME`, else the kernel's), or `unknown`.
#[must_use]
pub fn hostname() -> String {
    std::env::var("HOSTNAME")
        .ok()
        .filter(|h| !h.is_empty())
        .or_else(|| {
            std::fs::read_to_string("/proc/sys/kernel/hostname")
                .ok()
                .map(|s| s.trim().to_owned())
                .filter(|h| !h.is_empty())
        })
        .unwrap_or_else(|| "unknown".into())
}

/// `<controller>-<host>`, cut to the API's 128-character limit.
#[must_use]
pub fn reporting_instance(host: &str) -> String {
    let mut s = format!("{REPORTING_CONTROLLER}-{host}");
    if s.len() > 128 {
        let mut end = 128;
        while !s.is_char_boundary(end) {
            end -= 1;
        }
        s.truncate(end);
    }
    s
}

/// The `kube` backend. Share it as `Arc<KubeCluster>`.
pub struct KubeCluster {
    client: Client,
    info: ServerInfo,
    events: EventRecorder,
    request_timeout: Duration,
    fence: WriteFence,
    limiter: Option<TokenBucket>,
    in_flight: tokio::sync::Semaphore,
}

impl std::fmt::Debug for KubeCluster {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("KubeCluster")
            .field("info", &self.info)
            .finish_non_exhaustive()
    }
}

impl KubeCluster {
    /// Patches `PodScheduled=False` with `reason` and `message` on `pod`
    /// (merged by condition type), unless it already says so.
    async fn patch_pod_scheduled(
        &self,
        pod: &Pod,
        reason: &str,
        message: &str,
    ) -> Result<(), ClusterError> {
        self.fence.check()?;
        let Some(cond) = pod_scheduled_false(pod, reason, message, Timestamp::now()) else {
            return Ok(());
        };
        let _in_flight = self.throttle().await;
        let r = PodRef::of(pod);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &r.namespace);
        let patch = serde_json::json!({ "status": { "conditions": [cond] } });
        let pp = PatchParams::default();
        self.timed(
            || format!("patching the status of {r}"),
            api.patch_status(&r.name, &pp, &Patch::Strategic(&patch)),
        )
        .await?
        .map(|_| ())
        .map_err(|e| write_error("patching the status of", &r, &e))
    }

    /// Discovers what the server offers and builds the backend. Logs the
    /// server version and what it lacks. Needs a tokio runtime.
    ///
    /// # Errors
    /// [`ConnectError::Unreachable`].
    pub async fn connect(
        client: Client,
        url: &str,
        options: KubeOptions,
    ) -> Result<Self, ConnectError> {
        let info = ServerInfo::discover(&client, url).await?;
        info!(
            server = %url,
            version = %info.version,
            events = if info.events_v1 { "events.k8s.io/v1" } else { "core v1 (events.k8s.io/v1 not served)" },
            "connected to the API server"
        );
        if !info.scheduling_gates {
            info!(
                version = %info.version,
                "this API server predates Pod schedulingGates (1.26): no pod can carry them"
            );
        }
        Ok(Self::new(client, info, options))
    }

    /// The backend for a server known to offer `info` (no discovery).
    /// Needs a tokio runtime (the Event writer task starts here).
    #[must_use]
    pub fn new(client: Client, info: ServerInfo, options: KubeOptions) -> Self {
        let writer = Arc::new(KubeEventWriter {
            client: client.clone(),
            events_v1: info.events_v1,
            reporting_instance: options.reporting_instance.clone(),
            timeout: options.request_timeout,
            fence: options.fence.clone(),
        });
        KubeCluster {
            events: EventRecorder::spawn(writer, options.events),
            client,
            info,
            request_timeout: options.request_timeout,
            fence: options.fence,
            limiter: options.write_limit.map(TokenBucket::new),
            in_flight: tokio::sync::Semaphore::new(options.concurrent_writes.max(1)),
        }
    }

    /// Waits for a place among the writes in flight, then for a write
    /// token (no wait without a limit). Hold the permit until the answer is
    /// read.
    async fn throttle(&self) -> tokio::sync::SemaphorePermit<'_> {
        let permit = self
            .in_flight
            .acquire()
            .await
            .expect("the semaphore is never closed");
        ratelimit::acquire(self.limiter.as_ref()).await;
        permit
    }

    /// What discovery found.
    #[must_use]
    pub fn server_info(&self) -> &ServerInfo {
        &self.info
    }

    /// The client.
    #[must_use]
    pub fn client(&self) -> &Client {
        &self.client
    }

    /// Event pipeline counters.
    #[must_use]
    pub fn event_counts(&self) -> EventCounts {
        self.events.stats().snapshot()
    }

    async fn timed<T>(
        &self,
        what: impl FnOnce() -> String,
        f: impl Future<Output = Result<T, ::kube::Error>>,
    ) -> Result<Result<T, ::kube::Error>, ClusterError> {
        tokio::time::timeout(self.request_timeout, f)
            .await
            .map_err(|_| {
                ClusterError::Unavailable(format!(
                    "{}: no answer within {:?}",
                    what(),
                    self.request_timeout
                ))
            })
    }
}

fn watch_stream<K>(
    api: Api<K>,
    config: watcher::Config,
    kind: Kind,
    applied: fn(Arc<K>) -> WatchEvent,
    deleted: fn(Arc<K>) -> WatchEvent,
) -> BoxStream<'static, Result<WatchEvent, ClusterError>>
where
    K: ::kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug + Send + 'static,
{
    watcher::watcher(api, config)
        .default_backoff()
        .map(move |r| match r {
            Ok(WatcherEvent::Init) => Ok(WatchEvent::Relisting(kind)),
            Ok(WatcherEvent::InitApply(o) | WatcherEvent::Apply(o)) => Ok(applied(Arc::new(o))),
            Ok(WatcherEvent::InitDone) => Ok(WatchEvent::Listed(kind)),
            Ok(WatcherEvent::Delete(o)) => Ok(deleted(Arc::new(o))),
            Err(e) => Err(ClusterError::Unavailable(format!("watching {kind}: {e}"))),
        })
        .boxed()
}

/// `pod x is already assigned to node "y"` → `y`.
fn assigned_node(message: &str) -> Option<String> {
    let (_, rest) = message.split_once("is already assigned to node ")?;
    let rest = rest.trim_start_matches('"');
    let end = rest.find('"').unwrap_or(rest.len());
    Some(rest[..end].to_owned()).filter(|n| !n.is_empty())
}

/// Maps a failed Binding to our errors: 409 → `AlreadyBound` (with the node
/// when the server names it), 404 → `PodNotFound`, everything else →
/// `Unavailable` (retried by the worker with backoff).
#[must_use]
pub fn bind_error(pod: &PodRef, node: &str, err: &::kube::Error) -> ClusterError {
    match err {
        ::kube::Error::Api(s) if s.code == 409 => ClusterError::AlreadyBound {
            pod: pod.to_string(),
            node: assigned_node(&s.message).unwrap_or_default(),
        },
        ::kube::Error::Api(s) if s.code == 404 => ClusterError::PodNotFound(pod.to_string()),
        ::kube::Error::Api(s) => ClusterError::Unavailable(format!(
            "binding {pod} to {node}: HTTP {} {}: {}",
            s.code, s.reason, s.message
        )),
        other => ClusterError::Unavailable(format!("binding {pod} to {node}: {other}")),
    }
}

fn write_error(what: &str, pod: &PodRef, err: &::kube::Error) -> ClusterError {
    match err {
        ::kube::Error::Api(s) if s.code == 404 => ClusterError::PodNotFound(pod.to_string()),
        ::kube::Error::Api(s) => ClusterError::Unavailable(format!(
            "{what} {pod}: HTTP {} {}: {}",
            s.code, s.reason, s.message
        )),
        other => ClusterError::Unavailable(format!("{what} {pod}: {other}")),
    }
}

/// The `PodScheduled=False`/`Unschedulable` condition to write on `pod`, or
/// `None` when its current one already says so (upstream's
/// `UpdatePodCondition`: `lastTransitionTime` is `now` unless the status
/// stays the same; `observedGeneration` is the pod's generation when it has
/// one).
#[must_use]
pub fn unschedulable_condition(pod: &Pod, message: &str, now: Timestamp) -> Option<PodCondition> {
    pod_scheduled_false(pod, "Unschedulable", message, now)
}

/// [`unschedulable_condition`] with another `reason` (`SchedulerError`).
#[must_use]
pub fn pod_scheduled_false(
    pod: &Pod,
    reason: &str,
    message: &str,
    now: Timestamp,
) -> Option<PodCondition> {
    let old = pod
        .status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"));
    let mut new = PodCondition {
        type_: "PodScheduled".into(),
        status: "False".into(),
        reason: Some(reason.to_owned()),
        message: Some(message.to_owned()),
        last_transition_time: Some(Time(now)),
        observed_generation: pod.metadata.generation,
        ..PodCondition::default()
    };
    if let Some(old) = old {
        if old.status == new.status {
            new.last_transition_time
                .clone_from(&old.last_transition_time);
        }
        let same = old.status == new.status
            && old.reason == new.reason
            && old.message == new.message
            && old.last_probe_time == new.last_probe_time
            && (new.observed_generation.is_none()
                || old.observed_generation == new.observed_generation);
        if same {
            return None;
        }
    }
    Some(new)
}

#[tonic::async_trait]
impl Cluster for KubeCluster {
    fn changes(self: Arc<Self>) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
        let namespaces = watch_stream(
            Api::<Namespace>::all(self.client.clone()),
            watcher::Config::default(),
            Kind::Namespace,
            WatchEvent::NamespaceApplied,
            WatchEvent::NamespaceDeleted,
        );
        let nodes = watch_stream(
            Api::<Node>::all(self.client.clone()),
            watcher::Config::default(),
            Kind::Node,
            WatchEvent::NodeApplied,
            WatchEvent::NodeDeleted,
        );
        let pods = watch_stream(
            Api::<Pod>::all(self.client.clone()),
            watcher::Config::default().fields(NON_TERMINAL_PODS),
            Kind::Pod,
            WatchEvent::PodApplied,
            WatchEvent::PodDeleted,
        );
        let priority_classes = watch_stream(
            Api::<PriorityClass>::all(self.client.clone()),
            watcher::Config::default(),
            Kind::PriorityClass,
            WatchEvent::PriorityClassApplied,
            WatchEvent::PriorityClassDeleted,
        );
        let pdbs = optional_stream(
            Api::<PodDisruptionBudget>::all(self.client.clone()),
            Kind::PodDisruptionBudget,
            WatchEvent::PdbApplied,
            WatchEvent::PdbDeleted,
            "policy/v1 PodDisruptionBudgets are not served (Kubernetes before 1.21): \
             preemption sees no budget",
        );
        let pod_groups = optional_stream(
            Api::<PodGroup>::all(self.client.clone()),
            Kind::PodGroup,
            WatchEvent::PodGroupApplied,
            WatchEvent::PodGroupDeleted,
            "the PodGroup CRD (scheduling.x-k8s.io/v1alpha1 podgroups) is not installed: \
             no gang scheduling groups",
        );
        futures::stream::select_all([namespaces, nodes, pods, pod_groups, priority_classes, pdbs])
            .boxed()
    }

    async fn bind(&self, pod: &PodRef, node: &str) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
                ..ObjectMeta::default()
            },
            target: ObjectReference {
                api_version: Some("v1".into()),
                kind: Some("Node".into()),
                name: Some(node.to_owned()),
                ..ObjectReference::default()
            },
        };
        let pp = PostParams::default();
        let res = self
            .timed(
                || format!("binding {pod} to {node}"),
                api.create_subresource::<_, serde_json::Value>("binding", &pod.name, &pp, &binding),
            )
            .await?;
        // Leadership lost while the request was out: the answer does not
        // matter any more, and nothing may follow it.
        self.fence.check()?;
        res.map(|_| ()).map_err(|e| bind_error(pod, node, &e))
    }

    async fn mark_unschedulable(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.patch_pod_scheduled(pod, "Unschedulable", message)
            .await
    }

    async fn mark_scheduler_error(&self, pod: &Pod, message: &str) -> Result<(), ClusterError> {
        self.patch_pod_scheduled(pod, "SchedulerError", message)
            .await
    }
    fn record_event(&self, event: SchedulingEvent) {
        self.events.record(event);
    }

    async fn update_pod_group_status(
        &self,
        group: &PodGroup,
        status: &PodGroupStatus,
    ) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let ns = group.metadata.namespace.as_deref().unwrap_or("default");
        let name = group.metadata.name.as_deref().unwrap_or_default();
        let api = Api::<PodGroup>::namespaced(self.client.clone(), ns);
        // Only the fields the coordinator keeps: a controller's counters stay.
        let mut st = serde_json::json!({ "running": status.running });
        if let Some(p) = &status.phase {
            st["phase"] = serde_json::json!(p);
        }
        if let Some(t) = &status.schedule_start_time {
            st["scheduleStartTime"] = serde_json::json!(t);
        }
        let patch = serde_json::json!({ "status": st });
        api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch))
            .await
            .map(|_| ())
            .map_err(|e| {
                ClusterError::Unavailable(format!("patching podgroup {ns}/{name} status: {e}"))
            })
    }

    async fn mark_preemption_victim(
        &self,
        pod: &PodRef,
        scheduler_name: &str,
    ) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let cond = flotilla_shared::preemption::disruption_target_condition(scheduler_name);
        // Strategic merge: conditions merge by type, others stay.
        let patch = serde_json::json!({ "status": { "conditions": [cond] } });
        self.timed(
            || format!("patching the status of {pod}"),
            api.patch_status(
                &pod.name,
                &PatchParams::default(),
                &Patch::Strategic(&patch),
            ),
        )
        .await?
        .map(|_| ())
        .map_err(|e| write_error("patching the status of", pod, &e))
    }

    async fn delete_pod(&self, pod: &PodRef, grace: Option<i64>) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let dp = DeleteParams {
            grace_period_seconds: grace.map(|g| u32::try_from(g.max(0)).unwrap_or(u32::MAX)),
            preconditions: (!pod.uid.is_empty()).then(|| Preconditions {
                uid: Some(pod.uid.clone()),
                resource_version: None,
            }),
            ..DeleteParams::default()
        };
        self.timed(|| format!("deleting {pod}"), api.delete(&pod.name, &dp))
            .await?
            .map(|_| ())
            .map_err(|e| delete_error(pod, &e))
    }

    async fn set_nominated_node(&self, pod: &Pod, node: Option<&str>) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let r = PodRef::of(pod);
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &r.namespace);
        let patch = serde_json::json!({ "status": { "nominatedNodeName": node } });
        let pp = PatchParams::default();
        self.timed(
            || format!("patching the status of {r}"),
            api.patch_status(&r.name, &pp, &Patch::Merge(&patch)),
        )
        .await?
        .map(|_| ())
        .map_err(|e| write_error("patching the status of", &r, &e))
    }
}

/// Maps a failed delete: 404, and 409 (the uid precondition failed: the
/// name now belongs to another pod) → `PodNotFound`; everything else →
/// `Unavailable`.
#[must_use]
pub fn delete_error(pod: &PodRef, err: &::kube::Error) -> ClusterError {
    match err {
        ::kube::Error::Api(s) if s.code == 404 || s.code == 409 => {
            ClusterError::PodNotFound(pod.to_string())
        }
        ::kube::Error::Api(s) => ClusterError::Unavailable(format!(
            "deleting {pod}: HTTP {} {}: {}",
            s.code, s.reason, s.message
        )),
        other => ClusterError::Unavailable(format!("deleting {pod}: {other}")),
    }
}

/// Writes Events to the API server.
struct KubeEventWriter {
    client: Client,
    events_v1: bool,
    reporting_instance: String,
    timeout: Duration,
    fence: WriteFence,
}

fn regarding(pod: &PodRef) -> ObjectReference {
    ObjectReference {
        api_version: Some("v1".into()),
        kind: Some("Pod".into()),
        namespace: Some(pod.namespace.clone()),
        name: Some(pod.name.clone()),
        uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
        ..ObjectReference::default()
    }
}

/// `<pod>.<unix nanoseconds in hex>`, as upstream's recorders name Events.
fn event_name(pod: &PodRef, now: Timestamp) -> String {
    format!("{}.{:x}", pod.name, now.as_nanosecond())
}

/// The `events.k8s.io/v1` Event for `ev`.
#[must_use]
pub fn events_v1_event(
    ev: &SchedulingEvent,
    reporting_instance: &str,
    now: Timestamp,
) -> EventsV1Event {
    EventsV1Event {
        metadata: ObjectMeta {
            name: Some(event_name(&ev.pod, now)),
            namespace: Some(ev.pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(now)),
        reporting_controller: Some(REPORTING_CONTROLLER.into()),
        reporting_instance: Some(reporting_instance.to_owned()),
        action: Some(ev.action.into()),
        reason: Some(ev.reason.into()),
        regarding: Some(regarding(&ev.pod)),
        note: Some(ev.note.clone()),
        type_: Some(ev.type_.as_str().into()),
        ..EventsV1Event::default()
    }
}

/// The core `v1` Event for `ev` (servers without `events.k8s.io/v1`).
#[must_use]
pub fn core_v1_event(ev: &SchedulingEvent, now: Timestamp) -> CoreEvent {
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(event_name(&ev.pod, now)),
            namespace: Some(ev.pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        involved_object: regarding(&ev.pod),
        reason: Some(ev.reason.into()),
        message: Some(ev.note.clone()),
        type_: Some(ev.type_.as_str().into()),
        source: Some(EventSource {
            component: Some(REPORTING_CONTROLLER.into()),
            host: None,
        }),
        first_timestamp: Some(Time(now)),
        last_timestamp: Some(Time(now)),
        count: Some(1),
        ..CoreEvent::default()
    }
}

#[tonic::async_trait]
impl EventWriter for KubeEventWriter {
    async fn write(&self, ev: &SchedulingEvent) -> Result<(), ClusterError> {
        self.fence.check()?;
        let now = Timestamp::now();
        let pp = PostParams::default();
        let ns = &ev.pod.namespace;
        let res = if self.events_v1 {
            let api: Api<EventsV1Event> = Api::namespaced(self.client.clone(), ns);
            let e = events_v1_event(ev, &self.reporting_instance, now);
            tokio::time::timeout(self.timeout, api.create(&pp, &e))
                .await
                .map(|r| r.map(|_| ()))
        } else {
            let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), ns);
            let e = core_v1_event(ev, now);
            tokio::time::timeout(self.timeout, api.create(&pp, &e))
                .await
                .map(|r| r.map(|_| ()))
        };
        match res {
            Ok(Ok(())) => Ok(()),
            Ok(Err(e)) => Err(write_error("recording an event for", &ev.pod, &e)),
            Err(_) => Err(ClusterError::Unavailable(format!(
                "recording an event for {}: no answer within {:?}",
                ev.pod, self.timeout
            ))),
        }
    }
}

#[cfg(test)]
mod tests;
