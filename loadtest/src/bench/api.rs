//! `flotilla bench --kubeconfig`: a scenario against a real API server, and
//! optionally the same scenario again under upstream kube-scheduler, side
//! by side.
//!
//! One run (per scheduler):
//!
//! 1. Create the scenario's Nodes (`fb-<run>-<name>`, label
//!    [`RUN_LABEL`]`=<run>`, the hostname label following the new name),
//!    then its Pods (each of the scenario's namespaces becomes
//!    `fb-<run>-<namespace>`, created first; pods carry [`RUN_LABEL`] and
//!    the `schedulerName` of the scheduler under test, and a `nodeSelector`
//!    on [`RUN_LABEL`], so they land on the run's nodes only, never on a
//!    real node of the cluster). Creation is done before the scheduler
//!    starts and is not measured.
//! 2. Watch the run's pods (label selector) and wait for the initial list.
//! 3. Read the API server's `apiserver_request_total` (`/metrics`).
//! 4. Start the scheduler: Flotilla's coordinator over the `kube` backend
//!    with in-process workers (as `flotilla run --kubeconfig`), or exec
//!    kube-scheduler. The clock starts here.
//! 5. Every pod bound (seen on the watch) stops the clock; then wait until
//!    the server's write counters settle (no mutating request for 1 s, at
//!    most 10 s: Events lag the Bindings in both schedulers) and read the
//!    counters again. The difference of the mutating verbs (POST, PUT,
//!    PATCH, DELETE, …) over the pod count is the API writes per pod: the
//!    same neutral measure for both schedulers, since nothing else writes
//!    in that window.
//! 6. Stop the scheduler, check the placement (every pod on a node of the
//!    run, no node over its allocatable cpu, memory or pod count, one
//!    successful Binding per pod), and clean up: pods deleted with grace 0,
//!    nodes deleted, namespaces deleted without waiting (there is no
//!    namespace controller in a bare API server).
//!
//! Only scenarios without a timeline, PriorityClasses, budgets or
//! PodGroups run here; their init pods are created with the others and
//! measured with them (no barrier: everything is created first).

use std::collections::{BTreeMap, BTreeSet, HashMap};
use std::fmt::Write as _;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures::StreamExt as _;
use k8s_openapi::api::core::v1::{Namespace, Node, Pod};
use kube::Client;
use kube::api::{Api, DeleteParams, ListParams, PostParams};
use kube::runtime::watcher::{self, Event as WatcherEvent};
use serde::Serialize;
use tokio_util::sync::CancellationToken;

use flotilla_coordinator::cluster::events::EventLimits;
use flotilla_coordinator::cluster::kube::{KubeCluster, KubeOptions};
use flotilla_coordinator::cluster::ratelimit::RateLimit;
use flotilla_scheduler::config::SchedulerConfig;
use flotilla_shared::pod_info::DEFAULT_SCHEDULER_NAME;
use flotilla_shared::quantity::milli_value;

use super::LatencyMs;
use super::measure::{self, Throughput};
use super::scenarios::Scenario;
use crate::live;
use crate::workload::LABEL_HOSTNAME;

/// Label on every Node and Pod a run creates; its value is the run id.
pub const RUN_LABEL: &str = "flotilla.io/bench-run";

/// Objects created at once.
const CREATE_CONCURRENCY: usize = 16;

/// kube-scheduler's defaults for `--kube-api-qps` / `--kube-api-burst`,
/// which the API bench uses unless told otherwise.
pub const DEFAULT_LIMIT: RateLimit = RateLimit {
    qps: 50.0,
    burst: 100,
};

/// Upstream kube-scheduler, run after Flotilla on the same server.
#[derive(Debug, Clone)]
pub struct UpstreamScheduler {
    /// The `kube-scheduler` binary.
    pub binary: PathBuf,
    /// The kubeconfig it uses (`--kubeconfig`).
    pub kubeconfig: PathBuf,
}

/// How to run an API benchmark.
#[derive(Clone)]
pub struct ApiBenchConfig {
    /// The client for the bench's own requests (creation, watch, metrics,
    /// cleanup: never limited) and for Flotilla's backend.
    pub client: Client,
    /// The server URL (messages).
    pub url: String,
    /// Flotilla workers in process.
    pub workers: usize,
    /// Client-side limit on the schedulers' writes; `None`: Flotilla
    /// unlimited (not allowed with [`ApiBenchConfig::upstream`]).
    pub limit: Option<RateLimit>,
    /// Give up on a run after this long.
    pub timeout: Duration,
    /// Flotilla's configuration: pods get its first profile's
    /// `schedulerName`.
    pub scheduler: SchedulerConfig,
    /// Run kube-scheduler too.
    pub upstream: Option<UpstreamScheduler>,
    /// Progress lines on stderr.
    pub progress: bool,
    /// How Flotilla is started against the server: the `flotilla` binary
    /// passes its deployed process (what `run --kubeconfig` runs).
    pub flotilla: StartFlotilla,
}

/// What [`StartFlotilla`] is given for one run.
pub struct FlotillaStart {
    /// The backend, connected with the run's write limits.
    pub cluster: Arc<KubeCluster>,
    /// Workers in process.
    pub workers: usize,
    /// The configuration.
    pub scheduler: SchedulerConfig,
    /// Cancelled when the bench has seen every pod bound (or gave up):
    /// Flotilla drains, stops and reports.
    pub stop: CancellationToken,
}

/// Runs Flotilla against [`FlotillaStart::cluster`] until
/// [`FlotillaStart::stop`], then its report; `Err` names why it could not
/// run.
pub type StartFlotilla = Arc<
    dyn Fn(FlotillaStart) -> futures::future::BoxFuture<'static, Result<live::LiveReport, String>>
        + Send
        + Sync,
>;

