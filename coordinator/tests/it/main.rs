//! Integration tests of the coordinator over its real gRPC service: a tonic
//! server on 127.0.0.1:0 in front of an `EmbeddedCluster`, with the generated
//! client as fake workers, and real scheduler workers for end-to-end runs.

mod arbitration;
mod bind_failures;
mod bind_stream;
mod cross_node;
mod dispatch;
mod extender_bind;
mod failover;
mod gang;
mod gpu;
mod liveness;
mod node_checks;
mod preemption;
mod priority_classes;
mod real_workers;
mod relist;
mod sessions;
mod shutdown;
mod sync_gate;
mod tls;
mod volumes;
mod workload_gang;

use std::future::Future;
use std::net::SocketAddr;
use std::sync::Arc;
use std::time::Duration;

use k8s_openapi::api::core::v1::{Pod, PodCondition};
use tokio_util::sync::CancellationToken;
use tonic::transport::Channel;

use flotilla_coordinator::Coordinator;
use flotilla_coordinator::cluster::{Cluster, EmbeddedCluster};
use flotilla_coordinator::server;
use flotilla_proto::v1 as pb;
use flotilla_proto::v1::coordinator_client::CoordinatorClient;
use flotilla_proto::v1::watch_event::Event;
use flotilla_scheduler::Registry;
use flotilla_scheduler::config::{self, SchedulerConfig};
use flotilla_shared::framework::ServedProfile;

/// How long any single wait may take before the test calls it a hang.
pub const STEP: Duration = Duration::from_secs(10);
/// How long a whole end-to-end outcome may take.
pub const OUTCOME: Duration = Duration::from_secs(30);

/// Awaits `f`, failing the test if it takes longer than `limit`.
pub async fn within<T>(limit: Duration, what: &str, f: impl Future<Output = T>) -> T {
    tokio::time::timeout(limit, f)
        .await
        .unwrap_or_else(|_| panic!("{what}: timed out after {limit:?}, likely deadlocked"))
}

/// Polls `cond` every 20 ms until it holds, failing after `limit`.
pub async fn wait_until(limit: Duration, what: &str, mut cond: impl FnMut() -> bool) {
    within(limit, what, async {
        while !cond() {
            tokio::time::sleep(Duration::from_millis(20)).await;
        }
    })
    .await;
}

/// The default configuration's profile as the coordinator serves it: the
/// scheduler's default Filter plugins and their bind checks.
pub fn default_profiles() -> Vec<ServedProfile> {
    SchedulerConfig::default()
        .served_profiles(&Registry::in_tree())
        .expect("the default profile builds")
}

/// The profiles of the `KubeSchedulerConfiguration` `profiles` (YAML, the
/// list under `profiles:`) as the coordinator serves them.
pub fn profiles_of(profiles: &str) -> Vec<ServedProfile> {
    let yaml = format!(
        "apiVersion: kubescheduler.config.k8s.io/v1\nkind: KubeSchedulerConfiguration\nprofiles:\n{profiles}"
    );
    config::parse(&yaml, "test.yaml")
        .expect("the test configuration loads")
        .served_profiles(&Registry::in_tree())
        .expect("its profiles build")
}

/// A coordinator serving gRPC on an ephemeral loopback port.
pub struct Harness {
    /// The cluster.
    pub cluster: Arc<EmbeddedCluster>,
    /// The coordinator.
    pub coordinator: Arc<Coordinator>,
    /// Where it listens.
    pub addr: SocketAddr,
    /// Cancels the server (and the real workers of a test).
    pub token: CancellationToken,
    handle: Option<tokio::task::JoinHandle<Result<(), server::ServeError>>>,
}

impl Harness {
    /// Starts a coordinator over `cluster`, serving the default profile,
    /// and waits until it listed it.
    pub async fn start(cluster: EmbeddedCluster) -> Self {
        Self::serving(cluster, default_profiles()).await
    }

    /// Starts a coordinator over `cluster` serving `profiles`, and waits
    /// until it listed it.
    pub async fn serving(cluster: EmbeddedCluster, profiles: Vec<ServedProfile>) -> Self {
        let cluster = Arc::new(cluster);
        Self::start_serving(cluster.clone(), cluster, profiles).await
    }

    /// Starts a coordinator over `backend`, a wrapper of `cluster`, serving
    /// the default profile.
    pub async fn start_with(backend: Arc<dyn Cluster>, cluster: Arc<EmbeddedCluster>) -> Self {
        Self::start_serving(backend, cluster, default_profiles()).await
    }

