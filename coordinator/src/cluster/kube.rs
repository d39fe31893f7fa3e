//! The real API-server backend, through the `kube` crate.
//!
//! - **Reads**: `kube::runtime::watcher` on Namespaces, Nodes, non-terminal Pods
//!   (`status.phase!=Succeeded,status.phase!=Failed`, upstream's scheduler pod
//!   informer) and `scheduling.k8s.io/v1` PriorityClasses, with kube's
//!   default backoff on errors; it relists by itself
//!   after an expired resourceVersion (410) and its `Init`/`InitApply`/
//!   `InitDone` become our `Relisting`/`*Applied`/`Listed`.
//! - **PodGroups** (`scheduling.x-k8s.io/v1alpha1` `podgroups`, typed as
//!   [`PodGroup`]), **Kubernetes' PodGroups** (`scheduling.k8s.io`
//!   `podgroups`, [`WorkloadPodGroup`]: `v1beta1` when served, else
//!   `v1alpha2`) and **PodDisruptionBudgets**: watched like the others
//!   once the server serves them. While the list answers 404 (PodGroup CRD
//!   not installed; neither `scheduling.k8s.io` version served, as before
//!   Kubernetes 1.36; `policy/v1` before 1.21) the kind counts as listed
//!   and empty (logged once at info) and the list is tried again every
//!   [`OPTIONAL_KIND_RETRY`]. Status writes are a merge patch of the
//!   `status` subresource, best effort; a `scheduling.k8s.io` PodGroup's
//!   condition is written with the whole `status.conditions` list (a merge
//!   patch replaces lists), in the object's own `apiVersion`.
//! - **Volume objects** (core `v1` PersistentVolumeClaims and
//!   PersistentVolumes; `storage.k8s.io/v1` StorageClasses, CSINodes,
//!   CSIDrivers and VolumeAttachments, all served since 1.17 and so by the
//!   1.20 lab): watched as the optional kinds above, so a server that does
//!   not serve one (404) has none, with one info line naming it. (The
//!   `ReadWriteOncePod` access mode needs 1.22; an older server has no
//!   claim using it.)
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

use ::kube::api::{
    Api, ApiResource, DeleteParams, DynamicObject, GroupVersionKind, Patch, PatchParams,
    PostParams, Preconditions,
};
use ::kube::config::{KubeConfigOptions, Kubeconfig};
use ::kube::runtime::WatchStreamExt as _;
use ::kube::runtime::watcher::{self, Event as WatcherEvent};
use ::kube::{Client, Config};
use flotilla_shared::volumes::model::ANNOTATION_SELECTED_NODE;
use futures::FutureExt as _;
use futures::StreamExt as _;
use futures::future::BoxFuture;
use futures::stream::BoxStream;
use k8s_openapi::api::core::v1::{
    Binding, Event as CoreEvent, EventSource, Namespace, Node, ObjectReference, PersistentVolume,
    PersistentVolumeClaim, Pod, PodCondition,
};
use k8s_openapi::api::events::v1::Event as EventsV1Event;
use k8s_openapi::api::policy::v1::PodDisruptionBudget;
use k8s_openapi::api::scheduling::v1::PriorityClass;
use k8s_openapi::apimachinery::pkg::apis::meta::v1::{MicroTime, ObjectMeta, Time};
use k8s_openapi::jiff::Timestamp;
use tracing::{info, warn};

use super::events::{EventCounts, EventLimits, EventRecorder, EventWriter, REPORTING_CONTROLLER};
use super::ratelimit::{self, RateLimit, TokenBucket};
use super::{
    ClaimTarget, Cluster, ClusterError, Kind, PodRef, SchedulingEvent, WatchEvent, pv_controller,
};
use flotilla_shared::gang::{self, PodGroupCondition, WorkloadPodGroup};
use flotilla_shared::pod_group::{PodGroup, PodGroupStatus};
use flotilla_shared::volumes::VolumeObject;

/// How often a kind the server does not serve (404 on list) is listed
/// again: the PodGroup CRD not installed, or `policy/v1`
/// PodDisruptionBudgets on a server older than 1.21. 3 minutes.
pub const OPTIONAL_KIND_RETRY: Duration = Duration::from_secs(180);

/// See [`OPTIONAL_KIND_RETRY`].
pub const POD_GROUP_CRD_RETRY: Duration = OPTIONAL_KIND_RETRY;

/// First wait before probing again after a probe failed with something
/// else than 404 (connection refused, 5xx, 403): doubled on each failure up
/// to [`OPTIONAL_PROBE_BACKOFF_MAX`], as kube's default watcher backoff.
const OPTIONAL_PROBE_BACKOFF_MIN: Duration = Duration::from_millis(800);

/// Longest wait between failed probes.
const OPTIONAL_PROBE_BACKOFF_MAX: Duration = Duration::from_secs(30);

/// Whether the server serves `api`'s resource: a list of one item answers
/// (`Ok(true)`) or 404 (`Ok(false)`); any other failure is the error.
async fn probe_served<K>(api: &Api<K>) -> Result<bool, ::kube::Error>
where
    K: ::kube::Resource + Clone + serde::de::DeserializeOwned + std::fmt::Debug,
{
    match api.list(&::kube::api::ListParams::default().limit(1)).await {
        Ok(_) => Ok(true),
        Err(::kube::Error::Api(s)) if s.code == 404 => Ok(false),
        Err(e) => Err(e),
    }
}

/// One version of a kind the server may not serve: how to ask whether it
/// is served, and its change stream once it is.
struct OptionalVersion {
    /// `apiVersion`, for messages.
    api_version: &'static str,
    probe: Box<dyn Fn() -> BoxFuture<'static, Result<bool, ::kube::Error>> + Send + Sync>,
    watch: Box<dyn Fn() -> BoxStream<'static, Result<WatchEvent, ClusterError>> + Send + Sync>,
}