/// Why an API benchmark could not run.
#[derive(Debug, thiserror::Error)]
pub enum ApiBenchError {
    /// The scenario changes the cluster while it runs, or needs objects
    /// the API bench does not create.
    #[error("scenario {0} cannot run against an API server: {1}")]
    Unsupported(String, &'static str),
    /// Comparing needs the same finite limit on both.
    #[error(
        "--upstream-scheduler needs a client limit (--qps > 0): kube-scheduler has no unlimited setting"
    )]
    UpstreamNeedsLimit,
    /// An API request failed.
    #[error("{what}: {source}")]
    Api {
        /// What was being done.
        what: String,
        /// Cause.
        #[source]
        source: kube::Error,
    },
    /// Flotilla could not start or stopped with an error.
    #[error("Flotilla: {0}")]
    Flotilla(String),
    /// Flotilla could not reach the server.
    #[error("connecting: {0}")]
    Connect(String),
    /// kube-scheduler could not be started or stopped early.
    #[error("kube-scheduler: {0}")]
    Upstream(String),
}

fn api_err(what: impl Into<String>) -> impl FnOnce(kube::Error) -> ApiBenchError {
    let what = what.into();
    move |source| ApiBenchError::Api { what, source }
}

/// Safety checks of one run, read back from the server.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiChecks {
    /// Nodes whose bound pods request more than allocatable cpu, memory or
    /// pods. Must be 0.
    pub overcommitted_nodes: usize,
    /// Pods bound, read back after the run.
    pub pods_bound: usize,
    /// Pods bound to a node the run did not create. Must be 0.
    pub pods_on_foreign_nodes: usize,
    /// `POST pods/binding` answered 2xx (API server metrics). Equals
    /// `podsBound` when every pod was bound exactly once.
    pub bindings_created: u64,
    /// `POST pods/binding` refused (409: already bound, and other codes).
    pub bindings_refused: u64,
}

/// What a run left behind after its cleanup.
#[derive(Debug, Clone, Default, PartialEq, Eq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct Cleanup {
    /// The run's pods still listed.
    pub pods_left: usize,
    /// The run's nodes still listed.
    pub nodes_left: usize,
    /// Namespaces deleted (they may stay `Terminating` without a namespace
    /// controller; they hold nothing).
    pub namespaces: Vec<String>,
}

/// One scheduler's figures.
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct SchedulerRun {
    /// `flotilla` or `kube-scheduler`.
    pub scheduler: String,
    /// The pods' `schedulerName`.
    pub scheduler_name: String,
    /// The run id (in names and [`RUN_LABEL`]).
    pub run_id: String,
    /// Pods bound when the clock stopped.
    pub scheduled: usize,
    /// Pods not bound (only after a timeout).
    pub pending: usize,
    /// Pods bound per second, from the scheduler's start to the last
    /// Binding seen.
    pub pods_per_second_avg: f64,
    /// The busiest window, pods per second.
    pub pods_per_second_peak: f64,
    /// Pods per second from the first Binding seen to the last (start-up
    /// and cache sync left out).
    pub pods_per_second_after_first_bind: f64,
    /// Seconds from start to the first Binding seen.
    pub seconds_to_first_bind: f64,
    /// Seconds from start to the last.
    pub seconds_to_all_bound: f64,
    /// Windows over the run.
    pub throughput: Throughput,
    /// First seen pending → Binding written (Flotilla's own records;
    /// `None` for kube-scheduler).
    pub latency_ms: Option<LatencyMs>,
    /// Mutating requests the API server counted in the window, per pod.
    pub api_writes_per_pod: f64,
    /// Those requests by `VERB resource[/subresource]`.
    pub api_writes: BTreeMap<String, u64>,
    /// Writes the scheduler counted itself, per pod (Flotilla's
    /// coordinator; `None` for kube-scheduler).
    pub own_api_writes_per_pod: Option<f64>,
    /// Flotilla's Event pipeline (recorded, written, dropped...; `None`
    /// for kube-scheduler).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub events: Option<live::EventReport>,
    /// kube-scheduler's `scheduler_schedule_attempts_total` by result
    /// (`None` for Flotilla).
    #[serde(skip_serializing_if = "Option::is_none")]
    pub schedule_attempts: Option<BTreeMap<String, f64>>,
    /// Safety checks.
    pub checks: ApiChecks,
    /// What was left after cleanup.
    pub cleanup: Cleanup,
    /// Whether the run hit its timeout.
    pub timed_out: bool,
}

impl SchedulerRun {
    /// What failed, if a safety invariant does not hold.
    #[must_use]
    pub fn violation(&self) -> Option<String> {
        let c = &self.checks;
        (c.overcommitted_nodes > 0
            || c.pods_on_foreign_nodes > 0
            || c.bindings_created != c.pods_bound as u64)
            .then(|| {
                format!(
                    "{}: {} over-committed node(s), {} pod(s) on foreign nodes, {} Binding(s) \
                     created for {} pod(s) bound",
                    self.scheduler,
                    c.overcommitted_nodes,
                    c.pods_on_foreign_nodes,
                    c.bindings_created,
                    c.pods_bound
                )
            })
    }
}

/// An API benchmark's figures (`--output json`: this object, camelCase
/// keys; Flotilla's figures at the top level as in the embedded bench,
/// kube-scheduler's under `upstream`).
#[derive(Debug, Clone, PartialEq, Serialize)]
#[serde(rename_all = "camelCase")]
pub struct ApiBenchReport {
    /// Scenario name.
    pub scenario: String,
    /// Its shape, after scaling.
    pub description: String,
    /// `api-server`.
    pub mode: String,
    /// The API server's `gitVersion`.
    pub server_version: String,
    /// Flotilla's in-process workers.
    pub workers: usize,
    /// Nodes created per run.
    pub nodes: usize,
    /// Pods created (and measured) per run.
    pub pods: usize,
    /// Client QPS of both schedulers (`None`: Flotilla unlimited).
    pub qps: Option<f64>,
    /// Client burst of both schedulers.
    pub burst: Option<u32>,
    /// Flotilla's run.
    #[serde(flatten)]
    pub flotilla: SchedulerRun,
    /// kube-scheduler's run, when compared.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub upstream: Option<SchedulerRun>,
    /// Flotilla's pods/s over kube-scheduler's.
    #[serde(skip_serializing_if = "Option::is_none")]
    pub speedup: Option<f64>,
    /// Seconds for everything, creation and cleanup included.
    pub wall_seconds: f64,
}