    /// Starts a coordinator over `backend`, a wrapper of `cluster`, serving
    /// `profiles`.
    pub async fn start_serving(
        backend: Arc<dyn Cluster>,
        cluster: Arc<EmbeddedCluster>,
        profiles: Vec<ServedProfile>,
    ) -> Self {
        Self::start_options(backend, cluster, profiles, server::ServeOptions::default()).await
    }

    /// [`Harness::start_serving`] with the server's `options`.
    pub async fn start_options(
        backend: Arc<dyn Cluster>,
        cluster: Arc<EmbeddedCluster>,
        profiles: Vec<ServedProfile>,
        options: server::ServeOptions,
    ) -> Self {
        let coordinator = Arc::new(Coordinator::with_profiles(backend, profiles));
        let token = CancellationToken::new();
        let running = within(
            STEP,
            "starting the coordinator",
            server::start_with(coordinator.clone(), "127.0.0.1:0", token.clone(), options),
        )
        .await
        .expect("the coordinator starts on 127.0.0.1:0");
        within(STEP, "the coordinator's first list", running.synced)
            .await
            .expect("the coordinator syncs");
        Harness {
            cluster,
            coordinator,
            addr: running.addr,
            token,
            handle: Some(running.handle),
        }
    }

    /// `http://<addr>`.
    pub fn url(&self) -> String {
        format!("http://{}", self.addr)
    }

    /// A new client on its own connection.
    pub async fn client(&self) -> CoordinatorClient<Channel> {
        within(
            STEP,
            "connecting to the coordinator",
            CoordinatorClient::connect(self.url()),
        )
        .await
        .expect("the coordinator accepts connections")
    }

    /// Waits until the coordinator knows the pod with `uid`.
    pub async fn wait_for_record(&self, uid: &str) {
        let c = self.coordinator.clone();
        wait_until(STEP, &format!("coordinator learning pod {uid}"), || {
            c.records().iter().any(|r| &*r.info.uid == uid)
        })
        .await;
    }

    /// Stops the server and waits for it (open Watch streams must end:
    /// `shutdown::shutting_down_the_coordinator_ends_every_worker_stream`).
    pub async fn shutdown(mut self) {
        self.token.cancel();
        if let Some(h) = self.handle.take() {
            within(STEP, "coordinator shutdown", h)
                .await
                .expect("server task does not panic")
                .expect("server stops cleanly");
        }
    }
}

impl Drop for Harness {
    fn drop(&mut self) {
        self.token.cancel();
    }
}

/// A worker driven by hand through the generated client.
pub struct FakeWorker {
    /// Its own connection.
    pub client: CoordinatorClient<Channel>,
    /// The id Register returned.
    pub id: String,
    /// The Watch stream, once open.
    pub stream: Option<tonic::Streaming<pb::WatchEvent>>,
}

impl FakeWorker {
    /// Registers a worker of `class` (no stream yet).
    pub async fn register(h: &Harness, name: &str, class: pb::WorkloadClass) -> Self {
        let mut client = h.client().await;
        let resp = within(
            STEP,
            "Register",
            client.register(pb::RegisterRequest {
                worker_name: name.into(),
                workload_class: class.into(),
                profiles_fingerprint: 0,
            }),
        )
        .await
        .expect("Register succeeds")
        .into_inner();
        FakeWorker {
            client,
            id: resp.worker_id,
            stream: None,
        }
    }

    /// Registers and opens the Watch stream.
    pub async fn join(h: &Harness, name: &str, class: pb::WorkloadClass) -> Self {
        let mut w = Self::register(h, name, class).await;
        w.watch().await;
        w
    }

    /// Opens the Watch stream.
    pub async fn watch(&mut self) {
        let req = pb::WatchRequest {
            worker_id: self.id.clone(),
        };
        let stream = within(STEP, "Watch", self.client.watch(req))
            .await
            .expect("Watch succeeds")
            .into_inner();
        self.stream = Some(stream);
    }

    /// The next event on the stream.
    pub async fn next_event(&mut self) -> Event {
        let stream = self.stream.as_mut().expect("watching");
        let msg = within(STEP, "next watch event", stream.message())
            .await
            .expect("the stream does not fail")
            .expect("the stream does not end");
        msg.event.expect("every watch event carries an event")
    }

    /// Every event up to and excluding `synced`.
    pub async fn until_synced(&mut self) -> Vec<Event> {
        let mut out = Vec::new();
        loop {
            match self.next_event().await {
                Event::Synced(_) => return out,
                e => out.push(e),
            }
        }
    }

    /// Reads events until `done(events so far)` holds; returns them all.
    pub async fn read_until(&mut self, mut done: impl FnMut(&[Event]) -> bool) -> Vec<Event> {
        let mut out = Vec::new();
        while !done(&out) {
            out.push(self.next_event().await);
        }
        out
    }