impl OptionalVersion {
    /// The version `api` reads, its objects becoming `applied` / `deleted`.
    fn of<K>(
        api: Api<K>,
        kind: Kind,
        applied: fn(Arc<K>) -> WatchEvent,
        deleted: fn(Arc<K>) -> WatchEvent,
    ) -> Self
    where
        K: ::kube::Resource
            + k8s_openapi::Resource
            + Clone
            + serde::de::DeserializeOwned
            + std::fmt::Debug
            + Send
            + Sync
            + 'static,
    {
        let probe_api = api.clone();
        OptionalVersion {
            api_version: <K as k8s_openapi::Resource>::API_VERSION,
            probe: Box::new(move || {
                let api = probe_api.clone();
                async move { probe_served(&api).await }.boxed()
            }),
            watch: Box::new(move || {
                watch_stream(
                    api.clone(),
                    watcher::Config::default(),
                    kind,
                    applied,
                    deleted,
                )
            }),
        }
    }
}

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
        + k8s_openapi::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
{
    optional_versions_stream(
        kind,
        vec![OptionalVersion::of(api, kind, applied, deleted)],
        missing,
    )
}

/// The change streams of the six volume kinds, each optional (a kind the
/// server does not serve is listed empty, with one info line saying what
/// the volume Filters then miss).
fn volume_streams(
    client: &::kube::Client,
) -> Vec<BoxStream<'static, Result<WatchEvent, ClusterError>>> {
    use flotilla_shared::volumes::VolumeKind as V;
    use k8s_openapi::api::core::v1::{PersistentVolume, PersistentVolumeClaim};
    use k8s_openapi::api::storage::v1::{CSIDriver, CSINode, StorageClass, VolumeAttachment};
    vec![
        volume_stream::<PersistentVolumeClaim>(
            client,
            V::Claim,
            "v1 PersistentVolumeClaims are not served: every pod with a claim is unschedulable",
        ),
        volume_stream::<PersistentVolume>(
            client,
            V::Pv,
            "v1 PersistentVolumes are not served: pods with bound claims are unschedulable",
        ),
        volume_stream::<StorageClass>(
            client,
            V::StorageClass,
            "storage.k8s.io/v1 StorageClasses are not served: unbound claims name no class",
        ),
        volume_stream::<CSINode>(
            client,
            V::CsiNode,
            "storage.k8s.io/v1 CSINodes are not served: no CSI attach limits are known",
        ),
        volume_stream::<CSIDriver>(
            client,
            V::CsiDriver,
            "storage.k8s.io/v1 CSIDrivers are not served",
        ),
        volume_stream::<VolumeAttachment>(
            client,
            V::VolumeAttachment,
            "storage.k8s.io/v1 VolumeAttachments are not served: attached volumes are not counted",
        ),
    ]
}

/// The optional change stream of one volume kind.
fn volume_stream<K>(
    client: &::kube::Client,
    kind: flotilla_shared::volumes::VolumeKind,
    missing: &'static str,
) -> BoxStream<'static, Result<WatchEvent, ClusterError>>
where
    K: ::kube::Resource
        + k8s_openapi::Resource
        + Clone
        + serde::de::DeserializeOwned
        + std::fmt::Debug
        + Send
        + Sync
        + 'static,
    <K as ::kube::Resource>::DynamicType: Default,
    VolumeObject: From<Arc<K>>,
{
    optional_stream(
        Api::<K>::all(client.clone()),
        Kind::Volume(kind),
        |o| WatchEvent::VolumeApplied(VolumeObject::from(o)),
        |o| WatchEvent::VolumeDeleted(VolumeObject::from(o)),
        missing,
    )
}