/// The objects of one run, renamed.
struct RunObjects {
    id: String,
    nodes: Vec<Node>,
    namespaces: Vec<String>,
    pods: Vec<Pod>,
    /// Node name → (milli-cpu, memory milli-bytes, pods) allocatable.
    allocatable: HashMap<String, [i64; 3]>,
}

fn run_id(tag: &str) -> String {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos());
    #[allow(clippy::cast_possible_truncation)]
    let mix = (nanos as u64) ^ (u64::from(std::process::id()) << 40);
    format!("{:06x}{tag}", mix & 0xff_ffff)
}

fn quantity(
    map: Option<&BTreeMap<String, k8s_openapi::apimachinery::pkg::api::resource::Quantity>>,
    key: &str,
) -> i64 {
    map.and_then(|m| m.get(key))
        .and_then(|q| milli_value(&q.0).ok())
        .unwrap_or(0)
}

/// A pod's requests: milli-cpu, memory milli-bytes, 1 pod.
fn requests(p: &Pod) -> [i64; 3] {
    let mut r = [0, 0, 1];
    for c in p.spec.iter().flat_map(|s| &s.containers) {
        let req = c.resources.as_ref().and_then(|r| r.requests.as_ref());
        r[0] += quantity(req, "cpu");
        r[1] += quantity(req, "memory");
    }
    r
}

fn objects(scenario: &Scenario, tag: &str, scheduler_name: &str) -> RunObjects {
    let id = run_id(tag);
    let prefix = format!("fb-{id}");
    let mut allocatable = HashMap::new();
    let nodes = scenario
        .workload
        .nodes
        .iter()
        .map(|n| {
            let mut n = n.clone();
            let name = format!("{prefix}-{}", n.metadata.name.as_deref().unwrap_or("node"));
            n.metadata.name = Some(name.clone());
            n.metadata.uid = None;
            n.metadata.resource_version = None;
            let labels = n.metadata.labels.get_or_insert_with(BTreeMap::new);
            labels.insert(RUN_LABEL.to_owned(), id.clone());
            labels.insert(LABEL_HOSTNAME.to_owned(), name.clone());
            let alloc = n.status.as_ref().and_then(|s| s.allocatable.as_ref());
            let pods = quantity(alloc, "pods") / 1000;
            allocatable.insert(
                name,
                [quantity(alloc, "cpu"), quantity(alloc, "memory"), pods],
            );
            n
        })
        .collect();
    let mut namespaces = BTreeSet::new();
    let pods = scenario
        .workload
        .pods
        .iter()
        .map(|p| {
            let mut p = p.clone();
            let ns = format!(
                "{prefix}-{}",
                p.metadata.namespace.as_deref().unwrap_or("default")
            );
            namespaces.insert(ns.clone());
            p.metadata.namespace = Some(ns);
            p.metadata.uid = None;
            p.metadata.resource_version = None;
            p.metadata
                .labels
                .get_or_insert_with(BTreeMap::new)
                .insert(RUN_LABEL.to_owned(), id.clone());
            if let Some(spec) = p.spec.as_mut() {
                spec.scheduler_name = Some(scheduler_name.to_owned());
                spec.node_name = None;
                // Only the run's nodes: never a real node of the cluster.
                spec.node_selector
                    .get_or_insert_with(BTreeMap::new)
                    .insert(RUN_LABEL.to_owned(), id.clone());
            }
            p.status = None;
            p
        })
        .collect();
    RunObjects {
        id,
        nodes,
        namespaces: namespaces.into_iter().collect(),
        pods,
        allocatable,
    }
}

/// Creates `items` with up to [`CREATE_CONCURRENCY`] requests in flight,
/// each tried up to 5 times.
async fn create_all<K>(
    items: Vec<K>,
    api: impl Fn(&K) -> Api<K>,
    what: &str,
) -> Result<(), ApiBenchError>
where
    K: kube::Resource + Clone + serde::Serialize + serde::de::DeserializeOwned + std::fmt::Debug,
{
    let results: Vec<Result<(), ApiBenchError>> = futures::stream::iter(items)
        .map(|o| {
            let api = api(&o);
            async move {
                let mut tries = 0;
                loop {
                    match api.create(&PostParams::default(), &o).await {
                        Ok(_) => return Ok(()),
                        Err(kube::Error::Api(s)) if s.code == 409 => return Ok(()),
                        Err(e) if tries < 4 => {
                            tries += 1;
                            tracing::debug!(error = %e, "create failed; retrying");
                            tokio::time::sleep(Duration::from_millis(200 << tries)).await;
                        }
                        Err(e) => {
                            return Err(ApiBenchError::Api {
                                what: format!(
                                    "creating {what} {}",
                                    o.meta().name.as_deref().unwrap_or_default()
                                ),
                                source: e,
                            });
                        }
                    }
                }
            }
        })
        .buffer_unordered(CREATE_CONCURRENCY)
        .collect()
        .await;
    results.into_iter().collect()
}

/// Mutating request counts from `apiserver_request_total`, by
/// `(verb, resource/subresource, code)`.
type WriteCounts = BTreeMap<(String, String, String), f64>;

const MUTATING: [&str; 8] = [
    "POST",
    "PUT",
    "PATCH",
    "DELETE",
    "DELETECOLLECTION",
    "APPLY",
    "CREATE",
    "UPDATE",
];