    /// Closes the stream (the coordinator sees the worker leave).
    pub fn leave(&mut self) {
        self.stream = None;
    }

    /// ProposeBind for `default/<pod>` (uid `uid-<pod>`) on `node`.
    pub async fn propose(&self, pod: &str, node: &str) -> pb::BindDecision {
        self.propose_with_alternatives(pod, node, &[]).await
    }

    /// `ReportUnschedulable` of `pod` with the FitError `message` and
    /// per-node `node_statuses`.
    pub async fn report_unschedulable(
        &self,
        pod: &str,
        message: &str,
        node_statuses: Vec<pb::NodeStatus>,
    ) {
        let mut client = self.client.clone();
        within(
            STEP,
            "ReportUnschedulable",
            client.report_unschedulable(pb::UnschedulableReport {
                worker_id: self.id.clone(),
                pod: Some(pod_ref(pod)),
                message: message.into(),
                node_statuses,
                ..Default::default()
            }),
        )
        .await
        .expect("ReportUnschedulable answers");
    }

    /// `ProposeBind` of `pod` to `node`, offering `alternatives`.
    pub async fn propose_with_alternatives(
        &self,
        pod: &str,
        node: &str,
        alternatives: &[&str],
    ) -> pb::BindDecision {
        let mut client = self.client.clone();
        within(
            STEP,
            "ProposeBind",
            client.propose_bind(pb::BindProposal {
                worker_id: self.id.clone(),
                pod: Some(pod_ref(pod)),
                node_name: node.into(),
                alternatives: alternatives.iter().map(ToString::to_string).collect(),
                gpu_devices: 0,
            }),
        )
        .await
        .expect("ProposeBind answers")
        .into_inner()
    }

    /// `ProposeBind` of `pod` on `node` holding the GPU devices `gpus`
    /// (bit i = device i).
    pub async fn propose_gpus(&self, pod: &str, node: &str, gpus: u64) -> pb::BindDecision {
        let mut client = self.client.clone();
        within(
            STEP,
            "ProposeBind",
            client.propose_bind(pb::BindProposal {
                worker_id: self.id.clone(),
                pod: Some(pod_ref(pod)),
                node_name: node.into(),
                alternatives: Vec::new(),
                gpu_devices: gpus,
            }),
        )
        .await
        .expect("ProposeBind answers")
        .into_inner()
    }
}

/// The ref of a `PodBuilder` pod: `default/<name>`, uid `uid-<name>`.
pub fn pod_ref(name: &str) -> pb::PodRef {
    pb::PodRef {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

/// The coordinator's in-process [`PodRef`] of `default/<name>` (uid
/// `uid-<name>`).
pub fn pod_ref_of(name: &str) -> flotilla_coordinator::cluster::PodRef {
    flotilla_coordinator::cluster::PodRef {
        namespace: "default".into(),
        name: name.into(),
        uid: format!("uid-{name}"),
    }
}

/// Decodes a RawObject holding a Pod.
pub fn decode_pod(raw: &pb::RawObject) -> Pod {
    serde_json::from_slice(&raw.json).expect("RawObject holds a Pod")
}

/// `metadata.name` of a RawObject (Pod or Node).
pub fn raw_name(raw: &pb::RawObject) -> String {
    let v: serde_json::Value = serde_json::from_slice(&raw.json).expect("RawObject is JSON");
    v["metadata"]["name"]
        .as_str()
        .expect("object has a name")
        .to_owned()
}

/// Names of the pods assigned in `events`.
pub fn assigned_names(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .filter_map(|e| match e {
            Event::AssignedPod(raw) => Some(raw_name(raw)),
            _ => None,
        })
        .collect()
}

/// Its `spec.nodeName`, if bound.
pub fn node_of(p: &Pod) -> Option<&str> {
    p.spec.as_ref().and_then(|s| s.node_name.as_deref())
}

/// Its `PodScheduled` condition.
pub fn pod_scheduled(p: &Pod) -> Option<&PodCondition> {
    p.status
        .as_ref()
        .and_then(|s| s.conditions.as_ref())
        .and_then(|c| c.iter().find(|c| c.type_ == "PodScheduled"))
}

/// The `PodScheduled=False` / `Unschedulable` message, if set.
pub fn unschedulable_message(p: &Pod) -> Option<&str> {
    pod_scheduled(p)
        .filter(|c| c.status == "False" && c.reason.as_deref() == Some("Unschedulable"))
        .and_then(|c| c.message.as_deref())
}