/// The change stream of a kind served in one of several versions, or
/// none: each version is probed in turn (a list of one) and the first one
/// served is followed with its watcher from then on. While every version
/// answers 404 the kind is listed empty every [`OPTIONAL_KIND_RETRY`]
/// (logged once at info with `missing`). A probe failing otherwise (the
/// server unreachable, 5xx, 403) is reported on the stream and probing
/// starts again after a backoff, so a passing failure never picks a version
/// the server does not serve.
fn optional_versions_stream(
    kind: Kind,
    versions: Vec<OptionalVersion>,
    missing: &'static str,
) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
    let (tx, rx) = tokio::sync::mpsc::channel(1024);
    tokio::spawn(async move {
        let mut logged = false;
        let mut backoff = OPTIONAL_PROBE_BACKOFF_MIN;
        'probe: loop {
            let mut served = None;
            for v in &versions {
                match (v.probe)().await {
                    Ok(true) => {
                        served = Some(v);
                        break;
                    }
                    Ok(false) => {}
                    Err(e) => {
                        let err = ClusterError::Unavailable(format!(
                            "watching {kind} ({}): {e}",
                            v.api_version
                        ));
                        if tx.send(Err(err)).await.is_err() {
                            return;
                        }
                        tokio::select! {
                            () = tokio::time::sleep(backoff) => {}
                            () = tx.closed() => return,
                        }
                        backoff = (backoff * 2).min(OPTIONAL_PROBE_BACKOFF_MAX);
                        continue 'probe;
                    }
                }
            }
            backoff = OPTIONAL_PROBE_BACKOFF_MIN;
            let Some(v) = served else {
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
            };
            // Served: follow its watcher from now on (it retries errors
            // with backoff and relists by itself).
            if logged {
                info!(%kind, api_version = v.api_version, "now served; watching it");
            }
            let mut watch = (v.watch)();
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

/// `scheduling.k8s.io` PodGroup as served in one version: [`WorkloadPodGroup`]
/// typed for `kube`'s [`Api`], so one type per version.
trait WorkloadPodGroupVersion: k8s_openapi::Resource + Clone {
    fn into_inner(self) -> WorkloadPodGroup;
}

macro_rules! workload_pod_group_version {
    ($(#[$doc:meta])* $name:ident, $version:literal, $api_version:path) => {
        $(#[$doc])*
        #[derive(Debug, Clone, serde::Serialize, serde::Deserialize)]
        #[serde(transparent)]
        struct $name(WorkloadPodGroup);

        impl k8s_openapi::Resource for $name {
            const API_VERSION: &'static str = $api_version;
            const GROUP: &'static str = gang::WORKLOAD_GROUP;
            const KIND: &'static str = "PodGroup";
            const VERSION: &'static str = $version;
            const URL_PATH_SEGMENT: &'static str = "podgroups";
            type Scope = k8s_openapi::NamespaceResourceScope;
        }

        impl k8s_openapi::ListableResource for $name {
            const LIST_KIND: &'static str = "PodGroupList";
        }

        impl k8s_openapi::Metadata for $name {
            type Ty = ObjectMeta;

            fn metadata(&self) -> &ObjectMeta {
                &self.0.metadata
            }

            fn metadata_mut(&mut self) -> &mut ObjectMeta {
                &mut self.0.metadata
            }
        }

        impl WorkloadPodGroupVersion for $name {
            fn into_inner(self) -> WorkloadPodGroup {
                self.0
            }
        }
    };
}

workload_pod_group_version!(
    /// `scheduling.k8s.io/v1beta1` PodGroup (Kubernetes 1.37).
    PodGroupV1beta1,
    "v1beta1",
    gang::V1BETA1
);
workload_pod_group_version!(
    /// `scheduling.k8s.io/v1alpha2` PodGroup (Kubernetes 1.36).
    PodGroupV1alpha2,
    "v1alpha2",
    gang::V1ALPHA2
);

/// The [`WorkloadPodGroup`] read as `K`, with `apiVersion` and `kind` set
/// to `K`'s when the server left them out (list items do).
fn workload_pod_group<K: WorkloadPodGroupVersion>(o: Arc<K>) -> Arc<WorkloadPodGroup> {
    let mut g = Arc::unwrap_or_clone(o).into_inner();
    if g.api_version.is_empty() {
        K::API_VERSION.clone_into(&mut g.api_version);
    }
    if g.kind.is_empty() {
        K::KIND.clone_into(&mut g.kind);
    }
    Arc::new(g)
}

fn workload_pod_group_applied<K: WorkloadPodGroupVersion>(o: Arc<K>) -> WatchEvent {
    WatchEvent::WorkloadPodGroupApplied(workload_pod_group(o))
}

fn workload_pod_group_deleted<K: WorkloadPodGroupVersion>(o: Arc<K>) -> WatchEvent {
    WatchEvent::WorkloadPodGroupDeleted(workload_pod_group(o))
}

/// Logged once while neither `scheduling.k8s.io` PodGroup version is served.
const WORKLOAD_POD_GROUPS_MISSING: &str = "the scheduling.k8s.io PodGroup API (v1beta1 or v1alpha2) \
     is not served: pods naming spec.schedulingGroup wait for their PodGroup";

/// The change stream of `scheduling.k8s.io` PodGroups: `v1beta1` when
/// served, else `v1alpha2`, else none (see [`optional_versions_stream`]).
fn workload_pod_group_stream(
    client: &Client,
) -> BoxStream<'static, Result<WatchEvent, ClusterError>> {
    let kind = Kind::WorkloadPodGroup;
    optional_versions_stream(
        kind,
        vec![
            OptionalVersion::of(
                Api::<PodGroupV1beta1>::all(client.clone()),
                kind,
                workload_pod_group_applied,
                workload_pod_group_deleted,
            ),
            OptionalVersion::of(
                Api::<PodGroupV1alpha2>::all(client.clone()),
                kind,
                workload_pod_group_applied,
                workload_pod_group_deleted,
            ),
        ],
        WORKLOAD_POD_GROUPS_MISSING,
    )
}

/// `current` with `condition` in place of the one of the same type (added
/// when there is none): its `lastTransitionTime` is the old one's when the
/// status stays the same, else `now`. `None` when the current condition
/// already says so (same status, reason and message): nothing to write.
#[must_use]
pub fn pod_group_conditions_with(
    current: &[PodGroupCondition],
    condition: &PodGroupCondition,
    now: Timestamp,
) -> Option<Vec<PodGroupCondition>> {
    let old = current.iter().position(|c| c.type_ == condition.type_);
    let mut new = condition.clone();
    new.last_transition_time = Some(Time(now));
    let mut conditions = current.to_vec();
    match old {
        Some(i) => {
            let old = &conditions[i];
            if old.status == new.status {
                if old.reason == new.reason && old.message == new.message {
                    return None;
                }
                if old.last_transition_time.is_some() {
                    new.last_transition_time
                        .clone_from(&old.last_transition_time);
                }
            }
            conditions[i] = new;
        }
        None => conditions.push(new),
    }
    Some(conditions)
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
/// before every write). Starts open, without a deadline.
///
/// A leader's fence also has a deadline ([`WriteFence::open_until`]): the
/// last time the elector confirmed the lease plus the renew deadline. A
/// leader frozen past it (SIGSTOP, a hung host) writes nothing when it
/// wakes, even before its elector has run again to see that a standby took
/// the lease meanwhile: the write that checks the fence first sees the
/// deadline passed.
#[derive(Debug, Clone)]
pub struct WriteFence(Arc<FenceState>);

#[derive(Debug)]
struct FenceState {
    open: AtomicBool,
    until: parking_lot::Mutex<Option<tokio::time::Instant>>,
}

impl Default for WriteFence {
    fn default() -> Self {
        WriteFence(Arc::new(FenceState {
            open: AtomicBool::new(true),
            until: parking_lot::Mutex::new(None),
        }))
    }
}

impl WriteFence {
    /// An open fence.
    #[must_use]
    pub fn new() -> Self {
        Self::default()
    }

    /// Opens (`true`, without a deadline) or closes (`false`) the fence.
    pub fn set(&self, open: bool) {
        *self.0.until.lock() = None;
        self.0.open.store(open, Ordering::SeqCst);
    }

    /// Opens the fence until `deadline` (extended by each later call): past
    /// it writes are refused until the next call.
    pub fn open_until(&self, deadline: tokio::time::Instant) {
        *self.0.until.lock() = Some(deadline);
        self.0.open.store(true, Ordering::SeqCst);
    }

    /// Whether writes may go out.
    #[must_use]
    pub fn is_open(&self) -> bool {
        self.0.open.load(Ordering::SeqCst)
            && self
                .0
                .until
                .lock()
                .is_none_or(|u| tokio::time::Instant::now() < u)
    }

    fn check(&self) -> Result<(), ClusterError> {
        if self.is_open() {
            Ok(())
        } else {
            Err(ClusterError::Unavailable(
                "not the leader (or the lease not confirmed in time): writes are fenced off".into(),
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

    /// Writes the Events queued so far, waiting at most `within`
    /// ([`EventRecorder::flush`]): a leader stopping gracefully calls it
    /// before it gives up the lease, so its last `Scheduled` and
    /// `FailedScheduling` Events are not lost. Whether all went out.
    pub async fn flush_events(&self, within: Duration) -> bool {
        self.events.flush(within).await
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
        // Never sent: no connection could be made.
        other if never_connected(other) => {
            ClusterError::Unavailable(format!("binding {pod} to {node}: {other}"))
        }
        // Sent, and no answer read (the connection broke, the body did not
        // parse): the server may have bound the pod.
        other => ClusterError::OutcomeUnknown(format!("binding {pod} to {node}: {other}")),
    }
}

/// A PreBind volume write's error: the object not found (`<resource>
/// "<name>" not found`) or refused (409 conflict, 422 invalid, 403):
/// [`ClusterError::VolumeRejected`]; anything else may pass:
/// `Unavailable`.
fn volume_error(what: &str, resource: &str, name: &str, err: &::kube::Error) -> ClusterError {
    match err {
        ::kube::Error::Api(s) if s.code == 404 => {
            ClusterError::VolumeRejected(flotilla_shared::volumes::not_found(resource, name))
        }
        ::kube::Error::Api(s) if matches!(s.code, 403 | 409 | 422) => ClusterError::VolumeRejected(
            format!("{what}: HTTP {} {}: {}", s.code, s.reason, s.message),
        ),
        other => ClusterError::Unavailable(format!("{what}: {other}")),
    }
}

/// Whether `err` says the connection was refused or the server's name not
/// resolved: the request never left.
fn never_connected(err: &::kube::Error) -> bool {
    let mut cause: Option<&(dyn std::error::Error + 'static)> = Some(err);
    while let Some(e) = cause {
        if let Some(io) = e.downcast_ref::<std::io::Error>()
            && matches!(
                io.kind(),
                std::io::ErrorKind::ConnectionRefused | std::io::ErrorKind::NotFound
            )
        {
            return true;
        }
        cause = e.source();
    }
    false
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
        let workload_pod_groups = workload_pod_group_stream(&self.client);
        let mut streams = vec![
            namespaces,
            nodes,
            pods,
            pod_groups,
            workload_pod_groups,
            priority_classes,
            pdbs,
        ];
        streams.extend(volume_streams(&self.client));
        futures::stream::select_all(streams).boxed()
    }

    /// The Binding carries the annotations in its `metadata`: the API
    /// server sets them on the pod with `spec.nodeName` (one write).
    async fn bind(
        &self,
        pod: &PodRef,
        node: &str,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let binding = Binding {
            metadata: ObjectMeta {
                name: Some(pod.name.clone()),
                namespace: Some(pod.namespace.clone()),
                uid: (!pod.uid.is_empty()).then(|| pod.uid.clone()),
                annotations: (!annotations.is_empty()).then(|| {
                    annotations
                        .iter()
                        .map(|(k, v)| ((*k).to_owned(), v.clone()))
                        .collect()
                }),
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
        // A Binding that timed out may still be applied by the server: its
        // outcome is unknown, not failed.
        let res = self
            .timed(
                || format!("binding {pod} to {node}"),
                api.create_subresource::<_, serde_json::Value>("binding", &pod.name, &pp, &binding),
            )
            .await
            .map_err(|e| ClusterError::OutcomeUnknown(e.to_string()))?;
        // Leadership lost while the request was out: the answer does not
        // matter any more, and nothing may follow it.
        self.fence.check()?;
        res.map(|_| ()).map_err(|e| bind_error(pod, node, &e))
    }

    /// GET the PV, then PUT it with the `claimRef` (guarded by the
    /// resourceVersion read: a PV changed meanwhile is a conflict, never
    /// overwritten). Needs `get` and `update` on persistentvolumes.
    async fn bind_pv(&self, pv: &str, claim: &ClaimTarget<'_>) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let api: Api<PersistentVolume> = Api::all(self.client.clone());
        let what = || {
            format!(
                "binding persistentvolume {pv} to claim {}/{}",
                claim.namespace, claim.name
            )
        };
        let current = self
            .timed(what, api.get(pv))
            .await?
            .map_err(|e| volume_error(&what(), "persistentvolume", pv, &e))?;
        let Some(updated) =
            pv_controller::with_claim_ref(&current, claim).map_err(ClusterError::VolumeRejected)?
        else {
            return Ok(());
        };
        self.fence.check()?;
        self.timed(what, api.replace(pv, &PostParams::default(), &updated))
            .await?
            .map(|_| ())
            .map_err(|e| volume_error(&what(), "persistentvolume", pv, &e))
    }

    /// A merge patch of the annotation. Needs `patch` on
    /// persistentvolumeclaims.
    async fn select_node(
        &self,
        namespace: &str,
        name: &str,
        node: &str,
    ) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let api: Api<PersistentVolumeClaim> = Api::namespaced(self.client.clone(), namespace);
        let what = || format!("selecting node {node} for persistentvolumeclaim {namespace}/{name}");
        let patch = serde_json::json!({
            "metadata": { "annotations": { (ANNOTATION_SELECTED_NODE): node } }
        });
        self.timed(
            what,
            api.patch(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?
        .map(|_| ())
        .map_err(|e| volume_error(&what(), "persistentvolumeclaim", name, &e))
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

    async fn set_workload_pod_group_condition(
        &self,
        group: &WorkloadPodGroup,
        condition: &PodGroupCondition,
    ) -> Result<(), ClusterError> {
        self.fence.check()?;
        let Some(conditions) =
            pod_group_conditions_with(&group.status.conditions, condition, Timestamp::now())
        else {
            return Ok(());
        };
        let ns = group
            .metadata
            .namespace
            .as_deref()
            .unwrap_or(flotilla_shared::objects::DEFAULT_NAMESPACE);
        let name = group.metadata.name.as_deref().unwrap_or_default();
        let api_version = if group.api_version.is_empty() {
            gang::V1BETA1
        } else {
            group.api_version.as_str()
        };
        let what = || format!("patching podgroup {api_version} {ns}/{name} status");
        let (group_name, version) = api_version.split_once('/').unwrap_or(("", api_version));
        let resource = ApiResource::from_gvk_with_plural(
            &GroupVersionKind::gvk(group_name, version, "PodGroup"),
            "podgroups",
        );
        let _in_flight = self.throttle().await;
        let api = Api::<DynamicObject>::namespaced_with(self.client.clone(), ns, &resource);
        // A merge patch replaces a list whole: every condition is sent,
        // guarded by the resourceVersion they were read at, so a condition
        // another writer set meanwhile is never dropped (the conflict is
        // logged; the object's change comes back through the watch and the
        // coordinator writes again).
        let mut patch = serde_json::json!({ "status": { "conditions": conditions } });
        if let Some(rv) = &group.metadata.resource_version {
            patch["metadata"] = serde_json::json!({ "resourceVersion": rv });
        }
        self.timed(
            what,
            api.patch_status(name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?
        .map(|_| ())
        .map_err(|e| ClusterError::Unavailable(format!("{}: {e}", what())))
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

    /// A merge patch of `metadata.annotations`; the patch's
    /// `metadata.uid` makes the API server refuse it (409) for another pod
    /// of the same name.
    async fn annotate_pod(
        &self,
        pod: &PodRef,
        annotations: &[(&str, String)],
    ) -> Result<(), ClusterError> {
        self.fence.check()?;
        let _in_flight = self.throttle().await;
        let api: Api<Pod> = Api::namespaced(self.client.clone(), &pod.namespace);
        let values: serde_json::Map<String, serde_json::Value> = annotations
            .iter()
            .map(|(k, v)| ((*k).to_owned(), serde_json::Value::from(v.as_str())))
            .collect();
        let mut metadata = serde_json::json!({ "annotations": values });
        if !pod.uid.is_empty() {
            metadata["uid"] = serde_json::Value::from(pod.uid.as_str());
        }
        let patch = serde_json::json!({ "metadata": metadata });
        self.timed(
            || format!("annotating {pod}"),
            api.patch(&pod.name, &PatchParams::default(), &Patch::Merge(&patch)),
        )
        .await?
        .map(|_| ())
        .map_err(|e| match &e {
            // The uid in the patch is not the pod's: a namesake.
            ::kube::Error::Api(s) if s.code == 409 => ClusterError::PodNotFound(pod.to_string()),
            _ => write_error("annotating", pod, &e),
        })
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

/// `<pod>.<unix nanoseconds in hex>` of the time `ev` happened, as
/// upstream's recorders name Events: the same for every try of it.
fn event_name(ev: &SchedulingEvent) -> String {
    format!("{}.{:x}", ev.pod.name, ev.at.as_nanosecond())
}

/// The `events.k8s.io/v1` Event for `ev`.
#[must_use]
pub fn events_v1_event(ev: &SchedulingEvent, reporting_instance: &str) -> EventsV1Event {
    EventsV1Event {
        metadata: ObjectMeta {
            name: Some(event_name(ev)),
            namespace: Some(ev.pod.namespace.clone()),
            ..ObjectMeta::default()
        },
        event_time: Some(MicroTime(ev.at)),
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
pub fn core_v1_event(ev: &SchedulingEvent) -> CoreEvent {
    CoreEvent {
        metadata: ObjectMeta {
            name: Some(event_name(ev)),
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
        first_timestamp: Some(Time(ev.at)),
        last_timestamp: Some(Time(ev.at)),
        count: Some(1),
        ..CoreEvent::default()
    }
}

#[tonic::async_trait]
impl EventWriter for KubeEventWriter {
    async fn write(&self, ev: &SchedulingEvent) -> Result<(), ClusterError> {
        self.fence.check()?;
        let pp = PostParams::default();
        let ns = &ev.pod.namespace;
        let res = if self.events_v1 {
            let api: Api<EventsV1Event> = Api::namespaced(self.client.clone(), ns);
            let e = events_v1_event(ev, &self.reporting_instance);
            tokio::time::timeout(self.timeout, api.create(&pp, &e))
                .await
                .map(|r| r.map(|_| ()))
        } else {
            let api: Api<CoreEvent> = Api::namespaced(self.client.clone(), ns);
            let e = core_v1_event(ev);
            tokio::time::timeout(self.timeout, api.create(&pp, &e))
                .await
                .map(|r| r.map(|_| ()))
        };
        match res {
            Ok(Ok(())) => Ok(()),
            // An earlier try of this Event landed though its answer was
            // lost (its name is fixed): written, as upstream's recorder
            // takes it. Only AlreadyExists (upstream's `IsAlreadyExists`
            // reads the reason): another 409 (a webhook's Conflict, a
            // proxy's page) is no proof that the Event exists.
            Ok(Err(::kube::Error::Api(s))) if s.is_already_exists() => Ok(()),
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

/// `scheduling.k8s.io` PodGroups against a mock API server: the version
/// probe, the list without `apiVersion`, none served, the condition patch.
#[cfg(test)]
mod workload_pod_group_tests {
    use std::pin::pin;

    use ::kube::client::Body;
    use http::{Request, Response, StatusCode};
    use serde_json::{Value, json};
    use tower_test::mock;

    use super::*;
    use crate::cluster::events::EventLimits;

    type Handle = mock::Handle<Request<Body>, Response<Body>>;

    fn respond(code: u16, body: &Value) -> Response<Body> {
        Response::builder()
            .status(StatusCode::from_u16(code).expect("valid code"))
            .header("content-type", "application/json")
            .body(Body::from(serde_json::to_vec(body).expect("json")))
            .expect("response")
    }

    fn not_found() -> (u16, Value) {
        (
            404,
            json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                   "message": "the server could not find the requested resource",
                   "reason": "NotFound", "code": 404}),
        )
    }

    /// A request as the mock saw it.
    #[derive(Debug, Clone)]
    struct Seen {
        method: String,
        path: String,
        query: String,
        content_type: String,
        body: Value,
    }

    /// Answers every request with `route`, recording it; a watch request
    /// is held open (answered with an empty stream that never ends).
    fn serve(
        handle: Handle,
        route: impl Fn(&Seen) -> (u16, Value) + Send + 'static,
    ) -> (
        tokio::task::JoinHandle<()>,
        std::sync::Arc<parking_lot::Mutex<Vec<Seen>>>,
    ) {
        let log = std::sync::Arc::new(parking_lot::Mutex::new(Vec::new()));
        let seen = log.clone();
        let task = tokio::spawn(async move {
            let mut handle = pin!(handle);
            let mut open_watches = Vec::new();
            while let Some((req, send)) = handle.next_request().await {
                let (parts, body) = req.into_parts();
                let bytes = http_body_util::BodyExt::collect(body)
                    .await
                    .expect("body")
                    .to_bytes();
                let s = Seen {
                    method: parts.method.to_string(),
                    path: parts.uri.path().to_owned(),
                    query: parts.uri.query().unwrap_or_default().to_owned(),
                    content_type: parts
                        .headers
                        .get("content-type")
                        .and_then(|v| v.to_str().ok())
                        .unwrap_or_default()
                        .to_owned(),
                    body: if bytes.is_empty() {
                        Value::Null
                    } else {
                        serde_json::from_slice(&bytes).expect("JSON body")
                    },
                };
                seen.lock().push(s.clone());
                if s.query.contains("watch=true") {
                    // Never answered: the watch stays open.
                    open_watches.push(send);
                    continue;
                }
                let (code, body) = route(&s);
                send.send_response(respond(code, &body));
            }
        });
        (task, log)
    }

    fn client() -> (Client, Handle) {
        let (svc, handle) = mock::pair::<Request<Body>, Response<Body>>();
        (Client::new(svc, "default"), handle)
    }

    async fn next(
        s: &mut BoxStream<'static, Result<WatchEvent, ClusterError>>,
    ) -> Result<WatchEvent, ClusterError> {
        next_within(s, Duration::from_secs(5)).await
    }

    async fn next_within(
        s: &mut BoxStream<'static, Result<WatchEvent, ClusterError>>,
        wait: Duration,
    ) -> Result<WatchEvent, ClusterError> {
        tokio::time::timeout(wait, s.next())
            .await
            .expect("an event in time")
            .expect("stream open")
    }

    fn pod_group_list(api_version: &str, items: &[Value]) -> Value {
        json!({"kind": "PodGroupList", "apiVersion": api_version,
               "metadata": {"resourceVersion": "7"}, "items": items})
    }

    #[tokio::test]
    async fn the_first_served_version_is_watched_and_its_objects_carry_it() {
        let (client, handle) = client();
        let (server, log) = serve(handle, |s| match s.path.as_str() {
            "/apis/scheduling.k8s.io/v1beta1/podgroups" => not_found(),
            "/apis/scheduling.k8s.io/v1alpha2/podgroups" => (
                200,
                // Items of a built-in list have no apiVersion or kind.
                pod_group_list(
                    "scheduling.k8s.io/v1alpha2",
                    &[
                        json!({"metadata": {"name": "w", "namespace": "ml", "resourceVersion": "6"},
                             "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}}}),
                    ],
                ),
            ),
            _ => not_found(),
        });
        let mut s = workload_pod_group_stream(&client);
        assert!(matches!(
            next(&mut s).await,
            Ok(WatchEvent::Relisting(Kind::WorkloadPodGroup))
        ));
        let Ok(WatchEvent::WorkloadPodGroupApplied(g)) = next(&mut s).await else {
            panic!("the group")
        };
        assert_eq!(
            g.api_version,
            gang::V1ALPHA2,
            "filled from the version read"
        );
        assert_eq!(g.kind, "PodGroup");
        assert_eq!(g.key(), "podgroups.scheduling.k8s.io/ml/w");
        assert_eq!(g.min_count(), Ok(Some(2)));
        assert!(matches!(
            next(&mut s).await,
            Ok(WatchEvent::Listed(Kind::WorkloadPodGroup))
        ));
        let paths: Vec<(String, String)> = log
            .lock()
            .iter()
            .map(|s| (s.path.clone(), s.query.clone()))
            .collect();
        assert_eq!(paths[0].0, "/apis/scheduling.k8s.io/v1beta1/podgroups");
        assert!(paths[0].1.contains("limit=1"), "{paths:?}");
        assert_eq!(paths[1].0, "/apis/scheduling.k8s.io/v1alpha2/podgroups");
        assert!(paths[1].1.contains("limit=1"), "{paths:?}");
        assert!(
            paths[2..]
                .iter()
                .all(|(p, _)| p == "/apis/scheduling.k8s.io/v1alpha2/podgroups"),
            "only the served version is followed: {paths:?}"
        );
        drop(s);
        drop(client);
        server.abort();
    }

    #[tokio::test]
    async fn v1beta1_wins_when_served() {
        let (client, handle) = client();
        let (server, log) = serve(handle, |s| match s.path.as_str() {
            "/apis/scheduling.k8s.io/v1beta1/podgroups" => (
                200,
                pod_group_list(
                    "scheduling.k8s.io/v1beta1",
                    &[
                        json!({"apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
                             "metadata": {"name": "b", "namespace": "ml"},
                             "spec": {"schedulingPolicy": {"basic": {}}}}),
                    ],
                ),
            ),
            _ => not_found(),
        });
        let mut s = workload_pod_group_stream(&client);
        assert!(matches!(next(&mut s).await, Ok(WatchEvent::Relisting(_))));
        let Ok(WatchEvent::WorkloadPodGroupApplied(g)) = next(&mut s).await else {
            panic!("the group")
        };
        assert_eq!(g.api_version, gang::V1BETA1);
        assert_eq!(g.min_count(), Ok(None), "basic");
        assert!(
            log.lock().iter().all(|s| !s.path.contains("v1alpha2")),
            "v1alpha2 is not asked"
        );
        drop(s);
        server.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn neither_version_served_lists_none_and_checks_again() {
        let (client, handle) = client();
        let (server, log) = serve(handle, |_| not_found());
        let mut s = workload_pod_group_stream(&client);
        for _ in 0..2 {
            assert!(matches!(
                next_within(&mut s, OPTIONAL_KIND_RETRY * 2).await,
                Ok(WatchEvent::Relisting(Kind::WorkloadPodGroup))
            ));
            assert!(matches!(
                next_within(&mut s, OPTIONAL_KIND_RETRY * 2).await,
                Ok(WatchEvent::Listed(Kind::WorkloadPodGroup))
            ));
        }
        let paths: Vec<String> = log.lock().iter().map(|s| s.path.clone()).collect();
        assert_eq!(
            paths,
            [
                "/apis/scheduling.k8s.io/v1beta1/podgroups",
                "/apis/scheduling.k8s.io/v1alpha2/podgroups",
                "/apis/scheduling.k8s.io/v1beta1/podgroups",
                "/apis/scheduling.k8s.io/v1alpha2/podgroups",
            ],
            "both probed, then again after OPTIONAL_KIND_RETRY"
        );
        drop(s);
        server.abort();
    }

    #[tokio::test(start_paused = true)]
    async fn a_failed_probe_is_reported_and_probing_starts_over() {
        let (client, handle) = client();
        let calls = std::sync::Arc::new(std::sync::atomic::AtomicUsize::new(0));
        let n = calls.clone();
        let (server, _log) = serve(handle, move |s| {
            // The first answer is a 503; v1beta1 is not served, v1alpha2 is.
            if n.fetch_add(1, std::sync::atomic::Ordering::SeqCst) == 0 {
                return (
                    503,
                    json!({"kind": "Status", "apiVersion": "v1", "metadata": {},
                           "status": "Failure", "message": "etcd is down",
                           "reason": "ServiceUnavailable", "code": 503}),
                );
            }
            match s.path.as_str() {
                "/apis/scheduling.k8s.io/v1alpha2/podgroups" => {
                    (200, pod_group_list("scheduling.k8s.io/v1alpha2", &[]))
                }
                _ => not_found(),
            }
        });
        let mut s = workload_pod_group_stream(&client);
        match next(&mut s).await {
            Err(ClusterError::Unavailable(m)) => {
                assert!(m.contains("scheduling.k8s.io/v1beta1"), "{m}");
            }
            other => panic!("the failure, got {other:?}"),
        }
        assert!(matches!(next(&mut s).await, Ok(WatchEvent::Relisting(_))));
        assert!(matches!(next(&mut s).await, Ok(WatchEvent::Listed(_))));
        drop(s);
        server.abort();
    }

    fn cluster(handle_client: Client) -> KubeCluster {
        let options = KubeOptions {
            events: EventLimits::default(),
            request_timeout: Duration::from_secs(5),
            reporting_instance: "flotilla.io/scheduler-test".into(),
            fence: WriteFence::new(),
            write_limit: None,
            concurrent_writes: DEFAULT_CONCURRENT_WRITES,
        };
        let info = ServerInfo {
            version: "v1.36.0".into(),
            events_v1: true,
            scheduling_gates: true,
        };
        KubeCluster::new(handle_client, info, options)
    }

    fn condition(
        type_: &str,
        status: &str,
        reason: &str,
        message: &str,
        ltt: Option<&str>,
    ) -> PodGroupCondition {
        PodGroupCondition {
            type_: type_.into(),
            status: status.into(),
            reason: reason.into(),
            message: message.into(),
            last_transition_time: ltt.map(|t| Time(t.parse().expect("a timestamp"))),
        }
    }

    #[test]
    fn the_condition_replaces_its_type_and_keeps_its_transition_time() {
        let now: Timestamp = "2026-11-02T00:00:00Z".parse().unwrap();
        let t0 = "2026-11-01T00:00:00Z";
        let current = [
            condition("Other", "True", "X", "", Some(t0)),
            condition("PodGroupScheduled", "False", "Unschedulable", "a", Some(t0)),
        ];
        // Same status, new message: replaced in place, time kept.
        let got = pod_group_conditions_with(
            &current,
            &condition("PodGroupScheduled", "False", "Unschedulable", "b", None),
            now,
        )
        .expect("a change");
        assert_eq!(got.len(), 2);
        assert_eq!(got[0], current[0]);
        assert_eq!(got[1].message, "b");
        assert_eq!(got[1].last_transition_time, current[1].last_transition_time);
        // New status: the time is now.
        let got = pod_group_conditions_with(
            &current,
            &condition("PodGroupScheduled", "True", "Scheduled", "", None),
            now,
        )
        .expect("a change");
        assert_eq!(got[1].status, "True");
        assert_eq!(got[1].last_transition_time, Some(Time(now)));
        // Already so: nothing to write.
        assert_eq!(
            pod_group_conditions_with(
                &current,
                &condition("PodGroupScheduled", "False", "Unschedulable", "a", None),
                now,
            ),
            None
        );
        // No condition of that type yet: added.
        let got = pod_group_conditions_with(
            &current[..1],
            &condition("PodGroupScheduled", "False", "Unschedulable", "a", None),
            now,
        )
        .expect("a change");
        assert_eq!(got.len(), 2);
        assert_eq!(got[1].last_transition_time, Some(Time(now)));
    }

    #[tokio::test]
    async fn the_condition_is_merge_patched_whole_in_the_objects_version() {
        let (client, handle) = client();
        let (server, log) = serve(handle, |_| {
            (
                200,
                json!({"apiVersion": "scheduling.k8s.io/v1alpha2",
            "kind": "PodGroup", "metadata": {"name": "w", "namespace": "ml"}}),
            )
        });
        let c = cluster(client);
        let group: WorkloadPodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1alpha2", "kind": "PodGroup",
            "metadata": {"name": "w", "namespace": "ml"},
            "spec": {"schedulingPolicy": {"gang": {"minCount": 2}}},
            "status": {"conditions": [{"type": "Other", "status": "True", "reason": "X",
                       "message": "", "lastTransitionTime": "2026-11-01T00:00:00Z"}]},
        }))
        .unwrap();
        let cond = condition(group.condition_type(), "True", "Scheduled", "", None);
        c.set_workload_pod_group_condition(&group, &cond)
            .await
            .expect("patched");
        let seen = log.lock().clone();
        assert_eq!(seen.len(), 1);
        let s = &seen[0];
        assert_eq!(s.method, "PATCH");
        assert_eq!(
            s.path,
            "/apis/scheduling.k8s.io/v1alpha2/namespaces/ml/podgroups/w/status"
        );
        assert_eq!(s.content_type, "application/merge-patch+json");
        let conditions = &s.body["status"]["conditions"];
        assert_eq!(conditions[0]["type"], "Other", "{conditions}");
        assert_eq!(conditions[1]["type"], "PodGroupScheduled");
        assert_eq!(conditions[1]["status"], "True");
        assert_eq!(conditions[1]["reason"], "Scheduled");
        assert!(
            conditions[1]["lastTransitionTime"].is_string(),
            "{conditions}"
        );
        assert_eq!(conditions.as_array().map(Vec::len), Some(2));
        drop(c);
        server.abort();
    }

    #[tokio::test]
    async fn a_failed_condition_patch_names_the_object() {
        let (client, handle) = client();
        let (server, _log) = serve(handle, |_| {
            (
                500,
                json!({"kind": "Status", "apiVersion": "v1", "metadata": {}, "status": "Failure",
                       "message": "boom", "reason": "InternalError", "code": 500}),
            )
        });
        let c = cluster(client);
        let group: WorkloadPodGroup = serde_json::from_value(json!({
            "apiVersion": "scheduling.k8s.io/v1beta1", "kind": "PodGroup",
            "metadata": {"name": "w", "namespace": "ml"},
        }))
        .unwrap();
        let cond = condition(
            group.condition_type(),
            "False",
            "Unschedulable",
            "no room",
            None,
        );
        match c.set_workload_pod_group_condition(&group, &cond).await {
            Err(ClusterError::Unavailable(m)) => {
                assert!(m.contains("scheduling.k8s.io/v1beta1 ml/w"), "{m}");
                assert!(m.contains("boom"), "{m}");
            }
            other => panic!("Unavailable, got {other:?}"),
        }
        // A closed fence stops the write before it leaves.
        let fenced = KubeCluster {
            fence: {
                let f = WriteFence::new();
                f.set(false);
                f
            },
            ..c
        };
        assert!(matches!(
            fenced.set_workload_pod_group_condition(&group, &cond).await,
            Err(ClusterError::Unavailable(m)) if m.contains("not the leader")
        ));
        server.abort();
    }
}