/// The labels of a Prometheus sample line `name{a="b",c="d"} v`.
fn parse_sample(line: &str) -> Option<(BTreeMap<String, String>, f64)> {
    let open = line.find('{')?;
    let close = line.rfind('}')?;
    let value: f64 = line[close + 1..].split_whitespace().next()?.parse().ok()?;
    let mut labels = BTreeMap::new();
    let mut rest = &line[open + 1..close];
    while let Some(eq) = rest.find("=\"") {
        let key = rest[..eq].trim_start_matches(',').trim().to_owned();
        let mut val = String::new();
        let mut chars = rest[eq + 2..].char_indices();
        let mut end = rest.len();
        while let Some((i, c)) = chars.next() {
            match c {
                '\\' => {
                    if let Some((_, n)) = chars.next() {
                        val.push(n);
                    }
                }
                '"' => {
                    end = eq + 2 + i + 1;
                    break;
                }
                c => val.push(c),
            }
        }
        labels.insert(key, val);
        rest = &rest[end.min(rest.len())..];
    }
    Some((labels, value))
}

/// The mutating requests in `apiserver_request_total` of a `/metrics` text.
#[must_use]
fn write_counts(text: &str) -> WriteCounts {
    let mut out = WriteCounts::new();
    for line in text.lines() {
        if !line.starts_with("apiserver_request_total{") {
            continue;
        }
        let Some((l, v)) = parse_sample(line) else {
            continue;
        };
        let verb = l
            .get("verb")
            .map(|v| v.to_ascii_uppercase())
            .unwrap_or_default();
        if !MUTATING.contains(&verb.as_str()) {
            continue;
        }
        let mut res = l.get("resource").cloned().unwrap_or_default();
        if let Some(sub) = l.get("subresource").filter(|s| !s.is_empty()) {
            res = format!("{res}/{sub}");
        }
        let code = l.get("code").cloned().unwrap_or_default();
        *out.entry((verb, res, code)).or_default() += v;
    }
    out
}

async fn server_writes(client: &Client) -> Result<WriteCounts, ApiBenchError> {
    let req = http::Request::get("/metrics")
        .body(Vec::new())
        .map_err(|e| ApiBenchError::Upstream(format!("building the /metrics request: {e}")))?;
    let text = client
        .request_text(req)
        .await
        .map_err(api_err("reading the API server's /metrics"))?;
    Ok(write_counts(&text))
}

fn diff(after: &WriteCounts, before: &WriteCounts) -> WriteCounts {
    after
        .iter()
        .filter_map(|(k, v)| {
            let d = v - before.get(k).copied().unwrap_or(0.0);
            (d > 0.0).then(|| (k.clone(), d))
        })
        .collect()
}

fn total(c: &WriteCounts) -> f64 {
    c.values().sum()
}

/// Reads the write counters until they stay the same for 1 s (at most
/// 10 s).
async fn settled_writes(client: &Client) -> Result<WriteCounts, ApiBenchError> {
    let deadline = Instant::now() + Duration::from_secs(10);
    let mut last = server_writes(client).await?;
    let mut stable = 0;
    while stable < 2 && Instant::now() < deadline {
        tokio::time::sleep(Duration::from_millis(500)).await;
        let now = server_writes(client).await?;
        if (total(&now) - total(&last)).abs() < 0.5 {
            stable += 1;
        } else {
            stable = 0;
        }
        last = now;
    }
    Ok(last)
}

/// Binds seen on the watch.
struct Binds {
    at: Vec<Instant>,
}

/// Watches the run's pods; `ready` fires after the initial list; ends when
/// `total` pods are bound or `stop` fires.
async fn watch_binds(
    client: Client,
    id: String,
    total: usize,
    ready: tokio::sync::oneshot::Sender<()>,
    stop: CancellationToken,
) -> Binds {
    let api: Api<Pod> = Api::all(client);
    let cfg = watcher::Config::default().labels(&format!("{RUN_LABEL}={id}"));
    let mut stream = watcher::watcher(api, cfg).boxed();
    let mut ready = Some(ready);
    let mut seen: HashMap<String, Instant> = HashMap::new();
    loop {
        let ev = tokio::select! {
            () = stop.cancelled() => break,
            ev = stream.next() => ev,
        };
        let Some(ev) = ev else { break };
        match ev {
            Ok(WatcherEvent::InitDone) => {
                if let Some(r) = ready.take() {
                    let _ = r.send(());
                }
            }
            Ok(WatcherEvent::InitApply(p) | WatcherEvent::Apply(p)) => {
                if p.spec.as_ref().and_then(|s| s.node_name.as_ref()).is_some() {
                    let key = format!(
                        "{}/{}",
                        p.metadata.namespace.as_deref().unwrap_or_default(),
                        p.metadata.name.as_deref().unwrap_or_default()
                    );
                    seen.entry(key).or_insert_with(Instant::now);
                }
            }
            Ok(_) => {}
            Err(e) => {
                tracing::warn!(error = %e, "watching the bench pods");
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
        if seen.len() >= total && ready.is_none() {
            break;
        }
    }
    Binds {
        at: seen.into_values().collect(),
    }
}

/// A started scheduler.
enum Running {
    Flotilla {
        stop: CancellationToken,
        task: tokio::task::JoinHandle<Result<live::LiveReport, ApiBenchError>>,
    },
    Upstream {
        child: std::process::Child,
        metrics_port: u16,
        log: PathBuf,
    },
}

fn free_port() -> Result<u16, ApiBenchError> {
    std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .map(|a| a.port())
        .map_err(|e| ApiBenchError::Upstream(format!("no free port for its metrics: {e}")))
}

fn log_tail(path: &std::path::Path) -> String {
    let text = std::fs::read_to_string(path).unwrap_or_default();
    let lines: Vec<&str> = text.lines().collect();
    lines[lines.len().saturating_sub(10)..].join("\n")
}

fn start_upstream(
    up: &UpstreamScheduler,
    limit: RateLimit,
    id: &str,
) -> Result<Running, ApiBenchError> {
    let metrics_port = free_port()?;
    let log = std::env::temp_dir().join(format!("flotilla-bench-{id}-kube-scheduler.log"));
    let file = std::fs::File::create(&log)
        .map_err(|e| ApiBenchError::Upstream(format!("{}: {e}", log.display())))?;
    let err = file
        .try_clone()
        .map_err(|e| ApiBenchError::Upstream(format!("{}: {e}", log.display())))?;
    let args = upstream_args(&up.kubeconfig, limit, metrics_port);
    let child = std::process::Command::new(&up.binary)
        .args(&args)
        .stdin(std::process::Stdio::null())
        .stdout(file)
        .stderr(err)
        .spawn()
        .map_err(|e| ApiBenchError::Upstream(format!("starting {}: {e}", up.binary.display())))?;
    Ok(Running::Upstream {
        child,
        metrics_port,
        log,
    })
}

/// kube-scheduler's flags: the kube-lab README's (no leader election, the
/// insecure metrics port on loopback, no secure port) and the client rate.
#[must_use]
pub fn upstream_args(
    kubeconfig: &std::path::Path,
    limit: RateLimit,
    metrics_port: u16,
) -> Vec<String> {
    vec![
        format!("--kubeconfig={}", kubeconfig.display()),
        "--leader-elect=false".into(),
        "--address=127.0.0.1".into(),
        format!("--port={metrics_port}"),
        "--bind-address=127.0.0.1".into(),
        "--secure-port=0".into(),
        format!("--kube-api-qps={}", limit.qps),
        format!("--kube-api-burst={}", limit.burst),
    ]
}

/// `GET /metrics` over plain HTTP on loopback (kube-scheduler 1.20's
/// insecure port).
async fn scrape(port: u16) -> Option<String> {
    use tokio::io::{AsyncReadExt as _, AsyncWriteExt as _};
    let mut s = tokio::net::TcpStream::connect(("127.0.0.1", port))
        .await
        .ok()?;
    s.write_all(b"GET /metrics HTTP/1.0\r\nHost: 127.0.0.1\r\n\r\n")
        .await
        .ok()?;
    let mut buf = Vec::new();
    tokio::time::timeout(Duration::from_secs(5), s.read_to_end(&mut buf))
        .await
        .ok()?
        .ok()?;
    let text = String::from_utf8_lossy(&buf).into_owned();
    text.split_once("\r\n\r\n").map(|(_, b)| b.to_owned())
}

fn schedule_attempts(text: &str) -> BTreeMap<String, f64> {
    let mut out = BTreeMap::new();
    for line in text.lines() {
        if !line.starts_with("scheduler_schedule_attempts_total{") {
            continue;
        }
        if let Some((l, v)) = parse_sample(line) {
            *out.entry(l.get("result").cloned().unwrap_or_default())
                .or_default() += v;
        }
    }
    out
}

/// Reads back the run's pods: the checks.
async fn check(client: &Client, objs: &RunObjects) -> Result<ApiChecks, ApiBenchError> {
    let api: Api<Pod> = Api::all(client.clone());
    let lp = ListParams::default().labels(&format!("{RUN_LABEL}={}", objs.id));
    let pods = api
        .list(&lp)
        .await
        .map_err(api_err("listing the bench pods"))?;
    let mut used: HashMap<&str, [i64; 3]> = HashMap::new();
    let mut c = ApiChecks::default();
    for p in &pods.items {
        let Some(node) = p.spec.as_ref().and_then(|s| s.node_name.as_deref()) else {
            continue;
        };
        c.pods_bound += 1;
        if !objs.allocatable.contains_key(node) {
            c.pods_on_foreign_nodes += 1;
            continue;
        }
        let u = used.entry(node).or_default();
        for (a, b) in u.iter_mut().zip(requests(p)) {
            *a += b;
        }
    }
    c.overcommitted_nodes = used
        .iter()
        .filter(|(n, u)| {
            let a = objs.allocatable[**n];
            u.iter().zip(a).any(|(u, a)| *u > a)
        })
        .count();
    Ok(c)
}

/// Deletes the run's pods (grace 0), nodes and namespaces; waits up to
/// 60 s for the pods and nodes to be gone.
async fn cleanup(client: &Client, objs: &RunObjects) -> Cleanup {
    let sel = format!("{RUN_LABEL}={}", objs.id);
    let lp = ListParams::default().labels(&sel);
    let now = DeleteParams {
        grace_period_seconds: Some(0),
        ..DeleteParams::default()
    };
    for ns in &objs.namespaces {
        let api: Api<Pod> = Api::namespaced(client.clone(), ns);
        if let Err(e) = api.delete_collection(&now, &lp).await {
            tracing::warn!(namespace = %ns, error = %e, "deleting the bench pods");
        }
    }
    let nodes: Api<Node> = Api::all(client.clone());
    if let Err(e) = nodes.delete_collection(&DeleteParams::default(), &lp).await {
        tracing::warn!(error = %e, "deleting the bench nodes");
    }
    let namespaces: Api<Namespace> = Api::all(client.clone());
    for ns in &objs.namespaces {
        let _ = namespaces.delete(ns, &DeleteParams::default()).await;
    }
    let pods: Api<Pod> = Api::all(client.clone());
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = (
            pods.list_metadata(&lp).await.map(|l| l.items.len()),
            nodes.list_metadata(&lp).await.map(|l| l.items.len()),
        );
        if let (Ok(p), Ok(n)) = left
            && ((p == 0 && n == 0) || Instant::now() >= deadline)
        {
            return Cleanup {
                pods_left: p,
                nodes_left: n,
                namespaces: objs.namespaces.clone(),
            };
        }
        if Instant::now() >= deadline {
            return Cleanup {
                pods_left: usize::MAX,
                nodes_left: usize::MAX,
                namespaces: objs.namespaces.clone(),
            };
        }
        tokio::time::sleep(Duration::from_millis(300)).await;
    }
}

/// Which scheduler a run is for.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Which {
    Flotilla,
    Upstream,
}

fn say(cfg: &ApiBenchConfig, msg: &str) {
    if cfg.progress {
        eprintln!("bench: {msg}");
    }
}

#[allow(clippy::cast_precision_loss, clippy::too_many_lines)]
async fn run_one(
    scenario: &Scenario,
    cfg: &ApiBenchConfig,
    which: Which,
) -> Result<SchedulerRun, ApiBenchError> {
    let (label, tag, scheduler_name) = match which {
        Which::Flotilla => (
            "flotilla",
            "f",
            cfg.scheduler
                .profiles
                .first()
                .map_or(DEFAULT_SCHEDULER_NAME, |p| p.scheduler_name.as_str())
                .to_owned(),
        ),
        Which::Upstream => ("kube-scheduler", "u", DEFAULT_SCHEDULER_NAME.to_owned()),
    };
    let objs = objects(scenario, tag, &scheduler_name);
    let client = &cfg.client;
    let total_pods = objs.pods.len();
    say(
        cfg,
        &format!(
            "{label}: run {}, creating {} nodes, {} namespaces, {total_pods} pods",
            objs.id,
            objs.nodes.len(),
            objs.namespaces.len()
        ),
    );
    let result = async {
        let created = Instant::now();
        create_all(
            objs.namespaces
                .iter()
                .map(|n| Namespace {
                    metadata: kube::api::ObjectMeta {
                        name: Some(n.clone()),
                        ..Default::default()
                    },
                    ..Default::default()
                })
                .collect(),
            |_| Api::all(client.clone()),
            "namespace",
        )
        .await?;
        create_all(objs.nodes.clone(), |_| Api::all(client.clone()), "node").await?;
        create_all(
            objs.pods.clone(),
            |p: &Pod| {
                Api::namespaced(
                    client.clone(),
                    p.metadata.namespace.as_deref().unwrap_or("default"),
                )
            },
            "pod",
        )
        .await?;
        say(
            cfg,
            &format!(
                "{label}: created in {:.1} s; starting the scheduler",
                created.elapsed().as_secs_f64()
            ),
        );

        let stop_watch = CancellationToken::new();
        let (ready_tx, ready_rx) = tokio::sync::oneshot::channel();
        let watch = tokio::spawn(watch_binds(
            client.clone(),
            objs.id.clone(),
            total_pods,
            ready_tx,
            stop_watch.clone(),
        ));
        let _ = ready_rx.await;
        let before = server_writes(client).await?;

        let start = Instant::now();
        let mut running = match which {
            Which::Flotilla => {
                let stop = CancellationToken::new();
                // Events at the same rate as the other writes, as
                // kube-scheduler's event client (default 50 / 100).
                let mut events = EventLimits::default();
                if let Some(l) = cfg.limit {
                    events.qps = l.qps;
                    events.burst = l.burst;
                }
                let options = KubeOptions {
                    write_limit: cfg.limit,
                    events,
                    ..KubeOptions::default()
                };
                let c = client.clone();
                let url = cfg.url.clone();
                let (workers, scheduler) = (cfg.workers, cfg.scheduler.clone());
                let start_flotilla = cfg.flotilla.clone();
                let t = stop.clone();
                let task = tokio::spawn(async move {
                    let cluster = Arc::new(
                        KubeCluster::connect(c, &url, options)
                            .await
                            .map_err(|e| ApiBenchError::Connect(e.to_string()))?,
                    );
                    start_flotilla(FlotillaStart {
                        cluster,
                        workers,
                        scheduler,
                        stop: t,
                    })
                    .await
                    .map_err(ApiBenchError::Flotilla)
                });
                Running::Flotilla { stop, task }
            }
            Which::Upstream => {
                let up = cfg
                    .upstream
                    .as_ref()
                    .expect("an upstream run has its binary");
                start_upstream(up, cfg.limit.unwrap_or(DEFAULT_LIMIT), &objs.id)?
            }
        };

        // Wait for every pod bound, the timeout, or the scheduler dying.
        let deadline = start + cfg.timeout;
        let mut last_report = Instant::now();
        let mut watch = watch;
        let binds = loop {
            tokio::select! {
                b = &mut watch => break b.unwrap_or(Binds { at: Vec::new() }),
                () = tokio::time::sleep(Duration::from_millis(200)) => {}
            }
            if Instant::now() >= deadline {
                stop_watch.cancel();
            }
            if let Running::Upstream { child, log, .. } = &mut running
                && let Ok(Some(status)) = child.try_wait()
            {
                stop_watch.cancel();
                let _ = (&mut watch).await;
                return Err(ApiBenchError::Upstream(format!(
                    "exited early ({status}):\n{}",
                    log_tail(log)
                )));
            }
            if let Running::Flotilla { task, .. } = &running
                && task.is_finished()
            {
                stop_watch.cancel();
            }
            if cfg.progress && last_report.elapsed() >= Duration::from_secs(5) {
                last_report = Instant::now();
                say(
                    cfg,
                    &format!("{label}: {:.0} s", start.elapsed().as_secs_f64()),
                );
            }
        };
        let bound_at: Vec<Instant> = binds.at;
        let tp = measure::throughput(start, &bound_at);
        let first = bound_at.iter().min().copied();
        let last = bound_at.iter().max().copied();
        let after = settled_writes(client).await?;
        let writes = diff(&after, &before);

        // Stop the scheduler.
        let (latency_ms, own_writes, attempts, events) = match running {
            Running::Flotilla { stop, task } => {
                stop.cancel();
                let report = task
                    .await
                    .map_err(|e| ApiBenchError::Upstream(format!("Flotilla's task: {e}")))??;
                let l = &report.latency_ms;
                (
                    Some(LatencyMs {
                        p50: l.p50,
                        p90: l.p90,
                        p99: l.p99,
                        max: l.max,
                    }),
                    Some(report.api_writes),
                    None,
                    Some(report.events),
                )
            }
            Running::Upstream {
                mut child,
                metrics_port,
                ..
            } => {
                let attempts = scrape(metrics_port).await.map(|t| schedule_attempts(&t));
                let _ = child.kill();
                let _ = child.wait();
                (None, None, attempts, None)
            }
        };

        let mut checks = check(client, &objs).await?;
        for ((verb, res, code), v) in &writes {
            if verb == "POST" && res == "pods/binding" {
                #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
                let n = v.round() as u64;
                if code.starts_with('2') {
                    checks.bindings_created += n;
                } else {
                    checks.bindings_refused += n;
                }
            }
        }
        let mut by_kind = BTreeMap::new();
        for ((verb, res, _), v) in &writes {
            #[allow(clippy::cast_possible_truncation, clippy::cast_sign_loss)]
            let n = v.round() as u64;
            *by_kind.entry(format!("{verb} {res}")).or_default() += n;
        }
        let per_pod = |n: f64| {
            if total_pods > 0 {
                n / total_pods as f64
            } else {
                0.0
            }
        };
        let secs = |t: Option<Instant>| t.map_or(0.0, |t| t.duration_since(start).as_secs_f64());
        let after_first = match (first, last) {
            (Some(f), Some(l)) if l > f && bound_at.len() > 1 => {
                (bound_at.len() - 1) as f64 / l.duration_since(f).as_secs_f64()
            }
            _ => 0.0,
        };
        Ok(SchedulerRun {
            scheduler: label.to_owned(),
            scheduler_name: scheduler_name.clone(),
            run_id: objs.id.clone(),
            scheduled: bound_at.len(),
            pending: total_pods.saturating_sub(bound_at.len()),
            pods_per_second_avg: tp.average,
            pods_per_second_peak: tp.peak,
            pods_per_second_after_first_bind: after_first,
            seconds_to_first_bind: secs(first),
            seconds_to_all_bound: secs(last),
            throughput: tp,
            latency_ms,
            api_writes_per_pod: per_pod(total(&writes)),
            api_writes: by_kind,
            own_api_writes_per_pod: own_writes.map(|w| per_pod(w as f64)),
            events,
            schedule_attempts: attempts,
            checks,
            cleanup: Cleanup::default(),
            timed_out: bound_at.len() < total_pods,
        })
    }
    .await;
    say(cfg, &format!("{label}: cleaning up run {}", objs.id));
    let cleaned = cleanup(client, &objs).await;
    let mut run = result?;
    run.cleanup = cleaned;
    say(
        cfg,
        &format!(
            "{label}: {} pods bound in {:.2} s ({:.0} pods/s), {:.3} API writes per pod",
            run.scheduled,
            run.seconds_to_all_bound,
            run.pods_per_second_avg,
            run.api_writes_per_pod
        ),
    );
    Ok(run)
}

/// Runs `scenario` under Flotilla against the API server of `cfg.client`,
/// then (with [`ApiBenchConfig::upstream`]) under kube-scheduler.
///
/// # Errors
/// [`ApiBenchError`]: an unsupported scenario, a failed request, a
/// scheduler that would not start.
#[allow(clippy::cast_precision_loss)]
pub async fn run_api_bench(
    scenario: Scenario,
    cfg: &ApiBenchConfig,
) -> Result<ApiBenchReport, ApiBenchError> {
    let w = &scenario.workload;
    let name = scenario.name.as_str().to_owned();
    if !w.timeline.is_empty() {
        return Err(ApiBenchError::Unsupported(
            name,
            "it changes the cluster while it runs",
        ));
    }
    if !w.priority_classes.is_empty()
        || !w.pod_disruption_budgets.is_empty()
        || !w.pod_groups.is_empty()
        || !w.workload_pod_groups.is_empty()
        || !w.volumes.is_empty()
    {
        return Err(ApiBenchError::Unsupported(
            name,
            "it needs PriorityClasses, PodDisruptionBudgets, PodGroups or volume objects",
        ));
    }
    if cfg.upstream.is_some() && cfg.limit.is_none() {
        return Err(ApiBenchError::UpstreamNeedsLimit);
    }
    let started = Instant::now();
    let info = flotilla_coordinator::cluster::kube::ServerInfo::discover(&cfg.client, &cfg.url)
        .await
        .map_err(|e| ApiBenchError::Connect(e.to_string()))?;
    let flotilla = run_one(&scenario, cfg, Which::Flotilla).await?;
    let upstream = match &cfg.upstream {
        Some(_) => Some(run_one(&scenario, cfg, Which::Upstream).await?),
        None => None,
    };
    let speedup = upstream
        .as_ref()
        .filter(|u| u.pods_per_second_avg > 0.0)
        .map(|u| flotilla.pods_per_second_avg / u.pods_per_second_avg);
    Ok(ApiBenchReport {
        scenario: name,
        description: scenario.description.clone(),
        mode: "api-server".into(),
        server_version: info.version.clone(),
        workers: cfg.workers,
        nodes: w.nodes.len(),
        pods: w.pods.len(),
        qps: cfg.limit.map(|l| l.qps),
        burst: cfg.limit.map(|l| l.burst),
        flotilla,
        upstream,
        speedup,
        wall_seconds: started.elapsed().as_secs_f64(),
    })
}

impl ApiBenchReport {
    /// What failed, if a safety invariant does not hold in either run.
    #[must_use]
    pub fn violation(&self) -> Option<String> {
        let v: Vec<String> = std::iter::once(&self.flotilla)
            .chain(self.upstream.as_ref())
            .filter_map(SchedulerRun::violation)
            .collect();
        (!v.is_empty()).then(|| v.join("; "))
    }

    /// Whether either run timed out.
    #[must_use]
    pub fn timed_out(&self) -> bool {
        self.flotilla.timed_out || self.upstream.as_ref().is_some_and(|u| u.timed_out)
    }

    /// The human-readable form: one column per scheduler.
    #[must_use]
    pub fn to_text(&self) -> String {
        let mut s = String::new();
        let limit = match (self.qps, self.burst) {
            (Some(q), Some(b)) => format!("client QPS {q} / burst {b}"),
            _ => "no client rate limit".to_owned(),
        };
        let _ = writeln!(
            s,
            "Flotilla bench against kube-apiserver {}: {}, {limit}",
            self.server_version, self.scenario
        );
        let _ = writeln!(s, "  scenario       {}", self.description);
        let runs: Vec<&SchedulerRun> = std::iter::once(&self.flotilla)
            .chain(self.upstream.as_ref())
            .collect();
        let row = |s: &mut String, name: &str, f: &dyn Fn(&SchedulerRun) -> String| {
            let _ = write!(s, "  {name:<26}");
            for r in &runs {
                let _ = write!(s, "{:>22}", f(r));
            }
            let _ = writeln!(s);
        };
        row(&mut s, "", &|r| {
            if r.scheduler == "flotilla" {
                format!("flotilla ({}w)", self.workers)
            } else {
                r.scheduler.clone()
            }
        });
        row(&mut s, "pods bound", &|r| {
            format!("{} of {}", r.scheduled, self.pods)
        });
        row(&mut s, "pods/s (start to all)", &|r| {
            format!("{:.0}", r.pods_per_second_avg)
        });
        row(&mut s, "pods/s (first bind on)", &|r| {
            format!("{:.0}", r.pods_per_second_after_first_bind)
        });
        row(&mut s, "pods/s peak window", &|r| {
            format!(
                "{:.0} ({:.2} s)",
                r.pods_per_second_peak, r.throughput.window_seconds
            )
        });
        row(&mut s, "first bind / all bound", &|r| {
            format!(
                "{:.2} s / {:.2} s",
                r.seconds_to_first_bind, r.seconds_to_all_bound
            )
        });
        row(&mut s, "API writes per pod", &|r| {
            format!("{:.3}", r.api_writes_per_pod)
        });
        let kinds: BTreeSet<&String> = runs.iter().flat_map(|r| r.api_writes.keys()).collect();
        for k in kinds {
            row(&mut s, &format!("  {k}"), &|r| {
                r.api_writes.get(k).copied().unwrap_or(0).to_string()
            });
        }
        row(&mut s, "over-committed nodes", &|r| {
            r.checks.overcommitted_nodes.to_string()
        });
        row(&mut s, "Bindings ok / refused", &|r| {
            format!(
                "{} / {}",
                r.checks.bindings_created, r.checks.bindings_refused
            )
        });
        row(&mut s, "left after cleanup", &|r| {
            format!(
                "{} pods, {} nodes",
                r.cleanup.pods_left, r.cleanup.nodes_left
            )
        });
        if let Some(l) = &self.flotilla.latency_ms {
            let _ = writeln!(
                s,
                "  flotilla latency           p50 {:.1} ms, p99 {:.1} ms, max {:.1} ms (first seen to Binding)",
                l.p50, l.p99, l.max
            );
        }
        if let Some(e) = &self.flotilla.events {
            let _ = writeln!(
                s,
                "  flotilla events            {} recorded, {} written, {} deduplicated, {} dropped, \
                 {} failed, {} unwritten at exit",
                e.recorded, e.written, e.deduplicated, e.dropped, e.failed, e.unwritten
            );
        }
        if let Some(x) = self.speedup {
            let _ = writeln!(s, "  flotilla / kube-scheduler  {x:.2}x pods/s");
        }
        if self.timed_out() {
            let _ = writeln!(
                s,
                "  TIMED OUT                  unbound pods are counted pending"
            );
        }
        s
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_mutating_requests() {
        let text = r#"# HELP apiserver_request_total x
apiserver_request_total{code="201",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 7
apiserver_request_total{code="409",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="resource",subresource="binding",verb="POST",version="v1"} 1
apiserver_request_total{code="200",component="apiserver",contentType="application/json",dry_run="",group="",resource="pods",scope="cluster",subresource="",verb="LIST",version="v1"} 50
apiserver_request_total{code="201",component="apiserver",contentType="application/vnd.kubernetes.protobuf",dry_run="",group="events.k8s.io",resource="events",scope="resource",subresource="",verb="POST",version="v1"} 3
"#;
        let c = write_counts(text);
        assert_eq!(c.len(), 3);
        assert!((total(&c) - 11.0).abs() < 1e-9);
        let key = (
            "POST".to_owned(),
            "pods/binding".to_owned(),
            "201".to_owned(),
        );
        assert!((c[&key] - 7.0).abs() < 1e-9);
    }

    #[test]
    fn reads_schedule_attempts() {
        let text = "scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"scheduled\"} 100\n\
                    scheduler_schedule_attempts_total{profile=\"default-scheduler\",result=\"error\"} 0\n";
        let a = schedule_attempts(text);
        assert!((a["scheduled"] - 100.0).abs() < 1e-9);
    }

    #[test]
    fn upstream_gets_the_same_rate() {
        let a = upstream_args(
            std::path::Path::new("k"),
            RateLimit {
                qps: 50.0,
                burst: 100,
            },
            1,
        );
        assert!(a.contains(&"--kube-api-qps=50".to_owned()), "{a:?}");
        assert!(a.contains(&"--kube-api-burst=100".to_owned()), "{a:?}");
        assert!(a.contains(&"--leader-elect=false".to_owned()));
    }
}
